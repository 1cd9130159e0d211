"""The dispatch registry: which variants exist for which tile-primitive op, in what order.

A variant is an op name, a variant name, a priority, an ordered list of named predicates,
a planner and an emitter. The registry knows no variant by name: variants register
themselves (``@variant(...)``) and users register theirs the same way.

Order of trial, per op: higher ``priority`` first; at equal priority lower ``order`` first;
then registration order. Nothing is alphabetical. The built-in variants use priority 10;
``ldstmatrix`` carries ``order=0`` and ``reg`` ``order=10`` so that the fragment-specific
instruction is tried before the generic register copy.
"""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from .errors import Decline
from .signatures import signature

PredicateFn = Callable[[Any], "tuple[bool, str | None]"]
PlanFn = Callable[[Any], Any]
EmitFn = Callable[[Any, Any, Any], Any]  # emit(plan, call, given) -> PrimFunc


@runtime_checkable
class Plan(Protocol):
    """What every plan is: a frozen record that explain() can show. ``facts()`` are its
    fields as plain data, ``str(plan)`` one line. Optional, read where present:
    ``resources()`` (:mod:`.resources`: what the bridge provides and what completes
    asynchronously; none by default), ``est_clocks`` (the cost rule's estimate, in SM
    clocks), ``memory_accesses()`` (draw's picture), ``edges()`` (operands that may
    reach past their buffer, and what the hardware does there)."""

    def facts(self) -> dict: ...

    def __str__(self) -> str: ...


def plan_type(plan: PlanFn) -> type | None:
    """The class a plan function's return annotation names (None: not annotated, e.g. a
    lambda; its plans are checked as they are made)."""
    try:
        kind = typing.get_type_hints(plan).get("return")
    except Exception:  # noqa: BLE001  # an annotation that does not resolve
        return None
    return kind if isinstance(kind, type) else None


def contract_gaps(kind: type) -> list[str]:
    """What a plan class lacks of :class:`Plan` (empty: nothing)."""
    missing = [m for m in ("facts",) if not callable(getattr(kind, m, None))]
    if kind.__str__ is object.__str__:
        missing.append("__str__")
    return missing


def _contract_error(kind: type, op: str, name: str) -> ValueError:
    return ValueError(
        f"variant {name!r} of op {op!r}: its plan {kind.__name__} lacks "
        f"{', '.join(contract_gaps(kind))} (registry.Plan: facts() and a one-line __str__)"
    )


def _with_given(emit: Callable) -> EmitFn:
    """``emit(plan, call, given)``; an emitter written as ``emit(plan, call)`` (one that
    takes no resources) is called without them."""
    params = [
        p
        for p in inspect.signature(emit).parameters.values()
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    if len(params) >= 3:
        return emit

    @functools.wraps(emit)
    def with_given(plan: Any, call: Any, given: Any) -> Any:
        return emit(plan, call)

    return with_given


@dataclass(frozen=True)
class Predicate:
    """A named applicability rule: ``fn(call) -> (ok, reason)``; a bad input declines, never raises."""

    name: str
    fn: PredicateFn

    def __call__(self, call: Any) -> tuple[bool, str | None]:
        ok, reason = self.fn(call)
        return bool(ok), (None if ok else (reason or f"{self.name} failed"))


def predicate(fn: PredicateFn, name: str | None = None) -> Predicate:
    """Wrap ``fn`` as a :class:`Predicate`, named after the function unless ``name`` is given.

    A ``requires_`` prefix is dropped: ``requires_cuda`` is the predicate ``cuda``.
    """
    if name is None:
        name = fn.__name__.lstrip("_")
        name = name[len("requires_") :] if name.startswith("requires_") else name
    return Predicate(name, fn)


@dataclass(frozen=True)
class Variant:
    """One way of lowering one op."""

    op: str
    name: str
    priority: int
    order: int
    predicates: tuple[Predicate, ...]
    plan: PlanFn
    emit: EmitFn
    seq: int = field(default=0, compare=False)
    doc: str = ""

    @property
    def sort_key(self) -> tuple[int, int, int]:
        return (-self.priority, self.order, self.seq)

    def check(self, call: Any) -> tuple[bool, str | None]:
        """Run the predicates in order; the first refusal is the reason."""
        for pred in self.predicates:
            ok, reason = pred(call)
            if not ok:
                return False, reason
        return True, None

    def make_plan(self, call: Any) -> Any:
        """The variant's plan for ``call``; raises :class:`Decline` when the call does not
        fit. A plan of a class whose plan function is not annotated (a lambda) is held to
        :class:`Plan` here (a dict plan of a variant without a planner is plain data)."""
        made = self.plan(call)
        if not isinstance(made, dict) and contract_gaps(type(made)):
            raise _contract_error(type(made), self.op, self.name)
        return made


_VARIANTS: dict[str, list[Variant]] = {}
_SEQ = [0]


def _no_plan(call: Any) -> dict:
    return {}


def variant(
    op: str,
    name: str,
    *,
    priority: int = 0,
    order: int = 0,
    predicates: Sequence[Predicate | PredicateFn] = (),
    plan: PlanFn | None = None,
    replace: bool = False,
) -> Callable[[EmitFn], EmitFn]:
    """Register the decorated emitter ``emit(plan, call, given) -> PrimFunc`` as variant
    ``name`` of ``op``.

    ``op`` is the tile op without its ``tirx.tile.`` prefix (``"copy"``, ``"copy_async"``,
    ``"sqrt"``, ...): one of :data:`.signatures.SIGNATURES`, else a ValueError.
    ``predicates`` run in the given order before ``plan(call)``, which computes the
    variant's plan or raises :class:`Decline`; the plan function's return annotation names
    its plan class, which must satisfy :class:`Plan` (checked here). The emitter turns the
    plan into TIR with ``given`` (a read-only mapping: what the bridge provided for the
    plan's resources, by name; ``emit(plan, call)`` for an emitter that takes none) and
    does not decline: a Decline it raises is a bug of the variant, as any other exception
    is. A second registration of the same (op, name) is an error unless ``replace=True``.
    """
    if not op or op.startswith("tirx.tile."):
        raise ValueError(f"op must be the bare tile op name (e.g. 'copy'), got {op!r}")
    signature(op)  # an op TIRx does not have is an error here, naming the ops it has
    preds = tuple(p if isinstance(p, Predicate) else predicate(p) for p in predicates)
    kind = plan_type(plan) if plan is not None else None
    if kind is not None and contract_gaps(kind):
        raise _contract_error(kind, op, name)  # checked as the variant registers

    def decorator(emit: EmitFn) -> EmitFn:
        existing = _VARIANTS.setdefault(op, [])
        clash = [v for v in existing if v.name == name]
        if clash and not replace:
            raise ValueError(f"variant {name!r} is already registered for op {op!r}")
        for v in clash:
            existing.remove(v)
        _SEQ[0] += 1
        existing.append(
            Variant(
                op=op,
                name=name,
                priority=priority,
                order=order,
                predicates=preds,
                plan=plan or _no_plan,
                emit=_with_given(emit),
                seq=_SEQ[0],
                doc=(emit.__doc__ or "").strip().splitlines()[0] if emit.__doc__ else "",
            )
        )
        existing.sort(key=lambda v: v.sort_key)
        return emit

    return decorator


def unregister(op: str, name: str) -> None:
    """Remove a registered variant (for tests and for users replacing a variant)."""
    variants = _VARIANTS.get(op, [])
    remaining = [v for v in variants if v.name != name]
    if len(remaining) == len(variants):
        raise KeyError(f"no variant {name!r} registered for op {op!r}")
    _VARIANTS[op] = remaining


def variants_for(op: str) -> list[Variant]:
    """The variants of ``op`` in the order they are tried."""
    return list(_VARIANTS.get(op, []))


@dataclass(frozen=True)
class Alias:
    """A name a call may force (``dispatch="vec_128b"``) that is not one variant of ours but
    a demand on whichever of ours takes the call: TVM's names for forms our variants
    produce. Every variant of the op is tried; ``accepts(plan)`` then says whether an
    accepted plan is what the name asks for (``(ok, reason)``: the reason declines it)."""

    op: str
    name: str
    accepts: Callable[[Any], tuple[bool, str | None]]
    doc: str = ""


_ALIASES: dict[tuple[str, str], Alias] = {}


def alias(op: str, name: str, accepts: Callable[[Any], tuple[bool, str | None]], doc: str = ""):
    """Register ``name`` as an :class:`Alias` of ``op``'s variants (a name of ours that is
    also a variant's is an error)."""
    signature(op)
    if any(v.name == name for v in _VARIANTS.get(op, [])):
        raise ValueError(f"{name!r} is a variant of {op!r}: it cannot be an alias too")
    _ALIASES[(op, name)] = Alias(op, name, accepts, doc)


def alias_for(op: str, name: str | None) -> Alias | None:
    """The alias ``name`` of ``op``, None where there is none."""
    return None if name is None else _ALIASES.get((op, name))


def names_for(op: str) -> list[str]:
    """Every name a call of ``op`` may force that is ours: variants, then aliases."""
    return [v.name for v in variants_for(op)] + [a.name for a in _ALIASES.values() if a.op == op]


def registered_ops() -> list[str]:
    """Ops that have at least one variant."""
    return sorted(op for op, vs in _VARIANTS.items() if vs)


def list_variants() -> list[dict[str, Any]]:
    """What is registered, per op in trial order: op, name, priority, order, predicate names."""
    rows = []
    for op in registered_ops():
        for v in variants_for(op):
            rows.append(
                {
                    "op": v.op,
                    "variant": v.name,
                    "priority": v.priority,
                    "order": v.order,
                    "predicates": [p.name for p in v.predicates],
                    "doc": v.doc,
                }
            )
    return rows


__all__ = [
    "Alias",
    "Decline",
    "Plan",
    "Predicate",
    "Variant",
    "alias",
    "alias_for",
    "list_variants",
    "names_for",
    "predicate",
    "registered_ops",
    "unregister",
    "variant",
    "variants_for",
]
