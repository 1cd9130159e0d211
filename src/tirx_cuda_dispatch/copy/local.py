"""copy -> local: one thread copies registers to registers.

Accepts: a CUDA target; thread scope; a valid copy (layouts on both sides, equal dtypes,
equal non-unit extents) between two ``local`` buffers whose layouts name registers only
(no thread axes: each thread owns its whole array); elements of a byte or more; no config
(a cache hint names global memory, which a register copy never touches).

Emits: one copy per register word, unrolled, so every index is a constant where the
regions' starts are and the arrays stay in registers (a register array indexed by a value
unknown at compile time lives in local memory: ``LDL``/``STL``). Where both regions are
contiguous runs at aligned offsets, narrow elements are copied as whole 32-bit registers
(two float16, four int8); otherwise element by element. A ``mov`` between registers is
what PTX has (PTX ISA "Data Movement and Conversion Instructions: mov"); the compiler
renames most of them away.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tvm.script import tirx as T
from tvm.tirx.layout import ComposeLayout, TileLayout

from ..call import Operand, TileCall
from ..codegen import access_view, impl_prim_func
from ..errors import Decline
from ..irfacts import as_int
from ..layout.atoms import common_refinement, memory_view
from ..layout.partition import Dim, dims_offset, fuse_contiguous
from ..layout.vector import vector_candidates, vector_misfit
from ..predicates import (
    requires_cuda,
    requires_memory_pair,
    requires_no_register_config,
    requires_scope,
    requires_valid_copy,
)
from ..registry import variant

REGISTER_BITS = 32  # one register: wider words would be several registers each


def requires_registers_only(call: TileCall) -> tuple[bool, str | None]:
    """Both layouts are over the thread's registers (the ``m`` axis) and name no thread."""
    for opnd in (call.operand("dst"), call.operand("src")):
        axes = _thread_axes(opnd)
        if axes:
            return False, (
                f"{opnd.role} {opnd.name}'s layout names thread axes {axes}; a thread's "
                "register copy needs layouts over its own registers only"
            )
    return True, None


def _thread_axes(opnd: Operand) -> list[str]:
    layout = opnd.layout
    tile = layout.tile_layout if isinstance(layout, ComposeLayout) else layout
    if not isinstance(tile, TileLayout):
        return []  # memory_view declines it with the reason
    names = {str(it.axis.name) for it in tile.shard}
    names |= {str(it.axis.name) for it in tile.replica}
    names |= {str(axis.name) for axis in tile.offset}
    return sorted(names - {"m"})


@dataclass(frozen=True)
class LocalPlan:
    """Facts of one register->register copy: how many copies, how wide, from where to where."""

    dtype: str
    elem_bits: int
    word_bits: int  # bits per copy: one element, or several packed in one register
    dims: tuple[Dim, ...]  # copy index -> element offsets (dst, src), outer -> inner
    bases: tuple[Any, Any]  # element offset of each region (int or PrimExpr): (dst, src)
    narrower_because: str | None = None

    @property
    def per_word(self) -> int:
        return self.word_bits // self.elem_bits

    @property
    def copies(self) -> int:
        n = 1
        for d in self.dims:
            n *= d.extent
        return n

    @property
    def constant_indices(self) -> bool:
        return all(as_int(b) is not None for b in self.bases)

    def offset(self, which: int, index: Any) -> Any:
        """Element offset on operand ``which`` (0 dst, 1 src) of copy ``index``."""
        return self.bases[which] + dims_offset(index, self.dims, which)

    def slot(self, which: int, index: Any) -> Any:
        """:meth:`offset` in words (exact: the plan aligned every offset to a word)."""
        return self.offset(which, index) // self.per_word

    def pairs(self) -> list[tuple[int, int]]:
        """(dst, src) element offset of every copy's first element (constant bases only)."""
        return [(int(self.offset(0, i)), int(self.offset(1, i))) for i in range(self.copies)]

    def facts(self) -> dict:
        facts = {
            "copies": self.copies,
            "word_bits": self.word_bits,
            "elements": self.copies * self.per_word,
            "constant_indices": self.constant_indices,
        }
        if self.narrower_because:
            facts["narrower_because"] = self.narrower_because
        return facts

    def __str__(self) -> str:
        where = "" if self.constant_indices else ", indices depend on the region starts"
        return (
            f"local {self.dtype}: {self.copies} copies x {self.word_bits} bits "
            f"({self.copies * self.per_word} elements, unrolled{where})"
        )


def plan(call: TileCall) -> LocalPlan:
    dst, src = call.operand("dst"), call.operand("src")
    if src.elem_bits < 8:
        raise Decline(f"{src.dtype} elements are narrower than a byte; needs 8 bits or more")
    views = [memory_view(dst), memory_view(src)]
    dims = fuse_contiguous(
        [Dim(ext, strides) for ext, strides in common_refinement(*(v.atoms for v in views))]
    )
    if not dims:
        dims = [Dim(1, (1, 1))]
    bases = (views[0].base, views[1].base)
    refusals = []
    for bits, elems in vector_candidates(src.elem_bits):
        if bits > max(REGISTER_BITS, src.elem_bits):
            continue
        misfit = vector_misfit(
            elems,
            (dims[-1].extent, dims[-1].strides),
            [
                (f"{v.operand} dimension", d.strides[i])
                for d in dims[:-1]
                for i, v in enumerate(views)
            ],
            [(v.operand, v.base) for v in views],
        )
        if misfit is not None:
            refusals.append(f"{bits}-bit: {misfit}")
            continue
        inner = dims[-1]
        words = list(dims[:-1])
        if inner.extent > elems or not words:
            words.append(Dim(inner.extent // elems, tuple(s * elems for s in inner.strides)))
        return LocalPlan(
            src.dtype, src.elem_bits, bits, tuple(words), bases, refusals[0] if refusals else None
        )
    raise Decline("no copy width fits: " + "; ".join(refusals))  # the element width always does


@variant(
    "copy",
    "local",
    priority=10,
    order=2,  # after the memory variants: it takes only local->local, which none of them does
    predicates=[
        requires_cuda,
        requires_scope("thread"),
        requires_valid_copy,
        requires_memory_pair((("local", "local"),)),
        requires_registers_only,
        requires_no_register_config,
    ],
    plan=plan,
)
def emit(plan: LocalPlan, call: TileCall, given: Mapping[str, Any]):
    """An unrolled loop of word copies between views of the two register arrays."""
    dst_buf, src_buf = call.operand("dst").buffer, call.operand("src").buffer
    bits, elem_bits, copies = plan.word_bits, plan.elem_bits, plan.copies

    # fmt: off
    @impl_prim_func
    def impl():
        d_words = access_view(dst_buf, bits, elem_bits)
        s_words = access_view(src_buf, bits, elem_bits)
        for i in T.unroll(copies):
            d_words[plan.slot(0, i)] = s_words[plan.slot(1, i)]
    # fmt: on
    return impl
