"""Which GEMM design reaches 0.85 of the mma.sync limit on this GPU, for bench/run.py (part
8f, ``gemm_designs``).

Part 8e showed that examples/gemm.py's design (a cp.async ring feeding ldmatrix and
mma.sync), written by hand, is no faster than our lowering of it. This part changes one
half of that design at a time, by hand in CUDA, with everything else held: CTA tiles of
128 x 256, K tiles of 64, float16 in and float32 accumulators, the same shared-memory
layouts (the 128-byte XOR swizzle, A as 128 rows of 64, B cut into 64-column blocks), C
stored from the accumulators as float16 pairs, 4096^3. The loads are either

- ``cp.async``: every thread issues 16-byte ``cp.async.cg`` copies, then
  ``cp.async.wait_group`` and a CTA barrier, as examples/gemm.py; or
- TMA: one thread issues ``cp.async.bulk.tensor.2d`` per box (A one box of 64 x 128, B
  four of 64 x 64) with the 128-byte swizzle of a tensor map, completing on an mbarrier's
  transaction count;

and the math either

- ``mma.sync``: 8 warps of 64 x 64, ldmatrix fragments (part 8e's kernel); or
- ``wgmma``: 2 warpgroups of 64 x 256, ``wgmma.mma_async.m64n256k16`` reading A and B
  from shared memory through matrix descriptors (A K-major, B N-major, both 128-byte
  swizzled), 4 a K tile.

The designs:

- ``cp.async + mma.sync``: part 8e's hand-written kernel in examples/gemm.py's order;
- ``cp.async + wgmma``: 3 stages, 256 threads; each K tile waits for its copies, passes a
  proxy fence (``fence.proxy.async``: wgmma reads shared memory through the async proxy)
  and a barrier, issues its 4 wgmma, then the copies of the tile 2 ahead, then waits for
  the wgmma;
- ``TMA + mma.sync``: 3 stages, 256 threads; part 8e's main loop, with thread 0 issuing a
  stage's boxes after the K tile's barrier and each warp waiting on the stage's mbarrier;
- ``TMA + wgmma, warp-specialized``: 4 stages, 384 threads; the third warpgroup's first
  thread issues the boxes, waiting on an "empty" mbarrier per stage; the two consumer
  warpgroups wait on the stage's "full" mbarrier, issue 4 wgmma, keep one K tile's wgmma
  in flight (``wgmma.wait_group 1``) and release the stage before it.

Only shapes that are multiples of the tile. Nothing of CuPy, torch or CUDA's driver is
imported at module level.
"""

from __future__ import annotations

import ctypes
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench"))

import gemm_hand  # noqa: E402
import numpy as np  # noqa: E402

from tirx_cuda_dispatch import toolchain  # noqa: E402

BM, BN, BK = 128, 256, 64
A_TILE, B_TILE = BM * BK * 2, BK * BN * 2  # bytes a stage
CONFIG = gemm_hand.CONFIG
DESIGNS = {  # name -> (stages, threads); "cp.async + mma.sync" is part 8e's kernel
    "cp.async + wgmma": (3, 256),
    "TMA + mma.sync": (3, 256),
    "TMA + wgmma, warp-specialized": (4, 384),
}

HELPERS = r"""
#include <cuda_fp16.h>
__device__ __forceinline__ void cp_async16(unsigned dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(dst), "l"(src));
}
__device__ __forceinline__ void mbar_init(unsigned bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(bar), "r"(count));
}
__device__ __forceinline__ void mbar_arrive(unsigned bar) {
  asm volatile("{ .reg .b64 st; mbarrier.arrive.shared::cta.b64 st, [%0]; }"
               :: "r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_expect(unsigned bar, unsigned bytes) {
  asm volatile("{ .reg .b64 st; mbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1; }"
               :: "r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity) {
  asm volatile("{ .reg .pred p; W: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;"
               " @!p bra W; }" :: "r"(bar), "r"(parity) : "memory");
}
__device__ __forceinline__ void tma2d(unsigned dst, const void* map, int c0, int c1,
                                      unsigned bar) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile"
               ".mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
               :: "r"(dst), "l"(map), "r"(c0), "r"(c1), "r"(bar) : "memory");
}
// wgmma matrix descriptor (PTX ISA, "Matrix Descriptor Format"): start address, leading
// and stride byte offsets, each >> 4 in 14 bits; bits 62-63 = 1: the 128-byte swizzle
__device__ __forceinline__ unsigned long long desc128(unsigned addr, unsigned lbo,
                                                      unsigned sbo) {
  return (unsigned long long)((addr & 0x3FFFF) >> 4)
       | (unsigned long long)((lbo & 0x3FFFF) >> 4) << 16
       | (unsigned long long)((sbo & 0x3FFFF) >> 4) << 32 | 1ull << 62;
}
__device__ __forceinline__ void ldsm_x4(unsigned* r, unsigned addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_t(unsigned* r, unsigned addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
__device__ __forceinline__ void mma(float* d, const unsigned* a, const unsigned* b) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
               "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
"""


def _wgmma_function() -> str:
    """``wgmma(acc, da, db)``: one ``m64n256k16`` accumulating into 128 float32 a thread,
    A K-major and B N-major (``imm-trans-b`` 1), both from shared memory."""
    regs = ",".join(f"%{i}" for i in range(BN // 2))
    outs = ", ".join(f'"+f"(d[{i}])' for i in range(BN // 2))
    return (
        "__device__ __forceinline__ void wgmma(float* d, unsigned long long da,"
        " unsigned long long db) {\n"
        f'  asm volatile("{{ .reg .pred p; setp.ne.b32 p, %{BN // 2 + 2}, 0;\\n"\n'
        f'               "wgmma.mma_async.sync.aligned.m64n{BN}k16.f32.f16.f16 '
        f'{{{regs}}}, %{BN // 2}, %{BN // 2 + 1}, p, 1, 1, 0, 1; }}"\n'
        f'               : {outs} : "l"(da), "l"(db), "n"(1));\n}}\n'
    )


def _prologue(stages: int, threads: int, barriers: str = "") -> str:
    return f"""
#define STAGES {stages}
extern "C" __global__ void __launch_bounds__({threads}, 1)
gemm_design(const void* a_src, const void* b_src, half* __restrict__ C, int M, int N, int K) {{
  extern __shared__ unsigned char smem_raw[];
  unsigned char* smem = (unsigned char*)(((size_t)smem_raw + 1023) & ~(size_t)1023);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const unsigned sA = (unsigned)__cvta_generic_to_shared(smem);
  const unsigned sB = sA + STAGES * {A_TILE};
  const unsigned bars = sB + STAGES * {B_TILE};
  const int KT = K / {BK};
  {barriers}
"""


def _cp_async_tile(threads: int) -> str:
    """``load(kt)``: every thread's cp.async copies of K tile ``kt`` into its stage."""
    return f"""
  const half* gA = (const half*)a_src + (size_t)blockIdx.y * {BM} * K;
  const half* gB = (const half*)b_src + (size_t)blockIdx.x * {BN};
  auto load = [&](int kt) {{
    const unsigned da = sA + (kt % STAGES) * {A_TILE}, db = sB + (kt % STAGES) * {B_TILE};
#pragma unroll
    for (int q = tid; q < {BM * BK // 8}; q += {threads}) {{
      int r = q >> 3, c = q & 7;
      cp_async16(da + r * 128 + ((c ^ (r & 7)) << 4), gA + (size_t)r * K + kt * {BK} + c * 8);
    }}
#pragma unroll
    for (int q = tid; q < {BK * BN // 8}; q += {threads}) {{
      int r = q >> 5, u = q & 31;
      cp_async16(db + (u >> 3) * {BK * 128} + r * 128 + (((u & 7) ^ (r & 7)) << 4),
                 gB + (size_t)(kt * {BK} + r) * N + u * 8);
    }}
  }};
"""


def _tma_tile(kt: str = "kt") -> str:
    """One thread's boxes of K tile ``kt`` into stage ``s``, completing on ``full``."""
    return f"""
      mbar_expect(full, {A_TILE + B_TILE});
      tma2d(sA + s * {A_TILE}, a_src, {kt} * {BK}, blockIdx.y * {BM}, full);
#pragma unroll
      for (int blk = 0; blk < {BN // 64}; ++blk)
        tma2d(sB + s * {B_TILE} + blk * {BK * 128}, b_src, blockIdx.x * {BN} + blk * 64,
              {kt} * {BK}, full);
"""


_WGMMA_TILE = f"""
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
    for (int kk = 0; kk < {BK // 16}; ++kk)  // A: 8-row groups 1024 B apart; B: 64-column blocks
      wgmma(acc, desc128(sA + s * {A_TILE} + wg * 64 * 128 + kk * 32, 16, 1024),
            desc128(sB + s * {B_TILE} + kk * 16 * 128, {BK * 128}, 1024));
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
"""

_WGMMA_STORE = f"""
  const int w = warp & 3, g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int j = 0; j < {BN // 8}; ++j)
#pragma unroll
    for (int h = 0; h < 2; ++h) {{
      size_t row = (size_t)blockIdx.y * {BM} + wg * 64 + w * 16 + h * 8 + g;
      size_t col = (size_t)blockIdx.x * {BN} + j * 8 + 2 * t;
      *(half2*)(C + row * N + col) = __floats2half2_rn(acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
    }}
}}
"""

_WGMMA_ACC = f"""
  float acc[{BN // 2}];
#pragma unroll
  for (int i = 0; i < {BN // 2}; ++i) acc[i] = 0.0f;
"""


def _cp_async_wgmma() -> str:
    stages, threads = DESIGNS["cp.async + wgmma"]
    ahead = stages - 1
    return (
        HELPERS
        + _wgmma_function()
        + _prologue(stages, threads)
        + _cp_async_tile(threads)
        + "  const int wg = warp >> 2;\n"
        + _WGMMA_ACC
        + f"""
  for (int kt = 0; kt < {ahead}; ++kt) {{
    if (kt < KT) load(kt);
    asm volatile("cp.async.commit_group;" ::: "memory");
  }}
  for (int kt = 0; kt < KT; ++kt) {{
    const int s = kt % STAGES;
    asm volatile("cp.async.wait_group {ahead - 1};" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();
    {_WGMMA_TILE}
    if (kt + {ahead} < KT) load(kt + {ahead});
    asm volatile("cp.async.commit_group;" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
  }}
"""
        + _WGMMA_STORE
    )


def _tma_wgmma_ws() -> str:
    stages, threads = DESIGNS["TMA + wgmma, warp-specialized"]
    init = """if (tid == 0) {
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(bars + 8 * s, 1);                 // full: the producer's expect_tx
      mbar_init(bars + 8 * (STAGES + s), 2);      // empty: one arrive a consumer warpgroup
    }
  }
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  __syncthreads();
  const int wg = warp >> 2;"""
    return (
        HELPERS
        + _wgmma_function()
        + _prologue(stages, threads, init)
        + f"""
  if (wg == 2) {{
    if (tid == 256) {{
      for (int kt = 0; kt < KT; ++kt) {{
        const int s = kt % STAGES;
        const unsigned full = bars + 8 * s;
        if (kt >= STAGES) mbar_wait(bars + 8 * (STAGES + s), ((kt / STAGES) - 1) & 1);
        {_tma_tile()}
      }}
    }}
    return;
  }}
"""
        + _WGMMA_ACC
        + f"""
  for (int kt = 0; kt < KT; ++kt) {{
    const int s = kt % STAGES;
    mbar_wait(bars + 8 * s, (kt / STAGES) & 1);
    {_WGMMA_TILE}
    asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");
    if (kt > 0 && (tid & 127) == 0) mbar_arrive(bars + 8 * (STAGES + (kt - 1) % STAGES));
  }}
  asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
"""
        + _WGMMA_STORE
    )


def _tma_mma_sync() -> str:
    stages, threads = DESIGNS["TMA + mma.sync"]
    init = f"""if (tid == 0)
    for (int s = 0; s < STAGES; ++s) mbar_init(bars + 8 * s, 1);
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  __syncthreads();
  if (tid == 0)
    for (int s = 0; s < STAGES && s < KT; ++s) {{
      const unsigned full = bars + 8 * s;
      {_tma_tile("s")}
    }}"""
    return (
        HELPERS
        + _prologue(stages, threads, init)
        + f"""
  const int wm = warp >> 2, wn = warp & 3;
{gemm_hand.WARP_TILE}
  mbar_wait(bars, 0);
  frag(0, 0, 0);
  for (int kt = 0; kt < KT; ++kt) {{
    const int s = kt % STAGES;
#pragma unroll
    for (int kk = 0; kk < 3; ++kk) {{
      frag(s, kk + 1, (kk + 1) & 1);
      mmas(kk & 1);
    }}
    __syncthreads();  // every warp's reads of stage s are done
    if (tid == 0 && kt + STAGES < KT) {{
      const int kt2 = kt + STAGES;
      const unsigned full = bars + 8 * s;
      {_tma_tile("kt2")}
    }}
    if (kt + 1 < KT) {{
      const int s1 = (kt + 1) % STAGES;
      mbar_wait(bars + 8 * s1, ((kt + 1) / STAGES) & 1);
      frag(s1, 0, 0);
    }}
    mmas(1);
  }}
{gemm_hand.WARP_STORE}
}}
"""
    )


def design_source(name: str) -> str:
    """``gemm_design(a, b, C, M, N, K)`` of design ``name`` (a key of :data:`DESIGNS`): C =
    A B, float16 row-major; ``a``/``b`` are the matrices (cp.async) or 128-byte tensor maps
    in global memory (TMA); grid (N / 256, M / 128), :func:`smem_bytes` of dynamic shared
    memory."""
    sources = {
        "cp.async + wgmma": _cp_async_wgmma,
        "TMA + mma.sync": _tma_mma_sync,
        "TMA + wgmma, warp-specialized": _tma_wgmma_ws,
    }
    if name not in sources:
        raise ValueError(f"design={name!r}: one of {list(sources)}")
    return sources[name]()


def smem_bytes(name: str) -> int:
    """A design's stages, its mbarriers and 1 KiB to align the 128-byte swizzle's atoms."""
    stages = DESIGNS[name][0]
    return stages * (A_TILE + B_TILE) + 16 * stages + 1024


def tensor_map(torch, t, box_cols: int, box_rows: int):
    """A 2-D tensor map of row-major float16 ``t`` with boxes of ``box_rows`` x
    ``box_cols`` and the 128-byte swizzle, as 128 bytes in device memory."""
    from cuda.bindings import driver as drv

    rows, cols = t.shape
    u32, u64 = drv.cuuint32_t, drv.cuuint64_t
    err, tmap = drv.cuTensorMapEncodeTiled(
        drv.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
        2,
        t.data_ptr(),
        [u64(cols), u64(rows)],
        [u64(cols * t.element_size())],
        [u32(box_cols), u32(box_rows)],
        [u32(1), u32(1)],
        drv.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        drv.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B,
        drv.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
        drv.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
    )
    if err != drv.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"cuTensorMapEncodeTiled: {err}")
    raw = np.frombuffer(ctypes.string_at(tmap.getPtr(), 128), dtype=np.uint8).copy()
    return torch.tensor(raw, device="cuda")


def _design_launch(gpu, name: str, a, b, c):
    """The compiled kernel of design ``name`` and a launch of it over torch tensors."""
    cp, torch = gpu.cupy, gpu.torch
    path = Path(tempfile.mkdtemp()) / "design.cubin"
    path.write_bytes(toolchain.nvrtc_compile(design_source(name), "sm_90a"))
    kernel = cp.RawModule(path=os.fspath(path)).get_function("gemm_design")
    smem = smem_bytes(name)
    kernel.max_dynamic_shared_size_bytes = smem
    m, k = a.shape
    n = b.shape[1]
    if name.startswith("TMA"):
        a, b = tensor_map(torch, a, BK, BM), tensor_map(torch, b, 64, BK)
    ptrs = [cp.asarray(t) for t in (a, b, c)]  # torch -> CuPy over the same memory
    sizes = [np.int32(v) for v in (m, n, k)]
    threads = DESIGNS[name][1]

    def launch():
        kernel((n // BN, m // BM), (threads,), (*ptrs, *sizes), shared_mem=smem)

    return launch, kernel.num_regs


def part_gemm_designs(gpu, args) -> list[dict]:
    ours = f"ours {CONFIG} plain (examples/gemm.py): cp.async + mma.sync"
    launches = {
        "hand-written: cp.async + mma.sync (part 8e, example order)": (
            lambda a, b, c: gemm_hand._hand_launch(gpu, "example", a, b, c)
        )
    }
    for design in DESIGNS:
        launches[f"hand-written: {design}"] = lambda a, b, c, d=design: _design_launch(
            gpu, d, a, b, c
        )
    others = {"torch.matmul (cuBLAS)": lambda a, b: gpu.torch.matmul(a, b)}
    result = gemm_hand.contest(gpu, args, ours, launches, others)
    baseline = result["ms"].get(ours)
    names = [ours, *launches, *others]
    return [gemm_hand.contest_row(result, n, "speed / ours", baseline, "design") for n in names]
