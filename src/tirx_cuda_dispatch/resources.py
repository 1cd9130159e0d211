"""What a plan needs besides its operands, as data: workspace buffers, named barriers, tensor
maps the host encodes, and what completes asynchronously (and who waits for it).

A plan lists these in ``resources()``. Each kind is a record with three steps against the
lowering bridge (:class:`Bridge`, the host's side): ``check`` says why it cannot be had
for a call (a plan whose resources cannot be had declines), ``provide`` gives the emitter
what it names (a buffer, the first barrier id, the variable a tensor map arrives in; the
emitter receives them as ``emit(plan, call, given)``, ``given[name]``), and ``commit``
makes it real once the emitter returned (the buffer allocated, the tensor map encoded on
the host). A new kind is one class here with those methods; the bridge only offers its
primitives. explain() lists every resource with why the plan needs it.

A :class:`Completion` is not provided: it states a contract, as data (the mechanism, from
:data:`COMPLETIONS`, and who waits): ``tcgen05.ld`` results are valid after
``tcgen05.wait::ld``, which the caller issues. explain() shows it, and the simulator checks
that every asynchronous effect a call's code issues completes by a mechanism its plan
declared.

A :class:`TensorMap` is a TMA descriptor (``CUtensorMap``) over a global operand: the bridge
has the host encode it before the launch (``cuTensorMapEncodeTiled``, through TVM 0.27's
``tensormap_encode_tiled``; one per kernel for equal descriptors over the same buffer) and
hands the emitter the variable the kernel receives it in; unless the plan says otherwise,
the kernel's threads of ``threadIdx.x`` 0 (a CTA's first thread where the block is one
dimension) prefetch it at the kernel's start (``prefetch.tensormap``), so the first copy
does not wait for the descriptor's fetch.

Named barriers (PTX ISA "bar, barrier": ids 0-15 per CTA; ``bar.sync 0`` is
``__syncthreads``) are allocated per kernel from the ids the kernel itself never names,
so a plan's barrier cannot complete with the kernel's own arrivals (:class:`BarrierPool`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import tvm

from .irfacts import barrier_reduction, evaluated_calls

BARRIER_IDS = 16  # per CTA (PTX ISA "bar, barrier")
# Ids we never hand out: 0 is __syncthreads; TVM 0.27's built-in variants hard-code 8
# (its shared reduction and warpgroup syncs), which may lower other calls of the kernel.
RESERVED_BARRIERS = frozenset({0, 8})


class Bridge(Protocol):
    """What a resource kind may ask of the lowering bridge (the host's side)."""

    lowering: bool  # False while explaining: nothing is allocated or encoded

    def barrier_pool(self, call: Any) -> BarrierPool | None:
        """The named-barrier ids of ``call``'s kernel, None where the kernel is unknown."""

    def declare_buffer(self, name: str, shape: tuple, dtype: str, scope: str) -> Any:
        """A buffer the emitter may name (allocated only at :meth:`allocate`)."""

    def allocate(self, buffer: Any, call: Any) -> None:
        """Allocate ``buffer`` in ``call``'s kernel."""

    def tensor_map_var(self, r: TensorMap, call: Any) -> Any:
        """The variable ``call``'s kernel receives tensor map ``r`` in."""

    def encode_tensor_map(self, var: Any, r: TensorMap, call: Any) -> None:
        """Have the host encode ``r`` into ``var`` before the launch (once per kernel)."""

    def prefetch_tensor_map(self, var: Any, r: TensorMap, call: Any) -> None:
        """Have ``call``'s kernel prefetch the descriptor in ``var`` at its start (once)."""

    def alignment_blocker(self, r: Alignment, call: Any) -> str | None:
        """Why ``call``'s allocation cannot be raised to ``r.align`` (None: it can)."""

    def raise_alignment(self, r: Alignment, call: Any) -> None:
        """Raise the alignment of the allocation ``r`` names in ``call``'s kernel."""


class Kind:
    """A resource kind's steps; a kind that needs none of them keeps these."""

    def check(self, bridge: Bridge, call: Any) -> str | None:
        """Why it cannot be had for ``call`` (None: it can)."""
        return None

    def provide(self, bridge: Bridge, call: Any) -> Any:
        """What the emitter gets under the resource's name (None: nothing)."""
        return None

    def commit(self, bridge: Bridge, call: Any, given: Any) -> None:
        """The emitter returned: make ``given`` real."""


@dataclass(frozen=True)
class Workspace(Kind):
    """A scratch buffer the emitted code needs: its scope, dtype and shape."""

    name: str
    scope: str  # "shared" or "local"
    dtype: str
    shape: tuple[int, ...]
    why: str

    @property
    def nbytes(self) -> int:
        n = tvm.runtime.DataType(self.dtype).bits // 8
        for e in self.shape:
            n *= e
        return n

    def __str__(self) -> str:
        shape = ", ".join(str(e) for e in self.shape)
        return f"workspace {self.name}: {self.scope} {self.dtype}[{shape}] ({self.why})"

    def provide(self, bridge: Bridge, call: Any) -> Any:
        return bridge.declare_buffer(f"{call.op}_{self.name}", self.shape, self.dtype, self.scope)

    def commit(self, bridge: Bridge, call: Any, given: Any) -> None:
        if bridge.lowering:
            bridge.allocate(given, call)


@dataclass(frozen=True)
class NamedBarrier(Kind):
    """Named barriers (``bar.sync id, threads``): one id per instance of the scope that runs
    the call at once (every warpgroup of a CTA runs its own ``Tx.wg`` call)."""

    name: str
    threads: int  # threads that arrive at one instance's barrier
    instances: int
    why: str
    # Which threads meet there: calls whose barriers name the same group (the same scope
    # and the same threads, which run the calls one after another) share the ids.
    group: str = ""

    def __str__(self) -> str:
        ids = f"{self.instances} ids" if self.instances > 1 else "1 id"
        return f"named barrier {self.name}: {ids}, {self.threads} threads each ({self.why})"

    def key(self, call: Any) -> Any:
        """Which calls share the ids: the same group (its threads run them in turn)."""
        return self.group or (id(call.prim), self.name)

    def check(self, bridge: Bridge, call: Any) -> str | None:
        pool = bridge.barrier_pool(call)
        if pool is None:
            return f"named barrier {self.name}: the kernel's own barrier ids are unknown"
        if (self.key(call), self.instances) in pool.given:
            return None  # the same threads' calls share their ids
        missing = pool.missing(self.instances)
        return None if missing is None else f"named barrier {self.name} {missing}"

    def provide(self, bridge: Bridge, call: Any) -> Any:
        return bridge.barrier_pool(call).take(self.key(call), self.instances)


COMPLETIONS = {
    "cp.async group": "the issuing thread's cp.async groups (commit_group, wait_group)",
    "mbarrier complete-tx": "an mbarrier phase the copy completes its bytes on",
    "bulk async-group": "the issuing thread's bulk async-groups (cp.async.bulk.commit_group, wait_group)",
    "wgmma group": "the warpgroup's wgmma groups (wgmma.commit_group, wait_group)",
    "tcgen05.ld": "the issuing warp's tcgen05.wait::ld",
    "tcgen05.st": "the issuing warp's tcgen05.wait::st",
}
"""The completion mechanisms a plan may declare (the simulator knows each)."""


@dataclass(frozen=True)
class Completion(Kind):
    """Something the emitted code starts and does not finish: the mechanism that
    completes it (one of :data:`COMPLETIONS`) and who waits for it."""

    mechanism: str  # "tcgen05.ld", "cp.async group"
    waiter: str  # "the caller: T.ptx.tcgen05.wait__ld.sync.aligned() before reading dst"

    def __post_init__(self) -> None:
        if self.mechanism not in COMPLETIONS:
            raise ValueError(
                f"completion mechanism {self.mechanism!r} is not one of {sorted(COMPLETIONS)}"
            )

    def __str__(self) -> str:
        return f"completion: {self.mechanism} completes asynchronously; {self.waiter}"


@dataclass(frozen=True)
class TensorMap(Kind):
    """A tiled TMA descriptor the host encodes before the launch (CUDA driver
    ``cuTensorMapEncodeTiled``), over the global buffer of operand ``operand``. Every
    array is in the driver's order, dimension 0 innermost: ``dims`` the tensor's extents
    (``globalDim``), ``strides`` the byte strides of dimensions 1 and up
    (``globalStrides``; dimension 0 is contiguous), ``box`` the box one instruction moves
    (``boxDim``); every element stride is 1. ``swizzle`` is 0 (none), 32, 64 or 128
    bytes; ``l2_promotion`` 0, 64, 128 or 256 bytes; ``tf32``: a float32 tensor encoded
    as ``CU_TENSOR_MAP_DATA_TYPE_TFLOAT32`` (a load rounds each element to tf32). Elements
    out of the tensor read as zeros. ``prefetch``: the threads of ``threadIdx.x`` 0
    prefetch the descriptor at the kernel's start (``prefetch.tensormap``, PTX ISA
    9.7.9.15: it brings the descriptor into the cache the TMA unit reads it from; it does
    not wait, and has no effect on memory), before anything the kernel waits for: a grid
    dependency's ``griddepcontrol.wait`` included, since the descriptor is a kernel
    parameter. Not part of the key: one call asking is enough."""

    name: str
    operand: str  # the role of the global operand whose buffer's data is the base
    dtype: str
    dims: tuple[Any, ...]
    strides: tuple[int, ...]
    box: tuple[int, ...]
    swizzle: int
    l2_promotion: int
    why: str
    tf32: bool = False
    prefetch: bool = True

    @property
    def rank(self) -> int:
        return len(self.dims)

    @property
    def key(self) -> tuple:
        """Equal keys over the same buffer are one descriptor."""
        dims = tuple(str(d) for d in self.dims)
        return (
            self.dtype, dims, self.strides, self.box, self.swizzle, self.l2_promotion, self.tf32
        )  # fmt: skip

    def provide(self, bridge: Bridge, call: Any) -> Any:
        return bridge.tensor_map_var(self, call)

    def commit(self, bridge: Bridge, call: Any, given: Any) -> None:
        if bridge.lowering:
            bridge.encode_tensor_map(given, self, call)
            if self.prefetch:
                bridge.prefetch_tensor_map(given, self, call)

    def __str__(self) -> str:
        dims = "x".join(str(d) for d in self.dims)
        box = "x".join(str(b) for b in self.box)
        strides = ", ".join(str(s) for s in self.strides)
        swz = f"{self.swizzle}B swizzle" if self.swizzle else "no swizzle"
        dtype = f"{self.dtype} as tf32" if self.tf32 else self.dtype
        return (
            f"tensor map {self.name}: {dtype} over {self.operand} (dims {dims}, byte "
            f"strides [{strides}], box {box}, {swz}; encoded by the host before the launch"
            f"{'' if self.prefetch else ', not prefetched'}; {self.why})"
        )


@dataclass(frozen=True)
class Alignment(Kind):
    """An allocation's alignment the bridge raises rather than decline the call: the
    shared allocation operand ``operand``'s memory lies in (``allocation``, its buffer's
    name) is declared aligned to ``declared`` bytes and the plan needs ``align`` (a TMA
    box or a wgmma descriptor under a swizzle reads the address's bits). The bridge
    raises the allocation's ``align=`` in the lowered kernel (CUDA's ``alignas``, or the
    dynamic shared pool's base); the author's program is not changed. A plan asks for it
    only where the allocation is in the kernel and the region's offset in it is a
    multiple of ``align`` (:func:`..predicates.allocation_alignment`)."""

    operand: str
    allocation: str
    declared: int
    align: int
    why: str

    def check(self, bridge: Bridge, call: Any) -> str | None:
        return bridge.alignment_blocker(self, call)

    def commit(self, bridge: Bridge, call: Any, given: Any) -> None:
        if bridge.lowering:
            bridge.raise_alignment(self, call)

    def __str__(self) -> str:
        return (
            f"alignment: {self.operand}'s allocation {self.allocation} raised from "
            f"{self.declared} to {self.align} bytes ({self.why})"
        )


Resource = Kind  # any kind: Workspace, NamedBarrier, Completion, TensorMap, ...


def resources_of(plan: Any) -> tuple[Resource, ...]:
    """A plan's resources (``plan.resources()``), none for a plan that declares none."""
    fn = getattr(plan, "resources", None)
    return tuple(fn()) if callable(fn) else ()


def completions_of(plan: Any) -> tuple[str, ...]:
    """The completion mechanisms a plan declares (what the simulator holds its code to)."""
    return tuple(r.mechanism for r in resources_of(plan) if isinstance(r, Completion))


# -- barrier ids -------------------------------------------------------------------------
# TVM's PTX table names a call after its entry: T.ptx.bar.sync(3, 64) is bar_sync_count.
_BARRIER_CALLS = (
    "tirx.ptx.bar_sync",
    "tirx.ptx.bar_sync_count",
    "tirx.ptx.barrier_sync",
    "tirx.ptx.barrier_sync_count",
    "tirx.ptx.bar_arrive",
    "tirx.ptx.barrier_arrive",
    "tirx.cuda.warpgroup_sync",
)


def barrier_ids_in(func: Any) -> set[int]:
    """The named-barrier ids a function's own statements use (constant ids of
    ``bar``/``barrier`` PTX calls, their reductions ``bar.red`` included, and
    ``warpgroup_sync``); a non-constant id blocks every id (it may be any of them)."""
    used: set[int] = set()
    for call in evaluated_calls(func.body):
        red = barrier_reduction(call)  # bar.red d, a, ...: the id follows d
        if red is not None:
            barrier = red.barrier
        elif getattr(call.op, "name", None) in _BARRIER_CALLS and call.args:
            barrier = call.args[0]
        else:
            continue
        value = getattr(barrier, "value", None)
        if isinstance(value, int):
            used.add(value)
        else:
            used.update(range(BARRIER_IDS))
    return used


@dataclass
class BarrierPool:
    """The ids one kernel may still hand out: neither reserved, nor named by the kernel,
    nor given to an earlier call."""

    used: set[int] = field(default_factory=set)
    given: dict[Any, int] = field(default_factory=dict)  # (group key, count) -> first id

    def free(self) -> list[int]:
        taken = self.used | RESERVED_BARRIERS | set(self._given_ids())
        return [i for i in range(BARRIER_IDS) if i not in taken]

    def _given_ids(self):
        for key, first in self.given.items():
            yield from range(first, first + key[1])

    def missing(self, count: int) -> str | None:
        """Why ``count`` consecutive ids cannot be had, or None."""
        if self._first_run(count) is not None:
            return None
        return (
            f"needs {count} consecutive named-barrier id{'s' if count > 1 else ''}; the free "
            f"ids are {self.free() or 'none'} (the kernel uses {sorted(self.used) or 'none'}, "
            f"{sorted(RESERVED_BARRIERS)} are reserved)"
        )

    def take(self, key: Any, count: int) -> int:
        """The first of ``count`` consecutive free ids for ``key`` (the same ids again for
        the same key)."""
        full = (key, count)
        if full in self.given:
            return self.given[full]
        first = self._first_run(count)
        if first is None:
            raise ValueError(self.missing(count))
        self.given[full] = first
        return first

    def _first_run(self, count: int) -> int | None:
        free = set(self.free())
        for first in range(BARRIER_IDS - count + 1):
            if all(i in free for i in range(first, first + count)):
                return first
        return None
