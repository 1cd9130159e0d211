"""Warp-level MMA register fragments and the instructions that move them, as data.

PTX ISA 9.2 numbering, section 9.7.14.5 ("Matrix multiply-accumulate operation using mma
instruction"). Recorded so far: the ``.m8n8`` matrix of 16-bit elements and the twelve
ldmatrix/stmatrix forms that move it (``.x1/.x2/.x4``, plain or ``.trans``). The mma.sync
m16n8k16 / m16n8k8 operand fragments belong here too: they are made of these 8x8
matrices, which is why one ldmatrix ``.x4`` loads an m16n8k16 A fragment.

Formulas take ints or numpy arrays alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

WARP_LANES = 32


@dataclass(frozen=True)
class M8N8Fragment:
    """One 8x8 matrix of 16-bit elements spread over a warp, one 32-bit register per lane
    (PTX ISA 9.2 section 9.7.14.5.15, figure "ldmatrix fragment layout for one 8x8 Matrix
    with 16-bit elements"): lane ``i`` holds row ``i // 4``, columns ``2 (i % 4)`` (the
    register's low half) and ``2 (i % 4) + 1`` (its high half). A matrix row is 8
    contiguous elements, 16 bytes, and its address is one lane's."""

    rows: int = 8
    row_elems: int = 8  # elements of one row: 16 bytes
    elem_bits: int = 16
    ptx: str = "9.7.14.5.15"

    def element(self, lane: Any, half: Any, trans: bool = False) -> tuple[Any, Any]:
        """(row, column) of the matrix as stored that ``half`` of ``lane``'s register holds.
        ``.trans`` moves the stored matrix's transpose: the lane holds column ``lane // 4``,
        rows ``2 (lane % 4)`` and ``+ 1``."""
        row, col = lane // 4, 2 * (lane % 4) + half
        return (col, row) if trans else (row, col)

    def holder(self, row: Any, col: Any, trans: bool = False) -> tuple[Any, Any]:
        """(lane, register half) holding element (row, col) of the matrix as stored: the
        inverse of :meth:`element`."""
        if trans:
            row, col = col, row
        return 4 * row + col // 2, col % 2


M8N8 = M8N8Fragment()


@dataclass(frozen=True)
class MatrixTransfer:
    """One ldmatrix or stmatrix form (PTX ISA 9.2 sections 9.7.14.5.15 "Warp-level matrix
    load instruction: ldmatrix" and 9.7.14.5.16 "... store instruction: stmatrix"): ``num``
    ``.m8n8`` matrices of ``.b16`` elements between shared memory and registers, register
    ``j`` of every lane holding matrix ``j``. Lanes ``8j .. 8j+7`` give the addresses of the
    rows of matrix ``j``; the other lanes' addresses are not read."""

    op: str  # "ldmatrix" (shared -> registers) or "stmatrix" (registers -> shared)
    num: int  # .x1 / .x2 / .x4: matrices, so 32-bit registers per lane
    trans: bool
    min_sm: int
    ptx: str
    fragment: M8N8Fragment = M8N8

    @property
    def direction(self) -> str:
        return "ld" if self.op == "ldmatrix" else "st"

    @property
    def spelling(self) -> str:
        """The instruction as PTX spells it."""
        trans = ".trans" if self.trans else ""
        return f"{self.op}.sync.aligned.m8n8.x{self.num}{trans}.shared.b16"

    def address_lane(self, matrix: Any, row: Any) -> Any:
        """The lane whose address is row ``row`` of matrix ``matrix``."""
        return self.fragment.rows * matrix + row


# The sm floor (ldmatrix sm_75, stmatrix sm_90) and section of each instruction.
_INSTRUCTIONS = {"ldmatrix": (75, "9.7.14.5.15"), "stmatrix": (90, "9.7.14.5.16")}
MATRIX_NUMS = (1, 2, 4)

MATRIX_TRANSFERS = tuple(
    MatrixTransfer(op, num, trans, min_sm, ptx)
    for op, (min_sm, ptx) in _INSTRUCTIONS.items()
    for num in MATRIX_NUMS
    for trans in (False, True)
)


def matrix_transfer(direction: str, num: int, trans: bool) -> MatrixTransfer:
    """The ldmatrix (``direction`` "ld") or stmatrix ("st") form of ``num`` matrices."""
    return next(
        t for t in MATRIX_TRANSFERS if (t.direction, t.num, t.trans) == (direction, num, trans)
    )
