"""bench/attention.py (part 8h of bench/run.py), what needs no GPU: the part is registered,
its shapes are issue 33's, every kernel it times lowers with every call ours (strict), and
its rows put each of ours beside cuDNN and the flash backend as speeds."""

from __future__ import annotations

import pytest

from modules import BENCH, load_file
from tirx_cuda_dispatch import explain


@pytest.fixture(scope="module")
def bench():
    return load_file("bench_gemm_under_test", BENCH / "gemm.py") and load_file(
        "bench_attention_under_test", BENCH / "attention.py"
    )


def test_the_part_is_registered(bench):
    run = load_file("bench_run_under_test", BENCH / "run.py")
    assert "attention" in run.DEFAULT_PARTS.split(",") and "attention" in run.GPU_PARTS
    assert run.TITLES["attention"].startswith("8h.")


def test_a_rerun_replaces_a_part_whose_title_changed(bench):
    """docs/performance.md: a part measured under an older title is replaced by a run of
    it, not kept beside it; the control: a heading no part has stays."""
    run = load_file("bench_run_under_test", BENCH / "run.py")
    old = "Run 1\n\n### 8h. FlashAttention, an older title\n\n| a |\n\n### 99. someone's\n\nx"
    block = run.docs_block({"attention": [{"a": 1}]}, "Run 2", old)
    assert block.count("### 8h.") == 1 and "an older title" not in block
    assert "### 99. someone's" in block


def test_the_shapes_are_the_issues(bench):
    assert set(bench.SEQS) == {1024, 4096, 8192, 16384} and set(bench.DIMS) == {64, 128}
    assert 64 <= bench.HEADS <= 128 and set(bench.DTYPES) == {"float16", "bfloat16"}
    assert set(bench.MAIN) <= set(bench.DESIGNS)
    for (seq, d, _, dtype), names in {**bench.WIDE, **bench.ABLATIONS}.items():
        assert seq in bench.SEQS and d in (*bench.DIMS, 256) and dtype in bench.DTYPES
        assert set(names) <= set(bench.DESIGNS)
    assert {d for _, d, _, _ in bench.WIDE} == {256}  # issue 33's third head dim


@pytest.mark.parametrize(
    "design, causal",
    [
        ("ws", True),
        ("ws", False),
        ("ws no overlap", True),
        ("ws two rings", False),
        ("ws block check", False),
        ("ws block check", True),
        ("wg", True),
        ("sm80", True),
    ],
)
def test_every_call_of_the_timed_kernels_is_ours(bench, design, causal):
    example, name, keywords = bench.DESIGNS[design]
    make = getattr(bench.norms.example(example), name)
    report = explain(make(bench.HEADS, 1024, 128, causal=causal, **keywords), "sm_90a")
    assert [r.index for r in report if r.variant is None or r.error] == []


@pytest.mark.parametrize("shape", [(4096, 64, False)])
def test_the_block_check_lowers_strict_at_the_shapes_it_is_timed(bench, shape):
    """At 4,096 rows the grid takes heads ``hx + i * 6``: the redo's stores of O and the
    LSE, under the grid's ``if`` and the votes', must be proved in bounds there too (the
    first form's loads were undecided, and the strict pipeline stopped, until the bounds
    check read the grid's ``if`` alone)."""
    from tirx_cuda_dispatch import toolchain

    seq, d, causal = shape
    assert "ws block check" in bench.ABLATIONS[(seq, d, causal, "float16")]
    example, name, keywords = bench.DESIGNS["ws block check"]
    func = getattr(bench.norms.example(example), name)(
        bench.HEADS, seq, d, causal=causal, **keywords
    )
    source = toolchain.cuda_source(func, "sm_90a", pipeline="tirx_cuda_dispatch.strict")
    assert "bar_sync_count_sync((uint)12" in source  # the consumers' meeting before a redo


def test_rows_are_speeds_against_cudnn_and_flash(bench):
    ms = {"ours ws": 1.0, bench.CUDNN: 1.1, bench.FLASH: 2.0}
    rows = bench.rows_of(1024, 64, True, "float16", ms, {"ours ws": 0.5}, {"ours wg": "x"},
                         ("ws", "wg"))  # fmt: skip
    by = {r["contender"]: r for r in rows}
    assert by["ours ws"]["speed / cudnn"] == pytest.approx(1.1)
    assert by["ours ws"]["speed / flash"] == pytest.approx(2.0)
    assert by["ours ws"]["TFLOP/s"] == pytest.approx(4 * bench.HEADS * 1024**2 * 64 / 2 / 1e9)
    assert by["ours wg"]["note"] == "x" and "TFLOP/s" not in by["ours wg"]
    assert by[bench.CUDNN]["speed / cudnn"] == ""  # torch's rows carry no ratio
