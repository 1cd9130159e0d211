"""Operand memory views and their common refinement."""

from __future__ import annotations

import pytest
from tvm import tirx
from tvm.tirx.layout import ComposeLayout, S, TileLayout

from tirx_cuda_dispatch.call import Operand
from tirx_cuda_dispatch.errors import Decline
from tirx_cuda_dispatch.layout.atoms import (
    MemoryView,
    common_elements,
    common_refinement,
    memory_view,
)


def _operand(shape, layout, region, scope="global"):
    buf = tirx.decl_buffer(shape, "float32", name="A", scope=scope, layout=layout)
    return Operand("src", buf, tuple(region))


def test_row_major_region_at_an_offset():
    bx = tirx.Var("bx", "int32")
    view = memory_view(_operand((256, 64), TileLayout(S[(256, 64)]), [(bx * 32, 32), (16, 32)]))
    assert view.atoms == ((32, 64), (32, 1))
    assert str(view.base) == "bx * 2048 + 16"
    assert view.swizzle is None


@pytest.mark.parametrize("heads", [1, 2])
def test_a_dimension_of_one_element_starts_at_zero(heads):
    """``K[h // 2, rows, :]`` of a tensor with one key/value head: the symbolic start of
    the extent-1 dimension adds nothing to the base (any other start is out of bounds),
    so the offset's alignment is provable; the control: with two heads it stays."""
    h = tirx.Var("h", "int32")
    shape = (heads, 100, 128)
    view = memory_view(_operand(shape, TileLayout(S[shape]), [(h // 2, 1), (64, 36), (0, 128)]))
    assert ("h" in str(view.base)) == (heads == 2)
    if heads == 1:
        assert view.base == 64 * 128


def test_unit_extents_are_dropped_and_offsets_match_tvm():
    layout = TileLayout(S[(16, 2, 8) : (8, 128, 1)])
    view = memory_view(_operand((16, 16), layout, [(3, 1), (4, 8)]))
    assert all(ext != 1 for ext, _ in view.atoms)
    for i in range(8):
        assert view.offset(i) == int(layout.apply(3 * 16 + 4 + i)["m"])


def test_swizzled_view_keeps_the_swizzle():
    layout = ComposeLayout(3, 3, 3, TileLayout(S[4096:1]))
    view = memory_view(_operand((64, 64), layout, [(8, 16), (8, 16)], scope="shared"))
    for r in range(16):
        for c in range(16):
            assert view.offset(r * 16 + c) == int(layout.apply((8 + r) * 64 + 8 + c)["m"])


def test_declines_without_layout():
    buf = tirx.decl_buffer((8, 8), "float32", name="A", layout=None)
    with pytest.raises(Decline, match="A has no layout"):
        memory_view(Operand("src", buf, ((0, 8), (0, 8))))


def test_common_refinement_splits_the_larger_atom():
    rows = common_refinement(((32, 32), (32, 1)), ((1024, 1),))
    assert rows == [(32, (32, 32)), (32, (1, 1))]
    rows = common_refinement(((4, 100), (6, 1)), ((24, 2),))
    assert rows == [(4, (100, 12)), (6, (1, 2))]


def test_common_refinement_declines_when_atoms_do_not_nest():
    with pytest.raises(Decline, match="do not nest"):
        common_refinement(((6, 4), (4, 1)), ((8, 3), (3, 1)))
    with pytest.raises(Decline, match="different element counts"):
        common_refinement(((4, 1),), ((8, 1),))


def test_memory_view_offsets():
    view = MemoryView("A", ((4, 10), (3, 1)), 5)
    assert [view.offset(i) for i in range(6)] == [5, 6, 7, 15, 16, 17]


# -- elements two views of one memory both touch ---------------------------------------------
SWZ = ComposeLayout(3, 3, 3, TileLayout(S[4096:1]))  # 128-byte swizzle of float16, period 512


def _rows(first, count, layout=None, base_var=None):
    """A view of rows [first, first + count) of a 64x64 tile (``base_var`` added to the row)."""
    row = first if base_var is None else base_var + first
    layout = layout if layout is not None else TileLayout(S[(64, 64)])
    return memory_view(_operand((64, 64), layout, [(row, count), (0, 64)], scope="shared"))


def test_common_elements_counts_the_overlap():
    assert common_elements(_rows(0, 32), _rows(16, 32)) == 16 * 64
    assert common_elements(_rows(0, 32), _rows(32, 32)) == 0  # negative control: disjoint


def test_common_elements_applies_the_swizzle():
    # Rows 0-7 and 8-15 are disjoint before and after any permutation of whole rows' units.
    assert common_elements(_rows(0, 8, SWZ), _rows(8, 8, SWZ)) == 0
    assert common_elements(_rows(0, 8, SWZ), _rows(7, 8, SWZ)) == 64
    # The same elements seen through a swizzle on one side only: a permutation of row 0's
    # units lands inside rows 0-7, so the plain rows 0-7 meet all of it.
    assert common_elements(_rows(0, 1, SWZ), _rows(0, 8)) == 64


def test_common_elements_with_symbolic_bases():
    i = tirx.Var("i", "int32")
    # A constant apart: decided.
    assert common_elements(_rows(0, 16, base_var=i * 32), _rows(16, 16, base_var=i * 32)) == 0
    assert common_elements(_rows(0, 16, base_var=i * 32), _rows(8, 16, base_var=i * 32)) == 512
    # Under the swizzle: decided where the base is a multiple of its period (32 rows of 64 =
    # 2048 elements, period 512), not where it may fall inside one (a row: 64 elements).
    assert common_elements(_rows(0, 16, SWZ, i * 32), _rows(16, 16, SWZ, i * 32)) == 0
    assert common_elements(_rows(0, 1, SWZ, i), _rows(1, 1, SWZ, i)) is None
    # A symbolic amount apart: undecided.
    j = tirx.Var("j", "int32")
    assert common_elements(_rows(0, 16, base_var=i), _rows(0, 16, base_var=j)) is None


def test_common_elements_counts_repeated_offsets_once():
    """A layout whose offsets repeat (stride 0 broadcast) touches each element once."""
    bcast = TileLayout(S[(64, 64) : (0, 1)])
    view = memory_view(_operand((64, 64), bcast, [(0, 8), (0, 64)], scope="shared"))
    assert common_elements(view, _rows(0, 1)) == 64
