"""Demonstration programs (the seeds' examples), shared by the demo, tests and benchmarks."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from tvm.script import tirx as T
from tvm.script.tirx import tile as Tx
from tvm.tirx.layout import (
    R,
    S,
    TCol,
    TileLayout,
    TLane,
    laneid,
    tid_in_wg,
    warpid,
    wg_local_layout,
)

from . import fragments
from .fragments import (  # the fragment layouts, public in .fragments; here for the tests
    MMA_A_K8,
    MMA_ACC,
    MMA_B_K8,
    mma_accumulator_layout,
    mma_rows_layout,
    wgmma_accumulator_layout,
    wgmma_row_parts_layout,
    wgmma_rows_layout,
)

SCOPE_THREADS = {"warp": 32, "warpgroup": 128}


def gmem_smem_roundtrip(
    dtype: str = "float32",
    tile: tuple[int, int] = (32, 32),
    scope: str = "warp",
    ctas: int = 1,
    cta_threads: int | None = None,
    shared_layout: Any = None,
    cols: int | None = None,
    col_offset: int = 0,
    path: str = "shared",
    second_layout: Any = None,
) -> Any:
    """Each CTA copies its ``tile`` of A to B through shared memory (seed 004's program), or
    along another ``path``.

    A and B are ``(ctas * TM, cols)``; CTA ``bx`` moves rows ``[bx*TM, (bx+1)*TM)`` and
    columns ``[col_offset, col_offset + TN)``. ``scope`` is the scope of the copies;
    ``cta_threads`` sets the block size (defaults to the scope's thread count). ``path``:
    "shared" (the default), "global" (one copy, A's tile straight to B's) or
    "shared_shared" (A -> shared -> a second shared tile laid out by ``second_layout``
    -> B).
    """
    if path not in ("shared", "global", "shared_shared"):
        raise ValueError(f"path {path!r}: one of shared, global, shared_shared")
    if path == "global" and shared_layout is not None:
        raise ValueError("path 'global' has no shared tile to lay out")
    if path != "shared_shared" and second_layout is not None:
        raise ValueError(f"path {path!r} has no second shared tile to lay out")
    tm, tn = tile
    cols = cols if cols is not None else tn
    threads = cta_threads or SCOPE_THREADS.get(scope, 32)
    if threads % 32:
        raise ValueError("cta_threads must be a multiple of 32")
    warps = threads // 32
    s_layout = shared_layout if shared_layout is not None else TileLayout(S[(tm, tn)])
    s2_layout = second_layout if second_layout is not None else TileLayout(S[(tm, tn)])
    copy = getattr(Tx, scope).copy
    direct, twice = path == "global", path == "shared_shared"
    c0, c1 = col_offset, col_offset + tn
    with_wg = warps % 4 == 0

    # fmt: off
    @T.prim_func
    def gmem_smem(A_ptr: T.handle, B_ptr: T.handle):
        A = T.match_buffer(A_ptr, (ctas * tm, cols), dtype)
        B = T.match_buffer(B_ptr, (ctas * tm, cols), dtype)
        T.device_entry()
        bx = T.cta_id([ctas])
        if with_wg:
            T.warpgroup_id([warps // 4])
            T.warp_id_in_wg([4])
        T.warp_id([warps])
        T.lane_id([32])
        T.thread_id([threads])
        if direct:
            copy(B[bx * tm:(bx + 1) * tm, c0:c1], A[bx * tm:(bx + 1) * tm, c0:c1])
        elif twice:
            A_smem = T.alloc_buffer((tm, tn), dtype, scope="shared", layout=s_layout)
            B_smem = T.alloc_buffer((tm, tn), dtype, scope="shared", layout=s2_layout)
            copy(A_smem[:, :], A[bx * tm:(bx + 1) * tm, c0:c1])
            T.cuda.cta_sync()
            copy(B_smem[:, :], A_smem[:, :])
            T.cuda.cta_sync()
            copy(B[bx * tm:(bx + 1) * tm, c0:c1], B_smem[:, :])
        else:
            A_smem = T.alloc_buffer((tm, tn), dtype, scope="shared", layout=s_layout)
            copy(A_smem[:, :], A[bx * tm:(bx + 1) * tm, c0:c1])
            T.cuda.cta_sync()
            copy(B[bx * tm:(bx + 1) * tm, c0:c1], A_smem[:, :])
    # fmt: on
    return gmem_smem


def narrowed_roundtrip(
    dtype: str,
    tile: tuple[int, int],
    scope: str,
    cta_threads: int,
    lanes: tuple[int, int] = (0, 32),
    warps: tuple[int, int] | None = None,
) -> Any:
    """A -> shared -> B at ``scope`` by the threads an enclosing ``if`` leaves: lanes
    ``[lo, hi)`` and, at warpgroup or CTA scope, the warps ``[lo, hi)`` of the scope
    (``T.warp_id_in_wg`` or ``T.warp_id``). TVM narrows the scope's thread axes to those
    ranges; the copies split the tile among the threads that run them. Both copies split
    it alike, so each thread reads back what it wrote and no barrier is needed (a CTA
    barrier under the if would be a divergent one). One CTA; at warp or warpgroup scope
    only the first warp or warpgroup reaches the copies."""
    rows, cols = tile
    copy = getattr(Tx, scope).copy
    n_warps = cta_threads // 32
    with_wg = n_warps % 4 == 0
    l0, l1 = lanes
    w0, w1 = warps if warps is not None else (0, n_warps if scope == "cta" else 4)
    by_warp_in_wg = scope == "warpgroup"

    # fmt: off
    @T.prim_func
    def narrowed(A_ptr: T.handle, B_ptr: T.handle):
        A = T.match_buffer(A_ptr, (rows, cols), dtype)
        B = T.match_buffer(B_ptr, (rows, cols), dtype)
        T.device_entry()
        T.cta_id([1])
        if with_wg:
            T.warpgroup_id([n_warps // 4])
            wid = T.warp_id_in_wg([4])
        warp = T.warp_id([n_warps])
        lane = T.lane_id([32])
        T.thread_id([cta_threads])
        A_s = T.alloc_buffer((rows, cols), dtype, scope="shared", layout=TileLayout(S[tile]))
        first = T.meta_var(warp < 1 if scope == "warp" else warp < 4 if scope == "warpgroup" else True)
        mine = T.meta_var(wid if by_warp_in_wg else warp)
        if first:
            if mine >= w0:
                if mine < w1:
                    if lane >= l0:
                        if lane < l1:
                            copy(A_s[:, :], A[:, :])
                            copy(B[:, :], A_s[:, :])
    # fmt: on
    return narrowed


def ldgsts_roundtrip(
    dtype: str = "float32",
    tile: tuple[int, int] = (32, 32),
    scope: str = "cta",
    threads: int | None = None,
    ctas: int = 1,
    cols: int | None = None,
    col_offset: int = 0,
    shared_layout: Any = None,
    config: Any = None,
    init: bool = False,
    dispatch: str | None = "ldgsts",
    wait: bool = True,
) -> Any:
    """CTA ``bx`` copies A[bx*TM:(bx+1)*TM, c0:c0+TN] into a shared tile with
    ``copy_async`` at ``scope``, commits, waits, syncs, and copies the tile to the same
    region of B (arguments A, B, C). ``config(tid, bx)`` gives the call's config keys.
    With ``init`` the shared tile first gets C's region (a synchronous copy), so what a
    predicate skips is C's; without it the device kernel drops C, but the host function
    (what the GPU and the simulator are given) still takes A, B, C. ``wait=False`` leaves out the ``cp.async.wait_group`` (a broken
    kernel: the copy back reads the tile while the cp.async writes are in flight).
    One CTA's rows start at 0 (not ``bx * TM``, whose alignment the analyzer does not know)."""
    tm, tn = tile
    cols = cols if cols is not None else tn
    threads = threads or {"warp": 32, "warpgroup": 128}.get(scope, 128)
    warps = threads // 32
    s_layout = shared_layout if shared_layout is not None else TileLayout(S[(tm, tn)])
    copy_async, copy = getattr(Tx, scope).copy_async, getattr(Tx, scope).copy
    c0, c1 = col_offset, col_offset + tn
    with_wg = warps % 4 == 0
    config = config or (lambda tid, bx: {})
    shape = (ctas * tm, cols)

    def first(bx):
        return bx * tm if ctas > 1 else 0

    # fmt: off
    @T.prim_func
    def ldgsts_copy(A_ptr: T.handle, B_ptr: T.handle, C_ptr: T.handle):
        A = T.match_buffer(A_ptr, shape, dtype)
        B = T.match_buffer(B_ptr, shape, dtype)
        C = T.match_buffer(C_ptr, shape, dtype)
        T.device_entry()
        bx = T.cta_id([ctas])
        if with_wg:
            T.warpgroup_id([warps // 4])
            T.warp_id_in_wg([4])
        T.warp_id([warps])
        T.lane_id([32])
        tid = T.thread_id([threads])
        r0 = T.meta_var(first(bx))
        A_s = T.alloc_buffer((tm, tn), dtype, scope="shared", layout=s_layout)
        if init:
            copy(A_s[:, :], C[r0:r0 + tm, c0:c1])
            T.cuda.cta_sync()
        copy_async(A_s[:, :], A[r0:r0 + tm, c0:c1], dispatch=dispatch, **config(tid, bx))
        T.ptx.cp.async_.commit_group()
        if wait:
            T.ptx.cp.async_.wait_group(0)
        T.cuda.cta_sync()
        copy(B[r0:r0 + tm, c0:c1], A_s[:, :])
    # fmt: on
    return ldgsts_copy


def tma_shared_layout(
    dtype: str, tile: tuple[int, int], swizzle: int, transposed: bool = False
) -> Any:
    """The shared layout a TMA box lands in: the tile in column blocks as wide as the
    swizzle (``swizzle`` bytes; 0: no swizzle, one block of the whole row), each block's
    rows dense, under the swizzle TMA applies (16-byte units, ``Swizzle<B, 4, 3>`` on
    bytes). ``transposed``: the same with rows and columns exchanged (the tile's columns
    dense in row blocks: what a box of a column-major global lands in)."""
    from tvm.tirx.layout import ComposeLayout

    rows, cols = tile
    size = np.dtype(dtype if dtype != "bfloat16" else "uint16").itemsize
    if transposed:
        width = swizzle // size if swizzle else rows
        blocked = TileLayout(S[(rows // width, width, cols) : (cols * width, 1, width)])
    else:
        width = swizzle // size if swizzle else cols
        blocked = TileLayout(S[(rows, cols // width, width) : (width, rows * width, 1)])
    if not swizzle:
        return blocked
    per_element = (16 // size).bit_length() - 1
    return ComposeLayout(per_element, (swizzle // 16).bit_length() - 1, 3, blocked)


def tma_roundtrip(
    dtype: str = "float16",
    tile: tuple[int, int] = (64, 128),
    swizzle: int = 128,
    scope: str = "cta",
    shape: tuple[int, int] = (256, 256),
    start: tuple[int, int] = (64, 128),
    shared_layout: Any = None,
    align: int = 1024,
    expect: bool = True,
    wait: bool | str = True,
    global_layout: Any = None,
    config: dict | None = None,
) -> Any:
    """A[start : start + tile] -> a shared tile with ``copy_async`` (TMA: ``mbar=``) at
    ``scope`` (thread: under ``if tid == 0``), completed on an mbarrier (one thread's
    ``arrive.expect_tx`` of the tile's bytes, every thread's wait), then the tile -> B
    (arguments A, B). ``expect=False`` leaves out the expect-tx, ``wait=False`` the wait,
    ``wait="cta_sync"`` puts a CTA barrier in its place (broken kernels); ``start`` may put
    the tile partly outside A (TMA reads zeros there); ``global_layout`` is A's layout in
    global memory (e.g. column-major), ``config`` more keys for the copy (``tma_dtype``)."""
    rows, cols = tile
    a_kw = {} if global_layout is None else {"layout": global_layout}
    extra = dict(config or {})
    threads = 32 if scope == "warp" else 128
    layout = shared_layout if shared_layout is not None else tma_shared_layout(dtype, tile, swizzle)
    size = np.dtype(dtype if dtype != "bfloat16" else "uint16").itemsize
    nbytes = rows * cols * size
    r0, c0 = start
    copy_async = Tx.copy_async if scope == "thread" else getattr(Tx, scope).copy_async

    # fmt: off
    @T.prim_func
    def tma_copy(A_ptr: T.handle, B_ptr: T.handle):
        A = T.match_buffer(A_ptr, shape, dtype, **a_kw)
        B = T.match_buffer(B_ptr, (rows, cols), dtype)
        T.device_entry()
        T.cta_id([1])
        if scope == "warp":
            T.warp_id([1])
            T.lane_id([32])
        tid = T.thread_id([threads])
        pool = T.alloc_buffer((rows * cols + 8 // size,), dtype, scope="shared.dyn", align=align)
        A_s = T.decl_buffer((rows, cols), dtype, pool.data, scope="shared.dyn", layout=layout)
        bar = T.decl_buffer((1,), "uint64", pool.data, elem_offset=nbytes // 8, scope="shared.dyn")
        if tid == 0:
            T.ptx.mbarrier.init.shared.b64(bar.ptr_to([0]), 1)
        T.cuda.cta_sync()
        if scope == "thread":
            if tid == 0:
                copy_async(A_s[:, :], A[r0:r0 + rows, c0:c0 + cols], mbar=bar.ptr_to([0]),
                           **extra)
        else:
            copy_async(A_s[:, :], A[r0:r0 + rows, c0:c0 + cols], mbar=bar.ptr_to([0]), **extra)
        if expect:
            if tid == 0:
                T.ptx["mbarrier.arrive.expect_tx.shared.b64"](bar.ptr_to([0]), nbytes)
        else:
            if tid == 0:
                T.ptx["mbarrier.arrive.shared.b64"](bar.ptr_to([0]))
        if wait == "cta_sync":
            T.cuda.cta_sync()
        elif wait:
            T.cuda.mbarrier_wait(bar.ptr_to([0]), 0)
        Tx.cta.copy(B[:, :], A_s[:, :])
    # fmt: on

    return tma_copy


def tma_store_roundtrip(
    dtype: str = "float16",
    tile: tuple[int, int] = (64, 128),
    swizzle: int = 128,
    scope: str = "cta",
    shape: tuple[int, int] = (256, 256),
    start: tuple[int, int] = (64, 128),
    reduce: str | None = None,
    fence: bool = True,
    wait: str | None = "full",
    rewrite: bool = False,
    config: dict | None = None,
    shared_layout: Any = None,
    global_layout: Any = None,
) -> Any:
    """A (a ``tile``) -> a shared tile (plain stores: ``Tx.cta.copy``), then the tile ->
    B[start : start + tile] with ``copy_async`` (a TMA store; ``reduce``: a reduction into
    B, ``use_tma_reduce=``) at ``scope``; B has ``shape`` (the tile may reach past it: the
    store clips). The writers fence (``fence.proxy.async``) and meet at a CTA barrier
    first; thread 0, which issues, commits the bulk async-group and waits (``wait``:
    "full" ``wait_group 0``, "read" ``wait_group.read 0``, None: no wait). ``fence=False``
    leaves out the fence (a broken kernel); ``config`` more keys for the copy;
    ``shared_layout`` the tile's (else :func:`tma_shared_layout`'s), ``global_layout`` B's
    in global memory (e.g. column-major). Arguments A, B."""
    rows, cols = tile
    threads = 32 if scope == "warp" else 128
    layout = shared_layout if shared_layout is not None else tma_shared_layout(dtype, tile, swizzle)
    b_kw = {} if global_layout is None else {"layout": global_layout}
    r0, c0 = start
    copy_async = Tx.copy_async if scope == "thread" else getattr(Tx, scope).copy_async
    config = dict(config or {}) | ({} if reduce is None else {"use_tma_reduce": reduce})

    # fmt: off
    @T.prim_func
    def tma_store(A_ptr: T.handle, B_ptr: T.handle):
        A = T.match_buffer(A_ptr, (rows, cols), dtype)
        B = T.match_buffer(B_ptr, shape, dtype, **b_kw)
        T.device_entry()
        T.cta_id([1])
        if scope == "warp":
            T.warp_id([1])
            T.lane_id([32])
        tid = T.thread_id([threads])
        pool = T.alloc_buffer((rows * cols,), dtype, scope="shared.dyn", align=1024)
        A_s = T.decl_buffer((rows, cols), dtype, pool.data, scope="shared.dyn", layout=layout)
        Tx.cta.copy(A_s[:, :], A[:, :])
        if fence:
            T.ptx["fence.proxy.async.shared::cta"]()
        T.cuda.cta_sync()
        if scope == "thread":
            if tid == 0:
                copy_async(B[r0:r0 + rows, c0:c0 + cols], A_s[:, :], **config)
        else:
            copy_async(B[r0:r0 + rows, c0:c0 + cols], A_s[:, :], **config)
        if tid == 0:
            T.ptx["cp.async.bulk.commit_group"]()
            if wait == "full":
                T.ptx["cp.async.bulk.wait_group"](0)
            elif wait == "read":
                T.ptx["cp.async.bulk.wait_group.read"](0)
        if rewrite:
            T.cuda.cta_sync()
            Tx.cta.copy(A_s[:, :], A[:, :])
    # fmt: on

    return tma_store


def _scope_threads(scope: str, cta_threads: int | None) -> int:
    threads = cta_threads or SCOPE_THREADS.get(scope, 32)
    if threads % 32:
        raise ValueError("cta_threads must be a multiple of 32")
    return threads


def reg_roundtrip(
    r_layout: Any,
    shape: tuple[int, ...],
    dtype: str = "float32",
    scope: str = "warp",
    memory: str = "shared",
    cta_threads: int | None = None,
) -> Any:
    """A ``shape`` tile of A goes through registers with layout ``r_layout`` into B
    (seed 000's program): ``memory="shared"`` stages it global -> shared -> registers ->
    shared -> global, ``memory="global"`` moves global -> registers -> global.

    Nothing may pass by accident: the registers are first filled from B (which the caller
    poisons), and the shared tile is overwritten with B's poison before the registers are
    stored back, so a copy that does nothing leaves poison in B.
    """
    threads = _scope_threads(scope, cta_threads)
    warps = threads // 32
    copy = getattr(Tx, scope).copy
    with_wg = warps % 4 == 0
    staged = memory == "shared"
    s_layout = TileLayout(S[shape])
    full = tuple(slice(0, e) for e in shape)

    # fmt: off
    @T.prim_func
    def reg_copy(A_ptr: T.handle, B_ptr: T.handle):
        A = T.match_buffer(A_ptr, shape, dtype)
        B = T.match_buffer(B_ptr, shape, dtype)
        T.device_entry()
        T.cta_id([1])
        if with_wg:
            T.warpgroup_id([warps // 4])
            T.warp_id_in_wg([4])
        T.warp_id([warps])
        T.lane_id([32])
        T.thread_id([threads])
        R = T.alloc_buffer(shape, dtype, scope="local", layout=r_layout)
        copy(R[full], B[full])  # poison first: a load that does nothing shows
        if staged:
            A_smem = T.alloc_buffer(shape, dtype, scope="shared", layout=s_layout)
            copy(A_smem[full], A[full])
            T.cuda.cta_sync()
            copy(R[full], A_smem[full])  # shared -> registers
            T.cuda.cta_sync()
            copy(A_smem[full], B[full])  # poison the tile: a store that does nothing shows
            T.cuda.cta_sync()
            copy(A_smem[full], R[full])  # registers -> shared
            T.cuda.cta_sync()
            copy(B[full], A_smem[full])
        else:
            copy(R[full], A[full])  # global -> registers
            copy(B[full], R[full])  # registers -> global
    # fmt: on
    return reg_copy


def ldstmatrix_roundtrip(
    r_layout: Any,
    s_layout: Any,
    shape: tuple[int, ...],
    regs: int,
    dtype: str = "float16",
    scope: str = "warp",
    cta_threads: int | None = None,
    dispatch: str | None = None,
) -> Any:
    """A ``shape`` tile of A goes global -> shared (layout ``s_layout``) -> registers
    (``r_layout``, ``regs`` per thread) -> shared -> B global (seed 002's program); F
    receives every thread's registers right after the shared -> register copy.
    ``dispatch`` forces a variant for the two register copies (``"ldstmatrix"``: the
    matrix instructions even where the cost rule would choose copy -> reg).

    As in :func:`reg_roundtrip`, the registers start out holding B's poison and the shared
    tile is overwritten with it before the registers are stored back.
    """
    threads = _scope_threads(scope, cta_threads)
    warps = threads // 32
    copy = getattr(Tx, scope).copy
    with_wg = warps % 4 == 0
    full = tuple(slice(0, e) for e in shape)
    kw = {"dispatch": dispatch} if dispatch else {}

    # fmt: off
    @T.prim_func
    def fragment_copy(A_ptr: T.handle, B_ptr: T.handle, F_ptr: T.handle):
        A = T.match_buffer(A_ptr, shape, dtype)
        B = T.match_buffer(B_ptr, shape, dtype)
        F = T.match_buffer(F_ptr, (threads, regs), dtype)
        T.device_entry()
        T.cta_id([1])
        if with_wg:
            T.warpgroup_id([warps // 4])
            T.warp_id_in_wg([4])
        T.warp_id([warps])
        T.lane_id([32])
        tid = T.thread_id([threads])
        A_smem = T.alloc_buffer(shape, dtype, scope="shared", layout=s_layout)
        R = T.alloc_buffer(shape, dtype, scope="local", layout=r_layout)
        R_flat = T.decl_buffer((regs,), dtype, data=R.data, scope="local")
        copy(A_smem[full], A[full])
        copy(R[full], B[full])  # poison the registers
        T.cuda.cta_sync()
        copy(R[full], A_smem[full], **kw)  # shared -> registers (ldmatrix)
        for i in range(regs):
            F[tid, i] = R_flat[i]
        T.cuda.cta_sync()
        copy(A_smem[full], B[full])  # poison the tile
        T.cuda.cta_sync()
        copy(A_smem[full], R[full], **kw)  # registers -> shared (stmatrix)
        T.cuda.cta_sync()
        copy(B[full], A_smem[full])
    # fmt: on
    return fragment_copy


def tcgen05_roundtrip(wait_st: bool = True) -> Any:
    """Seed 003's program: a warpgroup round-trips a 128x8 float16 tile registers -> tmem
    -> registers (thread t owns row t, TMEM lane t). A -> B; B starts poisoned.
    ``wait_st=False`` leaves out the store's wait (a broken kernel, for the simulator's
    negative control).

    The copies emit no wait: completion is the caller's, so the kernel waits itself
    (``tcgen05.wait::st`` before reading tensor memory back, ``tcgen05.wait::ld`` before
    using the loaded registers). Runs only on Blackwell (sm_100a and newer).
    """
    WIDTH, dtype = 8, "float16"  # noqa: N806  (8 float16 = 4 registers: .32x32b.x4)
    local_view = TileLayout(S[(128, WIDTH) : (1 @ tid_in_wg, 1)])  # thread t owns row t
    tmem_view = TileLayout(S[(128, WIDTH) : (1 @ TLane, 1 @ TCol)])  # row r in TMEM lane r

    # fmt: off
    @T.prim_func
    def tcgen05_copy(A_ptr: T.handle, B_ptr: T.handle):
        A = T.match_buffer(A_ptr, (128, WIDTH), dtype)
        B = T.match_buffer(B_ptr, (128, WIDTH), dtype)
        T.device_entry()
        warp_id = T.warp_id([4])
        T.warpgroup_id([1])
        tid = T.thread_id([128])
        pool = T.SMEMPool()
        tmem_addr = pool.alloc((1,), "uint32")
        pool.commit()
        if warp_id == 0:  # one warp allocates 32 TMEM columns (the minimum)
            T.ptx["tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32"](
                T.address_of(tmem_addr[0]), 32
            )
            T.ptx["tcgen05.fence::before_thread_sync"]()  # order the alloc before the barrier
        T.tvm_storage_sync("shared")
        T.ptx["tcgen05.fence::after_thread_sync"]()
        # TVM 0.27 takes a constant allocated_addr (as its TMEMPool does): the tile starts at
        # column 0, which the only allocation of a CTA alone on its SM gets; trap otherwise.
        T.cuda.trap_when_assert_failed(tmem_addr[0] == 0)
        tmem = T.decl_buffer((128, WIDTH), dtype, scope="tmem", allocated_addr=0, layout=tmem_view)
        A_reg = T.alloc_local((WIDTH,), dtype)
        B_reg = T.alloc_local((WIDTH,), dtype)
        A_local = A_reg.view(128, WIDTH, layout=local_view)
        B_local = B_reg.view(128, WIDTH, layout=local_view)
        for i in range(WIDTH):
            A_reg[i] = A[tid, i]
        Tx.wg.copy_async(tmem[:, :], A_local[:, :])  # local -> tmem: tcgen05.st
        if wait_st:
            T.ptx.tcgen05.wait__st.sync.aligned()  # the caller's wait
        T.cuda.cta_sync()
        Tx.wg.copy_async(B_local[:, :], tmem[:, :])  # tmem -> local: tcgen05.ld
        T.ptx.tcgen05.wait__ld.sync.aligned()  # the caller's wait
        for i in range(WIDTH):
            B[tid, i] = B_reg[i]
        T.ptx["tcgen05.fence::before_thread_sync"]()  # every warp's loads before the dealloc
        T.cuda.cta_sync()
        if warp_id == 0:
            T.ptx["tcgen05.fence::after_thread_sync"]()
            T.ptx["tcgen05.dealloc.cta_group::1.sync.aligned.b32"](tmem_addr[0], 32)
    # fmt: on
    return tcgen05_copy


ELEMENTWISE_FAMILIES = {
    "zero": "zero",
    "fill": "fill",
    **{op: "unary" for op in ("sqrt", "exp", "exp2", "log2", "reciprocal", "silu")},
    **{op: "binary" for op in ("add", "sub", "mul", "fdiv", "maximum")},
    "fma": "fma",
    "cast": "cast",
}


def elementwise_roundtrip(
    op: str,
    r_layout: Any,
    shape: tuple[int, ...],
    dtype: str = "float32",
    scope: str = "warp",
    src_dtype: str | None = None,
    cta_threads: int | None = None,
    scalar: Any = None,
    bias: Any = None,
    scale: Any = None,
    c_shape: tuple[int, ...] | None = None,
    c_layout: Any = None,
) -> Any:
    """``B = op(A[, C[, D]])`` through registers (seed 001's program): the inputs are loaded
    global -> registers (layout ``r_layout``; C with ``c_layout`` and ``c_shape`` when it
    broadcasts), the op runs on the registers, the result is stored registers -> global.

    ``scalar`` replaces C for binary ops and is the value of ``fill``; ``bias``/``scale``
    are unary math's optional scalars; ``src_dtype`` is A's dtype for ``cast``.
    """
    family = ELEMENTWISE_FAMILIES[op]
    threads = _scope_threads(scope, cta_threads)
    warps = threads // 32
    with_wg = warps % 4 == 0
    src_dtype = src_dtype or dtype
    c_shape = c_shape or shape
    c_layout = c_layout if c_layout is not None else r_layout
    ns = getattr(Tx, scope)
    copy, fn = ns.copy, getattr(ns, op)
    full = tuple(slice(0, e) for e in shape)
    c_full = tuple(slice(0, e) for e in c_shape)
    has_scalar = scalar is not None

    # fmt: off
    @T.prim_func
    def elementwise(A_ptr: T.handle, C_ptr: T.handle, D_ptr: T.handle, B_ptr: T.handle):
        A = T.match_buffer(A_ptr, shape, src_dtype)
        C = T.match_buffer(C_ptr, c_shape, dtype)
        D = T.match_buffer(D_ptr, shape, dtype)
        B = T.match_buffer(B_ptr, shape, dtype)
        T.device_entry()
        T.cta_id([1])
        if with_wg:
            T.warpgroup_id([warps // 4])
            T.warp_id_in_wg([4])
        T.warp_id([warps])
        T.lane_id([32])
        T.thread_id([threads])
        RA = T.alloc_buffer(shape, src_dtype, scope="local", layout=r_layout)
        RC = T.alloc_buffer(c_shape, dtype, scope="local", layout=c_layout)
        RD = T.alloc_buffer(shape, dtype, scope="local", layout=r_layout)
        RB = T.alloc_buffer(shape, dtype, scope="local", layout=r_layout)
        copy(RB[full], B[full])  # poison: an op that writes nothing shows
        copy(RA[full], A[full])
        copy(RC[c_full], C[c_full])
        copy(RD[full], D[full])
        if family == "zero":
            fn(RB[full])
        elif family == "fill":
            fn(RB[full], scalar)
        elif family == "unary":
            fn(RB[full], RA[full], bias, scale)
        elif family == "binary":
            if has_scalar:
                fn(RB[full], RA[full], scalar)
            else:
                fn(RB[full], RA[full], RC[c_full])
        elif family == "fma":
            fn(RB[full], RA[full], RC[c_full], RD[full])
        else:
            fn(RB[full], RA[full])
        copy(B[full], RB[full])
    # fmt: on
    return elementwise


def smem_elementwise_roundtrip(
    op: str,
    shape: tuple[int, ...],
    dtype: str = "float32",
    scope: str = "warp",
    cta_threads: int | None = None,
    shared_layout: Any = None,
    c_shape: tuple[int, ...] | None = None,
    src_dtype: str | None = None,
    bias_region: bool = False,
) -> Any:
    """``B = op(A, C)`` (binary ops) or ``B = op(A)`` (unary) on shared tiles: A and C go
    global -> shared, the op writes a third shared tile that starts out holding B's
    poison, and that tile goes back to B. The calls TVM's own elementwise tests make on
    shared memory. ``shared_layout`` lays out all three tiles (a swizzle, say); C of
    ``c_shape`` (extent-1 dimensions) broadcasts against A. A and C have ``src_dtype``
    (default ``dtype``, B's); ``bias_region``: C is a unary op's bias tile."""
    family = ELEMENTWISE_FAMILIES[op]
    if family not in ("unary", "binary"):
        raise ValueError(f"smem_elementwise_roundtrip takes unary and binary ops, not {op}")
    threads = _scope_threads(scope, cta_threads)
    warps = threads // 32
    with_wg = warps % 4 == 0
    ns = getattr(Tx, scope)
    copy, fn = ns.copy, getattr(ns, op)
    full = tuple(slice(0, e) for e in shape)
    s_layout = shared_layout if shared_layout is not None else TileLayout(S[shape])
    binary = family == "binary"
    c_shape = c_shape or shape
    c_full = tuple(slice(0, e) for e in c_shape)
    src_dtype = src_dtype or dtype

    # fmt: off
    @T.prim_func
    def smem_elementwise(A_ptr: T.handle, C_ptr: T.handle, B_ptr: T.handle):
        A = T.match_buffer(A_ptr, shape, src_dtype)
        C = T.match_buffer(C_ptr, c_shape, src_dtype)
        B = T.match_buffer(B_ptr, shape, dtype)
        T.device_entry()
        T.cta_id([1])
        if with_wg:
            T.warpgroup_id([warps // 4])
            T.warp_id_in_wg([4])
        T.warp_id([warps])
        T.lane_id([32])
        T.thread_id([threads])
        SA = T.alloc_buffer(shape, src_dtype, scope="shared", layout=s_layout)
        SC = T.alloc_buffer(c_shape, src_dtype, scope="shared", layout=TileLayout(S[c_shape]))
        SB = T.alloc_buffer(shape, dtype, scope="shared", layout=s_layout)
        copy(SA[full], A[full])
        copy(SC[c_full], C[c_full])
        copy(SB[full], B[full])  # poison: an op that writes nothing shows
        T.cuda.cta_sync()
        if binary:
            fn(SB[full], SA[full], SC[c_full])
        elif bias_region:
            fn(SB[full], SA[full], SC[c_full])
        else:
            fn(SB[full], SA[full])
        T.cuda.cta_sync()
        copy(B[full], SB[full])
    # fmt: on
    return smem_elementwise


# -- reductions ------------------------------------------------------------------------------
def _slices(start: tuple[int, ...], extent: tuple[int, ...]) -> tuple[slice, ...]:
    return tuple(slice(s, s + e) for s, e in zip(start, extent, strict=True))


def shared_reduction(
    op: str,
    src_shape: tuple[int, ...],
    axes: tuple[int, ...],
    dst_shape: tuple[int, ...],
    dtype: str = "float32",
    dst_dtype: str | None = None,
    scope: str = "cta",
    cta_threads: int = 128,
    accum: bool = False,
    src_region: tuple[tuple[int, ...], tuple[int, ...]] | None = None,
    dst_region: tuple[tuple[int, ...], tuple[int, ...]] | None = None,
    src_layout: Any = None,
    narrow: str | None = None,
    repeat: int = 1,
    loop_sync: bool = True,
) -> Any:
    """A reduction of a shared tile into a shared dst (TVM's test_reduction_shared program):
    A -> shared, (accum: B -> shared), ``Tx.<scope>.<op>`` over ``src_region`` (start,
    extents) into ``dst_region``, shared -> B. ``narrow``: ``"warp5"`` runs a warp-scope call
    in warp 5 only, ``"wg0"`` a warpgroup-scope call in warpgroup 0 only, ``"warps0-3"`` a
    CTA-scope call in warps 0-3 (``if warp < 4``), ``"tid65"`` a thread-scope call in
    thread 65. ``repeat``: the call in a loop of that
    many trips (its workspace reused); ``loop_sync``: a CTA barrier after the call in
    the loop (without it, the call's own barriers must keep a run's workspace writes
    from overtaking the last run's reads)."""
    dst_dtype = dst_dtype or dtype
    warps = cta_threads // 32
    with_wg = warps % 4 == 0
    s_layout = src_layout or TileLayout(S[src_shape])
    d_layout = TileLayout(S[dst_shape])
    src_region = src_region or ((0,) * len(src_shape), src_shape)
    dst_region = dst_region or ((0,) * len(dst_shape), dst_shape)
    src_sl, dst_sl = _slices(*src_region), _slices(*dst_region)
    all_src = tuple(slice(0, e) for e in src_shape)
    all_dst = tuple(slice(0, e) for e in dst_shape)
    namespace = Tx if scope == "thread" else getattr(Tx, "wg" if scope == "warpgroup" else scope)
    reduce = getattr(namespace, op)

    # fmt: off
    @T.prim_func
    def reduction(A_ptr: T.handle, B_ptr: T.handle):
        A = T.match_buffer(A_ptr, src_shape, dtype)
        B = T.match_buffer(B_ptr, dst_shape, dst_dtype)
        T.device_entry()
        T.cta_id([1])
        if with_wg:
            wg = T.warpgroup_id([warps // 4])
            T.warp_id_in_wg([4])
        warp = T.warp_id([warps])
        T.lane_id([32])
        tid = T.thread_id([cta_threads])
        A_s = T.alloc_buffer(src_shape, dtype, scope="shared", layout=s_layout)
        B_s = T.alloc_buffer(dst_shape, dst_dtype, scope="shared", layout=d_layout)
        Tx.cta.copy(A_s[all_src], A[all_src])
        Tx.cta.copy(B_s[all_dst], B[all_dst])  # poison, or dst's old value for accum
        T.cuda.cta_sync()
        for _ in range(repeat):
            if narrow == "warp5":
                if warp == 5:
                    reduce(B_s[dst_sl], A_s[src_sl], axes=axes, accum=accum)
            elif narrow == "wg0":
                if wg == 0:
                    reduce(B_s[dst_sl], A_s[src_sl], axes=axes, accum=accum)
            elif narrow == "warps0-3":
                if warp < 4:
                    reduce(B_s[dst_sl], A_s[src_sl], axes=axes, accum=accum)
            elif narrow == "tid65":
                if tid == 65:
                    reduce(B_s[dst_sl], A_s[src_sl], axes=axes, accum=accum)
            else:
                reduce(B_s[dst_sl], A_s[src_sl], axes=axes, accum=accum)
            if loop_sync:
                T.cuda.cta_sync()
        if not loop_sync:
            T.cuda.cta_sync()
        Tx.cta.copy(B[all_dst], B_s[all_dst])
    # fmt: on
    return reduction


def register_count(layout: Any) -> int:
    """Registers a thread's array needs for a register layout (its ``m`` span)."""
    from .irfacts import as_int

    return max(as_int(layout.storage().span()) or 1, 1)


def register_reduction(
    op: str,
    src_layout: Any,
    src_shape: tuple[int, ...],
    dst_layout: Any,
    dst_shape: tuple[int, ...],
    axes: tuple[int, ...] | None = None,
    scope: str = "warp",
    cta_threads: int = 32,
    dtype: str = "float32",
    dst_dtype: str | None = None,
    accum: bool = False,
    thread_reduce: bool | None = None,
    dst_memory: str = "local",
) -> Any:
    """A reduction of register tiles as TVM's layouts place them: each thread loads its own
    registers from row ``tid`` of A (``(threads, src registers)``: the caller packs them,
    :func:`pack_registers`), reduces, and stores its dst registers to row ``tid`` of B, so
    a test sees what every thread holds (a replicated dst in each holder). With
    ``dst_memory="shared"`` dst is a shared tile of ``dst_shape`` copied to B."""
    dst_dtype = dst_dtype or dtype
    warps = max(cta_threads // 32, 1)
    with_wg = warps % 4 == 0
    n_src, n_dst = register_count(src_layout), register_count(dst_layout)
    reduce = (
        getattr(Tx, op)
        if scope == "thread"
        else getattr(getattr(Tx, "wg" if scope == "warpgroup" else scope), op)
    )
    kwargs = {"accum": accum}
    if axes is not None:
        kwargs["axes"] = axes
    if thread_reduce is not None:
        kwargs["thread_reduce"] = thread_reduce
    shared_dst = dst_memory == "shared"
    b_shape = dst_shape if shared_dst else (cta_threads, n_dst)
    all_dst = tuple(slice(0, e) for e in dst_shape)

    # fmt: off
    @T.prim_func
    def reduction(A_ptr: T.handle, B_ptr: T.handle):
        A = T.match_buffer(A_ptr, (cta_threads, n_src), dtype)
        B = T.match_buffer(B_ptr, b_shape, dst_dtype)
        T.device_entry()
        T.cta_id([1])
        if with_wg:
            T.warpgroup_id([warps // 4])
            T.warp_id_in_wg([4])
        if cta_threads >= 32:
            T.warp_id([warps])
            T.lane_id([32])
        tid = T.thread_id([cta_threads])
        src = T.alloc_buffer([n_src], dtype, scope="local")
        for i in T.unroll(n_src):
            src[i] = A[tid, i]
        src_view = src.view(*src_shape, layout=src_layout)
        if shared_dst:
            B_s = T.alloc_buffer(dst_shape, dst_dtype, scope="shared", layout=dst_layout)
            Tx.cta.copy(B_s[all_dst], B[all_dst])
            T.cuda.cta_sync()
            reduce(B_s[all_dst], src_view, **kwargs)
            T.cuda.cta_sync()
            Tx.cta.copy(B[all_dst], B_s[all_dst])
        else:
            dst = T.alloc_buffer([n_dst], dst_dtype, scope="local")
            for i in T.unroll(n_dst):
                dst[i] = B[tid, i]
            dst_view = dst.view(*dst_shape, layout=dst_layout)
            reduce(dst_view, src_view, **kwargs)
            for i in T.unroll(n_dst):
                B[tid, i] = dst[i]
    # fmt: on
    return reduction


@dataclass(frozen=True)
class _Tile:
    """A whole tile of a register layout, as the layout functions read an operand."""

    layout: Any
    shape: tuple[int, ...]
    name: str = "tile"

    @property
    def region(self) -> tuple[tuple[int, int], ...]:
        return tuple((0, e) for e in self.shape)

    @property
    def extents(self) -> tuple[int, ...]:
        return self.shape

    @property
    def describe(self) -> str:
        return f"{self.name}{list(self.shape)}"


def register_holders(layout: Any, shape: tuple[int, ...], scope: str, threads: int):
    """(registers, table): ``table[t, i]`` is the row-major index of the tile element thread
    ``t`` holds in register ``registers[i]`` under ``layout``, -1 where none."""
    from .layout.register import register_table, register_view

    table = register_table(register_view(_Tile(layout, tuple(shape))), scope, threads)
    return table.registers, table.elements


def pack_registers(
    values: np.ndarray, layout: Any, scope: str, threads: int, fill: float | None = None
) -> np.ndarray:
    """``values`` (the logical tile) as each thread's register array: ``(threads, n)``
    with ``n`` = :func:`register_count`, ``fill`` (default: a poison pattern) where a
    thread holds nothing."""
    from .runtime import poison_like

    registers, table = register_holders(layout, values.shape, scope, threads)
    out = poison_like(np.zeros((threads, register_count(layout)), dtype=values.dtype))
    if fill is not None:
        out[...] = fill
    flat = values.reshape(-1)
    for i, r in enumerate(registers):
        held = table[:, i] >= 0
        out[held, r] = flat[table[held, i]]
    return out


def unpack_registers(regs: np.ndarray, layout: Any, shape: tuple[int, ...], scope: str):
    """Every (thread, register) that holds a tile element under ``layout``: an array of
    ``(element, value)`` rows, one per holder (a replicated element once per thread)."""
    registers, table = register_holders(layout, shape, scope, regs.shape[0])
    rows = []
    for i, r in enumerate(registers):
        held = np.flatnonzero(table[:, i] >= 0)
        rows += [(int(table[t, i]), regs[t, r]) for t in held]
    return rows


def shared_to_registers(
    op: str,
    src_shape: tuple[int, ...],
    axes: tuple[int, ...],
    dst_shape: tuple[int, ...],
    dst_layout: Any,
    scope: str = "cta",
    cta_threads: int = 128,
    dtype: str = "float32",
    dst_dtype: str | None = None,
    accum: bool = False,
    repeat: int = 1,
) -> Any:
    """A reduction of a shared tile into registers laid out by ``dst_layout``: A -> shared,
    each thread's dst registers from row ``tid`` of B (their old value, or poison), the
    call, and the registers back to B's row (``(threads, dst registers)``, as
    :func:`register_reduction` stores them)."""
    dst_dtype = dst_dtype or dtype
    warps = cta_threads // 32
    with_wg = warps % 4 == 0
    n_dst = register_count(dst_layout)
    all_src = tuple(slice(0, e) for e in src_shape)
    namespace = getattr(Tx, "wg" if scope == "warpgroup" else scope)
    reduce = getattr(namespace, op)

    # fmt: off
    @T.prim_func
    def reduction(A_ptr: T.handle, B_ptr: T.handle):
        A = T.match_buffer(A_ptr, src_shape, dtype)
        B = T.match_buffer(B_ptr, (cta_threads, n_dst), dst_dtype)
        T.device_entry()
        T.cta_id([1])
        if with_wg:
            T.warpgroup_id([warps // 4])
            T.warp_id_in_wg([4])
        T.warp_id([warps])
        T.lane_id([32])
        tid = T.thread_id([cta_threads])
        A_s = T.alloc_buffer(src_shape, dtype, scope="shared", layout=TileLayout(S[src_shape]))
        Tx.cta.copy(A_s[all_src], A[all_src])
        T.cuda.cta_sync()
        dst = T.alloc_buffer([n_dst], dst_dtype, scope="local")
        for i in T.unroll(n_dst):
            dst[i] = B[tid, i]
        dst_view = dst.view(*dst_shape, layout=dst_layout)
        for _ in range(repeat):
            reduce(dst_view, A_s[all_src], axes=axes, accum=accum)
        for i in T.unroll(n_dst):
            B[tid, i] = dst[i]
    # fmt: on
    return reduction


def wgmma_gemm(
    m: int = 64,
    n: int = 128,
    k: int = 64,
    dtype: str = "float16",
    a_layout: Any = None,
    b_layout: Any = None,
    accum: bool = False,
    wait: bool = True,
    align: int = 1024,
    fence: bool = True,
) -> Any:
    """One warpgroup: A (m x k) and B (k x n) from global into 128-byte swizzled shared
    tiles (A K-major rows in 64-column K blocks; B in 64-column blocks, N-major), C = A B (``accum``: C = D's
    tile + A B) with ``Tx.wg.gemm_async``, committed and waited, C -> D (arguments A, B,
    D). ``wait=False`` leaves out the wait, ``fence=False`` the fence.proxy.async between
    the plain stores of A and B and the wgmma that reads them (broken kernels)."""
    from tvm.tirx.layout import ComposeLayout

    kb = min(k, 64)  # A in K blocks of one 128-byte swizzled row
    a_l = (
        a_layout
        if a_layout is not None
        else ComposeLayout(3, 3, 3, TileLayout(S[(m, k // kb, kb) : (kb, m * kb, 1)]))
    )
    b_l = (
        b_layout
        if b_layout is not None
        else ComposeLayout(3, 3, 3, TileLayout(S[(k, n // 64, 64) : (64, k * 64, 1)]))
    )
    c_layout = wgmma_accumulator_layout(n, m // 64)

    # fmt: off
    @T.prim_func
    def wgmma_gemm(A_ptr: T.handle, B_ptr: T.handle, D_ptr: T.handle):
        A = T.match_buffer(A_ptr, (m, k), dtype)
        B = T.match_buffer(B_ptr, (k, n), dtype)
        D = T.match_buffer(D_ptr, (m, n), "float32")
        T.device_entry()
        T.cta_id([1])
        T.warpgroup_id([1])
        T.warp_id_in_wg([4])
        T.lane_id([32])
        T.thread_id([128])
        pool = T.alloc_buffer((m * k + k * n,), dtype, scope="shared.dyn", align=align)
        A_s = T.decl_buffer((m, k), dtype, pool.data, scope="shared.dyn", layout=a_l)
        B_s = T.decl_buffer((k, n), dtype, pool.data, elem_offset=m * k, scope="shared.dyn",
                            layout=b_l)
        C = T.alloc_buffer((m, n), "float32", scope="local", layout=c_layout)
        Tx.cta.copy(A_s[:, :], A[:, :])
        Tx.cta.copy(B_s[:, :], B[:, :])
        if accum:
            Tx.wg.copy(C[:, :], D[:, :])
        if fence:
            T.ptx["fence.proxy.async.shared::cta"]()
        T.cuda.cta_sync()
        Tx.wg.gemm_async(C[:, :], A_s[:, :], B_s[:, :], transA=False, transB=True, accum=accum)
        T.ptx["wgmma.commit_group.sync.aligned"]()
        if wait:
            T.ptx["wgmma.wait_group.sync.aligned"](0)
        Tx.wg.copy(D[:, :], C[:, :])
    # fmt: on

    return wgmma_gemm


def wgmma_gemm_rs(
    m: int = 64,
    n: int = 64,
    k: int = 32,
    dtype: str = "float16",
    accum: bool = False,
    a_layout: Any = None,
    wait: bool = True,
    b_layout: Any = None,
    clobber_a: bool = False,
) -> Any:
    """One warpgroup, A in registers (the wgmma register form, FlashAttention-3's P V): A
    (m x k) from global into a register tile in the A fragment (the m64n16 accumulator
    pattern per 16 columns: :func:`wgmma_accumulator_layout` over K), B (k x n) into a
    128-byte swizzled shared tile (64-column blocks, N-major), C = A B (``accum``: D's
    tile + A B) with ``Tx.wg.gemm_async``, committed and waited, C -> D (arguments A, B,
    D). ``a_layout`` replaces A's register layout (a misplaced one must be refused),
    ``b_layout`` B's shared one (needed where N is not a multiple of 64); ``clobber_a``
    overwrites A's registers before the wait (a race: the wgmma reads them until then)."""
    from tvm.tirx.layout import ComposeLayout

    a_l = a_layout if a_layout is not None else wgmma_accumulator_layout(k, m // 64)
    b_l = b_layout
    if b_l is None:
        b_l = ComposeLayout(3, 3, 3, TileLayout(S[(k, n // 64, 64) : (64, k * 64, 1)]))
    c_layout = wgmma_accumulator_layout(n, m // 64)

    # fmt: off
    @T.prim_func
    def wgmma_gemm_rs(A_ptr: T.handle, B_ptr: T.handle, D_ptr: T.handle):
        A = T.match_buffer(A_ptr, (m, k), dtype)
        B = T.match_buffer(B_ptr, (k, n), dtype)
        D = T.match_buffer(D_ptr, (m, n), "float32")
        T.device_entry()
        T.cta_id([1])
        T.warpgroup_id([1])
        T.warp_id_in_wg([4])
        T.lane_id([32])
        T.thread_id([128])
        pool = T.alloc_buffer((k * n,), dtype, scope="shared.dyn", align=1024)
        B_s = T.decl_buffer((k, n), dtype, pool.data, scope="shared.dyn", layout=b_l)
        A_r = T.alloc_buffer((m, k), dtype, scope="local", layout=a_l)
        C = T.alloc_buffer((m, n), "float32", scope="local", layout=c_layout)
        Tx.wg.copy(A_r[:, :], A[:, :])
        Tx.cta.copy(B_s[:, :], B[:, :])
        if accum:
            Tx.wg.copy(C[:, :], D[:, :])
        T.ptx["fence.proxy.async.shared::cta"]()
        T.cuda.cta_sync()
        Tx.wg.gemm_async(C[:, :], A_r[:, :], B_s[:, :], transA=False, transB=True, accum=accum)
        T.ptx["wgmma.commit_group.sync.aligned"]()
        if clobber_a:
            Tx.wg.fill(A_r[:, :], T.Cast(dtype, 0))
        if wait:
            T.ptx["wgmma.wait_group.sync.aligned"](0)
        Tx.wg.copy(D[:, :], C[:, :])
    # fmt: on

    return wgmma_gemm_rs


def wgmma_gemm_f8(
    m: int = 64,
    n: int = 128,
    k: int = 128,
    a_dtype: str = "float8_e4m3fn",
    b_dtype: str = "float8_e4m3fn",
    b_major: str = "K",
) -> Any:
    """One warpgroup, float8 operands: A (m x k) and B given as Bt (n x k), both K-major in
    128-byte swizzled shared tiles (rows of 128 elements), C = A Bt^T in float32 with
    ``Tx.wg.gemm_async``, committed and waited, C -> D (arguments A, Bt, D). ``b_major=
    "MN"`` lays B out N-major instead (transB; a layout the float8 wgmma cannot read)."""
    from tvm.tirx.layout import ComposeLayout

    kb = min(k, 128)
    a_l = ComposeLayout(4, 3, 3, TileLayout(S[(m, k // kb, kb) : (kb, m * kb, 1)]))
    if b_major == "K":
        b_shape, b_l = (
            (n, k),
            ComposeLayout(4, 3, 3, TileLayout(S[(n, k // kb, kb) : (kb, n * kb, 1)])),
        )
    else:
        b_shape = (k, n)
        b_l = ComposeLayout(4, 3, 3, TileLayout(S[(k, n // 128, 128) : (128, k * 128, 1)]))
    c_layout = wgmma_accumulator_layout(n, m // 64)

    # fmt: off
    @T.prim_func
    def wgmma_gemm_f8(A_ptr: T.handle, B_ptr: T.handle, D_ptr: T.handle):
        A = T.match_buffer(A_ptr, (m, k), a_dtype)
        B = T.match_buffer(B_ptr, b_shape, b_dtype)
        D = T.match_buffer(D_ptr, (m, n), "float32")
        T.device_entry()
        T.cta_id([1])
        T.warpgroup_id([1])
        T.warp_id_in_wg([4])
        T.lane_id([32])
        T.thread_id([128])
        pool = T.alloc_buffer((m * k + k * n,), "uint8", scope="shared.dyn", align=1024)
        A_s = T.decl_buffer((m, k), a_dtype, pool.data, scope="shared.dyn", layout=a_l)
        B_s = T.decl_buffer(b_shape, b_dtype, pool.data, elem_offset=m * k, scope="shared.dyn",
                            layout=b_l)
        C = T.alloc_buffer((m, n), "float32", scope="local", layout=c_layout)
        Tx.cta.copy(A_s[:, :], A[:, :])
        Tx.cta.copy(B_s[:, :], B[:, :])
        T.ptx["fence.proxy.async.shared::cta"]()
        T.cuda.cta_sync()
        Tx.wg.gemm_async(C[:, :], A_s[:, :], B_s[:, :], transA=False, transB=b_major == "MN",
                         accum=False)
        T.ptx["wgmma.commit_group.sync.aligned"]()
        T.ptx["wgmma.wait_group.sync.aligned"](0)
        Tx.wg.copy(D[:, :], C[:, :])
    # fmt: on

    return wgmma_gemm_f8


@dataclass(frozen=True)
class RegisterReduction:
    """A register reduction as TVM's layouts place it: src and dst layouts and shapes, the
    axes, the scope and its threads, TVM's ``thread_reduce``."""

    name: str
    src_layout: Any
    src_shape: tuple[int, ...]
    dst_layout: Any
    dst_shape: tuple[int, ...]
    axes: tuple[int, ...] | None
    scope: str
    threads: int
    thread_reduce: bool | None = None
    # the axes the call reduces where they are not ``axes`` (TVM's lane form: src's lane
    # dimension, with axes left at the default): what a test checks against numpy
    reduced: tuple[int, ...] | None = None

    def kernel(self, op: str, dtype: str = "float32", dst_dtype: str | None = None,
               accum: bool = False, dst_memory: str = "local") -> Any:  # fmt: skip
        return register_reduction(
            op, self.src_layout, self.src_shape, self.dst_layout, self.dst_shape, self.axes,
            self.scope, self.threads, dtype, dst_dtype, accum, self.thread_reduce, dst_memory,
        )  # fmt: skip


def register_reductions() -> dict[str, RegisterReduction]:
    """The register reductions the tests and the fuzzer draw from: TVM's (thread-wise,
    the warp shuffle, several elements per lane, wg_local_layout rows, the mma
    accumulator's rows both ways), CTA-wide ones across warps, and dst layouts that put
    the outputs on other threads than compute them (filled from a workspace)."""
    rows = TileLayout(S[(32, 8) : (1 @ laneid, 1)])
    cases = [
        RegisterReduction("thread_3d", TileLayout(S[(3, 4, 5)]), (3, 4, 5), TileLayout(S[4]),
                          (4,), (0, 2), "thread", 1),
        RegisterReduction("warp_shuffle", TileLayout(S[32 : 1 @ laneid]), (32,),
                          TileLayout(S[1:1] + R[32 : 1 @ laneid]), (1,), None, "warp", 32),
        RegisterReduction("warp_multi_elem", TileLayout(S[(32, 4) : (1 @ laneid, 1)]), (128,),
                          TileLayout(S[4:1] + R[32 : 1 @ laneid]), (4,), None, "warp", 32),
        # TVM's lane form: dst drops src's lane dimension, axes left at the default (-1);
        # the second's registers are sparse (slots 0, 4, 2, 6 of 7)
        RegisterReduction("warp_lane_dim", TileLayout(S[(32, 2, 4) : (1 @ laneid, 4, 1)]),
                          (32, 2, 4), TileLayout(S[(2, 4) : (4, 1)] + R[32 : 1 @ laneid]),
                          (2, 4), None, "warp", 32, reduced=(0,)),
        RegisterReduction("warp_lane_dim_gapped", TileLayout(S[(32, 2, 2) : (1 @ laneid, 2, 4)]),
                          (32, 2, 2), TileLayout(S[(2, 2) : (2, 4)] + R[32 : 1 @ laneid]),
                          (2, 2), None, "warp", 32, reduced=(0,)),
        RegisterReduction("lane_rows", TileLayout(S[(32, 64) : (1 @ laneid, 1)]), (32, 64),
                          TileLayout(S[(32, 1) : (1 @ laneid, 1)]), (32, 1), (-1,), "warp", 32),
        RegisterReduction("wg_local", wg_local_layout(16), (128, 16), wg_local_layout(1),
                          (128, 1), (-1,), "warpgroup", 128),
        RegisterReduction("mma_rows_shuffle", mma_accumulator_layout(), (16, 128),
                          mma_rows_layout(), (16, 4), (-1,), "warp", 32, True),
        RegisterReduction("mma_rows_partial", mma_accumulator_layout(), (16, 128),
                          mma_rows_layout(), (16, 4), (-1,), "warp", 32, False),
        RegisterReduction("cta_all", TileLayout(S[(8, 32) : (1 @ warpid, 1 @ laneid)]), (256,),
                          TileLayout(S[1]), (1,), None, "cta", 256),
        RegisterReduction("cta_rows_over_warps",
                          TileLayout(S[(4, 4, 32) : (1, 1 @ warpid, 1 @ laneid)]), (4, 128),
                          TileLayout(S[4:1]), (4,), (-1,), "cta", 128),
        RegisterReduction("wg_columns", TileLayout(S[(128, 8) : (1 @ tid_in_wg, 1)]), (128, 8),
                          TileLayout(S[8:1]), (8,), (0,), "warpgroup", 128),
        RegisterReduction("all_rows_everywhere", rows, (32, 8), TileLayout(S[32]), (32,),
                          (-1,), "warp", 32),
        RegisterReduction("lanes_transposed", rows, (32, 8),
                          TileLayout(S[(4, 8) : (1 @ laneid, 4 @ laneid)]), (32,), (-1,), "warp",
                          32),
        RegisterReduction("cta_rows_to_lanes",
                          TileLayout(S[(8, 4, 32) : (1 @ warpid, 1, 1 @ laneid)]), (32, 32),
                          TileLayout(S[32 : 1 @ laneid] + R[8 : 1 @ warpid]), (32,), (-1,),
                          "cta", 256),
        # the rows of a wgmma accumulator (FlashAttention's row max and sum): a row lives
        # in a quad of lanes, its value replicated over the quad
        RegisterReduction("wgmma_rows", wgmma_accumulator_layout(64), (64, 64),
                          wgmma_rows_layout(), (64, 1), (-1,), "warpgroup", 128),
        RegisterReduction("wgmma_rows_wide", wgmma_accumulator_layout(256), (64, 256),
                          wgmma_rows_layout(), (64, 1), (-1,), "warpgroup", 128),
        # each lane's part of its rows (examples/attention.py's lane_sums): no shuffle
        RegisterReduction("wgmma_row_parts", wgmma_accumulator_layout(128), (64, 128),
                          wgmma_row_parts_layout(), (64, 4), (-1,), "warpgroup", 128, False),
    ]  # fmt: skip
    return {c.name: c for c in cases}


# -- mma.sync fragments ---------------------------------------------------------------------
# Written from the PTX ISA's tables ("Matrix Fragments for mma.m16n8k16 with floating point
# type", "... mma.m16n8k8"), lane = 4 g + t: D/C[M, N] at M = g + 8 rM, N = 2 t + rN;
# A[M, K] at M = g + 8 rM, K = 2 t + p (+ 8 kHi); B[K, N] at N = g, K = 2 t + p (+ 8 kHi).
# threadID_in_group 1 and 2 swapped: each element in one lane, not the lane mma wants.
MMA_A_K8_SWAPPED = TileLayout(S[(2, 8, 2, 2, 2) : (2, 4 @ laneid, 1 @ laneid, 2 @ laneid, 1)])
MMA_B_K8_SWAPPED = TileLayout(S[(2, 2, 2, 8) : (1 @ laneid, 2 @ laneid, 1, 4 @ laneid)])
MMA_ACC_SWAPPED = MMA_A_K8_SWAPPED  # C/D's 16 x 8 tile has A's k8 shape


def mma_fragments(
    mt: int, nt: int, kt: int, k: int, ta: bool = False, tb: bool = False,
    swapped: str | None = None,
) -> tuple[tuple[Any, Any, Any], tuple[int, int, int]]:  # fmt: skip
    """:func:`.fragments.mma_fragments`, and ``swapped`` ("A", "B" or "D") builds that
    operand of tiles whose lanes 4g+1 and 4g+2 trade places: a layout no mma fragment is
    (a variant must decline it)."""
    return fragments.mma_fragments(
        mt, nt, kt, k, ta, tb,
        a_tile=MMA_A_K8_SWAPPED if swapped == "A" else MMA_A_K8,
        b_tile=MMA_B_K8_SWAPPED if swapped == "B" else MMA_B_K8,
        acc_tile=MMA_ACC_SWAPPED if swapped == "D" else MMA_ACC,
    )  # fmt: skip


def mma_roundtrip(
    mt: int = 1,
    nt: int = 1,
    kt: int = 1,
    k: int = 16,
    *,
    dtype: str = "float16",
    ta: bool = False,
    tb: bool = False,
    alpha: float = 1.0,
    beta: float = 1.0,
    c_is_d: bool = False,
    a_layout: Any = None,
    lanes_guard: bool = False,
    swapped: str | None = None,
) -> Any:
    """One warp computes ``D = alpha A B + beta C`` (arguments A, B, C, D): A, B, C global
    -> register fragments (copy -> reg), ``Tx.warp.gemm``, D -> global. A is (K, M) under
    ``ta``, B (N, K) under ``tb``; C and D are float32 (M, N). ``c_is_d``: D starts as C
    and is the gemm's C too (in place); ``lanes_guard``: the gemm under ``if lane < 16``;
    ``a_layout`` replaces A's fragment layout, ``swapped`` as in :func:`mma_fragments`."""
    (dl, al, bl), (m, n, kk) = mma_fragments(mt, nt, kt, k, ta, tb, swapped)
    al = a_layout or al
    a_shape = (kk, m) if ta else (m, kk)
    b_shape = (n, kk) if tb else (kk, n)

    # fmt: off
    @T.prim_func
    def warp_gemm(A_ptr: T.handle, B_ptr: T.handle, C_ptr: T.handle, D_ptr: T.handle):
        A_g = T.match_buffer(A_ptr, a_shape, dtype)
        B_g = T.match_buffer(B_ptr, b_shape, dtype)
        C_g = T.match_buffer(C_ptr, (m, n), "float32")
        D_g = T.match_buffer(D_ptr, (m, n), "float32")
        T.device_entry()
        T.cta_id([1])
        T.warp_id([1])
        lane = T.lane_id([32])
        A = T.alloc_buffer(a_shape, dtype, scope="local", layout=al)
        B = T.alloc_buffer(b_shape, dtype, scope="local", layout=bl)
        C = T.alloc_buffer((m, n), "float32", scope="local", layout=dl)
        D = T.alloc_buffer((m, n), "float32", scope="local", layout=dl)
        Tx.warp.copy(A[:, :], A_g[:, :])
        Tx.warp.copy(B[:, :], B_g[:, :])
        Tx.warp.copy(C[:, :], C_g[:, :])
        if c_is_d:
            Tx.warp.copy(D[:, :], C_g[:, :])
            Tx.warp.gemm(D, A, B, D, transpose_A=ta, transpose_B=tb, alpha=alpha, beta=beta)
        elif lanes_guard:
            if lane < 16:
                Tx.warp.gemm(D, A, B, C, transpose_A=ta, transpose_B=tb, alpha=alpha, beta=beta)
        else:
            Tx.warp.gemm(D, A, B, C, transpose_A=ta, transpose_B=tb, alpha=alpha, beta=beta)
        Tx.warp.copy(D_g[:, :], D[:, :])
    # fmt: on
    return warp_gemm
