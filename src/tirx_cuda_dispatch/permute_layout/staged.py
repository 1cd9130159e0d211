"""permute_layout -> staged: every element of a region moves from where src's layout puts
it to where dst's puts it, through the threads' registers, safe in place.

``Tx.warp.permute_layout(dst, src)``: for each logical index ``i`` of the region, the
element at ``src``'s layout offset of ``i`` is written at ``dst``'s layout offset of
``i``. dst and src may be two views of the same memory (a tile re-laid in place, TVM's
use: the scale factors of a block-scaled GEMM), so every thread of the scope reads all of
its elements into registers first, the scope meets at a barrier, and only then does
anyone write (a second barrier after the writes hands the whole region to the scope).
TVM 0.27's own variant (``warp_xor_swizzle``) lowers no call: its emitted function uses
an undefined variable.

Accepts: a CUDA target; warp or CTA scope with every thread taking part (the barriers
are ``__syncwarp`` and ``bar.sync 0``); dst and src in global or shared memory with
layouts (swizzled ones too), equal dtypes of a byte or more, equal extents.

Emits: element ``f = r T + t`` (thread ``t`` of ``T``, round ``r`` of ``P = ceil(V / T)``,
the last round masked where ``T`` does not divide ``V``) read into register ``r`` at
src's offset of ``f``, the barrier, the same elements written at dst's offsets, the
barrier. Element accesses: the plan reports the worst bank-conflict degree of each
phase for shared operands (the XOR pattern TVM's variant uses to avoid them is not
built).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tvm import tirx
from tvm.script import tirx as T

from ..call import TileCall
from ..codegen import access_dtype, access_view, impl_prim_func, thread_index
from ..errors import Decline
from ..irfacts import as_int
from ..layout.atoms import MemoryView, memory_view
from ..predicates import (
    requires_all_threads_active,
    requires_byte_elements,
    requires_cuda,
    requires_memory_pair,
    requires_scope,
    requires_valid_copy,
)
from ..registry import variant

MEMORIES = ("global", "shared")
SYNC = {"warp": "__syncwarp", "cta": "bar.sync 0"}
BANKS, BANK_BYTES = 32, 4


# -- predicates: the shared ones of predicates.py (see the registration) -----------------


# -- the plan ----------------------------------------------------------------------------
@dataclass(frozen=True)
class StagedPlan:
    """Facts of one staged permutation: how many elements, threads and rounds, the two
    views, and the barrier the scope meets at."""

    dtype: str
    elem_bits: int
    elements: int  # V: the region's elements
    threads: int  # T: the scope's threads
    views: tuple[MemoryView, MemoryView]  # (dst, src)
    sync: str
    conflicts: tuple[int | None, int | None]  # worst bank-conflict degree: (write, read)

    @property
    def rounds(self) -> int:
        return -(-self.elements // self.threads)

    @property
    def masked(self) -> bool:
        return self.elements % self.threads != 0

    def offset(self, which: int, index: Any) -> Any:
        """Element offset on operand ``which`` (0 dst, 1 src) of the region's ``index``-th
        element (row-major), its view's swizzle applied."""
        view = self.views[which]
        off: Any = view.base
        for ext, stride in reversed(view.atoms):
            off = off + tirx.floormod(index, ext) * stride
            index = tirx.floordiv(index, ext)
        return view.swizzle.apply(off) if view.swizzle else off

    def facts(self) -> dict:
        facts = {
            "elements": self.elements,
            "threads": self.threads,
            "rounds": self.rounds,
            "masked": self.masked,
            "sync": self.sync,
        }
        for name, degree in zip(("write_conflict", "read_conflict"), self.conflicts, strict=True):
            if degree is not None:
                facts[name] = f"{degree}-way"
        return facts

    def __str__(self) -> str:
        return (
            f"staged {self.dtype}: {self.elements} elements, {self.rounds} per thread over "
            f"{self.threads} threads, read all, {self.sync}, write all, {self.sync}"
        )


def _worst_conflict(view: MemoryView, elem_bits: int, threads: int, elements: int) -> int | None:
    """The worst bank-conflict degree over the rounds of one warp's element accesses to a
    shared view of constant base (None where the base is not constant)."""
    if as_int(view.base) is None:
        return None
    worst, nbytes = 1, elem_bits // 8
    for r in range(-(-elements // threads)):
        words: dict[int, set[int]] = {}
        for lane in range(min(32, threads)):
            f = r * threads + lane
            if f >= elements:
                break
            word = view.offset(f) * nbytes // BANK_BYTES
            words.setdefault(word % BANKS, set()).add(word)
        worst = max([worst, *(len(w) for w in words.values())])
    return worst


def plan(call: TileCall) -> StagedPlan:
    dst, src = call.operand("dst"), call.operand("src")
    threads = call.thread_count
    if threads is None:
        raise Decline(f"the {call.scope} scope's thread count is not a constant")
    views = (memory_view(dst), memory_view(src))
    elements = views[1].size
    if views[0].size != elements:
        raise Decline(f"dst {dst.name} has {views[0].size} elements, src {src.name} {elements}")
    conflicts = tuple(
        _worst_conflict(v, src.elem_bits, threads, elements) if o.memory == "shared" else None
        for v, o in zip(views, (dst, src), strict=True)
    )
    return StagedPlan(
        src.dtype, src.elem_bits, elements, threads, views, SYNC[call.scope], conflicts
    )


# -- the emitter -------------------------------------------------------------------------
@variant(
    "permute_layout",
    "staged",
    priority=10,
    predicates=[
        requires_cuda,
        requires_scope(*SYNC),
        requires_valid_copy,
        requires_memory_pair(tuple((a, b) for a in MEMORIES for b in MEMORIES)),
        requires_byte_elements,
        requires_all_threads_active,
    ],
    plan=plan,
)
def emit(plan: StagedPlan, call: TileCall, given: Mapping[str, Any]):
    """Reads into registers, the scope's barrier, writes, the barrier."""
    dst_buf, src_buf = call.operand("dst").buffer, call.operand("src").buffer
    bits, rounds, threads, elements = plan.elem_bits, plan.rounds, plan.threads, plan.elements
    word = access_dtype(bits)
    tid = thread_index(call)
    masked = plan.masked
    warp = call.scope == "warp"

    # fmt: off
    @impl_prim_func
    def impl():
        d_words = access_view(dst_buf, bits, bits)
        s_words = access_view(src_buf, bits, bits)
        regs = T.alloc_buffer((rounds,), word, scope="local")
        for r in T.unroll(rounds):
            if not masked or r * threads + tid < elements:
                regs[r] = s_words[plan.offset(1, r * threads + tid)]
        if warp:
            T.cuda.warp_sync()
        else:
            T.cuda.cta_sync()
        for r in T.unroll(rounds):
            if not masked or r * threads + tid < elements:
                d_words[plan.offset(0, r * threads + tid)] = regs[r]
        if warp:
            T.cuda.warp_sync()
        else:
            T.cuda.cta_sync()
    # fmt: on
    return impl
