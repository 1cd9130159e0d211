"""isa/ is the bottom floor: its records and bit functions import nothing of the package
above them (no layout/, no call model, no TVM), and the swizzle bit function lives here;
layout.swizzle reads it from a TVM layout and applies the same function to TIR."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import tirx_cuda_dispatch.isa as isa_pkg
from tirx_cuda_dispatch.isa.swizzle import Swizzle, byte_swizzle
from tirx_cuda_dispatch.layout import swizzle as layout_swizzle

ISA = Path(isa_pkg.__file__).parent


def outside_imports(source: str) -> list[str]:
    """The imports of a module of isa/ that reach outside it: a parent package (``..x``)
    or a third-party one (TVM, numpy)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            if node.level > 1 or (node.level == 0 and node.module.split(".")[0] not in STDLIB):
                found.append(f"{'.' * node.level}{node.module or ''}")
        elif isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.split(".")[0] not in STDLIB]
    return found


STDLIB = {"__future__", "dataclasses", "typing", "collections", "math", "itertools", "enum"}


@pytest.mark.parametrize("module", sorted(p.name for p in ISA.glob("*.py")))
def test_isa_imports_nothing_above_it(module):
    assert outside_imports((ISA / module).read_text()) == []


def test_the_check_catches_an_import_from_above():
    """The control: an isa module that reached up to layout/ or TVM would be named."""
    assert outside_imports("from ..layout.swizzle import Swizzle\nimport tvm\n") == [
        "..layout.swizzle",
        "tvm",
    ]


def test_the_128_byte_swizzle_permutes_16_byte_units_by_the_row():
    """``Swizzle<3, 4, 3>`` on byte addresses: unit u of row r (128-byte rows) lands at
    unit u ^ (r % 8); the byte within the unit stays; 1,024 bytes later all repeats."""
    s = Swizzle(per_element=4, bits=3, shift=3)
    for row in range(8):
        for unit in range(8):
            for byte in (0, 5, 15):
                addr = row * 128 + unit * 16 + byte
                assert s.apply(addr) == row * 128 + (unit ^ row) * 16 + byte
                assert s.apply(addr + s.period) == s.apply(addr) + 1024
    assert byte_swizzle(s, 1) == 128 and byte_swizzle(Swizzle(3, 3, 3), 2) == 128
    assert byte_swizzle(Swizzle(3, 3, 4), 2) is None  # not a hardware mode


def test_layouts_swizzle_is_the_same_function():
    mine = layout_swizzle.Swizzle(3, 3, 3)
    assert isinstance(mine, Swizzle)
    assert [mine.apply(o) for o in range(2048)] == [Swizzle(3, 3, 3).apply(o) for o in range(2048)]
    assert layout_swizzle.byte_swizzle is byte_swizzle
