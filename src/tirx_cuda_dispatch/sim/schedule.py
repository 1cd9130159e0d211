"""Warp scheduling: which threads of a CTA run together, and who runs when they block.

The interpreter runs threads in lockstep while nothing stops them: every value is an array
over the CTA's threads, and an ``if`` narrows the active mask. A *unit* is a set of
threads that run one path of the program together, with its own position in it: a stack
of :class:`Frame` (the statement sequences, branches, loops and tile calls it is inside).
A CTA starts as one unit, and a kernel that never blocks runs as one unit, as fast as
plain lockstep.

A unit *blocks* where the GPU would make its warps wait: an instruction raises
:class:`Block` with a :class:`Wait` (a ``bar.sync`` whose other arrivals have not come, an
``mbarrier`` wait on a phase not yet complete, a ``try_wait`` spin loop that saw nothing
change, a ``setmaxnreg.inc`` the register file cannot grant yet). Then:

- if only some of the active threads must wait, they become a unit of their own at the
  same place (a *split*), and the others go on;
- the unit's other threads, which wait elsewhere in its frames (the other side of an
  ``if`` it is inside, threads that left an iteration or a loop), become units of their
  own too (*forks*), each at its place: the ``else`` branch, after the ``if``, the next
  iteration, after the loop. So the roles of a warp-specialized kernel (``if wg == 0:``
  followed by ``if wg == 1:``, or an ``if``/``else``) each run as far as they can.

Units never merge again: after a fork each goes on to the end of the kernel and meets the
others only at barriers, as independently scheduled warps do. The scheduler runs one unit
until it blocks or finishes, then the next one that can run, round robin in the order the
units were made (deterministic). A *deadlock* is a blocked unit and no unit that can run:
the error names every waiting unit's threads, where each waits (the tile call) and for
what.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..irfacts import location_of
from .errors import SimError

MAX_WHILE_ITERATIONS = 100_000


@dataclass
class Wait:
    """What blocked threads wait for: ``ready()`` tells whether they may go on, and
    ``then()`` (if any) is what they do on waking (an acquire). ``what`` names the
    instruction and ``state()`` what is missing (read when a deadlock is reported, so it
    says the state then); ``call`` is the tile call it came from (its explain() index)."""

    what: str
    ready: Callable[[], bool]
    state: Callable[[], str] = lambda: ""
    then: Callable[[], None] | None = None
    call: int | None = None
    line: str | None = None  # the statement's source location (file:line), where known


class Block(Exception):  # noqa: N818 - a control signal, not an error
    """Raised by an instruction (or a loop) whose threads must wait: ``groups`` pairs each
    :class:`Wait` with the threads that wait for it. The instruction has done everything
    else it does (arrivals, counts)."""

    def __init__(self, groups: list[tuple[Wait, np.ndarray]]) -> None:
        super().__init__("; ".join(w.what for w, _ in groups))
        self.groups = groups


# -- frames: where a unit is, and how a copy of it goes on elsewhere ---------------------------
class Frame:
    """One statement a unit is inside. ``step(m)`` does the next piece of it (pushes a child
    frame or runs a simple statement; pops itself when done). ``waiting(m)`` names the
    unit's threads that wait at this frame for the ones inside it, each group with a copy
    of the frame positioned where they go on."""

    def step(self, m: Any) -> None:
        raise NotImplementedError

    def waiting(self, m: Any) -> list[tuple[np.ndarray, Frame]]:
        return []

    def copy(self) -> Frame:
        raise NotImplementedError


class SeqFrame(Frame):
    """A statement sequence: ``i`` is the next statement."""

    def __init__(self, items: list[Any]) -> None:
        self.items, self.i = items, 0

    def step(self, m: Any) -> None:
        if self.i >= len(self.items) or not m.mask.any():  # done, or every thread left
            m.pop()
            return
        item = self.items[self.i]
        self.i += 1
        m.enter(item)

    def copy(self) -> SeqFrame:
        f = SeqFrame(self.items)
        f.i = self.i
        return f


class IfFrame(Frame):
    """``if``: ``phase`` 0 runs the then side (``then``), 1 the else side (``other``), 2 is
    done; ``entry`` are the threads that reached it."""

    def __init__(self, stmt: Any, entry: np.ndarray, cond: np.ndarray) -> None:
        self.stmt, self.entry = stmt, entry
        self.then, self.other = entry & cond, entry & ~cond
        self.phase = 0

    def step(self, m: Any) -> None:
        if self.phase == 0:
            self.phase = 1
            mine = self.then & m.members
            if mine.any():
                m.mask = mine
                m.enter(self.stmt.then_case)
                return
        if self.phase == 1:
            self.phase = 2
            mine = self.other & m.members
            if self.stmt.else_case is not None and mine.any():
                m.mask = mine
                m.enter(self.stmt.else_case)
                return
        m.pop()
        m.mask = m.after_branch(self.entry & m.members)

    def waiting(self, m: Any) -> list[tuple[np.ndarray, Frame]]:
        if self.phase == 1:  # the then side runs: the other side waits for its turn
            group = self.other & m.members
            position = 1 if self.stmt.else_case is not None else 2
        else:  # the else side runs: the then side waits at the end
            group = m.after_branch(self.then & m.members)
            position = 2
        f = self.copy()
        f.phase = position
        return [(group, f)] if group.any() else []

    def copy(self) -> IfFrame:
        f = IfFrame.__new__(IfFrame)
        f.__dict__.update(self.__dict__)
        return f


class Loop:
    """A loop being run: ``left``, the threads that ran ``break`` or ``continue`` in the
    current iteration; ``broken``, those that ran ``break`` (or, in a ``while``, whose
    condition was false)."""

    def __init__(self, entry: np.ndarray) -> None:
        self.entry = entry
        self.broken = np.zeros(entry.shape, dtype=bool)
        self.left = self.broken.copy()

    def start(self, m: Any) -> bool:
        """Begin an iteration with the threads that entered and did not break; False when
        none is left."""
        self.left = self.broken.copy()
        m.mask = self.entry & ~self.broken & m.members
        return bool(m.mask.any())

    def copy(self) -> Loop:
        f = Loop(self.entry)
        f.broken, f.left = self.broken.copy(), self.left.copy()
        return f


class _LoopFrame(Frame):
    loop: Loop

    def finish(self, m: Any) -> None:
        m.pop()
        m.mask = self.loop.entry & m.members

    def waiting(self, m: Any) -> list[tuple[np.ndarray, Frame]]:
        out = []
        going_on = self.loop.left & ~self.loop.broken & m.members
        if going_on.any():  # continued: the next iteration
            out.append((going_on, self.next_iteration(going_on)))
        broken = self.loop.broken & m.members
        if broken.any():  # broke out: after the loop
            f = self.copy()
            f.done = True
            f.loop.entry = broken
            out.append((broken, f))
        return out

    def next_iteration(self, group: np.ndarray) -> _LoopFrame:
        """A copy of the frame for ``group``, positioned at the loop's next iteration."""
        f = self.copy()
        f.loop.broken = np.zeros_like(self.loop.broken)
        f.loop.left = np.zeros_like(self.loop.broken)
        f.loop.entry = group
        f.restart()
        return f

    def restart(self) -> None:
        """Positioned at the start of an iteration."""


class ForFrame(_LoopFrame):
    """A serial loop: the loop variable takes ``values[i:]`` yet. ``ranges`` (threads
    whose bounds differ): each thread's first value, its end and the step; a value runs
    with the threads whose range holds it."""

    def __init__(
        self,
        stmt: Any,
        values: list[int],
        dtype: Any,
        entry: np.ndarray,
        ranges: tuple[np.ndarray, np.ndarray, int] | None = None,
    ) -> None:
        self.stmt, self.values, self.dtype, self.i = stmt, values, dtype, 0
        self.loop, self.done, self.ranges = Loop(entry), False, ranges
        self.current: np.ndarray | None = None  # (ranges) the threads of the running value

    def step(self, m: Any) -> None:
        while True:
            if self.done or self.i >= len(self.values) or not self.loop.start(m):
                self.finish(m)
                return
            value = self.values[self.i]
            self.i += 1
            if self.ranges is not None:
                lo, end, step = self.ranges
                self.current = (lo <= value) & (value < end) & ((value - lo) % step == 0)
                m.mask = m.mask & self.current
                if not m.mask.any():
                    continue
            m.env[self.stmt.loop_var] = np.array([value], dtype=self.dtype)
            m.enter(self.stmt.body)
            return

    def waiting(self, m: Any) -> list[tuple[np.ndarray, Frame]]:
        """Besides the threads that continued or broke: (ranges) those outside the
        running value's range go on at the next value (they skip the values theirs does
        not hold and, past their last, leave the loop)."""
        out = super().waiting(m)
        if self.ranges is None or self.current is None or self.done:
            return out
        loop = self.loop
        idle = loop.entry & ~loop.broken & ~loop.left & ~self.current & m.members
        if idle.any():
            out.append((idle, self.next_iteration(idle)))
        return out

    def restart(self) -> None:
        self.current = None

    def copy(self) -> ForFrame:
        f = ForFrame.__new__(ForFrame)
        f.__dict__.update(self.__dict__)
        f.loop = self.loop.copy()
        return f


class WhileFrame(_LoopFrame):
    """``while (cond) body``: the threads whose condition is false leave the loop. An
    iteration in which an mbarrier wait found its phase incomplete (none complete) and
    nothing asynchronous changed (no arrival, transaction or landing) spins: its threads
    wait until something changes, and a spin nothing can end is a deadlock."""

    def __init__(self, stmt: Any, entry: np.ndarray) -> None:
        self.stmt, self.loop, self.done = stmt, Loop(entry), False
        self.checking, self.version, self.iterations = False, 0, 0

    def step(self, m: Any) -> None:
        if self.checking:
            self.checking = False
            asynchrony = m.asynchrony
            unmet = asynchrony.unmet
            if unmet is not None and not asynchrony.met and asynchrony.version == self.version:
                version = self.version
                wait = Wait(
                    f"the while loop ({self.stmt.condition})",
                    lambda: asynchrony.version != version,
                    lambda: asynchrony.describe_unmet(unmet),
                )
                m.stmt = self.stmt
                raise Block([(wait, m.mask)])
        if self.done or not self.loop.start(m):
            self.finish(m)
            return
        self.iterations += 1
        if self.iterations > MAX_WHILE_ITERATIONS:
            raise SimError(
                f"while loop ({self.stmt.condition}) ran {MAX_WHILE_ITERATIONS} iterations: "
                f"the simulator stops it as endless"
            )
        cond = np.broadcast_to(m.eval(self.stmt.condition).astype(bool), m.mask.shape)
        leaving = m.mask & ~cond
        if leaving.any():
            self.loop.broken = self.loop.broken | leaving
            m.mask = m.mask & cond
            if not m.mask.any():
                self.finish(m)
                return
        self.checking, self.version = True, m.asynchrony.version
        m.asynchrony.unmet, m.asynchrony.met = None, False
        m.enter(self.stmt.body)

    def restart(self) -> None:
        self.checking = False

    def copy(self) -> WhileFrame:
        f = WhileFrame.__new__(WhileFrame)
        f.__dict__.update(self.__dict__)
        f.loop = self.loop.copy()
        return f


class CallFrame(Frame):
    """The body our lowering emitted for tile call ``index``: its counts and faults are
    that call's."""

    def __init__(self, index: int, body: Any, outer: tuple[int | None, Any]) -> None:
        self.index, self.body, self.outer, self.entered = index, body, outer, False

    def step(self, m: Any) -> None:
        if not self.entered:
            self.entered = True
            m.enter(self.body)
            return
        m.pop()
        m.set_call(*self.outer)

    def copy(self) -> CallFrame:
        f = CallFrame(self.index, self.body, self.outer)
        f.entered = self.entered
        return f


# -- units and the scheduler ----------------------------------------------------------------
@dataclass
class Unit:
    """Threads that run one path in lockstep (``members``), and the interpreter state that
    is theirs: the frames they are inside, the active mask, variables, the tile call."""

    number: int
    members: np.ndarray
    mask: np.ndarray
    stack: list[Frame]
    env: Any  # the interpreter's Env
    call: int | None
    counters: Any
    unmet: Any = None
    met: bool = False
    wait: Wait | None = None
    finished: bool = False

    @property
    def loops(self) -> list[Loop]:
        return [f.loop for f in self.stack if isinstance(f, _LoopFrame)]


@dataclass
class Scheduler:
    """The units of one CTA: runs them until every one finished (:mod:`.schedule`)."""

    m: Any
    units: list[Unit] = field(default_factory=list)
    current: Unit | None = None

    def run(self, body: Any) -> None:
        """Run ``body`` on every launched thread of the CTA, as one unit to start with."""
        m = self.m
        root = Unit(0, m.mask.copy(), m.mask, [], m.env, m.call, m.counters)
        self.units.append(root)
        self.current = root
        m.load_unit(root)
        m.enter(body)
        m.save_unit(root)
        unit = root
        while True:
            unit = self._next(unit)
            if unit is None:
                if all(u.finished for u in self.units):
                    return
                raise self.deadlock()
            self._resume(unit)

    def _resume(self, unit: Unit) -> None:
        """Run ``unit`` until it blocks or finishes."""
        m = self.m
        self.current = unit
        m.load_unit(unit)
        try:
            if unit.wait is not None:
                wait, unit.wait = unit.wait, None
                if wait.then is not None:
                    wait.then()
            seen = m.events
            while unit.stack:
                try:
                    unit.stack[-1].step(m)
                except Block as b:
                    self._block(unit, b)
                    if unit.wait is not None:
                        break
                if m.events != seen:
                    seen = m.events
                    if self._woken(unit):  # let what this unit released run first
                        unit.wait = Wait("a yield", lambda: True)
                        break
            else:
                unit.finished = True
                m.threads_finished(unit.members)
        except SimError as err:
            if getattr(err, "call", None) is None:
                err.call = m.call
            raise
        finally:
            m.save_unit(unit)

    def _block(self, unit: Unit, b: Block) -> None:
        """Threads of the running unit wait, each group for its :class:`Wait`: a group of
        all its (remaining) active threads makes the unit wait, and its threads waiting
        elsewhere become units of their own; any other group becomes a unit of its own
        that waits, and the others go on."""
        m = self.m
        for wait, threads in b.groups:
            waiting = threads & m.mask
            if not waiting.any():
                continue
            wait.call = m.call if wait.call is None else wait.call
            wait.line = wait.line or source_line(m.stmt)
            if (waiting == m.mask).all():
                unit.wait = wait
                self._fork(unit)
                return
            split = self._new(waiting, [f.copy() for f in unit.stack], m.call)
            split.wait = wait
            unit.members = unit.members & ~waiting
            m.members = unit.members
            m.mask = m.mask & ~waiting

    def _fork(self, unit: Unit) -> None:
        """Each group of ``unit``'s threads that waits at one of its frames for the threads
        inside it becomes a unit of its own, positioned where that group goes on."""
        m = self.m
        for depth in range(len(unit.stack) - 1, -1, -1):
            # the loops the frame is inside: what after_branch reads for its threads
            m.loops = [f.loop for f in unit.stack[:depth] if isinstance(f, _LoopFrame)]
            for group, frame in unit.stack[depth].waiting(m):
                stack = [f.copy() for f in unit.stack[:depth]] + [frame]
                call = next((f.index for f in reversed(stack) if isinstance(f, CallFrame)), None)
                self._new(group, stack, call)
                unit.members = unit.members & ~group
                m.members = unit.members
        m.loops = unit.loops

    def _new(self, members: np.ndarray, stack: list[Frame], call: int | None) -> Unit:
        """A unit of ``members`` at ``stack``, inside tile call ``call``."""
        new = Unit(
            len(self.units), members.copy(), members.copy(), stack, self.m.env.copy(), call,
            self.m.counters_of(call),
        )  # fmt: skip
        self.units.append(new)
        return new

    def _woken(self, unit: Unit) -> bool:
        """Whether a completion ``unit`` made lets a waiting unit go on. The scheduler then
        runs that one before ``unit`` goes on: consumers read a stage as soon as it is
        theirs, so a producer that refills it without waiting for them is caught."""
        return any(
            u is not unit and not u.finished and u.wait is not None and u.wait.ready()
            for u in self.units
        )

    def _next(self, unit: Unit) -> Unit | None:
        """The next unit after ``unit`` (round robin) that can run, ``unit`` itself last."""
        if len(self.units) > 64:  # finished units are only in the way
            self.units = [u for u in self.units if not u.finished or u is unit]
        i = self.units.index(unit)
        for u in self.units[i + 1 :] + self.units[: i + 1]:
            if not u.finished and (u.wait is None or u.wait.ready()):
                return u
        return None

    def deadlock(self) -> SimError:
        waiting = [u for u in self.units if not u.finished and u.wait is not None]
        lines = []
        for u in waiting:
            where = [u.wait.line] if u.wait.line else []
            where.append(
                f"call [{u.wait.call}]" if u.wait.call is not None else "the kernel's code"
            )
            where = ", ".join(where)
            state = u.wait.state()
            who = threads_text(u.members)
            if self.m.cluster > 1:  # the threads of a cluster: name their CTA
                ranks = np.unique(np.flatnonzero(u.members) // self.m.cta_threads)
                who += f" ({'CTAs of ranks' if ranks.size > 1 else 'the CTA of rank'} "
                who += ", ".join(map(str, ranks.tolist())) + ")"
            verb = "waits" if " " in who and who.split(" ")[0] in ("warp", "thread") else "wait"
            lines.append(
                f"{who} {verb} at {u.wait.what} ({where})" + (f" for {state}" if state else "")
            )
        err = SimError(
            "deadlock: no warp can run: "
            + "; ".join(lines)
            + ", which never happens: every other thread has finished or waits too"
        )
        err.calls = [u.wait.call for u in waiting if u.wait.call is not None]
        if len(set(err.calls)) == 1:
            err.call = err.calls[0]
        return err


def source_line(stmt: Any) -> str | None:
    """A statement's source location as ``file:line`` (TVMScript keeps the line of the
    statement it parsed; a ``T.macro``'s statement, the macro's line), None where it has
    none."""
    loc = location_of(stmt)
    return f"{loc.file}:{loc.line}" if loc.file and loc.line else None


def threads_text(mask: np.ndarray) -> str:
    """Threads in words: whole warps as warp ranges (``warps 4-11``), else threads."""
    tids = np.flatnonzero(mask)
    if tids.size == 0:
        return "no thread"
    warps = np.unique(tids // 32)
    if all(int(((tids // 32) == w).sum()) == 32 for w in warps.tolist()):
        return _ranges("warp", warps.tolist())
    return _ranges("thread", tids.tolist())


def _ranges(noun: str, items: list[int]) -> str:
    parts, start = [], items[0]
    for a, b in zip(items, items[1:] + [None], strict=True):
        if b != a + 1:
            parts.append(f"{start}" if start == a else f"{start}-{a}")
            start = b
    return f"{noun}{'s' if len(items) > 1 else ''} {', '.join(parts)}"
