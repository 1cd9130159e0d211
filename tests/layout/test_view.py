"""layout/ reads views, not the call model: its modules import nothing above them but the
hardware facts (isa/), the IR facts and the errors, and a :class:`TileView` built by hand
(as another TIRx host would) serves them as a call's operand does."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from tvm import tirx
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
