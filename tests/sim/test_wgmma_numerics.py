"""wgmma's summation on sm_90 (sim/numerics.py ``wgmma_sum_sm90``), the rule an H200 was
measured to follow bit for bit (docs/simulator.md "wgmma numerics"): against a second
implementation in Fractions, and the probes that found it, as the H200 answered them."""

from __future__ import annotations

import math
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

from tirx_cuda_dispatch.sim.numerics import mma_sum, mma_sum_sm90, wgmma_sum_sm90

F8 = {"e4m3": (ml_dtypes.float8_e4m3fn, -6), "e5m2": (ml_dtypes.float8_e5m2, -14)}


def _f8(x, t):
    return np.asarray(x, np.float32).astype(F8[t][0]).astype(np.float32)


def _reference(a, b, c, types) -> np.ndarray:
    """The float8 rule in Fractions: exponents e(a) + e(b) per product (a subnormal counts
    as its format's minimum), the accumulator's its own; every addend truncated toward
    zero to 2^(E - 13), E their largest; the exact sum truncated toward zero to 14
    significand bits; zero: +0."""

    def exp(x: float, lowest: int | None) -> int:
        e = math.frexp(x)[1] - 1
        return lowest if lowest is not None and abs(x) < 2.0**lowest else e

    ea, eb = F8[types[0]][1], F8[types[1]][1]
    d = np.zeros(c.shape, np.float64)
    for m, n in np.ndindex(*c.shape):
        addends = [(Fraction(float(c[m, n])), exp(float(c[m, n]), None))] if c[m, n] else []
        for k in range(a.shape[1]):
            if a[m, k] != 0 and b[k, n] != 0:
                e = exp(float(a[m, k]), ea) + exp(float(b[k, n]), eb)
                addends.append((Fraction(float(a[m, k])) * Fraction(float(b[k, n])), e))
        top = max((e for _, e in addends), default=0)
        step = Fraction(2) ** (top - 13)
        total = sum((int(t / step) * step for t, _ in addends), Fraction(0))
        if total:
            lsb = Fraction(2) ** (exp(float(total), None) - 13)
            total = int(total / lsb) * lsb
        d[m, n] = float(total)
    return d.astype(np.float32)


@pytest.mark.parametrize("types", [("e4m3", "e4m3"), ("e5m2", "e5m2"), ("e4m3", "e5m2")])
@pytest.mark.parametrize("wide", [False, True], ids=["normal", "wide"])
def test_the_float8_rule_against_fractions(types, wide):
    rng = np.random.default_rng(7)
    a = rng.standard_normal((8, 32)).astype(np.float32)
    b = rng.standard_normal((32, 8)).astype(np.float32)
    if wide:
        a *= np.exp2(rng.integers(-6, 7, a.shape)).astype(np.float32)
        b *= np.exp2(rng.integers(-6, 7, b.shape)).astype(np.float32)
    a, b = _f8(a, types[0]), _f8(b, types[1])
    c = (rng.standard_normal((8, 8)) * 4).astype(np.float32)
    got = wgmma_sum_sm90(a, b, c, types)
    assert np.array_equal(got.view(np.uint32), _reference(a, b, c, types).view(np.uint32))
    # negative control: the exact sum rounded once (the rule off sm_90) differs
    assert not np.array_equal(got, mma_sum(a, b, c, np.float32))


def _probe(small_a: float, small_b: float, big: float = 1.0, d: float = 0.0) -> float:
    """One output of the H200 probe: A's row [big, small_a x 31], B's column
    [1, small_b x 31], the accumulator d; what the rule says the wgmma writes."""
    a = np.array([[big] + [small_a] * 31], np.float32)
    b = np.array([[1.0] + [small_b] * 31], np.float32).T
    return float(wgmma_sum_sm90(_f8(a, "e4m3"), _f8(b, "e4m3"), np.float32([[d]]),
                                ("e4m3", "e4m3"))[0, 0])  # fmt: skip


def test_the_probes_the_h200_answered():
    """What an H200 wrote for a 32-wide e4m3 wgmma (m64n8k32, .scratch probe, 2026-11-27):
    products 2^-13 below the largest are kept and 2^-14 ones dropped (also negative
    ones: toward zero); each product is cut on its own (1.875 2^-11 keeps 7 2^-13 of its
    7.5); the accumulator takes part in the alignment; the sum keeps 14 bits (with
    d = 1 the 31 products of 2^-13 lose one of 2^-12)."""
    assert _probe(2.0**-4, 2.0**-9) == 1 + 31 * 2.0**-13
    assert _probe(2.0**-5, 2.0**-9) == 1.0
    assert _probe(-(2.0**-5), 2.0**-9) == 1.0
    assert _probe(1.875 * 2.0**-2, 2.0**-9) == 1 + 31 * 7 * 2.0**-13
    assert _probe(1.875 * 2.0**-2, 2.0**-9, big=0.0, d=1.0) == 1 + 31 * 7 * 2.0**-13
    assert _probe(2.0**-4, 2.0**-9, d=1.0) == 2 + 15 * 2.0**-12
    assert _probe(1.875 * 2.0**-1, 2.0**-9, d=1.0) == 2 + 232 * 2.0**-12
    # negative control: the exact sum keeps every product
    a = _f8(np.array([[1.0] + [2.0**-5] * 31]), "e4m3")
    b = _f8(np.array([[1.0] + [2.0**-9] * 31]).T, "e4m3")
    assert mma_sum(a, b, np.float32([[0.0]]), np.float32)[0, 0] == 1 + 31 * 2.0**-14


def test_an_accumulator_through_a_float8_wgmma_keeps_14_bits():
    """With every product zero a float8 wgmma still truncates the accumulator to 14 bits
    (the H200 changed random accumulators by up to 2^-13 of themselves); a 16-bit one
    passes it unchanged."""
    c = np.float32([[1 + 2.0**-20, -(1 + 2.0**-13 + 2.0**-20)]])
    zeros_a, zeros_b = np.zeros((1, 32), np.float32), np.zeros((32, 2), np.float32)
    got = wgmma_sum_sm90(zeros_a, zeros_b, c, ("e4m3", "e4m3"))
    assert got.tolist() == [[1.0, -(1 + 2.0**-13)]]
    same = wgmma_sum_sm90(zeros_a[:, :16], zeros_b[:16], c, ("f16", "f16"))
    assert np.array_equal(same, c)


def test_a_16_bit_wgmma_sums_as_mma_does():
    """f16/bf16 operands: mma's measured rule (per 16-wide instruction), the subnormal
    floor taken from the PTX type (float16's is -14, bfloat16's -126)."""
    rng = np.random.default_rng(3)
    a = (rng.standard_normal((4, 16)) * 2.0**-17).astype(np.float16)  # subnormals
    b = (rng.standard_normal((16, 4)) * np.exp2(-np.arange(16))[:, None]).astype(np.float16)
    c = np.zeros((4, 4), np.float32)
    got = wgmma_sum_sm90(a.astype(np.float32), b.astype(np.float32), c, ("f16", "f16"))
    assert np.array_equal(got, mma_sum_sm90(a, b, c, np.float32))
    # negative control: read as bfloat16's floor the same bits align otherwise
    other = wgmma_sum_sm90(a.astype(np.float32), b.astype(np.float32), c, ("bf16", "bf16"))
    assert not np.array_equal(got, other)
