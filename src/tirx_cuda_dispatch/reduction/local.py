"""sum / max / min -> local: a reduction whose src is in registers, as its layout places it.

Accepts: a CUDA target; thread, warp, warpgroup or CTA scope with every thread of it
taking part (or whole warps, as a warp's vote decides, where no output's partials meet
across warps); src a ``local`` register tile whose layout names the scope's threads (or
none: each thread's own array); dst in registers (its layout placing each output on the
threads that compute it) or in shared memory; the reduction rules of :mod:`.ops`
(axes, the reduced shape, dtypes, accumulation); TVM's ``thread_reduce`` form, where dst
keeps a reduced axis over the lanes that share it.

Emits: the schedule the layouts imply (:mod:`.schedule`): each thread folds the registers
it holds of each output into up to four independent accumulators, lanes that hold parts
of one output combine by an ``shfl.xor`` butterfly (PTX ISA "shfl.sync"), warps that do
through a shared-memory workspace behind a barrier (``bar.sync``, a named one for a
warpgroup), and dst gets the result in every thread that holds it (registers) or from one
writer per output (shared memory). 16-bit data accumulates in float32.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..call import Operand, TileCall
from ..codegen import thread_index
from ..errors import Decline
from ..layout.atoms import memory_view
from ..layout.register import (
    MEMORY_AXIS,
    RegisterView,
    atoms_by_dim,
    refine_tagged_pairs,
    register_layout_misfit,
    register_table,
    register_view,
    thread_axes_misfit,
    thread_stride,
)
from ..predicates import requires_cuda, requires_scope, requires_whole_warps_active
from ..registry import variant
from ..scopes import WARP_SIZE
from . import combine
from .combine import Reduction
from .ops import (
    COMMON_PREDICATES,
    ReduceShape,
    accum_flag,
    accumulate_dtype,
    shape_of,
    thread_reduce,
)
from .schedule import Digit, Schedule


class Apart(Decline):
    """dst's layout places outputs on other threads (or registers) than src computes them
    in: the plan then fills dst from a workspace instead."""


def requires_register_src(call: TileCall) -> tuple[bool, str | None]:
    """src is a register tile whose layout names the scope's threads."""
    src = call.operand("src")
    if src is None or src.memory != "local":
        where = "not a region" if src is None else src.scope
        return False, f"src is {where}; this variant reduces registers (local)"
    misfit = register_layout_misfit(src, call.scope)
    return misfit is None, misfit


def requires_dst_registers_or_shared(call: TileCall) -> tuple[bool, str | None]:
    """dst is in registers (a layout over the scope's threads, or over none: every thread
    holds every output) or in shared memory."""
    dst = call.operand("dst")
    if dst.memory not in ("local", "shared"):
        return False, f"dst {dst.name} is {dst.scope}; needs registers (local) or shared memory"
    if dst.memory == "local":
        try:
            view = register_view(dst)
        except Decline as why:
            return False, str(why)
        if view.thread_axes:
            misfit = thread_axes_misfit(view, call.scope)
            if misfit is not None:
                return False, misfit
    return True, None


@dataclass(frozen=True)
class LocalReducePlan(Reduction):
    """Facts of one register reduction: the schedule the layouts imply, and what its warps
    need to meet (:class:`.combine.Reduction`)."""

    pictured_registers = "src"  # ``draw``: src's holders, the plan's line their combining

    @property
    def est_clocks(self) -> float:
        """Per warp: adds issue four per clock per SM, a shuffle takes the shared-memory
        pipe's clock, the workspace one read per partial."""
        s = self.schedule
        slots = max(s.slot_count, 1)
        ops = slots * s.per_thread / 4 + slots * len(s.lane_masks)
        return ops + (slots * s.warp_partials if s.warp_partials > 1 else 0)

    def facts(self) -> dict:
        return self.common_facts()

    def __str__(self) -> str:
        return f"local {self.op}: {self.schedule.describe()}"


# -- from layouts to digits -----------------------------------------------------------------
def _index_strides(atoms: list[tuple[int, int, Any]]) -> list[int]:
    """Each atom's step along its dimension's logical index (outer atoms step further)."""
    return combine.row_major(ext for ext, _, _ in atoms)


def _thread_digit(
    axis: str, stride: int, ext: int, call: TileCall, name: str, **fields: Any
) -> list[Digit]:
    """A thread-axis atom as lane and/or warp digits (split at the warp's edge)."""
    threads = call.thread_count or 1
    t = thread_stride(axis, stride, ext, call.scope, threads)
    index_stride = fields.pop("index_stride", 0)
    dst_index_stride = fields.pop("dst_index_stride", 0)
    if t >= WARP_SIZE or t * ext <= WARP_SIZE:
        kind = "lane" if t < WARP_SIZE else "warp"
        return [Digit(kind, ext, thread_stride=t, index_stride=index_stride,
                      dst_index_stride=dst_index_stride, **fields)]  # fmt: skip
    lanes = WARP_SIZE // t
    if WARP_SIZE % t or ext % lanes:
        raise Decline(f"{name}'s thread axis {axis} steps over warp boundaries unevenly")
    warps = ext // lanes
    return [
        Digit("warp", warps, thread_stride=WARP_SIZE, index_stride=index_stride * lanes,
              dst_index_stride=dst_index_stride * lanes, **fields),
        Digit("lane", lanes, thread_stride=t, index_stride=index_stride,
              dst_index_stride=dst_index_stride, **fields),
    ]  # fmt: skip


def _dst_atoms(dst: Operand, call: TileCall) -> tuple[list[list[tuple[int, int, Any]]], Any, Any]:
    """dst's atoms per dimension, its element base, its swizzle (shared)."""
    if dst.memory == "local":
        view = register_view(dst)
        if view.loop_offset is not None:
            raise Decline(f"dst {dst.name}'s register offset moves with a loop")
        return atoms_by_dim(view.atoms, dst.extents, dst.name), view.base, None
    mem = memory_view(dst)
    tagged = [(ext, stride, MEMORY_AXIS) for ext, stride in mem.atoms]
    return atoms_by_dim(tagged, dst.extents, dst.name), mem.base, mem.swizzle


def _spatial_digits(
    i: int,
    src_atoms,
    dst_atoms,
    shape: ReduceShape,
    call: TileCall,
    names: tuple[str, str],
    dst_registers: bool,
) -> list[Digit]:
    """Digits of spatial dimension ``i``: src's atoms refined against dst's on that dim."""
    j = shape.dst_dims[i]
    try:
        rows = refine_tagged_pairs(src_atoms, dst_atoms if j is not None else [], names)
    except Decline as why:
        raise Apart(str(why)) from None
    digits = []
    for ext, index_stride, (s_stride, s_axis), (d_stride, d_axis) in rows:
        common = dict(dim=i, index_stride=index_stride, dst_dim=j, dst_index_stride=index_stride)
        if s_axis == MEMORY_AXIS:
            if d_axis != MEMORY_AXIS:
                raise Apart(
                    f"dst {names[1]} spreads over {d_axis} outputs that src {names[0]} keeps in "
                    "each thread's registers; dst's layout must place each output on the "
                    "threads that compute it"
                )
            digits.append(
                Digit("slot", ext, False, src_stride=s_stride, dst_stride=d_stride, **common)
            )
            continue
        if d_axis != MEMORY_AXIS and (d_axis, d_stride) != (s_axis, s_stride):
            raise Apart(
                f"dst {names[1]} places outputs on {d_axis} (stride {d_stride}) where src "
                f"{names[0]} computes them on {s_axis} (stride {s_stride}); the layouts must "
                "agree on which thread holds each output"
            )
        if d_axis == MEMORY_AXIS and dst_registers:
            raise Apart(
                f"dst {names[1]} keeps in every thread outputs that src {names[0]} computes on "
                f"{s_axis}; dst's layout must place each output on the threads that compute it"
            )
        dst_stride = d_stride if d_axis == MEMORY_AXIS else 0
        digits += _thread_digit(s_axis, s_stride, ext, call, names[0], reduced=False,
                                dst_stride=dst_stride, **common)  # fmt: skip
    return digits


def _reduced_digits(
    i: int, src_atoms, dst_atoms, shape: ReduceShape, call: TileCall, names: tuple[str, str]
) -> list[Digit]:
    """Digits of reduced dimension ``i``. Where dst keeps the axis (extent above 1), the
    src atoms its atoms match stay apart (TVM's per-thread form): registers as slots, a
    thread axis as spatial threads, or, with ``thread_reduce=True``, reduced threads whose
    every holder keeps the whole result."""
    kept = dict(shape.kept)
    if i in kept and call.operand("dst").memory != "local":
        raise Decline(
            f"dst {names[1]} keeps reduced axis {i} with extent {kept[i]}: TVM's form for "
            "register layouts, where the registers or lanes that share a row keep their "
            "parts; a shared dst needs extent 1 there"
        )
    matched = _kept_atoms(i, src_atoms, dst_atoms if i in kept else [], names)
    digits = []
    j = shape.dst_dims[i]
    for n, ((ext, stride, axis), index_stride) in enumerate(
        zip(src_atoms, _index_strides(src_atoms), strict=True)
    ):
        keep = matched.get(n)
        if axis == MEMORY_AXIS:
            if keep is None:
                digits.append(Digit("serial", ext, True, dim=i, index_stride=index_stride,
                                    src_stride=stride))  # fmt: skip
            else:
                d_stride, d_index = keep
                digits.append(Digit("slot", ext, False, dim=i, index_stride=index_stride,
                                    src_stride=stride, dst_dim=j, dst_index_stride=d_index,
                                    dst_stride=d_stride))  # fmt: skip
            continue
        if keep is None:
            digits += _thread_digit(axis, stride, ext, call, names[0], reduced=True, dim=i,
                                    index_stride=index_stride)  # fmt: skip
        else:
            digits += _thread_digit(axis, stride, ext, call, names[0], reduced=thread_reduce(call),
                                    dim=i, index_stride=index_stride, dst_dim=j,
                                    dst_index_stride=keep[1])  # fmt: skip
    return digits


def _kept_atoms(i: int, src_atoms, dst_atoms, names) -> dict[int, tuple[int, int]]:
    """Which src atoms of dimension ``i`` the dst atoms of a kept axis match: src atom
    index -> (dst register stride, step along dst's dimension). A register atom matches one
    of the same extent, a thread atom one of the same axis, extent and stride."""
    matched: dict[int, tuple[int, int]] = {}
    for (ext, stride, axis), d_index in zip(dst_atoms, _index_strides(dst_atoms), strict=True):
        hits = [
            n
            for n, (s_ext, s_stride, s_axis) in enumerate(src_atoms)
            if n not in matched
            and s_ext == ext
            and s_axis == axis
            and (axis == MEMORY_AXIS or s_stride == stride)
        ]
        if len(hits) != 1:
            where = "registers" if axis == MEMORY_AXIS else f"{axis} (stride {stride})"
            raise Decline(
                f"dst {names[1]} keeps reduced axis {i} on {where} with extent {ext}, which "
                f"matches {'no' if not hits else 'more than one'} part of how src {names[0]} "
                "lays that axis out; keep it on exactly one of src's atoms, or reduce it to 1"
            )
        matched[hits[0]] = (stride if axis == MEMORY_AXIS else 0, d_index)
    return matched


def _thread_coverage(digits: list[Digit], view: RegisterView, call: TileCall) -> list[Digit]:
    """Replicas of src (threads holding copies) as ``idle`` digits, thread-index bits src
    names nothing in as ``unnamed`` ones; the thread digits then tile the scope."""
    threads = call.thread_count or 1
    out = list(digits)
    for ext, stride, axis in view.replicas:
        t = thread_stride(axis, stride, ext, call.scope, threads)
        out.append(Digit("idle", ext, False, thread_stride=t))
    covered = sorted((d.thread_stride, d.extent) for d in out if d.kind in ("lane", "warp", "idle"))
    step, gaps = 1, []
    for t, ext in [*covered, (threads, 1)]:
        if t < step:
            raise Decline(
                f"src {view.operand}'s layout names thread-index steps {covered} (step, "
                f"count): the one of {t} falls inside the threads {step} already tell apart"
            )
        if t % step:  # the threads between would alias named ones: a digit wraps
            raise Decline(
                f"src {view.operand}'s layout steps over {t} threads after naming {step}; "
                "the threads it leaves out must be a whole number of such groups"
            )
        if t > step:
            gaps.append((step, t // step))
        step = t * ext
    for t, ext in gaps:
        out.append(Digit("unnamed", ext, False, thread_stride=t))
    return out


def _check_holders_have_data(digits: list[Digit], dst: Operand, call: TileCall, names) -> None:
    """Every thread dst's layout gives an output to must be one src gives data to."""
    unnamed = [d for d in digits if d.kind == "unnamed"]
    if not unnamed:
        return
    threads = call.thread_count or 1
    held = register_table(register_view(dst), call.scope, threads).elements
    holders = np.flatnonzero((held >= 0).any(axis=1))
    for d in unnamed:
        empty = holders[(holders // d.thread_stride) % d.extent != 0]
        if empty.size:
            raise Apart(
                f"dst {names[1]} holds outputs in thread {int(empty[0])}, to which src "
                f"{names[0]}'s layout gives no data; dst's threads must be src's"
            )


def _check_butterfly(digits: list[Digit], name: str) -> None:
    for d in digits:
        if d.kind == "lane" and d.reduced:
            pow2 = d.extent & (d.extent - 1) == 0 and d.thread_stride & (d.thread_stride - 1) == 0
            if not pow2:
                raise Decline(
                    f"src {name} spreads a reduced axis over {d.extent} lanes {d.thread_stride} "
                    "apart; an shfl.xor butterfly needs a power of two of lanes a power of two "
                    "apart"
                )


def _accumulators(per_thread: int) -> int:
    """Registers are unrolled whole, so any count works: as many as there are elements."""
    return max(1, min(combine.MAX_ACCUMULATORS, per_thread))


def _digits(call, view, src_dims, dst_dims, shape, names, dst_registers: bool) -> list[Digit]:
    """Every digit of the schedule, src's atoms matched against dst's dimension by
    dimension (:func:`_reduced_digits`, :func:`_spatial_digits`)."""
    digits: list[Digit] = []
    for i, atoms in enumerate(src_dims):
        j = shape.dst_dims[i]
        d_atoms = dst_dims[j] if j is not None else []
        if i in shape.axes:
            digits += _reduced_digits(i, atoms, d_atoms, shape, call, names)
        else:
            digits += _spatial_digits(i, atoms, d_atoms, shape, call, names, dst_registers)
    digits = _thread_coverage(digits, view, call)
    _check_butterfly(digits, names[0])
    return digits


def plan(call: TileCall) -> LocalReducePlan:
    src, dst = call.operand("src"), call.operand("dst")
    shape = shape_of(call)  # the axes predicate accepted it
    view = register_view(src)
    if view.loop_offset is not None:
        raise Decline(f"src {src.name}'s register offset moves with a loop")
    names = (src.name, dst.name)
    src_dims = atoms_by_dim(view.atoms, src.extents, src.name)
    dst_dims, _, _ = _dst_atoms(dst, call)
    fill, why_fill = None, None
    try:
        digits = _digits(call, view, src_dims, dst_dims, shape, names, dst.memory == "local")
        if dst.memory == "local":
            _check_holders_have_data(digits, dst, call, names)
    except Apart as apart:
        # dst's layout places outputs on other threads than compute them: the writers put
        # every output in a workspace, and each holder reads its registers' outputs
        if dst.memory != "local" or shape.kept or call.scope == "thread":
            raise
        try:
            fill = combine.fill_partition(dst, call.scope, call.thread_count or 1)
        except Decline as why:
            raise Decline(f"{apart}; and dst cannot be filled from a workspace: {why}") from None
        why_fill = str(apart)
        rows = combine.row_major(dst.extents)
        dst_dims = [
            [(e, st, MEMORY_AXIS)] if e != 1 else []
            for e, st in zip(dst.extents, rows, strict=True)
        ]
        digits = _digits(call, view, src_dims, dst_dims, shape, names, False)
    order = {"slot": 0, "serial": 1, "warp": 2, "lane": 3, "idle": 4, "unnamed": 5}
    digits.sort(key=lambda d: order[d.kind])  # stable: each kind keeps its outer -> inner
    per_thread = math.prod(d.extent for d in digits if d.kind == "serial")
    schedule = Schedule(
        op=call.op,
        digits=tuple(digits),
        src_extents=tuple(src.extents),
        dst_extents=tuple(dst.extents),
        threads=call.thread_count or 1,
        accumulators=_accumulators(per_thread),
        src_dtype=src.dtype,
        acc_dtype=accumulate_dtype(src.dtype),
        dst_dtype=dst.dtype,
        accum=accum_flag(call),
    )
    threads = call.thread_count or 1
    sync = None
    if schedule.warp_partials > 1 or fill is not None:
        if call.participation.verdict == "warps":
            raise Decline(
                f"{call.participation.detail}; but this reduction meets its partials across "
                f"warps ({'a workspace for dst' if fill is not None else 'warp partials'}): "
                "reduce within each warp, or move it out of the if"
            )
        sync = combine.make_sync(call, threads)
    group = f"{call.scope} x {threads} threads"
    return LocalReducePlan(
        schedule, dst.memory, sync, _lane_mask(schedule), fill, why_fill, group,
        axes_note=shape.axes_note,
    )  # fmt: skip


def _lane_mask(s: Schedule) -> int:
    """The lanes that run the shuffles: those no ``unnamed`` digit leaves out."""
    mask = 0
    for lane in range(WARP_SIZE):
        if all(
            (lane // d.thread_stride) % d.extent == 0
            for d in s.of("unnamed")
            if d.thread_stride < WARP_SIZE
        ):
            mask |= 1 << lane
    return mask


def emit(plan: LocalReducePlan, call: TileCall, given: Mapping[str, Any]):
    """The schedule's fold, butterfly, workspace and dst write (:mod:`.combine`)."""
    return combine.emit_plan(plan, call, thread_index(call), given)


for _op in ("sum", "max", "min"):
    variant(
        _op,
        "local",
        priority=10,
        predicates=[
            requires_cuda,
            requires_scope("thread", "warp", "warpgroup", "cta"),
            requires_whole_warps_active,
            *COMMON_PREDICATES,
            requires_register_src,
            requires_dst_registers_or_shared,
        ],
        plan=plan,
    )(emit)
