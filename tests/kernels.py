"""TVMScript kernels the tests share (each a small variation of seed 004's program)."""

from __future__ import annotations

from tvm.script import tirx as T
from tvm.script.tirx import tile as Tx
from tvm.tirx.layout import Axis, S, TileLayout


def warp_g2s(
    rows: int,
    cols: int,
    dtype: str = "float32",
    s_dtype: str | None = None,
    guard: str | None = None,
    dispatch: str | None = None,
):
    """One warp copies A[0:rows, 0:cols] into a shared tile, optionally forcing a variant
    with ``dispatch=``, optionally under an ``if``: ``guard="lanes"`` is ``if lane < 16`` (TVM
    narrows the scope to 16 lanes), ``guard="data"`` is ``if A[0, lane] != 1.0``, a test of
    per-thread data nobody can prove every lane passes (our variants decline it)."""
    s_dtype = s_dtype or dtype

    @T.prim_func
    def kernel(A_ptr: T.handle):
        A = T.match_buffer(A_ptr, (rows, cols), dtype)
        T.device_entry()
        T.cta_id([1])
        T.warp_id([1])
        lane = T.lane_id([32])
        T.thread_id([32])
        A_s = T.alloc_buffer(
            (rows, cols), s_dtype, scope="shared", layout=TileLayout(S[(rows, cols)])
        )
        if guard == "lanes":
            if lane < 16:
                Tx.warp.copy(A_s[:, :], A[:, :])
        elif guard == "data":
            if A[0, lane] != T.float32(1.0):
                Tx.warp.copy(A_s[:, :], A[:, :])
        else:
            Tx.warp.copy(A_s[:, :], A[:, :], dispatch=dispatch)

    return kernel


def warp_g2local(dtype: str = "float32"):
    """A warp copies global data into a register buffer (not a gmem_smem pair)."""
    r_layout = TileLayout(S[(32, 8) : (1 @ Axis.laneid, 1)])

    @T.prim_func
    def kernel(A_ptr: T.handle):
        A = T.match_buffer(A_ptr, (32, 8), dtype)
        T.device_entry()
        T.cta_id([1])
        T.warp_id([1])
        T.lane_id([32])
        T.thread_id([32])
        R = T.alloc_buffer((32, 8), dtype, scope="local", layout=r_layout)
        Tx.warp.copy(R[:, :], A[:, :])

    return kernel


def per_warp_tiles(
    dtype: str = "float32", warps: int = 4, rows: int = 8, cols: int = 64, ctas: int = 2
):
    """Each warp of each CTA copies its own row block global -> shared -> global."""
    tm = warps * rows

    @T.prim_func
    def kernel(A_ptr: T.handle, B_ptr: T.handle):
        A = T.match_buffer(A_ptr, (ctas * tm, cols), dtype)
        B = T.match_buffer(B_ptr, (ctas * tm, cols), dtype)
        T.device_entry()
        bx = T.cta_id([ctas])
        w = T.warp_id([warps])
        T.lane_id([32])
        T.thread_id([warps * 32])
        A_s = T.alloc_buffer((tm, cols), dtype, scope="shared", layout=TileLayout(S[(tm, cols)]))
        Tx.warp.copy(
            A_s[w * rows : (w + 1) * rows, :], A[bx * tm + w * rows : bx * tm + (w + 1) * rows, :]
        )
        Tx.warp.copy(
            B[bx * tm + w * rows : bx * tm + (w + 1) * rows, :], A_s[w * rows : (w + 1) * rows, :]
        )

    return kernel


def thread_rows(dtype: str = "float32", threads: int = 32, cols: int = 8):
    """Each thread copies its own row with a thread-scope copy."""

    @T.prim_func
    def kernel(A_ptr: T.handle, B_ptr: T.handle):
        A = T.match_buffer(A_ptr, (threads, cols), dtype)
        B = T.match_buffer(B_ptr, (threads, cols), dtype)
        T.device_entry()
        T.cta_id([1])
        T.warp_id([threads // 32])
        T.lane_id([32])
        tx = T.thread_id([threads])
        A_s = T.alloc_buffer(
            (threads, cols), dtype, scope="shared", layout=TileLayout(S[(threads, cols)])
        )
        Tx.thread.copy(A_s[tx : tx + 1, :], A[tx : tx + 1, :])
        Tx.thread.copy(B[tx : tx + 1, :], A_s[tx : tx + 1, :])

    return kernel
