"""The simulator schedules warps (sim/schedule.py): units that run until they block, forks
for the other side of a warp-specialized branch, splits where some warps of a statement
wait and others go on, deadlocks named per waiting warp; and the ordering rules of the
PTX memory model that such kernels depend on: an asynchronous unit's accesses (a TMA copy,
a wgmma's operand reads) are ordered only by their completion mechanism, never by a CTA
barrier; generic-proxy writes that an async-proxy operation reads need fence.proxy.async;
setmaxnreg takes registers from the CTA's pool. Every rule has a negative control.
"""

from __future__ import annotations

import numpy as np
import pytest
from tvm.script import tirx as T
from tvm.script.tirx import tile as Tx

from tirx_cuda_dispatch import demos, runtime, sim
from tirx_cuda_dispatch.sim import SimError

BUILTIN = "tirx"
STAGES = 2


def poisoned(shape, rng):
    a = rng.standard_normal(shape).astype(np.float32) + 3.0  # never zero
    return a, np.full(shape, np.nan, dtype=np.float32)


# -- a producer warp and consumer warps through an mbarrier ring ------------------------------
def ring(
    iters: int = 5,
    layout: str = "two_ifs",
    wait: str = "mbarrier_wait",
    omit: str | None = None,
):
    """Warp 0 (the producer) copies A[i] (32 floats) into stage i % 2 of a shared ring and
    arrives on the stage's full barrier (each of its 32 threads); warps 1-2 (the consumers) wait for it, write
    B[i, t] = 2 S[stage, t % 32], and one thread each arrives on the stage's empty barrier,
    which the producer waits on before it refills the stage. The consumers come first in
    program order: a lockstep run deadlocks at their first wait.

    ``layout``: "two_ifs" (``if consumer:`` then ``if producer:``, TVM's WarpgroupRole
    form) or "if_else" (the producer in the else branch). ``wait``: "mbarrier_wait" (TVM's
    helper) or "try_wait" (a spin loop over mbarrier.try_wait.parity). ``omit`` breaks it:
    "empty_wait" (the producer refills a stage the consumers may still read),
    "empty_arrive" (the consumers never free a stage), "full_wait" (the consumers read
    without waiting)."""
    wait_full, wait_empty, arrive_empty = (
        omit != "full_wait", omit != "empty_wait", omit != "empty_arrive"
    )  # fmt: skip
    two_ifs = layout == "two_ifs"
    spin = wait == "try_wait"

    # fmt: off
    @T.prim_func
    def kernel(A_ptr: T.handle, B_ptr: T.handle):
        A = T.match_buffer(A_ptr, (iters, 32), "float32")
        B = T.match_buffer(B_ptr, (iters, 64), "float32")
        T.device_entry()
        T.cta_id([1])
        warp = T.warp_id([3])
        lane = T.lane_id([32])
        tid = T.thread_id([96])
        S = T.alloc_buffer((STAGES, 32), "float32", scope="shared")
        bars = T.alloc_buffer((2 * STAGES,), "uint64", scope="shared")
        done = T.alloc_local((1,), "uint32")
        if tid == 0:
            for s in range(STAGES):
                T.ptx.mbarrier.init.shared.b64(T.cuda.cvta_generic_to_shared(bars.ptr_to([s])), 32)
                T.ptx.mbarrier.init.shared.b64(
                    T.cuda.cvta_generic_to_shared(bars.ptr_to([STAGES + s])), 2)
        T.cuda.cta_sync()
        if warp >= 1:
            for i in range(iters):
                if wait_full:
                    if spin:
                        done[0] = T.uint32(0)
                        while done[0] == T.uint32(0):
                            T.ptx["mbarrier.try_wait.parity.shared.b64"](
                                done[0], T.cuda.cvta_generic_to_shared(bars.ptr_to([i % STAGES])),
                                T.Cast("uint32", (i // STAGES) % 2))
                    else:
                        T.cuda.mbarrier_wait(bars.ptr_to([i % STAGES]), (i // STAGES) % 2)
                B[i, tid - 32] = S[i % STAGES, lane] * T.float32(2)
                if arrive_empty:
                    if lane == 0:
                        T.ptx["mbarrier.arrive.shared.b64"](
                            T.cuda.cvta_generic_to_shared(bars.ptr_to([STAGES + i % STAGES])))
        if two_ifs:
            if warp == 0:
                for i in range(iters):
                    if wait_empty and i >= STAGES:
                        T.cuda.mbarrier_wait(bars.ptr_to([STAGES + i % STAGES]),
                                             (i // STAGES - 1) % 2)
                    S[i % STAGES, lane] = A[i, lane]
                    T.ptx["mbarrier.arrive.shared.b64"](
                        T.cuda.cvta_generic_to_shared(bars.ptr_to([i % STAGES])))
    # fmt: on
    if two_ifs:
        return kernel
    return _producer_in_else(iters, wait_empty)


def _producer_in_else(iters: int, wait_empty: bool):
    """The ring with the producer in the else branch of the consumers' if (the same
    statements as ``ring``'s two ifs)."""

    # fmt: off
    @T.prim_func
    def kernel(A_ptr: T.handle, B_ptr: T.handle):
        A = T.match_buffer(A_ptr, (iters, 32), "float32")
        B = T.match_buffer(B_ptr, (iters, 64), "float32")
        T.device_entry()
        T.cta_id([1])
        warp = T.warp_id([3])
        lane = T.lane_id([32])
        tid = T.thread_id([96])
        S = T.alloc_buffer((STAGES, 32), "float32", scope="shared")
        bars = T.alloc_buffer((2 * STAGES,), "uint64", scope="shared")
        if tid == 0:
            for s in range(STAGES):
                T.ptx.mbarrier.init.shared.b64(T.cuda.cvta_generic_to_shared(bars.ptr_to([s])), 32)
                T.ptx.mbarrier.init.shared.b64(
                    T.cuda.cvta_generic_to_shared(bars.ptr_to([STAGES + s])), 2)
        T.cuda.cta_sync()
        if warp >= 1:
            for i in range(iters):
                T.cuda.mbarrier_wait(bars.ptr_to([i % STAGES]), (i // STAGES) % 2)
                B[i, tid - 32] = S[i % STAGES, lane] * T.float32(2)
                if lane == 0:
                    T.ptx["mbarrier.arrive.shared.b64"](
                        T.cuda.cvta_generic_to_shared(bars.ptr_to([STAGES + i % STAGES])))
        else:
            for i in range(iters):
                if wait_empty and i >= STAGES:
                    T.cuda.mbarrier_wait(bars.ptr_to([STAGES + i % STAGES]), (i // STAGES - 1) % 2)
                S[i % STAGES, lane] = A[i, lane]
                T.ptx["mbarrier.arrive.shared.b64"](
                    T.cuda.cvta_generic_to_shared(bars.ptr_to([i % STAGES])))
    # fmt: on
    return kernel


def run_ring(rng, **kw):
    a, b = poisoned((5, 32), rng)
    b = np.full((5, 64), np.nan, dtype=np.float32)
    out = sim.run(ring(**kw), [a, b], pipeline=BUILTIN)
    return a, out


@pytest.mark.parametrize(
    "layout, wait",
    [("two_ifs", "mbarrier_wait"), ("two_ifs", "try_wait"), ("if_else", "mbarrier_wait")],
)
def test_a_consumer_before_its_producer_runs(layout, wait, rng):
    a, out = run_ring(rng, layout=layout, wait=wait)
    np.testing.assert_array_equal(out[1], np.tile(a * 2, (1, 2)))
    assert out.counters.instructions["mbarrier.arrive"] == 5 + 5 * 2


def test_a_stage_refilled_before_its_consumers_freed_it_is_a_race(rng):
    with pytest.raises(
        SimError,
        match="shared-memory race on S byte .* warp 0 overwrites it while warp [12] reads it",
    ):
        run_ring(rng, omit="empty_wait")


def test_a_stage_never_freed_is_a_deadlock_naming_every_waiting_warp(rng):
    """The producer waits for stage 0's empty barrier, the consumers for stage 0's full
    barrier's next phase: the error names both groups and what each waits for."""
    with pytest.raises(SimError) as err:
        run_ring(rng, omit="empty_arrive")
    text = str(err.value)
    assert text.startswith("deadlock: no warp can run: ")
    assert "warps 1-2 wait at mbarrier_wait" in text
    assert "warp 0 waits at mbarrier_wait" in text
    assert "to complete phase 0 (2 of 2 arrivals still pending" in text  # the empty barrier
    assert "to complete phase 1 (32 of 32 arrivals still pending" in text  # the full barrier


def test_a_consumer_that_does_not_wait_reads_what_nothing_wrote(rng):
    with pytest.raises(
        SimError, match=r"thread 32 of CTA \(x=0\) reads byte 0 of shared S, which nothing wrote"
    ):
        run_ring(rng, omit="full_wait")


# -- two warpgroups taking turns on named barriers (FA3's ping-pong) ----------------------------
def ping_pong(turns: int = 4, first_arrival: bool = True):
    """Two warpgroups take turns: warpgroup g waits at named barrier 1 + g (its turn, 256
    threads: its own 128 sync, the other's 128 arrive), appends g to a shared log, and
    arrives at the other's barrier. Warpgroup 1 arrives at barrier 1 first, so warpgroup 0
    starts (``first_arrival=False``: nobody starts, a deadlock). Both warpgroups run the
    same statements: only a split of the unit at the barrier lets them alternate."""

    # fmt: off
    @T.prim_func
    def kernel(L_ptr: T.handle):
        L = T.match_buffer(L_ptr, (2 * turns,), "int32")
        T.device_entry()
        T.cta_id([1])
        wg = T.warpgroup_id([2])
        tid_wg = T.thread_id_in_wg([128])
        T.thread_id([256])
        log = T.alloc_buffer((2 * turns + 1,), "int32", scope="shared")
        if first_arrival:
            if wg == 1:
                T.ptx.bar.arrive(1, 256)
        for _ in range(turns):
            T.ptx.bar.sync(T.Cast("uint32", 1 + wg), 256)
            if tid_wg == 0:
                n = log[2 * turns] if _ > 0 or wg == 1 else 0
                log[n] = wg
                log[2 * turns] = n + 1
            T.ptx.bar.arrive(T.Cast("uint32", 2 - wg), 256)
        T.cuda.cta_sync()
        if wg == 0:
            if tid_wg < 2 * turns:
                L[tid_wg] = log[tid_wg]
    # fmt: on
    return kernel


def test_warpgroups_in_one_statement_take_turns_at_their_barriers():
    out = sim.run(ping_pong(), [np.full(8, -1, np.int32)], pipeline=BUILTIN)
    np.testing.assert_array_equal(out[0], [0, 1] * 4)


def test_turns_nobody_starts_are_a_deadlock():
    with pytest.raises(SimError, match="deadlock: no warp can run: ") as err:
        sim.run(ping_pong(first_arrival=False), [np.full(8, -1, np.int32)], pipeline=BUILTIN)
    assert "warps 0-3 wait at bar.sync 1, 256 " in str(err.value)
    assert "warps 4-7 wait at bar.sync 2, 256 " in str(err.value)


# -- setmaxnreg -------------------------------------------------------------------------------
def register_split(producer: int, consumer: int, partial: bool = False):
    """Three warpgroups: the consumers (1, 2) raise their registers to ``consumer`` before
    the producer (0) lowers its to ``producer``; then each thread writes its warpgroup.
    ``partial``: only warps 0-1 of the producer lower (a broken kernel)."""

    # fmt: off
    @T.prim_func
    def kernel(A_ptr: T.handle):
        A = T.match_buffer(A_ptr, (384,), "int32")
        T.device_entry()
        T.cta_id([1])
        wg = T.warpgroup_id([3])
        warp = T.warp_id([12])
        tid = T.thread_id([384])
        if wg >= 1:
            T.ptx.setmaxnreg.inc.sync.aligned.u32(consumer)
        if wg == 0:
            if not partial or warp < 2:
                T.ptx.setmaxnreg.dec.sync.aligned.u32(producer)
        A[tid] = wg
    # fmt: on
    return kernel


@pytest.mark.parametrize("producer, consumer", [(40, 232), (24, 240)])
def test_consumers_take_the_registers_a_producer_gives_back(producer, consumer):
    """384 threads start with 168 registers each (65,536 / 384, in steps of 8); FA3's
    split 24 / 240 uses all that the producer frees."""
    out = sim.run(
        register_split(producer, consumer), [np.full(384, -1, np.int32)], pipeline=BUILTIN
    )
    np.testing.assert_array_equal(out[0], np.repeat([0, 1, 2], 128))
    assert out.counters.instructions["setmaxnreg.inc"] == 8


def test_registers_the_pool_never_holds_are_a_deadlock():
    """56 / 240: the producer frees 112 x 128 registers, the consumers need 144 x 128: one
    consumer warpgroup gets its 72 x 128, the other waits forever."""
    with pytest.raises(
        SimError,
        match=r"deadlock: .*warps (4-7|8-11) wait at setmaxnreg.inc.sync.aligned.u32 240 .*9216 registers from the CTA's pool, which holds 5120",
    ):
        sim.run(register_split(56, 240), [np.full(384, -1, np.int32)], pipeline=BUILTIN)


def test_setmaxnreg_is_executed_by_whole_warpgroups():
    with pytest.raises(SimError, match="executed by warps 0-1 of warpgroup 0 only"):
        sim.run(
            register_split(40, 232, partial=True), [np.full(384, -1, np.int32)], pipeline=BUILTIN
        )


# -- the async proxy: TMA, wgmma, fence.proxy.async ------------------------------------------
def test_a_cta_barrier_does_not_order_a_tma_load_before_its_readers(rng):
    """The TMA's bytes are visible to the threads that waited on its mbarrier phase; a
    CTA barrier in place of the wait leaves the read unordered (the GPU may read stale
    bytes), although the lockstep order would have the copy land first."""
    a = runtime.random_array((256, 256), "float16", rng)
    good = sim.run(demos.tma_roundtrip(), [a, np.zeros((64, 128), np.float16)])
    np.testing.assert_array_equal(good[1], a[64:128, 128:256])
    with pytest.raises(
        SimError,
        match="warp [0-3] reads it after a TMA copy issued by warp 0 wrote it, with nothing between that orders them .*not by a CTA barrier",
    ):
        sim.run(demos.tma_roundtrip(wait="cta_sync"), [a, np.zeros((64, 128), np.float16)])


def test_a_wgmma_reading_plain_stores_needs_a_proxy_fence(rng):
    a = runtime.random_array((64, 64), "float16", rng)
    b = runtime.random_array((64, 128), "float16", rng)
    out = sim.run(demos.wgmma_gemm(), [a, b, np.zeros((64, 128), np.float32)])
    ref = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(out[2], ref, rtol=1e-5, atol=1e-4)
    with pytest.raises(
        SimError,
        match="warpgroup 0's wgmma reads byte .* which warp [0-3] wrote through the generic proxy with no fence.proxy.async",
    ):
        sim.run(demos.wgmma_gemm(fence=False), [a, b, np.zeros((64, 128), np.float32)])


def tma_wgmma(wait: str = "mbarrier"):
    """One warpgroup: thread 0 loads A (64 x 64) and B (64 x 64) with TMA on one mbarrier,
    the warpgroup multiplies them with wgmma. The issuing thread is in the warpgroup whose
    wgmma reads the tiles: ``wait`` "mbarrier" (right), "none" or "cta_sync" (broken: the
    wgmma's reads are not ordered after the copy)."""
    layout = demos.tma_shared_layout("float16", (64, 64), 128)
    acc = demos.wgmma_accumulator_layout(64, 1)

    # fmt: off
    @T.prim_func
    def kernel(A_ptr: T.handle, B_ptr: T.handle, D_ptr: T.handle):
        A = T.match_buffer(A_ptr, (64, 64), "float16")
        B = T.match_buffer(B_ptr, (64, 64), "float16")
        D = T.match_buffer(D_ptr, (64, 64), "float32")
        T.device_entry()
        T.cta_id([1])
        T.warpgroup_id([1])
        T.warp_id_in_wg([4])
        T.lane_id([32])
        tid = T.thread_id([128])
        pool = T.alloc_buffer((2 * 64 * 64 + 4,), "float16", scope="shared.dyn", align=1024)
        A_s = T.decl_buffer((64, 64), "float16", pool.data, scope="shared.dyn", layout=layout)
        B_s = T.decl_buffer((64, 64), "float16", pool.data, elem_offset=64 * 64,
                            scope="shared.dyn", layout=layout)
        bar = T.decl_buffer((1,), "uint64", pool.data, elem_offset=2 * 64 * 64 // 4,
                            scope="shared.dyn")
        C = T.alloc_buffer((64, 64), "float32", scope="local", layout=acc)
        if tid == 0:
            T.ptx.mbarrier.init.shared.b64(bar.ptr_to([0]), 1)
        T.cuda.cta_sync()
        if tid == 0:
            Tx.copy_async(A_s[:, :], A[:, :], mbar=bar.ptr_to([0]))
            Tx.copy_async(B_s[:, :], B[:, :], mbar=bar.ptr_to([0]))
            T.ptx["mbarrier.arrive.expect_tx.shared.b64"](bar.ptr_to([0]), 2 * 64 * 64 * 2)
        if wait == "mbarrier":
            T.cuda.mbarrier_wait(bar.ptr_to([0]), 0)
        elif wait == "cta_sync":
            T.cuda.cta_sync()
        Tx.wg.gemm_async(C[:, :], A_s[:, :], B_s[:, :], transA=False, transB=True, accum=False)
        T.ptx["wgmma.commit_group.sync.aligned"]()
        T.ptx["wgmma.wait_group.sync.aligned"](0)
        Tx.wg.copy(D[:, :], C[:, :])
    # fmt: on
    return kernel


def test_a_wgmma_in_the_issuing_warpgroup_still_waits_for_the_tma(rng):
    """The thread that issues the TMA belongs to the warpgroup whose wgmma reads the tile:
    its reads are the wgmma unit's, not that thread's, so without the wait (or with a CTA
    barrier in its place) they race with the copy."""
    a = runtime.random_array((64, 64), "float16", rng)
    b = runtime.random_array((64, 64), "float16", rng)
    out = sim.run(tma_wgmma(), [a, b, np.zeros((64, 64), np.float32)])
    ref = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(out[2], ref, rtol=1e-5, atol=1e-4)
    for wait in ("none", "cta_sync"):
        with pytest.raises(
            SimError,
            match="warpgroup 0's wgmma reads it after a TMA copy issued by warp 0 wrote it",
        ):
            sim.run(tma_wgmma(wait), [a, b, np.zeros((64, 64), np.float32)])


# -- the CTAs of a grid -----------------------------------------------------------------------
def rows_per_cta(overlap: bool, read_back: bool = False):
    """Each of 4 CTAs writes a row of B (``overlap``: CTAs 2 and 3 the same row as 0 and 1);
    ``read_back``: CTA c then reads row c - 1 (another CTA's), adding it to its own."""

    # fmt: off
    @T.prim_func
    def kernel(A_ptr: T.handle, B_ptr: T.handle):
        A = T.match_buffer(A_ptr, (4, 32), "float32")
        B = T.match_buffer(B_ptr, (4, 32), "float32")
        T.device_entry()
        bx = T.cta_id([4])
        tid = T.thread_id([32])
        row = T.meta_var(bx % 2 if overlap else bx)
        B[row, tid] = A[bx, tid]
        if read_back:
            if bx > 0:
                B[bx, tid] = B[bx, tid] + B[bx - 1, tid]
    # fmt: on
    return kernel


def test_ctas_of_one_launch_writing_one_byte_race(rng):
    """The grid's CTAs are not ordered: two that write one byte (or one that reads what
    another wrote) race, whichever order the simulator runs them in; the control writes
    a row each."""
    a, b = poisoned((4, 32), rng)
    out = sim.run(rows_per_cta(False), [a, b], pipeline=BUILTIN)
    np.testing.assert_array_equal(out[1], a)
    with pytest.raises(
        SimError,
        match=r"CTA \(x=2\) writes byte 0 of global B_ptr .*which CTA \(x=0\) wrote: the CTAs of one launch are not ordered",
    ):
        sim.run(rows_per_cta(True), [a, b], pipeline=BUILTIN)
    with pytest.raises(
        SimError, match=r"CTA \(x=1\) reads byte 0 of global B_ptr .*which CTA \(x=0\) wrote"
    ):
        sim.run(rows_per_cta(False, read_back=True), [a, b], pipeline=BUILTIN)
