"""A memory operand's region as (extent, stride) atoms in logical row-major order.

TVM's layout algebra does the hard part: ``layout.slice(buffer_shape, region)`` returns a
layout over the region whose shard iterators, read left to right, are a mixed radix of the
region's row-major element index. We turn that into plain ints (atoms), a base offset
(an int or a TIR expression, e.g. ``bx * 1024``), and the swizzle on top, if any; every
shared partition algorithm works on those.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from tvm import sym
from tvm.tirx.layout import ComposeLayout, TileLayout

from ..errors import Decline
from ..irfacts import as_int, prove_multiple
from .swizzle import Swizzle
from .view import TileView

Atom = tuple[int, int]  # (extent, stride)


@dataclass(frozen=True)
class MemoryView:
    """Where each element of an operand's region lives, relative to the buffer's data."""

    operand: str  # the buffer name, for reasons
    atoms: tuple[Atom, ...]  # outer -> inner over the region's row-major index
    base: Any  # element offset of the region's first element (int or PrimExpr)
    swizzle: Swizzle | None = None

    @property
    def size(self) -> int:
        n = 1
        for ext, _ in self.atoms:
            n *= ext
        return n

    def offset(self, index: int) -> int:
        """Element offset of the region's ``index``-th element (ints only; for tests)."""
        base = as_int(self.base)
        if base is None:
            raise ValueError("offset() needs a constant base")
        off = base
        for ext, stride in reversed(self.atoms):
            off += (index % ext) * stride
            index //= ext
        return self.swizzle.apply(off) if self.swizzle else off


def _region_bounds(opnd: TileView) -> list[tuple[Any, Any]]:
    """The region as (start, end) per dimension. A dimension of extent 1 starts at 0 in
    every in-bounds region (the bounds check refutes any other start), so its symbolic
    start (``K[h // group, ...]`` with one key/value head) adds nothing to the offset
    whose alignment a vector access needs."""
    return [
        (0, 1) if as_int(n) == 1 and as_int(ext) == 1 else (lo, lo + ext)
        for (lo, ext), n in zip(opnd.region, opnd.shape, strict=True)
    ]


def _check_span_fits_shape(opnd: TileView, layout: Any, size: int | None) -> None:
    """TVM 0.27 allocates a shared or local buffer by its shape, not by its layout's span:
    a padded layout on an ``(8, 8)`` shared buffer addresses past the 64 elements the kernel
    allocates (found by the simulator's fuzzing: both pipelines wrote out of bounds).
    Decline such operands. A global buffer is not allocated by the kernel: its memory is
    the caller's, so a strided view of it (``S[(4, 4):(16, 1)]`` on a ``(4, 4)`` parameter:
    rows of a wider tensor) may span past its shape; the caller passes that memory."""
    if opnd.memory == "global":
        return
    tile = layout.tile_layout if isinstance(layout, ComposeLayout) else layout
    span = as_int(tile.span()) if isinstance(tile, TileLayout) else None
    if opnd.carved and span is not None and (opnd.room is None or span <= opnd.room):
        return  # carved from a larger allocation that holds the padding (bounds.py checks)
    if size is not None and span is not None and span > size:
        raise Decline(
            f"{opnd.name}'s layout {layout} spans {span} elements but the buffer holds "
            f"{size} (shape {list(opnd.shape)}; TVM allocates a {opnd.scope} buffer by its "
            f"shape): declare the buffer with a shape that covers the padding"
        )


def memory_view(opnd: TileView) -> MemoryView:
    """The :class:`MemoryView` of an operand with a memory layout (global, shared, or
    local registers without thread axes); declines with the reason otherwise."""
    layout = opnd.layout
    if layout is None:
        raise Decline(f"{opnd.name} has no layout")
    swizzle = Swizzle.of(layout, opnd.name)
    if any(e is None for e in opnd.extents):
        raise Decline(f"{opnd.name} region extents {list(opnd.extents)} are not all constant")
    if len(opnd.buffer.strides) > 0:
        raise Decline(f"{opnd.name} has explicit buffer strides; describe them with a layout")
    size = static_size(opnd.shape)
    if size is not None and size >= INT32_LIMIT:
        # TVM's layout arithmetic and our offsets are 32-bit: decline rather than wrap.
        raise Decline(f"{opnd.name} holds {size} elements; offsets must stay below 2**31")
    _check_span_fits_shape(opnd, layout, size)
    try:
        sliced = layout.slice(list(opnd.shape), _region_bounds(opnd))
        if sliced is None and opnd.bindings:  # TVM's algebra cannot see through a let:
            bound = dataclasses.replace(opnd, region=opnd.bound_region())  # its value
            sliced = layout.slice(list(opnd.shape), _region_bounds(bound))
    except Exception as exc:  # noqa: BLE001  (TVM's layout algebra refuses: say why, decline)
        why = (str(exc).strip().splitlines() or [type(exc).__name__])[-1].strip()
        raise Decline(
            f"{opnd.name}'s layout {str(layout).replace('T.', '')} does not describe its shape "
            f"{list(opnd.shape)} (TVM cannot slice it: {why}); give the buffer a layout of "
            "its own shape"
        ) from None
    if sliced is None:
        raise Decline(f"{opnd.name} layout {layout} cannot be sliced to region {opnd.describe}")
    tile = sliced.tile_layout if isinstance(sliced, ComposeLayout) else sliced
    if not isinstance(tile, TileLayout):
        raise Decline(f"{opnd.name} layout {type(tile).__name__} is not a tile layout")
    if len(tile.replica) > 0:
        raise Decline(
            f"{opnd.name} layout replicates data ({layout}); a copy needs one home per element"
        )
    atoms: list[Atom] = []
    for it in tile.shard:
        if str(it.axis.name) != "m":
            raise Decline(
                f"{opnd.name} layout has a {it.axis.name} axis; a {opnd.scope} operand needs a memory layout"
            )
        ext, stride = as_int(it.extent), as_int(it.stride)
        if ext is None or stride is None:
            raise Decline(f"{opnd.name} layout has a non-constant iterator {it.extent}:{it.stride}")
        if ext != 1:
            atoms.append((ext, stride))
    base: Any = 0
    for axis, value in tile.offset.items():
        if str(axis.name) != "m":
            raise Decline(f"{opnd.name} layout offsets the {axis.name} axis")
        base = value
    elem_offset = opnd.buffer.elem_offset
    if as_int(elem_offset) != 0:
        base = base + elem_offset
    base_int = as_int(base)
    return MemoryView(opnd.name, tuple(atoms), base if base_int is None else base_int, swizzle)


def mixed_radix_digits(extents: Sequence[int]) -> list[np.ndarray]:
    """Digits of every index ``0 .. prod(extents)-1`` in the mixed radix ``extents``
    (outer -> inner): one array per extent, the way atoms split a region's index."""
    index = np.arange(math.prod(extents), dtype=np.int64)
    digits: list[np.ndarray] = []
    for ext in reversed(extents):
        digits.insert(0, index % ext)
        index = index // ext
    return digits


def element_offsets(view: MemoryView) -> np.ndarray:
    """Offset of each region element relative to the region's base, before any swizzle,
    indexed by the region's row-major element index."""
    offsets = np.zeros(view.size, dtype=np.int64)
    for digit, (_, stride) in zip(
        mixed_radix_digits([ext for ext, _ in view.atoms]), view.atoms, strict=True
    ):
        offsets += digit * stride
    return offsets


def common_elements(a: MemoryView, b: MemoryView) -> int | None:
    """How many buffer elements two views of one memory both touch (swizzles applied);
    None where that depends on values unknown at compile time: bases that differ by a
    symbolic amount, or a symbolic base under a swizzle that is not a multiple of the
    swizzle's period."""
    delta = as_int(sym.Analyzer().simplify(b.base - a.base))
    if delta is None:
        return None
    # Offsets from a's base; a symbolic base is factored out, which a swizzle allows only
    # where the base is a multiple of its period.
    origin = as_int(a.base)
    if origin is None:
        if any(
            v.swizzle is not None and not prove_multiple(a.base, v.swizzle.period) for v in (a, b)
        ):
            return None
        origin = 0
    sets = []
    for view, base in ((a, origin), (b, origin + delta)):
        offsets = element_offsets(view) + base
        if view.swizzle is not None:
            offsets = np.vectorize(view.swizzle.apply)(offsets)
        sets.append(set(offsets.tolist()))
    return len(sets[0] & sets[1])


INT32_LIMIT = 2**31


def static_size(shape: tuple[Any, ...]) -> int | None:
    n = 1
    for ext in shape:
        ext_i = as_int(ext)
        if ext_i is None:
            return None
        n *= ext_i
    return n


def common_refinement(*atom_lists: tuple[Atom, ...]) -> list[tuple[int, tuple[int, ...]]]:
    """Split atoms so that every list has the same extents; returns (extent, strides) rows.

    Each list is a mixed radix of the same index, so where two disagree the larger atom is
    split (outer part first). That needs the smaller extent to divide the larger; when it
    does not, the two views cannot be walked together by one loop nest and we decline.
    """
    tagged = [tuple((ext, stride, None) for ext, stride in atoms) for atoms in atom_lists]
    return [(ext, tuple(stride for stride, _ in cells)) for ext, cells in refine_tagged(*tagged)]


TaggedAtom = tuple[int, int, Any]  # (extent, stride, tag): the tag names what the stride counts


def refine_tagged(
    *atom_lists: tuple[TaggedAtom, ...],
) -> list[tuple[int, tuple[tuple[int, Any], ...]]]:
    """:func:`common_refinement` for atoms that carry a tag (a register layout's thread axis
    or ``m``); a split atom keeps its tag. Rows are (extent, ((stride, tag) per list))."""
    sizes = {_product([(a[0], a[1]) for a in atoms]) for atoms in atom_lists}
    if len(sizes) != 1:
        raise Decline(f"operands cover different element counts {sorted(sizes)}")
    # Work from the innermost atom outwards.
    stacks = [list(reversed(atoms)) for atoms in atom_lists]
    rows: list[tuple[int, tuple[tuple[int, Any], ...]]] = []
    while any(stacks):
        if not all(stacks):
            raise Decline("operand layouts do not refine to a common shape")
        step = min(s[0][0] for s in stacks)
        cells = []
        for s in stacks:
            ext, stride, tag = s[0]
            if ext % step:
                raise Decline(
                    f"operand layouts do not nest: extent {ext} is not a multiple of {step}"
                )
            cells.append((stride, tag))
            if ext == step:
                s.pop(0)
            else:
                s[0] = (ext // step, stride * step, tag)
        rows.append((step, tuple(cells)))
    return list(reversed(rows))


def _product(atoms: list[Atom]) -> int:
    n = 1
    for ext, _ in atoms:
        n *= ext
    return n
