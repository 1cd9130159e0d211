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

Cache hints on the call (``cache="nc"``, ``l1_evict=``, ``l2_evict=``, ``prefetch_size=``:
the config keys TVM 0.27's copies read) replace the default L2-only load with the form
they name (``ld.global.nc.L1::no_allocate.L2::256B``; an L2 eviction priority through
``createpolicy`` and ``.L2::cache_hint``, the only spelling narrower than 256 bits has);
stores to global take the eviction hints (``st.global.L1::evict_first``). An unknown key or
value, or a load hint on a store, is a decline naming it and the accepted ones
(:func:`..codegen.cache_hints`).

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
from ..codegen import (
    CacheHints,
    access_view,
    cache_hints,
    impl_prim_func,
    load_global_hinted,
    load_global_l2_only,
    participant_index,
    sequence,
    store_global_hinted,
)
from ..errors import Decline
from ..layout.atoms import memory_view
from ..layout.partition import (
    MemoryAccesses,
    PiecewisePartition,
    ScopePartition,
    scope_partition,
)
from ..predicates import (
    requires_cuda,
    requires_known_participants,
    requires_memory_pair,
    requires_scope,
    requires_valid_copy,
)
from ..registry import variant

GMEM_SMEM_PAIRS = (("global", "shared"), ("shared", "global"))


def _global_access(call: TileCall) -> str:
    """What the copy does to global memory: "load" (it reads it) or "store"."""
    return "load" if call.operand(1, "src").memory == "global" else "store"


def requires_known_cache_hints(call: TileCall) -> tuple[bool, str | None]:
    """Every config key is a cache hint PTX has for this copy's global access and arch."""
    try:
        cache_hints(call.config, _global_access(call), call.sm)
    except Decline as why:
        return False, str(why)
    return True, None


@dataclass(frozen=True)
class GmemSmemPlan:
    """Facts of one global<->shared copy: who moves what, at which width."""

    direction: str  # "global->shared" or "shared->global"
    dtype: str
    elem_bits: int
    partition: ScopePartition | PiecewisePartition  # operands in the order (global, shared)
    hints: CacheHints = CacheHints()  # of the global access; empty: the default forms

    @property
    def global_access(self) -> str:
        """The global access's instruction up to its vector and type."""
        if self.hints.empty:
            return "ld.global.cg" if self.direction == "global->shared" else "st.global"
        op = "ld" if self.direction == "global->shared" else "st"
        policy = self.hints.policy()
        return self.hints.qualifiers(op) + (f" (policy: {policy})" if policy else "")

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
        if not self.hints.empty:
            facts["cache_hints"] = str(self.hints)
            facts["global_access"] = self.global_access
        return facts

    def __str__(self) -> str:
        hints = "" if self.hints.empty else f" [{self.global_access}]"
        if self.masked:
            pieces = "; ".join(str(piece) for piece in self.partition.pieces)
            return f"gmem_smem {self.direction} {self.dtype}{hints}, masked: {pieces}"
        return (
            f"gmem_smem {self.direction} {self.dtype}{hints}: {self.outer} rounds x "
            f"{self.threads} threads x {self.vec} ({self.vec_bits}-bit)"
        )


def plan(call: TileCall) -> GmemSmemPlan:
    dst, src = call.operand(0, "dst"), call.operand(1, "src")
    g, s = (src, dst) if src.memory == "global" else (dst, src)
    if src.elem_bits < 8:
        raise Decline(f"{src.dtype} elements are narrower than a byte; needs 8 bits or more")
    views = [memory_view(g), memory_view(s)]
    threads = call.participation.participants.count  # the threads that run the call
    partition = scope_partition(views, threads, src.elem_bits)
    direction = "global->shared" if g is src else "shared->global"
    hints = cache_hints(call.config, _global_access(call), call.sm)
    return GmemSmemPlan(direction, src.dtype, src.elem_bits, partition, hints)


@variant(
    "copy",
    "gmem_smem",
    priority=10,
    predicates=[
        requires_cuda,
        requires_scope("thread", "warp", "warpgroup", "cta"),
        requires_known_participants,
        requires_valid_copy,
        requires_memory_pair(GMEM_SMEM_PAIRS),
        requires_known_cache_hints,
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

    # fmt: off
    @impl_prim_func
    def impl():
        tid = T.meta_var(participant_index(call))
        g_vecs = access_view(g_buf, vec_bits, elem_bits)
        s_vecs = access_view(s_buf, vec_bits, elem_bits)
        for rnd in range(rounds):
            _move(plan, g_vecs, s_vecs, p.slot(0, rnd, tid), p.slot(1, rnd, tid), vec_bits)
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

    def slot(which, v):
        return part.offset(index, which, v) // vec

    # fmt: off
    @impl_prim_func
    def impl():
        tid = T.meta_var(participant_index(call))
        g_vecs = access_view(g_buf, vec_bits, elem_bits)
        s_vecs = access_view(s_buf, vec_bits, elem_bits)
        for rnd in range(full):
            v = T.meta_var(rnd * threads + tid)
            _move(plan, g_vecs, s_vecs, slot(0, v), slot(1, v), vec_bits)
        if tail > 0:
            if tid < tail:
                _move(plan, g_vecs, s_vecs, slot(0, full * threads + tid),
                      slot(1, full * threads + tid), vec_bits)
    # fmt: on
    return impl


def _move(plan: GmemSmemPlan, g_vecs, s_vecs, g_slot, s_slot, vec_bits: int) -> None:
    """One vector between the global and shared views (inside an emitted body): the
    default forms (an L2-only load, a plain store), or the form the cache hints name."""
    g_ptr, s_ptr = T.address_of(g_vecs[g_slot]), T.address_of(s_vecs[s_slot])
    if plan.direction == "global->shared":
        if plan.hints.empty:
            T.evaluate(load_global_l2_only(s_ptr, g_ptr, vec_bits))
        else:
            T.evaluate(load_global_hinted(s_ptr, g_ptr, vec_bits, plan.hints))
    elif plan.hints.empty:
        T.buffer_store(g_vecs, s_vecs[s_slot], [g_slot])
    else:
        T.evaluate(store_global_hinted(g_ptr, s_ptr, vec_bits, plan.hints))
