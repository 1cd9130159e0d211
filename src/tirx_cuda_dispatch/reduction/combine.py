"""The TIR of a reduction schedule (:mod:`.schedule`), for both reduction variants.

A variant decides the digits (from a register layout, or synthesized over shared memory)
and says where src and dst live (:class:`Side`); this module writes the kernel code the
schedule describes, in its summation order:

1. per output slot, the thread folds its serial elements into its accumulators (vector
   loads from shared memory, constant register indices from registers), skipping
   elements past an odd extent, then folds the accumulators;
2. the ``shfl.xor`` butterfly over the reduced lanes (``__shfl_xor_sync``, PTX ISA
   "shfl.sync": every lane of the mask executes it);
3. across warps: leaders (reduced lanes 0) write their partials to the shared workspace,
   a barrier (``bar.sync 0`` for a whole CTA, else a named barrier of the instance's
   threads), and the readers fold the partials in warp order; a call that runs more than
   once (in a loop) first waits at the barrier so that no warp overwrites partials
   another is still reading;
4. dst: registers in every thread, or shared memory by one writer per output; with
   ``accum`` the old value first; one rounding into dst's dtype.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tvm import tirx
from tvm.script import tirx as T

from ..build import Body, all_of, const
from ..codegen import access_dtype, linear_thread_index, storage_words
from ..layout.atoms import MemoryView, common_refinement, memory_view
from ..layout.partition import Dim, ScopePartition
from ..layout.register import induced_partition, register_view
from ..layout.swizzle import Swizzle
from ..resources import NamedBarrier, Workspace
from ..scopes import SCOPES, WARP_SIZE
from .ops import REDUCERS
from .schedule import Digit, Schedule, digit_value

FULL_MASK = 0xFFFFFFFF


@dataclass(frozen=True)
class Side:
    """Where an operand's elements are: its buffer, registers or shared memory, the element
    offset of the region's first element, and a swizzle on top (shared only)."""

    buffer: Any
    memory: str  # "local" or "shared"
    dtype: str
    base: Any
    swizzle: Swizzle | None = None

    @property
    def elem_bits(self) -> int:
        import tvm

        return tvm.runtime.DataType(self.dtype).bits


@dataclass(frozen=True)
class Sync:
    """How the threads of one instance meet at a workspace: ``cta`` (``bar.sync 0``, the
    whole CTA runs the call), ``named`` (``bar.sync id, threads``, one id per instance) or
    ``warp`` (``__syncwarp``); ``repeat``: the call may run again (in a loop), so a barrier
    comes before a workspace is written too."""

    kind: str
    threads: int
    instances: int
    repeat: bool


@dataclass(frozen=True)
class Fill:
    """dst's registers filled from the ``outputs`` workspace (where the schedule's writers
    put every output), as dst's layout places them: ``partition`` is the register-induced
    partition of (dst's registers, the workspace)."""

    partition: ScopePartition
    dst: Side  # the registers


@dataclass(frozen=True)
class Emission:
    """Everything the emitted code needs besides the call's buffers."""

    schedule: Schedule
    src: Side
    dst: Side  # where the writers put the outputs: dst, or the outputs workspace (fill)
    sync: Sync | None  # None: no cross-warp combine and no fill
    lane_mask: int = FULL_MASK  # the lanes that execute the shuffles
    outputs: int = 1  # outputs of one instance (the workspace's row length)
    fill: Fill | None = None


def row_major(extents) -> list[int]:
    """Row-major strides of ``extents``."""
    strides, inner = [], 1
    for e in reversed(list(extents)):
        strides.insert(0, inner)
        inner *= e
    return strides


def fill_partition(dst: Any, scope: str, threads: int) -> ScopePartition:
    """The register-induced partition of (dst's registers, a row-major workspace of every
    output): where each thread reads its registers' outputs in a :class:`Fill`."""
    atoms = tuple(
        (e, st) for e, st in zip(dst.extents, row_major(dst.extents), strict=True) if e != 1
    )
    outputs = MemoryView("outputs", atoms, 0)
    view = register_view(dst)
    if view.thread_axes:
        return induced_partition([view, outputs], 0, scope, threads, [(dst.elem_bits, 1)])
    # every thread holds every output: each reads them all
    rows = common_refinement(tuple((e, st) for e, st, _ in view.atoms), atoms)
    outer = tuple(Dim(e, strides) for e, strides in rows) or (Dim(1, (0, 0)),)
    return ScopePartition(outer, (), 1, dst.elem_bits, (view.base, 0), (None, None))


# -- what both variants' plans share ------------------------------------------------------
MAX_ACCUMULATORS = 4  # independent chains per output: enough to cover an add's latency


def side(opnd: Any) -> Side:
    """Where an operand's elements are (its registers, or its shared memory view)."""
    if opnd.memory == "local":
        return Side(opnd.buffer, "local", opnd.dtype, register_view(opnd).base)
    mem = memory_view(opnd)
    return Side(opnd.buffer, "shared", opnd.dtype, mem.base, mem.swizzle)


def make_sync(call: Any, threads: int) -> Sync:
    """How ``threads`` threads of one instance of the call's scope meet: the whole CTA at
    ``bar.sync 0``, a warp at ``__syncwarp``, otherwise at a named barrier, one id per
    instance the CTA holds (each warp or warpgroup may run its own call). ``repeat``: a
    loop may run the call again with no CTA barrier between (:attr:`Enclosing.repeats`);
    a call whose surroundings are unknown counts as repeating (the safe side)."""
    enclosing = call.enclosing
    repeat = enclosing is None or enclosing.repeats
    cta = call.launch_extents.get("threadIdx.x") or threads
    per_instance = SCOPES[call.scope].threads
    instances = max(cta // per_instance, 1) if per_instance else 1
    if call.scope == "cta" and threads == cta:
        return Sync("cta", threads, 1, repeat)
    if call.scope == "warp":
        return Sync("warp", threads, instances, repeat)
    return Sync("named", threads, instances, repeat)


def instance_index(call: Any, sync: Sync | None) -> Any:
    """Which instance of the scope the thread is in (its slice of the workspaces)."""
    if sync is None or sync.instances == 1:
        return tirx.const(0, "int32")
    return tirx.floordiv(linear_thread_index(call), SCOPES[call.scope].threads)


@dataclass(frozen=True)
class Reduction:
    """What both reduction variants' plans hold: the schedule, how dst is reached, and
    what the warps need to meet (the resources follow from it)."""

    schedule: Schedule
    dst_memory: str
    sync: Sync | None
    lane_mask: int
    fill: ScopePartition | None = None  # dst's registers from the outputs workspace
    fill_because: str | None = None  # why dst's layout cannot take the outputs directly
    barrier_group: str = ""  # the threads that meet: calls of the same threads share ids
    axes_note: str | None = None  # the axes read from src's layout (ops.shape_of)

    @property
    def op(self) -> str:
        return self.schedule.op

    @property
    def outputs(self) -> int:
        return instance_outputs(self.schedule)

    def resources(self) -> tuple:
        s, sync = self.schedule, self.sync
        if sync is None:
            return ()
        out = []
        if s.warp_partials > 1:
            length = workspace_length(s, self.outputs, sync.instances)
            why = f"{s.warp_partials} warps' partials of {self.outputs} outputs per instance"
            out.append(Workspace("partials", "shared", s.acc_dtype, (length,), why))
        if self.fill is not None:
            length = math.prod(s.dst_extents) * sync.instances
            why = "every output, for the threads dst's layout gives it to"
            out.append(Workspace("outputs", "shared", s.acc_dtype, (length,), why))
        if sync.kind == "named":
            why = "the warps of one instance meet at the workspace"
            out.append(NamedBarrier("sync", sync.threads, sync.instances, why, self.barrier_group))
        return tuple(out)

    def attention(self) -> tuple[str, ...]:
        """What the author should read before trusting the plan: the reduced axes taken
        from src's layout (TVM's lane form) rather than the ``axes`` the call names."""
        if not self.axes_note:
            return ()
        return (
            f"reduces over axes {self.axes_note}: TVM's lane form, not the last axis the "
            "call's axes=[-1] names; write the thread axes (axes=[0]) to say so, or give dst "
            "src's extents without the last axis if the columns were meant",
        )

    def common_facts(self) -> dict:
        s = self.schedule
        facts = {"axes": self.axes_note} if self.axes_note else {}
        facts |= {
            "schedule": s.describe(),
            "order": s.order(),
            "accumulate": f"{s.src_dtype} -> {s.acc_dtype} -> {s.dst_dtype}",
            "dst": self.dst_memory,
        }
        if self.fill is not None:
            facts["fill"] = (
                f"dst's registers from the outputs workspace, {self.fill.rounds} per thread"
                + (f" ({self.fill_because})" if self.fill_because else "")
            )
        if self.sync is not None:
            facts["sync"] = _sync_fact(self.sync, s.warp_partials > 1, self.fill is not None)
        return facts


def _sync_fact(sync: Sync, partials: bool, fill: bool) -> str:
    what = {"cta": "bar.sync 0", "warp": "__syncwarp"}.get(
        sync.kind, f"named barrier, {sync.threads} threads"
    )
    meets = int(partials) + int(fill)
    if sync.repeat and not (partials and fill):
        meets += 1  # before the workspace is written again
    return f"{what}, {meets} per call" + (" (it repeats)" if sync.repeat else "")


def emit_plan(plan: Reduction, call: Any, tid: Any, given: Mapping[str, Any]) -> Any:
    """The PrimFunc of a reduction plan: its sides, and with a fill the outputs workspace
    as the writers' destination (``given``: what the plan's resources were provided)."""
    instance = instance_index(call, plan.sync)
    dst = side(call.operand("dst"))
    fill = None
    if plan.fill is not None:
        fill = Fill(plan.fill, dst)
        n = math.prod(plan.schedule.dst_extents)
        base = instance * n if plan.sync.instances > 1 else 0
        dst = Side(given["outputs"], "shared", plan.schedule.acc_dtype, base)
    e = Emission(
        plan.schedule, side(call.operand("src")), dst, plan.sync, plan.lane_mask,
        plan.outputs, fill,
    )  # fmt: skip
    return emit(e, tid, instance, given)


# -- address arithmetic -----------------------------------------------------------------
def _offset(side: Side, digits: tuple[Digit, ...], stride_of, values) -> Any:
    off: Any = side.base
    for d in digits:
        stride = stride_of(d)
        if stride:
            off = off + values(d) * stride
    return side.swizzle.apply(off) if side.swizzle is not None else off


def _coordinate_guard(s: Schedule, values) -> Any:
    """``coordinate < extent`` on every src dimension the digits may run past."""
    conds = []
    for dim, extent in enumerate(s.src_extents):
        ds = [d for d in s.digits if d.dim == dim and d.kind not in ("idle", "unnamed")]
        if max((d.index_stride * d.extent for d in ds), default=1) <= extent:
            continue
        coord: Any = 0
        for d in ds:
            coord = coord + values(d) * d.index_stride
        conds.append(coord < extent)
    return all_of(conds)


def _zero(s: Schedule, kinds: tuple[str, ...], values, only_reduced: bool = False) -> Any:
    """All thread digits of ``kinds`` (reduced ones with ``only_reduced``) are 0."""
    conds = [
        values(d) == 0
        for d in s.digits
        if d.kind in kinds and d.extent > 1 and (d.reduced or not only_reduced)
    ]
    return all_of(conds)


# -- the emitter ----------------------------------------------------------------------------
def emit(e: Emission, tid: Any, instance: Any, resources: Mapping[str, Any]) -> Any:
    """The PrimFunc of the reduction ``e`` describes (see the module docstring); ``tid`` is
    the thread's index in its instance, ``instance`` the instance's index. Threads src's
    layout names nothing in skip the fold and every write, never a barrier (all the
    instance's threads arrive at it) nor the fill (dst may give them outputs)."""
    s = e.schedule
    b = Body()
    named = _zero(s, ("unnamed",), lambda d: digit_value(d, tid, 0, 0, s))
    out = b.local("red_out", s.acc_dtype, max(s.slot_count, 1))
    with b.when(named):
        _fold(b, e, tid, out)
    if e.sync is not None and s.warp_partials > 1:
        _across_warps(b, e, tid, instance, out, resources, named)
    elif e.fill is not None and e.sync.repeat:
        # the outputs a slow thread of the last run still reads
        b.evaluate(barrier(e.sync, resources.get("sync"), instance))
    with b.when(named):
        _write(b, e, tid, out)
    if e.fill is not None:
        b.evaluate(barrier(e.sync, resources.get("sync"), instance))
        _fill(b, e, tid)
    return b.func()


def _fold(b: Body, e: Emission, tid: Any, out: Any) -> None:
    """Every slot's value into ``out``: the thread's elements into its accumulators, the
    accumulators folded, the reduced lanes' butterfly."""
    s = e.schedule
    red = REDUCERS[s.op]
    acc_t = s.acc_dtype
    vec_slot = s.vec if s.vec_on == "slot" else 1
    vec_ser = s.vec if s.vec_on == "serial" else 1
    k = s.accumulators
    n = max(s.per_thread, 1)
    acc = b.local("red_acc", acc_t, k * vec_slot)
    load = _loader(b, e, vec_slot * vec_ser)
    # vectors per outer step: a serial loop's body covers the k accumulators once (k | n);
    # registers are unrolled whole, their index n % k a constant either way
    registers = e.src.memory == "local"
    per_outer = 1 if vec_slot > 1 or registers else k // vec_ser
    outer = n // (per_outer * vec_ser)
    with b.loop("r_slot", max(s.slot_count, 1) // vec_slot, unroll=True) as so:
        with b.loop("r_init", k * vec_slot, unroll=True) as i:
            b.store(acc, i, red.identity(acc_t))
        with b.loop("r_step", outer, unroll=registers) as o:
            with b.loop("r_vec", per_outer, unroll=True) as u:
                step = o * per_outer + u
                first = step * vec_ser  # serial index of the vector's first element
                slot0 = so * vec_slot

                def values(d: Digit, slot0=slot0, first=first) -> Any:
                    return digit_value(d, tid, slot0, first, s)

                guard = _coordinate_guard(s, values)
                with b.when(guard):
                    xs = load(values)
                    for j in range(vec_slot * vec_ser):
                        if vec_slot > 1:
                            a = j
                        elif registers:
                            a = (first + j) % k
                        else:
                            a = u * vec_ser + j
                        x = xs(j)
                        if str(x.ty) != acc_t:
                            x = tirx.Cast(acc_t, x)
                        b.store(acc, a, red.tir(acc[a], x))
        for j in range(vec_slot):
            v = acc[j * k]
            for a in range(1, k):
                v = red.tir(v, acc[j * k + a])
            b.store(out, so * vec_slot + j, v)
            for m in s.lane_masks:
                mine = out[so * vec_slot + j]
                other = getattr(T.cuda, "__shfl_xor_sync")(
                    tirx.const(e.lane_mask, "uint32"), mine, m, WARP_SIZE
                )
                b.store(out, so * vec_slot + j, red.tir(mine, other))


def _loader(b: Body, e: Emission, width: int):
    """``load(values) -> xs``: reads the ``width`` elements at the digits' values and
    returns ``xs(j)``, the j-th of them (src's dtype)."""
    s, src = e.schedule, e.src
    if src.memory == "local":
        words = storage_words(src.buffer, src.elem_bits, src.elem_bits)
        regs = b.view("red_src", src.buffer, src.dtype, words, scope="local")

        def load(values):
            base = _offset(src, s.digits, lambda d: d.src_stride, values)
            return lambda j: regs[base + j]

        return load
    bits = src.elem_bits
    if width == 1:
        words = storage_words(src.buffer, bits, bits)
        mem = b.view("red_src", src.buffer, src.dtype, words)

        def load_one(values):
            off = _offset(src, s.digits, lambda d: d.src_stride, values)
            return lambda j: mem[off]

        return load_one
    vbits = width * bits
    mem = b.view("red_src", src.buffer, access_dtype(vbits), storage_words(src.buffer, bits, vbits))
    regs = b.local("red_x", src.dtype, width)
    word = b.view("red_xw", regs, access_dtype(vbits), 1, scope="local")

    def load_vec(values):
        off = _offset(src, s.digits, lambda d: d.src_stride, values)
        b.store(word, 0, mem[off // width])
        return lambda j: regs[j]

    return load_vec


def _output_index(s: Schedule, values) -> Any:
    """An output's index among the instance's outputs: the spatial digits' mixed radix."""
    index: Any = 0
    for d in s.digits:
        if d.reduced or d.kind not in ("slot", "lane", "warp") or d.extent == 1:
            continue
        index = index * d.extent + values(d)
    return index


def _reduced_warp_index(s: Schedule, values) -> Any:
    index: Any = 0
    for d in s.reduced_warps:
        index = index * d.extent + values(d)
    return index


def barrier(sync: Sync, barrier_id: Any, instance: Any) -> Any:
    if sync.kind == "cta":
        return T.cuda.cta_sync()
    if sync.kind == "warp":
        return T.cuda.warp_sync()
    ident = barrier_id if sync.instances == 1 else barrier_id + instance
    return T.ptx.bar.sync(tirx.Cast("uint32", ident), tirx.const(sync.threads, "uint32"))


def _across_warps(
    b: Body, e: Emission, tid: Any, instance: Any, out: Any, res: dict, named: Any
) -> None:
    """The reduced warps' partials through the workspace, folded in warp order (leaders:
    the reduced lanes' lane 0, of threads src names)."""
    s = e.schedule
    red = REDUCERS[s.op]
    ws = res["partials"]
    sync = e.sync
    bar_id = res.get("sync")
    row = s.warp_partials * e.outputs
    if sync.repeat and e.fill is None:  # with a fill, its barrier orders the next run
        b.evaluate(barrier(sync, bar_id, instance))

    def at(slot: int):
        return lambda d: digit_value(d, tid, slot, 0, s)

    leader = all_of(
        [named, _zero(s, ("lane",), at(0), only_reduced=True), _zero(s, ("idle",), at(0))]
    )
    base = instance * row if sync.instances > 1 else 0
    with b.when(leader):
        for slot in range(max(s.slot_count, 1)):
            index = base + _reduced_warp_index(s, at(slot)) * e.outputs + _output_index(s, at(slot))
            b.store(ws, index, out[slot])
    b.evaluate(barrier(sync, bar_id, instance))
    readers = True
    if e.dst.memory != "local":
        readers = all_of([leader, _zero(s, ("warp",), at(0), only_reduced=True)])
    with b.when(readers):
        for slot in range(max(s.slot_count, 1)):
            p = _output_index(s, at(slot))
            v = ws[base + p]
            for r in range(1, s.warp_partials):
                v = red.tir(v, ws[base + r * e.outputs + p])
            b.store(out, slot, v)


def _write(b: Body, e: Emission, tid: Any, out: Any) -> None:
    """dst (or the outputs workspace of a fill): accum's old value first, one rounding into
    dst's dtype."""
    s, dst = e.schedule, e.dst
    red = REDUCERS[s.op]
    acc_t = s.acc_dtype

    def at(slot: int):
        return lambda d: digit_value(d, tid, slot, 0, s)

    writers: Any = True
    if dst.memory != "local":
        writers = all_of(
            [
                _zero(s, ("lane", "warp"), at(0), only_reduced=True),
                _zero(s, ("idle",), at(0)),
            ]
        )
    if dst.memory == "local":
        words = storage_words(dst.buffer, dst.elem_bits, dst.elem_bits)
        view = b.view("red_dst", dst.buffer, dst.dtype, words, scope="local")
    else:
        view = b.view(
            "red_dst",
            dst.buffer,
            dst.dtype,
            storage_words(dst.buffer, dst.elem_bits, dst.elem_bits),
        )
    with b.when(writers):
        for slot in range(max(s.slot_count, 1)):
            values = at(slot)
            off = _offset(
                dst, s.digits, lambda d: 0 if d.kind == "serial" else d.dst_stride, values
            )
            v = out[slot]
            if s.accum and e.fill is None:
                old = view[off]
                v = red.tir(old if str(old.ty) == acc_t else tirx.Cast(acc_t, old), v)
            if dst.dtype != acc_t:
                v = tirx.Cast(dst.dtype, v)
            guard = _spatial_guard(s, values)
            with b.when(guard):
                b.store(view, off, v)


def _fill(b: Body, e: Emission, tid: Any) -> None:
    """dst's registers from the outputs workspace (accum: the old value first)."""
    s, p, dst, ws = e.schedule, e.fill.partition, e.fill.dst, e.dst
    red = REDUCERS[s.op]
    acc_t = s.acc_dtype
    regs = b.view(
        "red_dst", dst.buffer, dst.dtype, storage_words(dst.buffer, dst.elem_bits, dst.elem_bits),
        scope="local",
    )  # fmt: skip
    outputs = b.view("red_outputs", ws.buffer, acc_t, ws.buffer.shape[0])
    with b.loop("r_fill", p.rounds, unroll=True) as rnd:
        reg = p.offset(0, rnd, tid)
        v = outputs[ws.base + p.offset(1, rnd, tid)]
        if s.accum:
            old = regs[reg]
            v = red.tir(old if str(old.ty) == acc_t else tirx.Cast(acc_t, old), v)
        b.store(regs, reg, v if dst.dtype == acc_t else tirx.Cast(dst.dtype, v))


def _spatial_guard(s: Schedule, values) -> Any:
    """The output exists: its spatial coordinates lie inside src's extents."""
    conds = []
    for dim, extent in enumerate(s.src_extents):
        ds = [d for d in s.digits if d.dim == dim and not d.reduced and d.kind != "serial"]
        if not ds or max(d.index_stride * d.extent for d in ds) <= extent:
            continue
        coord: Any = 0
        for d in ds:
            coord = coord + values(d) * d.index_stride
        conds.append(coord < extent)
    return all_of(conds)


def workspace_length(s: Schedule, outputs: int, instances: int) -> int:
    return instances * s.warp_partials * outputs


def instance_outputs(s: Schedule) -> int:
    """The outputs one instance computes (the spatial digits' extents, padded)."""
    return math.prod(
        d.extent for d in s.digits if not d.reduced and d.kind in ("slot", "lane", "warp")
    )


__all__ = [
    "Emission",
    "Fill",
    "Side",
    "Sync",
    "barrier",
    "const",
    "emit",
    "fill_partition",
    "instance_outputs",
    "row_major",
]
