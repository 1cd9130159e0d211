"""permute_layout -> staged: plans, declines, the emitted barriers, and round trips in the
simulator and on the GPU (two buffers, and one tile re-laid in place)."""

from __future__ import annotations

import numpy as np
import pytest
from tvm.script import tirx as T
from tvm.script.tirx import tile as Tx
from tvm.tirx.layout import S, TileLayout

import tirx_cuda_dispatch as tcd
from executors import WHERE, execute
from tirx_cuda_dispatch import runtime, toolchain


def two_buffers(shape, src_strides, dst_strides, dtype="uint32", scope="warp", threads=32):
    """B (laid out by dst_strides) gets A's elements (laid out by src_strides), by index."""
    pre = TileLayout(S[shape:src_strides])
    post = TileLayout(S[shape:dst_strides])
    permute = getattr(Tx, scope).permute_layout

    @T.prim_func
    def kernel(A_ptr: T.handle, B_ptr: T.handle):
        A = T.match_buffer(A_ptr, shape, dtype, layout=pre)
        B = T.match_buffer(B_ptr, shape, dtype, layout=post)
        T.device_entry()
        T.cta_id([1])
        T.thread_id([threads])
        permute(B, A)

    return kernel


def in_place(rows: int, cols: int, dtype="float32"):
    """A (rows, cols) tile staged row-major in shared memory, re-laid column-major in the
    same bytes by one warp, then copied out through the column-major view."""
    linear = TileLayout(S[(rows, cols) : (cols, 1)])
    columns = TileLayout(S[(rows, cols) : (1, rows)])

    # fmt: off
    @T.prim_func
    def kernel(A_ptr: T.handle, B_ptr: T.handle):
        A = T.match_buffer(A_ptr, (rows, cols), dtype)
        B = T.match_buffer(B_ptr, (rows * cols,), dtype)
        T.device_entry()
        T.cta_id([1])
        T.warp_id([1])
        T.lane_id([32])
        T.thread_id([32])
        pool = T.alloc_buffer((rows * cols,), dtype, scope="shared")
        by_rows = T.decl_buffer((rows, cols), dtype, pool.data, scope="shared", layout=linear)
        by_cols = T.decl_buffer((rows, cols), dtype, pool.data, scope="shared", layout=columns)
        Tx.warp.copy(by_rows[:, :], A[:, :])
        Tx.warp.permute_layout(by_cols, by_rows)
        Tx.warp.copy(B[:], pool[:])
    # fmt: on
    return kernel


def _expected(a: np.ndarray, src_strides, dst_strides, shape) -> np.ndarray:
    """dst's offset of each index holds src's element at src's offset of that index."""
    out = np.zeros(a.size, a.dtype)
    for idx in np.ndindex(*shape):
        out[int(np.dot(idx, dst_strides))] = a.reshape(-1)[int(np.dot(idx, src_strides))]
    return out.reshape(shape)


CASES = [
    ((4, 32), (32, 1), (1, 4), "uint32", "warp", 32),
    ((8, 32), (32, 1), (1, 8), "float32", "warp", 32),
    ((16, 32), (32, 1), (1, 16), "int32", "warp", 32),
    ((4, 32), (32, 1), (32, 1), "uint32", "warp", 32),  # identity: a copy
    ((8, 16), (16, 1), (1, 8), "float16", "warp", 32),  # 2-byte elements (TVM's refuses)
    ((3, 10), (10, 1), (1, 3), "float32", "cta", 64),  # 30 elements over 64 threads: masked
]


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-{c[3]}-{c[4]}")
def test_two_buffers_round_trip(case, where, gpu, rng):
    shape, src_s, dst_s, dtype, scope, threads = case
    func = two_buffers(shape, src_s, dst_s, dtype, scope, threads)
    [report] = tcd.explain(func)
    assert report.variant == "staged", report
    a = runtime.random_array(shape, dtype, rng)
    out = execute(func, [a, runtime.poison_like(a)], where, gpu)
    assert np.array_equal(runtime.bits(out[1]), runtime.bits(_expected(a, src_s, dst_s, shape)))


@pytest.mark.parametrize("where", WHERE)
def test_in_place_through_two_views_of_one_tile(where, gpu, rng):
    a = runtime.random_array((8, 32), "float32", rng)
    out = execute(in_place(8, 32), [a, runtime.poison_like(a.reshape(-1))], where, gpu)
    assert np.array_equal(out[1], a.T.reshape(-1))  # column-major: A transposed


def test_the_plan_and_the_emitted_barriers():
    report = tcd.explain(two_buffers((4, 32), (32, 1), (1, 4)))[0]
    plan = report.plan_object
    assert (plan.elements, plan.threads, plan.rounds, plan.masked) == (128, 32, 4, False)
    assert plan.sync == "__syncwarp"
    masked = tcd.explain(two_buffers((3, 10), (10, 1), (1, 3), "float32", "cta", 64))[0]
    assert masked.plan_object.masked and masked.plan_object.sync == "bar.sync 0"
    src = toolchain.cuda_source(two_buffers((4, 32), (32, 1), (1, 4)), pipeline=tcd.STRICT_PIPELINE)
    assert src.count("tvm_builtin_cuda_warp_sync();") == 2  # __syncwarp, twice
    shared = tcd.explain(in_place(8, 32))[1].plan_object
    assert shared.conflicts == (8, 1)  # writing down the columns: 8 lanes on one bank


@pytest.mark.parametrize(
    "func, words",
    [
        (two_buffers((4, 32), (32, 1), (1, 4), scope="warpgroup", threads=128),
         "needs one of warp/cta"),
        (two_buffers((4, 32), (32, 1), (1, 4), dtype="uint8"), None),
    ],
)  # fmt: skip
def test_declines_name_the_rule(func, words):
    report = tcd.explain(func)[0]
    if words is None:  # the control: one-byte elements are taken
        assert report.variant == "staged"
        return
    assert report.variant is None
    assert words in report.candidates[0].reason


def test_dtype_mismatch_declines():
    layout = TileLayout(S[(4, 32) : (32, 1)])

    @T.prim_func
    def kernel(A_ptr: T.handle, B_ptr: T.handle):
        A = T.match_buffer(A_ptr, (4, 32), "uint32", layout=layout)
        B = T.match_buffer(B_ptr, (4, 32), "uint16", layout=layout)
        T.device_entry()
        T.cta_id([1])
        T.thread_id([32])
        Tx.warp.permute_layout(B, A)

    report = tcd.explain(kernel)[0]
    assert "dtype mismatch: dst B is uint16, src A is uint32" in report.candidates[0].reason
