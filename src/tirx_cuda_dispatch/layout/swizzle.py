"""Swizzle handling: TVM's ``ComposeLayout`` swizzle as data, on ints and on TIR (the bit
function itself is :mod:`..isa.swizzle`'s).

TVM 0.27's ``ComposeLayout(per_element=M, swizzle_len=B, atom_len=S, tile)`` with
``swizzle_inner=True`` maps a tile offset ``o`` to ``o ^ (((o >> (M + S)) & (2**B - 1)) << M)``
(CuTe's ``Swizzle<B, M, S>``): the ``2**M`` elements of one *unit* stay together and the
units of a row are permuted. A vector access stays contiguous through the swizzle when it
fits in one unit and is aligned to its width, which is why vector widths are capped at
:attr:`Swizzle.unit`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import tvm
from tvm.tirx.layout import ComposeLayout

from ..errors import Decline
from ..irfacts import as_int, prove_multiple
from ..isa import swizzle as isa_swizzle
from ..isa.swizzle import byte_swizzle

__all__ = ["Swizzle", "byte_swizzle"]


@dataclass(frozen=True)
class Swizzle(isa_swizzle.Swizzle):
    """:class:`..isa.swizzle.Swizzle` (the bit function) read from a TVM layout and
    applied to TIR offsets too."""

    @classmethod
    def of(cls, layout: Any, operand: str = "operand") -> Swizzle | None:
        """The swizzle of ``layout``, None for a plain TileLayout; declines inner=False."""
        if not isinstance(layout, ComposeLayout):
            return None
        if not bool(layout.swizzle_inner):
            raise Decline(
                f"{operand} layout is an outer swizzle (swizzle_inner=False), which is not supported"
            )
        return cls(int(layout.per_element), int(layout.swizzle_len), int(layout.atom_len))

    def apply(self, offset: Any) -> Any:
        """The swizzled offset: on ints, or on a TIR expression (shift, and, xor: a few
        integer ops per access).

        On a TIR sum, the terms that are provably multiples of :attr:`period` (a stage's
        or a warp's offset, the high part of a constant) are added after the swizzle
        instead of going through it: ``apply(k * period + o)`` is ``k * period +
        apply(o)``. The result is the same number; the kernel then swizzles only the part
        that varies within a period (the lane's), which the compiler can compute once
        outside the loops, and the rest becomes plain additions and immediate offsets."""
        if self.bits == 0:
            return offset
        if isinstance(offset, tvm.tirx.Add):
            outside, inside = self.split(offset)
            if outside is not None:
                return outside + self._xor(inside)
        return self._xor(offset)

    def split(self, offset: Any) -> tuple[Any, Any]:
        """``(outside, inside)`` with ``outside + inside == offset`` and ``outside`` a
        multiple of :attr:`period`, from the terms of the sum ``offset``; ``outside`` is
        None when no term moves."""
        outside: list[Any] = []
        inside: list[Any] = []
        for term in _terms(offset):
            value = as_int(term)
            if value is not None:
                low = value % self.period
                if value - low:
                    outside.append(tvm.tirx.const(value - low, str(term.ty)))
                if low:
                    inside.append(tvm.tirx.const(low, str(term.ty)))
            elif prove_multiple(term, self.period):
                outside.append(term)
            else:
                inside.append(term)
        if not outside:
            return None, offset
        dtype = str(offset.ty)
        return _sum(outside, dtype), _sum(inside, dtype)


def _terms(expr: Any) -> list[Any]:
    """The addends of a TIR sum, outer ``Add`` nodes flattened."""
    if isinstance(expr, tvm.tirx.Add):
        return _terms(expr.a) + _terms(expr.b)
    return [expr]


def _sum(terms: list[Any], dtype: str) -> Any:
    if not terms:
        return tvm.tirx.const(0, dtype)
    total = terms[0]
    for term in terms[1:]:
        total = total + term
    return total
