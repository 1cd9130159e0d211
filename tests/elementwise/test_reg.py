"""elementwise -> reg (seed 001): plans, dtype rules, packed forms, declines, GPU vs numpy."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm.script import tirx as T
from tvm.tirx.layout import Axis, R, S, TileLayout

import tirx_cuda_dispatch as tcd
from executors import WHERE, execute
from tirx_cuda_dispatch import demos, runtime, toolchain
from tirx_cuda_dispatch.elementwise.ops import OPS

lane = Axis.laneid
ROWS = TileLayout(S[(32, 8) : (1 @ lane, 1)])  # the seed's layout: lane i owns row i
SHAPE = (32, 8)
ROW_BROADCAST = TileLayout(S[(1, 8)] + R[32 : 1 @ lane])  # every lane holds the (1, 8) row
COL_BROADCAST = TileLayout(S[(32, 1) : (1 @ lane, 1)])  # lane i holds element i of a column


def _kernel(op, dtype="float32", layout=ROWS, shape=SHAPE, scope="warp", **kw):
    if op == "fill":
        kw.setdefault("scalar", T.float16(1.5) if dtype == "float16" else T.float32(1.5))
    if op == "cast":
        kw.setdefault("src_dtype", "float32")
    return demos.elementwise_roundtrip(op, layout, shape, dtype, scope, **kw)


def _report(func, op, arch="sm_90a"):
    [report] = [r for r in tcd.explain(func, arch) if r.op == op]
    return report


def test_every_cuda_elementwise_op_of_tvm_is_registered():
    from tvm.backend.cuda.tile_primitive.elementwise.ops import ALL_OPS  # the op list only

    ours = {row["op"] for row in tcd.list_variants() if row["variant"] == "reg"}
    assert set(ALL_OPS) <= ours and set(OPS) == set(ALL_OPS)


def test_seed_sqrt_plan():
    report = _report(_kernel("sqrt"), "sqrt")
    assert report.variant == "reg"
    assert (report.plan["vec"], report.plan["outer"], report.plan["packed"]) == (1, 8, None)


@pytest.mark.parametrize("op", sorted(OPS))
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_every_op_and_float_dtype_lowers(op, dtype):
    func = _kernel(op, dtype, scalar=None if op != "fill" else T.float32(1.5).astype(dtype))
    report = _report(func, op)
    assert report.variant == "reg", report.candidates
    assert report.plan["regs_per_thread"] == 8
    if dtype == "float16":  # NVRTC compiles one dtype per op (CI time); GPU tests build all
        assert toolchain.kernel_sass(func, "sm_90a")
    else:
        assert "elementwise_kernel" in toolchain.cuda_source(func, "sm_90a")


@pytest.mark.parametrize(
    "op, dtype, arch, packed",
    [
        ("add", "float16", "sm_90a", "add_f16x2"),
        ("maximum", "bfloat16", "sm_90a", "max_bf16x2"),
        ("fma", "float16", "sm_90a", "fma_f16x2"),
        ("cast", "float16", "sm_90a", "cvt_f16x2_f32"),
        ("add", "float32", "sm_90a", None),  # no f32 pair before sm_100
        ("add", "float32", "sm_100a", "add_f32x2"),
        ("fma", "float32", "sm_100a", "fma_f32x2"),
        ("bf16_add_on_sm80", "bfloat16", "sm_80", None),
        ("exp", "float16", "sm_90a", None),  # no exact pair form for transcendental ops
    ],
)
def test_packed_forms(op, dtype, arch, packed):
    real_op = "add" if op == "bf16_add_on_sm80" else op
    report = _report(_kernel(real_op, dtype), real_op, arch)
    assert report.plan["packed"] == packed
    assert report.plan["vec"] == (2 if packed else 1)


@pytest.mark.parametrize(
    "op, dtype, arch, opcode",
    [
        ("maximum", "float16", "sm_90a", "HMNMX2"),
        ("cast", "bfloat16", "sm_90a", "F2FP.BF16.F32.PACK_AB"),
        ("add", "float32", "sm_100a", "FADD2"),
        ("mul", "float32", "sm_100a", "FMUL2"),
        ("fma", "float32", "sm_100a", "FFMA2"),
    ],
)
def test_packed_forms_reach_the_sass(op, dtype, arch, opcode):
    ops = toolchain.opcodes(toolchain.kernel_sass(_kernel(op, dtype), arch))
    assert ops[opcode] == 4  # 8 registers, two per instruction
    assert not any(o.startswith(("LDL", "STL")) for o in ops)


SCALAR_PAIRS = [
    # op, dtype, scalar, arch, packed form, SASS opcode (one per pair)
    ("maximum", "float16", 0.0, "sm_90a", "max_f16x2", "HMNMX2"),  # the ReLU
    ("add", "float16", 2.0, "sm_90a", "add_f16x2", "HADD2"),
    # ptxas issues some bf16 pair multiplies as HFMA2 with a -0 addend (the same result)
    ("mul", "bfloat16", -1.5, "sm_90a", "mul_bf16x2", ("HMUL2.BF16_V2", "HFMA2.MMA.BF16_V2")),
    ("add", "float32", 0.25, "sm_100a", "add_f32x2", "FADD2"),
    ("mul", "float32", 3.0, "sm_100a", "mul_f32x2", "FMUL2"),
]


def _scalar_kernel(op, dtype, value):
    return _kernel(op, dtype, scalar=tvm.tirx.const(value, dtype))


@pytest.mark.parametrize("op, dtype, value, arch, packed, opcode", SCALAR_PAIRS)
def test_scalar_operand_is_broadcast_into_the_pair_form(op, dtype, value, arch, packed, opcode):
    func = _scalar_kernel(op, dtype, value)
    assert _report(func, op, arch).plan["packed"] == packed
    ops = toolchain.opcodes(toolchain.kernel_sass(func, arch))
    opcodes = (opcode,) if isinstance(opcode, str) else opcode
    assert sum(ops[o] for o in opcodes) == 4  # 8 elements a thread: 4 pairs, one each
    scalar_forms = [k for k in ops if k.startswith(("HADD ", "HMUL ", "FADD ", "FMUL ", "HMNMX "))]
    assert not scalar_forms, ops


def test_scalar_operand_keeps_the_scalar_form_where_no_pair_form_exists():
    report = _report(_kernel("fdiv", "float16", scalar=T.float16(2.0)), "fdiv")
    assert report.variant == "reg" and report.plan["packed"] is None  # negative control


@pytest.mark.parametrize("op, dtype, value, arch, packed, opcode", SCALAR_PAIRS)
@pytest.mark.parametrize(
    "where", [p for p in WHERE if p.id == "sim"] + [WHERE[1]], ids=["sim", "gpu"]
)
def test_scalar_pair_forms_match_numpy(op, dtype, value, arch, packed, opcode, rng, where, gpu):
    if where == "gpu" and arch == "sm_100a":
        pytest.skip("sm_100a pair forms run on Blackwell only; checked in the simulator")
    func = _scalar_kernel(op, dtype, value)
    a, c, d = (runtime.random_array(SHAPE, dtype, rng) for _ in range(3))
    out = execute(func, [a, c, d, runtime.poison_like(a)], where, gpu, tcd.STRICT_PIPELINE, arch)
    fn = {"maximum": np.maximum, "add": np.add, "mul": np.multiply}[op]
    want = fn(a, np.array(value, dtype=a.dtype)).astype(a.dtype)
    np.testing.assert_array_equal(runtime.bits(out[3]), runtime.bits(want))


@pytest.mark.parametrize("c_layout, c_shape", [(ROW_BROADCAST, (1, 8)), (COL_BROADCAST, (32, 1))])
def test_broadcast_operands(c_layout, c_shape):
    report = _report(_kernel("mul", c_layout=c_layout, c_shape=c_shape), "mul")
    assert report.variant == "reg" and report.plan["outer"] == 8


def test_warpgroup_and_cta_scopes():
    wg = TileLayout(S[(128, 4) : (1 @ Axis.tid_in_wg, 1)])
    report = _report(_kernel("exp", layout=wg, shape=(128, 4), scope="warpgroup"), "exp")
    assert (report.scope, report.plan["threads"], report.plan["outer"]) == ("warpgroup", 128, 4)
    cta = TileLayout(S[(8, 32, 2) : (1 @ Axis.warpid, 1 @ lane, 1)])
    report = _report(
        _kernel("add", layout=cta, shape=(256, 2), scope="cta", cta_threads=256), "add"
    )
    assert (report.scope, report.plan["threads"], report.plan["outer"]) == ("cta", 256, 2)


# -- declines -----------------------------------------------------------------------------
def _reason(func, op):
    report = _report(func, op)
    [cand] = [c for c in report.candidates if c.variant == "reg"]
    assert not cand.accepted and report.variant != "reg"
    return cand.reason


def test_declines_integer_sqrt():
    assert "sqrt needs a floating-point dtype" in _reason(_kernel("sqrt", "int32"), "sqrt")


def test_declines_mixed_dtypes():
    reason = _reason(_kernel("add", "float16", scalar=T.float32(1.0)), "add")
    assert reason.startswith("add src2 is float32 but dst is float16")


def test_declines_mismatched_scale_dtype():
    reason = _reason(_kernel("exp", "float16", scale=T.float32(0.5)), "exp")
    assert "exp scale is float32 but dst is float16" in reason


def test_declines_layouts_that_disagree_on_ownership():
    # Lane 8*i + j holds rows 8i..8i+7 of column j: the same 32 lanes, other elements.
    columns = TileLayout(S[(4, 8, 8) : (8 @ lane, 1, 1 @ lane)])
    reason = _reason(_kernel("add", c_layout=columns, c_shape=(32, 8)), "add")
    assert "the layouts must agree on which thread owns each element" in reason


def test_declines_dst_layout_of_another_scope():
    reason = _reason(_kernel("sqrt", scope="warpgroup"), "sqrt")
    assert "register layout thread axis laneid of RB does not match scope warpgroup" in reason


# -- GPU: results against numpy -----------------------------------------------------------
EXACT = {"zero", "fill", "add", "sub", "mul", "maximum", "cast", "fdiv", "sqrt", "reciprocal"}
# Transcendental ops use CUDA's expf/exp2f/log2f (<= 2 ulp) and half/bf16 intrinsics.
RTOL = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 1.6e-2}


def _np(dtype):
    if dtype == "bfloat16":
        import ml_dtypes

        return ml_dtypes.bfloat16
    return np.dtype(dtype)


def _reference(op, a, c, d, dtype, scalar=None, bias=None, scale=None):
    x, y, z = (v.astype(np.float64) for v in (a, c, d))
    if scalar is not None:
        y = np.full_like(x, scalar)
    if op in ("sqrt", "exp", "exp2", "log2") and scale is not None:
        x = x * scale
    if op in ("sqrt", "exp", "exp2", "log2") and bias is not None:
        x = x + bias
    out = {
        "zero": lambda: np.zeros_like(x),
        "fill": lambda: np.full_like(x, 1.5),
        "sqrt": lambda: np.sqrt(x),
        "exp": lambda: np.exp(x),
        "exp2": lambda: np.exp2(x),
        "log2": lambda: np.log2(x),
        "reciprocal": lambda: 1.0 / x,
        "silu": lambda: x / (1.0 + np.exp(-x)),
        "add": lambda: x + y,
        "sub": lambda: x - y,
        "mul": lambda: x * y,
        "fdiv": lambda: x / y,
        "maximum": lambda: np.maximum(x, y),
        "fma": lambda: x * y + z,
        "cast": lambda: x,
    }[op]()
    return out.astype(_np(dtype))


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("op", sorted(OPS))
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_matches_numpy(op, dtype, rng, where, gpu):
    fill = T.float32(1.5).astype(dtype) if op == "fill" else None
    func = _kernel(op, dtype, scalar=fill)
    src_dtype = "float32" if op == "cast" else dtype
    a = runtime.random_array(SHAPE, src_dtype, rng)
    if op in ("sqrt", "log2"):
        a = (np.abs(a.astype(np.float32)) + 0.25).astype(a.dtype)
    c, d = (runtime.random_array(SHAPE, dtype, rng) for _ in range(2))
    b = runtime.poison_like(c)
    out = execute(func, [a, c, d, b], where, gpu)[3]
    expected = _reference(op, a, c, d, dtype)
    if op in EXACT:
        np.testing.assert_array_equal(runtime.bits(out), runtime.bits(expected))
    else:  # fma rounds once (contracted), numpy's float64 twice; transcendental ops approximate
        np.testing.assert_allclose(
            out.astype(np.float64), expected.astype(np.float64), rtol=RTOL[dtype], atol=RTOL[dtype]
        )


@pytest.mark.parametrize("where", WHERE)
def test_unary_bias_scale_and_broadcast(rng, where, gpu):
    a, c, d = (runtime.random_array(SHAPE, "float32", rng) for _ in range(3))
    func = _kernel("exp", bias=T.float32(0.25), scale=T.float32(0.5))
    out = execute(func, [a, c, d, runtime.poison_like(a)], where, gpu)
    np.testing.assert_allclose(out[3], np.exp(a * 0.5 + 0.25), rtol=1e-5)
    for c_layout, c_shape in [(ROW_BROADCAST, (1, 8)), (COL_BROADCAST, (32, 1))]:
        c = runtime.random_array(c_shape, "float32", rng)
        func = _kernel("mul", c_layout=c_layout, c_shape=c_shape)
        out = execute(func, [a, c, d, runtime.poison_like(a)], where, gpu)
        np.testing.assert_array_equal(out[3], a * c)


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize(
    "scope, layout, shape, threads",
    [
        ("warpgroup", TileLayout(S[(128, 4) : (1 @ Axis.tid_in_wg, 1)]), (128, 4), None),
        ("cta", TileLayout(S[(8, 32, 2) : (1 @ Axis.warpid, 1 @ lane, 1)]), (256, 2), 256),
    ],
)
def test_scopes(scope, layout, shape, threads, rng, where, gpu):
    a, c, d = (runtime.random_array(shape, "float16", rng) for _ in range(3))
    func = _kernel("fma", "float16", layout, shape, scope, cta_threads=threads)
    out = execute(func, [a, c, d, runtime.poison_like(a)], where, gpu)
    expected = _reference("fma", a, c, d, "float16")
    np.testing.assert_allclose(
        out[3].astype(np.float64), expected.astype(np.float64), rtol=2e-3, atol=2e-3
    )


@pytest.mark.parametrize(
    "op, intrinsic", [("fdiv", "__fdiv_rn("), ("sqrt", "__fsqrt_rn("), ("reciprocal", "__frcp_rn(")]
)
def test_float32_division_and_sqrt_are_correctly_rounded(op, intrinsic):
    # CUDA's '/' and sqrtf are approximate under fast-math flags; these intrinsics are not.
    assert intrinsic in toolchain.cuda_source(_kernel(op), "sm_90a")
