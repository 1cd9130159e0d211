"""What a variant sees of one tile-primitive call: a read-only view over TVM's objects.

:class:`TileCall` joins TVM's ``TilePrimitiveCall`` (op, operands, ``dispatch=``) and its
``DispatchContext`` (target, execution scope, thread axes, launch parameters) and answers
the questions predicates ask, with plain Python values where TVM has IR nodes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from tvm.tirx import Buffer

from .irfacts import Location, as_int, location_of
from .layout.view import TileView
from .participation import Participation, participation
from .scopes import SCOPES
from .signatures import NONE, Param, Signature, signature_or_positional


@dataclass(frozen=True)
class Operand(TileView):
    """One tensor operand of a call: a :class:`.layout.view.TileView` (a region of a
    buffer, named by its argument ``role``) with the access the op's signature gives it."""

    access: str = NONE  # read / write / read-write (:mod:`.signatures`)


def tensor_region(arg: Any) -> tuple[Buffer, tuple[tuple[Any, Any], ...]] | None:
    """(buffer, region) of an argument that is a tensor region; None for anything else
    (a scalar, or a scalar element read ``s_local[0]``, which has a source but no region)."""
    source = getattr(arg, "source", None)
    if not isinstance(source, Buffer) or not hasattr(arg, "region"):
        return None
    return source, tuple((r.min, r.extent) for r in arg.region)


class TileCall:
    """A tile-primitive call in its dispatch context.

    Arguments are read by name, through the op's :class:`~.signatures.Signature`:
    ``call.operand("dst")`` is the region named ``dst`` (None where that argument is not a
    tensor region), ``call.arg("axes")`` the raw argument. ``enclosing`` is what the code
    around the call says (ranges, lets, enclosing conditions, scope ids: a
    :class:`.bounds.Enclosing` from the program's scan), given when the call is built.
    """

    def __init__(self, prim: Any, ctx: Any, enclosing: Any = None):
        self.prim = prim
        self.ctx = ctx
        self.enclosing = enclosing

    # -- the op and its arguments --------------------------------------------------------
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

    @cached_property
    def signature(self) -> Signature:
        return signature_or_positional(self.op, len(self.args))

    @cached_property
    def params(self) -> tuple[Param, ...]:
        """The signature's parameters for this call's argument count, in argument order."""
        return self.signature.params_for(len(self.args))

    def _index(self, name: str) -> int | None:
        for i, p in enumerate(self.params):
            if p.name == name:
                return i if i < len(self.args) else None
        raise KeyError(
            f"op {self.op} has no argument {name!r}; it has {[p.name for p in self.params]}"
        )

    def arg(self, name: str) -> Any:
        """The raw argument ``name`` (None when the call does not pass it)."""
        i = self._index(name)
        return None if i is None else self.args[i]

    def operand(self, name: str) -> Operand | None:
        """Argument ``name`` as an :class:`Operand`, or None when it is not a tensor region."""
        i = self._index(name)
        return None if i is None else self._operand_at(i)

    def _operand_at(self, i: int) -> Operand | None:
        found = tensor_region(self.args[i])
        if found is None:
            return None
        param = self.params[i] if i < len(self.params) else Param(f"arg{i}", "tensor")
        access = self.signature.access(param, self.args)
        carved, room, lets = False, None, ()
        if self.enclosing is not None:
            from .bounds import carved_room

            carved, room = carved_room(found[0], self.enclosing)
            lets = tuple(self.enclosing.lets)
        return Operand(param.name, found[0], found[1], carved, room, lets, access=access)

    @cached_property
    def operands(self) -> list[Operand]:
        """Every argument that is a tensor region, in argument order, named and with its
        access (read / write / read-write)."""
        return [o for o in (self._operand_at(i) for i in range(len(self.args))) if o]

    @cached_property
    def outputs(self) -> list[Operand]:
        return [o for o in self.operands if o.access in ("write", "read-write")]

    @cached_property
    def inputs(self) -> list[Operand]:
        return [o for o in self.operands if o.access in ("read", "read-write")]

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
        known = SCOPES.get(self.scope)
        return known.tvm_axes if known else ()

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
    def participation(self) -> Participation:
        """Which threads of the scope execute the call (:mod:`.participation`)."""
        return participation(self)

    # -- source location ---------------------------------------------------------------
    @cached_property
    def location(self) -> Location:
        return location_of(self.prim)

    def __str__(self) -> str:
        operands = ", ".join(o.describe for o in self.operands)
        return f"Tx.{self.scope}.{self.op}({operands}) at {self.location}"
