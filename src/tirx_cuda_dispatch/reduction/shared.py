"""sum / max / min -> shared: a reduction whose src is in shared memory.

Accepts: a CUDA target; thread, warp, warpgroup or CTA scope, split among the threads
that run the call (an enclosing ``if`` may narrow it to whole warps, or at warp scope to
an aligned power-of-two range of lanes); src a ``shared`` tile with a memory layout
(swizzles too); dst in shared memory, or in registers every thread holds whole (a layout
without thread axes: the statistics a normalization broadcasts); the reduction rules of
:mod:`.ops`; odd extents (guarded reads, masked outputs).

Emits: a schedule synthesized from src's layout (:mod:`.schedule`). Nothing fixes who
reads what, so the plan tries thread placements and keeps the cheapest by one cost rule
(SM clocks per warp: shared-memory wavefronts with bank conflicts, shuffles, adds, the
workspace): consecutive lanes on the innermost contiguous run (vector loads of up to 16
bytes, coalesced and conflict-free), the rest on the other dimensions, spatial ones
first or in memory order. Every thread of the scope works; lanes that share an output
combine by ``shfl.xor``, warps through a shared workspace (no one-warp-per-row). 16-bit
data accumulates in float32.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..call import Operand, TileCall
from ..codegen import participant_index
from ..errors import Decline
from ..irfacts import as_int
from ..layout.atoms import MemoryView, element_offsets, memory_view
from ..layout.banks import wavefront_costs
from ..layout.partition import Access, MemoryAccesses
from ..layout.register import (
    MEMORY_AXIS,
    atoms_by_dim,
    register_view,
    thread_axes_misfit,
)
from ..layout.vector import vector_candidates, vector_misfit
from ..participation import Participants, narrowing
from ..predicates import requires_cuda, requires_known_participants, requires_scope
from ..registry import variant
from ..scopes import WARP_SIZE
from . import combine
from .combine import Reduction
from .ops import COMMON_PREDICATES, ReduceShape, accum_flag, accumulate_dtype, shape_of
from .schedule import Digit, Schedule, src_coordinates

BARRIER_CLOCKS = 20  # a bar.sync's cost in the cost rule (it waits for the slowest warp)


def requires_shared_src(call: TileCall) -> tuple[bool, str | None]:
    src = call.operand("src")
    if src.memory != "shared":
        return False, f"src {src.name} is {src.scope}; this variant reduces shared memory"
    return True, None


def requires_dst_shared_or_registers(call: TileCall) -> tuple[bool, str | None]:
    """dst in shared memory, or in registers: held whole by every thread (no thread axes),
    or placed over the scope's threads by its layout (filled from a workspace, so every
    thread of the scope must run the call)."""
    dst = call.operand("dst")
    if dst.memory == "shared":
        return True, None
    if dst.memory != "local":
        return False, f"dst {dst.name} is {dst.scope}; needs shared memory or registers"
    try:
        view = register_view(dst)
    except Decline as why:
        return False, str(why)
    if not view.thread_axes:
        return True, None
    misfit = thread_axes_misfit(view, call.scope)
    if misfit is not None:
        return False, misfit
    narrowed = narrowing(call, call.participation.participants)
    if narrowed is not None:
        return False, (
            f"dst {dst.name}'s layout gives outputs to every thread of the {call.scope}, but "
            f"the scope is narrowed ({narrowed}); reduce into shared memory there"
        )
    return True, None


def requires_no_kept_axes(call: TileCall) -> tuple[bool, str | None]:
    shape = shape_of(call)
    if isinstance(shape, ReduceShape) and shape.kept:
        axis, extent = shape.kept[0]
        return False, (
            f"dst keeps reduced axis {axis} with extent {extent} (TVM's form for register "
            "layouts); a reduction of shared memory needs extent 1 there"
        )
    return True, None


@dataclass(frozen=True)
class SharedReducePlan(Reduction):
    """Facts of one shared-memory reduction: the chosen schedule, its cost, and what its
    warps need to meet (:class:`.combine.Reduction`)."""

    est_clocks: float = 0.0
    wavefronts: int = 0  # of one warp's first load: 1 per 128 bytes when conflict-free
    placement: str = ""  # which thread placement won
    src_view: MemoryView | None = field(default=None, compare=False)  # for the picture

    def memory_accesses(self) -> MemoryAccesses:
        """Every load of src one call makes, as ``draw`` pictures them: per thread, its
        loads in the order it issues them (round = the load's index: the slots' loads one
        after another, each over the thread's serial elements, ``vec`` elements a load),
        at src's physical offsets (swizzle applied; a base that is not a constant counts
        as 0, as in the bank model). Reads past an odd extent are not made."""
        s, view = self.schedule, self.src_view
        base = as_int(view.base)
        offsets = element_offsets(view) + (0 if base is None else base)
        if view.swizzle is not None:
            offsets = np.vectorize(view.swizzle.apply)(offsets)
        coords, valid = src_coordinates(s)
        index = np.ravel_multi_index(
            tuple(np.where(valid, c, 0) for c in coords), s.src_extents
        )  # fmt: skip
        by_slot = s.vec if s.vec_on == "slot" else 1  # a load covers vec slots
        by_serial = s.vec if s.vec_on == "serial" else 1  # or vec serial elements
        threads, slots, serial = index.shape
        items = []
        for t in range(threads):
            for g, j in itertools.product(range(slots // by_slot), range(serial // by_serial)):
                at = np.s_[
                    t, g * by_slot : g * by_slot + by_slot, j * by_serial : (j + 1) * by_serial
                ]
                if not valid[at].all():
                    continue  # a guarded read past an odd extent: not made
                round_ = g * (serial // by_serial) + j
                items.append(Access(round_, t, int(offsets[index[at].min()]), by_slot * by_serial))
        return MemoryAccesses("src", tuple(items))

    def facts(self) -> dict:
        facts = self.common_facts()
        facts["placement"] = self.placement
        facts["wavefronts_per_load"] = self.wavefronts
        facts["est_clocks"] = round(self.est_clocks, 1)
        if self.schedule.masked:
            facts["masked"] = "odd extents: reads past them are skipped"
        return facts

    def __str__(self) -> str:
        return f"shared {self.op}: {self.schedule.describe()}"


# -- synthesis ---------------------------------------------------------------------------
@dataclass(frozen=True)
class _Cell:
    """One memory atom of src: its dimension, its step along it, extent, memory stride."""

    dim: int
    index_stride: int
    extent: int
    stride: int
    reduced: bool


def _cells(src: Operand, view: MemoryView, shape: ReduceShape) -> list[_Cell]:
    tagged = [(ext, stride, MEMORY_AXIS) for ext, stride in view.atoms]
    cells = []
    for dim, atoms in enumerate(atoms_by_dim(tagged, src.extents, src.name)):
        inner = 1
        for ext, stride, _ in reversed(atoms):
            cells.append(_Cell(dim, inner, ext, stride, dim in shape.axes))
            inner *= ext
    return cells


def _pow2_ceil(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def _place(
    lane_order: list[_Cell],
    warp_order: list[_Cell],
    lanes: int,
    warps: int,
    vec: int,
    vec_cell: _Cell | None,
    spatial_threads: bool = True,
    first_lanes: int = 32,
) -> list[Digit]:
    """Digits for one thread placement: lanes go onto ``lane_order``'s cells (after the
    vector, off ``vec_cell``; at most ``first_lanes`` onto the first cell), then warps onto
    what is left of ``warp_order``'s; inside a cell consecutive threads take consecutive
    elements (lanes innermost); what no thread takes is walked in the thread. Without
    ``spatial_threads`` every thread computes every output (a dst all threads hold)."""
    state = {id(c): [c.extent, c.index_stride, c.stride, []] for c in lane_order}
    if vec_cell is not None and vec > 1:
        st = state[id(vec_cell)]
        st[3].append(_digit("serial" if vec_cell.reduced else "slot", vec, vec_cell, *st[1:3]))
        st[0], st[1], st[2] = st[0] // vec, st[1] * vec, st[2] * vec
    idle = []
    for kind, count, order, step in (
        ("lane", lanes, lane_order, 1),
        ("warp", warps, warp_order, WARP_SIZE),
    ):
        for n, cell in enumerate(order):
            st = state[id(cell)]
            if count <= 1 or st[0] <= 1 or not (cell.reduced or spatial_threads):
                continue
            take = _take(count, st[0], kind)
            if kind == "lane" and n == 0:
                take = min(take, first_lanes)
            d = _digit(kind, take, cell, st[1], st[2])
            st[3].append(Digit(**{**d.__dict__, "thread_stride": step}))
            step *= take
            count //= take
            st[0], st[1], st[2] = -(-st[0] // take), st[1] * take, st[2] * take
        if count > 1:
            idle.append(Digit("idle", count, False, thread_stride=step))
    digits: list[Digit] = []
    for cell in lane_order:
        ext, index_stride, stride, placed = state[id(cell)]
        digits += placed
        if ext > 1:
            kind = "serial" if cell.reduced else "slot"
            digits.append(_digit(kind, ext, cell, index_stride, stride))
    return digits + idle


def _take(left: int, ext: int, kind: str) -> int:
    """Threads of ``left`` to put on a dimension of ``ext`` elements: a power of two for
    lanes (the butterfly's), a divisor of ``left`` for warps."""
    if kind == "lane":
        return min(left, _pow2_ceil(ext))
    return max(d for d in range(1, left + 1) if left % d == 0 and d <= _pow2_ceil(ext))


def _digit(kind: str, extent: int, cell: _Cell, index_stride: int, stride: int) -> Digit:
    return Digit(
        kind,
        extent,
        cell.reduced,
        dim=cell.dim,
        index_stride=index_stride,
        src_stride=stride,
        dst_dim=None if cell.reduced else cell.dim,
        dst_index_stride=0 if cell.reduced else index_stride,
    )


def _with_dst(
    digits: list[Digit], shape: ReduceShape, dst: Operand, fill: bool = False
) -> list[Digit]:
    """Spatial digits with dst's dimension and its stride there (memory offsets, the
    registers of a dst every thread holds whole, or with ``fill`` the row-major outputs
    workspace)."""
    if fill:
        strides = combine.row_major(dst.extents)
    else:
        strides = _dst_strides(dst)
    out = []
    for d in digits:
        if d.reduced or d.dim is None:
            out.append(d)
            continue
        j = shape.dst_dims[d.dim]
        stride = strides[j] * d.index_stride if j is not None else 0
        out.append(Digit(**{**d.__dict__, "dst_dim": j, "dst_index_stride": d.index_stride,
                            "dst_stride": stride}))  # fmt: skip
    return out


def _dst_strides(dst: Operand) -> list[int]:
    """dst's stride per dimension, in memory or registers (its layout must be strided per
    dimension)."""
    if dst.memory == "local":
        tagged = list(register_view(dst).atoms)
    else:
        tagged = [(ext, stride, MEMORY_AXIS) for ext, stride in memory_view(dst).atoms]
    strides = []
    for j, atoms in enumerate(atoms_by_dim(tagged, dst.extents, dst.name)):
        if len(atoms) > 1:
            raise Decline(
                f"dst {dst.name}'s layout splits dimension {j} ({atoms}); a reduction writes "
                "dst through one stride per dimension"
            )
        strides.append(atoms[0][1] if atoms else 0)
    return strides


def _sort_digits(digits: list[Digit]) -> list[Digit]:
    """Slots and serial digits outer -> inner as placed (the vector innermost), threads
    after them."""
    inner_first = {"slot": [], "serial": []}
    rest = []
    for d in digits:
        (inner_first[d.kind] if d.kind in inner_first else rest).append(d)
    # cells were visited innermost first: reverse to outer -> inner
    return [*reversed(inner_first["slot"]), *reversed(inner_first["serial"]), *rest]


def _lanes_and_warps(call: TileCall, parts: Participants) -> tuple[int, int, int]:
    """(lanes per warp, warps, the lane mask) of the threads that run the call."""
    l0, lanes = parts.lane
    if call.scope == "thread":
        return 1, 1, 1
    if lanes != WARP_SIZE:
        aligned = lanes & (lanes - 1) == 0 and l0 % lanes == 0
        if not aligned:
            raise Decline(
                f"the call runs on lanes [{l0}, {l0 + lanes}); a shuffle butterfly needs an aligned "
                "power-of-two range of lanes"
            )
    warps = parts.warp[1] if parts.warp is not None else 1
    if lanes != WARP_SIZE and warps > 1:
        raise Decline(
            f"the call runs on lanes [{l0}, {l0 + lanes}) of {warps} warps; a barrier across "
            "warps needs whole warps (narrow to whole warps, or call it at warp scope)"
        )
    mask = ((1 << lanes) - 1) << l0
    return lanes, warps, mask


def _cost(
    s: Schedule, call: TileCall, lane_count: int, elem_bytes: int
) -> tuple[float, int, float]:
    """(est. SM clocks per warp, wavefronts of one warp's first load, instructions).

    Shared-memory wavefronts and shuffles share one pipe (one warp request per clock per
    SM), adds and every other instruction issue four per clock per SM; a warp's work takes
    the longer of the two, plus a barrier and the workspace where warps combine. Of equal
    estimates the one issuing fewer instructions (wider loads) wins."""
    lanes = np.arange(min(lane_count, WARP_SIZE))
    first = np.zeros_like(lanes)
    for d in s.digits:
        if d.kind in ("lane", "idle") and d.thread_stride < WARP_SIZE:
            first = first + ((lanes // d.thread_stride) % d.extent) * d.src_stride
    _, waves = wavefront_costs(
        np.zeros_like(lanes), lanes, first * elem_bytes, np.full_like(lanes, s.vec * elem_bytes)
    )
    slots = max(s.slot_count, 1)
    vectors = slots * s.per_thread // s.vec
    shuffles = slots * len(s.lane_masks)
    instructions = vectors + slots * s.per_thread + shuffles
    clocks = max(vectors * waves + shuffles, instructions / 4)
    if s.warp_partials > 1:
        clocks += BARRIER_CLOCKS + slots * s.warp_partials
    return clocks, int(waves), instructions


def plan(call: TileCall) -> SharedReducePlan:
    src, dst = call.operand("src"), call.operand("dst")
    shape = shape_of(call)
    view = memory_view(src)
    parts = call.participation.participants
    lanes, warps, lane_mask = _lanes_and_warps(call, parts)
    fill = None
    if dst.memory == "local" and register_view(dst).thread_axes:
        fill = combine.fill_partition(dst, call.scope, call.thread_count or 1)
    spread = dst.memory == "shared" or fill is not None  # threads may compute apart
    cells = _cells(src, view, shape)
    inner = [c for c in cells if c.stride == 1]
    candidates = []
    for bits, vec in vector_candidates(src.elem_bits):
        vec_cell = inner[0] if inner else None
        if vec > 1:
            if vec_cell is None:
                continue
            cap = view.swizzle.unit if view.swizzle is not None else None
            misfit = vector_misfit(
                vec,
                (vec_cell.extent, (1,)),
                [("src", c.stride) for c in cells if c is not vec_cell],
                [("src", view.base)],
            )
            if misfit is not None or (cap is not None and vec > cap):
                continue
        orders = {
            "memory order": sorted(cells, key=lambda c: c.stride),
            "spatial first": sorted(cells, key=lambda c: (c.reduced, c.stride)),
        }
        lane_orders = orders
        if vec_cell is not None and vec > 1:  # the lanes continue the vector's run
            lane_orders = {
                k: [vec_cell, *(c for c in o if c is not vec_cell)] for k, o in orders.items()
            }
        caps = [1 << k for k in range(lanes.bit_length())]  # lanes on the first cell
        for (lane_name, lane_order), (warp_name, warp_order), cap in itertools.product(
            lane_orders.items(), orders.items(), caps
        ):
            placed = _place(lane_order, warp_order, lanes, warps, vec, vec_cell, spread, cap)
            digits = _with_dst(placed, shape, dst, fill is not None)
            s = _schedule(call, shape, digits, vec, vec_cell, lanes * warps)
            clocks, waves, instructions = _cost(s, call, lanes, src.elem_bits // 8)
            name = f"lanes {lane_name} ({cap} on the first), warps {warp_name}, {bits}-bit loads"
            candidates.append((clocks, instructions, len(candidates), s, waves, name))
    if not candidates:
        raise Decline(f"no access width fits src {src.name}'s layout")
    clocks, _, _, s, waves, placement = min(candidates, key=lambda c: c[:3])
    sync = None
    if s.warp_partials > 1 or fill is not None:
        sync = combine.make_sync(call, s.threads)
    group = f"{call.scope} {parts}"
    return SharedReducePlan(
        s, dst.memory, sync, lane_mask, fill, None, group, axes_note=shape.axes_note,
        est_clocks=clocks, wavefronts=waves, placement=placement, src_view=view,
    )  # fmt: skip


def _schedule(call: TileCall, shape: ReduceShape, digits, vec, vec_cell, threads) -> Schedule:
    src, dst = call.operand("src"), call.operand("dst")
    digits = _sort_digits(digits)
    vec_on = None
    if vec > 1 and vec_cell is not None:
        vec_on = "serial" if vec_cell.reduced else "slot"
    per_thread = math.prod(d.extent for d in digits if d.kind == "serial")
    if vec_on == "serial":
        k = vec
    elif vec_on == "slot":
        k = 1
    else:
        k = next(k for k in (combine.MAX_ACCUMULATORS, 2, 1) if per_thread % k == 0)
    return Schedule(
        op=call.op,
        digits=tuple(digits),
        src_extents=tuple(src.extents),
        dst_extents=tuple(dst.extents),
        threads=threads,
        accumulators=k,
        vec=vec,
        vec_on=vec_on,
        src_dtype=src.dtype,
        acc_dtype=accumulate_dtype(src.dtype),
        dst_dtype=dst.dtype,
        accum=accum_flag(call),
    )


def emit(plan: SharedReducePlan, call: TileCall, given: Mapping[str, Any]):
    """The synthesized schedule's fold, butterfly, workspace and dst write (:mod:`.combine`)."""
    return combine.emit_plan(plan, call, participant_index(call), given)


for _op in ("sum", "max", "min"):
    variant(
        _op,
        "shared",
        priority=10,
        order=1,
        predicates=[
            requires_cuda,
            requires_scope("thread", "warp", "warpgroup", "cta"),
            requires_known_participants,
            *COMMON_PREDICATES,
            requires_shared_src,
            requires_dst_shared_or_registers,
            requires_no_kept_axes,
        ],
        plan=plan,
    )(emit)
