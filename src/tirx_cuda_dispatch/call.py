"""What a variant sees of one tile-primitive call: a read-only view over TVM's objects.

:class:`TileCall` joins TVM's ``TilePrimitiveCall`` (op, operands, ``dispatch=``) and its
``DispatchContext`` (target, execution scope, thread axes, launch parameters) and answers
the questions predicates ask, with plain Python values where TVM has IR nodes.
"""

from __future__ import annotations

import linecache
import re
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import tvm
from tvm.tirx import Buffer

_SCOPE_THREAD_AXES = {
    "thread": (),
    "warp": ("laneid",),
    "warpgroup": ("wid_in_wg", "laneid"),
    "cta": ("warpid", "laneid"),
}


def as_int(value: Any) -> int | None:
    """``value`` as a Python int when it is a constant, else None."""
    if isinstance(value, int):
        return value
    if isinstance(value, tvm.tirx.IntImm):
        return int(value.value)
    return None


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
class Operand:
    """One tensor operand: a region of a buffer."""

    role: str
    buffer: Buffer
    region: tuple[tuple[Any, Any], ...]  # (min, extent) per buffer dimension, IR values

    @property
    def name(self) -> str:
        return str(self.buffer.name)

    @property
    def scope(self) -> str:
        return str(self.buffer.scope())

    @property
    def memory(self) -> str:
        return memory_kind(self.scope)

    @property
    def dtype(self) -> str:
        return str(self.buffer.dtype)

    @property
    def elem_bits(self) -> int:
        dt = tvm.runtime.DataType(self.dtype)
        return int(dt.bits) * int(dt.lanes)

    @property
    def layout(self) -> Any:
        return self.buffer.layout

    @property
    def shape(self) -> tuple[Any, ...]:
        return tuple(self.buffer.shape)

    @property
    def extents(self) -> tuple[int | None, ...]:
        return tuple(as_int(ext) for ext in (e for _, e in self.region))

    @property
    def describe(self) -> str:
        """``A[0:32, bx*32:bx*32+32] (global float32)``: for reasons and reports."""
        parts = []
        for lo, ext in self.region:
            lo_i, ext_i = as_int(lo), as_int(ext)
            if lo_i is not None and ext_i is not None:
                parts.append(f"{lo_i}:{lo_i + ext_i}")
            else:
                parts.append(f"{lo}:{lo}+{ext}")
        return f"{self.name}[{', '.join(parts)}] ({self.scope} {self.dtype})"


@dataclass(frozen=True)
class Location:
    """Where the call stands in the user's TVMScript source."""

    file: str | None
    line: int | None
    text: str | None

    def __str__(self) -> str:
        if self.file is None or self.line is None:
            return "<unknown location>"
        where = f"{self.file}:{self.line}"
        return f"{where}: {self.text.strip()}" if self.text else where


def location_of(node: Any) -> Location:
    """The source location of an IR node (its span), unknown when it has none."""
    span = getattr(node, "span", None)
    if span is None:
        return Location(None, None, None)
    file = str(span.source_name.name)
    line = int(span.line)
    text = linecache.getline(file, line) or None
    return Location(file, line, text.rstrip("\n") if text else None)


def role_of(index: int) -> str:
    """The role of argument ``index``: ``dst``, then ``src``, ``src2``, ``src3``, ..."""
    return "dst" if index == 0 else ("src" if index == 1 else f"src{index - 1}")


class TileCall:
    """A tile-primitive call in its dispatch context."""

    def __init__(self, prim: Any, ctx: Any, enclosing: Any = None):
        self.prim = prim
        self.ctx = ctx
        # What the code around the call says (ranges, lets, enclosing conditions, scope
        # ids): a :class:`.bounds.Enclosing`, set where the program was scanned.
        self.enclosing = enclosing

    # -- the op ------------------------------------------------------------------------
    @cached_property
    def op(self) -> str:
        name = str(self.prim.op.name)
        return name[len("tirx.tile.") :] if name.startswith("tirx.tile.") else name

    @cached_property
    def forced_variant(self) -> str | None:
        forced = getattr(self.prim, "dispatch", None)
        return None if forced is None else str(forced)

    @cached_property
    def args(self) -> list[Any]:
        return list(self.prim.args)

    @cached_property
    def config(self) -> dict[str, Any]:
        return dict(self.prim.config)

    def operand(self, index: int, role: str) -> Operand | None:
        """Argument ``index`` as an :class:`Operand`, or None when it is not a tensor region."""
        if index >= len(self.args):
            return None
        arg = self.args[index]
        source = getattr(arg, "source", None)
        # A scalar element read (``s_local[0]`` as an operand) has a source but no region.
        if not isinstance(source, Buffer) or not hasattr(arg, "region"):
            return None
        region = tuple((r.min, r.extent) for r in arg.region)
        return Operand(role, source, region)

    def register_and_other(self) -> tuple[Operand, Operand]:
        """A copy's (register operand, other operand): dst when dst is ``local``."""
        dst, src = self.operand(0, "dst"), self.operand(1, "src")
        return (dst, src) if dst.memory == "local" else (src, dst)

    @cached_property
    def operands(self) -> list[Operand]:
        """All tensor operands, with roles ``dst`` (argument 0) and ``src``/``srcN`` after it."""
        out = []
        for i in range(len(self.args)):
            opnd = self.operand(i, role_of(i))
            if opnd is not None:
                out.append(opnd)
        return out

    # -- target ------------------------------------------------------------------------
    @cached_property
    def target(self) -> Any:
        return self.ctx.target

    @cached_property
    def target_kind(self) -> str:
        return str(self.target.kind.name)

    @cached_property
    def arch(self) -> str:
        return str(self.target.attrs.get("arch", "")) if self.target is not None else ""

    @cached_property
    def sm(self) -> int | None:
        """The SM version number (``sm_90a`` -> 90), or None when the target names none."""
        m = re.match(r"sm_(\d+)", self.arch)
        return int(m.group(1)) if m else None

    # -- execution scope ---------------------------------------------------------------
    @cached_property
    def scope(self) -> str:
        return str(self.ctx.scope_kind)

    @cached_property
    def thread_axes(self) -> dict[str, tuple[int | None, int | None]]:
        """Thread axes inside the scope: name -> (extent, offset), ints where constant."""
        return {str(k): (as_int(v[0]), as_int(v[1])) for k, v in self.ctx.intra.items()}

    @cached_property
    def launch_extents(self) -> dict[str, int | None]:
        """Launch parameters (``threadIdx.x``, ``blockIdx.x``, ...) -> extent."""
        return {str(k): as_int(iv.dom.extent) for k, iv in self.ctx.launch_params.items()}

    def launch_var(self, name: str) -> Any:
        return self.ctx.launch_params[name].var

    @cached_property
    def expected_thread_axes(self) -> tuple[str, ...]:
        return _SCOPE_THREAD_AXES.get(self.scope, ())

    @cached_property
    def thread_count(self) -> int | None:
        """Threads in the scope, or None when an extent is not a constant."""
        n = 1
        for ext, _ in self.thread_axes.values():
            if ext is None:
                return None
            n *= ext
        return n

    @cached_property
    def participation(self) -> Any:
        """Which threads of the scope execute the call (:mod:`.participation`)."""
        from .participation import participation

        return participation(self)

    # -- source location ---------------------------------------------------------------
    @cached_property
    def location(self) -> Location:
        return location_of(self.prim)

    def __str__(self) -> str:
        operands = ", ".join(o.describe for o in self.operands)
        return f"Tx.{self.scope}.{self.op}({operands}) at {self.location}"
