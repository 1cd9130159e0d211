"""layout/ reads views, not the call model: its modules import nothing above them but the
hardware facts (isa/), the IR facts and the errors, and a :class:`TileView` built by hand
(as another TIRx host would) serves them as a call's operand does."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from tvm import sym, tirx
from tvm.tirx.layout import S, TileLayout

import tirx_cuda_dispatch.layout as layout_pkg
from tirx_cuda_dispatch import fragments
from tirx_cuda_dispatch.call import Operand
from tirx_cuda_dispatch.layout.atoms import memory_view
from tirx_cuda_dispatch.layout.register import register_table, register_view
from tirx_cuda_dispatch.layout.view import TileView

LAYOUT = Path(layout_pkg.__file__).parent
BELOW = {"isa", "errors", "irfacts", "scopes"}  # what layout/ may stand on


def imports_from_above(source: str) -> list[str]:
    """The package modules (``..x``) a layout/ module imports that are not below it."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.level > 1:
            top = (node.module or "").split(".")[0]
            if node.level > 2 or top not in BELOW:
                found.append(f"{'.' * node.level}{node.module or ''}")
    return found


@pytest.mark.parametrize("module", sorted(p.name for p in LAYOUT.glob("*.py")))
def test_layout_imports_nothing_of_the_call_model(module):
    assert imports_from_above((LAYOUT / module).read_text()) == []


def test_the_check_catches_the_call_model():
    """The control: a layout module that reached up to the call model or a variant would
    be named; isa/ and the IR facts may be read."""
    source = "from ..call import Operand\nfrom ..copy.reg import plan\nfrom ..isa import wgmma\n"
    assert imports_from_above(source) == ["..call", "..copy.reg"]


def test_a_view_built_by_hand_is_what_a_call_operand_is():
    """memory_view of a hand-built view equals that of the call model's operand over the
    same region (the Operand is a TileView with an access)."""
    bx = tirx.Var("bx", "int32")
    buf = tirx.decl_buffer((256, 64), "float16", name="A", layout=TileLayout(S[(256, 64)]))
    region = ((bx * 32, 32), (16, 32))
    mine, theirs = TileView("src", buf, region), Operand("src", buf, region, access="read")
    assert isinstance(theirs, TileView) and theirs.access == "read"
    a, b = memory_view(mine), memory_view(theirs)
    assert a.atoms == b.atoms == ((32, 64), (32, 1)) and str(a.base) == str(b.base)
    assert mine.describe == "A[bx * 32:bx * 32+32, 16:48] (global float16)"


def test_a_register_view_built_by_hand():
    """A wgmma accumulator tile as a view: every thread of the warpgroup holds its 32
    elements, a row's 16 in two threads' pairs."""
    acc = tirx.decl_buffer(
        (64, 64), "float32", name="C", scope="local",
        layout=fragments.wgmma_accumulator_layout(64, 1),
    )  # fmt: skip
    table = register_table(register_view(TileView("C", acc, ((0, 64), (0, 64)))), "warpgroup", 128)
    assert table.elements.shape == (128, 32)
    assert sorted(table.elements.ravel().tolist()) == list(range(64 * 64))


def test_a_region_written_with_lets_is_sliced_through_their_values():
    """TVM's algebra cannot slice a swizzled tile at ``row : row + 1, col : col + 4`` with
    ``row``, ``col`` opaque lets; with their values (``bindings``) the view is a 4-element
    run at ``row * 32 + col`` (under the swizzle). The control: without them it declines."""
    from tvm.tirx.layout import ComposeLayout

    from tirx_cuda_dispatch.errors import Decline

    tid, row, col = (tirx.Var(n, "int32") for n in ("tid", "row", "col"))
    layout = ComposeLayout(2, 3, 3, TileLayout(S[(64, 8, 32) : (32, 2048, 1)]))
    buf = tirx.decl_buffer((64, 256), "float32", name="T", scope="shared", layout=layout)
    region = ((row, 1), (col, 4))
    with pytest.raises(Decline, match="cannot be sliced"):
        memory_view(TileView("dst", buf, region))
    lets = ((row, tid % 64), (col, tid // 64 * 4))
    view = memory_view(TileView("dst", buf, region, bindings=lets))
    assert view.atoms == ((4, 1),) and view.swizzle is not None
    for t in (0, 5, 63, 64, 127):  # row * 32 + col, the tile's offset of the run
        ana = sym.Analyzer()
        ana.bind(tid, t)
        assert int(ana.simplify(view.base)) == t % 64 * 32 + t // 64 * 4
