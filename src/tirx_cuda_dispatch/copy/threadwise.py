"""copy -> threadwise: registers to registers at warp, warpgroup or CTA scope, each thread
copying the elements it holds on both sides.

Accepts: a CUDA target; warp, warpgroup or CTA scope with every thread taking part; a
valid copy between two ``local`` buffers of one dtype (a byte or more per element) whose
register layouts put every element of dst in threads that hold it in src too (the same
distribution, or a dst replicated over fewer threads than src), the same registers in
every thread (one instruction stream for all); no config. A copy that moves elements
between threads (a transpose of the distribution) declines naming the first such
element: that needs shuffles or shared memory (``copy -> reg`` through a shared tile).

Emits: one register move per element a thread holds in dst, unrolled with constant
indices (the arrays stay in registers), the same in every thread: what
``Tx.wg.copy(m_old, m_new)`` of two row vectors of a wgmma accumulator needs, and what
``copy -> local`` does at thread scope.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..build import Body
from ..call import TileCall
from ..errors import Decline
from ..layout.register import register_table, register_view
from ..predicates import (
    requires_all_threads_active,
    requires_byte_elements,
    requires_cuda,
    requires_memory_pair,
    requires_no_register_config,
    requires_scope,
    requires_valid_copy,
)
from ..registry import variant
from ..scopes import SCOPES

# -- predicates: the shared ones of predicates.py (see the registration) -----------------


# -- the plan ----------------------------------------------------------------------------
@dataclass(frozen=True)
class ThreadwisePlan:
    """The (dst register, src register) moves every thread makes, in element order."""

    dtype: str
    threads: int
    moves: tuple[tuple[int, int], ...]

    def facts(self) -> dict:
        return {"threads": self.threads, "moves_per_thread": len(self.moves)}

    def __str__(self) -> str:
        return (
            f"threadwise {self.dtype}: {len(self.moves)} register moves in each of "
            f"{self.threads} threads (unrolled, constant indices)"
        )


def plan(call: TileCall) -> ThreadwisePlan:
    dst, src = call.operand("dst"), call.operand("src")
    scope = SCOPES.get(call.scope)
    threads = call.thread_count if scope is None or scope.threads is None else scope.threads
    if threads is None:
        raise Decline(f"the {call.scope} scope's thread count is not a constant")
    tables = [register_table(register_view(o), call.scope, threads) for o in (dst, src)]
    where: dict[tuple[int, int], int] = {}  # (thread, element) -> src register
    for t in range(threads):
        for i, reg in enumerate(tables[1].registers):
            e = int(tables[1].elements[t, i])
            if e >= 0:
                where[(t, e)] = reg
    moves = None
    for t in range(threads):
        mine = []
        for i, reg in enumerate(tables[0].registers):
            e = int(tables[0].elements[t, i])
            if e < 0:
                continue
            held = where.get((t, e))
            if held is None:
                raise Decline(
                    f"dst {dst.name}'s element {e} (row-major in the region) is in thread "
                    f"{t}, which src {src.name} does not give it: the copy moves elements "
                    "between threads (shuffles or shared memory: copy through a shared tile)"
                )
            mine.append((reg, held))
        if moves is None:
            moves = tuple(mine)
        elif tuple(mine) != moves:
            raise Decline(
                f"thread {t} moves other registers than thread 0 ({tuple(mine)[:4]} against "
                f"{moves[:4]}): the layouts do not repeat across the scope's threads"
            )
    return ThreadwisePlan(src.dtype, threads, moves or ())


# -- the emitter -------------------------------------------------------------------------
@variant(
    "copy",
    "threadwise",
    priority=10,
    order=3,  # after local: at thread scope that one takes register copies
    predicates=[
        requires_cuda,
        requires_scope("warp", "warpgroup", "cta"),
        requires_all_threads_active,
        requires_valid_copy,
        requires_memory_pair((("local", "local"),)),
        requires_byte_elements,
        requires_no_register_config,
    ],
    plan=plan,
)
def emit(plan: ThreadwisePlan, call: TileCall, given: Mapping[str, Any]):
    """One move per element the thread holds, unrolled."""
    dst_buf, src_buf = call.operand("dst").buffer, call.operand("src").buffer
    body = Body()
    d = body.view(
        "dst_regs", dst_buf, str(dst_buf.dtype), 1 + max(r for r, _ in plan.moves), "local"
    )
    s = body.view(
        "src_regs", src_buf, str(src_buf.dtype), 1 + max(r for _, r in plan.moves), "local"
    )
    for to, frm in plan.moves:
        body.store(d, to, s[frm])
    return body.func()
