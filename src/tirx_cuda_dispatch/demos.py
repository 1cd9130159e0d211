"""Demonstration programs (the seeds' examples), shared by the demo, tests and benchmarks."""

from __future__ import annotations

from typing import Any

from tvm.script import tirx as T
from tvm.script.tirx import tile as Tx
from tvm.tirx.layout import S, TCol, TileLayout, TLane, tid_in_wg

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
