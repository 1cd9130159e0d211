"""Does the grid, not the copy, hold the streaming copy under the device copy?

The two programs that trail a device copy most (f32 64x128 cta128, bf16 32x256 cta256;
docs/performance.md) are timed at grids of whole and fractional waves: the program's own
grid (512 MiB), and CTA counts that fill every SM's resident slots exactly 10, 20 and 30
times, or leave the last wave half full. Slots per SM come from the occupancy rules of
sm_90 (228 KiB of shared memory per SM and 1 KiB reserved per CTA, 2,048 threads, 32 CTAs)
and are checked against CUDA's occupancy calculator on an equivalent CuPy kernel. Each
size is timed as bench/copy_stream.py does (ours, the built-in and a device copy of the
same bytes, interleaved, checked bit for bit first). Prints a table last.

    source .devkit/setup.sh && PYTHONPATH=src:$PYTHONPATH python3 bench/stream_grid.py
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import copy_stream  # noqa: E402
import cupy as cp  # noqa: E402

# (name, dtype, tile rows, tile cols, scope, threads per CTA, element bytes)
TRAILING = [
    ("f32 64x128 cta128", "float32", 64, 128, "cta", 128, 4),
    ("bf16 32x256 cta256", "bfloat16", 32, 256, "cta", 256, 2),
    ("f32 16x256 cta128", "float32", 16, 256, "cta", 128, 4),  # one that does not trail
]


def slots_per_sm(tile_bytes: int, threads: int) -> int:
    """Resident CTAs per SM on sm_90 by shared memory, threads and the CTA cap."""
    return min((228 * 1024) // (tile_bytes + 1024), 2048 // threads, 32)


def occupancy_check(tile_bytes: int, threads: int) -> int:
    """CUDA's own count for a kernel with the same static shared memory and block size."""
    src = (
        f'extern "C" __global__ void k(float* p) {{ __shared__ float s[{tile_bytes // 4}];'
        " s[threadIdx.x] = p[threadIdx.x]; __syncthreads();"
        f" p[threadIdx.x + 1] = s[({tile_bytes // 4} - 1) - threadIdx.x]; }}"
    )
    kernel = cp.RawKernel(src, "k")
    kernel.compile()
    return cp.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(kernel.kernel.ptr, threads, 0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    rows = []
    for name, dtype, tm, tn, scope, threads, elem in TRAILING:
        tile_bytes = tm * tn * elem
        slots = slots_per_sm(tile_bytes, threads)
        cuda_says = occupancy_check(tile_bytes, threads)
        wave = sms * slots
        program = (512 * 2**20) // tile_bytes
        for ctas in sorted({program, 10 * wave, 20 * wave, 30 * wave, 20 * wave + wave // 2}):
            r = copy_stream.bench_config(
                name, dtype, tm, tn, scope, threads, ctas * tile_bytes, batch=10, reps=args.reps
            )
            rows.append(
                {
                    "config": name,
                    "ctas": ctas,
                    "waves": ctas / wave,
                    "slots/SM": f"{slots} (CUDA: {cuda_says})",
                    "program's grid": ctas == program,
                    "ours/D2D": r["ours_vs_copy"],
                    "built-in/D2D": r["builtin_vs_copy"],
                    "ours/built-in": r["ours_vs_builtin"],
                    "D2D GB/s": r["device_copy_GBps"],
                }
            )
            print(rows[-1], flush=True)
    keys = list(rows[0])
    print("| " + " | ".join(keys) + " |")
    print("| " + " | ".join("---" for _ in keys) + " |")
    for row in rows:
        cells = [f"{v:.3f}" if isinstance(v, float) else str(v) for v in row.values()]
        print("| " + " | ".join(cells) + " |")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
