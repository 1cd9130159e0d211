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

from tvm.tirx.layout import ComposeLayout

from ..errors import Decline


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
        integer ops per access)."""
        if self.bits == 0:
            return offset
        return offset ^ (
            ((offset >> (self.per_element + self.shift)) & self.mask) << self.per_element
        )

    def __str__(self) -> str:
        return f"Swizzle<{self.bits},{self.per_element},{self.shift}>"
