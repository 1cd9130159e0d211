"""The ``tirx-dispatch`` command line: each command on the examples, and its exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from programs import COPY
from tirx_cuda_dispatch.__main__ import (
    EXIT_LOWERING,
    EXIT_OK,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
    main,
)
from tirx_cuda_dispatch.runtime import gpu_arch

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
LDSM = str(EXAMPLES / "copy_ldstmatrix.py")


def test_explain_prints_each_call_with_variant_plan_and_reasons(capsys):
    assert main(["explain", LDSM]) == EXIT_OK
    out = capsys.readouterr().out
    assert (
        'copy_ldstmatrix.py:52: Tx.warp.copy(R[full], A_smem[full], dispatch="ldstmatrix")' in out
    )
    assert "variant: ldstmatrix" in out and "num=2, trans=False, m_outer=1" in out
    # forced, so only ldstmatrix is asked; its plan says what the row-major tile costs
    assert (
        "bank_conflict=2" in out and "suggestion=a shared layout swizzled as Swizzle<1,3,3>" in out
    )


def test_explain_exits_3_when_a_call_cannot_be_lowered(tmp_path, capsys):
    """The report is printed either way; a call lowering would refuse (here a region past
    its buffer) makes the exit status 3, naming the call; the control (in bounds) 0."""
    bad, good = tmp_path / "bad.py", tmp_path / "good.py"
    bad.write_text(COPY.format(rows=16))
    good.write_text(COPY.format(rows=32))
    assert main(["explain", str(bad)]) == EXIT_LOWERING
    captured = capsys.readouterr()
    assert "region out of bounds" in captured.out
    assert "1 call(s) cannot be lowered: [0] at " in captured.err
    assert main(["explain", str(good)]) == EXIT_OK


def test_explain_overview_prints_the_kernel_in_one_screen(capsys):
    """--overview: the counts, then one line per call (the full report has a block each)."""
    assert main(["explain", LDSM, "--overview"]) == EXIT_OK
    out = capsys.readouterr().out
    assert "tile-primitive calls," in out and "] warp.copy -> ldstmatrix: R[" in out
    assert "variant: ldstmatrix" not in out  # the full report's line is not there


def test_explain_json(capsys):
    assert main(["explain", f"{LDSM}:kernel", "--json"]) == EXIT_OK
    report = json.loads(capsys.readouterr().out)
    assert report["program"] == "kernel"
    assert [c["variant"] for c in report["calls"]] == ["ldstmatrix", "ldstmatrix"]
    assert [c["plan"]["direction"] for c in report["calls"]] == ["ld", "st"]


@pytest.mark.parametrize(
    "emit, expected",
    [
        ("tir", "T.ptx.ldmatrix("),
        ("cuda", "tvm_builtin_ptx_ldmatrix_sync_aligned_m8n8_x2_shared_b16("),
        ("ptx", "ldmatrix.sync.aligned.m8n8.x2.shared.b16"),
        ("sass", "LDSM.16.M88.2"),
    ],
)
def test_lower_emits_each_form(emit, expected, capsys):
    assert main(["lower", LDSM, "--emit", emit]) == EXIT_OK
    assert expected in capsys.readouterr().out


def test_strict_lowering_failure_exits_3_with_every_reason(capsys):
    code = main(["lower", str(EXAMPLES / "tcgen05_ldst.py"), "--strict", "--arch", "sm_90a"])
    assert code == EXIT_LOWERING
    err = capsys.readouterr().err
    assert "no tirx_cuda_dispatch variant accepts this call (strict mode)" in err
    assert "tcgen05_ldst   declined: target sm_90a is not Blackwell" in err


@pytest.mark.parametrize(
    "argv, message",
    [
        (["explain", "no/such/file.py"], "no such file: no/such/file.py"),
        (["explain", f"{LDSM}:nope"], "has no PrimFunc or IRModule named nope (found: kernel)"),
        (["draw", LDSM, "--call", "7", "-o", "x.svg"], "--call 7: the program has 2"),
        (["run", f"{LDSM}:no_check"], "has no no_check() check to run"),
    ],
)
def test_usage_errors_exit_2_and_say_why(argv, message, capsys):
    assert main(argv) == EXIT_USAGE
    assert message in capsys.readouterr().err


def test_a_file_with_several_programs_needs_a_name(tmp_path, capsys):
    src = (
        "from tvm.script import tirx as T\n"
        "@T.prim_func\ndef a(A: T.Buffer((4,), 'float32')):\n    A[0] = T.float32(1)\n"
        "@T.prim_func\ndef b(A: T.Buffer((4,), 'float32')):\n    A[0] = T.float32(2)\n"
    )
    path = tmp_path / "two.py"
    path.write_text(src)
    assert main(["explain", str(path)]) == EXIT_USAGE
    assert "defines 2 PrimFuncs/IRModules (a, b); name one" in capsys.readouterr().err


def test_run_says_where_the_check_ran(capsys):
    code = main(["run", str(EXAMPLES / "copy_reg.py")])
    out = capsys.readouterr().out
    if gpu_arch() is None:
        assert code == EXIT_UNAVAILABLE
        assert "no CUDA GPU here" in out and "tirx_cuda_dispatch.sim" in out
    else:
        assert code == EXIT_OK and "on the GPU" in out and "exact" in out


def test_draw_writes_an_svg(tmp_path, capsys):
    out = tmp_path / "ldsm.svg"
    assert main(["draw", LDSM, "--call", "0", "-o", str(out)]) == EXIT_OK
    svg = out.read_text()
    assert svg.startswith("<svg") and svg.count("<rect") == 1 + 8 * 16  # background + cells
    assert "ldmatrix.sync.aligned.m8n8.x2.shared.b16" in svg
    assert "worst bank conflict 2-way" in capsys.readouterr().out


def test_draw_a_call_without_memory_accesses_exits_4(tmp_path, capsys):
    code = main(["draw", str(EXAMPLES / "elementwise_reg.py"), "--call", "2", "-o", "x.svg"])
    assert code == EXIT_UNAVAILABLE
    assert "has no memory_accesses()" in capsys.readouterr().err


def test_draw_rejects_other_suffixes(tmp_path, capsys):
    code = main(["draw", LDSM, "-o", str(tmp_path / "x.pdf")])
    assert code == EXIT_UNAVAILABLE
    assert "must end in .svg or .png" in capsys.readouterr().err


# -- errors users make: one clear line of reasons, the documented exit code, no traceback ----
MIXED = """
from tvm.script import tirx as T
from tvm.script.tirx import tile as Tx
from tvm.tirx.layout import S, TileLayout

@T.prim_func
def kernel(A_ptr: T.handle):
    A = T.match_buffer(A_ptr, ({rows}, 32), "float32")
    T.device_entry()
    T.cta_id([1])
    T.warp_id([1])
    T.lane_id([32])
    T.thread_id([32])
    A_s = T.alloc_buffer((32, 32), "{s_dtype}", scope="shared", layout=TileLayout(S[(32, 32)]))
    Tx.warp.copy(A_s[:, :], A[0:32, :])
"""


def _program(tmp_path, rows=32, s_dtype="float32"):
    path = tmp_path / f"prog_{rows}_{s_dtype}.py"
    path.write_text(MIXED.format(rows=rows, s_dtype=s_dtype))
    return str(path)


@pytest.mark.parametrize("strict", [[], ["--strict"]], ids=["default", "strict"])
def test_a_call_nobody_can_lower_exits_3_without_a_traceback(tmp_path, strict, capsys):
    code = main(["lower", _program(tmp_path, s_dtype="float16"), *strict])
    err = capsys.readouterr().err
    assert code == EXIT_LOWERING
    assert "dtype mismatch: dst A_s is float16, src A is float32" in err
    assert "Traceback" not in err and "+---" not in err


def test_an_out_of_bounds_region_exits_3_naming_buffer_axis_and_line(tmp_path, capsys):
    code = main(["lower", _program(tmp_path, rows=16)])
    err = capsys.readouterr().err
    assert code == EXIT_LOWERING
    assert "region out of bounds at" in err and "prog_16_float32.py:15" in err
    assert "A[0:32, 0:32]: axis 0 runs 0:32, outside the extent 16 of A" in err
    # negative control: the in-bounds twin lowers
    assert main(["lower", _program(tmp_path, rows=32)]) == EXIT_OK


@pytest.mark.parametrize(
    "option, message",
    [
        (["--arch", "90a"], "unknown CUDA arch '90a' (write sm_90a)"),
        (["--arch", "sm_9O"], "unknown CUDA arch 'sm_9O'"),
        (["--arch", "llvm"], "unknown CUDA arch 'llvm'"),
        (["--target", "{bad"], "not valid JSON"),
    ],
)
@pytest.mark.parametrize("command", ["explain", "lower"])
def test_bad_targets_are_usage_errors(command, option, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        main([command, LDSM, *option])
    assert exit_.value.code == EXIT_USAGE
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_target_accepts_every_form_explain_takes(capsys):
    for form in ("sm_90a", '{"kind": "cuda", "arch": "sm_90a"}'):
        assert main(["explain", LDSM, "--target", form]) == EXIT_OK
        assert "variant: ldstmatrix" in capsys.readouterr().out
    # for llvm nothing lowers them: the report, and exit 3 (a script can tell)
    assert main(["explain", LDSM, "--target", "llvm"]) == EXIT_LOWERING
    captured = capsys.readouterr()
    assert "target is llvm, needs cuda" in captured.out
    assert "2 call(s) cannot be lowered: [0] at " in captured.err


def test_explain_cost_prints_the_kernel_view_and_an_unknown_machine_is_a_usage_error(capsys):
    """--cost: the overview, then the kernel's predicted time, what bounds it, its
    occupancy and each call's demand; --json carries the same figures; a machine the
    model has no facts for exits 2 naming the known ones."""
    rmsnorm = str(EXAMPLES / "rmsnorm.py")
    assert main(["explain", rmsnorm, "--cost"]) == EXIT_OK
    out = capsys.readouterr().out
    assert "tile-primitive calls," in out  # the overview
    assert "kernel cost on H200 (132 SMs" in out and ", bound by " in out
    assert "CTAs per SM (limited by" in out and "phases (a CTA runs them" in out
    assert main(["explain", rmsnorm, "--cost", "--machine", "H100", "--json"]) == EXIT_OK
    doc = json.loads(capsys.readouterr().out)
    assert doc["cost"]["machine"] == "H100" and doc["cost"]["predicted_us"] > 0
    assert doc["cost"]["bound"] in doc["cost"]["bounds_us"]
    assert main(["explain", rmsnorm, "--cost", "--machine", "B300"]) == EXIT_USAGE
    assert "no machine facts for 'B300'; known: H200, H100" in capsys.readouterr().err
