"""elementwise -> smem: elementwise ops over shared-memory tiles (plans, declines, code,
round trips against numpy and against TVM's built-in lowering)."""

from __future__ import annotations

import numpy as np
import pytest
from tvm.backend.cuda.tile_primitive.tma_utils import SwizzleMode, mma_shared_layout

import tirx_cuda_dispatch as tcd
from executors import WHERE, execute
from tirx_cuda_dispatch import demos, runtime, sim, toolchain
from tirx_cuda_dispatch.elementwise.ops import OPS

UNARY = sorted(op for op in OPS if OPS[op].family == "unary")
BINARY = sorted(op for op in OPS if OPS[op].family == "binary")
DTYPES = ["float32", "float16", "bfloat16"]
EXACT = {"add", "sub", "mul", "maximum", "fdiv", "sqrt", "reciprocal"}
RTOL = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 1.6e-2}
NUMPY = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "maximum": np.maximum,
    "fdiv": np.divide,
    "sqrt": np.sqrt,
    "exp": np.exp,
    "exp2": np.exp2,
    "log2": np.log2,
    "reciprocal": lambda x: 1.0 / x,
    "silu": lambda x: x / (1.0 + np.exp(-x)),
}


def _report(func, op, arch="sm_90a"):
    [report] = [r for r in tcd.explain(func, arch) if r.op == op]
    return report


def _inputs(op, shape, dtype, rng, c_shape=None):
    a = runtime.random_array(shape, dtype, rng)
    if op in ("sqrt", "log2"):
        a = (np.abs(a.astype(np.float32)) + 0.25).astype(a.dtype)
    c = runtime.random_array(c_shape or shape, dtype, rng)
    return a, c


def _expected(op, a, c):
    x, y = a.astype(np.float64), c.astype(np.float64)
    out = NUMPY[op](x, y) if op in BINARY else NUMPY[op](x)
    return out.astype(a.dtype)


def _check(op, out, want, dtype):
    if op in EXACT:
        np.testing.assert_array_equal(runtime.bits(out), runtime.bits(want))
    else:  # transcendental ops approximate on the GPU
        np.testing.assert_allclose(
            out.astype(np.float64), want.astype(np.float64), rtol=RTOL[dtype], atol=RTOL[dtype]
        )


# -- plans and declines -------------------------------------------------------------------------
def test_half_add_takes_128_bit_vectors_and_pairs():
    plan = _report(demos.smem_elementwise_roundtrip("add", (32, 8), "float16"), "add").plan
    assert plan["vec"] == 8 and plan["vec_bits"] == [128, 128, 128]
    assert plan["packed"] == "add_f16x2" and plan["outer"] == 1


def test_odd_tiles_are_masked_with_narrower_tails():
    func = demos.smem_elementwise_roundtrip("mul", (5, 6), "bfloat16", "warpgroup")
    plan = _report(func, "mul").plan
    assert plan["pieces"] == [
        "128-bit x 3: 0 full rounds + 1 round of 3 of 128 threads",
        "64-bit x 1: 0 full rounds + 1 round of 1 of 128 threads",
        "32-bit x 1: 0 full rounds + 1 round of 1 of 128 threads",
    ]


def test_a_broadcast_row_is_read_through_its_own_layout():
    func = demos.smem_elementwise_roundtrip("add", (32, 8), "float32", c_shape=(1, 8))
    report = _report(func, "add")
    assert report.variant == "smem"


def test_declines_a_register_operand_and_names_it():
    from tvm.tirx.layout import Axis, S, TileLayout

    func = demos.elementwise_roundtrip(
        "add", TileLayout(S[(32, 8) : (1 @ Axis.laneid, 1)]), (32, 8), "float32"
    )
    report = [r for r in tcd.explain(func) if r.op == "add"][0]
    reasons = {c.variant: c.reason for c in report.candidates}
    assert report.variant == "reg"
    assert reasons["smem"] == "dst RB is local; every operand must be shared"


# -- emitted code ------------------------------------------------------------------------------
def test_half_add_sass_is_vector_shared_accesses_and_pair_adds():
    func = demos.smem_elementwise_roundtrip("add", (32, 8), "float16")
    ops = toolchain.opcodes(toolchain.kernel_sass(func, "sm_90a", tcd.STRICT_PIPELINE))
    assert ops["LDS.128"] == 3 and ops["STS.128"] == 4  # 2 inputs + the copy back; 3 + 1 stores
    assert ops["HADD2"] + ops["HFMA2.MMA"] == 4  # 8 halves a thread: 4 pair adds
    assert not [k for k in ops if k.startswith(("LDL", "STL"))]


def test_swizzled_tiles_stay_vectorized():
    layout = mma_shared_layout("float16", SwizzleMode.SWIZZLE_64B_ATOM, (32, 32))
    func = demos.smem_elementwise_roundtrip("add", (32, 32), "float16", shared_layout=layout)
    plan = _report(func, "add").plan
    assert plan["vec"] == 8  # one 16-byte swizzle unit
    ops = toolchain.opcodes(toolchain.kernel_sass(func, "sm_90a", tcd.STRICT_PIPELINE))
    assert ops["LDS.128"] >= 2 and not [k for k in ops if k.startswith(("LDS.U", "LDS.64"))]


# -- round trips -----------------------------------------------------------------------------------
@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("op", UNARY + BINARY)
@pytest.mark.parametrize("dtype", DTYPES)
def test_every_op_matches_numpy(op, dtype, rng, where, gpu):
    func = demos.smem_elementwise_roundtrip(op, (32, 8), dtype)
    a, c = _inputs(op, (32, 8), dtype, rng)
    out = execute(func, [a, c, runtime.poison_like(a)], where, gpu, tcd.STRICT_PIPELINE)[2]
    _check(op, out, _expected(op, a, c), dtype)


SHAPES = [
    ("add", (5, 6), "bfloat16", "warpgroup", None, None),
    ("maximum", (48, 40), "float16", "cta", 256, None),
    ("mul", (16, 64), "float32", "cta", 128, None),
    ("sub", (32, 8), "float32", "warp", None, (1, 8)),
    ("add", (32, 8), "float16", "warp", None, (32, 1)),
    ("sqrt", (3, 70), "float16", "warp", None, None),
]


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("op, shape, dtype, scope, threads, c_shape", SHAPES)
def test_scopes_odd_tiles_and_broadcasts(
    op, shape, dtype, scope, threads, c_shape, rng, where, gpu
):
    func = demos.smem_elementwise_roundtrip(op, shape, dtype, scope, threads, c_shape=c_shape)
    a, c = _inputs(op, shape, dtype, rng, c_shape)
    out = execute(func, [a, c, runtime.poison_like(a)], where, gpu, tcd.STRICT_PIPELINE)[2]
    _check(op, out, _expected(op, a, c), dtype)


@pytest.mark.parametrize("op", ["add", "sub", "mul", "maximum", "sqrt", "reciprocal"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_equals_tvms_builtin_bit_for_bit(op, dtype, rng):
    """Differential: the same program lowered by TVM's built-in variant ('smem'), both
    simulated."""
    func = demos.smem_elementwise_roundtrip(op, (16, 32), dtype, "warpgroup")
    a, c = _inputs(op, (16, 32), dtype, rng)
    args = [a, c, runtime.poison_like(a)]
    ours = sim.run(func, args, pipeline=tcd.STRICT_PIPELINE)[2]
    theirs = sim.run(func, args, pipeline="tirx")[2]
    np.testing.assert_array_equal(runtime.bits(ours), runtime.bits(theirs))


# -- mixed dtypes: float32 inputs, a 16-bit dst (TVM's shared-memory unary tests) ----------
MIXED = [
    # op, src dtype, dst dtype, scope, CTA threads, bias tile
    ("sqrt", "float32", "float16", "cta", 128, False),
    ("sqrt", "float32", "bfloat16", "cta", 64, True),
    ("exp", "float32", "float16", "warpgroup", None, True),
    ("add", "float32", "bfloat16", "warp", None, False),
    ("mul", "float16", "float32", "cta", 256, False),
]


def _mixed_kernel(op, src, dst, scope, threads, bias):
    return demos.smem_elementwise_roundtrip(
        op, (32, 32), dst, scope, threads, src_dtype=src, bias_region=bias
    )


def _mixed_expected(op, a, c, dst, bias):
    """Inputs widened exactly to float32, the op correctly rounded there (numpy in
    float32), the result rounded once to nearest even into dst."""
    x, y = a.astype(np.float32), c.astype(np.float32)
    if bias:
        x = x + y
    out = NUMPY[op](x, y) if op in BINARY else NUMPY[op](x)
    return np.asarray(out, dtype=np.float32).astype(_np_dtype(dst))


def _np_dtype(dtype):
    if dtype == "bfloat16":
        import ml_dtypes

        return ml_dtypes.bfloat16
    return np.dtype(dtype)


@pytest.mark.parametrize("op, src, dst, scope, threads, bias", MIXED)
def test_mixed_dtypes_compute_in_float32_and_round_once(op, src, dst, scope, threads, bias):
    report = _report(_mixed_kernel(op, src, dst, scope, threads, bias), op)
    assert report.variant == "smem"
    assert report.plan["dtypes"] == f"{src} -> float32 -> {dst}"
    assert report.plan["packed"] is None  # pairs compute in one dtype; these widen first


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("op, src, dst, scope, threads, bias", MIXED)
def test_mixed_dtypes_match_numpy(op, src, dst, scope, threads, bias, rng, where, gpu):
    func = _mixed_kernel(op, src, dst, scope, threads, bias)
    a, c = _inputs(op, (32, 32), src, rng)
    if bias:  # sqrt(x + bias) needs x + bias > 0
        c = np.abs(c)
    poison = runtime.poison_like(runtime.random_array((32, 32), dst, rng))
    out = execute(func, [a, c, poison], where, gpu, tcd.STRICT_PIPELINE)[2]
    want = _mixed_expected(op, a, c, dst, bias)
    if op == "exp":  # approximate on the GPU: within the 16-bit dst's rounding
        _check(op, out, want, dst)
    else:
        np.testing.assert_array_equal(runtime.bits(out), runtime.bits(want))


@pytest.mark.parametrize("op, src, dst, scope, threads, bias", MIXED[:2] + MIXED[3:4])
def test_mixed_dtypes_equal_tvms_builtin(op, src, dst, scope, threads, bias, rng):
    """TVM's built-in computes float32 inputs in float32 and casts: the same bits."""
    func = _mixed_kernel(op, src, dst, scope, threads, bias)
    a, c = _inputs(op, (32, 32), src, rng)
    c = np.abs(c)
    args = [a, c, runtime.poison_like(runtime.random_array((32, 32), dst, rng))]
    ours = sim.run(func, args, pipeline=tcd.STRICT_PIPELINE)[2]
    theirs = sim.run(func, args, pipeline="tirx")[2]
    np.testing.assert_array_equal(runtime.bits(ours), runtime.bits(theirs))


def test_mixed_dtype_declines_name_the_rule():
    func = demos.smem_elementwise_roundtrip("sqrt", (32, 32), "float16", src_dtype="int32")
    [reason] = [c.reason for c in _report(func, "sqrt").candidates if c.variant == "smem"]
    assert reason.startswith("sqrt src is int32 but dst is float16; mixed dtypes need float16,")
