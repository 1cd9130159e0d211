"""How fast the SFU (MUFU) computes base-2 exponentials, per element: ``ex2.approx.ftz.f32``
against the packed 16-bit forms ``ex2.approx.f16x2`` and ``ex2.approx.ftz.bf16x2``.

The question it answers: the softmax of examples/attention.py at head dim 64 is bound by
its exponentials (one ``MUFU.EX2`` a score; docs/performance.md, "Where 1,024 x 64
non-causal's time goes"). Would the packed forms, which take two elements a register,
compute twice as many a clock? On sm_90 ptxas splits each packed instruction into two
``MUFU.EX2.F16`` (``.BF16``), one a half (tests/test_bench_mufu.py reads the SASS); this
measures what that costs.

Each kernel runs ``CHAINS`` independent chains of ``ITERS`` dependent exponentials a
thread (the next argument is the last result minus a constant: an ``FADD`` or a ``LOP3``
beside each ``MUFU``), 8 CTAs of 256 threads an SM. Elements a clock an SM are counted at
the SM clock measured by :class:`run.Gpu`. Usage (a machine with a CUDA GPU)::

    python3 bench/mufu.py
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

CHAINS, ITERS = 16, 4096
KERNELS = {  # kernel name: (the PTX instruction, elements an instruction)
    "ex2_f32": ("ex2.approx.ftz.f32", 1),
    "ex2_f16x2": ("ex2.approx.f16x2", 2),
    "ex2_bf16x2": ("ex2.approx.ftz.bf16x2", 2),
}
SOURCE = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#define CHAINS @CHAINS@
#define ITERS @ITERS@
extern "C" __global__ void ex2_f32(float* out, float seed) {
  float v[CHAINS];
  for (int i = 0; i < CHAINS; ++i) v[i] = seed * (threadIdx.x + i) * 1e-6f - 1.0f;
  for (int it = 0; it < ITERS; ++it) {
#pragma unroll
    for (int i = 0; i < CHAINS; ++i) {
      float r;
      asm volatile("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(v[i]));
      v[i] = r - 1.5f;
    }
  }
  float s = 0.0f;
  for (int i = 0; i < CHAINS; ++i) s += v[i];
  out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}
// the packed forms: two 16-bit elements a register (TYPE, made by MAKE), both halves
// negated between rounds
#define PACKED(NAME, TYPE, MAKE, INSTRUCTION)                                      \
  extern "C" __global__ void NAME(float* out, float seed) {                        \
    unsigned v[CHAINS];                                                             \
    for (int i = 0; i < CHAINS; ++i) {                                              \
      TYPE h = MAKE(seed * i * 1e-6f - 1.0f, -0.5f);                                \
      v[i] = *reinterpret_cast<unsigned*>(&h);                                      \
    }                                                                               \
    for (int it = 0; it < ITERS; ++it) {                                            \
      _Pragma("unroll") for (int i = 0; i < CHAINS; ++i) {                          \
        unsigned r;                                                                 \
        asm volatile(INSTRUCTION " %0, %1;" : "=r"(r) : "r"(v[i]));                 \
        v[i] = r ^ 0x80008000u;                                                     \
      }                                                                             \
    }                                                                               \
    float s = 0.0f;                                                                 \
    for (int i = 0; i < CHAINS; ++i) {                                              \
      TYPE h = *reinterpret_cast<TYPE*>(&v[i]);                                     \
      s += __low2float(h) + __high2float(h);                                        \
    }                                                                               \
    out[blockIdx.x * blockDim.x + threadIdx.x] = s;                                 \
  }
PACKED(ex2_f16x2, __half2, __floats2half2_rn, "ex2.approx.f16x2")
PACKED(ex2_bf16x2, __nv_bfloat162, __floats2bfloat162_rn, "ex2.approx.ftz.bf16x2")
""".replace("@CHAINS@", str(CHAINS)).replace("@ITERS@", str(ITERS))


def measure(gpu, reps: int = 5) -> list[dict]:
    """One row per kernel: milliseconds (median of ``reps``), instructions and elements a
    clock an SM at the measured SM clock. Every output must be finite (the chains ran)."""
    cp = gpu.cupy
    module = cp.RawModule(code=SOURCE, options=("-std=c++17",))
    grid, block = gpu.sms * 8, 256
    out = cp.full(grid * block, cp.nan, dtype=cp.float32)
    rows = []
    for name, (ptx, per) in KERNELS.items():
        kernel = module.get_function(name)
        times = []
        for _ in range(reps + 1):  # the first: warm-up
            start, end = cp.cuda.Event(), cp.cuda.Event()
            start.record()
            kernel((grid,), (block,), (out, cp.float32(1.0)))
            end.record()
            end.synchronize()
            times.append(cp.cuda.get_elapsed_time(start, end))
        if not bool(cp.isfinite(out).all()):
            raise RuntimeError(f"{name}: an output is not finite")
        ms = statistics.median(times[1:])
        instructions = grid * block * CHAINS * ITERS
        rate = instructions / (ms * 1e-3) / gpu.sms / gpu.clock_hz
        rows.append({"instruction": ptx, "ms": ms, "instructions / clk / SM": rate,
                     "elements / clk / SM": rate * per})  # fmt: skip
    return rows


def main() -> int:
    import run

    gpu = run.Gpu()
    print(f"{gpu.name}, {gpu.sms} SMs, SM clock measured {gpu.clock_hz / 1e6:.0f} MHz")
    print(run.markdown_table(measure(gpu)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
