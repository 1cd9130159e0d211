"""Asynchronous effects: writes that land when their completion object completes.

An asynchronous instruction does not write when it is issued. Its writes are an
:class:`Effect` in the CTA's queue (:class:`Asynchrony`) until the completion object they
are tied to completes, and only then land in memory. Until then their bytes are guarded
(``Memory.guard``): a plain read of them, or a plain write over them, by any thread is a
:class:`.SimError` that names the instruction which issued the pending write, the call it
came from and what is missing. A copy's source bytes are read, as far as anyone can tell,
at any time until it completes: a plain write over them before then is an error too. A
CTA that exits with an effect still pending is an error.

The completion objects, from the PTX ISA:

- an ``mbarrier`` phase for a bulk tensor copy (TMA, 9.7.9.25.5.1): its bytes land when
  the phase they complete (``.mbarrier::complete_tx::bytes``) completes;
- a thread's ``cp.async`` groups (9.7.10.28.3): the copies a thread issues join its open
  group; ``cp.async.commit_group`` closes it, ``cp.async.wait_group N`` completes all
  but the ``N`` most recent committed groups of the thread, ``cp.async.wait_all`` all;
- an ``mbarrier`` phase (9.7.15.16): ``cp.async.mbarrier.arrive`` ties a thread's prior
  copies to the barrier's current phase, and they land when it completes;
- a warp's ``tcgen05.wait`` (9.7.16.8.5): ``wait::ld`` lands the registers of its
  ``tcgen05.ld``s, ``wait::st`` the tensor-memory cells of its ``tcgen05.st``s.

A landing write is, for the race tracker, a write by the issuing thread's warp at the
step it waited (or, through an mbarrier, at the step it arrived): another warp that reads
the bytes still needs a barrier after the wait, which the tracker reports if missing.

``mbarrier`` objects (:class:`MBarrier`) are kept here too: phase, expected and pending
arrival counts, transaction count. An arrive releases the arriving warp's clock and a
wait that sees its phase complete acquires what the phase's arrivals released
(:class:`.memory.Clocks`), so a handoff through an mbarrier orders the race tracker as a
``bar.sync`` does. A wait on a phase not yet complete makes its threads wait while
others run (:mod:`.schedule`); a phase nothing can complete any more is a deadlock.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .errors import SimError
from .memory import IN_FLIGHT, MBARRIER

MAX_COUNT = (1 << 20) - 1  # arrival counts and tx-count lie in [-(2^20-1), 2^20-1]

_HINTS = {
    "cp.async": "cp.async group not waited: add cp.async.wait_group before reading",
    "tcgen05.ld": "tcgen05.wait::ld is missing before the use",
    "tcgen05.st": "tcgen05.wait::st is missing between them",
    "cp.async.bulk.tensor": "wait for the mbarrier phase its bytes complete before the access",
    "cp.async.bulk.shared::cluster": (
        "the destination CTA waits for the mbarrier phase the bytes complete before the "
        "access; the source is written again only after that phase"
    ),
    "cp.async.bulk": (
        "bulk async-group not waited: the issuing thread commits it "
        "(cp.async.bulk.commit_group) and waits (cp.async.bulk.wait_group.read before the "
        "source is written again, cp.async.bulk.wait_group before the destination is read)"
    ),
    "wgmma": (
        "wgmma group not waited: add wgmma.commit_group and wgmma.wait_group before the access"
    ),
}


# the completion mechanism (resources.COMPLETIONS) of each kind of effect
MECHANISMS = {
    "cp.async": "cp.async group",
    "cp.async.bulk.tensor": "mbarrier complete-tx",
    "cp.async.bulk.shared::cluster": "mbarrier complete-tx",
    "cp.async.bulk": "bulk async-group",
    "wgmma": "wgmma group",
    "tcgen05.ld": "tcgen05.ld",
    "tcgen05.st": "tcgen05.st",
}


@dataclass
class Ticket:
    """Rows of an effect that land when ``barrier`` completes ``phase`` (a
    ``cp.async.mbarrier.arrive``); ``steps`` is each row's warp step at the arrive."""

    barrier: MBarrier
    phase: int
    rows: np.ndarray  # bool, one per row of the effect
    steps: np.ndarray


@dataclass
class Effect:
    """One issued instruction's deferred writes, one row per issuing thread (or TMEM row).

    ``index`` are the cells each row writes as index arrays of ``target.data`` (each
    ``(rows, k)``), ``values`` what lands there. ``kind`` names the completion:
    ``cp.async`` (``group``: the issuing thread's group of each row, and any mbarrier
    ``tickets``), ``tcgen05.ld`` or ``tcgen05.st`` (the issuing warp's wait).
    """

    kind: str
    what: str  # the instruction as PTX spells it
    origin: Any  # where it was issued: the call and the TIR (calls.Origin; text when formatted)
    call: int | None  # the explain() index of the tile call that issued it
    target: Any  # a Memory or the TensorMemory
    threads: np.ndarray
    index: tuple[np.ndarray, ...]
    values: np.ndarray
    group: np.ndarray | None = None
    tickets: list[Ticket] = field(default_factory=list)
    # what a copy reads: ``source`` (a Memory), per row the byte indices it reads
    # (``source_cells``, ``(rows, k)``; into the flattened bytes, ``thread * nbytes +
    # byte`` for a register memory) and which of them it does read (``source_read``)
    source: Any = None
    source_cells: np.ndarray | None = None
    source_read: np.ndarray | None = None
    # an asynchronous unit's operation (a TMA copy, a wgmma's reads; None: the issuing
    # threads' own): its clock row, and its clock at the issue (:meth:`.memory.Clocks.issue`),
    # which its completion releases to whoever waits for it
    agent: int | None = None
    snapshot: np.ndarray | None = None
    # a reduction into the target (cp.reduce.async.bulk): what lands is combine(old, new)
    combine: Any = None

    def source_bytes(self, rows: np.ndarray | None = None) -> np.ndarray:
        """The source bytes the rows (all: None) still read, with repeats."""
        cells, read = self.source_cells, self.source_read
        if rows is not None:
            cells, read = cells[rows], read[rows]
        return cells[read]

    def drop(self, rows: np.ndarray) -> None:
        keep = ~rows
        self.threads, self.values = self.threads[keep], self.values[keep]
        self.index = tuple(ix[keep] for ix in self.index)
        if self.source is not None:
            self.source_cells, self.source_read = self.source_cells[keep], self.source_read[keep]
        if self.group is not None:
            self.group = self.group[keep]
        for t in self.tickets:
            t.rows, t.steps = t.rows[keep], t.steps[keep]
        self.tickets = [t for t in self.tickets if t.rows.any()]

    def hint(self, row: int) -> str:
        hint = _HINTS[self.kind]
        for t in self.tickets:
            if t.rows[row]:
                hint += f", or wait for {t.barrier.describe()} to complete phase {t.phase}"
        return hint


@dataclass
class MBarrier:
    """An initialized ``mbarrier`` object (PTX ISA 9.7.15.16.1): the current phase, the
    expected and pending arrival counts and the tx-count. A phase completes when the
    pending count and the tx-count are both zero; then the phase advances and the
    pending count is reset to the expected count. ``released``: what each completed
    phase's arrivals released (the last two, which a parity can name)."""

    memory: Any
    offset: int
    expected: int
    pending: int
    phase: int = 0
    tx: int = 0
    arrivals: np.ndarray | None = None  # join of the current phase's released clocks
    released: dict[int, np.ndarray] = field(default_factory=dict)

    def describe(self) -> str:
        window = self.memory.window
        if window is not None:  # a cluster's: name the CTA whose window holds it
            rank, at = divmod(self.offset, window)
            return (
                f"the mbarrier at byte {at} of shared {self.memory.name} of the CTA of rank {rank}"
            )
        return f"the mbarrier at byte {self.offset} of shared {self.memory.name}"

    def state(self) -> str:
        return (
            f"phase {self.phase}: {self.pending} of {self.expected} arrivals pending, "
            f"tx-count {self.tx}"
        )

    def token(self) -> int:
        """The opaque state an arrive returns: this barrier and its current phase."""
        return ((self.offset + 1) << 32) | (self.phase & 0xFFFFFFFF)


class Asynchrony:
    """The pending effects, cp.async groups and mbarrier objects of one CTA."""

    def __init__(self) -> None:
        self.effects: list[Effect] = []
        # per kind of group ("cp.async", "wgmma"), per thread: its open group
        self.opened_by_kind: dict[str, np.ndarray] = {}
        self.barriers: dict[tuple[int, int], MBarrier] = {}
        self.version = 0  # bumped by every landing and mbarrier change
        # the running unit's last wait that found its phase incomplete (barrier, phase),
        # and whether one found its phase complete (a spin loop's progress)
        self.unmet: tuple[MBarrier, int] | None = None
        self.met = False

    # -- effects ----------------------------------------------------------------------------
    def issue(self, m: Any, effect: Effect) -> None:
        """Queue ``effect``; its cells must not be in flight already (a write over an
        in-flight write is a race with it) nor be a live mbarrier. An effect a tile call's
        code issues must complete by a mechanism the call's plan declares (its Completion
        resources: data the lowering marks the call's code with)."""
        self._check_declared(m, effect)
        target = effect.target
        if target.guard is None:
            target.guard = np.zeros(target.data.shape, dtype=np.uint8)
        target.owner = self
        hit = target.guard[effect.index]
        if hit.any():
            raise self.hazard(target, effect.threads, effect.index, hit, "writes", effect.what)
        target.guard[effect.index] |= np.uint8(IN_FLIGHT)
        if effect.source is not None:  # the copy may read its source until it completes
            source = effect.source
            if source.reading is None:
                source.reading = np.zeros(source.data.shape, dtype=np.int32)
            source.owner = self
            add_counts(source.reading, effect.source_bytes(), 1)
        self.effects.append(effect)

    @staticmethod
    def _check_declared(m: Any, effect: Effect) -> None:
        declared = getattr(m, "declared", {}).get(effect.call)
        if effect.call is None or declared is None:
            return  # the kernel's own code, or a call TVM's built-in variants lowered
        mechanism = MECHANISMS[effect.kind]
        if mechanism not in declared:
            said = ", ".join(declared) if declared else "no asynchronous completion"
            err = SimError(
                f"{effect.what} ({effect.origin}) completes through the {mechanism}, but the "
                f"call's plan declares {said}: its Completion resources must name what its "
                f"code leaves in flight (the caller is told to wait for those only)"
            )
            err.call = effect.call
            raise err

    def _land(self, m: Any, effect: Effect, rows: np.ndarray, steps: Any = None) -> None:
        if effect.source is not None:
            add_counts(effect.source.reading, effect.source_bytes(rows), -1)
        index = tuple(ix[rows] for ix in effect.index)
        if index[-1].size:  # an effect that only reads (a wgmma's operands) writes nothing
            agents = None if effect.agent is None else np.full(int(rows.sum()), effect.agent)
            values = effect.values[rows]
            if effect.combine is not None:
                values = effect.combine(effect.target.data[index], values)
            effect.target.land(effect.threads[rows], index, values, m.clocks, steps, agents)
        effect.drop(rows)
        self.version += 1

    def _sweep(self) -> None:
        self.effects = [e for e in self.effects if e.threads.size]

    def open_groups(self, m: Any, threads: np.ndarray, kind: str = "cp.async") -> np.ndarray:
        """The open ``kind`` group of each of ``threads`` (what an instruction they issue
        joins): a thread's cp.async groups, or its warpgroup's wgmma groups."""
        opened = self.opened_by_kind.get(kind)
        if opened is None or opened.size != m.threads:
            opened = self.opened_by_kind[kind] = np.zeros(m.threads, dtype=np.int64)
        return opened[threads].copy()

    def commit(self, m: Any, threads: np.ndarray, kind: str = "cp.async") -> None:
        """``cp.async.commit_group`` / ``wgmma.commit_group``: each thread's open group
        (possibly empty) is closed."""
        self.open_groups(m, threads, kind)
        self.opened_by_kind[kind][threads] += 1

    def wait_groups(
        self, m: Any, threads: np.ndarray, n: int, kind: str = "cp.async", reads: bool = False
    ) -> None:
        """``cp.async.wait_group n`` / ``wgmma.wait_group n`` / ``cp.async.bulk.wait_group
        n``: all but the ``n`` most recent committed groups of each of ``threads``
        complete (their writes land, their reads are done). ``reads``
        (``cp.async.bulk.wait_group.read``): only their reads of the source complete."""
        self.open_groups(m, threads, kind)
        limit = np.full(m.threads, -1, dtype=np.int64)
        limit[threads] = self.opened_by_kind[kind][threads] - n
        warps = set(np.unique(threads // 32).tolist())
        # whose groups they are: a warpgroup's (wgmma: each effect is its first thread's),
        # else each thread's own
        width = 128 if kind == "wgmma" else 32
        for e in self.effects:
            if e.kind == kind:
                rows = e.group < limit[e.threads]
                if rows.any():
                    if e.snapshot is not None:  # the owners see the unit's accesses
                        owners = {
                            w for t in np.unique(e.threads[rows] // width).tolist()
                            for w in range(t * width // 32, (t + 1) * width // 32)
                        }  # fmt: skip
                        for w in sorted(warps & owners):
                            m.clocks.acquire(w, e.snapshot)
                    if reads:
                        self._release_source(e, rows)
                    else:
                        self._land(m, e, rows)
        self._sweep()

    def _release_source(self, effect: Effect, rows: np.ndarray) -> None:
        """The rows' reads of the source are done (their writes may still be in flight)."""
        if effect.source is None:
            return
        add_counts(effect.source.reading, effect.source_bytes(rows), -1)
        effect.source_read[rows] = False

    def settle(self, m: Any, kind: str, target: Any, threads: np.ndarray) -> None:
        """The pending ``kind`` writes of ``threads`` into ``target`` land now: a later
        instruction of the same queue reads them in order (a wgmma chained on the
        accumulator of an earlier one) and re-queues what it writes."""
        for e in self.effects:
            if e.kind == kind and e.target is target:
                rows = np.isin(e.threads, threads)
                if rows.any():
                    self._land(m, e, rows)
        self._sweep()

    def wait_tcgen05(self, m: Any, kind: str, warps: list[int]) -> None:
        """``tcgen05.wait::ld`` / ``::st`` by ``warps``: their ``kind`` effects land."""
        for e in self.effects:
            if e.kind == kind:
                rows = np.isin(e.threads // 32, warps)
                if rows.any():
                    self._land(m, e, rows)
        self._sweep()

    def check_drained(self, m: Any = None) -> None:
        """At the CTA's exit nothing may be in flight but a bulk store's writes to global
        memory whose reads of shared memory are done (they land: the grid's completion
        waits for them)."""
        for e in self.effects:
            if e.kind == "cp.async.bulk" and m is not None and not e.source_read.any():
                self._land(m, e, np.ones(e.threads.size, dtype=bool))
        self._sweep()
        if not self.effects:
            return
        e = self.effects[0]
        what = "reading shared memory" if e.kind == "cp.async.bulk" else "still in flight"
        err = SimError(
            f"the CTA exits with {e.what} {what} (issued by thread {int(e.threads[0])}, "
            f"{e.origin}): it never completes; {e.hint(0)}"
        )
        err.call = e.call
        raise err

    def hazard(
        self,
        target: Any,
        threads: np.ndarray,
        index: Any,
        hit: np.ndarray,
        action: str,
        by: str | None = None,
    ) -> SimError:
        """The error for a plain access (or the asynchronous write ``by``) of guarded
        cells: which instruction's write is still in flight there, and what is missing."""
        first, cell, thread = _first_hit(threads, index, hit)
        who = f"thread {thread}" + (f" ({by})" if by else "")
        if hit[first] & MBARRIER:
            bar = self._barrier_at(target, cell)
            return SimError(
                f"{who} {action} {target.describe(cell)}, which belongs to {bar.describe()}: "
                f"only mbarrier instructions may access it until mbarrier.inval"
            )
        effect, row = self._effect_at(target, cell)
        return SimError(
            f"{who} {action} {target.describe(cell)} while {effect.what} (issued by thread "
            f"{int(effect.threads[row])}, {effect.origin}) is still in flight there: "
            f"{effect.hint(row)}"
        )

    def reader_of(self, source: Any, byte: int) -> str:
        """The pending copy that still reads ``byte`` of ``source``, in words."""
        for e in self.effects:
            if e.source is source and e.source_read.any():
                at = (e.source_cells == byte) & e.source_read
                if at.any():
                    row = int(np.argwhere(at)[0][0])
                    return f"{e.what} (issued by thread {int(e.threads[row])}, {e.origin})"
        return "an asynchronous copy"

    def source_hazard(
        self, source: Any, threads: np.ndarray, index: Any, busy: np.ndarray
    ) -> SimError:
        """The error for a plain write over bytes a pending copy still reads: which copy,
        and that its group must complete first (the copy may read the old or the new
        bytes: the GPU gives no order between them)."""
        _, cell, thread = _first_hit(threads, index, busy)
        for e in self.effects:
            if e.source is source and e.source_read.any():
                flat = int(np.ravel_multi_index(tuple(int(c) for c in cell), source.data.shape))
                at = (e.source_cells == flat) & e.source_read
                if at.any():
                    row = int(np.argwhere(at)[0][0])
                    wait = {
                        "cp.async": "cp.async.wait_group",
                        "wgmma": "wgmma.wait_group",
                        "cp.async.bulk": "cp.async.bulk.wait_group.read",
                    }.get(e.kind, "its wait")
                    return SimError(
                        f"thread {thread} writes {source.describe(cell)} while {e.what} "
                        f"(issued by thread {int(e.threads[row])}, {e.origin}) still reads "
                        f"it: the {'wgmma' if e.kind == 'wgmma' else 'copy'} may see the old or "
                        f"the new bytes; complete its group "
                        f"({wait}) before writing its source"
                    )
        return SimError(f"simulator bug: {source.describe(cell)} is read, nothing in flight")

    def _effect_at(self, target: Any, cell: tuple[int, ...]) -> tuple[Effect, int]:
        for e in self.effects:
            if e.target is target:
                at = np.ones(e.index[0].shape, dtype=bool)
                for ix, c in zip(e.index, cell, strict=True):
                    at &= ix == c
                if at.any():
                    return e, int(np.argwhere(at)[0][0])
        raise SimError(f"simulator bug: {target.describe(cell)} is guarded, nothing in flight")

    def _barrier_at(self, target: Any, cell: tuple[int, ...]) -> MBarrier:
        byte = cell[-1]
        for (mem, offset), bar in self.barriers.items():
            if mem == id(target) and offset <= byte < offset + 8:
                return bar
        raise SimError(f"simulator bug: {target.describe(cell)} is guarded, no mbarrier there")

    # -- mbarrier ---------------------------------------------------------------------------
    def init(self, m: Any, memory: Any, offset: int, count: int, thread: int) -> None:
        """``mbarrier.init``: a new object at ``offset`` expecting ``count`` arrivals."""
        what = f"mbarrier.init at byte {offset} of shared {memory.name}"
        if not 1 <= count <= MAX_COUNT:
            raise SimError(f"{what}: the count {count} must lie in [1, 2^20-1]")
        key = (id(memory), offset)
        if key in self.barriers:
            raise SimError(
                f"{what} (thread {thread}): it holds a live mbarrier ({self.barriers[key].state()}); "
                f"initializing it again is undefined: mbarrier.inval it first, and only one "
                f"thread initializes"
            )
        threads = np.array([thread])
        cells = memory.cells(threads, np.array([offset]), 8, "mbarrier.init")
        if memory.guard is None:
            memory.guard = np.zeros(memory.data.shape, dtype=np.uint8)
        memory.owner = self
        if memory.guard[cells].any():
            raise self.hazard(memory, threads, cells, memory.guard[cells], "writes", what)
        memory.track(threads, cells, m.clocks, write=True, stamp=True)
        memory.guard[cells] |= np.uint8(MBARRIER)
        memory.written[cells] = True
        self.barriers[key] = MBarrier(memory, offset, count, count)
        self.version += 1

    def inval(self, m: Any, bar: MBarrier, thread: int) -> None:
        """``mbarrier.inval``: the object is gone; its bytes are plain memory again."""
        threads = np.array([thread])
        cells = bar.memory.cells(threads, np.array([bar.offset]), 8, "mbarrier.inval")
        bar.memory.track(threads, cells, m.clocks, write=True, stamp=True)
        bar.memory.guard[cells] &= ~np.uint8(MBARRIER)
        del self.barriers[(id(bar.memory), bar.offset)]
        self.version += 1

    def barrier(
        self, m: Any, memory: Any, offset: int, threads: np.ndarray, what: str,
        remote: bool = False,
    ):  # fmt: skip
        """The live mbarrier at ``offset`` (every thread of ``threads`` names it); using
        it is a read of its object for the race tracker (it must be initialized before).
        In a cluster the address lies in the threads' own CTA's window unless ``remote``
        (a ``.shared::cluster`` address, a multicast's target: the window it lies in)."""
        ranks = None  # in a cluster: the threads' own CTA's window, or the one named
        if memory.window is not None and remote:
            ranks = np.full(threads.size, offset // memory.window)
        cells = memory.cells(threads, np.full(threads.size, offset), 8, what, ranks)
        bar = self.barriers.get((id(memory), offset))
        if bar is None:
            raise SimError(
                f"{what} on {memory.byte_text(offset)} of {memory.space} {memory.name} (thread "
                f"{int(threads[0])}), where no mbarrier is initialized: mbarrier.init it "
                f"first (and order the init before the use with a barrier)"
            )
        memory.track(threads, cells, m.clocks, write=False, stamp=True)
        return bar

    def arrive(
        self, m: Any, bar: MBarrier, count: int, released: np.ndarray | None, **how: bool
    ) -> None:
        """One arrive-on operation of ``count`` arrivals (PTX ISA 9.7.15.16.16):
        ``released`` (a warp's clock, None for ``.relaxed``) joins the phase's release;
        ``drop`` also lowers the expected count; ``no_complete`` may not complete it."""
        if not 1 <= count <= MAX_COUNT:
            raise SimError(f"mbarrier.arrive on {bar.describe()}: count {count} not in [1, 2^20-1]")
        self.join(bar, released)
        if how.get("drop"):
            bar.expected -= count
        bar.pending -= count
        self.version += 1
        if bar.pending < 0:
            raise SimError(
                f"mbarrier.arrive on {bar.describe()}: {count} arrival(s) more than the phase "
                f"expects ({bar.state()}); the count given to mbarrier.init is too small"
            )
        if bar.pending == 0 and bar.tx == 0:
            if how.get("no_complete"):
                raise SimError(
                    f"mbarrier.arrive.noComplete on {bar.describe()} completes phase "
                    f"{bar.phase}, which .noComplete may not do (undefined behaviour)"
                )
            self._complete(m, bar)

    @staticmethod
    def join(bar: MBarrier, released: np.ndarray | None) -> None:
        """``released`` (a warp's clock; None: nothing) joins what the phase releases."""
        if released is not None:
            bar.arrivals = released if bar.arrivals is None else np.maximum(bar.arrivals, released)

    def transaction(self, m: Any, bar: MBarrier, expect: int, complete: int) -> None:
        """The expect-tx (``+expect``) and complete-tx (``-complete``) operations on the
        tx-count (PTX ISA 9.7.15.16.2); a complete-tx may complete the phase."""
        bar.tx += expect - complete
        self.version += 1
        if abs(bar.tx) > MAX_COUNT:
            raise SimError(f"{bar.describe()}: tx-count {bar.tx} outside [-(2^20-1), 2^20-1]")
        if complete and bar.pending == 0 and bar.tx == 0:
            self._complete(m, bar)

    def _complete(self, m: Any, bar: MBarrier) -> None:
        m.events += 1
        for e in self.effects:
            for t in list(e.tickets):
                if t.barrier is bar and t.phase == bar.phase and t.rows.any():
                    self._land(m, e, t.rows.copy(), t.steps[t.rows])
        self._sweep()
        warps = max(1, m.clocks.warps)
        bar.released[bar.phase] = (
            bar.arrivals if bar.arrivals is not None else np.zeros(warps, dtype=np.int64)
        )
        bar.released.pop(bar.phase - 2, None)
        bar.arrivals = None
        bar.phase += 1
        bar.pending, bar.tx = bar.expected, 0

    def issue_on_barrier(self, m: Any, effect: Effect, bar: MBarrier, nbytes: int) -> None:
        """A copy that completes ``nbytes`` as transactions on ``bar``'s current phase
        (``.mbarrier::complete_tx::bytes``): its writes land when that phase completes, as
        writes of its asynchronous unit (``effect.agent``) at its step. Its bytes are
        counted at once (the earliest the copy could finish); the phase still waits for
        every arrival and any expect-tx the bytes do not cover. The phase's completion
        makes the bytes visible to whoever waits for it, and to nobody else."""
        rows = np.ones(effect.threads.size, dtype=bool)
        step = int(effect.snapshot[effect.agent])
        effect.tickets.append(Ticket(bar, bar.phase, rows, np.full(rows.size, step)))
        self.issue(m, effect)
        self.join(bar, effect.snapshot)
        self.transaction(m, bar, 0, nbytes)

    def track_copies(self, m: Any, bar: MBarrier, threads: np.ndarray) -> None:
        """``cp.async.mbarrier.arrive``: every cp.async of ``threads`` still in flight also
        lands when ``bar`` completes its current phase."""
        for e in self.effects:
            if e.kind == "cp.async":
                rows = np.isin(e.threads, threads)
                if rows.any():
                    warps = e.threads // 32
                    steps = m.clocks.known[warps, warps].copy()
                    e.tickets.append(Ticket(bar, bar.phase, rows, steps))

    def phase_done(self, m: Any, bar: MBarrier, phase: int, warps: list[int], acquire: bool):
        """Whether ``bar`` has completed ``phase``; if so and ``acquire``, ``warps`` are
        ordered after its arrivals. Otherwise the wait is remembered as unmet."""
        if bar.phase > phase:
            # the phase before the first one (a parity wait at phase 0) released nothing
            released = bar.released.get(phase)
            if released is None and phase >= 0:  # long completed: a later release covers it
                released = bar.released[max(bar.released)]
            if acquire and released is not None:
                for w in warps:
                    m.clocks.acquire(w, released)
            self.met = True
            return True
        self.unmet = (bar, phase)
        return False

    @staticmethod
    def describe_unmet(unmet: tuple[MBarrier, int]) -> str:
        """What a wait on ``(barrier, phase)`` waits for, as the barrier stands now."""
        bar, phase = unmet
        if bar.phase > phase:
            return f"{bar.describe()} to complete phase {phase}, which it has"
        return (
            f"{bar.describe()} to complete phase {phase} ({bar.pending} of {bar.expected} "
            f"arrivals still pending, tx-count {bar.tx})"
        )


def _first_hit(threads: np.ndarray, index: Any, hit: np.ndarray) -> tuple[tuple, tuple, int]:
    """The first flagged access of ``hit`` (per thread row, as ``index`` gives the cells):
    its position, its cell of the memory and the thread that made it."""
    index = index if isinstance(index, tuple) else (index,)
    first = tuple(int(i) for i in np.argwhere(hit)[0])
    cell = tuple(int(np.broadcast_to(ix, hit.shape)[first]) for ix in index)
    rows = threads.reshape(-1, *([1] * (hit.ndim - 1)))
    return first, cell, int(np.broadcast_to(rows, hit.shape)[first])


def add_counts(counts: np.ndarray, cells: np.ndarray, delta: int) -> None:
    """``np.add.at`` of ``delta`` at each of ``cells`` (indices into the flattened
    ``counts``; repeats count repeatedly). Many cells within a short span go through a
    histogram of the span: ``add.at`` costs over 100 ns a cell."""
    flat = counts.reshape(-1)  # a view: counts is contiguous
    cells = cells.ravel()
    if cells.size >= 1024:
        lo = int(cells.min())
        span = int(cells.max()) - lo + 1
        if span <= 64 * cells.size:
            flat[lo : lo + span] += (delta * np.bincount(cells - lo, minlength=span)).astype(
                flat.dtype
            )
            return
    np.add.at(flat, cells, delta)
