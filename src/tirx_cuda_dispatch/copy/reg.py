"""copy -> reg: a synchronous copy between registers and shared or global memory, either way.

Accepts: a CUDA target; scope thread / warp / warpgroup / cta with every thread of it
active; a valid copy with exactly one side in registers (``local``) and the other in shared
or global memory; a register layout whose thread axes name the scope's threads, each once;
a memory side that slices to the region.

Emits: the register layout already says which thread owns which element, so the
partition is induced from it (:mod:`..layout.register`): each thread's private bundle,
in register order, at the widest vector that the bundle's contiguous tail, the strides and
the bases allow (thread-axis strides excluded: they count threads, not addresses). A
serial loop then moves one vector per round between the flat per-thread registers and
the thread's memory address (``ld``/``st`` ``.shared``/``.global``, PTX ISA "Data Movement
and Conversion Instructions"); a swizzled shared offset goes through the swizzle.

On shared memory the rounds' order is bank-conflict aware (:mod:`..layout.round_order`):
where lanes walking their bundles in the same order collide on banks (lane ``i`` owning
row ``i`` of 8/16/32 float32: 2/4/8-way), each lane rotates its order, and a barrel
shifter of selects puts every vector back in its own registers, so no register index
depends on the lane (which would move the array to local memory). A cost rule in SM
clocks decides whether the rotation pays; explain() shows each step's conflict degree.

A register region may start at an offset that moves with enclosing loops (the staging loop
``for i in range(n): Tx.copy(R[i*4 : i*4+4], A[...])``) when that offset is affine in loops
of constant trip count. Register indices must still be compile-time constants, and the
emitter cannot unroll the author's loop, so every access picks its registers among the
offset's few values, each under the guard "the loops are at that iteration", through a
constant index: where the loop is unrolled (``T.unroll`` in TIR, or by the CUDA compiler)
the guards fold away; where it is not, they cost a predicated move per slot but the array
stays in registers (no local memory either way).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tvm.script import tirx as T

from ..call import Operand, TileCall
from ..codegen import (
    WIDE_BITS,
    CacheHints,
    access_dtype,
    access_view,
    cache_hints,
    impl_prim_func,
    load_global_hinted,
    store_global_hinted,
    thread_index,
)
from ..errors import Decline
from ..irfacts import as_int
from ..layout.atoms import memory_view
from ..layout.partition import MemoryAccesses, OnPartition, ScopePartition
from ..layout.register import (
    LoopOffset,
    induced_partition,
    register_layout_misfit,
    register_view,
)
from ..layout.round_order import Rotation, RoundOrder, choose_round_order
from ..layout.vector import vector_candidates
from ..predicates import (
    register_side,
    requires_all_threads_active,
    requires_cuda,
    requires_memory_pair,
    requires_scope,
    requires_valid_copy,
)
from ..registry import variant

WIDE_MIN_SM = 100  # ld/st.global.v8 (256 bits a thread): sm_100 and newer (PTX ISA 8.8)

REG_PAIRS = (("shared", "local"), ("global", "local"), ("local", "shared"), ("local", "global"))


def _sides(call: TileCall) -> tuple[Operand, Operand]:
    """(register operand, memory operand)."""
    return register_side(call)


def _loops(call: TileCall) -> Any:
    """The loop variables in scope and their ranges (TVM's ``var_range_map``)."""
    return getattr(call.ctx, "var_range_map", None) or {}


def requires_register_layout(call: TileCall) -> tuple[bool, str | None]:
    """The register layout slices to the region and names only the scope's thread axes;
    the region starts at a constant or at an offset affine in loops of constant trip count."""
    misfit = register_layout_misfit(_sides(call)[0], call.scope, _loops(call))
    return misfit is None, misfit


def requires_memory_side_sliceable(call: TileCall) -> tuple[bool, str | None]:
    """The shared/global side has a plain memory layout over the region."""
    _, mem = _sides(call)
    try:
        memory_view(mem)
    except Decline as why:
        return False, str(why)
    return True, None


@dataclass(frozen=True)
class RegPlan(OnPartition):
    """Facts of one register<->memory copy: each thread's bundle and how it moves."""

    direction: str  # "shared->local", "local->global", ...
    dtype: str
    elem_bits: int
    partition: ScopePartition  # operands in the order (register, memory)
    order: RoundOrder | None = None  # shared memory only: the rounds' order per lane
    loop_offset: LoopOffset | None = None  # the register start's part that moves with loops
    register_base: int = 0  # the register start's constant part
    hints: CacheHints = CacheHints()  # global memory only: the copy's cache hints

    @property
    def through_helper(self) -> bool:
        """Each access is an ``ld``/``st.global`` of ours: the cache hints name a form, or
        it is 256 bits wide (PTX's ``.v8``: a C vector type would be two accesses)."""
        return not self.hints.empty or self.vec_bits == WIDE_BITS

    @property
    def rotation(self) -> Rotation | None:
        return self.order.rotation if self.order is not None else None

    @property
    def est_clocks(self) -> float | None:
        """Estimated SM clocks of the shared-memory side (the dispatch cost rule)."""
        return self.order.clocks if self.order is not None else None

    @property
    def regs_per_thread(self) -> int:
        return self.outer * self.vec

    def partition_at(self, q: Any) -> ScopePartition:
        """The partition with the enclosing loops at iteration ``q`` of the loop offset (an
        int or a TIR expression): the register start is then ``register_base + value``."""
        if self.loop_offset is None:
            return self.partition
        start = self.register_base + self.loop_offset.at(q)[1]
        return dataclasses.replace(self.partition, bases=(start, *self.partition.bases[1:]))

    def memory_accesses(self) -> MemoryAccesses:
        """Every access of one call, the loops at their first iteration; a memory base that
        is not a constant counts as 0 (offsets relative to it, as in the bank model)."""
        role = "dst" if self.direction.startswith("local") else "src"
        rot = self.rotation
        round_of = rot.round_of if rot is not None else None
        p = self.partition_at(0)
        mem_base = as_int(p.bases[1])
        p = dataclasses.replace(p, bases=(p.bases[0], 0 if mem_base is None else mem_base))
        return MemoryAccesses(role, p.accesses(1, registers=0, round_of=round_of))

    def facts(self) -> dict:
        facts = {
            "vec_bits": self.vec_bits,
            "vec": self.vec,
            "outer": self.outer,
            "regs_per_thread": self.regs_per_thread,
            "threads": self.partition.threads,
            "direction": self.direction,
        }
        if self.partition.swizzles[1] is not None:
            facts["swizzle"] = str(self.partition.swizzles[1])
        if self.partition.narrower_because:
            facts["narrower_because"] = self.partition.narrower_because
        if self.order is not None:
            facts.update(self.order.facts())
        if self.loop_offset is not None:
            facts["register_offset"] = self.register_start
            facts["guarded_slots"] = self.loop_offset.count
        if not self.hints.empty:
            facts["cache_hints"] = str(self.hints)
        return facts

    @property
    def register_start(self) -> str:
        """The register region's first index: ``8 + 4*i (i in [0, 4))``."""
        const = f"{self.register_base} + " if self.register_base else ""
        return f"{const}{self.loop_offset}" if self.loop_offset else str(self.register_base)

    def __str__(self) -> str:
        at = f" at register {self.register_start}" if self.loop_offset else ""
        return (
            f"reg {self.direction} {self.dtype}: {self.regs_per_thread} regs/thread as "
            f"{self.outer} x {self.vec} ({self.vec_bits}-bit){at}"
        )


def plan(call: TileCall) -> RegPlan:
    reg, mem = _sides(call)
    if reg.elem_bits < 8:
        raise Decline(f"{reg.dtype} elements are narrower than a byte; needs 8 bits or more")
    view = register_view(reg, _loops(call))
    widths = vector_candidates(reg.elem_bits)
    if mem.memory == "global" and (call.sm or 0) >= WIDE_MIN_SM:  # .v8 global accesses
        widths = [(WIDE_BITS, WIDE_BITS // reg.elem_bits), *widths]
    partition = induced_partition(
        [view, memory_view(mem)],
        anchor=0,
        scope=call.scope,
        threads=call.thread_count,
        widths=widths,
    )
    src = call.operand("src")
    direction = f"{src.memory}->{call.operand('dst').memory}"
    hints = cache_hints(call.config, "load" if src.memory == mem.memory else "store", call.sm)
    if not hints.empty and mem.memory != "global":
        raise Decline(f"cache hints ({hints}) apply to global memory; {mem.name} is {mem.scope}")
    order = None
    if mem.memory == "shared":
        words = max(1, partition.vec_bits // 32)
        order = choose_round_order(partition, 1, reg.elem_bits // 8, words)
    return RegPlan(
        direction, reg.dtype, reg.elem_bits, partition, order, view.loop_offset, view.base, hints
    )


def _load(plan: RegPlan, dst: Any, src: Any) -> Any:
    """``dst = src`` of one access from memory, in the form the cache hints name."""
    return load_global_hinted(T.address_of(dst), T.address_of(src), plan.vec_bits, plan.hints)


def _store(plan: RegPlan, dst: Any, src: Any) -> Any:
    return store_global_hinted(T.address_of(dst), T.address_of(src), plan.vec_bits, plan.hints)


@variant(
    "copy",
    "reg",
    priority=10,
    order=1,  # after ldstmatrix: where the layouts are m8n8 fragments, the matrix copy wins
    predicates=[
        requires_cuda,
        requires_scope("thread", "warp", "warpgroup", "cta"),
        requires_all_threads_active,
        requires_valid_copy,
        requires_memory_pair(REG_PAIRS),
        requires_register_layout,
        requires_memory_side_sliceable,
    ],
    plan=plan,
)
def emit(plan: RegPlan, call: TileCall, given: Mapping[str, Any]):
    """Serial round loop of vector copies between a thread's registers and memory."""
    if plan.rotation is not None:
        return _emit_rotated(plan, call)
    if plan.loop_offset is not None:
        return _emit_guarded(plan, call)
    reg, mem = _sides(call)
    p = plan.partition

    r_buf, m_buf = reg.buffer, mem.buffer
    vec_bits, elem_bits, rounds = plan.vec_bits, plan.elem_bits, plan.outer
    load = plan.direction.endswith("->local")
    hinted = plan.through_helper

    # fmt: off
    @impl_prim_func
    def impl():
        tid = T.meta_var(thread_index(call))
        r_vecs = access_view(r_buf, vec_bits, elem_bits)
        m_vecs = access_view(m_buf, vec_bits, elem_bits)
        for rnd in range(rounds):
            if load and hinted:
                T.evaluate(_load(plan, r_vecs[p.slot(0, rnd, tid)], m_vecs[p.slot(1, rnd, tid)]))
            elif load:
                r_vecs[p.slot(0, rnd, tid)] = m_vecs[p.slot(1, rnd, tid)]
            elif hinted:
                T.evaluate(_store(plan, m_vecs[p.slot(1, rnd, tid)], r_vecs[p.slot(0, rnd, tid)]))
            else:
                m_vecs[p.slot(1, rnd, tid)] = r_vecs[p.slot(0, rnd, tid)]
    # fmt: on
    return impl


def _emit_rotated(plan: RegPlan, call: TileCall):
    """The rotated order: step ``s`` moves round ``rot.round_of(s, tid)`` through slot ``s``
    of a small work array; a barrel shifter (one lane-dependent select per stage and slot)
    maps slots to rounds, so every register index stays a constant after unrolling.

    Loading, stage ``b`` rotates the slots back by ``2**b`` where bit ``b`` of the shift is
    set; storing, the stages run in the opposite order and direction, so a load followed by
    a store of the same registers cancels stage by stage in the compiler.

    With a register start that moves with loops, the register side's steps are unrolled in
    TIR and each picks its registers among the guarded slots (:func:`_emit_guarded`).
    """
    reg, mem = _sides(call)
    p, rot, moving = plan.partition, plan.rotation, plan.loop_offset
    guarded = moving is not None
    choices = moving.count if guarded else 1
    step_loop = T.unroll if guarded else T.serial
    r_buf, m_buf = reg.buffer, mem.buffer
    vec_bits, elem_bits, rounds = plan.vec_bits, plan.elem_bits, plan.outer
    stages = rot.stages
    load = plan.direction.endswith("->local")
    access = access_dtype(vec_bits)
    # a select moves at least one 32-bit register; narrower accesses select whole slots
    words, word = (vec_bits // 32, "uint32") if vec_bits >= 32 else (1, access)

    def stage_bit(i: Any) -> Any:  # loading from bit 0 up, storing from the top bit down
        return i if load else stages - 1 - i

    def stage_source(q: Any, i: Any) -> Any:  # loading rotates slots back, storing forward
        moved = T.shift_left(1, stage_bit(i))
        return (q + rounds - moved) % rounds if load else (q + moved) % rounds

    # fmt: off
    @impl_prim_func
    def impl():
        tid = T.meta_var(thread_index(call))
        shift = T.meta_var(rot.shift(tid))
        r_vecs = access_view(r_buf, vec_bits, elem_bits)
        m_vecs = access_view(m_buf, vec_bits, elem_bits)
        # slots as whole accesses for the moves, as 32-bit words for the selects
        work = T.alloc_buffer((stages + 1, rounds, words), word, scope="local")
        slots = T.decl_buffer(((stages + 1) * rounds,), access, data=work.data, scope="local")
        for step in step_loop(rounds):  # in: step s takes round round_of(s) (load) or slot s
            if load:
                slots[step] = m_vecs[p.slot(1, rot.round_of(step, tid), tid)]
            elif guarded:
                for g in T.unroll(choices):
                    if _guard(plan, g):
                        slots[step] = r_vecs[_register_slot(plan, g, step, tid)]
            else:
                slots[step] = r_vecs[p.slot(0, step, tid)]
        for i in T.unroll(stages):
            for q in T.unroll(rounds):
                for w in T.unroll(words):
                    work[i + 1, q, w] = T.Select(
                        T.bitwise_and(T.shift_right(shift, stage_bit(i)), 1) == 1,
                        work[i, stage_source(q, i), w],
                        work[i, q, w],
                    )
        for step in step_loop(rounds):  # out: the shifted slots land in order
            if load and guarded:
                for g in T.unroll(choices):
                    if _guard(plan, g):
                        r_vecs[_register_slot(plan, g, step, tid)] = slots[stages * rounds + step]
            elif load:
                r_vecs[p.slot(0, step, tid)] = slots[stages * rounds + step]
            else:
                m_vecs[p.slot(1, rot.round_of(step, tid), tid)] = slots[stages * rounds + step]
    # fmt: on
    return impl


def _emit_guarded(plan: RegPlan, call: TileCall):
    """A register start that moves with enclosing loops. Each round goes through a
    one-access temporary; on the register side, one guarded move per value ``g`` of the
    loop offset ("the loops are at iteration ``g``") through a register index that is a
    constant once TIR unrolls the rounds and ``g`` (``T.unroll``).

    Where the author's loop is unrolled too, each guard is a constant and folds away (TIR
    simplification for ``T.unroll``, the CUDA compiler for a serial loop it unrolls); where
    it is not, the guards become compares and predicated moves, and the array still stays
    in registers.
    """
    reg, mem = _sides(call)
    p, moving = plan.partition, plan.loop_offset
    r_buf, m_buf = reg.buffer, mem.buffer
    vec_bits, elem_bits, rounds = plan.vec_bits, plan.elem_bits, plan.outer
    load = plan.direction.endswith("->local")
    access = access_dtype(vec_bits)
    choices = moving.count
    hinted = plan.through_helper

    # fmt: off
    @impl_prim_func
    def impl():
        tid = T.meta_var(thread_index(call))
        r_vecs = access_view(r_buf, vec_bits, elem_bits)
        m_vecs = access_view(m_buf, vec_bits, elem_bits)
        moved = T.alloc_buffer((1,), access, scope="local")
        for rnd in T.unroll(rounds):
            if load:
                if hinted:
                    T.evaluate(_load(plan, moved[0], m_vecs[p.slot(1, rnd, tid)]))
                else:
                    moved[0] = m_vecs[p.slot(1, rnd, tid)]
                for g in T.unroll(choices):
                    if _guard(plan, g):
                        r_vecs[_register_slot(plan, g, rnd, tid)] = moved[0]
            else:
                for g in T.unroll(choices):
                    if _guard(plan, g):
                        moved[0] = r_vecs[_register_slot(plan, g, rnd, tid)]
                if hinted:
                    T.evaluate(_store(plan, m_vecs[p.slot(1, rnd, tid)], moved[0]))
                else:
                    m_vecs[p.slot(1, rnd, tid)] = moved[0]
    # fmt: on
    return impl


def _guard(plan: RegPlan, g: Any) -> Any:
    """The condition "the enclosing loops are at iteration ``g`` of the loop offset"."""
    return plan.loop_offset.at(g)[0]


def _register_slot(plan: RegPlan, g: Any, rnd: Any, tid: Any) -> Any:
    """The register access index of round ``rnd`` at loop iteration ``g``: a constant once
    ``g`` and ``rnd`` are (the register side's thread strides are zero)."""
    return plan.partition_at(g).offset(0, rnd, tid) // plan.vec
