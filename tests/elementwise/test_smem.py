"""elementwise -> smem: elementwise ops over shared-memory tiles (plans, declines, code,
round trips against numpy and against TVM's built-in lowering)."""

from __future__ import annotations

import functools

import numpy as np
import pytest
import tvm
from tvm.backend.cuda.tile_primitive.tma_utils import SwizzleMode, mma_shared_layout
from tvm.script import tirx as T
from tvm.script.tirx import tile as Tx
from tvm.tirx.layout import S, TileLayout

import tirx_cuda_dispatch as tcd
from executors import WHERE, execute
from tirx_cuda_dispatch import demos, runtime, sim, toolchain
from tirx_cuda_dispatch.elementwise.ops import OPS
from tirx_cuda_dispatch.sim.errors import SimError

UNARY = sorted(op for op in OPS if OPS[op].family == "unary")
BINARY = sorted(op for op in OPS if OPS[op].family == "binary")
DTYPES = ["float32", "float16", "bfloat16"]
EXACT = {"add", "sub", "mul", "maximum", "minimum", "fdiv", "sqrt", "reciprocal"}
RTOL = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 1.6e-2}
NUMPY = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "maximum": np.maximum,
    "minimum": np.minimum,
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


def mask(i, j):
    """select's predicate in the tests: TIR over the LambdaExpr's variables, or numpy over
    index arrays (both rows and columns take both branches)."""
    return (i * 3 + j) % 5 < 2


def _program(op, shape, dtype="float32", scope="warp", threads=None, **kw):
    """demos' shared-memory round trip, or for the ops it does not build (the rest of
    TVM's catalog) :func:`_catalog_program`."""
    if op in demos.ELEMENTWISE_FAMILIES:
        return demos.smem_elementwise_roundtrip(op, shape, dtype, scope, threads, **kw)
    return _catalog_program(op, shape, dtype, scope, threads, **kw)


def _catalog_program(
    op,
    shape,
    dtype="float32",
    scope="warp",
    threads=None,
    shared_layout=None,
    c_shape=None,
    scalar=None,
    true_scalar=None,
    pred=mask,
    region=None,
):
    """``B = op(A, C)`` on shared tiles, as demos.smem_elementwise_roundtrip builds the other
    ops (arguments A, C, B): ``minimum(SB, SA, SC)``, ``memset(SB, scalar)``,
    ``select(SB, SA, SC, pred)``; ``scalar`` replaces C (select's false_value),
    ``true_scalar`` A. ``region`` (slices) narrows the call to part of the tiles; the
    rest of SB keeps B's poison."""
    threads = threads or {"warp": 32, "warpgroup": 128}[scope]
    warps = threads // 32
    with_wg = warps % 4 == 0
    ns = getattr(Tx, scope)
    copy, fn = ns.copy, getattr(ns, op)
    full = tuple(slice(0, e) for e in shape)
    s_layout = shared_layout if shared_layout is not None else TileLayout(S[shape])
    c_shape = c_shape or shape
    c_full = tuple(slice(0, e) for e in c_shape)
    part = region or full
    c_part = region or c_full

    # fmt: off
    @T.prim_func
    def smem_elementwise(A_ptr: T.handle, C_ptr: T.handle, B_ptr: T.handle):
        A = T.match_buffer(A_ptr, shape, dtype)
        C = T.match_buffer(C_ptr, c_shape, dtype)
        B = T.match_buffer(B_ptr, shape, dtype)
        T.device_entry()
        T.cta_id([1])
        if with_wg:
            T.warpgroup_id([warps // 4])
            T.warp_id_in_wg([4])
        T.warp_id([warps])
        T.lane_id([32])
        T.thread_id([threads])
        SA = T.alloc_buffer(shape, dtype, scope="shared", layout=s_layout)
        SC = T.alloc_buffer(c_shape, dtype, scope="shared", layout=TileLayout(S[c_shape]))
        SB = T.alloc_buffer(shape, dtype, scope="shared", layout=s_layout)
        copy(SA[full], A[full])
        copy(SC[c_full], C[c_full])
        copy(SB[full], B[full])  # poison: an op that writes nothing shows
        T.cuda.cta_sync()
        if op == "memset":
            fn(SB[part], scalar)
        elif op == "minimum":
            fn(SB[part], SA[part], SC[c_part] if scalar is None else scalar)
        elif true_scalar is not None:
            fn(SB[part], true_scalar, SC[c_part] if scalar is None else scalar, pred)
        else:
            fn(SB[part], SA[part], SC[c_part] if scalar is None else scalar, pred)
        T.cuda.cta_sync()
        copy(B[full], SB[full])
    # fmt: on
    return smem_elementwise


@functools.cache
def sim_runs_pair_min() -> bool:
    """Whether the simulator executes the ``min`` pair helper (``__hmin2``): sim/helpers.py
    lists the pairwise ops it runs; a missing one is a SimError naming it."""
    a = runtime.random_array((32, 8), "float16", np.random.default_rng(0))
    try:
        sim.run(_program("minimum", (32, 8), "float16"), [a, a, runtime.poison_like(a)])
    except SimError as err:
        if "no pairwise op 'min'" in str(err):
            return False
        raise
    return True


def _needs_pair_min(where, op, dtype):
    """Round trips of the min pair form (sm_90a: half and bfloat16 pairs) in the simulator
    wait for its ``min``."""
    pair = op == "minimum" and dtype in ("float16", "bfloat16")
    if where == "sim" and pair and not sim_runs_pair_min():
        pytest.xfail("the simulator has no pairwise 'min' (sim/helpers.py) yet")


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
    _needs_pair_min(where, op, dtype)
    func = _program(op, (32, 8), dtype)
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
    ("minimum", (5, 6), "float32", "warpgroup", None, None),
    ("minimum", (32, 8), "float32", "warp", None, (32, 1)),
    ("minimum", (48, 40), "bfloat16", "cta", 256, None),
]


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("op, shape, dtype, scope, threads, c_shape", SHAPES)
def test_scopes_odd_tiles_and_broadcasts(
    op, shape, dtype, scope, threads, c_shape, rng, where, gpu
):
    _needs_pair_min(where, op, dtype)
    func = _program(op, shape, dtype, scope, threads, c_shape=c_shape)
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


# -- minimum, memset, select: the rest of TVM's catalog (TVM lowers them nowhere on CUDA) ----
def test_minimum_half_pairs_in_shared_memory():
    func = _program("minimum", (32, 8), "float16")
    plan = _report(func, "minimum").plan
    assert (plan["vec"], plan["packed"]) == (8, "min_f16x2")
    ops = toolchain.opcodes(toolchain.kernel_sass(func, "sm_90a", tcd.STRICT_PIPELINE))
    assert ops["HMNMX2"] == 4  # 8 halves a thread: 4 pair minimums
    assert ops["LDS.128"] == 3 and ops["STS.128"] == 4
    assert not [k for k in ops if k.startswith(("LDL", "STL", "HMNMX "))]


def test_select_plan_reads_coordinates_through_an_index_operand():
    plan = _report(_program("select", (32, 8)), "select").plan
    # dst, true_value, false_value, then the row-major index of dst's region
    assert (plan["index_operand"], plan["vec"], plan["vec_bits"]) == (3, 4, [128, 128, 128])


def test_select_on_column_major_tiles_reads_one_element_a_step():
    """The index operand is row-major: where dst's contiguous run is a column, consecutive
    elements are not consecutive indices, so no vector fits (still correct)."""
    column = TileLayout(S[(32, 8) : (1, 32)])
    plan = _report(_program("select", (32, 8), shared_layout=column), "select").plan
    assert plan["vec"] == 1
    assert "innermost dimension is not contiguous" in plan["narrower_because"]


SWIZZLED = mma_shared_layout("float16", SwizzleMode.SWIZZLE_64B_ATOM, (32, 32))
SELECTS = [
    # shape, dtype, scope, threads, shared layout, region, scalar (false), true scalar, pred
    ((32, 8), "float32", "warp", None, None, None, None, None, mask),
    ((5, 6), "bfloat16", "warpgroup", None, None, None, 0.0, None, mask),
    ((32, 32), "float16", "warp", None, SWIZZLED, None, -np.inf, None, lambda i, j: j <= i),
    ((16, 32), "float16", "cta", 128, None, (slice(4, 12), slice(8, 24)), None, None, mask),
    (
        (2, 8, 16),
        "float32",
        "warp",
        None,
        None,
        None,
        None,
        1.5,
        lambda b, i, j: (b + i + j) % 3 < 1,
    ),
    ((48, 40), "float32", "cta", 256, None, None, None, None, mask),
]


def _select_reference(a, c, dst_poison, region, pred, scalar=None, true_scalar=None):
    """``dst[region] = where(pred(coordinates in the region), a, c)``; the rest poisoned."""
    out = dst_poison.copy()
    x = np.full(out[region].shape, true_scalar, a.dtype) if true_scalar is not None else a[region]
    y = np.full(out[region].shape, scalar, a.dtype) if scalar is not None else c[region]
    out[region] = np.where(pred(*np.indices(out[region].shape)), x, y)
    return out


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize(
    "shape, dtype, scope, threads, layout, region, scalar, true_scalar, pred", SELECTS
)
def test_select_matches_numpy(
    shape, dtype, scope, threads, layout, region, scalar, true_scalar, pred, rng, where, gpu
):
    """Tensor or scalar on either side, masked rounds, a swizzled tile, a sub-region
    (coordinates count from its first element), three dimensions, a causal -inf mask."""
    consts = [None if v is None else tvm.tirx.const(v, dtype) for v in (scalar, true_scalar)]
    func = _catalog_program(
        "select", shape, dtype, scope, threads, layout, None, *consts, pred, region
    )
    assert _report(func, "select").variant == "smem"
    a, c = (runtime.random_array(shape, dtype, rng) for _ in range(2))
    poison = runtime.poison_like(a)
    out = execute(func, [a, c, poison.copy()], where, gpu, tcd.STRICT_PIPELINE)[2]
    part = region or tuple(slice(0, e) for e in shape)
    want = _select_reference(a, c, poison, part, pred, scalar, true_scalar)
    np.testing.assert_array_equal(runtime.bits(out), runtime.bits(want))


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize(
    "shape, dtype, scope, threads, region",
    [
        ((32, 8), "float16", "warp", None, None),
        ((5, 6), "float32", "warpgroup", None, None),
        ((16, 32), "int32", "cta", 64, (slice(2, 14), slice(3, 29))),
    ],
)
def test_memset_matches_numpy(shape, dtype, scope, threads, region, rng, where, gpu):
    value = tvm.tirx.const(7, dtype)
    func = _catalog_program("memset", shape, dtype, scope, threads, scalar=value, region=region)
    assert _report(func, "memset").variant == "smem"
    a, c = (runtime.random_array(shape, dtype, rng) for _ in range(2))
    poison = runtime.poison_like(a)
    out = execute(func, [a, c, poison.copy()], where, gpu, tcd.STRICT_PIPELINE)[2]
    want = poison.copy()
    want[region or tuple(slice(0, e) for e in shape)] = 7
    np.testing.assert_array_equal(runtime.bits(out), runtime.bits(want))


@pytest.mark.parametrize(
    "func, op, reason",
    [
        (
            lambda: _catalog_program("select", (32, 8), "float16", scalar=T.float32(0.0)),
            "select",
            "select false_value is float32 but dst is float16",
        ),
        (
            lambda: _catalog_program("select", (32, 8), pred=lambda i, j, k: i < j),
            "select",
            "select pred takes 3 indices, dst SB[0:32, 0:8] (shared float32) has 2 dimensions",
        ),
        (
            lambda: _catalog_program("memset", (32, 8), "bfloat16", scalar=T.float32(1.0)),
            "memset",
            "memset value is float32 but dst is bfloat16",
        ),
    ],
)
def test_catalog_declines(func, op, reason):
    [reason_smem] = [c.reason for c in _report(func(), op).candidates if c.variant == "smem"]
    assert reason in reason_smem
