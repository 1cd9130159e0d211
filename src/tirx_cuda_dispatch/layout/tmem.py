"""TVM layouts fitted onto the tcgen05 records (``isa/tcgen05.py``): which data path a
tensor-memory tile is, which instruction shape moves a register tile, and where each
starts.

Both tiles are read as tables: each element's TMEM lane and column (:func:`tmem_places`),
and the thread and register that holds it (:func:`register_holders`, through
``layout/register.py``). The data path is the one whose element
function (``Datapath.place``) gives the TMEM tile's places; the shape is the first of the
data path's, widest first, whose instructions (:class:`Program`, over ``Tcgen05Shape.cell``)
move every element between its register and its TMEM cell (``layout/fit.py``'s
:func:`.fit.program_misfit`). A mismatch is a ``Decline`` that names the ISA rule it
breaks, or the first misplaced element. :func:`half_warp_layout` and
:func:`datapath_b_layout` are register tiles TVM has no factory for, for authors.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import tvm
from tvm import sym
from tvm.tirx.layout import S, TileLayout
from tvm.tirx.layout import laneid as axis_laneid
from tvm.tirx.layout import tid_in_wg as axis_tid_in_wg
from tvm.tirx.layout import wid_in_wg as axis_wid_in_wg

from ..errors import Decline, check
from ..irfacts import as_int
from ..isa.tcgen05 import DATAPATHS, SHAPES, Datapath, Tcgen05Shape
from .atoms import mixed_radix_digits
from .fit import Holders, program_misfit
from .register import check_register_start, register_table, window_view
from .view import TileView


def _text(layout: Any) -> str:
    return str(layout).replace("T.", "")


def operand_window(o: TileView) -> tuple[Any, dict[str, Any]]:
    """The operand's layout over its region, canonical and without its offset, and the
    offset per axis (``m`` for registers, ``TLane``/``TCol`` for tensor memory)."""
    region = [(lo, lo + ext) for lo, ext in o.region]
    # A swizzled (composed) layout has no fragment or datapath form: only tile layouts.
    sliced = o.layout.slice(list(o.shape), region) if isinstance(o.layout, TileLayout) else None
    if not isinstance(sliced, TileLayout):
        raise Decline(
            f"{o.role} {o.name}: its layout {_text(o.layout)} has no tile form over {o.describe}"
        )
    offset = {str(axis.name): value for axis, value in sliced.offset.items()}
    bare = TileLayout.from_iters(list(sliced.shard), list(sliced.replica), {})
    return bare.canonicalize(), offset


# -- register tiles -------------------------------------------------------------------------
def half_warp_layout(rows: int, cols: int) -> TileLayout:
    """The ``.16x32bx2`` register tile (TVM has no ``tcgen05_atom_layout`` for it): lanes
    0-15 hold the left half of their warp's 16 rows, lanes 16-31 the right half; a 128-row
    tile adds a second slab after the first's registers (the convention of
    ``tcgen05_atom_layout``'s M=128 tiles). Allocate a fragment with
    ``R.view(rows, cols, layout=half_warp_layout(rows, cols))``."""
    half = cols // 2
    if rows == 64:
        return TileLayout(
            S[(4, 16, 2, half) : (1 @ axis_wid_in_wg, 1 @ axis_laneid, 16 @ axis_laneid, 1)]
        )
    return TileLayout(
        S[(4, 2, 16, 2, half) : (1 @ axis_wid_in_wg, half, 1 @ axis_laneid, 16 @ axis_laneid, 1)]
    )


def datapath_b_layout(cols: int) -> TileLayout:
    """The register tile of a datapath-B accumulator, ``(64, cols)``: thread ``t`` holds
    TMEM lane ``t``, that is row ``t % 64`` of column half ``t // 64``, one ``.32x32b``
    row of ``cols/2`` values. For float32 this is TVM's ``tcgen05_atom_layout("32x32b",
    (64, cols), "float32")`` (what ``T.alloc_tcgen05_ldst_frag`` makes); 16-bit tiles use
    the same layout, which TVM's factory refuses."""
    return TileLayout(S[(64, 2, cols // 2) : (1 @ axis_tid_in_wg, 64 @ axis_tid_in_wg, 1)])


def register_holders(reg: TileView, layout: TileLayout) -> Holders:
    """Which thread of the warpgroup holds each element of the window, at which index of
    the register array counted from the window's first: the window's bare ``layout`` read
    as ``layout/register.py`` reads every register tile (each thread axis within its
    range, no two elements in one place, none replicated). The window's first register
    is the caller's (``register_offset``)."""
    name = f"{reg.role} {reg.name}"
    check_register_start(reg)
    try:
        table = register_table(window_view(reg, layout), "warpgroup", 128)
    except Decline as why:
        raise Decline(f"{name}: {why.reason}") from None
    return Holders.of(table, int(np.prod(reg.extents)), name, "thread")


@dataclass(frozen=True)
class Program:
    """What a warpgroup issues for a tile of ``rows`` rows, one shape: each warp reaches
    its 32 TMEM lanes (9.7.16.8.1), once per 16-lane slab for a 128-row ``.16x*`` tile,
    with ``units`` .num units a slab (as one or more instructions, widest first: the
    registers and columns follow on from one to the next). Registers: a slab's run from
    its first, slab 1 ``slab_words`` 32-bit registers after slab 0's first. Columns: in
    32-bit cells; ``.16x32bx2``'s upper half-warp adds ``split`` cells; packed 16-bit
    elements sit one to a cell, the low half."""

    shape: Tcgen05Shape
    slabs: int
    units: int
    per: int  # elements per 32-bit register
    pack: bool
    slab_words: int
    slab_elements: int | None = None  # where the register tile puts slab 1, in elements

    @property
    def regs_per_slab(self) -> int:
        return self.units * self.shape.regs_per_num

    @property
    def split(self) -> int:
        if self.shape.accesses != 2:
            return 0
        return self.units * self.shape.cols_per_num * (2 if self.pack else 1)

    def slab_misfit(self, reg: TileView) -> str | None:
        """Why no program reads the register tile's slab 1 where it is (before the end of
        slab 0's registers, or within a register), or None."""
        if self.slab_elements is None or self.slab_words >= self.regs_per_slab:
            return None
        return (
            f"{reg.role} {reg.name}: its second 16-lane slab starts {self.slab_elements} "
            f"{reg.dtype} after the first; a warp's second issue reads it from a whole "
            f"register at or past the end of the first's {self.regs_per_slab} registers"
        )

    def moves(self, t: np.ndarray, r: np.ndarray) -> tuple[np.ndarray, ...]:
        """(moved, TMEM lane, TCol in elements) of thread ``t``'s element ``r`` of the
        register array (from the fragment's first), both from the tile's first lane and
        column."""
        warp, lane = t // 32, t % 32
        word, part = r // self.per, r % self.per  # the 32-bit register, the part of it
        slab = (word >= self.slab_words).astype(np.int64) if self.slabs == 2 else 0
        k = word - slab * self.slab_words
        moved = (t >= 0) & (t < 128) & (r >= 0) & (k >= 0) & (k < self.regs_per_slab)
        at_lane, cell = np.broadcast_arrays(*self.shape.cell(lane, np.maximum(k, 0)))
        upper = self.split * (lane >= 16)
        if self.pack:  # 16-bit: part 0 / 1 in the low half of cell 2c / 2c + 1
            col = (2 * cell + part + upper) * self.per
        else:
            col = (cell + upper) * self.per + part
        return moved, 32 * warp + 16 * slab + at_lane, col


def _program(
    shape: Tcgen05Shape, rows: int, cols: int, bits: int, pack: bool, holders: Holders
) -> Program | None:
    """The program of ``shape`` over the tile, or None where the tile is not a whole
    number of its .num units. Slab 1's first register is the one holding row 16, column 0
    (where thread 0's first register of slab 1 moves): read off the register tile."""
    slabs = rows // shape.rows_per_issue if shape.rows_per_issue < 128 else 1
    words, rest = divmod(rows * cols * bits, 32 * 128 * slabs)
    units, part = divmod(words, shape.regs_per_num)
    if rest or part or units == 0:
        return None
    per = 32 // bits
    if slabs == 2 and holders.thread[16 * cols] == 0:
        at = int(holders.reg[16 * cols])
        slab_words = at // per if at % per == 0 else -1  # -1: within a register
        return Program(shape, slabs, units, per, pack, slab_words, at)
    return Program(shape, slabs, units, per, pack, words)


def match_fragment(
    reg: TileView,
    layout: Any,
    path: Datapath,
    places: tuple,
    rows: int,
    cols: int,
    pack: bool,
) -> Program:
    """The program of the first of the datapath's shapes, widest first, that fits the
    register tile (``layout``: the window's bare layout, for the messages) onto the TMEM
    tile (``places``: each element's TMEM lane and column), or a decline naming, for the
    shape tried that misplaces the fewest elements, the first of them."""
    holders = register_holders(reg, layout)
    tried, nearest = [], None
    for name in path.fragments:
        program = _program(SHAPES[name], rows, cols, reg.elem_bits, pack, holders)
        if program is None:
            continue
        tried.append("." + name)
        slab = program.slab_misfit(reg)
        if slab is not None:  # the same for every .16x* shape: the reason, untagged
            nearest = nearest if nearest and nearest[0] == 0 else (0, slab)
            continue
        misfit = program_misfit(holders, places, program.moves, cols, "TMEM lane, column")
        if misfit is None:
            return program
        if nearest is None or misfit[0] < nearest[0]:
            nearest = (misfit[0], f".{name}: {misfit[1]}")
    why = _no_fragment(reg, layout, path, rows, cols, tried)
    raise Decline(why + (f"; nearest {nearest[1]}" if nearest else ""))


def _no_fragment(reg: TileView, layout: Any, path: Datapath, rows: int, cols: int, tried) -> str:
    """Why no fragment of ``path`` is the register tile, and which one would be."""
    seen = f"{reg.role} {reg.name}: register layout {_text(layout)} over {rows}x{cols}"
    if path.name == "B":
        return (
            f"{seen} is not datapath B's register tile (thread t holds TMEM lane t: "
            f"layout.tmem.datapath_b_layout({cols}), which is tcgen05_atom_layout('32x32b', "
            f"(64, {cols}), 'float32')); a .16x* fragment reads datapath F's lanes "
            "32w..32w+15 instead"
        )
    hint = (
        "; .32x32b needs 128 rows with one row per thread: (128, K):(1@tid_in_wg, 1)"
        if path.name == "D"
        else "; a 64-row tile of datapath F takes a 64-row .16x* fragment"
    )
    return (
        f"{seen} matches no tcgen05 fragment of datapath {path.name} "
        f"(tried {', '.join(tried) or 'none'}{hint})"
    )


def register_offset(reg: TileView, offset: dict, loops: Any) -> Any:
    """The 32-bit register of the window's first value: a constant, or an expression of
    enclosing loops of constant range (a column window chosen in a loop), which is a
    constant again once the compiler unrolls the loop. Any other variable would make the
    register index a runtime value and put the array in local memory."""
    first = tvm.tirx.const(0, "int32") + offset.get("m", 0)
    ana = sym.Analyzer()
    for var in tvm.tirx.analysis.undefined_vars(first):
        rng = next((r for v, r in loops.items() if v.same_as(var)), None)
        check(
            rng is not None and as_int(rng.min) is not None and as_int(rng.extent) is not None,
            f"{reg.role} {reg.name}: register offset {offset.get('m')} depends on {var.name}, "
            "which is not the variable of an enclosing loop of constant range: the register "
            "index would be a runtime value (local memory); index registers by constants and "
            "loop variables only",
        )
        ana.bind(var, rng)
    check(
        ana.can_prove_equal(tvm.tirx.floormod(first * reg.elem_bits, 32), 0),
        f"{reg.role} {reg.name}: register offset {offset.get('m')} {reg.dtype} is not a whole "
        "32-bit register",
    )
    words = ana.simplify(tvm.tirx.floordiv(first * reg.elem_bits, 32))
    return as_int(words) if as_int(words) is not None else words


# -- tensor-memory tiles ----------------------------------------------------------------------
def tmem_places(tmem: TileView, layout: TileLayout) -> tuple[np.ndarray, np.ndarray]:
    """(TMEM lane, TCol) of every element of a TMEM tile's bare layout (no offset), by the
    element's row-major index. A replicated or non-constant layout, or one naming another
    axis, declines."""
    what = f"{tmem.role} {tmem.name}: TMEM layout {_text(layout)}"
    iters = [(as_int(it.extent), as_int(it.stride), str(it.axis.name)) for it in layout.shard]
    if list(layout.replica) or any(e is None or st is None for e, st, _ in iters):
        raise Decline(f"{what} is replicated or not constant")
    places = {"TLane": 0, "TCol": 0}
    digits = mixed_radix_digits([e for e, _, _ in iters])
    for digit, (_, stride, axis) in zip(digits, iters, strict=True):
        check(
            axis in places, f"{what} names axis {axis}; a tensor-memory tile names TLane and TCol"
        )
        places[axis] = places[axis] + digit * stride
    size = len(digits[0]) if digits else 1
    lane, col = (np.broadcast_to(places[a], (size,)) for a in ("TLane", "TCol"))
    return lane, col


def _laid_as(places: tuple, path: Datapath, rows: int, cols: int, stride: int) -> bool:
    """Whether ``places`` is ``path``'s layout of a ``rows x cols`` tile, columns ``stride``
    TCol apart (2: one 16-bit element per 32-bit cell)."""
    if path.name == "B" and cols % 2:
        return False
    r, c = np.divmod(np.arange(rows * cols), cols)
    lane, col = np.broadcast_arrays(*path.place(r, c, cols))
    return bool(np.array_equal(places[0], lane) and np.array_equal(places[1], col * stride))


def _classify(places: tuple, elem_bits: int, rows: int, cols: int):
    """(datapath, pack) of a TMEM window's element places, or None."""
    strides = (1, 2) if elem_bits == 16 else (1,)
    for path in DATAPATHS.values():
        if path.rows != rows:
            continue
        for stride in strides:
            if _laid_as(places, path, rows, cols, stride):
                return path, stride == 2
    return None


def _column_window_of_b(tmem: TileView, seen: str, strides: tuple[int, ...]) -> str | None:
    """Why a window of a whole (64, N) datapath B tile is none: its columns sit on half
    the lanes."""
    n = as_int(tmem.shape[1])
    whole = tmem.buffer.layout
    if as_int(tmem.shape[0]) != 64 or n is None or not isinstance(whole, TileLayout):
        return None
    try:
        places = tmem_places(tmem, whole.canonicalize())
    except Decline:
        return None
    if len(places[0]) != 64 * n:
        return None
    if not any(_laid_as(places, DATAPATHS["B"], 64, n, s) for s in strides):
        return None
    return (
        f"{seen} is a column window of a datapath B tile (row r, column c at lane "
        f"r + 64*(c // (N/2)), PTX ISA 9.7.16.10.5.2): its columns sit on lanes 0-63 or "
        "64-127 only, not in all four warps' chunks; copy the whole (64, N) tile"
    )


def _rows_of_d(places: tuple, offset: dict, seen: str, cols: int, strides) -> str | None:
    """Why 64 rows of a lane = row tile are none: the rows fall outside their warps'
    chunks."""
    if not any(_laid_as(places, DATAPATHS["D"], 64, cols, s) for s in strides):
        return None
    lane = as_int(offset.get("TLane", 0))
    at = "r" if lane == 0 else f"{offset.get('TLane')} + r"
    return (
        f"{seen} puts row r at lane {at}: rows of a lane = row tile (datapath D, "
        "PTX ISA 9.7.16.10.5.4), and a 64-row warpgroup fragment gives warp w rows "
        "16w..16w+15 while warp w reaches only lanes 32w..32w+31 (9.7.16.8.1), so "
        "the rows fall outside their warps' chunks. TVM's built-in means lanes 32w..32w+15 "
        "here (datapath F's placement, not these rows). For datapath F declare the tile "
        "tmem_datapath_layout('F', 64, N) (sub_slab=1: lanes 32w+16..32w+31); for rows "
        "of a D tile copy all 128 rows with a 128-row fragment"
    )


def _not_a_datapath(
    tmem: TileView, layout: Any, places: tuple, offset: dict, rows: int, cols: int
) -> str:
    """Why a TMEM window is no data-path layout, with the ISA rule it breaks."""
    seen = f"{tmem.role} {tmem.name}: TMEM layout {_text(layout)} over {tmem.describe}"
    strides = (1, 2) if tmem.elem_bits == 16 else (1,)
    if rows == 64:
        why = _column_window_of_b(tmem, seen, strides)
        why = why or _rows_of_d(places, offset, seen, cols, strides)
        if why is not None:
            return why
    names = [p for p in DATAPATHS.values() if p.rows == rows]
    needs = "; ".join(
        f"{p.name}: {p.placement} (tmem_datapath_layout('{p.name}', {rows}, N))" for p in names
    )
    return (
        f"{seen} is not datapath {' or '.join(p.name for p in names)} ({needs}; "
        "TCol stride 1, or 2 for one 16-bit element per cell)"
    )


def match_datapath(tmem: TileView, layout: Any, offset: dict, rows: int, cols: int):
    """(datapath, pack, lane offset, 32-bit column offset, the elements' places) of the
    TMEM tile, or a decline: the window's places are compared with each data path's
    element function (``isa.tcgen05.Datapath.place``)."""
    places = tmem_places(tmem, layout)
    found = _classify(places, tmem.elem_bits, rows, cols)
    if found is None:
        raise Decline(_not_a_datapath(tmem, layout, places, offset, rows, cols))
    path, pack = found
    lane = as_int(offset.get("TLane", 0))
    check(
        lane in path.lane_offsets,
        f"{tmem.role} {tmem.name}: tile starts at TMEM lane {offset.get('TLane')}; datapath "
        f"{path.name} starts at lane {' or '.join(map(str, path.lane_offsets))} of each "
        f"warp's chunk (PTX ISA {path.ptx})",
    )
    col_bits = tvm.tirx.const(0, "int32") + offset.get("TCol", 0) * tmem.elem_bits
    ana = sym.Analyzer()
    check(
        ana.can_prove_equal(tvm.tirx.floormod(col_bits, 32), 0),
        f"{tmem.role} {tmem.name}: first column {offset.get('TCol')} is not at a 32-bit "
        "TMEM cell boundary",
    )
    col = ana.simplify(tvm.tirx.floordiv(col_bits, 32))
    return path, pack, lane, (as_int(col) if as_int(col) is not None else col), places
