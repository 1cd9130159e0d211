"""Choosing a variant for one call: predicates, then plan, then (when lowering) emit.

Used by the lowering bridge and by explain() alike, so that both see the same choice and
the same plan. Declines are collected as reasons; any other exception from a variant is a
bug and is raised as :class:`VariantError` naming the variant and the call.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, NamedTuple, Protocol

from tvm.tirx import PrimFunc

from .call import TileCall
from .errors import Decline, VariantError
from .registry import Alias, Variant, alias_for, variants_for


class Provider(Protocol):
    """What provides a plan's resources (:mod:`.resources`): the lowering bridge."""

    def check(self, plan: Any, call: TileCall) -> str | None:
        """Why the plan's resources cannot be provided for ``call`` (None: they can)."""

    def provide(self, plan: Any, call: TileCall) -> Mapping[str, Any]:
        """What the emitter gets, by resource name (``emit(plan, call, given)``)."""

    def commit(self, plan: Any, call: TileCall, given: Mapping[str, Any]) -> None:
        """The emitter succeeded: allocate what it used."""


EMPTY: Mapping[str, Any] = MappingProxyType({})


class Candidate(NamedTuple):
    """One variant's answer for one call, in trial order: ``(variant, accepted, reason)``."""

    variant: str
    accepted: bool
    reason: str | None


@dataclass
class Outcome:
    """The result of dispatching one call through our registry."""

    call: TileCall
    chosen: Variant | None = None
    plan: Any = None
    func: Any = None  # the emitted PrimFunc, when emitted
    candidates: list[Candidate] = field(default_factory=list)
    given: Mapping[str, Any] = field(default_factory=dict)  # what the plan's resources got
    # Filled in by the lowering bridge: the call's bounds verdicts, what TVM's built-in
    # variants would do when none of ours accepts, and the error lowering raises (if any).
    bounds: Any = None
    builtin: Any = None
    error: Exception | None = None

    @property
    def variant(self) -> str | None:
        return self.chosen.name if self.chosen else None

    def reasons_table(self) -> str:
        if not self.candidates:
            forced = self.call.forced_variant
            if forced is not None and variants_for(self.call.op):
                return f"    (dispatch={forced!r} names no variant of ours for op {self.call.op!r})"
            return f"    (no variant of ours is registered for op {self.call.op!r})"
        lines = []
        for c in self.candidates:
            mark = "accepted" if c.accepted else "declined"
            lines.append(f"    {c.variant:<14} {mark}" + (f": {c.reason}" if c.reason else ""))
        return "\n".join(lines)


def plan_facts(plan: Any) -> dict[str, Any]:
    """A plan as plain data for reports: ``plan.facts()``, a dataclass's fields, or a dict."""
    if plan is None:
        return {}
    if hasattr(plan, "facts"):
        return dict(plan.facts())
    if dataclasses.is_dataclass(plan):
        return dataclasses.asdict(plan)
    return dict(plan)


def _bug(variant: Variant, stage: str, call: TileCall, exc: Exception) -> VariantError:
    return VariantError(
        f"variant {variant.name!r} of op {call.op!r} raised {type(exc).__name__} in its "
        f"{stage}: {exc}\n  call: {call}"
    )


def estimated_clocks(plan: Any) -> float | None:
    """A plan's cost estimate in SM clocks (``plan.est_clocks``), None when it has none."""
    value = getattr(plan, "est_clocks", None)
    return None if value is None else float(value)


def _cheaper(plan: Any, than: Any) -> bool:
    """The cost rule: a later variant wins only with a strictly lower estimate than the
    variant ahead of it, and only where both estimate; otherwise trial order decides."""
    mine, theirs = estimated_clocks(plan), estimated_clocks(than)
    return mine is not None and theirs is not None and mine < theirs


def choose(
    call: TileCall,
    *,
    emit: bool = False,
    exhaustive: bool = False,
    honour_forced: bool = True,
    provider: Provider | None = None,
) -> Outcome:
    """Try our variants for ``call`` in order and choose one.

    Variants are asked in trial order; among those of the highest priority that accept,
    the first is chosen unless a later one's plan estimates fewer SM clocks
    (:func:`estimated_clocks`: the cost rule, e.g. copy -> reg against ldmatrix on a
    conflicting shared layout). With ``emit`` the chosen variant's emitter runs too; an
    emitter never declines (the plan decided): a Decline it raises is a bug of the variant
    (:class:`VariantError`), as any other exception is. With ``exhaustive``
    lower-priority variants are still asked, so a report can say what each would have
    done. A forced ``dispatch=`` name restricts the trial to that variant (unless
    ``honour_forced`` is False: an error message then says what the others would have
    done). A ``provider`` is asked whether each plan's resources can be had (a variant
    whose cannot declines with the reason) and provides the chosen plan's.
    """
    out = Outcome(call)
    variants = variants_for(call.op)
    named = alias_for(call.op, call.forced_variant) if honour_forced else None
    if call.forced_variant is not None and honour_forced and named is None:
        variants = [v for v in variants if v.name == call.forced_variant]
    verdicts: list[list] = []  # [variant, accepted, reason, plan], trial order
    winner = None
    for group in _priority_groups(variants):
        first = len(verdicts)
        verdicts += [_as_named(_verdict(v, call, provider), named) for v in group]
        if winner is None:
            winner = _winner(verdicts, first)
            if winner is not None and emit:
                v, _, _, plan = verdicts[winner]
                out.func, out.given = _emitted(v, plan, call, provider)
        if winner is not None and not exhaustive:
            break
    if winner is not None:
        out.chosen, out.plan = verdicts[winner][0], verdicts[winner][3]
        if provider is not None and not emit:
            out.given = provider.provide(out.plan, call)  # explain: what lowering would get
    for i, (v, ok, reason, plan) in enumerate(verdicts):
        if ok and i != winner:
            reason = _why_not(v, plan, out.chosen, out.plan, i < winner)
        out.candidates.append(Candidate(v.name, ok, reason))
    return out


def _as_named(verdict: list, named: Alias | None) -> list:
    """A verdict under a forced alias: an accepted plan that is not what the alias asks
    for is declined with the alias's reason."""
    v, ok, reason, plan = verdict
    if named is None or not ok:
        return verdict
    fits, why = named.accepts(plan)
    return verdict if fits else [v, False, f"dispatch={named.name!r}: {why}", None]


def _priority_groups(variants: list[Variant]) -> list[list[Variant]]:
    """Variants in trial order, grouped by priority (highest first)."""
    return [list(group) for _, group in itertools.groupby(variants, key=lambda v: v.priority)]


def _verdict(v: Variant, call: TileCall, provider: Provider | None) -> list:
    """[variant, accepted, reason, plan]: the predicates, the plan, its resources."""
    try:
        ok, reason = v.check(call)
    except Exception as exc:
        raise _bug(v, "predicates", call, exc) from exc
    plan = None
    if ok:
        try:
            plan = v.make_plan(call)
        except Decline as d:
            ok, reason = False, d.reason
        except Exception as exc:
            raise _bug(v, "plan", call, exc) from exc
    if ok and provider is not None:
        missing = provider.check(plan, call)
        if missing is not None:
            ok, reason, plan = False, missing, None
    return [v, ok, reason, plan]


def _emitted(
    v: Variant, plan: Any, call: TileCall, provider: Provider | None
) -> tuple[PrimFunc, Mapping[str, Any]]:
    """The variant's PrimFunc and what it was given: its resources provided first
    (``emit(plan, call, given)``), allocated once it returned. Any exception, a Decline
    too, is a bug of the variant: the plan has already accepted the call."""
    given = MappingProxyType(dict(provider.provide(plan, call))) if provider else EMPTY
    try:
        func = v.emit(plan, call, given)
    except Exception as exc:
        stage = "emitter (an emitter does not decline: its plan decides)"
        raise _bug(v, stage if isinstance(exc, Decline) else "emitter", call, exc) from exc
    if not isinstance(func, PrimFunc):
        wrong = TypeError(f"returned {type(func).__name__}, not a PrimFunc")
        raise _bug(v, "emitter", call, wrong)
    if provider is not None:
        provider.commit(plan, call, given)
    return func, given


def _winner(verdicts: list[list], first: int) -> int | None:
    """Index of the choice among ``verdicts[first:]`` (one priority): the first acceptance,
    replaced by a later one only when the cost rule says it is cheaper."""
    best = None
    for i in range(first, len(verdicts)):
        _, ok, _, plan = verdicts[i]
        if ok and (best is None or _cheaper(plan, verdicts[best][3])):
            best = i
    return best


def _why_not(v: Variant, plan: Any, chosen: Variant, chosen_plan: Any, ahead: bool) -> str:
    mine, theirs = estimated_clocks(plan), estimated_clocks(chosen_plan)
    if mine is not None and theirs is not None and v.priority == chosen.priority:
        why = (
            f"would also accept; cost rule: est. {mine:g} SM clocks against {theirs:g} "
            f"for {chosen.name}"
        )
        hint = plan_facts(plan).get("suggestion")  # a plan may say how to make it cheaper
        return f"{why}; {hint}" if hint else why
    if ahead:
        return f"would also accept; {chosen.name} was chosen by the cost rule"
    return f"would also accept; {chosen.name} is tried first"
