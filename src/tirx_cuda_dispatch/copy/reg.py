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
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tvm.script import tirx as T

from ..call import Operand, TileCall
from ..codegen import access_dtype, access_view, impl_prim_func, thread_index
from ..errors import Decline
from ..layout.atoms import memory_view
from ..layout.partition import MemoryAccesses, ScopePartition
from ..layout.register import induced_partition, register_layout_misfit, register_view
from ..layout.round_order import Rotation, RoundOrder, choose_round_order
from ..layout.vector import vector_candidates
from ..predicates import (
    requires_all_threads_active,
    requires_cuda,
    requires_memory_pair,
    requires_scope,
    requires_valid_copy,
)
from ..registry import variant

REG_PAIRS = (("shared", "local"), ("global", "local"), ("local", "shared"), ("local", "global"))


def _sides(call: TileCall) -> tuple[Operand, Operand]:
    """(register operand, memory operand)."""
    return call.register_and_other()


def requires_register_layout(call: TileCall) -> tuple[bool, str | None]:
    """The register layout slices to the region and names only the scope's thread axes."""
    misfit = register_layout_misfit(_sides(call)[0], call.scope)
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
class RegPlan:
    """Facts of one register<->memory copy: each thread's bundle and how it moves."""

    direction: str  # "shared->local", "local->global", ...
    dtype: str
    elem_bits: int
    partition: ScopePartition  # operands in the order (register, memory)
    order: RoundOrder | None = None  # shared memory only: the rounds' order per lane

    @property
    def rotation(self) -> Rotation | None:
        return self.order.rotation if self.order is not None else None

    @property
    def est_clocks(self) -> float | None:
        """Estimated SM clocks of the shared-memory side (the dispatch cost rule)."""
        return self.order.clocks if self.order is not None else None

    @property
    def vec(self) -> int:
        return self.partition.vec

    @property
    def vec_bits(self) -> int:
        return self.partition.vec_bits

    @property
    def outer(self) -> int:
        return self.partition.rounds

    @property
    def regs_per_thread(self) -> int:
        return self.outer * self.vec

    def memory_accesses(self) -> MemoryAccesses:
        role = "dst" if self.direction.startswith("local") else "src"
        rot = self.rotation
        round_of = rot.round_of if rot is not None else None
        return MemoryAccesses(role, self.partition.accesses(1, registers=0, round_of=round_of))

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
        return facts

    def __str__(self) -> str:
        return (
            f"reg {self.direction} {self.dtype}: {self.regs_per_thread} regs/thread as "
            f"{self.outer} x {self.vec} ({self.vec_bits}-bit)"
        )


def plan(call: TileCall) -> RegPlan:
    reg, mem = _sides(call)
    if reg.elem_bits < 8:
        raise Decline(f"{reg.dtype} elements are narrower than a byte; needs 8 bits or more")
    partition = induced_partition(
        [register_view(reg), memory_view(mem)],
        anchor=0,
        scope=call.scope,
        threads=call.thread_count,
        widths=vector_candidates(reg.elem_bits),
    )
    src = call.operand(1, "src")
    direction = f"{src.memory}->{call.operand(0, 'dst').memory}"
    order = None
    if mem.memory == "shared":
        words = max(1, partition.vec_bits // 32)
        order = choose_round_order(partition, 1, reg.elem_bits // 8, words)
    return RegPlan(direction, reg.dtype, reg.elem_bits, partition, order)


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
def emit(plan: RegPlan, call: TileCall):
    """Serial round loop of vector copies between a thread's registers and memory."""
    if plan.rotation is not None:
        return _emit_rotated(plan, call)
    reg, mem = _sides(call)
    p = plan.partition

    r_buf, m_buf = reg.buffer, mem.buffer
    vec_bits, elem_bits, rounds = plan.vec_bits, plan.elem_bits, plan.outer
    load = plan.direction.endswith("->local")

    # fmt: off
    @impl_prim_func
    def impl():
        tid = T.meta_var(thread_index(call))
        r_vecs = access_view(r_buf, vec_bits, elem_bits)
        m_vecs = access_view(m_buf, vec_bits, elem_bits)
        for rnd in range(rounds):
            if load:
                r_vecs[p.slot(0, rnd, tid)] = m_vecs[p.slot(1, rnd, tid)]
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
    """
    reg, mem = _sides(call)
    p, rot = plan.partition, plan.rotation
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
        for step in range(rounds):  # in: step s takes round round_of(s) (load) or slot s
            if load:
                slots[step] = m_vecs[p.slot(1, rot.round_of(step, tid), tid)]
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
        for step in range(rounds):  # out: the shifted slots land in order
            if load:
                r_vecs[p.slot(0, step, tid)] = slots[stages * rounds + step]
            else:
                m_vecs[p.slot(1, rot.round_of(step, tid), tid)] = slots[stages * rounds + step]
    # fmt: on
    return impl
