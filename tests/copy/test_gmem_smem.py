"""copy -> gmem_smem (seed 004): plans, declines, exact element mapping, SASS, GPU round trips."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import tvm
from tvm import sym
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
        "src A is global and dst R is local; needs global->shared, shared->global"
    )
    assert tcd.explain(warp_g2local())[0].variant == "reg"  # the register variant takes it


def test_declines_dtype_mismatch():
    assert _reason(warp_g2s(32, 32, "float32", "float16")) == (
        "dtype mismatch: dst A_s is float16, src A is float32"
    )


def test_declines_scope_narrowed_by_if():
    assert _reason(warp_g2s(32, 32, narrow=True)).startswith(
        "scope warp is narrowed: laneid runs over [0, 16) of [0, 32)"
    )


def test_declines_tensors_beyond_32_bit_offsets():
    func = demos.gmem_smem_roundtrip("float32", (32, 4096), "cta", ctas=2**16, cta_threads=256)
    [reason] = [c.reason for c in tcd.explain(func)[0].candidates if c.variant == "gmem_smem"]
    assert reason == "A holds 8589934592 elements; offsets must stay below 2**31"


def test_strict_mode_error_names_rule_and_line():
    target = tvm.target.Target({"kind": "cuda", "arch": "sm_90a"})
    with pytest.raises(tcd.DispatchError) as err:
        tvm.compile(warp_g2s(32, 32, narrow=True), target=target, tir_pipeline=tcd.STRICT_PIPELINE)
    msg = str(err.value)
    assert "kernels.py:" in msg and "gmem_smem" in msg and "narrowed" in msg


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
