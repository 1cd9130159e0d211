"""Emitted TIR built node by node: statements for any number of operands.

An emitter that parses a TVMScript body declares a fixed set of views, so one that takes
a variable number of operands pads them (the elementwise bodies do, to four). A
:class:`Body` instead appends statements as the plan asks: buffers are declared where
they are needed (TIR's flat ``AllocBuffer``/``DeclBuffer`` statements, in scope to the
end of the enclosing sequence), loops and branches nest through context managers, and
:meth:`Body.func` wraps the result in the PrimFunc the lowering splices in::

    b = Body()
    acc = b.local("acc", "float32", 4)
    with b.loop("i", 8, unroll=True) as i:
        b.store(acc, i % 4, acc[i % 4] + x[i])
    return b.func()
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from tvm import tirx
from tvm.tirx import stmt as S


def const(value: Any, dtype: str) -> Any:
    """A constant of ``dtype`` (``inf`` and ``-inf`` too)."""
    return tirx.const(value, dtype)


def index(value: Any) -> Any:
    """``value`` as an int32 index expression (a Python int becomes a constant)."""
    return const(value, "int32") if isinstance(value, int) else value


def address_of(buffer: Any, at: Any) -> Any:
    """``&buffer[at]``: the address of one element (a pointer a helper takes)."""
    return tirx.address_of(tirx.BufferLoad(buffer, [index(at)]))


class Body:
    """A statement sequence under construction (see the module docstring)."""

    def __init__(self) -> None:
        self._stack: list[list[Any]] = [[]]

    # -- statements ---------------------------------------------------------------------
    def emit(self, stmt: Any) -> None:
        self._stack[-1].append(stmt)

    def evaluate(self, value: Any) -> None:
        self.emit(S.Evaluate(value))

    def store(self, buffer: Any, index: Any, value: Any) -> None:
        """``buffer[index] = value`` (``index`` an expression or a list of them)."""
        indices = list(index) if isinstance(index, list | tuple) else [index]
        self.emit(S.BufferStore(buffer, value, indices))

    def local(self, name: str, dtype: str, count: int) -> Any:
        """A fresh register array of ``count`` elements, allocated here."""
        buf = tirx.decl_buffer((count,), dtype, name, scope="local")
        self.emit(S.AllocBuffer(buf))
        return buf

    def view(self, name: str, of: Any, dtype: str, count: Any, scope: str | None = None) -> Any:
        """A flat view of ``of``'s data as ``count`` elements of ``dtype`` (a vector dtype
        reads a whole access: ``uint32x4`` is 128 bits)."""
        buf = tirx.decl_buffer((count,), dtype, name, scope=scope or str(of.scope()))
        self.emit(S.DeclBuffer(buf, data=of.data))
        return buf

    # -- nesting ---------------------------------------------------------------------------
    @contextmanager
    def loop(self, name: str, extent: int, *, unroll: bool = False) -> Iterator[Any]:
        """``for name in range(extent)``: serial, or unrolled (register indices that
        depend on the loop variable stay constants once unrolled)."""
        var = tirx.Var(name, "int32")
        self._stack.append([])
        yield var
        body = self._sequence(self._stack.pop())
        kind = S.ForKind.UNROLLED if unroll else S.ForKind.SERIAL
        self.emit(S.For(var, const(0, "int32"), const(extent, "int32"), kind, body))

    @contextmanager
    def when(self, condition: Any) -> Iterator[None]:
        """``if condition:``; a condition that is the constant true adds no branch."""
        self._stack.append([])
        yield
        body = self._sequence(self._stack.pop())
        if isinstance(condition, bool) or (
            isinstance(condition, tirx.IntImm) and str(condition.ty) == "bool"
        ):
            if bool(condition):
                self.emit(body)
            return
        self.emit(S.IfThenElse(condition, body, None))

    # -- the result ------------------------------------------------------------------------
    @staticmethod
    def _sequence(stmts: list[Any]) -> Any:
        if not stmts:
            return S.Evaluate(const(0, "int32"))
        return stmts[0] if len(stmts) == 1 else S.SeqStmt(stmts)

    def stmt(self) -> Any:
        if len(self._stack) != 1:
            raise RuntimeError("Body.stmt() inside an open loop or branch")
        return self._sequence(self._stack[0])

    def func(self) -> Any:
        """The PrimFunc whose body the lowering splices in place of the call."""
        return tirx.PrimFunc([], self.stmt())


def all_of(conditions: list[Any]) -> Any:
    """The conjunction of ``conditions`` (true when there are none)."""
    out: Any = True
    for c in conditions:
        if isinstance(c, bool):
            if not c:
                return False
            continue
        out = c if out is True else tirx.And(out, c)
    return out
