"""Our LowerTIRx pass, and the bridge that routes TVM's dispatch to our registry.

TVM 0.27's C++ ``LowerTIRx`` asks the Python dispatch table for every tile-primitive
call. The C++ side caches that entry point on first use, so replacing it is unreliable.
Instead we add one high-priority *bridge* case per op to TVM's table; it is active only
while our pass runs (a contextvar holds the pass's session) and delegates to our
registry. Outside our pass TVM's own pipeline behaves exactly as before.

TVM's dispatcher turns every exception of a case into "declined" and moves on. So the
bridge never lets our own errors travel through it: it records them in the session and
declines, and our pass raises them once TVM's pass returns.

``dispatch="name"`` makes TVM keep only the cases of that name, so the bridge is also
registered under each of our variant names (active only when that name is forced).
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import tvm
import tvm_ffi
from tvm.script import tirx as T
from tvm.tirx.operator.tile_primitive import fail, predicate, register_dispatch
from tvm.tirx.operator.tile_primitive.dispatcher import DispatchFail

from .call import TileCall
from .codegen import impl_prim_func
from .dispatch import Outcome, choose
from .errors import DispatchError, VariantError
from .registry import registered_ops, variants_for

BRIDGE_NAME = "tirx_cuda_dispatch"
# Above every built-in case of TVM 0.27 (their priorities are at most a few dozen).
BRIDGE_PRIORITY = 1_000_000
FALLBACKS = ("builtin", "error")


@dataclass
class Session:
    """State of one run of our pass: what was chosen per call, and our errors."""

    fallback: str = "builtin"
    mode: str = "lower"  # "lower" emits; "explain" plans only and splices no-ops
    outcomes: list[Outcome] = field(default_factory=list)
    errors: list[Exception] = field(default_factory=list)


_SESSION: contextvars.ContextVar[Session | None] = contextvars.ContextVar(
    "tirx_cuda_dispatch_session", default=None
)


@contextmanager
def session(fallback: str = "builtin", mode: str = "lower") -> Iterator[Session]:
    """Activate the bridge for the duration of the block."""
    if fallback not in FALLBACKS:
        raise ValueError(f"fallback must be one of {FALLBACKS}, got {fallback!r}")
    s = Session(fallback=fallback, mode=mode)
    token = _SESSION.set(s)
    try:
        yield s
    finally:
        _SESSION.reset(token)


def _noop() -> Any:
    @impl_prim_func
    def noop():
        T.evaluate(0)

    return noop


def _declined_message(out: Outcome, why: str) -> str:
    return f"{why}\n  call: {out.call}\n  variants tried, in order:\n{out.reasons_table()}"


def _bridge(op_call: Any, sctx: Any) -> Any:
    s = _SESSION.get()
    call = TileCall(op_call, sctx)
    try:
        return _dispatch_in_session(s, call)
    except DispatchFail:
        raise
    except Exception as exc:  # noqa: BLE001  # TVM would swallow it: record, then decline
        if not isinstance(exc, VariantError):
            exc = VariantError(f"tirx_cuda_dispatch failed while dispatching {call}: {exc!r}")
        s.errors.append(exc)
        fail(str(exc))


def _dispatch_in_session(s: Session, call: TileCall) -> Any:
    out = choose(call, emit=s.mode == "lower", exhaustive=s.mode == "explain")
    s.outcomes.append(out)
    if s.mode == "explain":
        return _noop()
    if out.chosen is not None:
        return out.func
    if call.forced_variant is not None:
        why = f"dispatch={call.forced_variant!r} was forced and declined"
        others = choose(call, exhaustive=True, honour_forced=False)
        rest = [c for c in others.candidates if c.variant != call.forced_variant]
        message = _declined_message(out, why)
        if rest:
            others.candidates = rest
            message += (
                f"\n  the other variants (not tried: dispatch= forces {call.forced_variant}):\n"
                + others.reasons_table()
            )
        s.errors.append(DispatchError(message))
    elif s.fallback == "error":
        why = "no tirx_cuda_dispatch variant accepts this call (strict mode)"
        s.errors.append(DispatchError(_declined_message(out, why)))
    fail("no tirx_cuda_dispatch variant accepted:\n" + out.reasons_table())


def _active_unforced(op_call: Any, sctx: Any) -> tuple[bool, str | None]:
    if _SESSION.get() is None:
        return False, "tirx_cuda_dispatch's pass is not running"
    if getattr(op_call, "dispatch", None) is not None:
        return False, "a variant is forced with dispatch="
    return True, None


def _active_forced(name: str):
    def check(op_call: Any, sctx: Any) -> tuple[bool, str | None]:
        if _SESSION.get() is None:
            return False, "tirx_cuda_dispatch's pass is not running"
        forced = getattr(op_call, "dispatch", None)
        return (forced is not None and str(forced) == name), None

    return check


_INSTALLED: set[tuple[str, str]] = set()


def install_bridge() -> None:
    """Make sure TVM's table has a bridge case for every op and variant name we have."""
    for op in registered_ops():
        wanted = [(BRIDGE_NAME, _active_unforced)]
        wanted += [(v.name, _active_forced(v.name)) for v in variants_for(op)]
        for name, active in wanted:
            if (op, name) in _INSTALLED:
                continue
            register_dispatch(
                op,
                "cuda",
                variant=name,
                priority=BRIDGE_PRIORITY,
                when=[predicate(f"{BRIDGE_NAME} bridge", active)],
            )(_bridge)
            _INSTALLED.add((op, name))


def run_lower(mod: tvm.IRModule, fallback: str = "builtin", mode: str = "lower") -> tuple:
    """Run TVM's LowerTIRx with our bridge active; returns (module, session)."""
    install_bridge()
    with session(fallback=fallback, mode=mode) as s:
        try:
            lowered = tvm.tirx.transform.LowerTIRx()(mod)
        except Exception as exc:
            if s.errors:
                raise s.errors[0] from exc
            raise
    if s.errors:
        raise s.errors[0]
    return lowered, s


def LowerTIRx(fallback: str = "builtin") -> tvm.transform.Pass:  # noqa: N802 (TVM pass naming)
    """TVM's LowerTIRx with tile-primitive calls dispatched to our variants first.

    ``fallback="builtin"`` hands calls that none of our variants accept to TVM's built-in
    variants; ``fallback="error"`` (strict) raises :class:`DispatchError` listing every
    variant with its reason instead.
    """
    if fallback not in FALLBACKS:
        raise ValueError(f"fallback must be one of {FALLBACKS}, got {fallback!r}")

    @tvm.transform.module_pass(opt_level=0, name="tirx_cuda_dispatch.LowerTIRx")
    def _lower(mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> tvm.IRModule:
        return run_lower(mod, fallback=fallback)[0]

    return _lower


tvm_ffi.register_global_func("tirx_cuda_dispatch.transform.LowerTIRx", LowerTIRx, override=True)
