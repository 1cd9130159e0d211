"""The reductions TIRx defines (``sum``, ``max``, ``min``), as data and shared rules.

What both reduction variants read: each reducer's identity and combine (as TIR and as
numpy, so the numpy emulation of a plan follows the same arithmetic), the accumulation
dtype rule, and the argument rules every reduction call must meet (axes in range and not
repeated, dst's extents the reduced shape of src's, the dtype pairs), each a predicate
that names the operand and says what to change.

Accumulation: float16 and bfloat16 data is widened exactly to float32 and combined there;
the result is rounded once (to nearest even) into dst. float32 and int32 combine in their
own dtype (int32 sums wrap, as CUDA's do). A float32 dst of 16-bit data keeps the float32
result: ``Tx.cta.sum(stats_f32, x_bf16, ...)`` is the float32 statistics a normalization
wants, where TVM requires equal dtypes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from tvm import tirx

from ..call import TileCall
from ..errors import Decline
from ..irfacts import as_int
from ..layout.register import MEMORY_AXIS, atoms_by_dim, register_view
from ..registry import predicate

# data dtype -> the dtype it is combined in
ACCUMULATE = {"float16": "float32", "bfloat16": "float32", "float32": "float32", "int32": "int32"}
# (src dtype, dst dtype) pairs besides equal ones: 16-bit data into float32 statistics
WIDENING = {("float16", "float32"), ("bfloat16", "float32")}


@dataclass(frozen=True)
class Reducer:
    """One reduction: its identity per dtype and its combine, in TIR and in numpy."""

    name: str
    tir: Callable[[Any, Any], Any]
    numpy: Callable[[np.ndarray, np.ndarray], np.ndarray]
    identity_float: float
    identity_int: int

    def identity(self, dtype: str) -> Any:
        value = self.identity_int if dtype.startswith(("int", "uint")) else self.identity_float
        return tirx.const(value, dtype)

    def identity_value(self, dtype: str) -> Any:
        """The identity as a numpy scalar of ``dtype`` (for the emulation)."""
        if dtype.startswith(("int", "uint")):
            return np.array(self.identity_int, dtype=dtype)[()]
        return np.array(self.identity_float, dtype=dtype)[()]


_I32 = np.iinfo(np.int32)
REDUCERS = {
    r.name: r
    for r in (
        # -0.0: the float identity of + (-0.0 + x is x for every x, +0.0 + -0.0 is not),
        # so a first add of the identity folds away
        Reducer("sum", lambda a, b: a + b, lambda a, b: a + b, -0.0, 0),
        # CUDA's fmaxf/fminf (what max(a, b) on floats compiles to) ignore a NaN operand,
        # as numpy's fmax/fmin do.
        Reducer("max", tirx.max, np.fmax, -np.inf, int(_I32.min)),
        Reducer("min", tirx.min, np.fmin, np.inf, int(_I32.max)),
    )
}


def accumulate_dtype(src_dtype: str) -> str:
    return ACCUMULATE[src_dtype]


# -- the arguments -----------------------------------------------------------------------
def axes_of(call: TileCall) -> tuple[int, ...] | str:
    """The normalized reduction axes (ascending, each in ``[0, ndim)``), or why not."""
    src = call.operand("src")
    ndim = len(src.region)
    raw = call.arg("axes")
    values = list(raw) if raw is not None else [-1]
    axes = []
    for a in values:
        a_i = as_int(a)
        if a_i is None:
            return f"axes {values} holds {a}, not a constant integer"
        if not -ndim <= a_i < ndim:
            return (
                f"axis {a_i} is out of range for src {src.name} with {ndim} dimension"
                f"{'s' if ndim != 1 else ''} (axes run from {-ndim} to {ndim - 1})"
            )
        axes.append(a_i % ndim)
    if len(set(axes)) != len(axes):
        return f"axes {[as_int(a) for a in values]} name dimension {_repeated(axes)} twice"
    return tuple(sorted(axes))


def _repeated(axes: list[int]) -> int:
    seen = set()
    for a in axes:
        if a in seen:
            return a
        seen.add(a)
    return -1


def accum_flag(call: TileCall) -> bool:
    value = call.arg("accum")
    return bool(as_int(value)) if value is not None else False


@dataclass(frozen=True)
class ReduceShape:
    """How dst's elements correspond to src's: ``axes`` are reduced; ``spatial`` the other
    dims of src, in order; ``dst_dims[i]`` the dst dimension of src dimension i (None where
    dst has none: a reduced axis dropped, or a unit dimension squeezed); ``kept`` maps a
    reduced axis that dst keeps with an extent above 1 to that extent (TVM's form where
    several threads' values of one row stay apart, or with ``thread_reduce=True`` every one
    of them holds the row's result)."""

    src_extents: tuple[int, ...]
    dst_extents: tuple[int, ...]
    axes: tuple[int, ...]
    dst_dims: tuple[int | None, ...]
    kept: tuple[tuple[int, int], ...] = ()
    # set where the axes come from src's layout, not the axes argument (see shape_of)
    axes_note: str | None = None


def reduce_shape(src: tuple[int, ...], dst: tuple[int, ...], axes: tuple[int, ...]):
    """The :class:`ReduceShape` of these extents, or why dst's do not fit."""
    spatial = [i for i in range(len(src)) if i not in axes]
    want = [src[i] for i in spatial]
    keep = [1 if i in axes else src[i] for i in range(len(src))]
    if len(dst) == len(src):
        kept, ok = [], True
        for i, (d, s) in enumerate(zip(dst, src, strict=True)):
            if i in axes:
                if d != 1 and (d > s or s % d):
                    ok = False
                elif d != 1:
                    kept.append((i, d))
            elif d != s:
                ok = False
        if ok:
            return ReduceShape(src, dst, axes, tuple(range(len(src))), tuple(kept))
    if list(dst) == want:
        dims = [None] * len(src)
        for j, i in enumerate(spatial):
            dims[i] = j
        return ReduceShape(src, dst, axes, tuple(dims), ())
    if [e for e in dst if e != 1] == [e for e in want if e != 1]:
        dims: list[int | None] = [None] * len(src)
        non_unit = [j for j, e in enumerate(dst) if e != 1]
        k = 0
        for i in spatial:
            if src[i] != 1:
                dims[i] = non_unit[k]
                k += 1
        return ReduceShape(src, dst, axes, tuple(dims), ())
    return (
        f"dst extents {list(dst)} are not the reduced shape of src extents {list(src)} over "
        f"axes {list(axes)}: dst needs extents {want} (or {keep}, keeping the reduced axes "
        "as 1)"
    )


def shape_of(call: TileCall) -> ReduceShape | str:
    """The call's :class:`ReduceShape`, or why its extents do not fit its axes.

    TVM's lane form: a register src with dimensions wholly over threads (the warp's lanes,
    or the scope's warps) that dst does not have, e.g. src ``[32, 2, 2]`` with dimension
    0 on the lanes into dst ``[2, 2]`` replicated over them, written with the default
    ``axes=-1``. dst's extents fit no reading of the last axis, so the reduced axes are
    those thread dimensions (TVM's built-in reads the warp's form from the layouts the
    same way); ``axes_note`` says so, and explain() shows it."""
    axes = axes_of(call)
    if isinstance(axes, str):
        return axes
    src, dst = call.operand("src"), call.operand("dst")
    src_ext, dst_ext = tuple(src.extents), tuple(dst.extents)
    shape = reduce_shape(src_ext, dst_ext, axes)
    if not isinstance(shape, str) or axes != (len(src_ext) - 1,):
        return shape
    lanes = _thread_only_dims(src)
    if not lanes or axes[0] in lanes or len(dst_ext) != len(src_ext) - len(lanes):
        return shape
    by_lanes = reduce_shape(src_ext, dst_ext, lanes)
    if isinstance(by_lanes, str):
        return shape
    note = (
        f"{list(lanes)}: src {src.name}'s dimension{'s' if len(lanes) > 1 else ''} over "
        f"threads, which dst {dst.name} drops (axes [-1] does not fit dst's extents)"
    )
    return replace(by_lanes, axes_note=note)


def _thread_only_dims(src) -> tuple[int, ...]:
    """The dimensions of a register src all of whose atoms lie on thread axes."""
    if src.memory != "local":
        return ()
    try:
        view = register_view(src)
        dims = atoms_by_dim(view.atoms, src.extents, src.name)
    except Decline:
        return ()
    return tuple(
        i
        for i, atoms in enumerate(dims)
        if atoms and all(axis != MEMORY_AXIS for _, _, axis in atoms)
    )


def thread_reduce(call: TileCall) -> bool:
    """TVM's ``thread_reduce=True``: a dst that keeps a reduced axis holds the whole
    reduction in each of its elements along it (else each keeps its threads' part)."""
    value = call.config.get("thread_reduce")
    return bool(as_int(value)) if value is not None else False


# -- predicates both variants run --------------------------------------------------------
def requires_regions(call: TileCall) -> tuple[bool, str | None]:
    """dst and src are tensor regions with constant extents and layouts."""
    for role in ("dst", "src"):
        o = call.operand(role)
        if o is None:
            return False, f"{call.op} {role} must be a tensor region"
        if any(e is None for e in o.extents):
            return False, f"{role} {o.name} region extents {list(o.extents)} are not all constant"
        if o.layout is None:
            return False, f"{role} {o.name} has no layout"
    return True, None


def requires_axes(call: TileCall) -> tuple[bool, str | None]:
    """The axes are constants in range, none repeated; dst has the reduced shape."""
    shape = shape_of(call)
    return (False, shape) if isinstance(shape, str) else (True, None)


def requires_dtypes(call: TileCall) -> tuple[bool, str | None]:
    """src is float16/bfloat16/float32/int32; dst has its dtype, or float32 for 16-bit src."""
    src, dst = call.operand("src"), call.operand("dst")
    if src.dtype not in ACCUMULATE:
        return False, (
            f"src {src.name} is {src.dtype}; a reduction takes {', '.join(ACCUMULATE)} (cast it "
            "first)"
        )
    if dst.dtype != src.dtype and (src.dtype, dst.dtype) not in WIDENING:
        return False, (
            f"dst {dst.name} is {dst.dtype} but src {src.name} is {src.dtype}; dst must have "
            "src's dtype, or float32 for float16/bfloat16 src"
        )
    return True, None


def requires_constant_flags(call: TileCall) -> tuple[bool, str | None]:
    """``accum`` and ``thread_reduce`` are constants: they decide what code is emitted."""
    for name, value in (
        ("accum", call.arg("accum")),
        ("thread_reduce", call.config.get("thread_reduce")),
    ):
        if value is not None and not isinstance(value, bool | int) and as_int(value) is None:
            return False, (
                f"{name}={value} is a runtime value; a reduction needs it a constant (it "
                "decides what code is emitted): branch on it around two calls"
            )
    return True, None


def requires_no_unknown_config(call: TileCall) -> tuple[bool, str | None]:
    """Config keys: ``thread_reduce`` only."""
    unknown = sorted(str(k) for k in call.config if str(k) != "thread_reduce")
    if unknown:
        return (
            False,
            f"config {', '.join(unknown)} has no meaning for a reduction (thread_reduce has)",
        )
    return True, None


COMMON_PREDICATES = [
    predicate(requires_regions),
    predicate(requires_axes),
    predicate(requires_constant_flags),
    predicate(requires_dtypes),
    predicate(requires_no_unknown_config),
]
