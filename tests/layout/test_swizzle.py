"""Swizzle: our int and TIR forms agree with TVM's ComposeLayout."""

from __future__ import annotations

import pytest
import tvm
from tvm.tirx.layout import ComposeLayout, S, TileLayout

from tirx_cuda_dispatch.errors import Decline
from tirx_cuda_dispatch.layout.swizzle import Swizzle


@pytest.mark.parametrize("m, b, s", [(3, 3, 3), (3, 1, 3), (2, 2, 3), (3, 2, 3), (2, 3, 4)])
def test_apply_matches_tvm_compose_layout(m, b, s):
    size = 1 << (m + s + b + 1)
    layout = ComposeLayout(m, b, s, TileLayout(S[size:1]))
    swz = Swizzle.of(layout)
    assert (swz.per_element, swz.bits, swz.shift) == (m, b, s)
    for off in range(size):
        assert swz.apply(off) == int(layout.apply(off)["m"])


_BINARY = {
    "BitwiseXor": lambda a, b: a ^ b,
    "BitwiseAnd": lambda a, b: a & b,
    "RShift": lambda a, b: a >> b,
    "LShift": lambda a, b: a << b,
}


def _evaluate(expr, env):
    """Evaluate the integer expression tree the swizzle builds (the simplifier keeps xor)."""
    if isinstance(expr, tvm.tirx.Var):
        return env[expr.name]
    if isinstance(expr, tvm.tirx.IntImm):
        return int(expr.value)
    return _BINARY[type(expr).__name__](_evaluate(expr.a, env), _evaluate(expr.b, env))


@pytest.mark.parametrize("m, b, s", [(3, 3, 3), (2, 2, 3), (3, 1, 3)])
def test_expr_form_matches_int_form(m, b, s):
    swz = Swizzle(m, b, s)
    expr = swz.apply(tvm.tirx.Var("x", "int32"))
    for value in range(0, 4096, 3):
        assert _evaluate(expr, {"x": value}) == swz.apply(value)


def test_unit_is_the_widest_contiguous_vector():
    swz = Swizzle(3, 3, 3)
    assert swz.unit == 8
    for base in range(0, 1024, 8):
        assert [swz.apply(base + k) for k in range(8)] == [swz.apply(base) + k for k in range(8)]


def test_plain_layout_has_no_swizzle_and_outer_swizzle_declines():
    assert Swizzle.of(TileLayout(S[(8, 8)])) is None
    with pytest.raises(Decline, match="outer swizzle"):
        Swizzle.of(ComposeLayout(3, 3, 3, TileLayout(S[512:1]), False), "A_smem")
