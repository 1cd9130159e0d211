"""copy -> local: register -> register copies at thread scope (plans, declines, exact element
mapping, emitted code, simulator and GPU round trips)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from tvm.script import tirx as T
from tvm.script.tirx import tile as Tx
from tvm.tirx.layout import Axis, S, TileLayout

import tirx_cuda_dispatch as tcd
from executors import WHERE, execute
from tirx_cuda_dispatch import runtime, toolchain


def swap_halves(
    dtype: str = "float32",
    shape=(8,),
    r_layout=None,
    q_layout=None,
    config=None,
    dispatch=None,
):
    """Each of 32 threads loads its row of A into registers R, copies R's two halves (along
    the last axis) swapped into registers Q register->register (``dispatch=`` and ``config``
    on those two copies), and stores Q to B's row."""
    n = shape[-1]
    h = n // 2
    r_layout = r_layout or TileLayout(S[shape])
    q_layout = q_layout or TileLayout(S[shape])
    config = config or {}
    full = (32, *shape)

    @T.prim_func
    def kernel(A_ptr: T.handle, B_ptr: T.handle):
        A = T.match_buffer(A_ptr, full, dtype)
        B = T.match_buffer(B_ptr, full, dtype)
        T.device_entry()
        T.cta_id([1])
        T.warp_id([1])
        T.lane_id([32])
        tx = T.thread_id([32])
        R = T.alloc_buffer(shape, dtype, scope="local", layout=r_layout)
        Q = T.alloc_buffer(shape, dtype, scope="local", layout=q_layout)
        if len(shape) == 1:
            Tx.thread.copy(R[:], A[tx, :])
            Tx.thread.copy(Q[0:h], R[h:n], dispatch=dispatch, **config)
            Tx.thread.copy(Q[h:n], R[0:h], dispatch=dispatch, **config)
            Tx.thread.copy(B[tx, :], Q[:])
        else:
            Tx.thread.copy(R[:, :], A[tx, :, :])
            Tx.thread.copy(Q[:, 0:h], R[:, h:n], dispatch=dispatch, **config)
            Tx.thread.copy(Q[:, h:n], R[:, 0:h], dispatch=dispatch, **config)
            Tx.thread.copy(B[tx, :, :], Q[:, :])

    return kernel


def one_element(dtype: str = "float32"):
    """``Tx.thread.copy(Q[2:3], s[:])``: one register of a one-element array into Q[2]."""

    @T.prim_func
    def kernel(A_ptr: T.handle, B_ptr: T.handle):
        A = T.match_buffer(A_ptr, (32, 4), dtype)
        B = T.match_buffer(B_ptr, (32, 4), dtype)
        T.device_entry()
        T.cta_id([1])
        T.warp_id([1])
        T.lane_id([32])
        tx = T.thread_id([32])
        s = T.alloc_buffer((1,), dtype, scope="local", layout=TileLayout(S[1]))
        Q = T.alloc_buffer((4,), dtype, scope="local", layout=TileLayout(S[4]))
        Tx.thread.copy(Q[:], A[tx, :])
        Tx.thread.copy(s[:], A[tx, 0:1])
        Tx.thread.copy(Q[2:3], s[:])
        Tx.thread.copy(B[tx, :], Q[:])

    return kernel


def thread_indexed(n: int = 128):
    """Q = R[tx*4 : tx*4+4]: a register array indexed by the thread (negative control)."""

    @T.prim_func
    def kernel(A_ptr: T.handle, B_ptr: T.handle):
        A = T.match_buffer(A_ptr, (32, n), "float32")
        B = T.match_buffer(B_ptr, (32, 4), "float32")
        T.device_entry()
        T.cta_id([1])
        T.warp_id([1])
        T.lane_id([32])
        tx = T.thread_id([32])
        R = T.alloc_buffer((n,), "float32", scope="local", layout=TileLayout(S[n]))
        Q = T.alloc_buffer((4,), "float32", scope="local", layout=TileLayout(S[4]))
        Tx.thread.copy(R[:], A[tx, :])
        Tx.thread.copy(Q[:], R[tx * 4 : tx * 4 + 4])
        Tx.thread.copy(B[tx, :], Q[:])

    return kernel


def _local_reports(func):
    """The reports of the register->register calls, in program order."""
    reports = tcd.explain(func, "sm_90a")
    return [r for r in reports if all(o["scope"] == "local" for o in r.operands)]


def _expected_swap(a: np.ndarray) -> np.ndarray:
    h = a.shape[-1] // 2
    return np.concatenate([a[..., h:], a[..., :h]], axis=-1)


COLUMN_MAJOR_4x8 = TileLayout(S[(4, 8) : (1, 4)])
CASES = {
    "f32x8": dict(dtype="float32", shape=(8,)),
    "f16x16": dict(dtype="float16", shape=(16,)),
    "f16x6": dict(dtype="float16", shape=(6,)),
    "i8x64": dict(dtype="int8", shape=(64,)),
    "f64x4": dict(dtype="float64", shape=(4,)),
    "bf16-4x16": dict(dtype="bfloat16", shape=(4, 16)),
    "f32-4x8-colmajor": dict(dtype="float32", shape=(4, 8), q_layout=COLUMN_MAJOR_4x8),
}


# -- plans ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "case, copies, word_bits",
    [
        ("f32x8", 4, 32),
        ("f16x16", 4, 32),  # two float16 per register
        ("f16x6", 3, 16),  # halves of 3: odd runs, element by element
        ("i8x64", 8, 32),  # four int8 per register
        ("f64x4", 2, 64),
        ("bf16-4x16", 16, 32),
        ("f32-4x8-colmajor", 16, 32),
    ],
)
def test_plan_copies_whole_registers_where_aligned(case, copies, word_bits):
    for report in _local_reports(swap_halves(**CASES[case])):
        assert report.variant == "local"
        assert (report.plan["copies"], report.plan["word_bits"]) == (copies, word_bits)
        assert report.plan["constant_indices"] is True


def test_a_narrower_word_says_why():
    [plan, _] = [r.plan for r in _local_reports(swap_halves(**CASES["f16x6"]))]
    assert plan["narrower_because"] == "32-bit: contiguous run of 3 elements is not a multiple of 2"


@pytest.mark.parametrize("case", list(CASES))
def test_plan_moves_every_element_once_to_its_place(case):
    """The plan's (dst, src) offsets against the layouts applied to the logical index."""
    shape = CASES[case]["shape"]
    n, h = shape[-1], shape[-1] // 2
    q = CASES[case].get("q_layout") or TileLayout(S[shape])
    r = TileLayout(S[shape])
    rows = shape[0] if len(shape) == 2 else 1
    for which, report in enumerate(_local_reports(swap_halves(**CASES[case]))):
        p = report.plan_object
        moved = [(d + k, s + k) for d, s in p.pairs() for k in range(p.per_word)]
        dst_cols, src_cols = ((0, h), (h, n)) if which == 0 else ((h, n), (0, h))
        expected = [
            (int(q.apply(i * n + dst_cols[0] + c)["m"]), int(r.apply(i * n + src_cols[0] + c)["m"]))
            for i in range(rows)
            for c in range(h)
        ]
        assert sorted(moved) == sorted(expected)


def test_one_element_into_the_middle_of_an_array():
    report = _local_reports(one_element())[-1]
    assert report.plan_object.pairs() == [(2, 0)]


def test_a_region_start_that_depends_on_the_thread_is_said():
    [report] = _local_reports(thread_indexed())
    assert report.plan["constant_indices"] is False
    assert "indices depend on the region starts" in str(report.plan_object)


# -- declines -------------------------------------------------------------------------------
def _reason(func, index):
    report = tcd.explain(func, "sm_90a")[index]
    [cand] = [c for c in report.candidates if c.variant == "local"]
    return report.variant, cand.reason


def test_declines_a_cache_hint():
    variant, reason = _reason(swap_halves(config={"cache": "nc"}), 1)
    assert variant != "local"
    assert reason == "config cache=nc has no meaning for a register->register copy"
    assert _reason(swap_halves(), 1) == ("local", None)  # negative control


def test_declines_a_layout_with_thread_axes():
    @T.prim_func
    def kernel(A_ptr: T.handle):
        A = T.match_buffer(A_ptr, (32, 8), "float32")
        T.device_entry()
        T.cta_id([1])
        T.warp_id([1])
        T.lane_id([32])
        T.thread_id([32])
        R = T.alloc_buffer(
            (32, 8), "float32", scope="local", layout=TileLayout(S[(32, 8) : (1 @ Axis.laneid, 1)])
        )
        Q = T.alloc_buffer(
            (32, 8), "float32", scope="local", layout=TileLayout(S[(32, 8) : (1 @ Axis.laneid, 1)])
        )
        Tx.warp.copy(R[:, :], A[:, :])
        Tx.thread.copy(Q[:, :], R[:, :])

    variant, reason = _reason(kernel, 1)
    assert variant != "local"
    assert reason == (
        "dst Q's layout names thread axes ['laneid']; a thread's register copy needs layouts "
        "over its own registers only"
    )


def test_declines_scopes_wider_than_a_thread():
    @T.prim_func
    def kernel():
        T.device_entry()
        T.cta_id([1])
        T.warp_id([1])
        T.lane_id([32])
        T.thread_id([32])
        R = T.alloc_buffer((8,), "float32", scope="local", layout=TileLayout(S[8]))
        Q = T.alloc_buffer((8,), "float32", scope="local", layout=TileLayout(S[8]))
        Tx.warp.copy(Q[:], R[:])

    assert _reason(kernel, 0)[1] == "scope is warp, needs one of thread"


def test_declines_a_global_operand():
    report = tcd.explain(swap_halves(), "sm_90a")[0]  # global -> registers is copy -> reg's
    [cand] = [c for c in report.candidates if c.variant == "local"]
    assert (
        cand.reason == ("src A is global and dst R is local; needs local->local")
        and report.variant == "reg"
    )


# -- emitted code ---------------------------------------------------------------------------
def _sass_ops(func, pipeline):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # TVM's fallback warns that it is scalar
        return toolchain.opcodes(toolchain.kernel_sass(func, "sm_90a", pipeline))


def test_copies_are_unrolled_with_constant_indices():
    src = toolchain.cuda_source(swap_halves("float16", (16,)), "sm_90a", tcd.STRICT_PIPELINE)
    kernel = src[src.rindex('extern "C" __global__') :]
    assert "((uint*)Q_ptr)[0] = ((uint*)R_ptr)[4];" in kernel
    assert "((uint*)Q_ptr)[7] = ((uint*)R_ptr)[3];" in kernel
    assert kernel.count("for (") == 2  # the load and store rounds of copy -> reg only


@pytest.mark.parametrize("case", list(CASES))
def test_sass_keeps_registers_and_is_no_longer_than_the_builtin(case):
    """TVM 0.27 lowers these copies with its scalar fallback (the only built-in variant
    that takes local -> local); forced here so that every other call is lowered alike."""
    ours = _sass_ops(swap_halves(**CASES[case]), tcd.STRICT_PIPELINE)
    builtin = _sass_ops(swap_halves(**CASES[case], dispatch="fallback"), tcd.PIPELINE)
    assert not any(op.startswith(("LDL", "STL")) for op in ours), ours
    count = lambda ops: sum(v for k, v in ops.items() if k != "NOP")  # noqa: E731
    assert count(ours) <= count(builtin), (ours, builtin)


def test_a_thread_indexed_register_array_goes_to_local_memory():
    """Negative control of the check above: an index the compiler cannot fold puts the
    array in local memory (LDL/STL), in both pipelines."""
    for pipeline in (tcd.STRICT_PIPELINE, "tirx"):
        ops = _sass_ops(thread_indexed(), pipeline)
        assert any(op.startswith(("LDL", "STL")) for op in ops), ops


# -- round trips ----------------------------------------------------------------------------
@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("case", list(CASES))
def test_roundtrip(case, rng, where, gpu):
    func = swap_halves(**CASES[case])
    a = runtime.random_array((32, *CASES[case]["shape"]), CASES[case]["dtype"], rng)
    _, out = execute(func, [a, runtime.poison_like(a)], where, gpu, tcd.STRICT_PIPELINE)
    np.testing.assert_array_equal(runtime.bits(out), runtime.bits(_expected_swap(a)))


@pytest.mark.parametrize("where", WHERE)
def test_roundtrip_one_element_and_thread_indexed(rng, where, gpu):
    a = runtime.random_array((32, 4), "float32", rng)
    _, out = execute(one_element(), [a, runtime.poison_like(a)], where, gpu, tcd.STRICT_PIPELINE)
    expected = a.copy()
    expected[:, 2] = a[:, 0]
    np.testing.assert_array_equal(runtime.bits(out), runtime.bits(expected))
    a = runtime.random_array((32, 128), "float32", rng)
    b = runtime.poison_like(np.zeros((32, 4), np.float32))
    _, out = execute(thread_indexed(), [a, b], where, gpu, tcd.STRICT_PIPELINE)
    expected = np.stack([a[t, 4 * t : 4 * t + 4] for t in range(32)])
    np.testing.assert_array_equal(runtime.bits(out), runtime.bits(expected))


def test_the_builtin_lowering_agrees(rng):
    """TVM's built-in pipeline handles these copies too (its scalar fallback): same bits."""
    func = swap_halves(**CASES["bf16-4x16"])
    a = runtime.random_array((32, 4, 16), "bfloat16", rng)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _, out = execute(func, [a, runtime.poison_like(a)], "sim", None, "tirx")
    np.testing.assert_array_equal(runtime.bits(out), runtime.bits(_expected_swap(a)))
