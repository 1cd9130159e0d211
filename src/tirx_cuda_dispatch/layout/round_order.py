"""Bank-conflict-aware round order for copies where each thread moves its own bundle.

A thread's rounds (one vector each) may run in any order: what is copied does not change.
When every lane walks its bundle in the same order, lanes whose vectors lie a multiple
of 128 bytes apart hit the same banks in the same instruction (lane ``i`` owning row
``i`` of ``K`` float32: 2-, 4-, 8-way conflicts at ``K`` = 8, 16, 32). Rotating each lane's
order by a lane-dependent shift spreads one instruction's lanes over different banks.

The rotation is ``shift(lane) = (lane // group) % period``; in step ``s`` a thread moves
round ``(s + shift) % rounds``. On the shared side that is only a different address. On
the register side the round's registers would then depend on the lane, which would push
the register array to local memory, so the emitter moves every step through a fixed slot
and undoes the rotation with a barrel shifter: ``ceil(log2(period))`` stages, each a
lane-dependent select per 32-bit word of every slot.

The choice is a cost rule in SM clocks per copy (all warps of the scope):

* shared memory serves one 128-byte wavefront per clock (:mod:`.banks`);
* the ALU pipe that executes SEL takes 64 lanes per clock per SM (sm_80..sm_90), two
  warp-wide selects per clock;
* the two pipes overlap, so a rotated order costs ``max(wavefronts, selects / 2)``.

Every candidate (the plain order and each (group, period)) is counted with the bank model
and the cheapest wins; ties keep the plain order, then the fewest selects.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..irfacts import as_int
from .banks import LANES, wavefront_costs
from .partition import ScopePartition

WAVEFRONTS_PER_CLOCK = 1.0  # shared memory: 128 bytes per clock per SM
SELECTS_PER_CLOCK = 2.0  # warp-wide SEL instructions per clock per SM (64 lanes)


@dataclass(frozen=True)
class Rotation:
    """Thread ``t`` moves round ``(step + (lane // group) % period) % rounds`` in ``step``."""

    group: int
    period: int
    rounds: int

    def shift(self, tid: Any) -> Any:
        """The thread's shift (ints, numpy arrays or TIR expressions alike)."""
        return tid % LANES // self.group % self.period

    def round_of(self, step: Any, tid: Any) -> Any:
        return (step + self.shift(tid)) % self.rounds

    @property
    def stages(self) -> int:
        """Barrel-shifter stages that undo the rotation: one per bit of the shift."""
        return (self.period - 1).bit_length()

    def selects(self, words_per_access: int) -> int:
        """Select instructions per thread to undo the rotation of one copy."""
        return self.stages * self.rounds * words_per_access

    def __str__(self) -> str:
        return f"rotate by (lane // {self.group}) % {self.period}"


@dataclass(frozen=True)
class RoundOrder:
    """The chosen order of one copy's rounds and what the cost rule saw."""

    rotation: Rotation | None  # None: every thread in the plain order
    ways: tuple[int, ...]  # worst conflict degree of each step's instruction
    plain_ways: tuple[int, ...]  # the same for the plain order
    selects: int  # per thread
    clocks: float  # estimated SM clocks for the whole scope
    plain_clocks: float

    def facts(self) -> dict:
        facts: dict[str, Any] = {
            "round_order": str(self.rotation) if self.rotation else "plain",
            "conflict_ways": list(self.ways),
            "est_clocks": self.clocks,
        }
        if self.rotation is not None:
            facts["plain_conflict_ways"] = list(self.plain_ways)
            facts["selects_per_thread"] = self.selects
            facts["plain_est_clocks"] = self.plain_clocks
        return facts


def round_offsets(partition: ScopePartition, which: int) -> np.ndarray:
    """Element offsets ``[round, thread]`` of operand ``which``'s accesses.

    A base that is not a constant counts as 0: it is the same for every lane of a warp, and
    shifting all of a wavefront's words by one amount permutes the banks without changing
    how many words share one. (A swizzled region is aligned to its swizzle's period.)
    """
    bases = tuple(as_int(b) or 0 for b in partition.bases)
    p = dataclasses.replace(partition, bases=bases)
    rnd = np.arange(p.rounds, dtype=np.int64)[:, None]
    tid = np.arange(p.threads, dtype=np.int64)[None, :]
    return np.broadcast_to(p.offset(which, rnd, tid), (p.rounds, p.threads)).astype(np.int64)


def _steps_cost(offsets: np.ndarray, rounds_taken: np.ndarray, access_bytes: int, elem_bytes: int):
    """(ways per step, total wavefronts) when thread ``t`` moves ``rounds_taken[s, t]`` in step ``s``."""
    steps, threads = offsets.shape
    step = np.repeat(np.arange(steps), threads)
    thread = np.tile(np.arange(threads), steps)
    taken = offsets[rounds_taken.reshape(-1), thread] * elem_bytes
    nbytes = np.full(step.size, access_bytes)
    ways, waves = wavefront_costs(step, thread, taken, nbytes)
    return tuple(int(w) for w in ways.reshape(steps, threads).max(axis=1)), waves


def _candidates(rounds: int):
    periods = sorted({1 << b for b in range(1, rounds.bit_length()) if 1 << b <= rounds} | {rounds})
    for group in (1, 2, 4, 8, 16):
        for period in periods:
            if 1 < period <= LANES // group:
                yield Rotation(group, period, rounds)


def choose_round_order(
    partition: ScopePartition, which: int, elem_bytes: int, words_per_access: int
) -> RoundOrder:
    """The cheapest order of ``partition``'s rounds for its shared operand ``which``."""
    offsets = round_offsets(partition, which)
    rounds, threads = offsets.shape
    warps = -(-threads // LANES)  # a partial warp still issues every select
    access_bytes = partition.vec * elem_bytes
    steps = np.arange(rounds)[:, None]
    tids = np.arange(threads)[None, :]
    plain_ways, plain_waves = _steps_cost(
        offsets, np.broadcast_to(steps, (rounds, threads)), access_bytes, elem_bytes
    )
    plain_clocks = plain_waves / WAVEFRONTS_PER_CLOCK
    best = RoundOrder(None, plain_ways, plain_ways, 0, plain_clocks, plain_clocks)
    if rounds < 2 or max(plain_ways) == 1:
        return best
    # cheapest selects first: once the selects alone cost more than the best, stop
    for rot in sorted(_candidates(rounds), key=lambda r: r.selects(words_per_access)):
        if rot.selects(words_per_access) * warps / SELECTS_PER_CLOCK >= best.clocks:
            break
        ways, waves = _steps_cost(offsets, rot.round_of(steps, tids), access_bytes, elem_bytes)
        selects = rot.selects(words_per_access)
        clocks = max(waves / WAVEFRONTS_PER_CLOCK, selects * warps / SELECTS_PER_CLOCK)
        if (clocks, selects) < (best.clocks, best.selects):
            best = RoundOrder(rot, ways, plain_ways, selects, clocks, plain_clocks)
        if max(ways) == 1:
            break  # conflict-free: every later candidate has as many selects or more
    return best
