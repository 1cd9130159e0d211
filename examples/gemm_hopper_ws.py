"""The warp-specialized Hopper GEMM, written only with tile primitives: C = epilogue(A B)
with a producer warpgroup, two consumer warpgroups and a persistent grid.

A is ``[M, K]``, B ``[K, N]``, bias ``[N]``, C ``[M, N]``, all float16 or all bfloat16; the
products accumulate in float32. Any M, N, K whose rows TMA can address (K and N
multiples of 8: byte strides multiples of 16). TMA zero-fills the loads past A's and B's
edges and clips the stores past C's, and the wgmma of an edge tile computes only as far
as the tile reaches, in its steps: the last column of tiles is as wide as its columns
rounded up to B's 64-column blocks (8 columns for float8), the last K tile as deep as its
K rounded up to 16 (float8: 32), and a consumer with no rows in the last row of tiles
only waits for the stages and frees them (at 4000^3: 192 of 256 columns, 32 of 64 deep,
and the second consumer idle in the last row of tiles, 32 of whose 128 rows lie inside M:
3.9% less tensor work, 0.4-0.7% faster on the H200, docs/performance.md part 8g).

The CTA has three warpgroups and walks output tiles of 128 x 256 (tile ``bx``, then
``bx + grid``, ...; ``grid`` CTAs, one per SM; tiles numbered along the side with fewer
tiles first):

- **the producer** (warpgroup 0) gives registers back (``setmaxnreg.dec`` to 40) and its
  first thread loads, for every K tile of every output tile, A's 128 x 64 and B's 64 x 256
  (and, with the tile's first K tile, its 256 bias values) into the next stage of a ring
  (``copy_async -> tma_auto``, 128-byte swizzled), once the consumers have freed it (the
  stage's ``empty`` mbarrier), announcing the bytes on the stage's ``full`` mbarrier;
- **two consumers** (warpgroups 1 and 2, ``setmaxnreg.inc`` to 232) each own 64 rows of
  the tile: they wait for a stage, run four ``wgmma.m64n256k16`` on it (``gemm_async ->
  wgmma``), commit, and wait for all but this K tile's group, so one K tile of MMAs is in
  flight while the previous tile's stage is freed (one thread per consumer arrives on its
  ``empty`` barrier);
- **the epilogue** of each consumer: bias (from the stage of the tile's first K tile) and
  relu in float32, rounded to C's type once, then its 64 x 256 rows in four chunks of 64
  columns through two staging buffers of its own: ``stmatrix`` into a buffer,
  ``fence.proxy.async`` and the consumer's named barrier, one TMA store (``copy_async``
  shared -> global) per chunk; a buffer is written again only after the store that read
  it is done reading (``wait_group.read 1``), so the last stores overlap the next tile's
  main loop. (Small staging buffers leave room for four 48 KiB stages.)

Where C is large both ways the CTAs run in clusters of two (``cluster``): the two tiles
of a pair lie one above the other and read the same B tile, and each CTA's producer
loads half of it and multicasts it into both CTAs (TMA ``.multicast::cluster``); the
consumers free a stage in both CTAs (``mapa`` and a ``.shared::cluster`` arrival), so a
stage is refilled only once both have read it. The simulator runs the pair together.

``python examples/gemm_hopper_ws.py`` prints the explain() report, checks small GEMMs in
the CPU simulator against numpy (a tile multiple and odd sizes), and on an sm_90 GPU
checks 4096 x 4096 x 4096 and 1000 x 1000 x 1000.
"""

from __future__ import annotations

import sys

import ml_dtypes
import numpy as np
from tvm.script import tirx as T
from tvm.script.tirx import tile as Tx
from tvm.tirx.layout import ComposeLayout, R, S, TileLayout, tid_in_wg

from tirx_cuda_dispatch import fragments
from tirx_cuda_dispatch.explain import PDL_TAG

BM, BN = 128, 256  # the output tile; a K tile is one 128-byte row (64 or 128 elements)
DTYPES = ("float16", "bfloat16", "float8_e4m3fn", "float8_e5m2")
CHUNK = 64  # columns of C a consumer stores at a time, through two staging buffers
CONSUMERS = 2  # consumer warpgroups, each 64 rows of the tile
WG_ROWS = BM // CONSUMERS
PRODUCER_REGS, CONSUMER_REGS = 40, 232
OMITS = (
    None,
    "full_wait",
    "empty_arrive",
    "proxy_fence",
    "store_wait",
    "remote_arrive",
    "cluster_sync",
    "exit_sync",
    "short_edge",
)


def bias_fragment(n: int) -> TileLayout:
    """The columns of a wgmma accumulator (1 x n): thread ``32 w + l`` holds columns
    ``8 j + 2 (l % 4)`` and ``+ 1``, the same in the 8 threads of each ``l % 4`` of every
    warp (replicas over ``l / 4`` and ``w``)."""
    return TileLayout(
        S[(1, n // 8, 4, 2) : (n // 4, 2, 1 @ tid_in_wg, 1)]
        + R[(4, 8) : (32 @ tid_in_wg, 4 @ tid_in_wg)]
    )


def store_chunks(C, C_s, D16, c, m0, n0, tid_wg, fence: bool, store_wait: bool) -> None:
    """A consumer's rows of the tile leave in column chunks of 64 through its two staging
    buffers: before a buffer is written again, the store that read it two chunks ago has
    read it (``wait_group.read 1`` by the issuing thread, then the consumer's barrier);
    stmatrix, ``fence.proxy.async``, the barrier, one TMA store, commit. The chunks are
    unrolled here (in Python), so each copy takes a constant column range of D16."""
    for cb in range(BN // CHUNK):
        buf, cols = cb % 2, slice(n0 + cb * CHUNK, n0 + cb * CHUNK + CHUNK)
        if store_wait:
            with T.If(tid_wg == 0), T.Then():
                T.evaluate(T.ptx["cp.async.bulk.wait_group.read"](1))
            T.evaluate(T.cuda.warpgroup_sync(1 + c))
        Tx.wg.copy(C_s[c, buf, :, :], D16[:, cb * CHUNK : cb * CHUNK + CHUNK])
        if fence:
            T.evaluate(T.ptx["fence.proxy.async.shared::cta"]())
        T.evaluate(T.cuda.warpgroup_sync(1 + c))
        Tx.wg.copy_async(C[m0 : m0 + WG_ROWS, cols], C_s[c, buf, :, :])
        with T.If(tid_wg == 0), T.Then():
            T.evaluate(T.ptx["cp.async.bulk.commit_group"]())


def default_cluster(m: int, n: int) -> int:
    """Pairs of CTAs (B multicast) where C spans an even number of row tiles and at least
    16 tiles each way: on the H200 (bench part 8g) pairs measured 1.3-2.4% faster at
    4096^3, 6144^3 and 4000^3 and 0.5-0.8% at 8192 x 8192, but 1-1.4% slower at 16384 x
    1024 and 1024 x 16384, where the CTAs running at once already share the long
    operand in L2."""
    tiles_m, tiles_n = -(-m // BM), -(-n // BN)
    return 2 if tiles_m % 2 == 0 and min(tiles_m, tiles_n) >= 16 else 1


def gemm_kernel(
    m: int,
    n: int,
    k: int,
    dtype: str = "float16",
    stages: int = 4,
    grid: int = 132,
    epilogue: str | None = None,
    registers: bool = True,
    omit: str | None = None,
    cluster: int | None = None,
    trim: bool = True,
    pdl: bool = False,
):
    """C = relu(A B + bias) (``epilogue="plain"``: C = A B rounded to C's type) with
    ``stages`` TMA stages on ``grid`` CTAs (fewer where there are fewer tiles).
    ``registers=False`` leaves out the setmaxnreg split. ``omit`` breaks the kernel on
    purpose, for the tests' negative controls: "full_wait" (a consumer reads a stage
    without waiting for it), "empty_arrive" (the consumers never free a stage),
    "proxy_fence" (a staging buffer is stored by TMA without fence.proxy.async after the
    stmatrix), "store_wait" (a staging buffer is written again without waiting for the
    store that reads it); with ``cluster=2`` also "remote_arrive" (a consumer frees a
    stage in its own CTA only, so the peer's producer multicasts into it while it is
    read), "cluster_sync" (a CTA barrier, not a cluster one, after the mbarrier init) and
    "exit_sync" (no cluster barrier at the end: a CTA may exit while its peer still
    arrives on its empty barriers); "short_edge" trims the edge tiles' wgmma a step too
    far (products of data lost). ``trim=False`` computes the edge tiles whole, as wide
    and as deep as the others (the kernel before the trimming, for comparison).

    ``cluster=2`` pairs the CTAs (a cluster of two): the pair computes two output tiles one
    above the other, which read the same columns of B, and each CTA loads half of the
    pair's B tile and multicasts it to both (``copy_async -> tma_auto`` with
    ``cta_mask=3``): a third less read from L2 per tile. A stage is refilled only once the
    consumers of both CTAs have freed it: each consumer arrives on the empty barrier of
    both CTAs (``mapa`` and ``mbarrier.arrive.shared::cluster``) and the producer waits
    with cluster-scope acquire. M must then span an even number of 128-row tiles. By
    default (:func:`default_cluster`) pairs where both sides span 16 tiles or more.

    ``pdl=True`` (programmatic dependent launch, as examples/attention.py's kernel has by
    default): every thread waits for the grid before it in the stream right after the
    mbarriers' barrier (``griddepcontrol.wait``: before any load or store), then lets the
    next grid launch, and the launch parameters carry TVM 0.27's tag for it, so the next
    call's CTAs launch and run their prologue while this grid ends. Off by default: on an
    H200, back to back, it measured level to +0.6% plain and level to +0.9% with bias +
    relu (4,096^3 to 8,192 x 8,192 x 1,024; docs/performance.md, "The warp-specialized
    GEMM (part 8g)")."""
    if omit not in OMITS:
        raise ValueError(f"omit={omit!r}: one of {OMITS}")
    if dtype not in DTYPES:
        raise ValueError(f"dtype={dtype!r}: one of {DTYPES}")
    float8 = dtype.startswith("float8")
    size = 1 if float8 else 2  # bytes of an element of A and B
    if k % (16 // size) or n % 8:
        raise ValueError(
            f"{m}x{n}x{k}: K must be a multiple of {16 // size} and N of 8 (TMA's 16-byte strides)"
        )
    if cluster is None:
        cluster = default_cluster(m, n)
    if cluster not in (1, 2):
        raise ValueError(f"cluster={cluster}: 1 or 2 CTAs")
    if not 2 <= stages <= 4:
        raise ValueError(f"stages={stages}: 2 to 4 (48 KiB each)")
    epilogues = ("scaled",) if float8 else ("bias_relu", "plain")
    if epilogue is None:
        epilogue = epilogues[0]
    if epilogue not in epilogues:
        raise ValueError(f"epilogue={epilogue!r} with {dtype}: one of {epilogues}")
    with_bias, scaled = epilogue == "bias_relu", epilogue == "scaled"
    out = "bfloat16" if float8 else dtype  # C's type
    bk = 128 // size  # a K tile is one 128-byte swizzled row of A and of B
    tiles_m, tiles_n, kts = -(-m // BM), -(-n // BN), -(-k // bk)
    if tiles_m % cluster:
        raise ValueError(
            f"cluster={cluster}: M={m} spans {tiles_m} tiles of {BM} rows, not a multiple of "
            f"{cluster} (the cluster's CTAs take tiles one above the other)"
        )
    # the schedule walks units of `cluster` tiles one above the other (a pair shares B)
    units_m, units = tiles_m // cluster, tiles_m * tiles_n // cluster
    if grid < cluster:
        raise ValueError(
            f"grid={grid}: a grid of clusters of {cluster} CTAs needs {cluster} or more"
        )
    grid = min(grid, units * cluster) // cluster * cluster
    rounds = -(-units // (grid // cluster))  # units a CTA walks, the last one maybe not

    def origin(unit, rank):
        """The (row, column) tile of CTA ``rank`` of the cluster in ``unit``: units along
        the side with fewer of them first, so the CTAs running at once share the operand
        of the long side (with M = 1024 and N = 16384, eight CTAs in a row read each
        column block of B, which is read once)."""
        if units_m <= tiles_n:
            um, tn = unit % units_m, unit // units_m
        else:
            um, tn = unit // tiles_n, unit % tiles_n
        return um * cluster + rank, tn

    # the pool, in bytes: the stages of A and B, the staging chunks, the bias, the barriers
    a_at, b_at = 0, stages * BM * bk * size
    c_at = b_at + stages * BN * bk * size  # 1024-byte aligned
    bias_at = c_at + CONSUMERS * 2 * WG_ROWS * CHUNK * 2
    bars_at = bias_at + stages * BN * 2
    pool_bytes = bars_at + 2 * stages * 8
    b_part = BN // cluster  # the columns of B's tile a CTA loads (and multicasts)
    stage_bytes = (BM + BN) * bk * size
    bias_bytes = BN * 2 if with_bias else 0
    unit = 3 if size == 2 else 4  # log2 of a 16-byte unit's elements: the 128-byte swizzle
    a_layout = ComposeLayout(unit, 3, 3, TileLayout(S[(stages, BM, bk) : (BM * bk, bk, 1)]))
    if float8:  # B given N x K: K-major rows, as float8 wgmma reads them
        b_shape, b_tile = (n, k), (stages, BN, bk)
        b_layout = ComposeLayout(unit, 3, 3, TileLayout(S[b_tile : (BN * bk, bk, 1)]))
    else:  # B given K x N: 64-column blocks
        b_shape, b_tile = (k, n), (stages, bk, BN)
        b_layout = ComposeLayout(
            3, 3, 3, TileLayout(S[(stages, bk, BN // 64, 64) : (bk * BN, 64, bk * 64, 1)])
        )
    chunk = WG_ROWS * CHUNK  # elements of one staging buffer
    c_layout = ComposeLayout(
        3, 3, 3, TileLayout(S[(CONSUMERS, 2, WG_ROWS, CHUNK) : (2 * chunk, chunk, CHUNK, 1)])
    )
    # the edges: the last column of tiles, the last K tile and the last row of tiles reach
    # past C, A and B; their wgmma computes only as far as they reach, in its steps
    n_step, k_step = (8, 32) if float8 else (64, 16)  # B's 64-column swizzled blocks
    n_edge = min(BN, -(-(n - (tiles_n - 1) * BN) // n_step) * n_step)
    k_edge = min(bk, -(-(k - (kts - 1) * bk) // k_step) * k_step)
    idle = trim and m - (tiles_m - 1) * BM <= WG_ROWS  # the last tiles' second consumer
    if not trim:
        n_edge, k_edge = BN, bk
    if omit == "short_edge":  # the edges' wgmma a step short: products of data lost
        n_edge, k_edge = max(n_edge - n_step, n_step), max(k_edge - k_step, k_step)
    acc = fragments.wgmma_accumulator_layout(BN, 1)
    bias_frag = bias_fragment(BN)
    wait_full, arrive_empty = omit != "full_wait", omit != "empty_arrive"
    fence, store_wait = omit != "proxy_fence", omit != "store_wait"
    if omit in ("remote_arrive", "cluster_sync", "exit_sync") and cluster == 1:
        raise ValueError(f"omit={omit!r} breaks a cluster: with cluster=2")
    peers = 1 if omit == "remote_arrive" else cluster  # the CTAs a consumer frees a stage in
    init_sync = "cluster" if cluster > 1 and omit != "cluster_sync" else "cta"

    def free(bar, remote):
        """A consumer frees a stage: one arrival on its empty barrier in every CTA the
        stage's loads land in (the peer's through ``mapa``). The arrival keeps
        ``mbarrier.arrive``'s default semantics, release at CTA scope, as CUTLASS's
        ``ClusterBarrier::arrive(cta_id)`` does: what it orders are the stage's reads by
        this warpgroup's wgmma, complete at ``wgmma.wait_group``. A cluster-scope release
        (``.release.cluster``) also waits for the wgmma group still in flight: the kernel
        measured 0.64 of torch.matmul with it at 4096^3 on the H200, against 0.99."""
        if peers == 1:  # its own CTA's barrier only
            T.evaluate(T.ptx["mbarrier.arrive.shared.b64"](bar))
            return
        for peer in range(peers):
            T.evaluate(
                T.ptx["mapa.shared::cluster.u32"](
                    remote[0], T.cuda.cvta_generic_to_shared(bar), T.uint32(peer)
                )
            )
            T.evaluate(T.ptx["mbarrier.arrive.shared::cluster.b64"](remote[0]))

    @T.macro
    def k_tile(D, A_s, B_s, bias16, bias_s, bars, remote, r, kt, c, tid_wg, cols, depth):
        """One K tile of a consumer's main loop: wait for its stage, (with the tile's first
        K tile) read the bias, one wgmma of ``cols`` columns and ``depth`` of K (fewer than
        the tile's at the edges: :func:`main_loop`), commit, wait for all but this group
        and free the stage the previous group read."""
        g = T.meta_var(r * kts + kt)  # this CTA's K tiles so far: the ring position
        s = T.meta_var(g % stages)
        if wait_full:
            T.cuda.mbarrier_wait(bars.ptr_to([s]), (g // stages) % 2)
        if with_bias:
            if kt == 0:
                Tx.wg.copy(bias16[:, :], bias_s[s : s + 1, :])
        rows = T.meta_var(slice(c * WG_ROWS, c * WG_ROWS + WG_ROWS))
        if float8:  # B K-major (N x K)
            Tx.wg.gemm_async(D[:, 0:cols], A_s[s, rows, 0:depth], B_s[s, 0:cols, 0:depth],
                             transA=False, transB=False, accum=True)  # fmt: skip
        else:
            Tx.wg.gemm_async(D[:, 0:cols], A_s[s, rows, 0:depth], B_s[s, 0:depth, 0:cols],
                             transA=False, transB=True, accum=True)  # fmt: skip
        T.ptx["wgmma.commit_group.sync.aligned"]()
        T.ptx["wgmma.wait_group.sync.aligned"](1)
        if arrive_empty:
            if kt > 0:
                if tid_wg == 0:  # K tile kt - 1's MMAs are done
                    free(bars.ptr_to([stages + (g - 1) % stages]), remote)

    @T.macro
    def main_loop(D, A_s, B_s, bias16, bias_s, bars, remote, r, c, tid_wg, cols):
        """A consumer's K loop over one tile, its wgmma ``cols`` wide; the last K tile only
        ``k_edge`` deep, in an iteration of its own after the loop (no branch around a
        wgmma inside the loop: ptxas joins the wgmma groups of both paths there, 4% slower
        at 4000^3 on the H200); then the wait for the last group, the last stage freed."""
        for kt in range(kts if k_edge == bk else kts - 1):
            k_tile(D, A_s, B_s, bias16, bias_s, bars, remote, r, kt, c, tid_wg, cols, bk)
        if k_edge < bk:
            k_tile(D, A_s, B_s, bias16, bias_s, bars, remote, r, kts - 1, c, tid_wg, cols,
                   k_edge)  # fmt: skip
        T.ptx["wgmma.wait_group.sync.aligned"](0)
        if arrive_empty:
            if tid_wg == 0:
                free(bars.ptr_to([stages + (r * kts + kts - 1) % stages]), remote)

    @T.macro
    def idle_loop(bars, remote, r, tid_wg):
        """A consumer without rows in the tile (the last row of tiles, at M's edge) waits for
        each stage and frees it, so the ring's phases go on as for a computed tile."""
        for kt in range(kts):
            g = T.meta_var(r * kts + kt)
            if wait_full:
                T.cuda.mbarrier_wait(bars.ptr_to([g % stages]), (g // stages) % 2)
            if arrive_empty:
                if tid_wg == 0:
                    free(bars.ptr_to([stages + g % stages]), remote)

    @T.macro
    def tile(D, A_s, B_s, bias16, bias_s, bars, remote, r, c, tid_wg, tn):
        """A consumer's main loop over the tile in column ``tn``: on the last column of
        tiles only B's first ``n_edge`` columns (D's first ``n_edge``), in wgmma's steps
        (the columns past them TMA zero-filled: their products are zeros); a branch over
        the whole loop, uniform over the CTA."""
        if n_edge < BN:
            if tn == tiles_n - 1:
                main_loop(D, A_s, B_s, bias16, bias_s, bars, remote, r, c, tid_wg, n_edge)
            else:
                main_loop(D, A_s, B_s, bias16, bias_s, bars, remote, r, c, tid_wg, BN)
        else:
            main_loop(D, A_s, B_s, bias16, bias_s, bars, remote, r, c, tid_wg, BN)

    def epilogue_out(C, C_s, D, D16, bias, bias16, bias32, factor, c, m0, n0, tid_wg):
        """A consumer's epilogue: bias and relu (or the scales' product) in float32,
        rounded to C's type once, out through :func:`store_chunks`."""
        if with_bias:
            Tx.wg.cast(bias32[:, :], bias16[:, :])
            Tx.wg.add(D[:, :], D[:, :], bias32[:, :])
            Tx.wg.maximum(D16[:, :], D[:, :], T.float32(0.0))
        elif scaled:  # the per-tensor scales' product, from global memory
            T.buffer_store(factor, bias[0], [0])
            Tx.wg.mul(D[:, :], D[:, :], factor[0])
            Tx.wg.cast(D16[:, :], D[:, :])
        else:
            Tx.wg.cast(D16[:, :], D[:, :])
        store_chunks(C, C_s, D16, c, m0, n0, tid_wg, fence, store_wait)

    # fmt: off
    @T.prim_func
    def gemm(A_ptr: T.handle, B_ptr: T.handle, bias_ptr: T.handle, C_ptr: T.handle):
        A = T.match_buffer(A_ptr, (m, k), dtype)
        B = T.match_buffer(B_ptr, b_shape, dtype)
        bias = T.match_buffer(bias_ptr, (1,) if scaled else (n,), "float32" if scaled else out)
        C = T.match_buffer(C_ptr, (m, n), out)
        T.device_entry()
        bx = T.cta_id([grid])
        if cluster > 1:
            rank = T.cta_id_in_cluster([cluster])
        else:
            rank = T.meta_var(0)
        unit0 = T.meta_var(bx // cluster)  # the cluster's first unit of tiles
        clusters = T.meta_var(grid // cluster)
        wg = T.warpgroup_id([1 + CONSUMERS])
        T.warp_id_in_wg([4])
        T.lane_id([32])
        tid_wg = T.thread_id_in_wg([128])
        tid = T.thread_id([(1 + CONSUMERS) * 128])
        pool = T.alloc_buffer((pool_bytes,), "uint8", scope="shared.dyn", align=1024)
        T.attr({"tirx.dyn_smem_bytes": pool_bytes})
        A_s = T.decl_buffer((stages, BM, bk), dtype, pool.data, elem_offset=a_at // size,
                            scope="shared.dyn", layout=a_layout)
        B_s = T.decl_buffer(b_tile, dtype, pool.data, elem_offset=b_at // size,
                            scope="shared.dyn", layout=b_layout)
        C_s = T.decl_buffer((CONSUMERS, 2, WG_ROWS, CHUNK), out, pool.data,
                            elem_offset=c_at // 2, scope="shared.dyn", layout=c_layout)
        bias_s = T.decl_buffer((stages, BN), out, pool.data, elem_offset=bias_at // 2,
                               scope="shared.dyn")
        bars = T.decl_buffer((2 * stages,), "uint64", pool.data, elem_offset=bars_at // 8,
                             scope="shared.dyn")
        D = T.alloc_buffer((WG_ROWS, BN), "float32", scope="local", layout=acc)
        D16 = T.alloc_buffer((WG_ROWS, BN), out, scope="local", layout=acc)
        bias16 = T.alloc_buffer((1, BN), out, scope="local", layout=bias_frag)
        factor = T.alloc_buffer((1,), "float32", scope="local")
        bias32 = T.alloc_buffer((1, BN), "float32", scope="local", layout=bias_frag)
        remote = T.alloc_buffer((1,), "uint32", scope="local")  # a peer's barrier (mapa)
        if tid == 0:
            for s in range(stages):
                T.ptx.mbarrier.init.shared.b64(bars.ptr_to([s]), 1)
                T.ptx.mbarrier.init.shared.b64(bars.ptr_to([stages + s]), CONSUMERS * peers)
            T.ptx["fence.mbarrier_init.release.cluster"]()
        if init_sync == "cluster":  # the peers' barriers are initialized before remote use
            T.cuda.cluster_sync()
        else:
            T.cuda.cta_sync()
        if pdl:  # the grid before is done (its writes visible), and the next may launch
            T.ptx.griddepcontrol.wait()
            T.ptx.griddepcontrol.launch_dependents()
        if wg == 0:  # the producer
            if registers:
                T.ptx.setmaxnreg.dec.sync.aligned.u32(PRODUCER_REGS)
            if tid_wg == 0:
                for r in range(rounds):
                    unit = unit0 + r * clusters
                    if unit < units:
                        tm, tn = T.meta_var(origin(unit, rank))
                        m0 = tm * BM
                        n0 = tn * BN
                        for kt in range(kts):
                            g = r * kts + kt  # this CTA's K tiles so far: the ring position
                            s = T.meta_var(g % stages)
                            if g >= stages:  # the stage held K tile g - stages: freed yet?
                                if cluster > 1:  # by the consumers of every CTA it lands in
                                    T.cuda.mbarrier_wait_acquire_cluster(
                                        bars.ptr_to([stages + s]), (g // stages - 1) % 2)
                                else:
                                    T.cuda.mbarrier_wait(bars.ptr_to([stages + s]),
                                                         (g // stages - 1) % 2)
                            k0 = kt * bk
                            if kt == 0:  # the tile's bias comes with its first K tile
                                T.evaluate(T.ptx["mbarrier.arrive.expect_tx.shared.b64"](
                                    bars.ptr_to([s]), stage_bytes + bias_bytes))
                                if with_bias:
                                    Tx.copy_async(bias_s[s, :], bias[n0 : n0 + BN],
                                                  mbar=bars.ptr_to([s]))
                            else:
                                T.evaluate(T.ptx["mbarrier.arrive.expect_tx.shared.b64"](
                                    bars.ptr_to([s]), stage_bytes))
                            Tx.copy_async(A_s[s, :, :], A[m0 : m0 + BM, k0 : k0 + bk],
                                          mbar=bars.ptr_to([s]))
                            if cluster > 1:  # half of B's tile, to both CTAs
                                b0 = T.meta_var(rank * b_part)
                                if float8:
                                    Tx.copy_async(B_s[s, b0 : b0 + b_part, :],
                                                  B[n0 + b0 : n0 + b0 + b_part, k0 : k0 + bk],
                                                  mbar=bars.ptr_to([s]), cta_mask=3)
                                else:
                                    Tx.copy_async(B_s[s, :, b0 : b0 + b_part],
                                                  B[k0 : k0 + bk, n0 + b0 : n0 + b0 + b_part],
                                                  mbar=bars.ptr_to([s]), cta_mask=3)
                            elif float8:
                                Tx.copy_async(B_s[s, :, :], B[n0 : n0 + BN, k0 : k0 + bk],
                                              mbar=bars.ptr_to([s]))
                            else:
                                Tx.copy_async(B_s[s, :, :], B[k0 : k0 + bk, n0 : n0 + BN],
                                              mbar=bars.ptr_to([s]))
        if wg >= 1:  # the consumers
            if registers:
                T.ptx.setmaxnreg.inc.sync.aligned.u32(CONSUMER_REGS)
            c = wg - 1
            for r in range(rounds):
                unit = unit0 + r * clusters
                if unit < units:
                    tm, tn = T.meta_var(origin(unit, rank))
                    m0 = tm * BM + c * WG_ROWS
                    n0 = tn * BN
                    Tx.wg.fill(D[:, :], T.float32(0.0))
                    if idle:  # no rows in the last row of tiles: it waits and frees only
                        if m0 < m:  # (a tile's chunks skipped whole: the buffers alternate on)
                            tile(D, A_s, B_s, bias16, bias_s, bars, remote, r, c, tid_wg, tn)
                            epilogue_out(C, C_s, D, D16, bias, bias16, bias32, factor, c, m0,
                                         n0, tid_wg)
                        else:
                            idle_loop(bars, remote, r, tid_wg)
                    else:
                        tile(D, A_s, B_s, bias16, bias_s, bars, remote, r, c, tid_wg, tn)
                        epilogue_out(C, C_s, D, D16, bias, bias16, bias32, factor, c, m0, n0,
                                     tid_wg)
            if tid_wg == 0:
                T.ptx["cp.async.bulk.wait_group"](0)
        if cluster > 1 and omit != "exit_sync":  # no CTA leaves while a peer may still
            T.cuda.cluster_sync()  # arrive on its barriers
    # fmt: on
    if pdl:  # TVM 0.27's runtime launches it with programmatic stream serialization
        return gemm.with_attr("tirx.kernel_launch_params", [PDL_TAG])
    return gemm


def scaled_inputs(m: int, n: int, k: int, dtype: str = "float8_e4m3fn", seed: int = 0):
    """The float8 kernel's arguments: A (m x k), Bt (n x k: B K-major), the product of the
    two per-tensor scales (one float32) and C poisoned (bfloat16)."""
    rng = np.random.default_rng(seed)
    kind = getattr(ml_dtypes, dtype)
    a = rng.uniform(-2, 2, (m, k)).astype(kind)
    bt = rng.uniform(-2, 2, (n, k)).astype(kind)
    scale = np.array([rng.uniform(0.25, 1.0)], np.float32)
    return [a, bt, scale, np.full((m, n), np.nan, ml_dtypes.bfloat16)]


def scaled_close(c: np.ndarray, a: np.ndarray, bt: np.ndarray, scale: np.ndarray) -> bool:
    """C against the float64 product of the float8 values times the scale: within one
    bfloat16 rounding (2^-8 relative) and ``K / 32 * 2^-16`` of ``scale * sum |a| |b|``.
    The second term is the accumulation: an sm_90 float8 wgmma keeps 14 bits of its sum,
    the accumulator included (docs/simulator.md "wgmma numerics"; measured through this
    kernel: up to 2^-14 of that sum at K = 384, 2^-11.5 at K = 4096, after the rounding);
    a K tile lost or an element misplaced is far outside it."""
    s = float(scale[0])
    a64, b64 = a.astype(np.float64), bt.astype(np.float64)
    want = a64 @ b64.T * s
    magnitude = np.abs(a64) @ np.abs(b64).T * s
    bound = 2.0**-8 * np.abs(want) + a.shape[1] / 32 * 2.0**-16 * magnitude
    return bool(np.all(np.abs(c.astype(np.float64) - want) <= bound))


# The program at a small size, for `tirx-dispatch explain/lower/sim examples/gemm_hopper_ws.py`.
kernel = gemm_kernel(256, 256, 192, stages=2, grid=2)


def main() -> int:
    sys.path.insert(0, __file__.rsplit("/", 1)[0])
    from gemm import check

    shapes = ((4096, 4096, 4096), (1000, 1000, 1000))
    failed = check(kernel, (256, 256, 192), gemm_kernel, gpu_archs=("sm_90a",), gpu_shapes=shapes)
    from tirx_cuda_dispatch import runtime, sim

    m, n, k = 256, 512, 256  # float8 e4m3 with a per-tensor scale, into bfloat16
    func = gemm_kernel(m, n, k, dtype="float8_e4m3fn", stages=2, grid=2)
    args = scaled_inputs(m, n, k)
    ok = scaled_close(sim.run(func, args, pipeline="tirx_cuda_dispatch.strict")[3], *args[:3])
    print(f"simulator, float8 {m}x{n}x{k}: {'ok' if ok else 'WRONG'}")
    if runtime.gpu_arch() == "sm_90a":
        m = n = k = 4096
        args = scaled_inputs(m, n, k)
        exe = runtime.build(gemm_kernel(m, n, k, dtype="float8_e4m3fn"), "sm_90a",
                            "tirx_cuda_dispatch.strict")  # fmt: skip
        ok_gpu = scaled_close(runtime.run(exe, "gemm", args)[3], *args[:3])
        print(f"sm_90a, float8 {m}x{n}x{k}: {'ok' if ok_gpu else 'WRONG'}")
        ok = ok and ok_gpu
    return failed or (0 if ok else 1)


if __name__ == "__main__":
    sys.exit(main())
