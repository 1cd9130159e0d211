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
on D and F the first of ``.16x256b``, ``.16x128b``, ``.16x64b`` (widest first), the
half-warp ``.16x32bx2`` and, on D, ``.32x32b`` (a thread owns one row) whose instructions
move every element between its register and its TMEM cell; on B only ``.32x32b`` (thread
``t`` owns TMEM lane ``t``). A 128-row ``.16x*`` fragment spans two 16-lane slabs of each
warp's TMEM chunk, so every warp issues twice (lane +0 and +16); a column window of a
wider fragment keeps the wider fragment's register distance between the slabs. 16-bit
elements are either dense (two per 32-bit cell) or one per cell, which takes
``.pack::16b`` / ``.unpack::16b``. A fragment wider than one instruction's 128 registers
is split into several instructions. The shapes and data paths are records in
``isa/tcgen05.py``; ``layout/tmem.py`` fits the layouts onto them.

Completion is the caller's: no ``tcgen05.wait::ld`` / ``wait::st`` is emitted, so
several copies can be in flight. Read the registers of a load only after
``T.ptx.tcgen05.wait__ld.sync.aligned()``; reuse the registers or TMEM columns of a store
only after ``T.ptx.tcgen05.wait__st.sync.aligned()``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tvm.script import tirx as T

from ..call import Operand, TileCall
from ..codegen import impl_prim_func, storage_words, warp_index_in_warpgroup
from ..errors import check
from ..irfacts import as_int
from ..isa.tcgen05 import SHAPES, TMEM_FAMILIES, Tcgen05Shape
from ..layout.tmem import match_datapath, match_fragment, operand_window, register_offset
from ..predicates import (
    requires_all_threads_active,
    requires_cuda,
    requires_memory_pair,
    requires_valid_copy,
)
from ..registry import variant
from ..resources import Completion

TMEM_LOCAL_PAIRS = (("tmem", "local"), ("local", "tmem"))


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
    datapath: str  # isa.tcgen05.DATAPATHS: "D" (128 rows), "F" or "B" (64 rows)
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

    def resources(self) -> tuple[Completion, ...]:
        """No wait is emitted, so several copies may be in flight: the caller waits.
        tcgen05.ld writes dst's registers, tcgen05.st reads src's registers and writes
        dst's TMEM columns, both asynchronously."""
        if self.direction == "ld":
            waiter = "T.ptx.tcgen05.wait__ld.sync.aligned() before reading dst"
        else:
            waiter = "T.ptx.tcgen05.wait__st.sync.aligned() before reusing src or reading dst"
        return (Completion(f"tcgen05.{self.direction}", f"the caller: {waiter}"),)

    def __str__(self) -> str:
        nums = "+".join(f"x{n}" for n in self.nums)
        slabs = f" x {self.slabs} slabs" if self.slabs > 1 else ""
        return (
            f"tcgen05_ldst {self.direction} {self.rows} rows {self.dtype}: .{self.shape} "
            f"{nums}{slabs}{' packed' if self.pack else ''} (datapath {self.datapath}, "
            f"{self.regs_per_thread} registers per thread)"
        )


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
    loops = getattr(call.ctx, "var_range_map", None) or {}  # loop variable -> Range
    with call.target:  # canonical layouts resolve thread axes for the target
        reg_layout, reg_off = operand_window(reg)
        tmem_layout, tmem_off = operand_window(tmem)
        path, pack, lane, col, places = match_datapath(tmem, tmem_layout, tmem_off, rows, cols)
        program = match_fragment(reg, reg_layout, path, places, rows, cols, pack)
    atom = program.shape
    return Tcgen05Plan(
        direction="ld" if src.memory == "tmem" else "st",
        shape=atom.name,
        nums=atom.split(program.units),
        slabs=program.slabs,
        pack=pack,
        dtype=reg.dtype,
        rows=rows,
        datapath=path.name,
        lane_offset=lane,
        col_offset=col,
        reg_offset=register_offset(reg, reg_off, loops),
        split_offset=program.split,
        slab_stride=None if program.slab_words == program.regs_per_slab else program.slab_words,
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
def emit(plan: Tcgen05Plan, call: TileCall, given: Mapping[str, Any]):
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
