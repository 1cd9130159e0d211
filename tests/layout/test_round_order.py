"""Bank-conflict-aware round order (pure Python: the plan, not the emitted code)."""

from __future__ import annotations

import numpy as np
import pytest

from tirx_cuda_dispatch.layout import round_order
from tirx_cuda_dispatch.layout.partition import Dim, ScopePartition
from tirx_cuda_dispatch.layout.round_order import Rotation, choose_round_order


def row_per_lane(k: int, rows: int = 32) -> ScopePartition:
    """Lane i owns row i of k float32 (operands: registers, shared), 128-bit rounds."""
    rounds = k // 4
    outer = (Dim(rows // 32, (k, 32 * k)),) if rows > 32 else ()
    return ScopePartition(
        outer=(*outer, Dim(rounds, (4, 4))),
        thread=(Dim(32, (0, k)),),
        vec=4,
        vec_bits=128,
        bases=(0, 0),
        swizzles=(None, None),
    )


@pytest.mark.parametrize("k", [8, 16, 32, 64])
def test_rotation_is_the_conflict_free_one_the_issue_measured(k):
    """lane rotates its chunk order by (lane // (128 / row bytes)) mod chunks (at most the 8
    lanes of a wavefront need distinct chunks)."""
    order = choose_round_order(row_per_lane(k), 1, 4, 4)
    chunks = k // 4
    assert order.rotation == Rotation(max(1, 128 // (4 * k)), min(chunks, 8), chunks)
    assert set(order.ways) == {1}
    assert set(order.plain_ways) == {min(k // 4, 8)}
    assert order.selects == order.rotation.stages * chunks * 4
    assert order.clocks < order.plain_clocks


def test_conflict_free_plain_order_is_kept():
    order = choose_round_order(row_per_lane(4), 1, 4, 4)
    assert order.rotation is None and order.ways == (1,) and order.selects == 0


def test_falls_back_to_the_plain_order_where_selects_do_not_pay(monkeypatch):
    monkeypatch.setattr(round_order, "SELECTS_PER_CLOCK", 0.05)  # selects made very dear
    order = choose_round_order(row_per_lane(32), 1, 4, 4)
    assert order.rotation is None and set(order.ways) == {8}
    assert order.clocks == order.plain_clocks == 256


@pytest.mark.parametrize(
    "rot", [Rotation(g, p, r) for g in (1, 2, 4) for p in (2, 4, 8) for r in (8, 16) if p <= r]
)
def test_every_rotation_moves_each_round_once(rot):
    steps = np.arange(rot.rounds)[:, None]
    lanes = np.arange(64)[None, :]
    taken = rot.round_of(steps, lanes)
    assert (np.sort(taken, axis=0) == steps).all()


def test_symbolic_base_counts_as_a_uniform_shift():
    # a base that is not a constant (a warp's tile at w * rows) shifts every lane alike
    import tvm

    p = row_per_lane(16)
    w = tvm.tirx.Var("w", "int32")
    shifted = ScopePartition(p.outer, p.thread, p.vec, p.vec_bits, (0, w * 512), p.swizzles)
    assert choose_round_order(shifted, 1, 4, 4) == choose_round_order(p, 1, 4, 4)
