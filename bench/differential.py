"""Differential check on the GPU: random programs, both pipelines, the GPU and the simulator.

Draws N programs from the same generators as the fuzz tests (:mod:`tirx_cuda_dispatch.fuzz`,
seeds 0..N-1 plus ``--first``), and for each one, in worker processes (one CUDA context
each):

1. simulates it lowered by our pipeline and by TVM's built-in one (a kernel the simulator
   finds faulting, e.g. out of bounds, never runs on the GPU);
2. compiles both and runs them on the GPU;
3. checks the GPU's output against the simulator's, bit for bit, for each pipeline (a
   disagreement on either is a failure: the simulator is the oracle of the CPU tests;
   where the kernel ran a function the GPU approximates, ``sim.intrinsics.APPROXIMATE``,
   such as the built-in's ``sqrtf`` under ``--use_fast_math``, floats may differ by
   :data:`APPROX_ULPS` units in the last place of their dtype, :func:`disagreement`),
   and (through :func:`fuzz.differential`) ours against numpy and against a correct
   built-in.

Every kind of :data:`fuzz.GENERATORS` is drawn (``--kinds ldgsts,mma`` restricts them);
the cp.async programs pass A, B and C (the shared tile's first contents), the mma ones
A, B, C and D, and the answers of mma programs are sm_90's summation bit for bit (an
H100 or H200; other GPUs sum otherwise and fail those cases), and so are those of wgmma
programs (``wgmma``: sm_90's measured summation, :func:`tirx_cuda_dispatch.sim.numerics.
wgmma_sum_sm90`, float8 keeping 14 bits). TMA programs (``tma``) are compared bit for
bit too.

Prints one line per failure and, last, a table of outcomes; ``--log`` writes every case.
Exit status 1 when any case failed. Usage (on a machine with a CUDA GPU)::

    python3 bench/differential.py --programs 2000 --workers 16 --log out.jsonl
"""

from __future__ import annotations

import argparse
import collections
import json
import multiprocessing as mp
import sys
import time
import warnings

APPROX_ULPS = 2  # the GPU's approximate math against the simulator's correct rounding


def disagreement(on_gpu, simulated, approximate: bool) -> str | None:
    """How the GPU's arrays differ from the simulator's: bit for bit, or, where the kernel
    ran approximate math (``approximate``), finite floats of the same sign by more than
    :data:`APPROX_ULPS` in their last place (adjacent floats differ by 1 in their bits);
    None where they agree. The bound covers fast-math sqrt, division and reciprocal; an
    ``expf`` of a large argument may be further off, and with approximate math anywhere
    in a kernel, every float it writes is compared within the bound."""
    import numpy as np

    from tirx_cuda_dispatch import runtime

    for i, (g, s) in enumerate(zip(on_gpu, simulated, strict=True)):
        gb, sb = runtime.bits(g), runtime.bits(s)
        differ = gb != sb
        floating = g.dtype.kind == "f" or g.dtype.name == "bfloat16"
        if approximate and floating:
            g32, s32 = g.astype(np.float32), s.astype(np.float32)
            finite = np.isfinite(g32) & np.isfinite(s32)  # no Inf next to FLT_MAX or a NaN
            same_sign = np.signbit(g32) == np.signbit(s32)
            steps = np.abs(gb.astype(np.int64) - sb.astype(np.int64))
            differ &= ~(finite & same_sign & (steps <= APPROX_ULPS))
        if differ.any():
            bound = f" (beyond {APPROX_ULPS} ulps of approximate math)" if approximate else ""
            return f"argument {i}: GPU and simulator differ in {int(differ.sum())} elements{bound}"
    return None


def _worker(args: tuple) -> list[dict]:
    """(seeds, deadline[, kinds]) -> one row per case."""
    seeds, deadline, *rest = args
    kinds = rest[0] if rest else None
    warnings.simplefilter("ignore")

    import tirx_cuda_dispatch  # noqa: F401  (registers the pipelines)
    from tirx_cuda_dispatch import fuzz, runtime, sim
    from tirx_cuda_dispatch.sim.errors import SimError
    from tirx_cuda_dispatch.sim.intrinsics import APPROXIMATE

    gpu = runtime.gpu_arch()

    class Disagreement(SimError):
        """The GPU and the simulator disagree on a kernel's output."""

    def gpu_and_sim(func, arrays, pipeline):
        result = sim.run(func, [a.copy() for a in arrays], pipeline=pipeline)
        approximate = bool(APPROXIMATE & set(result.counters.instructions))
        exe = runtime.build(func, gpu, pipeline)
        on_gpu = runtime.run(exe, runtime.entry_name(func), arrays)
        differ = disagreement(on_gpu, result.arrays, approximate)
        if differ is not None:
            raise Disagreement(differ)
        return on_gpu

    rows = []
    for seed in seeds:
        if time.time() > deadline:
            break
        t0 = time.time()
        chooser = fuzz.RandomChooser(seed)
        case = fuzz.random_case(chooser, chooser.pick(kinds) if kinds else None)
        try:
            verdict = fuzz.differential(case, execute=gpu_and_sim)
            problems, ours, builtin = verdict.problems, verdict.ours, verdict.builtin
            if builtin.startswith(f"faults: {Disagreement.__name__}"):
                # not the baseline's fault: the simulator is wrong about the built-in's kernel
                problems = [*problems, f"built-in: {builtin.removeprefix('faults: ')}"]
        except Exception as exc:  # noqa: BLE001  (a crash of the harness is a failure too)
            problems, ours, builtin = [f"harness: {type(exc).__name__}: {exc}"], "?", "?"
        rows.append(
            {
                "seed": seed,
                "case": str(case),
                "kind": case.kind,
                "ours": ours,
                "builtin": builtin,
                "problems": problems,
                "seconds": round(time.time() - t0, 2),
            }
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--programs", type=int, default=2000)
    parser.add_argument("--first", type=int, default=0, help="first seed")
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--budget-s", type=float, default=500.0, help="stop drawing after this")
    parser.add_argument("--log", help="write one JSON line per case here")
    parser.add_argument("--kinds", help="comma-separated generator kinds (default: all)")
    args = parser.parse_args(argv)

    deadline = time.time() + args.budget_s
    seeds = list(range(args.first, args.first + args.programs))
    kinds = args.kinds.split(",") if args.kinds else None
    chunks = [(seeds[i :: args.workers * 4], deadline, kinds) for i in range(args.workers * 4)]
    rows: list[dict] = []
    start = time.time()
    with mp.get_context("spawn").Pool(args.workers) as pool:
        for part in pool.imap_unordered(_worker, chunks):
            rows += part
    rows.sort(key=lambda r: r["seed"])
    if args.log:
        with open(args.log, "w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
    failed = [r for r in rows if r["problems"]]
    for r in failed:
        print(f"FAIL seed {r['seed']} {r['case']}: {r['problems']}")
    table = collections.Counter(
        (r["kind"], r["ours"].split(":")[0], r["builtin"].split(":")[0]) for r in rows
    )
    print(f"\n{len(rows)} programs in {time.time() - start:.0f} s, {len(failed)} failed")
    print(f"{'kind':<18} {'ours':<12} {'built-in':<14} count")
    for (kind, ours, builtin), n in sorted(table.items()):
        print(f"{kind:<18} {ours:<12} {builtin:<14} {n}")
    lowered = sum(r["ours"] == "lowered" for r in rows)
    print(
        f"ours took every call in {lowered} ({100 * lowered / max(len(rows), 1):.0f}%); "
        f"{len(rows) - len(failed)} passed, {len(failed)} failed"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
