"""copy -> gmem_smem (seed 004): plans, declines, exact element mapping, SASS, GPU round trips."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest
import tvm
from tvm import sym
from tvm.script import tirx as T
from tvm.script.tirx import tile as Tx
from tvm.tirx.layout import ComposeLayout, S, TileLayout

import tirx_cuda_dispatch as tcd
from executors import WHERE, execute
from kernels import per_warp_tiles, thread_rows, warp_g2local, warp_g2s
from tirx_cuda_dispatch import demos, runtime, toolchain

SWIZZLE_128B_F16 = ComposeLayout(3, 3, 3, TileLayout(S[64 * 64 : 1]))  # 128-byte rows of fp16
SWIZZLE_64B_F32 = ComposeLayout(2, 2, 3, TileLayout(S[(32, 16) : (16, 1)]))


def _plans(func, arch="sm_90a"):
    return [r.plan for r in tcd.explain(func, arch)]


# -- the seed's table ---------------------------------------------------------------------
@pytest.mark.parametrize(
    "dtype, vec, outer", [("float32", 4, 8), ("float16", 8, 4), ("uint8", 16, 2)]
)
def test_seed_table_32x32_warp(dtype, vec, outer):
    for plan in _plans(demos.gmem_smem_roundtrip(dtype, (32, 32), "warp")):
        assert (plan["vec_bits"], plan["vec"], plan["outer"], plan["threads"]) == (
            128,
            vec,
            outer,
            32,
        )


@pytest.mark.parametrize(
    "threads, dtype, vec_bits, outer",
    [
        (128, "float32", 128, 2),
        (256, "float32", 128, 1),
        (128, "float16", 128, 1),
        (256, "float16", 64, 1),
    ],
)
def test_cta_scope_128_and_256_threads(threads, dtype, vec_bits, outer):
    func = demos.gmem_smem_roundtrip(dtype, (32, 32), "cta", cta_threads=threads)
    for plan in _plans(func):
        assert (plan["threads"], plan["vec_bits"], plan["outer"]) == (threads, vec_bits, outer)
    if vec_bits < 128:  # the report says why the wider access was not taken
        assert "do not divide among 256 threads" in plan["narrower_because"]


def test_warpgroup_scope():
    [plan, _] = _plans(demos.gmem_smem_roundtrip("float32", (64, 32), "warpgroup"))
    assert (plan["threads"], plan["vec"], plan["outer"]) == (128, 4, 4)


def test_tile_at_an_offset_of_a_larger_tensor():
    func = demos.gmem_smem_roundtrip("float32", (16, 32), "warp", ctas=4, cols=96, col_offset=32)
    [g2s, s2g] = tcd.explain(func)
    assert "bx * 16:bx * 16+16, 32:64" in g2s.operands[1]["region"]
    assert (g2s.plan["vec"], g2s.plan["outer"]) == (4, 4)
    # Rows are 96 elements apart in global, 32 in shared: two dimensions, each thread
    # moves 4 contiguous elements of one row per round.
    p = g2s.plan_object.partition
    assert [d.extent for d in p.outer] == [4] and [d.extent for d in p.thread] == [4, 8]
    assert p.thread[0].strides == (96, 32)


def test_misaligned_column_offset_narrows_the_vector():
    func = demos.gmem_smem_roundtrip("float32", (16, 32), "warp", cols=96, col_offset=2)
    plan = _plans(func)[0]
    assert (plan["vec_bits"], plan["vec"]) == (64, 2)
    assert "base offset" in plan["narrower_because"]


def test_swizzled_shared_layout_caps_vec_at_one_unit():
    f16 = demos.gmem_smem_roundtrip(
        "float16", (64, 64), "warpgroup", shared_layout=SWIZZLE_128B_F16
    )
    plan = _plans(f16)[0]
    assert (plan["vec"], plan["swizzle"]) == (8, "Swizzle<3,3,3>")
    f32 = demos.gmem_smem_roundtrip("float32", (32, 16), "warp", shared_layout=SWIZZLE_64B_F32)
    plan = _plans(f32)[0]
    assert (plan["vec"], plan["vec_bits"], plan["swizzle"]) == (4, 128, "Swizzle<2,2,3>")
    u8 = demos.gmem_smem_roundtrip(
        "uint8",
        (32, 16),
        "warp",
        shared_layout=ComposeLayout(2, 2, 3, TileLayout(S[(32, 16) : (16, 1)])),
    )
    plan = _plans(u8)[0]
    assert (plan["vec"], plan["vec_bits"]) == (4, 32)  # one 4-element unit, not 16 bytes
    assert "128-bit" in plan["narrower_because"]


def test_warp_scope_per_warp_regions_in_a_multi_warp_cta():
    [g2s, s2g] = tcd.explain(per_warp_tiles("float32", warps=4, rows=8, cols=64))
    assert (g2s.plan["threads"], g2s.plan["vec"], g2s.plan["outer"]) == (32, 4, 4)
    assert "w * 8" in g2s.operands[0]["region"]  # the warp's own rows


def test_thread_scope_copies_its_own_row():
    [g2s, _] = tcd.explain(thread_rows("float32", threads=64, cols=8))
    assert (g2s.scope, g2s.plan["threads"], g2s.plan["vec"], g2s.plan["outer"]) == (
        "thread",
        1,
        4,
        2,
    )


# -- declines -----------------------------------------------------------------------------
def _reason(func):
    [report] = tcd.explain(func)
    assert report.variant != "gmem_smem"
    [cand] = [c for c in report.candidates if c.variant == "gmem_smem"]
    return cand.reason


# -- masked copies: counts the scope's threads do not divide --------------------------------
ODD_TILES = [
    # dtype, tile, scope, cta_threads, pieces (as explain shows them)
    ("float32", (4, 6), "warp", None, ["128-bit x 6: 0 full rounds + 1 round of 6 of 32 threads"]),
    (
        "float16",
        (48, 40),
        "cta",
        256,
        ["128-bit x 240: 0 full rounds + 1 round of 240 of 256 threads"],
    ),
    (
        "float32",
        (32, 6),
        "warp",
        None,
        ["128-bit x 48: 1 full rounds + 1 round of 16 of 32 threads"],
    ),
    (
        "int8",
        (5, 3),
        "warpgroup",
        None,
        ["8-bit x 15: 0 full rounds + 1 round of 15 of 128 threads"],
    ),
    (
        "bfloat16",
        (3, 70),
        "warp",
        None,
        ["32-bit x 105: 3 full rounds + 1 round of 9 of 32 threads"],
    ),
]


@pytest.mark.parametrize("dtype, tile, scope, threads, pieces", ODD_TILES)
def test_odd_tiles_get_masked_vector_copies(dtype, tile, scope, threads, pieces):
    func = demos.gmem_smem_roundtrip(dtype, tile, scope, cta_threads=threads)
    for plan in _plans(func):
        assert plan["pieces"] == pieces
    assert "pad" not in str(tcd.explain(func))  # no divisibility decline, no advice to pad


def test_a_run_the_widest_vector_does_not_divide_gets_a_narrower_tail():
    """Rows of 6 float32 at a row stride of 8 on both sides: 128-bit for columns 0:4 of
    each row, 64-bit for columns 4:6 (plan tier: the pieces over MemoryViews)."""
    from tirx_cuda_dispatch.layout.atoms import MemoryView
    from tirx_cuda_dispatch.layout.partition import synthesize_pieces

    views = [MemoryView(name, ((4, 8), (6, 1)), 0) for name in ("g", "s")]
    part = synthesize_pieces(views, 32, 32)
    assert [(p.vec_bits, p.count, p.tail) for p in part.pieces] == [(128, 4, 4), (64, 4, 4)]
    offsets = sorted(o for a in part.accesses(0) for o in range(a.offset, a.offset + a.elements))
    assert offsets == [r * 8 + c for r in range(4) for c in range(6)]  # each element once


def test_masked_copy_has_one_thread_predicate_per_partial_round():
    func = demos.gmem_smem_roundtrip("float32", (32, 6), "warp")
    src = toolchain.cuda_source(func, "sm_90a")
    kernel = src[src.index('extern "C" __global__') :]
    assert kernel.count("if (((int)threadIdx.x) < 16)") == 2  # load round, store round
    assert kernel.count("if (") == 2  # no per-element branch
    sass = toolchain.opcodes(toolchain.sass(toolchain.nvrtc_compile(src, "sm_90a")))
    memory = [k for k in sass if k.startswith(("LDG", "STG", "LDS", "STS"))]
    assert {k[:3] for k in memory} == {"LDG", "STG", "LDS", "STS"}
    assert all("128" in k for k in memory), memory  # every access is a full vector


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("dtype, tile, scope, threads, pieces", ODD_TILES)
def test_odd_tile_roundtrip_by_ours(dtype, tile, scope, threads, pieces, rng, where, gpu):
    func = demos.gmem_smem_roundtrip(dtype, tile, scope, cta_threads=threads, ctas=2)
    shape = (2 * tile[0], tile[1])
    a, out = _roundtrip(func, shape, dtype, rng, where, gpu, tcd.STRICT_PIPELINE)
    np.testing.assert_array_equal(runtime.bits(out), runtime.bits(a))


def test_declines_register_operand():
    assert _reason(warp_g2local()) == (
        "src A is global and dst R is local; needs global->shared, shared->global, "
        "global->global, shared->shared"
    )
    assert tcd.explain(warp_g2local())[0].variant == "reg"  # the register variant takes it


def test_declines_dtype_mismatch():
    assert _reason(warp_g2s(32, 32, "float32", "float16")) == (
        "dtype mismatch: dst A_s is float16, src A is float32"
    )


def test_scope_narrowed_by_if_splits_among_the_lanes_that_run():
    [report] = tcd.explain(warp_g2s(32, 32, guard="lanes"))
    assert report.variant == "gmem_smem" and report.plan["threads"] == 16


def test_declines_a_per_thread_test_it_cannot_prove():
    assert _reason(warp_g2s(32, 32, guard="data")).startswith(
        "cannot prove that every thread of the warp in lanes [0, 32) passes `if A[0, lane] != T.float32(1.0)`"
    )


def test_declines_tensors_beyond_32_bit_offsets():
    func = demos.gmem_smem_roundtrip("float32", (32, 4096), "cta", ctas=2**16, cta_threads=256)
    [reason] = [c.reason for c in tcd.explain(func)[0].candidates if c.variant == "gmem_smem"]
    assert reason == "A holds 8589934592 elements; offsets must stay below 2**31"


def test_strict_mode_error_names_rule_and_line():
    target = tvm.target.Target({"kind": "cuda", "arch": "sm_90a"})
    with pytest.raises(tcd.DispatchError) as err:
        tvm.compile(warp_g2s(32, 32, guard="data"), target=target, tir_pipeline=tcd.STRICT_PIPELINE)
    msg = str(err.value)
    assert "kernels.py:" in msg and "gmem_smem" in msg and "cannot prove that every" in msg


# -- every element moved exactly once, to the right place ---------------------------------
def _concrete(partition, bx_value):
    """The partition with its base offsets evaluated for CTA ``bx_value``."""

    def ev(base):
        if isinstance(base, int):
            return base
        ana = sym.Analyzer()
        for var in tvm.tirx.analysis.undefined_vars(base):
            ana.bind(var, bx_value)  # the only free variable of these bases is bx
        return int(ana.simplify(base))

    return dataclasses.replace(partition, bases=tuple(ev(b) for b in partition.bases))


MAPPING_CASES = [
    dict(dtype="float32", tile=(32, 32), scope="warp"),
    dict(dtype="float16", tile=(32, 32), scope="warp"),
    dict(dtype="uint8", tile=(32, 32), scope="warp"),
    dict(dtype="float32", tile=(64, 32), scope="warpgroup"),
    dict(dtype="float16", tile=(32, 32), scope="cta", cta_threads=256),
    dict(dtype="float32", tile=(16, 32), scope="warp", ctas=3, cols=96, col_offset=32),
    dict(dtype="float32", tile=(16, 32), scope="warp", ctas=2, cols=96, col_offset=2),
    dict(dtype="float16", tile=(64, 64), scope="warpgroup", shared_layout=SWIZZLE_128B_F16),
    dict(dtype="float32", tile=(32, 16), scope="warp", shared_layout=SWIZZLE_64B_F32, ctas=2),
    dict(dtype="float32", tile=(8, 4), scope="warp"),
]


@pytest.mark.parametrize("case", MAPPING_CASES, ids=lambda c: "-".join(str(v) for v in c.values()))
def test_plan_moves_every_element_once_to_its_place(case):
    tm, tn = case["tile"]
    cols = case.get("cols", tn)
    c0 = case.get("col_offset", 0)
    s_layout = case.get("shared_layout") or TileLayout(S[(tm, tn)])
    func = demos.gmem_smem_roundtrip(**case)
    for report in tcd.explain(func):
        plan = report.plan_object
        g_is_src = plan.direction == "global->shared"
        for bx in range(case.get("ctas", 1)):
            p = _concrete(plan.partition, bx)
            moved = []
            for rnd in range(p.rounds):
                for tid in range(p.threads):
                    g_off, s_off = p.access(rnd, tid)
                    assert g_off % p.vec == 0 and s_off % p.vec == 0  # aligned vector
                    moved += [(g_off + k, s_off + k) for k in range(p.vec)]
            expected = [
                ((bx * tm + r) * cols + c0 + c, int(s_layout.apply(r * tn + c)["m"]))
                for r in range(tm)
                for c in range(tn)
            ]
            assert len(moved) == tm * tn, "an element is moved twice or not at all"
            assert sorted(moved) == sorted(expected), (
                f"wrong mapping ({report.plan}, {'g2s' if g_is_src else 's2g'})"
            )


# -- emitted code -------------------------------------------------------------------------
def test_float32_sass_has_128_bit_global_and_shared_accesses():
    ops = toolchain.opcodes(toolchain.kernel_sass(demos.gmem_smem_roundtrip("float32"), "sm_90a"))
    # Global loads are ld.global.cg (L2 only): SASS LDG.E.128.STRONG.GPU.
    assert ops["LDG.E.128.STRONG.GPU"] == 8
    assert ops["STS.128"] == 8 and ops["LDS.128"] == 8 and ops["STG.E.128"] == 8
    narrow = [k for k in ops if k.startswith(("LDG", "STG", "LDS", "STS")) and ".128" not in k]
    assert narrow == []


def test_swizzled_copy_stays_vectorized_in_cuda():
    src = toolchain.cuda_source(
        demos.gmem_smem_roundtrip("float16", (64, 64), "warpgroup", shared_layout=SWIZZLE_128B_F16)
    )
    kernel = src[src.rindex('extern "C" __global__') :]
    assert kernel.count("tirx_cuda_dispatch_ld_global_cg_128(") == 1
    assert kernel.count("((uint4*)B_ptr)[") == 1 and kernel.count("((uint4*)A_smem_ptr)[") == 2
    assert "make_uint4" not in kernel  # no scalarized gather
    ops = toolchain.opcodes(toolchain.sass(toolchain.nvrtc_compile(src)))
    assert ops["LDS.128"] == ops["STS.128"] == 4 and ops["LDG.E.128.STRONG.GPU"] == 4


def test_loop_is_serial_not_unrolled():
    func = demos.gmem_smem_roundtrip("float32")
    with tvm.target.Target({"kind": "cuda", "arch": "sm_90a"}):
        lowered = tcd.LowerTIRx()(tvm.IRModule({"main": func})).script()
    assert lowered.count("for rnd in range(8):") == 2
    assert "T.unroll" not in lowered


# -- GPU round trips ----------------------------------------------------------------------
GPU_CASES = [
    (dtype, scope, threads)
    for dtype in ("float32", "float16", "bfloat16", "uint8")
    for scope, threads in (("warp", 32), ("warpgroup", 128), ("cta", 128), ("cta", 256))
]


def _roundtrip(func, shape, dtype, rng, where, gpu, pipeline="tirx_cuda_dispatch"):
    a = runtime.random_array(shape, dtype, rng)
    b = runtime.poison_like(a)
    _, out = execute(func, [a, b], where, gpu, pipeline)
    return a, out


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("dtype, scope, threads", GPU_CASES)
def test_roundtrip(dtype, scope, threads, rng, where, gpu):
    ctas, tile = 6, (32, 64)
    func = demos.gmem_smem_roundtrip(dtype, tile, scope, ctas=ctas, cta_threads=threads)
    a, out = _roundtrip(func, (ctas * tile[0], tile[1]), dtype, rng, where, gpu)
    np.testing.assert_array_equal(runtime.bits(out), runtime.bits(a))


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize(
    "func, shape, dtype",
    [
        (per_warp_tiles("float16", warps=4, rows=8, cols=64, ctas=3), (96, 64), "float16"),
        (thread_rows("float32", threads=64, cols=8), (64, 8), "float32"),
        (thread_rows("uint8", threads=32, cols=24), (32, 24), "uint8"),
    ],
    ids=["per-warp-rows-f16", "thread-rows-f32", "thread-rows-u8"],
)
def test_roundtrip_warp_and_thread_regions(func, shape, dtype, rng, where, gpu):
    a, out = _roundtrip(func, shape, dtype, rng, where, gpu)
    np.testing.assert_array_equal(runtime.bits(out), runtime.bits(a))


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize(
    "case",
    [
        dict(
            dtype="float16",
            tile=(64, 64),
            scope="warpgroup",
            ctas=4,
            shared_layout=SWIZZLE_128B_F16,
        ),
        dict(dtype="float32", tile=(32, 16), scope="warp", ctas=4, shared_layout=SWIZZLE_64B_F32),
        dict(dtype="float32", tile=(16, 32), scope="warp", ctas=5, cols=96, col_offset=32),
        dict(dtype="bfloat16", tile=(16, 32), scope="warp", ctas=3, cols=80, col_offset=6),
        dict(dtype="uint8", tile=(32, 32), scope="warp", ctas=3, cols=64, col_offset=1),
        dict(
            dtype="float16",
            tile=(32, 32),
            scope="cta",
            cta_threads=128,
            ctas=2,
            cols=64,
            col_offset=1,
        ),
    ],
    ids=[
        "swizzle128B-f16",
        "swizzle64B-f32",
        "offset-cols",
        "misaligned-cols-bf16",
        "u8-bytewise",
        "f16-16bit",
    ],
)
def test_roundtrip_layouts_and_offsets(case, rng, where, gpu):
    tm, tn = case["tile"]
    cols, c0, ctas = case.get("cols", tn), case.get("col_offset", 0), case["ctas"]
    func = demos.gmem_smem_roundtrip(**case)
    a, out = _roundtrip(func, (ctas * tm, cols), case["dtype"], rng, where, gpu)
    expected = runtime.bits(runtime.poison_like(a)).copy()
    expected[:, c0 : c0 + tn] = runtime.bits(a)[:, c0 : c0 + tn]
    np.testing.assert_array_equal(runtime.bits(out), expected)


def test_large_tensor_does_not_overflow_the_index_arithmetic():
    # 2**27 float32 elements: a bytes-times-count product would overflow int32.
    func = demos.gmem_smem_roundtrip("float32", (32, 256), "cta", ctas=16384, cta_threads=256)
    ops = toolchain.opcodes(toolchain.kernel_sass(func))
    assert ops["STG.E.128"] == 8 and ops["STS.128"] == 8


@pytest.mark.parametrize(
    "dtype, col_offset, vec_bits, ldg",
    [
        ("uint8", 1, 8, "LDG.E.U8.STRONG.GPU"),
        ("uint8", 2, 16, "LDG.E.U16.STRONG.GPU"),
        ("float16", 1, 16, "LDG.E.U16.STRONG.GPU"),
        ("float32", 1, 32, "LDG.E.STRONG.GPU"),
        ("float32", 2, 64, "LDG.E.64.STRONG.GPU"),
    ],
)
def test_every_access_width_compiles_to_its_instruction(dtype, col_offset, vec_bits, ldg):
    func = demos.gmem_smem_roundtrip(dtype, (32, 32), "warp", cols=64, col_offset=col_offset)
    assert _plans(func)[0]["vec_bits"] == vec_bits
    ops = toolchain.opcodes(toolchain.kernel_sass(func))
    assert ops[ldg] > 0, ops


# -- cache hints ------------------------------------------------------------------------------
def hinted(load=None, store=None, dtype="float32", rows=32, cols=32, width=None, offset=0):
    """A warp copies A[:, offset:offset+cols] to shared with the config ``load`` and back to
    the same columns of B with ``store``; 2 CTAs, each its own rows."""
    width = width or cols
    load, store = load or {}, store or {}

    @T.prim_func
    def kernel(A_ptr: T.handle, B_ptr: T.handle):
        A = T.match_buffer(A_ptr, (2 * rows, width), dtype)
        B = T.match_buffer(B_ptr, (2 * rows, width), dtype)
        T.device_entry()
        bx = T.cta_id([2])
        T.warp_id([1])
        T.lane_id([32])
        T.thread_id([32])
        A_s = T.alloc_buffer(
            (rows, cols), dtype, scope="shared", layout=TileLayout(S[(rows, cols)])
        )
        Tx.warp.copy(A_s[:, :], A[bx * rows : bx * rows + rows, offset : offset + cols], **load)
        T.cuda.cta_sync()
        Tx.warp.copy(B[bx * rows : bx * rows + rows, offset : offset + cols], A_s[:, :], **store)

    return kernel


NC_NA_256 = dict(cache="nc", l1_evict="L1::no_allocate", prefetch_size="L2::256B")
LOAD_HINTS = [
    # config, the load's PTX up to {.vec}.type, its SASS opcode (128-bit)
    ({}, "ld.global.cg", "LDG.E.128.STRONG.GPU"),  # negative control: the default form
    (dict(cache="nc"), "ld.global.nc", "LDG.E.128.CONSTANT"),
    (dict(l1_evict="L1::evict_first"), "ld.global.L1::evict_first", "LDG.E.EF.128"),
    (dict(l1_evict="L1::evict_last"), "ld.global.L1::evict_last", "LDG.E.EL.128"),
    (dict(l1_evict="L1::evict_unchanged"), "ld.global.L1::evict_unchanged", "LDG.E.EU.128"),
    (dict(l1_evict="L1::no_allocate"), "ld.global.L1::no_allocate", "LDG.E.NA.128"),
    (dict(l1_evict="L1::evict_normal"), "ld.global.L1::evict_normal", "LDG.E.128"),
    (dict(prefetch_size="L2::64B"), "ld.global.L2::64B", "LDG.E.LTC64B.128"),
    (dict(prefetch_size="L2::128B"), "ld.global.L2::128B", "LDG.E.LTC128B.128"),
    (dict(prefetch_size="L2::256B"), "ld.global.L2::256B", "LDG.E.LTC256B.128"),
    (NC_NA_256, "ld.global.nc.L1::no_allocate.L2::256B", "LDG.E.NA.LTC256B.128.CONSTANT"),
    (dict(l2_evict="L2::evict_first"), "ld.global.L2::cache_hint", "LDG.E.128"),
    (dict(l2_evict="L2::evict_last"), "ld.global.L2::cache_hint", "LDG.E.128"),
]
STORE_HINTS = [
    ({}, "st.global", "STG.E.128"),  # negative control
    (dict(l1_evict="L1::evict_first"), "st.global.L1::evict_first", "STG.E.EF.128"),
    (dict(l1_evict="L1::no_allocate"), "st.global.L1::no_allocate", "STG.E.NA.128"),
    (dict(l1_evict="L1::evict_last"), "st.global.L1::evict_last", "STG.E.EL.128"),
    (dict(l2_evict="L2::evict_first"), "st.global.L2::cache_hint", "STG.E.128"),
]
# The L2 policy rides in the access's memory descriptor, not in its opcode: SASS builds
# the descriptor from the createpolicy word (measured with ptxas 13.5 for sm_90a).
POLICY_WORD = {"L2::evict_first": "0x120", "L2::evict_last": "0x140"}


def _ids(cases):
    return [",".join(f"{k}={v}" for k, v in c[0].items()) or "default" for c in cases]


@pytest.mark.parametrize("config, ptx, sass", LOAD_HINTS, ids=_ids(LOAD_HINTS))
def test_load_hints_are_in_the_plan(config, ptx, sass):
    plan = tcd.explain(hinted(load=config), "sm_90a")[0].plan_object
    assert plan.global_access.split(" ")[0] == ptx
    facts = plan.facts()
    if config:
        assert facts["global_access"] == plan.global_access
        assert all(f"{k}={v}" in facts["cache_hints"] for k, v in config.items())
    else:
        assert "cache_hints" not in facts and plan.hints.empty


def test_an_l2_eviction_priority_is_a_cache_policy():
    plan = tcd.explain(hinted(load=dict(l2_evict="L2::evict_last")), "sm_90a")[0].plan_object
    assert plan.global_access == (
        "ld.global.L2::cache_hint (policy: createpolicy.fractional.L2::evict_last.b64)"
    )


def _kernel_text(func):
    src = toolchain.cuda_source(func, "sm_90a", tcd.STRICT_PIPELINE)
    ptx = toolchain.nvrtc_ptx(src)
    sass = toolchain.sass(toolchain.nvrtc_compile(src))
    return ptx, sass


@pytest.mark.parametrize("config, ptx, sass", LOAD_HINTS, ids=_ids(LOAD_HINTS))
def test_load_hints_reach_ptx_and_sass(config, ptx, sass):
    ptx_text, sass_text = _kernel_text(hinted(load=config))
    assert f"{ptx}.v4.u32" in ptx_text
    ops = toolchain.opcodes(sass_text)
    loads = {k: v for k, v in ops.items() if k.startswith("LDG")}
    assert loads == {sass: 8}, loads  # 32x32 float32 by one warp: 8 rounds of 128 bits
    policy = config.get("l2_evict")
    if policy:
        assert f"createpolicy.fractional.{policy}.b64" in ptx_text
        assert re.search(rf"UMOV UR\d+, {POLICY_WORD[policy]} ", sass_text)
    else:
        assert "createpolicy" not in ptx_text
        assert not any(re.search(rf"UMOV UR\d+, {w} ", sass_text) for w in POLICY_WORD.values())


@pytest.mark.parametrize("config, ptx, sass", STORE_HINTS, ids=_ids(STORE_HINTS))
def test_store_hints_reach_ptx_and_sass(config, ptx, sass):
    ptx_text, sass_text = _kernel_text(hinted(store=config))
    assert f"{ptx}.v4.u32" in ptx_text
    stores = {k: v for k, v in toolchain.opcodes(sass_text).items() if k.startswith("STG")}
    assert stores == {sass: 8}, stores
    if "l2_evict" in config:
        assert re.search(rf"UMOV UR\d+, {POLICY_WORD[config['l2_evict']]} ", sass_text)


@pytest.mark.parametrize(
    "dtype, offset, vec_bits, ldg",
    [
        ("uint8", 1, 8, "LDG.E.U8.CONSTANT"),
        ("uint8", 2, 16, "LDG.E.U16.CONSTANT"),
        ("float32", 1, 32, "LDG.E.CONSTANT"),
        ("float32", 2, 64, "LDG.E.64.CONSTANT"),
    ],
)
def test_every_access_width_takes_the_hint(dtype, offset, vec_bits, ldg):
    func = hinted(
        load=dict(cache="nc"),
        store=dict(l1_evict="L1::evict_first"),
        dtype=dtype,
        width=64,
        offset=offset,
    )
    assert tcd.explain(func, "sm_90a")[0].plan["vec_bits"] == vec_bits
    ptx_text, sass_text = _kernel_text(func)
    ops = toolchain.opcodes(sass_text)
    assert ops[ldg] > 0 and not any(k.startswith("LDG") and k != ldg for k in ops), ops
    assert all(".EF" in k for k in ops if k.startswith("STG")), ops


HINT_ROUNDTRIPS = [
    dict(load=NC_NA_256, store=dict(l1_evict="L1::evict_first")),
    dict(load=dict(l2_evict="L2::evict_first"), store=dict(l2_evict="L2::evict_last")),
    dict(load=dict(cache="nc"), dtype="float16", rows=5, cols=6),  # masked: 4 + 2 pieces
    dict(load=dict(cache="nc", prefetch_size="L2::128B"), dtype="uint8", width=40, offset=3),
]


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("case", HINT_ROUNDTRIPS, ids=["nc-na-256", "l2", "masked", "bytes"])
def test_hinted_roundtrip(case, rng, where, gpu):
    rows, cols = case.get("rows", 32), case.get("cols", 32)
    width, offset = case.get("width", cols), case.get("offset", 0)
    a, out = _roundtrip(
        hinted(**case),
        (2 * rows, width),
        case.get("dtype", "float32"),
        rng,
        where,
        gpu,
        tcd.STRICT_PIPELINE,
    )
    expected = runtime.bits(runtime.poison_like(a)).copy()
    expected[:, offset : offset + cols] = runtime.bits(a)[:, offset : offset + cols]
    np.testing.assert_array_equal(runtime.bits(out), expected)


def test_a_hint_changes_no_access():
    """The simulator's counts (instructions, bytes, bank conflicts) of a hinted copy are
    those of the default one: a hint moves the same bits the same way."""
    from tirx_cuda_dispatch import sim

    a = np.arange(64 * 32, dtype=np.float32).reshape(64, 32)
    runs = [
        sim.run(hinted(**case), [a, runtime.poison_like(a)], "sm_90a", pipeline=tcd.STRICT_PIPELINE)
        for case in ({}, dict(load=NC_NA_256, store=dict(l2_evict="L2::evict_first")))
    ]
    assert runs[0].counters.as_dict() == runs[1].counters.as_dict()
    np.testing.assert_array_equal(runs[1].arrays[1], a)


ACCEPTED = (
    "accepted: cache in ['nc']; l1_evict in ['L1::evict_normal', 'L1::evict_unchanged', "
    "'L1::evict_first', 'L1::evict_last', 'L1::no_allocate']; l2_evict in "
    "['L2::evict_first', 'L2::evict_last', 'L2::evict_normal']; prefetch_size in "
    "['L2::64B', 'L2::128B', 'L2::256B']"
)


@pytest.mark.parametrize(
    "load, store, arch, reason",
    [
        (dict(cache="cg"), None, "sm_90a", "cache='cg' is not a hint PTX has; accepted: ['nc']"),
        (
            dict(l1_evict="evict_first"),
            None,
            "sm_90a",
            "l1_evict='evict_first' is not a hint PTX has; accepted: ['L1::evict_normal', "
            "'L1::evict_unchanged', 'L1::evict_first', 'L1::evict_last', 'L1::no_allocate']",
        ),
        (
            dict(evict="first"),
            None,
            "sm_90a",
            f"config key evict=first is not a cache hint; {ACCEPTED}",
        ),
        (
            None,
            dict(cache="nc"),
            "sm_90a",
            "cache=nc is a load hint (ld.global.nc: the data is read-only for the kernel "
            "(non-coherent path)) and this copy stores to global; a store takes l1_evict, l2_evict",
        ),
        (
            None,
            dict(prefetch_size="L2::256B"),
            "sm_90a",
            "prefetch_size=L2::256B is a load hint (the .level::prefetch_size qualifier of ld) "
            "and this copy stores to global; a store takes l1_evict, l2_evict",
        ),
        (
            dict(l2_evict="L2::evict_first"),
            None,
            "sm_75",
            "l2_evict=L2::evict_first needs sm_80 or newer (createpolicy.fractional.<priority>"
            ".b64 and .L2::cache_hint on ld / st (the ISA spells .level2::eviction_priority only "
            "on 256-bit accesses; ptxas refuses it on narrower ones)); target is sm_75",
        ),
    ],
    ids=["unknown-cache", "unknown-l1", "unknown-key", "nc-on-store", "prefetch-on-store", "sm75"],
)
def test_an_unknown_or_misplaced_hint_is_a_decline(load, store, arch, reason):
    reports = tcd.explain(hinted(load=load, store=store), arch)
    report = reports[0] if load else reports[1]
    [cand] = [c for c in report.candidates if c.variant == "gmem_smem"]
    assert report.variant != "gmem_smem" and cand.reason == reason
    other = reports[1] if load else reports[0]
    assert other.variant == "gmem_smem"  # negative control: the unhinted copy is ours
    with pytest.raises(tcd.DispatchError, match="not a|load hint|needs sm_80"):
        toolchain.cuda_source(hinted(load=load, store=store), arch, tcd.STRICT_PIPELINE)


def test_prefetch_64b_is_fine_on_sm75_where_256b_is_not():
    ok = tcd.explain(hinted(load=dict(prefetch_size="L2::128B")), "sm_75")[0]
    assert ok.variant == "gmem_smem"
    refused = tcd.explain(hinted(load=dict(prefetch_size="L2::256B")), "sm_75")[0]
    assert refused.variant != "gmem_smem"


# -- strided global parameters: the caller's memory ------------------------------------------
def strided_global(rows=4, cols=4, row_stride=16, dtype="float32", scope="warp"):
    """A is a (rows, cols) parameter whose rows are ``row_stride`` apart (rows of a wider
    tensor the caller owns): copied to shared and back to a compact B."""
    a_layout = TileLayout(S[(rows, cols) : (row_stride, 1)])
    copy = getattr(Tx, scope).copy
    warps = 4 if scope == "warpgroup" else 1

    # fmt: off
    @T.prim_func
    def kernel(A_ptr: T.handle, B_ptr: T.handle):
        A = T.match_buffer(A_ptr, (rows, cols), dtype, layout=a_layout)
        B = T.match_buffer(B_ptr, (rows, cols), dtype)
        T.device_entry()
        T.cta_id([1])
        if warps == 4:
            T.warpgroup_id([1])
            T.warp_id_in_wg([4])
        T.warp_id([warps])
        T.lane_id([32])
        T.thread_id([32 * warps])
        A_s = T.alloc_buffer((rows, cols), dtype, scope="shared", layout=TileLayout(S[(rows, cols)]))
        copy(A_s[:, :], A[:, :])
        T.cuda.cta_sync()
        copy(B[:, :], A_s[:, :])
    # fmt: on
    return kernel


STRIDED = [
    # rows, cols, row stride, dtype, scope, the load's pieces
    (4, 4, 16, "float32", "warp", ["128-bit x 4: 0 full rounds + 1 round of 4 of 32 threads"]),
    (8, 24, 40, "float16", "warp", ["128-bit x 24: 0 full rounds + 1 round of 24 of 32 threads"]),
    (3, 5, 7, "uint8", "warpgroup", ["8-bit x 15: 0 full rounds + 1 round of 15 of 128 threads"]),
]


@pytest.mark.parametrize("rows, cols, stride, dtype, scope, pieces", STRIDED)
def test_a_strided_global_parameter_is_planned(rows, cols, stride, dtype, scope, pieces):
    from tirx_cuda_dispatch.call import Operand
    from tirx_cuda_dispatch.layout.atoms import memory_view

    func = strided_global(rows, cols, stride, dtype, scope)
    load, store = tcd.explain(func, "sm_90a")
    assert load.variant == store.variant == "gmem_smem" and load.plan["pieces"] == pieces
    a = tcd.bounds.scan(func)[0].node.args[1].source  # the parameter A, as the call sees it
    view = memory_view(Operand("src", a, ((0, rows), (0, cols))))
    assert view.atoms == ((rows, stride), (cols, 1))  # spans past rows * cols: the caller's


def test_the_same_padding_on_a_shared_operand_still_declines():
    """Negative control: TVM allocates a shared buffer by its shape, so there the span
    check stays (``bounds`` reports it before dispatch; the view declines too)."""
    from tirx_cuda_dispatch.call import Operand
    from tirx_cuda_dispatch.errors import Decline
    from tirx_cuda_dispatch.layout.atoms import memory_view

    layout = TileLayout(S[(4, 4) : (16, 1)])
    for scope in ("shared", "local"):
        buf = tvm.tirx.decl_buffer((4, 4), "float32", name="P", scope=scope, layout=layout)
        with pytest.raises(
            Decline, match=rf"spans 52 elements but the buffer holds 16 .*a {scope} buffer"
        ):
            memory_view(Operand("src", buf, ((0, 4), (0, 4))))
    buf = tvm.tirx.decl_buffer((4, 4), "float32", name="P", scope="global", layout=layout)
    assert memory_view(Operand("src", buf, ((0, 4), (0, 4)))).atoms == ((4, 16), (4, 1))


def _strided_span(rows, cols, stride):
    return (rows - 1) * stride + cols


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("pipeline", [tcd.STRICT_PIPELINE, "tirx"])
@pytest.mark.parametrize("rows, cols, stride, dtype, scope, pieces", STRIDED)
def test_strided_global_roundtrip(
    rows, cols, stride, dtype, scope, pieces, pipeline, rng, where, gpu
):
    """The caller passes the whole strided span (exactly: the last row ends the memory);
    the padding between rows is not the kernel's and stays as it was."""
    func = strided_global(rows, cols, stride, dtype, scope)
    a = runtime.random_array((_strided_span(rows, cols, stride),), dtype, rng)
    b = runtime.poison_like(np.zeros((rows, cols), a.dtype))
    if where == "sim":
        a_out, b_out = execute(func, [a, b], "sim", gpu, pipeline)
    else:
        a_out, b_out = _run_with_caller_memory(func, a, b, (rows, cols), gpu, pipeline)
    index = (np.arange(rows)[:, None] * stride + np.arange(cols)).reshape(rows, cols)
    np.testing.assert_array_equal(runtime.bits(b_out), runtime.bits(a[index]))
    np.testing.assert_array_equal(runtime.bits(a_out), runtime.bits(a))


def _run_with_caller_memory(func, a, b, shape, gpu, pipeline):
    """On the GPU: A is a ``shape`` view (what TVM's argument check sees) of the caller's
    whole allocation."""
    import tvm.runtime

    ex = runtime.build(func, gpu, pipeline)
    dev = tvm.cuda(0)
    whole, b_dev = tvm.runtime.tensor(a, device=dev), tvm.runtime.tensor(b, device=dev)
    ex[runtime.entry_name(func)](whole._create_view(shape), b_dev)
    dev.sync()
    return whole.numpy(), b_dev.numpy()


# -- global -> global and shared -> shared ---------------------------------------------------
SAME_MEMORY = [
    # path, dtype, tile, scope, threads, first shared layout, second shared layout
    ("global", "float32", (32, 64), "warp", 32, None, None),
    ("global", "float16", (48, 40), "cta", 256, None, None),  # odd: masked round
    ("global", "bfloat16", (5, 70), "warpgroup", 128, None, None),  # misaligned: 32-bit
    ("global", "int8", (16, 128), "cta", 128, None, None),
    ("shared_shared", "float32", (32, 64), "warp", 32, None, None),
    ("shared_shared", "float16", (64, 64), "warpgroup", 128, None, SWIZZLE_128B_F16),
    ("shared_shared", "float16", (64, 64), "warpgroup", 128, SWIZZLE_128B_F16, None),
    ("shared_shared", "float32", (32, 16), "warp", 32, SWIZZLE_64B_F32, SWIZZLE_64B_F32),
    ("shared_shared", "float32", (30, 100), "cta", 128, None, None),
    ("shared_shared", "uint8", (4, 6), "warp", 32, None, None),
]


def _same_memory(path, dtype, tile, scope, threads, first=None, second=None, ctas=2):
    return demos.gmem_smem_roundtrip(
        dtype,
        tile,
        scope,
        ctas=ctas,
        cta_threads=threads,
        path=path,
        shared_layout=first,
        second_layout=second,
    )


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("case", SAME_MEMORY, ids=lambda c: f"{c[0]}-{c[1]}-{c[2][0]}x{c[2][1]}")
def test_global_to_global_and_shared_to_shared_roundtrip(case, rng, where, gpu):
    path, dtype, tile, scope, threads, first, second = case
    func = _same_memory(*case)
    reports = tcd.explain(func)
    want = {
        "global": ["global->global"],
        "shared_shared": ["global->shared", "shared->shared", "shared->global"],
    }[path]
    assert [r.plan["direction"] for r in reports] == want
    if path == "shared_shared":  # the swizzles of both shared sides are in the plan
        s2s = reports[1].plan
        assert ("src_swizzle" in s2s, "dst_swizzle" in s2s) == (
            first is not None,
            second is not None,
        )
    shape = (2 * tile[0], tile[1])
    a, out = _roundtrip(func, shape, dtype, rng, where, gpu, tcd.STRICT_PIPELINE)
    np.testing.assert_array_equal(runtime.bits(out), runtime.bits(a))


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("path", ["shared", "global", "shared_shared"])
@pytest.mark.parametrize("scope", ["thread", "warp", "warpgroup"])
def test_a_single_element_is_copied(scope, path, rng, where, gpu):
    """Regression: one element left the masked partition with no dimension (IndexError)."""
    func = demos.gmem_smem_roundtrip("float32", (1, 1), scope, ctas=3, path=path)
    assert {r.variant for r in tcd.explain(func)} == {"gmem_smem"}
    a, out = _roundtrip(func, (3, 1), "float32", rng, where, gpu, tcd.STRICT_PIPELINE)
    np.testing.assert_array_equal(out, a)


def test_global_to_global_sass_loads_l2_only_and_stores_128_bits():
    ops = toolchain.opcodes(
        toolchain.kernel_sass(_same_memory("global", "float32", (32, 64), "warp", 32))
    )
    assert ops["LDG.E.128.STRONG.GPU"] == 16 and ops["STG.E.128"] == 16
    assert not [k for k in ops if k.startswith(("LDS", "STS", "LDL", "STL"))], ops


def test_shared_to_shared_sass_is_128_bit_through_a_swizzle():
    func = _same_memory(
        "shared_shared", "float16", (64, 64), "warpgroup", 128, None, SWIZZLE_128B_F16
    )
    [_, s2s, _] = _plans(func)
    assert s2s["direction"] == "shared->shared" and s2s["vec_bits"] == 128
    assert "dst_swizzle" in s2s and "src_swizzle" not in s2s
    ops = toolchain.opcodes(toolchain.kernel_sass(func))
    # 4 rounds in each of the three copies: g->s stores 4, s->s loads and stores 4, s->g loads 4
    assert ops["LDS.128"] == 8 and ops["STS.128"] == 8, ops


def one_buffer(src_rows, dst_rows, memory="shared", dtype="float32", rows=64, cols=32):
    """A warp copies rows ``src_rows`` of one buffer to rows ``dst_rows`` of the same buffer
    (a shared tile loaded from A and stored to B, or A itself in global memory)."""
    (s0, s1), (d0, d1) = src_rows, dst_rows

    @T.prim_func
    def kernel(A_ptr: T.handle, B_ptr: T.handle):
        A = T.match_buffer(A_ptr, (rows, cols), dtype)
        B = T.match_buffer(B_ptr, (rows, cols), dtype)
        T.device_entry()
        T.cta_id([1])
        T.warp_id([1])
        T.lane_id([32])
        T.thread_id([32])
        if memory == "shared":
            A_s = T.alloc_buffer(
                (rows, cols), dtype, scope="shared", layout=TileLayout(S[(rows, cols)])
            )
            Tx.warp.copy(A_s[:, :], A[:, :])
            T.cuda.cta_sync()
            Tx.warp.copy(A_s[d0:d1, :], A_s[s0:s1, :])
            T.cuda.cta_sync()
            Tx.warp.copy(B[:, :], A_s[:, :])
        else:
            Tx.warp.copy(A[d0:d1, :], A[s0:s1, :])

    return kernel


@pytest.mark.parametrize("memory", ["shared", "global"])
def test_overlapping_regions_of_one_buffer_decline(memory):
    reports = tcd.explain(one_buffer((0, 32), (16, 48), memory))
    report = reports[1] if memory == "shared" else reports[0]
    [reason] = [c.reason for c in report.candidates if c.variant == "gmem_smem"]
    name = "A_s" if memory == "shared" else "A"
    assert reason == (
        f"src {name}[0:32, 0:32] ({memory} float32) and dst {name}[16:48, 0:32] ({memory} "
        f"float32) share 512 elements of {name}: threads copying in parallel would read "
        "elements others already wrote; copy through a second buffer"
    )


@pytest.mark.parametrize("where", WHERE)
def test_disjoint_regions_of_one_buffer_are_copied(rng, where, gpu):
    func = one_buffer((0, 32), (32, 64), "shared")
    assert [r.variant for r in tcd.explain(func)] == ["gmem_smem"] * 3
    a = runtime.random_array((64, 32), "float32", rng)
    _, out = execute(func, [a, runtime.poison_like(a)], where, gpu, tcd.STRICT_PIPELINE)
    expected = a.copy()
    expected[32:64] = a[0:32]
    np.testing.assert_array_equal(out, expected)


def shifted_in_place(shift):
    """Each of 2 CTAs copies rows [bx*64, bx*64 + 32) of A to rows ``shift`` further on,
    in A itself (``shift`` an int, or "by": the other CTA index's multiple of 32; only then
    is there a second grid dimension, whose CTAs would all write the same rows)."""
    rows_of_ctas = 2 if shift == "by" else 1

    @T.prim_func
    def kernel(A_ptr: T.handle):
        A = T.match_buffer(A_ptr, (128, 32), "float32")
        T.device_entry()
        bx, by = T.cta_id([2, rows_of_ctas])
        T.warp_id([1])
        T.lane_id([32])
        T.thread_id([32])
        if shift == "by":
            Tx.warp.copy(A[by * 32 : by * 32 + 32, :], A[bx * 64 : bx * 64 + 32, :])
        else:
            Tx.warp.copy(A[bx * 64 + shift : bx * 64 + shift + 32, :], A[bx * 64 : bx * 64 + 32, :])

    return kernel


@pytest.mark.parametrize("where", WHERE)
def test_one_buffer_at_symbolic_offsets_a_constant_apart(rng, where, gpu):
    func = shifted_in_place(32)
    assert tcd.explain(func)[0].variant == "gmem_smem"
    a = runtime.random_array((128, 32), "float32", rng)
    [out] = execute(func, [a], where, gpu, tcd.STRICT_PIPELINE)
    expected = a.copy()
    expected[32:64], expected[96:128] = a[0:32], a[64:96]
    np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize(
    "shift, reason",
    [
        (16, "share 512 elements of A"),
        ("by", "whose offsets differ by an amount not known at compile time"),
    ],
)
def test_one_buffer_overlapping_or_unknown_apart_declines(shift, reason):
    [report] = tcd.explain(shifted_in_place(shift))
    [why] = [c.reason for c in report.candidates if c.variant == "gmem_smem"]
    assert reason in why and why.endswith("copy through a second buffer")


def test_hints_on_shared_to_shared_decline_and_on_global_to_global_are_the_loads():
    @T.prim_func
    def kernel(A_ptr: T.handle, B_ptr: T.handle):
        A = T.match_buffer(A_ptr, (32, 32), "float32")
        B = T.match_buffer(B_ptr, (32, 32), "float32")
        T.device_entry()
        T.cta_id([1])
        T.warp_id([1])
        T.lane_id([32])
        T.thread_id([32])
        S1 = T.alloc_buffer((32, 32), "float32", scope="shared", layout=TileLayout(S[(32, 32)]))
        S2 = T.alloc_buffer((32, 32), "float32", scope="shared", layout=TileLayout(S[(32, 32)]))
        Tx.warp.copy(B[:, :], A[:, :], cache="nc")
        Tx.warp.copy(S2[:, :], S1[:, :], cache="nc")

    g2g, s2s = tcd.explain(kernel)
    assert g2g.variant == "gmem_smem" and g2g.plan["global_access"] == "ld.global.nc"
    [reason] = [c.reason for c in s2s.candidates if c.variant == "gmem_smem"]
    assert reason == (
        "config cache on a copy from shared S1 to shared S2: cache hints name global accesses "
        "and this copy has none; drop them"
    )


def global_to_global(**config):
    @T.prim_func
    def kernel(A_ptr: T.handle, B_ptr: T.handle):
        A = T.match_buffer(A_ptr, (64, 32), "float32")
        B = T.match_buffer(B_ptr, (64, 32), "float32")
        T.device_entry()
        bx = T.cta_id([2])
        T.warp_id([1])
        T.lane_id([32])
        T.thread_id([32])
        Tx.warp.copy(B[bx * 32 : bx * 32 + 32, :], A[bx * 32 : bx * 32 + 32, :], **config)

    return kernel


@pytest.mark.parametrize(
    "config, ldg", [({}, "LDG.E.128.STRONG.GPU"), (NC_NA_256, "LDG.E.NA.LTC256B.128.CONSTANT")]
)
def test_global_to_global_hints_are_the_loads_in_sass(config, ldg):
    ops = toolchain.opcodes(toolchain.kernel_sass(global_to_global(**config)))
    assert ops[ldg] == 8 and ops["STG.E.128"] == 8, ops  # the store is plain either way


@pytest.mark.parametrize("where", WHERE)
def test_hinted_global_to_global_roundtrip(rng, where, gpu):
    func = global_to_global(**NC_NA_256)
    a, out = _roundtrip(func, (64, 32), "float32", rng, where, gpu, tcd.STRICT_PIPELINE)
    np.testing.assert_array_equal(out, a)


def pooled(rebase_bytes, swizzle=None):
    """Two SMEMPool buffers, Y placed ``rebase_bytes`` into the pool where X starts; a warp
    copies A -> X, X[0:32] -> Y[0:32], X -> B (Y lies in X where rebase_bytes < 8 KiB)."""

    @T.prim_func
    def kernel(A_ptr: T.handle, B_ptr: T.handle):
        A = T.match_buffer(A_ptr, (64, 32), "float32")
        B = T.match_buffer(B_ptr, (64, 32), "float32")
        T.device_entry()
        T.cta_id([1])
        T.warp_id([1])
        T.lane_id([32])
        T.thread_id([32])
        pool = T.SMEMPool()
        X = pool.alloc((64, 32), "float32", layout=TileLayout(S[(64, 32)]))
        pool.move_base_to(rebase_bytes)
        Y = pool.alloc((64, 32), "float32", layout=TileLayout(S[(64, 32)]))
        pool.commit()
        Tx.warp.copy(X[:, :], A[:, :])
        T.cuda.cta_sync()
        Tx.warp.copy(Y[0:32, :], X[0:32, :])
        T.cuda.cta_sync()
        Tx.warp.copy(B[:, :], X[:, :])

    return kernel


def test_pool_buffers_that_overlap_decline():
    report = tcd.explain(pooled(2048))[1]
    [reason] = [c.reason for c in report.candidates if c.variant == "gmem_smem"]
    assert reason.startswith("src X[0:32, 0:32] (shared.dyn float32) and dst Y[0:32, 0:32]")
    assert "share 512 elements of pool_buf (the buffer both lie in)" in reason


@pytest.mark.parametrize("where", WHERE)
def test_pool_buffers_apart_are_copied(rng, where, gpu):
    func = pooled(4096)  # Y's first 32 rows are X's last 32: disjoint from X[0:32]
    assert [r.variant for r in tcd.explain(func)] == ["gmem_smem"] * 3
    a, out = _roundtrip(func, (64, 32), "float32", rng, where, gpu, tcd.STRICT_PIPELINE)
    np.testing.assert_array_equal(out, np.concatenate([a[0:32], a[0:32]]))


def test_a_buffer_declared_over_a_parameter_is_that_parameter():
    @T.prim_func
    def kernel(A_ptr: T.handle):
        A = T.match_buffer(A_ptr, (64, 32), "float32")
        T.device_entry()
        T.cta_id([1])
        T.warp_id([1])
        T.lane_id([32])
        T.thread_id([32])
        A2 = T.decl_buffer((64, 32), "float32", data=A.data, layout=TileLayout(S[(64, 32)]))
        Tx.warp.copy(A2[16:48, :], A[0:32, :])

    [reason] = [c.reason for c in tcd.explain(kernel)[0].candidates if c.variant == "gmem_smem"]
    assert "share 512 elements of A (the buffer both lie in)" in reason


@pytest.mark.parametrize("where", WHERE)
def test_swizzled_regions_at_a_loop_offset_are_decided(rng, where, gpu):
    """Rows i*32 .. +16 to i*32+16 .. +16 of a 128-byte-swizzled tile: the loop's offset is
    a multiple of the swizzle's period, so the regions are provably disjoint."""

    @T.prim_func
    def kernel(A_ptr: T.handle, B_ptr: T.handle):
        A = T.match_buffer(A_ptr, (64, 64), "float16")
        B = T.match_buffer(B_ptr, (64, 64), "float16")
        T.device_entry()
        T.cta_id([1])
        T.warp_id([1])
        T.lane_id([32])
        T.thread_id([32])
        X = T.alloc_buffer((64, 64), "float16", scope="shared", layout=SWIZZLE_128B_F16)
        Tx.warp.copy(X[:, :], A[:, :])
        T.cuda.cta_sync()
        for i in T.serial(2):
            Tx.warp.copy(X[i * 32 + 16 : i * 32 + 32, :], X[i * 32 : i * 32 + 16, :])
        T.cuda.cta_sync()
        Tx.warp.copy(B[:, :], X[:, :])

    assert [r.variant for r in tcd.explain(kernel)] == ["gmem_smem"] * 3
    a, out = _roundtrip(kernel, (64, 64), "float16", rng, where, gpu, tcd.STRICT_PIPELINE)
    expected = a.copy()
    expected[16:32], expected[48:64] = a[0:16], a[32:48]
    np.testing.assert_array_equal(runtime.bits(out), runtime.bits(expected))
