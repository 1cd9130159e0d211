"""The ``tirx-dispatch`` command line: each command on the examples, and its exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

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
