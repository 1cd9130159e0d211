"""mma.sync in the simulator (sim/mma.py).

Three tiers: the fragment oracle of sim/fragments.py against the ISA's formulas written
a second way (closed forms) and a third (the 8x8 ldmatrix tiles the fragments are made
of); the accumulation model of sim/numerics.py against an exact rational reference; and
a hand-written warp kernel that loads fragments by the ISA's formulas, calls
``T.ptx.mma`` directly and stores D, run in the simulator (and on a GPU, against it).
"""

from __future__ import annotations

import importlib.util
import math
import sys
from fractions import Fraction
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from tvm.script import tirx as T

from tirx_cuda_dispatch import runtime, sim
from tirx_cuda_dispatch.sim import SimError
from tirx_cuda_dispatch.sim import fragments as F
from tirx_cuda_dispatch.sim.mma import mma_form
from tirx_cuda_dispatch.sim.numerics import (
    _fsum_to_odd,
    _sum_is_exact,
    mma_bound,
    mma_magnitude,
    mma_sum,
    mma_sum_sm90,
    mma_terms,
    ptx_value_dtype,
    tf32_operand,
)

BF16 = np.dtype(ml_dtypes.bfloat16)
TIR = {"f16": "float16", "bf16": "bfloat16", "tf32": "float32", "f32": "float32"}
# (K, atype, dtype == ctype): every line the simulator executes
FORMS = [
    (16, "f16", "f32"),
    (16, "bf16", "f32"),
    (8, "f16", "f32"),
    (8, "bf16", "f32"),
    (8, "tf32", "f32"),
    (16, "f16", "f16"),
    (8, "f16", "f16"),
]
FRAGMENTS = [  # (shape, operand, type) the oracle records
    ("m16n8k16", "a", "f16"),
    ("m16n8k16", "b", "bf16"),
    ("m16n8k16", "c", "f32"),
    ("m16n8k16", "c", "f16"),
    ("m16n8k8", "a", "f16"),
    ("m16n8k8", "b", "bf16"),
    ("m16n8k8", "a", "tf32"),
    ("m16n8k8", "b", "tf32"),
    ("m16n8k8", "c", "f32"),
    ("m16n8k8", "c", "f16"),
]


def _cells(shape, operand, type_):
    return [
        (lane, reg, half)
        for lane in range(32)
        for reg in range(F.mma_registers(shape, operand, type_))
        for half in range(F.mma_halves(type_))
    ]


# -- tier 1: the fragment oracle ---------------------------------------------------------------
def test_register_counts_are_the_isa_tables():
    # ".m16n8k16": A "four .f16x2 registers", B "two .f16x2 registers", C/D .f32 "four
    # .f32 registers", .f16 "two .f16x2 registers". ".m16n8k8": A .f16/.bf16 "two .f16x2
    # registers", .tf32 "four .b32 registers"; B .f16/.bf16 "a single .f16x2 register",
    # .tf32 "two .b32 registers".
    want = {
        ("m16n8k16", "a", "f16"): 4,
        ("m16n8k16", "b", "bf16"): 2,
        ("m16n8k16", "c", "f32"): 4,
        ("m16n8k16", "c", "f16"): 2,
        ("m16n8k8", "a", "f16"): 2,
        ("m16n8k8", "b", "bf16"): 1,
        ("m16n8k8", "a", "tf32"): 4,
        ("m16n8k8", "b", "tf32"): 2,
        ("m16n8k8", "c", "f32"): 4,
        ("m16n8k8", "c", "f16"): 2,
    }
    assert {f: F.mma_registers(*f) for f in FRAGMENTS} == want


@pytest.mark.parametrize("form", FRAGMENTS, ids="-".join)
def test_fragment_covers_each_element_once(form):
    shape, operand, type_ = form
    m, n, k = F.MMA_SHAPES[shape]
    rows, cols = {"a": (m, k), "b": (k, n), "c": (m, n)}[operand]
    seen = [F.mma_element(*form, *cell) for cell in _cells(*form)]
    assert len(seen) == len(set(seen)) == rows * cols
    assert set(seen) == {(r, c) for r in range(rows) for c in range(cols)}


def _second_way(shape, operand, type_, lane, i):
    """The ISA's formulas as closed forms in the element index ``i`` (not case splits)."""
    g, t = lane >> 2, lane & 3
    if operand == "c":
        return g + 8 * (i >> 1), 2 * t + (i & 1)
    if type_ == "tf32":
        return (g + 8 * (i & 1), t + 4 * (i >> 1)) if operand == "a" else (t + 4 * i, g)
    if operand == "a":
        return g + 8 * ((i >> 1) & 1), 2 * t + (i & 1) + 8 * (i >> 2)
    return 2 * t + (i & 1) + 8 * (i >> 1), g


def _closed_form_mismatches(element, form) -> list:
    halves = F.mma_halves(form[2])
    return [
        cell
        for cell in _cells(*form)
        if element(*form, *cell) != _second_way(*form, cell[0], cell[1] * halves + cell[2])
    ]


@pytest.mark.parametrize("form", FRAGMENTS, ids="-".join)
def test_fragment_against_closed_forms(form):
    assert _closed_form_mismatches(F.mma_element, form) == []

    def lanes_0_1_exchanged(shape, operand, type_, lane, reg, half=0):
        return F.mma_element(shape, operand, type_, lane ^ (lane < 2), reg, half)

    # negative control: a map with two lanes exchanged is caught, at both lanes
    assert {c[0] for c in _closed_form_mismatches(lanes_0_1_exchanged, form)} == {0, 1}


@pytest.mark.parametrize(
    "form", [f for f in FRAGMENTS if F.MMA_TYPE_BITS[f[2]] == 16], ids="-".join
)
def test_16bit_fragments_are_ldmatrix_tiles(form):
    # The 16-bit fragments are 8x8 matrices in ldmatrix's layout (Figure 104: lane l holds
    # row l / 4, elements 2 (l % 4) and +1), one per register: A's registers tile 16xK
    # column block by column block (rows first), B's registers hold B^T's 8x8 blocks (B is
    # column-major), a .f16 accumulator's two registers the two row blocks.
    shape, operand, type_ = form
    for lane, reg, half in _cells(*form):
        r, c = F.ldmatrix_fragment(lane, half, trans=False)
        if operand == "a":
            want = (8 * (reg % 2) + r, 8 * (reg // 2) + c)
        elif operand == "b":
            want = (8 * reg + c, r)
        else:
            want = (8 * reg + r, c)
        assert F.mma_element(shape, operand, type_, lane, reg, half) == want


@pytest.mark.parametrize("form", FRAGMENTS, ids="-".join)
def test_pack_unpack_round_trip(form, rng):
    shape, operand, type_ = form
    m, n, k = F.MMA_SHAPES[shape]
    rows, cols = {"a": (m, k), "b": (k, n), "c": (m, n)}[operand]
    width = np.uint16 if F.MMA_TYPE_BITS[type_] == 16 else np.uint32
    mat = rng.integers(1, np.iinfo(width).max, size=(rows, cols), dtype=width)
    words = F.mma_pack(shape, operand, type_, mat)
    assert np.array_equal(F.mma_unpack(shape, operand, type_, words), mat)
    # element 0 of lane 5 is the low half (or all) of its register 0
    r0, c0 = F.mma_element(shape, operand, type_, 5, 0, 0)
    assert int(words[5, 0]) & (0xFFFF if width == np.uint16 else 0xFFFFFFFF) == mat[r0, c0]


def test_fragment_rejects_untabulated_forms():
    with pytest.raises(ValueError, match="no .m16n8k16 fragment of operand a with .tf32"):
        F.mma_registers("m16n8k16", "a", "tf32")
    with pytest.raises(ValueError, match="m8n8k4"):
        F.mma_element("m8n8k4", "a", "f16", 0, 0)
    with pytest.raises(ValueError, match="has 4 registers, got reg 4"):
        F.mma_element("m16n8k16", "a", "f16", 0, 4)
    with pytest.raises(ValueError, match="holds 1 element"):
        F.mma_element("m16n8k8", "c", "f32", 0, 0, 1)


def test_oracle_agrees_with_the_emitters_isa_module():
    """Cross-check with isa/mma_fragments.py (written separately for the emitters)."""
    isa = pytest.importorskip("tirx_cuda_dispatch.isa.mma_fragments")
    forms = getattr(isa, "MMA_INSTRUCTIONS", ())
    if not forms:
        pytest.skip("isa/mma_fragments.py records no mma instructions yet")
    names = {"float16": "f16", "bfloat16": "bf16", "float32": "f32"}
    for inst in forms:
        shape, ab, cd = f"m{inst.m}n{inst.n}k{inst.k}", names[inst.ab_dtype], names[inst.cd_dtype]
        for lane in range(32):
            for word in range(inst.a_words):
                for half in (0, 1):
                    got = inst.a_element(lane, word, half)
                    assert got == F.mma_element(shape, "a", ab, lane, word, half)
            for word in range(inst.b_words):
                for half in (0, 1):
                    got = inst.b_element(lane, word, half)
                    assert got == F.mma_element(shape, "b", ab, lane, word, half)
            for reg in range(inst.c_registers):
                assert inst.c_element(lane, reg) == F.mma_element(shape, "c", cd, lane, reg)


# -- tier 2: the accumulation model --------------------------------------------------------
_FORMATS = {np.dtype(np.float32): (24, -126, 127), np.dtype(np.float16): (11, -14, 15)}


def _round_fraction(x: Fraction, negative_zero: bool, out: np.dtype, mode: str = "rn") -> float:
    """``x`` rounded into ``out`` (precision, emin, emax) to nearest even (``rn``, overflow
    to infinity) or toward zero (``rz``, overflow to the largest finite), with gradual
    underflow: by rational arithmetic alone."""
    p, emin, emax = _FORMATS[out]
    if x == 0:
        return -0.0 if negative_zero else 0.0
    sign, x = (-1 if x < 0 else 1), abs(x)
    e = x.numerator.bit_length() - x.denominator.bit_length()
    while Fraction(2) ** e > x:
        e -= 1
    while Fraction(2) ** (e + 1) <= x:
        e += 1
    q = max(e, emin) - (p - 1)
    steps = x / Fraction(2) ** q
    value = (round(steps) if mode == "rn" else math.floor(steps)) * Fraction(2) ** q
    if value >= Fraction(2) ** (emax + 1):  # round(): half to even
        largest = (2 - Fraction(2) ** (1 - p)) * Fraction(2) ** emax
        return sign * (math.inf if mode == "rn" else float(largest))
    return sign * float(value)


def _reference(a, b, c, out) -> np.ndarray:
    """``c + sum_k a_k b_k`` per output, exactly (Fractions), rounded once."""
    a, b, c = (np.asarray(x).astype(np.float64) for x in (a, b, c))
    d = np.zeros(c.shape, dtype=np.float64)
    for m, n in np.ndindex(*c.shape):
        total, zeros_negative = Fraction(c[m, n]), bool(np.signbit(c[m, n]) and c[m, n] == 0)
        for k in range(a.shape[1]):
            p = a[m, k] * b[k, n]
            total += Fraction(a[m, k]) * Fraction(b[k, n])
            zeros_negative &= bool(p == 0 and np.signbit(a[m, k]) != np.signbit(b[k, n]))
        d[m, n] = _round_fraction(total, zeros_negative, out)
    return d.astype(out)


def _bits(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x).view(np.uint32 if x.dtype.itemsize == 4 else np.uint16)


def _wide(rng, shape, type_: str) -> np.ndarray:
    """Random finite values over most of the type's exponent range, with subnormals."""
    if type_ == "f16":
        bits = rng.integers(0, 0x7C00, size=shape).astype(np.uint16)  # below inf
        bits |= rng.integers(0, 2, size=shape).astype(np.uint16) << 15
        return bits.view(np.float16)
    exp = rng.integers(127 - 60, 127 + 60, size=shape).astype(np.float64)
    v = rng.uniform(1, 2, size=shape) * 2.0 ** (exp - 127) * rng.choice([-1.0, 1.0], size=shape)
    return (
        v.astype(np.float32).astype(ptx_value_dtype(type_))
        if type_ == "bf16"
        else v.astype(np.float32)
    )


def _inputs(rng, k: int, ab: str, cd: str, wide: bool):
    shapes = ((16, k), (k, 8))
    if wide:
        a, b = (_wide(rng, s, ab) for s in shapes)
        c = _wide(rng, (16, 8), "f16" if cd == "f16" else "f32")
        if ab == "f16" and cd == "f16":  # keep |products| inside .f16's range
            a, b = (np.clip(x, -64, 64).astype(np.float16) for x in (a, b))
    else:
        a, b = (runtime.random_array(s, TIR[ab], rng) for s in shapes)
        c = runtime.random_array((16, 8), TIR[cd], rng)
    if ab == "tf32":
        a, b = (tf32_operand(x.view(np.uint32)) for x in (a, b))
    return a, b, c


@pytest.mark.parametrize("wide", [False, True], ids=["normal", "wide"])
@pytest.mark.parametrize("form", FORMS, ids=lambda f: f"k{f[0]}-{f[1]}-{f[2]}")
def test_mma_sum_is_the_exact_sum_rounded_once(form, wide, rng):
    k, ab, cd = form
    a, b, c = _inputs(rng, k, ab, cd, wide)
    got = mma_sum(a, b, c, ptx_value_dtype(cd))
    assert np.array_equal(_bits(got), _bits(_reference(a, b, c, ptx_value_dtype(cd))))
    # negative control: summing in the output type, one product at a time, is caught
    seq = c.astype(np.float64)
    for i in range(k):
        with np.errstate(over="ignore"):
            seq = (seq + a[:, i : i + 1].astype(np.float64) * b[i : i + 1, :]).astype(
                ptx_value_dtype(cd)
            )
    assert not np.array_equal(_bits(seq.astype(ptx_value_dtype(cd))), _bits(got))


def _sm90_reference(a, b, c, out) -> np.ndarray:
    """The rule measured on the H200 (docs/simulator.md "mma numerics"), in Fractions:
    exponents e(a) + e(b) per product (a subnormal counts as its format's minimum
    exponent), every addend truncated toward zero to 2^(E - 25) with E their largest,
    the exact sum rounded toward zero into float32 or to nearest into float16; zero: +0."""
    emin = -14 if a.dtype == np.float16 else -126

    def exp(x: float, lowest: int | None) -> int:
        e = math.frexp(x)[1] - 1
        return lowest if lowest is not None and abs(x) < 2.0**lowest else e

    a, b, c = (np.asarray(x).astype(np.float64) for x in (a, b, c))
    d = np.zeros(c.shape, dtype=np.float64)
    for m, n in np.ndindex(*c.shape):
        addends = [(Fraction(c[m, n]), exp(c[m, n], None))] if c[m, n] != 0 else []
        for k in range(a.shape[1]):
            if a[m, k] != 0 and b[k, n] != 0:
                e = exp(a[m, k], emin) + exp(b[k, n], emin)
                addends.append((Fraction(a[m, k]) * Fraction(b[k, n]), e))
        top = max((e for _, e in addends), default=0)
        step = Fraction(2) ** (top - 25)
        total = sum((int(t / step) * step for t, _ in addends), Fraction(0))  # int(): to 0
        mode = "rz" if out == np.float32 else "rn"
        d[m, n] = _round_fraction(total, False, out, mode)
    d = d.astype(out)
    return np.where(d == 0, np.zeros((), out), d)


@pytest.mark.parametrize("wide", [False, True], ids=["normal", "wide"])
@pytest.mark.parametrize("form", FORMS, ids=lambda f: f"k{f[0]}-{f[1]}-{f[2]}")
def test_mma_sum_sm90_is_the_measured_rule(form, wide, rng):
    k, ab, cd = form
    a, b, c = _inputs(rng, k, ab, cd, wide)
    got = mma_sum_sm90(a, b, c, ptx_value_dtype(cd))
    assert np.array_equal(_bits(got), _bits(_sm90_reference(a, b, c, ptx_value_dtype(cd))))
    # negative control: the exact model differs from it on the same data (into .f16 the
    # 25-bit grid rarely shows, as on the H200: there they agree on ordinary data)
    if cd == "f32":
        assert not np.array_equal(_bits(got), _bits(mma_sum(a, b, c, ptx_value_dtype(cd))))
    # and it stays inside the bound docs/simulator.md states for the hardware
    ref = mma_terms(a, b, c).sum(axis=-1)
    fin = np.isfinite(got)
    assert (
        np.abs(got.astype(np.float64) - ref)[fin] <= mma_bound(a, b, c, ptx_value_dtype(cd))[fin]
    ).all()


def test_mma_sum_sm90_aligns_to_the_unnormalized_product_exponent():
    # 1.5 * 1.5 = 2.25 has exponent 0 + 0 = 0 (significand 2.25 in [1, 4)), so the grid
    # is 2^-25 and c = 1.5 * 2^-25 keeps 2^-25 after the products cancel; aligning to the
    # normalized exponent 1 would keep nothing, the exact model keeps all of c.
    a = np.zeros((16, 16), np.float16)
    b = np.zeros((16, 8), np.float16)
    a[0, :2], b[:2, 0] = (1.5, -1.5), 1.5
    c = np.zeros((16, 8), np.float32)
    c[0, 0] = 1.5 * 2.0**-25
    assert mma_sum_sm90(a, b, c, np.float32)[0, 0] == np.float32(2.0**-25)
    assert mma_sum(a, b, c, np.float32)[0, 0] == c[0, 0]


def test_both_summation_paths_run_and_agree(rng):
    a, b, c = _inputs(rng, 16, "bf16", "f32", wide=False)
    a_wide, _, c_wide = _inputs(rng, 16, "bf16", "f32", wide=True)
    a[8:], c[8:] = a_wide[8:], c_wide[8:]  # rows 0-7 ordinary, 8-15 wide
    terms = mma_terms(a, b, c)
    exact = _sum_is_exact(terms)
    assert exact.any() and not exact.all()  # the data takes both paths
    slow = np.array([_fsum_to_odd(row) for row in terms.reshape(-1, 17)]).reshape(16, 8)
    assert np.array_equal(_bits(slow.astype(np.float32)), _bits(mma_sum(a, b, c, np.float32)))
    a, b, c = _inputs(rng, 16, "f16", "f32", wide=False)
    assert _sum_is_exact(mma_terms(a, b, c)).all()  # ordinary data stays on the fast path


def test_mma_sum_special_values():
    a = np.full((16, 16), -0.0, np.float16)
    b = np.ones((16, 8), np.float16)
    c = np.full((16, 8), -0.0, np.float32)
    assert np.signbit(mma_sum(a, b, c, np.float32)).all()  # every addend -0: -0
    b[0, 0] = -1.0  # one product +0: +0
    assert not np.signbit(mma_sum(a, b, c, np.float32)[0, 0])
    a[:] = 1.0
    b[:] = 1.0
    c[:] = -16.0  # exact cancellation: +0
    d = mma_sum(a, b, c, np.float32)
    assert (d == 0).all() and not np.signbit(d).any()
    a[0, 0], b[0, 0] = np.inf, 0.0  # inf * 0: NaN, canonical
    c[1, 0] = np.inf
    d = mma_sum(a, b, c, np.float32)
    assert d.view(np.uint32)[0, 0] == 0x7FFFFFFF and d[1, 0] == np.inf
    big = np.full((16, 16), 60000.0, np.float16)
    c16 = np.zeros((16, 8), np.float16)
    d16 = mma_sum(big, np.full((16, 8), 60000.0, np.float16), c16, np.float16)
    assert (d16 == np.inf).all()  # overflow of the accumulator type rounds to inf


def test_mma_sum_all_positive_zero_products_make_plus_zero():
    a, b = np.zeros((16, 16), np.float16), np.zeros((16, 8), np.float16)
    c = np.full((16, 8), -0.0, np.float32)
    # the products are +0 and c is -0: IEEE's sum is +0
    assert not np.signbit(mma_sum(a, b, c, np.float32)).any()


def test_mma_sum_underflows_gradually():
    # 2^-75 * 2^-75 = 2^-150, half the smallest subnormal: ties to even -> 0; three of
    # them 1.5 * 2^-149 -> 2^-148 (even); the exact sum, not per-product flushing
    a = np.zeros((16, 8), np.float32)
    b = np.zeros((8, 8), np.float32)
    a[0, :3] = 2.0**-75
    b[:3, 0] = 2.0**-75
    a[1, 0], b[0, 1] = 2.0**-75, 2.0**-75
    c = np.zeros((16, 8), np.float32)
    d = mma_sum(a, b, c, np.float32)
    assert d[0, 0] == np.float32(2.0**-148) and d[1, 1] == 0 and d[0, 1] == 0


def test_tf32_operand_drops_the_low_13_bits():
    x = np.array([0x3F801FFF, 0xBF802000, 0x7F7FFFFF], dtype=np.uint32)
    assert tf32_operand(x).view(np.uint32).tolist() == [0x3F800000, 0xBF802000, 0x7F7FE000]


def test_magnitude_is_the_sum_of_absolute_addends():
    a = np.array([[1.0, -2.0]], np.float16)
    b = np.array([[3.0], [4.0]], np.float16)
    assert mma_magnitude(a, b, np.array([[-5.0]], np.float32)).tolist() == [[16.0]]


# -- the form a call names -----------------------------------------------------------------
def _tokens(line: str) -> list[str]:
    return line.split(".")[1:]


def test_form_accepts_every_modeled_line():
    for k, ab, cd in FORMS:
        line = f"mma.sync.aligned.m16n8k{k}.row.col.{cd}.{ab}.{ab}.{cd}"
        assert str(mma_form(_tokens(line))) == line


@pytest.mark.parametrize(
    "line, message",
    [
        ("mma.sync.aligned.m16n8k16.row.row.f32.f16.f16.f32", r"\.row\.row does not exist"),
        ("mma.sync.aligned.m16n8k16.col.col.f32.f16.f16.f32", r"\.col\.col does not exist"),
        ("mma.sync.aligned.m8n8k4.row.col.f32.f16.f16.f32", r"shape \.m8n8k4 is not modeled"),
        ("mma.sync.aligned.m16n8k4.row.col.f32.tf32.tf32.f32", r"shape \.m16n8k4 is not"),
        ("mma.sync.aligned.m16n8k16.row.col.f32.tf32.tf32.f32", r"shape \.m16n8k16 is not"),
        ("mma.sync.aligned.m16n8k16.row.col.f32.e4m3.e4m3.f32", r"\.e4m3.*executes"),
        ("mma.sync.aligned.m16n8k16.row.col.f32.e4m3.e5m2.f32", r"\.atype == \.btype"),
        ("mma.sync.aligned.m16n8k16.row.col.f16.bf16.bf16.f16", r"\.bf16\.f16.*executes"),
        ("mma.sync.m16n8k16.row.col.f32.f16.f16.f32", r"expected mma\.sync\.aligned"),
    ],
)
def test_form_declines_other_lines_naming_them(line, message):
    with pytest.raises(SimError, match=message):
        mma_form(_tokens(line))


# -- tier 3: a warp kernel calling T.ptx.mma ---------------------------------------------------
def mma_kernel(k: int, ab: str, cd: str, warps: int = 1, swap: int = 0, guard: bool = False):
    """Each warp ``w`` computes D[w] = A[w] B[w] + C[w] with one ``mma`` (A 16xK row-major,
    B Kx8, C and D 16x8, all in global), loading the fragments by the ISA's formulas.
    ``swap=1`` loads A as if lanes 0 and 1 were exchanged (a wrong fragment map);
    ``guard`` runs the mma under ``if lane < 16``."""
    tf32, acc16 = ab == "tf32", cd == "f16"
    ne_a, ne_b = 16 * k // 32, 8 * k // 32  # elements per lane
    nw_a, nw_b = (ne_a, ne_b) if tf32 else (ne_a // 2, ne_b // 2)  # 32-bit registers
    chain = f"mma.sync.aligned.m16n8k{k}.row.col.{cd}.{ab}.{ab}.{cd}"
    ab_t, cd_t = TIR[ab], TIR[cd]

    def regs(buf, n):  # the operand list, built while parsing (a named list would be bound)
        return [buf[j] for j in range(n)]

    def acc(values, words):  # .f32: one float per register; .f16: pairs in uint32 words
        return regs(words, 2) if acc16 else regs(values, 4)

    # fmt: off
    @T.prim_func
    def kernel(A_ptr: T.handle, B_ptr: T.handle, C_ptr: T.handle, D_ptr: T.handle):
        A = T.match_buffer(A_ptr, (warps, 16, k), ab_t)
        B = T.match_buffer(B_ptr, (warps, k, 8), ab_t)
        C = T.match_buffer(C_ptr, (warps, 16, 8), cd_t)
        D = T.match_buffer(D_ptr, (warps, 16, 8), cd_t)
        T.device_entry()
        T.cta_id([1])
        w = T.warp_id([warps])
        lane = T.lane_id([32])
        T.thread_id([32 * warps])
        a = T.alloc_local((ne_a,), ab_t)
        b = T.alloc_local((ne_b,), ab_t)
        c = T.alloc_local((4,), cd_t)
        d = T.alloc_local((4,), cd_t)
        src = lane ^ (swap * (1 - T.min(lane >> 1, 1)))  # lanes 0, 1 exchanged if swap
        ga = src >> 2
        ta = src & 3
        g = lane >> 2
        t = lane & 3
        for i in T.unroll(ne_a):
            if tf32:
                a[i] = A[w, ga + 8 * (i % 2), ta + 4 * (i // 2)]
            else:
                a[i] = A[w, ga + 8 * ((i // 2) % 2), 2 * ta + i % 2 + 8 * (i // 4)]
        for i in T.unroll(ne_b):
            if tf32:
                b[i] = B[w, t + 4 * i, g]
            else:
                b[i] = B[w, 2 * t + i % 2 + 8 * (i // 2), g]
        for i in T.unroll(4):
            c[i] = C[w, g + 8 * (i // 2), 2 * t + i % 2]
        aw = a.view("uint32")
        bw = b.view("uint32")
        cw = c.view("uint32")
        dw = d.view("uint32")
        if guard:
            if lane < 16:
                T.ptx[chain](*acc(d, dw), *regs(aw, nw_a), *regs(bw, nw_b), *acc(c, cw))
        else:
            T.ptx[chain](*acc(d, dw), *regs(aw, nw_a), *regs(bw, nw_b), *acc(c, cw))
        for i in T.unroll(4):
            D[w, g + 8 * (i // 2), 2 * t + i % 2] = d[i]
    # fmt: on
    return kernel


def _data(rng, k: int, ab: str, cd: str, warps: int = 1):
    a = runtime.random_array((warps, 16, k), TIR[ab], rng)
    b = runtime.random_array((warps, k, 8), TIR[ab], rng)
    c = runtime.random_array((warps, 16, 8), TIR[cd], rng)
    return a, b, c


def _operand(x: np.ndarray, ab: str) -> np.ndarray:
    """What the instruction reads: tf32 drops the low 13 bits (written here by hand)."""
    return (x.view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32) if ab == "tf32" else x


def _check(d: np.ndarray, a, b, c, k: int, ab: str, cd: str, target: str = "sm_90a") -> None:
    """D bit for bit the target's model (sm_90: the measured H200 rule; otherwise the
    exact sum, from Fractions), and within the hardware bound of numpy's float64 product."""
    out = ptx_value_dtype(cd)
    for w in range(a.shape[0]):
        aw, bw = _operand(a[w], ab), _operand(b[w], ab)
        if target.startswith("sm_90"):
            want = mma_sum_sm90(aw, bw, c[w], out)
        else:
            want = _reference(aw, bw, c[w], out)
        assert np.array_equal(_bits(d[w]), _bits(want)), f"warp {w}"
        ref = aw.astype(np.float64) @ bw.astype(np.float64) + c[w]
        err = np.abs(d[w].astype(np.float64) - ref)
        assert (err <= mma_bound(aw, bw, c[w], ptx_value_dtype(cd))).all(), f"warp {w}"


@pytest.mark.parametrize("target", ["sm_90a", "sm_80"])
@pytest.mark.parametrize("form", FORMS, ids=lambda f: f"k{f[0]}-{f[1]}-{f[2]}")
def test_mma_kernel_in_the_simulator(form, target, rng):
    k, ab, cd = form
    a, b, c = _data(rng, k, ab, cd)
    out = sim.run(mma_kernel(k, ab, cd), [a, b, c, runtime.poison_like(c)], target=target)
    _check(out[3], a, b, c, k, ab, cd, target)
    assert out.counters.instructions[f"mma.m16n8k{k}.{cd}.{ab}"] == 1


def test_mma_kernel_two_warps(rng):
    a, b, c = _data(rng, 16, "bf16", "f32", warps=2)
    out = sim.run(mma_kernel(16, "bf16", "f32", warps=2), [a, b, c, runtime.poison_like(c)])
    _check(out[3], a, b, c, 16, "bf16", "f32")
    assert out.counters.instructions["mma.m16n8k16.f32.bf16"] == 2


@pytest.mark.parametrize("form", [(16, "f16", "f32"), (8, "tf32", "f32")], ids=str)
def test_wrong_fragment_map_is_caught(form, rng):
    k, ab, cd = form
    a, b, c = _data(rng, k, ab, cd)
    out = sim.run(mma_kernel(k, ab, cd, swap=1), [a, b, c, runtime.poison_like(c)])
    with pytest.raises(AssertionError):
        _check(out[3], a, b, c, k, ab, cd)


def test_mma_on_half_a_warp_is_reported(rng):
    a, b, c = _data(rng, 16, "f16", "f32")
    with pytest.raises(SimError, match=r"mma\.sync\.aligned\.m16n8k16.*warp 0 runs it diverged"):
        sim.run(mma_kernel(16, "f16", "f32", guard=True), [a, b, c, runtime.poison_like(c)])


def raw_mma(chain: str, counts: tuple[int, int, int, int]):
    """One warp calls ``chain`` on registers filled with 1.0-ish bits and stores D's first
    register: for lines the simulator does not execute."""
    nd, na, nb, nc = counts

    # fmt: off
    @T.prim_func
    def kernel(D_ptr: T.handle):
        D = T.match_buffer(D_ptr, (32,), "float32")
        T.device_entry()
        T.cta_id([1])
        T.warp_id([1])
        lane = T.lane_id([32])
        T.thread_id([32])
        r = T.alloc_local((na + nb,), "uint32")
        f = T.alloc_local((nd + nc,), "float32")
        for i in T.unroll(na + nb):
            r[i] = T.uint32(0x3C003C00)
        for i in T.unroll(nd + nc):
            f[i] = T.float32(1.0)
        T.ptx[chain](*[f[i] for i in range(nd)], *[r[i] for i in range(na + nb)],
                     *[f[nd + i] for i in range(nc)])
        D[lane] = f[0]
    # fmt: on
    return kernel


@pytest.mark.parametrize(
    "chain, counts, message",
    [
        ("mma.sync.aligned.m16n8k4.row.col.f32.tf32.tf32.f32", (4, 2, 1, 4), r"\.m16n8k4"),
        ("mma.sync.aligned.m8n8k4.row.col.f32.f16.f16.f32", (8, 2, 2, 8), r"\.m8n8k4"),
        ("mma.sync.aligned.m16n8k16.row.col.f32.e4m3.e4m3.f32", (4, 2, 1, 4), r"\.e4m3"),
    ],
)
def test_unsupported_lines_are_reported(chain, counts, message):
    with pytest.raises(SimError, match=message):
        sim.run(raw_mma(chain, counts), [np.full(32, np.nan, np.float32)])


# -- the GPU round trip ------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("form", FORMS, ids=lambda f: f"k{f[0]}-{f[1]}-{f[2]}")
def test_mma_kernel_gpu_against_the_simulator(form, gpu, rng):
    """The same kernel compiled by TVM and run on the GPU: within the stated bound of the
    simulator (bit equality is what bench/mma_numerics.py measures, not asserted here)."""
    k, ab, cd = form
    a, b, c = _data(rng, k, ab, cd, warps=4)
    func = mma_kernel(k, ab, cd, warps=4)
    args = [a, b, c, runtime.poison_like(c)]
    want = sim.run(func, args).arrays[3]
    got = runtime.run(runtime.build(func, gpu), runtime.entry_name(func), args)[3]
    for w in range(4):
        aw, bw = _operand(a[w], ab), _operand(b[w], ab)
        err = np.abs(got[w].astype(np.float64) - want[w].astype(np.float64))
        assert (err <= mma_bound(aw, bw, c[w], ptx_value_dtype(cd))).all(), f"warp {w}"
        if gpu.startswith("sm_90"):  # the rule measured on the H200, bit for bit
            sm90 = mma_sum_sm90(aw, bw, c[w], ptx_value_dtype(cd))
            assert np.array_equal(_bits(got[w]), _bits(sm90)), f"warp {w}"


# -- the probe's models (bench/mma_numerics.py) on the CPU -------------------------------------
def _probe():
    path = Path(__file__).resolve().parents[2] / "bench" / "mma_numerics.py"
    spec = importlib.util.spec_from_file_location("_mma_numerics_probe", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def test_probe_models_on_the_cpu(rng):
    probe = _probe()
    a, b, c = _inputs(rng, 16, "f16", "f32", wide=False)
    # sequential fma, by hand in float64 (each step exact there, then rounded to float32)
    seq = c.copy()
    for i in range(16):
        seq = (
            seq.astype(np.float64) + a[:, i : i + 1].astype(np.float64) * b[i : i + 1, :]
        ).astype(np.float32)
    assert np.array_equal(_bits(probe.seq_fma(a, b, c, np.float32)), _bits(seq))
    # on small integers every partial sum is exact: every model is the exact sum
    ints = [rng.integers(-8, 9, size=s).astype(t) for s, t in (((16, 16), np.float16),
            ((16, 8), np.float16), ((16, 8), np.float32))]  # fmt: skip
    exact = mma_sum(*ints, np.float32)
    for name, model in probe.models(probe.Form(16, "f16", "f32")).items():
        assert np.array_equal(_bits(model(*ints)), _bits(exact)), name
    # cancellation leaves a remainder below the largest addend's last bits: truncating
    # addends to 23 bits under the block's top exponent must lose it somewhere
    cancel = -mma_terms(a, b, np.zeros_like(c))[..., 1:].sum(-1).astype(np.float32)
    tight = probe.trunc_blocks(a, b, cancel, np.float32, block=16, extra=0, final="rz")
    assert not np.array_equal(_bits(tight), _bits(mma_sum(a, b, cancel, np.float32)))
    # pairwise equals a by-hand tree for 16 exact f16 products
    p = (a.astype(np.float64)[:, None, :] * b.T.astype(np.float64)[None, :, :]).astype(np.float32)
    while p.shape[-1] > 1:
        p = (p[..., 0::2].astype(np.float64) + p[..., 1::2]).astype(np.float32)
    want = (p[..., 0].astype(np.float64) + c).astype(np.float32)
    assert np.array_equal(_bits(probe.pairwise(a, b, c, np.float32)), _bits(want))


def test_probe_compare_and_cuda_source(rng):
    probe = _probe()
    form = probe.Form(16, "bf16", "f32")
    sets = probe.datasets(form, 4, rng)
    assert set(sets) == {"normal", "wide", "tiny_c", "big_c", "cancel", "subnormal", "zeros"}
    a, b, c = sets["normal"]
    hw = mma_sum(a.view(BF16), b.view(BF16), c.view(np.float32), np.float32)
    stats = probe.compare(form, a, b, c, hw)
    assert stats["models"]["sim"] == {"bit_equal": 1.0, "max_err_u": 0.0, "bit_equal_all": 1.0}
    hw_off = hw.copy()
    hw_off.view(np.uint32)[0, 0, 0] ^= 1  # one output one ulp off: seen
    assert probe.compare(form, a, b, c, hw_off)["models"]["sim"]["bit_equal"] < 1.0
    src = probe.cuda_source(probe.Form(8, "tf32", "f32"))
    assert "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}" in src
    assert '"r"(rb[1]), "f"(rc[0])' in src
