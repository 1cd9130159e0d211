"""One element of an elementwise call, as both variants evaluate it.

A variant decides where each element of each operand is (its partition) and how it is
read (a register, a lane of a vector loaded from shared memory); :class:`Elements` turns
those reads into the op's values by role: a tensor input's value is the read the variant
makes, a scalar's is the scalar, and a predicate's (select's ``pred``) is its body applied
to the element's coordinates in dst's region. A pair form's helper call takes the same
inputs as addresses, a scalar broadcast into a register pair once (:meth:`Elements.pairs`).

The coordinates come from a virtual operand, :func:`index_view`: a row-major view of dst's
region with base 0 that joins the partition like any other operand, so that its offset
for an element is the element's row-major index; :func:`coordinates` unravels it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..build import Body, address_of, const, index
from ..call import Operand, TileCall
from ..codegen import helper_call
from ..layout.atoms import MemoryView
from .ops import ElementwiseOp, Input, PackedForm

INDEX = "index"  # the virtual operand's name (in partitions and reasons)


def index_view(extents: Sequence[int]) -> MemoryView:
    """The row-major view of a region of ``extents`` (base 0, no swizzle): its offset of an
    element is the element's row-major index."""
    atoms, stride = [], 1
    for extent in reversed(extents):
        if extent != 1:
            atoms.insert(0, (extent, stride))
        stride *= extent
    return MemoryView(INDEX, tuple(atoms), 0)


def coordinates(flat: Any, extents: Sequence[int]) -> list[Any]:
    """Row-major index ``flat`` (an int or a TIR expression) as one coordinate per
    dimension of ``extents``; the outermost needs no wrap (``flat < prod(extents)``)."""
    out: list[Any] = []
    inner, outermost = 1, next((d for d, e in enumerate(extents) if e != 1), len(extents))
    for d in range(len(extents) - 1, -1, -1):
        extent = extents[d]
        if extent == 1:
            out.insert(0, const(0, "int32"))
            continue
        digit = flat if inner == 1 else flat // inner
        out.insert(0, index(digit if d == outermost else digit % extent))
        inner *= extent
    return out


@dataclass(frozen=True)
class Elements:
    """What each element of one call reads: the op, its inputs in argument order, the
    predicate (a LambdaExpr, or None) and dst's region extents."""

    op: ElementwiseOp
    inputs: tuple[Input, ...]
    predicate: Any
    extents: tuple[int, ...]

    @classmethod
    def of(cls, op: ElementwiseOp, call: TileCall) -> Elements:
        pred = call.arg(op.predicate) if op.predicate else None
        return cls(op, tuple(op.inputs(call.args)), pred, call.operand("dst").extents)

    def operands(self, call: TileCall) -> list[Operand]:
        """dst, then the tensor inputs in argument order (the partition's operands)."""
        return [call.operand("dst")] + [
            call.operand(i.role) for i in self.inputs if not i.is_scalar
        ]

    def values(self, tensor: Callable[[int], Any], flat: Any = None) -> dict[str, Any]:
        """Each role's value: ``tensor(k)`` reads tensor operand ``k`` (1 is the first
        input; 0 is dst); ``flat`` is the element's row-major index, for the predicate."""
        values, k = {}, 0
        for inp in self.inputs:
            if inp.is_scalar:
                values[inp.role] = inp.scalar
            else:
                k += 1
                values[inp.role] = tensor(k)
        if self.predicate is not None:
            values[self.op.predicate] = self.predicate.apply(coordinates(flat, self.extents))
        return values

    def pairs(self, b: Body, dtype: str) -> dict[str, Any]:
        """Each scalar input broadcast once into a two-element register pair, by role."""
        out = {}
        for inp in self.inputs:
            if inp.is_scalar:
                out[inp.role] = b.local(f"{inp.role}_pair", dtype, 2)
                for j in range(2):
                    b.store(out[inp.role], j, inp.scalar)
        return out

    def pair_call(self, form: PackedForm, tensor: Callable[[int], Any], pairs: dict) -> Any:
        """``form``'s helper on one pair: ``tensor(k)`` is the address of tensor operand
        ``k``'s pair (0 is dst), a scalar input's is its broadcast pair's."""
        args, k = [tensor(0)], 0
        for inp in self.inputs:
            if inp.is_scalar:
                args.append(address_of(pairs[inp.role], 0))
            else:
                k += 1
                args.append(tensor(k))
        return helper_call(form.helper, form.meaning, form.source(len(self.inputs)), *args)
