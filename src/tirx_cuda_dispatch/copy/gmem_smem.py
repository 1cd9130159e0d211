"""copy -> gmem_smem: a synchronous copy between global and shared memory, any direction.

Accepts: a CUDA target; scope thread / warp / warpgroup / cta with every thread of it
active; a valid copy (layouts on both sides, equal dtypes, equal non-unit extents)
between memory buffers, global or shared on either side (neither side a register:
global->shared, shared->global, and also global->global and shared->shared); any element
count. Where src and dst are one buffer, their regions must not overlap (threads would
read elements others write).

Emits: neither operand says which thread owns which element, so the partition is
synthesized from the scope (:mod:`..layout.copy_partition`, shared with copy_async ->
ldgsts): ``[outer, threads, vec]`` with the global side driving the order (coalesced; the
source where both sides are in the same memory), the widest aligned vector (128 -> 8 bits, capped at one swizzle unit on a
swizzled shared layout), and a serial round loop of vector loads and stores
(``ld.global.cg``/``st.shared``, ``ld.shared``/``st.global``, ``ld.global.cg``/``st.global``
or ``ld.shared``/``st.shared``, PTX ISA "Data Movement and Conversion Instructions: ld,
st"; global data is cached in L2 only, since a copy reads it once). A swizzled shared
offset goes through the swizzle in the loop.

Cache hints on the call (``cache="nc"``, ``l1_evict=``, ``l2_evict=``, ``prefetch_size=``:
the config keys TVM 0.27's copies read) replace the default L2-only load with the form
they name (``ld.global.nc.L1::no_allocate.L2::256B``; an L2 eviction priority through
``createpolicy`` and ``.L2::cache_hint``, the only spelling narrower than 256 bits has);
stores to global take the eviction hints (``st.global.L1::evict_first``). On a
global->global copy the hints are the load's (the store stays plain). An unknown key or
value, a load hint on a store, or any hint on a shared->shared copy (it has no global
access) is a decline naming it and the accepted ones (:func:`..codegen.cache_hints`).

Where the threads do not divide the vectors evenly (odd tiles: 4x6 float32 at warp scope,
48x40 float16 in a 256-thread CTA), or where that takes fewer rounds than the narrower
even split, the partition is masked (:func:`..layout.partition.synthesize_pieces`): full
rounds for every thread, then one round in which only threads ``tid < tail`` move a
vector; a contiguous run the widest vector does not divide gets a narrower piece for its
tail. explain() shows the pieces.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tvm.script import tirx as T

from ..call import TileCall
from ..codegen import (
    CacheHints,
    cache_hints,
    load_global_hinted,
    load_global_l2_only,
    round_loops,
    store_global_hinted,
)
from ..errors import Decline
from ..layout.atoms import common_elements, memory_view
from ..layout.copy_partition import copy_partition, copy_roles
from ..layout.partition import (
    MemoryAccesses,
    OnPartition,
    PiecewisePartition,
    ScopePartition,
    round_runs,
)
from ..predicates import (
    requires_cuda,
    requires_known_participants,
    requires_memory_pair,
    requires_scope,
    requires_valid_copy,
)
from ..registry import variant

GMEM_SMEM_PAIRS = (
    ("global", "shared"),
    ("shared", "global"),
    ("global", "global"),
    ("shared", "shared"),
)


def _global_access(call: TileCall) -> str | None:
    """The global access the cache hints apply to: "load" (the copy reads global memory;
    a global->global copy's hints are its load's), "store", or None (shared->shared)."""
    src, dst = call.operand("src"), call.operand("dst")
    if src.memory == "global":
        return "load"
    return "store" if dst.memory == "global" else None


def _hints(call: TileCall) -> CacheHints:
    access = _global_access(call)
    if access is None:
        keys = [str(k) for k, v in dict(call.config).items() if v is not None and str(v) != ""]
        if keys:
            src, dst = call.operand("src"), call.operand("dst")
            raise Decline(
                f"config {', '.join(keys)} on a copy from shared {src.name} to shared "
                f"{dst.name}: cache hints name global accesses and this copy has none; drop them"
            )
        return CacheHints()
    return cache_hints(call.config, access, call.sm)


def requires_known_cache_hints(call: TileCall) -> tuple[bool, str | None]:
    """Every config key is a cache hint PTX has for this copy's global access and arch."""
    try:
        _hints(call)
    except Decline as why:
        return False, str(why)
    return True, None


def requires_disjoint_regions(call: TileCall) -> tuple[bool, str | None]:
    """src and dst lie in different memory, or their regions have no element in common:
    every thread moves its own part in parallel, so an element one thread writes could be
    one another thread still has to read. Buffers declared over another's data (SMEMPool
    buffers, ``T.decl_buffer(data=X.data)``) are followed to the allocation or parameter
    they lie in (:meth:`..bounds.Enclosing.storage_of`); distinct parameters are taken to
    be distinct memory, as in any kernel."""
    dst, src = call.operand("dst"), call.operand("src")
    if dst.memory != src.memory:
        return True, None
    env = call.enclosing
    roots = [env.storage_of(o.buffer) if env is not None else None for o in (src, dst)]
    if None in roots:
        return False, (
            f"cannot tell whether src {src.name} and dst {dst.name} share memory (one is "
            "declared over data that is not a buffer's); copy into a buffer of its own"
        )
    if not roots[0].same_as(roots[1]):
        return True, None
    try:
        common = common_elements(memory_view(src), memory_view(dst))
    except Decline as why:
        return False, str(why)
    where = src.name if src.name == dst.name else f"{roots[0].name} (the buffer both lie in)"
    if common is None:
        return False, (
            f"src {src.describe} and dst {dst.describe} are regions of {where} whose offsets "
            "differ by an amount not known at compile time (or sit under a swizzle at a "
            "symbolic offset that is not a multiple of its period), so they may overlap; copy "
            "through a second buffer"
        )
    if common:
        return False, (
            f"src {src.describe} and dst {dst.describe} share {common} elements of {where}: "
            "threads copying in parallel would read elements others already wrote; copy "
            "through a second buffer"
        )
    return True, None


@dataclass(frozen=True)
class GmemSmemPlan(OnPartition):
    """Facts of one copy between memory buffers: who moves what, at which width."""

    direction: str  # "global->shared", "shared->global", "global->global", "shared->shared"
    dtype: str
    elem_bits: int
    partition: ScopePartition | PiecewisePartition  # operands in the order of `roles`
    hints: CacheHints = CacheHints()  # of the global access; empty: the default forms

    @property
    def roles(self) -> tuple[str, str]:
        """The partition's operands, in order: (the one driving the order, the other)."""
        return copy_roles(self.src_memory, self.dst_memory)

    @property
    def src_memory(self) -> str:
        return self.direction.split("->")[0]

    @property
    def dst_memory(self) -> str:
        return self.direction.split("->")[1]

    def _memory(self, role: str) -> str:
        return self.src_memory if role == "src" else self.dst_memory

    @property
    def global_access(self) -> str:
        """The hinted global access's instruction up to its vector and type."""
        op = "ld" if self.src_memory == "global" else "st"
        if self.hints.empty:
            return "ld.global.cg" if op == "ld" else "st.global"
        policy = self.hints.policy()
        return self.hints.qualifiers(op) + (f" (policy: {policy})" if policy else "")

    def memory_accesses(self) -> MemoryAccesses:
        """The accesses of the operand that does not drive the order: the shared side of a
        global<->shared copy (the one with banks), else the destination (a shared ->
        shared copy's source is read in the driving order, one vector after another)."""
        return MemoryAccesses(self.roles[1], self.partition.accesses(1))

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
        shared = [i for i, role in enumerate(self.roles) if self._memory(role) == "shared"]
        for i in shared:
            if p.swizzles[i] is not None:
                key = "swizzle" if len(shared) == 1 else f"{self.roles[i]}_swizzle"
                facts[key] = str(p.swizzles[i])
        if p.narrower_because:
            facts["narrower_because"] = p.narrower_because
        if not self.hints.empty:
            facts["cache_hints"] = str(self.hints)
            facts["global_access"] = self.global_access
        return facts

    def __str__(self) -> str:
        hints = "" if self.hints.empty else f" [{self.global_access}]"
        return self.describe(
            f"gmem_smem {self.direction} {self.dtype}{hints}", f"{self.vec_bits}-bit"
        )


def plan(call: TileCall) -> GmemSmemPlan:
    dst, src = call.operand("dst"), call.operand("src")
    if src.elem_bits < 8:
        raise Decline(f"{src.dtype} elements are narrower than a byte; needs 8 bits or more")
    threads = call.participation.participants.count  # the threads that run the call
    split = copy_partition(src, dst, threads)  # shared with copy_async -> ldgsts
    direction = f"{src.memory}->{dst.memory}"
    return GmemSmemPlan(direction, src.dtype, src.elem_bits, split.partition, _hints(call))


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
        requires_disjoint_regions,
        requires_known_cache_hints,
    ],
    plan=plan,
)
def emit(plan: GmemSmemPlan, call: TileCall, given: Mapping[str, Any]):
    """Serial round loop of vector copies between memory buffers (masked: one loop per
    piece, its last round under ``tid < tail``)."""

    def move(dst_vecs, dst_slot, src_vecs, src_slot, vec_bits):
        _move(plan, dst_vecs, src_vecs, dst_slot, src_slot, vec_bits)

    return round_loops(
        call,
        round_runs(plan.partition),
        (call.operand("dst").buffer, call.operand("src").buffer),
        (plan.roles.index("dst"), plan.roles.index("src")),
        plan.elem_bits,
        move,
    )


def _move(plan: GmemSmemPlan, dst_vecs, src_vecs, dst_slot, src_slot, vec_bits: int) -> None:
    """One vector from the source view to the destination view (inside an emitted body):
    a load from global is L2-only (or the form the cache hints name); a store to global is
    plain (or hinted); shared memory is read and written plainly."""
    dst_ptr, src_ptr = T.address_of(dst_vecs[dst_slot]), T.address_of(src_vecs[src_slot])
    if plan.src_memory == "global":
        if plan.hints.empty:
            T.evaluate(load_global_l2_only(dst_ptr, src_ptr, vec_bits))
        else:
            T.evaluate(load_global_hinted(dst_ptr, src_ptr, vec_bits, plan.hints))
    elif plan.dst_memory == "global" and not plan.hints.empty:
        T.evaluate(store_global_hinted(dst_ptr, src_ptr, vec_bits, plan.hints))
    else:
        T.buffer_store(dst_vecs, src_vecs[src_slot], [dst_slot])
