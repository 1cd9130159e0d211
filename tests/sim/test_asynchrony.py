"""Asynchronous effects in the simulator: cp.async groups, mbarrier phases, tcgen05 waits.

Hand-written kernels use TVM's ``T.ptx`` spellings directly. Each correct kernel checks a
result on random data (outputs poisoned first); each broken one (a missing wait, a write
over a copy in flight, a wait that never completes...) must be reported, and where the
protection is a guard on memory, turning the guard off shows what the kernel would have
read instead: the bytes from before the copy (the write really is deferred).
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from tvm.script import tirx as T

from tirx_cuda_dispatch import runtime, sim
from tirx_cuda_dispatch.sim import SimError, calls
from tirx_cuda_dispatch.sim.errors import NotModeled
from tirx_cuda_dispatch.sim.memory import Memory

THREADS = 64  # two warps: reading the other warp's bytes needs a barrier


def floats(n, rng):
    return runtime.random_array((n,), "float32", rng)


def cp_async(cop: str, cp_size: int):
    return T.ptx[f"cp.async.{cop}.shared.global"]


# -- cp.async round trips -----------------------------------------------------------------------
def roundtrip(
    cp_size: int, cop: str = "ca", wait: bool = True, sync: bool = True, mirror: bool = True
):
    """Thread t copies its cp_size bytes of A into shared memory with cp.async (after S is
    prefilled from P), commits, waits (``wait``), syncs (``sync``) and writes the bytes of
    thread 63 - t (the other warp; its own without ``mirror``) to B: B = A."""
    n = cp_size // 4
    copy = cp_async(cop, cp_size)
    reader = (lambda tid: THREADS - 1 - tid) if mirror else (lambda tid: tid)

    # fmt: off
    @T.prim_func
    def kernel(A_ptr: T.handle, P_ptr: T.handle, B_ptr: T.handle):
        A = T.match_buffer(A_ptr, (THREADS * n,), "float32")
        P = T.match_buffer(P_ptr, (THREADS * n,), "float32")
        B = T.match_buffer(B_ptr, (THREADS * n,), "float32")
        T.device_entry()
        T.cta_id([1])
        tid = T.thread_id([THREADS])
        pool = T.SMEMPool()
        S = pool.alloc((THREADS * n,), "float32")
        pool.commit()
        for i in range(n):
            S[tid * n + i] = P[tid * n + i]
        T.cuda.cta_sync()
        copy(T.address_of(S[tid * n]), T.address_of(A[tid * n]), cp_size)
        T.ptx.cp.async_.commit_group()
        if wait:
            T.ptx.cp.async_.wait_group(0)
        if sync:
            T.cuda.cta_sync()
        for i in range(n):
            B[reader(tid) * n + i] = S[reader(tid) * n + i]
        if not wait:
            T.ptx.cp.async_.wait_all()
    # fmt: on
    return kernel


ROUND_TRIPS = [(4, "ca"), (8, "ca"), (16, "ca"), (16, "cg")]


@pytest.mark.parametrize("cp_size, cop", ROUND_TRIPS, ids=[f"{c}-{s}" for s, c in ROUND_TRIPS])
def test_cp_async_round_trip(cp_size, cop, rng):
    n = THREADS * cp_size // 4
    a, p = floats(n, rng), floats(n, rng)
    out = sim.run(roundtrip(cp_size, cop), [a, p, runtime.poison_like(a)])
    np.testing.assert_array_equal(runtime.bits(out[2]), runtime.bits(a))
    ins = out.counters.instructions
    assert ins[f"cp.async.{cop}.b{cp_size * 8}"] == 2  # one per warp
    assert (ins["cp.async.commit_group"], ins["cp.async.wait_group"]) == (2, 2)
    assert out.counters.bytes["global.load"] >= a.nbytes  # A by cp.async, P by plain loads


def test_a_missing_wait_group_is_reported(rng):
    a, p = floats(THREADS * 4, rng), floats(THREADS * 4, rng)
    with pytest.raises(SimError, match="cp.async group not waited") as err:
        sim.run(roundtrip(16, "cg", wait=False), [a, p, runtime.poison_like(a)])
    assert "cp.async.cg.shared.global (cp-size 16)" in str(err.value)  # the instruction
    assert "add cp.async.wait_group before reading" in str(err.value)


def test_without_the_guard_an_early_read_sees_the_bytes_from_before(rng, monkeypatch):
    """The control of the check above: the copy has not landed when the kernel reads, so
    with the guard off the read sees what S held before (P), not A. (Each thread reads
    its own bytes: another warp's early read races with the landing, a second error.)"""
    a, p = floats(THREADS * 4, rng), floats(THREADS * 4, rng)
    with pytest.raises(SimError, match="cp.async group not waited"):
        sim.run(roundtrip(16, "cg", wait=False, mirror=False), [a, p, runtime.poison_like(a)])
    monkeypatch.setattr(Memory, "_guarded", lambda self, threads, index, action: None)
    out = sim.run(roundtrip(16, "cg", wait=False, mirror=False), [a, p, runtime.poison_like(a)])
    np.testing.assert_array_equal(runtime.bits(out[2]), runtime.bits(p))


def test_a_missing_barrier_after_the_wait_is_a_race(rng):
    """The wait makes a thread's copies visible to that thread only: the other warp's
    bytes still need __syncthreads."""
    a, p = floats(THREADS * 4, rng), floats(THREADS * 4, rng)
    with pytest.raises(SimError, match="shared-memory race"):
        sim.run(roundtrip(16, "cg", sync=False), [a, p, runtime.poison_like(a)])


def guarded_copy():
    """Threads below 40 copy A (a guard predicate, TVM's pred=); the others keep P."""

    # fmt: off
    @T.prim_func
    def kernel(A_ptr: T.handle, P_ptr: T.handle, B_ptr: T.handle):
        A = T.match_buffer(A_ptr, (THREADS * 4,), "float32")
        P = T.match_buffer(P_ptr, (THREADS * 4,), "float32")
        B = T.match_buffer(B_ptr, (THREADS * 4,), "float32")
        T.device_entry()
        T.cta_id([1])
        tid = T.thread_id([THREADS])
        pool = T.SMEMPool()
        S = pool.alloc((THREADS * 4,), "float32")
        pool.commit()
        for i in range(4):
            S[tid * 4 + i] = P[tid * 4 + i]
        T.cuda.cta_sync()
        T.ptx["cp.async.cg.shared.global.L2::128B"](
            T.address_of(S[tid * 4]), T.address_of(A[tid * 4]), 16, pred=tid < 40)
        T.ptx.cp.async_.wait_all()
        T.cuda.cta_sync()
        for i in range(4):
            B[(THREADS - 1 - tid) * 4 + i] = S[(THREADS - 1 - tid) * 4 + i]
    # fmt: on
    return kernel


def test_a_guard_predicate_leaves_threads_out(rng):
    a, p = floats(THREADS * 4, rng), floats(THREADS * 4, rng)
    out = sim.run(guarded_copy(), [a, p, runtime.poison_like(a)])
    expected = np.where(np.repeat(np.arange(THREADS), 4) < 40, a, p)
    np.testing.assert_array_equal(runtime.bits(out[2]), runtime.bits(expected))


# -- src-size and ignore-src ----------------------------------------------------------------------
def partial_copy(ignore: bool):
    """Thread t copies 16 bytes with src-size Z[t] (``ignore``: ignore-src Z[t] != 0)."""

    # fmt: off
    @T.prim_func
    def kernel(A_ptr: T.handle, Z_ptr: T.handle, B_ptr: T.handle):
        A = T.match_buffer(A_ptr, (THREADS * 16,), "uint8")
        Z = T.match_buffer(Z_ptr, (THREADS,), "uint32")
        B = T.match_buffer(B_ptr, (THREADS * 16,), "uint8")
        T.device_entry()
        T.cta_id([1])
        tid = T.thread_id([THREADS])
        pool = T.SMEMPool()
        S = pool.alloc((THREADS * 16,), "uint8")
        pool.commit()
        if ignore:
            T.ptx["cp.async.cg.shared.global"](
                T.address_of(S[tid * 16]), T.address_of(A[tid * 16]), 16,
                T.ptx.pred(Z[tid] != T.uint32(0)))
        else:
            T.ptx["cp.async.cg.shared.global"](
                T.address_of(S[tid * 16]), T.address_of(A[tid * 16]), 16, Z[tid])
        T.ptx.cp.async_.commit_group()
        T.ptx.cp.async_.wait_group(0)
        for i in range(16):
            B[tid * 16 + i] = S[tid * 16 + i]
    # fmt: on
    return kernel


def test_src_size_zero_fills_the_rest(rng):
    a = rng.integers(1, 256, size=THREADS * 16, dtype=np.uint8)
    z = rng.integers(0, 17, size=THREADS, dtype=np.uint32)
    out = sim.run(partial_copy(False), [a, z, runtime.poison_like(a)])
    kept = np.arange(16)[None, :] < z[:, None]
    np.testing.assert_array_equal(out[2], np.where(kept, a.reshape(THREADS, 16), 0).ravel())
    # only src-size bytes of A are read (and Z itself)
    assert out.counters.bytes["global.load"] == int(z.sum()) + z.nbytes


def test_ignore_src_zero_fills_everything(rng):
    a = rng.integers(1, 256, size=THREADS * 16, dtype=np.uint8)
    z = rng.integers(0, 2, size=THREADS, dtype=np.uint32)
    out = sim.run(partial_copy(True), [a, z, runtime.poison_like(a)])
    expected = np.where(z[:, None] != 0, 0, a.reshape(THREADS, 16)).ravel()
    np.testing.assert_array_equal(out[2], expected)


def test_a_src_size_above_cp_size_is_reported(rng):
    a = rng.integers(1, 256, size=THREADS * 16, dtype=np.uint8)
    z = np.full(THREADS, 17, dtype=np.uint32)
    with pytest.raises(SimError, match="src-size 17"):
        sim.run(partial_copy(False), [a, z, runtime.poison_like(a)])


# -- commit groups --------------------------------------------------------------------------------
def two_groups(read_newer_early: bool, write_source: str | None = None):
    """Group 0 copies A[:256] to S0, group 1 A[256:] to S1; after wait_group 1 the older
    group's bytes are read (and, ``read_newer_early``, the newer's); after wait_group 0
    the newer's. B = A. ``write_source``: after wait_group 1, each thread stores into the
    source of its copy in the "older" (complete) or the "newer" (pending) group."""
    half = THREADS * 4

    # fmt: off
    @T.prim_func
    def kernel(A_ptr: T.handle, B_ptr: T.handle):
        A = T.match_buffer(A_ptr, (2 * half,), "float32")
        B = T.match_buffer(B_ptr, (2 * half,), "float32")
        T.device_entry()
        T.cta_id([1])
        tid = T.thread_id([THREADS])
        pool = T.SMEMPool()
        S0 = pool.alloc((half,), "float32")
        S1 = pool.alloc((half,), "float32")
        pool.commit()
        other = T.meta_var((THREADS - 1 - tid) * 4)
        T.ptx["cp.async.cg.shared.global"](T.address_of(S0[tid * 4]), T.address_of(A[tid * 4]), 16)
        T.ptx.cp.async_.commit_group()
        T.ptx["cp.async.cg.shared.global"](
            T.address_of(S1[tid * 4]), T.address_of(A[half + tid * 4]), 16)
        T.ptx.cp.async_.commit_group()
        T.ptx.cp.async_.wait_group(1)
        if write_source == "older":
            A[tid * 4] = T.float32(1)
        elif write_source == "newer":
            A[half + tid * 4] = T.float32(1)
        T.cuda.cta_sync()
        for i in range(4):
            B[other + i] = S0[other + i]
        if read_newer_early:
            for i in range(4):
                B[half + other + i] = S1[other + i]
        T.ptx.cp.async_.wait_group(0)
        T.cuda.cta_sync()
        for i in range(4):
            B[half + other + i] = S1[other + i]
    # fmt: on
    return kernel


def test_wait_group_1_frees_the_older_groups_source_only(rng):
    """A store into a copy's source is fine once its group completed (wait_group 1: the
    older group) and an error while it is pending (the newer group)."""
    a = floats(2 * THREADS * 4, rng)
    out = sim.run(two_groups(False, write_source="older"), [a.copy(), runtime.poison_like(a)])
    np.testing.assert_array_equal(runtime.bits(out[1]), runtime.bits(a))  # copied before
    with pytest.raises(SimError, match=r"writes byte 1024 of global A_ptr .* still reads it"):
        sim.run(two_groups(False, write_source="newer"), [a.copy(), runtime.poison_like(a)])


def test_wait_group_1_completes_the_older_group(rng):
    a = floats(2 * THREADS * 4, rng)
    out = sim.run(two_groups(False), [a, runtime.poison_like(a)])
    np.testing.assert_array_equal(runtime.bits(out[1]), runtime.bits(a))


def test_wait_group_1_leaves_the_newer_group_in_flight(rng):
    a = floats(2 * THREADS * 4, rng)
    with pytest.raises(SimError, match="cp.async group not waited") as err:
        sim.run(two_groups(True), [a, runtime.poison_like(a)])
    byte = int(re.search(r"reads byte (\d+)", str(err.value)).group(1))
    assert THREADS * 16 <= byte < 2 * THREADS * 16  # a byte of S1: the newer group's copy


def write_over(second: str, src_size: int = 16):
    """A copy in flight (reading ``src_size`` of its 16 bytes of A), then ``second`` writes
    before the wait: over its shared bytes, a plain store ("store") or another cp.async
    ("copy"); over its global source, a float it reads ("source") or, with ``src_size`` 8,
    one it does not ("unread"); or a float of its source after the wait ("after")."""

    # fmt: off
    @T.prim_func
    def kernel(A_ptr: T.handle, B_ptr: T.handle):
        A = T.match_buffer(A_ptr, (THREADS * 4,), "float32")
        B = T.match_buffer(B_ptr, (THREADS * 4,), "float32")
        T.device_entry()
        T.cta_id([1])
        tid = T.thread_id([THREADS])
        pool = T.SMEMPool()
        S = pool.alloc((THREADS * 4,), "float32")
        pool.commit()
        T.ptx["cp.async.cg.shared.global"](
            T.address_of(S[tid * 4]), T.address_of(A[tid * 4]), 16, T.uint32(src_size))
        if second == "store":
            S[tid * 4 + 1] = T.float32(1)
        elif second == "copy":
            T.ptx["cp.async.ca.shared.global"](
                T.address_of(S[tid * 4]), T.address_of(A[tid * 4]), 8)
        elif second == "source":
            A[tid * 4 + 1] = T.float32(1)
        elif second == "unread":
            A[tid * 4 + 3] = T.float32(1)
        T.ptx.cp.async_.wait_all()
        if second == "after":
            A[tid * 4 + 1] = T.float32(1)
        for i in range(4):
            B[tid * 4 + i] = S[tid * 4 + i]
    # fmt: on
    return kernel


@pytest.mark.parametrize("second", ["store", "copy"])
def test_a_write_over_bytes_in_flight_is_reported(second, rng):
    a = floats(THREADS * 4, rng)
    out = sim.run(write_over("none"), [a, runtime.poison_like(a)])  # the control
    np.testing.assert_array_equal(runtime.bits(out[1]), runtime.bits(a))
    with pytest.raises(SimError, match=r"writes byte \d+ of shared .* still in flight"):
        sim.run(write_over(second), [a, runtime.poison_like(a)])


def test_a_write_over_a_copys_source_in_flight_is_reported(rng):
    """The copy may read its global source at any time until its group completes: a
    store there before the wait may or may not reach shared memory, so it is an error
    naming the copy and the fix."""
    a = floats(THREADS * 4, rng)
    out = sim.run(write_over("after"), [a.copy(), runtime.poison_like(a)])  # the control
    np.testing.assert_array_equal(runtime.bits(out[1]), runtime.bits(a))
    with pytest.raises(
        SimError, match=r"thread 0 writes byte 4 of global A_ptr while cp.async.cg"
    ) as err:
        sim.run(write_over("source"), [a.copy(), runtime.poison_like(a)])
    assert "still reads it" in str(err.value)
    assert "complete its group (cp.async.wait_group) before writing its source" in str(err.value)


def test_bytes_past_the_src_size_are_not_read(rng):
    """With src-size 8 the copy reads bytes 0-7 of its 16: byte 12 is free to write."""
    a = floats(THREADS * 4, rng)
    out = sim.run(write_over("unread", src_size=8), [a.copy(), runtime.poison_like(a)])
    want = a.reshape(THREADS, 4).copy()
    want[:, 2:] = 0  # the zero fill
    np.testing.assert_array_equal(runtime.bits(out[1]), runtime.bits(want.ravel()))


def ends_in_flight(wait: str):
    """A copy, then ``wait``: "none", "group" (wait_group 0 without a commit: the open
    group is not waited for) or "all" (wait_all commits it first)."""

    # fmt: off
    @T.prim_func
    def kernel(A_ptr: T.handle):
        A = T.match_buffer(A_ptr, (THREADS * 4,), "float32")
        T.device_entry()
        T.cta_id([1])
        tid = T.thread_id([THREADS])
        pool = T.SMEMPool()
        S = pool.alloc((THREADS * 4,), "float32")
        pool.commit()
        T.ptx["cp.async.cg.shared.global"](T.address_of(S[tid * 4]), T.address_of(A[tid * 4]), 16)
        if wait == "group":
            T.ptx.cp.async_.wait_group(0)
        elif wait == "all":
            T.ptx.cp.async_.wait_all()
    # fmt: on
    return kernel


@pytest.mark.parametrize("wait", ["none", "group"])
def test_a_kernel_ending_with_copies_in_flight_is_reported(wait, rng):
    a = floats(THREADS * 4, rng)
    sim.run(ends_in_flight("all"), [a])  # the control
    with pytest.raises(SimError, match="exits with cp.async.cg.shared.global .* still in flight"):
        sim.run(ends_in_flight(wait), [a])


# -- what a cp.async may not do ------------------------------------------------------------------
def misaligned(dst_shift: int, src_shift: int):
    # fmt: off
    @T.prim_func
    def kernel(A_ptr: T.handle):
        A = T.match_buffer(A_ptr, (THREADS * 4 + 4,), "float32")
        T.device_entry()
        T.cta_id([1])
        tid = T.thread_id([THREADS])
        pool = T.SMEMPool()
        S = pool.alloc((THREADS * 4 + 4,), "float32")
        pool.commit()
        T.ptx["cp.async.cg.shared.global"](
            T.address_of(S[tid * 4 + dst_shift]), T.address_of(A[tid * 4 + src_shift]), 16)
        T.ptx.cp.async_.wait_all()
    # fmt: on
    return kernel


@pytest.mark.parametrize("shift, side", [((1, 0), "dst"), ((0, 2), "src")])
def test_a_misaligned_cp_async_is_reported(shift, side, rng):
    a = floats(THREADS * 4 + 4, rng)
    sim.run(misaligned(0, 0), [a])  # the control
    with pytest.raises(SimError, match=f"misaligned cp.async.cg.*{side} byte .* 16-byte aligned"):
        sim.run(misaligned(*shift), [a])


def raw_cg(cp_size: int):
    """``cp.async.cg`` with ``cp_size`` bytes, built as the raw table call (TVMScript's
    ``T.ptx`` refuses a .cg of fewer than 16 bytes before the simulator could)."""
    roundtrip(16, "cg")  # registers the op tirx.ptx.cp_async_cg

    # fmt: off
    @T.prim_func
    def kernel(A_ptr: T.handle, B_ptr: T.handle):
        A = T.match_buffer(A_ptr, (THREADS * 4,), "float32")
        B = T.match_buffer(B_ptr, (THREADS * 4,), "float32")
        T.device_entry()
        T.cta_id([1])
        tid = T.thread_id([THREADS])
        pool = T.SMEMPool()
        S = pool.alloc((THREADS * 4,), "float32")
        pool.commit()
        T.evaluate(T.call_intrin(
            "", "tirx.ptx.cp_async_cg", T.cuda.cvta_generic_to_shared(T.address_of(S[tid * 4])),
            T.address_of(A[tid * 4]), cp_size, "async", "cg", "shared", "global", "", "", ""))
        T.ptx.cp.async_.wait_all()
        for i in range(cp_size // 4):
            B[tid * 4 + i] = S[tid * 4 + i]
    # fmt: on
    return kernel


def test_cg_with_8_bytes_is_reported(rng):
    a = floats(THREADS * 4, rng)
    out = sim.run(raw_cg(16), [a, runtime.poison_like(a)])  # the control
    np.testing.assert_array_equal(runtime.bits(out[1]), runtime.bits(a))
    with pytest.raises(SimError, match="cp-size 8, needs 16"):
        sim.run(raw_cg(8), [a, runtime.poison_like(a)])


def raw_op(wait: bool, predicated: bool = False):
    """TVM's legacy ``T.s_tir.cp_async_raw`` op (16 bytes: cp.async.cg); ``predicated``:
    its 6-argument form (InjectPTXAsyncCopy's), which copies where Z[t] is 1."""

    # fmt: off
    @T.prim_func
    def kernel(A_ptr: T.handle, Z_ptr: T.handle, B_ptr: T.handle):
        A = T.match_buffer(A_ptr, (THREADS * 4,), "float32")
        Z = T.match_buffer(Z_ptr, (THREADS,), "int32")
        B = T.match_buffer(B_ptr, (THREADS * 4,), "float32")
        T.device_entry()
        T.cta_id([1])
        tid = T.thread_id([THREADS])
        S = T.alloc_shared((THREADS * 4,), "float32")
        if predicated:
            T.evaluate(T.call_intrin(
                "float32", "tirx.s_tir.cp_async_raw", T.address_of(S[tid * 4]), 0,
                T.address_of(A[tid * 4]), 0, 16, Z[tid]))
        else:
            T.s_tir.cp_async_raw.legacy("float32", S.data, tid * 4, A.data, tid * 4 + Z[tid], 16)
        T.ptx.cp.async_.commit_group()
        if wait:
            T.ptx.cp.async_.wait_group(0)
        T.cuda.cta_sync()
        for i in range(4):
            B[(THREADS - 1 - tid) * 4 + i] = S[(THREADS - 1 - tid) * 4 + i]
        T.ptx.cp.async_.wait_all()
    # fmt: on
    return kernel


def test_tvms_raw_cp_async_op(rng):
    a = floats(THREADS * 4, rng)
    zeros = np.zeros(THREADS, dtype=np.int32)  # no extra offset
    out = sim.run(raw_op(True), [a, zeros, runtime.poison_like(a)])
    np.testing.assert_array_equal(runtime.bits(out[2]), runtime.bits(a))
    with pytest.raises(SimError, match="cp_async_raw.*cp.async group not waited"):
        sim.run(raw_op(False), [a, zeros, runtime.poison_like(a)])


def test_tvms_raw_cp_async_op_with_a_predicate_stores_zeros(rng):
    a = floats(THREADS * 4, rng)
    z = rng.integers(0, 2, size=THREADS, dtype=np.int32)
    out = sim.run(raw_op(True, predicated=True), [a, z, runtime.poison_like(a)])
    expected = np.where(np.repeat(z, 4) == 1, a, np.float32(0))
    np.testing.assert_array_equal(runtime.bits(out[2]), runtime.bits(expected))


# -- mbarrier -------------------------------------------------------------------------------------
def phases():
    """Every thread arrives twice on an mbarrier expecting 64 arrivals; R[t] records
    test_wait.parity 0 and 1 before, after the first and after the second phase, and
    test_wait on the state the first arrive returned."""

    # fmt: off
    @T.prim_func
    def kernel(R_ptr: T.handle):
        R = T.match_buffer(R_ptr, (THREADS, 7), "uint32")
        T.device_entry()
        T.cta_id([1])
        tid = T.thread_id([THREADS])
        pool = T.SMEMPool()
        bar = pool.alloc((1,), "uint64")
        pool.commit()
        ok = T.alloc_local((1,), "uint32")
        state = T.alloc_local((1,), "uint64")
        if T.cuda.thread_rank() == 0:
            T.ptx.mbarrier.init.shared.b64(T.address_of(bar[0]), THREADS)
        T.cuda.cta_sync()
        for p in range(2):
            T.ptx["mbarrier.test_wait.parity.shared.b64"](ok[0], T.address_of(bar[0]), T.uint32(p))
            R[tid, p] = ok[0]
        T.ptx["mbarrier.arrive.shared.b64"](state[0], T.address_of(bar[0]))
        for p in range(2):
            T.ptx["mbarrier.try_wait.parity.shared.b64"](ok[0], T.address_of(bar[0]), T.uint32(p))
            R[tid, 2 + p] = ok[0]
        T.ptx["mbarrier.arrive.release.cta.shared.b64"](T.address_of(bar[0]))
        for p in range(2):
            T.ptx["mbarrier.test_wait.parity.acquire.cta.shared.b64"](
                ok[0], T.address_of(bar[0]), T.uint32(p))
            R[tid, 4 + p] = ok[0]
        T.ptx["mbarrier.test_wait.shared.b64"](ok[0], T.address_of(bar[0]), state[0])
        R[tid, 6] = ok[0]
    # fmt: on
    return kernel


def test_mbarrier_phases_flip_parity():
    out = sim.run(phases(), [np.full((THREADS, 7), 7, dtype=np.uint32)])
    # PTX ISA: parity p names the current phase when it has parity p (incomplete: 0),
    # else the phase before it (complete: 1); phase 0 starts, each 64 arrivals end one.
    before, after_one, after_two = (0, 1), (1, 0), (0, 1)
    expected = [*before, *after_one, *after_two, 1]  # the state's phase (0) has completed
    np.testing.assert_array_equal(out[0], np.tile(expected, (THREADS, 1)))
    assert out.counters.instructions["mbarrier.arrive"] == 4  # two per warp


def handoff(wait: str, arrivals: int = 32):
    """Warp 0 writes S and arrives on an mbarrier expecting ``arrivals``; warp 1 waits for
    phase 0 (``wait``: "blocking" T.cuda.mbarrier_wait, "loop" a while over try_wait,
    "none") and reads S: B[32:] = A[:32]."""

    # fmt: off
    @T.prim_func
    def kernel(A_ptr: T.handle, B_ptr: T.handle):
        A = T.match_buffer(A_ptr, (32,), "float32")
        B = T.match_buffer(B_ptr, (64,), "float32")
        T.device_entry()
        T.cta_id([1])
        tid = T.thread_id([THREADS])
        pool = T.SMEMPool()
        S = pool.alloc((32,), "float32")
        bar = pool.alloc((1,), "uint64")
        pool.commit()
        ok = T.alloc_local((1,), "uint32")
        if tid == 0:
            T.ptx.mbarrier.init.shared.b64(T.address_of(bar[0]), arrivals)
        T.ptx["fence.mbarrier_init.release.cluster"]()
        T.cuda.cta_sync()
        if tid < 32:
            S[tid] = A[tid]
            B[tid] = A[tid]
            T.ptx["mbarrier.arrive.shared.b64"](T.address_of(bar[0]))
        else:
            if wait == "blocking":
                T.cuda.mbarrier_wait(T.address_of(bar[0]), 0)
            elif wait == "loop":
                ok[0] = T.uint32(0)
                while ok[0] == T.uint32(0):
                    T.ptx["mbarrier.try_wait.parity.shared.b64"](ok[0], T.address_of(bar[0]), 0)
            B[tid] = S[tid - 32]
    # fmt: on
    return kernel


@pytest.mark.parametrize("wait", ["blocking", "loop"])
def test_an_mbarrier_orders_a_handoff_between_warps(wait, rng):
    a = floats(32, rng)
    out = sim.run(handoff(wait), [a, runtime.poison_like(np.zeros(64, np.float32))])
    np.testing.assert_array_equal(runtime.bits(out[1]), runtime.bits(np.concatenate([a, a])))


def test_the_handoff_without_the_wait_is_a_race(rng):
    a = floats(32, rng)
    with pytest.raises(SimError, match="shared-memory race .* warp 1 reads it after warp 0"):
        sim.run(handoff("none"), [a, runtime.poison_like(np.zeros(64, np.float32))])


@pytest.mark.parametrize("wait", ["blocking", "loop"])
def test_a_wait_that_can_never_complete_is_a_deadlock(wait, rng):
    a = floats(32, rng)
    with pytest.raises(SimError, match="deadlock: .* phase 0 .*32 of 64 arrivals still pending"):
        sim.run(handoff(wait, arrivals=64), [a, runtime.poison_like(np.zeros(64, np.float32))])


def transactions(completed: int):
    """Thread 0: init(1); arrive.expect_tx(64); complete_tx 32 then ``completed - 32``;
    phase 1: expect_tx(16), arrive, complete_tx(16). R records test_wait after each step."""

    # fmt: off
    @T.prim_func
    def kernel(R_ptr: T.handle):
        R = T.match_buffer(R_ptr, (6,), "uint32")
        T.device_entry()
        T.cta_id([1])
        tid = T.thread_id([32])
        pool = T.SMEMPool()
        bar = pool.alloc((1,), "uint64")
        pool.commit()
        ok = T.alloc_local((1,), "uint32")
        if tid == 0:
            T.ptx.mbarrier.init.shared.b64(T.address_of(bar[0]), 1)
            T.ptx["mbarrier.arrive.expect_tx.shared.b64"](T.address_of(bar[0]), 64)
            T.ptx["mbarrier.test_wait.parity.shared.b64"](ok[0], T.address_of(bar[0]), 0)
            R[0] = ok[0]
            T.ptx["mbarrier.complete_tx.shared.b64"](T.address_of(bar[0]), 32)
            T.ptx["mbarrier.test_wait.parity.shared.b64"](ok[0], T.address_of(bar[0]), 0)
            R[1] = ok[0]
            T.ptx["mbarrier.complete_tx.shared.b64"](T.address_of(bar[0]), completed - 32)
            T.cuda.mbarrier_wait(T.address_of(bar[0]), 0)
            R[2] = T.uint32(1)
            T.ptx["mbarrier.expect_tx.shared.b64"](T.address_of(bar[0]), 16)
            T.ptx["mbarrier.arrive.shared.b64"](T.address_of(bar[0]))
            T.ptx["mbarrier.test_wait.parity.shared.b64"](ok[0], T.address_of(bar[0]), 1)
            R[3] = ok[0]
            T.ptx["mbarrier.complete_tx.shared.b64"](T.address_of(bar[0]), 16)
            T.ptx["mbarrier.test_wait.parity.shared.b64"](ok[0], T.address_of(bar[0]), 1)
            R[4] = ok[0]
            T.ptx["mbarrier.inval.shared.b64"](T.address_of(bar[0]))
            R[5] = T.uint32(1)
    # fmt: on
    return kernel


def test_tx_count_bookkeeping():
    out = sim.run(transactions(64), [np.full(6, 7, dtype=np.uint32)])
    # a phase completes when no arrival is pending and the tx-count is back at zero
    np.testing.assert_array_equal(out[0], [0, 0, 1, 0, 1, 1])


def test_a_transaction_never_completed_is_a_deadlock():
    with pytest.raises(SimError, match="deadlock: .*0 of 1 arrivals still pending, tx-count 16"):
        sim.run(transactions(48), [np.full(6, 7, dtype=np.uint32)])


def misuse(what: str):
    """An mbarrier used wrongly: "twice" initialized by every thread of a warp, "plain"
    read with an ordinary load, "uninitialized" arrived on before any init, "extra"
    arrived on with a count of 20 when 16 arrivals are pending (32 single arrivals
    would be right: they complete two phases)."""

    # fmt: off
    @T.prim_func
    def kernel(R_ptr: T.handle):
        R = T.match_buffer(R_ptr, (32,), "uint64")
        T.device_entry()
        T.cta_id([1])
        tid = T.thread_id([32])
        pool = T.SMEMPool()
        bar = pool.alloc((1,), "uint64")
        pool.commit()
        if what == "twice":
            T.ptx.mbarrier.init.shared.b64(T.address_of(bar[0]), 16)
        elif what != "uninitialized":
            if tid == 0:
                T.ptx.mbarrier.init.shared.b64(T.address_of(bar[0]), 16)
        if what == "plain":
            R[tid] = bar[0]
        elif what == "extra":
            if tid == 0:
                T.ptx["mbarrier.arrive.shared.b64"](T.address_of(bar[0]), T.uint32(20))
            R[tid] = T.uint64(1)
        else:
            T.ptx["mbarrier.arrive.shared.b64"](T.address_of(bar[0]))
            R[tid] = T.uint64(1)
    # fmt: on
    return kernel


@pytest.mark.parametrize(
    "what, message",
    [
        ("twice", "holds a live mbarrier .* only one thread initializes"),
        ("plain", "belongs to the mbarrier at byte 0 .* only mbarrier instructions"),
        ("uninitialized", "where no mbarrier is initialized"),
        ("extra", "20 arrival.* more than the phase expects"),
    ],
)
def test_mbarrier_misuse_is_reported(what, message):
    sim.run(misuse("right"), [np.zeros(32, dtype=np.uint64)])  # the control: 2 phases
    with pytest.raises(SimError, match=message):
        sim.run(misuse(what), [np.zeros(32, dtype=np.uint64)])


def tracked_copies(noinc: bool, wait: bool, write_source: bool = False):
    """Each thread copies 16 bytes with cp.async and has an mbarrier track them
    (cp.async.mbarrier.arrive{.noinc}); then, ``wait``, every thread waits for phase 0
    and reads the other warp's bytes: B = A. No wait_group at all. Without ``wait`` the
    phase expects one more arrival, which thread 0 makes last (so it is still open when
    the bytes are read). ``write_source``: after the wait each thread stores into the
    source of its copy (complete with the phase: allowed)."""
    arrivals = THREADS + (not wait)

    # fmt: off
    @T.prim_func
    def kernel(A_ptr: T.handle, B_ptr: T.handle):
        A = T.match_buffer(A_ptr, (THREADS * 4,), "float32")
        B = T.match_buffer(B_ptr, (THREADS * 4,), "float32")
        T.device_entry()
        T.cta_id([1])
        tid = T.thread_id([THREADS])
        pool = T.SMEMPool()
        S = pool.alloc((THREADS * 4,), "float32")
        bar = pool.alloc((1,), "uint64")
        pool.commit()
        if tid == 0:
            T.ptx.mbarrier.init.shared.b64(T.address_of(bar[0]), arrivals)
        T.cuda.cta_sync()
        T.ptx["cp.async.cg.shared.global"](T.address_of(S[tid * 4]), T.address_of(A[tid * 4]), 16)
        if noinc:
            T.ptx["cp.async.mbarrier.arrive.noinc.shared.b64"](T.address_of(bar[0]))
        else:
            T.ptx["cp.async.mbarrier.arrive.shared.b64"](T.address_of(bar[0]))
            T.ptx["mbarrier.arrive.shared.b64"](T.address_of(bar[0]))
        if wait:
            T.cuda.mbarrier_wait(T.address_of(bar[0]), 0)
        if write_source:
            A[tid * 4] = T.float32(1)
        for i in range(4):
            B[(THREADS - 1 - tid) * 4 + i] = S[(THREADS - 1 - tid) * 4 + i]
        if not wait and tid == 0:
            T.ptx["mbarrier.arrive.shared.b64"](T.address_of(bar[0]))
    # fmt: on
    return kernel


@pytest.mark.parametrize("noinc", [True, False], ids=["noinc", "inc"])
def test_an_mbarrier_tracks_cp_async_copies(noinc, rng):
    a = floats(THREADS * 4, rng)
    out = sim.run(tracked_copies(noinc, wait=True), [a, runtime.poison_like(a)])
    np.testing.assert_array_equal(runtime.bits(out[1]), runtime.bits(a))
    with pytest.raises(SimError, match="or wait for the mbarrier at byte 1024 .* phase 0"):
        sim.run(tracked_copies(noinc, wait=False), [a, runtime.poison_like(a)])


def test_a_phase_that_completes_frees_its_copies_sources(rng):
    """The copies land (and stop reading A) with the phase: a store into A after the wait
    is fine; before the phase completes (no wait, one arrival still missing) it is not."""
    a = floats(THREADS * 4, rng)
    out = sim.run(
        tracked_copies(True, wait=True, write_source=True), [a.copy(), runtime.poison_like(a)]
    )
    np.testing.assert_array_equal(runtime.bits(out[1]), runtime.bits(a))
    with pytest.raises(SimError, match=r"writes byte 0 of global A_ptr .* still reads it"):
        sim.run(
            tracked_copies(True, wait=False, write_source=True), [a.copy(), runtime.poison_like(a)]
        )


# -- while loops ----------------------------------------------------------------------------------
def countdown(start):
    # fmt: off
    @T.prim_func
    def kernel(B_ptr: T.handle):
        B = T.match_buffer(B_ptr, (32,), "int32")
        T.device_entry()
        T.cta_id([1])
        tid = T.thread_id([32])
        i = T.alloc_local((1,), "int32")
        n = T.alloc_local((1,), "int32")
        i[0] = start(tid)
        n[0] = 0
        while i[0] > 0:
            i[0] = i[0] - 1
            n[0] = n[0] + 1
        B[tid] = n[0]
    # fmt: on
    return kernel


def test_a_while_loop_runs_until_its_condition_fails():
    out = sim.run(countdown(lambda tid: 3), [np.zeros(32, dtype=np.int32)])
    np.testing.assert_array_equal(out[0], np.full(32, 3))


def test_threads_leave_a_while_loop_in_different_iterations():
    """Each thread leaves when its own condition fails (the odd lanes one iteration
    later); the others wait at the loop's end."""
    out = sim.run(countdown(lambda tid: 1 + tid % 3), [np.zeros(32, dtype=np.int32)])
    np.testing.assert_array_equal(out[0], 1 + np.arange(32) % 3)


# -- loops whose bounds differ between threads ---------------------------------------------------
def ranged(first, stop, barrier: bool = False, step: int = 1):
    """Thread t adds up the values of ``for j in range(first(t), stop(t), step)``
    (``barrier``: each iteration also waits at named barrier 1 for both warps, 64
    threads)."""

    # fmt: off
    @T.prim_func
    def kernel(B_ptr: T.handle):
        B = T.match_buffer(B_ptr, (THREADS,), "int32")
        T.device_entry()
        T.cta_id([1])
        tid = T.thread_id([THREADS])
        n = T.alloc_local((1,), "int32")
        n[0] = 0
        for j in T.serial(first(tid), stop(tid), step=step):
            n[0] = n[0] + j
            if barrier:
                T.ptx.bar.sync(1, THREADS)
        B[tid] = n[0]
    # fmt: on
    return kernel


@pytest.mark.parametrize("step", [1, 2, 3])
def test_threads_run_the_iterations_of_their_own_loop_bounds(step):
    """Each thread's start and stop its own (warps of different roles, lanes diverged),
    every step: every thread takes exactly the values of its range; so does a loop whose
    bounds are the same in every thread (TIR's extent is the range's length)."""
    tid = np.arange(THREADS)
    zeros = [np.zeros(THREADS, np.int32)]
    out = sim.run(ranged(lambda t: t % 3, lambda t: t % 3 + t % 7, step=step), zeros)
    np.testing.assert_array_equal(out[0], [sum(range(t % 3, t % 3 + t % 7, step)) for t in tid])
    out = sim.run(ranged(lambda t: 1, lambda t: 8, step=step), zeros)
    np.testing.assert_array_equal(out[0], np.full(THREADS, sum(range(1, 8, step))))


def test_a_loop_counting_down_runs_and_with_bounds_of_its_own_a_thread_is_not_modeled():
    """``range(6, 0, -1)`` in every thread runs 6 down to 1; per-thread bounds with a
    negative step are named as not modelled instead of running nothing."""
    zeros = [np.zeros(THREADS, np.int32)]
    out = sim.run(ranged(lambda t: 6, lambda t: 0, step=-1), zeros)
    np.testing.assert_array_equal(out[0], np.full(THREADS, 21))
    with pytest.raises(NotModeled, match=r"bounds that differ between threads with step -1"):
        sim.run(ranged(lambda t: 6 + t % 3, lambda t: 0, step=-1), zeros)


def test_a_barrier_in_a_loop_one_warp_leaves_early_is_a_deadlock():
    """Warp 0 runs one iteration and warp 1 two: warp 1's second wait at the 64-thread
    barrier has no partner, which the simulator names; the control: equal counts run."""
    out = sim.run(ranged(lambda t: 0, lambda t: 2, True), [np.zeros(THREADS, np.int32)])
    np.testing.assert_array_equal(out[0], np.ones(THREADS))
    with pytest.raises(SimError, match=r"bar.sync 1, 64"):
        sim.run(ranged(lambda t: 0, lambda t: 1 + t // 32, True), [np.zeros(THREADS, np.int32)])


def ranged_handoff(later_start: bool):
    """Warp 1 waits at named barrier 2 (both warps, 64 threads) for warp 0 to arrive:
    warp 1 in its loop's second iteration while warp 0's loop ran one and warp 0 arrives
    after it; or (``later_start``) warp 0 waits in its first iteration, value 0, and
    warp 1 arrives in its first, value 1."""

    # fmt: off
    @T.prim_func
    def kernel(B_ptr: T.handle):
        B = T.match_buffer(B_ptr, (THREADS,), "int32")
        T.device_entry()
        T.cta_id([1])
        tid = T.thread_id([THREADS])
        n = T.alloc_local((1,), "int32")
        n[0] = 0
        if later_start:
            for j in T.serial(tid // 32, 2):
                n[0] = n[0] + 1 + j
                if j == tid // 32:  # each warp's first iteration
                    if j == 0:
                        T.ptx.bar.sync(2, THREADS)
                    else:
                        T.ptx.bar.arrive(2, THREADS)
        else:
            for j in T.serial(1 + tid // 32):
                n[0] = n[0] + 1 + j
                if j == 1:
                    T.ptx.bar.sync(2, THREADS)
            if tid < 32:
                T.ptx.bar.arrive(2, THREADS)
        B[tid] = n[0]
    # fmt: on
    return kernel


@pytest.mark.parametrize("later_start", [False, True], ids=["after-its-loop", "later-value"])
def test_a_warp_outside_the_running_iteration_goes_on_for_the_one_that_waits(later_start):
    """A warp whose range does not hold the running value does not wait with the warp
    that blocks in it: past its last value it goes on after the loop, before its first it
    runs its own iterations, and arrives where the other waits (no deadlock)."""
    out = sim.run(ranged_handoff(later_start), [np.zeros(THREADS, np.int32)])
    want = [3, 2] if later_start else [1, 3]
    np.testing.assert_array_equal(out[0], np.repeat(want, 32))


# -- tcgen05 on the same queue ----------------------------------------------------------------
def tmem_copy(wait_st: bool, wait_ld: bool, load: bool = True, scatter: str | None = None):
    """A warpgroup stores A[t, 0:4] to TMEM lane t with tcgen05.st, waits (``wait_st``),
    loads the columns back with tcgen05.ld (``load``), waits (``wait_ld``): B = A.
    ``scatter``: the load writes registers of two buffers named out of order, with
    constant indices (``"constant"``) or indices of a loop variable (``"loop"``)."""

    # fmt: off
    @T.prim_func
    def kernel(A_ptr: T.handle, B_ptr: T.handle):
        A = T.match_buffer(A_ptr, (128, 4), "uint32")
        B = T.match_buffer(B_ptr, (128, 4), "uint32")
        T.device_entry()
        warp = T.warp_id([4])
        T.warpgroup_id([1])
        tid = T.thread_id([128])
        pool = T.SMEMPool()
        tmem_addr = pool.alloc((1,), "uint32")
        pool.commit()
        if warp == 0:
            T.ptx["tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32"](
                T.address_of(tmem_addr[0]), 32)
        T.tvm_storage_sync("shared")
        r = T.alloc_local((4,), "uint32")
        s = T.alloc_local((8,), "uint32")
        u = T.alloc_local((8,), "uint32")
        for i in range(4):
            r[i] = A[tid, i]
        lane0 = T.meta_var(T.cuda.get_tmem_addr(tmem_addr[0], 32 * warp, 0))
        T.ptx["tcgen05.st.sync.aligned.32x32b.x4.b32"](lane0, r[0], r[1], r[2], r[3])
        if wait_st:
            T.ptx.tcgen05.wait__st.sync.aligned()
        if scatter == "constant":
            T.ptx["tcgen05.ld.sync.aligned.32x32b.x4.b32"](u[3], s[1], u[0], s[2], lane0)
            T.ptx.tcgen05.wait__ld.sync.aligned()
            B[tid, 0] = u[3]
            B[tid, 1] = s[1]
            B[tid, 2] = u[0]
            B[tid, 3] = s[2]
        elif scatter == "loop":
            for j in T.serial(2):  # each round the same words, into other registers
                T.ptx["tcgen05.ld.sync.aligned.32x32b.x4.b32"](
                    s[4 * j + 3], s[4 * j + 2], u[j + 1], s[4 * j], lane0)
                T.ptx.tcgen05.wait__ld.sync.aligned()
                B[tid, 0] = s[4 * j + 3]
                B[tid, 1] = s[4 * j + 2]
                B[tid, 2] = u[j + 1]
                B[tid, 3] = s[4 * j]
        elif load:
            T.ptx["tcgen05.ld.sync.aligned.32x32b.x4.b32"](s[0], s[1], s[2], s[3], lane0)
            if wait_ld:
                T.ptx.tcgen05.wait__ld.sync.aligned()
            for i in range(4):
                B[tid, i] = s[i]
        else:
            for i in range(4):
                B[tid, i] = r[i]
        T.cuda.cta_sync()
        if warp == 0:
            T.ptx["tcgen05.dealloc.cta_group::1.sync.aligned.b32"](tmem_addr[0], 32)
    # fmt: on
    return kernel


def test_tcgen05_waits_land_the_tensor_memory_and_registers(rng):
    a = runtime.random_array((128, 4), "uint32", rng)
    out = sim.run(tmem_copy(True, True), [a, runtime.poison_like(a)], target="sm_100a")
    np.testing.assert_array_equal(out[1], a)
    with pytest.raises(SimError, match="tcgen05.ld.32x32b.x4 .*wait::ld is missing"):
        sim.run(tmem_copy(True, False), [a, runtime.poison_like(a)], target="sm_100a")
    with pytest.raises(SimError, match="tcgen05.st.32x32b.x4 .*wait::st is missing"):
        sim.run(tmem_copy(False, True), [a, runtime.poison_like(a)], target="sm_100a")
    with pytest.raises(SimError, match="exits with tcgen05.st.32x32b.x4 still in flight"):
        sim.run(tmem_copy(False, True, load=False), [a, a.copy()], target="sm_100a")


@pytest.mark.parametrize("scatter", ["constant", "loop"])
def test_registers_of_two_buffers_land_where_the_ld_puts_them(scatter, rng, monkeypatch):
    """``calls.register_cells``: a tcgen05.ld into registers of two buffers named out of
    order writes each word where its position says; indices of a loop variable take the
    register-by-register path, constant ones the grouped one (cached by the registers'
    handles). B is poisoned first."""
    each = []
    general = calls._register_cells_each
    monkeypatch.setattr(calls, "_register_cells_each", lambda *a: each.append(1) or general(*a))
    a = runtime.random_array((128, 4), "uint32", rng)
    kernel = tmem_copy(True, True, scatter=scatter)
    out = sim.run(kernel, [a, runtime.poison_like(a)], target="sm_100a")
    np.testing.assert_array_equal(out[1], a)
    assert bool(each) == (scatter == "loop")
