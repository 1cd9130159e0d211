"""copy_async -> dsmem: this CTA's shared memory into another CTA's of the cluster.

Accepts: a CUDA target of sm_90 or newer (distributed shared memory and
``cp.async.bulk.shared::cluster.shared::cta``, PTX ISA 9.7.9.25.4.1); scope thread (the
calling thread issues: write the call under ``if tid == 0``) or warp / warpgroup / cta
(the scope's first participating thread issues); a valid copy between two shared
buffers, without a swizzle; TVM 0.27's config: ``mbar=`` (this CTA's pointer to the
mbarrier; the copy completes its bytes on the mbarrier at the same offset in the
destination CTA) and ``remote_cta_id=`` (the destination CTA's rank in the cluster).

Plans the copy from both shared layouts: the runs where both regions are contiguous
(their common refinement, neighbours fused), one ``cp.async.bulk`` per run. A run is a
multiple of 16 bytes and starts 16-byte aligned on both sides (the instruction's
``size`` and addresses); where the layouts share no such run (a row-major and a
column-major tile) the variant declines naming it.

Emits, per run, ``mapa.shared::cluster.u32`` of dst's address into the destination CTA
(the mbarrier's once) and ``cp.async.bulk.shared::cluster.shared::cta.mbarrier::
complete_tx::bytes [dst], [src], size, [mbar]`` from the issuing thread.

Completion is the destination's: the copy does not arrive; the destination CTA announces
the bytes (``T.ptx.mbarrier.arrive.expect_tx``, explain() says how many) and waits for
the phase before reading dst. The source is read by the async proxy: the threads that
wrote it run ``fence.proxy.async`` and a barrier before the call, and it may not be
written again before the destination's phase completed (which the issuing CTA learns
only through a synchronization of its own, such as a cluster barrier). Both CTAs must
have started (a cluster barrier after the mbarrier init) and neither may exit before the
copy landed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tvm.script import tirx as T

from ..call import TileCall
from ..codegen import impl_prim_func, participant_index
from ..errors import check
from ..irfacts import prove_multiple
from ..isa.bulk import BULK_ALIGN
from ..layout.atoms import common_refinement, memory_view
from ..layout.partition import Dim, dims_offset, fuse_contiguous
from ..predicates import (
    issuer_text,
    requires_cuda,
    requires_known_participants,
    requires_memory_pair,
    requires_scope,
    requires_valid_copy,
    sm_at_least,
    unknown_config,
)
from ..registry import variant
from ..resources import Completion

DSMEM_MIN_SM = 90
MAX_ISSUES = 64  # unrolled instructions of one call
CONFIG_KEYS = {
    "mbar": "this CTA's pointer to the mbarrier (bar.ptr_to([0])); the copy completes its "
    "bytes on the one at the same offset in the destination CTA",
    "remote_cta_id": "the destination CTA's rank in the cluster",
}
PTX = "cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes"


# -- predicates ------------------------------------------------------------------------------
def requires_dsmem_arch(call: TileCall) -> tuple[bool, str | None]:
    """Distributed shared memory came with Hopper's clusters (sm_90)."""
    return sm_at_least(
        call, DSMEM_MIN_SM, "distributed shared memory (cp.async.bulk.shared::cluster)",
        "copy through global memory there",
    )  # fmt: skip


def requires_remote_config(call: TileCall) -> tuple[bool, str | None]:
    """``mbar=`` and ``remote_cta_id=``, and no key this copy does not take."""
    cfg = call.config
    unknown = unknown_config(call, CONFIG_KEYS, "this DSMEM copy")
    if unknown:
        return False, unknown
    for key in CONFIG_KEYS:
        if cfg.get(key) is None:
            return False, (
                f"no {key}= config: a copy into another CTA's shared memory needs "
                f"{key} ({CONFIG_KEYS[key]})"
            )
    return True, None


def requires_no_swizzle(call: TileCall) -> tuple[bool, str | None]:
    """A bulk copy moves bytes in order: a swizzled layout is not a run of them."""
    for role in ("dst", "src"):
        o = call.operand(role)
        if type(o.layout).__name__ == "ComposeLayout":
            return False, (
                f"{role} {o.name} is swizzled; cp.async.bulk copies contiguous bytes (give "
                "both buffers plain layouts, or copy a swizzled tile with TMA)"
            )
    return True, None


# -- the plan --------------------------------------------------------------------------------
@dataclass(frozen=True)
class DsmemPlan:
    """The runs both regions are contiguous over, and how the copy completes."""

    dtype: str
    elem_bits: int
    run: int  # elements of one bulk copy
    dims: tuple[Dim, ...]  # issue index -> element offsets (dst, src), outer -> inner
    bases: tuple[Any, Any]  # element offset of each region: (dst, src)
    issuer: str

    @property
    def count(self) -> int:
        return math.prod(d.extent for d in self.dims)

    @property
    def run_bytes(self) -> int:
        return self.run * self.elem_bits // 8

    @property
    def total_bytes(self) -> int:
        return self.run_bytes * self.count

    def offset(self, which: int, index: Any) -> Any:
        """Element offset on operand ``which`` (0 dst, 1 src) of issue ``index``."""
        return self.bases[which] + dims_offset(index, self.dims, which)

    def completion(self) -> Completion:
        return Completion(
            "mbarrier complete-tx",
            f"the copy completes {self.total_bytes} bytes on the mbarrier at mbar's offset in "
            "the destination CTA (remote_cta_id) and does not arrive: there one thread "
            f"announces them (T.ptx.mbarrier.arrive.expect_tx(mbar, {self.total_bytes})) and "
            "the readers of dst wait for the phase; src may be written again only after "
            "that phase completed (learned through a synchronization such as a cluster "
            "barrier), and neither CTA exits before",
        )

    def resources(self) -> tuple[Completion, ...]:
        return (self.completion(),)

    def facts(self) -> dict:
        return {
            "ptx": f"{PTX} [mapa(dst)], [src], {self.run_bytes}, [mapa(mbar)]",
            "issues": self.count,
            "run_bytes": self.run_bytes,
            "expect_tx_bytes": self.total_bytes,
            "issuer": self.issuer,
        }

    def __str__(self) -> str:
        return (
            f"dsmem shared->remote shared {self.dtype}: {self.count} x {self.run_bytes} bytes "
            f"({self.total_bytes} bytes on the destination's mbar; {self.issuer} issues)"
        )


def plan(call: TileCall) -> DsmemPlan:
    dst, src = call.operand("dst"), call.operand("src")
    check(
        src.elem_bits % 8 == 0,
        f"src {src.name} holds {src.dtype}; a bulk copy moves whole bytes",
    )
    views = [memory_view(dst), memory_view(src)]
    dims = fuse_contiguous([Dim(e, s) for e, s in common_refinement(*(v.atoms for v in views))])
    run = 1
    if dims and dims[-1].strides == (1, 1):
        run = dims.pop().extent
    size = src.elem_bits // 8
    check(
        (run * size) % BULK_ALIGN == 0,
        f"dst {dst.name} and src {src.name} are contiguous together for {run} elements "
        f"({run * size} bytes) at a time; cp.async.bulk copies multiples of {BULK_ALIGN} "
        "bytes: give both the same row order (a row-major and a column-major tile share no "
        "run)",
    )
    bases = (views[0].base, views[1].base)
    for which, o in enumerate((dst, src)):
        check(
            prove_multiple(bases[which], BULK_ALIGN // size)
            and all((d.strides[which] * size) % BULK_ALIGN == 0 for d in dims),
            f"{o.role} {o.describe}'s runs do not all start at a multiple of {BULK_ALIGN} "
            "bytes (cp.async.bulk's addresses are 16-byte aligned)",
        )
    dims = dims or [Dim(1, (0, 0))]
    count = math.prod(d.extent for d in dims)
    check(
        count <= MAX_ISSUES,
        f"the copy takes {count} bulk copies of {run * size} bytes; at most {MAX_ISSUES} "
        "per call (keep longer runs contiguous in both layouts)",
    )
    return DsmemPlan(src.dtype, src.elem_bits, run, tuple(dims), bases, issuer_text(call))


# -- emission --------------------------------------------------------------------------------
@variant(
    "copy_async",
    "dsmem",
    priority=10,
    predicates=[
        requires_cuda,
        requires_dsmem_arch,
        requires_scope("thread", "warp", "warpgroup", "cta"),
        requires_known_participants,
        requires_valid_copy,
        requires_memory_pair([("shared", "shared")]),
        requires_remote_config,
        requires_no_swizzle,
    ],
    plan=plan,
)
def emit(plan: DsmemPlan, call: TileCall, given: Mapping[str, Any]):
    """One thread maps dst and the mbarrier into the destination CTA and issues every run."""
    dst, src = call.operand("dst"), call.operand("src")
    mbar, rank = call.config["mbar"], call.config["remote_cta_id"]
    issuing = call.scope == "thread"
    first = participant_index(call) if not issuing else None
    count, size = plan.count, plan.run_bytes

    def map_mbar(remote):
        T.evaluate(
            T.ptx["mapa.shared::cluster.u32"](
                remote[0], T.cuda.cvta_generic_to_shared(mbar), T.cast(rank, "uint32")
            )
        )

    def issue(i, remote):
        d_flat = T.decl_buffer((1,), dst.dtype, data=dst.buffer.data, scope=dst.scope)
        s_flat = T.decl_buffer((1,), src.dtype, data=src.buffer.data, scope=src.scope)
        T.evaluate(T.ptx["mapa.shared::cluster.u32"](
            remote[1], T.cuda.cvta_generic_to_shared(d_flat.ptr_to([plan.offset(0, i)])),
            T.cast(rank, "uint32")))  # fmt: skip
        T.evaluate(T.ptx[PTX](
            remote[1], T.cuda.cvta_generic_to_shared(s_flat.ptr_to([plan.offset(1, i)])),
            T.uint32(size), remote[0]))  # fmt: skip

    if issuing:

        @impl_prim_func
        def by_caller():
            remote = T.alloc_buffer((2,), "uint32", scope="local")
            map_mbar(remote)
            for i in T.unroll(count):
                issue(i, remote)

        return by_caller

    @impl_prim_func
    def by_first():
        remote = T.alloc_buffer((2,), "uint32", scope="local")
        if first == 0:
            map_mbar(remote)
            for i in T.unroll(count):
                issue(i, remote)

    return by_first
