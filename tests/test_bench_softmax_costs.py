"""bench/softmax_costs.py, what needs no GPU: each kernel it times lowers with every call
ours (strict) and lacks exactly the pieces its name says (the whole kernel, the control,
has them all)."""

from __future__ import annotations

import pytest

from modules import BENCH, load_file
from tirx_cuda_dispatch import explain


@pytest.fixture(scope="module")
def bench():
    return load_file("bench_gemm_under_test", BENCH / "gemm.py") and load_file(
        "bench_softmax_costs_under_test", BENCH / "softmax_costs.py"
    )


def _ops(report) -> dict[str, int]:
    counts: dict[str, int] = {}
    for r in report:
        counts[r.op] = counts.get(r.op, 0) + 1
    return counts


@pytest.mark.parametrize("name", ["whole", "no row max", "no row sum", "no exp2"])
def test_each_kernel_lacks_what_its_name_says(bench, name):
    whole = _ops(
        explain(
            bench.example_without(()).attention_ws_kernel(2, 256, 128, lagged_max=False), "sm_90a"
        )
    )
    report = explain(
        bench.example_without(bench.LEFT_OUT[name]).attention_ws_kernel(
            2, 256, 128, lagged_max=False
        ),
        "sm_90a",
    )
    assert [r.index for r in report if r.variant is None] == []
    ops = _ops(report)
    # softmax_rows is emitted twice (tile 0's and the loop's); the finish's sum of the
    # lanes' parts stays
    lost = {"no row max": "max", "no row sum": "sum", "no exp2": "exp2"}.get(name)
    for op in ("max", "sum", "exp2"):
        assert ops.get(op, 0) == whole[op] - (2 if op == lost else 0), op


def test_the_copy_of_softmax_rows_with_nothing_left_out_is_the_examples(bench):
    """The bench's copy of ``softmax_rows`` (taken with a piece name that removes nothing)
    lowers to the same calls and plans as the example's own, so it has not drifted; the
    control: with the row max left out the sequence differs."""

    def calls(left_out):
        func = bench.example_without(left_out).attention_ws_kernel(2, 256, 128, lagged_max=False)
        return [(r.op, r.variant, str(r.plan)) for r in explain(func, "sm_90a")]

    whole = calls(())
    assert calls(("nothing",)) == whole
    assert calls(("max",)) != whole
