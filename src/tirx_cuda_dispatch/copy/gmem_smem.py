"""copy -> gmem_smem: a synchronous copy between global and shared memory, either way.

Accepts: a CUDA target; scope thread / warp / warpgroup / cta with every thread of it
active; a valid copy (layouts on both sides, equal dtypes, equal non-unit extents)
between global and shared memory (neither side a register); any element count.

Emits: neither operand says which thread owns which element, so the partition is
synthesized from the scope (:mod:`..layout.partition`): ``[outer, threads, vec]`` with
the global side driving the order (coalesced), the widest aligned vector (128 -> 8 bits,
capped at one swizzle unit on a swizzled shared layout), and a serial round loop of
vector loads and stores (``ld.global.cg``/``st.shared`` or ``ld.shared``/``st.global``,
PTX ISA "Data Movement and Conversion Instructions: ld, st"; global data is cached in L2
only, since a copy reads it once). A swizzled shared offset goes through the swizzle in
the loop.

Where the threads do not divide the vectors evenly (odd tiles: 4x6 float32 at warp scope,
48x40 float16 in a 256-thread CTA), or where that takes fewer rounds than the narrower
even split, the partition is masked (:func:`..layout.partition.synthesize_pieces`): full
rounds for every thread, then one round in which only threads ``tid < tail`` move a
vector; a contiguous run the widest vector does not divide gets a narrower piece for its
tail. explain() shows the pieces.
"""

from __future__ import annotations

from dataclasses import dataclass

from tvm.script import tirx as T

from ..call import TileCall
from ..codegen import access_view, impl_prim_func, load_global_l2_only, sequence, thread_index
from ..errors import Decline
from ..layout.atoms import memory_view
from ..layout.partition import (
    MemoryAccesses,
    PiecewisePartition,
    ScopePartition,
    scope_partition,
)
from ..predicates import (
    requires_all_threads_active,
    requires_cuda,
    requires_memory_pair,
    requires_scope,
    requires_valid_copy,
)
from ..registry import variant

GMEM_SMEM_PAIRS = (("global", "shared"), ("shared", "global"))


@dataclass(frozen=True)
class GmemSmemPlan:
    """Facts of one global<->shared copy: who moves what, at which width."""

    direction: str  # "global->shared" or "shared->global"
    dtype: str
    elem_bits: int
    partition: ScopePartition | PiecewisePartition  # operands in the order (global, shared)

    @property
    def masked(self) -> bool:
        return isinstance(self.partition, PiecewisePartition)

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
    def threads(self) -> int:
        return self.partition.threads

    def memory_accesses(self) -> MemoryAccesses:
        """The shared side's accesses (the one with banks)."""
        role = "dst" if self.direction == "global->shared" else "src"
        return MemoryAccesses(role, self.partition.accesses(1))

    def facts(self) -> dict:
        p = self.partition
        facts = {
            "vec_bits": self.vec_bits,
            "vec": self.vec,
            "outer": self.outer,
            "threads": self.threads,
            "direction": self.direction,
        }
        if self.masked:
            facts["pieces"] = [str(piece) for piece in p.pieces]
        if p.swizzles[1] is not None:
            facts["swizzle"] = str(p.swizzles[1])
        if p.narrower_because:
            facts["narrower_because"] = p.narrower_because
        return facts

    def __str__(self) -> str:
        if self.masked:
            pieces = "; ".join(str(piece) for piece in self.partition.pieces)
            return f"gmem_smem {self.direction} {self.dtype}, masked: {pieces}"
        return (
            f"gmem_smem {self.direction} {self.dtype}: {self.outer} rounds x "
            f"{self.threads} threads x {self.vec} ({self.vec_bits}-bit)"
        )


def plan(call: TileCall) -> GmemSmemPlan:
    dst, src = call.operand(0, "dst"), call.operand(1, "src")
    g, s = (src, dst) if src.memory == "global" else (dst, src)
    if src.elem_bits < 8:
        raise Decline(f"{src.dtype} elements are narrower than a byte; needs 8 bits or more")
    views = [memory_view(g), memory_view(s)]
    partition = scope_partition(views, call.thread_count, src.elem_bits)
    direction = "global->shared" if g is src else "shared->global"
    return GmemSmemPlan(direction, src.dtype, src.elem_bits, partition)


@variant(
    "copy",
    "gmem_smem",
    priority=10,
    predicates=[
        requires_cuda,
        requires_scope("thread", "warp", "warpgroup", "cta"),
        requires_all_threads_active,
        requires_valid_copy,
        requires_memory_pair(GMEM_SMEM_PAIRS),
    ],
    plan=plan,
)
def emit(plan: GmemSmemPlan, call: TileCall):
    """Serial round loop of vector copies between global and shared memory (masked: one
    loop per piece, its last round under ``tid < tail``)."""
    if plan.masked:
        return sequence([_emit_piece(plan, call, i) for i in range(len(plan.partition.pieces))])
    dst, src = call.operand(0, "dst"), call.operand(1, "src")
    g, s = (src, dst) if plan.direction == "global->shared" else (dst, src)
    p = plan.partition

    g_buf, s_buf = g.buffer, s.buffer
    vec_bits, elem_bits, rounds = plan.vec_bits, plan.elem_bits, plan.outer
    to_shared = plan.direction == "global->shared"

    # fmt: off
    @impl_prim_func
    def impl():
        tid = T.meta_var(thread_index(call))
        g_vecs = access_view(g_buf, vec_bits, elem_bits)
        s_vecs = access_view(s_buf, vec_bits, elem_bits)
        for rnd in range(rounds):
            if to_shared:
                T.evaluate(load_global_l2_only(
                    T.address_of(s_vecs[p.slot(1, rnd, tid)]),
                    T.address_of(g_vecs[p.slot(0, rnd, tid)]),
                    vec_bits,
                ))
            else:
                g_vecs[p.slot(0, rnd, tid)] = s_vecs[p.slot(1, rnd, tid)]
    # fmt: on
    return impl


def _emit_piece(plan: GmemSmemPlan, call: TileCall, index: int):
    """One piece of a masked partition: its full rounds, then its partial round."""
    dst, src = call.operand(0, "dst"), call.operand(1, "src")
    g, s = (src, dst) if plan.direction == "global->shared" else (dst, src)
    part = plan.partition
    piece = part.pieces[index]
    g_buf, s_buf = g.buffer, s.buffer
    vec, vec_bits, elem_bits = piece.vec, piece.vec_bits, plan.elem_bits
    threads, full, tail = piece.threads, piece.full_rounds, piece.tail
    to_shared = plan.direction == "global->shared"

    def slot(which, v):
        return part.offset(index, which, v) // vec

    # fmt: off
    @impl_prim_func
    def impl():
        tid = T.meta_var(thread_index(call))
        g_vecs = access_view(g_buf, vec_bits, elem_bits)
        s_vecs = access_view(s_buf, vec_bits, elem_bits)
        for rnd in range(full):
            if to_shared:
                T.evaluate(load_global_l2_only(
                    T.address_of(s_vecs[slot(1, rnd * threads + tid)]),
                    T.address_of(g_vecs[slot(0, rnd * threads + tid)]),
                    vec_bits,
                ))
            else:
                g_vecs[slot(0, rnd * threads + tid)] = s_vecs[slot(1, rnd * threads + tid)]
        if tail > 0:
            if tid < tail:
                if to_shared:
                    T.evaluate(load_global_l2_only(
                        T.address_of(s_vecs[slot(1, full * threads + tid)]),
                        T.address_of(g_vecs[slot(0, full * threads + tid)]),
                        vec_bits,
                    ))
                else:
                    g_vecs[slot(0, full * threads + tid)] = s_vecs[slot(1, full * threads + tid)]
    # fmt: on
    return impl
