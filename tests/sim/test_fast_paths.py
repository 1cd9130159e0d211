"""The simulator's fast paths give what its general paths give: counts through a histogram
equal ``np.add.at``, a register read or written as a row slice faults as the per-thread
path does, bank-conflict degrees of a whole instruction equal those warp by warp, and the
tensor cores' aligned sum of finite operands equals the general one bit for bit (a PTX
call's registers grouped by buffer: tests/sim/test_asynchrony.py, tcgen05.ld)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from tirx_cuda_dispatch.layout.banks import conflict_ways
from tirx_cuda_dispatch.layout.partition import Access
from tirx_cuda_dispatch.sim import SimError, numerics
from tirx_cuda_dispatch.sim.asynchrony import add_counts
from tirx_cuda_dispatch.sim.memory import Clocks, Memory, bank_ways
from tirx_cuda_dispatch.sim.numerics import (
    _aligned_any,
    _aligned_finite,
    format_emin,
    wgmma_sum_sm90,
)


@pytest.mark.parametrize("delta", [1, -1])
@pytest.mark.parametrize(
    "cells, size",
    [
        (300, 4096),  # few cells: add.at itself
        (5000, 8192),  # many within a short span: the histogram
        (2048, 1 << 22),  # many, spread over a long span: add.at again
    ],
    ids=["few", "dense", "sparse"],
)
def test_add_counts_equals_add_at(cells, size, delta):
    rng = np.random.default_rng(cells)
    at = rng.integers(0, size, cells)
    at[: cells // 4] = at[0]  # repeats count repeatedly
    start = rng.integers(-3, 3, (size // 64, 64)).astype(np.int32)
    ours, expected = start.copy(), start.copy()
    add_counts(ours, at, delta)
    np.add.at(expected.reshape(-1), at, delta)
    assert ours.dtype == np.int32 and np.array_equal(ours, expected)
    assert not np.array_equal(ours, start)


def _registers(threads: int = 64, nbytes: int = 32) -> Memory:
    return Memory("r", "local", nbytes, threads=threads, rng=np.random.default_rng(0))


def _message(fn) -> str:
    with pytest.raises(SimError) as err:
        fn()
    return str(err.value)


@pytest.mark.parametrize("active", ["all", "some"])
def test_a_row_slice_read_of_unwritten_bytes_is_the_general_path_s_error(active):
    threads = np.arange(64) if active == "all" else np.arange(8, 40)
    clocks = Clocks(2)
    mem = _registers()
    raw = np.full((threads.size, 4), 7, dtype=np.uint8)
    mem.store_rows(threads, 8, raw, clocks)
    assert np.array_equal(mem.load_rows(threads, 8, 4, clocks), raw)
    assert np.array_equal(mem.load(threads, np.full(threads.size, 8), 4, clocks), raw)
    mem.written[threads[5], 9] = False  # one byte of one thread never written
    fast = _message(lambda: mem.load_rows(threads, 8, 4, clocks))
    slow = _message(lambda: mem.load(threads, np.full(threads.size, 8), 4, clocks))
    assert fast == slow and f"thread {threads[5]} reads byte 8" in fast


@pytest.mark.parametrize("offset, size", [(30, 4), (-4, 4), (6, 4)], ids=["past", "below", "odd"])
def test_a_row_slice_access_out_of_bounds_or_misaligned_is_the_general_path_s_error(offset, size):
    threads, clocks = np.arange(64), Clocks(2)
    mem = _registers()
    raw = np.zeros((64, size), dtype=np.uint8)
    fast = _message(lambda: mem.store_rows(threads, offset, raw, clocks))
    slow = _message(lambda: mem.store(threads, np.full(64, offset), raw, clocks))
    assert fast == slow and ("out of bounds" in fast or "misaligned" in fast)


def _ways_warp_by_warp(threads, offsets, size):
    by_warp: dict[int, list[Access]] = {}
    for t, off in zip(threads.tolist(), offsets.tolist(), strict=True):
        by_warp.setdefault(t // 32, []).append(Access(0, t, off, size))
    return {w: max(conflict_ways(items, 1)) for w, items in by_warp.items()}


def test_bank_ways_equal_those_of_each_warp_alone():
    rng = np.random.default_rng(3)
    worst = set()
    for trial in range(120):
        n, size = int(rng.integers(1, 200)), int(rng.choice([1, 2, 4, 8, 16]))
        threads = rng.choice(256, n, replace=False)
        if trial % 2:
            threads = np.sort(threads)
        offsets = rng.integers(0, 2048 // size, n) * size
        ours = bank_ways(threads, offsets, size)
        assert ours == _ways_warp_by_warp(threads, offsets, size)
        assert list(ours) == list(_ways_warp_by_warp(threads, offsets, size))  # warp order
        worst |= set(ours.values())
    assert max(worst) > 1  # conflicts were among the cases


def test_two_warps_writing_one_shared_byte_at_once_race_and_one_warp_does_not():
    """The one-writer shortcut of the race check: two lanes of one warp storing the same
    word are one agent (no race); a lane of each of two warps are a race naming both."""
    mem = Memory("S", "shared", 64, rng=np.random.default_rng(0))
    raw = np.arange(8, dtype=np.uint8).reshape(2, 4)
    mem.store(np.array([0, 1]), np.array([8, 8]), raw, Clocks(2))  # warp 0 twice
    assert mem.written[8:12].all()
    message = _message(lambda: mem.store(np.array([3, 35]), np.array([16, 16]), raw, Clocks(2)))
    assert "shared-memory race on S byte 16" in message and "write it at once" in message
    assert "warp 0" in message and "warp 1" in message


ALIGNED = [  # (operand type, its PTX name, grid): sm_90's lines
    (np.float16, "f16", 25),
    (ml_dtypes.bfloat16, "bf16", 25),
    (ml_dtypes.float8_e4m3fn, "e4m3", 13),
    (ml_dtypes.float8_e5m2, "e5m2", 13),
    (np.float32, "tf32", 25),  # tf32 operands: float32 values, their low bits dropped
]


@pytest.mark.parametrize("kind, ptx, grid", ALIGNED, ids=[x[1] for x in ALIGNED])
def test_the_aligned_sum_of_finite_operands_equals_the_general_one(kind, ptx, grid):
    """wgmma's and mma's sm_90 sum (``_aligned_sum``): the finite operands' path (products
    scaled by a power of two, truncated and summed) equals the general one (every addend
    cut with ldexp) on every output, over exponent spreads wide and narrow, zeros, -0,
    subnormals and a leading batch axis. The control: one grid bit fewer differs."""
    rng = np.random.default_rng(7)
    emins = (format_emin(np.dtype(kind)),) * 2
    compared = 0
    for spread, batch in [(0, ()), (12, ()), (40, (3,)), (140, ())]:
        shape_a, shape_b, shape_c = (*batch, 64, 16), (*batch, 16, 96), (*batch, 64, 96)

        def draw(shape, t, spread=spread):
            x = rng.standard_normal(shape) * np.exp2(rng.integers(-spread, spread + 1, shape))
            x[rng.random(shape) < 0.2] = 0.0
            x[rng.random(shape) < 0.05] = -0.0
            with np.errstate(over="ignore"):
                x = x.astype(t).astype(np.float64)
            return np.where(np.isfinite(x), x, 1.0)

        a, b, c = draw(shape_a, kind), draw(shape_b, kind), draw(shape_c, np.float32)
        fast = _aligned_finite(a, b, c, emins, grid)
        general = _aligned_any(a, b, c, emins, grid)
        np.testing.assert_array_equal(fast.view(np.uint64), general.view(np.uint64))
        compared += fast.size
        assert (fast != _aligned_finite(a, b, c, emins, grid - 1)).any()  # the control
    assert compared == 64 * 96 * 6


def test_an_infinite_or_nan_operand_takes_the_general_path(monkeypatch):
    """``_aligned_sum`` sums finite operands on the fast path only: with an infinite A
    element and a NaN B element the outputs of their row and column are IEEE's (inf,
    NaN) and every other output is the all-finite one. The control: the fast path made
    to fail is reached by the finite call and not by the other."""
    rng = np.random.default_rng(3)
    a = rng.standard_normal((64, 16)).astype(np.float16).astype(np.float32)
    b = rng.standard_normal((16, 32)).astype(np.float16).astype(np.float32)
    c = rng.standard_normal((64, 32)).astype(np.float32)
    finite = wgmma_sum_sm90(a, b, c, ("f16", "f16"))
    a[3, 5], b[2, 7] = np.inf, np.nan
    d = wgmma_sum_sm90(a, b, c, ("f16", "f16"))
    assert np.isnan(d[:, 7]).all()
    row = np.delete(d[3], 7)
    assert (np.isinf(row) | np.isnan(row)).all() and np.isinf(row).any()
    others = np.ones(d.shape, bool)
    others[3, :], others[:, 7] = False, False
    np.testing.assert_array_equal(d[others].view(np.uint32), finite[others].view(np.uint32))

    def broken(*args):
        raise AssertionError("the fast path")

    monkeypatch.setattr(numerics, "_aligned_finite", broken)
    wgmma_sum_sm90(a, b, c, ("f16", "f16"))  # the general path: no error
    with pytest.raises(AssertionError, match="the fast path"):
        wgmma_sum_sm90(np.nan_to_num(a), np.nan_to_num(b), c, ("f16", "f16"))
