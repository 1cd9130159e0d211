"""TVM layouts against the tcgen05 records (``isa/tcgen05.py``): which data path a
tensor-memory tile is, which instruction shape a register tile is, and where each starts.

Both sides are compared structurally after canonicalization: the candidate layouts are
TVM's own factories (``tmem_datapath_layout``, ``tcgen05_atom_layout``, ``wg_local_layout``)
where TVM has one, and :func:`half_warp_layout` / :func:`datapath_b_layout` where it has
none. A mismatch is a ``Decline`` that names the ISA rule it breaks.
"""

from __future__ import annotations

from typing import Any

import tvm
import tvm_ffi
from tvm import sym
from tvm.tirx.layout import (
    Iter,
    S,
    TCol,
    TileLayout,
    TLane,
    tcgen05_atom_layout,
    tmem_datapath_layout,
    wg_local_layout,
)
from tvm.tirx.layout import laneid as axis_laneid
from tvm.tirx.layout import tid_in_wg as axis_tid_in_wg
from tvm.tirx.layout import wid_in_wg as axis_wid_in_wg

from ..errors import Decline, check
from ..irfacts import as_int
from ..isa.tcgen05 import DATAPATHS, SHAPES, Datapath
from .view import TileView


def _text(layout: Any) -> str:
    return str(layout).replace("T.", "")


def _same(a: Any, b: Any) -> bool:
    return bool(tvm_ffi.structural_equal(a.canonicalize(), b))


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


def _register_candidate(shape: str, datapath: str, rows: int, cols: int, dtype: str):
    """The register layout of ``shape`` over a ``rows x cols`` tile, or None where the
    shape's column factor or ``.num`` range does not fit ``cols``."""
    bits = tvm.runtime.DataType(dtype).bits
    if shape == "32x32b":
        return datapath_b_layout(cols) if datapath == "B" else wg_local_layout(cols)
    if shape == "16x32bx2":
        ok = cols % 2 == 0 and (cols // 2) * bits % 32 == 0
        return half_warp_layout(rows, cols) if ok else None
    try:
        return tcgen05_atom_layout(shape, (rows, cols), dtype)
    except ValueError:
        return None


def _with_slab_stride(layout: TileLayout, stride: int) -> TileLayout:
    """A 128-row ``.16x*`` tile with its second slab ``stride`` elements after the first:
    the slab is the iterator right after ``wid_in_wg`` (``tcgen05_atom_layout`` and
    :func:`half_warp_layout` both put it there)."""
    iters = list(layout.shard)
    slab = iters[1]
    assert str(slab.axis.name) == "m" and as_int(slab.extent) == 2, _text(layout)
    iters[1] = Iter(2, stride, slab.axis)
    return TileLayout.from_iters(iters, list(layout.replica), {})


def _slab_stride(layout: TileLayout, rows: int, cols: int) -> int | None:
    """The register distance (in elements) between the two slabs a 128-row window keeps:
    row 16 is slab 1 of warp 0, lane 0, column 0. A column window of a wider fragment keeps
    the wider fragment's distance, so the window is not itself an atom layout."""
    if rows != 128:
        return None
    at = {str(k): v for k, v in layout.apply(16, 0, shape=(rows, cols)).items()}
    return as_int(at.get("m"))


def match_fragment(reg: TileView, layout: Any, path: Datapath, rows: int, cols: int):
    """(shape, slab stride in elements or None) of the register tile on datapath ``path``:
    the first of the datapath's fragments, widest first, whose register tile it is."""
    tried = []
    stride = _slab_stride(layout, rows, cols)
    for name in path.fragments:
        candidate = _register_candidate(name, path.name, rows, cols, reg.dtype)
        if candidate is None:
            continue
        tried.append("." + name)
        if _same(candidate, layout):
            return name, None
        if SHAPES[name].rows_per_issue < 128 and rows == 128 and stride is not None:
            if _same(_with_slab_stride(candidate, stride), layout):
                return name, stride
    raise Decline(_no_fragment(reg, layout, path, rows, cols, tried))


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
def _tmem_layout(datapath: str, cols: int, col_stride: int) -> TileLayout | None:
    """TMEM tile of a datapath; ``col_stride`` 2 puts each 16-bit element in its own
    32-bit cell (TCol counts elements, two to a cell)."""
    if datapath == "B" and cols % 2:
        return None
    if col_stride == 1:
        return tmem_datapath_layout(datapath, DATAPATHS[datapath].rows, cols)
    if datapath == "D":
        return TileLayout(S[(128, cols) : (1 @ TLane, col_stride @ TCol)])
    if datapath == "B":
        return TileLayout(S[(64, 2, cols // 2) : (1 @ TLane, 64 @ TLane, col_stride @ TCol)])
    return TileLayout(S[(4, 16, cols) : (32 @ TLane, 1 @ TLane, col_stride @ TCol)])


def _classify(tmem: TileView, layout: Any, rows: int, cols: int) -> tuple[Datapath, bool] | None:
    """(datapath, pack) of a TMEM window, or None."""
    strides = (1, 2) if tmem.elem_bits == 16 else (1,)
    for path in DATAPATHS.values():
        if path.rows != rows:
            continue
        for stride in strides:
            candidate = _tmem_layout(path.name, cols, stride)
            if candidate is not None and _same(candidate, layout):
                return path, stride == 2
    return None


def _column_window_of_b(tmem: TileView, seen: str, strides: tuple[int, ...]) -> str | None:
    """Why a window of a whole (64, N) datapath B tile is none: its columns sit on half
    the lanes."""
    n = as_int(tmem.shape[1])
    if as_int(tmem.shape[0]) != 64 or n is None:
        return None
    whole = [_tmem_layout("B", n, s) for s in strides]
    if not any(b is not None and _same(tmem.buffer.layout, b.canonicalize()) for b in whole):
        return None
    return (
        f"{seen} is a column window of a datapath B tile (row r, column c at lane "
        f"r + 64*(c // (N/2)), PTX ISA 9.7.16.10.5.2): its columns sit on lanes 0-63 or "
        "64-127 only, not in all four warps' chunks; copy the whole (64, N) tile"
    )


def _rows_of_d(layout: Any, offset: dict, seen: str, cols: int, strides) -> str | None:
    """Why 64 rows of a lane = row tile are none: the rows fall outside their warps'
    chunks."""
    identity = (TileLayout(S[(64, cols) : (1 @ TLane, s @ TCol)]) for s in strides)
    if not any(_same(i, layout) for i in identity):
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


def _not_a_datapath(tmem: TileView, layout: Any, offset: dict, rows: int, cols: int) -> str:
    """Why a TMEM window is no data-path layout, with the ISA rule it breaks."""
    seen = f"{tmem.role} {tmem.name}: TMEM layout {_text(layout)} over {tmem.describe}"
    strides = (1, 2) if tmem.elem_bits == 16 else (1,)
    if rows == 64:
        why = _column_window_of_b(tmem, seen, strides)
        why = why or _rows_of_d(layout, offset, seen, cols, strides)
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
    """(datapath, pack, lane offset, 32-bit column offset) of the TMEM tile, or a decline."""
    found = _classify(tmem, layout, rows, cols)
    if found is None:
        raise Decline(_not_a_datapath(tmem, layout, offset, rows, cols))
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
    return path, pack, lane, (as_int(col) if as_int(col) is not None else col)
