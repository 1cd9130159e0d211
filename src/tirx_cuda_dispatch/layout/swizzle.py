"""Swizzle handling: TVM's ``ComposeLayout`` swizzle as data, on ints and on TIR.

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


@dataclass(frozen=True)
class Swizzle:
    """``o -> o ^ (((o >> (per_element + shift)) & (2**bits - 1)) << per_element)``."""

    per_element: int  # log2 of the elements in one swizzle unit (M)
    bits: int  # how many unit-index bits are permuted (B)
    shift: int  # distance from the permuted bits to the bits that permute them (S)

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

    @property
    def unit(self) -> int:
        """Elements kept together by the swizzle: the widest vector that stays contiguous."""
        return 1 << self.per_element

    @property
    def period(self) -> int:
        """Offsets this far apart are swizzled alike: ``apply(k * period + o)`` is
        ``k * period + apply(o)`` (the permuting bits lie below it)."""
        return 1 << (self.per_element + self.shift + self.bits)

    @property
    def mask(self) -> int:
        return (1 << self.bits) - 1

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

    def _xor(self, offset: Any) -> Any:
        return offset ^ (
            ((offset >> (self.per_element + self.shift)) & self.mask) << self.per_element
        )

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

    def __str__(self) -> str:
        return f"Swizzle<{self.bits},{self.per_element},{self.shift}>"


def byte_swizzle(swizzle: Swizzle | None, elem_bytes: int) -> int | None:
    """The hardware swizzle mode (bytes: 0 for none, 32, 64, 128) that ``swizzle`` on
    elements of ``elem_bytes`` is, None when it is none of them. TMA and wgmma permute the
    16-byte units of a shared address by the address bits 3 above them: ``Swizzle<B, 4,
    3>`` on bytes, 32 bytes for B = 1, 64 for 2, 128 for 3 (CUDA programming guide, TMA
    swizzle; PTX ISA 9.7.15.5.1.2.1.3)."""
    if swizzle is None or swizzle.bits == 0:
        return 0
    if swizzle.unit * elem_bytes == 16 and swizzle.shift == 3 and 1 <= swizzle.bits <= 3:
        return 16 << swizzle.bits
    return None


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
