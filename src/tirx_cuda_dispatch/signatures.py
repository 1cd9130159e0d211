"""Every tile-primitive op of TIRx, as data: each argument's name, kind and access.

TVM 0.27 defines 30 ops ``tirx.tile.<name>`` (docs/tirx/tile_primitives.rst; the
arguments in the order ``tvm.tirx.operator.tile_primitive.ops`` reads them). A
:class:`Signature` names each positional argument, says what it is (a tensor region, a
region or a scalar, a scalar, reduction axes, a flag, an op, a predicate) and how the op
touches it (read, write, or both). Everything that asks "which argument is the output"
reads it here: the call model, bounds, explain's access column, draw and the fuzzer. An
op with several outputs (``binary_reduce``) has several ``write`` arguments; nothing
assumes argument 0 is the only one.

Argument names follow the TVMScript builders (``Tx.sum(dst, src, axes, accum)``,
``Tx.gemm(D, A, B, C, transpose_A, transpose_B, alpha, beta)``); a binary elementwise op's
inputs are ``src`` and ``src2``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

# Argument kinds.
TENSOR = "tensor"  # a region of a buffer
TENSOR_OR_SCALAR = "tensor|scalar"  # a region, or a scalar broadcast over the result
SCALAR = "scalar"  # a value (PrimExpr)
AXES = "axes"  # reduction axes: a tuple of ints
FLAG = "flag"  # a bool
OP = "op"  # another tile op (binary_reduce's binary_op)
PREDICATE = "predicate"  # a LambdaExpr over the dst indices (select)

# Accesses.
READ, WRITE, READ_WRITE, NONE = "read", "write", "read-write", "-"


@dataclass(frozen=True)
class Param:
    """One positional argument: name, kind, access; ``accum`` names the flag that makes a
    ``write`` argument read-write too (a reduction's ``accum=True`` reads dst)."""

    name: str
    kind: str
    access: str = NONE
    accum: str | None = None

    @property
    def tensor(self) -> bool:
        return self.kind in (TENSOR, TENSOR_OR_SCALAR)


@dataclass(frozen=True)
class Signature:
    """An op's positional arguments, in order. ``forms`` lists alternative argument lists
    told apart by their length (``gemm_async`` with and without scale factors)."""

    op: str
    params: tuple[Param, ...]
    forms: tuple[tuple[Param, ...], ...] = ()

    def params_for(self, nargs: int) -> tuple[Param, ...]:
        """The parameter list that describes a call with ``nargs`` arguments."""
        for form in (self.params, *self.forms):
            if len(form) == nargs:
                return form
        return self.params

    def index(self, name: str, nargs: int | None = None) -> int:
        params = self.params if nargs is None else self.params_for(nargs)
        names = [p.name for p in params]
        if name not in names:
            raise KeyError(f"op {self.op} has no argument {name!r}; it has {names}")
        return names.index(name)

    def access(self, param: Param, args: Sequence[Any]) -> str:
        """``param``'s access in a call with arguments ``args`` (a ``write`` argument is
        read-write where its ``accum`` flag is set)."""
        if param.accum is not None and param.access == WRITE:
            i = self.index(param.accum, len(args))
            if i < len(args) and _truthy(args[i]):
                return READ_WRITE
        return param.access


def _truthy(value: Any) -> bool:
    inner = getattr(value, "value", value)
    try:
        return bool(inner)
    except (TypeError, ValueError):
        return True  # a runtime flag: the argument may be read


def _p(name: str, kind: str, access: str = NONE, accum: str | None = None) -> Param:
    return Param(name, kind, access, accum)


_DST = _p("dst", TENSOR, WRITE)
_SRC = _p("src", TENSOR, READ)
_UNARY = (_DST, _SRC, _p("bias", TENSOR_OR_SCALAR, READ), _p("scale", SCALAR))
_BINARY = (_DST, _p("src", TENSOR_OR_SCALAR, READ), _p("src2", TENSOR_OR_SCALAR, READ))
_REDUCE = (
    _p("dst", TENSOR, WRITE, accum="accum"),
    _SRC,
    _p("axes", AXES),
    _p("accum", FLAG),
)


def _sig(op: str, *params: Param, forms: tuple[tuple[Param, ...], ...] = ()) -> Signature:
    return Signature(op, tuple(params), forms)


_GEMM_ASYNC_TAIL = (_p("transA", FLAG), _p("transB", FLAG), _p("accum", FLAG))
_GEMM_ASYNC_C = _p("C", TENSOR, WRITE, accum="accum")

SIGNATURES: dict[str, Signature] = {
    s.op: s
    for s in (
        _sig("copy", _DST, _SRC),
        _sig("copy_async", _DST, _SRC),
        _sig("permute_layout", _DST, _SRC),
        _sig(
            "gemm",
            _p("D", TENSOR, WRITE),
            _p("A", TENSOR, READ),
            _p("B", TENSOR, READ),
            _p("C", TENSOR, READ),
            _p("transpose_A", FLAG),
            _p("transpose_B", FLAG),
            _p("alpha", SCALAR),
            _p("beta", SCALAR),
        ),
        _sig(
            "gemm_async",
            _GEMM_ASYNC_C,
            _p("A", TENSOR, READ),
            _p("B", TENSOR, READ),
            *_GEMM_ASYNC_TAIL,
            forms=(
                (
                    _GEMM_ASYNC_C,
                    _p("A", TENSOR, READ),
                    _p("B", TENSOR, READ),
                    _p("SFA", TENSOR, READ),
                    _p("SFB", TENSOR, READ),
                    *_GEMM_ASYNC_TAIL,
                ),
            ),
        ),
        _sig("fill", _DST, _p("value", SCALAR)),
        _sig("memset", _DST, _p("value", SCALAR)),
        _sig("zero", _DST, _SRC),
        _sig("cast", _DST, _SRC),
        *(_sig(name, *_UNARY) for name in ("sqrt", "exp", "exp2", "log2")),
        _sig("reciprocal", _DST, _SRC),
        _sig("silu", _DST, _SRC),
        *(_sig(name, *_BINARY) for name in ("add", "sub", "mul", "fdiv", "maximum", "minimum")),
        _sig(
            "fma",
            _DST,
            _SRC,
            _p("scale", TENSOR_OR_SCALAR, READ),
            _p("bias", TENSOR_OR_SCALAR, READ),
        ),
        _sig(
            "select",
            _DST,
            _p("true_value", TENSOR_OR_SCALAR, READ),
            _p("false_value", TENSOR_OR_SCALAR, READ),
            _p("pred", PREDICATE),
        ),
        *(_sig(name, *_REDUCE) for name in ("sum", "max", "min")),
        _sig(
            "binary_reduce",
            _p("binary_output", TENSOR, WRITE),
            _p("reduce_output", TENSOR, WRITE),
            _p("binary_input1", TENSOR_OR_SCALAR, READ),
            _p("binary_input2", TENSOR_OR_SCALAR, READ),
            _p("binary_op", OP),
            _p("reduce_op", OP),
            _p("reduce_axes", AXES),
        ),
        _sig(
            "unary_reduce",
            _p("unary_output", TENSOR, WRITE),
            _p("reduce_output", TENSOR, WRITE),
            _p("unary_input", TENSOR, READ),
            _p("unary_op", OP),
            _p("reduce_op", OP),
            _p("bias", TENSOR_OR_SCALAR, READ),
            _p("scale", SCALAR),
            _p("reduce_axes", AXES),
        ),
        _sig(
            "binary_chain",
            _p("output", TENSOR, WRITE),
            _p("data", TENSOR, READ),
            _p("operand0", TENSOR_OR_SCALAR, READ),
            _p("operand1", TENSOR_OR_SCALAR, READ),
            _p("op0", OP),
            _p("op1", OP),
            _p("reverse1", FLAG),
        ),
        _sig(
            "reduce_negate",
            _p("output", TENSOR, WRITE, accum="accum"),
            _p("input", TENSOR, READ),
            _p("reduce_axes", AXES),
            _p("accum", FLAG),
            _p("reduce_op", OP),
        ),
    )
}


def signature(op: str) -> Signature:
    """The signature of ``op`` (the bare name, ``"sum"``); a ValueError naming the
    catalog otherwise."""
    sig = SIGNATURES.get(op)
    if sig is None:
        raise ValueError(
            f"{op!r} is not a tile-primitive op of TIRx; the ops are: {', '.join(sorted(SIGNATURES))}"
        )
    return sig


def signature_or_positional(op: str, nargs: int) -> Signature:
    """The signature of ``op``, or for an op outside the catalog (a newer TVM's) one that
    names its arguments ``arg0``, ``arg1``, ... with unknown access."""
    found = SIGNATURES.get(op)
    if found is not None:
        return found
    return Signature(op, tuple(Param(f"arg{i}", TENSOR_OR_SCALAR, NONE) for i in range(nargs)))
