"""The scope-synthesized partition (pure Python: no TVM codegen involved)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from tirx_cuda_dispatch.errors import Decline
from tirx_cuda_dispatch.layout.atoms import MemoryView
from tirx_cuda_dispatch.layout.partition import synthesize_partition
from tirx_cuda_dispatch.layout.swizzle import Swizzle


def _check_bijection(views, p):
    """Every element moved once, from its global home to its shared home, aligned."""
    moved = []
    for rnd, tid in itertools.product(range(p.rounds), range(p.threads)):
        offs = p.access(rnd, tid)
        assert all(o % p.vec == 0 for o in offs)
        moved += [tuple(o + k for o in offs) for k in range(p.vec)]
    expected = [tuple(v.offset(i) for v in views) for i in range(views[0].size)]
    assert sorted(moved) == sorted(expected)


def test_seed_partition():
    g = MemoryView("A", ((32, 32), (32, 1)), 0)
    s = MemoryView("S", ((32, 32), (32, 1)), 0)
    p = synthesize_partition([g, s], 32, 32)
    assert (p.vec, p.vec_bits, p.rounds, p.threads) == (4, 128, 8, 32)
    _check_bijection([g, s], p)


def test_global_drives_order_for_transposed_shared():
    g = MemoryView("A", ((16, 64), (64, 1)), 0)
    s = MemoryView("S", ((16, 1), (64, 16)), 0)  # column-major shared tile
    p = synthesize_partition([g, s], 32, 32)
    assert p.vec == 1  # shared side not contiguous along the global-contiguous dimension
    assert p.thread[-1].strides[0] == 1  # consecutive threads: consecutive global addresses
    _check_bijection([g, s], p)


def test_swizzle_caps_the_vector():
    g = MemoryView("A", ((32, 16), (16, 1)), 0)
    s = MemoryView("S", ((32, 16), (16, 1)), 0, Swizzle(2, 2, 3))
    p = synthesize_partition([g, s], 32, 8)
    assert p.vec == 4 and "swizzle unit" in p.narrower_because
    _check_bijection([g, s], p)


def test_declines_count_and_uneven_split():
    g = MemoryView("A", ((3, 5), (5, 1)), 0)
    with pytest.raises(Decline, match="15 elements is not divisible by 32 threads"):
        synthesize_partition([g, g], 32, 32)
    # 24 elements over 8 threads, but as 4 x 6 (strided) no even split exists.
    a = MemoryView("A", ((4, 100), (6, 7)), 0)
    with pytest.raises(Decline, match="cannot be split evenly among 8 threads"):
        synthesize_partition([a, a], 8, 32)


@pytest.mark.parametrize("threads", [1, 2, 4, 8, 16, 32, 64, 128])
@pytest.mark.parametrize("elem_bits", [8, 16, 32, 64])
def test_bijection_across_thread_counts_and_widths(threads, elem_bits):
    g = MemoryView("A", ((8, 256), (2, 64), (32, 1)), 64)
    s = MemoryView("S", ((8, 80), (2, 32), (32, 1)), 16)
    p = synthesize_partition([g, s], threads, elem_bits)
    assert p.threads == threads and p.rounds * threads * p.vec == 512
    _check_bijection([g, s], p)


def _random_case(rng):
    rows, cols = (int(x) for x in rng.choice([1, 2, 3, 4, 8, 16, 32], size=2))
    g_cols = cols + int(rng.choice([0, 1, 4, 8, 32]))
    g = MemoryView(
        "A", ((rows, g_cols), (cols, 1)), int(rng.integers(0, 4)) * int(rng.choice([1, 2, 4, 8]))
    )
    kind = rng.choice(["row", "padded", "column", "swizzled"])
    if kind == "row":
        s = MemoryView("S", ((rows, cols), (cols, 1)), 0)
    elif kind == "padded":
        s = MemoryView("S", ((rows, cols + 4), (cols, 1)), 0)
    elif kind == "column":
        s = MemoryView("S", ((rows, 1), (cols, rows)), 0)
    else:
        s = MemoryView(
            "S",
            ((rows, cols), (cols, 1)),
            0,
            Swizzle(int(rng.integers(0, 4)), int(rng.integers(0, 4)), 3),
        )
    threads = int(rng.choice([1, 2, 4, 8, 32, 64, 128]))
    elem_bits = int(rng.choice([8, 16, 32, 64]))
    return g, s, threads, elem_bits


def test_random_partitions_are_exact_or_declined():
    rng = np.random.default_rng(7)
    planned = 0
    for _ in range(400):
        g, s, threads, elem_bits = _random_case(rng)
        try:
            p = synthesize_partition([g, s], threads, elem_bits)
        except Decline as d:
            assert d.reason  # a reason, never an empty refusal
            continue
        planned += 1
        assert p.threads == threads and p.vec_bits == p.vec * elem_bits
        _check_bijection([g, s], p)
    assert planned > 100  # the generator must mostly produce plannable cases
