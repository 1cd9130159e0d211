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
registered under each of our variant names (active only when that name is forced). A
forced name TVM's built-in variants have too (``ldgsts``, ``tma_auto``) goes to ours
first and, where ours declines, under the default pipeline to TVM's variant of that name
(as TVM's own pipeline would lower it; explain() shows the fallback), under the strict
one to an error with both answers.
"""

from __future__ import annotations

import contextvars
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import tvm
import tvm_ffi
from tvm.script import tirx as T
from tvm.tirx.operator.tile_primitive import fail, predicate, register_dispatch
from tvm.tirx.operator.tile_primitive.dispatcher import DispatchFail

from . import bounds
from .builtin import BRIDGE_PREDICATE, builtin_names, probe
from .call import TileCall
from .codegen import (
    CALL_MARK,
    COMPLETION_MARK,
    encode_tensor_map,
    impl_prim_func,
    prefetch_tensor_map,
)
from .dispatch import Outcome, choose
from .errors import DispatchError, VariantError
from .irfacts import prove_multiple, statements
from .isa.bulk import reduce_takes, shared_align
from .isa.swizzle import byte_swizzle
from .layout.atoms import memory_view
from .participation import DivergentScopeError
from .predicates import tma_coordinates
from .registry import alias_for, names_for
from .resources import (
    Alignment,
    BarrierPool,
    TensorMap,
    barrier_ids_in,
    completions_of,
    resources_of,
)
from .signatures import SIGNATURES

BRIDGE_NAME = "tirx_cuda_dispatch"
# Above every built-in case of TVM 0.27 (their priorities are at most a few dozen).
BRIDGE_PRIORITY = 1_000_000
FALLBACKS = ("builtin", "error")


@dataclass
class Session:
    """State of one run of our pass: what was chosen per call, our errors, and what each
    kernel's plans were given (named-barrier ids, workspace buffers)."""

    fallback: str = "builtin"
    mode: str = "lower"  # "lower" emits; "explain" plans only and splices no-ops
    outcomes: list[Outcome] = field(default_factory=list)
    errors: list[Exception] = field(default_factory=list)
    bounds: list[bounds.CallBounds] = field(default_factory=list)  # every call's verdicts
    pools: dict[int, BarrierPool] = field(default_factory=dict)  # per kernel (id of func)
    # allocations whose alignment the bridge raises: (the allocated buffer, bytes)
    alignments: list[tuple[Any, int]] = field(default_factory=list)

    # -- the resource provider (dispatch.Provider): each kind's steps (resources.Kind) ----
    def check(self, plan: Any, call: TileCall) -> str | None:
        for r in resources_of(plan):
            missing = r.check(self, call)
            if missing is not None:
                return missing
        return None

    def provide(self, plan: Any, call: TileCall) -> dict[str, Any]:
        given = {}
        for r in resources_of(plan):
            value = r.provide(self, call)
            if value is not None:
                given[r.name] = value
        return given

    def commit(self, plan: Any, call: TileCall, given: Mapping[str, Any]) -> None:
        for r in resources_of(plan):
            r.commit(self, call, given.get(getattr(r, "name", None)))

    # -- the bridge's primitives (resources.Bridge) --------------------------------------
    @property
    def lowering(self) -> bool:
        return self.mode == "lower"

    def barrier_pool(self, call: TileCall) -> BarrierPool | None:
        """The kernel's barrier ids, None when the call's kernel is unknown."""
        func = getattr(call.enclosing, "function", None)
        if func is None:
            return None
        if id(func) not in self.pools:
            self.pools[id(func)] = BarrierPool(barrier_ids_in(func))
        return self.pools[id(func)]

    @staticmethod
    def declare_buffer(name: str, shape: tuple, dtype: str, scope: str) -> Any:
        return tvm.tirx.decl_buffer(shape, dtype, name=name, scope=scope)

    @staticmethod
    def allocate(buffer: Any, call: TileCall) -> None:
        call.ctx.add_alloc_buffer(buffer)

    @staticmethod
    def _tensor_map_key(r: TensorMap, call: TileCall) -> str:
        # the buffer itself (in TVM 0.27 a buffer is a Var; its ``.data`` is a new
        # expression at every access): the host statement that encodes the descriptor
        # holds the buffer, so no other buffer takes its address while the key is cached
        buffer = call.operand(r.operand).buffer
        return f"{BRIDGE_NAME}.tensormap:{hash(buffer)}:{r.key}"

    def tensor_map_var(self, r: TensorMap, call: TileCall) -> Any:
        """The kernel's variable for descriptor ``r``: the one an earlier call of the kernel
        got for an equal descriptor over the same buffer, else a new one (encoded on the
        host at commit). TVM's dispatch cache is per kernel and lives across its calls."""
        if self.mode == "lower":
            cached = call.ctx.cache_get(self._tensor_map_key(r, call))
            if cached is not None:
                return cached
        name = f"{call.operand(r.operand).name}_tensormap"
        if self.mode == "lower":  # a second descriptor of the buffer (another box): its
            # own name, for the host's encoding and the kernel's parameter to pair by it
            key = f"{BRIDGE_NAME}.tensormap_name:{name}"
            taken = call.ctx.cache_get(key)  # (the cache holds TVM objects: an IntImm)
            taken = 0 if taken is None else int(taken)
            call.ctx.cache_set(key, tvm.tirx.IntImm("int32", taken + 1))
            name = f"{name}_{taken}" if taken else name
        return tvm.tirx.Var(name, T.handle("tensormap").ty)

    def encode_tensor_map(self, var: Any, r: TensorMap, call: TileCall) -> None:
        key = self._tensor_map_key(r, call)
        if call.ctx.cache_get(key) is None:
            buffer = call.operand(r.operand).buffer
            call.ctx.add_init_stmt(encode_tensor_map(var, buffer, r), host=True)
            call.ctx.cache_set(key, var)

    def prefetch_tensor_map(self, var: Any, r: TensorMap, call: TileCall) -> None:
        key = f"{self._tensor_map_key(r, call)}:prefetch"
        if call.ctx.cache_get(key) is None:
            call.ctx.add_init_stmt(prefetch_tensor_map(var, call.ctx.launch_params), host=False)
            call.ctx.cache_set(key, var)

    @staticmethod
    def _allocation(r: Alignment, call: TileCall) -> Any | None:
        opnd = call.operand(r.operand)
        env = call.enclosing
        return env.allocation_of(opnd.buffer) if env is not None and opnd is not None else None

    def alignment_blocker(self, r: Alignment, call: TileCall) -> str | None:
        if self._allocation(r, call) is None:
            return f"{r.operand}'s allocation is not one the bridge can find in the kernel"
        return None

    def raise_alignment(self, r: Alignment, call: TileCall) -> None:
        self.alignments.append((self._allocation(r, call), r.align))


def raise_alignments(mod: tvm.IRModule, raised: list[tuple[Any, int]]) -> tvm.IRModule:
    """``mod`` with each allocation in ``raised`` (its allocated buffer, bytes) declared
    aligned to at least those bytes: the allocated buffer is rebuilt with the new
    alignment and put wherever the old one was (``tvm_ffi.structural_map``). Allocations
    are found by name, scope, dtype and shape (an IRModule's functions are not the same
    objects from one access to the next); two that match alike are an error asking for
    the ``align=``."""
    if not raised:
        return mod
    out = mod.clone()  # the module's attributes and global infos kept
    for gvar, func in mod.functions.items():
        new: list[tuple[Any, Any]] = []  # (the allocated buffer, it realigned)
        allocs = [n.buffer for n in statements(getattr(func, "body", None))
                  if type(n).__name__ == "AllocBuffer"]  # fmt: skip
        for wanted, align in raised:
            if sum(_same_allocation(b, wanted) for b in allocs) > 1:
                raise VariantError(
                    f"tirx_cuda_dispatch cannot tell which of the allocations named "
                    f"{wanted.name} to align to {align} bytes; declare T.alloc_buffer(..., "
                    f"align={align})"
                )
        for b in allocs:  # each allocation once, to the most any plan asked of it
            align = max((a for w, a in raised if _same_allocation(b, w)), default=0)
            if b.data_alignment < align:
                new.append((b, _realigned(b, align)))

        def swap(buffer: Any, new: list = new) -> Any:
            return next((n for o, n in new if o.same_as(buffer)), buffer)

        if new:
            out.update_func(gvar, tvm_ffi.structural_map(func, (tvm.tirx.Buffer, swap)))
    return out


def _same_allocation(a: Any, b: Any) -> bool:
    return (str(a.name), str(a.scope()), str(a.dtype), [str(x) for x in a.shape]) == (
        str(b.name), str(b.scope()), str(b.dtype), [str(x) for x in b.shape]
    )  # fmt: skip


def _realigned(b: Any, align: int) -> Any:
    """``b`` rebuilt with ``data_alignment = align``; an error (ours) where the rebuild
    would lose one of its fields."""
    fields = dict(
        data=b.data, strides=b.strides, elem_offset=b.elem_offset, scope=b.scope(),
        offset_factor=b.offset_factor, layout=b.layout,
    )  # fmt: skip
    same = tvm.tirx.decl_buffer(b.shape, b.dtype, b.name, data_alignment=b.data_alignment, **fields)
    if not tvm_ffi.structural_equal(same, b, map_free_vars=True):
        raise VariantError(
            f"tirx_cuda_dispatch cannot rebuild buffer {b.name} to raise its alignment to "
            f"{align} bytes (a field the rebuild loses); declare T.alloc_buffer(..., "
            f"align={align})"
        )
    return tvm.tirx.decl_buffer(b.shape, b.dtype, b.name, data_alignment=align, **fields)


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
    scanned = bounds.find(s.bounds, op_call)
    call = TileCall(op_call, sctx, scanned.enclosing if scanned else None)
    try:
        return _dispatch_in_session(s, call, scanned)
    except DispatchFail:
        raise
    except Exception as exc:  # noqa: BLE001  # TVM would swallow it: record, then decline
        if not isinstance(exc, VariantError):
            exc = VariantError(f"tirx_cuda_dispatch failed while dispatching {call}: {exc!r}")
        s.errors.append(exc)
        fail(str(exc))


def _dispatch_in_session(s: Session, call: TileCall, scanned: Any) -> Any:
    out = choose(call, emit=s.mode == "lower", exhaustive=s.mode == "explain", provider=s)
    edges = getattr(out.plan, "edges", None)
    out.bounds = scanned.tolerating(edges()) if scanned and edges else scanned
    s.outcomes.append(out)
    ours = set(names_for(call.op))
    if out.chosen is None and (
        call.forced_variant not in ours or call.forced_variant in builtin_names(call.op)
    ):  # a forced name TVM also has: its variant of that name is the fallback
        out.builtin = probe(call)
        if s.mode == "lower":
            _align_for_builtin_tma(s, call, out)
    out.error = (
        _bounds_error(out, scanned)
        or _undecided_at_dispatch(s, out, scanned)
        or _divergence_error(call)
        or _lowering_error(s, call, out)
    )
    if s.mode == "explain":
        return _noop()
    if out.error is not None:
        s.errors.append(out.error)
        fail(str(out.error))
    if out.chosen is not None:
        return _marked(out.func, len(s.outcomes) - 1, completions_of(out.plan))
    fail("no tirx_cuda_dispatch variant accepted:\n" + out.reasons_table())


def _bounds_error(out: Outcome, scanned: Any) -> DispatchError | None:
    """The call's out-of-bounds error; where a variant might have taken the region past
    the tensor's edge (a TMA box fills or clips there) but none accepted the call, with
    each variant's reason."""
    error = out.bounds.error() if out.bounds else None
    if error is None or out.chosen is not None or not scanned.may_reach_past_edge():
        return error
    return type(error)(f"{error}{_declines(out)}")


def _declines(out: Outcome) -> str:
    """Each variant's reason for declining the call, as lines of an error."""
    return "".join(
        f"\n  {c.variant} declined: {c.reason}" for c in out.candidates if not c.accepted
    )


def _undecided_at_dispatch(s: Session, out: Outcome, scanned: Any) -> DispatchError | None:
    """Undecided global regions of a copy_async that a TMA box could take past the edge
    wait for dispatch (:func:`_not_proved` leaves them): where the chosen plan takes them
    past the edge (its ``edges()``), nothing is left to prove; otherwise they are what
    any undecided region is: an error under the strict pipeline, a warning otherwise;
    where no variant accepted the call, with each variant's reason (the box that would
    take the region past the edge was declined, and why)."""
    if (
        scanned is None
        or not scanned.undecided
        or not scanned.may_reach_past_edge(scanned.undecided)
    ):
        return None
    edges = getattr(out.plan, "edges", None)
    taken = set(edges()) if edges is not None else set()
    if all(o.role in taken for o in scanned.undecided):
        return None
    message = scanned.not_proved()
    if out.chosen is None:  # no variant took it: the declines say why no box does
        message += "\n  and no variant accepts the call:" + _declines(out)
    if s.fallback == "error":
        return bounds.BoundsNotProvedError(message)
    if s.mode == "lower":
        warnings.warn(message, bounds.BoundsNotProvedWarning, stacklevel=2)
    return None


def _marked(func: tvm.tirx.PrimFunc, index: int, completions: tuple[str, ...]) -> Any:
    """The emitted body under an attribute naming the call (its index in explain()'s
    numbering), so that the simulator can say which call an access or a fault came from,
    and one naming the completion mechanisms its plan declares (data the simulator holds
    the call's asynchronous effects to). CUDA codegen emits nothing for an attribute it
    does not know."""
    text = tvm.ir.StringImm("|".join(completions))
    body = tvm.tirx.AttrStmt(tvm.ir.StringImm(COMPLETION_MARK), COMPLETION_MARK, text, func.body)
    body = tvm.tirx.AttrStmt(tvm.ir.StringImm(CALL_MARK), CALL_MARK, index, body)
    return func.with_body(body)


def _divergence_error(call: TileCall) -> DispatchError | None:
    """An enclosing ``if`` provably leaves threads of the call's scope out of it: whichever
    variant lowers the call splits the tile among threads that do not all run it."""
    verdict = call.participation
    if verdict.verdict != "divergent":
        return None
    return DivergentScopeError(
        f"threads left out of a {call.scope}-scope call at {call.location}:\n  {verdict.detail}"
    )


def _lowering_error(s: Session, call: TileCall, out: Outcome) -> DispatchError | None:
    """The error lowering raises for a call none of our variants took, or None when
    TVM's built-in variants take it (and the pipeline lets them)."""
    if out.chosen is not None:
        return None
    ours = set(names_for(call.op))
    shared = call.forced_variant in ours and out.builtin is not None  # TVM has the name too
    if shared and s.fallback == "builtin" and out.builtin.variant is not None:
        unsound = _unsound_fallback(call, out.builtin.variant)
        if unsound is None:
            return None  # TVM's variant of the forced name takes it (explain() says so)
        return DispatchError(_declined_message(out, unsound))
    if call.forced_variant is not None and call.forced_variant in ours:
        why = f"dispatch={call.forced_variant!r} was forced and declined"
        others = choose(call, exhaustive=True, honour_forced=False)
        rest = [c for c in others.candidates if c.variant != call.forced_variant]
        if alias_for(call.op, call.forced_variant) is not None:
            rest = []  # an alias tried every variant: the table above has them all
        message = _declined_message(out, why)
        if rest:
            others.candidates = rest
            message += (
                f"\n  the other variants (not tried: dispatch= forces {call.forced_variant}):\n"
                + others.reasons_table()
            )
        if shared and s.fallback == "builtin":
            message += f"\n  and TVM's built-in {call.forced_variant!r}: {out.builtin}"
        elif shared:
            message += f"\n  without strict mode: {out.builtin}"
        return DispatchError(message)
    if s.fallback == "error":
        why = "no tirx_cuda_dispatch variant accepts this call (strict mode)"
        return DispatchError(f"{_declined_message(out, why)}\n  without strict mode: {out.builtin}")
    if out.builtin is not None and out.builtin.variant is None:
        why = "nothing can lower this call: none of our variants accepts it"
        return DispatchError(f"{_declined_message(out, why)}\n  and {out.builtin}")
    unsound = _unsound_fallback(call, out.builtin.variant if out.builtin else None)
    if unsound is not None:
        return DispatchError(_declined_message(out, unsound))
    return None


def _tma_shared_alignment(call: TileCall) -> tuple[Any, int, int] | None:
    """(the shared operand, the bytes a TMA box there must be aligned to, its element
    offset in the allocation) of a TMA copy: 8 times its layout's swizzle span (1,024
    bytes for 128-byte swizzles), 128 without one; None where the call has no shared
    operand or a layout TMA cannot swizzle by."""
    src, dst = call.operand("src"), call.operand("dst")
    shared = next((o for o in (dst, src) if o is not None and o.memory == "shared"), None)
    if shared is None:
        return None
    try:
        view = memory_view(shared)
    except Exception:  # noqa: BLE001  # a layout the view cannot read: TVM's variant judges
        return None
    span = byte_swizzle(view.swizzle, shared.elem_bits // 8) if view.swizzle else 0
    if span is None:
        return None
    return shared, shared_align(span), view.base


def _align_for_builtin_tma(s: Session, call: TileCall, out: Outcome) -> None:
    """TVM's TMA variant takes the call: the bridge raises the shared allocation to what
    the box needs as it does for ours (TVM's variant does not; its tests' allocations
    are aligned to 64 bytes and work where the compiler happens to place them well)."""
    builtin = getattr(out.builtin, "variant", None)
    found = _tma_shared_alignment(call) if builtin and builtin.startswith("tma") else None
    env = call.enclosing
    if found is None or env is None:
        return
    shared, align, _ = found
    declared = env.alignment_of(shared.buffer)
    allocated = env.allocation_of(shared.buffer)
    if declared is not None and declared < align and allocated is not None:
        s.alignments.append((allocated, align))


def _unsound_fallback(call: TileCall, builtin: str | None) -> str | None:
    """Why TVM 0.27's built-in variant ``builtin`` would lower ``call`` wrong (its own code
    runs, but not what the call asks for), None where it would not."""
    if call.op != "copy_async" or builtin is None:
        return None
    if builtin == "ldgsts" and call.config.get("mbar") is not None:
        return (
            "TVM's built-in 'ldgsts' would take this copy and drop its mbar= (cp.async "
            "completes through cp.async groups, not on an mbarrier), so a wait for mbar's "
            "phase would never complete: fix what tma_auto says below, or copy without mbar= "
            "and wait with cp.async.wait_group"
        )
    if builtin.startswith("tma"):
        found = _tma_shared_alignment(call)
        if found is not None:
            shared, align, base = found
            size = shared.elem_bits // 8
            if not prove_multiple(base, align // size):
                return (
                    f"TVM's built-in {builtin!r} would issue a TMA box at {shared.role} "
                    f"{shared.name}'s element {base}, not provably a multiple of the {align} "
                    f"bytes ({align // size} elements) the box's swizzle needs: the data "
                    "would land permuted; start the region at such a multiple"
                )
        src, dst = call.operand("src"), call.operand("dst")
        store = dst is not None and dst.memory == "global"
        glob = dst if store else src
        if glob is not None:
            ok, why = tma_coordinates(call, glob, store)
            if not ok:
                return f"TVM's built-in {builtin!r} would emit this TMA copy, but {why}"
    op = call.config.get("use_tma_reduce")
    dtype = call.operand("dst").dtype if call.operand("dst") is not None else None
    if op is not None and not reduce_takes(str(op), str(dtype)):
        return (
            f"TVM's built-in {builtin!r} would emit cp.reduce.async.bulk.tensor .{op} on "
            f"{dtype}, which the PTX ISA does not list (ptxas refuses it): reduce with an "
            "operation that takes this type"
        )
    return None


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
    """Make sure TVM's table has a bridge case for every op of TIRx, and one for every
    variant name a call may force (ours and TVM's built-in ones): every call then passes
    through our bridge, so that explain() reports it and a call nothing can lower gets
    our one-line error, whichever op it is."""
    for op in SIGNATURES:
        names = [BRIDGE_NAME, *names_for(op), *builtin_names(op)]
        for name in dict.fromkeys(names):
            if (op, name) in _INSTALLED:
                continue
            active = _active_unforced if name == BRIDGE_NAME else _active_forced(name)
            register_dispatch(
                op,
                "cuda",
                variant=name,
                priority=BRIDGE_PRIORITY,
                when=[predicate(BRIDGE_PREDICATE, active)],
            )(_bridge)
            _INSTALLED.add((op, name))


def run_lower(
    mod: tvm.IRModule, fallback: str = "builtin", mode: str = "lower", realigned: bool = False
) -> tuple:
    """Run TVM's LowerTIRx with our bridge active; returns (module, session). Where plans
    asked the bridge to raise allocations' alignments, the program is lowered once more
    with them raised (``realigned``: this is that second run)."""
    install_bridge()
    with session(fallback=fallback, mode=mode) as s:
        s.bounds = bounds.scan(mod)
        if mode == "lower":
            _raise_bounds_errors(s.bounds)
            _not_proved(s.bounds, strict=fallback == "error")
        target = _module_target(mod)
        if target is not None and target.kind.name != "cuda" and s.bounds:
            return _off_target(mod, s, target), s
        try:
            lowered = tvm.tirx.transform.LowerTIRx()(mod)
        except Exception:
            if s.errors:  # ours, recorded by the bridge: TVM's report of it adds nothing
                raise s.errors[0] from None
            raise
    if s.errors:
        raise s.errors[0]
    if mode == "lower" and s.alignments and not realigned:
        # plans that asked for an allocation's alignment raised: lower the program again
        # with those allocations so declared (its variables are the ones the plans named)
        with warnings.catch_warnings():  # the first run said what the second would
            warnings.simplefilter("ignore", bounds.BoundsNotProvedWarning)
            lowered, again = run_lower(raise_alignments(mod, s.alignments), fallback, mode, True)
        if again.alignments:  # the raise did not reach the allocation
            raise VariantError(
                "tirx_cuda_dispatch raised allocations' alignments and the plans still ask "
                f"for more: {again.alignments}"
            )
        s.outcomes, s.errors = again.outcomes, again.errors
        return lowered, s
    if mode == "lower" and _has_assume(lowered):
        # T.assume states facts our bounds proof read; TVM's codegen cannot lower one.
        # Only where present: the pass also runs RemoveNoOp, which drops the dynamic
        # shared memory size an SMEMPool kernel declares.
        lowered = tvm.tirx.transform.RemoveAssume()(lowered)
    return lowered, s


def _has_assume(mod: tvm.IRModule) -> bool:
    for func in mod.functions.values():
        body = getattr(func, "body", None)
        for stmt in statements(body) if body is not None else ():
            if type(stmt).__name__ == "Evaluate" and bounds.is_assume(stmt.value):
                return True
    return False


def _module_target(mod: tvm.IRModule) -> Any:
    """The target the functions are bound to, else the current target scope's."""
    for func in mod.functions.values():
        attrs = getattr(func, "attrs", None)
        if attrs is not None and "target" in attrs:
            return attrs["target"]
    return tvm.target.Target.current(allow_none=True)


@dataclass
class _OffTargetContext:
    """What a predicate may ask of a call compiled for a target TVM's pass cannot dispatch
    on: the target and the scope (our predicates decline on the target first)."""

    target: Any
    scope_kind: str
    intra: dict = field(default_factory=dict)
    inter: dict = field(default_factory=dict)
    launch_params: dict = field(default_factory=dict)
    var_range_map: dict = field(default_factory=dict)


def _off_target(mod: tvm.IRModule, s: Session, target: Any) -> tvm.IRModule:
    """A module with tile-primitive calls for a non-CUDA target: our variants decline each
    call (their reasons are recorded, as for any call); TVM's own pass then lowers it or
    fails, and its failure becomes our error naming the calls."""
    for cb in s.bounds:
        call = TileCall(cb.node, _OffTargetContext(target, str(cb.node.scope.name)), cb.enclosing)
        out = choose(call, exhaustive=True)
        out.bounds = cb
        s.outcomes.append(out)
    try:
        return tvm.tirx.transform.LowerTIRx()(mod)
    except Exception as exc:  # TVM cannot lower them for this target either
        why = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
        for out in s.outcomes:
            out.error = DispatchError(
                _declined_message(
                    out,
                    f"nothing can lower this call for target "
                    f"{target.kind.name}: none of our variants accepts it",
                )
                + f"\n  and TVM's LowerTIRx fails for {target.kind.name}: {why}"
            )
        if s.mode == "lower":
            raise s.outcomes[0].error from None
        return mod


def _raise_bounds_errors(scanned: list[bounds.CallBounds]) -> None:
    """Every provably out-of-bounds region of the program, in one error; a region a
    variant may take past its buffer's edge (a TMA box) is judged at its dispatch."""
    errors = [
        e for e in (cb.error() for cb in scanned if not cb.may_reach_past_edge()) if e is not None
    ]
    if len(errors) == 1:
        raise errors[0]
    if errors:
        raise bounds.OutOfBoundsError("\n".join(str(e) for e in errors))


def _not_proved(scanned: list[bounds.CallBounds], strict: bool) -> None:
    """Regions the analyzer could not decide (nor a TMA box take past the edge): under the
    strict pipeline an error naming each with the fact that would prove it; otherwise one
    warning per kernel (explain() lists them all)."""
    open_ = [
        cb
        for cb in scanned
        if cb.undecided and not cb.may_reach_past_edge(cb.undecided)  # TMA: at dispatch
    ]
    if not open_:
        return
    if strict:
        raise bounds.BoundsNotProvedError("\n".join(cb.not_proved() for cb in open_))
    kernels: dict[int, list[bounds.CallBounds]] = {}
    for cb in open_:
        kernels.setdefault(id(cb.enclosing.function), []).append(cb)
    for calls in kernels.values():
        attrs = calls[0].enclosing.function.attrs
        name = attrs.get("global_symbol", "kernel") if attrs is not None else "kernel"
        more = (
            f" (and {len(calls) - 1} more call(s): explain() lists them)" if len(calls) > 1 else ""
        )
        warnings.warn(
            f"{name}: {calls[0].not_proved()}{more}", bounds.BoundsNotProvedWarning, stacklevel=2
        )


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
