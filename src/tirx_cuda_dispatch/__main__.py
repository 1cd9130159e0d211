"""``tirx-dispatch`` / ``python -m tirx_cuda_dispatch``: what tile primitives became, and why.

Commands: ``demo`` (the main job), ``explain``, ``lower``, ``run``, ``draw`` on a user's
``FILE.py[:FUNC]``, and ``variants``. Exit codes are listed in :data:`EXIT_CODES`.

``demo`` lowers the seed program of each landed variant through our pipeline, prints its
explain() report and the emitted CUDA kernel, compiles it with NVRTC and shows the memory
instructions of its SASS, and runs its round trip when a CUDA GPU is present (float32
sqrt is correctly rounded, so even that check is exact).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

import numpy as np

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_LOWERING, EXIT_UNAVAILABLE, EXIT_FAULT = 0, 1, 2, 3, 4, 5


def _kernel_text(cuda_source: str) -> str:
    """The ``__global__`` kernel definitions of a TVM CUDA source, without the preamble."""
    starts = [m.start() for m in re.finditer(r'extern "C" __global__', cuda_source)]
    defs = [cuda_source[s:] for s in starts if "{" in cuda_source[s : cuda_source.find(";", s) + 1]]
    return defs[-1] if defs else cuda_source


def _memory_opcodes(counts) -> str:
    keep = {
        k: v
        for k, v in sorted(counts.items())
        if re.match(r"(LD|ST)(G|S|L)?\b|LDG|STG|LDS|STS|LDSM|STSM|LDTM|STTM", k)
    }
    return ", ".join(f"{k} x{v}" for k, v in keep.items()) or "(none)"


def _seed_programs():
    """(title, program, inputs(rng) -> arrays, expected(arrays) -> (output index, array),
    arch or None for the command's)."""
    from tvm.tirx.layout import Axis, S, TileLayout

    from . import demos, runtime

    rows = TileLayout(S[(32, 8) : (1 @ Axis.laneid, 1)])  # lane i owns row i

    def one(shape, dtype="float32"):
        def inputs(rng):
            a = runtime.random_array(shape, dtype, rng)
            return [a, runtime.poison_like(a)]

        return inputs

    def sqrt_inputs(rng):
        a = np.abs(runtime.random_array((32, 8), "float32", rng)) + np.float32(0.25)
        c, d = (runtime.random_array((32, 8), "float32", rng) for _ in range(2))
        return [a, c, d, runtime.poison_like(a)]

    def fragment_inputs(rng):
        a = runtime.random_array((8, 4, 2, 2), "float16", rng)
        return [a, runtime.poison_like(a), runtime.poison_like(np.zeros((32, 4), "float16"))]

    # Seed 002: two 8x8 float16 matrices, the m8n8 fragment, a row-major shared tile. Its
    # rows are 32 bytes apart, so ldmatrix conflicts 2-way there and the cost rule alone
    # would choose copy -> reg; the demo forces the variant it shows.
    fragment = TileLayout(S[(8, 4, 2, 2) : (4 @ Axis.laneid, 1 @ Axis.laneid, 2, 1)])
    row_major = TileLayout(S[(8, 4, 2, 2) : (16, 2, 8, 1)])

    return [
        (
            "copy -> gmem_smem: a warp copies a 32x32 float32 tile global -> shared -> global",
            demos.gmem_smem_roundtrip("float32", (32, 32), scope="warp"),
            one((32, 32)),
            lambda arrays: (1, arrays[0]),
            None,
        ),
        (
            "copy -> reg: a warp round-trips a 32x8 float32 tile shared -> registers -> shared"
            " (lane i owns row i)",
            demos.reg_roundtrip(rows, (32, 8), "float32"),
            one((32, 8)),
            lambda arrays: (1, arrays[0]),
            None,
        ),
        (
            "copy -> ldstmatrix: a warp round-trips two 8x8 float16 matrices shared -> "
            "registers -> shared (ldmatrix/stmatrix .x2)",
            demos.ldstmatrix_roundtrip(fragment, row_major, (8, 4, 2, 2), 4, dispatch="ldstmatrix"),
            fragment_inputs,
            lambda arrays: (1, arrays[0]),
            None,
        ),
        (
            "elementwise -> reg: a warp takes sqrt of a 32x8 float32 register tile",
            demos.elementwise_roundtrip("sqrt", rows, (32, 8), "float32"),
            sqrt_inputs,
            lambda arrays: (3, np.sqrt(arrays[0])),
            None,
        ),
        (
            "copy_async -> tcgen05_ldst: a warpgroup round-trips a 128x8 float16 tile registers "
            "-> tensor memory -> registers (Blackwell only: lowered for sm_100a)",
            demos.tcgen05_roundtrip(),
            one((128, 8), "float16"),
            lambda arrays: (1, arrays[0]),
            "sm_100a",
        ),
    ]


def demo(arch: str) -> int:
    from . import explain, runtime, toolchain
    from .targets import describe

    gpu = runtime.gpu_arch()
    failed = False
    for title, func, inputs, expected, own_arch in _seed_programs():
        target_arch = own_arch or describe(arch)
        print(f"== {title}")
        print(explain(func, target_arch))
        source = toolchain.cuda_source(func, target_arch)
        print(f"\n-- emitted CUDA kernel ({target_arch}) --")
        print(_kernel_text(source).strip())
        sass = toolchain.sass(toolchain.nvrtc_compile(source, target_arch))
        print(f"\n-- SASS memory instructions (NVRTC, {target_arch}) --")
        print(_memory_opcodes(toolchain.opcodes(sass)))
        if gpu is None or not _can_run(gpu, target_arch):
            why = "no CUDA GPU here" if gpu is None else f"the GPU here is {gpu}"
            print(f"\n{why}: {target_arch} round trip not run (the lowering above is the demo)\n")
            continue
        arrays = inputs(np.random.default_rng(0))
        out = runtime.run(runtime.build(func, gpu), runtime.entry_name(func), arrays)
        index, want = expected(arrays)
        same = np.array_equal(runtime.bits(out[index]), runtime.bits(want.astype(out[index].dtype)))
        failed |= not same
        print(f"\nround trip on the GPU ({gpu}): {'exact' if same else 'WRONG'}\n")
    return EXIT_FAILED if failed else EXIT_OK


def _can_run(gpu: str, arch: str) -> bool:
    """sm_100a code runs on Blackwell only; the other seeds run on any sm_90+ GPU."""
    needs_blackwell = arch.startswith(("sm_10", "sm_11"))
    return gpu.startswith(("sm_10", "sm_11")) or not needs_blackwell


def variants() -> int:
    from . import list_variants

    for row in list_variants():
        preds = ", ".join(row["predicates"])
        print(
            f"{row['op']:<12} {row['variant']:<14} priority {row['priority']:<3} order {row['order']:<3} [{preds}]"
        )
    return EXIT_OK


# -- commands on the user's programs ----------------------------------------------------
class CliError(Exception):
    """A user-facing failure: the message, and the exit code that goes with it."""

    def __init__(self, message: str, code: int):
        super().__init__(message)
        self.code = code


def load_namespace(path: str) -> dict[str, Any]:
    """Run the user's file as a module (not as ``__main__``: its own check does not start)."""
    import runpy

    if not Path(path).is_file():
        raise CliError(f"no such file: {path}", EXIT_USAGE)
    try:
        return runpy.run_path(path, run_name="__tirx_dispatch__")
    except Exception as exc:  # the user's program failed to load: say so, with its error
        raise CliError(f"{path} failed to load: {type(exc).__name__}: {exc}", EXIT_USAGE) from exc


def load_program(spec: str) -> tuple[str, Any]:
    """``FILE.py[:FUNC]`` -> (name, PrimFunc or IRModule). Without FUNC the file must
    define exactly one."""
    import tvm

    path, _, name = spec.partition(":")
    namespace = load_namespace(path)
    programs = {
        k: v for k, v in namespace.items() if isinstance(v, tvm.tirx.PrimFunc | tvm.IRModule)
    }
    if name:
        if name not in programs:
            found = ", ".join(sorted(programs)) or "none"
            raise CliError(
                f"{path} has no PrimFunc or IRModule named {name} (found: {found})", EXIT_USAGE
            )
        return name, programs[name]
    if len(programs) != 1:
        found = ", ".join(sorted(programs)) or "none"
        raise CliError(
            f"{path} defines {len(programs)} PrimFuncs/IRModules ({found}); name one: {path}:NAME",
            EXIT_USAGE,
        )
    return next(iter(programs.items()))


def _explain(
    spec: str,
    arch: str,
    as_json: bool,
    ptxas: bool = False,
    overview: bool = False,
    cost: bool = False,
    machine: str | None = None,
) -> int:
    from . import explain
    from .explain import kernel_cost
    from .machines import UnknownMachine

    name, program = load_program(spec)
    report = explain(program, arch, ptxas=ptxas)
    try:
        view = kernel_cost(report, program, machine, target=arch) if cost else None
    except UnknownMachine as err:
        raise CliError(str(err), EXIT_USAGE) from None
    if as_json:
        doc = {"program": name, "arch": arch, "calls": report.as_dicts()}
        if ptxas:
            doc["ptxas"] = report.kernel_notes
        if view is not None:
            doc["cost"] = view.as_dict()
        print(json.dumps(doc, indent=2))
    else:
        print(f"{name} ({arch}):")
        print(report.overview() if overview or cost else report)
        if view is not None:
            print(view)
    failing = [r for r in report if r.error is not None]
    if failing:  # a script can tell: lowering this program would fail
        where = ", ".join(f"[{r.index}] at {r.location}" for r in failing)
        print(f"tirx-dispatch: {len(failing)} call(s) cannot be lowered: {where}", file=sys.stderr)
        return EXIT_LOWERING
    return EXIT_OK


def _lower(spec: str, emit: str, arch: str, strict: bool) -> int:
    from . import PIPELINE, STRICT_PIPELINE, toolchain
    from .targets import describe

    _, program = load_program(spec)
    pipeline = STRICT_PIPELINE if strict else PIPELINE
    if emit == "tir":
        print(toolchain.lowered_tir(program, arch, pipeline).script())
        return EXIT_OK
    source = toolchain.cuda_source(program, arch, pipeline)
    for note in toolchain.ptxas_notes(source, describe(arch)):  # performance verdicts
        print(f"ptxas: {note}", file=sys.stderr)
    if emit == "cuda":
        print(source)
    elif emit == "ptx":
        print(toolchain.nvrtc_ptx(source, describe(arch)))
    else:
        print(toolchain.sass(toolchain.nvrtc_compile(source, describe(arch))))
    return EXIT_OK


def _run(spec: str) -> int:
    from . import runtime

    path, _, check = spec.partition(":")
    check = check or "main"
    namespace = load_namespace(path)
    entry = namespace.get(check)
    if not callable(entry):
        raise CliError(f"{path} has no {check}() check to run", EXIT_USAGE)
    gpu = runtime.gpu_arch()
    if gpu is not None:
        print(f"tirx-dispatch run: {path}:{check}() on the GPU ({gpu})")
        code = entry()
        return EXIT_OK if code in (None, 0) else EXIT_FAILED
    print(
        f"tirx-dispatch run: no CUDA GPU here; {path}:{check}() lowers and compiles only, "
        "its GPU check does not run (simulate kernels on the CPU with tirx_cuda_dispatch.sim, "
        "docs/simulator.md)"
    )
    entry()
    return EXIT_UNAVAILABLE


def _draw(
    spec: str,
    call_index: int,
    out: str,
    arch: str,
    rows: str | None = None,
    cols: str | None = None,
    warp: int | None = None,
) -> int:
    from . import draw, explain

    _, program = load_program(spec)
    reports = explain(program, arch)
    if not 0 <= call_index < len(reports):
        raise CliError(
            f"--call {call_index}: the program has {len(reports)} tile-primitive calls "
            f"(0..{len(reports) - 1})",
            EXIT_USAGE,
        )
    report = reports[call_index]
    if report.variant is None:
        raise CliError(
            f"call {call_index} ({report.location}) is lowered by none of our variants; "
            "`tirx-dispatch explain` says why",
            EXIT_UNAVAILABLE,
        )
    try:
        pic = draw.picture(
            report.call_object, report.plan_object, report.variant, rows=rows, cols=cols, warp=warp
        )
        path = draw.write(pic, out)
    except draw.ViewError as why:
        raise CliError(f"draw: {why}", EXIT_USAGE) from None
    except draw.DrawError as why:
        raise CliError(f"cannot draw call {call_index}: {why}", EXIT_UNAVAILABLE) from None
    view = f"; {pic.view}" if pic.view else ""
    if pic.memory == "shared":
        what = f"worst bank conflict {pic.worst_conflict}-way"
    else:  # global memory has no banks; a register picture moves nothing through memory
        what = "registers, as the layout places them" if pic.memory == "local" else pic.memory
    print(f"{path}: call {call_index}, {report.variant}, {what}{view}")
    return EXIT_OK


def _arch(text: str) -> str:
    """argparse type for --arch: a known CUDA arch; a typo is a usage error (exit 2)."""
    from .targets import TargetError, check_arch

    try:
        return check_arch(text)
    except TargetError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _target(text: str) -> str:
    """argparse type for --target: any target form explain() accepts."""
    from .targets import TargetError, as_target

    try:
        as_target(text)
    except TargetError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return text


def _add_target_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--arch",
        dest="arch",
        default="sm_90a",
        type=_arch,
        help="a CUDA arch: sm_90a (default), sm_100a, ...",
    )
    group.add_argument(
        "--target",
        dest="arch",
        type=_target,
        metavar="TARGET",
        help='any target explain() takes: an arch, a kind (llvm) or JSON {"kind": "cuda", ...}',
    )


EXIT_CODES = """exit codes: 0 ok; 1 a check found a wrong result (or, with --compare, the two
lowerings differ); 2 usage (bad arguments, no such file or program, unknown arch); 3
lowering failed (a region out of bounds, a call nothing can lower, strict mode: a call
none of our variants accepts, or a forced variant that declines; the message lists every
variant's reason; explain prints its report and exits 3 where lowering would fail); 4 not available here (no GPU to run on, PNG without matplotlib, a call
that cannot be drawn, a kernel parameter sim cannot make); 5 the simulator found a fault
(out of bounds, misaligned, a race, a read of unwritten memory; the message names the
tile-primitive call and its source line)"""


# -- sim: the kernel on the CPU simulator ------------------------------------------------
def _sim_inputs(program: Any, seed: int) -> tuple[list[str], list[np.ndarray]]:
    """Random data (never zeros) for every buffer parameter of the kernel, seeded."""
    from . import runtime

    func = program
    if hasattr(func, "functions"):
        funcs = list(func.functions.values())
        if len(funcs) != 1:
            raise CliError("sim takes a module with one function; name a PrimFunc", EXIT_USAGE)
        func = funcs[0]
    rng = np.random.default_rng(seed)
    names, arrays = [], []
    for param in func.params:
        if type(param.ty).__name__ != "BufferType":  # TIRx: a buffer parameter is typed so
            raise CliError(
                f"parameter {param.name} is a scalar ({param.ty}): sim makes random buffers "
                "only; call tirx_cuda_dispatch.sim.run from Python with its value",
                EXIT_UNAVAILABLE,
            )
        shape = []
        for extent in param.shape:
            if not hasattr(extent, "value"):
                raise CliError(
                    f"buffer {param.name} has a symbolic shape {list(param.shape)}: sim needs "
                    "constant shapes",
                    EXIT_UNAVAILABLE,
                )
            shape.append(int(extent.value))
        names.append(str(param.name))
        arrays.append(runtime.random_array(tuple(shape), str(param.dtype), rng))
    return names, arrays


def _counter_lines(counters: Any, indent: str = "    ") -> list[str]:
    out = []
    instr = ", ".join(f"{k} x{v}" for k, v in sorted(counters.instructions.items()))
    out.append(f"{indent}warp instructions: {instr or '(none)'}")
    moved = ", ".join(f"{k} {v} B" for k, v in sorted(counters.bytes.items()))
    out.append(f"{indent}bytes: {moved or '(none)'}")
    if counters.bank_conflicts:
        hist = counters.conflict_histogram()
        text = ", ".join(f"{ways}-way x{n}" for ways, n in hist.items())
        out.append(
            f"{indent}shared-memory accesses by bank-conflict degree: {text} "
            f"(worst {counters.max_conflict()}-way)"
        )
    return out


def _sim(spec: str, arch: str, seed: int, check: str | None, compare: str | None) -> int:
    from . import explain, runtime, sim
    from .targets import describe

    path = spec.partition(":")[0]
    name, program = load_program(spec)
    namespace = load_namespace(path) if check else {}
    check_fn = namespace.get(check) if check else None
    if check and not callable(check_fn):
        raise CliError(f"{path} has no {check}(inputs, outputs) function to check with", EXIT_USAGE)
    names, inputs = _sim_inputs(program, seed)
    reports = explain(program, arch)
    try:
        result = sim.run(program, inputs, target=arch)
    except sim.SimError as err:
        print(f"tirx-dispatch: the simulator found a fault: {err}", file=sys.stderr)
        return EXIT_FAULT
    print(f"{name} ({describe(arch)}), simulated with seed {seed}:")
    for r in reports:
        counters = result.by_call.get(r.index)
        lowered_by = r.variant or "TVM's built-in variant"
        print(f"[{r.index}] Tx.{r.scope}.{r.op} -> {lowered_by}, at {r.location}")
        if counters is not None:
            print("\n".join(_counter_lines(counters)))
        else:
            print("    (lowered by TVM's built-in variant: counted with the kernel's own)")
    print("kernel in all:")
    print("\n".join(_counter_lines(result.counters)))
    for argname, before, after in zip(names, inputs, result.arrays, strict=True):
        same = np.array_equal(runtime.bits(before), runtime.bits(after))
        print(f"  {argname}: {'unchanged' if same else 'written'}")
    code = EXIT_OK
    if compare == "builtin":
        try:
            theirs = sim.run(program, inputs, target=arch, pipeline="tirx")
        except sim.SimError as err:
            print(f"TVM's built-in lowering faults in the simulator: {err}")
            return EXIT_FAILED
        except Exception as err:
            if not _from_tvm(err):
                raise
            print(f"--compare builtin: TVM's own pipeline cannot lower it: {_tvm_summary(err)}")
            return EXIT_LOWERING
        differ = [
            n
            for n, a, b in zip(names, result.arrays, theirs.arrays, strict=True)
            if not np.array_equal(runtime.bits(a), runtime.bits(b))
        ]
        if differ:
            print(
                f"--compare builtin: outputs differ from TVM's built-in lowering in {', '.join(differ)}"
            )
            code = EXIT_FAILED
        else:
            print("--compare builtin: every array equals TVM's built-in lowering bit for bit")
    if check_fn is not None:
        try:
            verdict = check_fn(inputs, result.arrays)
        except AssertionError as err:
            print(f"--check {check}: wrong result: {err}")
            return EXIT_FAILED
        if verdict is False:
            print(f"--check {check}: wrong result")
            return EXIT_FAILED
        print(f"--check {check}: ok")
    return code


def _from_tvm(err: BaseException) -> bool:
    """Raised inside TVM (its passes, codegen, FFI), not by our code."""
    tb = err.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    where = tb.tb_frame.f_code.co_filename if tb is not None else ""
    return type(err).__module__.startswith("tvm") or "/tvm/" in where or "tvm_ffi" in where


def _tvm_summary(err: BaseException) -> str:
    """TVM's reason in a line or a few, with the type: for a failed tile-primitive dispatch
    its first line and each variant's first reason (not TVM's table of them); otherwise
    the last line that says something, before TVM's dump of the module (lines of carets
    or table borders say nothing)."""
    text = str(err)
    from .builtin import BRIDGE_PREDICATE

    failed = re.search(r"^.*dispatch failed.*$", text, re.M)
    if failed:
        rows = re.findall(r"^\| (\S[^|]*?\(prio=\d+\)) *\| *(\S.*?) *\|?$", text, re.M)
        reasons = "".join(
            f"\n    {v}: {why[:160]}" for v, why in rows if BRIDGE_PREDICATE not in why
        )  # our bridge's cases, idle outside our pass, say nothing
        return f"{type(err).__name__}: {failed.group(0).strip()}{reasons}"
    head = re.split(r"^(?:Error in pass|Location \(TVMScript\))", text, maxsplit=1, flags=re.M)[0]
    lines = [ln.strip() for ln in head.splitlines() if not set(ln.strip()) <= set("^~|+- ")]
    return f"{type(err).__name__}: {lines[-1] if lines else type(err).__name__}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="tirx-dispatch",
        description="See what TIRx tile primitives become on CUDA, and why.",
        epilog=EXIT_CODES,
    )
    sub = parser.add_subparsers(dest="command")
    p_demo = sub.add_parser("demo", help="explain, lower and check the five seed programs")
    _add_target_options(p_demo)
    sub.add_parser("variants", help="list the registered variants in trial order")
    p_explain = sub.add_parser("explain", help="each call: operands, variant, plan, reasons")
    p_explain.add_argument("program", help="FILE.py[:FUNC]")
    _add_target_options(p_explain)
    p_explain.add_argument("--json", action="store_true", help="the report as JSON")
    p_explain.add_argument(
        "--ptxas",
        action="store_true",
        help="also compile (NVRTC) and show ptxas's performance verdicts (C7508, C7517, ...)",
    )
    p_explain.add_argument(
        "--overview",
        action="store_true",
        help="the kernel in one screen per loop: variants, resources once, a line per call",
    )
    p_explain.add_argument(
        "--cost",
        action="store_true",
        help="the kernel view: each call's modelled cost, the kernel's bound at its occupancy",
    )
    p_explain.add_argument(
        "--machine", default=None, help="the GPU the cost is modelled on (H200, H100)"
    )
    p_lower = sub.add_parser("lower", help="the lowered TIR, CUDA, PTX or SASS")
    p_lower.add_argument("program", help="FILE.py[:FUNC]")
    p_lower.add_argument("--emit", choices=("tir", "cuda", "ptx", "sass"), default="cuda")
    _add_target_options(p_lower)
    p_lower.add_argument("--strict", action="store_true", help="no fallback to TVM's variants")
    p_run = sub.add_parser("run", help="run the file's own check (its main()) on the GPU")
    p_run.add_argument("program", help="FILE.py[:CHECK], CHECK defaults to main")
    p_sim = sub.add_parser(
        "sim", help="run the kernel in the CPU simulator on random inputs: counters per call"
    )
    p_sim.add_argument("program", help="FILE.py[:FUNC]")
    _add_target_options(p_sim)
    p_sim.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    p_sim.add_argument(
        "--check",
        metavar="NAME",
        help="the file's NAME(inputs, outputs) says whether the outputs are right "
        "(returns False or raises AssertionError when not)",
    )
    p_sim.add_argument(
        "--compare",
        choices=("builtin",),
        help="also simulate TVM's built-in lowering and compare the outputs bit for bit",
    )
    p_draw = sub.add_parser("draw", help="picture one call: owners, registers, rounds, banks")
    p_draw.add_argument("program", help="FILE.py[:FUNC]")
    p_draw.add_argument("--call", type=int, default=0, help="which call, as explain numbers it")
    p_draw.add_argument("-o", "--output", required=True, help="out.svg or out.png")
    p_draw.add_argument("--arch", default="sm_90a")
    p_draw.add_argument(
        "--rows", metavar="A:B", help="only rows A:B of the tile (half-open, like a Python slice)"
    )
    p_draw.add_argument(
        "--cols",
        metavar="C:D",
        help="only columns C:D (default: the columns that fit in about 2000 px; the picture "
        "and the printed line say what was cut; negative ends as --cols=-16:)",
    )
    p_draw.add_argument(
        "--warp",
        type=int,
        metavar="N",
        help="only warp N's threads: other cells blank, cropped to warp N's cells",
    )
    args = parser.parse_args(argv)

    from .errors import DispatchError, VariantError
    from .targets import TargetError

    try:
        if args.command in (None, "demo"):
            return demo(getattr(args, "arch", "sm_90a"))
        if args.command == "variants":
            return variants()
        if args.command == "explain":
            return _explain(
                args.program, args.arch, args.json, args.ptxas, args.overview, args.cost,
                args.machine,
            )  # fmt: skip
        if args.command == "lower":
            return _lower(args.program, args.emit, args.arch, args.strict)
        if args.command == "sim":
            return _sim(args.program, args.arch, args.seed, args.check, args.compare)
        if args.command == "run":
            return _run(args.program)
        if args.command == "draw":
            return _draw(
                args.program, args.call, args.output, args.arch, args.rows, args.cols, args.warp
            )
    except CliError as err:
        print(f"tirx-dispatch: {err}", file=sys.stderr)
        return err.code
    except (DispatchError, VariantError) as err:
        print(f"tirx-dispatch: {err}", file=sys.stderr)
        return EXIT_LOWERING
    except TargetError as err:
        print(f"tirx-dispatch: {err}", file=sys.stderr)
        return EXIT_USAGE
    except Exception as err:
        if not _from_tvm(err):
            raise  # a bug of ours: its traceback is what a report needs
        print(f"tirx-dispatch: TVM failed: {_tvm_summary(err)}", file=sys.stderr)
        return EXIT_LOWERING
    parser.print_usage(sys.stderr)
    return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
