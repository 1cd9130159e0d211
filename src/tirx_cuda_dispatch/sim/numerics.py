"""Numbers as the GPU computes them: TIR dtypes as numpy dtypes, casts and rounding.

Every value is a numpy array over the threads (``(T,)`` for a scalar, ``(T, lanes)`` for a
vector). Arithmetic happens in the result's own dtype, which is exact IEEE for float32
and float64. float16 and bfloat16 arithmetic goes through float32 and rounds once more;
for ``+ - * / sqrt`` that double rounding is innocuous (float32 has at least 2p+2 bits
for both, Figueroa 1995), so the result is the correctly rounded one the hardware's
``HADD``/``HMUL``/``HFMA``-family and ``__h*`` intrinsics give. Fused multiply-add (the
packed ``fma`` forms, and ``a*b+c`` that CUDA contracts) rounds once, through float64
with round-to-odd (:func:`fma`).
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

from .errors import SimError

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
    "float32": np.dtype(np.float32),
    "float64": np.dtype(np.float64),
}


def parse_dtype(dtype: Any) -> tuple[np.dtype, int]:
    """``"uint32x4"`` -> (uint32, 4); ``"float16"`` -> (float16, 1)."""
    text = str(dtype)
    base, lanes = text, 1
    if "x" in text and text not in _SCALARS:
        base, _, count = text.rpartition("x")
        if not count.isdigit():
            base, lanes = text, 1
        else:
            lanes = int(count)
    if base not in _SCALARS:
        raise SimError(f"the simulator has no dtype {text!r}")
    return _SCALARS[base], lanes


def scalar_name(dtype: np.dtype) -> str:
    for name, dt in _SCALARS.items():
        if dt == dtype:
            return name
    raise SimError(f"no TIR name for numpy dtype {dtype}")


def is_float(dtype: np.dtype) -> bool:
    return dtype.kind == "f" or dtype == _SCALARS["bfloat16"]


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
