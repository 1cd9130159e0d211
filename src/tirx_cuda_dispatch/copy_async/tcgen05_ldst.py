"""copy_async -> tcgen05_ldst: Blackwell tensor memory <-> registers, either way.

Accepts: a CUDA target with tensor memory (sm_100a/f, sm_103a/f, sm_110a/f); warpgroup
scope with every thread active (the four warps move the tile together: warp ``w`` can
only reach TMEM lanes ``32w .. 32w+31``); a valid copy between a ``tmem`` buffer and a
``local`` register view, 16- or 32-bit elements, ``(rows, cols)`` regions of 128 or 64
rows.

Emits ``tcgen05.ld`` (tmem -> local) or ``tcgen05.st`` (local -> tmem), PTX ISA 9.2
section 9.7.16.8.3/4, shapes 9.7.16.2.3.1. The register layout picks the shape: it is
compared with TVM's ``tcgen05_atom_layout`` for ``.16x256b``, ``.16x128b``, ``.16x64b``
(widest first), then with the half-warp ``.16x32bx2`` fragment, and falls back to
``.32x32b`` (a thread owns one row). A 128-row ``.16x*b`` fragment spans two 16-lane
slabs of each warp's TMEM chunk, so every warp issues twice (lane +0 and +16). The TMEM
layout must be the datapath the fragment reads (``tmem_datapath_layout`` D for 128 rows,
F for 64), with 16-bit elements either dense (two per 32-bit cell) or one per cell, which
takes ``.pack::16b`` / ``.unpack::16b``. A fragment wider than one instruction's 128
registers is split into several instructions.

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
    S,
    TCol,
    TileLayout,
    TLane,
    tcgen05_atom_layout,
    tmem_datapath_layout,
    wg_local_layout,
)
from tvm.tirx.layout import laneid as axis_laneid
from tvm.tirx.layout import wid_in_wg as axis_wid_in_wg

from ..call import Operand, TileCall, as_int
from ..codegen import impl_prim_func, storage_words, warp_index_in_warpgroup
from ..errors import Decline, check
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
    dst, src = call.operand(0, "dst"), call.operand(1, "src")
    return (src, dst) if src.memory == "tmem" else (dst, src)


def requires_tmem_address(call: TileCall) -> tuple[bool, str | None]:
    """The tmem buffer says where it lives (``decl_buffer(..., allocated_addr=...)``)."""
    tmem, _ = _tmem_and_reg(call)
    addr = tmem.buffer.allocated_addr
    if addr is None or len(addr) == 0:
        return False, f"{tmem.role} {tmem.name} has no allocated_addr; needs its TMEM address"
    return True, None


def requires_16_or_32_bit(call: TileCall) -> tuple[bool, str | None]:
    """tcgen05.ld/st move 32-bit cells: one 32-bit element or two 16-bit ones (or one,
    with .pack::16b)."""
    _, reg = _tmem_and_reg(call)
    if reg.elem_bits not in (16, 32):
        return False, f"{reg.role} {reg.name} holds {reg.dtype}; needs 16- or 32-bit elements"
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
    datapath: str  # "D": 128 rows, lane = row; "F": 64 rows, 16 lanes of each warp's chunk
    lane_offset: int  # TMEM lane of row 0 within the warp's chunk (16: F's upper half)
    col_offset: Any  # 32-bit TMEM column of the tile's column 0 (int or PrimExpr)
    reg_offset: int  # 32-bit register of the fragment's first value
    split_offset: int = 0  # .16x32bx2: columns between the two half-warp accesses

    def __post_init__(self) -> None:
        atom = SHAPES[self.shape]
        assert all(0 < n <= atom.max_num and n & (n - 1) == 0 for n in self.nums), self.nums

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


def _register_candidates(rows: int, cols: int, dtype: str, bits: int):
    """(shape, register layout) pairs to try, widest instruction first."""
    for name in ("16x256b", "16x128b", "16x64b"):
        try:
            yield name, tcgen05_atom_layout(name, (rows, cols), dtype)
        except ValueError:  # the shape's column factor or .num range does not fit cols
            pass
    if cols % 2 == 0 and (cols // 2) * bits % 32 == 0:
        yield "16x32bx2", half_warp_layout(rows, cols)
    if rows == 128:
        yield "32x32b", wg_local_layout(cols)


def _match_fragment(reg: Operand, layout: Any, rows: int, cols: int) -> str:
    tried = []
    for name, candidate in _register_candidates(rows, cols, reg.dtype, reg.elem_bits):
        if _same(candidate, layout):
            return name
        tried.append("." + name)
    raise Decline(
        f"{reg.role} {reg.name}: register layout {_text(layout)} over {rows}x{cols} matches no "
        f"tcgen05 fragment (tried {', '.join(tried) or 'none'}; .32x32b needs 128 rows "
        "with one row per thread: (128, K):(1@tid_in_wg, 1))"
    )


def _tmem_layout(datapath: str, cols: int, col_stride: int) -> TileLayout:
    """TMEM tile of a datapath; ``col_stride`` 2 puts each 16-bit element in its own
    32-bit cell (TCol counts elements, two to a cell)."""
    if col_stride == 1:
        return tmem_datapath_layout(datapath, 128 if datapath == "D" else 64, cols)
    if datapath == "D":
        return TileLayout(S[(128, cols) : (1 @ TLane, col_stride @ TCol)])
    return TileLayout(S[(4, 16, cols) : (32 @ TLane, 1 @ TLane, col_stride @ TCol)])


def _match_datapath(tmem: Operand, layout: Any, offset: dict, rows: int, cols: int):
    """(pack, lane offset, 32-bit column offset) of the TMEM tile, or a decline."""
    datapath = "D" if rows == 128 else "F"
    strides = (1, 2) if tmem.elem_bits == 16 else (1,)
    pack = next((s == 2 for s in strides if _same(_tmem_layout(datapath, cols, s), layout)), None)
    if pack is None:
        what = "lane = row" if datapath == "D" else "row r at lane 32*(r//16) + r%16"
        raise Decline(
            f"{tmem.role} {tmem.name}: TMEM layout {_text(layout)} over {tmem.describe} is not "
            f"datapath {datapath} ({what}; tmem_datapath_layout('{datapath}', {rows}, N), "
            "TCol stride 1, or 2 for one 16-bit element per cell)"
        )
    lane = as_int(offset.get("TLane", 0))
    lanes_ok = (0,) if datapath == "D" else (0, 16)
    check(
        lane in lanes_ok,
        f"{tmem.role} {tmem.name}: tile starts at TMEM lane {offset.get('TLane')}; datapath "
        f"{datapath} starts at lane {' or '.join(map(str, lanes_ok))} of each warp's chunk",
    )
    col_bits = tvm.tirx.const(0, "int32") + offset.get("TCol", 0) * tmem.elem_bits
    ana = sym.Analyzer()
    check(
        ana.can_prove_equal(tvm.tirx.floormod(col_bits, 32), 0),
        f"{tmem.role} {tmem.name}: first column {offset.get('TCol')} is not at a 32-bit "
        "TMEM cell boundary",
    )
    col = ana.simplify(tvm.tirx.floordiv(col_bits, 32))
    return pack, lane, (as_int(col) if as_int(col) is not None else col)


def _split_nums(units: int, cap: int) -> tuple[int, ...]:
    """``units`` .num units as few powers of two of at most ``cap`` as possible."""
    nums = [cap] * (units // cap)
    rest = units % cap
    nums += [1 << b for b in range(rest.bit_length() - 1, -1, -1) if rest >> b & 1]
    return tuple(nums)


def plan(call: TileCall) -> Tcgen05Plan:
    src = call.operand(1, "src")
    tmem, reg = _tmem_and_reg(call)
    for o in (reg, tmem):
        check(len(o.shape) == 2, f"{o.role} {o.name} is {len(o.shape)}-D; needs a 2-D buffer")
    rows, cols = reg.extents
    check(
        rows in (64, 128),
        f"{reg.role} {reg.name}: {rows} rows; a warpgroup moves 128 rows (TMEM datapath D) "
        "or 64 (datapath F)",
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
        shape = _match_fragment(reg, reg_layout, rows, cols)
        pack, lane, col = _match_datapath(tmem, tmem_layout, tmem_off, rows, cols)
    first = as_int(reg_off.get("m", 0))
    check(
        first is not None and first * bits % 32 == 0,
        f"{reg.role} {reg.name}: register offset {reg_off.get('m')} is not a constant "
        "32-bit register",
    )
    atom = SHAPES[shape]
    slabs = rows // atom.rows_per_issue if atom.rows_per_issue < 128 else 1
    regs_per_slab = rows * cols * bits // (32 * 128 * slabs)
    units = regs_per_slab // atom.regs_per_num
    split = units * atom.cols_per_num * (2 if pack else 1) if atom.accesses == 2 else 0
    return Tcgen05Plan(
        direction="ld" if src.memory == "tmem" else "st",
        shape=shape,
        nums=_split_nums(units, atom.max_num),
        slabs=slabs,
        pack=pack,
        dtype=reg.dtype,
        rows=rows,
        datapath="D" if rows == 128 else "F",
        lane_offset=lane,
        col_offset=col,
        reg_offset=first * bits // 32,
        split_offset=split,
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
    first = plan.reg_offset + slab * plan.regs_per_slab + before * atom.regs_per_num
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
        requires_16_or_32_bit,
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
