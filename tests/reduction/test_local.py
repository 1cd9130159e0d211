"""sum / max / min -> local: register reductions as TVM's layouts place the data (plans,
declines, emitted code, simulator and GPU round trips bit for bit against the plan's
summation order, and within the bound of numpy's)."""

from __future__ import annotations

import numpy as np
import pytest
from tvm.tirx.layout import R, S, TileLayout, laneid, warpid

from executors import WHERE, execute
from reduction_checks import check_against_numpy, report_of
from tirx_cuda_dispatch import demos, toolchain
from tirx_cuda_dispatch.reduction.schedule import emulate
from tirx_cuda_dispatch.runtime import bits, poison_like, random_array

CATALOG = demos.register_reductions()
FILLED = ("all_rows_everywhere", "lanes_transposed", "cta_rows_to_lanes")
PLAIN = [name for name in CATALOG if name not in FILLED]
PARTS = ("mma_rows_partial", "wgmma_row_parts")  # each lane's part (TVM's partial form)


def _case(name):
    return CATALOG[name]


def _kernel(case, op, dtype="float32", dst_dtype=None, accum=False, dst_memory="local"):
    return case.kernel(op, dtype, dst_dtype, accum, dst_memory)


def _round_trip(case, op, dtype, where, gpu, rng, dst_dtype=None, accum=False):
    sl, ss, dl, ds = case.src_layout, case.src_shape, case.dst_layout, case.dst_shape
    scope, threads = case.scope, case.threads
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
@pytest.mark.parametrize("name", [n for n in PLAIN if n not in PARTS])
def test_round_trip_matches_the_plans_order_and_numpy(name, op, where, gpu, rng):
    report, x, _, got = _round_trip(_case(name), op, "float32", where, gpu, rng)
    if name == "warp_multi_elem":  # dst keeps register j of every lane: the lanes reduced
        check_against_numpy(report, got, x.reshape(32, 4), axes=(0,))
        return
    if name == "mma_rows_shuffle":  # every lane of a row holds the row's result
        assert (got == got[:, :1]).all()
        got = got[:, 0]
    check_against_numpy(report, got, x, axes=_case(name).reduced)


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


@pytest.mark.parametrize("where", WHERE)
def test_wgmma_row_parts_keep_each_lanes_columns_and_add_up_to_the_rows(where, gpu, rng):
    """fragments.wgmma_row_parts_layout (examples/attention.py's lane_sums): a row sum of
    a wgmma accumulator into it folds each thread's own columns, no shuffle; its 4 columns
    add up to the rows' sums. The control: into wgmma_rows_layout, the same sum shuffles."""
    report, x, _, got = _round_trip(_case("wgmma_row_parts"), "sum", "float32", where, gpu, rng)
    assert not report.plan_object.schedule.lane_masks
    # lane l % 4 == c holds the columns 8 j + 2 c + v of its rows
    cols = np.arange(128).reshape(16, 4, 2).transpose(1, 0, 2).reshape(4, 32)
    want = np.stack([x[:, cols[c]].astype(np.float64).sum(axis=1) for c in range(4)], axis=1)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    rows = report_of(demos.register_reduction(
        "sum", demos.wgmma_accumulator_layout(128), (64, 128), demos.wgmma_rows_layout(),
        (64, 1), (-1,), "warpgroup", 128, "float32"))  # fmt: skip
    assert rows.plan_object.schedule.lane_masks == (1, 2)


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
    assert report.plan["sync"] == "bar.sync 0, 1 per call"
    wg = report_of(_kernel(_case("wg_columns"), "sum"))
    assert wg.plan_object.schedule.warp_partials == 4
    assert any(r.startswith("named barrier sync: 1 id, 128 threads") for r in wg.resources)


def test_warp_reduction_sass_is_a_butterfly_without_local_memory():
    sass = toolchain.kernel_sass(_kernel(_case("warp_shuffle"), "sum"), "sm_90a")
    assert sass.count("SHFL.BFLY") == 5
    assert "LDL" not in sass and "STL" not in sass


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("accum", [False, True])
@pytest.mark.parametrize("name", FILLED)
def test_dst_placed_apart_from_where_outputs_are_computed_is_filled(name, accum, where, gpu, rng):
    """dst's layout gives outputs to other threads than compute them: the outputs go
    through a shared workspace and every holder reads its registers (the plan says why)."""
    report, x, old, got = _round_trip(_case(name), "sum", "float32", where, gpu, rng, accum=accum)
    assert "fill" in report.plan and any(
        r.startswith("workspace outputs") for r in report.resources
    )
    check_against_numpy(report, got, x, old if accum else None)


def test_tvms_lane_form_reduces_the_lane_dimension_dst_drops():
    """src [32, 2, 4] with dimension 0 on the lanes into dst [2, 4] replicated over them,
    axes left at -1: only the lane dimension fits dst, so it is the one reduced (a
    butterfly over all 32 lanes), and explain() says where the axes came from."""
    report = report_of(_kernel(_case("warp_lane_dim"), "sum"))
    assert report.variant == "local"
    assert report.plan_object.schedule.lane_masks == (1, 2, 4, 8, 16)
    assert "dimension over threads" in report.plan["axes"]
    assert "axes [-1] does not fit" in report.plan["axes"]
    # and loudly: a NOTE line the author reads before trusting the plan
    [note] = report.attention
    assert "TVM's lane form, not the last axis" in note and "axes=[0]" in note
    assert f"    NOTE: {note}" in str(report)


@pytest.mark.parametrize("where", WHERE)
def test_the_lane_form_over_warps_and_lanes_combines_through_the_workspace(where, gpu, rng):
    """At CTA scope, src [4, 32, 2] with dimension 0 on the warps and 1 on the lanes into
    dst [2] replicated over all 128 threads: both thread dimensions are reduced (shuffles,
    then the 4 warps through the workspace)."""
    case = demos.RegisterReduction(
        "x", TileLayout(S[(4, 32, 2) : (1 @ warpid, 1 @ laneid, 1)]), (4, 32, 2),
        TileLayout(S[2:1] + R[4 : 1 @ warpid] + R[32 : 1 @ laneid]), (2,), None, "cta", 128,
        reduced=(0, 1),
    )  # fmt: skip
    report, x, _, got = _round_trip(case, "sum", "float32", where, gpu, rng)
    assert report.plan["axes"].startswith("[0, 1]")
    assert report.plan_object.schedule.warp_partials == 4
    check_against_numpy(report, got, x, axes=(0, 1))


def test_the_lane_form_is_only_read_where_the_last_axis_does_not_fit():
    """Controls: the last axis, where dst has its reduced shape, stays the axis (no note);
    explicit axes other than the last are never reinterpreted; and a dst that fits
    neither reading is declined with the last axis's rule."""
    src = TileLayout(S[(32, 2, 4) : (1 @ laneid, 4, 1)])
    rows = TileLayout(S[(32, 2) : (1 @ laneid, 1)])
    last = demos.RegisterReduction("x", src, (32, 2, 4), rows, (32, 2), None, "warp", 32)
    report = report_of(_kernel(last, "sum"))
    assert report.variant == "local" and "axes" not in report.plan
    assert report.attention == [] and "NOTE:" not in str(report)
    assert not report.plan_object.schedule.lane_masks  # each lane's own rows
    other = demos.RegisterReduction(
        "x", src, (32, 2, 4), TileLayout(S[(2, 4) : (4, 1)] + R[32 : 1 @ laneid]), (2, 4),
        (1,), "warp", 32,
    )  # fmt: skip
    report = report_of(_kernel(other, "sum"))
    assert report.variant is None
    assert "not the reduced shape" in next(c.reason for c in report.candidates)
    neither = demos.RegisterReduction(
        "x", src, (32, 2, 4), TileLayout(S[2:1] + R[32 : 1 @ laneid]), (2,), None, "warp", 32
    )
    report = report_of(_kernel(neither, "sum"))
    assert report.variant is None
    assert "over axes [2]" in next(c.reason for c in report.candidates)


def test_lanes_a_power_of_two_apart_reduce_by_a_butterfly_over_those_bits():
    """4 lanes 8 apart (the others hold nothing: they skip, out of the shuffle mask)."""
    case = demos.RegisterReduction(
        "x", TileLayout(S[(8, 4) : (1, 8 @ laneid)]), (8, 4),
        TileLayout(S[8:1] + R[4 : 8 @ laneid]), (8,), (-1,), "warp", 32,
    )  # fmt: skip
    report = report_of(_kernel(case, "sum"))
    assert report.variant == "local"
    assert report.plan_object.schedule.lane_masks == (8, 16)
    assert report.plan_object.lane_mask == 0x01010101


def test_reduced_lanes_that_are_not_a_power_of_two_are_declined():
    case = demos.RegisterReduction(
        "x", TileLayout(S[(8, 3) : (1, 1 @ laneid)]), (8, 3),
        TileLayout(S[8:1] + R[3 : 1 @ laneid]), (8,), (-1,), "warp", 32,
    )  # fmt: skip
    report = report_of(_kernel(case, "sum"))
    why = next(c.reason for c in report.candidates if c.variant == "local")
    # 3 lanes leave 29 that no whole number of 3-lane groups covers (nor can a butterfly
    # pair 3 lanes): declined, naming the layout's steps
    assert report.variant is None and "steps over 32 threads after naming 3" in why


def test_shared_dst_from_registers(rng):
    """Each lane holds a row; dst is a shared vector written by one lane per row."""
    case = _case("lane_rows")
    sl, ss, scope, threads = case.src_layout, case.src_shape, case.scope, case.threads
    kernel = demos.register_reduction("max", sl, ss, TileLayout(S[(32, 1)]), (32, 1), case.axes,
                                      scope, threads, dst_memory="shared")  # fmt: skip
    x = random_array(ss, "float32", rng)
    a = demos.pack_registers(x, sl, scope, threads, fill=0)
    out = execute(kernel, [a, np.full((32, 1), np.nan, np.float32)], "sim", None)[1]
    np.testing.assert_array_equal(out[:, 0], x.max(axis=1))


def test_threads_src_names_nothing_in_still_meet_at_the_barrier(rng):
    """A 128-thread CTA whose src names warps 0-1 only: warps 2-3 skip the fold but arrive
    at the CTA barrier the partials need (skipping it would hang the GPU: the simulator
    reports a divergent barrier)."""
    case = demos.RegisterReduction(
        "x", TileLayout(S[(2, 32) : (1 @ warpid, 1 @ laneid)]), (64,), TileLayout(S[1]), (1,),
        None, "cta", 128,
    )  # fmt: skip
    _round_trip(case, "sum", "float32", "sim", None, rng)


def test_a_warp_reduction_filled_per_warp_in_a_two_warp_cta(rng):
    """Two warps each reduce their own rows into a lane-placed dst: each warp has its own
    outputs workspace (one shared by both would race)."""
    case = demos.RegisterReduction(
        "x", TileLayout(S[(32, 8) : (1 @ laneid, 1)]), (32, 8),
        TileLayout(S[(4, 8) : (1 @ laneid, 4 @ laneid)]), (32,), (-1,), "warp", 64,
    )  # fmt: skip
    report, *_ = _round_trip(case, "sum", "float32", "sim", None, rng)
    assert report.plan_object.sync.instances == 2


def test_a_layout_whose_gaps_alias_named_threads_is_declined():
    """Lanes 0-2 named, the rest not a whole number of 3-lane groups: a digit over them
    would wrap onto named lanes."""
    case = demos.RegisterReduction(
        "x", TileLayout(S[(3, 2) : (1 @ laneid, 1)]), (3, 2), TileLayout(S[3 : 1 @ laneid]),
        (3,), (-1,), "warp", 32,
    )  # fmt: skip
    report = report_of(_kernel(case, "sum"))
    why = next(c.reason for c in report.candidates if c.variant == "local")
    assert "a whole number of such groups" in why and report.variant is None


def test_a_runtime_accum_is_declined():
    from tvm.script import tirx as T
    from tvm.script.tirx import tile as Tx

    layout = TileLayout(S[32 : 1 @ laneid])

    @T.prim_func
    def kernel(A_ptr: T.handle, n: T.int32):
        A = T.match_buffer(A_ptr, (32,), "float32")
        T.device_entry()
        T.cta_id([1])
        T.warp_id([1])
        lane = T.lane_id([32])
        T.thread_id([32])
        x = T.alloc_buffer([1], "float32", scope="local")
        y = T.alloc_buffer([1], "float32", scope="local")
        x[0] = A[lane]
        Tx.warp.sum(y.view(1, layout=TileLayout(S[1])), x.view(32, layout=layout), accum=n > 0)
        A[lane] = y[0]

    report = report_of(kernel)
    why = next(c.reason for c in report.candidates if c.variant == "local")
    assert "accum=" in why and "runtime value" in why
