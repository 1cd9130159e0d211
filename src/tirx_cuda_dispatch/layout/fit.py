"""Fitting an instruction's register fragment onto a tile's register layout.

An ``isa/`` record says, for each slot of its fragment, which (row, column) of the
operand's tile thread ``t`` supplies there (:meth:`..isa.mma_fragments.MmaInstruction.
a_element`, :func:`..isa.wgmma.accumulator_element`, :func:`..isa.wgmma.
a_fragment_element`). The tile's TVM layout says which thread holds each element in which
register (:func:`.register.register_table`). A fragment fits where, for every slot, each
thread holds its element itself, in the same register as every other thread (one
instruction names one register for all of them), and a 16-bit pair the instruction takes
as one ``.b32`` register sits in registers ``2w`` and ``2w + 1``. This module answers that
for every such instruction (mma.sync's A, B, C and D; wgmma's accumulator and register A)
and names the first misplaced element where the answer is no. For the matrix loads
(ldmatrix, stmatrix), whose lanes supply row addresses, it fits the m8n8 fragment onto
the shared offsets the register layout induces (:func:`matrix_rows`) and writes each
instruction's row addresses as a mixed radix of the thread index (:func:`mixed_radix`).
For the tensor-memory copies (tcgen05.ld / st), whose registers move cells of a tile that
lies elsewhere, it fits the instructions' program onto the register tile and the placed
tile at once (:func:`program_misfit`).

It reads tables and views, not the call model (:meth:`Holders.of_view` builds the table
from a register tile's view).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import Decline
from .register import RegisterTable, register_table, register_view
from .view import TileView


@dataclass(frozen=True)
class Holders:
    """Who holds each element of a register tile: ``thread[e]`` and ``reg[e]`` for the
    element of row-major index ``e`` (-1 where nobody does); ``name`` (``"A P16"``: the
    operand's role and buffer) and ``unit`` (``"lane"`` in a warp, ``"thread"`` in a
    warpgroup) for the messages."""

    name: str
    unit: str
    thread: np.ndarray
    reg: np.ndarray

    @classmethod
    def of(
        cls, table: RegisterTable, size: int, name: str, unit: str, unique: bool = True
    ) -> Holders:
        """From ``table`` (a tile of ``size`` elements). ``unique``: an element held by
        several threads (a replicated layout) declines, as a fragment holds each element
        once; else the highest such thread counts."""
        t, i = np.nonzero(table.elements >= 0)
        element = table.elements[t, i]
        if unique:
            count = np.bincount(element, minlength=size)
            if count.max(initial=0) > 1:
                e = int(np.argmax(count))
                raise Decline(
                    f"{name} holds element {e} in {int(count[e])} {unit}s; an instruction "
                    f"fragment holds each element in exactly one {unit}: drop the replication"
                )
        thread = np.full(size, -1, dtype=np.int64)
        reg = np.full(size, -1, dtype=np.int64)
        thread[element] = t  # (np.nonzero walks threads in order: the last holder stays)
        reg[element] = np.asarray(table.registers)[i]
        return cls(name, unit, thread, reg)

    @classmethod
    def of_view(
        cls, view: TileView, scope: str, threads: int, unit: str, unique: bool = True
    ) -> Holders:
        """From a register tile's view, at ``scope`` (``threads`` threads), named by its
        argument and buffer (``"A P16"``): :meth:`of` over its register table."""
        table = register_table(register_view(view), scope, threads)
        size = int(np.prod([int(e) for e in view.extents]))
        return cls.of(table, size, f"{view.role} {view.name}", unit, unique)

    def slot(
        self,
        index: np.ndarray,
        coords: tuple[np.ndarray, np.ndarray],
        wants: Callable[[int], str],
        slot: str,
        fix: str = "",
    ) -> int:
        """The register that holds one fragment slot in every thread: thread ``t`` (0 to
        ``len(index) - 1``) supplies the element of row-major index ``index[t]``, at (row,
        column) ``coords[0][t], coords[1][t]``. Decline naming the first element another
        thread holds (``wants(t)``: where the instruction puts it; ``fix``: what to
        change), or the first thread that keeps ``slot`` in another register."""
        threads = np.arange(len(index))
        held = self.thread[index]
        wrong = np.nonzero(held != threads)[0]
        if len(wrong):
            j = int(wrong[0])
            holder = f"{self.unit} {int(held[j])}" if held[j] >= 0 else f"no {self.unit}"
            raise Decline(
                f"{self.name}: element ({int(coords[0][j])}, {int(coords[1][j])}) is held by "
                f"{holder}; {wants(j)}" + (f" ({fix})" if fix else "")
            )
        regs = self.reg[index]
        if (regs != regs[0]).any():
            j = int(np.argmax(regs != regs[0]))
            raise Decline(
                f"{self.name}: {slot} is register {int(regs[0])} in {self.unit} 0 but "
                f"{int(regs[j])} in {self.unit} {j}; one instruction names the same "
                f"registers in every {self.unit}"
            )
        return int(regs[0])


def word(name: str, low: int, high: int, pair: str) -> int:
    """The ``.b32`` word of a 16-bit pair (``pair``, of operand ``name``) in registers
    ``low`` and ``high`` (its halves 0 and 1); Decline unless they are ``2w`` and
    ``2w + 1``."""
    if low % 2 or high != low + 1:
        raise Decline(
            f"{name}: {pair} are its registers {low} and {high}; one .b32 register holds "
            "both: keep each pair adjacent, the first at an even register"
        )
    return low // 2


# -- matrix loads (ldmatrix / stmatrix): a fragment fitted onto shared offsets ------------
@dataclass(frozen=True)
class Digit:
    """``((t >> shift) & (2**width - 1)) * stride``: one mixed-radix term of thread ``t``."""

    shift: int
    width: int
    stride: int

    def of(self, t: Any) -> Any:
        return ((t >> self.shift) & ((1 << self.width) - 1)) * self.stride


def mixed_radix(values: np.ndarray) -> tuple[Digit, ...] | None:
    """``values[t] - values[0]`` as a sum of per-bit terms of ``t`` merged into mixed-radix
    digits (what one instruction's threads supply, as an address the emitter computes
    from the thread index), or None when it is not one."""
    n = len(values)
    rel = values - values[0]
    bits = max(n - 1, 0).bit_length()
    per_bit = [int(rel[1 << b]) for b in range(bits)]
    t = np.arange(n)
    predicted = sum(((t >> b) & 1) * per_bit[b] for b in range(bits)) if bits else 0
    if not np.array_equal(rel, np.broadcast_to(predicted, rel.shape)):
        return None
    digits, b = [], 0
    while b < bits:
        if per_bit[b] == 0:
            b += 1
            continue
        width = 1
        while b + width < bits and per_bit[b + width] == per_bit[b] << width:
            width += 1
        digits.append(Digit(b, width, per_bit[b]))
        b += width
    return tuple(digits)


def matrix_rows(
    offsets: np.ndarray, element: Callable[[Any, Any], tuple[Any, Any]], row_elems: int
) -> tuple[np.ndarray | None, str | None]:
    """Fit a matrix-load fragment onto shared offsets. ``offsets`` ``[warps, lanes, words,
    2]``: the shared offset of each half of each lane's register word (from the register
    layout); ``element(lane, half)``: the (row, column) of the matrix, as stored, that the
    instruction puts there (:meth:`..isa.mma_fragments.M8N8Fragment.element`, plain or
    ``.trans``). The fragment fits where every element's row, less its column, starts at
    one address per (warp, word, row): those starts ``[warps, words, row_elems]`` (what
    each row's lane supplies), or None and the first element that disagrees."""
    warps, lanes, words, _ = offsets.shape
    lane, half = np.arange(lanes)[:, None], np.arange(2)[None, :]
    stored_row, stored_col = (np.broadcast_to(x, (lanes, 2)) for x in element(lane, half))
    row = np.broadcast_to(stored_row[None, :, None, :], offsets.shape)
    start = offsets - stored_col[None, :, None, :]  # each element: where its row starts
    rows = np.zeros((warps, words, row_elems), dtype=np.int64)
    w_idx = np.arange(warps)[:, None, None, None]
    k_idx = np.arange(words)[None, None, :, None]
    rows[w_idx, k_idx, row] = start
    bad = np.argwhere(rows[w_idx, k_idx, row] != start)
    if len(bad) == 0:
        return rows, None
    w, ln, k, h = (int(x) for x in bad[0])
    r, c = int(stored_row[ln, h]), int(stored_col[ln, h])
    (r0, c0), (r1, c1) = ((int(stored_row[ln, j]), int(stored_col[ln, j])) for j in (0, 1))
    if r0 == r1:
        want = f"columns {c0} and {c1} of row {r0}"
    elif c0 == c1:
        want = f"rows {r0} and {r1} of column {c0}"
    else:
        want = f"elements ({r0}, {c0}) and ({r1}, {c1})"
    pair = offsets[w, ln, k]
    return None, (
        f"lane {ln} (warp {w}) holds shared offsets {int(pair[0])}, {int(pair[1])} in "
        f"register word {k}, where the fragment puts {want} (element ({r}, {c}) of a "
        f"matrix whose rows are {row_elems} contiguous elements)"
    )


# -- programs between registers and a placed tile (tcgen05.ld / st) -----------------------
def program_misfit(
    holders: Holders,
    where: tuple[np.ndarray, np.ndarray],
    moves: Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray, np.ndarray]],
    cols: int,
    axes: str,
) -> tuple[int, str] | None:
    """Fit an instruction program onto a register tile (``holders``, registers counted
    from the fragment's first) and the tile it moves to or from (element ``e`` lies at
    ``where[0][e], where[1][e]``, no two elements at one place). ``moves(t, r)``: for
    thread ``t``'s register ``r``, (whether the program moves it, and where to). None
    where every element's holder and register are where the program moves it: then no
    two elements share a register (they lie apart), so the program moves exactly the tile
    when it moves as many registers as the tile has elements. Else (how many elements
    are misplaced, why), naming the first by its (row, column) in a tile of ``cols``
    columns and the place both sides give it along ``axes`` (``"TMEM lane, column"``)."""
    unit = holders.unit
    free = np.nonzero(holders.thread < 0)[0]
    if len(free):
        row, col = divmod(int(free[0]), cols)
        return len(free), f"{holders.name}: element ({row}, {col}) is held by no {unit}"
    t, r = holders.thread, holders.reg
    valid, a, b = moves(t, r)
    bad = ~valid | (a != where[0]) | (b != where[1])
    if not bad.any():
        return None
    e = int(np.argmax(bad))
    row, col = divmod(e, cols)
    seen = f"{holders.name}: element ({row}, {col}) is in {unit} {int(t[e])} register {int(r[e])}"
    if not valid[e]:
        return int(bad.sum()), f"{seen}, which the instructions do not move"
    return int(bad.sum()), (
        f"{seen}, where the instructions move {axes} ({int(a[e])}, {int(b[e])}); the tile "
        f"has it at ({int(where[0][e])}, {int(where[1][e])})"
    )
