"""copy_async -> tcgen05_ldst: Blackwell tensor memory <-> registers, either way.

Accepts: a CUDA target with tensor memory (sm_100a/f, sm_103a/f, sm_110a/f); warpgroup
scope with every thread active (the four warps move the tile together: warp ``w`` can
only reach TMEM lanes ``32w .. 32w+31``); a valid copy between a ``tmem`` buffer and a
``local`` register view, 8-, 16- or 32-bit elements, ``(rows, cols)`` regions of 128 or 64
rows.

Emits ``tcgen05.ld`` (tmem -> local) or ``tcgen05.st`` (local -> tmem), PTX ISA 9.2
section 9.7.16.8.3/4, shapes 9.7.16.2.3.1. The TMEM layout must be the data-path layout
(9.7.16.10.5) the fragment reads: D (128 rows, lane = row), F (64 rows, 16 lanes of each
warp's chunk) or B (64 rows of a ``.cta_group::2`` M=128 accumulator, the column halves
on lanes 0-63 and 64-127; E has the same layout). The register layout picks the shape:
on D and F it is compared with TVM's ``tcgen05_atom_layout`` for ``.16x256b``,
``.16x128b``, ``.16x64b`` (widest first), then with the half-warp ``.16x32bx2`` fragment,
and on D falls back to ``.32x32b`` (a thread owns one row); on B it must be B's
``.32x32b`` image (thread ``t`` owns TMEM lane ``t``). A 128-row ``.16x*`` fragment
spans two 16-lane slabs of each warp's TMEM chunk, so every warp issues twice (lane +0
and +16); a column window of a wider fragment keeps the wider fragment's register
distance between the slabs. 16-bit elements are either dense (two per 32-bit cell) or
one per cell, which takes ``.pack::16b`` / ``.unpack::16b``. A fragment wider than one
instruction's 128 registers is split into several instructions.

Completion is the caller's: no ``tcgen05.wait::ld`` / ``wait::st`` is emitted, so
several copies can be in flight. Read the registers of a load only after
``T.ptx.tcgen05.wait__ld.sync.aligned()``; reuse the registers or TMEM columns of a store
only after ``T.ptx.tcgen05.wait__st.sync.aligned()``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import tvm
import tvm_ffi
from tvm import sym
from tvm.script import tirx as T
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

from ..call import Operand, TileCall
from ..codegen import impl_prim_func, storage_words, warp_index_in_warpgroup
from ..errors import Decline, check
from ..irfacts import as_int
from ..predicates import (
    requires_all_threads_active,
    requires_cuda,
    requires_memory_pair,
    requires_valid_copy,
)
from ..registry import variant

TMEM_LOCAL_PAIRS = (("tmem", "local"), ("local", "tmem"))

# Families whose PTX has tcgen05 (NVRTC 13 accepts exactly these with an a/f suffix;
# sm_120 Blackwell has no tensor memory).
TMEM_FAMILIES = (100, 103, 110)

# PTX ISA 9.2 Table 49: a .num whose vector would exceed 128 registers does not exist.
MAX_REGS_PER_INSTRUCTION = 128


# -- hardware facts: one record per tcgen05.ld/st shape ------------------------------------
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
    fragment: Callable[[int, int], tuple[int, int]]

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


# Fragment figures as formulas: ``t`` is the lane id in the warp, ``r`` the register.
def _frag_32x32b(t: int, r: int) -> tuple[int, int]:
    return t, r


def _frag_16x64b(t: int, r: int) -> tuple[int, int]:
    return t // 4 + 8 * (t % 2), t // 2 % 2 + 2 * r


def _frag_16x128b(t: int, r: int) -> tuple[int, int]:
    return t // 4 + 8 * (r % 2), t % 4 + 4 * (r // 2)


def _frag_16x256b(t: int, r: int) -> tuple[int, int]:
    return t // 4 + 8 * (r // 2 % 2), r % 2 + 2 * (t % 4) + 8 * (r // 4)


def _frag_16x32bx2(t: int, r: int) -> tuple[int, int]:
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
        ),
        Datapath(
            "F",
            64,
            (0, 16),
            ("16x256b", "16x128b", "16x64b", "16x32bx2"),
            "9.7.16.10.5.6",
            "row r at lane 32*(r//16) + r%16, +16 for the upper half",
        ),
        Datapath(
            "B",
            64,
            (0,),
            ("32x32b",),
            "9.7.16.10.5.2",
            "row r, column c at lane r + 64*(c // (N/2)), column c % (N/2)",
        ),
    )
}


# -- predicates -----------------------------------------------------------------------------
def requires_warpgroup_scope(call: TileCall) -> tuple[bool, str | None]:
    """The four warps of a warpgroup move the tile: each reaches only its 32 TMEM lanes."""
    if call.scope != "warpgroup":
        return False, (
            f"scope is {call.scope}, needs warpgroup (warp w reaches only TMEM lanes "
            "32w..32w+31, so the four warps move a tile together)"
        )
    return True, None


def requires_tensor_memory_target(call: TileCall) -> tuple[bool, str | None]:
    """The target has tcgen05: an sm_100/103/110 family with its a/f suffix."""
    arch = call.arch or "(no arch)"
    m = re.fullmatch(r"sm_(\d+)([af]?)", call.arch)
    needs = "needs sm_100a/sm_100f; sm_103a/f and sm_110a/f also have tcgen05"
    if m is None or int(m.group(1)) < 100:
        return False, f"target {arch} is not Blackwell ({needs})"
    if int(m.group(1)) not in TMEM_FAMILIES:
        return False, f"target {arch} is a Blackwell without tensor memory ({needs})"
    if not m.group(2):
        return False, f"target {arch} lacks the arch-specific suffix tcgen05 needs ({needs})"
    return True, None


def _tmem_and_reg(call: TileCall) -> tuple[Operand, Operand]:
    dst, src = call.operand("dst"), call.operand("src")
    return (src, dst) if src.memory == "tmem" else (dst, src)


def requires_tmem_address(call: TileCall) -> tuple[bool, str | None]:
    """The tmem buffer says where it lives (``decl_buffer(..., allocated_addr=...)``)."""
    tmem, _ = _tmem_and_reg(call)
    addr = tmem.buffer.allocated_addr
    if addr is None or len(addr) == 0:
        return False, f"{tmem.role} {tmem.name} has no allocated_addr; needs its TMEM address"
    return True, None


def requires_8_16_or_32_bit(call: TileCall) -> tuple[bool, str | None]:
    """tcgen05.ld/st move 32-bit cells: one 32-bit element, two 16-bit ones (or one, with
    .pack::16b) or four 8-bit ones (an 8-bit MMA operand in TMEM)."""
    _, reg = _tmem_and_reg(call)
    if reg.elem_bits not in (8, 16, 32):
        return False, f"{reg.role} {reg.name} holds {reg.dtype}; needs 8-, 16- or 32-bit elements"
    return True, None


# -- the plan -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Tcgen05Plan:
    """Which instructions each warp issues, and where in TMEM and registers they point."""

    direction: str  # "ld" (tmem -> local) or "st" (local -> tmem)
    shape: str
    nums: tuple[int, ...]  # .num of each instruction of a slab, widest first
    slabs: int  # issues per warp, one per 16-lane slab (2 for a 128-row .16x* fragment)
    pack: bool  # 16-bit elements one per TMEM cell: .pack::16b / .unpack::16b
    dtype: str
    rows: int
    datapath: str  # DATAPATHS: "D" (128 rows), "F" or "B" (64 rows)
    lane_offset: int  # TMEM lane of row 0 within the warp's chunk (16: F's upper half)
    col_offset: Any  # 32-bit TMEM column of the tile's column 0 (int or PrimExpr)
    reg_offset: Any  # 32-bit register of the fragment's first value (int or PrimExpr)
    split_offset: int = 0  # .16x32bx2: columns between the two half-warp accesses
    slab_stride: int | None = None  # registers from slab 0 to slab 1 (None: adjacent)

    def __post_init__(self) -> None:
        atom = SHAPES[self.shape]
        assert all(0 < n <= atom.max_num and n & (n - 1) == 0 for n in self.nums), self.nums
        assert self.slab_stride is None or self.slab_stride >= self.regs_per_slab

    @property
    def atom(self) -> Tcgen05Shape:
        return SHAPES[self.shape]

    @property
    def num(self) -> int:
        return self.nums[0]

    @property
    def regs_per_slab(self) -> int:
        return sum(self.nums) * self.atom.regs_per_num

    @property
    def regs_per_thread(self) -> int:
        return self.slabs * self.regs_per_slab

    @property
    def slab_registers(self) -> int:
        """Registers from the first of slab 0 to the first of slab 1."""
        return self.regs_per_slab if self.slab_stride is None else self.slab_stride

    @property
    def instructions(self) -> int:
        """Instructions each warp issues."""
        return self.slabs * len(self.nums)

    def pieces(self) -> list[tuple[int, int]]:
        """(.num, .num units before it) of each instruction of a slab."""
        return [(n, sum(self.nums[:i])) for i, n in enumerate(self.nums)]

    def ptx(self, num: int) -> str:
        """The instruction with ``.num`` = ``num``, as PTX spells it."""
        packing = {"ld": ".pack::16b", "st": ".unpack::16b"}[self.direction] if self.pack else ""
        return f"tcgen05.{self.direction}.sync.aligned.{self.shape}.x{num}{packing}.b32"

    def facts(self) -> dict:
        facts = {
            "shape": self.shape,
            "num": self.num,
            "slabs": self.slabs,
            "direction": self.direction,
            "pack": self.pack,
            "instructions": self.instructions,
            "regs_per_thread": self.regs_per_thread,
            "datapath": self.datapath,
            "ptx": self.ptx(self.num),
        }
        if len(self.nums) > 1:
            facts["nums"] = list(self.nums)
        if self.split_offset:
            facts["split_offset"] = self.split_offset
        if self.slab_stride is not None:
            facts["slab_stride"] = self.slab_stride
        if as_int(self.reg_offset) != 0:
            facts["reg_offset"] = str(self.reg_offset)
        return facts

    def __str__(self) -> str:
        nums = "+".join(f"x{n}" for n in self.nums)
        slabs = f" x {self.slabs} slabs" if self.slabs > 1 else ""
        return (
            f"tcgen05_ldst {self.direction} {self.rows} rows {self.dtype}: .{self.shape} "
            f"{nums}{slabs}{' packed' if self.pack else ''} (datapath {self.datapath}, "
            f"{self.regs_per_thread} registers per thread)"
        )


def _text(layout: Any) -> str:
    return str(layout).replace("T.", "")


def _window(o: Operand) -> tuple[Any, dict[str, Any]]:
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


def _same(a: Any, b: Any) -> bool:
    return bool(tvm_ffi.structural_equal(a.canonicalize(), b))


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


def _match_fragment(reg: Operand, layout: Any, path: Datapath, rows: int, cols: int):
    """(shape, slab stride in elements or None) of the register tile on datapath ``path``."""
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
    if path.name == "B":
        raise Decline(
            f"{reg.role} {reg.name}: register layout {_text(layout)} over {rows}x{cols} is not "
            f"datapath B's register tile (thread t holds TMEM lane t: "
            f"tcgen05_ldst.datapath_b_layout({cols}), which is tcgen05_atom_layout('32x32b', "
            f"(64, {cols}), 'float32')); a .16x* fragment reads datapath F's lanes "
            "32w..32w+15 instead"
        )
    hint = (
        "; .32x32b needs 128 rows with one row per thread: (128, K):(1@tid_in_wg, 1)"
        if path.name == "D"
        else "; a 64-row tile of datapath F takes a 64-row .16x* fragment"
    )
    raise Decline(
        f"{reg.role} {reg.name}: register layout {_text(layout)} over {rows}x{cols} matches no "
        f"tcgen05 fragment of datapath {path.name} (tried {', '.join(tried) or 'none'}{hint})"
    )


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


def _classify(tmem: Operand, layout: Any, rows: int, cols: int) -> tuple[Datapath, bool] | None:
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


def _not_a_datapath(tmem: Operand, layout: Any, offset: dict, rows: int, cols: int) -> str:
    """Why a TMEM window is no data-path layout, with the ISA rule it breaks."""
    seen = f"{tmem.role} {tmem.name}: TMEM layout {_text(layout)} over {tmem.describe}"
    strides = (1, 2) if tmem.elem_bits == 16 else (1,)
    if rows == 64:
        n = as_int(tmem.shape[1])
        is_64 = as_int(tmem.shape[0]) == 64 and n is not None
        whole = [_tmem_layout("B", n, s) for s in strides] if is_64 else []
        if any(b is not None and _same(tmem.buffer.layout, b.canonicalize()) for b in whole):
            return (
                f"{seen} is a column window of a datapath B tile (row r, column c at lane "
                f"r + 64*(c // (N/2)), PTX ISA 9.7.16.10.5.2): its columns sit on lanes 0-63 or "
                "64-127 only, not in all four warps' chunks; copy the whole (64, N) tile"
            )
        identity = (TileLayout(S[(64, cols) : (1 @ TLane, s @ TCol)]) for s in strides)
        if any(_same(i, layout) for i in identity):
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
    names = [p for p in DATAPATHS.values() if p.rows == rows]
    needs = "; ".join(
        f"{p.name}: {p.placement} (tmem_datapath_layout('{p.name}', {rows}, N))" for p in names
    )
    return (
        f"{seen} is not datapath {' or '.join(p.name for p in names)} ({needs}; "
        "TCol stride 1, or 2 for one 16-bit element per cell)"
    )


def _match_datapath(tmem: Operand, layout: Any, offset: dict, rows: int, cols: int):
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


def _split_nums(units: int, cap: int) -> tuple[int, ...]:
    """``units`` .num units as few powers of two of at most ``cap`` as possible."""
    nums = [cap] * (units // cap)
    rest = units % cap
    nums += [1 << b for b in range(rest.bit_length() - 1, -1, -1) if rest >> b & 1]
    return tuple(nums)


def _register_offset(reg: Operand, offset: dict, loops: Any) -> Any:
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


def plan(call: TileCall) -> Tcgen05Plan:
    src = call.operand("src")
    tmem, reg = _tmem_and_reg(call)
    for o in (reg, tmem):
        check(len(o.shape) == 2, f"{o.role} {o.name} is {len(o.shape)}-D; needs a 2-D buffer")
    rows, cols = reg.extents
    check(
        rows in (64, 128),
        f"{reg.role} {reg.name}: {rows} rows; a warpgroup moves 128 rows (TMEM datapath D) "
        "or 64 (datapath F or B)",
    )
    bits = reg.elem_bits
    check(
        cols * bits % 32 == 0,
        f"{reg.role} {reg.name}: a row of {cols} {reg.dtype} is not a whole number of 32-bit "
        "registers",
    )
    with call.target:  # canonical layouts resolve thread axes for the target
        reg_layout, reg_off = _window(reg)
        tmem_layout, tmem_off = _window(tmem)
        path, pack, lane, col = _match_datapath(tmem, tmem_layout, tmem_off, rows, cols)
        shape, stride = _match_fragment(reg, reg_layout, path, rows, cols)
    atom = SHAPES[shape]
    slabs = rows // atom.rows_per_issue if atom.rows_per_issue < 128 else 1
    regs_per_slab = rows * cols * bits // (32 * 128 * slabs)
    slab_stride = None
    if stride is not None:
        check(
            stride * bits % 32 == 0 and stride * bits // 32 >= regs_per_slab,
            f"{reg.role} {reg.name}: its second 16-lane slab starts {stride} {reg.dtype} after "
            f"the first, inside the first's {regs_per_slab} registers or within a register",
        )
        slab_stride = stride * bits // 32
    units = regs_per_slab // atom.regs_per_num
    split = units * atom.cols_per_num * (2 if pack else 1) if atom.accesses == 2 else 0
    loops = getattr(call.ctx, "var_range_map", None) or {}  # loop variable -> Range
    return Tcgen05Plan(
        direction="ld" if src.memory == "tmem" else "st",
        shape=shape,
        nums=_split_nums(units, atom.max_num),
        slabs=slabs,
        pack=pack,
        dtype=reg.dtype,
        rows=rows,
        datapath=path.name,
        lane_offset=lane,
        col_offset=col,
        reg_offset=_register_offset(reg, reg_off, loops),
        split_offset=split,
        slab_stride=slab_stride,
    )


# -- emission -------------------------------------------------------------------------------
def _instruction(plan: Tcgen05Plan, base: Any, warp: Any, slab: int, piece: tuple, regs: Any):
    """One tcgen05.ld/st of one warp. A TMEM address is (lane << 16) | column; warp w
    names lanes in its own chunk 32w..32w+31, the second slab of a .16x* tile 16 lanes on."""
    num, before = piece
    atom = plan.atom
    lane = plan.lane_offset + 32 * warp + 16 * slab
    col = plan.col_offset + before * atom.cols_per_num * (2 if plan.pack else 1)
    taddr = T.uint32(base) + T.uint32(lane) * T.uint32(1 << 16) + T.uint32(col)
    first = plan.reg_offset + slab * plan.slab_registers + before * atom.regs_per_num
    values = [regs[first + i] for i in range(num * atom.regs_per_num)]
    split = [plan.split_offset] if plan.split_offset else []
    if plan.direction == "ld":
        return T.ptx[plan.ptx(num)](*values, taddr, *split)
    return T.ptx[plan.ptx(num)](taddr, *split, *values)


@variant(
    "copy_async",
    "tcgen05_ldst",
    priority=10,
    predicates=[
        requires_cuda,
        requires_valid_copy,
        requires_memory_pair(TMEM_LOCAL_PAIRS),
        requires_warpgroup_scope,
        requires_all_threads_active,
        requires_tensor_memory_target,
        requires_8_16_or_32_bit,
        requires_tmem_address,
    ],
    plan=plan,
)
def emit(plan: Tcgen05Plan, call: TileCall):
    """tcgen05.ld / tcgen05.st per warp, slab and piece; the wait is the caller's."""
    tmem, reg = _tmem_and_reg(call)
    base = tmem.buffer.allocated_addr[0]
    reg_buf = reg.buffer
    words = storage_words(reg_buf, reg.elem_bits, 32)

    def issue_all(warp: Any, regs: Any) -> None:
        for slab in range(plan.slabs):
            for piece in plan.pieces():
                T.evaluate(_instruction(plan, base, warp, slab, piece, regs))

    # fmt: off
    @impl_prim_func
    def impl():
        warp = T.meta_var(warp_index_in_warpgroup(call))
        regs = T.decl_buffer((words,), "uint32", data=reg_buf.data, scope="local")
        issue_all(warp, regs)
    # fmt: on
    return impl
