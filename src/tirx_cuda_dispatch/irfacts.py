"""Small facts about TVM IR values that every layer asks: a constant as an int, a buffer
scope as a memory kind, where a node stands in the user's source, which buffer a data
expression (or a scalar load) names, the expressions inside one, and what a scope id
defines. A leaf module: it imports nothing of ours.
"""

from __future__ import annotations

import linecache
import re
from dataclasses import dataclass
from typing import Any

import tvm
from tvm import sym
from tvm.tirx import Var

# The reduction forms of the CTA's named barriers (PTX ISA "bar, barrier": ``bar.red.popc``,
# ``bar.red.{and,or}.pred``; ``barrier.red`` likewise, ``.aligned`` or not), by TVM op: whether
# the thread count operand ``b`` is given. Their destination receives one value for every
# thread that took part in the barrier's completion.
BARRIER_REDUCTIONS = {
    f"tirx.ptx.{mnemonic}_red_{kind}{suffix}": bool(suffix)
    for mnemonic in ("bar", "barrier")
    for kind in ("popc", "pred")
    for suffix in ("", "_count")
}


@dataclass(frozen=True)
class BarrierReduction:
    """One ``bar.red`` statement's parts: ``d, a{, b}, c`` and its modifiers (TVM's call
    carries the operands, then the modifier tokens, then a marker)."""

    destination: Any  # the register element written
    barrier: Any  # ``a``: the named barrier's id
    threads: Any  # ``b``: the thread count (None: the CTA's)
    predicate: Any  # ``c``
    op: str  # "popc", "and" or "or"
    aligned: bool  # ``bar.red`` always; ``barrier.red`` with ``.aligned``: warps take part whole
    spelling: str  # the instruction as PTX writes it (``bar.red.or.pred``)


def barrier_reduction(call: Any) -> BarrierReduction | None:
    """The parts of a barrier reduction call (:data:`BARRIER_REDUCTIONS`), or None for any
    other expression."""
    name = getattr(getattr(call, "op", None), "name", None)
    if name not in BARRIER_REDUCTIONS:
        return None
    operands = 4 if BARRIER_REDUCTIONS[name] else 3
    args = list(call.args)
    if len(args) < operands + 1:
        return None
    tokens = [str(a.value) for a in args[operands:-1] if isinstance(getattr(a, "value", None), str)]
    mnemonic = name.removeprefix("tirx.ptx.").split("_")[0]
    op = next((t for t in tokens if t in ("popc", "and", "or")), "")
    return BarrierReduction(
        destination=args[0],
        barrier=args[1],
        threads=args[2] if operands == 4 else None,
        predicate=args[operands - 1],
        op=op,
        aligned=mnemonic == "bar" or "aligned" in tokens,
        spelling=".".join([mnemonic, *(t for t in tokens if t)]),
    )


def as_int(value: Any) -> int | None:
    """``value`` as a Python int when it is a constant, else None."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, tvm.tirx.IntImm):
        return int(value.value)
    return None


def as_flag(value: Any) -> bool | None:
    """A flag argument (``transpose_A=True``, ``accum=1``) as a bool: None (absent) is
    False; None too where it is not a constant."""
    if value is None or isinstance(value, bool):
        return bool(value)
    inner = as_int(value)
    return None if inner is None else bool(inner)


def prove_multiple(value: Any, factor: int) -> bool:
    """True when ``value`` (int or TIR expression) is provably a multiple of ``factor``."""
    if factor == 1:
        return True
    as_i = as_int(value)
    if as_i is not None:
        return as_i % factor == 0
    analyzer = sym.Analyzer()
    return bool(analyzer.can_prove_equal(tvm.tirx.floormod(value, factor), 0))


def statements(stmt: Any):
    """Every statement of a statement tree (the members of a sequence, the bodies of
    loops, attributes and declarations, both branches of an ``if``), in program order."""
    stack = [stmt]
    while stack:
        node = stack.pop()
        if node is None:
            continue
        if type(node).__name__ == "SeqStmt":
            stack.extend(reversed(node.seq))
            continue
        yield node
        for attr in ("else_case", "then_case", "body"):  # popped then, else, body
            stack.append(getattr(node, attr, None))


def evaluated_calls(stmt: Any):
    """The calls a statement tree evaluates as statements (``T.evaluate(T.ptx.bar(...))``)."""
    for node in statements(stmt):
        if type(node).__name__ == "Evaluate" and type(node.value).__name__ == "Call":
            yield node.value


CTA_BARRIERS = ("tirx.cuda.cta_sync", "tirx.tvm_storage_sync")  # __syncthreads


LOOP_EXITS = ("tirx.break_loop", "tirx.continue_loop")  # T.break_loop(), T.continue_loop()


def runs_cta_barrier(stmt: Any) -> bool:
    """Whether every run of ``stmt`` (a loop's body) passes a CTA barrier
    (``T.cuda.cta_sync()``, ``tvm_storage_sync("shared")``) outside any ``if``, ``while``
    or loop that may run zero times: the barriers it is sure to reach. A body that may
    ``break`` or ``continue`` anywhere may skip its barrier: never sure."""
    return not exits_early(stmt) and _reaches_barrier(stmt)


def exits_early(stmt: Any) -> bool:
    """Whether ``stmt`` holds a ``break`` or ``continue`` (a statement or TVM's
    ``break_loop``/``continue_loop`` op) anywhere, in an inner loop too."""
    kind = type(stmt).__name__
    if kind in ("Break", "Continue"):
        return True
    if kind == "Evaluate":
        return str(getattr(getattr(stmt.value, "op", None), "name", "")) in LOOP_EXITS
    if kind == "SeqStmt":
        return any(exits_early(s) for s in stmt.seq)
    if kind == "IfThenElse":
        return exits_early(stmt.then_case) or (
            stmt.else_case is not None and exits_early(stmt.else_case)
        )
    body = getattr(stmt, "body", None)
    return body is not None and exits_early(body)


def _reaches_barrier(stmt: Any) -> bool:
    kind = type(stmt).__name__
    if kind == "SeqStmt":
        return any(_reaches_barrier(s) for s in stmt.seq)
    if kind == "Evaluate":
        call = stmt.value
        name = str(getattr(getattr(call, "op", None), "name", ""))
        if name == "tirx.tvm_storage_sync":
            return str(getattr(call.args[0], "value", "")) == "shared"
        return name in CTA_BARRIERS
    if kind == "For":
        return (as_int(stmt.extent) or 0) >= 1 and _reaches_barrier(stmt.body)
    if kind in ("IfThenElse", "While"):
        return False
    body = getattr(stmt, "body", None)  # AttrStmt, DeclBuffer, ...: their body runs once
    return body is not None and _reaches_barrier(body)


def memory_kind(scope: str) -> str:
    """Collapse a buffer scope to global / shared / local / tmem / other."""
    if scope == "global":
        return "global"
    if scope.startswith("shared"):
        return "shared"
    if scope == "local":
        return "local"
    if scope.startswith("tmem"):
        return "tmem"
    return scope


@dataclass(frozen=True)
class Location:
    """Where a node stands in the user's TVMScript source; ``via``: the ``T.macro`` calls
    that expanded it, outermost first (``file:line`` each)."""

    file: str | None
    line: int | None
    text: str | None
    via: tuple[str, ...] = ()

    def __str__(self) -> str:
        if self.file is None or self.line is None:
            return "<unknown location>"
        where = f"{self.file}:{self.line}"
        if self.via:
            where += f" (in a macro called at {', '.join(self.via)})"
        return f"{where}: {self.text.strip()}" if self.text else where


def location_of(node: Any) -> Location:
    """The source location of an IR node (its span), unknown when it has none. A statement
    a ``T.macro`` expanded has a SequentialSpan: the call sites, then the macro's line."""
    span = getattr(node, "span", None)
    spans = list(getattr(span, "spans", None) or [span])
    spans = [s for s in spans if s is not None and getattr(s, "source_name", None) is not None]
    if not spans:
        return Location(None, None, None)
    *calls, span = spans
    file = str(span.source_name.name)
    line = int(span.line)
    text = linecache.getline(file, line) or None
    via = tuple(f"{c.source_name.name}:{int(c.line)}" for c in calls)
    return Location(file, line, text.rstrip("\n") if text else None, via)


def buffer_var(data: Any) -> Var | None:
    """The buffer a data expression names (``X.data`` is ``tirx.buffer_data(X)``)."""
    if isinstance(data, Var):
        return data
    op = getattr(data, "op", None)
    if getattr(op, "name", None) == "tirx.buffer_data" and isinstance(data.args[0], Var):
        return data.args[0]
    return None


# TIR's binary expression nodes (``a``, ``b``): rebuilt by name when an operand changes
BINARY_NODES = ("Add", "Sub", "Mul", "FloorDiv", "FloorMod", "Div", "Mod", "Min", "Max",
                "EQ", "NE", "LT", "LE", "GT", "GE", "And", "Or")  # fmt: skip


def replace_leaves(expr: Any, replace: Any) -> Any:
    """``expr`` with each subexpression ``replace`` maps to a value (not None) replaced,
    through arithmetic, comparisons, negations and casts (``BINARY_NODES``, ``Not``,
    ``Cast``); nodes that do not change are kept, other expressions as they are."""
    new = replace(expr)
    if new is not None:
        return new
    kind = type(expr).__name__
    if kind in BINARY_NODES:
        a, b = replace_leaves(expr.a, replace), replace_leaves(expr.b, replace)
        return expr if a.same_as(expr.a) and b.same_as(expr.b) else getattr(tvm.tirx, kind)(a, b)
    if kind == "Not":
        a = replace_leaves(expr.a, replace)
        return expr if a.same_as(expr.a) else tvm.tirx.Not(a)
    if kind == "Cast":
        value = replace_leaves(expr.value, replace)
        return expr if value.same_as(expr.value) else tvm.tirx.Cast(expr.dtype, value)
    return expr


def subexpressions(expr: Any):
    """``expr`` and every expression inside it (operands, values, conditions, call
    arguments, load indices), depth first."""
    stack = [expr]
    while stack:
        node = stack.pop()
        yield node
        for name in ("a", "b", "value", "condition", "true_value", "false_value"):
            child = getattr(node, name, None)
            if isinstance(child, tvm.ir.expr.Expr):
                stack.append(child)
        for name in ("args", "indices"):
            children = getattr(node, name, None)
            if children is not None:
                stack.extend(c for c in children if isinstance(c, tvm.ir.expr.Expr))


def loaded_buffer(node: Any) -> Any:
    """The buffer a scalar load reads (TVM 0.27 parses ``R[0]`` as a ``TensorLoad``, whose
    ``source`` is the buffer; a ``BufferLoad`` names it ``buffer``), else None."""
    kind = type(node).__name__
    if kind == "TensorLoad":
        return node.source
    if kind == "BufferLoad":
        return node.buffer
    return None


_DEF_KINDS = re.compile(r'"(\w+)", "(\w+)"\)\s*$')


def scope_id_kind(scope_id_def: Any) -> tuple[str, str]:
    """(parent, child) of a ``ScopeIdDef``: ``T.lane_id`` is ("warp", "thread")."""
    m = _DEF_KINDS.search(str(scope_id_def))
    return (m.group(1), m.group(2)) if m else ("?", "?")
