"""Warp-level MMA register fragments and the instructions that move them, as data.

PTX ISA 9.2 numbering, section 9.7.14.5 ("Matrix multiply-accumulate operation using mma
instruction"). Recorded: the ``.m8n8`` matrix of 16-bit elements and the twelve
ldmatrix/stmatrix forms that move it (``.x1/.x2/.x4``, plain or ``.trans``), and the
``mma.sync`` m16n8k16 / m16n8k8 instructions with their A, B, C/D register fragments. The
mma fragments are made of the 8x8 matrices, which is why one ldmatrix ``.x4`` loads an
m16n8k16 A fragment: ``copy -> ldstmatrix`` and ``gemm -> mma`` both read this module.

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


# -- mma.sync m16n8k* -------------------------------------------------------------------------
# PTX ISA, "Matrix Fragments for mma.m16n8k8" and "... mma.m16n8k16 with floating point
# type" (f16 / bf16 multiplicands, f32 accumulators). Lane ``l`` of the warp is
# ``groupID = l >> 2`` and ``threadID_in_group = l % 4`` (g and t below).
PTX_TYPES = {"float16": "f16", "bfloat16": "bf16", "float32": "f32"}


@dataclass(frozen=True)
class MmaInstruction:
    """One ``mma.sync.aligned.mMnNkK.row.col`` form: D (MxN) = A (MxK) B (KxN) + C.

    A and B hold two 16-bit elements per 32-bit register (the lower index in the low
    half); C and D one float32 per register. The fragment formulas give, for a lane and
    one of its registers, the (row, column) of the element it holds."""

    m: int
    n: int
    k: int
    ab_dtype: str  # A and B: "float16" or "bfloat16"
    cd_dtype: str  # C and D: "float32"
    min_sm: int
    ptx: str = "mma"

    @property
    def shape(self) -> str:
        return f"m{self.m}n{self.n}k{self.k}"

    @property
    def spelling(self) -> str:
        """The instruction as PTX spells it: ``.dtype.atype.btype.ctype``."""
        ab, cd = PTX_TYPES[self.ab_dtype], PTX_TYPES[self.cd_dtype]
        return f"mma.sync.aligned.{self.shape}.row.col.{cd}.{ab}.{ab}.{cd}"

    @property
    def a_words(self) -> int:
        return self.m * self.k // (2 * WARP_LANES)

    @property
    def b_words(self) -> int:
        return self.k * self.n // (2 * WARP_LANES)

    @property
    def c_registers(self) -> int:
        return self.m * self.n // WARP_LANES

    def a_element(self, lane: Any, word: Any, half: Any) -> tuple[Any, Any]:
        """(row m, column k) of A in ``half`` of ``lane``'s register ``word``: words 0/1
        rows g / g + 8, words 2/3 (k16 only) the same rows 8 columns on."""
        g, t = lane >> 2, lane % 4
        return g + 8 * (word % 2), 2 * t + half + 8 * (word // 2)

    def b_element(self, lane: Any, word: Any, half: Any) -> tuple[Any, Any]:
        """(row k, column n) of B in ``half`` of ``lane``'s register ``word``: column g,
        rows 2t, 2t + 1 (word 1, k16 only: 8 rows on)."""
        g, t = lane >> 2, lane % 4
        return 2 * t + half + 8 * word, g

    def c_element(self, lane: Any, register: Any) -> tuple[Any, Any]:
        """(row m, column n) of C or D in ``lane``'s register ``register`` (0..3): rows g
        (registers 0, 1) and g + 8 (2, 3), columns 2t and 2t + 1."""
        g, t = lane >> 2, lane % 4
        return g + 8 * (register // 2), 2 * t + register % 2


# The sm floor of each form (PTX ISA "mma" target notes): m16n8k8 .f16 on sm_75, the rest
# (m16n8k16, and .bf16 at either K) on sm_80.
MMA_INSTRUCTIONS = tuple(
    MmaInstruction(16, 8, k, ab, "float32", 75 if (k, ab) == (8, "float16") else 80)
    for k in (16, 8)
    for ab in ("float16", "bfloat16")
)


def mma_instructions(ab_dtype: str, cd_dtype: str) -> tuple[MmaInstruction, ...]:
    """The forms for these dtypes, widest K first."""
    return tuple(i for i in MMA_INSTRUCTIONS if (i.ab_dtype, i.cd_dtype) == (ab_dtype, cd_dtype))
