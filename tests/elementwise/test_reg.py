"""elementwise -> reg (seed 001): plans, dtype rules, packed forms, declines, GPU vs numpy."""

from __future__ import annotations

import functools

import numpy as np
import pytest
import tvm
from tvm.script import tirx as T
from tvm.script.tirx import tile as Tx
from tvm.tirx.layout import Axis, R, S, TileLayout, tcgen05_atom_layout, wg_local_layout

import tirx_cuda_dispatch as tcd
from executors import WHERE, execute
from tirx_cuda_dispatch import demos, runtime, sim, toolchain
from tirx_cuda_dispatch.elementwise.ops import OPS, packed_form
from tirx_cuda_dispatch.sim.errors import SimError

lane = Axis.laneid
ROWS = TileLayout(S[(32, 8) : (1 @ lane, 1)])  # the seed's layout: lane i owns row i
SHAPE = (32, 8)
ROW_BROADCAST = TileLayout(S[(1, 8)] + R[32 : 1 @ lane])  # every lane holds the (1, 8) row
COL_BROADCAST = TileLayout(S[(32, 1) : (1 @ lane, 1)])  # lane i holds element i of a column


# The ops of TVM's catalog that TVM 0.27 lowers nowhere on CUDA: ours are the only lowering.
NEW_OPS = ("memset", "minimum", "select")


def mask(i, j):
    """select's predicate in the tests: TIR over the LambdaExpr's variables, or numpy over
    index arrays (both rows and columns take both branches)."""
    return (i * 3 + j) % 5 < 2


def _kernel(op, dtype="float32", layout=ROWS, shape=SHAPE, scope="warp", **kw):
    if op in ("fill", "memset"):
        kw.setdefault("scalar", T.float16(1.5) if dtype == "float16" else T.float32(1.5))
    if op == "cast":
        kw.setdefault("src_dtype", "float32")
    if op in NEW_OPS:
        return _catalog_kernel(op, layout, shape, dtype, scope, **kw)
    return demos.elementwise_roundtrip(op, layout, shape, dtype, scope, **kw)


def _catalog_kernel(
    op,
    layout,
    shape,
    dtype,
    scope="warp",
    cta_threads=None,
    scalar=None,
    true_scalar=None,
    pred=mask,
    c_shape=None,
    c_layout=None,
    region=None,
):
    """``B = op(A, C)`` through registers, as demos.elementwise_roundtrip builds the other
    ops (arguments A, C, D, B; D is loaded, not read): ``minimum(RB, RA, RC)``, ``memset(RB, scalar)``,
    ``select(RB, RA, RC, pred)``; ``scalar`` replaces C (select's false_value),
    ``true_scalar`` A (select's true_value). ``region`` (slices) narrows the call to part
    of the tiles; the rest of RB keeps B's poison."""
    threads = {"warp": 32, "warpgroup": 128}.get(scope, cta_threads)
    warps = threads // 32
    with_wg = warps % 4 == 0
    c_shape = c_shape or shape
    c_layout = c_layout if c_layout is not None else layout
    ns = getattr(Tx, scope)
    copy, fn = ns.copy, getattr(ns, op)
    full = tuple(slice(0, e) for e in shape)
    c_full = tuple(slice(0, e) for e in c_shape)
    part = region or full
    c_part = region or c_full

    # fmt: off
    @T.prim_func
    def elementwise(A_ptr: T.handle, C_ptr: T.handle, D_ptr: T.handle, B_ptr: T.handle):
        A = T.match_buffer(A_ptr, shape, dtype)
        C = T.match_buffer(C_ptr, c_shape, dtype)
        D = T.match_buffer(D_ptr, shape, dtype)
        B = T.match_buffer(B_ptr, shape, dtype)
        T.device_entry()
        T.cta_id([1])
        if with_wg:
            T.warpgroup_id([warps // 4])
            T.warp_id_in_wg([4])
        T.warp_id([warps])
        T.lane_id([32])
        T.thread_id([threads])
        RA = T.alloc_buffer(shape, dtype, scope="local", layout=layout)
        RC = T.alloc_buffer(c_shape, dtype, scope="local", layout=c_layout)
        RD = T.alloc_buffer(shape, dtype, scope="local", layout=layout)
        RB = T.alloc_buffer(shape, dtype, scope="local", layout=layout)
        copy(RB[full], B[full])  # poison: an op that writes nothing shows
        copy(RA[full], A[full])
        copy(RC[c_full], C[c_full])
        copy(RD[full], D[full])
        if op == "memset":
            fn(RB[part], scalar)
        elif op == "minimum":
            if scalar is not None:
                fn(RB[part], RA[part], scalar)
            else:
                fn(RB[part], RA[part], RC[c_part])
        elif true_scalar is not None:
            fn(RB[part], true_scalar, RC[c_part] if scalar is None else scalar, pred)
        else:
            fn(RB[part], RA[part], RC[c_part] if scalar is None else scalar, pred)
        copy(B[full], RB[full])
    # fmt: on
    return elementwise


@functools.cache
def sim_runs_pair_min() -> bool:
    """Whether the simulator executes the ``min`` pair helper (``__hmin2``): sim/helpers.py
    lists the pairwise ops it runs; a missing one is a SimError naming it."""
    a = runtime.random_array(SHAPE, "float16", np.random.default_rng(0))
    try:
        sim.run(_kernel("minimum", "float16"), [a, a, a, runtime.poison_like(a)])
    except SimError as err:
        if "no pairwise op 'min'" in str(err):
            return False
        raise
    return True


def _needs_pair_min(where, op, dtype, arch="sm_90a"):
    """Round trips of the min pair form in the simulator wait for its ``min``."""
    form = packed_form(OPS[op], dtype, dtype, int(arch[3:].rstrip("a")))
    if where == "sim" and form and form.key.startswith("min_") and not sim_runs_pair_min():
        pytest.xfail("the simulator has no pairwise 'min' (sim/helpers.py) yet")


def _report(func, op, arch="sm_90a"):
    [report] = [r for r in tcd.explain(func, arch) if r.op == op]
    return report


def test_every_cuda_elementwise_op_of_tvm_is_registered():
    from tvm.backend.cuda.tile_primitive.elementwise.ops import ALL_OPS  # the op list only

    ours = {row["op"] for row in tcd.list_variants() if row["variant"] == "reg"}
    assert set(ALL_OPS) <= ours and set(OPS) - set(ALL_OPS) == set(NEW_OPS)
    assert set(NEW_OPS) <= ours


def test_tvm_lowers_minimum_memset_and_select_nowhere_on_cuda():
    """The rest of TIRx's elementwise catalog: TVM 0.27 registers them for Trainium only
    (the only CUDA cases are our bridge's, which the lowering installs for every op)."""
    from tvm.ir import Op
    from tvm.tirx.operator.tile_primitive import dispatcher

    from tirx_cuda_dispatch.builtin import builtin_names

    for op in NEW_OPS:
        assert builtin_names(op) == []
        assert dispatcher._DISPATCH_TABLE.get((Op.get(f"tirx.tile.{op}"), "trn"))


def test_seed_sqrt_plan():
    report = _report(_kernel("sqrt"), "sqrt")
    assert report.variant == "reg"
    assert (report.plan["vec"], report.plan["outer"], report.plan["packed"]) == (1, 8, None)


@pytest.mark.parametrize("op", sorted(OPS))
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_every_op_and_float_dtype_lowers(op, dtype):
    fill = T.float32(1.5).astype(dtype) if op in ("fill", "memset") else None
    func = _kernel(op, dtype, scalar=fill)
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
        ("minimum", "float16", "sm_90a", "min_f16x2"),
        ("minimum", "bfloat16", "sm_90a", "min_bf16x2"),
        ("minimum", "float16", "sm_75", None),  # min.f16x2 needs sm_80
        ("minimum", "bfloat16", "sm_80", None),  # min.bf16x2 needs sm_90
        ("select", "float16", "sm_90a", None),  # no pair form: one element a step
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
        ("minimum", "float16", "sm_90a", "HMNMX2"),
        ("minimum", "bfloat16", "sm_90a", "HMNMX2.BF16_V2"),
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
    ("minimum", "float16", 0.0, "sm_90a", "min_f16x2", "HMNMX2"),  # the negative part
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
    _needs_pair_min(where, op, dtype, arch)
    func = _scalar_kernel(op, dtype, value)
    a, c, d = (runtime.random_array(SHAPE, dtype, rng) for _ in range(3))
    out = execute(func, [a, c, d, runtime.poison_like(a)], where, gpu, tcd.STRICT_PIPELINE, arch)
    fn = {"maximum": np.maximum, "minimum": np.minimum, "add": np.add, "mul": np.multiply}[op]
    want = fn(a, np.array(value, dtype=a.dtype)).astype(a.dtype)
    np.testing.assert_array_equal(runtime.bits(out[3]), runtime.bits(want))


# TVM's own register layouts at warpgroup scope: the tcgen05.ld/st atoms' images (one
# per shape) and wg_local (a row a thread). Two consecutive registers hold a pair in each.
TVM_REGISTER_LAYOUTS = [
    pytest.param(
        lambda: tcgen05_atom_layout("32x32b", (128, 16), "float32"), (128, 16), id="32x32b"
    ),
    pytest.param(lambda: tcgen05_atom_layout("16x64b", (64, 16), "float32"), (64, 16), id="16x64b"),
    pytest.param(
        lambda: tcgen05_atom_layout("16x128b", (64, 32), "float32"), (64, 32), id="16x128b"
    ),
    pytest.param(
        lambda: tcgen05_atom_layout("16x256b", (64, 64), "float32"), (64, 64), id="16x256b"
    ),
    pytest.param(
        lambda: tcgen05_atom_layout("32x32b", (64, 16), "float32"), (64, 16), id="B-image"
    ),
    pytest.param(lambda: wg_local_layout(16), (128, 16), id="wg_local"),
]
F32_PAIRS = [("add", None, "FADD2"), ("mul", 3.0, "FMUL2"), ("fma", None, "FFMA2")]


def _tvm_layout_kernel(op, make_layout, shape, value):
    scalar = None if value is None else tvm.tirx.const(value, "float32")
    return _kernel(op, "float32", make_layout(), shape, "warpgroup", scalar=scalar)


@pytest.mark.parametrize("op, value, opcode", F32_PAIRS)
@pytest.mark.parametrize("make_layout, shape", TVM_REGISTER_LAYOUTS)
def test_f32_pairs_on_tvm_register_layouts(op, value, opcode, make_layout, shape, rng):
    func = _tvm_layout_kernel(op, make_layout, shape, value)
    report = _report(func, op, "sm_100a")
    assert report.variant == "reg" and report.plan["packed"] == f"{op}_f32x2"
    assert _report(func, op, "sm_90a").plan["packed"] is None  # negative control: no pair form
    a, c, d = (runtime.random_array(shape, "float32", rng) for _ in range(3))
    out = execute(func, [a, c, d, runtime.poison_like(a)], "sim", None, target="sm_100a")[3]
    c = np.full_like(a, value) if value is not None else c
    want = {"add": a + c, "mul": a * c, "fma": _fma_f32(a, c, d)}[op]
    np.testing.assert_array_equal(runtime.bits(out), runtime.bits(want))


def _fma_f32(a, c, d):
    """a * c + d rounded once to float32 (the float64 product of two float32s is exact)."""
    return (a.astype(np.float64) * c + d).astype(np.float32)


@pytest.mark.parametrize("make_layout, shape", TVM_REGISTER_LAYOUTS[::3])
def test_f32_pairs_on_tvm_register_layouts_reach_the_sass(make_layout, shape):
    ops = toolchain.opcodes(
        toolchain.kernel_sass(_tvm_layout_kernel("fma", make_layout, shape, None), "sm_100a")
    )
    pairs = shape[0] * shape[1] // 128 // 2  # a thread's elements, two per instruction
    assert ops["FFMA2"] == pairs and not ops["FFMA"], ops
    assert not any(o.startswith(("LDL", "STL")) for o in ops)


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
EXACT |= set(NEW_OPS)
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
        "memset": lambda: np.full_like(x, 1.5),
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
        "minimum": lambda: np.minimum(x, y),
        "select": lambda: np.where(mask(*np.indices(x.shape)), x, y),
        "fma": lambda: x * y + z,
        "cast": lambda: x,
    }[op]()
    return out.astype(_np(dtype))


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("op", sorted(OPS))
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_matches_numpy(op, dtype, rng, where, gpu):
    _needs_pair_min(where, op, dtype)
    fill = T.float32(1.5).astype(dtype) if op in ("fill", "memset") else None
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


# -- mixed dtypes: float32 inputs (a wgmma accumulator), a 16-bit dst, and back ----------
WID = Axis.wid_in_wg
# The m64nNk16 wgmma accumulator (PTX ISA "Register Fragments and Shared Memory Matrix
# Layouts", matrix D): thread (warp w, lane l) holds rows 16w + l/4 (+8) and columns
# 8j + 2(l%4) (+1) in register 4j + 2h + e. N = 16: 8 registers a thread, pairs contiguous.
ACC = TileLayout(S[(4, 2, 8, 2, 4, 2) : (1 @ WID, 2, 4 @ lane, 4, 1 @ lane, 1)])
ACC_SHAPE = (64, 16)
MIXED_OPS = "reciprocal sqrt exp exp2 log2 silu add sub mul fdiv maximum minimum fma".split()
MIXED_PAIRS = [
    ("float32", "float16"),
    ("float32", "bfloat16"),
    ("float16", "float32"),
    ("bfloat16", "float16"),
]
# Correctly rounded in float32 on the GPU too (__frcp_rn, __fsqrt_rn, __fdiv_rn, IEEE
# add/mul/fma, max); exp/exp2/log2 (and silu's exp) are MUFU approximations there.
MIXED_EXACT_ON_GPU = {
    "reciprocal",
    "sqrt",
    "add",
    "sub",
    "mul",
    "fdiv",
    "maximum",
    "minimum",
    "fma",
}


def _acc_kernel(op, src_dtype, dst_dtype, scalar=None, bias=None, scale=None, bias_region=False):
    """``B = op(A[, C[, D]])`` on a warpgroup's accumulator-layout registers: A, C and D
    (``src_dtype``) global -> registers, the op into RB (``dst_dtype``), RB -> B. RB
    starts out holding B's poison. ``bias_region``: C is a unary op's bias tile."""
    family = OPS[op].family
    fn, copy = getattr(Tx.warpgroup, op), Tx.warpgroup.copy
    full = tuple(slice(0, e) for e in ACC_SHAPE)

    # fmt: off
    @T.prim_func
    def acc_elementwise(A_ptr: T.handle, C_ptr: T.handle, D_ptr: T.handle, B_ptr: T.handle):
        A = T.match_buffer(A_ptr, ACC_SHAPE, src_dtype)
        C = T.match_buffer(C_ptr, ACC_SHAPE, src_dtype)
        D = T.match_buffer(D_ptr, ACC_SHAPE, src_dtype)
        B = T.match_buffer(B_ptr, ACC_SHAPE, dst_dtype)
        T.device_entry()
        T.cta_id([1])
        T.warpgroup_id([1])
        T.warp_id_in_wg([4])
        T.warp_id([4])
        T.lane_id([32])
        T.thread_id([128])
        RA = T.alloc_buffer(ACC_SHAPE, src_dtype, scope="local", layout=ACC)
        RC = T.alloc_buffer(ACC_SHAPE, src_dtype, scope="local", layout=ACC)
        RD = T.alloc_buffer(ACC_SHAPE, src_dtype, scope="local", layout=ACC)
        RB = T.alloc_buffer(ACC_SHAPE, dst_dtype, scope="local", layout=ACC)
        copy(RB[full], B[full])  # poison: an op that writes nothing shows
        copy(RA[full], A[full])
        copy(RC[full], C[full])
        copy(RD[full], D[full])
        if family == "unary":
            if bias_region:
                fn(RB[full], RA[full], RC[full], scale)
            else:
                fn(RB[full], RA[full], bias, scale)
        elif family == "binary":
            if scalar is not None:
                fn(RB[full], RA[full], scalar)
            else:
                fn(RB[full], RA[full], RC[full])
        else:
            fn(RB[full], RA[full], RC[full], RD[full])
        copy(B[full], RB[full])
    # fmt: on
    return acc_elementwise


def _f32(x):
    """One rounding to float32 (of a float64 value that is exact or nearly so)."""
    return np.asarray(x, dtype=np.float64).astype(np.float32)


def _mixed_reference(op, a, c, d, dst, bias=None, scale=None):
    """Inputs widened exactly to float32, the op correctly rounded in float32 (silu: its
    three float32 steps), the result rounded to nearest even into ``dst``."""
    x, y, z = (v.astype(np.float32) for v in (a, c, d))
    if scale is not None or bias is not None:  # x * scale + bias contracts to one fma
        scale, bias = (np.float64(1.0 if scale is None else scale), 0.0 if bias is None else bias)
        x = _f32(x.astype(np.float64) * scale + np.asarray(bias, dtype=np.float64))
    wide = {
        "reciprocal": lambda: _f32(1.0 / x.astype(np.float64)),
        "sqrt": lambda: _f32(np.sqrt(x.astype(np.float64))),
        "exp": lambda: _f32(np.exp(x.astype(np.float64))),
        "exp2": lambda: _f32(np.exp2(x.astype(np.float64))),
        "log2": lambda: _f32(np.log2(x.astype(np.float64))),
        "silu": lambda: x / (np.float32(1.0) + _f32(np.exp(-x.astype(np.float64)))),
        "add": lambda: x + y,
        "sub": lambda: x - y,
        "mul": lambda: x * y,
        "fdiv": lambda: x / y,
        "maximum": lambda: np.maximum(x, y),
        "minimum": lambda: np.minimum(x, y),
        "fma": lambda: _f32(x.astype(np.float64) * y + z),
    }[op]()
    return wide.astype(_np(dst))


def _mixed_data(op, src, rng):
    a, c, d = (runtime.random_array(ACC_SHAPE, src, rng) for _ in range(3))
    if op in ("sqrt", "log2"):
        a = (np.abs(a.astype(np.float32)) + 0.25).astype(a.dtype)
    return a, c, d


def _poison(dst):
    return runtime.poison_like(np.zeros(ACC_SHAPE, _np(dst)))


@pytest.mark.parametrize(
    "op, src, dst, arch, convert",
    [
        # the three calls of TVM's own tests: a float32 accumulator into 16 bits
        ("reciprocal", "float32", "float16", "sm_90a", "cvt_f16x2_f32"),
        ("log2", "float32", "bfloat16", "sm_90a", "cvt_bf16x2_f32"),
        ("exp", "float32", "float16", "sm_80", "cvt_f16x2_f32"),
        ("fma", "float32", "bfloat16", "sm_75", None),  # cvt.rn.bf16x2.f32 needs sm_80
        ("add", "float16", "float32", "sm_90a", None),  # widening: nothing to round
        ("sqrt", "bfloat16", "float16", "sm_90a", "cvt_f16x2_f32"),
    ],
)
def test_mixed_dtypes_compute_in_float32_and_round_pairs_once(op, src, dst, arch, convert):
    report = _report(_acc_kernel(op, src, dst), op, arch)
    assert report.variant == "reg", report.candidates
    plan = report.plan
    assert plan["dtypes"] == f"{src} -> float32 -> {dst}" and plan["packed"] is None
    assert (plan["convert"], plan["vec"], plan["regs_per_thread"]) == (
        convert,
        2 if convert else 1,
        8,
    )


def test_mixed_dtype_rule_as_data():
    from tirx_cuda_dispatch.elementwise.ops import Arithmetic, arithmetic, check_dtypes

    exp, roles = OPS["exp"], {"src": "float32", "scale": "float32"}
    # Without mixed=True (shared-memory callers) every operand still has dst's dtype.
    assert check_dtypes(exp, "float16", roles, {"scale"}).startswith("exp src is float32 but dst")
    assert check_dtypes(exp, "float16", roles, {"scale"}, mixed=True) is None
    assert arithmetic(exp, "float16", roles, {"scale"}) == Arithmetic(
        "float32", "float32", "float16"
    )
    assert str(arithmetic(OPS["add"], "float32", {"src": "float16", "src2": "float16"})) == (
        "float16 -> float32 -> float32"
    )
    same = arithmetic(OPS["cast"], "float16", {"src": "float32"})
    assert not same.mixed  # cast is its own conversion: one rounding, no compute dtype


@pytest.mark.parametrize(
    "kernel, op, reason",
    [
        (
            lambda: _acc_kernel("exp", "float32", "float16", scale=T.float16(0.5)),
            "exp",
            "exp scale is float16 but the op computes in float32 (src float32, dst float16); "
            "write scalars as T.float32(...)",
        ),
        (
            lambda: _acc_kernel("exp", "float16", "float32", bias=T.float16(0.5)),
            "exp",
            "exp bias is float16 but the op computes in float32 (src float16, dst float32)",
        ),
        (
            lambda: _kernel("add", "float16", src_dtype="float32"),  # C is float16
            "add",
            "add src2 is float16 but src is float32; the tensor inputs must share one dtype "
            "(Tx.cast src2 to float32 first)",
        ),
        (
            lambda: _kernel("sqrt", "float32", src_dtype="float64"),
            "sqrt",
            "sqrt src is float64 but dst is float32; mixed dtypes need float16, bfloat16 or "
            "float32 on both sides (Tx.cast src to float32 first)",
        ),
        (
            lambda: _kernel("exp", "float32", src_dtype="int32"),
            "exp",
            "exp src is int32 but dst is float32; mixed dtypes need",
        ),
        (
            lambda: _kernel("fill", "float16", scalar=T.float32(1.5)),
            "fill",
            "fill value is float32 but dst is float16; every operand must have the dst dtype",
        ),
    ],
)
def test_mixed_dtype_declines(kernel, op, reason):
    assert reason in _reason(kernel(), op)


@pytest.mark.parametrize(
    "dst, opcode", [("float16", "F2FP.F16.F32.PACK_AB"), ("bfloat16", "F2FP.BF16.F32.PACK_AB")]
)
def test_mixed_pairs_reach_the_sass(dst, opcode):
    func = _acc_kernel("reciprocal", "float32", dst)
    source = toolchain.cuda_source(func, "sm_90a")
    assert "__frcp_rn(RA_ptr[" in source  # float32 in, correctly rounded; no cast before
    ops = toolchain.opcodes(toolchain.kernel_sass(func, "sm_90a"))
    assert ops[opcode] == 4  # 8 results a thread, one conversion per pair
    assert not any(o.startswith(("LDL", "STL", "F2F.")) for o in ops), ops


def test_16_bit_inputs_widen_before_the_op():
    source = toolchain.cuda_source(_acc_kernel("reciprocal", "float16", "float32"), "sm_90a")
    assert "__frcp_rn(((float)RA_ptr[" in source


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("src, dst", MIXED_PAIRS)
@pytest.mark.parametrize("op", MIXED_OPS)
def test_mixed_matches_numpy(op, src, dst, rng, where, gpu):
    a, c, d = _mixed_data(op, src, rng)
    out = execute(_acc_kernel(op, src, dst), [a, c, d, _poison(dst)], where, gpu)[3]
    expected = _mixed_reference(op, a, c, d, dst)
    if where == "sim" or op in MIXED_EXACT_ON_GPU:
        np.testing.assert_array_equal(runtime.bits(out), runtime.bits(expected))
    else:  # MUFU exp2/lg2 (a few float32 ulp) before the rounding into dst
        tol = RTOL[dst]
        np.testing.assert_allclose(out.astype(np.float64), expected.astype(np.float64), tol, tol)


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("src, dst", MIXED_PAIRS[:3])
@pytest.mark.parametrize("op", ["reciprocal", "exp", "log2"])
def test_mixed_without_pairs_rounds_each_element(op, src, dst, rng, where, gpu):
    """Three registers a thread: no whole pairs, so each element is converted alone."""
    layout, shape = TileLayout(S[(128, 3) : (1 @ Axis.tid_in_wg, 1)]), (128, 3)
    func = _kernel(op, dst, layout, shape, "warpgroup", src_dtype=src)
    plan = _report(func, op).plan
    assert (plan["vec"], plan["convert"], plan["dtypes"]) == (1, None, f"{src} -> float32 -> {dst}")
    a, c, d = (runtime.random_array(shape, t, rng) for t in (src, dst, dst))
    if op == "log2":
        a = (np.abs(a.astype(np.float32)) + 0.25).astype(a.dtype)
    out = execute(func, [a, c, d, runtime.poison_like(c)], where, gpu)[3]
    want = _mixed_reference(op, a, a, a, dst)
    if where == "sim" or op in MIXED_EXACT_ON_GPU:
        np.testing.assert_array_equal(runtime.bits(out), runtime.bits(want))
    else:
        tol = RTOL[dst]
        np.testing.assert_allclose(out.astype(np.float64), want.astype(np.float64), tol, tol)


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("dst", ["float16", "bfloat16"])
def test_mixed_bias_scale_and_scalars(dst, rng, where, gpu):
    """TVM's test_unary_op_local_with_bias_scale calls: float32 bias (scalar or tile) and
    scale on a float32 accumulator, a 16-bit dst; and a float32 scalar of a binary op."""
    a, c, d = _mixed_data("exp", "float32", rng)
    cases = [
        (_acc_kernel("exp", "float32", dst, bias=T.float32(0.25), scale=T.float32(1.5)), 0.25),
        (_acc_kernel("exp", "float32", dst, scale=T.float32(1.5), bias_region=True), c),
    ]
    for func, bias in cases:
        out = execute(func, [a, c, d, _poison(dst)], where, gpu)[3]
        want = _mixed_reference("exp", a, c, d, dst, bias=bias, scale=np.float32(1.5))
        if where == "sim":
            np.testing.assert_array_equal(runtime.bits(out), runtime.bits(want))
        else:
            tol = RTOL[dst]
            np.testing.assert_allclose(out.astype(np.float64), want.astype(np.float64), tol, tol)
    func = _acc_kernel("mul", "float32", dst, scalar=T.float32(0.1))
    out = execute(func, [a, c, d, _poison(dst)], where, gpu)[3]
    want = (a * np.float32(0.1)).astype(_np(dst))
    np.testing.assert_array_equal(runtime.bits(out), runtime.bits(want))


@pytest.mark.parametrize("dst", ["float16", "bfloat16"])
@pytest.mark.parametrize("op", ["reciprocal", "exp", "log2", "sqrt", "add", "fma"])
def test_mixed_float32_inputs_agree_with_tvm_builtin(op, dst, rng):
    """TVM evaluates in float32 and casts once: the same arithmetic, bit for bit in the
    simulator (which rounds every float32 op correctly; on the GPU TVM's --use_fast_math
    build makes its 1/x, sqrtf and / approximate, ours stay correctly rounded)."""
    func = _acc_kernel(op, "float32", dst)
    args = [*_mixed_data(op, "float32", rng), _poison(dst)]
    ours = sim.run(func, args, target="sm_90a").arrays[3]
    builtin = sim.run(func, args, target="sm_90a", pipeline="tirx").arrays[3]
    np.testing.assert_array_equal(runtime.bits(ours), runtime.bits(builtin))


@pytest.mark.parametrize(
    "op, src, dst", [("reciprocal", "float16", "float32"), ("exp", "bfloat16", "float16")]
)
def test_16_bit_inputs_round_once_where_tvm_rounds_twice(op, src, dst, rng):
    """TVM evaluates in the inputs' 16-bit dtype and converts that result: a first
    rounding at 16 bits. Ours is the float32 result rounded once into dst."""
    func = _acc_kernel(op, src, dst)
    a, c, d = _mixed_data(op, src, rng)
    args = [a, c, d, _poison(dst)]
    ours = sim.run(func, args, target="sm_90a").arrays[3]
    builtin = sim.run(func, args, target="sm_90a", pipeline="tirx").arrays[3]
    fn = {"reciprocal": lambda x: 1.0 / x, "exp": np.exp}[op]
    twice = fn(a.astype(np.float64)).astype(a.dtype).astype(_np(dst))  # TVM's arithmetic
    np.testing.assert_array_equal(runtime.bits(builtin), runtime.bits(twice))
    np.testing.assert_array_equal(
        runtime.bits(ours), runtime.bits(_mixed_reference(op, a, c, d, dst))
    )
    assert (runtime.bits(ours) != runtime.bits(builtin)).sum() > 100


def test_negative_control_cast_before_the_op_is_caught(rng, monkeypatch):
    """The round trip's check fails when the cast comes first: rounding the float32
    accumulator to float16 and taking the reciprocal there differs from the reference in
    many elements of the same data, and a rule that computes in float16 produces exactly
    that (and is told apart from the reference)."""
    from tirx_cuda_dispatch.elementwise import ops

    a, c, d = _mixed_data("reciprocal", "float32", rng)
    args = [a, c, d, _poison("float16")]
    want = _mixed_reference("reciprocal", a, c, d, "float16")
    cast_first = (1.0 / a.astype(np.float16).astype(np.float64)).astype(np.float16)
    differ = runtime.bits(cast_first) != runtime.bits(want)
    assert differ.sum() > 100  # the data tells the two places of the cast apart

    func = _acc_kernel("reciprocal", "float32", "float16")
    out = sim.run(func, args, target="sm_90a").arrays[3]
    np.testing.assert_array_equal(runtime.bits(out), runtime.bits(want))

    monkeypatch.setitem(ops.MIXED_COMPUTE, ("float32", "float16"), "float16")
    assert _report(func, "reciprocal").plan["dtypes"] == "float32 -> float16 -> float16"
    wrong = sim.run(func, args, target="sm_90a").arrays[3]
    np.testing.assert_array_equal(runtime.bits(wrong), runtime.bits(cast_first))
    assert (runtime.bits(wrong) != runtime.bits(want)).any()


# -- minimum, memset, select: the rest of TVM's catalog (TVM lowers them nowhere on CUDA) ----
def test_minimum_pairs_are_hmin2():
    source = toolchain.cuda_source(_kernel("minimum", "float16"), "sm_90a")
    assert "__hmin2(*a, *b)" in source and "tirx_cuda_dispatch_min_f16x2(" in source
    assert "__hmax2" not in source


@pytest.mark.parametrize("dtype, arch", [("float16", "sm_75"), ("bfloat16", "sm_80")])
def test_minimum_without_a_pair_form_matches_numpy(dtype, arch, rng):
    func = _kernel("minimum", dtype)
    assert _report(func, "minimum", arch).plan["packed"] is None
    a, c, d = (runtime.random_array(SHAPE, dtype, rng) for _ in range(3))
    out = execute(func, [a, c, d, runtime.poison_like(a)], "sim", None, target=arch)[3]
    np.testing.assert_array_equal(runtime.bits(out), runtime.bits(np.minimum(a, c)))


def test_select_plan_reads_coordinates_through_an_index_operand():
    plan = _report(_kernel("select"), "select").plan
    # dst, true_value, false_value, then the row-major index of dst's region
    assert (plan["index_operand"], plan["vec"], plan["outer"], plan["packed"]) == (3, 1, 8, None)
    scalar = _report(_kernel("select", scalar=T.float32(0.0)), "select").plan
    assert scalar["index_operand"] == 2  # a scalar false_value is no operand


def test_select_source_is_one_conditional_per_element():
    source = toolchain.cuda_source(_kernel("select", "float16"), "sm_90a")
    assert "% 5) < 2) ? RA_ptr[" in source


def _select_reference(a, c, dst_poison, region, pred, scalar=None, true_scalar=None):
    """``dst[region] = where(pred(coordinates in the region), a, c)``; the rest poisoned."""
    out = dst_poison.copy()
    sub = tuple(slice(r.start, r.stop) for r in region)
    x = np.full(out[sub].shape, true_scalar, a.dtype) if true_scalar is not None else a[sub]
    y = np.full(out[sub].shape, scalar, a.dtype) if scalar is not None else c[sub]
    out[sub] = np.where(pred(*np.indices(out[sub].shape)), x, y)
    return out


WG3 = TileLayout(S[(2, 128, 4) : (4, 1 @ Axis.tid_in_wg, 1)])
SELECTS = [
    # dtype, layout, shape, scope, region, scalar (false), true scalar, pred
    ("float32", ROWS, SHAPE, "warp", None, None, None, mask),
    ("float16", ROWS, SHAPE, "warp", None, -np.inf, None, lambda i, j: j <= i % 8),
    ("bfloat16", ROWS, SHAPE, "warp", None, None, 0.5, mask),
    ("float32", ROWS, SHAPE, "warp", (slice(0, 32), slice(3, 7)), None, None, mask),
    (
        "float16",
        WG3,
        (2, 128, 4),
        "warpgroup",
        None,
        0.0,
        None,
        lambda b, i, j: (b + i + j) % 3 < 1,
    ),
]


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("dtype, layout, shape, scope, region, scalar, true_scalar, pred", SELECTS)
def test_select_matches_numpy(
    dtype, layout, shape, scope, region, scalar, true_scalar, pred, rng, where, gpu
):
    """Tensor or scalar on either side, a sub-region (coordinates count from its first
    element), three dimensions at warpgroup scope; a causal-mask-like -inf fill."""
    const = {
        k: None if v is None else tvm.tirx.const(v, dtype)
        for k, v in [("f", scalar), ("t", true_scalar)]
    }
    func = _catalog_kernel(
        "select",
        layout,
        shape,
        dtype,
        scope,
        scalar=const["f"],
        true_scalar=const["t"],
        pred=pred,
        region=region,
    )
    assert _report(func, "select").variant == "reg"
    a, c, d = (runtime.random_array(shape, dtype, rng) for _ in range(3))
    poison = runtime.poison_like(a)
    out = execute(func, [a, c, d, poison.copy()], where, gpu)[3]
    full = region or tuple(slice(0, e) for e in shape)
    want = _select_reference(a, c, poison, full, pred, scalar, true_scalar)
    np.testing.assert_array_equal(runtime.bits(out), runtime.bits(want))


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "int32"])
def test_memset_writes_only_its_region(dtype, rng, where, gpu):
    value = tvm.tirx.const(3, dtype)
    region = (slice(0, 32), slice(2, 6))
    func = _catalog_kernel("memset", ROWS, SHAPE, dtype, scalar=value, region=region)
    a, c, d = (runtime.random_array(SHAPE, dtype, rng) for _ in range(3))
    poison = runtime.poison_like(a)
    out = execute(func, [a, c, d, poison.copy()], where, gpu)[3]
    want = poison.copy()
    want[:, 2:6] = 3
    np.testing.assert_array_equal(runtime.bits(out), runtime.bits(want))


def _select_with_a_condition(dtype="float32"):
    """A select whose pred is a plain bool expression: TVM's builder always wraps a Python
    callable in a LambdaExpr, so the call is built from TVM's Select node directly."""
    from tvm.tirx.exec_scope import ExecScope
    from tvm.tirx.operator.tile_primitive.ops import Select
    from tvm.tirx.script.builder.tirx import f_insert

    def select(dst, true_value, false_value):
        cond = tvm.tirx.const(True, "bool")
        return f_insert(Select(dst, true_value, false_value, cond, scope=ExecScope("warp")))

    full = (slice(0, 32), slice(0, 8))

    # fmt: off
    @T.prim_func
    def elementwise(A_ptr: T.handle, B_ptr: T.handle):
        A = T.match_buffer(A_ptr, SHAPE, dtype)
        B = T.match_buffer(B_ptr, SHAPE, dtype)
        T.device_entry()
        T.cta_id([1])
        T.warp_id([1])
        T.lane_id([32])
        T.thread_id([32])
        RA = T.alloc_buffer(SHAPE, dtype, scope="local", layout=ROWS)
        RB = T.alloc_buffer(SHAPE, dtype, scope="local", layout=ROWS)
        Tx.warp.copy(RA[full], A[full])
        select(RB[full], RA[full], RA[full])
        Tx.warp.copy(B[full], RB[full])
    # fmt: on
    return elementwise


@pytest.mark.parametrize(
    "kernel, op, reason",
    [
        (
            _select_with_a_condition,
            "select",
            "select pred is a IntImm, needs a LambdaExpr over dst's 2 indices (lambda i, j: ...)",
        ),
        (
            lambda: _kernel("select", pred=lambda i: i < 3),
            "select",
            "select pred takes 1 indices, dst RB[0:32, 0:8] (local float32) has 2 dimensions",
        ),
        (
            lambda: _kernel("select", "float16", scalar=T.float32(0.0)),
            "select",
            "select false_value is float32 but dst is float16; every operand must have the "
            "dst dtype",
        ),
        (
            lambda: _kernel("memset", "float16", scalar=T.float32(1.5)),
            "memset",
            "memset value is float32 but dst is float16; every operand must have the dst dtype",
        ),
        (
            lambda: _kernel("minimum", "float16", scalar=T.float32(0.0)),
            "minimum",
            "minimum src2 is float32 but dst is float16",
        ),
    ],
)
def test_catalog_declines(kernel, op, reason):
    assert reason in _reason(kernel(), op)
