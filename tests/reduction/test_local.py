"""sum / max / min -> local: register reductions as TVM's layouts place the data (plans,
declines, emitted code, simulator and GPU round trips bit for bit against the plan's
summation order, and within the bound of numpy's)."""

from __future__ import annotations

import numpy as np
import pytest
from tvm.tirx.layout import R, S, TileLayout, laneid, tid_in_wg, warpid, wg_local_layout

from executors import WHERE, execute
from reduction_checks import check_against_numpy, report_of
from tirx_cuda_dispatch import demos, toolchain
from tirx_cuda_dispatch.reduction.schedule import emulate
from tirx_cuda_dispatch.runtime import bits, poison_like, random_array


def _mma_accumulator(cols: int = 128):
    """The m16n8 accumulator fragment TVM's test_reduction_local_view_complex reduces:
    16 x cols per warp, row r in lane 4 * (r % 8) + c, two values per lane and 8 columns."""
    atom = TileLayout(S[(1, 2) : (2, 1)])
    warp_layout = TileLayout(S[(8, 4) : (4 @ laneid, 1 @ laneid)])
    warp_atom = atom.tile(warp_layout, (8, 4), (1, 2))
    tile = TileLayout(S[(2, cols // 8) : (1, 2)])
    return warp_atom.tile(tile, (2, cols // 8), (8, 8))


def _mma_rows():
    """Its row statistics: 16 x 4, column c in the lanes with lane % 4 == c."""
    red_atom = TileLayout(S[(1, 1) : (1, 1)])
    warp_layout = TileLayout(S[(8, 4) : (4 @ laneid, 1 @ laneid)])
    red_warp_atom = red_atom.tile(warp_layout, (8, 4), (1, 1))
    return red_warp_atom.tile(TileLayout(S[(2, 1) : (1, 1)]), (2, 1), (8, 4))


# (name, src layout, src shape, dst layout, dst shape, axes, scope, threads, thread_reduce)
CASES = [
    ("thread_3d", TileLayout(S[(3, 4, 5)]), (3, 4, 5), TileLayout(S[4]), (4,), (0, 2),
     "thread", 1, None),
    ("warp_shuffle", TileLayout(S[32 : 1 @ laneid]), (32,), TileLayout(S[1:1] + R[32 : 1 @ laneid]),
     (1,), None, "warp", 32, None),
    ("warp_multi_elem", TileLayout(S[(32, 4) : (1 @ laneid, 1)]), (128,),
     TileLayout(S[4:1] + R[32 : 1 @ laneid]), (4,), None, "warp", 32, None),
    ("lane_rows", TileLayout(S[(32, 64) : (1 @ laneid, 1)]), (32, 64),
     TileLayout(S[(32, 1) : (1 @ laneid, 1)]), (32, 1), (-1,), "warp", 32, None),
    ("wg_local", wg_local_layout(16), (128, 16), wg_local_layout(1), (128, 1), (-1,),
     "warpgroup", 128, None),
    ("mma_rows_shuffle", _mma_accumulator(), (16, 128), _mma_rows(), (16, 4), (-1,), "warp",
     32, True),
    ("mma_rows_partial", _mma_accumulator(), (16, 128), _mma_rows(), (16, 4), (-1,), "warp",
     32, False),
    ("cta_all", TileLayout(S[(8, 32) : (1 @ warpid, 1 @ laneid)]), (256,), TileLayout(S[1]),
     (1,), None, "cta", 256, None),
    ("cta_rows_over_warps", TileLayout(S[(4, 4, 32) : (1, 1 @ warpid, 1 @ laneid)]), (4, 128),
     TileLayout(S[4:1]), (4,), (-1,), "cta", 128, None),
    ("wg_columns", TileLayout(S[(128, 8) : (1 @ tid_in_wg, 1)]), (128, 8),
     TileLayout(S[8:1]), (8,), (0,), "warpgroup", 128, None),
]  # fmt: skip


def _case(name):
    return next(c for c in CASES if c[0] == name)


def _kernel(case, op, dtype="float32", dst_dtype=None, accum=False, dst_memory="local"):
    _, sl, ss, dl, ds, axes, scope, threads, tr = case
    return demos.register_reduction(
        op, sl, ss, dl, ds, axes, scope, threads, dtype, dst_dtype, accum, tr, dst_memory
    )


def _round_trip(case, op, dtype, where, gpu, rng, dst_dtype=None, accum=False):
    _, sl, ss, dl, ds, axes, scope, threads, tr = case
    dst_dtype = dst_dtype or dtype
    kernel = _kernel(case, op, dtype, dst_dtype, accum)
    x = random_array(ss, dtype, rng)
    old = random_array(ds, dst_dtype, rng)
    a = demos.pack_registers(x, sl, scope, max(threads, 1), fill=0)
    b = demos.pack_registers(old, dl, scope, max(threads, 1)) if accum else None
    if b is None:
        b = poison_like(np.zeros((max(threads, 1), demos.register_count(dl)), old.dtype))
    out = execute(kernel, [a, b], where, gpu)[1]
    report = report_of(kernel)
    want = emulate(report.plan_object.schedule, x, old if accum else None)
    held = demos.unpack_registers(out, dl, ds, scope)
    assert held, "dst's layout names no holder"
    flat = want.reshape(-1)
    elements = np.array([e for e, _ in held])
    values = np.array([v for _, v in held], dtype=flat.dtype)
    # every holder of every element has its value, bit for bit
    np.testing.assert_array_equal(bits(values), bits(flat[elements]))
    assert set(elements.tolist()) == set(range(flat.size))
    got = np.empty_like(flat)
    got[elements] = values
    return report, x, old, got.reshape(ds)


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("op", ["sum", "max", "min"])
@pytest.mark.parametrize("name", [c[0] for c in CASES if c[0] != "mma_rows_partial"])
def test_round_trip_matches_the_plans_order_and_numpy(name, op, where, gpu, rng):
    report, x, _, got = _round_trip(_case(name), op, "float32", where, gpu, rng)
    if name == "warp_multi_elem":  # dst keeps register j of every lane: the lanes reduced
        check_against_numpy(report, got, x.reshape(32, 4), axes=(0,))
        return
    if name == "mma_rows_shuffle":  # every lane of a row holds the row's result
        assert (got == got[:, :1]).all()
        got = got[:, 0]
    check_against_numpy(report, got, x)


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("accum", [False, True])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "int32"])
@pytest.mark.parametrize("name", ["warp_shuffle", "mma_rows_shuffle", "cta_rows_over_warps"])
def test_dtypes_and_accum(name, dtype, accum, where, gpu, rng):
    report, x, old, got = _round_trip(_case(name), "sum", dtype, where, gpu, rng, accum=accum)
    assert report.plan["accumulate"].startswith(f"{dtype} -> ")
    if name == "mma_rows_shuffle":  # every lane of a row holds the row's result
        if not accum:
            assert (got == got[:, :1]).all()
        return
    check_against_numpy(report, got, x, old if accum else None)


@pytest.mark.parametrize("where", WHERE)
def test_16_bit_registers_into_float32_statistics(where, gpu, rng):
    report, x, _, got = _round_trip(_case("lane_rows"), "sum", "bfloat16", where, gpu, rng,
                                    dst_dtype="float32")  # fmt: skip
    assert got.dtype == np.float32
    check_against_numpy(report, got, x)


@pytest.mark.parametrize("where", WHERE)
def test_tvms_per_thread_partial_form_keeps_each_lanes_part(where, gpu, rng):
    """``thread_reduce=False`` with a dst that keeps the reduced axis over 4 lanes: each
    lane's own columns (TVM's first step before a thread_reduce=True call)."""
    report, x, _, got = _round_trip(_case("mma_rows_partial"), "sum", "float32", where, gpu, rng)
    assert not report.plan_object.schedule.lane_masks  # no shuffle: the parts stay apart
    # lane column c holds the columns 8 i + 2 c + v of its row
    cols = np.arange(128).reshape(16, 4, 2).transpose(1, 0, 2).reshape(4, 32)
    want = np.stack([x[:, cols[c]].astype(np.float64).sum(axis=1) for c in range(4)], axis=1)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_mma_accumulator_shuffle_combines_the_four_lanes_of_a_row():
    """TVM's built-in shuffle reduction on this fragment writes 32 registers into a
    2-register dst and never combines rows; ours folds each lane's 32 values into four
    accumulators and combines the row's four lanes with shfl.xor 1 and 2."""
    report = report_of(_kernel(_case("mma_rows_shuffle"), "sum"))
    s = report.plan_object.schedule
    assert s.slot_count == 2 and s.per_thread == 32 and s.accumulators == 4
    assert s.lane_masks == (1, 2)


def test_cross_warp_reduction_declares_its_workspace_and_barrier():
    report = report_of(_kernel(_case("cta_all"), "sum"))
    assert report.resources == [
        "workspace partials: shared float32[8] (8 warps' partials of 1 outputs per instance)"
    ]
    assert report.plan["sync"] == "bar.sync 0"
    wg = report_of(_kernel(_case("wg_columns"), "sum"))
    assert wg.plan_object.schedule.warp_partials == 4
    assert any(r.startswith("named barrier sync: 1 id, 128 threads") for r in wg.resources)


def test_warp_reduction_sass_is_a_butterfly_without_local_memory():
    sass = toolchain.kernel_sass(_kernel(_case("warp_shuffle"), "sum"), "sm_90a")
    assert sass.count("SHFL.BFLY") == 5
    assert "LDL" not in sass and "STL" not in sass


FILL_CASES = [
    # each lane computes a row, every thread holds all 32 row sums
    ("all_rows_everywhere", TileLayout(S[(32, 8) : (1 @ laneid, 1)]), (32, 8), TileLayout(S[32]),
     (32,), (-1,), "warp", 32, None),
    # row r = 8 a + b computed in lane r, held in lane a + 4 b
    ("lanes_transposed", TileLayout(S[(32, 8) : (1 @ laneid, 1)]), (32, 8),
     TileLayout(S[(4, 8) : (1 @ laneid, 4 @ laneid)]), (32,), (-1,), "warp", 32, None),
    # CTA: warp w computes rows 4 w .. 4 w + 3 across its lanes; lane l of every warp holds
    # row l % 32
    ("cta_rows_to_lanes", TileLayout(S[(8, 4, 32) : (1 @ warpid, 1, 1 @ laneid)]), (32, 32),
     TileLayout(S[32 : 1 @ laneid] + R[8 : 1 @ warpid]), (32,), (-1,), "cta", 256, None),
]  # fmt: skip


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("accum", [False, True])
@pytest.mark.parametrize("name", [c[0] for c in FILL_CASES])
def test_dst_placed_apart_from_where_outputs_are_computed_is_filled(name, accum, where, gpu, rng):
    """dst's layout gives outputs to other threads than compute them: the outputs go
    through a shared workspace and every holder reads its registers (the plan says why)."""
    case = next(c for c in FILL_CASES if c[0] == name)
    report, x, old, got = _round_trip(case, "sum", "float32", where, gpu, rng, accum=accum)
    assert "fill" in report.plan and any(
        r.startswith("workspace outputs") for r in report.resources
    )
    check_against_numpy(report, got, x, old if accum else None)


def test_reduced_axis_on_lanes_that_are_not_a_power_of_two_apart_is_declined():
    case = ("x", TileLayout(S[(8, 4) : (1, 8 @ laneid)]), (8, 4), TileLayout(S[8:1] + R[4: 8 @ laneid]),
            (8,), (-1,), "warp", 32, None)  # fmt: skip
    report = report_of(_kernel(case, "sum"))
    assert report.variant == "local"  # 4 lanes 8 apart: a butterfly with masks 8, 16
    assert report.plan_object.schedule.lane_masks == (8, 16)


def test_shared_dst_from_registers(rng):
    """Each lane holds a row; dst is a shared vector written by one lane per row."""
    case = _case("lane_rows")
    _, sl, ss, _, _, axes, scope, threads, _ = case
    kernel = demos.register_reduction("max", sl, ss, TileLayout(S[(32, 1)]), (32, 1), axes,
                                      scope, threads, dst_memory="shared")  # fmt: skip
    x = random_array(ss, "float32", rng)
    a = demos.pack_registers(x, sl, scope, threads, fill=0)
    out = execute(kernel, [a, np.full((32, 1), np.nan, np.float32)], "sim", None)[1]
    np.testing.assert_array_equal(out[:, 0], x.max(axis=1))
