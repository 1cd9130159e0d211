"""What TVM's built-in variants would do with a call that none of ours accepts.

Asked of TVM's dispatch table the way TVM's dispatcher asks it (cases of the call's op and
target kind, a forced ``dispatch=`` name honoured, higher priority first, then by name),
without its side effects: the first case whose predicates pass and whose implementation
returns a PrimFunc is the one TVM would splice in; its warnings are captured, not shown.
Our own bridge cases are skipped. The answer names the variant, says when it is TVM's
scalar single-thread copy, and otherwise keeps each built-in's one-line reason, so that a
call nobody can lower gets one clear error instead of TVM's dispatch table as ASCII art.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

from tvm.ir import Op
from tvm.tirx.operator.tile_primitive import dispatcher as tvm_dispatcher

from .call import TileCall

# The name of the predicate on our bridge's cases in TVM's table (lowering.py).
BRIDGE_PREDICATE = "tirx_cuda_dispatch bridge"
SCALAR_VARIANT = "fallback"  # TVM 0.27's scalar single-thread copy


@dataclass(frozen=True)
class BuiltinVerdict:
    """TVM's built-in answer for one call: the variant that lowers it, or every reason."""

    variant: str | None
    scalar: bool
    reasons: tuple[tuple[str, str], ...]  # (built-in variant, one-line reason), trial order
    elements: int | None  # elements the call moves (dst extents), for the scalar warning

    def __str__(self) -> str:
        if self.variant is None:
            if not self.reasons:
                return "TVM has no built-in variant for this op and target: nothing can lower it"
            return "TVM's built-in variants cannot lower it either:\n" + "\n".join(
                f"    {name:<14} {why}" for name, why in self.reasons
            )
        if self.scalar:
            count = (
                "the whole tile"
                if self.elements is None
                else f"{self.elements:,} element{'s' if self.elements != 1 else ''}"
            )
            return (
                f"falls back to TVM's built-in {self.variant!r}: the SCALAR single-thread copy "
                f"(one thread copies {count} one at a time)"
            )
        return f"falls back to TVM's built-in variant {self.variant!r}"


def builtin_names(op: str, kind: str = "cuda") -> list[str]:
    """The names of TVM's built-in variants of ``op`` for target ``kind`` (our bridge
    cases left out): the names a call may force with ``dispatch=``."""
    cases = tvm_dispatcher._DISPATCH_TABLE.get((Op.get(f"tirx.tile.{op}"), kind), [])
    return [c.variant for c in cases if not any(p.name == BRIDGE_PREDICATE for p in c.preds)]


def probe(call: TileCall) -> BuiltinVerdict:
    """Which built-in variant of TVM 0.27 would lower ``call`` (see the module docstring)."""
    op_call, sctx = call.prim, call.ctx
    kind = str(sctx.target.kind.name) if sctx.target is not None else "none"
    cases = [
        c
        for c in tvm_dispatcher._DISPATCH_TABLE.get((op_call.op, kind), [])
        if not any(p.name == BRIDGE_PREDICATE for p in c.preds)
    ]
    if call.forced_variant is not None:
        cases = [c for c in cases if c.variant == call.forced_variant]
    reasons: list[tuple[str, str]] = []
    for case in sorted(cases, key=lambda c: (-c.priority, c.variant)):
        refused = [why for why in (_refusal(p, op_call, sctx) for p in case.preds) if why]
        if refused:
            reasons.append((case.variant, refused[0]))
            continue
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                func = case.impl(op_call, sctx)
            except Exception as exc:  # noqa: BLE001  (TVM's dispatcher treats any as a decline)
                reasons.append((case.variant, _one_line(exc)))
                continue
        if func is None:
            reasons.append((case.variant, "returned nothing"))
            continue
        # One thread copying a thread-scope call's own elements is what was asked; at a
        # wider scope it leaves every other thread of the scope idle.
        scalar = call.scope != "thread" and (
            case.variant == SCALAR_VARIANT
            or any("scalar single-thread" in str(w.message) for w in caught)
        )
        return BuiltinVerdict(case.variant, scalar, tuple(reasons), _elements(call))
    return BuiltinVerdict(None, False, tuple(reasons), _elements(call))


def _refusal(pred, op_call, sctx) -> str | None:
    ok, reason = pred.evaluate(op_call, sctx)
    return None if ok else (_one_line(reason) if reason else f"predicate {pred.name} failed")


def _one_line(what) -> str:
    """The line of a built-in's refusal that says why: its first, or for TVM's "Program is
    not well-formed" the well-formedness check's own words (the undefined variable)."""
    text = str(what).strip()
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    first = lines[0] if lines else type(what).__name__
    if "not well-formed" in first:
        why = next((line for line in lines if "Invalid use" in line or "TIRxError" in line), None)
        if why is not None:
            first = f"its own body is not well-formed: {why.split('Error: ')[-1]}"
    return first if len(first) <= 200 else first[:197] + "..."


def _elements(call: TileCall) -> int | None:
    """Elements the call writes (its first output's extents), for the scalar warning."""
    dst = call.outputs[0] if call.outputs else None
    if dst is None or any(e is None for e in dst.extents):
        return None
    return math.prod(dst.extents)
