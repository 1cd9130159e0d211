"""The simulator runs the CTAs of a cluster together (a ``clusterCtaIdx.x`` launch): one
window of each shared allocation per CTA, named barriers per CTA, ``barrier.cluster``
over all of them, ``mapa`` and ``.shared::cluster`` mbarrier arrivals into another CTA,
and TMA loads multicast to the CTAs of a ``ctaMask``. Each rule with the control it
catches."""

from __future__ import annotations

import numpy as np
import pytest
from tvm.script import tirx as T
from tvm.script.tirx import tile as Tx

from executors import execute
from tirx_cuda_dispatch import sim

WHERE = ["sim", pytest.param("gpu", marks=pytest.mark.gpu)]
TILE = 64  # a 64 x 64 float16 tile, half of it loaded by each CTA of a pair


def multicast(mask: int = 3, init_sync: str = "cluster", halves: int = 2):
    """Each CTA of a cluster of two loads its half of A's rows by TMA and multicasts it to
    the CTAs of ``mask``; every CTA then copies the whole tile to its row of B. Each
    CTA's barrier expects the bytes of ``halves`` halves."""
    expect = TILE * TILE // 2 * 2 * halves

    # fmt: off
    @T.prim_func
    def kernel(A_ptr: T.handle, B_ptr: T.handle):
        A = T.match_buffer(A_ptr, (TILE, TILE), "float16")
        B = T.match_buffer(B_ptr, (2, TILE, TILE), "float16")
        T.device_entry()
        bx = T.cta_id([2])
        rank = T.cta_id_in_cluster([2])
        tid = T.thread_id([128])
        A_s = T.alloc_buffer((TILE, TILE), "float16", scope="shared", align=1024)
        bar = T.alloc_shared([1], "uint64")
        if tid == 0:
            T.ptx.mbarrier.init.shared.b64(bar.ptr_to([0]), 1)
            T.ptx["fence.mbarrier_init.release.cluster"]()
        if init_sync == "cluster":
            T.cuda.cluster_sync()
        else:
            T.cuda.cta_sync()
        if tid == 0:
            T.evaluate(T.ptx["mbarrier.arrive.expect_tx.shared.b64"](bar.ptr_to([0]), expect))
            h = T.meta_var(rank * (TILE // 2))
            Tx.copy_async(A_s[h : h + TILE // 2, :], A[h : h + TILE // 2, :],
                          mbar=bar.ptr_to([0]), dispatch="tma_auto", cta_mask=mask)
        T.cuda.mbarrier_wait(bar.ptr_to([0]), 0)
        Tx.cta.copy(B[bx, :, :], A_s[:, :])
        T.cuda.cluster_sync()
    # fmt: on
    return kernel


def handshake(peer: int = 1, cta_barrier: bool = True):
    """CTA 0 arrives, after a CTA barrier of its own, on the mbarrier of CTA ``peer``
    (``mapa``, ``mbarrier.arrive.shared::cluster``); CTA 1 waits on its mbarrier, then
    writes its row of B. With ``cta_barrier`` CTA 1 meets a CTA barrier after its wait,
    which deadlocks if a CTA barrier counted the cluster's threads."""

    # fmt: off
    @T.prim_func
    def kernel(B_ptr: T.handle):
        B = T.match_buffer(B_ptr, (2, 128), "float32")
        T.device_entry()
        bx = T.cta_id([2])
        rank = T.cta_id_in_cluster([2])
        tid = T.thread_id([128])
        pool = T.alloc_buffer((16,), "uint8", scope="shared.dyn", align=16)
        T.attr({"tirx.dyn_smem_bytes": 16})
        bar = T.decl_buffer((1,), "uint64", pool.data, scope="shared.dyn")
        remote = T.alloc_buffer((1,), "uint32", scope="local")
        if tid == 0:
            T.ptx.mbarrier.init.shared.b64(bar.ptr_to([0]), 1)
            T.ptx["fence.mbarrier_init.release.cluster"]()
        T.cuda.cluster_sync()
        if rank == 0:
            if cta_barrier:
                T.cuda.cta_sync()
            if tid == 0:
                T.evaluate(T.ptx["mapa.shared::cluster.u32"](
                    remote[0], T.cuda.cvta_generic_to_shared(bar.ptr_to([0])), T.uint32(peer)))
                T.evaluate(T.ptx["mbarrier.arrive.shared::cluster.b64"](remote[0]))
        else:
            T.cuda.mbarrier_wait_acquire_cluster(bar.ptr_to([0]), 0)
            if cta_barrier:
                T.cuda.cta_sync()
        B[bx, tid] = T.float32(1.0) + T.Cast("float32", rank)
        T.cuda.cluster_sync()
    # fmt: on
    return kernel


def _tile(rng) -> tuple[np.ndarray, np.ndarray]:
    a = rng.uniform(-1, 1, (TILE, TILE)).astype(np.float16)
    return a, np.full((2, TILE, TILE), np.nan, np.float16)


@pytest.mark.parametrize("where", WHERE)
def test_a_multicast_load_lands_in_both_ctas(rng, where, gpu):
    a, b = _tile(rng)
    out = execute(multicast(), [a, b], where, gpu)[1]
    np.testing.assert_array_equal(out, np.stack([a, a]))


def test_without_the_multicast_the_peer_half_never_lands():
    """Control: each CTA loads its half into itself only (ctaMask 0); its barrier still
    expects both halves, which nothing sends: a deadlock naming the tx-count."""
    a, b = _tile(np.random.default_rng(1))
    with pytest.raises(sim.SimError, match=r"deadlock.*tx-count 4096"):
        sim.run(multicast(mask=0), [a, b])


def test_a_mask_naming_a_cta_outside_the_cluster_is_an_error():
    a, b = _tile(np.random.default_rng(2))
    with pytest.raises(sim.SimError, match="ctaMask 0x7 names CTA rank 2, but the cluster has 2"):
        sim.run(multicast(mask=7), [a, b])


def test_a_multicast_before_the_peer_initialized_its_barrier_is_a_race():
    """Control: a CTA barrier, not a cluster one, between the mbarrier init and the
    multicast that completes bytes on the other CTA's barrier."""
    a, b = _tile(np.random.default_rng(3))
    with pytest.raises(
        sim.SimError, match=r"race on bar byte 0 of the CTA of rank 1: warp 0 reads it after warp 4"
    ):
        sim.run(multicast(init_sync="cta"), [a, b])


@pytest.mark.parametrize("where", WHERE)
def test_a_remote_arrival_releases_the_other_cta(where, gpu):
    b = np.full((2, 128), np.nan, np.float32)
    out = execute(handshake(), [b], where, gpu)[0]
    np.testing.assert_array_equal(out, np.stack([np.full(128, 1.0), np.full(128, 2.0)]))


def test_an_arrival_on_its_own_barrier_leaves_the_peer_waiting():
    """Control: CTA 0 maps the barrier into itself (rank 0), so CTA 1's barrier never
    completes its phase: the deadlock names CTA 1's warps, its barrier and CTA 0's warps
    waiting at the cluster barrier."""
    b = np.full((2, 128), np.nan, np.float32)
    with pytest.raises(
        sim.SimError,
        match=r"deadlock: no warp can run: warps 4-7 \(the CTA of rank 1\) wait at mbarrier_wait "
        r".*for the mbarrier at byte 0 of shared pool of the CTA of rank 1 .*warps 0-3 \(the "
        r"CTA of rank 0\) wait at barrier.cluster",
    ):
        sim.run(handshake(peer=0), [b])


def test_a_cta_barrier_waits_for_its_own_cta_only():
    """CTA 0 passes its CTA barrier while CTA 1 still waits for CTA 0's arrival: a CTA
    barrier that counted the cluster's threads would deadlock here."""
    b = np.full((2, 128), np.nan, np.float32)
    out = sim.run(handshake(cta_barrier=True), [b])[0]
    assert (out[1] == 2.0).all()


def test_a_shared_access_outside_its_own_cta_is_an_error():
    """A thread's shared address reaches its own CTA's window only."""

    @T.prim_func
    def kernel(B_ptr: T.handle):
        B = T.match_buffer(B_ptr, (2, 128), "float32")
        T.device_entry()
        bx = T.cta_id([2])
        T.cta_id_in_cluster([2])
        tid = T.thread_id([128])
        S_ = T.alloc_buffer((64,), "float32", scope="shared")
        S_[tid] = T.float32(1.0)  # threads 64-127 write past the 64 floats
        T.cuda.cta_sync()
        B[bx, tid] = S_[tid % 64]

    b = np.full((2, 128), np.nan, np.float32)
    with pytest.raises(sim.SimError, match=r"of its own CTA's window of shared S_ \(256 bytes\)"):
        sim.run(kernel, [b])


def _exchange(barrier: bool):
    """CTA 0 writes a row of B; CTA 1 reads it back into its own row, after a cluster
    barrier (``barrier``) or without one."""

    @T.prim_func
    def kernel(B_ptr: T.handle):
        B = T.match_buffer(B_ptr, (2, 128), "float32")
        T.device_entry()
        T.cta_id([2])
        rank = T.cta_id_in_cluster([2])
        tid = T.thread_id([128])
        if rank == 0:
            B[0, tid] = T.float32(3.0)
        if barrier:
            T.cuda.cluster_sync()
        if rank == 1:
            B[1, tid] = B[0, tid] + T.float32(1.0)
        T.cuda.cluster_sync()

    return kernel


def test_global_bytes_pass_between_ctas_of_a_cluster_across_a_cluster_barrier():
    b = np.full((2, 128), np.nan, np.float32)
    out = sim.run(_exchange(barrier=True), [b])[0]
    assert (out[0] == 3.0).all() and (out[1] == 4.0).all()


def test_without_the_cluster_barrier_the_global_read_is_a_race():
    """Control: nothing orders CTA 1's read after CTA 0's write."""
    b = np.full((2, 128), np.nan, np.float32)
    with pytest.raises(
        sim.SimError,
        match=r"the CTA of rank 1 reads byte 0 of global B_ptr .* which the CTA of rank 0 of "
        r"its cluster wrote with no cluster barrier between",
    ):
        sim.run(_exchange(barrier=False), [b])


def test_an_mbarrier_address_past_its_own_window_is_an_error():
    """A CTA's .shared address of an mbarrier array indexed past its end reaches the next
    CTA's window in the simulator's memory; it is an error there, not the peer's barrier."""

    @T.prim_func
    def kernel(B_ptr: T.handle):
        B = T.match_buffer(B_ptr, (2, 128), "float32")
        T.device_entry()
        bx = T.cta_id([2])
        T.cta_id_in_cluster([2])
        tid = T.thread_id([128])
        bar = T.alloc_shared([2], "uint64")
        if tid == 0:
            T.ptx.mbarrier.init.shared.b64(bar.ptr_to([0]), 1)
        T.cuda.cluster_sync()
        if tid == 0:
            T.evaluate(T.ptx["mbarrier.arrive.shared.b64"](bar.ptr_to([128])))
        B[bx, tid] = T.float32(1.0)
        T.cuda.cluster_sync()

    b = np.full((2, 128), np.nan, np.float32)
    with pytest.raises(sim.SimError, match=r"byte 1024 of its own CTA's window of shared bar"):
        sim.run(kernel, [b])


def test_a_barrier_of_a_cta_whose_threads_are_not_whole_warps_still_completes():
    """48 threads (one warp and a half), no cluster: __syncthreads counts whole warps."""

    @T.prim_func
    def kernel(B_ptr: T.handle):
        B = T.match_buffer(B_ptr, (48,), "float32")
        T.device_entry()
        tid = T.thread_id([48])
        S_ = T.alloc_buffer((48,), "float32", scope="shared")
        S_[tid] = T.Cast("float32", tid)
        T.cuda.cta_sync()
        B[tid] = S_[(tid + 1) % 48]

    out = sim.run(kernel, [np.full(48, np.nan, np.float32)])[0]
    np.testing.assert_array_equal(out, (np.arange(48) + 1) % 48)


def test_tensor_memory_in_a_cluster_is_not_modeled():
    """Each CTA of a cluster has its own tensor memory; the simulator models one CTA's and
    says so, rather than letting the pair share one."""

    @T.prim_func
    def kernel(B_ptr: T.handle):
        B = T.match_buffer(B_ptr, (2, 128), "uint32")
        T.device_entry()
        bx = T.cta_id([2])
        T.cta_id_in_cluster([2])
        warp = T.warp_id([4])
        tid = T.thread_id([128])
        tmem_addr = T.alloc_shared([1], "uint32")
        if warp == 0:
            T.ptx["tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32"](
                T.address_of(tmem_addr[0]), 32
            )
        T.cuda.cta_sync()
        B[bx, tid] = tmem_addr[0]

    with pytest.raises(sim.SimError, match="tcgen05.alloc.* in a cluster: the simulator models"):
        sim.run(kernel, [np.zeros((2, 128), np.uint32)], target="sm_100a")


# -- distributed shared memory: ld/st.shared::cluster ----------------------------------------
def dsmem_exchange(op: str = "ld", first_sync: str | None = "cluster", exit_sync: bool = True):
    """Each CTA of a pair fills its S with ``100 rank + tid``; ``op`` "ld": each thread then
    reads the peer's element through mapa and ``ld.shared::cluster``; "st": each thread
    writes its value into the peer's S with ``st.shared::cluster`` and reads its own. B[bx,
    tid] gets what was read (the peer's value). ``first_sync``: the barrier between the
    writes and the reads ("cluster", "cta", or None); a cluster barrier at the end
    (``exit_sync``) keeps each S alive while the peer may read it."""

    # fmt: off
    @T.prim_func
    def kernel(B_ptr: T.handle):
        B = T.match_buffer(B_ptr, (2, 32), "uint32")
        T.device_entry()
        bx = T.cta_id([2])
        rank = T.cta_id_in_cluster([2])
        tid = T.thread_id([32])
        S = T.alloc_buffer((32,), "uint32", scope="shared.dyn", align=16)
        T.attr({"tirx.dyn_smem_bytes": 128})
        remote = T.alloc_buffer((1,), "uint32", scope="local")
        v = T.alloc_buffer((1,), "uint32", scope="local")
        mine = T.meta_var(T.uint32(100) * T.Cast("uint32", rank) + T.Cast("uint32", tid))
        T.evaluate(T.ptx["mapa.shared::cluster.u32"](
            remote[0], T.cuda.cvta_generic_to_shared(S.ptr_to([tid])), T.Cast("uint32", 1 - rank)))
        if op == "ld":
            S[tid] = mine
        else:
            T.evaluate(T.ptx["st.shared::cluster.u32"](remote[0], mine))
        if first_sync == "cluster":
            T.cuda.cluster_sync()
        elif first_sync == "cta":
            T.cuda.cta_sync()
        if op == "ld":
            T.evaluate(T.ptx["ld.shared::cluster.u32"](v[0], remote[0]))
        else:
            v[0] = S[tid]
        B[bx, tid] = v[0]
        if exit_sync:
            T.cuda.cluster_sync()
    # fmt: on
    return kernel


def _peer_values() -> np.ndarray:
    tid = np.arange(32, dtype=np.uint32)
    return np.stack([100 + tid, tid])  # CTA 0 holds the peer's (rank 1), CTA 1 rank 0's


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("op", ["ld", "st"])
def test_a_cta_reads_and_writes_its_peers_shared_memory(op, where, gpu):
    out = execute(dsmem_exchange(op), [np.full((2, 32), 7, np.uint32)], where, gpu)[0]
    np.testing.assert_array_equal(out, _peer_values())


@pytest.mark.parametrize("op, first_sync", [("ld", "cta"), ("ld", None), ("st", "cta")])
def test_without_a_cluster_barrier_the_peers_bytes_are_a_race(op, first_sync):
    """Control: a CTA barrier (or none) between one CTA's writes and the other's reads
    orders nothing across the pair."""
    with pytest.raises(sim.SimError, match=r"race on S byte 0 of the CTA of rank [01]"):
        sim.run(dsmem_exchange(op, first_sync), [np.zeros((2, 32), np.uint32)])


def test_a_cta_that_exits_while_its_peer_reads_its_shared_memory_is_named():
    """Without the cluster barrier at the end, a CTA may exit (its shared memory gone)
    while its peer still reads it: named at the exit (the peer's read, before it in the
    simulator's order, is not ordered before it) or at the read (after the exit),
    whichever the schedule meets. The control: the stores into the peer's S lie before
    the first cluster barrier, so the kernel needs no barrier at the end and runs."""
    args = [np.zeros((2, 32), np.uint32)]
    with pytest.raises(
        sim.SimError,
        match=r"the CTA of rank [01] exits while warp [01] \(of the CTA of rank [01]\) uses "
        r"shared S byte \d+ of the CTA of rank [01] with nothing ordering that before the "
        r"exit|warp [01] reads shared S byte \d+ of the CTA of rank [01], whose CTA has exited",
    ):
        sim.run(dsmem_exchange("ld", exit_sync=False), args)
    out = sim.run(dsmem_exchange("st", exit_sync=False), args)[0]
    np.testing.assert_array_equal(out, _peer_values())


def test_ld_shared_cluster_past_the_window_is_an_error():
    """A ``.shared::cluster`` address past what the peer wrote is named, not read."""

    # fmt: off
    @T.prim_func
    def kernel(B_ptr: T.handle):
        B = T.match_buffer(B_ptr, (2, 32), "uint32")
        T.device_entry()
        bx = T.cta_id([2])
        T.cta_id_in_cluster([2])
        tid = T.thread_id([32])
        S = T.alloc_buffer((32,), "uint32", scope="shared.dyn", align=16)
        T.attr({"tirx.dyn_smem_bytes": 128})
        v = T.alloc_buffer((1,), "uint32", scope="local")
        S[tid] = T.uint32(1)
        T.cuda.cluster_sync()
        T.evaluate(T.ptx["ld.shared::cluster.u32"](v[0], T.uint32((2 << 24) + 128)))
        B[bx, tid] = v[0]
    # fmt: on

    with pytest.raises(
        sim.SimError, match=r"reads byte 128 of the CTA of rank 1 of shared S, which nothing wrote"
    ):
        sim.run(kernel, [np.zeros((2, 32), np.uint32)])


# -- clusters of two dimensions --------------------------------------------------------------
def neighbours_2d(x_fastest: bool = True):
    """A grid of 4 x 2 CTAs in clusters of 2 x 2: each CTA fills its S with ``1000 bx +
    100 by + tid``, and after a cluster barrier reads the S of its neighbour along x
    (``cx ^ 1``) and along y (``cy ^ 1``) through mapa, naming each by its rank, ``cx + 2
    cy`` (``%cluster_ctarank`` runs x fastest), or ``2 cx + cy`` where not ``x_fastest``
    (the control: the wrong CTAs)."""

    def rank_of(x, y):
        return x + 2 * y if x_fastest else 2 * x + y

    # fmt: off
    @T.prim_func
    def kernel(B_ptr: T.handle):
        B = T.match_buffer(B_ptr, (4, 2, 2, 32), "uint32")
        T.device_entry()
        bx, by = T.cta_id([4, 2])
        cx, cy = T.cta_id_in_cluster([2, 2])
        tid = T.thread_id([32])
        S = T.alloc_buffer((32,), "uint32", scope="shared.dyn", align=16)
        T.attr({"tirx.dyn_smem_bytes": 128})
        remote = T.alloc_buffer((2,), "uint32", scope="local")
        v = T.alloc_buffer((1,), "uint32", scope="local")
        S[tid] = T.Cast("uint32", 1000 * bx + 100 * by + tid)
        T.evaluate(T.ptx["mapa.shared::cluster.u32"](
            remote[0], T.cuda.cvta_generic_to_shared(S.ptr_to([tid])),
            T.Cast("uint32", rank_of(1 - cx, cy))))
        T.evaluate(T.ptx["mapa.shared::cluster.u32"](
            remote[1], T.cuda.cvta_generic_to_shared(S.ptr_to([tid])),
            T.Cast("uint32", rank_of(cx, 1 - cy))))
        T.cuda.cluster_sync()
        for k in range(2):
            T.evaluate(T.ptx["ld.shared::cluster.u32"](v[0], remote[k]))
            B[bx, by, k, tid] = v[0]
        T.cuda.cluster_sync()
    # fmt: on
    return kernel


def _neighbour_values() -> np.ndarray:
    bx, by, tid = np.meshgrid(np.arange(4), np.arange(2), np.arange(32), indexing="ij")
    along_x = 1000 * (bx ^ 1) + 100 * by + tid
    along_y = 1000 * bx + 100 * (by ^ 1) + tid
    return np.stack([along_x, along_y], axis=2).astype(np.uint32)


@pytest.mark.parametrize("where", WHERE)
def test_a_two_dimensional_cluster_ranks_its_ctas_x_fastest(where, gpu):
    """A 2 x 2 cluster's CTAs run together, each with its own blockIdx and
    clusterCtaIdx (TVM launches blockIdx.y inside threadIdx.x), and rank ``cx + 2 cy``
    names the neighbour; the control, ranks numbered y fastest, reads other CTAs."""
    args = [np.zeros((4, 2, 2, 32), np.uint32)]
    out = execute(neighbours_2d(), args, where, gpu)[0]
    np.testing.assert_array_equal(out, _neighbour_values())
    if where == "sim":
        wrong = sim.run(neighbours_2d(x_fastest=False), args)[0]
        assert (wrong != _neighbour_values()).any()


def test_a_cluster_dimension_that_does_not_divide_the_grid_is_an_error():
    """A grid of 6 x 2 CTAs in clusters of 4 x 1: TVM checks the counts (12 and 4), not
    each axis; 6 CTAs along x are not whole clusters of 4 (CUDA asks each grid dimension
    to be a multiple of the cluster's), and the simulator says so."""

    # fmt: off
    @T.prim_func
    def kernel(B_ptr: T.handle):
        B = T.match_buffer(B_ptr, (6, 2, 32), "int32")
        T.device_entry()
        bx, by = T.cta_id([6, 2])
        cx, cy = T.cta_id_in_cluster([4, 1])
        tid = T.thread_id([32])
        B[bx, by, tid] = tid + cx + cy
    # fmt: on

    with pytest.raises(sim.SimError, match=r"the grid's 6 CTAs along blockIdx.x are not whole "
                                           r"clusters of 4"):  # fmt: skip
        sim.run(kernel, [np.zeros((6, 2, 32), np.int32)], target="sm_90a")


def test_a_cluster_axis_the_grid_does_not_launch_is_an_error():
    """Clusters of 2 x 2 over a grid of 4 CTAs along x only: TVM checks the counts (4
    and 4); the grid has one CTA along y, not a whole cluster, and the simulator says
    so (before, it ran two CTAs for each blockIdx.x)."""

    # fmt: off
    @T.prim_func
    def kernel(B_ptr: T.handle):
        B = T.match_buffer(B_ptr, (4, 32), "int32")
        T.device_entry()
        bx = T.cta_id([4])
        cx, cy = T.cta_id_in_cluster([2, 2])
        tid = T.thread_id([32])
        B[bx, tid] = tid + cx + cy
    # fmt: on

    with pytest.raises(sim.SimError, match=r"a cluster of 2 x 2 x 1 CTAs over a grid with no "
                                           r"blockIdx.y"):  # fmt: skip
        sim.run(kernel, [np.zeros((4, 32), np.int32)], target="sm_90a")
