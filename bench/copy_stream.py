"""Streaming copy global -> shared -> global: our pipeline vs TVM's "tirx" vs a device copy.

Many CTAs, each moving its own tile through shared memory (seed 004's program at scale).
One run builds the identical program with both pipelines, checks both results against the
input (random data, poisoned outputs), then times each with CUDA events after warm-up:
the median over many repetitions of a batch of launches, the three contenders interleaved
repetition by repetition so that clock or thermal drift affects them alike. The reference is a
device-to-device copy of the same bytes (PyTorch's ``copy_``). Bandwidth counts bytes
read plus bytes written. Prints a table last; ``--json PATH`` writes the numbers.

    source .devkit/setup.sh && PYTHONPATH=src:$PYTHONPATH python3 bench/copy_stream.py
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import numpy as np  # noqa: E402
import torch  # noqa: E402
import tvm  # noqa: E402

import tirx_cuda_dispatch  # noqa: E402,F401  (registers the pipeline)
from tirx_cuda_dispatch import demos, runtime  # noqa: E402

# (name, dtype, tile rows, tile cols, scope, threads per CTA)
CONFIGS = [
    ("f32 32x256 cta256", "float32", 32, 256, "cta", 256),
    ("f32 16x256 cta128", "float32", 16, 256, "cta", 128),
    ("f32 64x128 cta128", "float32", 64, 128, "cta", 128),
    ("f16 64x128 wg", "float16", 64, 128, "warpgroup", 128),
    ("bf16 32x256 cta256", "bfloat16", 32, 256, "cta", 256),
]
TORCH_DTYPE = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def time_interleaved(fns: dict, batch: int, reps: int) -> dict[str, list[float]]:
    """Milliseconds per call of each function: ``reps`` rounds, each timing a batch of
    ``batch`` back-to-back calls of every function in turn, so drift hits all alike."""
    for fn in fns.values():
        for _ in range(3):
            fn()
    torch.cuda.synchronize()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(reps):
        for name, fn in fns.items():
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(batch):
                fn()
            end.record()
            end.synchronize()
            times[name].append(start.elapsed_time(end) / batch)
    return times


def checked_launch(kernel, a: torch.Tensor, what: str):
    """Run ``kernel(a, b)`` once into a poisoned ``b``, require ``b == a`` bit for bit, and
    return the launch as a no-argument function for timing."""
    bits = torch.int16 if a.element_size() == 2 else torch.int32
    a_tvm = tvm.runtime.from_dlpack(a)
    b = torch.full_like(a, float("nan"))
    b_tvm = tvm.runtime.from_dlpack(b)
    kernel(a_tvm, b_tvm)
    torch.cuda.synchronize()
    if not torch.equal(a.view(bits), b.view(bits)):
        raise SystemExit(f"{what} produced a wrong copy")
    return lambda: kernel(a_tvm, b_tvm)


def gpu_facts() -> dict:
    query = "name,driver_version,clocks.sm,clocks.max.sm,clocks.mem"
    out = subprocess.run(
        ["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    return dict(zip(query.split(","), [s.strip() for s in out.split(",")], strict=False))


def bench_config(
    name, dtype, tm, tn, scope, threads, total_bytes, batch, reps, path="shared"
) -> dict:
    elem = torch.tensor([], dtype=TORCH_DTYPE[dtype]).element_size()
    rows = total_bytes // (elem * tn)
    ctas = rows // tm
    rows = ctas * tm
    func = demos.gmem_smem_roundtrip(
        dtype, (tm, tn), scope, ctas=ctas, cta_threads=threads, path=path
    )
    a = torch.randn(rows, tn, device="cuda").to(TORCH_DTYPE[dtype])
    ref = torch.empty_like(a)
    result = {"config": name, "bytes_moved": 2 * a.numel() * elem, "ctas": ctas}
    fns = {"device_copy": lambda: ref.copy_(a)}
    for pipeline in ("tirx_cuda_dispatch", "tirx"):
        kernel = runtime.build(func, runtime.gpu_arch(), pipeline)[runtime.entry_name(func)]
        fns[pipeline] = checked_launch(kernel, a, f"{name}: {pipeline}")
    times = time_interleaved(fns, batch, reps)
    for key, ts in times.items():
        result[f"{key}_ms"] = float(np.median(ts))
        result[f"{key}_ms_iqr"] = [float(np.percentile(ts, 25)), float(np.percentile(ts, 75))]
    gbs = lambda ms: result["bytes_moved"] / (ms * 1e-3) / 1e9  # noqa: E731
    result["ours_GBps"] = gbs(result["tirx_cuda_dispatch_ms"])
    result["builtin_GBps"] = gbs(result["tirx_ms"])
    result["device_copy_GBps"] = gbs(result["device_copy_ms"])
    result["ours_vs_copy"] = result["ours_GBps"] / result["device_copy_GBps"]
    result["builtin_vs_copy"] = result["builtin_GBps"] / result["device_copy_GBps"]
    result["ours_vs_builtin"] = result["ours_GBps"] / result["builtin_GBps"]
    return result


def table(results: list[dict], facts: dict) -> str:
    lines = [
        f"streaming copy global->shared->global on {facts.get('name')} "
        f"(driver {facts.get('driver_version')}, SM clock {facts.get('clocks.sm')} of "
        f"{facts.get('clocks.max.sm')}, memory {facts.get('clocks.mem')})",
        f"{'config':<20} {'MiB':>6} {'ours GB/s':>10} {'built-in':>10} {'D2D copy':>10} "
        f"{'ours/copy':>9} {'tirx/copy':>9} {'ours/tirx':>9}",
    ]
    for r in results:
        lines.append(
            f"{r['config']:<20} {r['bytes_moved'] / 2**21:>6.0f} {r['ours_GBps']:>10.0f} "
            f"{r['builtin_GBps']:>10.0f} {r['device_copy_GBps']:>10.0f} {r['ours_vs_copy']:>9.3f} "
            f"{r['builtin_vs_copy']:>9.3f} {r['ours_vs_builtin']:>9.3f}"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=512, help="size of the source tensor (MiB)")
    parser.add_argument("--batch", type=int, default=10)
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if runtime.gpu_arch() is None:
        print("no CUDA GPU: this benchmark needs one")
        return 2
    facts = gpu_facts()
    results = [
        bench_config(*cfg, total_bytes=args.mib * 2**20, batch=args.batch, reps=args.reps)
        for cfg in CONFIGS
    ]
    if args.json:
        args.json.write_text(json.dumps({"gpu": facts, "results": results}, indent=2))
    print(table(results, facts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
