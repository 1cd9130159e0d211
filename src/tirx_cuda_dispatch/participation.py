"""Which threads of a call's scope execute it: all, a known range, or something else.

A tile-primitive call at warp, warpgroup or CTA scope is executed by its scope's threads
together: a variant splits the work among them. TVM's scope analysis narrows a thread axis
for an enclosing ``if`` it recognizes (``if lane < 16``: ``laneid`` over ``[0, 16)``; the
call's ``thread_axes``), and otherwise assumes every thread takes part. An ``if`` it does not
recognize (``lane % 2 == 0``, ``tid < 100`` at CTA scope, a per-thread value) leaves some
threads out while the split counts them in: part of the tile is never moved.

So every enclosing condition is put in terms of the scope's coordinates (``lane`` in
``[0, 32)``, the warp ``w`` of the CTA; TVM's ids are functions of them: ``tid = 32 w +
lane``, ``wid_in_wg = w % 4``, ...) and given one of four verdicts:

- ``uniform``: it does not depend on the coordinates that vary inside one instance of the
  scope (``lane`` for a warp; ``lane`` and ``w % 4`` for a warpgroup; ``lane`` and ``w``
  for a CTA), or it is provably true over the narrowed ranges (under the uniform
  conditions and the ranges of the ids and loops). The participants are then exactly the
  narrowed ranges, ``participants`` describes them and :func:`participant_index` numbers
  them;
- ``divergent``: two threads of one instance of the scope, inside the narrowed ranges,
  evaluate it differently (found by evaluating it over the coordinates): an error, in
  every pipeline, naming the condition, the two threads and the line;
- ``warps``: above warp scope, a condition on a full-mask warp vote (``__any_sync``) or
  on what is uniform over a warp: each warp runs the call whole or not at all, which warps
  the data decides. Variants whose code stays inside a warp (each thread's registers,
  shuffles between its lanes) take it: the warps that pass compute their part of the tile
  and the others leave theirs as it was (:func:`.predicates.requires_whole_warps_active`);
  the others decline with its ``detail``;
- ``undecided`` (a per-thread value, a data-dependent test): our variants decline, saying
  why.
"""

from __future__ import annotations

import itertools
import math
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

import tvm
import tvm_ffi
from tvm import sym
from tvm.tirx import IntImm, Var

from .bounds import resolve_scalars
from .errors import DispatchError
from .irfacts import as_int, loaded_buffer, replace_leaves, subexpressions
from .scopes import SCOPES, THREAD_AXES

MAX_UNIFORM_CORNERS = 4  # uniform variables whose corners are enumerated (2**4 assignments)


@tvm_ffi.register_error
class DivergentScopeError(DispatchError):
    """An enclosing condition leaves some threads of a call's scope out of the call."""


@dataclass(frozen=True)
class Participants:
    """The threads that execute a call: each coordinate over ``[lo, lo + extent)``.

    ``lane`` is the lane, ``warp`` the warp within the scope (within the warpgroup for
    warpgroup scope, within the CTA for CTA scope; absent for warp and thread scope)."""

    lane: tuple[int, int] = (0, 32)
    warp: tuple[int, int] | None = None

    @property
    def count(self) -> int:
        return self.lane[1] * (self.warp[1] if self.warp else 1)

    @property
    def renumbered(self) -> bool:
        """Whether a participant's index differs from its thread's index in the scope."""
        return self.lane != (0, 32) or (self.warp is not None and self.warp[0] != 0)

    def __str__(self) -> str:
        lane = f"lanes [{self.lane[0]}, {sum(self.lane)})"
        if self.warp is None:
            return lane
        return f"warps [{self.warp[0]}, {sum(self.warp)}) x {lane}"


@dataclass(frozen=True)
class Participation:
    verdict: str  # "uniform", "divergent", "warps" or "undecided"
    participants: Participants | None = None
    detail: str | None = None


# -- the scope's coordinates --------------------------------------------------------------
def _id_value(kind: tuple[str, str], lane: Var, warp: Any) -> Any | None:
    """A TVM id as a function of the lane and the warp of the CTA; None for ids that are
    the same for every thread of a CTA (cluster and CTA ids)."""
    return {
        ("warp", "thread"): lane,
        ("cta", "thread"): warp * 32 + lane,
        ("warpgroup", "thread"): tvm.tirx.floormod(warp, 4) * 32 + lane,
        ("cta", "warp"): warp,
        ("warpgroup", "warp"): tvm.tirx.floormod(warp, 4),
        ("cta", "warpgroup"): tvm.tirx.floordiv(warp, 4),
    }.get(kind)


@dataclass(frozen=True)
class _Coordinates:
    """A thread of the CTA as (lane, q, g): ``q`` its warp inside the scope instance
    (varies with the thread), ``g`` the instance (the same for all its threads)."""

    lane: Var
    q: Var
    g: Var
    warp: Any  # the warp of the CTA in terms of q and g
    varying: tuple[Var, ...]
    ranges: tuple[tuple[Var, int, int], ...]


def _coordinates(scope: str, parts: Participants, warps: int) -> _Coordinates:
    lane, q, g = Var("lane", "int32"), Var("q", "int32"), Var("g", "int32")
    lane_range = (lane, parts.lane[0], sum(parts.lane))
    if scope == "warp":
        return _Coordinates(lane, q, g, g, (lane,), (lane_range, (g, 0, warps)))
    q_range = (q, parts.warp[0], sum(parts.warp))
    if scope == "warpgroup":
        ranges = (lane_range, q_range, (g, 0, max(warps // 4, 1)))
        return _Coordinates(lane, q, g, g * 4 + q, (lane, q), ranges)
    return _Coordinates(lane, q, g, q, (lane, q), (lane_range, q_range))


def narrowing(call: Any, parts: Participants) -> str | None:
    """How ``parts`` fall short of the whole scope, in TVM's axis names (``laneid runs over
    [0, 16)``), or None when every thread of the scope takes part."""
    if call.scope == "thread":
        return None
    warp_axis = {"warpgroup": ("wid_in_wg", 4), "cta": ("warpid", _cta_warps(call))}
    spans = [("laneid", parts.lane, 32)]
    if parts.warp is not None:
        name, full = warp_axis[call.scope]
        spans.append((name, parts.warp, full))
    short = [
        f"{name} runs over [{lo}, {lo + n})"
        for name, (lo, n), full in spans
        if (lo, n) != (0, full)
    ]
    return ", ".join(short) or None


def _cta_warps(call: Any) -> int:
    return (call.launch_extents.get("threadIdx.x") or 32) // 32


def participation(call: Any) -> Participation:
    """The verdict for ``call`` (a :class:`..call.TileCall` whose ``enclosing`` the
    lowering set from :mod:`.bounds`' walk; without it, only TVM's ranges count)."""
    parts = _narrowed_ranges(call)
    if isinstance(parts, str):
        return Participation("undecided", None, parts)
    enclosing = getattr(call, "enclosing", None)
    if call.scope == "thread" or enclosing is None or not enclosing.conditions:
        return Participation("uniform", parts)
    coords = _coordinates(call.scope, parts, _cta_warps(call))
    subst = _substitution(enclosing, coords.lane, coords.warp)
    resolved = [  # register scalars stored once read as their values (``unit = bx + r g``)
        _resolve(resolve_scalars(c, enclosing), subst, enclosing, coords.ranges)
        for c in enclosing.conditions
    ]
    conditions = [
        _votes_read_as_uniform(c, call.scope, enclosing, _cta_warps(call)) for c in resolved
    ]
    varying = list(coords.varying)
    uniform = [c for c in conditions if not _depends_on(c, varying)]
    per_thread = [  # (as the scope reads it, as written, before the votes were read)
        (c, orig, r)
        for c, orig, r in zip(conditions, enclosing.conditions, resolved, strict=True)
        if _depends_on(c, varying)
    ]
    if not per_thread:
        return Participation("uniform", parts)
    ranges = [*coords.ranges, *_other_ranges(enclosing, subst)]
    unproven = [u for u in per_thread if not _proved(u[0], ranges, uniform)]
    if not unproven:
        return Participation("uniform", parts)
    box = _box([c for c, _, _ in unproven], coords, ranges)
    if box is not None:  # the conditions leave a range of lanes (x warps): TVM saw part of it
        return Participation("uniform", box)
    for cond, orig, _ in unproven:
        witness = _divergence(cond, ranges, uniform, coords)
        if witness is not None:
            return Participation(
                "divergent",
                parts,
                f"`if {orig}` leaves threads of the {SCOPES[call.scope].noun} out of this "
                f"{call.scope}-scope call: {witness}. A scope can be narrowed to a range of "
                "lanes (and of warps), e.g. `if lane < 16`: call it at a narrower scope, or "
                "move it out of the if",
            )
    at_warp = [  # each unproven condition as a warp reads it (its full-mask votes uniform)
        _votes_read_as_uniform(r, "warp", enclosing, _cta_warps(call)) for _, _, r in unproven
    ]
    if call.scope != "warp" and not any(_depends_on(w, [coords.lane]) for w in at_warp):
        conds = " and ".join(f"`if {orig}`" for _, orig, _ in unproven)
        noun = SCOPES[call.scope].noun
        return Participation(
            "warps",
            parts,
            f"cannot prove that every thread of the {noun} in {parts} passes {conds}: it "
            f"holds for a whole warp or for none of it (a vote), so the {noun}'s warps that "
            "pass run this call and the others do not; only variants whose code stays "
            "inside a warp take that",
        )
    _, orig, _ = unproven[0]
    return Participation(
        "undecided",
        parts,
        f"cannot prove that every thread of the {SCOPES[call.scope].noun} in {parts} passes "
        f"`if {orig}`; a condition on per-thread values may leave threads out",
    )


def _proved(cond: Any, ranges, uniform: list[Any]) -> bool:
    with ExitStack() as stack:
        ana = sym.Analyzer()
        for var, lo, hi in ranges:
            ana.bind(var, tvm.ir.Range(lo, hi))
        for c in uniform:
            stack.enter_context(ana.constraint_scope(c))
        return ana.can_prove(cond)


def _box(conds: list[Any], coords: _Coordinates, ranges) -> Participants | None:
    """The threads that pass ``conds`` when those are conditions on the lane and the warp
    alone (``lane >= 8`` and ``lane < 20``, which TVM narrows to the first only): a range
    of lanes times a range of warps, or None (another shape, other variables, none)."""
    inside = list(coords.varying)
    if any(
        _reads_memory(c)
        or any(not any(v.same_as(x) for x in inside) for v in tvm.tirx.analysis.undefined_vars(c))
        for c in conds
    ):
        return None
    by_var = {v: (lo, hi) for v, lo, hi in ranges}
    points = set()
    for values in itertools.product(*(range(*by_var[v]) for v in inside)):
        ana = _at(dict(zip(inside, values, strict=True)))
        truths = [_truth(ana, c) for c in conds]
        if any(t is None for t in truths):
            return None
        if all(truths):
            points.add(values)
    if not points:
        return None
    axes = [sorted({p[i] for p in points}) for i in range(len(inside))]
    if any(a[-1] - a[0] + 1 != len(a) for a in axes) or len(points) != math.prod(map(len, axes)):
        return None
    lanes = (axes[0][0], len(axes[0]))
    warps = (axes[1][0], len(axes[1])) if len(axes) > 1 else None
    return Participants(lanes, warps)


def _narrowed_ranges(call: Any) -> Participants | str:
    """TVM's narrowed thread axes as :class:`Participants`, or why they are not usable."""
    axes = call.thread_axes
    expected = call.expected_thread_axes
    if set(axes) != set(expected):
        return f"scope {call.scope} has thread axes {sorted(axes)}, expected {sorted(expected)}"
    full = {name: THREAD_AXES[name].extent for name in ("laneid", "wid_in_wg")}
    if call.scope == "cta":
        tx = call.launch_extents.get("threadIdx.x")
        if tx is None or tx % 32:
            return f"cta scope needs a static threadIdx.x extent that is a multiple of 32, got {tx}"
        for other in ("threadIdx.y", "threadIdx.z"):
            if (call.launch_extents.get(other) or 1) != 1:
                return f"cta scope with {other} is not supported (threads must be 1-D)"
        full["warpid"] = tx // 32
    spans = {}
    for name, (extent, offset) in axes.items():
        if extent is None or offset is None:
            return f"thread axis {name} has a non-constant range"
        if offset < 0 or extent <= 0 or offset + extent > full[name]:
            # TVM's scope analysis lost track of this axis (nested ifs on wid_in_wg give
            # [-3, -2**63)): the whole axis, which the enclosing conditions then narrow
            offset, extent = 0, full[name]
        spans[name] = (offset, extent)
    if call.scope == "thread":
        return Participants((0, 1))
    warp = spans.get("wid_in_wg", spans.get("warpid"))
    return Participants(spans["laneid"], warp)


def _substitution(enclosing: Any, lane: Var, warp: Var) -> dict[Var, Any]:
    subst: dict[Var, Any] = {}
    for var, kind in enclosing.scope_ids:
        value = _id_value(kind, lane, warp)
        if value is not None:
            subst[var] = value
    return subst


def _resolve(expr: Any, subst: dict[Var, Any], enclosing: Any, ranges) -> Any:
    """``expr`` with TVM's ids replaced by the scope's coordinates and let-bound variables
    by their values (the analyzer substitutes what is bound to it), simplified over the
    coordinates' ranges (``(4 g + q) // 4`` is ``g``)."""
    ana = sym.Analyzer()
    for var, lo, hi in ranges:
        ana.bind(var, tvm.ir.Range(lo, hi))
    for var, value in subst.items():
        ana.bind(var, value)
    for var, value in enclosing.lets:
        ana.bind(var, value)
    return ana.simplify(expr)


def _depends_on(expr: Any, variables: list[Var]) -> bool:
    free = tvm.tirx.analysis.undefined_vars(expr)
    return any(v.same_as(x) for v in free for x in variables) or _reads_memory(expr)


def _reads_memory(expr: Any) -> bool:
    """Whether ``expr`` reads a register (local) buffer: a value of the thread's own."""
    for n in subexpressions(expr):
        buf = loaded_buffer(n)
        if buf is not None and str(buf.scope()) == "local":
            return True
    return False


# Warp votes whose result every lane of a full mask receives alike (``__any_sync``,
# ``__ballot_sync`` over 0xffffffff): uniform over the warp whatever each lane votes.
WARP_VOTES = ("tirx.cuda.any_sync", "tirx.cuda.ballot_sync")
FULL_MASK = 0xFFFFFFFF


def _votes_read_as_uniform(expr: Any, scope: str, enclosing: Any, cta_warps: int) -> Any:
    """``expr`` with each vote an instance of ``scope`` shares replaced by a fresh variable,
    so a call under ``if <vote>`` runs on every thread of the instance or on none:

    - at warp scope, a full-mask warp vote (``any_sync``, ``ballot_sync``; a narrower mask
      stays per-thread);
    - a register only barrier reductions write (``bar.red``: :func:`.bounds.barrier_votes`)
      where every generation of the barrier holds whole instances of the scope
      (:func:`_vote_spans`)."""
    shared = [v.buffer for v in getattr(enclosing, "votes", ()) if _vote_spans(v, scope, cta_warps)]

    def vote(node: Any) -> Any:
        op = getattr(node, "op", None)
        name = getattr(op, "name", None)
        if scope == "warp" and name in WARP_VOTES and as_int(node.args[0]) == FULL_MASK:
            return Var("warp_vote", str(node.ty))
        loaded = loaded_buffer(node)
        if loaded is not None and any(b.same_as(loaded) for b in shared):
            return Var("barrier_vote", str(node.ty))
        return None

    return replace_leaves(expr, vote)


def _vote_spans(vote: Any, scope: str, cta_warps: int) -> bool:
    """Whether each generation of a barrier vote holds whole instances of ``scope``: the
    vote is ``.aligned`` (a warp arrives whole), and its thread count is the CTA's, or a
    multiple of the scope's threads below CTA scope (of a warpgroup's 128: the simulator
    checks that such a barrier gathers whole warpgroups, docs/simulator.md)."""
    if not vote.aligned:
        return False
    if vote.threads is None or vote.threads == 32 * cta_warps:
        return True
    threads = SCOPES[scope].threads
    return scope in ("warp", "warpgroup") and vote.threads % threads == 0


def _other_ranges(enclosing: Any, subst: dict[Var, Any]) -> list[tuple[Var, int, int]]:
    return [(var, lo, hi) for var, lo, hi, _ in enclosing.ranges if var not in subst]


def _divergence(cond: Any, ranges, uniform: list[Any], coords: _Coordinates) -> str | None:
    """Two threads of one scope instance on which ``cond`` differs, described; or None."""
    by_var = {v: (lo, hi) for v, lo, hi in ranges}
    free_all = tvm.tirx.analysis.undefined_vars(cond)
    free = [v for v in free_all if v in by_var]
    if len(free) != len(free_all) or _reads_memory(cond):
        return None
    inside = [v for v in free if any(v.same_as(x) for x in coords.varying)]
    outside = [v for v in free if v not in inside]
    if len(outside) > MAX_UNIFORM_CORNERS:
        return None
    corners = [sorted({by_var[v][0], by_var[v][1] - 1}) for v in outside]
    for fixed in itertools.product(*corners):
        seen: dict[bool, dict[Var, int]] = {}
        for values in itertools.product(*(range(*by_var[v]) for v in inside)):
            point = dict(zip(outside, fixed, strict=True)) | dict(zip(inside, values, strict=True))
            ana = _at(point)
            if not all(_truth(ana, c) is not False for c in uniform):
                break  # this instance of the scope does not reach the call
            truth = _truth(ana, cond)
            if truth is None:
                return None
            seen.setdefault(truth, point)
            if len(seen) == 2:
                others = [v for v in outside if not v.same_as(coords.g)]
                when = ", ".join(f"{v.name} = {point[v]}" for v in others)
                return (
                    f"{_thread(seen[True], coords, by_var)} runs it, "
                    f"{_thread(seen[False], coords, by_var)} does not"
                    + (f", when {when}" if when else "")
                )
    return None


def _at(point: dict[Var, int]) -> sym.Analyzer:
    ana = sym.Analyzer()
    for var, x in point.items():
        ana.bind(var, IntImm(str(var.ty), x))
    return ana


def _thread(point: dict[Var, int], coords: _Coordinates, by_var) -> str:
    """The thread at ``point``, as the user numbers it: its index in the CTA, warp, lane."""
    full = {v: point.get(v, by_var[v][0]) for v in (coords.lane, coords.q, coords.g) if v in by_var}
    lane = full[coords.lane]
    warp = as_int(_at(full).simplify(coords.warp))
    return f"thread {warp * 32 + lane} (warp {warp}, lane {lane})"


def _truth(ana: sym.Analyzer, cond: Any) -> bool | None:
    value = ana.simplify(cond)
    return bool(value.value) if isinstance(value, IntImm) else None


def instances(call: Any) -> int:
    """How many instances of the call's scope in one CTA execute it: the warps of the CTA
    for a warp-scope call, its warpgroups, one CTA, or its threads, less those the
    enclosing conditions provably leave out (``if wg_id == 1``, ``if tid == 0``). Each
    warp is tried at its lane 0 (for thread scope, lanes 0 and 31 too: a condition on the
    lane that holds for one thread of a warp counts that one). What the conditions do not
    decide (a loop variable, a value in memory) counts the instance in."""
    threads = call.launch_extents.get("threadIdx.x") or 32
    warps = max(threads // 32, 1)
    enclosing = call.enclosing
    conditions = list(getattr(enclosing, "conditions", None) or [])
    size = {"thread": 1, "warp": 32, "warpgroup": 128}.get(call.scope, threads)
    if not conditions:
        return max(threads // size, 1)
    lane_var, warp_var = Var("lane", "int32"), Var("warp", "int32")
    subst = _substitution(enclosing, lane_var, warp_var)
    seen = set()
    lanes = (0, 16, 31) if call.scope == "thread" else (0,)
    for w in range(warps):
        for lane in lanes:
            at = [(lane_var, lane, lane + 1), (warp_var, w, w + 1)]  # this one thread
            if all(as_int(_resolve(c, subst, enclosing, at)) != 0 for c in conditions):
                seen.add((w * 32 + lane) // size)
    if call.scope == "thread" and len(seen) == warps * len(lanes):
        return threads  # nothing restricts the lanes: every thread
    return max(len(seen), 1)
