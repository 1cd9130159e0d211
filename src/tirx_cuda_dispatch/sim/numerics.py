"""Numbers as the GPU computes them: TIR dtypes as numpy dtypes, casts and rounding.

Every value is a numpy array over the threads (``(T,)`` for a scalar, ``(T, lanes)`` for a
vector). Arithmetic happens in the result's own dtype, which is exact IEEE for float32
and float64. float16 and bfloat16 arithmetic goes through float32 and rounds once more;
for ``+ - * / sqrt`` that double rounding is innocuous (float32 has at least 2p+2 bits
for both, Figueroa 1995), so the result is the correctly rounded one the hardware's
``HADD``/``HMUL``/``HFMA``-family and ``__h*`` intrinsics give. Fused multiply-add (the
packed ``fma`` forms, and ``a*b+c`` that CUDA contracts) rounds once, through float64
with round-to-odd (:func:`fma`). The warp-level ``mma`` sums its products and ``c``
exactly and rounds once (:func:`mma_sum`; docs/simulator.md "mma numerics").
"""

from __future__ import annotations

import math
from typing import Any

import ml_dtypes
import numpy as np

from .errors import NotModeled, SimError

_SCALARS = {
    "bool": np.dtype(np.bool_),
    "int8": np.dtype(np.int8),
    "int16": np.dtype(np.int16),
    "int32": np.dtype(np.int32),
    "int64": np.dtype(np.int64),
    "uint8": np.dtype(np.uint8),
    "uint16": np.dtype(np.uint16),
    "uint32": np.dtype(np.uint32),
    "uint64": np.dtype(np.uint64),
    "float16": np.dtype(np.float16),
    "bfloat16": np.dtype(ml_dtypes.bfloat16),
    "float8_e4m3fn": np.dtype(ml_dtypes.float8_e4m3fn),
    "float8_e5m2": np.dtype(ml_dtypes.float8_e5m2),
    "float32": np.dtype(np.float32),
    "float64": np.dtype(np.float64),
}


# PTX's names of the floating-point types the simulated instructions take (PTX ISA 5.2).
PTX_FLOAT_TYPES = {"f16": "float16", "bf16": "bfloat16", "f32": "float32"}


def ptx_type(dtype: str) -> str | None:
    """PTX's name of a TIR float type (``"bfloat16"`` -> ``"bf16"``), None where none."""
    return next((p for p, name in PTX_FLOAT_TYPES.items() if name == dtype), None)


def ptx_value_dtype(type_: str) -> np.dtype:
    """The numpy dtype of a PTX float type's values (``"bf16"`` -> bfloat16)."""
    return _SCALARS[PTX_FLOAT_TYPES[type_]]


def parse_dtype(dtype: Any) -> tuple[np.dtype, int]:
    """``"uint32x4"`` -> (uint32, 4); ``"float16"`` -> (float16, 1)."""
    text = str(dtype)
    hit = _PARSED.get(text)
    if hit is None:
        hit = _PARSED[text] = _parse_dtype(text)
    return hit


_PARSED: dict[str, tuple[np.dtype, int]] = {}  # parse_dtype's answers, by text


def _parse_dtype(text: str) -> tuple[np.dtype, int]:
    base, lanes = text, 1
    if "x" in text and text not in _SCALARS:
        base, _, count = text.rpartition("x")
        if not count.isdigit():
            base, lanes = text, 1
        else:
            lanes = int(count)
    if base not in _SCALARS:
        raise NotModeled(f"the simulator has no dtype {text!r}")
    return _SCALARS[base], lanes


def scalar_name(dtype: np.dtype) -> str:
    for name, dt in _SCALARS.items():
        if dt == dtype:
            return name
    raise SimError(f"no TIR name for numpy dtype {dtype}")


_ML_FLOATS = {_SCALARS[n] for n in ("bfloat16", "float8_e4m3fn", "float8_e5m2")}


def is_float(dtype: np.dtype) -> bool:
    return dtype.kind == "f" or dtype in _ML_FLOATS


def cast(values: np.ndarray, to: np.dtype) -> np.ndarray:
    """C/PTX conversion semantics: floats round to nearest even, float -> int truncates
    toward zero (``cvt.rzi``: what a C cast does); a float -> int cast of a value out of
    the target's range (or NaN) is undefined in C and an error here."""
    src = values.dtype
    if src == to:
        return values
    if to == np.bool_:
        return values != 0
    if is_float(src) and to.kind in "iu":
        wide = values.astype(np.float64)
        info = np.iinfo(to)
        bad = ~np.isfinite(wide) | (np.trunc(wide) < info.min) | (np.trunc(wide) > info.max)
        if bad.any():
            raise SimError(f"{scalar_name(src)} -> {scalar_name(to)} cast of out-of-range value")
        return np.trunc(wide).astype(to)
    if is_float(src) and is_float(to) and src.itemsize > 4 and to.itemsize == 2:
        # float64 -> 16-bit: through float32 would round twice (53 < 2*24+2 does not
        # apply here: the source is wider than float32); round to odd first.
        return _round_to_odd_f32(values).astype(to)
    with np.errstate(over="ignore", invalid="ignore"):
        return values.astype(to)


def _round_to_odd_f32(wide: np.ndarray) -> np.ndarray:
    """float64 -> float32 rounding to odd: rounding that to any format of at most 22 bits
    of precision gives the correctly rounded result of the float64 value."""
    near = wide.astype(np.float32)
    back = near.astype(np.float64)
    inexact = (back != wide) & np.isfinite(wide)
    bits = near.view(np.uint32)
    even = (bits & 1) == 0
    toward = np.where(back < wide, np.inf, -np.inf).astype(np.float32)
    fix = inexact & even
    out = near.copy()
    out[fix] = np.nextafter(near[fix], toward[fix])
    return out


def fma(a: np.ndarray, b: np.ndarray, c: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``a * b + c`` rounded once to ``dtype`` (float16, bfloat16 or float32).

    The product of two such numbers is exact in float64; the sum is computed in float64,
    its rounding error recovered exactly (TwoSum), and the float64 sum made odd when
    inexact (round to odd), so that the final rounding to ``dtype`` is the single
    correct one.
    """
    if dtype == np.float64:
        raise SimError("float64 fma needs wider arithmetic than the simulator has")
    s = _odd_sum(a.astype(np.float64) * b.astype(np.float64), c.astype(np.float64))
    if dtype.itemsize == 2:
        return _round_to_odd_f32(s).astype(dtype)  # exact: s is odd-rounded already
    return s.astype(dtype)


def _odd_sum(p: np.ndarray, c: np.ndarray) -> np.ndarray:
    """``p + c`` in float64 rounded to odd: TwoSum recovers the rounding error exactly,
    and an inexact even sum steps toward it. Rounding that to any format of at most 51
    bits, in any rounding mode, gives the correct rounding of the exact sum."""
    with np.errstate(invalid="ignore", over="ignore"):
        s = p + c
        bp = s - c
        err = (p - bp) + (c - (s - bp))  # TwoSum: s + err == p + c exactly
    bits = np.asarray(s).view(np.uint64)
    fix = (err != 0) & np.isfinite(s) & ((bits & 1) == 0)
    s = np.array(s, copy=True)
    s[fix] = np.nextafter(s[fix], np.where(err[fix] > 0, np.inf, -np.inf))
    return s


ROUNDING_MODES = ("rn", "rz", "rm", "rp")
_F32_MIN_NORMAL = np.float32(np.finfo(np.float32).tiny)


def f32_arith(
    op: str, args: list[np.ndarray], mode: str = "rn", ftz: bool = False, sat: bool = False
) -> np.ndarray:
    """PTX ``add``/``sub``/``mul``/``fma`` on ``.f32`` (ISA "Floating Point Instructions"):
    the exact result rounded once in ``mode`` (``.rn`` nearest even, ``.rz`` toward zero,
    ``.rm`` down, ``.rp`` up); ``.ftz`` flushes subnormal inputs and results to zero of
    the same sign; ``.sat`` clamps the result to [0, 1] (NaN to +0)."""
    if mode not in ROUNDING_MODES:
        raise SimError(f"f32 {op}: no rounding mode .{mode}")
    xs = [np.asarray(v, dtype=np.float32) for v in args]
    if ftz:
        xs = [_flush(x) for x in xs]
    w = [x.astype(np.float64) for x in xs]
    with np.errstate(all="ignore"):
        if op == "mul":
            exact = w[0] * w[1]  # 24 x 24 bits and the exponents fit float64: exact
            addends = None
        elif op in ("add", "sub", "fma"):
            p, c = (w[0] * w[1], w[2]) if op == "fma" else (w[0], w[1] if op == "add" else -w[1])
            exact, addends = _odd_sum(p, c), (p, c)
        else:
            raise SimError(f"the simulator has no f32 arithmetic {op!r}")
    out = _round_f32(exact, mode)
    if addends is not None and mode == "rm":
        # x + (-x) is +0 in every mode but round-down, where it is -0 (IEEE 754 6.3)
        p, c = addends
        cancel = (exact == 0) & ~((p == 0) & (c == 0) & np.signbit(p) & np.signbit(c))
        cancel &= ~((p == 0) & (c == 0) & ~np.signbit(p) & ~np.signbit(c))
        out = np.where(cancel, np.float32(-0.0), out)
    if ftz:
        out = _flush(out)
    if sat:
        out = np.where(np.isnan(out), np.float32(0.0), np.clip(out, 0.0, 1.0)).astype(np.float32)
    return out


def _round_f32(exact: np.ndarray, mode: str) -> np.ndarray:
    """A float64 that is exact or rounded to odd, rounded to float32 in ``mode``."""
    near = np.asarray(exact).astype(np.float32)  # round to nearest even
    if mode == "rn":
        return near
    back = near.astype(np.float64)
    with np.errstate(invalid="ignore"):
        fix = {
            "rz": np.abs(back) > np.abs(exact),
            "rm": back > exact,
            "rp": back < exact,
        }[mode]
    toward = {"rz": 0.0, "rm": -np.inf, "rp": np.inf}[mode]
    near = near.copy()
    near[fix] = np.nextafter(near[fix], np.float32(toward))
    return near


def _flush(x: np.ndarray) -> np.ndarray:
    """Subnormal float32 values to zero of the same sign (``.ftz``)."""
    sub = (x != 0) & (np.abs(x) < _F32_MIN_NORMAL)
    return np.where(sub, np.copysign(np.float32(0.0), x), x).astype(np.float32)


def from_bits(raw: np.ndarray, dtype: np.dtype, lanes: int) -> np.ndarray:
    """Bytes ``(T, nbytes)`` -> values ``(T,)`` or ``(T, lanes)``."""
    values = np.ascontiguousarray(raw).view(dtype)
    return values if lanes > 1 else values[:, 0]


def to_bits(values: np.ndarray, dtype: np.dtype, lanes: int, threads: int) -> np.ndarray:
    """Values -> bytes ``(T, lanes * itemsize)``."""
    v = np.asarray(values)
    if v.dtype != dtype:
        raise SimError(f"storing a {v.dtype} value into {scalar_name(dtype)} memory")
    v = np.broadcast_to(v.reshape(threads, -1), (threads, lanes))
    return np.ascontiguousarray(v).view(np.uint8).reshape(threads, lanes * dtype.itemsize)


# -- mma.sync: D = A B + C (PTX ISA "mma") ---------------------------------------------------
_CANONICAL_NAN = {np.dtype(np.float32): 0x7FFFFFFF, np.dtype(np.float16): 0x7FFF}
_TF32_DROPPED = np.uint32(0x1FFF)  # the 13 low significand bits a .tf32 operand ignores
# The narrow multiplicand formats, by PTX type; every other operand is float32 (tf32 too).
_PTX_FORMATS = {
    "f16": np.dtype(np.float16),
    "bf16": np.dtype(ml_dtypes.bfloat16),
    "e4m3": np.dtype(ml_dtypes.float8_e4m3fn),
    "e5m2": np.dtype(ml_dtypes.float8_e5m2),
}


def format_emin(dtype: Any) -> int:
    """The exponent a subnormal multiplicand aligns with: its format's smallest normal one
    (float16 -14, bfloat16 -126, e4m3 -6, e5m2 -14; float32 and tf32 operands -126).
    ``dtype``: a numpy dtype, its name (``"float8_e4m3fn"``) or a PTX type (``"e4m3"``)."""
    kind = _PTX_FORMATS.get(dtype, dtype) if isinstance(dtype, str) else dtype
    kind = np.dtype(kind)
    return int(ml_dtypes.finfo(kind).minexp) if kind in _PTX_FORMATS.values() else -126


MMA_SM90_EXTRA_BITS = 2
"""Bits the sm_90 rule keeps below float32's 24 (see :func:`mma_sum_sm90`)."""


def tf32_operand(bits: np.ndarray) -> np.ndarray:
    """A ``.tf32`` register's value: the float32 it holds with the 13 low significand bits
    dropped (toward zero). The ISA keeps the ``.tf32`` layout implementation-defined
    ("A register variable containing .tf32 data must be declared with .b32 type"); taking
    the high 19 bits is the model, which ``bench/mma_numerics.py`` checks on the GPU."""
    b = np.asarray(bits, dtype=np.uint32)
    return (b & ~_TF32_DROPPED).view(np.float32)


def ptx_operand_values(bits: np.ndarray, type_: str) -> np.ndarray:
    """An mma operand's values from its register bits: a ``.tf32`` one as
    :func:`tf32_operand` reads it, others as their PTX float type (``f16``, ``bf16``,
    ``f32``)."""
    if type_ == "tf32":
        return tf32_operand(bits)
    return bits.view(ptx_value_dtype(type_))


def mma_terms(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """The addends of every output of ``D = A B + C`` as float64, exactly: ``(..., M, N,
    K + 1)``, ``c`` first, then the products ``a[m, k] * b[k, n]`` in ``k`` order.

    ``a`` is ``(..., M, K)``, ``b`` ``(..., K, N)``, ``c`` ``(..., M, N)``; floats of at
    most 24 significand bits and float32's exponent range (float16, bfloat16, tf32 values
    as float32, float32), so every product is exact in float64 (at most 48 bits, exponents
    from -298 to 256)."""
    a64 = np.asarray(a).astype(np.float64)
    b64 = np.asarray(b).astype(np.float64)
    c64 = np.asarray(c).astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        products = a64[..., :, None, :] * np.swapaxes(b64, -1, -2)[..., None, :, :]
    return np.concatenate([c64[..., None], products], axis=-1)


def mma_magnitude(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """``|c| + sum_k |a_k b_k|`` per output, in float64: the scale summation errors are
    measured in (``bench/mma_numerics.py``; :func:`mma_bound` for the stated bound)."""
    return np.abs(mma_terms(a, b, c)).sum(axis=-1)


def mma_bound(a: np.ndarray, b: np.ndarray, c: np.ndarray, out: Any) -> np.ndarray:
    """How far the H200's ``mma`` (:func:`mma_sum_sm90`) may be from the simulator's
    (:func:`mma_sum`), per output: ``(K + 1) 2^-24 M + 3 2^-p M + 2 eta`` with ``p``
    and ``eta`` the output type's precision and smallest subnormal, and ``M = |c| +
    sum_k |a_k|' |b_k|'`` over the nonzero products, ``|x|'`` being ``|x|`` raised to the
    multiplicand format's smallest normal (subnormal operands align as if normal).
    Derived in docs/simulator.md "mma numerics"."""
    out = np.dtype(out)
    a, b = np.asarray(a), np.asarray(b)
    floor = 2.0 ** format_emin(a.dtype)
    a64 = np.maximum(np.abs(a.astype(np.float64)), floor) * (a != 0)
    b64 = np.maximum(np.abs(b.astype(np.float64)), floor) * (b != 0)
    big = np.abs(mma_terms(a64, b64, np.asarray(c))).sum(axis=-1)
    p, eta = (24, 2.0**-149) if out == np.float32 else (11, 2.0**-24)
    return (a.shape[-1] + 1) * 2.0**-24 * big + 3 * 2.0**-p * big + 2 * eta


def mma_sum(a: np.ndarray, b: np.ndarray, c: np.ndarray, out: Any) -> np.ndarray:
    """The simulator's ``mma``: ``d = c + sum_k a[m, k] b[k, n]`` computed exactly and
    rounded once to ``out`` (float32 or float16), to nearest even.

    The exact sum is the float64 sum of :func:`mma_terms` when that is provably exact
    (every addend a multiple of ``2^L`` and ``sum |addend| < 2^(L+53)``, checked per
    output); otherwise ``math.fsum`` (Shewchuk's exact summation, correctly rounded to
    float64) and the sign of the exact remainder make the float64 round-to-odd of the
    exact sum, which rounds correctly to float32 (and, through round-to-odd float32, to
    float16). Signed zeros follow IEEE: ``-0`` only when every addend is ``-0``. A NaN or
    infinite addend gives the IEEE float64 sum (``inf - inf`` is NaN); every NaN output
    is the canonical NaN (``0x7fffffff`` / ``0x7fff``). Overflow rounds to infinity.
    """
    out = np.dtype(out)
    if out not in _CANONICAL_NAN:
        raise SimError(f"mma accumulates into float32 or float16, not {out}")
    terms = mma_terms(a, b, c)
    with np.errstate(invalid="ignore", over="ignore"):
        total = terms.sum(axis=-1)  # exact where _sum_is_exact holds, IEEE for inf/NaN
    negative_zero = ((terms == 0) & np.signbit(terms)).all(axis=-1)  # numpy's sum starts at +0
    total[negative_zero] = -0.0
    inexact = ~_sum_is_exact(terms) & np.isfinite(total)
    if inexact.any():
        total[inexact] = [_fsum_to_odd(row) for row in terms[inexact]]
    return _mma_round(total, out, "rn")


def _mma_round(total: np.ndarray, out: np.dtype, f32_mode: str) -> np.ndarray:
    """A float64 that is exact (or odd-rounded) into ``out``: float32 in ``f32_mode``,
    float16 to nearest even (through round-to-odd float32); NaNs canonical."""
    with np.errstate(over="ignore", invalid="ignore"):
        if out == np.float32:
            d = _round_f32(total, f32_mode)
        else:
            d = _round_to_odd_f32(total).astype(np.float16)
    nan = np.isnan(d)
    if nan.any():
        width = np.uint32 if out == np.float32 else np.uint16
        d = d.copy()
        d.view(width)[nan] = _CANONICAL_NAN[out]
    return d


def mma_sum_sm90(a: np.ndarray, b: np.ndarray, c: np.ndarray, out: Any) -> np.ndarray:
    """``mma`` as the H200 (sm_90) computes it, found by measurement: bit-equal on every
    output ``bench/mma_numerics.py`` produced there (docs/simulator.md "mma numerics").

    Every product ``a_k b_k`` is exact; its exponent is ``e(a_k) + e(b_k)``, the sum of
    the operands' exponents (not renormalized: the product's significand is in [1, 4)),
    a subnormal operand counting as its format's minimum exponent; ``c``'s is its own.
    With ``E`` the largest of these over the nonzero addends, each addend is truncated
    toward zero to a multiple of ``2^(E - 23 - 2)``, the truncated addends are summed
    exactly, and the sum is rounded toward zero into float32, or to nearest even into
    float16 for ``.f16`` accumulators. All ``K`` products and ``c`` are one fused sum
    (K = 8 and 16). A zero result is ``+0``, also where a negative sum underflows in
    the rounding (seen with ``.f16`` accumulators; IEEE would give ``-0``); a sum of
    only ``-0`` addends, NaN and infinite addends, and float32 overflow were not
    measured (here: ``+0``, :func:`mma_sum`'s IEEE result, the largest finite float32).
    ``a``/``b`` are float16, bfloat16 or (tf32 operands, low bits already dropped)
    float32.
    """
    a, b = np.asarray(a), np.asarray(b)
    emins = (format_emin(a.dtype), format_emin(b.dtype))
    return _aligned_sum(a, b, c, out, emins, 23 + MMA_SM90_EXTRA_BITS, None)


WGMMA_SM90_F8_GRID = 13
"""Bits below the largest addend's exponent an sm_90 float8 wgmma keeps of each addend."""
WGMMA_SM90_F8_SIGNIFICAND = 14
"""Significand bits of the sum an sm_90 float8 wgmma writes (float32 has 24)."""


def wgmma_sum_sm90(a: np.ndarray, b: np.ndarray, c: np.ndarray, types: tuple[str, str]):
    """``wgmma.mma_async`` (one instruction: K = 16 for f16/bf16, 32 for e4m3/e5m2) as the
    H200 computes it into float32, found by measurement: bit-equal on every output of 58
    random 16-bit and 81 random float8 programs (``fuzz.wgmma_case``: M 64/128, N 8-256,
    K up to 256, every major and swizzle, accum or not, operands of normal and of wide
    exponent spread; docs/simulator.md "wgmma numerics").

    16-bit operands sum as ``mma`` does (:func:`mma_sum_sm90`: addends truncated to
    ``2^(E - 25)``, the sum rounded toward zero into float32). Float8 operands keep far
    fewer bits: with ``E`` the largest exponent over the nonzero addends (a product's is
    ``e(a_k) + e(b_k)``, a subnormal operand counting as its format's minimum exponent,
    e4m3 -6 and e5m2 -14; the accumulator's is its own), every addend, the accumulator
    included, is truncated toward zero to a multiple of ``2^(E - 13)``, the truncated
    addends are summed exactly and the sum is truncated toward zero to 14 significand
    bits, which float32 holds exactly. So an accumulator passed through a float8 wgmma
    whose products are all zero loses its low 10 bits, and a K loop of float8 wgmmas
    keeps about 14 bits however long it runs (the reason DeepGEMM adds partial sums into
    float32 registers every few K steps). ``types`` are the PTX types of A and B
    (``f16``, ``bf16``, ``e4m3``, ``e5m2``); ``a`` is ``(M, K)`` and ``b`` ``(K, N)``
    values (float32 holds each exactly), ``c`` the float32 accumulator."""
    emins = (format_emin(types[0]), format_emin(types[1]))
    if types[0] in ("e4m3", "e5m2"):
        return _aligned_sum(a, b, c, np.float32, emins, WGMMA_SM90_F8_GRID,
                            WGMMA_SM90_F8_SIGNIFICAND)  # fmt: skip
    return _aligned_sum(a, b, c, np.float32, emins, 23 + MMA_SM90_EXTRA_BITS, None)


def _aligned_sum(a, b, c, out, emins: tuple[int, int], grid: int, significand: int | None):
    """The sm_90 tensor cores' fused sum (:func:`mma_sum_sm90`, :func:`wgmma_sum_sm90`):
    addends truncated toward zero to multiples of ``2^(E - grid)``, summed exactly, the
    sum truncated toward zero to ``significand`` bits (None: none), then rounded into
    ``out`` (float32 toward zero, float16 to nearest even); a zero result is +0."""
    out = np.dtype(out)
    if out not in _CANONICAL_NAN:
        raise SimError(f"mma accumulates into float32 or float16, not {out}")
    a64, b64, c64 = (np.asarray(x).astype(np.float64) for x in (a, b, c))
    if np.isfinite(a64).all() and np.isfinite(b64).all() and np.isfinite(c64).all():
        total = _aligned_finite(a64, b64, c64, emins, grid)
    else:
        total = _aligned_any(a64, b64, c64, emins, grid)
    if significand is not None:
        with np.errstate(invalid="ignore", over="ignore"):
            lsb = _exponent(total, None) - (significand - 1)
            kept = np.ldexp(np.trunc(np.ldexp(total, -lsb)), lsb)
            total = np.where(np.isfinite(total) & (total != 0), kept, total)
    d = _mma_round(total, out, "rz")
    return np.where(d == 0, np.zeros((), out), d)  # a zero result is +0


_NO_EXPONENT = -(1 << 20)  # a zero addend's exponent: below every sum of two real ones


def _aligned_finite(a64, b64, c64, emins: tuple[int, int], grid: int) -> np.ndarray:
    """:func:`_aligned_sum`'s exact sum where every operand is finite (so is every
    product, each exact in float64): ``E`` from the operands' exponents, the products
    scaled by ``2^(grid - E)`` (a power of two: exact), truncated, summed (integers below
    ``(K + 1) 2^(grid + 2)``: exact in float64 for any K the instructions have) and scaled
    back. The same values :func:`_aligned_any` computes, 3.7 times faster at 64 x 128 x 16
    (the simulator's wgmma spent a quarter of its time here)."""
    bt = np.swapaxes(b64, -1, -2)
    ea = np.where(a64 != 0, _exponent(a64, emins[0]), _NO_EXPONENT).astype(np.int32)
    eb = np.where(bt != 0, _exponent(bt, emins[1]), _NO_EXPONENT).astype(np.int32)
    top = (ea[..., :, None, :] + eb[..., None, :, :]).max(axis=-1)
    top = np.maximum(top, np.where(c64 != 0, _exponent(c64, None), _NO_EXPONENT))
    top = np.where(top > _NO_EXPONENT // 2, top, 0)  # every addend zero: any grid
    inv = np.ldexp(1.0, grid - top)
    products = a64[..., :, None, :] * bt[..., None, :, :]
    products *= inv[..., None]
    return (np.trunc(products, out=products).sum(axis=-1) + np.trunc(c64 * inv)) / inv


def _aligned_any(a64, b64, c64, emins: tuple[int, int], grid: int) -> np.ndarray:
    """:func:`_aligned_sum`'s sum for any operands: where an output's addends are all
    finite, the aligned exact sum; else their IEEE float64 sum (inf, NaN)."""
    terms = mma_terms(a64, b64, c64)
    exps = np.concatenate(
        [
            _exponent(c64, None)[..., None],
            _exponent(a64, emins[0])[..., :, None, :]
            + np.swapaxes(_exponent(b64, emins[1]), -1, -2)[..., None, :, :],
        ],
        axis=-1,
    )
    finite = np.isfinite(terms).all(axis=-1)
    exps = np.where(terms != 0, exps, np.iinfo(np.int32).min)
    top = np.where(finite & (terms != 0).any(axis=-1), exps.max(axis=-1), 0)
    quantum = (top - grid)[..., None]
    with np.errstate(invalid="ignore", over="ignore"):
        cut = np.ldexp(np.trunc(np.ldexp(terms, -quantum)), quantum)  # exact scalings
        # multiples of 2^quantum below (K + 1) 2^(top + 2): at most 32 bits, exact
        return np.where(finite, cut.sum(axis=-1), terms.sum(axis=-1))


def _exponent(x: np.ndarray, emin: int | None) -> np.ndarray:
    """``floor(log2 |x|)`` as int64 (0 for zeros, masked by the caller); with ``emin``,
    subnormals (``|x| < 2^emin``) answer ``emin``."""
    _, e = np.frexp(np.where(x != 0, x, 1.0))
    e = e.astype(np.int64) - 1
    if emin is not None:
        e = np.where(np.abs(x) < 2.0**emin, emin, e)
    return e


def _sum_is_exact(terms: np.ndarray) -> np.ndarray:
    """Per output: is every float64 partial sum of these addends exact, in any order?

    With ``L`` the lowest set bit over the addends and ``|addend| < 2^E`` for all, every
    partial sum is a multiple of ``2^L`` below ``n 2^E`` in magnitude; it is a float64
    when ``E + ceil(log2 n) - L <= 53``. Non-finite addends answer False (they take the
    IEEE path)."""
    finite = np.isfinite(terms)
    nonzero = finite & (terms != 0)
    mant, exp = np.frexp(np.where(nonzero, terms, 1.0))  # |t| = |mant| 2^exp, 0.5 <= |mant| < 1
    exp = exp.astype(np.int64)  # frexp's exponents are int32
    scaled = np.abs(mant * 2.0**53).astype(np.int64)  # exact: 53 significand bits
    low_bit = np.log2((scaled & -scaled).astype(np.float64)).astype(np.int64)
    lsb = np.where(nonzero, exp - 53 + low_bit, np.iinfo(np.int64).max)
    top = np.where(nonzero, exp, np.iinfo(np.int64).min)
    spread = top.max(axis=-1) + int(np.ceil(np.log2(terms.shape[-1]))) - lsb.min(axis=-1)
    none = ~nonzero.any(axis=-1)
    return finite.all(axis=-1) & (none | (spread <= 53))


def _fsum_to_odd(terms: np.ndarray) -> float:
    """The exact sum of finite float64 ``terms`` rounded to float64 to odd: ``math.fsum``
    rounds it to nearest, and the correctly rounded remainder has the sign of the exact
    rounding error (the addends are multiples of ``2^-298``, so it never underflows)."""
    values = [float(t) for t in terms]
    near = math.fsum(values)
    rest = math.fsum([*values, -near])
    if rest == 0 or not math.isfinite(near):
        return near
    if np.float64(near).view(np.uint64) & np.uint64(1):
        return near
    return math.nextafter(near, math.inf if rest > 0 else -math.inf)
