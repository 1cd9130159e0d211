"""The swizzle bit function: which address bits permute which (CuTe's ``Swizzle<B, M, S>``).

``o -> o ^ (((o >> (M + S)) & (2**B - 1)) << M)``: the ``2**M`` elements (or bytes) of one
*unit* stay together and the units of a row are permuted by the bits ``S`` above them.
TMA and wgmma permute the 16-byte units of a shared-memory address by the address bits 3
above them: ``Swizzle<B, 4, 3>`` on bytes, B = 1, 2, 3 for the 32-, 64- and 128-byte
modes (CUDA programming guide, TMA swizzle; PTX ISA 9.7.15.5.1.2.1.3). TVM's
``ComposeLayout`` swizzle is the same function on element offsets
(:mod:`..layout.swizzle` reads it from a layout and applies it to TIR).

Nothing here builds IR: the formulas take ints.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Swizzle:
    """``o -> o ^ (((o >> (per_element + shift)) & (2**bits - 1)) << per_element)``."""

    per_element: int  # log2 of the elements in one swizzle unit (M)
    bits: int  # how many unit-index bits are permuted (B)
    shift: int  # distance from the permuted bits to the bits that permute them (S)

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
        """The swizzled offset (of an int, or of anything with ``^ >> & <<``)."""
        if self.bits == 0:
            return offset
        return self._xor(offset)

    def _xor(self, offset: Any) -> Any:
        return offset ^ (
            ((offset >> (self.per_element + self.shift)) & self.mask) << self.per_element
        )

    def __str__(self) -> str:
        return f"Swizzle<{self.bits},{self.per_element},{self.shift}>"


def byte_swizzle(swizzle: Swizzle | None, elem_bytes: int) -> int | None:
    """The hardware swizzle mode (bytes: 0 for none, 32, 64, 128) that ``swizzle`` on
    elements of ``elem_bytes`` is, None when it is none of them: ``Swizzle<B, 4, 3>`` on
    bytes is 32 bytes for B = 1, 64 for 2, 128 for 3."""
    if swizzle is None or swizzle.bits == 0:
        return 0
    if swizzle.unit * elem_bytes == 16 and swizzle.shift == 3 and 1 <= swizzle.bits <= 3:
        return 16 << swizzle.bits
    return None
