"""The registry: trial order, user registration, listing."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

import tirx_cuda_dispatch as tcd
from tirx_cuda_dispatch.registry import predicate, variants_for


@pytest.fixture
def scratch_op():
    """An op of TIRx we register no variant for, cleaned up after the test."""
    op = "binary_chain"
    assert not variants_for(op)
    yield op
    for v in variants_for(op):
        tcd.unregister(op, v.name)


def _emit(plan, call):
    return None


def test_order_is_priority_then_order_then_registration(scratch_op):
    tcd.variant(scratch_op, "late_low", priority=1)(_emit)
    tcd.variant(scratch_op, "b_first", priority=5, order=0)(_emit)
    tcd.variant(scratch_op, "a_second", priority=5, order=3)(_emit)
    tcd.variant(scratch_op, "z_third", priority=5, order=3)(_emit)
    tcd.variant(scratch_op, "high", priority=9)(_emit)
    names = [v.name for v in variants_for(scratch_op)]
    # Not alphabetical: "a_second" comes after "b_first" (order), "z_third" after "a_second"
    # (registration).
    assert names == ["high", "b_first", "a_second", "z_third", "late_low"]


def test_listing_shows_user_variant_with_predicates(scratch_op):
    def requires_something(call):
        return True, None

    tcd.variant(scratch_op, "mine", priority=3, predicates=[requires_something])(_emit)
    rows = [r for r in tcd.list_variants() if r["op"] == scratch_op]
    assert rows == [
        {
            "op": scratch_op,
            "variant": "mine",
            "priority": 3,
            "order": 0,
            "predicates": ["something"],
            "doc": "",
        }
    ]


def test_duplicate_registration_is_an_error_unless_replaced(scratch_op):
    tcd.variant(scratch_op, "dup")(_emit)
    with pytest.raises(ValueError, match="already registered"):
        tcd.variant(scratch_op, "dup")(_emit)
    tcd.variant(scratch_op, "dup", priority=7, replace=True)(_emit)
    assert [(v.name, v.priority) for v in variants_for(scratch_op)] == [("dup", 7)]


def test_op_name_must_be_bare():
    with pytest.raises(ValueError, match="bare tile op name"):
        tcd.variant("tirx.tile.copy", "x")


def test_predicate_reports_its_reason_and_a_default():
    p = predicate(lambda call: (False, "seen 3, needs 4"), "width")
    assert p(None) == (False, "seen 3, needs 4")
    q = predicate(lambda call: (False, None), "width")
    assert q(None) == (False, "width failed")
    assert predicate(lambda call: (True, "ignored"), "x")(None) == (True, None)


def test_gmem_smem_is_registered_for_copy():
    names = [v.name for v in variants_for("copy")]
    assert "gmem_smem" in names


# -- choosing: the cost rule and declining emitters ---------------------------------------
def _noop_func():
    from tvm.script import tirx as T

    @T.prim_func(check_well_formed=False)
    def noop():
        T.evaluate(0)

    return noop


def _call(op):
    from types import SimpleNamespace

    return SimpleNamespace(op=op, forced_variant=None)


@dataclass(frozen=True)
class _Costed:
    """A plan that is plain data with a cost estimate."""

    est_clocks: float


def test_cost_rule_takes_a_cheaper_later_variant_and_keeps_order_on_ties(scratch_op):
    from tirx_cuda_dispatch.dispatch import choose

    tcd.variant(scratch_op, "first", priority=5, order=0, plan=lambda c: _Costed(8))(_emit)
    tcd.variant(scratch_op, "tie", priority=5, order=1, plan=lambda c: _Costed(8))(_emit)
    tcd.variant(scratch_op, "cheap", priority=5, order=2, plan=lambda c: _Costed(4))(_emit)
    tcd.variant(scratch_op, "cheaper_but_low", priority=1, plan=lambda c: _Costed(1))(_emit)
    out = choose(_call(scratch_op), exhaustive=True)
    assert out.variant == "cheap"
    reasons = {c.variant: c.reason for c in out.candidates}
    assert "cost rule: est. 8 SM clocks against 4 for cheap" in reasons["first"]
    assert reasons["cheaper_but_low"] == "would also accept; cheap is tried first"
    tcd.unregister(scratch_op, "cheap")
    assert choose(_call(scratch_op)).variant == "first"  # equal estimates: trial order


def test_a_declining_emitter_passes_the_call_to_a_lower_priority_variant(scratch_op):
    from tirx_cuda_dispatch.dispatch import choose
    from tirx_cuda_dispatch.errors import Decline

    def declines(plan, call):
        raise Decline("high emitter declines")

    func = _noop_func()
    tcd.variant(scratch_op, "high", priority=20)(declines)
    tcd.variant(scratch_op, "low", priority=10)(lambda plan, call: func)
    out = choose(_call(scratch_op), emit=True)
    assert out.variant == "low" and out.func is func
    assert [tuple(c) for c in out.candidates] == [
        ("high", False, "high emitter declines"),
        ("low", True, None),
    ]
