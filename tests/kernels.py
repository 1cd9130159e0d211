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
    narrow: bool = False,
    s_scope: str = "shared",
):
    """One warp copies A[0:rows, 0:cols] into a shared tile (optionally under ``if lane < 16``)."""
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
            (rows, cols), s_dtype, scope=s_scope, layout=TileLayout(S[(rows, cols)])
        )
        if narrow:
            if lane < 16:
                Tx.warp.copy(A_s[:, :], A[:, :])
        else:
            Tx.warp.copy(A_s[:, :], A[:, :])

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
