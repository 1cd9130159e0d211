"""sum / max / min -> shared: shared-memory reductions (plans, emitted code, simulator and
GPU round trips, bit for bit against the plan's summation order and within the bound of
numpy's sum)."""

from __future__ import annotations

import numpy as np
import pytest
from tvm.script import tirx as T
from tvm.script.tirx import tile as Tx
from tvm.tirx.layout import R, S, TileLayout, laneid, warpid, wg_local_layout

import tirx_cuda_dispatch as tcd
from executors import WHERE, execute
from reduction_checks import check_against_numpy, region, report_of
from tirx_cuda_dispatch import demos, toolchain
from tirx_cuda_dispatch.reduction.schedule import emulate
from tirx_cuda_dispatch.runtime import bits, poison_like, random_array

# TVM's test_reduction_shared shapes: (src, dst, axes, src region, dst region)
TVM_SHAPES = [
    ((32, 32), (32,), (-1,), None, None),
    ((32, 32), (32,), (0,), None, None),
    ((8, 16, 2, 22), (8, 16), (-2, -1), None, None),
    ((4, 8, 6), (4, 6), (1,), None, None),
    ((32, 7), (32,), (-1,), None, None),
    ((32, 32), (32,), (-1,), ((1, 1), (5, 8)), ((2,), (5,))),
]


def _run(kernel, src, dst_old, where, gpu):
    return execute(kernel, [src, dst_old], where, gpu)[1]


def _check(kernel, src, dst_old, where, gpu, src_region=None, dst_region=None, accum=False):
    """Poisoned (or accum: random) dst; the call's region equals the plan's emulation bit
    for bit, is within the error bound of numpy's, and nothing else of dst changed."""
    out = _run(kernel, src, dst_old, where, gpu)
    report = report_of(kernel)
    s = report.plan_object.schedule
    src_r = region(src, src_region)
    old_r = region(dst_old, dst_region)
    want = emulate(s, src_r, old_r)
    got = region(out, dst_region)
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))
    check_against_numpy(report, got, src_r, old_r if accum else None)
    if dst_region is not None:  # outside the region: untouched
        mask = np.ones(dst_old.shape, bool)
        mask[tuple(slice(a, a + e) for a, e in zip(*dst_region, strict=True))] = False
        np.testing.assert_array_equal(out[mask].view(np.uint8), dst_old[mask].view(np.uint8))


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("accum", [False, True])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("op", ["sum", "max", "min"])
@pytest.mark.parametrize("src_shape, dst_shape, axes, src_region, dst_region", TVM_SHAPES)
def test_tvm_shared_shapes(
    src_shape, dst_shape, axes, src_region, dst_region, op, dtype, accum, where, gpu, rng
):
    threads = 128 if np.prod(src_shape) > 1024 else 32
    sr = (src_region[0], src_region[1]) if src_region else None
    dr = (dst_region[0], dst_region[1]) if dst_region else None
    kernel = demos.shared_reduction(
        op, src_shape, axes, dst_shape, dtype, cta_threads=threads, accum=accum,
        src_region=sr, dst_region=dr,
    )  # fmt: skip
    src = random_array(src_shape, dtype, rng)
    old = random_array(dst_shape, dtype, rng) if accum else np.full(dst_shape, np.nan, dtype)
    _check(kernel, src, old, where, gpu, sr, dr, accum)


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("op", ["sum", "max", "min"])
@pytest.mark.parametrize(
    "narrow, scope",
    [("warp5", "warp"), ("wg0", "warpgroup"), ("tid65", "thread"), ("warps0-3", "cta")],
)
def test_narrowed_scopes(narrow, scope, op, where, gpu, rng):
    """TVM's test_reduction_shared_subscope: a warp (``if warp == 5``), a warpgroup
    (``if wg == 0``), one thread (``if tid == 65``) of a 256-thread CTA, and the CTA's
    warps 0-3 (``if warp < 4``) reduce a 4x8 tile."""
    kernel = demos.shared_reduction(op, (4, 8), (-1,), (4,), scope=scope, cta_threads=256,
                                    narrow=narrow)  # fmt: skip
    src = random_array((4, 8), "float32", rng)
    _check(kernel, src, np.full(4, np.nan, np.float32), where, gpu)


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_16_bit_data_into_float32_statistics(dtype, where, gpu, rng):
    """RMSNorm's statistics: 16-bit rows summed in float32 into a float32 dst."""
    kernel = demos.shared_reduction("sum", (4, 1024), (-1,), (4,), dtype, "float32",
                                    cta_threads=256)  # fmt: skip
    src = random_array((4, 1024), dtype, rng)
    _check(kernel, src, np.full(4, np.nan, np.float32), where, gpu)
    report = report_of(kernel)
    assert report.plan["accumulate"] == f"{dtype} -> float32 -> float32"


NARROWED = {None: "cta", "wg0": "warpgroup", "warps0-3": "cta"}  # narrow -> scope


def _looped(loop_sync: bool, repeat: int = 3, narrow: str | None = None):
    """Two rows of 512 over the warps that run the call (8 warps at bar.sync 0; with
    ``narrow``, 4 of them at a named barrier), 3 runs in a loop, each adding to dst;
    ``loop_sync``: a CTA barrier after the call in the loop."""
    return demos.shared_reduction("sum", (2, 512), (-1,), (2,), scope=NARROWED[narrow],
                                  cta_threads=256, repeat=repeat, accum=True,
                                  loop_sync=loop_sync, narrow=narrow)  # fmt: skip


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("narrow", list(NARROWED))
@pytest.mark.parametrize("loop_sync", [False, True])
def test_call_in_a_loop_waits_before_reusing_its_workspace(loop_sync, narrow, where, gpu, rng):
    """With nothing else in the loop, the call waits at a barrier before it writes its
    workspace again; a CTA barrier in the loop body already orders the runs, so the call
    adds none (at bar.sync 0, and at a named barrier of the warps an ``if`` keeps)."""
    kernel = _looped(loop_sync, narrow=narrow)
    report = report_of(kernel)
    want_sync = "1 per call" if loop_sync else "2 per call (it repeats)"
    assert report.plan["sync"].endswith(want_sync), report.plan["sync"]
    assert ("named barrier" in report.plan["sync"]) == (narrow is not None)
    src = random_array((2, 512), "float32", rng)
    old = random_array((2,), "float32", rng)
    out = _run(kernel, src, old, where, gpu)
    s = report.plan_object.schedule
    want = old
    for _ in range(3):
        want = emulate(s, src, want)
    np.testing.assert_array_equal(out, want)


def _continue_past_the_barrier():
    """The loop barrier after the call, skipped by ``continue`` in iteration 1 (the
    review's counterexample): runs 1 and 2 of the call meet no barrier between."""
    shape, dshape = (2, 512), (2,)

    # fmt: off
    @T.prim_func
    def kernel(A_ptr: T.handle, B_ptr: T.handle):
        A = T.match_buffer(A_ptr, shape, "float32")
        B = T.match_buffer(B_ptr, dshape, "float32")
        T.device_entry()
        T.cta_id([1])
        T.warpgroup_id([2])
        T.warp_id_in_wg([4])
        T.warp_id([8])
        T.lane_id([32])
        T.thread_id([256])
        A_s = T.alloc_buffer(shape, "float32", scope="shared", layout=TileLayout(S[shape]))
        B_s = T.alloc_buffer(dshape, "float32", scope="shared", layout=TileLayout(S[dshape]))
        Tx.cta.copy(A_s[:, :], A[:, :])
        Tx.cta.copy(B_s[:], B[:])
        T.cuda.cta_sync()
        for i in range(3):
            Tx.cta.sum(B_s[:], A_s[:, :], axes=(-1,), accum=True)
            if i == 1:
                continue
            T.cuda.cta_sync()
        T.cuda.cta_sync()
        Tx.cta.copy(B[:], B_s[:])
    # fmt: on
    return kernel


def test_a_continue_past_the_loop_barrier_keeps_the_wait(monkeypatch, rng):
    kernel = _continue_past_the_barrier()
    report = report_of(kernel)
    assert report.plan["sync"] == "bar.sync 0, 2 per call (it repeats)"
    src = random_array((2, 512), "float32", rng)
    old = random_array((2,), "float32", rng)
    out = _run(kernel, src, old, "sim", None)
    want = old
    for _ in range(3):
        want = emulate(report.plan_object.schedule, src, want)
    np.testing.assert_array_equal(out, want)
    # the control: planned as if the barrier ordered the runs, the simulator finds the race
    from tirx_cuda_dispatch import bounds

    monkeypatch.setattr(bounds.Enclosing, "repeats", property(lambda self: False))
    with pytest.raises(tcd.sim.SimError, match="race"):
        _run(kernel, src, old, "sim", None)


def test_a_loop_of_one_trip_does_not_repeat():
    """A Python ``range(1)`` loop (the examples' ``steps=1``) runs the call once."""
    report = report_of(_looped(loop_sync=False, repeat=1))
    assert report.plan["sync"] == "bar.sync 0, 1 per call"


@pytest.mark.parametrize("narrow", list(NARROWED))
def test_without_the_wait_the_simulator_names_the_workspace_race(narrow, monkeypatch, rng):
    """Negative control of the wait: the loop without a barrier, its call planned as if it
    ran once, lets a leader's next partials overwrite what a slower warp still reads."""
    from tirx_cuda_dispatch import bounds

    kernel = _looped(loop_sync=False, narrow=narrow)
    src = random_array((2, 512), "float32", rng)
    old = random_array((2,), "float32", rng)
    _run(kernel, src, old, "sim", None)  # the control: as planned, no race
    monkeypatch.setattr(bounds.Enclosing, "repeats", property(lambda self: False))
    assert report_of(kernel).plan["sync"].endswith("1 per call")
    with pytest.raises(tcd.sim.SimError, match="race") as err:
        _run(kernel, src, old, "sim", None)
    assert "partials" in str(err.value)


def test_cta_reduction_keeps_every_thread_busy_with_conflict_free_vector_loads():
    """The issue's RMSNorm shape: 4 rows of 256 float32 over 128 threads: a warp per row,
    its 32 lanes on 16-byte vectors (4 wavefronts per 512-byte warp load, no conflict)."""
    kernel = demos.shared_reduction("sum", (4, 256), (-1,), (4,), cta_threads=128)
    report = report_of(kernel)
    s = report.plan_object.schedule
    assert s.vec == 4 and report.plan["wavefronts_per_load"] == 4
    assert s.threads == 128 and not s.of("idle")  # every thread works
    assert len(s.lane_masks) == 5 and s.warp_partials == 1
    # two long rows over eight warps: four warps per row, combined through the workspace
    wide = report_of(demos.shared_reduction("sum", (2, 4096), (-1,), (2,), cta_threads=256))
    ws = wide.plan_object.schedule
    assert ws.warp_partials == 4 and not ws.of("idle")
    assert [r.split(":")[0] for r in wide.resources] == ["workspace partials"]


def test_the_cost_rule_splits_lanes_between_rows_and_columns():
    """32 rows of 256: 8 lanes per row on 16-byte vectors (3 shuffles per row) beat 32
    lanes per row (5 shuffles per row, 4 rows per warp)."""
    report = report_of(demos.shared_reduction("sum", (32, 256), (-1,), (32,), cta_threads=256))
    s = report.plan_object.schedule
    assert s.lane_masks == (1, 2, 4) and s.slot_count == 1 and s.vec == 4
    assert "8 on the first" in report.plan["placement"]


def test_emitted_code_has_vector_loads_shuffles_and_one_barrier():
    kernel = demos.shared_reduction("sum", (4, 256), (-1,), (4,), cta_threads=128)
    sass = toolchain.kernel_sass(kernel, "sm_90a")
    assert sass.count("SHFL.BFLY") >= 5
    assert "LDS.128" in sass
    assert sass.count("BAR.SYNC") >= 1
    assert "LDL" not in sass and "STL" not in sass


@pytest.mark.parametrize("where", WHERE)
def test_named_barrier_of_a_warpgroup_call_avoids_the_kernels_ids(where, gpu, rng):
    """A warpgroup-scope reduction needing its warps to meet gets named barrier ids the
    kernel does not use (never 0 nor TVM's 8): one per warpgroup of the CTA, as each may run
    its own call (here only warpgroup 0 does: two warpgroups reducing into one dst race)."""
    kernel = demos.shared_reduction("sum", (2, 2048), (-1,), (2,), scope="warpgroup",
                                    cta_threads=256, narrow="wg0")  # fmt: skip
    report = report_of(kernel)
    assert any(r.startswith("named barrier sync: 2 ids, 128 threads") for r in report.resources)
    src = random_array((2, 2048), "float32", rng)
    _check(kernel, src, np.full(2, np.nan, np.float32), where, gpu)
    ids = report.given["sync"]
    assert ids not in (0, 8) and ids + 1 not in (0, 8)


def test_swizzled_src_is_read_through_its_swizzle(rng):
    from tvm.tirx.layout import ComposeLayout

    layout = ComposeLayout(3, 3, 3, TileLayout(S[(8, 64)]))
    kernel = demos.shared_reduction("max", (8, 64), (-1,), (8,), src_layout=layout)
    src = random_array((8, 64), "float32", rng)
    _check(kernel, src, np.full(8, np.nan, np.float32), "sim", None)


def test_explain_of_tvm_0_27s_failing_program_names_our_plan():
    """The issue's program: TVM 0.27's shared reduction fails its own well-formedness
    check here; ours lowers it."""
    kernel = demos.shared_reduction("sum", (4, 256), (-1,), (4,), cta_threads=128)
    report = report_of(kernel)
    assert report.variant == "shared" and report.error is None
    assert tcd.explain(kernel) is not None


# (src shape, axes, dst shape, dst layout, scope, threads)
FILLS = [
    ((32, 64), (-1,), (32,), TileLayout(S[32 : 1 @ laneid]), "warp", 32),
    ((8, 256), (-1,), (8,), TileLayout(S[8 : 1 @ warpid] + R[32 : 1 @ laneid]), "cta", 256),
    ((64, 16), (0,), (16, 1), TileLayout(S[(16, 1) : (2 @ laneid, 1)] + R[2 : 1 @ laneid]),
     "warp", 32),
    ((128, 8), (-1,), (128, 1), wg_local_layout(1), "warpgroup", 128),
]  # fmt: skip


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("accum", [False, True])
@pytest.mark.parametrize("case", range(len(FILLS)))
def test_register_dst_placed_by_its_layout_is_filled_from_a_workspace(case, accum, where, gpu, rng):
    """A register dst whose layout puts outputs on threads of its own (row r in lane r, a
    row per warp replicated over its lanes, wg_local_layout): every output goes to a
    shared workspace, then every holder reads its registers' outputs."""
    src_shape, axes, dst_shape, layout, scope, threads = FILLS[case]
    kernel = demos.shared_to_registers("sum", src_shape, axes, dst_shape, layout, scope, threads,
                                       accum=accum)  # fmt: skip
    report = report_of(kernel)
    assert report.variant == "shared" and "fill" in report.plan
    assert any(r.startswith("workspace outputs") for r in report.resources)
    x = random_array(src_shape, "float32", rng)
    old = random_array(dst_shape, "float32", rng)
    b = (
        demos.pack_registers(old, layout, scope, threads)
        if accum
        else poison_like(np.zeros((threads, demos.register_count(layout)), np.float32))
    )
    out = execute(kernel, [x, b], where, gpu)[1]
    want = emulate(report.plan_object.schedule, x, old if accum else None).reshape(-1)
    for element, value in demos.unpack_registers(out, layout, dst_shape, scope):
        assert bits(np.array([value], np.float32)) == bits(np.array([want[element]], np.float32))
