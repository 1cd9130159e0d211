"""tcgen05.ld / tcgen05.st as data: the instruction shapes and the tensor-memory data paths.

PTX ISA 9.2 numbering: shapes and their fragments 9.7.16.2.3.1, data-path layouts
9.7.16.10.5, the instructions 9.7.16.8.3/4 (Table 49 bounds ``.num``). Each record has its
element function: a shape's :meth:`Tcgen05Shape.cell` (which TMEM cell a lane's register
moves), a data path's ``place`` (which TMEM lane and column a tile element lies at).
Fitting TVM layouts onto them is ``layout/tmem.py``'s job (through ``layout/fit.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# Families whose PTX has tcgen05 (NVRTC 13 accepts exactly these with an a/f suffix;
# sm_120 Blackwell has no tensor memory).
TMEM_FAMILIES = (100, 103, 110)

# PTX ISA 9.2 Table 49: a .num whose vector would exceed 128 registers does not exist.
MAX_REGS_PER_INSTRUCTION = 128


@dataclass(frozen=True)
class Tcgen05Shape:
    """One ``.shape`` of tcgen05.ld/st (PTX ISA 9.2 section 9.7.16.2.3.1, "Matrix fragments").

    ``fragment(t, r)`` says where register ``r`` of lane ``t`` of one ``.x1`` instruction
    lives in TMEM: (lane, 32-bit column), both relative to the instruction's address;
    ``.16x32bx2``'s upper half-warp adds ``immHalfSplitoff`` to the column.
    """

    name: str
    lanes: int  # TMEM lanes one warp touches per access
    bits: int  # bits per lane per .num unit and access
    accesses: int  # 2 for .16x32bx2 (one per half-warp), else 1
    rows_per_issue: int  # rows of a warpgroup tile that one issue of the four warps covers
    ptx: str  # where the PTX ISA (9.2 numbering) draws its fragment
    fragment: Callable[[Any, Any], tuple[Any, Any]]

    @property
    def regs_per_num(self) -> int:
        return self.accesses * self.lanes * self.bits // (32 * 32)

    @property
    def cols_per_num(self) -> int:
        """32-bit TMEM columns that one .num unit spans (per access)."""
        return self.bits // 32

    @property
    def max_num(self) -> int:
        return MAX_REGS_PER_INSTRUCTION // self.regs_per_num

    def cell(self, t: Any, r: Any) -> tuple[Any, Any]:
        """(lane, 32-bit column) of register ``r`` of lane ``t`` in one ``.xN`` instruction,
        relative to its address: ``.xN`` repeats the ``.x1`` fragment N times along the
        columns (9.7.16.2.3.1). Works on ints and on numpy arrays alike."""
        per = self.regs_per_num
        lane, col = self.fragment(t, r % per)
        return lane, col + (r // per) * self.cols_per_num

    def split(self, units: int) -> tuple[int, ...]:
        """The ``.num`` of each instruction that moves ``units`` .num units: ``.num`` is a
        power of two of at most :attr:`max_num`, so the fewest such, widest first."""
        nums = [self.max_num] * (units // self.max_num)
        rest = units % self.max_num
        nums += [1 << b for b in range(rest.bit_length() - 1, -1, -1) if rest >> b & 1]
        return tuple(nums)


# Fragment figures as formulas: ``t`` is the lane id in the warp, ``r`` the register (ints
# or numpy arrays; a caller broadcasts the results).
def _frag_32x32b(t: Any, r: Any) -> tuple[Any, Any]:
    return t, r


def _frag_16x64b(t: Any, r: Any) -> tuple[Any, Any]:
    return t // 4 + 8 * (t % 2), t // 2 % 2 + 2 * r


def _frag_16x128b(t: Any, r: Any) -> tuple[Any, Any]:
    return t // 4 + 8 * (r % 2), t % 4 + 4 * (r // 2)


def _frag_16x256b(t: Any, r: Any) -> tuple[Any, Any]:
    return t // 4 + 8 * (r // 2 % 2), r % 2 + 2 * (t % 4) + 8 * (r // 4)


def _frag_16x32bx2(t: Any, r: Any) -> tuple[Any, Any]:
    return t % 16, r  # lanes 16-31 read at the address + immHalfSplitoff


SHAPES = {
    s.name: s
    for s in (
        Tcgen05Shape("32x32b", 32, 32, 1, 128, "9.7.16.2.3.1", _frag_32x32b),
        Tcgen05Shape("16x64b", 16, 64, 1, 64, "9.7.16.2.3.1", _frag_16x64b),
        Tcgen05Shape("16x128b", 16, 128, 1, 64, "9.7.16.2.3.1", _frag_16x128b),
        Tcgen05Shape("16x256b", 16, 256, 1, 64, "9.7.16.2.3.1", _frag_16x256b),
        Tcgen05Shape("16x32bx2", 16, 32, 2, 64, "9.7.16.2.3.1", _frag_16x32bx2),
    )
}


@dataclass(frozen=True)
class Datapath:
    """A tensor-memory data-path layout (PTX ISA 9.2 section 9.7.16.10.5, "Data Path Layout
    Organization"): where an MMA of that kind keeps its accumulator, so where a copy of it
    must read. The ISA draws each as a figure; ``placement`` says it in words, as CUTLASS
    transcribes it (``tmem_frg``: F ``((16,4),N):((1,32),_)``, B ``(64,(N/2,2)):(1,(_,64))``).
    E (M=64 ``.ws``) has B's layout, so a tile declared E is taken as B."""

    name: str
    rows: int
    lane_offsets: tuple[int, ...]  # lanes the tile's row 0 may sit at ("lane alignment")
    fragments: tuple[str, ...]  # shapes whose register tile reads this layout, tried in order
    ptx: str
    placement: str  # the figure in words, for decline reasons
    # (row, column, the tile's columns N) -> (lane, column) from the tile's first lane and
    # column, the column in elements: the figure as a formula
    place: Callable[[Any, Any, int], tuple[Any, Any]]


def _place_d(r: Any, c: Any, n: int) -> tuple[Any, Any]:
    return r, c


def _place_f(r: Any, c: Any, n: int) -> tuple[Any, Any]:
    return 32 * (r // 16) + r % 16, c


def _place_b(r: Any, c: Any, n: int) -> tuple[Any, Any]:
    return r + 64 * (c // (n // 2)), c % (n // 2)


DATAPATHS = {
    d.name: d
    for d in (
        Datapath(
            "D",
            128,
            (0,),
            ("16x256b", "16x128b", "16x64b", "16x32bx2", "32x32b"),
            "9.7.16.10.5.4",
            "row r at lane r",
            _place_d,
        ),
        Datapath(
            "F",
            64,
            (0, 16),
            ("16x256b", "16x128b", "16x64b", "16x32bx2"),
            "9.7.16.10.5.6",
            "row r at lane 32*(r//16) + r%16, +16 for the upper half",
            _place_f,
        ),
        Datapath(
            "B",
            64,
            (0,),
            ("32x32b",),
            "9.7.16.10.5.2",
            "row r, column c at lane r + 64*(c // (N/2)), column c % (N/2)",
            _place_b,
        ),
    )
}
