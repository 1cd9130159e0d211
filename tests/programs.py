"""Programs as source text, for the command-line tests that load a user's file."""

from __future__ import annotations

HEAD = """
import numpy as np
from tvm.script import tirx as T
from tvm.script.tirx import tile as Tx
from tvm.tirx.layout import S, TileLayout
"""

COPY = (
    HEAD
    + """
@T.prim_func
def kernel(A_ptr: T.handle, B_ptr: T.handle):
    A = T.match_buffer(A_ptr, ({rows}, 32), "float32")
    B = T.match_buffer(B_ptr, (32, 32), "float32")
    T.device_entry()
    T.cta_id([1])
    T.warp_id([1])
    T.lane_id([32])
    T.thread_id([32])
    A_s = T.alloc_buffer((32, 32), "float32", scope="shared", layout=TileLayout(S[(32, 32)]))
    Tx.warp.copy(A_s[:, :], A[0:32, :])
    T.cuda.cta_sync()
    Tx.warp.copy(B[:, :], A_s[:, :])


def right(inputs, outputs):
    return np.array_equal(outputs[1], inputs[0][0:32])


def wrong(inputs, outputs):
    assert np.array_equal(outputs[1], inputs[0][0:32] + 1), "B is not A + 1"
"""
)
