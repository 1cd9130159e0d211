"""SIMT execution of a lowered device function, one CTA (or one cluster) at a time.

The function is the TIR a pipeline (ours or TVM's built-in) hands to CUDA codegen: flat
statements (``Bind``, ``DeclBuffer``, ``AllocBuffer``), thread launches, serial and
``while`` loops, buffer loads and stores, and calls (PTX instructions, CUDA built-ins,
math, helpers). Every value is a numpy array whose first axis runs over the CTA's threads
(length 1 when uniform); vectors add a lanes axis. The launched threads run as units
(:mod:`.schedule`): threads on one path in lockstep, an ``if`` on a thread-dependent
condition narrowing the active mask, each unit stepping through its own frames until it
waits for another. Asynchronous writes wait in the CTA's queue of pending effects
(:mod:`.asynchrony`) until their completion object completes; the CTA may not exit with
any still pending. Calls run through the instruction table the machine is given
(:mod:`.calls`): the interpreter knows no instruction itself. Anything the simulator does
not know raises :class:`SimError` naming it: no node, call or attribute is skipped.

A cluster launch (``clusterCtaIdx.x``, and ``.y`` / ``.z`` for a cluster of more
dimensions, around the ``blockIdx`` launches, which TVM may put inside ``threadIdx.x``)
runs each cluster's CTAs together: their threads are one array, CTA after CTA in the
order of ``%cluster_ctarank`` (x fastest; a thread's CTA is its *rank*), each one's
``threadIdx``, ``blockIdx`` and ``clusterCtaIdx`` values its own; each shared
allocation holds a window per CTA (a thread's pointer starts at its CTA's window, and
an access outside it is an error); named barriers and the register pool are each CTA's
(:mod:`.barriers`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ..codegen import CALL_MARK, COMPLETION_MARK
from ..isa.bulk import CTA_MASK_BITS
from .asynchrony import Asynchrony
from .barriers import NamedBarriers, RegisterFile
from .errors import NotModeled, SimError
from .memory import BankRecord, Clocks, Counters, Memory, bank_ways
from .numerics import cast, fma, from_bits, is_float, parse_dtype, to_bits
from .schedule import (
    Block,
    CallFrame,
    ForFrame,
    Frame,
    IfFrame,
    Loop,
    Scheduler,
    SeqFrame,
    Unit,
    Wait,
    WhileFrame,
)
from .tmem import TensorMemory
from .values import CLUSTER_WINDOW, Binding, Pointer, TensorMapArg

DYNAMIC_SHARED_BYTES = 232448  # the most a CTA may have on sm_90 / sm_100 (227 KB)
MAX_CLUSTER = CTA_MASK_BITS  # CTAs of a cluster (16 is a non-portable size)


_LEAVES = frozenset(
    {"Bind", "Evaluate", "Break", "Continue", "AssertStmt", "DeclBuffer", "AllocBuffer",
     "BufferStore"}
)  # fmt: skip


class Env:
    """Values of variables and buffers by TIR node (what a unit's ``env`` holds).

    Keyed by the node's handle: a dict keyed by a TIR ``Var`` calls its ``==``, which
    builds an ``EQ`` expression on every lookup. Each entry keeps its node, so the handle
    names no other node while the entry exists."""

    __slots__ = ("_items",)

    def __init__(self, items: dict[int, tuple[Any, Any]] | None = None):
        self._items = {} if items is None else items

    def __setitem__(self, node: Any, value: Any) -> None:
        self._items[node.__chandle__()] = (node, value)

    def __getitem__(self, node: Any) -> Any:
        return self._items[node.__chandle__()][1]

    def __contains__(self, node: Any) -> bool:
        return node.__chandle__() in self._items

    def get(self, node: Any, default: Any = None) -> Any:
        hit = self._items.get(node.__chandle__())
        return default if hit is None else hit[1]

    def copy(self) -> Env:
        return Env(dict(self._items))


class NodeCache:
    """What the interpreter derives from a TIR node and nothing else (its dtype, a
    constant's value), by the node's handle; each entry keeps its node alive, so a handle
    names one node while cached. Constant values are read-only arrays: callers share them."""

    __slots__ = ("dtypes", "consts", "indices", "registers")

    def __init__(self):
        self.dtypes: dict[int, tuple[Any, str]] = {}
        self.consts: dict[int, tuple[Any, np.ndarray]] = {}
        # an index list's element offsets when every index is a constant (None: not)
        self.indices: dict[int, tuple[Any, tuple[int, ...] | None]] = {}
        # a PTX call's register operands (by their handles): for each buffer, the
        # positions of its registers and their constant indices (:func:`.calls.register_cells`)
        self.registers: dict[tuple[int, ...], tuple[Any, list]] = {}

    def dtype(self, node: Any) -> str:
        """``str(node.ty.dtype)``: reading it through TVM's FFI costs microseconds."""
        h = node.__chandle__()
        hit = self.dtypes.get(h)
        if hit is None:
            hit = self.dtypes[h] = (node, str(node.ty.dtype))
        return hit[1]

    def constant(self, node: Any) -> np.ndarray:
        """An ``IntImm`` / ``FloatImm`` as a read-only ``(1,)`` array of its dtype."""
        h = node.__chandle__()
        hit = self.consts.get(h)
        if hit is None:
            value = np.array([node.value], dtype=parse_dtype(self.dtype(node))[0])
            value.flags.writeable = False
            hit = self.consts[h] = (node, value)
        return hit[1]

    def constant_indices(self, indices: Any) -> tuple[int, ...] | None:
        """The indices as integers when each is an ``IntImm``, else None."""
        h = indices.__chandle__()
        hit = self.indices.get(h)
        if hit is None:
            items = list(indices)
            static = all(type(i).__name__ == "IntImm" for i in items)
            hit = self.indices[h] = (
                indices,
                tuple(int(i.value) for i in items) if static else None,
            )
        return hit[1]


def _as_int(v: Any, what: str, active: np.ndarray | None = None) -> int:
    """``v`` as one integer: equal in every thread (in the ``active`` ones where given)."""
    arr = np.asarray(v)
    if active is not None and arr.size > 1 and active.size > 1:
        arr = np.broadcast_to(arr, np.broadcast_shapes(arr.shape, active.shape))
        arr = arr[np.broadcast_to(active, arr.shape)]
    arr = arr.ravel()
    if arr.size == 0 or (arr != arr[0]).any():
        raise SimError(f"{what} differs between threads; the simulator needs it uniform")
    return int(arr[0])


class Machine:
    """Runs one device function over a grid of CTAs; ``calls`` maps a call's op name to
    what executes it (``handler(machine, call)``)."""

    def __init__(
        self,
        func: Any,
        args: list[Any],
        blocks: Any,
        rng: np.random.Generator,
        calls: Mapping[str, Callable[[Machine, Any], Any]],
    ):
        self.func = func
        self.rng = rng
        # What each tile-primitive call did, by its explain() index (None: statements of
        # the kernel itself, and calls TVM's built-in variants lowered): ``counters`` is
        # the current call's, so every instruction counts where it was issued.
        self.by_call: dict[int | None, Counters] = {None: Counters()}
        self.counters = self.by_call[None]
        self.call: int | None = None
        self.calls = calls
        self.env = Env()
        self.nodes = NodeCache()
        self._handlers: dict[type, Callable[[Any], Any]] = {}  # eval's, by node class
        self._active: tuple = (None, None, None)  # (mask, tid, active_threads())
        self.blocks = blocks
        self.threads = 1
        self.mask = np.ones(1, dtype=bool)
        self.tid = np.zeros(1, dtype=np.int64)
        # the running unit (:mod:`.schedule`): its frames, loops (innermost last), threads
        self.unit: Unit | None = None
        self.stack: list[Frame] = []
        self.stmt: Any = None  # the simple statement running (what a wait names)
        self.loops: list[Loop] = []
        self.members = self.mask
        self.barriers: NamedBarriers | None = None
        self.events = 0  # completions that may wake a waiting unit (:mod:`.schedule`)
        self.cta_count = 0  # CTAs started so far (each one's number for the global memories)
        self.cta_label = "the CTA"  # its name in messages ("CTA (x=3)" in a grid)
        self.block_index: dict[str, int] = {}  # the running CTA's block index, by blockIdx tag
        # A cluster of CTAs (a clusterCtaIdx launch) runs together: its threads are one
        # array, CTA after CTA (``cta_threads`` each; a thread's CTA is its rank), and each
        # shared allocation holds one window per CTA (:meth:`window_base`).
        self.cluster = 1  # CTAs of a cluster: the product of its dimensions
        self.cluster_dims: dict[str, int] = {}  # by axis ("x", "y", "z")
        self.cluster_vars: dict[str, Any] = {}  # the clusterCtaIdx variables, by axis
        self.finished = np.zeros(1, dtype=bool)  # (a cluster) threads run to the end
        self.block_vars: dict[str, Any] = {}  # (a cluster) the blockIdx variables, by axis
        self.cluster_first: dict[str, int] = {}  # the running cluster's first CTA, by axis
        # the completion mechanisms each tile call's plan declares, by explain() index
        self.declared: dict[int | None, tuple[str, ...]] = {}
        self.registers: RegisterFile | None = None
        self.shared: dict[Any, Memory] = {}  # the running CTA's static shared allocations
        self.clocks = Clocks(1)
        self.tmem: TensorMemory | None = None
        self.asynchrony = Asynchrony()
        self.dynamic_shared: Memory | None = None
        self.globals: list[Memory] = []
        for param, arg in zip(func.params, args, strict=True):
            if isinstance(arg, np.ndarray):
                flat = arg.reshape(-1).view(np.uint8)
                mem = Memory(param.name, "global", flat.size, data=flat)
                self.globals.append(mem)
                self.env[param] = Pointer(mem, np.zeros(1, dtype=np.int64), arg.dtype.itemsize)
            elif isinstance(arg, TensorMapArg):  # a CUtensorMap over a global array
                flat = arg.array.reshape(-1).view(np.uint8)
                mem = Memory(param.name, "global", flat.size, data=flat)
                self.globals.append(mem)
                self.env[param] = arg.bind(param.name, mem)
            else:
                self.env[param] = np.array([arg])

    # -- statements ---------------------------------------------------------------------
    def run(self) -> None:
        # IEEE arithmetic overflows, divides by zero and makes NaNs silently on the GPU:
        # so do the kernel's numpy operations (set once here, not per operation)
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            self.exec(self.func.body)
        self.asynchrony.check_drained(self)
        if self.tmem is not None:
            self.tmem.check_freed()

    def total_counters(self) -> Counters:
        """Every call's counters and the kernel's own, added up."""
        total = Counters()
        for c in self.by_call.values():
            total.add(c)
        return total

    def exec(self, stmt: Any) -> None:
        """Run a statement outside the CTA's threads (the launch statements around them);
        inside a launch, statements run as units' frames (:meth:`enter`)."""
        kind = type(stmt).__name__
        if kind == "SeqStmt":
            for item in stmt.seq:
                self.exec(item)
            return
        if kind == "AttrStmt" and stmt.attr_key == "thread_extent":
            self._launch(stmt)
            return
        if kind == "AttrStmt" and stmt.attr_key != CALL_MARK:
            self.exec(stmt.body)
            return
        if kind in _LEAVES:
            getattr(self, f"_s_{kind}")(stmt)
            return
        raise NotModeled(
            f"the simulator runs {kind} only inside a thread launch (threadIdx.x): {stmt}"
        )

    # -- the running unit (:mod:`.schedule`) ------------------------------------------------
    def enter(self, stmt: Any) -> None:
        """The running unit enters ``stmt``: a simple statement runs now; a compound one
        becomes a frame the unit steps through."""
        kind = type(stmt).__name__
        if kind in _LEAVES:
            self.stmt = stmt
            getattr(self, f"_s_{kind}")(stmt)
        elif kind == "SeqStmt":
            self.push(SeqFrame(list(stmt.seq)))
        elif kind == "IfThenElse":
            cond = np.broadcast_to(self.eval(stmt.condition).astype(bool), self.mask.shape)
            self.push(IfFrame(stmt, self.mask, cond))
        elif kind == "For":
            self._for(stmt)
        elif kind == "While":
            self.push(WhileFrame(stmt, self.mask))
        elif kind == "AttrStmt":
            if stmt.attr_key == CALL_MARK:
                index = int(stmt.value)
                self.push(CallFrame(index, stmt.body, (self.call, self.counters)))
                self.set_call(index, self.counters_of(index))
            elif stmt.attr_key == COMPLETION_MARK:  # what the call's plan declares
                self.declared[self.call] = tuple(t for t in stmt.value.value.split("|") if t)
                self.enter(stmt.body)
            elif stmt.attr_key == "thread_extent":
                raise SimError(f"a thread launch inside the launched threads: {stmt.node}")
            else:
                self.enter(stmt.body)  # other attributes annotate; no change of semantics
        else:
            raise NotModeled(f"the simulator does not know the statement {kind}: {stmt}")

    def push(self, frame: Frame) -> None:
        self.stack.append(frame)
        if isinstance(frame, (ForFrame, WhileFrame)):
            self.loops.append(frame.loop)

    def pop(self) -> None:
        frame = self.stack.pop()
        if isinstance(frame, (ForFrame, WhileFrame)):
            self.loops.pop()

    def set_call(self, index: int | None, counters: Counters) -> None:
        self.call, self.counters = index, counters

    def counters_of(self, index: int | None) -> Counters:
        """The counters of tile call ``index`` (None: the kernel's own statements)."""
        return self.by_call.setdefault(index, Counters())

    def after_branch(self, mask: np.ndarray) -> np.ndarray:
        """The threads of ``mask`` that go on after a branch: those that left the loop's
        iteration inside it (break, continue) stay out."""
        return mask & ~self.loops[-1].left if self.loops else mask

    def load_unit(self, unit: Unit) -> None:
        self.unit, self.stack, self.members, self.mask = unit, unit.stack, unit.members, unit.mask
        self.env, self.call, self.counters = unit.env, unit.call, unit.counters
        self.loops = unit.loops
        self.asynchrony.unmet, self.asynchrony.met = unit.unmet, unit.met

    def save_unit(self, unit: Unit) -> None:
        unit.members, unit.mask, unit.env = self.members, self.mask, self.env
        unit.call, unit.counters = self.call, self.counters
        unit.unmet, unit.met = self.asynchrony.unmet, self.asynchrony.met

    def block(self, waits: list[tuple[Wait, np.ndarray | None]]) -> None:
        """Threads of the running unit wait: each group (None: every active thread) for
        its :class:`.schedule.Wait`. An instruction calls it last, after its effects; it
        raises :class:`.schedule.Block`, and the scheduler runs others meanwhile."""
        groups = [(w, self.mask if t is None else t & self.mask) for w, t in waits]
        if groups:
            raise Block(groups)

    def _for(self, s: Any) -> None:
        kind = int(s.kind)
        if kind not in (0, 2):  # serial, unrolled
            raise SimError(f"loop {s.loop_var} of kind {s.kind}: the simulator runs serial loops")
        step = 1 if s.step is None else _as_int(self.eval(s.step), "loop step", self.mask)
        dt = parse_dtype(self.nodes.dtype(s.loop_var))[0]
        shape = self.mask.shape
        lo = np.broadcast_to(np.asarray(self.eval(s.min), dtype=np.int64), shape)
        # TIR's extent is the range's length (stop - min), its step apart
        end = lo + np.broadcast_to(np.asarray(self.eval(s.extent), dtype=np.int64), shape)
        firsts, ends = lo[self.mask], end[self.mask]
        if firsts.size == 0 or ((firsts == firsts[0]).all() and (ends == ends[0]).all()):
            # every active thread runs the same iterations
            first, last = (int(firsts[0]), int(ends[0])) if firsts.size else (0, 0)
            self.push(ForFrame(s, list(range(first, last, step)), dt, self.mask))
            return
        bounds = {(int(a), int(b)) for a, b in zip(firsts, ends, strict=True)}
        # threads of other bounds (warps of different roles, or diverged lanes): the loop
        # runs the union of their values, each value with the threads whose range has it
        if step <= 0:
            raise NotModeled(
                f"loop {s.loop_var}: bounds that differ between threads with step {step}; "
                "the simulator runs those with a positive step"
            )
        values = sorted({v for a, b in bounds for v in range(a, b, step)})
        self.push(ForFrame(s, values, dt, self.mask, (lo, end, step)))

    def _s_Bind(self, s: Any) -> None:
        self.env[s.var] = self.eval(s.value)

    def _s_Evaluate(self, s: Any) -> None:
        op = str(getattr(getattr(s.value, "op", None), "name", ""))
        if op in ("tirx.break_loop", "tirx.continue_loop"):
            self._leave(op == "tirx.break_loop", op)
            return
        self.eval(s.value)

    def _s_Break(self, s: Any) -> None:
        self._leave(True, "break")

    def _s_Continue(self, s: Any) -> None:
        self._leave(False, "continue")

    def _leave(self, breaks: bool, what: str) -> None:
        """``break`` / ``continue`` of the innermost loop by the active threads: they run
        nothing more of this iteration (``break``: of the loop) and go on after it with
        the threads that stayed."""
        if not self.loops:
            raise SimError(f"{what} outside a loop")
        loop = self.loops[-1]
        leaving = np.broadcast_to(self.mask, self.tid.shape)
        loop.left |= leaving
        if breaks:
            loop.broken |= leaving
        self.mask = self.mask & ~leaving

    def _s_AssertStmt(self, s: Any) -> None:
        cond = np.broadcast_to(self.eval(s.condition), self.mask.shape)
        if not cond[self.mask].all():
            raise SimError(f"assertion failed: {s.message}")

    def _s_DeclBuffer(self, s: Any) -> None:
        buf = s.buffer
        if buf.scope() == "tmem":
            self.env[buf] = "tmem"  # reached through tcgen05 addresses only
            return
        if s.data is None:
            raise SimError(f"buffer {buf.name} is declared without data")
        ptr = self.eval(s.data)
        if not isinstance(ptr, Pointer):
            raise SimError(f"buffer {buf.name}'s data is not a pointer")
        self.env[buf] = self._binding(buf, ptr)

    def _s_AllocBuffer(self, s: Any) -> None:
        buf = s.buffer
        scope = buf.scope()
        dtype, lanes = parse_dtype(buf.dtype)
        elems = 1
        for e in buf.shape:
            elems *= _as_int(self.eval(e), f"extent of {buf.name}")
        nbytes = elems * dtype.itemsize * lanes
        if scope == "shared.dyn":
            # all dynamic shared allocations share one window whose size the launch sets
            if self.dynamic_shared is None:
                self.dynamic_shared = self._shared_memory(buf.name, DYNAMIC_SHARED_BYTES)
            mem = self.dynamic_shared
        elif scope == "shared":  # one per CTA, whichever of its units allocates it
            mem = self.shared.get(buf)
            if mem is None:
                mem = self.shared[buf] = self._shared_memory(buf.name, nbytes)
        elif scope == "local":
            mem = Memory(buf.name, "local", nbytes, threads=self.threads, rng=self.rng)
        else:
            raise SimError(f"the simulator has no memory scope {scope!r} ({buf.name})")
        if mem.cta != self.cta_count:  # its faults name the CTA (global: set per CTA)
            mem.enter_cta(self.cta_count, self.cta_label)
        ptr = Pointer(mem, self.window_base(mem), dtype.itemsize * lanes)
        self.env[buf] = self._binding(buf, ptr)

    def _shared_memory(self, name: str, nbytes: int) -> Memory:
        """A shared allocation: in a cluster, one window of ``nbytes`` (rounded up to 1,024
        bytes: swizzles repeat within it) per CTA, CTA after CTA."""
        if self.cluster == 1:
            return Memory(name, "shared", nbytes, rng=self.rng)
        window = -(-nbytes // 1024) * 1024
        mem = Memory(name, "shared", window * self.cluster, rng=self.rng)
        mem.window, mem.window_bytes, mem.cta_threads = window, nbytes, self.cta_threads
        return mem

    @property
    def cta_threads(self) -> int:
        """The threads of one CTA (of the cluster's array of threads)."""
        return self.threads // self.cluster

    def rank(self, threads: Any) -> np.ndarray:
        """The CTA (its rank in the cluster) each of ``threads`` belongs to."""
        return np.asarray(threads) // self.cta_threads

    def window_base(self, mem: Memory) -> np.ndarray:
        """Each thread's first byte of its CTA's window of ``mem`` (0 outside a cluster)."""
        if mem.window is None:
            return np.zeros(1, dtype=np.int64)
        return self.rank(self.tid).astype(np.int64) * mem.window

    def _binding(self, buf: Any, ptr: Pointer) -> Binding:
        dtype, lanes = parse_dtype(buf.dtype)
        shape, strides = tuple(buf.shape), tuple(buf.strides)
        return Binding(
            buf.name, ptr, dtype, lanes, shape, strides, buf.elem_offset,
            _static_layout(shape, strides, buf.elem_offset),
        )  # fmt: skip

    def _launch(self, s: Any) -> None:
        """A ``blockIdx`` launch runs its CTAs one after another; ``threadIdx.x`` launches
        the CTA's threads, which run as units (:mod:`.schedule`) until all have finished."""
        tag = s.node.thread_tag
        extent = _as_int(self.eval(s.value), tag)
        var = s.node.var
        if tag in ("clusterCtaIdx.x", "clusterCtaIdx.y", "clusterCtaIdx.z"):
            axis = tag[-1]  # the CTAs of a cluster run together (module docs)
            size = self.cluster * extent
            if extent < 1 or size > MAX_CLUSTER:
                raise SimError(
                    f"a cluster of {size} CTAs ({tag} {extent}): 1 to {MAX_CLUSTER} in all"
                )
            self.cluster_dims[axis], self.cluster_vars[axis] = extent, var
            self.cluster = size
            try:
                self.exec(s.body)
            finally:
                self.cluster //= self.cluster_dims.pop(axis)
                self.cluster_vars.pop(axis)
            return
        if tag.startswith("blockIdx") and self.cluster > 1:
            self._launch_clusters(s, tag, extent, var)
            return
        if tag.startswith("blockIdx"):
            chosen = range(extent) if self.blocks is None else self.blocks
            for b in chosen:
                if b >= extent:
                    raise SimError(f"CTA {b} does not exist: the grid has {extent}")
                self.block_index[tag] = b
                self._start_cta()
                self.env[var] = np.array([b], dtype=np.int32)
                self.exec(s.body)
                self._end_cta()
        elif tag == "threadIdx.x":
            if self.threads != 1:
                raise SimError("threadIdx.x launched twice")
            self.threads = extent * self.cluster
            self.tid = np.arange(self.threads, dtype=np.int64)
            self.mask = np.ones(self.threads, dtype=bool)
            if self.blocks is None and self.tmem is None:
                self._start_cta()  # a kernel without blockIdx is a single CTA
            self.env[var] = (self.tid % extent).astype(np.int32)
            if self.cluster > 1:  # each thread's CTA: its block index and rank
                rank = (self.tid // extent).astype(np.int32)
                for axis in self.cluster_vars:
                    self.env[self.cluster_vars[axis]] = self.cluster_coordinate(rank, axis)
                for axis, block_var in self.block_vars.items():
                    first = self.cluster_first[axis]
                    self.env[block_var] = first + self.cluster_coordinate(rank, axis)
                for g in self.globals:  # ordered between CTAs by cluster barriers only
                    g.cta_threads, g.epoch = extent, self._cluster_epoch
                    g.rank_writer = g.epoch_writer = None
            outer = (self.env, self.call, self.counters)
            try:
                self._run_threads(s.body)
            finally:
                self.env, self.call, self.counters = outer
                self.unit, self.stack, self.loops = None, [], []
                self.threads, self.mask = 1, np.ones(1, dtype=bool)
                self.members = self.mask
                self.tid = np.zeros(1, dtype=np.int64)
        else:
            raise SimError(f"the simulator launches threadIdx.x and blockIdx.* only, not {tag}")

    def _cluster_epoch(self) -> int:
        """The cluster barriers the running cluster has completed."""
        return 0 if self.barriers is None else self.barriers.completed.get("cluster", 0)

    def cluster_coordinate(self, rank: np.ndarray, axis: str) -> np.ndarray:
        """Each rank's ``%cluster_ctaid`` along ``axis`` (the rank runs x fastest)."""
        below = 1
        for a in "xyz":
            if a == axis:
                return (rank // below % self.cluster_dims.get(a, 1)).astype(np.int32)
            below *= self.cluster_dims.get(a, 1)
        raise SimError(f"no cluster axis {axis!r}")

    def _cluster_firsts(self, tag: str, extent: int, var: Any) -> list[int]:
        """The first block index, along ``tag``'s axis, of each cluster of the grid that
        holds a chosen CTA (the blockIdx variable recorded for the threads' launch)."""
        axis = tag[-1]
        size = self.cluster_dims.get(axis, 1)
        if extent % size:
            raise SimError(f"the grid's {extent} CTAs along {tag} are not whole clusters of {size}")
        chosen = range(extent) if self.blocks is None else self.blocks
        firsts = sorted({b // size * size for b in chosen})
        if firsts and firsts[-1] >= extent:
            raise SimError(f"CTA {firsts[-1]} does not exist: the grid has {extent}")
        self.block_vars[axis] = var
        return firsts

    def _launch_clusters(self, s: Any, tag: str, extent: int, var: Any) -> None:
        """A ``blockIdx`` launch inside the ``clusterCtaIdx`` ones: the grid's clusters run
        one after another (those holding the chosen CTAs), the CTAs of each together. A
        further ``blockIdx`` launch right inside runs inside each; the CTA starts at the
        last one before ``threadIdx``."""
        inner = _is_launch(s.body, "blockIdx")
        try:
            for first in self._cluster_firsts(tag, extent, var):
                self.block_index[tag] = self.cluster_first[tag[-1]] = first
                if inner:
                    self.exec(s.body)
                    continue
                self._start_cta()
                self.exec(s.body)
                self._end_cta()
        finally:
            self.block_vars.pop(tag[-1], None)

    def _run_threads(self, body: Any) -> None:
        """The launched threads run ``body`` as units (:mod:`.schedule`) until all of them
        have finished; a ``blockIdx`` launch right inside runs it once per CTA."""
        if _is_launch(body, "blockIdx"):
            extent = _as_int(self.eval(body.value), body.node.thread_tag)
            if self.cluster > 1:
                self._clusters_inside_threads(body, extent)
                return
            chosen = range(extent) if self.blocks is None else self.blocks
            for b in chosen:
                if b >= extent:
                    raise SimError(f"CTA {b} does not exist: the grid has {extent}")
                self.block_index[body.node.thread_tag] = b
                self._start_cta()
                self.env[body.node.var] = np.array([b], dtype=np.int32)
                self._run_threads(body.body)
                self._end_cta()
            return
        self.clocks = Clocks(-(-self.threads // 32))
        missing = [a for a, n in self.cluster_dims.items() if n > 1 and a not in self.block_vars]
        if self.cluster > 1 and missing:
            dims = " x ".join(str(self.cluster_dims.get(a, 1)) for a in "xyz")
            raise SimError(
                f"a cluster of {dims} CTAs over a grid with no blockIdx.{missing[0]}: CUDA asks "
                "each grid dimension to be a multiple of the cluster's, and the grid has one "
                f"CTA along {missing[0]} (launch T.cta_id along it too)"
            )
        if self.cluster > 1 and self.cta_threads % 32:
            raise NotModeled(
                f"a cluster of CTAs of {self.cta_threads} threads: the simulator runs CTAs of "
                "whole warps in a cluster"
            )
        self.barriers = NamedBarriers(self)
        self.registers = RegisterFile(self)
        self.mask = np.ones(self.threads, dtype=bool)
        self.finished = np.zeros(self.threads, dtype=bool)
        Scheduler(self).run(body)

    def threads_finished(self, members: np.ndarray) -> None:
        """``members`` have run to the end. In a cluster, a CTA whose every thread has
        finished has exited: its shared memory is gone for its peers (an access to it
        from now on is an error, :meth:`.Memory.exit_cta`)."""
        if self.cluster == 1:
            return
        before = self.finished.reshape(self.cluster, -1).all(axis=1)
        self.finished |= members
        after = self.finished.reshape(self.cluster, -1).all(axis=1)
        for rank in np.flatnonzero(after & ~before):
            for mem in [*self.shared.values(), self.dynamic_shared]:
                if mem is not None:
                    mem.exit_cta(int(rank), self.clocks)

    def _clusters_inside_threads(self, body: Any, extent: int) -> None:
        """A ``blockIdx`` launch inside ``threadIdx.x`` in a cluster (TVM puts
        ``blockIdx.y`` there): each cluster along its axis starts anew (the CTAs a cluster
        before it ran have exited), its threads' block index their cluster's first plus
        their coordinate."""
        tag, var = body.node.thread_tag, body.node.var
        axis = tag[-1]
        rank = (self.tid // self.cta_threads).astype(np.int32)
        try:
            for first in self._cluster_firsts(tag, extent, var):
                self.block_index[tag] = self.cluster_first[axis] = first
                self._start_cta()
                self.env[var] = first + self.cluster_coordinate(rank, axis)
                self._run_threads(body.body)
                self._end_cta()
        finally:
            self.block_vars.pop(axis, None)

    def _start_cta(self) -> None:
        self.asynchrony.check_drained(self)
        self.cta_count += 1
        label = ", ".join(f"{tag[-1]}={b}" for tag, b in sorted(self.block_index.items()))
        self.cta_label = f"CTA ({label})" if label else "the CTA"
        if self.cluster > 1:
            spans = ", ".join(
                f"{tag[-1]}={b}-{b + self.cluster_dims.get(tag[-1], 1) - 1}"
                for tag, b in sorted(self.block_index.items())
            )
            self.cta_label = f"the cluster of CTAs {spans} (its threads numbered CTA after CTA)"
        for g in self.globals:  # the grid's CTAs are not ordered: each writes its own bytes
            g.enter_cta(self.cta_count, self.cta_label)
        self.clocks = Clocks(-(-self.threads // 32))
        if self.tmem is not None:
            self.tmem.check_freed()
        self.tmem = TensorMemory(self.rng)
        self.asynchrony = Asynchrony()
        self.dynamic_shared = None
        self.shared = {}

    def _end_cta(self) -> None:
        self.asynchrony.check_drained(self)
        if self.tmem is not None:
            self.tmem.check_freed()

    def _s_BufferStore(self, s: Any) -> None:
        b = self.bound(s.buffer)
        value = self.eval(s.value)
        offsets, size = self.address(b, s.indices)
        dtype, lanes = parse_dtype(self.nodes.dtype(s.value))
        threads = self.active_threads()
        raw = to_bits(
            np.broadcast_to(value, (self.threads, *value.shape[1:])), dtype, lanes, self.threads
        )
        self.memory_op(b, threads, offsets, size, raw, lanes)

    # -- memory ---------------------------------------------------------------------------
    def bound(self, buf: Any) -> Binding:
        b = self.env.get(buf)
        if b == "tmem":
            raise SimError(f"{buf.name} is tensor memory: only tcgen05 instructions reach it")
        if not isinstance(b, Binding):
            raise SimError(f"buffer {buf.name} is used before it is declared")
        return b

    def active_threads(self) -> np.ndarray:
        """The active threads' numbers (a read-only array, kept while the mask is)."""
        mask, tid, threads = self._active
        if mask is not self.mask or tid is not self.tid:
            threads = self.tid[np.broadcast_to(self.mask, self.tid.shape)]
            threads.flags.writeable = False
            self.mask.flags.writeable = False  # the cache holds while the mask is unchanged
            self._active = (self.mask, self.tid, threads)
        return threads

    def _flat_index(self, b: Binding, indices: Any) -> tuple[np.ndarray, Any]:
        """Element index ``(T,)`` or ``(T, lanes)`` of ``indices`` into ``b``, and the
        index node when it is one contiguous ramp (a vector access)."""
        const = self.nodes.constant_indices(indices) if b.static is not None else None
        if const is not None:  # the same element in every thread
            strides, offset = b.static
            flat = offset + sum(i * st for i, st in zip(const, strides, strict=True))
            return np.array([flat], dtype=np.int64), None
        idx = [self.eval(i) for i in indices]
        strides, offset = b.static if b.static is not None else self._evaluated_layout(b)
        flat = np.array([offset], dtype=np.int64)
        for i, st in zip(idx, strides, strict=True):
            flat = flat + i.astype(np.int64) * st
        ramp = indices[-1] if type(indices[-1]).__name__ == "Ramp" else None
        return flat, ramp

    def _evaluated_layout(self, b: Binding) -> tuple[tuple[int, ...], int]:
        """``b``'s element strides and offset where they are expressions (thread 0's
        values: the simulator takes a buffer's layout as uniform)."""

        def first(node: Any) -> int:
            return int(np.asarray(self.eval(node)).reshape(-1)[0])

        if b.strides:
            strides = tuple(first(st) for st in b.strides)
        else:
            strides = _row_major([first(ext) for ext in b.shape])
        return strides, first(b.elem_offset)

    def address(self, b: Binding, indices: Any) -> tuple[np.ndarray, int]:
        """Byte offsets per access and the access size: ``(T,)`` with a vector buffer or a
        unit-stride ramp (one vector access), ``(T, lanes)`` for a gather."""
        flat, ramp = self._flat_index(b, indices)
        base = b.pointer.offsets
        if flat.ndim == 1:
            return base + flat * b.elem_bytes, b.elem_bytes
        stride = None
        if ramp is not None and type(ramp.stride).__name__ == "IntImm":
            stride = int(ramp.stride.value)
        if stride == 1:
            return base + flat[:, 0] * b.elem_bytes, b.elem_bytes * flat.shape[1]
        return base[:, None] + flat * b.elem_bytes, b.elem_bytes

    def memory_op(
        self,
        b: Binding,
        threads: np.ndarray,
        offsets: np.ndarray,
        size: int,
        raw: np.ndarray | None,
        lanes: int,
    ) -> np.ndarray | None:
        """Load (``raw`` None) or store the active threads' accesses; count them."""
        mem = b.pointer.memory
        if mem.space == "local" and offsets.shape == (1,):  # a register: not counted
            if raw is None:
                return mem.load_rows(threads, int(offsets[0]), size, self.clocks)
            mem.store_rows(threads, int(offsets[0]), raw[threads].reshape(len(threads), size),
                           self.clocks)  # fmt: skip
            return None
        offs = np.broadcast_to(offsets, (self.threads, *offsets.shape[1:]))[threads]
        gather = offs.ndim == 2
        flat_threads = np.repeat(threads, offs.shape[1]) if gather else threads
        flat_offs = offs.reshape(-1)
        direction = "load" if raw is None else "store"
        self.count_access(mem, direction, flat_threads, flat_offs, size, mem.name, gather)
        if raw is None:
            data = mem.load(flat_threads, flat_offs, size, self.clocks)
            return data.reshape(len(threads), -1)
        mine = raw[threads].reshape(len(flat_threads), size)
        mem.store(flat_threads, flat_offs, mine, self.clocks)
        return None

    def count_access(self, mem, direction, threads, offsets, size, name, gather) -> None:
        """One instruction per issuing warp (per lane of a gather) and its bytes. Local
        buffers are registers (nvcc keeps statically indexed ones there): reading or
        writing them is part of the instruction that does it, not an access to count."""
        if mem.space == "local":
            return
        warps = np.unique(threads // 32)
        kind = f"{'ld' if direction == 'load' else 'st'}.{mem.space}.b{size * 8}"
        # a gather issues one scalar access per lane of the vector
        lanes = len(threads) // self.active_threads().size if gather else 1
        self.counters.instructions[kind] += len(warps) * max(1, lanes)
        self.counters.bytes[f"{mem.space}.{direction}"] += len(threads) * size
        if mem.space == "shared" and not gather:
            for warp, ways in bank_ways(threads, offsets, size).items():
                self.counters.bank_conflicts.append(BankRecord(kind, name, warp, ways))

    def load(self, b: Binding, indices: Any, dtype_text: str) -> np.ndarray:
        offsets, size = self.address(b, indices)
        dtype, lanes = parse_dtype(dtype_text)
        threads = self.active_threads()
        raw = self.memory_op(b, threads, offsets, size, None, lanes)
        out_bytes = dtype.itemsize * lanes
        if len(threads) == self.threads:
            return from_bits(raw.reshape(self.threads, out_bytes), dtype, lanes)
        full = np.zeros((self.threads, out_bytes), dtype=np.uint8)  # inactive lanes: 0
        full[threads] = raw.reshape(len(threads), out_bytes)
        return from_bits(full, dtype, lanes)

    # -- expressions ------------------------------------------------------------------------
    def eval(self, e: Any) -> Any:
        handler = self._handlers.get(type(e))
        if handler is None:
            kind = type(e).__name__
            handler = getattr(self, f"_e_{kind}", None)
            if handler is None:
                raise NotModeled(f"the simulator does not know the expression {kind}: {e}")
            self._handlers[type(e)] = handler
        return handler(e)

    def _e_IntImm(self, e: Any) -> np.ndarray:
        return self.nodes.constant(e)

    def _e_FloatImm(self, e: Any) -> np.ndarray:
        return self.nodes.constant(e)

    def _e_StringImm(self, e: Any) -> str:
        return e.value

    def _e_Var(self, e: Any) -> Any:
        if e not in self.env:
            raise SimError(f"variable {e.name} is used before it is bound")
        return self.env[e]

    def _e_TensorLoad(self, e: Any) -> np.ndarray:
        return self.load(self.bound(e.source), e.indices, self.nodes.dtype(e))

    def _e_Cast(self, e: Any) -> np.ndarray:
        dtype, lanes = parse_dtype(self.nodes.dtype(e))
        value = self.eval(e.value)
        if isinstance(value, Pointer):
            return cast(self.shared_address(value, e), dtype)
        return cast(np.asarray(value), dtype)

    def shared_address(self, ptr: Pointer, what: Any) -> np.ndarray:
        """A shared-window address as a number (what a matrix descriptor encodes): the CTA's
        dynamic shared memory starts at address 0 of the window. Other shared allocations
        have no address the simulator knows, nor does a generic pointer."""
        if not ptr.shared_window or ptr.memory is not self.dynamic_shared:
            raise NotModeled(
                f"{what}: only a shared-window address of dynamic shared memory has a number "
                "in the simulator"
            )
        offsets = np.asarray(ptr.offsets, dtype=np.int64)
        if ptr.memory.window is not None:  # a CTA's addresses start at 0 in its window
            offsets = offsets % ptr.memory.window
        return offsets

    def shared_pointer(self, address: np.ndarray, threads: np.ndarray, what: str) -> Pointer:
        """The dynamic shared memory a ``.shared::cluster`` address of ``threads`` names
        (:data:`.values.CLUSTER_WINDOW`): their own CTA's window below ``CLUSTER_WINDOW``,
        CTA ``r``'s at ``(r + 1) * CLUSTER_WINDOW`` and above (what ``mapa`` returns)."""
        mem = self.dynamic_shared
        if mem is None:
            raise NotModeled(f"{what}: a shared::cluster address outside dynamic shared memory")
        address = np.asarray(address, dtype=np.int64)
        own = self.rank(threads)
        target = np.where(address >= CLUSTER_WINDOW, address // CLUSTER_WINDOW - 1, own)
        local = address % CLUSTER_WINDOW
        bad = (target < 0) | (target >= self.cluster)
        if bad.any():
            i = int(np.argmax(bad))
            raise SimError(
                f"{what}: thread {int(threads[i])} names CTA rank {int(target[i])} of a cluster "
                f"of {self.cluster}"
            )
        window = mem.window if mem.window is not None else 0
        outside = (local < 0) | (local >= mem.window_bytes)  # nbytes outside a cluster
        if outside.any():
            i = int(np.argmax(outside))
            raise SimError(
                f"{what}: thread {int(threads[i])}'s address names byte {int(local[i])} of a "
                f"CTA's dynamic shared memory, past its {mem.window_bytes} bytes"
            )
        return Pointer(mem, target * window + local, 0, shared_window=True)

    def _e_Ramp(self, e: Any) -> np.ndarray:
        base = self.eval(e.base).astype(np.int64)
        stride = self.eval(e.stride).astype(np.int64)
        lanes = int(e.lanes) if not hasattr(e.lanes, "value") else int(e.lanes.value)
        return base[:, None] + stride[:, None] * np.arange(lanes)

    def _e_Broadcast(self, e: Any) -> np.ndarray:
        v = self.eval(e.value)
        lanes = int(e.lanes) if not hasattr(e.lanes, "value") else int(e.lanes.value)
        return np.repeat(v[:, None], lanes, axis=1)

    def _e_Select(self, e: Any) -> np.ndarray:
        cond = self.eval(e.condition).astype(bool)
        return np.where(cond, self.eval(e.true_value), self.eval(e.false_value))

    def _e_Let(self, e: Any) -> Any:
        self.env[e.var] = self.eval(e.value)
        return self.eval(e.body)

    def _e_Not(self, e: Any) -> np.ndarray:
        return ~self.eval(e.a).astype(bool)

    def _e_Call(self, e: Any) -> Any:
        name = e.op.name if hasattr(e.op, "name") else str(e.op)
        handler = self.calls.get(name)
        if handler is None:
            raise NotModeled(f"the simulator does not know the call {name}: {e}")
        return handler(self, e)

    def _binary(self, e: Any, fn) -> np.ndarray:
        a, b = self.eval(e.a), self.eval(e.b)
        # a shared-window address is an integer in CUDA (shifts and masks of a descriptor)
        a = self.shared_address(a, e) if isinstance(a, Pointer) else a
        b = self.shared_address(b, e) if isinstance(b, Pointer) else b
        dtype = parse_dtype(self.nodes.dtype(e))[0]
        return np.asarray(fn(a, b)).astype(dtype, copy=False)  # errstate: run()

    def _contracted(self, e: Any, sign_c: int) -> np.ndarray | None:
        """``a * b + c``: CUDA contracts it to one fused multiply-add (nvcc -fmad=true)."""
        dtype = parse_dtype(self.nodes.dtype(e))[0]
        if not is_float(dtype) or dtype == np.float64:
            return None
        # a*b + c, c + a*b, a*b - c (c - a*b would need a negated product: not fused here)
        pairs = ((e.a, e.b), (e.b, e.a)) if sign_c > 0 else ((e.a, e.b),)
        for mul, other in pairs:
            if type(mul).__name__ == "Mul":
                x, y, c = self.eval(mul.a), self.eval(mul.b), self.eval(other)
                c = c if sign_c > 0 else -c
                shape = np.broadcast_shapes(x.shape, y.shape, c.shape)
                return fma(*(np.broadcast_to(v, shape) for v in (x, y, c)), dtype)
        return None

    def _e_Add(self, e: Any) -> np.ndarray:
        fused = self._contracted(e, +1)
        return fused if fused is not None else self._binary(e, np.add)

    def _e_Sub(self, e: Any) -> np.ndarray:
        fused = self._contracted(e, -1)
        return fused if fused is not None else self._binary(e, np.subtract)

    def _e_Mul(self, e: Any) -> np.ndarray:
        return self._binary(e, np.multiply)

    def _e_Div(self, e: Any) -> np.ndarray:
        dtype = parse_dtype(self.nodes.dtype(e))[0]
        if is_float(dtype):
            if dtype == np.float32:  # an approximation under --use_fast_math (APPROXIMATE)
                self.counters.instructions["div.f32"] += len(self.warps())
            return self._binary(e, np.divide)
        return self._binary(e, _trunc_div)

    def _e_Mod(self, e: Any) -> np.ndarray:
        return self._binary(e, lambda a, b: a - _trunc_div(a, b) * b)

    def _e_FloorDiv(self, e: Any) -> np.ndarray:
        return self._binary(e, _checked(np.floor_divide))

    def _e_FloorMod(self, e: Any) -> np.ndarray:
        return self._binary(e, _checked(np.mod))

    def _e_Min(self, e: Any) -> np.ndarray:
        dtype = parse_dtype(self.nodes.dtype(e))[0]
        return self._binary(e, np.fmin if is_float(dtype) else np.minimum)

    def _e_Max(self, e: Any) -> np.ndarray:
        dtype = parse_dtype(self.nodes.dtype(e))[0]
        return self._binary(e, np.fmax if is_float(dtype) else np.maximum)

    def _e_BitwiseAnd(self, e: Any) -> np.ndarray:
        return self._binary(e, np.bitwise_and)

    def _e_BitwiseOr(self, e: Any) -> np.ndarray:
        return self._binary(e, np.bitwise_or)

    def _e_BitwiseXor(self, e: Any) -> np.ndarray:
        return self._binary(e, np.bitwise_xor)

    def _e_BitwiseNot(self, e: Any) -> np.ndarray:
        return np.invert(self.eval(e.a))

    def _e_LShift(self, e: Any) -> np.ndarray:
        return self._binary(e, _shift(np.left_shift))

    def _e_RShift(self, e: Any) -> np.ndarray:
        return self._binary(e, _shift(np.right_shift))

    def _compare(self, e: Any, fn) -> np.ndarray:
        return np.asarray(fn(self.eval(e.a), self.eval(e.b)))

    def _e_EQ(self, e):
        return self._compare(e, np.equal)

    def _e_NE(self, e):
        return self._compare(e, np.not_equal)

    def _e_LT(self, e):
        return self._compare(e, np.less)

    def _e_LE(self, e):
        return self._compare(e, np.less_equal)

    def _e_GT(self, e):
        return self._compare(e, np.greater)

    def _e_GE(self, e):
        return self._compare(e, np.greater_equal)

    def _e_And(self, e):
        return self.eval(e.a).astype(bool) & self.eval(e.b).astype(bool)

    def _e_Or(self, e):
        return self.eval(e.a).astype(bool) | self.eval(e.b).astype(bool)

    # -- helpers for intrinsics ---------------------------------------------------------------
    def arch(self) -> str:
        """The kernel's target arch (``sm_90a``), or "" where it names none: instructions
        whose numerics were measured per architecture (mma, wgmma) pick their rule by it."""
        target = self.func.attrs.get("target") if self.func.attrs is not None else None
        return str(target.attrs.get("arch", "")) if target is not None else ""

    def warps(self) -> list[int]:
        """The warps with at least one active thread."""
        return np.unique(self.active_threads() // 32).tolist()

    def require_whole_warpgroups(self, what: str) -> None:
        """Warpgroup instructions in a cluster: a warpgroup is four warps of one CTA, and
        the simulator numbers warps over the cluster, so each CTA must hold whole ones."""
        if self.cluster > 1 and self.cta_threads % 128:
            raise NotModeled(
                f"{what} in a cluster of CTAs of {self.cta_threads} threads: the simulator "
                "runs warpgroup instructions in clusters of CTAs of whole warpgroups"
            )

    def require_full_warps(self, what: str) -> None:
        """``.sync.aligned`` instructions: every thread of each issuing warp executes them."""
        for w in self.warps():
            lanes = self.mask[w * 32 : (w + 1) * 32] if self.mask.size > 1 else self.mask
            if not np.all(lanes):
                raise SimError(f"{what} is .sync.aligned, but warp {w} runs it diverged")

    def per_thread(self, v: Any) -> np.ndarray:
        return np.broadcast_to(np.asarray(v), (self.threads, *np.asarray(v).shape[1:]))


def _static_layout(shape: tuple, strides: tuple, elem_offset: Any):
    """A buffer's element strides and offset as integers when all are constants (its
    strides, or the row-major ones of its shape), else None."""
    nodes = (*(strides or shape), elem_offset)
    if not all(type(n).__name__ == "IntImm" for n in nodes):
        return None
    if strides:
        return tuple(int(st.value) for st in strides), int(elem_offset.value)
    return _row_major([int(ext.value) for ext in shape]), int(elem_offset.value)


def _row_major(extents: list[int]) -> tuple[int, ...]:
    """The element strides of a row-major array of ``extents``."""
    steps, acc = [], 1
    for ext in reversed(extents):
        steps.insert(0, acc)
        acc *= ext
    return tuple(steps)


def _trunc_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if (np.asarray(b) == 0).any():
        raise SimError("integer division by zero")
    q = np.floor_divide(a, b)
    fix = (np.mod(a, b) != 0) & ((np.asarray(a) < 0) != (np.asarray(b) < 0))
    return q + fix


def _checked(fn):
    def op(a, b):
        if (np.asarray(b) == 0).any():
            raise SimError("integer division by zero")
        return fn(a, b)

    return op


def _shift(fn):
    def op(a, b):
        bits = np.asarray(a).dtype.itemsize * 8
        if ((np.asarray(b) < 0) | (np.asarray(b) >= bits)).any():
            raise SimError(f"shift by {np.asarray(b).max()} of a {bits}-bit value is undefined")
        return fn(a, np.asarray(b).astype(np.asarray(a).dtype))

    return op


def _is_launch(stmt: Any, prefix: str) -> bool:
    """Whether ``stmt`` launches a thread axis whose tag starts with ``prefix``."""
    return (
        type(stmt).__name__ == "AttrStmt"
        and stmt.attr_key == "thread_extent"
        and stmt.node.thread_tag.startswith(prefix)
    )
