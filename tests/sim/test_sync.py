"""Warp shuffles, warp votes and named barriers in the simulator, as the reduction
lowerings and kernels emit them.

``__shfl_{xor,up,down}_sync`` (CUDA C++ Programming Guide "Warp Shuffle Functions", PTX
ISA "shfl.sync") are checked against numpy emulations written here from the guide, bit
for bit, on random data that is never zero, with outputs poisoned first. Negative
controls: a thread missing from its mask, a lane the mask names that does not run the
call, a source lane outside the mask. Named barriers (``bar.sync id, count``, PTX ISA
"bar, barrier") must order exactly the warps that complete them: a write by one warp and
a read by another pass with the barrier and are a reported race without it, and counts
that the arriving threads cannot complete are errors. Votes (``__any_sync``,
``__ballot_sync``; PTX ISA "vote.sync") are checked against the word of the lanes'
predicates, with the shuffles' mask rule.
"""

from __future__ import annotations

from types import SimpleNamespace

import ml_dtypes
import numpy as np
import pytest
from tvm.script import tirx as T

from tirx_cuda_dispatch import runtime, sim
from tirx_cuda_dispatch.sim import SimError
from tirx_cuda_dispatch.sim.ptx import TABLE

BUILTIN = "tirx"
FULL = 0xFFFFFFFF


def bits(x):
    return runtime.bits(x)


def nonzero(shape, dtype: str, rng) -> np.ndarray:
    """Random values of ``dtype``, none of them zero (a lost or doubled term shows)."""
    sign = rng.choice([-1, 1], size=shape)
    if dtype == "int32":
        return (sign * rng.integers(1, 1 << 20, size=shape)).astype(np.int32)
    mags = rng.uniform(0.5, 2.0, size=shape) * sign
    np_dtype = ml_dtypes.bfloat16 if dtype == "bfloat16" else np.dtype(dtype)
    return mags.astype(np.float32).astype(np_dtype)


# -- numpy emulations (from the CUDA guide, independent of the simulator) -------------------
def source_lane(kind: str, lane: int, b: int, width: int) -> int:
    """The lane ``lane`` reads, or its own where the guide says it keeps its value."""
    first = lane - lane % width
    if kind == "xor":  # a later segment's lane: own value; an earlier one's: read
        src = lane ^ b
        return src if src < first + width else lane
    if kind == "up":
        return lane - b if lane - b >= first else lane
    if kind == "down":
        return lane + b if lane + b < first + width else lane
    raise ValueError(kind)


def emulate(kind: str, values: np.ndarray, steps, width: int, accumulate: bool) -> np.ndarray:
    """Each step: every thread reads the value its source lane holds (in its own warp);
    ``accumulate``: ``v = v + read`` in the values' dtype, else ``v = read``."""
    v = values.copy()
    for b in steps:
        read = np.array(
            [v[t - t % 32 + source_lane(kind, t % 32, b, width)] for t in range(len(v))],
            dtype=v.dtype,
        )
        v = (v + read).astype(v.dtype) if accumulate else read
    return v


# -- kernels ----------------------------------------------------------------------------------
def shuffle_kernel(kind: str, dtype: str, threads: int, steps: int, width: int, accumulate: bool):
    """B[t] = A[t] through ``steps`` shuffles of kind ``kind``: step i shuffles by M[i]
    within ``width``-lane segments; ``accumulate`` adds what it reads to the value."""
    shfl = getattr(T.cuda, f"__shfl_{kind}_sync")

    # fmt: off
    @T.prim_func
    def kernel(A_ptr: T.handle, M_ptr: T.handle, B_ptr: T.handle):
        A = T.match_buffer(A_ptr, (threads,), dtype)
        M = T.match_buffer(M_ptr, (steps,), "int32")
        B = T.match_buffer(B_ptr, (threads,), dtype)
        T.device_entry()
        T.cta_id([1])
        tid = T.thread_id([threads])
        v = T.alloc_local((1,), dtype)
        v[0] = A[tid]
        for i in range(steps):
            if accumulate:
                v[0] = v[0] + shfl(T.uint32(FULL), v[0], M[i], width)
            else:
                v[0] = shfl(T.uint32(FULL), v[0], M[i], width)
        B[tid] = v[0]
    # fmt: on
    return kernel


def xor_under_if(active: int, mask: int, lane_mask: int):
    """Threads below ``active`` of a 32-thread warp run one xor shuffle with ``mask``."""

    # fmt: off
    @T.prim_func
    def kernel(A_ptr: T.handle, B_ptr: T.handle):
        A = T.match_buffer(A_ptr, (32,), "float32")
        B = T.match_buffer(B_ptr, (32,), "float32")
        T.device_entry()
        T.cta_id([1])
        tid = T.thread_id([32])
        if tid < active:
            B[tid] = T.cuda.__shfl_xor_sync(T.uint32(mask), A[tid], lane_mask, 32)
    # fmt: on
    return kernel


def handoff(threads: int, sync):
    """The even warps write their rows of a shared tile; ``sync(tid)`` (None: nothing)
    runs on every thread; then each odd warp reads what the warp before it wrote:
    B[t] = A[t - 32] for t in the odd warps."""
    with_sync = sync is not None

    # fmt: off
    @T.prim_func
    def kernel(A_ptr: T.handle, B_ptr: T.handle):
        A = T.match_buffer(A_ptr, (threads,), "float32")
        B = T.match_buffer(B_ptr, (threads,), "float32")
        T.device_entry()
        T.cta_id([1])
        tid = T.thread_id([threads])
        S = T.alloc_buffer((threads,), "float32", scope="shared")
        if tid % 64 < 32:
            S[tid] = A[tid]
        if with_sync:
            sync(tid)
        if tid % 64 >= 32:
            B[tid] = S[tid - 32]
    # fmt: on
    return kernel


def barrier_by(threads: int, arriving: int, bar_id: int, count: int):
    """The first ``arriving`` threads of the CTA run ``bar.sync bar_id, count``, then
    add 1 to their element."""

    # fmt: off
    @T.prim_func
    def kernel(A_ptr: T.handle):
        A = T.match_buffer(A_ptr, (threads,), "float32")
        T.device_entry()
        T.cta_id([1])
        tid = T.thread_id([threads])
        if tid < arriving:
            T.ptx.bar.sync(bar_id, count)
            A[tid] = A[tid] + T.float32(1)
    # fmt: on
    return kernel


def two_groups_in_branches():
    """Warps 0-1 meet at barrier 1 in one branch, warps 2-3 at barrier 2 in the other;
    each group's second warp reads what its first wrote."""

    # fmt: off
    @T.prim_func
    def kernel(A_ptr: T.handle, B_ptr: T.handle):
        A = T.match_buffer(A_ptr, (128,), "float32")
        B = T.match_buffer(B_ptr, (128,), "float32")
        T.device_entry()
        T.cta_id([1])
        tid = T.thread_id([128])
        S = T.alloc_buffer((128,), "float32", scope="shared")
        if tid % 64 < 32:
            S[tid] = A[tid]
        if tid < 64:
            T.ptx.bar.sync(1, 64)
        else:
            T.ptx.bar.sync(2, 64)
        if tid % 64 >= 32:
            B[tid] = S[tid - 32]
    # fmt: on
    return kernel


def run_shuffle(kind, dtype, steps, width, accumulate, rng, threads=64):
    a = nonzero(threads, dtype, rng)
    func = shuffle_kernel(kind, dtype, threads, len(steps), width, accumulate)
    out = sim.run(func, [a, np.array(steps, np.int32), runtime.poison_like(a)], pipeline=BUILTIN)
    return a, out


# -- shuffles ---------------------------------------------------------------------------------
@pytest.mark.parametrize("order", [[16, 8, 4, 2, 1], [1, 2, 4, 8, 16]])
def test_xor_butterfly_sums_a_warp_bit_for_bit(order, rng):
    a, out = run_shuffle("xor", "float32", order, 32, True, rng)
    expected = emulate("xor", a, order, 32, accumulate=True)
    np.testing.assert_array_equal(bits(out[2]), bits(expected))
    # a butterfly leaves every lane of a warp with the same sum, close to numpy's
    for w in range(2):
        assert (out[2][32 * w : 32 * w + 32] == out[2][32 * w]).all()
        np.testing.assert_allclose(out[2][32 * w], a[32 * w : 32 * w + 32].sum(), rtol=1e-5)


def test_xor_counts_one_shfl_per_warp_and_step(rng):
    _, five = run_shuffle("xor", "float32", [16, 8, 4, 2, 1], 32, True, rng)
    _, one = run_shuffle("xor", "float32", [1], 32, True, rng)
    assert five.counters.instructions["shfl.sync"] - one.counters.instructions["shfl.sync"] == 4 * 2


@pytest.mark.parametrize("width", [8, 16])
def test_xor_butterfly_within_segments(width, rng):
    steps = [m for m in (16, 8, 4, 2, 1) if m < width]
    a, out = run_shuffle("xor", "float32", steps, width, True, rng)
    expected = emulate("xor", a, steps, width, accumulate=True)
    np.testing.assert_array_equal(bits(out[2]), bits(expected))
    sums = out[2].reshape(-1, width)
    assert (sums == sums[:, :1]).all()  # one sum per segment
    np.testing.assert_allclose(sums[:, 0], a.reshape(-1, width).sum(axis=1), rtol=1e-5)


@pytest.mark.parametrize("width", [4, 8, 16])
def test_xor_past_the_segment_keeps_its_own_and_reads_earlier_segments(width, rng):
    """lane ^ lane_mask in a later segment: the lane keeps its value; in an earlier one:
    it reads it (CUDA guide, __shfl_xor_sync)."""
    a, out = run_shuffle("xor", "float32", [width], width, False, rng)
    lane = np.arange(64) % 32
    later = (lane ^ width) > lane
    np.testing.assert_array_equal(bits(out[2][later]), bits(a[later]))
    np.testing.assert_array_equal(bits(out[2][~later]), bits(a[np.flatnonzero(~later) - width]))
    np.testing.assert_array_equal(bits(out[2]), bits(emulate("xor", a, [width], width, False)))


@pytest.mark.parametrize("kind", ["up", "down"])
@pytest.mark.parametrize("width", [32, 16, 8])
@pytest.mark.parametrize("delta", [1, 3, 5])
def test_up_down_shuffles(kind, width, delta, rng):
    a, out = run_shuffle(kind, "float32", [delta], width, False, rng)
    expected = emulate(kind, a, [delta], width, accumulate=False)
    np.testing.assert_array_equal(bits(out[2]), bits(expected))
    # the lanes at the segment's edge kept their own values, the others moved
    lane = np.arange(64) % width
    edge = lane < delta if kind == "up" else lane >= width - delta
    np.testing.assert_array_equal(bits(out[2][edge]), bits(a[edge]))
    assert (bits(out[2][~edge]) != bits(a[~edge])).all()


def test_up_shuffle_accumulates_in_scan_order(rng):
    """The Hillis-Steele steps of a scan with shfl.up: v += up(v, d) for d = 1, 2, 4...;
    lanes below d read their own value and double it (no guard: the emulation follows
    the same rule), so every lane's result depends on which lanes it read at each step."""
    steps = [1, 2, 4, 8, 16]
    a, out = run_shuffle("up", "int32", steps, 32, True, rng)
    np.testing.assert_array_equal(out[2], emulate("up", a, steps, 32, accumulate=True))


@pytest.mark.parametrize("dtype", ["int32", "float16", "bfloat16"])
def test_xor_butterfly_in_other_dtypes(dtype, rng):
    steps = [16, 8, 4, 2, 1]
    a, out = run_shuffle("xor", dtype, steps, 32, True, rng)
    np.testing.assert_array_equal(bits(out[2]), bits(emulate("xor", a, steps, 32, True)))
    # and the bare moves, element for element
    a, out = run_shuffle("down", dtype, [7], 16, False, rng)
    np.testing.assert_array_equal(bits(out[2]), bits(emulate("down", a, [7], 16, False)))


def test_thread_missing_from_its_mask_is_an_error(rng):
    a = nonzero(32, "float32", rng)
    out = sim.run(xor_under_if(32, FULL, 1), [a, runtime.poison_like(a)], pipeline=BUILTIN)
    np.testing.assert_array_equal(bits(out[1]), bits(a[np.arange(32) ^ 1]))
    with pytest.raises(SimError, match="thread 0 runs __shfl_xor_sync without its bit"):
        sim.run(xor_under_if(32, FULL & ~1, 1), [a, runtime.poison_like(a)], pipeline=BUILTIN)


def test_mask_naming_an_inactive_lane_is_an_error(rng):
    """Under ``if tid < 16`` a full mask names lanes 16-31, which never run the call:
    shfl.sync waits for them forever. The mask of the 16 running lanes works."""
    a = nonzero(32, "float32", rng)
    out = sim.run(xor_under_if(16, 0xFFFF, 1), [a, runtime.poison_like(a)], pipeline=BUILTIN)
    np.testing.assert_array_equal(bits(out[1][:16]), bits(a[np.arange(16) ^ 1]))
    np.testing.assert_array_equal(bits(out[1][16:]), bits(runtime.poison_like(a)[16:]))
    with pytest.raises(SimError, match=r"names lane 16 \(thread 16\), which does not execute"):
        sim.run(xor_under_if(16, FULL, 1), [a, runtime.poison_like(a)], pipeline=BUILTIN)


def test_reading_a_lane_outside_the_mask_is_an_error(rng):
    a = nonzero(32, "float32", rng)
    with pytest.raises(SimError, match="thread 0 reads lane 16, which is not in its mask"):
        sim.run(xor_under_if(16, 0xFFFF, 16), [a, runtime.poison_like(a)], pipeline=BUILTIN)


# -- warp votes ------------------------------------------------------------------------------
def vote_under_if(active: int, mask: int | None, kind: str = "any"):
    """Threads below ``active`` of a 32-thread warp vote ``A[tid] > 0`` over ``mask`` (None:
    lanes 0-15 over 0x0000ffff, lanes 16-31 over 0xffff0000); B gets what each one's vote
    returns."""
    vote = T.cuda.any_sync if kind == "any" else T.cuda.ballot_sync

    # fmt: off
    @T.prim_func
    def kernel(A_ptr: T.handle, B_ptr: T.handle):
        A = T.match_buffer(A_ptr, (32,), "float32")
        B = T.match_buffer(B_ptr, (32,), "int64")
        T.device_entry()
        T.cta_id([1])
        tid = T.thread_id([32])
        if mask is None:
            halves = T.if_then_else(tid < 16, T.uint32(0xFFFF), T.uint32(0xFFFF0000))
            B[tid] = T.Cast("int64", vote(halves, A[tid] > T.float32(0)))
        elif tid < active:
            B[tid] = T.Cast("int64", vote(T.uint32(mask), A[tid] > T.float32(0)))
    # fmt: on
    return kernel


@pytest.mark.parametrize("kind", ["any", "ballot"])
@pytest.mark.parametrize("active, mask", [(32, FULL), (16, 0xFFFF)])
def test_votes_return_the_lanes_predicates(kind, active, mask, rng):
    """Every lane of the mask gets the same word: bit k is lane k's ``A > 0`` (ballot), or
    whether any bit is set (any); a vote none of the lanes wins returns 0 / false."""
    a = nonzero(32, "float32", rng)
    for values in (a, -np.abs(a), np.abs(a)):
        poison = np.full(32, -7, np.int64)
        out = sim.run(vote_under_if(active, mask, kind), [values, poison], pipeline=BUILTIN)[1]
        word = sum(1 << k for k in range(active) if values[k] > 0)
        want = word if kind == "ballot" else int(word != 0)
        np.testing.assert_array_equal(out[:active], np.full(active, want))
        np.testing.assert_array_equal(out[active:], poison[active:])


def test_two_groups_of_a_warp_vote_apart(rng):
    """Lanes 0-15 vote over 0x0000ffff and lanes 16-31 over 0xffff0000 at once: each
    group's word holds its own lanes' bits only."""
    a = nonzero(32, "float32", rng)
    out = sim.run(vote_under_if(32, None, "ballot"), [a, np.zeros(32, np.int64)],
                  pipeline=BUILTIN)[1]  # fmt: skip
    word = sum(1 << k for k in range(32) if a[k] > 0)
    np.testing.assert_array_equal(out[:16], np.full(16, word & 0xFFFF))
    np.testing.assert_array_equal(out[16:], np.full(16, word & 0xFFFF0000))


def test_a_vote_keeps_the_mask_rule(rng):
    """Negative controls: a full mask under ``if tid < 16`` names lanes that never vote
    (vote.sync waits for them forever), and a thread outside its own mask."""
    a = nonzero(32, "float32", rng)
    poison = np.zeros(32, np.int64)
    with pytest.raises(
        SimError, match=r"__any_sync: .*names lane 16 \(thread 16\), which does not"
    ):
        sim.run(vote_under_if(16, FULL), [a, poison], pipeline=BUILTIN)
    with pytest.raises(SimError, match="thread 0 runs __ballot_sync without its bit"):
        sim.run(vote_under_if(32, FULL & ~1, "ballot"), [a, poison], pipeline=BUILTIN)


# -- named barriers ---------------------------------------------------------------------------
BARRIERS = {
    "bar.sync 1, 64": lambda tid: T.ptx.bar.sync(1, 64),
    "barrier.sync 1, 64": lambda tid: T.ptx.barrier.sync(1, 64),
    "barrier.sync.aligned 1, 64": lambda tid: T.ptx.barrier.sync.aligned(1, 64),
    "bar.sync 1 (the whole CTA)": lambda tid: T.ptx.bar.sync(1),
}


@pytest.mark.parametrize("spelling", list(BARRIERS))
def test_named_barrier_orders_two_warps(spelling, rng):
    a = nonzero(64, "float32", rng)
    out = sim.run(handoff(64, BARRIERS[spelling]), [a, runtime.poison_like(a)], pipeline=BUILTIN)
    np.testing.assert_array_equal(bits(out[1][32:]), bits(a[:32]))
    assert out.counters.instructions["bar.sync"] == 2


def test_without_the_barrier_the_handoff_is_a_race(rng):
    a = nonzero(64, "float32", rng)
    with pytest.raises(SimError, match="shared-memory race on S .* warp 1 reads it after warp 0"):
        sim.run(handoff(64, None), [a, runtime.poison_like(a)], pipeline=BUILTIN)


@pytest.mark.parametrize("arriving", [32, 96])
def test_named_barrier_count_the_arrivals_cannot_complete(arriving):
    a = np.zeros(128, np.float32)
    out = sim.run(barrier_by(128, 64, 1, 64), [a], pipeline=BUILTIN)
    np.testing.assert_array_equal(out[0], np.repeat([1.0, 0.0], 64))
    short = 64 - arriving % 64
    with pytest.raises(
        SimError, match=f"deadlock: no warp can run: .* bar.sync 1, 64 .*{short} more of its 64"
    ):
        sim.run(barrier_by(128, arriving, 1, 64), [a], pipeline=BUILTIN)


def test_named_barrier_rejects_bad_counts_and_diverged_warps():
    a = np.zeros(64, np.float32)
    with pytest.raises(SimError, match="bar.sync 1, 48: the thread count must be"):
        sim.run(barrier_by(64, 64, 1, 48), [a], pipeline=BUILTIN)
    with pytest.raises(SimError, match="bar.sync 1 is .sync.aligned, but warp 1 runs it diverged"):
        sim.run(barrier_by(64, 48, 1, 64), [a], pipeline=BUILTIN)
    with pytest.raises(SimError, match="a CTA has barriers 0-15"):
        sim.run(barrier_by(64, 64, 16, 64), [a], pipeline=BUILTIN)


def test_two_groups_of_a_barrier_count_order_none(rng):
    """Four warps on one id with count 64 complete it in two groups the arrival order
    picks: warps 0 and 1 need not be in one, so warp 1's read is not ordered."""
    a = nonzero(128, "float32", rng)
    with pytest.raises(SimError, match="shared-memory race on S"):
        sim.run(
            handoff(128, BARRIERS["bar.sync 1, 64"]), [a, runtime.poison_like(a)], pipeline=BUILTIN
        )


def test_two_named_barriers_each_order_their_group(rng):
    """Warps 0-1 on barrier 1 and warps 2-3 on barrier 2 (count 64 each) in one
    statement, the id computed per warp as the reduction lowering does; and the same
    with each group in its own branch."""
    a = nonzero(128, "float32", rng)
    by_warp = lambda tid: T.ptx.bar.sync(T.Cast("uint32", tid // 64 + 1), 64)  # noqa: E731
    for func in (handoff(128, by_warp), two_groups_in_branches()):
        out = sim.run(func, [a, runtime.poison_like(a)], pipeline=BUILTIN)
        odd = (np.arange(128) // 32) % 2 == 1
        np.testing.assert_array_equal(bits(out[1][odd]), bits(a[~odd]))
        np.testing.assert_array_equal(bits(out[1][~odd]), bits(runtime.poison_like(a)[~odd]))
        assert out.counters.instructions["bar.sync"] == 4


def test_a_barrier_group_short_of_its_count_is_an_error(rng):
    """Three warps, ids per warp 1, 1, 2: barrier 2 waits for a second warp forever."""
    a = nonzero(96, "float32", rng)
    by_warp = lambda tid: T.ptx.bar.sync(T.Cast("uint32", tid // 64 + 1), 64)  # noqa: E731
    with pytest.raises(SimError, match=r"warp 2 waits at bar.sync 2, 64 .*32 arrived: warps \[2\]"):
        sim.run(handoff(96, by_warp), [a, runtime.poison_like(a)], pipeline=BUILTIN)


def producer_consumer(
    threads: int,
    consumer_arrives: bool = False,
    count: int | None = None,
    producer_count: int | None = None,
):
    """Warp 0 writes S and arrives at named barrier 1 (``bar.arrive``, not waiting); the
    other warps wait there (``bar.sync``) and read it: B[t] = A[t % 32]. The consumers
    come first in program order (the then side), so they run only once warp 0 has.
    ``consumer_arrives``: the readers only arrive too, after the writer in program order
    (nothing orders them). ``producer_count``: the writer's thread count, if another."""
    count = threads if count is None else count
    producer_count = count if producer_count is None else producer_count

    # fmt: off
    @T.prim_func
    def kernel(A_ptr: T.handle, B_ptr: T.handle):
        A = T.match_buffer(A_ptr, (threads,), "float32")
        B = T.match_buffer(B_ptr, (threads,), "float32")
        T.device_entry()
        T.cta_id([1])
        tid = T.thread_id([threads])
        S = T.alloc_buffer((32,), "float32", scope="shared")
        if not consumer_arrives and tid >= 32:
            T.ptx.bar.sync(1, count)
            B[tid] = S[tid % 32]
        if tid < 32:
            S[tid] = A[tid]
            T.ptx.bar.arrive(1, producer_count)
            B[tid] = A[tid]
        if consumer_arrives and tid >= 32:
            T.ptx.bar.arrive(1, count)
            B[tid] = S[tid % 32]
    # fmt: on
    return kernel


def test_bar_arrive_releases_the_warps_waiting_at_bar_sync(rng):
    """The consumers wait in the first if for an arrival the second one makes: the
    simulator runs the writer's warp while they wait (a lockstep run would deadlock)."""
    a = nonzero(96, "float32", rng)
    out = sim.run(producer_consumer(96), [a, runtime.poison_like(a)], pipeline=BUILTIN)
    np.testing.assert_array_equal(bits(out[1]), bits(np.tile(a[:32], 3)))
    assert out.counters.instructions["bar.arrive"] == 1
    assert out.counters.instructions["bar.sync"] == 2


def test_bar_arrive_orders_nothing_for_the_arriving_threads(rng):
    """Negative control: readers that only arrive are not ordered after the writer."""
    a = nonzero(64, "float32", rng)
    with pytest.raises(SimError, match="shared-memory race on S .* warp 1 reads it after warp 0"):
        sim.run(
            producer_consumer(64, consumer_arrives=True),
            [a, runtime.poison_like(a)],
            pipeline=BUILTIN,
        )


def test_a_barrier_no_arrival_completes_names_every_waiting_warp(rng):
    """Negative control: the count (128) is more than the 96 threads that ever arrive."""
    a = nonzero(96, "float32", rng)
    with pytest.raises(
        SimError,
        match=r"deadlock: no warp can run: warps 1-2 wait at bar.sync 1, 128 .*32 more of its 128 threads to arrive",
    ):
        sim.run(producer_consumer(96, count=128), [a, runtime.poison_like(a)], pipeline=BUILTIN)


def test_arrivals_with_different_counts_are_an_error(rng):
    a = nonzero(96, "float32", rng)
    func = producer_consumer(96, count=96, producer_count=64)
    with pytest.raises(SimError, match="arrive expecting 64 threads while the barrier's earlier"):
        sim.run(func, [a, runtime.poison_like(a)], pipeline=BUILTIN)


def test_barrier_meanings_are_in_the_table():
    for name in (
        "tirx.ptx.bar_sync_count", "tirx.ptx.barrier_sync", "tirx.ptx.bar_arrive",
        "tirx.cuda.__shfl_xor_sync",
    ):  # fmt: skip
        assert sim.CALLS[name].meaning


# -- barrier reductions (PTX ISA "bar, barrier": bar.red) ---------------------------------------
SPELLINGS = {"popc": "bar.red.popc.u32", "and": "bar.red.and.pred", "or": "bar.red.or.pred"}


def barrier_vote(threads: int, op: str, count: int | None, form: str = "own"):
    """Each thread reduces its ``A > 0`` with ``op`` at a named barrier of ``count`` threads
    (None: the CTA's) and stores what it got. ``form``: "own", each warpgroup at barrier
    1 + its index; "cta", barrier 1 without a count; "turns", every warp at barrier 1,
    one warp of each warpgroup at a time (warps 0 and 4 first, ...); "branches", each
    warpgroup at barrier 1 from a branch of its own; "one", every warp at barrier 1 in
    one statement; "with sync", warpgroup 1 arrives with ``bar.sync``; "mixed ops", warps
    2 and 3 reduce with ``.popc``."""
    spelling = SPELLINGS[op]

    # fmt: off
    @T.prim_func
    def kernel(A_ptr: T.handle, B_ptr: T.handle):
        A = T.match_buffer(A_ptr, (threads,), "float32")
        B = T.match_buffer(B_ptr, (threads,), "int64")
        T.device_entry()
        T.cta_id([1])
        if threads % 128 == 0:  # (a CTA of 48 threads has no warpgroups)
            wg = T.warpgroup_id([threads // 128])
            wid = T.warp_id_in_wg([4])
        tid = T.thread_id([threads])
        V = T.alloc_buffer((1,), "uint32", scope="local")
        V[0] = T.uint32(7)  # (overwritten by every form)
        vote = T.meta_var(T.ptx.pred(A[tid] > T.float32(0)))
        if form == "cta":
            T.evaluate(T.ptx[spelling](V[0], T.uint32(1), vote))
        elif form == "turns":
            for k in T.serial(4):
                if wid == k:
                    T.evaluate(T.ptx[spelling](V[0], T.uint32(1), T.uint32(count), vote))
        elif form == "branches":
            if wg == 0:
                T.evaluate(T.ptx[spelling](V[0], T.uint32(1), T.uint32(count), vote))
            else:
                T.evaluate(T.ptx[spelling](V[0], T.uint32(1), T.uint32(count), vote))
        elif form == "one":
            T.evaluate(T.ptx[spelling](V[0], T.uint32(1), T.uint32(count), vote))
        elif form == "with sync":
            if wg == 1:
                T.ptx.bar.sync(T.uint32(1), T.uint32(count))
            else:
                T.evaluate(T.ptx[spelling](V[0], T.uint32(1), T.uint32(count), vote))
        elif form == "mixed ops":
            if wid < 2:
                T.evaluate(T.ptx[spelling](V[0], T.uint32(1), T.uint32(count), vote))
            else:
                T.evaluate(T.ptx[SPELLINGS["popc"]](V[0], T.uint32(1), T.uint32(count), vote))
        else:
            T.evaluate(T.ptx[spelling](V[0], T.Cast("uint32", 1 + wg), T.uint32(count), vote))
        B[tid] = T.Cast("int64", V[0])
    # fmt: on
    return kernel


def reduce_votes(a: np.ndarray, op: str, group: int) -> np.ndarray:
    votes = (a > 0).reshape(-1, group)
    value = {"popc": votes.sum(1), "and": votes.all(1), "or": votes.any(1)}[op]
    return np.repeat(value.astype(np.int64), group)


@pytest.mark.parametrize("op", ["popc", "and", "or"])
@pytest.mark.parametrize(
    "threads, count, form",
    [(256, 128, "own"), (256, None, "cta"), (128, 128, "turns"), (48, None, "cta")],
    ids=["a-barrier-each", "the-cta", "warp-by-warp", "48-threads"],
)
def test_barrier_reductions_give_each_generation_its_threads_votes(op, threads, count, form, rng):
    """Every thread gets the reduction of its generation's predicates, on data where the
    warpgroups' answers differ and where every or no thread votes yes: two warpgroups at
    barriers of their own, the whole CTA at one, one warpgroup whose warps arrive one at a
    time (the first three wait and receive the answer when the last completes it), and a
    CTA of 48 threads (a warp of 16: ``.and`` counts the threads, not 32 a warp)."""
    a = nonzero(threads, "float32", rng)
    a[: min(128, threads)] = np.abs(a[: min(128, threads)])  # warpgroup 0 all yes
    group = threads if count is None else count
    func = barrier_vote(threads, op, count, form)
    for values in (a, -np.abs(a), np.abs(a)):
        poison = np.full(threads, -7, np.int64)
        result = sim.run(func, [values, poison], pipeline=BUILTIN)
        np.testing.assert_array_equal(result[1], reduce_votes(values, op, group))
        assert result.counters.instructions["bar.red"] == -(-threads // 32)


@pytest.mark.parametrize(
    "form, count, expect",
    [
        ("turns", 128, r"completed with warps \[0, 1, 4, 5\], part of warpgroup 0"),
        ("branches", 128, r"warps \[0, 1, 2, 3, 4, 5, 6, 7\] arrive at it, more than the 4"),
        ("one", 128, r"arrive 256 threads where 128 complete the generation"),
        ("with sync", 256, "PTX does not allow the two on one barrier at once"),
        ("mixed ops", 256, r"reduce with \.popc while the generation's earlier arrivals"),
    ],
    ids=["warp-by-warp", "two-branches", "one-statement", "with-bar-sync", "mixed-ops"],
)
def test_barrier_votes_that_may_split_or_mix_are_errors(form, count, expect, rng):
    """Controls: two warpgroups at one barrier of 128 threads, arriving a warp of each at
    a time or from two branches (on the GPU a generation may gather warps of both, so a
    warpgroup's threads may get different answers: this library reads such a vote as the
    warpgroup's), one statement filling two generations, ``bar.red`` with ``bar.sync``,
    and two reductions in one generation."""
    a = nonzero(256, "float32", rng)
    with pytest.raises(SimError, match=expect):
        sim.run(barrier_vote(256, "or", count, form), [a, np.zeros(256, np.int64)],
                pipeline=BUILTIN)  # fmt: skip


# -- programmatic dependent launch ------------------------------------------------------------
@T.prim_func
def grid_dependency(A: T.Buffer((2, 64), "float32")):
    T.device_entry()
    _, cy = T.cta_id([1, 2])
    tx = T.thread_id([64])
    T.ptx.griddepcontrol.wait()
    A[cy, tx] = A[cy, tx] * T.float32(2.0)
    T.ptx.griddepcontrol.launch_dependents()


def test_griddepcontrol_runs_one_grid_with_no_grid_before_or_after():
    """``griddepcontrol.wait`` and ``.launch_dependents`` (programmatic dependent launch):
    the simulator runs one grid, so both complete at once; each is counted once a warp (2
    CTAs of 2 warps) and the kernel's work is done; an action the PTX ISA lacks is not
    modelled (the control)."""
    a = nonzero((2, 64), "float32", np.random.default_rng(3))
    out = sim.run(grid_dependency, [a.copy()], target="sm_90a")
    assert (out[0] == a * 2).all()
    counts = out.counters.as_dict()["instructions"]
    assert counts["griddepcontrol.wait"] == counts["griddepcontrol.launch_dependents"] == 4
    run = TABLE.get("tirx.ptx.griddepcontrol").run  # T.ptx checks the action; the IR not
    with pytest.raises(sim.NotModeled, match=r"griddepcontrol\.stall: the PTX ISA has"):
        run(None, SimpleNamespace(args=[SimpleNamespace(value="stall")]))
