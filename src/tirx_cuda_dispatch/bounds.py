"""Every operand region of every tile-primitive call lies inside its buffer.

TVM's parser does not check regions, and a variant lowers what it is given: a region past
the end of its buffer would become a kernel that reads or writes foreign memory. So before
dispatch, whichever variant would lower the call, each operand is given one of three
verdicts:

- ``in bounds``: TVM's arithmetic analyzer proves ``0 <= start`` and ``start + extent <=
  shape`` on every axis, over the ranges of the thread, warp and CTA ids
  (``T.cta_id([n])`` bounds ``bx`` to ``[0, n)``), the enclosing loops and lets, and
  under the conditions of the enclosing ``if``\\s;
- ``out of bounds``: a concrete assignment of those variables that satisfies the enclosing
  conditions puts the region past the buffer (found by evaluating the start at the
  corners of the variables' ranges); lowering raises :class:`OutOfBoundsError` naming
  the buffer, the axis, the region, the extent and the source line;
- ``undecided``: neither could be shown; explain() says so for that operand.
"""

from __future__ import annotations

import itertools
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

import tvm
import tvm_ffi
from tvm import sym
from tvm.tirx import IntImm, Var
from tvm.tirx.layout import ComposeLayout, TileLayout

from .errors import DispatchError
from .irfacts import (
    BINARY_NODES,
    BarrierReduction,
    Location,
    as_int,
    barrier_reduction,
    buffer_var,
    loaded_buffer,
    location_of,
    replace_leaves,
    runs_cta_barrier,
    scope_id_kind,
    statements,
    subexpressions,
)
from .layout.atoms import static_size
from .signatures import signature_or_positional

MAX_CORNER_VARS = 8  # 2**8 corner assignments at most per expression


@tvm_ffi.register_error
class OutOfBoundsError(DispatchError):
    """A tile-primitive operand's region provably lies (partly) outside its buffer."""


@tvm_ffi.register_error
class BoundsNotProvedError(DispatchError):
    """Strict pipeline: a region the analyzer could neither prove inside its buffer nor
    show outside it; the message names the fact that would prove it."""


class BoundsNotProvedWarning(UserWarning):
    """Default pipeline: a kernel has regions not proved inside their buffers (one warning
    per kernel; explain() lists each)."""


@dataclass(frozen=True)
class OperandBounds:
    """One operand's verdict: ``in bounds``, ``out of bounds`` or ``undecided``."""

    role: str
    buffer: str
    region: str
    verdict: str
    detail: str | None = None
    # undecided: the condition that would prove it (``0 <= n * 2 and n * 2 + 2 <= 8``)
    fact: str | None = None

    def __str__(self) -> str:
        text = f"{self.role} {self.region}: {self.verdict}"
        return f"{text} ({self.detail})" if self.detail else text


@dataclass(frozen=True)
class CallBounds:
    """The verdicts of one call's operands, with the call's source location."""

    node: Any = field(repr=False, compare=False)  # the TilePrimitiveCall
    location: Location
    operands: tuple[OperandBounds, ...]
    enclosing: Enclosing | None = field(default=None, repr=False, compare=False)

    @property
    def violations(self) -> list[OperandBounds]:
        return [o for o in self.operands if o.verdict == "out of bounds"]

    @property
    def past_edge(self) -> list[OperandBounds]:
        """Operands whose region reaches past the buffer where the chosen variant's
        hardware handles it (a TMA box: zero fill, clipping)."""
        return [o for o in self.operands if o.verdict.startswith("past the edge")]

    def may_reach_past_edge(self, verdicts: list[OperandBounds] | None = None) -> bool:
        """Whether every violation (or every one of ``verdicts``: the undecided ones) lies
        where a variant could take it past the edge: the global operand of a
        ``copy_async`` between global and shared memory (a TMA box), so the verdict waits
        for dispatch (:meth:`tolerating`)."""
        judged = self.violations if verdicts is None else verdicts
        if not judged or str(self.node.op.name) != "tirx.tile.copy_async":
            return False
        scopes = {o.role: buffer_scope(self.node, o.role) for o in self.operands}
        pair = {scopes.get("dst"), scopes.get("src")}
        shared = {s for s in pair if s and s.startswith("shared")}
        return (
            bool(shared)
            and "global" in pair
            and all(scopes.get(o.role) == "global" for o in judged)
        )

    def tolerating(self, roles: dict[str, str]) -> CallBounds:
        """These verdicts with the regions of ``roles`` (role -> what the hardware does
        there) that reach past their buffers, or may (undecided), marked "past the edge"
        instead of out of bounds or undecided: the chosen variant's plan handles them."""

        def marked(o: OperandBounds) -> OperandBounds:
            if o.role not in roles or o.verdict not in ("out of bounds", "undecided"):
                return o
            may = " where it reaches past (not decided whether it does)"
            verdict = f"past the edge: {roles[o.role]}{may if o.verdict == 'undecided' else ''}"
            return OperandBounds(o.role, o.buffer, o.region, verdict, o.detail)

        ops = tuple(marked(o) for o in self.operands)
        return CallBounds(self.node, self.location, ops, self.enclosing)

    @property
    def undecided(self) -> list[OperandBounds]:
        return [o for o in self.operands if o.verdict == "undecided"]

    def not_proved(self) -> str | None:
        """The undecided regions of this call with the fact that would prove each, as the
        lines of an error or warning; None when every region is decided."""
        if not self.undecided:
            return None
        lines = "".join(f"\n  {o.region}: {o.detail}" for o in self.undecided)
        facts = " and ".join(dict.fromkeys(o.fact for o in self.undecided if o.fact))
        return (
            f"region not proved in bounds at {self.location}{lines}\n"
            f"  state what keeps it inside before the call, T.assume({facts}), or bound "
            "its variables by a loop, an if or the extent of T.cta_id"
        )

    def error(self) -> OutOfBoundsError | None:
        """The error lowering raises for this call, or None when nothing is provably out."""
        bad = self.violations
        if not bad:
            return None
        lines = "\n".join(f"  {o.region}: {o.detail}" for o in bad)
        names = ", ".join(sorted({o.buffer for o in bad}))
        return OutOfBoundsError(
            f"region out of bounds at {self.location}\n{lines}\n"
            f"  keep the region inside the shape of {names}, or declare the buffer larger"
        )


@dataclass
class Enclosing:
    """What is known where a call stands: variable ranges, let values, the conditions of
    the enclosing ``if``\\s, and TVM's scope ids with their kinds (``T.lane_id``: lane
    ids of a warp's threads, ("warp", "thread"))."""

    ranges: list[tuple[Var, int, int, int]] = field(default_factory=list)  # var, lo, hi, step
    symbolic: list[tuple[Var, Any, Any]] = field(default_factory=list)  # var, min, extent
    lets: list[tuple[Var, Any]] = field(default_factory=list)
    conditions: list[Any] = field(default_factory=list)
    scope_ids: list[tuple[Var, tuple[str, str]]] = field(default_factory=list)
    # (buffer, the data its DeclBuffer names): T.decl_buffer(data=X.data), SMEMPool buffers
    declared: list[tuple[Var, Any]] = field(default_factory=list)
    # (buffer, bytes): the allocations in scope and the alignment each declares
    allocated: list[tuple[Var, int]] = field(default_factory=list)
    # the loops around the call, innermost last: For and While statements
    loops: list[Any] = field(default_factory=list)
    function: Any = None  # the PrimFunc the call is in
    # (buffer, value): register scalars (``n0 = tn * BN`` in TVMScript: a local buffer of one
    # element) stored at one place only in the function, and the value stored there
    scalars: list[tuple[Any, Any]] = field(default_factory=list)
    stored_once: tuple[Any, ...] = ()  # the function's buffers with one store each
    # (data var, buffer): every allocated or declared buffer in scope, to size the memory a
    # declaration lies in (a tile carved from a pool's allocation)
    buffers: list[tuple[Var, Any]] = field(default_factory=list)
    votes: tuple[BarrierVote, ...] = ()  # the function's registers only bar.red writes

    def snapshot(self) -> Enclosing:
        return Enclosing(
            list(self.ranges),
            list(self.symbolic),
            list(self.lets),
            list(self.conditions),
            list(self.scope_ids),
            list(self.declared),
            list(self.allocated),
            list(self.loops),
            self.function,
            list(self.scalars),
            self.stored_once,
            list(self.buffers),
            self.votes,
        )

    @property
    def repeats(self) -> bool:
        """Whether the call may run again before every thread of the CTA has passed a
        ``__syncthreads`` since it last ran: some loop around it runs its body more than
        once (a For of constant extent 1 does not), and the innermost such loop's body
        holds no CTA barrier that every one of its iterations runs."""
        looping = [loop for loop in self.loops if as_int(getattr(loop, "extent", None)) != 1]
        return bool(looping) and not runs_cta_barrier(looping[-1].body)

    def alignment_of(self, buffer: Any) -> int | None:
        """The alignment in bytes declared for the allocation ``buffer`` lies in
        (``T.alloc_buffer(..., align=N)``), None where that allocation is not in scope."""
        var = self.storage_of(buffer)
        if var is None:
            return None
        return next((a for v, a in reversed(self.allocated) if v.same_as(var)), None)

    def allocation_of(self, buffer: Any) -> Any | None:
        """The buffer allocated in the kernel (``T.alloc_buffer``) that ``buffer``'s memory
        lies in: itself, or the pool a declaration is carved from; None where that memory
        is not allocated in scope (a parameter, a handle)."""
        var = self.storage_of(buffer)
        if var is None or not any(v.same_as(var) for v, _ in self.allocated):
            return None
        return next((b for v, b in self.buffers if v.same_as(var)), None)  # allocated first

    def storage_of(self, buffer: Any) -> Var | None:
        """The buffer whose memory ``buffer`` lies in: the allocation or parameter at the
        end of its chain of declarations (``Y = pool.alloc(...)``: the pool's buffer;
        ``T.decl_buffer(..., data=X.data)``: X's storage); None where a declaration's
        data is not another buffer's data."""
        var = buffer_var(buffer.data)
        for _ in range(len(self.declared) + 1):
            if var is None:
                return None
            data = next((d for v, d in reversed(self.declared) if v.same_as(var)), None)
            if data is None:
                return var
            var = buffer_var(data)
        return None


def buffer_scope(node: Any, role: str) -> str | None:
    """The memory scope of the buffer of ``node``'s operand ``role`` (None: no such)."""
    op = str(node.op.name).removeprefix("tirx.tile.")
    params = signature_or_positional(op, len(node.args)).params_for(len(node.args))
    for param, arg in zip(params, node.args, strict=False):
        if param.name == role:
            source = getattr(arg, "source", None)
            return None if source is None else str(source.scope())
    return None


def scan(mod_or_func: Any) -> list[CallBounds]:
    """The verdicts of every tile-primitive call of a PrimFunc or IRModule, in program order."""
    funcs = (
        list(mod_or_func.functions.values())
        if isinstance(mod_or_func, tvm.IRModule)
        else [mod_or_func]
    )
    out: list[CallBounds] = []
    for func in funcs:
        if isinstance(func, tvm.tirx.PrimFunc):
            env = Enclosing(
                function=func,
                stored_once=_stored_once(func.body),
                votes=barrier_votes(func.body),
            )
            _walk(func.body, env, out)
    return out


def find(scanned: list[CallBounds], node: Any) -> CallBounds | None:
    """The verdicts :func:`scan` gave the call ``node`` (the same IR object), if any."""
    for cb in scanned:
        if cb.node.same_as(node):
            return cb
    return None


# -- the walk ----------------------------------------------------------------------------
def _walk(stmt: Any, env: Enclosing, out: list[CallBounds]) -> None:
    kind = type(stmt).__name__
    if kind == "SeqStmt":
        scope = env.snapshot()  # ids, lets and buffers declared in a sequence last to its end
        for s in stmt.seq:
            _walk(s, scope, out)
    elif kind == "TilePrimitiveCall":
        out.append(check_call(stmt, env))
    elif kind == "ScopeIdDefStmt":
        d = getattr(stmt, "def")
        kind = scope_id_kind(d) if len(d.def_ids) == 1 else ("?", "?")
        for var, ext in zip(d.def_ids, d.extents, strict=False):
            _add_range(env, var, 0, ext, 1)
            env.scope_ids.append((var, kind))
    elif kind == "For":
        inner = env.snapshot()
        step = 1 if stmt.step is None else stmt.step
        _add_range(inner, stmt.loop_var, stmt.min, stmt.extent, step)
        ext_i = as_int(stmt.extent)
        if ext_i is None or ext_i <= 0:  # the body runs only where the loop has a trip:
            # one of no trips (T.serial(1, n) where n is 1) holds no region at all
            inner.conditions.append(tvm.tirx.GT(stmt.extent, 0))
        inner.loops.append(stmt)
        _walk(stmt.body, inner, out)
    elif kind == "Bind":
        # integer lets only: the analyzer binds those (a handle let, such as a pointer
        # a helper returns or a descriptor, says nothing about regions and cannot be bound)
        if str(stmt.var.ty).startswith(("int", "uint", "bool")):
            env.lets.append((stmt.var, stmt.value))
    elif kind == "BufferStore":
        buf = stmt.buffer
        if (
            _is_register_scalar(buf)
            and any(b.same_as(buf) for b in env.stored_once)
            and not _reads(stmt.value, buf)
        ):
            env.scalars.append((buf, resolve_scalars(stmt.value, env)))
    elif kind == "Evaluate" and is_assume(stmt.value):
        env.conditions.append(stmt.value.args[0])  # T.assume(cond): holds from here on
    elif kind == "AllocBuffer":
        var = buffer_var(stmt.buffer.data)
        if var is not None:
            env.allocated.append((var, int(stmt.buffer.data_alignment)))
            env.buffers.append((var, stmt.buffer))
    elif kind == "DeclBuffer":
        var = buffer_var(stmt.buffer.data)
        if var is not None:
            env.declared.append((var, stmt.data))
            env.buffers.append((var, stmt.buffer))
    elif kind == "IfThenElse":
        then_env = env.snapshot()
        then_env.conditions.append(stmt.condition)
        _walk(stmt.then_case, then_env, out)
        if stmt.else_case is not None:
            else_env = env.snapshot()
            else_env.conditions.append(tvm.tirx.Not(stmt.condition))
            _walk(stmt.else_case, else_env, out)
    elif kind == "While":  # runs its body any number of times
        inner = env.snapshot()
        inner.loops.append(stmt)
        _walk(stmt.body, inner, out)
    else:  # AttrStmt, ...: no facts of their own; their bodies may hold calls
        body = getattr(stmt, "body", None)
        if body is not None:
            _walk(body, env.snapshot(), out)


def is_assume(value: Any) -> bool:
    """Whether an evaluated expression is ``T.assume(cond)``."""
    op = getattr(value, "op", None)
    return op is not None and str(getattr(op, "name", "")) == "tirx.assume"


def _add_range(env: Enclosing, var: Var, lo: Any, extent: Any, step: Any) -> None:
    lo_i, ext_i, step_i = as_int(lo), as_int(extent), as_int(step)
    if lo_i is not None and ext_i is not None and step_i is not None and ext_i > 0:
        env.ranges.append((var, lo_i, lo_i + (ext_i - 1) * step_i + 1, step_i))
    else:
        env.symbolic.append((var, lo, extent))


# -- one call ----------------------------------------------------------------------------
def check_call(node: Any, env: Enclosing) -> CallBounds:
    """Verdicts for the tensor operands (regions and scalar element reads) of one call."""
    operands = []
    op = str(node.op.name).removeprefix("tirx.tile.")
    params = signature_or_positional(op, len(node.args)).params_for(len(node.args))
    for i, arg in enumerate(node.args):
        role = params[i].name if i < len(params) else f"arg{i}"
        source = getattr(arg, "source", None)
        if not isinstance(source, tvm.tirx.Buffer):
            continue
        if hasattr(arg, "region"):
            spans = [(r.min, r.extent) for r in arg.region]
        elif hasattr(arg, "indices"):
            spans = [(ix, 1) for ix in arg.indices]
        else:
            continue
        operands.append(_operand(role, source, spans, env))
    return CallBounds(node, location_of(node), tuple(operands), env.snapshot())


def _operand(role: str, buf: Any, spans: list[tuple[Any, Any]], env: Enclosing) -> OperandBounds:
    name = str(buf.name)
    text = f"{name}[{', '.join(_span_text(lo, ext) for lo, ext in spans)}]"
    shape = list(buf.shape)
    overhang = _layout_overhang(buf, env)
    if overhang is not None:
        return OperandBounds(role, name, text, "out of bounds", overhang)
    if len(spans) != len(shape):
        detail = f"{len(spans)} indices for a {len(shape)}-d buffer of shape {_shape_text(shape)}"
        return OperandBounds(role, name, text, "out of bounds", detail)
    undecided, facts = [], []
    for axis, ((lo, ext), n) in enumerate(zip(spans, shape, strict=True)):
        verdict, detail = _axis(lo, ext, n, env)
        if verdict == "out of bounds":
            full = (
                f"axis {axis} runs {_span_text(lo, ext)}{detail}, outside the extent {n} of "
                f"{name} on that axis (shape {_shape_text(shape)})"
            )
            return OperandBounds(role, name, text, verdict, full)
        if verdict == "undecided":
            undecided.append(f"axis {axis}: {detail}")
            lo_r = resolve_scalars(_expr(lo), env)
            hi_r = lo_r + resolve_scalars(_expr(ext), env)
            facts.append(f"0 <= {lo_r} and {sym.Analyzer().simplify(hi_r)} <= {n}")
    if undecided:
        fact = " and ".join(facts)
        return OperandBounds(role, name, text, "undecided", "; ".join(undecided), fact)
    return OperandBounds(role, name, text, "in bounds")


def carved_room(buf: Any, env: Enclosing) -> tuple[bool, int | None]:
    """Whether ``buf`` is declared over another buffer's memory (``T.decl_buffer(data=
    X.data)``, a tile carved from a pool's allocation), and then how many of its elements
    that memory holds from its start (None where the parent's size is not known: an
    SMEMPool's placeholder allocation, sized at commit)."""
    var = buffer_var(buf.data)
    data = next((d for v, d in reversed(env.declared) if var is not None and v.same_as(var)), None)
    parent_var = buffer_var(data) if data is not None else None
    if parent_var is None:
        return False, None
    parent = next((b for v, b in reversed(env.buffers) if v.same_as(parent_var)), None)
    size = static_size(parent.shape) if parent is not None else None
    offset, elem = as_int(buf.elem_offset), tvm.DataType(str(buf.dtype)).bits
    if not size or offset is None or elem < 8:
        return True, None
    nbytes = size * tvm.DataType(str(parent.dtype)).bits // 8
    return True, nbytes // (elem // 8) - offset


def _layout_overhang(buf: Any, env: Enclosing | None = None) -> str | None:
    """A memory layout must describe its buffer: as many elements as the shape has (a
    swizzle atom that does not tile the shape covers fewer, and every lowering then moves
    the wrong elements), and, where the kernel allocates the buffer, no padding past the
    allocation: TVM 0.27 allocates a shared or local buffer by its shape, not by its
    layout's span (a padded layout on an ``(8, 16)`` buffer addresses past the 128 elements
    the kernel allocates, whichever variant lowers the copy). A global buffer's memory is
    the caller's: a strided layout on a parameter (``S[(4, 4):(16, 1)]``, rows of a wider
    tensor) may span past its shape. A local buffer whose layout has thread axes spreads
    its shape over threads: its registers are checked per thread
    (:func:`_registers_overhang`). Says what is wrong, or None when the layout fits."""
    scope = str(buf.scope())
    shared = scope.startswith("shared")
    if buf.layout is None or not (shared or scope in ("global", "local")):
        return None
    layout = buf.layout
    tile = layout.tile_layout if isinstance(layout, ComposeLayout) else layout
    if not isinstance(tile, TileLayout) or len(tile.replica) > 0:
        return None
    if scope == "local" and _names_threads(tile):
        return _registers_overhang(buf, tile, env)
    covered, size = as_int(tile.size()), static_size(buf.shape)
    # A one-dimensional contiguous layout (``S[512:1]``, swizzled or not) extends linearly
    # past its extent, so it describes any shape; a multi-dimensional one does not.
    linear = len(tile.shard) == 1 and as_int(tile.shard[0].stride) == 1
    if covered is not None and size is not None and covered != size and not linear:
        return (
            f"its layout {str(layout).replace('T.', '')} covers {covered} elements but "
            f"{buf.name} has {size} (shape {_shape_text(list(buf.shape))}): give the buffer a "
            "layout of its own shape"
        )
    if scope == "global":
        return None
    span = as_int(tile.span())
    if span is None or size is None or span <= size:
        return None
    carved, room = carved_room(buf, env) if env is not None else (False, None)
    if carved and (room is None or span <= room):
        return None  # the memory it is declared over holds the padding (or cannot be sized)
    if carved:
        return (
            f"its layout {str(layout).replace('T.', '')} spans {span} elements but the memory "
            f"{buf.name} is declared over holds {room} from its start: declare that allocation "
            "larger"
        )
    return (
        f"its layout {str(layout).replace('T.', '')} spans {span} elements but {buf.name} "
        f"holds {size} (shape {_shape_text(list(buf.shape))}; TVM allocates a {scope} buffer "
        "by its shape): declare the buffer with a shape that covers the padding"
    )


def _names_threads(layout: Any) -> bool:
    """Whether a local buffer's layout spreads it over threads (an axis other than the
    register axis ``m``)."""
    return any(str(it.axis.name) != "m" for it in getattr(layout, "shard", ()))


def _registers_overhang(buf: Any, tile: TileLayout, env: Enclosing | None) -> str | None:
    """A register view spread over threads (``R.view(128, 16, layout=...)`` with thread
    axes, declared over ``R``'s registers) must name registers the allocation it lies in
    has in every thread: from the view's first (its ``elem_offset`` into the allocation)
    to below the allocation's end. Says which it names past them, or None (also where the
    allocation's registers a thread cannot be counted: a parameter, a thread-axes
    allocation, sub-byte elements)."""
    alloc = env.allocation_of(buf) if env is not None else None
    if alloc is None or alloc.same_as(buf) or _names_threads(alloc.layout):
        return None
    size, offset = static_size(alloc.shape), as_int(buf.elem_offset)
    a_type, v_type = tvm.DataType(str(alloc.dtype)), tvm.DataType(str(buf.dtype))
    elem_bits = v_type.bits * v_type.lanes
    regs = [(as_int(it.extent), as_int(it.stride)) for it in tile.shard if str(it.axis.name) == "m"]
    first = next((as_int(v) for a, v in tile.offset.items() if str(a.name) == "m"), 0)
    if size is None or offset is None or first is None or elem_bits % 8:
        return None
    if any(e is None or st is None for e, st in regs):
        return None
    room = size * a_type.bits * a_type.lanes // elem_bits - offset  # from the view's first
    low = first + sum((e - 1) * st for e, st in regs if st < 0)
    high = first + sum((e - 1) * st for e, st in regs if st > 0)
    names = (
        f"its layout {str(buf.layout).replace('T.', '')} names registers {low} to {high} "
        f"({buf.dtype} elements from {buf.name}'s first) of each thread"
    )
    if low < 0:
        return f"{names}, {-low} before its first: give the layout an offset of {-low} or more"
    if high < room:
        return None
    return (
        f"{names}, but {alloc.name} holds {max(room, 0)} from there: keep the view's "
        f"registers inside them, or allocate {alloc.name} larger"
    )


def _axis(lo: Any, ext: Any, n: Any, env: Enclosing) -> tuple[str, str | None]:
    """``(verdict, detail)`` for one axis: ``0 <= lo`` and ``lo + ext <= n``, register
    scalars stored once read as their values (``r0 = bx * rows`` then ``X[r0 : r0 + rows]``)."""
    lo, ext = resolve_scalars(_expr(lo), env), resolve_scalars(_expr(ext), env)
    lo_e, hi_e = lo, lo + ext
    n_e = _expr(n)
    with ExitStack() as stack:
        ana = _analyzer(env, stack)
        if ana.can_prove(lo_e >= 0) and ana.can_prove(hi_e <= n_e):
            return "in bounds", None
    narrowed = _narrowed(env) if env.conditions else None
    if narrowed is not None:  # the enclosing conditions narrow a loop or id range
        with ExitStack() as stack:
            ana = _analyzer(narrowed, stack)
            if ana.can_prove(lo_e >= 0) and ana.can_prove(hi_e <= n_e):
                return "in bounds", None
    if env.conditions and _implied([lo_e >= 0, hi_e <= n_e], narrowed or env):
        return "in bounds", None
    witness = _witness(lo_e, hi_e, n_e, narrowed or env)
    if witness is not None:
        return "out of bounds", witness
    if env.conditions and _unreachable(narrowed or env):
        return "in bounds", None  # no thread ever runs it: the enclosing ifs exclude each other
    return "undecided", (
        f"cannot prove 0 <= {lo} and {lo} + {ext} <= {n} over the ranges of {_vars_text(lo_e, env)}"
    )


def _is_register_scalar(buf: Any) -> bool:
    return str(buf.scope()) == "local" and [as_int(d) for d in buf.shape] == [1]


def _stored_once(body: Any) -> tuple[Any, ...]:
    """The buffers that exactly one store statement of ``body`` writes and nothing else may
    write: not a tile primitive's operand region (``Tx.thread.copy(R[0:1], ...)``), not an
    address or a data pointer handed to a call or a view (``R.ptr_to``, ``R.data``), not
    a buffer another declaration aliases (``T.decl_buffer(..., data=R.data)``), not an
    element passed to a call statement, which may be its destination (``T.ptx[
    "mov.u32"](R[0], x)``, a ``.pred`` result, ``bar.red``)."""
    stored, escaped, votes = _writes(body)
    escaped += [buf for buf, _ in votes]
    return tuple(
        b
        for b in stored
        if sum(1 for o in stored if o.same_as(b)) == 1 and not _escapes(b, escaped)
    )


@dataclass(frozen=True)
class BarrierVote:
    """A register that only barrier reductions write (``bar.red.or.pred v[0], id, b, p``):
    every thread that completed one generation of the barrier together holds the same
    value. ``threads``: the thread count ``b`` (None: the CTA's, ``b`` not given);
    ``aligned``: every writing instruction is ``.aligned`` (``bar.red`` always is), so a
    warp takes part whole."""

    buffer: Any
    threads: int | None
    aligned: bool


def barrier_votes(body: Any) -> tuple[BarrierVote, ...]:
    """The register scalars of ``body`` (local, one element) that barrier reductions write
    and nothing else may (no store, no tile primitive, no address handed on, no aliasing
    declaration, no other call), all with one constant thread count (or all without)."""
    stored, escaped, votes = _writes(body)
    found: list[BarrierVote] = []
    for buf, _ in votes:
        if (
            not _is_register_scalar(buf)
            or any(b.same_as(buf) for b in stored)
            or _escapes(buf, escaped)
            or any(v.buffer.same_as(buf) for v in found)
        ):
            continue
        reds = [r for b, r in votes if b.same_as(buf)]
        counts = {None if r.threads is None else as_int(r.threads) for r in reds}
        if len(counts) != 1 or any(
            r.threads is not None and as_int(r.threads) is None for r in reds
        ):
            continue  # counts that differ, or one that is not a constant
        found.append(BarrierVote(buf, counts.pop(), all(r.aligned for r in reds)))
    return tuple(found)


def _writes(body: Any) -> tuple[list[Any], list[Any], list[tuple[Any, BarrierReduction]]]:
    """Who may write which buffers in ``body``: the buffers of its store statements (once
    per store), those something else may write (a tile primitive's region, an address or
    data pointer handed on, an element passed to a call statement; and the data variable a
    declaration aliases: every buffer over it) and the barrier reductions with the
    buffer each writes (their other arguments count as handed on)."""
    stored: list[Any] = []
    escaped: list[Any] = []
    votes: list[tuple[Any, BarrierReduction]] = []
    for n in statements(body):
        kind = type(n).__name__
        if kind == "BufferStore":
            stored.append(n.buffer)
            escaped += _referenced(n.value)
        elif kind == "TilePrimitiveCall":
            escaped += [a.source for a in n.args if type(a).__name__ == "TensorRegion"]
        elif kind == "Evaluate":  # a call's register argument may be its destination
            red = barrier_reduction(n.value)
            dest = None if red is None else loaded_buffer(red.destination)
            if dest is not None:
                votes.append((dest, red))
                for a in n.value.args[1:]:
                    escaped += _referenced(a) + [b for b in [loaded_buffer(a)] if b is not None]
            else:
                escaped += _referenced(n.value) + _arguments(n.value)
        elif kind == "DeclBuffer":  # a declaration over another buffer's data: both alias
            aliased = _referenced(n.data) if n.data is not None else []
            escaped += aliased + ([n.buffer] if aliased else [])
    return stored, escaped, votes


def _escapes(buf: Any, escaped: list[Any]) -> bool:
    """Whether something in ``escaped`` (buffers, or the variables their data names) may
    write ``buf``."""
    var = buffer_var(buf.data)
    return any(e.same_as(buf) or (var is not None and e.same_as(var)) for e in escaped)


def _arguments(expr: Any) -> list[Any]:
    """The buffers whose elements a call statement takes as arguments (``T.ptx`` writes its
    destinations through them)."""
    args = getattr(expr, "args", None) if getattr(expr, "op", None) is not None else None
    return [b for b in (loaded_buffer(a) for a in args or ()) if b is not None]


def _referenced(expr: Any) -> list[Any]:
    """The buffers ``expr`` hands on other than by a scalar load: ``address_of(X[i])`` and
    ``buffer_data(X)`` (``X.ptr_to``, ``X.data``), anywhere inside calls."""
    found = []
    for node in subexpressions(expr):
        name = getattr(getattr(node, "op", None), "name", None)
        if name == "tirx.address_of" and node.args:
            buf = loaded_buffer(node.args[0])
            found += [buf] if buf is not None else []
        elif name == "tirx.buffer_data" and node.args:
            found.append(node.args[0])
    return found


def _reads(expr: Any, buf: Any) -> bool:
    loaded = loaded_buffer(expr)
    if loaded is not None:
        return loaded.same_as(buf)
    if type(expr).__name__ in BINARY_NODES:
        return _reads(expr.a, buf) or _reads(expr.b, buf)
    value = getattr(expr, "value", None)
    return isinstance(value, tvm.ir.expr.Expr) and _reads(value, buf)


def resolve_scalars(expr: Any, env: Enclosing | None) -> Any:
    """``expr`` with each load of a register scalar that one store writes (``env.scalars``)
    replaced by the value stored (what it holds wherever it has been written), through
    arithmetic, comparisons, negations and casts; other expressions as they are."""
    if env is None or not env.scalars or isinstance(expr, (bool, int)):
        return expr

    def stored(node: Any) -> Any:
        loaded = loaded_buffer(node)
        if loaded is None:
            return None
        return next((v for b, v in reversed(env.scalars) if b.same_as(loaded)), node)

    return replace_leaves(expr, stored)


def proves(condition: Any, env: Enclosing | None) -> bool:
    """Whether ``condition`` (a TIR boolean expression, or a bool) holds wherever the code
    ``env`` describes runs (its loop and scope-id ranges, lets, enclosing conditions and
    the values of register scalars stored once: :func:`resolve_scalars`)."""
    if isinstance(condition, bool):
        return condition
    condition = resolve_scalars(condition, env)
    with ExitStack() as stack:
        ana = _analyzer(env, stack) if env is not None else sym.Analyzer()
        return bool(ana.can_prove(condition))


def _analyzer(env: Enclosing, stack: ExitStack) -> sym.Analyzer:
    ana = sym.Analyzer()
    for var, lo, hi, _ in env.ranges:
        ana.bind(var, tvm.ir.Range(lo, hi))
    for var, lo, ext in env.symbolic:
        ana.bind(var, tvm.ir.Range.from_min_extent(lo, ext))
    for var, value in env.lets:
        ana.bind(var, value)
    for cond in env.conditions:
        stack.enter_context(ana.constraint_scope(cond))
    return ana


def _implied(goals: list[Any], env: Enclosing) -> bool:
    """Whether the enclosing conditions imply each goal over the ranges: ``not (c1 and
    ...) or goal`` proved without the conditions as constraints. TVM's analyzer does not
    read a condition on a sum as a fact about it (under ``if hx + i * 2 < 3`` it cannot
    prove ``hx + i * 2 + 1 <= 3``), but simplifies the disjunction to true. Where the
    conjunction is too much for it (a condition on a call, ``__any_sync(...) != 0``, among
    them), each condition alone is tried: one that implies the goal is enough."""
    both = env.conditions[0]
    for cond in env.conditions[1:]:
        both = tvm.tirx.And(both, cond)
    with ExitStack() as stack:
        ana = _analyzer(_ranges_only(env), stack)
        return all(
            ana.can_prove(tvm.tirx.Or(tvm.tirx.Not(both), g))
            or any(ana.can_prove(tvm.tirx.Or(tvm.tirx.Not(c), g)) for c in env.conditions)
            for g in goals
        )


def _ranges_only(env: Enclosing) -> Enclosing:
    """``env`` without its conditions: under a condition the analyzer simplifies that
    condition itself to true."""
    plain = env.snapshot()
    plain.conditions = []
    return plain


def _unreachable(env: Enclosing) -> bool:
    """The enclosing conditions provably never hold together over the ranges (the full-tile
    branch of an edge tile where the grid has one tile: ``if bn == gn - 1`` is always true,
    so its ``else`` never runs)."""
    both = env.conditions[0]
    for cond in env.conditions[1:]:
        both = tvm.tirx.And(both, cond)
    with ExitStack() as stack:
        return bool(_analyzer(_ranges_only(env), stack).can_prove(tvm.tirx.Not(both)))


_UNBOUNDED = (-(2**62), 2**62)


def _narrowed(env: Enclosing) -> Enclosing | None:
    """``env`` with each variable's range narrowed by the enclosing conditions that
    simplify to a comparison of it with a constant (``if kt + 1 < 3`` over ``kt`` in
    [0, 3): ``kt < 2``, so [0, 2)); TVM's analyzer proves ``kt < 2`` under that condition
    but does not narrow ``kt``'s bound by it, so ``(kt + 1) * 64 + 64 <= 192`` stays
    unproved without this. A kernel parameter both of whose ends the conditions state
    (``T.assume(0 <= n and n < 4)``) gets a range. None where no range narrows."""
    with ExitStack() as stack:
        ana = _analyzer(_ranges_only(env), stack)
        conditions = [ana.simplify(cond) for cond in env.conditions]
        # a loop of symbolic extent (``T.serial(T.min(qb + 1, 3))``) within a constant
        # hull: narrowed like a constant range, its symbolic ends kept as conditions
        hulls = {}
        for var, lo, ext in env.symbolic:
            first, end = ana.const_int_bound(lo), ana.const_int_bound(lo + ext)
            if _UNBOUNDED[0] < first.min_value and end.max_value < _UNBOUNDED[1]:
                hulls[var] = (first.min_value, end.max_value, lo, ext)
    # [var, lo of its range (its step's grid starts there), lo, hi, step, ranged]
    spans = [[var, lo, lo, hi, step, True] for var, lo, hi, step in env.ranges]
    spans += [[var, lo, lo, hi, 1, True] for var, (lo, hi, _, _) in hulls.items()]
    for cond in conditions:
        for var, op, c in _comparisons(cond):
            if any(v.same_as(var) for v, _, _ in env.symbolic) and var not in hulls:
                continue
            span = next((sp for sp in spans if sp[0].same_as(var)), None)
            if span is None:  # a kernel parameter: bounded by the conditions only
                span = [var, 0, *_UNBOUNDED, 1, False]
                spans.append(span)
            lo, hi = span[2], span[3]
            span[2], span[3] = {"<": (lo, min(hi, c)), "<=": (lo, min(hi, c + 1)),
                                ">": (max(lo, c + 1), hi), ">=": (max(lo, c), hi),
                                "==": (max(lo, c), min(hi, c + 1))}[op]  # fmt: skip
    ranges = list(env.ranges)
    narrowed_hulls = []
    for i, (var, lo0, lo, hi, step, ranged) in enumerate(spans):
        if var in hulls:
            if (lo, hi) != hulls[var][:2] and lo < hi:
                narrowed_hulls.append((var, lo, hi))
            continue
        if not ranged:
            if _UNBOUNDED[0] < lo < hi < _UNBOUNDED[1]:
                ranges.append((var, lo, hi, 1))
            continue
        first = lo0 + -(-(lo - lo0) // step) * step  # the first value on the step's grid
        if first < hi:
            ranges[i] = (var, first, hi, step)
    if ranges == env.ranges and not narrowed_hulls:
        return None
    narrowed = env.snapshot()
    narrowed.ranges = ranges + [(var, lo, hi, 1) for var, lo, hi in narrowed_hulls]
    moved = [var for var, _, _ in narrowed_hulls]
    narrowed.symbolic = [e for e in env.symbolic if not any(e[0].same_as(v) for v in moved)]
    for var in moved:  # the loop's own ends stay known
        _, _, lo_e, ext_e = hulls[var]
        narrowed.conditions.append(tvm.tirx.And(var >= lo_e, var < lo_e + ext_e))
    return narrowed


_FLIPPED = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "==": "=="}
_OPS = {"LT": "<", "LE": "<=", "GT": ">", "GE": ">=", "EQ": "=="}


def _comparisons(cond: Any) -> list[tuple[Var, str, int]]:
    """``(var, op, constant)`` for each conjunct of ``cond`` that compares a variable with
    an integer constant (either side)."""
    kind = type(cond).__name__
    if kind == "And":
        return _comparisons(cond.a) + _comparisons(cond.b)
    if kind not in _OPS:
        return []
    op = _OPS[kind]
    if isinstance(cond.a, Var) and as_int(cond.b) is not None:
        return [(cond.a, op, as_int(cond.b))]
    if isinstance(cond.b, Var) and as_int(cond.a) is not None:
        return [(cond.b, _FLIPPED[op], as_int(cond.a))]
    return []


def _witness(lo: Any, hi: Any, n: Any, env: Enclosing) -> str | None:
    """A concrete assignment (at the corners of the ranges) that satisfies the enclosing
    conditions and puts ``[lo, hi)`` outside ``[0, n)``, described; None if none found."""
    free = _free_vars([lo, hi, n, *env.conditions, *(v for _, v in env.lets)])
    let_vars = [var for var, _ in env.lets]
    free = [v for v in free if not any(v.same_as(x) for x in let_vars)]
    ranged = {var: (lo_v, hi_v, step) for var, lo_v, hi_v, step in env.ranges}
    if any(v not in ranged for v in free) or len(free) > MAX_CORNER_VARS:
        return None
    for values in itertools.product(*(_corner_values(*ranged[v]) for v in free)):
        ana = sym.Analyzer()
        for var, x in zip(free, values, strict=True):
            ana.bind(var, IntImm(str(var.ty), x))
        for var, value in env.lets:
            ana.bind(var, value)
        lo_v, hi_v, n_v = (as_int(ana.simplify(_expr(e))) for e in (lo, hi, n))
        if lo_v is None or hi_v is None or n_v is None:
            return None
        if not all(as_int(ana.simplify(c)) for c in env.conditions):
            continue
        if lo_v < 0 or hi_v > n_v:
            where = ", ".join(f"{v.name} = {x}" for v, x in zip(free, values, strict=True))
            return f" (= {lo_v}:{hi_v} when {where})" if where else ""
    return None


def _corner_values(lo: int, hi: int, step: int) -> tuple[int, ...]:
    last = lo + ((hi - 1 - lo) // step) * step
    return (lo,) if last == lo else (lo, last)


def _free_vars(exprs: list[Any]) -> list[Var]:
    seen: list[Var] = []
    for e in exprs:
        for v in tvm.tirx.analysis.undefined_vars(e):
            if not any(v.same_as(s) for s in seen):
                seen.append(v)
    return seen


def _expr(value: Any) -> Any:
    return IntImm("int64", value) if isinstance(value, int) else value


def _span_text(lo: Any, ext: Any) -> str:
    lo_i, ext_i = as_int(lo), as_int(ext)
    if lo_i is not None and ext_i is not None:
        return f"{lo_i}:{lo_i + ext_i}"
    if ext_i == 1:
        return str(lo)
    return f"{lo}:{lo} + {ext}"


def _shape_text(shape: list[Any]) -> str:
    return "(" + ", ".join(str(as_int(s) if as_int(s) is not None else s) for s in shape) + ")"


def _vars_text(expr: Any, env: Enclosing) -> str:
    names = [str(v.name) for v in tvm.tirx.analysis.undefined_vars(expr)]
    return ", ".join(names) if names else "no variables"
