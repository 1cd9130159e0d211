"""Memory as the simulated kernel sees it, with the checks the hardware would fault on.

One :class:`Memory` per allocation: global (the caller's arrays), shared (per CTA, with
race tracking between barriers), local (per thread). Every access is checked: in bounds,
aligned to its own size (a misaligned vector access faults on the GPU), and reading only
bytes that something wrote. Shared memory remembers, per byte, which warp last wrote it
and at which step of that warp, and the step at which each warp last read it; a barrier
orders only the warps it releases together (:class:`Clocks`). A write and a read (or two
writes) by different warps that no chain of barriers orders are a race, because nothing
orders them on the GPU (the lockstep simulation would otherwise hide a missing barrier).

Bytes an asynchronous instruction has yet to write (a ``cp.async`` destination, the
registers a ``tcgen05.ld`` fills) and the bytes of a live ``mbarrier`` object are
*guarded*: any plain access to them is an error that the queue of pending effects
(:mod:`.asynchrony`, the memory's ``owner``) explains.
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..layout.banks import wavefront_costs
from .errors import SimError

NONE = -1


class Clocks:
    """Happens-before between the warps of one CTA and its asynchronous units, from the
    barriers, mbarrier phases and completions that order them.

    A vector clock per *agent*: ``known[b, a]`` is the latest step of agent ``a`` that
    agent ``b`` is ordered after (its own entry is its current step, from 1). The agents
    are the CTA's warps (rows ``0 .. warps-1``), and the asynchronous units whose memory
    accesses belong to no warp (the async proxy): the bulk-copy unit of each warp (the
    TMA copies it issues, rows ``warps .. 2 warps - 1``) and the wgmma unit of each
    warpgroup (its reads of A and B, rows ``2 warps ..``). An asynchronous operation is
    ordered after what its issuer knows at the issue (:meth:`issue`) and before only
    what acquires it through its completion mechanism (an mbarrier phase, a group wait):
    a warp that merely reaches a CTA barrier with the issuer is not ordered after it.

    A barrier that releases a set of warps together (``bar.sync``) joins their clocks
    and starts a new step for each, so ordering is transitive across barriers of
    different sets. An access remembers its agent's step; a later access by agent ``b``
    is ordered after one by ``a`` at step ``s`` iff ``known[b, a] >= s``.

    ``fence.proxy.async`` (:meth:`fence`) is recorded per warp: a generic-proxy write
    that an async-proxy operation reads must lie before a fence that the operation is
    ordered after (:meth:`fenced`).
    """

    def __init__(self, warps: int) -> None:
        self.warps = max(1, warps)
        self.warpgroups = -(-self.warps // 4)
        self.size = 2 * self.warps + self.warpgroups
        self.known = np.eye(self.size, dtype=np.int64)
        self.fences: dict[int, tuple[list[int], list[np.ndarray]]] = {}

    def bulk_unit(self, warp: int) -> int:
        """The agent of the bulk (TMA) copies ``warp`` issues."""
        return self.warps + warp

    def wgmma_unit(self, warpgroup: int) -> int:
        """The agent of warpgroup ``warpgroup``'s wgmma operand reads."""
        return 2 * self.warps + warpgroup

    def name(self, agent: int) -> str:
        """An agent in words, for messages."""
        if agent < self.warps:
            return f"warp {agent}"
        if agent < 2 * self.warps:
            return f"a TMA copy issued by warp {agent - self.warps}"
        return f"warpgroup {agent - 2 * self.warps}'s wgmma"

    def issuers(self) -> np.ndarray:
        """Each agent's warp: a warp's own, a bulk unit's issuing warp, a wgmma unit's
        warpgroup's first warp."""
        agents = np.arange(self.size)
        return np.where(agents < 2 * self.warps, agents % self.warps,
                        (agents - 2 * self.warps) * 4)  # fmt: skip

    def barrier(self, warps: Iterable[int]) -> None:
        w = np.array(sorted(set(warps)), dtype=np.int64)
        self.known[w] = self.known[w].max(axis=0)
        self.known[w, w] += 1

    def step(self, agents: np.ndarray) -> np.ndarray:
        return self.known[agents, agents]

    def release(self, warp: int) -> np.ndarray:
        """A release by ``warp`` (an ``mbarrier`` arrive, a ``bar.arrive``): what a later
        acquire of it is ordered after (its clock now); the warp's later accesses start a
        new step."""
        known = self.known[warp].copy()
        self.known[warp, warp] += 1
        return known

    def acquire(self, warp: int, released: np.ndarray) -> None:
        """An acquire by ``warp`` of ``released`` (an ``mbarrier`` wait that saw its phase
        complete, a completed group wait): ``warp`` is ordered after everything the
        releases were."""
        self.known[warp] = np.maximum(self.known[warp], released)

    def issue(self, agent: int, warps: Iterable[int]) -> np.ndarray:
        """An asynchronous operation of ``agent`` issued by ``warps``: it is ordered after
        what they know now and gets a new step of its agent. Returns its clock, which its
        completion releases to whoever acquires it."""
        w = np.array(sorted(set(warps)), dtype=np.int64)
        self.known[agent] = np.maximum(self.known[agent], self.known[w].max(axis=0))
        self.known[agent, agent] += 1
        return self.known[agent].copy()

    def fence(self, warp: int) -> None:
        """``fence.proxy.async`` by ``warp``: its generic accesses so far (and all it is
        ordered after) are ordered before the async-proxy operations ordered after the
        fence."""
        steps, snapshots = self.fences.setdefault(warp, ([], []))
        steps.append(int(self.known[warp, warp]))
        snapshots.append(self.known[warp].copy())
        self.known[warp, warp] += 1

    def fenced(self, known: np.ndarray) -> np.ndarray:
        """For an async-proxy operation that is ordered after ``known``: per warp, the
        latest step of that warp's generic accesses a fence it is ordered after covers
        (0: none)."""
        out = np.zeros(self.size, dtype=np.int64)
        for warp, (steps, snapshots) in self.fences.items():
            i = bisect.bisect_right(steps, int(known[warp])) - 1
            if i >= 0:
                out = np.maximum(out, snapshots[i])
        return out


# why an access to an exited CTA's shared memory is an error, and what to write instead
EXITED = (
    "a CTA's shared memory (its mbarriers too) is gone once it exits; end the kernel with a "
    "cluster barrier (T.cuda.cluster_sync()) after the last access to another CTA's shared "
    "memory"
)


@dataclass
class Counters:
    """What the simulated kernels did: instructions by kind (one per warp that issues
    them), bytes moved by memory space and direction, and each shared-memory access's
    bank-conflict degree (128-byte wavefront model, :mod:`..layout.banks`)."""

    instructions: Counter = field(default_factory=Counter)
    bytes: Counter = field(default_factory=Counter)  # "shared.load" -> bytes
    bank_conflicts: list[BankRecord] = field(default_factory=list)

    def add(self, other: Counters) -> None:
        """Add ``other``'s counts to these."""
        self.instructions.update(other.instructions)
        self.bytes.update(other.bytes)
        self.bank_conflicts.extend(other.bank_conflicts)

    def conflict_histogram(self) -> dict[int, int]:
        """How many shared-memory warp accesses had each conflict degree."""
        return dict(sorted(Counter(r.ways for r in self.bank_conflicts).items()))

    def max_conflict(self, buffer: str | None = None) -> int:
        ways = [r.ways for r in self.bank_conflicts if buffer in (None, r.buffer)]
        return max(ways, default=1)

    def as_dict(self) -> dict:
        return {
            "instructions": dict(sorted(self.instructions.items())),
            "bytes": dict(sorted(self.bytes.items())),
            "bank_conflicts": self.conflict_histogram(),
        }


@dataclass(frozen=True)
class BankRecord:
    """One warp's shared-memory access: which instruction, buffer, warp, and the worst
    conflict degree among its wavefronts."""

    instruction: str
    buffer: str
    warp: int
    ways: int


IN_FLIGHT = 1  # guard bit: an asynchronous write to the byte has not landed
MBARRIER = 2  # guard bit: the byte belongs to a live mbarrier object


class Memory:
    """One allocation's bytes. Local memory has one row per thread.

    ``guard`` (allocated when first needed) marks bytes plain accesses may not touch
    (:data:`IN_FLIGHT`, :data:`MBARRIER`); ``reading`` counts, per byte, the pending
    asynchronous copies that still read it (a ``cp.async`` source), which a plain write
    may not touch; ``owner`` is the queue of pending effects that set them and explains an
    access that hits one (``owner.hazard``, ``owner.source_hazard``).
    """

    def __init__(
        self,
        name: str,
        space: str,
        nbytes: int,
        threads: int | None = None,
        data: np.ndarray | None = None,
        rng: np.random.Generator | None = None,
    ) -> None:
        self.name, self.space, self.nbytes = name, space, int(nbytes)
        shape = (threads, self.nbytes) if space == "local" else (self.nbytes,)
        if data is not None:
            self.data = data
            self.written = np.ones(shape, dtype=bool)
        else:
            rng = rng or np.random.default_rng(0)
            self.data = rng.integers(0, 256, size=shape, dtype=np.uint8)  # garbage, not 0
            self.written = np.zeros(shape, dtype=bool)
        if space == "shared":
            self.w_step = np.zeros(shape, dtype=np.int64)
            self.w_warp = np.full(shape, NONE, dtype=np.int32)
            self.r_step: np.ndarray | None = None  # (bytes, warps), 0: not read; sized on use
        self.guard: np.ndarray | None = None
        self.reading: np.ndarray | None = None
        self.owner: Any = None
        # global memory: which CTA of the launch wrote each byte (0: none); the grid's
        # CTAs are not ordered, so a byte one wrote is no other's to read or write
        self.cta, self.cta_name = 0, ""
        self.cta_writer: np.ndarray | None = None
        self.cta_names: dict[int, str] = {}
        # shared memory of a cluster: one window of ``window`` bytes per CTA (its first
        # ``window_bytes`` allocated), the CTA of thread t being t // cta_threads
        self.window: int | None = None
        self.window_bytes = self.nbytes
        self.cta_threads = 0
        self.exited: set[int] = set()  # ranks whose CTA has exited: its window is gone
        # global memory in a cluster: the CTAs of a cluster are ordered by its cluster
        # barriers only: which rank wrote each byte, in which interval between them
        # (``epoch()``: the cluster barriers completed so far)
        self.epoch: Any = None
        self.rank_writer: np.ndarray | None = None
        self.epoch_writer: np.ndarray | None = None

    def enter_cta(self, number: int, name: str) -> None:
        """CTA ``number`` (``name`` in messages) runs from now on."""
        self.cta, self.cta_name = number, name
        self.cta_names[number] = name

    def _check_ctas(self, threads: np.ndarray, cells: np.ndarray, write: bool) -> None:
        """Global memory: another CTA of the grid wrote these bytes (a race: nothing orders
        two CTAs of one launch); a write stamps them as this CTA's."""
        if self.space != "global" or not self.cta:
            return
        if self.cta_writer is None:
            if not write:
                return
            self.cta_writer = np.zeros(self.nbytes, dtype=np.int32)
        flat = cells.reshape(-1)
        other = (self.cta_writer[flat] != 0) & (self.cta_writer[flat] != self.cta)
        if other.any():
            i = int(np.argmax(other))
            by = self.cta_names.get(int(self.cta_writer[flat[i]]), "another CTA")
            row = np.broadcast_to(threads.reshape(-1, *([1] * (cells.ndim - 1))), cells.shape)
            raise SimError(
                f"{self.cta_name} {'writes' if write else 'reads'} byte {int(flat[i])} of "
                f"global {self.name} (thread {int(row.reshape(-1)[i])}), which {by} wrote: "
                f"the CTAs of one launch are not ordered, so two that touch one byte race "
                f"(give each CTA its own part of the output)"
            )
        if self.epoch is not None:
            self._check_cluster(threads, cells, flat, write)
        if write:
            self.cta_writer[flat] = self.cta

    def _check_cluster(
        self, threads: np.ndarray, cells: np.ndarray, flat: np.ndarray, write: bool
    ) -> None:
        """Global memory in a cluster: a byte another CTA of the cluster wrote since the
        last cluster barrier is a race (nothing else orders two CTAs' global accesses); a
        write stamps the byte with the writer's rank and the interval."""
        if self.rank_writer is None:
            self.rank_writer = np.full(self.nbytes, -1, dtype=np.int32)
            self.epoch_writer = np.full(self.nbytes, -1, dtype=np.int64)
        row = np.broadcast_to(threads.reshape(-1, *([1] * (cells.ndim - 1))), cells.shape)
        rank = row.reshape(-1) // self.cta_threads
        now = self.epoch()
        other = (
            (self.cta_writer[flat] == self.cta)
            & (self.rank_writer[flat] >= 0)
            & (self.rank_writer[flat] != rank)
            & (self.epoch_writer[flat] == now)
        )
        if write and not other.any():  # two CTAs writing one byte in this very access
            lo = np.full(self.nbytes, np.iinfo(np.int32).max, dtype=np.int64)
            np.minimum.at(lo, flat, rank)
            other = lo[flat] != rank
            if other.any():
                i = int(np.argmax(other))
                raise SimError(
                    f"the CTAs of ranks {int(lo[flat[i]])} and {int(rank[i])} of a cluster "
                    f"write byte {int(flat[i])} of global {self.name} at once (thread "
                    f"{int(row.reshape(-1)[i])}): nothing orders them ({self.cta_name})"
                )
        if other.any():
            i = int(np.argmax(other))
            raise SimError(
                f"the CTA of rank {int(rank[i])} {'writes' if write else 'reads'} byte "
                f"{int(flat[i])} of global {self.name} (thread {int(row.reshape(-1)[i])}), "
                f"which the CTA of rank {int(self.rank_writer[flat[i]])} of its cluster "
                "wrote with no cluster barrier between (only a cluster barrier orders two "
                f"CTAs' global accesses; {self.cta_name})"
            )
        if write:
            self.rank_writer[flat] = rank
            self.epoch_writer[flat] = now

    def exit_cta(self, rank: int, clocks: Clocks) -> None:
        """The CTA of ``rank`` (of a cluster) exits: every access to its window by another
        CTA (a load, a store, an mbarrier arrival, a multicast's landing) or by an
        asynchronous unit of its own (a copy that completes elsewhere) must be ordered
        before the exit (the exiting warps are ordered after it: a cluster barrier at the
        end of the kernel does that), no copy may still read it, and from now on its
        window is gone."""
        if self.window is None:
            return
        per = self.cta_threads // 32  # warps of a CTA
        warp_of = clocks.issuers()
        # every agent but the exiting CTA's warps
        foreign = (warp_of // per != rank) | (np.arange(clocks.size) >= clocks.warps)
        exit_known = clocks.known[rank * per : (rank + 1) * per].max(axis=0)
        lo = rank * self.window
        span = slice(lo, lo + self.window_bytes)
        late = np.zeros((self.window_bytes, clocks.size), dtype=bool)
        if self.r_step is not None and self.r_step.shape[1] == clocks.size:
            late |= (self.r_step[span] > exit_known[None, :]) & foreign[None, :]
        writer = self.w_warp[span]
        wrote = (writer >= 0) & foreign[np.maximum(writer, 0)]
        late_w = wrote & (self.w_step[span] > exit_known[np.maximum(writer, 0)])
        late[np.flatnonzero(late_w), writer[late_w]] = True
        if late.any():
            byte, agent = (int(v) for v in np.argwhere(late)[0])
            raise SimError(
                f"the CTA of rank {rank} exits while {clocks.name(agent)} (of the CTA of rank "
                f"{int(warp_of[agent]) // per}) uses shared {self.name} "
                f"{self.byte_text(lo + byte)} with nothing ordering that before the exit: "
                f"{EXITED}"
            )
        if self.reading is not None and self.reading[span].any():
            byte = lo + int(np.argmax(self.reading[span] > 0))
            raise SimError(
                f"the CTA of rank {rank} exits while {self.owner.reader_of(self, byte)} "
                f"still reads shared {self.name} {self.byte_text(byte)}: its shared memory "
                "is gone once it exits; keep it until the copy has read it (a bulk store's "
                "cp.async.bulk.wait_group.read; a copy into another CTA: that CTA's wait on "
                "its mbarrier, then a cluster barrier at the end of the kernel)"
            )
        self.exited.add(rank)

    def _check_exited(self, who: np.ndarray, flat: np.ndarray, clocks: Clocks, write: bool):
        """A cluster's shared memory: no access reaches the window of a CTA that has exited
        (PTX ISA, distributed shared memory: a CTA's shared memory lives as long as the
        CTA; a peer's access after it exited is undefined)."""
        gone = np.isin(flat // self.window, list(self.exited))
        if gone.any():
            i = int(np.argmax(gone))
            raise SimError(
                f"{clocks.name(int(who[i]))} {'writes' if write else 'reads'} shared "
                f"{self.name} {self.byte_text(int(flat[i]))}, whose CTA has exited: {EXITED}"
            )

    def describe(self, cell: tuple[int, ...]) -> str:
        """A cell of :meth:`index` in words (``byte 12 of shared S``)."""
        if self.space == "local":
            return f"register {self.name} (byte {cell[1]}) of thread {cell[0]}"
        return f"byte {cell[0]} of {self.space} {self.name}"

    def byte_text(self, byte: int) -> str:
        """``byte 12``, in a cluster's memory ``byte 12 of the CTA of rank 1``."""
        if self.window is None:
            return f"byte {byte}"
        rank, at = divmod(byte, self.window)
        return f"byte {at} of the CTA of rank {rank}"

    def _who(self, thread: Any) -> str:
        """``thread 5``, and the CTA where the grid has several (``thread 5 of CTA (x=3)``)."""
        cta = self.cta_name if self.cta_name not in ("", "the CTA") else ""
        if self.window is not None:  # a cluster's threads: name the CTA too
            rank, local = divmod(int(thread), self.cta_threads)
            return f"thread {int(thread)} (thread {local} of the CTA of rank {rank})"
        return f"thread {int(thread)}" + (f" of {cta}" if cta else "")

    def _cells(
        self, threads: np.ndarray, offsets: np.ndarray, size: int, what: str,
        ranks: np.ndarray | None = None,
    ):  # fmt: skip
        """Byte indices ``(n, size)`` of an access, after bounds and alignment checks."""
        if self.window is not None:  # a cluster's: named in the CTA's own window
            self.check_window(threads, offsets, size, what, ranks)
        bad = (offsets < 0) | (offsets + size > self.nbytes)
        if bad.any():
            i = int(np.argmax(bad))
            raise SimError(
                f"{what} of {size} bytes at byte {int(offsets[i])} of {self.space} "
                f"{self.name} ({self.nbytes} bytes) is out of bounds ({self._who(threads[i])})"
            )
        align = _alignment(size)
        misaligned = offsets % align != 0
        if misaligned.any():
            i = int(np.argmax(misaligned))
            raise SimError(
                f"misaligned {size}-byte {what} at byte {int(offsets[i])} of {self.space} "
                f"{self.name} ({self._who(threads[i])}): a {size}-byte access must be "
                f"{align}-byte aligned, the GPU faults"
            )
        return offsets[:, None] + np.arange(size)

    def check_window(
        self, threads: np.ndarray, offsets: np.ndarray, size: int, what: str,
        ranks: np.ndarray | None = None,
    ) -> None:  # fmt: skip
        """A cluster's shared memory: each access lies in the allocated bytes of one CTA's
        window, its own thread's (a ``.shared::cta`` or generic address reaches its own
        CTA only) or, for an instruction that names a CTA (``ranks``), that one's."""
        window = self.window
        own = np.asarray(threads) // self.cta_threads if ranks is None else ranks
        local = offsets - own * window
        bad = (local < 0) | (local + size > self.window_bytes)
        if bad.any():
            i = int(np.argmax(bad))
            whose = "its own CTA's" if ranks is None else f"the CTA of rank {int(own[i])}'s"
            raise SimError(
                f"{what} of {size} bytes at byte {int(local[i])} of {whose} window of "
                f"{self.space} {self.name} ({self.window_bytes} bytes) is out of bounds "
                f"({self._who(threads[i])}): a CTA's shared addresses reach its own shared "
                "memory; another CTA's is reached through mapa and .shared::cluster"
            )

    def _index(self, threads: np.ndarray, cells: np.ndarray):
        return (threads[:, None], cells) if self.space == "local" else cells

    def index(self, threads: np.ndarray, cells: np.ndarray) -> tuple[np.ndarray, ...]:
        """The cells ``(n, size)`` that ``threads`` access as a tuple of index arrays of
        ``data``, each ``(n, size)`` (what an asynchronous effect records)."""
        if self.space == "local":
            return (np.broadcast_to(threads[:, None], cells.shape).copy(), cells)
        return (cells,)

    def cells(
        self, threads: np.ndarray, offsets: np.ndarray, size: int, what: str,
        ranks: np.ndarray | None = None,
    ) -> np.ndarray:  # fmt: skip
        """Byte indices ``(n, size)`` of an access, after bounds and alignment checks
        (``ranks``: in a cluster, the CTA whose window an instruction names)."""
        return self._cells(threads, offsets, size, what, ranks)

    def _guarded(self, threads: np.ndarray, index: Any, action: str) -> None:
        if self.guard is not None:
            hit = self.guard[index]
            if hit.any():
                raise self.owner.hazard(self, threads, index, hit, action)

    def load(
        self,
        threads: np.ndarray,
        offsets: np.ndarray,
        size: int,
        clocks: Clocks,
        agents: np.ndarray | None = None,
        ranks: np.ndarray | None = None,
    ) -> np.ndarray:
        """Bytes ``(n, size)`` that ``threads`` read at byte ``offsets`` (for the race
        tracker: by their warps, or by ``agents``, one clock row per access; ``ranks``: in
        a cluster, the CTA whose window each access names, else each thread's own)."""
        cells = self._cells(threads, offsets, size, "load", ranks)
        index = self._index(threads, cells)
        self._guarded(threads, index, "reads")
        unwritten = ~self.written[index]
        if unwritten.any():
            i = int(np.argwhere(unwritten)[0][0])
            raise SimError(
                f"{self._who(threads[i])} reads {self.byte_text(int(cells[i][0]))} of "
                f"{self.space} {self.name}, which nothing wrote"
            )
        if self.space == "shared":
            self._track(_rows(threads, agents), cells, clocks, write=False)
        self._check_ctas(threads, cells, write=False)
        return self.data[index]

    def _row_slice(self, threads: np.ndarray, offset: int, size: int) -> tuple | None:
        """Local memory, every thread at byte ``offset`` of its own row: the bytes as a
        slice of each row when the access passes :meth:`_cells`' checks and touches no
        guarded byte; None where it does not (the general path then names the fault)."""
        if self.space != "local" or offset < 0 or offset + size > self.nbytes:
            return None
        if offset % _alignment(size):
            return None
        every = (
            len(threads) == self.data.shape[0]
            and threads[0] == 0
            and threads[-1] == len(threads) - 1
        )
        rows = slice(None) if every else threads  # every thread, in order (active_threads)
        span = (rows, slice(offset, offset + size))
        if self.guard is not None and self.guard[span].any():
            return None
        return span

    def load_rows(self, threads: np.ndarray, offset: int, size: int, clocks: Clocks) -> np.ndarray:
        """:meth:`load` of local memory where every thread reads byte ``offset`` of its own
        row (a register the code names with constant indices): the same checks, without
        building per-thread cells."""
        span = self._row_slice(threads, offset, size)
        if span is None or not self.written[span].all():
            return self.load(threads, np.full(len(threads), offset), size, clocks)
        return self.data[span].copy()

    def store_rows(self, threads: np.ndarray, offset: int, raw: np.ndarray, clocks: Clocks) -> None:
        """:meth:`store` of local memory where every thread writes byte ``offset`` of its
        own row, as :meth:`load_rows` reads."""
        span = self._row_slice(threads, offset, raw.shape[1])
        if span is None or (self.reading is not None and self.reading[span].any()):
            self.store(threads, np.full(len(threads), offset), raw, clocks)
            return
        self.data[span] = raw
        self.written[span] = True

    def store(
        self, threads: np.ndarray, offsets: np.ndarray, raw: np.ndarray, clocks: Clocks,
        ranks: np.ndarray | None = None,
    ) -> None:  # fmt: skip
        cells = self._cells(threads, offsets, raw.shape[1], "store", ranks)
        index = self._index(threads, cells)
        self._guarded(threads, index, "writes")
        if self.reading is not None:
            busy = self.reading[index] > 0
            if busy.any():
                raise self.owner.source_hazard(self, threads, index, busy)
        if self.space == "shared":
            self._track(threads // 32, cells, clocks, write=True)
        self._check_ctas(threads, cells, write=True)
        self.data[index] = raw
        self.written[index] = True

    def land(
        self,
        threads: np.ndarray,
        index: tuple[np.ndarray, ...],
        values: np.ndarray,
        clocks: Clocks,
        steps: np.ndarray | None = None,
        agents: np.ndarray | None = None,
    ) -> None:
        """An asynchronous write lands: ``values`` into the cells ``index`` (as
        :meth:`index` gives them), a write by ``threads``' warps (or ``agents``) at their
        current step (at ``steps``, given) for the race tracker, no longer guarded."""
        if self.space == "shared":
            self._track(_rows(threads, agents), index[0], clocks, write=True, steps=steps)
        self._check_ctas(threads, index[-1], write=True)
        self.data[index] = values
        self.written[index] = True
        self.guard[index] &= ~np.uint8(IN_FLIGHT)

    def track(
        self,
        threads: np.ndarray,
        cells: np.ndarray,
        clocks: Clocks,
        write: bool,
        stamp: bool,
        agents: np.ndarray | None = None,
    ) -> None:
        """The race check of an access that is not a plain load or store (an
        asynchronous write when issued: ``stamp=False`` checks without recording; an
        ``mbarrier`` operation on its object; ``agents``: an asynchronous unit's access).
        Shared memory only; others are no-ops."""
        if self.space == "shared":
            self._track(_rows(threads, agents), cells, clocks, write, stamp=stamp)

    def _track(
        self,
        agents: np.ndarray,
        cells: np.ndarray,
        clocks: Clocks,
        write: bool,
        steps: np.ndarray | None = None,
        stamp: bool = True,
    ) -> None:
        """Race check of the accesses of ``agents`` (clock rows, one per row of
        ``cells``): another agent touched these bytes and nothing orders the two.
        ``steps`` (one per row) stamps the access at those steps instead of the agents'
        current ones; ``stamp=False`` checks without recording. An async-proxy agent
        (wgmma, a TMA store) that reads bytes a warp wrote also needs a
        ``fence.proxy.async`` between them (:meth:`Clocks.fenced`)."""
        who = np.broadcast_to(np.asarray(agents)[:, None], cells.shape).ravel()
        if who.max() >= clocks.size:
            raise SimError(f"agent {int(who.max())} accesses {self.name} outside the launch")
        if self.exited:
            self._check_exited(who, cells.ravel(), clocks, write)
        flat = cells.ravel()
        if self.r_step is None or self.r_step.shape[1] != clocks.size:
            self.r_step = np.zeros((self.nbytes, clocks.size), dtype=np.int64)
        known = clocks.known[who]  # (n, agents): what each accessing agent is ordered after
        writer = self.w_warp[flat]
        seen = known[np.arange(flat.size), np.maximum(writer, 0)]
        unordered_w = (writer >= 0) & (writer != who) & (seen < self.w_step[flat])
        if unordered_w.any():
            i = int(np.argmax(unordered_w))
            kind = "writes" if write else "reads"
            raise SimError(
                f"shared-memory race on {self.name} {self.byte_text(int(flat[i]))}: "
                f"{clocks.name(int(who[i]))} {kind} it after {clocks.name(int(writer[i]))} "
                f"wrote it, with nothing between that orders them{_hint(clocks, who[i], writer[i])}"
            )
        if not write and who.min() >= clocks.warps:
            self._check_fenced(who, flat, writer, clocks)
        if steps is None:
            steps = clocks.step(who)
        else:
            steps = np.broadcast_to(np.asarray(steps)[:, None], cells.shape).ravel()
        if not write:
            if stamp:
                self.r_step[flat, who] = steps
            return
        others = np.arange(clocks.size)[None, :] != who[:, None]
        unordered_r = (self.r_step[flat] > known) & others
        if unordered_r.any():
            i = int(np.argmax(unordered_r.any(axis=1)))
            reader = int(np.argmax(unordered_r[i]))
            raise SimError(
                f"shared-memory race on {self.name} {self.byte_text(int(flat[i]))}: "
                f"{clocks.name(int(who[i]))} overwrites it while {clocks.name(reader)} reads "
                f"it with nothing between that orders them{_hint(clocks, who[i], reader)}"
            )
        if who.min() != who.max():  # one agent cannot write a byte twice at once
            self._check_one_writer(who, flat, clocks)
        if stamp:
            self.w_step[flat] = steps
            self.w_warp[flat] = who

    def _check_one_writer(self, who: np.ndarray, flat: np.ndarray, clocks: Clocks) -> None:
        """Two agents writing one byte in this very access are a race."""
        owner = np.full(self.nbytes, -1, dtype=np.int64)
        owner[flat] = who  # one of each byte's writers: another one differs from it
        if not (owner[flat] != who).any():
            return
        lo = np.full(self.nbytes, np.iinfo(np.int32).max, dtype=np.int64)
        hi = np.full(self.nbytes, -1, dtype=np.int64)
        np.minimum.at(lo, flat, who)
        np.maximum.at(hi, flat, who)
        i = int(np.argmax((hi[flat] != lo[flat]) & (hi[flat] >= 0)))
        raise SimError(
            f"shared-memory race on {self.name} {self.byte_text(int(flat[i]))}: "
            f"{clocks.name(int(lo[flat[i]]))} and {clocks.name(int(hi[flat[i]]))} write "
            f"it at once"
        )

    def _check_fenced(self, who, flat, writer, clocks: Clocks) -> None:
        """Async-proxy reads of bytes that warps wrote (generic proxy): each write must lie
        before a ``fence.proxy.async`` the reading operation is ordered after (PTX ISA,
        "Proxies": generic writes become visible to the async proxy only through it)."""
        generic = (writer >= 0) & (writer < clocks.warps)
        if not generic.any():
            return
        for agent in np.unique(who[generic]).tolist():
            mine = generic & (who == agent)
            covered = clocks.fenced(clocks.known[agent])
            late = mine & (covered[np.maximum(writer, 0)] < self.w_step[flat])
            if late.any():
                i = int(np.argmax(late))
                raise SimError(
                    f"{clocks.name(agent)} reads byte {int(flat[i])} of shared {self.name}, "
                    f"which {clocks.name(int(writer[i]))} wrote through the generic proxy "
                    f"with no fence.proxy.async between: the async proxy may read the old "
                    f"bytes; the writing threads need fence.proxy.async (then a barrier) "
                    f"before the asynchronous operation is issued"
                )


def _alignment(size: int) -> int:
    """The alignment an access of ``size`` bytes needs: its own size, up to the widest
    one (PTX's 256-bit .v8); 1 for a size that is not a power of two."""
    return min(size if size & (size - 1) == 0 else 1, 32)


def _rows(threads: np.ndarray, agents: np.ndarray | None) -> np.ndarray:
    """The clock rows of accesses by ``threads``: their warps, or the ``agents`` given."""
    if agents is None:
        return threads // 32
    return np.broadcast_to(np.asarray(agents, dtype=np.int64), threads.shape)


def _hint(clocks: Clocks, reader: Any, writer: Any) -> str:
    """What orders an asynchronous unit's access with a warp's, said where one of the two
    is an asynchronous unit (a barrier between warps does not)."""
    if max(int(reader), int(writer)) < clocks.warps:
        return " (a barrier is missing between them)"
    return (
        " (an asynchronous copy or wgmma is ordered only by its completion: a wait on the "
        "mbarrier phase it completes, or its group wait, not by a CTA barrier)"
    )


def bank_ways(threads: np.ndarray, offsets: np.ndarray, size: int) -> dict[int, int]:
    """Per warp of ``threads``: the worst conflict degree of its wavefronts, when each
    thread accesses ``size`` bytes at byte ``offsets`` of one shared allocation."""
    threads = np.asarray(threads, dtype=np.int64)
    ways, _ = wavefront_costs(  # one instruction: its wavefronts are each warp's own
        np.zeros(threads.size, np.int64), threads, np.asarray(offsets, dtype=np.int64),
        np.full(threads.size, size, dtype=np.int64),
    )  # fmt: skip
    warps, first, inverse = np.unique(threads // 32, return_index=True, return_inverse=True)
    worst = np.zeros(warps.size, dtype=np.int64)
    np.maximum.at(worst, inverse.reshape(-1), ways)
    return {int(warps[i]): int(worst[i]) for i in np.argsort(first, kind="stable")}


def swizzled_address(address: Any, swizzle: int) -> Any:
    """A shared address under the hardware's ``swizzle``-byte pattern (32, 64, 128; 0:
    none), which TMA writes and wgmma reads by: the 16-byte unit of address ``a`` moves to
    ``a ^ (((a >> 7) & (swizzle / 16 - 1)) << 4)`` (address bits 4-6 xor bits 7-9 for 128
    bytes; CUDA programming guide, TMA swizzle; PTX ISA 9.7.15.5.1.2.1)."""
    if not swizzle:
        return address
    return address ^ (((address >> 7) & (swizzle // 16 - 1)) << 4)
