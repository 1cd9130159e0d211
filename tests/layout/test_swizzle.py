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
    "Add": lambda a, b: a + b,
    "Mul": lambda a, b: a * b,
    "FloorMod": lambda a, b: a % b,
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


@pytest.mark.parametrize("m, b, s", [(3, 3, 3), (2, 2, 3), (3, 1, 3)])
def test_a_sum_swizzles_only_its_part_within_a_period(m, b, s):
    """A stage's offset (a multiple of the period), a lane's offset and a constant: the
    multiple of the period and the constant's high part move outside the xor; the value
    is the swizzle of the whole sum."""
    swz = Swizzle(m, b, s)
    stage, lane = tvm.tirx.Var("stage", "int32"), tvm.tirx.Var("lane", "int32")
    const = 3 * swz.period + (swz.period // 2 + swz.unit)
    expr = stage % 4 * (2 * swz.period) + lane * swz.unit + const
    split = swz.apply(expr)
    outside, inside = swz.split(expr)
    assert outside is not None
    assert int(_evaluate(outside, {"stage": 1, "lane": 0})) % swz.period == 0
    assert "stage" not in str(inside)  # the stage's term is outside the swizzle
    for st in range(6):
        for ln in range(0, swz.period // swz.unit * 2):
            whole = st % 4 * 2 * swz.period + ln * swz.unit + const
            assert _evaluate(split, {"stage": st, "lane": ln}) == swz.apply(whole)


def test_a_term_not_a_multiple_of_the_period_stays_inside():
    """Negative control of the split: a term the analyzer cannot prove a multiple of the
    period (here half of it) goes through the xor, and the value still agrees."""
    swz = Swizzle(3, 3, 3)
    stage, lane = tvm.tirx.Var("stage", "int32"), tvm.tirx.Var("lane", "int32")
    expr = stage * (swz.period // 2) + lane * 8
    outside, inside = swz.split(expr)
    assert outside is None and inside.same_as(expr)
    for st in range(5):
        for ln in range(16):
            got = _evaluate(swz.apply(expr), {"stage": st, "lane": ln})
            assert got == swz.apply(st * swz.period // 2 + ln * 8)


def test_unit_is_the_widest_contiguous_vector():
    swz = Swizzle(3, 3, 3)
    assert swz.unit == 8
    for base in range(0, 1024, 8):
        assert [swz.apply(base + k) for k in range(8)] == [swz.apply(base) + k for k in range(8)]


def test_plain_layout_has_no_swizzle_and_outer_swizzle_declines():
    assert Swizzle.of(TileLayout(S[(8, 8)])) is None
    with pytest.raises(Decline, match="outer swizzle"):
        Swizzle.of(ComposeLayout(3, 3, 3, TileLayout(S[512:1]), False), "A_smem")
