"""bench/counters.py's reading of ncu's CSV: each kernel's last launch, the table's
columns from its counters, and a counter ncu did not give named instead of printed blank.
Runs without a GPU: the CSV is written here as ncu writes it."""

from __future__ import annotations

import csv
import io
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import counters  # noqa: E402

HEAD = ["ID", "Process ID", "Kernel Name", "Metric Name", "Metric Unit", "Metric Value"]
OURS, CUBLAS = "gemm_kernel", "nvjet_sm90_hsh_256x128_64x4_1x2_h_bz_coopA_NNT"


def _values(seed: float) -> dict[str, float]:
    """A value for every metric, distinct per metric and per launch, above 1,000 (ncu
    writes those with thousands separators)."""
    return {m: seed * 1_234_567.5 * (i + 2) for i, m in enumerate(counters.METRICS)}


def _ncu_csv(launches: list[tuple[int, str, dict[str, float]]]) -> str:
    """ncu's --csv output: its own lines first, then a header and a row a metric."""
    out = io.StringIO()
    out.write("==PROF== Connected to process 1\n==WARNING== uncontrolled caches\n")
    writer = csv.writer(out, quoting=csv.QUOTE_ALL, lineterminator="\n")
    writer.writerow(HEAD)
    for launch, name, values in launches:
        for metric, value in values.items():
            writer.writerow([launch, 1, name, metric, "", f"{value:,.2f}"])
    return out.getvalue()


def test_the_last_launch_of_each_kernel_is_read():
    text = _ncu_csv([(3, OURS, _values(1)), (4, CUBLAS, _values(5)), (7, OURS, _values(2)),
                     (8, CUBLAS, _values(9))])  # fmt: skip
    found = counters.parse(text)
    assert set(found) == {OURS, CUBLAS}
    assert found[OURS] == pytest.approx(_values(2))
    assert found[CUBLAS] == pytest.approx(_values(9))
    # the control: the first launches' values differ, so reading them would fail above
    assert _values(1) != _values(2)


def test_the_columns_come_from_their_counters():
    m = _values(1.0)
    m["sm__cycles_active.avg"], m["sm__cycles_elapsed.avg"] = 58_585.0, 66_453.0
    m["lts__t_sectors_srcunit_tex_op_read.sum"] = 33_047_776.0
    m["l1tex__m_xbar2l1tex_read_bytes.sum"] = 1_610_612_736.0
    m["gpu__time_duration.sum"] = 183_232.0
    (row,) = counters.table_rows({OURS: m}, "gemm:4096 float16")
    assert row["contender"] == "ours ws"
    assert row["active"] == pytest.approx(58_585 / 66_453)
    assert row["L2 read GB"] == pytest.approx(33_047_776 * 32 / 1e9)
    assert row["xbar GB"] == pytest.approx(1.610612736)
    assert row["us"] == pytest.approx(183.232)
    spills = (m["l1tex__t_requests_pipe_lsu_mem_local_op_ld.sum"]
              + m["l1tex__t_requests_pipe_lsu_mem_local_op_st.sum"])  # fmt: skip
    assert row["spills"] == pytest.approx(spills)


def test_rivals_are_named_by_their_kernels_and_ours_come_first():
    rows = counters.table_rows({CUBLAS: _values(1), OURS: _values(2)}, "gemm:4096")
    assert [r["contender"] for r in rows] == ["ours ws", f"torch matmul ({CUBLAS})"]
    case = "attention:1024x64"
    assert counters.label("cudnn_generated_fort_native_sdpa_sm90", case) == "torch sdpa cudnn"
    assert counters.label("void pytorch_flash::flash_fwd_kernel<Flash>(Params)", case) == (
        "torch sdpa flash"
    )
    # a kernel of no known contender is cuBLAS's only in a GEMM case
    assert counters.label("vectorized_elementwise_kernel", case) == (
        "other (vectorized_elementwise_kernel)"
    )


def test_each_case_and_dtype_keeps_its_own_csv():
    names = {counters.csv_name(c, d) for c in ("gemm:4096", "attention:1024x64")
             for d in ("float16", "bfloat16")}  # fmt: skip
    assert len(names) == 4


def test_a_counter_ncu_did_not_give_is_named():
    values = _values(1)
    del values["lts__t_sectors_srcunit_ltcfabric.sum"]
    with pytest.raises(ValueError, match="gemm_kernel.*lts__t_sectors_srcunit_ltcfabric"):
        counters.parse(_ncu_csv([(3, OURS, values)]))
    with pytest.raises(ValueError, match="no CSV rows"):
        counters.parse("==PROF== Disconnected\n")


def test_a_value_that_is_not_a_number_is_named():
    text = _ncu_csv([(3, OURS, _values(1))]).replace(
        f'"dram__bytes_read.sum","","{_values(1)["dram__bytes_read.sum"]:,.2f}"',
        '"dram__bytes_read.sum","","n/a"',
    )
    assert '"n/a"' in text
    with pytest.raises(ValueError, match="dram__bytes_read.sum = 'n/a'"):
        counters.parse(text)
