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

    def facts(self) -> dict:
        return {"est_clocks": self.est_clocks}

    def __str__(self) -> str:
        return f"costed {self.est_clocks:g}"


@dataclass(frozen=True)
class _Bare:
    """A plan class that breaks the Plan contract (no facts(), no __str__)."""

    n: int


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


def test_an_emitter_that_declines_is_a_bug_of_its_variant(scratch_op):
    """The plan decides; an emitter does not decline. A Decline from one is a
    VariantError naming the variant and the emitter, and the call is not passed on."""
    from tirx_cuda_dispatch.dispatch import choose
    from tirx_cuda_dispatch.errors import Decline, VariantError

    def declines(plan, call):
        raise Decline("high emitter declines")

    func = _noop_func()
    tcd.variant(scratch_op, "high", priority=20)(declines)
    tcd.variant(scratch_op, "low", priority=10)(lambda plan, call: func)
    with pytest.raises(VariantError, match="'high' .* emitter \\(an emitter does not decline"):
        choose(_call(scratch_op), emit=True)


def test_the_plan_contract_is_checked_as_a_variant_registers(scratch_op):
    """A plan class without facts() or a __str__ of its own is refused at registration
    (annotated planner) or at its first plan (a lambda); a conforming one is taken."""

    def bare(call) -> _Bare:
        return _Bare(1)

    with pytest.raises(ValueError, match="its plan _Bare lacks facts, __str__"):
        tcd.variant(scratch_op, "bare", plan=bare)(_emit)
    tcd.variant(scratch_op, "lazy", plan=lambda c: _Bare(1))(_emit)
    with pytest.raises(ValueError, match="'lazy' of op .*its plan _Bare lacks facts"):
        tcd.registry.variants_for(scratch_op)[0].make_plan(_call(scratch_op))
    tcd.unregister(scratch_op, "lazy")

    def good(call) -> _Costed:
        return _Costed(2)

    tcd.variant(scratch_op, "good", plan=good)(_emit)
    assert isinstance(good(None), tcd.registry.Plan)


def test_an_emitter_gets_what_the_bridge_provided(scratch_op):
    """emit(plan, call, given): the call stays read-only; the resources arrive as a
    read-only mapping (empty without a provider)."""
    from tirx_cuda_dispatch.dispatch import choose

    seen = {}
    func = _noop_func()

    def emit(plan, call, given):
        seen["given"] = given
        return func

    tcd.variant(scratch_op, "takes", priority=5)(emit)
    out = choose(_call(scratch_op), emit=True)
    assert out.func is func and dict(seen["given"]) == {}
    with pytest.raises(TypeError):
        seen["given"]["x"] = 1
    assert not hasattr(_call(scratch_op), "resources")
