"""A hand-written CUDA GEMM of examples/gemm.py's design, for bench/run.py (part 8e,
``gemm_hand``).

The question it answers: is examples/gemm.py (lowered by us) slower than the same design
written by hand, or is the design itself the limit? The kernel below is that design in
plain CUDA with inline PTX, the same choices as the example's 128x256x64, 3-stage
configuration: CTA tiles of 128 x 256, K tiles of 64, 8 warps of 64 x 64 (2 x 4), a
3-stage ``cp.async.cg`` ring of 16-byte copies (A: 4 a thread a K tile, B: 8) into shared
memory under the 128-byte XOR swizzle (16-byte unit ``c`` of row ``r`` at ``c ^ (r %
8)``; B cut into 64-column blocks; each thread's swizzled offsets computed once, before
the loop, as the example's lowering does), ``ldmatrix.x4`` fragments (B with ``.trans``)
double-buffered across the 4 K steps of a tile, 32 ``mma.sync.m16n8k16`` (float16 in,
float32 accumulators) a warp a K step. Two orders of the main loop:

- ``standard``: the multistage loop as CUTLASS's sm80 kernels run it: at the top of a K
  tile wait for it (``cp.async.wait_group 1``) and pass a CTA barrier, issue the copies of
  the tile ``stages - 1`` ahead, then its 4 steps of fragments and mma;
- ``example``: examples/gemm.py's order: the tile's last mma before the wait for the next
  tile, the barrier and the next copies, and the next tile's first fragments loaded
  right after them.

C is stored from the accumulators as float16 pairs (no shared-memory staging: the
example's epilogue through stmatrix costs it, not this kernel). Only shapes that are
multiples of the tile. Nothing of CuPy or torch is imported at module level.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench"))

import norms  # noqa: E402
import numpy as np  # noqa: E402

import gemm  # noqa: E402
from tirx_cuda_dispatch import runtime  # noqa: E402

BM, BN, BK, STAGES, THREADS = 128, 256, 64, 3, 256
SMEM_BYTES = STAGES * (BM * BK + BK * BN) * 2
ORDERS = ("standard", "example")
SHAPE = (4096, 4096, 4096)
CONFIG = "128x256x64 s3"  # examples/gemm.py's configuration of the same design


# The example's 8 warps of 64 x 64 (2 x 4) in CUDA, shared by part 8e's kernel and part 8f's
# TMA + mma.sync: the registers, each lane's swizzled ldmatrix offsets computed once,
# ``frag(stage, kk, buf)`` loading a K step's fragments and ``mmas(buf)`` its 32 mma; then C
# stored from ``acc`` as float16 pairs. They use ``sA``, ``sB``, ``lane``, ``wm``, ``wn``, ``C``,
# ``N`` and the ldsm/mma helpers of the kernel they are put in.
WARP_TILE = f"""  unsigned af[2][4][4], bf[2][8][2];
  float acc[4][8][4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int v = 0; v < 4; ++v) acc[i][j][v] = 0.0f;

  // Fragments: A rows wm 64 + 16 i + lane % 16, unit 2 kk + lane / 16 (the swizzle reads
  // row % 8 = lane % 8); B rows 16 kk + lane % 16, columns wn 64 + 16 j + 8 (lane / 16):
  // block wn, unit 2 j + lane / 16.
  unsigned a_ld[4], b_ld[4];
#pragma unroll
  for (int kk = 0; kk < 4; ++kk)
    a_ld[kk] = ((wm * 64 + (lane & 15)) << 7) + (((kk * 2 + (lane >> 4)) ^ (lane & 7)) << 4);
#pragma unroll
  for (int j = 0; j < 4; ++j)
    b_ld[j] = wn * {BK * 128} + ((lane & 15) << 7) + (((j * 2 + (lane >> 4)) ^ (lane & 7)) << 4);
  auto frag = [&](int s, int kk, int buf) {{
    const unsigned fa = sA + s * {BM * BK * 2} + a_ld[kk];
    const unsigned fb = sB + s * {BK * BN * 2} + kk * 2048;
#pragma unroll
    for (int i = 0; i < 4; ++i) ldsm_x4(af[buf][i], fa + i * 2048);
#pragma unroll
    for (int j = 0; j < 4; ++j) {{
      unsigned r4[4];
      ldsm_x4_t(r4, fb + b_ld[j]);
      bf[buf][2 * j][0] = r4[0]; bf[buf][2 * j][1] = r4[1];
      bf[buf][2 * j + 1][0] = r4[2]; bf[buf][2 * j + 1][1] = r4[3];
    }}
  }};
  auto mmas = [&](int buf) {{
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 8; ++j) mma(acc[i][j], af[buf][i], bf[buf][j]);
  }};"""
WARP_STORE = f"""  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 8; ++j) {{
      size_t row = (size_t)blockIdx.y * {BM} + wm * 64 + i * 16 + g;
      size_t col = (size_t)blockIdx.x * {BN} + wn * 64 + j * 8 + 2 * t;
      *(half2*)(C + row * N + col) = __floats2half2_rn(acc[i][j][0], acc[i][j][1]);
      *(half2*)(C + (row + 8) * N + col) = __floats2half2_rn(acc[i][j][2], acc[i][j][3]);
    }}"""


def hand_gemm_source(order: str) -> str:
    """``gemm_hand(A, B, C, M, N, K)``: C = A B, float16 row-major, M, N, K multiples of
    128, 256, 64; grid (N / 256, M / 128), 256 threads, :data:`SMEM_BYTES` of dynamic
    shared memory."""
    if order not in ORDERS:
        raise ValueError(f"order={order!r}: one of {ORDERS}")
    example = int(order == "example")
    return f"""
#include <cuda_fp16.h>
#define STAGES {STAGES}
#define EXAMPLE_ORDER {example}

__device__ __forceinline__ void cp_async16(unsigned dst, const void* src) {{
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(dst), "l"(src));
}}
__device__ __forceinline__ void commit() {{ asm volatile("cp.async.commit_group;"); }}
template <int N> __device__ __forceinline__ void wait_group() {{
  asm volatile("cp.async.wait_group %0;" :: "n"(N));
}}
__device__ __forceinline__ void ldsm_x4(unsigned* r, unsigned addr) {{
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {{%0,%1,%2,%3}}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}}
__device__ __forceinline__ void ldsm_x4_t(unsigned* r, unsigned addr) {{
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {{%0,%1,%2,%3}}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}}
__device__ __forceinline__ void mma(float* d, const unsigned* a, const unsigned* b) {{
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
               "{{%0,%1,%2,%3}}, {{%4,%5,%6,%7}}, {{%8,%9}}, {{%0,%1,%2,%3}};"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}}

extern "C" __global__ void __launch_bounds__({THREADS}, 1)
gemm_hand(const half* __restrict__ A, const half* __restrict__ B, half* __restrict__ C,
          int M, int N, int K) {{
  extern __shared__ __align__(1024) unsigned char smem[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = warp >> 2, wn = warp & 3;
  const unsigned sA = (unsigned)__cvta_generic_to_shared(smem);
  const unsigned sB = sA + STAGES * {BM * BK * 2};
  const half* gA = A + (size_t)blockIdx.y * {BM} * K;
  const half* gB = B + (size_t)blockIdx.x * {BN};
  const int KT = K / {BK};

  // Addresses as the example's lowering makes them: the swizzled lane part once, outside
  // the loop (the swizzle permutes 16-byte units within 8 rows of 128 bytes, so a
  // multiple of 8 rows, a stage or a K step adds after the xor).
  // Copies: A units tid + 256 i (row tid / 8 + 32 i, unit tid % 8); B units tid + 256 i
  // (row tid / 32 + 8 i, unit tid % 32: block (tid % 32) / 8 of 64 columns).
  const unsigned a_st = ((tid >> 3) << 7) + (((tid & 7) ^ ((tid >> 3) & 7)) << 4);
  const unsigned b_st = (((tid & 31) >> 3) * {BK * 128}) + ((tid >> 5) << 7)
                        + (((tid & 7) ^ ((tid >> 5) & 7)) << 4);
  const half* pa = gA + (size_t)(tid >> 3) * K + (tid & 7) * 8;
  const half* pb = gB + (size_t)(tid >> 5) * N + (tid & 31) * 8;
  auto load = [&](int kt, int stage) {{
    const unsigned da = sA + stage * {BM * BK * 2} + a_st;
    const unsigned db = sB + stage * {BK * BN * 2} + b_st;
    const half* qa = pa + kt * {BK};
    const half* qb = pb + (size_t)kt * {BK} * N;
#pragma unroll
    for (int i = 0; i < 4; ++i) cp_async16(da + i * 4096, qa + (size_t)i * 32 * K);
#pragma unroll
    for (int i = 0; i < 8; ++i) cp_async16(db + i * 1024, qb + (size_t)i * 8 * N);
  }};
{WARP_TILE}

#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {{
    if (s < KT) load(s, s);
    commit();
  }}
#if EXAMPLE_ORDER
  wait_group<STAGES - 2>();
  __syncthreads();
  frag(0, 0, 0);
  for (int kt = 0; kt < KT; ++kt) {{
    const int s = kt % STAGES;
#pragma unroll
    for (int kk = 0; kk < 3; ++kk) {{
      frag(s, kk + 1, (kk + 1) & 1);
      mmas(kk & 1);
    }}
    mmas(1);
    wait_group<STAGES - 3>();
    __syncthreads();
    if (kt + STAGES - 1 < KT) load(kt + STAGES - 1, (kt + STAGES - 1) % STAGES);
    commit();
    if (kt + 1 < KT) frag((kt + 1) % STAGES, 0, 0);
  }}
#else
  for (int kt = 0; kt < KT; ++kt) {{
    const int s = kt % STAGES;
    wait_group<STAGES - 2>();
    __syncthreads();
    if (kt + STAGES - 1 < KT) load(kt + STAGES - 1, (kt + STAGES - 1) % STAGES);
    commit();
    frag(s, 0, 0);
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {{
      if (kk < 3) frag(s, kk + 1, (kk + 1) & 1);
      mmas(kk & 1);
    }}
  }}
#endif
  wait_group<0>();
{WARP_STORE}
}}
"""


def _hand_launch(gpu, order: str, a, b, c):
    """The compiled kernel of ``order`` and a launch of it over torch tensors."""
    cp = gpu.cupy
    kernel = cp.RawKernel(hand_gemm_source(order), "gemm_hand", options=("-std=c++17",))
    kernel.max_dynamic_shared_size_bytes = SMEM_BYTES
    m, k = a.shape
    n = b.shape[1]
    ptrs = [cp.asarray(t) for t in (a, b, c)]  # torch -> CuPy over the same memory
    sizes = [np.int32(v) for v in (m, n, k)]

    def launch():
        kernel((n // BN, m // BM), (THREADS,), (*ptrs, *sizes), shared_mem=SMEM_BYTES)

    return launch, kernel.num_regs


def contest(gpu, args, ours: str, launches: dict, others: dict | None = None) -> dict:
    """examples/gemm.py (``CONFIG``, plain, strict) as ``ours`` and each hand-written kernel
    of ``launches`` (name -> ``make(a, b, c)`` returning its launch and registers), and
    ``others`` (name -> ``fn(a, b)`` returning C), over the same seeded float16 operands at
    :data:`SHAPE`; every result checked against the float64 product (C poisoned with NaN
    first), the right ones timed in one queue. Returns ``ms``, ``notes``, ``errors``,
    ``regs`` and the mma.sync ``limit`` (TFLOP/s)."""
    torch = gpu.torch
    m, n, k = SHAPE
    gen = torch.Generator(device="cuda").manual_seed(53)
    a = (2 * torch.rand(m, k, device="cuda", generator=gen) - 1).half()
    b = (2 * torch.rand(k, n, device="cuda", generator=gen) - 1).half()
    bias = (2 * torch.rand(n, device="cuda", generator=gen) - 1).half()
    ref = a.double() @ b.double()
    limit = gemm.mma_limit(gpu, args, "float16")["TFLOP/s"]
    fns, notes, errors, regs = {}, {}, {}, {}
    try:
        func = norms.example("gemm").gemm_kernel(
            m, n, k, epilogue="plain", **gemm.GEMM_CONFIGS[CONFIG]
        )
        exe = runtime.build(func, runtime.gpu_arch(), gemm.STRICT)
        fns[ours], c = gemm._gemm_run(torch, exe[runtime.entry_name(func)], a, b, bias)
        errors[ours] = gemm.rel_error(torch, c, ref)
    except Exception as exc:  # noqa: BLE001  # a contender that cannot be had is a row
        notes[ours] = gemm.first_line(exc)
    for name, make in launches.items():
        c = torch.full((m, n), float("nan"), dtype=torch.float16, device="cuda")
        try:
            launch, regs[name] = make(a, b, c)
            launch()
            torch.cuda.synchronize()
        except Exception as exc:  # noqa: BLE001
            notes[name] = gemm.first_line(exc)
            continue
        fns[name], errors[name] = launch, gemm.rel_error(torch, c, ref)
    for name, fn in (others or {}).items():
        fns[name] = lambda fn=fn: fn(a, b)
        errors[name] = gemm.rel_error(torch, fn(a, b), ref)
    for name, err in errors.items():
        if not err <= gemm.GEMM_TOL:  # NaN (an unwritten output) fails too
            notes[name] = f"wrong result: max err / max ref {err:.3g}"
            fns.pop(name, None)
    ms = norms.time_queued(torch, fns, batch=10, reps=args.reps) if fns else {}
    return {"ms": ms, "notes": notes, "errors": errors, "regs": regs, "limit": limit}


def contest_row(
    result: dict, name: str, key: str, baseline: float | None, first: str = "contender"
) -> dict:
    """A row of :func:`contest`'s ``result`` for ``name`` (under ``first``): time, rate,
    share of the limit, speed against ``baseline`` (ms) under ``key``, registers, error
    and note."""
    m, n, k = SHAPE
    row = {first: name}
    if name in result["ms"]:
        t = result["ms"][name]
        tflops = 2 * m * n * k / (t * 1e-3) / 1e12
        row |= {"us": t * 1e3, "TFLOP/s": tflops, "of mma.sync limit": tflops / result["limit"]}
        row[key] = baseline / t if baseline else ""
    row["regs"] = result["regs"].get(name, "")
    errors = result["errors"]
    row["max err / max ref"] = gemm.sci(errors[name]) if name in errors else ""
    row["note"] = gemm.cell(result["notes"].get(name, ""))
    return row


def part_gemm_hand(gpu, args) -> list[dict]:
    ours = f"ours {CONFIG} plain (examples/gemm.py)"
    names = [f"hand-written CUDA, {o} order" for o in ORDERS]
    launches = {
        name: lambda a, b, c, o=o: _hand_launch(gpu, o, a, b, c)
        for name, o in zip(names, ORDERS, strict=True)
    }
    result = contest(gpu, args, ours, launches)
    best_hand = min((t for name, t in result["ms"].items() if name in names), default=None)
    return [
        contest_row(result, name, "speed / best hand-written", best_hand) for name in [ours, *names]
    ]
