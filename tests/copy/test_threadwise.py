"""copy -> threadwise: register tiles copied at warp, warpgroup and CTA scope, each thread
moving what it holds on both sides (a row vector of a wgmma accumulator, the accumulator
itself, replicated dst), and the decline where elements would cross threads."""

from __future__ import annotations

import numpy as np
import pytest
from tvm.script import tirx as T
from tvm.script.tirx import tile as Tx
from tvm.tirx.layout import R, S, TileLayout, laneid, tid_in_wg

import tirx_cuda_dispatch as tcd
from executors import WHERE, execute
from tirx_cuda_dispatch import demos, runtime

ROWS = TileLayout(S[(4, 2, 8) : (32 @ tid_in_wg, 1, 4 @ tid_in_wg)] + R[4 : 1 @ tid_in_wg])


def round_trip(shape, src_layout, dst_layout, scope="warpgroup", threads=128):
    """X -> A (src_layout) -> B (dst_layout, the copy under test) -> Y."""
    copy = getattr(Tx, scope).copy

    @T.prim_func
    def kernel(X_ptr: T.handle, Y_ptr: T.handle):
        X = T.match_buffer(X_ptr, shape, "float32")
        Y = T.match_buffer(Y_ptr, shape, "float32")
        T.device_entry()
        T.cta_id([1])
        T.thread_id([threads])
        A = T.alloc_buffer(shape, "float32", scope="local", layout=src_layout)
        B = T.alloc_buffer(shape, "float32", scope="local", layout=dst_layout)
        copy(A[:, :], X[:, :])
        copy(B[:, :], A[:, :])
        copy(Y[:, :], B[:, :])

    return kernel


CASES = {
    "row-vector": ((64, 1), ROWS, ROWS, "warpgroup", 128),
    "accumulator": ((64, 32), demos.wgmma_accumulator_layout(32), demos.wgmma_accumulator_layout(32), "warpgroup", 128),
    "warp-rows": ((32, 4), TileLayout(S[(32, 4) : (1 @ laneid, 1)]), TileLayout(S[(32, 4) : (1 @ laneid, 1)]), "warp", 32),
}  # fmt: skip


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("name", sorted(CASES))
def test_round_trip(name, where, gpu, rng):
    shape, src, dst, scope, threads = CASES[name]
    func = round_trip(shape, src, dst, scope, threads)
    report = tcd.explain(func)[1]
    assert report.variant == "threadwise", report
    x = runtime.random_array(shape, "float32", rng)
    out = execute(func, [x, runtime.poison_like(x)], where, gpu)
    assert np.array_equal(out[1], x)


def test_the_plan_moves_the_same_registers_in_every_thread():
    plan = tcd.explain(round_trip(*CASES["accumulator"]))[1].plan_object
    assert plan.threads == 128 and plan.moves == tuple((r, r) for r in range(16))


def test_a_copy_across_threads_declines_naming_the_element():
    """Rows on the lanes into rows on the registers of each lane (a transpose of the
    distribution): it needs shuffles; the control is the same layout on both sides."""
    by_lane = TileLayout(S[(32, 4) : (1 @ laneid, 1)])
    by_reg = TileLayout(S[(4, 8, 4) : (1, 4 @ laneid, 1 @ laneid)])  # lane = e % 32
    report = tcd.explain(round_trip((32, 4), by_lane, by_reg, "warp", 32))[1]
    reason = dict((c.variant, c.reason) for c in report.candidates)["threadwise"]
    assert "is in thread" in reason and "moves elements between threads" in reason
