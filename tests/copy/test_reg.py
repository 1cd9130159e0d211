"""copy -> reg (seed 000): plans, declines, SASS, GPU round trips through registers."""

from __future__ import annotations

import re

import numpy as np
import pytest
from tvm.script import tirx as T
from tvm.script.tirx import tile as Tx
from tvm.tirx.layout import Axis, ComposeLayout, R, S, TileLayout

import tirx_cuda_dispatch as tcd
from executors import WHERE, execute
from tirx_cuda_dispatch import demos, runtime, toolchain
from tirx_cuda_dispatch.layout.swizzle import Swizzle

lane, tx, tid_wg, wid_wg, warpid = Axis.laneid, Axis.tx, Axis.tid_in_wg, Axis.wid_in_wg, Axis.warpid


def row_per_lane(k: int, rows: int = 32, axis=lane):
    return TileLayout(S[(rows, k) : (1 @ axis, 1)])


LAYOUTS = {
    # name: (layout, tile shape, scope, cta threads)
    "row_per_lane": (row_per_lane(8), (32, 8), "warp", None),
    "column_per_lane": (TileLayout(S[(8, 32) : (1, 1 @ lane)]), (8, 32), "warp", None),
    "two_rows_per_lane": (TileLayout(S[(2, 32, 8) : (8, 1 @ lane, 1)]), (64, 8), "warp", None),
    "mma_accumulator": (
        TileLayout(S[(2, 8, 4, 2) : (2, 4 @ lane, 1 @ lane, 1)]),
        (16, 8),
        "warp",
        None,
    ),
    "replicated_rows": (
        TileLayout(S[(16, 8) : (1 @ lane, 1)] + R[2 : 16 @ lane]),
        (16, 8),
        "warp",
        None,
    ),
    "warpgroup_tid": (row_per_lane(8, 128, tid_wg), (128, 8), "warpgroup", None),
    "warpgroup_wid_lane": (
        TileLayout(S[(4, 32, 8) : (1 @ wid_wg, 1 @ lane, 1)]),
        (128, 8),
        "warpgroup",
        None,
    ),
    "cta_tx": (row_per_lane(4, 256, tx), (256, 4), "cta", 256),
    "cta_warp_lane": (TileLayout(S[(4, 32, 8) : (1 @ warpid, 1 @ lane, 1)]), (128, 8), "cta", 128),
}


def _reg_plans(func, arch="sm_90a"):
    return [r for r in tcd.explain(func, arch) if r.variant == "reg"]


# -- the seed's table ---------------------------------------------------------------------
@pytest.mark.parametrize(
    "dtype, k, regs, vec, outer",
    [
        ("float32", 8, 8, 4, 2),
        ("float32", 16, 16, 4, 4),
        ("float16", 8, 8, 8, 1),
        ("float16", 16, 16, 8, 2),
    ],
)
def test_seed_table(dtype, k, regs, vec, outer):
    func = demos.reg_roundtrip(row_per_lane(k), (32, k), dtype)
    reports = _reg_plans(func)
    assert {r.plan["direction"] for r in reports} == {
        "global->local",
        "shared->local",
        "local->shared",
    }
    for r in reports:
        assert (r.plan["regs_per_thread"], r.plan["vec"], r.plan["outer"]) == (regs, vec, outer)
        assert r.plan["vec_bits"] == 128


@pytest.mark.parametrize(
    "name, vec, outer",
    [
        ("column_per_lane", 1, 8),
        ("two_rows_per_lane", 4, 4),
        ("mma_accumulator", 2, 2),
        ("replicated_rows", 4, 2),
        ("warpgroup_tid", 4, 2),
        ("warpgroup_wid_lane", 4, 2),
        ("cta_tx", 4, 1),
        ("cta_warp_lane", 4, 2),
    ],
)
def test_layout_plans(name, vec, outer):
    layout, shape, scope, threads = LAYOUTS[name]
    for memory in ("shared", "global"):
        func = demos.reg_roundtrip(layout, shape, "float32", scope, memory, threads)
        for r in _reg_plans(func):
            assert (r.plan["vec"], r.plan["outer"], r.scope) == (vec, outer, scope)


def test_column_layout_says_why_the_vector_is_narrow():
    layout, shape, scope, _ = LAYOUTS["column_per_lane"]
    [r, *_] = _reg_plans(demos.reg_roundtrip(layout, shape))
    assert "innermost dimension is not contiguous" in r.plan["narrower_because"]


def test_global_register_directions():
    func = demos.reg_roundtrip(row_per_lane(8), (32, 8), memory="global")
    assert [r.plan["direction"] for r in _reg_plans(func)] == [
        "global->local",
        "global->local",
        "local->global",
    ]


# -- declines -----------------------------------------------------------------------------
def _reason(func):
    [cand] = [c for c in tcd.explain(func)[0].candidates if c.variant == "reg"]
    assert not cand.accepted
    return cand.reason


@pytest.mark.parametrize(
    "layout, shape, scope, threads, reason",
    [
        (
            row_per_lane(8),
            (32, 8),
            "cta",
            128,
            "register layout thread axis laneid of R does not match scope cta",
        ),
        (
            row_per_lane(8, 32, tx),
            (32, 8),
            "warp",
            None,
            "register layout thread axis tx of R does not match scope warp",
        ),
        (row_per_lane(8, 16), (16, 8), "warp", None, "tells 16 threads apart"),
        (TileLayout(S[(32, 8)]), (32, 8), "warp", None, "names no thread axis"),
    ],
)
def test_declines_register_layouts_that_do_not_fit_the_scope(layout, shape, scope, threads, reason):
    func = demos.reg_roundtrip(layout, shape, scope=scope, memory="global", cta_threads=threads)
    assert reason in _reason(func)


def test_declines_sub_byte_elements():
    func = demos.reg_roundtrip(row_per_lane(8), (32, 8), "int4", memory="global")
    assert "narrower than a byte" in _reason(func)


def test_strict_mode_names_the_line_and_every_reason():
    func = demos.reg_roundtrip(
        row_per_lane(8), (32, 8), scope="cta", memory="global", cta_threads=128
    )
    with pytest.raises(tcd.DispatchError) as err:
        toolchain.cuda_source(func, "sm_90a", pipeline=tcd.STRICT_PIPELINE)
    text = str(err.value)
    assert "demos.py:" in text and "copy(R[full], B[full])" in text
    assert re.search(
        r"gmem_smem +declined: .*\n +ldstmatrix +declined: .*\n +reg +declined: "
        r"register layout thread axis "
        r"laneid of R does not match scope cta",
        text,
    )


# -- emitted code -------------------------------------------------------------------------
def test_seed_sass_has_128_bit_shared_accesses_and_no_local_memory():
    func = demos.reg_roundtrip(row_per_lane(8), (32, 8))
    ops = toolchain.opcodes(toolchain.kernel_sass(func, "sm_90a"))
    assert ops["LDS.128"] >= 2 and ops["STS.128"] >= 2
    assert not any(op.startswith(("LDL", "STL")) for op in ops), ops


def shared_to_registers_to_global(k: int, rows: int = 32, dtype: str = "float32"):
    """Global -> shared, shared -> registers (rotated), registers -> global (plain order):
    the registers are observed in the plain order, so the rotation must be undone."""
    shape, full = (rows, k), (slice(0, rows), slice(0, k))
    layout = (
        row_per_lane(k) if rows == 32 else TileLayout(S[(rows // 32, 32, k) : (k, 1 @ lane, 1)])
    )

    # fmt: off
    @T.prim_func
    def kernel(A_ptr: T.handle, B_ptr: T.handle):
        A = T.match_buffer(A_ptr, shape, dtype)
        B = T.match_buffer(B_ptr, shape, dtype)
        T.device_entry()
        T.cta_id([1])
        T.warp_id([1])
        T.lane_id([32])
        T.thread_id([32])
        R = T.alloc_buffer(shape, dtype, scope="local", layout=layout)
        A_smem = T.alloc_buffer(shape, dtype, scope="shared", layout=TileLayout(S[shape]))
        Tx.warp.copy(A_smem[full], A[full])
        T.cuda.cta_sync()
        Tx.warp.copy(R[full], A_smem[full])
        Tx.warp.copy(B[full], R[full])
    # fmt: on
    return kernel


@pytest.mark.parametrize("k, rows", [(8, 32), (16, 32), (32, 32), (64, 32), (8, 64), (16, 64)])
def test_rotated_load_has_selects_and_no_local_memory(k, rows):
    func = shared_to_registers_to_global(k, rows)
    [plan] = [r.plan for r in _reg_plans(func) if r.plan["direction"] == "shared->local"]
    assert plan["round_order"].startswith("rotate") and set(plan["conflict_ways"]) == {1}
    ops = toolchain.opcodes(toolchain.kernel_sass(func, "sm_90a"))
    assert not any(op.startswith(("LDL", "STL")) for op in ops), ops
    assert ops["SEL"] == plan["selects_per_thread"], ops  # the barrel shifter, nothing more
    assert ops["LDS.128"] == plan["outer"]


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("k, rows", [(8, 32), (16, 32), (32, 32), (64, 32), (16, 64)])
def test_rotated_load_roundtrip(k, rows, rng, where, gpu):
    _roundtrip(shared_to_registers_to_global(k, rows), (rows, k), "float32", rng, where, gpu)


def test_loop_is_serial_not_unrolled():
    src = toolchain.cuda_source(demos.reg_roundtrip(row_per_lane(16), (32, 16)), "sm_90a")
    assert "for (int rnd" in src and "#pragma unroll" not in src


# -- GPU round trips ----------------------------------------------------------------------
def _roundtrip(func, shape, dtype, rng, where, gpu):
    a = runtime.random_array(shape, dtype, rng)
    out = execute(func, [a, runtime.poison_like(a)], where, gpu)
    np.testing.assert_array_equal(runtime.bits(out[1]), runtime.bits(a))


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("memory", ["shared", "global"])
@pytest.mark.parametrize(
    "dtype, k",
    [
        ("float32", 8),
        ("float32", 16),
        ("float16", 8),
        ("float16", 16),
        ("bfloat16", 16),
        ("uint8", 16),
    ],
)
def test_seed_roundtrip(memory, dtype, k, rng, where, gpu):
    _roundtrip(
        demos.reg_roundtrip(row_per_lane(k), (32, k), dtype, memory=memory),
        (32, k),
        dtype,
        rng,
        where,
        gpu,
    )


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("name", sorted(LAYOUTS))
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_layout_roundtrip(name, dtype, rng, where, gpu):
    layout, shape, scope, threads = LAYOUTS[name]
    for memory in ("shared", "global"):
        func = demos.reg_roundtrip(layout, shape, dtype, scope, memory, threads)
        _roundtrip(func, shape, dtype, rng, where, gpu)


# -- register regions at a loop-dependent offset (issue 16, item 4) -------------------------
# Our programs after the staging loops of TVM's tcgen05 tests: each of 128 threads copies its
# row of A into a flat register array one vector per iteration (``Tx.copy`` at thread scope,
# register side ``R[off + i*vec : off + i*vec + vec]``), then from the registers to B.
ROWS = 128


def staging_loop(
    width: int,
    vec: int,
    dtype: str = "float32",
    *,
    unroll: bool = False,
    chunks: int = 1,
    local_offset: int = 0,
    whole_row: bool = False,
    via_layout: bool = False,
):
    """``chunks`` chunks of a row, each staged through ``R`` in a loop of ``width // chunks
    // vec`` iterations; ``whole_row`` keeps every chunk in its own registers (offset
    ``c*chunk + i*vec``: two loops); ``local_offset`` shifts the region inside a larger ``R``
    (TVM's sliced-local case); ``via_layout`` computes the global offset with a layout's
    ``apply`` as TVM's store test does; ``unroll`` writes ``T.unroll`` for the loops."""
    chunk = width // chunks
    regs = local_offset + (width if whole_row else chunk)
    loop = T.unroll if unroll else T.serial
    g_layout = TileLayout(S[(ROWS, width // vec, vec) : (width, vec, 1)])

    # fmt: off
    @T.prim_func
    def kernel(A: T.Buffer((ROWS, width), dtype), B: T.Buffer((ROWS, width), dtype)) -> None:
        A_flat = A.view(-1)
        B_flat = B.view(-1)
        T.device_entry()
        T.cta_id([1])
        T.warp_id([ROWS // 32])
        T.lane_id([32])
        tid = T.thread_id([ROWS])
        R = T.alloc_local((regs,), dtype)
        for c in loop(chunks):
            for i in loop(chunk // vec):
                g = T.meta_var(tid * width + c * chunk + i * vec)
                r = T.meta_var(local_offset + (c * chunk if whole_row else 0) + i * vec)
                Tx.copy(R[r : r + vec], A_flat[g : g + vec])
            for i in loop(chunk // vec):
                if via_layout:
                    gl = T.meta_var(g_layout.apply(tid, c * (chunk // vec) + i, 0)["m"])
                    rl = T.meta_var(local_offset + (c * chunk if whole_row else 0) + i * vec)
                    Tx.copy(B_flat[gl : gl + vec], R[rl : rl + vec])
                else:
                    g = T.meta_var(tid * width + c * chunk + i * vec)
                    r = T.meta_var(local_offset + (c * chunk if whole_row else 0) + i * vec)
                    Tx.copy(B_flat[g : g + vec], R[r : r + vec])
    # fmt: on
    return kernel


def busy_staging_loop(trips: int = 32, work: int = 16):
    """The staging loop with ``work`` guarded scalar updates per iteration: enough that the
    CUDA compiler keeps the loop (it unrolls the plain staging loop)."""
    width = trips * 4

    # fmt: off
    @T.prim_func
    def kernel(
        A: T.Buffer((ROWS, width), "float32"),
        B: T.Buffer((ROWS, width), "float32"),
        C: T.Buffer((ROWS, work), "float32"),
    ) -> None:
        A_flat = A.view(-1)
        B_flat = B.view(-1)
        T.device_entry()
        T.cta_id([1])
        T.warp_id([ROWS // 32])
        T.lane_id([32])
        tid = T.thread_id([ROWS])
        R = T.alloc_local((width,), "float32")
        for i in range(trips):
            g = T.meta_var(tid * width + i * 4)
            Tx.copy(R[i * 4 : i * 4 + 4], A_flat[g : g + 4])
            for j in T.unroll(work):
                if C[tid, j] > R[j % 4]:
                    C[tid, j] = C[tid, j] - R[(j + 1) % 4]
        for i in range(trips):
            g = T.meta_var(tid * width + i * 4)
            Tx.copy(B_flat[g : g + 4], R[i * 4 : i * 4 + 4])
    # fmt: on
    return kernel


def warp_slices(k: int = 16, step: int = 8):
    """Warp scope, lane l owning row l: shared -> registers -> global in column slices of
    ``step`` (register offset ``step*i``; the shared side's rounds are rotated)."""
    layout = row_per_lane(k)

    # fmt: off
    @T.prim_func
    def kernel(A: T.Buffer((32, k), "float32"), B: T.Buffer((32, k), "float32")) -> None:
        T.device_entry()
        T.cta_id([1])
        T.warp_id([1])
        T.lane_id([32])
        T.thread_id([32])
        R = T.alloc_buffer((32, k), "float32", scope="local", layout=layout)
        A_smem = T.alloc_buffer((32, k), "float32", scope="shared", layout=TileLayout(S[32, k]))
        Tx.warp.copy(A_smem[:, :], A[:, :])
        T.cuda.cta_sync()
        for i in range(k // step):
            Tx.warp.copy(R[:, i * step : i * step + step], A_smem[:, i * step : i * step + step])
        for i in range(k // step):
            Tx.warp.copy(B[:, i * step : i * step + step], R[:, i * step : i * step + step])
    # fmt: on
    return kernel


def runaway_offset(kind: str):
    """A register region whose start cannot become a constant (declined), by ``kind``."""

    # fmt: off
    @T.prim_func
    def kernel(A: T.Buffer((ROWS, 128), "float32"), B: T.Buffer((ROWS, 128), "float32"),
               n: T.int32) -> None:
        A_flat = A.view(-1)
        T.device_entry()
        T.cta_id([1])
        T.warp_id([ROWS // 32])
        T.lane_id([32])
        tid = T.thread_id([ROWS])
        R = T.alloc_local((128,), "float32")
        g = T.meta_var(tid * 128)
        if kind == "thread":
            Tx.copy(R[tid % 2 * 4 : tid % 2 * 4 + 4], A_flat[g : g + 4])
        elif kind == "runtime_trips":
            for i in range(n):
                Tx.copy(R[i * 4 : i * 4 + 4], A_flat[g + i * 4 : g + i * 4 + 4])
        elif kind == "not_affine":
            for i in range(8):
                Tx.copy(R[i // 2 * 4 : i // 2 * 4 + 4], A_flat[g + i * 4 : g + i * 4 + 4])
        elif kind == "too_many_slots":
            for i in range(128):
                Tx.copy(R[i : i + 1], A_flat[g + i : g + i + 1])
        else:  # the control: a loop of constant trip count, affine offset
            for i in range(32):
                Tx.copy(R[i * 4 : i * 4 + 4], A_flat[g + i * 4 : g + i * 4 + 4])
    # fmt: on
    return kernel


STAGING = {
    # name: (builder kwargs, register offset in the plan, guarded slots)
    "fp32_w32": (dict(width=32, vec=4), "4*i (i in [0, 8))", 8),
    "fp32_w128_unroll": (dict(width=128, vec=4, unroll=True), "4*i (i in [0, 32))", 32),
    "fp16_w64_chunks": (dict(width=64, vec=8, dtype="float16", chunks=2), "8*i (i in [0, 4))", 4),
    "u8_w128_layout": (
        dict(width=128, vec=16, dtype="uint8", via_layout=True),
        "16*i (i in [0, 8))",
        8,
    ),
    "fp32_sliced_local": (dict(width=32, vec=4, local_offset=8), "8 + 4*i (i in [0, 8))", 8),
    "fp32_two_loops": (
        dict(width=64, vec=4, chunks=4, whole_row=True),
        "16*c + 4*i (c in [0, 4), i in [0, 4))",
        16,
    ),
}


def _staging(name: str):
    kwargs = STAGING[name][0]
    return staging_loop(**kwargs), (ROWS, kwargs["width"]), kwargs.get("dtype", "float32")


def _no_local_memory(ops) -> bool:
    return not any(op.startswith(("LDL", "STL")) for op in ops)


@pytest.mark.parametrize("name", sorted(STAGING))
def test_loop_offset_plans(name):
    func, _, _ = _staging(name)
    _, offset, slots = STAGING[name]
    reports = _reg_plans(func)
    assert {r.plan["direction"] for r in reports} == {"global->local", "local->global"}
    for r in reports:
        assert r.plan["register_offset"] == offset and r.plan["guarded_slots"] == slots
        assert (r.plan["vec_bits"], r.plan["outer"], r.scope) == (128, 1, "thread")


def test_constant_register_offsets_report_no_loop_offset():  # control for the plan fact
    [r, *_] = _reg_plans(demos.reg_roundtrip(row_per_lane(8), (32, 8)))
    assert "register_offset" not in r.plan and "guarded_slots" not in r.plan


@pytest.mark.parametrize(
    "kind, reason",
    [
        ("thread", "depends on tid: tid is not the variable of an enclosing loop"),
        ("runtime_trips", "loop i starts at 0 and runs n times, not a constant range"),
        ("not_affine", "i // 2 * 4, which is not affine in loop i"),
        ("too_many_slots", "takes 128 values (i in [0, 128)); each access would pick"),
    ],
)
def test_declines_register_offsets_that_cannot_become_constants(kind, reason):
    assert reason in _reason(runaway_offset(kind))


def test_accepts_the_declined_programs_affine_counterpart():  # control for the declines
    [r] = _reg_plans(runaway_offset("control"))
    assert r.plan["register_offset"] == "4*i (i in [0, 32))"


def test_strict_mode_names_the_register_offset_reason():
    with pytest.raises(tcd.DispatchError, match=r"reg +declined: register region of R starts"):
        toolchain.cuda_source(runaway_offset("thread"), "sm_90a", pipeline=tcd.STRICT_PIPELINE)


@pytest.mark.parametrize("name", ["fp32_w32", "fp16_w64_chunks"])
def test_loop_offset_sass_is_the_unrolled_copy_without_local_memory(name):
    """Serial or ``T.unroll``: one 128-bit load and store per iteration, no local memory,
    and the same instructions either way (the guards cost nothing once unrolled)."""
    kwargs = STAGING[name][0]
    trips = kwargs["width"] // kwargs["vec"]
    counts = []
    for unroll in (False, True):
        func = staging_loop(**{**kwargs, "unroll": unroll})
        ops = toolchain.opcodes(toolchain.kernel_sass(func, "sm_90a", tcd.STRICT_PIPELINE))
        assert _no_local_memory(ops), ops
        assert sum(n for op, n in ops.items() if op.startswith("LDG.E.128")) == trips
        assert ops["STG.E.128"] == trips
        counts.append(sum(ops.values()))
    assert counts[0] == counts[1]


def test_loop_offset_sass_of_the_largest_staging_loops():
    for name in ("fp32_w128_unroll", "u8_w128_layout", "fp32_two_loops"):
        func, _, _ = _staging(name)
        ops = toolchain.opcodes(toolchain.kernel_sass(func, "sm_90a", tcd.STRICT_PIPELINE))
        assert _no_local_memory(ops), (name, ops)


def test_guards_fold_away_in_tir_under_t_unroll():
    serial = toolchain.cuda_source(staging_loop(32, 4), "sm_90a", tcd.STRICT_PIPELINE)
    unrolled = toolchain.cuda_source(staging_loop(32, 4, unroll=True), "sm_90a")
    assert "if (i == 7)" in serial and "((uint4*)R_ptr)[7] = " in serial  # control
    assert "if (i" not in unrolled and "((uint4*)R_ptr)[7] = " in unrolled


def test_registers_stay_registers_where_the_compiler_keeps_the_loop():
    func = busy_staging_loop()
    ours = toolchain.opcodes(toolchain.kernel_sass(func, "sm_90a", tcd.STRICT_PIPELINE))
    assert sum(n for op, n in ours.items() if op.startswith("LDG.E.128")) < 32  # loop kept
    assert _no_local_memory(ours), ours
    # control: TVM's built-in indexes the registers by the loop variable -> local memory
    builtin = toolchain.opcodes(toolchain.kernel_sass(func, "sm_90a", "tirx"))
    assert builtin["STL.128"] >= 1 and builtin["LDL.128"] >= 32, builtin


def test_rotated_shared_loads_at_a_loop_offset():
    func = warp_slices()
    [load] = [r.plan for r in _reg_plans(func) if r.plan["direction"] == "shared->local"]
    assert load["round_order"].startswith("rotate") and load["guarded_slots"] == 2
    ops = toolchain.opcodes(toolchain.kernel_sass(func, "sm_90a", tcd.STRICT_PIPELINE))
    assert _no_local_memory(ops), ops
    assert ops["SEL"] == 2 * load["selects_per_thread"], ops  # the shifter, once per slice


STRICT_TRIPS = [*sorted(STAGING), "fp32_w32_unroll", "busy", "warp_slices"]


def _loop_offset_case(name: str):
    if name == "busy":
        func = busy_staging_loop()
        a = (ROWS, 128)
        return func, a, "float32", [np.zeros((ROWS, 16), np.float32)]
    if name == "warp_slices":
        return warp_slices(), (32, 16), "float32", []
    if name == "fp32_w32_unroll":
        return staging_loop(32, 4, unroll=True), (ROWS, 32), "float32", []
    func, shape, dtype = _staging(name)
    return func, shape, dtype, []


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("name", STRICT_TRIPS)
def test_loop_offset_roundtrip(name, rng, where, gpu):
    func, shape, dtype, extra = _loop_offset_case(name)
    a = runtime.random_array(shape, dtype, rng)
    out = execute(func, [a, runtime.poison_like(a), *extra], where, gpu, tcd.STRICT_PIPELINE)
    np.testing.assert_array_equal(runtime.bits(out[1]), runtime.bits(a))


def test_roundtrip_catches_a_guard_off_by_one_iteration(rng, monkeypatch):
    """Control for the round trips: loads into the registers of the next iteration are
    caught (the stores keep the right ones, or the two errors would cancel)."""
    from tirx_cuda_dispatch.copy import reg as reg_variant

    right = reg_variant._register_slot

    def one_late(plan, g, rnd, tid):
        if plan.direction.endswith("->local"):
            g = (g + 1) % plan.loop_offset.count
        return right(plan, g, rnd, tid)

    monkeypatch.setattr(reg_variant, "_register_slot", one_late)
    func, shape, dtype = _staging("fp32_w32")
    a = runtime.random_array(shape, dtype, rng)
    out = execute(func, [a, runtime.poison_like(a)], "sim", None, tcd.STRICT_PIPELINE)
    assert not np.array_equal(runtime.bits(out[1]), runtime.bits(a))


# -- cache hints on the global side ------------------------------------------------------------
def _hinted_reg_copy(**hints):
    from tvm.script import tirx as T
    from tvm.script.tirx import tile as Tx

    layout = TileLayout(S[(32, 8) : (1 @ lane, 1)])

    @T.prim_func
    def kernel(A_ptr: T.handle, B_ptr: T.handle):
        A = T.match_buffer(A_ptr, (32, 8), "float32")
        B = T.match_buffer(B_ptr, (32, 8), "float32")
        T.device_entry()
        T.cta_id([1])
        T.warp_id([1])
        T.lane_id([32])
        T.thread_id([32])
        R = T.alloc_buffer((32, 8), "float32", scope="local", layout=layout)
        Tx.warp.copy(R[:, :], A[:, :], **hints)
        Tx.warp.copy(B[:, :], R[:, :])

    return kernel


def test_cache_hints_reach_the_register_copys_global_loads():
    func = _hinted_reg_copy(cache="nc", l1_evict="L1::no_allocate")
    [load, _] = tcd.explain(func)
    assert load.variant == "reg" and "nc" in load.plan["cache_hints"]
    ops = toolchain.opcodes(toolchain.kernel_sass(func, "sm_90a", tcd.STRICT_PIPELINE))
    assert [k for k in ops if k.startswith("LDG")] == ["LDG.E.NA.128.CONSTANT"]
    assert not [k for k in ops if k.startswith(("LDL", "STL"))]
    # negative control: without hints there is no L1::no_allocate (.NA) on the load
    plain = toolchain.opcodes(toolchain.kernel_sass(_hinted_reg_copy(), "sm_90a"))
    assert [k for k in plain if k.startswith("LDG") and ".NA" in k] == []


def test_an_unknown_hint_declines_naming_it(rng):
    [load, _] = tcd.explain(_hinted_reg_copy(cache="sticky"))
    [reason] = [c.reason for c in load.candidates if c.variant == "reg"]
    assert "sticky" in reason and "not a hint" in reason


def test_hinted_register_copy_roundtrip_in_the_simulator(rng):
    from tirx_cuda_dispatch import sim

    a = runtime.random_array((32, 8), "float32", rng)
    func = _hinted_reg_copy(cache="nc", prefetch_size="L2::256B")
    out = sim.run(func, [a, runtime.poison_like(a)], pipeline=tcd.STRICT_PIPELINE)
    np.testing.assert_array_equal(runtime.bits(out[1]), runtime.bits(a))


# -- a region written with lets over a swizzled tile ----------------------------------------
_SWIZZLED = ComposeLayout(2, 3, 3, TileLayout(S[(64, 8, 32) : (32, 2048, 1)]))  # 16-byte units


def _let_region_kernel(dispatch):
    """Each of 128 threads copies its 4 values of A into row ``(5 t) % 64``, columns
    ``8 + 4 (t // 64)`` of a swizzled shared tile, the region written with lets; the CTA
    then copies the whole tile (a constant region) to G."""
    kw = {"dispatch": dispatch} if dispatch else {}

    # fmt: off
    @T.prim_func
    def let_region(A_ptr: T.handle, G_ptr: T.handle):
        A = T.match_buffer(A_ptr, (128, 4), "float32")
        G = T.match_buffer(G_ptr, (64, 256), "float32")
        T.device_entry()
        T.cta_id([1])
        tid = T.thread_id([128])
        tile = T.alloc_buffer((64, 256), "float32", scope="shared", layout=_SWIZZLED)
        vals = T.alloc_local((4,), "float32")
        Tx.cta.fill(tile[:, :], T.float32(0))
        T.cuda.cta_sync()
        Tx.copy(vals[:], A[tid, :])
        row: T.let = (tid * 5) % 64
        col: T.let = (tid // 64) * 4 + 8
        Tx.copy(tile[row, col : col + 4], vals[:], **kw)
        T.cuda.cta_sync()
        Tx.cta.copy(G[:, :], tile[:, :])
    # fmt: on
    return let_region


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("dispatch", [None, "vec_128b"], ids=["chosen", "vec_128b"])
def test_a_region_written_with_lets_lands_where_the_swizzle_puts_it(dispatch, where, gpu):
    """TVM's layout algebra cannot slice the swizzled tile at ``row``/``col`` (lets): the
    operand carries their values, so copy -> reg takes it with one 16-byte store a thread
    (TVM's vec_128b name included), and the whole tile read back through a constant
    region holds every thread's values where numpy puts them (zeros elsewhere)."""
    func = _let_region_kernel(dispatch)
    [store] = [r for r in tcd.explain(func, "sm_90a") if r.index == 2]
    assert store.variant == "reg" and store.plan["vec"] == 4 and "Swizzle" in store.plan["swizzle"]
    rng = np.random.default_rng(7)
    a = rng.standard_normal((128, 4)).astype(np.float32)
    out = execute(func, [a, np.full((64, 256), np.nan, np.float32)], where, gpu,
                  pipeline="tirx_cuda_dispatch.strict")  # fmt: skip
    want = np.zeros((64, 256), np.float32)
    for t in range(128):
        want[(t * 5) % 64, (t // 64) * 4 + 8 : (t // 64) * 4 + 12] = a[t]
    assert np.array_equal(out[1], want)
    # the control: a store that left the swizzle out (tile offsets as addresses) would
    # put the values elsewhere in the tile as read back, so the comparison catches it
    swizzle = Swizzle.of(_SWIZZLED, "tile")
    ignored = np.zeros((64, 256), np.float32)
    for t in range(128):
        for i in range(4):
            r, c = (t * 5) % 64, (t // 64) * 4 + 8 + i
            p = swizzle.apply(r * 32 + c // 32 * 2048 + c % 32)  # read back through it
            ignored[p % 2048 // 32, p // 2048 * 32 + p % 32] = a[t, i]
    assert not np.array_equal(ignored, want)
