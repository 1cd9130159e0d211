"""``tirx-dispatch sim``: the kernel in the CPU simulator from the command line."""

from __future__ import annotations

import pytest

from programs import COPY, HEAD
from tirx_cuda_dispatch.__main__ import (
    EXIT_FAILED,
    EXIT_FAULT,
    EXIT_LOWERING,
    EXIT_OK,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
    main,
)

# Warps 1..3 write their rows of the shared tile; warp 0 then reads all of it with no
# barrier in between: a race the simulator reports, in the second call.
RACE = (
    HEAD
    + """
@T.prim_func
def kernel(A_ptr: T.handle, B_ptr: T.handle):
    A = T.match_buffer(A_ptr, (32, 32), "float32")
    B = T.match_buffer(B_ptr, (32, 32), "float32")
    T.device_entry()
    T.cta_id([1])
    w = T.warp_id([4])
    T.lane_id([32])
    T.thread_id([128])
    A_s = T.alloc_buffer((32, 32), "float32", scope="shared", layout=TileLayout(S[(32, 32)]))
    Tx.warp.copy(A_s[w * 8 : w * 8 + 8, :], A[w * 8 : w * 8 + 8, :])
    if w == 0:
        Tx.warp.copy(B[:, :], A_s[:, :])
"""
)

# The row offset comes from memory: no analyzer bounds it, the random index runs past A.
INDIRECT = (
    HEAD
    + """
@T.prim_func
def kernel(A_ptr: T.handle, I_ptr: T.handle, B_ptr: T.handle):
    A = T.match_buffer(A_ptr, (64, 32), "float32")
    I = T.match_buffer(I_ptr, (1,), "int32")
    B = T.match_buffer(B_ptr, (32, 32), "float32")
    T.device_entry()
    T.cta_id([1])
    T.warp_id([1])
    T.lane_id([32])
    T.thread_id([32])
    A_s = T.alloc_buffer((32, 32), "float32", scope="shared", layout=TileLayout(S[(32, 32)]))
    row = T.meta_var(I[0])
    Tx.warp.copy(A_s[:, :], A[row : row + 32, :])
    T.cuda.cta_sync()
    Tx.warp.copy(B[:, :], A_s[:, :])
"""
)


def _file(tmp_path, text, name="prog.py"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_a_good_program_prints_counters_per_call(tmp_path, capsys):
    assert main(["sim", _file(tmp_path, COPY.format(rows=32))]) == EXIT_OK
    out = capsys.readouterr().out
    assert "[0] Tx.warp.copy -> gmem_smem, at " in out
    assert "warp instructions: ld.global.b128 x8, st.shared.b128 x8" in out
    assert "bytes: global.load 4096 B, shared.store 4096 B" in out
    assert "1-way x8 (worst 1-way)" in out
    assert "A: unchanged" in out and "B: written" in out


def test_check_and_compare(tmp_path, capsys):
    path = _file(tmp_path, COPY.format(rows=32))
    assert main(["sim", path, "--check", "right", "--compare", "builtin"]) == EXIT_OK
    out = capsys.readouterr().out
    assert "--check right: ok" in out
    assert "every array equals TVM's built-in lowering bit for bit" in out
    # negative control: a check that the outputs fail
    assert main(["sim", path, "--check", "wrong"]) == EXIT_FAILED
    assert "--check wrong: wrong result: B is not A + 1" in capsys.readouterr().out
    assert main(["sim", path, "--check", "nope"]) == EXIT_USAGE


def test_a_region_out_of_bounds_is_a_lowering_error(tmp_path, capsys):
    assert main(["sim", _file(tmp_path, COPY.format(rows=16))]) == EXIT_LOWERING
    err = capsys.readouterr().err
    assert "region out of bounds" in err and "Traceback" not in err


def test_a_race_names_the_call_and_line(tmp_path, capsys):
    assert main(["sim", _file(tmp_path, RACE)]) == EXIT_FAULT
    err = capsys.readouterr().err
    assert "the simulator found a fault: in call [1] Tx.warp.copy at " in err
    assert "prog.py:19: Tx.warp.copy(B[:, :], A_s[:, :])" in err and "race" in err.lower()
    assert "Traceback" not in err


def test_an_unprovable_region_that_runs_past_its_buffer_faults_in_its_call(tmp_path, capsys):
    from tirx_cuda_dispatch.bounds import BoundsNotProvedWarning

    with pytest.warns(BoundsNotProvedWarning, match="region not proved in bounds"):
        assert main(["sim", _file(tmp_path, INDIRECT)]) == EXIT_FAULT
    err = capsys.readouterr().err
    assert "in call [0] Tx.warp.copy at " in err and "out of bounds" in err


def test_a_scalar_parameter_is_not_available(tmp_path, capsys):
    text = (
        HEAD
        + """
@T.prim_func
def kernel(A_ptr: T.handle, n: T.int32):
    A = T.match_buffer(A_ptr, (32,), "float32")
    T.device_entry()
    T.cta_id([1])
    T.warp_id([1])
    T.lane_id([32])
    T.thread_id([32])
    A[0] = T.float32(1)
"""
    )
    assert main(["sim", _file(tmp_path, text)]) == EXIT_UNAVAILABLE
    assert "parameter n is a scalar" in capsys.readouterr().err


@pytest.mark.parametrize("arch", ["90a", "sm_9O"])
def test_bad_arch_is_usage(tmp_path, arch, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["sim", _file(tmp_path, COPY.format(rows=32)), "--arch", arch])
    assert exit_.value.code == EXIT_USAGE


SHARED_SUM = (
    HEAD
    + """
@T.prim_func
def kernel(A_ptr: T.handle, B_ptr: T.handle):
    A = T.match_buffer(A_ptr, (8, 64), "float32")
    B = T.match_buffer(B_ptr, (8, 1), "float32")
    T.device_entry()
    T.cta_id([1])
    T.thread_id([128])
    A_s = T.alloc_buffer((8, 64), "float32", scope="shared", layout=TileLayout(S[(8, 64)]))
    B_s = T.alloc_buffer((8, 1), "float32", scope="shared", layout=TileLayout(S[(8, 1)]))
    Tx.cta.copy(A_s[:, :], A[:, :])
    T.cuda.cta_sync()
    Tx.cta.sum(B_s[:, :], A_s[:, :], axes=[-1])
    T.cuda.cta_sync()
    Tx.cta.copy(B[:, :], B_s[:, :])
"""
)


def test_compare_with_a_program_tvm_cannot_lower_prints_tvms_reason(tmp_path, capsys):
    """TVM 0.27 lowers no shared-memory reduction: --compare builtin says so with TVM's
    reasons per variant (not its table, not a line of carets) and exits 3."""
    path = _file(tmp_path, SHARED_SUM)
    assert main(["sim", path, "--compare", "builtin"]) == EXIT_LOWERING
    out = capsys.readouterr().out
    assert "--compare builtin: TVM's own pipeline cannot lower it: RuntimeError: " in out
    assert "dispatch failed: op=tirx.tile.sum" in out and "packed_add_sum (prio=20): " in out
    assert "^^^^" not in out and "tirx_cuda_dispatch bridge" not in out
    assert main(["sim", path]) == EXIT_OK  # the control: ours lowers and runs it


def test_tvms_summary_skips_carets_and_the_module_dump():
    from tirx_cuda_dispatch.__main__ import _tvm_summary

    err = RuntimeError("Traceback:\n  ValueError: the real reason\n  ^^^^^^^^\n")
    assert _tvm_summary(err) == "RuntimeError: ValueError: the real reason"
    dumped = RuntimeError("Check failed: x == y\nError in pass: p\n@T.prim_func\n  ^^^^\n")
    assert _tvm_summary(dumped) == "RuntimeError: Check failed: x == y"
