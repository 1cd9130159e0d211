"""Vector-width choice."""

from __future__ import annotations

import tvm

from tirx_cuda_dispatch.layout.vector import vector_candidates, vector_misfit


def test_candidates_widest_first():
    assert vector_candidates(32) == [(128, 4), (64, 2), (32, 1)]
    assert vector_candidates(16) == [(128, 8), (64, 4), (32, 2), (16, 1)]
    assert vector_candidates(8) == [(128, 16), (64, 8), (32, 4), (16, 2), (8, 1)]
    assert vector_candidates(64) == [(128, 2), (64, 1)]


def test_misfit_reasons():
    assert vector_misfit(4, (32, (1, 1)), [("A", 32)], [("A", 0)]) is None
    assert "not contiguous" in vector_misfit(4, (32, (1, 2)), [], [])
    assert "run of 6 elements" in vector_misfit(4, (6, (1, 1)), [], [])
    assert "A dimension stride 34" in vector_misfit(4, (32, (1, 1)), [("A dimension", 34)], [])
    assert vector_misfit(1, (3, (5, 7)), [("A", 3)], [("A", 1)]) is None  # scalar always fits


def test_symbolic_base_must_be_provably_aligned():
    bx = tvm.tirx.Var("bx", "int32")
    assert vector_misfit(4, (32, (1, 1)), [], [("A", bx * 1024)]) is None
    assert "not provably a multiple of 4" in vector_misfit(4, (32, (1, 1)), [], [("A", bx * 2)])
