"""What the reduction tests check besides bit-equality with the plan's emulation: the
result is within the documented error bound of numpy's reduction (docs/reduction.md)."""

from __future__ import annotations

import numpy as np

import tirx_cuda_dispatch as tcd
from tirx_cuda_dispatch.reduction.ops import shape_of

UNIT = {"float32": 2.0**-24, "float16": 2.0**-11, "bfloat16": 2.0**-8}


def report_of(kernel, op: str | None = None, target: str = "sm_90a"):
    """The explain() report of the kernel's (first) reduction call."""
    ops = (op,) if op else ("sum", "max", "min")
    return next(r for r in tcd.explain(kernel, target) if r.op in ops)


def region(array: np.ndarray, where) -> np.ndarray:
    """``array[where]`` for ``where`` = (start, extents), or the whole array."""
    if where is None:
        return array
    return array[tuple(slice(a, a + e) for a, e in zip(*where, strict=True))]


def check_against_numpy(report, got, src, old=None, axes=None) -> None:
    """``got`` (dst's region) against numpy's reduction of ``src`` computed in float64:
    max/min exactly (rounded to dst's dtype); a sum within ``(n + 1) u |x|_1 + u_dst |s|``
    (n elements accumulated with unit roundoff ``u`` of float32, one rounding into dst).
    ``axes`` overrides the call's (a dst that keeps a reduced axis: the test says which
    of src's values meet in each output); else the axes the call reduces (``shape_of``:
    its axes argument, or src's lane dimensions in TVM's lane form)."""
    op, call = report.op, report.call_object
    axes = shape_of(call).axes if axes is None else axes
    if np.issubdtype(got.dtype, np.integer):  # exact, wrapping as CUDA's int32 adds do
        fn = {"sum": np.add, "max": np.maximum, "min": np.minimum}[op]
        with np.errstate(over="ignore"):
            want = fn.reduce(src, axis=axes, dtype=got.dtype).reshape(got.shape)
            if old is not None:
                want = fn(want, old)
        np.testing.assert_array_equal(got, want)
        return
    dst_dtype = str(got.dtype) if got.dtype.name != "bfloat16" else "bfloat16"
    x = src.astype(np.float64)
    shape = got.shape
    if op == "sum":
        exact = x.sum(axis=axes)
        mag = np.abs(x).sum(axis=axes)
    else:
        fn = np.fmax if op == "max" else np.fmin
        exact = fn.reduce(x, axis=axes)
        mag = np.zeros_like(exact)
    exact = exact.reshape(shape)
    mag = mag.reshape(shape)
    if old is not None:
        o = old.astype(np.float64)
        if op == "sum":
            exact, mag = exact + o, mag + np.abs(o)
        else:
            exact = (np.fmax if op == "max" else np.fmin)(exact, o)
    if op != "sum":
        np.testing.assert_array_equal(got, exact.astype(got.dtype))
        return
    n = int(np.prod([src.shape[a] for a in axes])) + (old is not None)
    bound = (n + 1) * UNIT["float32"] * mag + UNIT.get(dst_dtype, 0.0) * np.abs(exact)
    err = np.abs(got.astype(np.float64) - exact)
    assert np.all(err <= bound + 1e-300), f"error {err.max()} above the bound {bound.max()}"
