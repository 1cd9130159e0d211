"""Choosing a variant for one call: predicates, then plan, then (when lowering) emit.

Used by the lowering bridge and by explain() alike, so that both see the same choice and
the same plan. Declines are collected as reasons; any other exception from a variant is a
bug and is raised as :class:`VariantError` naming the variant and the call.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from tvm.tirx import PrimFunc

from .call import TileCall
from .errors import Decline, VariantError
from .registry import Variant, variants_for


@dataclass(frozen=True)
class Candidate:
    """One variant's answer for one call, in trial order."""

    variant: str
    accepted: bool
    reason: str | None

    def __iter__(self):  # unpacks as (variant, accepted, reason)
        return iter((self.variant, self.accepted, self.reason))


@dataclass
class Outcome:
    """The result of dispatching one call through our registry."""

    call: TileCall
    chosen: Variant | None = None
    plan: Any = None
    func: Any = None  # the emitted PrimFunc, when emitted
    candidates: list[Candidate] = field(default_factory=list)

    @property
    def variant(self) -> str | None:
        return self.chosen.name if self.chosen else None

    def reasons_table(self) -> str:
        if not self.candidates:
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


def choose(
    call: TileCall, *, emit: bool = False, exhaustive: bool = False, honour_forced: bool = True
) -> Outcome:
    """Try our variants for ``call`` in order; the first that accepts is chosen.

    With ``emit`` the chosen variant's emitter runs too (an emitter that declines passes
    the call on to the next variant). With ``exhaustive`` the variants after the chosen one
    are still asked, so a report can say what each would have done. A forced
    ``dispatch=`` name restricts the trial to that variant (unless ``honour_forced`` is
    False: an error message then says what the others would have done).
    """
    out = Outcome(call)
    variants = variants_for(call.op)
    if call.forced_variant is not None and honour_forced:
        variants = [v for v in variants if v.name == call.forced_variant]
    for v in variants:
        if out.chosen is not None and not exhaustive:
            break
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
        if ok and out.chosen is not None:
            out.candidates.append(
                Candidate(v.name, True, f"would also accept; {out.chosen.name} is tried first")
            )
            continue
        if ok and emit:
            try:
                out.func = v.emit(plan, call)
            except Decline as d:
                ok, reason = False, d.reason
            except Exception as exc:
                raise _bug(v, "emitter", call, exc) from exc
            if ok and not isinstance(out.func, PrimFunc):
                wrong = TypeError(f"returned {type(out.func).__name__}, not a PrimFunc")
                raise _bug(v, "emitter", call, wrong)
        out.candidates.append(Candidate(v.name, ok, reason))
        if ok:
            out.chosen, out.plan = v, plan
    return out
