"""gemm -> mma.m16n8k*: plans, declines, the SASS, and round trips (simulator and GPU).

The fragment layouts and the kernel are ``demos.mma_fragments`` / ``demos.mma_roundtrip``
(shared with the fuzzer), written from the PTX ISA's tables (lane = 4 g + t):
D/C[M, N] at M = g + 8 rM, N = 2 t + rN; A[M, K] at M = g + 8 rM, K = 2 t + p + 8 kHi;
B[K, N] at N = g, K = 2 t + p + 8 kHi. Tilings repeat the single-tile layout over the
operand (``tile_to``); transposed orientations swap the buffer's two axes.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from tvm.script import tirx as T
from tvm.script.tirx import tile as Tx
from tvm.tirx.layout import S, TileLayout

from executors import WHERE, execute
from tirx_cuda_dispatch import explain, toolchain
from tirx_cuda_dispatch.demos import MMA_A_K8_SWAPPED, MMA_ACC, mma_fragments, mma_roundtrip
from tirx_cuda_dispatch.isa.mma_fragments import MMA_INSTRUCTIONS


def _gemm_report(func, target="sm_90a"):
    return next(c for c in explain(func, target) if c.op == "gemm")


def _plan(func, target="sm_90a") -> dict:
    report = _gemm_report(func, target)
    assert report.variant == "mma.m16n8k*", report
    return report.plan


def _decline(func, target="sm_90a") -> str:
    report = _gemm_report(func, target)
    assert report.variant != "mma.m16n8k*"
    ours = [c for c in report.candidates if c.variant == "mma.m16n8k*"]
    return ours[0].reason


# -- the instruction records ------------------------------------------------------------------
@pytest.mark.parametrize("inst", MMA_INSTRUCTIONS, ids=lambda i: f"{i.shape}.{i.ab_dtype}")
def test_fragment_formulas_cover_each_tile_once(inst):
    lanes = np.arange(32)
    a = {inst.a_element(lane, w, h) for lane in lanes for w in range(inst.a_words) for h in (0, 1)}
    b = {inst.b_element(lane, w, h) for lane in lanes for w in range(inst.b_words) for h in (0, 1)}
    c = {inst.c_element(lane, r) for lane in lanes for r in range(inst.c_registers)}
    assert a == {(i, j) for i in range(inst.m) for j in range(inst.k)}
    assert b == {(i, j) for i in range(inst.k) for j in range(inst.n)}
    assert c == {(i, j) for i in range(inst.m) for j in range(inst.n)}


def test_fragment_formulas_agree_with_the_tvm_layouts():
    """The ISA records place each element where TVM's fragment layouts do (the layouts
    demos writes from the ISA's tables; a second derivation)."""
    inst = next(i for i in MMA_INSTRUCTIONS if i.k == 16 and i.ab_dtype == "float16")
    (d, a, b), _ = mma_fragments(1, 1, 1, 16)
    for lane in range(32):
        for w in range(inst.a_words):
            for h in (0, 1):
                row, col = inst.a_element(lane, w, h)
                got = a.apply(row, col, shape=[16, 16])
                assert int(got["laneid"]) == lane and int(got["m"]) == 2 * w + h
        for w in range(inst.b_words):
            for h in (0, 1):
                row, col = inst.b_element(lane, w, h)
                got = b.apply(row, col, shape=[16, 8])
                assert int(got["laneid"]) == lane and int(got["m"]) == 2 * w + h
        for r in range(inst.c_registers):
            got = d.apply(*inst.c_element(lane, r), shape=[16, 8])
            assert int(got["laneid"]) == lane and int(got["m"]) == r


# -- plans --------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "tiling,instr,count",
    [
        ((1, 1, 1, 16), "m16n8k16", 1),
        ((2, 3, 2, 16), "m16n8k16", 12),
        ((1, 1, 1, 8), "m16n8k8", 1),
        ((1, 2, 3, 8), "m16n8k8", 6),
        ((2, 1, 2, 8), "m16n8k16", 2),  # two k8 tiles side by side are one k16 tile
    ],
)
def test_plan_picks_the_widest_k_the_layouts_fit(tiling, instr, count):
    plan = _plan(mma_roundtrip(*tiling))
    assert instr in plan["instruction"] and plan["instructions"] == count


@pytest.mark.parametrize("ta,tb", [(False, True), (True, False), (True, True)])
def test_plan_takes_transposed_orientations(ta, tb):
    plan = _plan(mma_roundtrip(2, 2, 2, ta=ta, tb=tb))
    assert plan["instructions"] == 8


@pytest.mark.parametrize(
    "alpha,beta,c_is_d,init,epilogue",
    [
        (1.0, 0.0, False, "zero", "none"),
        (1.0, 1.0, False, "C", "none"),
        (1.0, 1.0, True, "D", "none"),
        (1.0, 0.5, False, "beta*C", "none"),
        (2.0, 0.5, False, "zero", "D = 2.0 D + 0.5 C"),
        (2.0, 0.0, True, "zero", "D = 2.0 D + 0.0 C"),
    ],
)
def test_plan_alpha_beta(alpha, beta, c_is_d, init, epilogue):
    plan = _plan(mma_roundtrip(1, 2, 1, alpha=alpha, beta=beta, c_is_d=c_is_d))
    assert plan["D init"] == init and plan["epilogue"] == epilogue


def test_bfloat16_plan():
    assert ".bf16.bf16." in _plan(mma_roundtrip(1, 1, 2, dtype="bfloat16"))["instruction"]


# -- declines -------------------------------------------------------------------------------------
def test_declines_a_layout_that_is_not_a_fragment():
    assert _plan(mma_roundtrip(1, 1, 1, 8))  # the control: the ISA's layout is taken
    why = _decline(mma_roundtrip(1, 1, 1, 8, a_layout=MMA_A_K8_SWAPPED))
    assert "A A" in why and "lane" in why


def test_declines_alpha_over_c_in_place():
    why = _decline(mma_roundtrip(1, 1, 1, alpha=2.0, beta=1.0, c_is_d=True))
    assert "C is D" in why and "alpha" in why


def test_declines_bfloat16_before_sm80():
    why = _decline(mma_roundtrip(1, 1, 1, 8, dtype="bfloat16"), target="sm_75")
    assert "sm_80" in why


def test_float16_k8_on_sm75_and_not_k16():
    plan = _plan(mma_roundtrip(1, 1, 2, 8), target="sm_75")
    assert "m16n8k8" in plan["instruction"] and plan["instructions"] == 2


def test_declines_a_narrowed_warp():
    why = _decline(mma_roundtrip(1, 1, 1, lanes_guard=True))
    assert "narrowed" in why or "lane" in why


def test_declines_wrong_dtypes():
    why = _decline(mma_roundtrip(1, 1, 1, dtype="float32"))
    assert "float16" in why and "A" in why


def _one_tile_kernel(a_scope: str = "local", d_cols: int = 8):
    """One m16n8k16 tile, D accumulated in place: A in ``a_scope`` (shared: a plain
    row-major tile), D ``16 x d_cols``."""
    (_, al, bl), _ = mma_fragments(1, 1, 1, 16)
    a_layout = TileLayout(S[16, 16]) if a_scope == "shared" else al
    d_layout = MMA_ACC.tile_to([16, d_cols], [16, 8])

    @T.prim_func
    def kernel():
        T.device_entry()
        T.cta_id([1])
        T.warp_id([1])
        T.lane_id([32])
        A = T.alloc_buffer((16, 16), "float16", scope=a_scope, layout=a_layout)
        B = T.alloc_buffer((16, 8), "float16", scope="local", layout=bl)
        D = T.alloc_buffer((16, d_cols), "float32", scope="local", layout=d_layout)
        Tx.warp.gemm(D, A, B, D, transpose_A=False, transpose_B=False, alpha=1.0, beta=0.0)

    return kernel


def test_declines_a_shared_operand_with_what_to_do():
    why = _decline(_one_tile_kernel(a_scope="shared"))
    assert "A A" in why and "shared" in why and "ldmatrix" in why


def test_declines_a_d_of_another_shape():
    assert _plan(_one_tile_kernel())  # the control: the 16x8 D is taken
    why = _decline(_one_tile_kernel(d_cols=16))
    assert "16x16" in why and "16x8" in why


# -- emitted code ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "tiling,dtype,opcode,count",
    [
        ((2, 3, 2, 16), "float16", "HMMA.16816.F32", 12),
        ((1, 2, 1, 16), "bfloat16", "HMMA.16816.F32.BF16", 2),
        ((1, 1, 3, 8), "float16", "HMMA.1688.F32", 3),
    ],
)
def test_sass_one_hmma_per_instruction_and_no_local_memory(tiling, dtype, opcode, count):
    ops = toolchain.opcodes(toolchain.kernel_sass(mma_roundtrip(*tiling, dtype=dtype), "sm_90a"))
    assert ops[opcode] == count
    assert not [op for op in ops if op.startswith(("LDL", "STL"))]


@pytest.mark.parametrize("alpha, fused", [(-1.0760693550109863, True), (1.0, False)])
def test_epilogue_fuses_alpha_d_explicitly(alpha, fused):
    """``alpha D + beta C`` is ``__fmaf_rn(alpha, D, beta C)``: left as two products and a
    sum, nvcc chose to fuse ``beta C`` instead for a negative alpha (the GPU differed from
    the simulator on 40 of 2,400 fuzzed programs, H200). The control: alpha 1 has no
    epilogue."""
    src = toolchain.cuda_source(mma_roundtrip(1, 2, 1, alpha=alpha, beta=0.5), "sm_90a")
    assert ("__fmaf_rn(" in src) == fused


# -- round trips ----------------------------------------------------------------------------------
def _reference(a, b, c, ta, tb, alpha, beta):
    a64 = a.astype(np.float64).T if ta else a.astype(np.float64)
    b64 = b.astype(np.float64).T if tb else b.astype(np.float64)
    exact = alpha * (a64 @ b64) + beta * c.astype(np.float64)
    scale = abs(alpha) * (np.abs(a64) @ np.abs(b64)) + abs(beta) * np.abs(c.astype(np.float64))
    return exact, scale


def _inputs(rng, m, n, k, ta, tb, dtype):
    np_dtype = ml_dtypes.bfloat16 if dtype == "bfloat16" else np.dtype(dtype)
    a = rng.uniform(-2, 2, (k, m) if ta else (m, k)).astype(np_dtype)
    b = rng.uniform(-2, 2, (n, k) if tb else (k, n)).astype(np_dtype)
    c = rng.uniform(-4, 4, (m, n)).astype(np.float32)
    return a, b, c


CASES = [
    # (tiling, dtype, ta, tb, alpha, beta, c_is_d)
    ((2, 3, 2, 16), "float16", False, False, 1.0, 1.0, False),
    ((1, 2, 3, 8), "float16", False, False, 1.0, 0.0, False),
    ((1, 1, 2, 16), "bfloat16", False, False, 1.0, 1.0, True),
    ((2, 2, 1, 16), "float16", True, True, 1.0, 0.5, False),
    ((1, 2, 2, 16), "bfloat16", True, False, 2.0, -0.5, False),
    ((2, 1, 1, 16), "float16", False, True, -1.5, 0.0, True),
]


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize(
    "case",
    CASES,
    ids=lambda c: "-".join(map(str, c[0])) + f"-{c[1]}-{c[2]}{c[3]}-{c[4]}-{c[5]}-{c[6]}",
)
def test_roundtrip_within_the_accumulation_bound(case, where, rng, gpu):
    tiling, dtype, ta, tb, alpha, beta, c_is_d = case
    func = mma_roundtrip(*tiling, dtype=dtype, ta=ta, tb=tb, alpha=alpha, beta=beta, c_is_d=c_is_d)
    m, n, k = 16 * tiling[0], 8 * tiling[1], tiling[3] * tiling[2]
    a, b, c = _inputs(rng, m, n, k, ta, tb, dtype)
    poison = np.full((m, n), np.nan, dtype=np.float32)
    out = execute(func, [a, b, c, poison], where, gpu)[3]
    exact, scale = _reference(a, b, c, ta, tb, alpha, beta)
    steps = k // tiling[3] + 2  # one rounding per instruction, the init and the epilogue
    bound = steps * 2.0**-23 * scale + 1e-30
    assert np.isfinite(out).all()
    assert (np.abs(out - exact) <= bound).all(), np.max(np.abs(out - exact) / scale)
