"""What layout/ reads of an operand: a region of a buffer, under the buffer's layout.

:class:`TileView` is the whole of it: the buffer (its data, scope, dtype and TVM layout),
the region (``(min, extent)`` per dimension, IR values) and the name of the argument it
came from, for messages. layout/ takes these views and nothing of the call model; the
call model's :class:`..call.Operand` is a view with the access its op's signature gives,
and another TIRx host builds views of its own (``TileView("src", buffer, region)``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import tvm
from tvm import sym

from ..irfacts import as_int, memory_kind


@dataclass(frozen=True)
class TileView:
    """A region of a buffer, named by its argument (``role``)."""

    role: str
    buffer: Any  # tvm.tirx.Buffer
    region: tuple[tuple[Any, Any], ...]  # (min, extent) per buffer dimension, IR values
    # declared over another buffer's memory (a tile carved from a pool's allocation), and
    # then the elements that memory holds from its start (None: not known)
    carved: bool = False
    room: int | None = None
    # the integer lets in scope (``row: T.let = tid % 64``), as (var, value): what a region
    # written with them stands for, where a layout's algebra needs the value
    bindings: tuple[tuple[Any, Any], ...] = field(default=(), compare=False)

    def bound_region(self) -> tuple[tuple[Any, Any], ...]:
        """The region with the let-bound variables replaced by their values."""
        if not self.bindings:
            return self.region
        ana = sym.Analyzer()
        for var, value in self.bindings:
            ana.bind(var, value)
        return tuple((ana.simplify(lo), ana.simplify(ext)) for lo, ext in self.region)

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
