"""Which threads execute a call: scopes narrowed by an if, and ifs that leave threads out."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm.script import tirx as T
from tvm.script.tirx import tile as Tx
from tvm.tirx.layout import Axis, S, TileLayout

import tirx_cuda_dispatch as tcd
from executors import WHERE, execute
from tirx_cuda_dispatch import demos, runtime
from tirx_cuda_dispatch.participation import DivergentScopeError

ROWS, COLS = 24, 40  # 960 float32: no thread count below divides it into 128-bit vectors evenly


def guarded_roundtrip(guard: str, scope: str, threads: int, op: str = "copy"):
    """A -> shared -> B, each copy (and the optional op on the shared tile) at ``scope``
    under the ``if`` named by ``guard``; a CTA of ``threads`` threads (one scope instance
    reaches the calls, so the tiles are not raced for). The calls split the tile alike, so
    each thread reads back what it wrote and no barrier is needed (a CTA barrier under the
    if would be a divergent one)."""
    copy, sqrt = getattr(Tx, scope).copy, getattr(Tx, scope).sqrt
    warps = threads // 32

    # fmt: off
    @T.prim_func
    def kernel(A_ptr: T.handle, B_ptr: T.handle):
        A = T.match_buffer(A_ptr, (ROWS, COLS), "float32")
        B = T.match_buffer(B_ptr, (ROWS, COLS), "float32")
        T.device_entry()
        T.cta_id([1])
        if warps >= 4:
            T.warpgroup_id([warps // 4])
            wid = T.warp_id_in_wg([4])
        warp = T.warp_id([warps])
        lane = T.lane_id([32])
        tid = T.thread_id([threads])
        S_ = T.alloc_buffer((ROWS, COLS), "float32", scope="shared", layout=TileLayout(S[(ROWS, COLS)]))
        if guard == "lane < 16":
            if lane < 16:
                copy(S_[:, :], A[:, :])
                if op == "sqrt":
                    sqrt(S_[:, :], S_[:, :])
                copy(B[:, :], S_[:, :])
        elif guard == "lane >= 8":
            if lane >= 8:
                copy(S_[:, :], A[:, :])
                copy(B[:, :], S_[:, :])
        elif guard == "warp < 2":
            if warp < 2:
                copy(S_[:, :], A[:, :])
                copy(B[:, :], S_[:, :])
        elif guard == "wid < 2":
            if wid < 2:
                copy(S_[:, :], A[:, :])
                copy(B[:, :], S_[:, :])
        elif guard == "warp == 1 and lane >= 16":
            if warp == 1:
                if lane >= 16:
                    copy(S_[:, :], A[:, :])
                    copy(B[:, :], S_[:, :])
        elif guard == "warp == 0":  # uniform over the warp: the whole warp takes part
            if warp == 0:
                copy(S_[:, :], A[:, :])
                copy(B[:, :], S_[:, :])
        elif guard == "lane % 2 == 0":
            if lane % 2 == 0:
                copy(S_[:, :], A[:, :])
        elif guard == "tid < 100":
            if tid < 100:
                copy(S_[:, :], A[:, :])
        elif guard == "A[0, lane] > 0":
            if A[0, lane] > T.float32(0):
                copy(S_[:, :], A[:, :])
        elif guard == "R[0] > 0":  # a register of each thread's own, stored twice
            R = T.alloc_buffer((1,), "float32", scope="local")
            R[0] = T.float32(0)
            R[0] = A[0, lane]
            if R[0] > T.float32(0):
                copy(S_[:, :], A[:, :])
        elif guard == "R[0] > 0 after a copy":  # stored once, then a tile primitive writes it
            R = T.alloc_buffer((1,), "float32", scope="local")
            R[0] = T.float32(0)
            Tx.thread.copy(R[0:1], A[0, lane : lane + 1])
            if R[0] > T.float32(0):
                copy(S_[:, :], A[:, :])
        elif guard == "U[0] == 0 after a mov":  # stored once, then an intrinsic writes it
            U = T.alloc_buffer((1,), "uint32", scope="local")
            U[0] = T.uint32(0)
            T.evaluate(T.ptx["mov.u32"](U[0], T.Cast("uint32", lane)))
            if U[0] == T.uint32(0):
                copy(S_[:, :], A[:, :])
        elif guard == "U[0] == 0":  # stored once, the same in every lane: read as its value
            U = T.alloc_buffer((1,), "int32", scope="local")
            U[0] = warp * 2
            if U[0] == 0:
                copy(S_[:, :], A[:, :])
                copy(B[:, :], S_[:, :])
        elif guard.startswith("any_sync"):  # a warp vote over the mask the guard names
            R = T.alloc_buffer((1,), "float32", scope="local")
            R[0] = A[0, lane]
            mask = T.meta_var(int(guard.split("(")[1].split(",")[0], 16))
            if T.cuda.any_sync(T.uint32(mask), R[0] > T.float32(0)) != 0:
                copy(S_[:, :], A[:, :])
                copy(B[:, :], S_[:, :])
        elif guard == "V[lane % 2] after two bar.red":  # each element a vote of its own
            V = T.alloc_buffer((2,), "uint32", scope="local")
            vote = T.meta_var(T.ptx.pred(A[0, tid] > T.float32(0)))
            T.evaluate(T.ptx["bar.red.or.pred"](V[0], T.uint32(1), T.uint32(128), vote))
            T.evaluate(T.ptx["bar.red.or.pred"](V[1], T.uint32(2), T.uint32(128), vote))
            if V[lane % 2] != T.uint32(0):
                copy(S_[:, :], A[:, :])
        elif guard.startswith("bar.red"):  # a barrier vote: bar.red(count) or bar.red(CTA)
            V = T.alloc_buffer((1,), "uint32", scope="local")
            if guard.endswith("stored too"):  # a store of the thread's own writes it too
                V[0] = T.Cast("uint32", lane)
            if guard.endswith("stored through an alias"):  # ... through another declaration
                W = T.decl_buffer((1,), "uint32", data=V.data, scope="local")
                W[0] = T.Cast("uint32", lane)
            vote = T.meta_var(T.ptx.pred(A[0, tid] > T.float32(0)))
            if guard.startswith("bar.red(CTA)"):  # no count: every thread of the CTA
                T.evaluate(T.ptx.bar.red.popc.u32(V[0], T.uint32(1), vote))
            elif guard.startswith("bar.red(128) not aligned"):  # warps may take part diverged
                T.evaluate(T.ptx["barrier.red.or.pred"](V[0], T.uint32(1), T.uint32(128), vote))
            else:
                count = T.meta_var(int(guard.split("(")[1].split(")")[0]))
                T.evaluate(T.ptx["bar.red.or.pred"](V[0], T.uint32(1), T.uint32(count), vote))
                if guard.endswith("and 256"):  # a second vote into it, of another count
                    T.evaluate(T.ptx["bar.red.or.pred"](V[0], T.uint32(2), T.uint32(256), vote))
            if V[0] != T.uint32(0):
                copy(S_[:, :], A[:, :])
                copy(B[:, :], S_[:, :])
    # fmt: on
    return kernel


NARROWED = [
    # guard, scope, CTA threads, participants
    ("lane < 16", "warp", 32, 16),
    ("lane >= 8", "warp", 32, 24),
    ("warp < 2", "cta", 128, 64),
    ("wid < 2", "warpgroup", 128, 64),
    ("lane < 16", "cta", 128, 64),  # 16 lanes of each of 4 warps
    ("warp == 1 and lane >= 16", "cta", 64, 16),
    ("warp == 0", "warp", 64, 32),
]


@pytest.mark.parametrize("guard, scope, threads, participants", NARROWED)
def test_narrowed_scope_splits_the_tile_among_the_threads_that_run(
    guard, scope, threads, participants
):
    reports = tcd.explain(guarded_roundtrip(guard, scope, threads))
    assert [r.variant for r in reports] == ["gmem_smem", "gmem_smem"]
    assert all(r.plan["threads"] == participants for r in reports)
    assert all(r.fallback is None and r.error is None for r in reports)


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("guard, scope, threads, participants", NARROWED)
def test_narrowed_round_trip_moves_every_element(
    guard, scope, threads, participants, rng, where, gpu
):
    func = guarded_roundtrip(guard, scope, threads)
    a = runtime.random_array((ROWS, COLS), "float32", rng)
    out = execute(func, [a, runtime.poison_like(a)], where, gpu, tcd.STRICT_PIPELINE)
    np.testing.assert_array_equal(runtime.bits(out[1]), runtime.bits(a))


@pytest.mark.parametrize("where", WHERE)
def test_narrowed_shared_elementwise(rng, where, gpu):
    func = guarded_roundtrip("lane < 16", "warp", 32, op="sqrt")
    [_, sqrt, _] = tcd.explain(func)
    assert sqrt.variant == "smem" and sqrt.plan["threads"] == 16
    a = np.abs(runtime.random_array((ROWS, COLS), "float32", rng)) + np.float32(0.5)
    out = execute(func, [a, runtime.poison_like(a)], where, gpu, tcd.STRICT_PIPELINE)
    np.testing.assert_array_equal(runtime.bits(out[1]), runtime.bits(np.sqrt(a)))


def test_participants_are_renumbered_from_zero():
    # warp 1, lanes 16..31: thread 48 is participant 0 (the masked round counts on it)
    [first, _] = tcd.explain(guarded_roundtrip("warp == 1 and lane >= 16", "cta", 64))
    assert first.call_object.participation.participants.lane == (16, 16)
    assert first.call_object.participation.participants.warp == (1, 1)


# -- ifs that leave threads out ------------------------------------------------------------
@pytest.mark.parametrize(
    "guard, scope, threads, witness",
    [
        ("lane % 2 == 0", "warp", 32, "thread 0 (warp 0, lane 0) runs it, thread 1"),
        ("tid < 100", "cta", 256, "thread 100 (warp 3, lane 4) does not"),
    ],
)
@pytest.mark.parametrize("pipeline", [tcd.PIPELINE, tcd.STRICT_PIPELINE])
def test_if_that_leaves_threads_out_is_an_error(guard, scope, threads, witness, pipeline):
    target = tvm.target.Target({"kind": "cuda", "arch": "sm_90a"})
    with pytest.raises(DivergentScopeError) as err:
        tvm.compile(guarded_roundtrip(guard, scope, threads), target=target, tir_pipeline=pipeline)
    msg = str(err.value)
    assert f"`if {guard}` leaves threads of the" in msg and witness in msg
    assert "test_participation.py:" in msg and "A scope can be narrowed to a range of" in msg
    assert "Traceback" not in msg


def test_explain_reports_the_divergence():
    [report] = tcd.explain(guarded_roundtrip("lane % 2 == 0", "warp", 32))
    assert report.variant is None and "leaves threads of the warp out" in report.error


def test_per_thread_data_test_is_declined_not_guessed():
    [report] = tcd.explain(guarded_roundtrip("A[0, lane] > 0", "warp", 32))
    assert report.error is None and report.variant is None
    [reason] = [c.reason for c in report.candidates if c.variant == "gmem_smem"]
    assert reason.startswith("cannot prove that every thread of the warp in lanes [0, 32) passes")


@pytest.mark.parametrize("guard", ["R[0] > 0", "R[0] > 0 after a copy", "U[0] == 0 after a mov"])
def test_a_test_of_a_register_value_is_declined(guard):
    """``if R[0] > 0`` on a register each lane loaded itself (TVM parses the load as a
    ``TensorLoad``): some lanes may skip the copy. Stored twice, it was taken as uniform
    before (the check knew ``BufferLoad`` only) and the copy's split moved part of the
    tile; stored once and then written by a tile primitive or by an intrinsic's
    destination (``mov.u32 U, lane``), it read as the stored 0."""
    report = tcd.explain(guarded_roundtrip(guard, "warp", 32))[-1]  # the warp's copy
    assert report.op == "copy" and report.scope == "warp"
    assert report.error is None and report.variant is None
    [reason] = [c.reason for c in report.candidates if c.variant == "gmem_smem"]
    assert "cannot prove that every thread of the warp in lanes [0, 32) passes `if " in reason
    assert guard.split()[0][0] in reason.split("passes `if ")[1][:2]  # R or U


@pytest.mark.parametrize("where", WHERE)
def test_a_register_stored_once_reads_as_its_value(rng, where, gpu):
    """Control: ``U[0] = warp * 2`` is the same in every lane of the warp, so ``if U[0] ==
    0`` is uniform and the warp's copies move the whole tile."""
    func = guarded_roundtrip("U[0] == 0", "warp", 32)
    assert [r.variant for r in tcd.explain(func)] == ["gmem_smem", "gmem_smem"]
    a = runtime.random_array((ROWS, COLS), "float32", rng)
    out = execute(func, [a, runtime.poison_like(a)], where, gpu, tcd.STRICT_PIPELINE)
    np.testing.assert_array_equal(runtime.bits(out[1]), runtime.bits(a))


@pytest.mark.parametrize("where", WHERE)
def test_a_full_mask_warp_vote_is_uniform_over_the_warp(rng, where, gpu):
    """``if any_sync(0xffffffff, R[0] > 0)``: every lane of the warp gets the same vote, so
    the warp's copies run on all 32 lanes or none; the round trip moves every element."""
    func = guarded_roundtrip("any_sync(ffffffff, R[0] > 0)", "warp", 32)
    assert [r.variant for r in tcd.explain(func)] == ["gmem_smem", "gmem_smem"]
    a = runtime.random_array((ROWS, COLS), "float32", rng)
    a[0, 5] = abs(a[0, 5]) + 1  # some lane votes yes
    out = execute(func, [a, runtime.poison_like(a)], where, gpu, tcd.STRICT_PIPELINE)
    np.testing.assert_array_equal(runtime.bits(out[1]), runtime.bits(a))


@pytest.mark.parametrize(
    "guard, scope, threads",
    [("any_sync(0000ffff, R[0] > 0)", "warp", 32), ("any_sync(ffffffff, R[0] > 0)", "cta", 64)],
    ids=["half-mask", "cta-scope"],
)
def test_a_vote_that_does_not_span_the_scope_is_declined(guard, scope, threads):
    """Controls: a vote over half the warp's lanes (the others' result is theirs), and a
    full-mask vote under a CTA-scope call (two warps may vote differently)."""
    [report, _] = tcd.explain(guarded_roundtrip(guard, scope, threads))
    assert report.variant is None
    [reason] = [c.reason for c in report.candidates if c.variant == "gmem_smem"]
    assert "cannot prove that every thread of the" in reason


@pytest.mark.parametrize(
    "guard, scope, threads",
    [("bar.red(128)", "warpgroup", 128), ("bar.red(CTA)", "cta", 256), ("bar.red(32)", "warp", 32)],
    ids=["warpgroup", "cta", "warp"],
)
@pytest.mark.parametrize("where", WHERE)
def test_a_barrier_vote_is_uniform_over_its_generations(guard, scope, threads, rng, where, gpu):
    """``bar.red.or.pred V, 1, 128, p`` then ``if V != 0``: every thread that completes one
    generation of the barrier gets the same answer, so a call of a scope whose instances
    each arrive whole in one generation runs on all of the instance or on none (128
    threads: a warpgroup; the whole CTA without a count; any count: a warp). Thread 1 alone
    votes yes, so the calls run; the round trip moves every element."""
    func = guarded_roundtrip(guard, scope, threads)
    assert [r.variant for r in tcd.explain(func)] == ["gmem_smem", "gmem_smem"]
    a = runtime.random_array((ROWS, COLS), "float32", rng)
    votes = a.reshape(-1)[:threads]  # thread t votes A[0, t] > 0 (a view of A's first rows)
    votes[:] = -np.abs(votes) - 1
    votes[1] = 1.0  # thread 1 alone votes yes
    out = execute(func, [a, runtime.poison_like(a)], where, gpu, tcd.STRICT_PIPELINE)
    np.testing.assert_array_equal(runtime.bits(out[1]), runtime.bits(a))


@pytest.mark.parametrize(
    "guard, scope, threads",
    [
        ("bar.red(64)", "warpgroup", 128),
        ("bar.red(128)", "cta", 256),
        ("bar.red(128) stored too", "warpgroup", 128),
        ("bar.red(128) stored through an alias", "warpgroup", 128),
        ("bar.red(128) and 256", "warpgroup", 128),
        ("bar.red(128) not aligned", "warpgroup", 128),
        ("V[lane % 2] after two bar.red", "warpgroup", 128),
    ],
    ids=[
        "half-warpgroup",
        "cta-scope",
        "stored-too",
        "alias",
        "two-counts",
        "not-aligned",
        "per-lane-element",
    ],  # fmt: skip
)
def test_a_barrier_vote_that_does_not_span_the_scope_is_declined(guard, scope, threads):
    """Controls: generations of 64 threads (two warps of a warpgroup may get different
    answers), 128 under a CTA-scope call (two warpgroups may), a vote register that a
    store of each thread's lane also writes (directly, or through a declaration over its
    data), votes of two counts into one register, ``barrier.red`` without ``.aligned``
    (a warp may take part diverged), and a register of two votes read at a per-lane
    element."""
    report = tcd.explain(guarded_roundtrip(guard, scope, threads))[0]
    assert report.variant is None
    [reason] = [c.reason for c in report.candidates if c.variant == "gmem_smem"]
    assert "cannot prove that every thread of the" in reason


def test_register_layouts_need_the_whole_scope():
    layout = TileLayout(S[(32, 8) : (1 @ Axis.laneid, 1)])

    @T.prim_func
    def kernel(A_ptr: T.handle):
        A = T.match_buffer(A_ptr, (32, 8), "float32")
        T.device_entry()
        T.cta_id([1])
        T.warp_id([1])
        lane = T.lane_id([32])
        T.thread_id([32])
        R = T.alloc_buffer((32, 8), "float32", scope="local", layout=layout)
        if lane < 16:
            Tx.warp.copy(R[:, :], A[:, :])

    [report] = tcd.explain(kernel)
    [reason] = [c.reason for c in report.candidates if c.variant == "reg"]
    assert reason == (
        "scope warp is narrowed: laneid runs over [0, 16) (an enclosing if); all threads of "
        "the scope must take part, since the register layout gives each of them its elements"
    )


# -- ranges the enclosing ifs leave where TVM narrows only part of them -------------------
BOXES = [
    # scope, CTA threads, lanes, warps, participants, TVM's own narrowing
    ("warp", 64, (8, 20), None, 12, "lanes [8, 32) only: the second if is not seen"),
    ("warpgroup", 128, (0, 32), (1, 3), 64, "wid_in_wg lost: [-3, -2**63)"),
    ("cta", 128, (16, 32), (1, 4), 48, "warpid lost"),
]


@pytest.mark.parametrize("scope, threads, lanes, warps, participants, tvm", BOXES)
def test_nested_ifs_leave_a_range_the_copies_split_among(
    scope, threads, lanes, warps, participants, tvm
):
    func = demos.narrowed_roundtrip("float16", (5, 38), scope, threads, lanes, warps)
    reports = tcd.explain(func)
    assert [r.variant for r in reports] == ["gmem_smem", "gmem_smem"]
    parts = reports[0].call_object.participation.participants
    assert parts.count == participants and parts.lane == (lanes[0], lanes[1] - lanes[0])
    assert all(r.plan["threads"] == participants for r in reports)


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("scope, threads, lanes, warps, participants, tvm", BOXES)
def test_nested_ifs_round_trip(scope, threads, lanes, warps, participants, tvm, rng, where, gpu):
    func = demos.narrowed_roundtrip("float16", (5, 38), scope, threads, lanes, warps)
    a = runtime.random_array((5, 38), "float16", rng)
    out = execute(func, [a, runtime.poison_like(a)], where, gpu, tcd.STRICT_PIPELINE)
    np.testing.assert_array_equal(runtime.bits(out[1]), runtime.bits(a))


def warp_vote_rows(guard: str = "vote", reduce_over: str = "rows"):
    """A 64 x 16 wgmma accumulator tile R (and its rows' maxima m) of the warpgroup's
    registers, loaded thread by thread; under ``if any_sync(0xffffffff, V[tid] > 0)``
    (``guard="vote"``; ``"plain"``: ``if V[tid] > 0``, no vote) the warpgroup-scope calls
    ``m = rowmax(R)`` and ``R = R m``; then every thread's registers out. ``reduce_over
    ="columns"``: the max is over R's rows into a shared row instead (its partials meet
    across warps)."""
    acc, rows = demos.wgmma_accumulator_layout(16), demos.wgmma_rows_layout()
    n, nm = demos.register_count(acc), demos.register_count(rows)

    # fmt: off
    @T.prim_func
    def kernel(X_ptr: T.handle, V_ptr: T.handle, Y_ptr: T.handle, M_ptr: T.handle):
        X = T.match_buffer(X_ptr, (128, n), "float32")
        V = T.match_buffer(V_ptr, (128,), "float32")
        Y = T.match_buffer(Y_ptr, (128, n), "float32")
        M = T.match_buffer(M_ptr, (128, nm), "float32")
        T.device_entry()
        T.cta_id([1])
        T.warpgroup_id([1])
        T.warp_id_in_wg([4])
        T.lane_id([32])
        tid = T.thread_id([128])
        R = T.alloc_buffer((64, 16), "float32", scope="local", layout=acc)
        m = T.alloc_buffer((64, 1), "float32", scope="local", layout=rows)
        C = T.alloc_buffer((1, 16), "float32", scope="shared")
        r = T.decl_buffer((n,), "float32", data=R.data, scope="local")
        mm = T.decl_buffer((nm,), "float32", data=m.data, scope="local")
        for k in T.unroll(n):
            r[k] = X[tid, k]
        for k in T.unroll(nm):
            mm[k] = T.float32(-1.0)
        if guard == "vote":
            if T.cuda.any_sync(T.uint32(0xFFFFFFFF), V[tid] > T.float32(0)) != 0:
                if reduce_over == "rows":
                    Tx.wg.max(m[:, :], R[:, :], axes=[-1])
                    Tx.wg.mul(R[:, :], R[:, :], m[:, :])
                else:
                    Tx.wg.max(C[:, :], R[:, :], axes=[0])
        else:
            if V[tid] > T.float32(0):
                Tx.wg.mul(R[:, :], R[:, :], T.float32(2.0))
        for k in T.unroll(n):
            Y[tid, k] = r[k]
        for k in T.unroll(nm):
            M[tid, k] = mm[k]
    # fmt: on
    return kernel


@pytest.mark.parametrize("where", WHERE)
def test_a_warp_vote_runs_warpgroup_register_calls_in_the_warps_that_pass(rng, where, gpu):
    """Under ``if any_sync(0xffffffff, ...)`` a warpgroup-scope call runs on whole warps or
    none (participation's ``warps``): the register variants, whose code stays inside a warp
    (each thread's registers; the row max's shuffles within a quad), take it. Warps 1 and 3
    vote yes (one lane each): their 16 rows each get the row max and R times it; warps 0
    and 2 keep R and m as they were, bit for bit."""
    func = warp_vote_rows()
    reports = tcd.explain(func)
    assert [(r.op, r.variant) for r in reports] == [("max", "local"), ("mul", "reg")]
    acc, rows = demos.wgmma_accumulator_layout(16), demos.wgmma_rows_layout()
    x = runtime.random_array((64, 16), "float32", rng)
    v = -np.abs(runtime.random_array((128,), "float32", rng)) - 1
    v[32 + 7] = v[96 + 30] = 1.0  # a lane of warps 1 and 3
    regs = demos.pack_registers(x, acc, "warpgroup", 128)
    y0, m0 = runtime.poison_like(regs), runtime.poison_like(np.zeros((128, 2), np.float32))
    out = execute(func, [regs, v, y0, m0], where, gpu, tcd.STRICT_PIPELINE)
    passed = np.repeat(np.array([False, True, False, True]), 16)  # each row's warp
    want_m = np.where(passed, x.max(axis=1), -1.0).astype(np.float32)
    want_y = np.where(passed[:, None], x * x.max(axis=1, keepdims=True), x).astype(np.float32)
    for e, got in demos.unpack_registers(out[2], acc, (64, 16), "warpgroup"):
        assert runtime.bits(got) == runtime.bits(want_y.reshape(-1)[e])
    for e, got in demos.unpack_registers(out[3], rows, (64, 1), "warpgroup"):
        assert runtime.bits(got) == runtime.bits(want_m[e])


@pytest.mark.parametrize(
    "guard, reduce_over, named",
    [
        ("vote", "columns", "meets its partials across warps (warp partials)"),
        ("plain", "rows", "a condition on per-thread values may leave threads out"),
    ],
    ids=["partials-across-warps", "no-vote"],
)
def test_a_call_the_warps_cannot_run_alone_is_declined(guard, reduce_over, named):
    """Controls: under the vote, a max over R's rows (the four warps' partials meet in a
    workspace) is declined, naming why; without a vote (``if V[tid] > 0``) the register
    multiply is declined as before."""
    [report] = tcd.explain(warp_vote_rows(guard, reduce_over))
    assert report.variant is None
    [reason] = [c.reason for c in report.candidates if c.variant in ("local", "reg")]
    assert named in reason
