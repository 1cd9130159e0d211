"""bench/gemm_ws.py (part 8g of bench/run.py), what needs no GPU: the part is registered,
its shapes are issue 32's, every configuration it builds lowers with every call ours
(strict), and its rows put each of ours beside torch's twin as a speed."""

from __future__ import annotations

import pytest

from modules import BENCH, load_file
from tirx_cuda_dispatch import explain


@pytest.fixture(scope="module")
def bench():
    return load_file("bench_gemm_under_test", BENCH / "gemm.py") and load_file(
        "bench_gemm_ws_under_test", BENCH / "gemm_ws.py"
    )


def test_the_part_is_registered(bench):
    run = load_file("bench_run_under_test", BENCH / "run.py")
    assert "gemm_ws" in run.DEFAULT_PARTS.split(",") and "gemm_ws" in run.GPU_PARTS
    assert run.TITLES["gemm_ws"].startswith("8g.")


def test_the_shapes_are_the_issues(bench):
    assert (4000, 4000, 4000) in bench.SHAPES and (1024, 16384, 4096) in bench.SHAPES
    # gemm_hopper: tiles only; "ws c1": the paired kernel unpaired (float16, plain)
    assert bench.designs_for((4000, 4000, 4000), "float16", "plain") == ["ws", "ws c1"]
    assert bench.designs_for((4096, 4096, 4096), "bfloat16", "plain") == ["ws"]
    assert bench.designs_for((4096, 4096, 4096), "float16", "bias_relu") == ["ws", "hopper"]
    assert bench.designs_for((4096, 4096, 4096), "float16", "plain") == ["ws", "ws c1", "hopper"]
    assert bench.designs_for((16384, 1024, 4096), "float16", "plain") == ["ws", "hopper"]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_every_call_of_the_timed_kernel_is_ours(bench, dtype):
    ws = bench.norms.example("gemm_hopper_ws")
    func = ws.gemm_kernel(4000, 4000, 4000, dtype=dtype, grid=132, **bench.WS_CONFIG)
    report = explain(func, "sm_90a")
    assert [r.index for r in report if r.variant is None or r.error] == []


def test_rows_are_speeds_against_torchs_twin(bench):
    ms = {
        "ours ws plain": 1.0,
        "ours ws bias_relu": 2.0,
        "torch matmul": 1.1,
        "torch addmm+relu": 1.0,
    }
    rows = bench.rows_of((1024, 1024, 1024), "float16", ms, {}, {"ours hopper plain": "x"})
    by = {r["contender"]: r for r in rows}
    assert by["ours ws plain"]["speed / torch"] == pytest.approx(1.1)
    assert by["ours ws bias_relu"]["speed / torch"] == pytest.approx(0.5)
    assert by["ours hopper plain"]["note"] == "x" and "TFLOP/s" not in by["ours hopper plain"]
    assert by["ours ws plain"]["TFLOP/s"] == pytest.approx(2 * 1024**3 / 1e-3 / 1e12)


def test_the_float8_row_is_timed_against_scaled_mm(bench):
    ms = {"ours ws scaled": 1.0, "torch _scaled_mm": 1.2}
    rows = bench.rows_of((1024, 1024, 1024), "float8_e4m3fn", ms, {}, {})
    by = {r["contender"]: r for r in rows}
    assert by["ours ws scaled"]["speed / torch"] == pytest.approx(1.2)
    ws = bench.norms.example("gemm_hopper_ws")
    func = ws.gemm_kernel(4096, 4096, 4096, dtype="float8_e4m3fn", grid=132, **bench.WS_CONFIG)
    assert [r.index for r in explain(func, "sm_90a") if r.variant is None or r.error] == []
