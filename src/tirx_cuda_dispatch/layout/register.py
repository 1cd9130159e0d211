"""The register-induced partition: a register operand's layout says which thread owns what.

A register (``local``) buffer's layout maps each logical element to a thread-axis
coordinate (``1 @ laneid``: lane ``i`` owns row ``i``) and to a register index (the ``m``
axis). That *is* the partition, so nothing is synthesized:

1. walk every operand's region together as common dimensions (:func:`.atoms.refine_tagged`),
   each dimension carrying the anchor register layout's axis;
2. the dimensions on a thread axis become the thread part. Their thread-index strides
   (``laneid`` counts threads one by one, ``wid_in_wg`` 32 at a time, ...) must tile the
   scope's threads exactly, once each, with the layout's replicas filling in: then the
   thread part is a mixed radix of the scope's thread index, like a synthesized one;
3. the ``m`` dimensions are each thread's private bundle. They are ordered by the anchor's
   register stride (the register layout's order), fused where contiguous on every operand,
   and the widest vector is taken off the innermost one;
4. alignment is checked on the address terms one thread adds: strides of the bundle
   dimensions, the memory-side strides of the thread dimensions, and the bases. The
   anchor's thread-axis strides are left out: they count threads, not addresses.

A register region may start at an offset that moves with enclosing loops
(``R[i * 4 : i * 4 + 4]`` inside ``for i in range(8)``): :class:`LoopOffset`. A register
index must be a compile-time constant, or the compiler puts the whole array in local
memory, so such an offset is accepted only when it is affine in loop variables of constant
trip count: then it takes a few known values, and an emitter can reach each through a
constant index.

The result is the same :class:`.partition.ScopePartition` the synthesized partition
produces, so emitters and tools read both the same way.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from tvm import sym, tirx
from tvm.tirx.layout import ComposeLayout, TileLayout

from ..errors import Decline
from ..irfacts import as_int
from ..scopes import SCOPES, THREAD_AXES
from .atoms import MemoryView, mixed_radix_digits, refine_tagged
from .partition import Dim, ScopePartition, fuse_contiguous
from .vector import vector_misfit
from .view import TileView

MEMORY_AXIS = "m"


# Which thread axes name threads *inside* each scope.
SCOPE_AXES = {name: sc.layout_axes for name, sc in SCOPES.items()}


# Most register slots a loop-dependent offset may select among. A full register file holds
# 63 128-bit vectors; more slots than that means narrow accesses over a large array, where
# one guard per slot and access costs more than the copy.
MAX_GUARDED_SLOTS = 64


@dataclass(frozen=True)
class LoopTerm:
    """``coeff * var`` where ``var`` is a loop variable running over ``[lo, lo + trips)``."""

    var: Any  # the loop's tirx.Var
    lo: int
    trips: int
    coeff: int


@dataclass(frozen=True)
class LoopOffset:
    """The loop-dependent part of a register region's start: ``sum(coeff * var)``.

    Its values are indexed by ``q`` in ``[0, count)``, a mixed radix over the loops' trips
    (first term outermost): :meth:`at` gives the condition "the loops are at iteration
    ``q``" and the offset there, so an emitter can enumerate ``q`` in an unrolled loop and
    reach each value through a constant register index.
    """

    terms: tuple[LoopTerm, ...]

    @property
    def count(self) -> int:
        return math.prod(t.trips for t in self.terms)

    @property
    def expr(self) -> Any:
        total: Any = 0
        for t in self.terms:
            total = total + t.coeff * t.var
        return total

    def at(self, q: Any) -> tuple[Any, Any]:
        """(condition, offset) at iteration ``q`` (an int or a TIR expression)."""
        digits = mixed_radix_split(q, [t.trips for t in self.terms])
        cond: Any = None
        value: Any = 0
        for term, digit in zip(self.terms, digits, strict=True):
            here = tirx.EQ(term.var, term.lo + digit)
            cond = here if cond is None else tirx.And(cond, here)
            value = value + term.coeff * (term.lo + digit)
        return cond, value

    def values(self) -> list[int]:
        """The offset at each iteration ``q``, in order."""
        return [int(self.at(q)[1]) for q in range(self.count)]

    @property
    def ranges(self) -> str:
        """``i in [0, 8), c in [0, 2)``"""
        return ", ".join(f"{t.var.name} in [{t.lo}, {t.lo + t.trips})" for t in self.terms)

    def __str__(self) -> str:
        expr = " + ".join(
            f"{t.coeff}*{t.var.name}" if t.coeff != 1 else str(t.var.name) for t in self.terms
        )
        return f"{expr} ({self.ranges})"


def mixed_radix_split(q: Any, extents: Sequence[int]) -> list[Any]:
    """Digits of ``q`` in the mixed radix ``extents`` (outer -> inner); ints or TIR."""
    digits: list[Any] = []
    inner = 1
    for i in range(len(extents) - 1, -1, -1):
        digit = q if inner == 1 else q // inner
        digits.insert(0, digit % extents[i] if i > 0 else digit)
        inner *= extents[i]
    return digits


@dataclass(frozen=True)
class RegisterView:
    """A register operand's region: atoms tagged with the axis they run along."""

    operand: str
    atoms: tuple[tuple[int, int, str], ...]  # (extent, stride, axis), outer -> inner
    replicas: tuple[tuple[int, int, str], ...]  # thread iters that hold copies of the data
    base: int  # register index of the region's first element (its constant part)
    loop_offset: LoopOffset | None = None  # added to ``base``: moves with enclosing loops

    @property
    def start(self) -> Any:
        """The region's first register index: ``base``, plus the loop offset as TIR."""
        return self.base if self.loop_offset is None else self.base + self.loop_offset.expr

    @property
    def size(self) -> int:
        n = 1
        for ext, _, _ in self.atoms:
            n *= ext
        return n

    @property
    def thread_axes(self) -> tuple[str, ...]:
        seen = [a for _, _, a in self.atoms + self.replicas if a != MEMORY_AXIS]
        return tuple(dict.fromkeys(seen))


def register_view(opnd: TileView, loops: Any = None) -> RegisterView:
    """The :class:`RegisterView` of a ``local`` operand; declines with the reason otherwise.

    ``loops`` maps loop variables to their ranges (the dispatch context's
    ``var_range_map``); given it, a register offset affine in those loops is accepted as a
    :class:`LoopOffset`. Without it every offset must be a constant.
    """
    layout = opnd.layout
    if layout is None:
        raise Decline(f"register operand {opnd.name} has no layout")
    if isinstance(layout, ComposeLayout):
        raise Decline(f"register operand {opnd.name} has a swizzled layout; registers have none")
    if any(e is None for e in opnd.extents):
        raise Decline(f"{opnd.name} region extents {list(opnd.extents)} are not all constant")
    check_register_start(opnd)
    bounds = [(lo, lo + ext) for lo, ext in opnd.region]
    sliced = layout.slice(list(opnd.shape), bounds)
    if not isinstance(sliced, TileLayout):
        raise Decline(
            f"register layout of {opnd.name} ({layout}) cannot be sliced to {opnd.describe}"
        )
    base, moving = 0, None
    for axis, value in sliced.offset.items():
        name, value_i = str(axis.name), as_int(value)
        if name == MEMORY_AXIS and value_i is None and loops is not None:
            base, moving = loop_offset(opnd.name, value, loops)
            continue
        if value_i is None:
            raise Decline(f"register layout of {opnd.name} has a non-constant {name} offset")
        if name == MEMORY_AXIS:
            base = value_i
        elif value_i != 0:
            raise Decline(
                f"register layout of {opnd.name} shifts thread axis {name} by {value_i}; "
                "ownership must start at thread 0"
            )
    return window_view(opnd, sliced, base, moving)


def check_register_start(opnd: TileView) -> None:
    """A register operand must be declared at the first register of the memory it lies
    in: the emitters index that memory from its start by the layout's registers, so an
    ``elem_offset`` (``R.sub[4:8].view(...)``, ``T.decl_buffer(..., elem_offset=4)``)
    would be dropped and the copy would move other registers. Declines naming it."""
    buffer = getattr(opnd, "buffer", None)  # (a reduction's tile of its own has none)
    offset = buffer.elem_offset if buffer is not None else 0
    if as_int(offset) != 0:
        raise Decline(
            f"{opnd.role} {opnd.name} is declared {offset} elements into the registers it "
            "lies in (elem_offset); register layouts are read from the first register: "
            "declare the view over the whole register array and give its layout that "
            "offset (or slice the region) instead"
        )


def window_view(
    opnd: TileView, sliced: TileLayout, base: int = 0, moving: LoopOffset | None = None
) -> RegisterView:
    """The :class:`RegisterView` of a register region's layout sliced to it (``base`` and
    ``moving``: where its first register is; 0 counts the registers from the region's
    first, for a caller that keeps the offset apart)."""
    atoms = tuple(_const_iter(opnd, it) for it in sliced.shard)
    replicas = tuple(_const_iter(opnd, it) for it in sliced.replica)
    for ext, _, axis in replicas:
        if axis == MEMORY_AXIS:
            raise Decline(f"register layout of {opnd.name} replicates along registers ({ext})")
    for _, _, axis in atoms + replicas:
        if axis != MEMORY_AXIS and axis not in THREAD_AXES:
            raise Decline(f"register layout of {opnd.name} uses axis {axis}, not a thread axis")
    return RegisterView(
        opnd.name, tuple(a for a in atoms if a[0] != 1), tuple(r for r in replicas), base, moving
    )


def loop_offset(name: str, value: Any, loops: Any) -> tuple[int, LoopOffset | None]:
    """Split register offset ``value`` of operand ``name`` into (constant, loop part).

    Declines unless ``value`` is affine in variables of ``loops`` (var -> Range) whose
    ranges are constant, and takes at most :data:`MAX_GUARDED_SLOTS` values.
    """
    ranges = []
    for var in tirx.analysis.undefined_vars(value):
        rng = next((r for v, r in loops.items() if v.same_as(var)), None)
        if rng is None:
            raise Decline(
                f"register region of {name} starts at {value}, which depends on {var.name}: "
                f"{var.name} is not the variable of an enclosing loop, so the register index "
                "is a runtime value and the array would live in local memory; index "
                "registers by constants and loop variables only"
            )
        lo, trips = as_int(rng.min), as_int(rng.extent)
        if lo is None or trips is None:
            raise Decline(
                f"register region of {name} starts at {value}, and loop {var.name} starts at "
                f"{rng.min} and runs {rng.extent} times, not a constant range: a register index "
                "must be a compile-time constant once the loop is unrolled"
            )
        ranges.append((var, lo, trips))
    coeffs = sym.detect_linear_equation(value, [v for v, _, _ in ranges])
    ints = [as_int(c) for c in coeffs]
    if not coeffs or any(c is None for c in ints):
        raise Decline(
            f"register region of {name} starts at {value}, which is not affine in loop "
            f"{', '.join(v.name for v, _, _ in ranges)}; needs constant * loop variable + "
            "constant"
        )
    terms = tuple(
        LoopTerm(var, lo, trips, c) for (var, lo, trips), c in zip(ranges, ints, strict=False) if c
    )
    if not terms:
        return ints[-1], None
    moving = LoopOffset(terms)
    if moving.count > MAX_GUARDED_SLOTS:
        raise Decline(
            f"register region of {name} starts at {value}, which takes {moving.count} values "
            f"({moving.ranges}); each access would pick its registers among {moving.count} "
            f"guarded constant slots, at most {MAX_GUARDED_SLOTS}: copy more per call (the "
            "whole region in one call needs no loop)"
        )
    return ints[-1], moving


def _const_iter(opnd: TileView, it: Any) -> tuple[int, int, str]:
    ext, stride = as_int(it.extent), as_int(it.stride)
    if ext is None or stride is None:
        raise Decline(f"register layout of {opnd.name} has a non-constant iterator {it}")
    return ext, stride, str(it.axis.name)


def thread_axes_misfit(view: RegisterView, scope: str) -> str | None:
    """Why ``view``'s thread axes cannot name the threads of ``scope``, or None."""
    for axis in view.thread_axes:
        if axis not in SCOPE_AXES[scope]:
            return (
                f"register layout thread axis {axis} of {view.operand} does not match scope {scope}"
            )
    if scope != "thread" and not view.thread_axes:
        return (
            f"register layout of {view.operand} names no thread axis; at scope {scope} it must "
            "say which thread owns each element"
        )
    return None


def register_layout_misfit(opnd: TileView, scope: str, loops: Any = None) -> str | None:
    """Why ``opnd``'s register layout cannot induce a partition at ``scope``, or None
    (``loops``: as for :func:`register_view`)."""
    try:
        return thread_axes_misfit(register_view(opnd, loops), scope)
    except Decline as why:
        return str(why)


View = MemoryView | RegisterView


def _tagged_atoms(view: View) -> tuple[tuple[int, int, str], ...]:
    if isinstance(view, RegisterView):
        return view.atoms
    return tuple((ext, stride, MEMORY_AXIS) for ext, stride in view.atoms)


def thread_stride(axis: str, stride: int, extent: int, scope: str, threads: int) -> int:
    """How many of the scope's thread indices one step along ``axis`` by ``stride`` spans."""
    spec = THREAD_AXES[axis]
    limit = spec.extent if spec.extent is not None else threads // spec.divisor
    if stride * extent > limit:
        raise Decline(
            f"thread axis {axis} runs to {stride * extent} but has {limit} values in scope {scope}"
        )
    return spec.divisor * stride


def induced_partition(
    views: Sequence[View],
    anchor: int,
    scope: str,
    threads: int,
    widths: Sequence[tuple[int, int]],
) -> ScopePartition:
    """The partition that register view ``views[anchor]`` induces over all ``views``.

    ``views`` cover the same logical elements (broadcast operands lifted beforehand);
    ``widths`` are the (bits, elements) access widths to try, widest first. Offsets of the
    result are per operand, in its own elements (a register operand's are register indices).
    """
    reg = views[anchor]
    if not isinstance(reg, RegisterView):
        raise TypeError("the anchor of an induced partition is a register operand")
    names = [v.operand for v in views]
    for axis in reg.thread_axes:
        if axis not in SCOPE_AXES[scope]:
            raise Decline(
                f"register layout thread axis {axis} of {reg.operand} does not match scope "
                f"{scope} (whose threads are named by {'/'.join(SCOPE_AXES[scope]) or 'none'})"
            )
    rows = refine_tagged(*(_tagged_atoms(v) for v in views))

    thread_dims: list[tuple[int, Dim]] = []  # (thread-index stride, dim)
    bundle: list[Dim] = []
    for extent, cells in rows:
        a_stride, a_axis = cells[anchor]
        if a_stride == 0:
            raise Decline(f"register layout of {reg.operand} puts several elements in one place")
        if a_axis == MEMORY_AXIS:
            for (stride, axis), name in zip(cells, names, strict=True):
                if axis != MEMORY_AXIS and stride != 0:
                    raise Decline(
                        f"{name} spreads over thread axis {axis} elements that {reg.operand} "
                        "keeps in one thread's registers; the layouts must agree on ownership"
                    )
            bundle.append(Dim(extent, tuple(stride for stride, _ in cells)))
            continue
        t_stride = thread_stride(a_axis, a_stride, extent, scope, threads)
        strides = []
        for i, ((stride, axis), name) in enumerate(zip(cells, names, strict=True)):
            if i == anchor:
                strides.append(0)  # counts threads: never part of one thread's address
            elif isinstance(views[i], MemoryView):
                strides.append(stride)  # shared/global: any thread can reach it
            elif axis == MEMORY_AXIS or stride == 0:
                # A register operand that does not spread this dimension over threads must
                # hold all of it in each of them: a copy in every thread.
                if not _held_by_every_thread(views[i], t_stride, extent, scope, threads):
                    raise Decline(
                        f"{name} keeps in one thread elements that {reg.operand} spreads over "
                        f"{a_axis} (stride {a_stride}), and does not replicate them over those "
                        "threads; the layouts must agree on which thread owns each element"
                    )
                strides.append(stride)
            elif thread_stride(axis, stride, extent, scope, threads) == t_stride:
                strides.append(0)  # the same threads own these elements
            else:
                raise Decline(
                    f"{name} places elements on {axis} (stride {stride}) where {reg.operand} "
                    f"places them on {a_axis} (stride {a_stride}); the layouts must agree "
                    "on which thread owns each element"
                )
        thread_dims.append((t_stride, Dim(extent, tuple(strides))))
    for extent, stride, axis in reg.replicas:
        t_stride = thread_stride(axis, stride, extent, scope, threads)
        thread_dims.append((t_stride, Dim(extent, tuple(0 for _ in views))))

    _check_covers_scope(reg, thread_dims, scope, threads)
    thread_dims.sort(key=lambda d: -d[0])
    thread = tuple(d for _, d in thread_dims)

    # Registers in the anchor's order (stable for equal strides), contiguous runs fused.
    bundle.sort(key=lambda d: -d.strides[anchor])
    bundle = fuse_contiguous(bundle) or [Dim(1, tuple(1 for _ in views))]
    tail = bundle[-1]
    address_strides = [
        (f"{names[i]} {what}", d.strides[i])
        for what, dims in (("dimension", bundle[:-1]), ("per-thread", thread))
        for d in dims
        for i in range(len(views))
    ]
    bases = [v.start if isinstance(v, RegisterView) else v.base for v in views]
    caps = [v.swizzle.unit for v in views if isinstance(v, MemoryView) and v.swizzle]
    refusals: list[str] = []
    for bits, elems in widths:
        misfit = None
        if caps and elems > min(caps):
            misfit = f"wider than one {min(caps)}-element swizzle unit"
        misfit = misfit or vector_misfit(
            elems,
            (tail.extent, tail.strides),
            address_strides,
            list(zip(names, bases, strict=True)),
        )
        if misfit is not None:
            refusals.append(f"{bits}-bit: {misfit}")
            continue
        outer = list(bundle[:-1])
        if tail.extent > elems:
            outer.append(Dim(tail.extent // elems, tuple(s * elems for s in tail.strides)))
        return ScopePartition(
            outer=tuple(outer),
            thread=thread,
            vec=elems,
            vec_bits=bits,
            bases=tuple(bases),
            swizzles=tuple(v.swizzle if isinstance(v, MemoryView) else None for v in views),
            narrower_because=refusals[0] if refusals else None,
        )
    raise Decline("no access width fits: " + "; ".join(refusals))


@dataclass(frozen=True)
class RegisterTable:
    """The register-induced partition as a table: which element each thread holds where.

    ``elements[t, i]`` is the region's row-major index of the element that thread ``t`` of
    the scope keeps in register ``registers[i]``, or -1 where it keeps none. Warp-collective
    instructions (ldmatrix) need the whole table, not only one thread's bundle.
    """

    registers: tuple[int, ...]  # register indices the region uses, ascending
    elements: np.ndarray  # [threads, len(registers)]

    def holder_gaps(self) -> tuple[int, int] | None:
        """(thread, register) of the first slot no element fills, or None when all are full."""
        empty = np.argwhere(self.elements < 0)
        if len(empty) == 0:
            return None
        t, i = empty[0]
        return int(t), self.registers[int(i)]


def register_table(view: RegisterView, scope: str, threads: int) -> RegisterTable:
    """Every (thread, register) -> element of ``view`` at ``scope`` (``threads`` threads).
    A layout that names no thread axis gives every thread of the scope the whole tile (each
    its own copy, as at thread scope)."""
    if not view.thread_axes and threads > 1:
        whole = register_table(view, "thread", 1)
        return RegisterTable(whole.registers, np.repeat(whole.elements, threads, axis=0))
    digits = mixed_radix_digits([ext for ext, _, _ in view.atoms])
    thread = np.zeros(view.size, dtype=np.int64)
    register = np.full(view.size, view.base, dtype=np.int64)
    for digit, (ext, stride, axis) in zip(digits, view.atoms, strict=True):
        if axis == MEMORY_AXIS:
            register += digit * stride
        else:
            thread += digit * thread_stride(axis, stride, ext, scope, threads)
    holders = thread[:, None]
    for ext, stride, axis in view.replicas:
        t_stride = thread_stride(axis, stride, ext, scope, threads)
        holders = (holders[:, :, None] + t_stride * np.arange(ext)[None, None, :]).reshape(
            view.size, -1
        )
    if holders.max(initial=0) >= threads:
        raise Decline(
            f"register layout of {view.operand} names thread {int(holders.max())}; "
            f"scope {scope} has {threads}"
        )
    registers, column = np.unique(register, return_inverse=True)
    element = np.broadcast_to(np.arange(view.size)[:, None], holders.shape).ravel()
    slot = (holders * len(registers) + column[:, None]).ravel()
    if len(np.unique(slot)) != len(slot):
        raise Decline(f"register layout of {view.operand} puts several elements in one place")
    table = np.full(threads * len(registers), -1, dtype=np.int64)
    table[slot] = element
    return RegisterTable(tuple(int(r) for r in registers), table.reshape(threads, len(registers)))


def _held_by_every_thread(
    view: RegisterView, t_stride: int, extent: int, scope: str, threads: int
) -> bool:
    """Whether ``view`` holds its data in each of the threads ``t_stride * j`` (j < extent)
    tells apart: it names no thread at all, or one of its replicas spans those threads."""
    if not view.thread_axes:
        return True
    for r_extent, r_stride, axis in view.replicas:
        r_t = thread_stride(axis, r_stride, r_extent, scope, threads)
        if t_stride % r_t == 0 and t_stride * extent <= r_t * r_extent:
            return True
    return False


def _check_covers_scope(
    reg: RegisterView, dims: list[tuple[int, Dim]], scope: str, threads: int
) -> None:
    """Thread dimensions must name each of the scope's threads exactly once."""
    covered = 1
    for t_stride, dim in sorted(dims, key=lambda d: d[0]):
        if t_stride != covered:
            break
        covered *= dim.extent
    else:
        if covered == threads:
            return
    axes = "/".join(reg.thread_axes) or "none"
    raise Decline(
        f"register layout thread axis {axes} of {reg.operand} does not match scope {scope}: "
        f"it tells {math.prod(d.extent for _, d in dims)} threads apart (thread-index strides "
        f"{sorted(t for t, _ in dims)}), the scope has {threads}; each thread must own "
        "exactly one bundle"
    )


def atoms_by_dim(
    atoms: Sequence[tuple[int, int, Any]], extents: Sequence[int], name: str
) -> list[list[tuple[int, int, Any]]]:
    """An operand's atoms (over its region's row-major index) split at its dimensions'
    boundaries: one list per dimension, outer -> inner; an atom that spans a boundary is
    split there. Declines where a dimension's extent does not split the atoms."""
    stack = list(atoms)
    per_dim: list[list[tuple[int, int, Any]]] = []
    for e in reversed(extents):
        group: list[tuple[int, int, Any]] = []
        need = e
        while need > 1:
            if not stack:
                raise Decline(f"{name} layout does not cover its region")
            ext, stride, tag = stack.pop()
            if ext == 1:
                continue
            if need % ext == 0:
                group.insert(0, (ext, stride, tag))
                need //= ext
            elif ext % need == 0:
                group.insert(0, (need, stride, tag))
                stack.append((ext // need, stride * need, tag))
                need = 1
            else:
                raise Decline(f"{name} layout does not split at its dimension boundaries")
        per_dim.insert(0, group)
    if any(ext != 1 for ext, _, _ in stack):
        raise Decline(f"{name} layout covers more than its region")
    return per_dim


def refine_tagged_pairs(
    a: Sequence[tuple[int, int, Any]], b: Sequence[tuple[int, int, Any]], names: tuple[str, str]
) -> list[tuple[int, int, tuple[int, Any], tuple[int, Any]]]:
    """Two operands' atoms over one dimension, split to common extents: rows of (extent,
    step along the dimension's index, (stride, axis) on a, (stride, axis) on b), outer ->
    inner. Declines where the two do not nest."""
    if not a and not b:
        return []
    try:
        rows = refine_tagged(tuple(a), tuple(b))
    except Decline as why:
        raise Decline(
            f"{names[0]} and {names[1]} do not split one dimension alike: {why}"
        ) from None
    out, inner = [], 1
    for ext, (ca, cb) in reversed(rows):
        out.insert(0, (ext, inner, ca, cb))
        inner *= ext
    return out


def lift_to(
    atoms: Sequence[tuple[int, int, Any]],
    extents: Sequence[int],
    target: Sequence[int],
    name: str,
) -> tuple[tuple[int, int, Any], ...]:
    """Broadcast an operand's atoms (over region ``extents``) to region ``target``.

    Shapes align on the right, as numpy's do; a dimension of extent 1 (or a missing leading
    one) against a larger one repeats the operand there: an atom of stride 0.
    """
    extents = [1] * (len(target) - len(extents)) + list(extents)
    if len(extents) > len(target):
        raise Decline(f"{name} has more dimensions ({len(extents)}) than the result")
    for e, t in zip(extents, target, strict=True):
        if e not in (1, t):
            raise Decline(f"{name} extents {list(extents)} do not broadcast to {list(target)}")
    per_dim = atoms_by_dim(atoms, extents, name)
    lifted: list[tuple[int, int, Any]] = []
    for group, e, t in zip(per_dim, extents, target, strict=True):
        lifted += group if e == t else [(t, 0, MEMORY_AXIS)]
    return tuple(a for a in lifted if a[0] != 1)
