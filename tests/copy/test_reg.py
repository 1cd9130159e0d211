"""copy -> reg (seed 000): plans, declines, SASS, GPU round trips through registers."""

from __future__ import annotations

import re

import numpy as np
import pytest
from tvm.script import tirx as T
from tvm.script.tirx import tile as Tx
from tvm.tirx.layout import Axis, R, S, TileLayout

import tirx_cuda_dispatch as tcd
from executors import WHERE, execute
from tirx_cuda_dispatch import demos, runtime, toolchain

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
