"""A CTA's named barriers and register pool: the state ``bar.sync`` / ``bar.arrive`` and
``setmaxnreg`` keep between the warps that use them (PTX ISA "bar, barrier",
"setmaxnreg").

A named barrier (0-15) completes each time its thread count has arrived: warps arrive
whole (32 threads each); ``bar.sync`` waits for the completion, ``bar.arrive`` does not.
The completion orders every warp that waited after every warp that arrived (an arrival
releases its warp's clock, a completion is acquired by the waiting warps,
:class:`.memory.Clocks`). Arrivals of one statement that fill more than the generation
they join complete in groups the arrival order picks, so the simulator orders none of
the warps of those generations.

The register pool (``setmaxnreg``) is the CTA's: every warp starts with the per-thread
count the launch allows each of its threads (65,536 registers over the CTA's threads, in
steps of 8, at most 256: the count ptxas gives a kernel whose launch bounds name its
threads, which ``setmaxnreg`` needs); ``.dec`` gives registers back to the pool and
``.inc`` takes them from it, waiting until the pool has them.

In a cluster (:mod:`.interpreter`) each CTA has its own named barriers and its own pool
(its own SM); the cluster barrier (``barrier.cluster``) is one more barrier, over all of
the cluster's threads, counted by thread.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .errors import SimError
from .schedule import Wait, threads_text

BARRIERS = 16
REGISTER_FILE = 65536  # 32-bit registers of an SM, all of them one CTA's here
WARP = 32


@dataclass
class _Generation:
    """The arrivals at a named barrier not yet completed."""

    expected: int  # threads
    number: int
    arrived: int = 0
    warps: list[int] = field(default_factory=list)
    released: np.ndarray | None = None  # join of the arrivals' clocks
    unordered: bool = False
    reduces: bool | None = None  # bar.red arrivals (True), bar.sync / bar.arrive (False)
    reduction: str = ""  # bar.red: popc, and, or
    true: int = 0  # bar.red: threads whose predicate is true
    false: int = 0  # ... and false


class NamedBarriers:
    """The CTA's 16 named barriers (:mod:`.barriers`)."""

    def __init__(self, m: Any) -> None:
        self.m = m
        self.current: dict[int, _Generation] = {}
        self.completed: dict[int, int] = {}  # barrier -> generations completed
        self.released: dict[tuple[int, int], np.ndarray | None] = {}
        self.reduced: dict[tuple[Any, int], tuple[int, int]] = {}  # bar.red: true, false
        self.voters: dict[Any, set[int]] = {}  # bar.red: the warps that ever arrived

    def arrive(
        self, barrier: Any, expected: int, warps: list[int], sync: bool, what: str,
        threads: int | None = None, votes: tuple[str, int, int] | None = None,
        deliver: Callable[[int, int], None] | None = None,
    ) -> Wait | None:  # fmt: skip
        """``warps`` (one statement's) arrive at ``barrier`` that completes at ``expected``
        threads (``threads`` of them arrive: by default all of each warp's 32). With
        ``sync`` they wait for the generation they complete: what they wait for (None: it
        completed now). ``votes`` (``bar.red``): the reduction and how many of the arriving
        threads' predicates are true and false; once the generation completes,
        ``deliver(true, false)`` gives the arriving warps the generation's counts."""
        m = self.m
        clocks = m.clocks
        released = [clocks.release(w) for w in warps]
        joined = np.max(released, axis=0)
        gen = self.current.get(barrier)
        if gen is None:
            gen = self.current[barrier] = _Generation(expected, self.completed.get(barrier, 0))
        elif gen.expected != expected:
            raise SimError(
                f"{what}: warps {warps} arrive expecting {expected} threads while the "
                f"barrier's earlier arrivals (warps {gen.warps}) expect {gen.expected}: every "
                f"arrival at one barrier gives the same count"
            )
        arrived = WARP * len(warps) if threads is None else threads
        straddles = gen.arrived + arrived > expected  # which warps complete it is unknown
        reduces = votes is not None
        if gen.reduces is not None and gen.reduces != reduces:
            raise SimError(
                f"{what}: warps {warps} arrive with {'bar.red' if reduces else 'bar.sync/arrive'} "
                f"while the barrier's earlier arrivals (warps {gen.warps}) came from "
                f"{'bar.red' if gen.reduces else 'bar.sync/arrive'}: PTX does not allow the two "
                "on one barrier at once"
            )
        gen.reduces = reduces
        if reduces:
            self._vote(barrier, gen, expected, warps, votes, straddles, arrived, what)
        gen.arrived += arrived
        gen.warps += warps
        gen.released = joined if gen.released is None else np.maximum(gen.released, joined)
        last = None
        while gen is not None and gen.arrived >= expected:
            leftover = gen.arrived - expected
            self._complete(barrier, gen, unordered=gen.unordered or straddles)
            last = gen.number
            gen = None
            if leftover:
                gen = self.current[barrier] = _Generation(
                    expected, last + 1, leftover, list(warps), joined, unordered=True
                )
        if not sync:
            return None
        if gen is None:  # completed by this very statement
            self._acquire(barrier, last, warps)
            if deliver is not None:
                deliver(*self.reduced[(barrier, last)])
            return None
        number = gen.number

        def then() -> None:
            self._acquire(barrier, number, warps)
            if deliver is not None:
                deliver(*self.reduced[(barrier, number)])

        return Wait(
            what,
            lambda: self.completed.get(barrier, 0) > number,
            lambda: self._state(barrier, number),
            then=then,
        )

    def _complete(self, barrier: int, gen: _Generation, unordered: bool) -> None:
        self.m.events += 1
        self.released[(barrier, gen.number)] = None if unordered else gen.released
        self.released.pop((barrier, gen.number - 4), None)
        if gen.reduces:
            self._whole_warpgroups(barrier, gen)
            self.reduced[(barrier, gen.number)] = (gen.true, gen.false)
        self.completed[barrier] = gen.number + 1
        self.current.pop(barrier, None)

    def _vote(
        self, barrier: Any, gen: _Generation, expected: int, warps: list[int],
        votes: tuple[str, int, int], straddles: bool, arrived: int, what: str,
    ) -> None:  # fmt: skip
        """A ``bar.red`` arrival joins ``gen``: its votes counted, after the checks."""
        reduction, true, false = votes
        if straddles:
            raise SimError(
                f"{what}: warps {warps} arrive {arrived} threads where {expected - gen.arrived} "
                "complete the generation: which threads' votes it reduces is unknown"
            )
        if gen.reduction and gen.reduction != reduction:
            raise SimError(
                f"{what}: warps {warps} reduce with .{reduction} while the generation's earlier "
                f"arrivals (warps {gen.warps}) reduce with .{gen.reduction}: one generation "
                "takes one operation (PTX ISA: mixing them is undefined)"
            )
        gen.reduction = reduction
        gen.true += true
        gen.false += false
        if expected % 128 == 0:
            voters = self.voters.setdefault(barrier, set())
            voters.update(warps)
            if len(voters) > expected // WARP:
                raise SimError(
                    f"{what}: warps {sorted(voters)} arrive at it, more than the "
                    f"{expected // WARP} of one generation, so on the GPU a generation may "
                    "gather warps of two warpgroups and their threads get different answers. "
                    "This library reads a vote of a count that is a multiple of 128 as the "
                    "same in every thread of a warpgroup (participation.py): give each "
                    "warpgroup's vote a barrier id of its own"
                )

    def _whole_warpgroups(self, barrier: Any, gen: _Generation) -> None:
        """A ``bar.red`` generation of a count that is a multiple of 128 holds whole
        warpgroups (this library's rule: see :meth:`_vote`)."""
        if gen.expected % 128:
            return
        groups: dict[int, set[int]] = {}
        for w in gen.warps:
            groups.setdefault(w // 4, set()).add(w)
        split = sorted(g for g, ws in groups.items() if len(ws) != 4)
        if split:
            raise SimError(
                f"bar.red {barrier}, {gen.expected}: generation {gen.number} completed with "
                f"warps {sorted(gen.warps)}, part of warpgroup {split[0]}. This library reads "
                "a vote of a count that is a multiple of 128 as the same in every thread of "
                "a warpgroup (participation.py): let whole warpgroups vote, each at a "
                "barrier id of its own"
            )

    def _acquire(self, barrier: int, number: int, warps: list[int]) -> None:
        released = self.released.get((barrier, number))
        if released is not None:
            for w in warps:
                self.m.clocks.acquire(w, released)

    def _state(self, barrier: int, number: int) -> str:
        gen = self.current.get(barrier)
        if gen is None or gen.number != number:
            return "its completion"
        return (
            f"{gen.expected - gen.arrived} more of its {gen.expected} threads to arrive "
            f"({gen.arrived} arrived: warps {gen.warps})"
        )


class RegisterFile:
    """The CTA's register pool for ``setmaxnreg`` (:mod:`.barriers`)."""

    def __init__(self, m: Any) -> None:
        self.m = m
        warps = max(1, -(-m.threads // WARP))
        self.per_cta = max(1, -(-m.threads // m.cluster // WARP))  # a cluster: an SM each
        entry = min(256, REGISTER_FILE // (self.per_cta * WARP) // 8 * 8)
        self.entry = entry
        self.per_thread = np.full(warps, entry, dtype=np.int64)
        self.pools = [0] * m.cluster  # each CTA's

    def setmaxnreg(
        self, action: str, count: int, warps: list[int], what: str
    ) -> list[tuple[Wait, list[int]]]:
        """``setmaxnreg.{inc,dec}`` by whole warpgroups ``warps`` to ``count`` per thread:
        each warpgroup whose ``.inc`` the pool cannot grant yet, with what it waits for
        (the others are granted now, in warpgroup order)."""
        if not 24 <= count <= 256 or count % 8:
            raise SimError(
                f"{what}: {count} registers per thread, must be a multiple of 8 in [24, 256]"
            )
        self.m.require_whole_warpgroups(what)
        groups: dict[int, list[int]] = {}
        for w in warps:
            groups.setdefault(w // 4, []).append(w)
        total = len(self.per_thread)
        for g, mine in groups.items():
            if mine != list(range(4 * g, min(4 * g + 4, total))):
                raise SimError(
                    f"{what} is executed by {threads_text(_mask(mine, self.m.threads))} of "
                    f"warpgroup {g} only: every warp of a warpgroup executes the same "
                    f"setmaxnreg (.sync.aligned)"
                )
        now = self.per_thread[warps]
        wrong = now < count if action == "dec" else now > count
        if wrong.any():
            direction = "raise" if action == "dec" else "lower"
            raise SimError(
                f"{what}: warps {warps} hold {sorted(set(now.tolist()))} registers per "
                f"thread; .{action} cannot {direction} the count to {count}"
            )
        if action == "dec":
            for w in warps:
                self.pools[w // self.per_cta] += int(now[warps.index(w)] - count) * WARP
            self.per_thread[warps] = count
            self.m.events += 1
            return []
        waits, blocked = [], set()
        for mine in groups.values():
            cta = mine[0] // self.per_cta
            need = int((count - self.per_thread[mine]).sum()) * WARP
            if need <= self.pools[cta] and cta not in blocked:
                self._grant(cta, mine, count, need)
                continue
            blocked.add(cta)
            waits.append((self._wait(cta, mine, count, need, what), mine))
        return waits

    def _grant(self, cta: int, warps: list[int], count: int, need: int) -> None:
        self.pools[cta] -= need
        self.per_thread[warps] = count

    def _wait(self, cta: int, warps: list[int], count: int, need: int, what: str) -> Wait:
        total = self.per_cta
        return Wait(
            what,
            lambda: need <= self.pools[cta],
            lambda: (
                f"{need} registers from the CTA's pool, which holds {self.pools[cta]} (each "
                f"warp started with {self.entry} per thread, {self.entry * WARP * total} of "
                f"the {REGISTER_FILE}; only setmaxnreg.dec of other warps fills the pool)"
            ),
            then=lambda: self._grant(cta, warps, count, need),
        )


def _mask(warps: list[int], threads: int) -> np.ndarray:
    mask = np.zeros(threads, dtype=bool)
    for w in warps:
        mask[w * WARP : (w + 1) * WARP] = True
    return mask
