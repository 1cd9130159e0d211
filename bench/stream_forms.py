"""What could a streaming copy global -> shared -> global gain: hand-written forms, timed.

The programs of ``copy_stream.py`` (one contiguous tile per CTA; copy in, CTA barrier,
copy out) written by hand in CUDA (CuPy) in several forms, timed interleaved with our
build, TVM's built-in build and a device-to-device copy, every result checked bit for bit
first. The forms (16-byte vectors; a thread moves vectors ``r * threads + tid``):

- ``ldg_sts``: our emitted form (``ld.global.cg`` then ``st.shared``, ``ld.shared`` then
  ``st.global``), as a hand-written reference for the pipelines' builds;
- ``ldg_l2pf``: the same load with the ``L2::256B`` prefetch hint;
- ``cp_async``: ``cp.async.cg.shared.global`` (LDGSTS) and ``cp.async.wait_all`` before the
  barrier: the data never passes through registers;
- ``bulk_in``: one thread loads the whole tile with ``cp.async.bulk`` (TMA, completion on an
  mbarrier), every thread waits on it; the store as in ``ldg_sts``;
- ``bulk_in_out``: ``bulk_in``, then one thread stores the tile with ``cp.async.bulk``
  (shared -> global) and waits for its completion;
- ``ldg_weak`` / ``ldg_na``: the load as TVM's built-in writes it (``ld.global.v4``, weak),
  and with ``L1::no_allocate``;
- ``direct``: global -> global with the same grid and vectors, no shared memory;
- ``persistent``: ``ldg_sts`` in CTAs that stay resident and loop over the tiles (the grid
  of a device copy; a lowering of the program's calls cannot choose the grid).

    source .devkit/setup.sh && PYTHONPATH=src:$PYTHONPATH python3 bench/stream_forms.py
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import cupy  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from copy_stream import CONFIGS, TORCH_DTYPE, checked_launch, time_interleaved  # noqa: E402

from tirx_cuda_dispatch import demos, runtime  # noqa: E402

SOURCE = r"""
#define VEC (TILE_BYTES / 16)
#define ROUNDS (VEC / THREADS)
typedef unsigned long long u64;

__device__ __forceinline__ unsigned smem_addr(const void* p) {
  return (unsigned)__cvta_generic_to_shared(p);
}

extern "C" __global__ void __launch_bounds__(THREADS) ldg_sts(const uint4* __restrict__ a,
                                                              uint4* __restrict__ b) {
  __shared__ alignas(128) uint4 s[VEC];
  const u64 base = (u64)blockIdx.x * VEC;
#pragma unroll
  for (int r = 0; r < ROUNDS; ++r) s[r * THREADS + threadIdx.x] = __ldcg(a + base + r * THREADS + threadIdx.x);
  __syncthreads();
#pragma unroll
  for (int r = 0; r < ROUNDS; ++r) b[base + r * THREADS + threadIdx.x] = s[r * THREADS + threadIdx.x];
}

extern "C" __global__ void __launch_bounds__(THREADS) ldg_l2pf(const uint4* __restrict__ a,
                                                               uint4* __restrict__ b) {
  __shared__ alignas(128) uint4 s[VEC];
  const u64 base = (u64)blockIdx.x * VEC;
  uint4 v[ROUNDS];
#pragma unroll
  for (int r = 0; r < ROUNDS; ++r)
    asm volatile("ld.global.cg.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v[r].x), "=r"(v[r].y), "=r"(v[r].z), "=r"(v[r].w)
                 : "l"(a + base + r * THREADS + threadIdx.x));
#pragma unroll
  for (int r = 0; r < ROUNDS; ++r) s[r * THREADS + threadIdx.x] = v[r];
  __syncthreads();
#pragma unroll
  for (int r = 0; r < ROUNDS; ++r) b[base + r * THREADS + threadIdx.x] = s[r * THREADS + threadIdx.x];
}

#define LDG_FORM(NAME, PTX)                                                                  \
  extern "C" __global__ void __launch_bounds__(THREADS) NAME(const uint4* __restrict__ a,    \
                                                             uint4* __restrict__ b) {        \
    __shared__ alignas(128) uint4 s[VEC];                                                    \
    const u64 base = (u64)blockIdx.x * VEC;                                                  \
    uint4 v[ROUNDS];                                                                         \
    _Pragma("unroll") for (int r = 0; r < ROUNDS; ++r)                                       \
      asm volatile(PTX " {%0,%1,%2,%3}, [%4];"                                               \
                   : "=r"(v[r].x), "=r"(v[r].y), "=r"(v[r].z), "=r"(v[r].w)                  \
                   : "l"(a + base + r * THREADS + threadIdx.x) : "memory");                  \
    _Pragma("unroll") for (int r = 0; r < ROUNDS; ++r) s[r * THREADS + threadIdx.x] = v[r];  \
    __syncthreads();                                                                         \
    _Pragma("unroll") for (int r = 0; r < ROUNDS; ++r)                                       \
      b[base + r * THREADS + threadIdx.x] = s[r * THREADS + threadIdx.x];                    \
  }
LDG_FORM(ldg_weak, "ld.global.v4.u32")
LDG_FORM(ldg_na, "ld.global.L1::no_allocate.v4.u32")

// The same staging, but persistent CTAs (a few per SM) loop over the tiles: the grid
// shape of a device copy, which a lowering of the program's copies cannot choose.
extern "C" __global__ void __launch_bounds__(THREADS) persistent(const uint4* __restrict__ a,
                                                                 uint4* __restrict__ b,
                                                                 int tiles) {
  __shared__ alignas(128) uint4 s[VEC];
  for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
    const u64 base = (u64)t * VEC;
#pragma unroll
    for (int r = 0; r < ROUNDS; ++r) s[r * THREADS + threadIdx.x] = __ldcg(a + base + r * THREADS + threadIdx.x);
    __syncthreads();
#pragma unroll
    for (int r = 0; r < ROUNDS; ++r) b[base + r * THREADS + threadIdx.x] = s[r * THREADS + threadIdx.x];
    __syncthreads();
  }
}

extern "C" __global__ void __launch_bounds__(THREADS) cp_async(const uint4* __restrict__ a,
                                                               uint4* __restrict__ b) {
  __shared__ alignas(128) uint4 s[VEC];
  const u64 base = (u64)blockIdx.x * VEC;
#pragma unroll
  for (int r = 0; r < ROUNDS; ++r)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;"
                 :: "r"(smem_addr(s + r * THREADS + threadIdx.x)),
                    "l"(a + base + r * THREADS + threadIdx.x) : "memory");
  asm volatile("cp.async.wait_all;" ::: "memory");
  __syncthreads();
#pragma unroll
  for (int r = 0; r < ROUNDS; ++r) b[base + r * THREADS + threadIdx.x] = s[r * THREADS + threadIdx.x];
}

__device__ __forceinline__ void bulk_load(uint4* s, const uint4* src, u64* bar) {
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared.b64 [%0], 1;" :: "r"(smem_addr(bar)) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("mbarrier.arrive.expect_tx.shared.b64 _, [%0], %1;"
                 :: "r"(smem_addr(bar)), "r"(TILE_BYTES) : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 :: "r"(smem_addr(s)), "l"(src), "r"(TILE_BYTES), "r"(smem_addr(bar)) : "memory");
  }
  __syncthreads();  // the barrier's initialization is visible to every waiter
  asm volatile(
      "{\n .reg .pred p;\n WAIT:\n"
      " mbarrier.try_wait.parity.shared.b64 p, [%0], 0;\n"
      " @!p bra WAIT;\n}" :: "r"(smem_addr(bar)) : "memory");
}

extern "C" __global__ void __launch_bounds__(THREADS) bulk_in(const uint4* __restrict__ a,
                                                              uint4* __restrict__ b) {
  __shared__ alignas(128) uint4 s[VEC];
  __shared__ alignas(8) u64 bar;
  const u64 base = (u64)blockIdx.x * VEC;
  bulk_load(s, a + base, &bar);
  __syncthreads();
#pragma unroll
  for (int r = 0; r < ROUNDS; ++r) b[base + r * THREADS + threadIdx.x] = s[r * THREADS + threadIdx.x];
}

extern "C" __global__ void __launch_bounds__(THREADS) bulk_in_out(const uint4* __restrict__ a,
                                                                  uint4* __restrict__ b) {
  __shared__ alignas(128) uint4 s[VEC];
  __shared__ alignas(8) u64 bar;
  const u64 base = (u64)blockIdx.x * VEC;
  bulk_load(s, a + base, &bar);
  __syncthreads();
  if (threadIdx.x == 0) {
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;"
                 :: "l"(b + base), "r"(smem_addr(s)), "r"(TILE_BYTES) : "memory");
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
  }
}

extern "C" __global__ void __launch_bounds__(THREADS) direct(const uint4* __restrict__ a,
                                                             uint4* __restrict__ b) {
  const u64 base = (u64)blockIdx.x * VEC;
  uint4 v[ROUNDS];
#pragma unroll
  for (int r = 0; r < ROUNDS; ++r) v[r] = __ldcg(a + base + r * THREADS + threadIdx.x);
#pragma unroll
  for (int r = 0; r < ROUNDS; ++r) b[base + r * THREADS + threadIdx.x] = v[r];
}
"""
FORMS = ["ldg_sts", "ldg_weak", "ldg_na", "ldg_l2pf", "cp_async", "bulk_in", "bulk_in_out"]
FORMS += ["direct", "persistent"]


def hand_written(tile_bytes: int, threads: int) -> cupy.RawModule:
    options = ("-std=c++17", f"-DTILE_BYTES={tile_bytes}", f"-DTHREADS={threads}", "-arch=sm_90a")
    return cupy.RawModule(code=SOURCE, options=options, name_expressions=None)


def _launcher(kern, ctas: int, threads: int, a: torch.Tensor, out: torch.Tensor, form: str):
    args = (cupy.from_dlpack(a), cupy.from_dlpack(out))
    if form == "persistent":  # as many CTAs as fit on the GPU at once, looping over the tiles
        sms = cupy.cuda.runtime.getDeviceProperties(0)["multiProcessorCount"]
        per_sm = min(2048 // threads, 228 * 1024 // (kern.shared_size_bytes + 1024))
        grid = min(ctas, sms * per_sm)
        args = (*args, np.int32(ctas))
        return lambda: kern((grid,), (threads,), args)
    return lambda: kern((ctas,), (threads,), args)


def _occupancy(kern, threads: int) -> str:
    """Registers, static shared memory and resident CTAs per SM of one hand-written kernel."""
    try:
        query = cupy.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor
        ctas = query(kern.ptr, threads, 0)
    except AttributeError as exc:  # a CuPy without the occupancy query
        ctas = f"? ({exc})"
    return f"regs {kern.num_regs}, shared {kern.shared_size_bytes} B, CTAs/SM {ctas}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=512)
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if runtime.gpu_arch() is None:
        print("no CUDA GPU: this study needs one")
        return 2
    rows: dict[str, list[float]] = {}
    occupancy: dict[str, str] = {}
    for cfg_name, dtype, tm, tn, scope, threads in CONFIGS:
        elem = torch.tensor([], dtype=TORCH_DTYPE[dtype]).element_size()
        ctas = args.mib * 2**20 // (elem * tn) // tm
        tile_bytes = tm * tn * elem
        a = torch.randn(ctas * tm, tn, device="cuda").to(TORCH_DTYPE[dtype])
        ref = torch.empty_like(a)
        func = demos.gmem_smem_roundtrip(dtype, (tm, tn), scope, ctas=ctas, cta_threads=threads)
        fns = {}
        for pipeline, label in (("tirx_cuda_dispatch", "ours"), ("tirx", "built-in")):
            kernel = runtime.build(func, runtime.gpu_arch(), pipeline)[runtime.entry_name(func)]
            fns[label] = checked_launch(kernel, a, f"{cfg_name}: {label}")
        module = hand_written(tile_bytes, threads)
        bits = torch.int16 if elem == 2 else torch.int32
        for form in FORMS:
            kern = module.get_function(form)
            out = torch.full_like(a, float("nan"))
            launch = _launcher(kern, ctas, threads, a, out, form)
            launch()
            torch.cuda.synchronize()
            if not torch.equal(a.view(bits), out.view(bits)):
                raise SystemExit(f"{cfg_name}: hand-written {form} produced a wrong copy")
            fns[form] = launch
            occupancy[f"{cfg_name} {form}"] = _occupancy(kern, threads)
        fns["D2D copy"] = lambda r=ref, x=a: r.copy_(x)
        fns["ours again"] = fns["ours"]  # an A/A control: the same launch, timed last
        times = time_interleaved(fns, batch=10, reps=args.reps)
        moved = 2 * a.numel() * elem
        for name, ts in times.items():
            rows.setdefault(name, []).append(moved / (float(np.median(ts)) * 1e-3) / 1e9)
    if args.json:
        args.json.write_text(json.dumps({"configs": [c[0] for c in CONFIGS], "GBps": rows}))
    for key, facts in occupancy.items():
        print(f"{key:<32} {facts}")
    print(f"{'form (GB/s)':<14}" + "".join(f"{c[0]:>20}" for c in CONFIGS))
    for name, vals in rows.items():
        print(f"{name:<14}" + "".join(f"{v:>20.0f}" for v in vals))
    return 0


if __name__ == "__main__":
    sys.exit(main())
