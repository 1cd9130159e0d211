"""gemm_async -> wgmma: plans (descriptors, accumulator registers), declines, the emitted
wgmma (CUDA text and SASS), and products on the GPU (and in the simulator where it runs
wgmma) against float64."""

from __future__ import annotations

import operator
import re
from types import SimpleNamespace

import ml_dtypes
import numpy as np
import pytest
from tvm import tirx
from tvm.script import tirx as T
from tvm.script.tirx import tile as Tx
from tvm.tirx.layout import ComposeLayout, S, TileLayout

import tirx_cuda_dispatch as tcd
from executors import execute
from tirx_cuda_dispatch import demos, runtime, sim, toolchain
from tirx_cuda_dispatch.gemm_async import wgmma
from tirx_cuda_dispatch.gemm_async.wgmma import WgmmaPlan
from tirx_cuda_dispatch.isa.wgmma import MatrixDescriptor
from tirx_cuda_dispatch.resources import Alignment, Completion

WHERE = ["sim", pytest.param("gpu", marks=pytest.mark.gpu)]


def _report(func, arch="sm_90a") -> tcd.CallReport:
    [report] = [r for r in tcd.explain(func, arch) if r.op == "gemm_async"]
    return report


def _plan(func, arch="sm_90a") -> WgmmaPlan:
    report = _report(func, arch)
    assert report.variant == "wgmma", report
    return report.plan_object


def _reason(func, arch="sm_90a") -> str:
    report = _report(func, arch)
    assert report.variant != "wgmma"
    [cand] = [c for c in report.candidates if c.variant == "wgmma"]
    return cand.reason


# -- plans ------------------------------------------------------------------------------------
def test_the_example_s_tiles_take_part_8f_s_descriptors():
    plan = _plan(demos.wgmma_gemm(128, 256, 64))
    assert plan.instruction == "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16"
    assert plan.count == 2 * 4
    a, b = plan.a, plan.b
    assert (a.major, a.swizzle, a.sbo) == ("K", "128B", 1024)
    assert (b.major, b.swizzle, b.lbo, b.sbo) == ("MN", "128B", 8192, 1024)
    assert a.starts == tuple(tuple(wg * 64 * 128 + kk * 32 for kk in range(4)) for wg in range(2))
    b0 = 128 * 64 * 2  # B follows A in the pool
    assert b.starts == (tuple(b0 + kk * 16 * 128 for kk in range(4)),)
    assert [len(r) for r in plan.c_registers] == [128, 128]
    assert plan.c_registers[1][0] == 128  # the second 64-row tile: the next 128 registers


def test_explain_shows_the_completion_contract():
    plan = _plan(demos.wgmma_gemm())
    [completion] = plan.resources()
    assert isinstance(completion, Completion) and "wgmma.wait_group" in str(completion)
    assert "wgmma.mma_async.sync.aligned.m64n128k16" in str(_report(demos.wgmma_gemm()))


def test_accum_keeps_scale_d_on():
    assert _plan(demos.wgmma_gemm(accum=True)).accum
    assert "C = A B" in _plan(demos.wgmma_gemm()).facts()["scale_d"]


# -- declines ---------------------------------------------------------------------------------
def test_declines_off_sm_90a():
    assert "needs sm_90a; target is sm_90" in _reason(demos.wgmma_gemm(), "sm_90")
    assert "needs sm_90a; target is sm_100a" in _reason(demos.wgmma_gemm(), "sm_100a")


def test_an_allocation_not_aligned_to_the_swizzle_is_raised_by_the_bridge():
    """A and B in a pool declared with align=64: the plan asks the bridge to raise the
    pool to the swizzle's period (both operands name it), and the lowered kernel's pool
    is declared so; the control: declared aligned, no such resource."""
    raised = [r for r in _plan(demos.wgmma_gemm(align=64)).resources() if isinstance(r, Alignment)]
    assert {(r.operand, r.allocation, r.align) for r in raised} == {
        ("A", "pool", 1024),
        ("B", "pool", 1024),
    }
    src = toolchain.cuda_source(demos.wgmma_gemm(align=64), "sm_90a", tcd.STRICT_PIPELINE)
    assert "extern __shared__ __align__(1024) half pool_ptr[];" in src
    plain = _plan(demos.wgmma_gemm()).resources()
    assert not [r for r in plain if isinstance(r, Alignment)]


def test_a_layout_no_descriptor_names_declines():
    """Negative control: B's rows not blocked (256-byte rows under a 128-byte swizzle)."""
    b = ComposeLayout(3, 3, 3, TileLayout(S[64, 128]))
    assert "no canonical wgmma layout" in _reason(demos.wgmma_gemm(b_layout=b))


def test_an_accumulator_not_in_the_fragment_declines():
    """Negative control: the mma.sync accumulator layout is no wgmma fragment."""
    from tirx_cuda_dispatch.gemm_async import wgmma

    bad = TileLayout(S[(64, 128) : (128, 1)])  # every element in one thread's registers
    with pytest.raises(tcd.errors.Decline, match="wgmma accumulator puts it in thread"):
        wgmma._c_registers(_FakeOperand(bad), 64, 128)


class _FakeOperand:
    """A register operand of a given layout (only what register_view reads)."""

    def __init__(self, layout):
        import tvm

        self.layout = layout
        self.buffer = tvm.tirx.decl_buffer((64, 128), "float32", scope="local")
        self.region = ((0, 64), (0, 128))
        self.role, self.name, self.scope, self.memory = "C", "C", "local", "local"
        self.dtype, self.elem_bits, self.shape, self.extents = "float32", 32, (64, 128), (64, 128)


# -- emitted code -----------------------------------------------------------------------------
def test_sass_has_hgmma_and_no_local_memory():
    ops = toolchain.opcodes(toolchain.kernel_sass(demos.wgmma_gemm(128, 256, 64), "sm_90a"))
    assert sum(v for k, v in ops.items() if k.startswith("HGMMA.64x256x16.F32")) == 8, ops
    assert not any(k.startswith(("LDL", "STL", "HMMA")) for k in ops), ops


def test_each_instruction_s_descriptors_cost_a_few_uniform_instructions():
    """The descriptors' low words are built once a call (shift, mask, LBO) and each
    instruction's is an add: between two HGMMA of a call the uniform datapath runs the
    adds and the moves of the constant high words, and the kernel's uniform instructions
    are fewer (the form that rebuilt each descriptor from its address, NVRTC 13: up to 29
    between two HGMMA, 62 in the kernel; this form 0-2 and 32). The second count does not
    depend on where ptxas schedules the rebuilds."""
    ops = toolchain.opcode_sequence(toolchain.kernel_sass(demos.wgmma_gemm(128, 256, 64), "sm_90a"))
    uniform = [op.startswith("U") for op in ops]
    at = [i for i, op in enumerate(ops) if op.startswith("HGMMA")]
    between = [sum(uniform[i + 1 : j]) for i, j in zip(at, at[1:], strict=False)]
    assert len(at) == 8 and max(between) <= 6, between
    assert sum(uniform) <= 44, sum(uniform)


_FOLD = {"Add": operator.add, "BitwiseOr": operator.or_, "BitwiseAnd": operator.and_,
         "RShift": operator.rshift}  # fmt: skip


def _fold(e) -> int:
    """The value of a constant descriptor expression (the analyzer folds no bitwise
    operation), wrapped to each node's unsigned type."""
    kind = type(e).__name__
    if kind == "IntImm":
        return int(e.value)
    bits = int(re.fullmatch(r"uint(\d+)", str(e.ty))[1])
    if kind == "Cast":
        return _fold(e.value) % (1 << bits)
    return _FOLD[kind](_fold(e.a), _fold(e.b)) % (1 << bits)


@pytest.mark.parametrize("swizzle", ["128B", "none"])
def test_each_descriptor_is_the_isa_encoding_of_its_address(swizzle):
    """One low word a call plus each instruction's start (:func:`wgmma._descriptor`) is
    the ISA's encoding of the address base + start, for bases anywhere in a CTA's shared
    memory (also not 16-byte aligned: the start field is the address in 16-byte units)."""
    d = SimpleNamespace(lbo=8192, sbo=1024, swizzle=swizzle)
    for base in (0, 16, 7, 0x1230, 0x2C330, 227 * 1024 - 4096):
        low = wgmma._descriptor_low(tirx.const(base, "uint32"), d)
        for start in (0, 16, 2048, 4080):
            want = MatrixDescriptor((base + start) >> 4 << 4, d.lbo, d.sbo, swizzle).encode()
            assert _fold(wgmma._descriptor(low, start, d)) == want, (base, start)
        # the control: the comparison tells one 16-byte unit of start apart
        assert _fold(wgmma._descriptor(low, start + 16, d)) != want, (base, start)
    # the form's limit, which no CTA reaches (228 KiB of shared memory on sm_90): at 256
    # KiB the start field would carry into the reserved bits above it, where the ISA's
    # encoding of that address wraps to 0
    low = wgmma._descriptor_low(tirx.const((1 << 18) - 16, "uint32"), d)
    assert _fold(wgmma._descriptor(low, 16, d)) & 0xFFFF == 1 << 14


# -- products ---------------------------------------------------------------------------------
CASES = [
    dict(m=64, n=128, k=64),
    dict(m=128, n=256, k=64),
    dict(m=64, n=64, k=128),
    dict(m=64, n=128, k=64, dtype="bfloat16"),
    dict(m=64, n=128, k=64, accum=True),
]


def _id(case):
    return "-".join(f"{k}{v}" for k, v in case.items())


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("case", CASES, ids=_id)
def test_product(case, rng, where, gpu):
    m, n, k = case["m"], case["n"], case["k"]
    dtype = case.get("dtype", "float16")
    a = runtime.random_array((m, k), dtype, rng)
    b = runtime.random_array((k, n), dtype, rng)
    d0 = rng.standard_normal((m, n)).astype(np.float32)
    d = d0 if case.get("accum") else np.full((m, n), np.nan, np.float32)
    out = execute(demos.wgmma_gemm(**case), [a, b, d], where, gpu)[2]
    want = a.astype(np.float64) @ b.astype(np.float64)
    if case.get("accum"):
        want += d0
    np.testing.assert_allclose(out, want, rtol=2e-3, atol=2e-3 * np.sqrt(k))


def test_a_missing_wait_names_the_wgmma_at_the_read():
    rng = np.random.default_rng(7)
    a = runtime.random_array((64, 64), "float16", rng)
    b = runtime.random_array((64, 128), "float16", rng)
    with pytest.raises(sim.SimError, match=r"while wgmma\.mma_async.* still in flight.*wait_group"):
        sim.run(demos.wgmma_gemm(wait=False), [a, b, np.zeros((64, 128), np.float32)])


def test_the_simulator_counts_the_instructions():
    rng = np.random.default_rng(8)
    a = runtime.random_array((128, 64), "float16", rng)
    b = runtime.random_array((64, 256), "float16", rng)
    out = sim.run(demos.wgmma_gemm(128, 256, 64), [a, b, np.zeros((128, 256), np.float32)])
    counts = out.counters.instructions
    assert counts["wgmma.mma_async.m64n256k16.f32.f16.f16"] == 8 * 4  # 8 per warp
    assert counts["wgmma.fence"] == 4 and counts["wgmma.wait_group"] == 4


# -- float8 -----------------------------------------------------------------------------------
F8 = ("float8_e4m3fn", "float8_e5m2")


def _f8(shape, dtype, rng) -> np.ndarray:
    """Random float8 values, none zero (an element lost or doubled shows)."""
    kind = getattr(ml_dtypes, dtype)
    mags = rng.uniform(0.25, 2.0, shape) * rng.choice([-1, 1], shape)
    return mags.astype(kind)


def test_a_float8_plan_takes_k32_steps_without_transposes():
    plan = _plan(demos.wgmma_gemm_f8(64, 256, 256, "float8_e4m3fn", "float8_e5m2"))
    assert plan.instruction == "wgmma.mma_async.sync.aligned.m64n256k32.f32.e4m3.e5m2"
    assert plan.count == 256 // 32 and plan.a.major == plan.b.major == "K"
    assert plan.facts()["ptx"].endswith("scale-d, 1, 1")  # no imm-trans on float8 lines


def test_a_float8_operand_not_k_major_declines_naming_the_layout():
    why = _reason(demos.wgmma_gemm_f8(64, 128, 128, b_major="MN"))
    assert "laid out MN-major; a float8 wgmma reads K-major operands only" in why


def test_float8_by_float16_declines():
    @T.prim_func
    def mixed(A_ptr: T.handle):
        T.match_buffer(A_ptr, (64, 64), "float16")
        T.device_entry()
        T.cta_id([1])
        T.warpgroup_id([1])
        T.thread_id([128])
        pool = T.alloc_buffer((64 * 64 * 3,), "uint8", scope="shared.dyn", align=1024)
        A_s = T.decl_buffer((64, 64), "float8_e4m3fn", pool.data, scope="shared.dyn")
        B_s = T.decl_buffer((64, 64), "float16", pool.data, elem_offset=2048, scope="shared.dyn")
        C = T.alloc_buffer((64, 64), "float32", scope="local",
                           layout=demos.wgmma_accumulator_layout(64, 1))  # fmt: skip
        Tx.wg.gemm_async(C[:, :], A_s[:, :], B_s[:, :], transA=False, transB=False)

    assert "float8 (e4m3, e5m2) by float8" in _reason(mixed)


def test_float8_sass_is_qgmma():
    ops = toolchain.opcodes(toolchain.kernel_sass(demos.wgmma_gemm_f8(64, 128, 256), "sm_90a"))
    assert ops["QGMMA.64x128x32.F32.E4M3.E4M3"] == 8, ops
    assert not any(k.startswith(("LDL", "STL", "HGMMA")) for k in ops), ops


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("a_dtype, b_dtype", [(a, b) for a in F8 for b in F8])
def test_float8_product(a_dtype, b_dtype, rng, where, gpu):
    """Every pairing of e4m3 and e5m2 against the float64 product of the same float8
    values (the products are exact in float32; the sums round)."""
    m, n, k = 64, 128, 256
    a, b = _f8((m, k), a_dtype, rng), _f8((n, k), b_dtype, rng)
    out = execute(demos.wgmma_gemm_f8(m, n, k, a_dtype, b_dtype), [a, b, np.full((m, n), np.nan, np.float32)], where, gpu)[2]  # fmt: skip
    want = a.astype(np.float64) @ b.astype(np.float64).T
    np.testing.assert_allclose(out, want, rtol=1e-3, atol=1e-3 * np.sqrt(k))


# -- A in registers (the register form) ------------------------------------------------------
def _b_layout(k: int, n: int):
    """B (k x n) N-major under the widest swizzle its rows fill (64 columns: 128 bytes)."""
    from tirx_cuda_dispatch.fuzz import wgmma_operand_layout

    return wgmma_operand_layout((k, n), 1, 128 if n % 64 == 0 else 2 * n, 2)


def _a_layout(swap: str):
    """The m64k32 A fragment with two of its digits' roles exchanged: ``pair`` puts the
    row half inside the column pair (registers 4 j + h + 2 e), ``thread`` exchanges the
    lane digits of rows and columns (rows on l % 4)."""
    from tvm.tirx.layout import tid_in_wg

    if swap == "pair":
        spec = S[
            (1, 4, 2, 8, 4, 4, 2) : (16, 32 @ tid_in_wg, 1, 4 @ tid_in_wg, 4, 1 @ tid_in_wg, 2)
        ]
    else:
        spec = S[
            (1, 4, 2, 8, 4, 4, 2) : (16, 32 @ tid_in_wg, 2, 1 @ tid_in_wg, 4, 8 @ tid_in_wg, 1)
        ]
    return TileLayout(spec)


def test_a_in_registers_is_the_register_form():
    plan = _plan(demos.wgmma_gemm_rs(128, 64, 32))
    assert plan.a_in_registers and plan.a is None and plan.count == 2 * 2
    # each K step's four .b32 registers: two fragment elements each, in A's storage order
    assert plan.a_registers == (((0, 1, 2, 3), (4, 5, 6, 7)), ((8, 9, 10, 11), (12, 13, 14, 15)))
    facts = plan.facts()
    assert facts["ptx"].endswith("{C}, {A}, descB, scale-d, 1, 1, 1")  # no imm-trans-a
    assert facts["A"].startswith("registers: 2 x 2 x 4 .b32")
    src = toolchain.cuda_source(demos.wgmma_gemm_rs(64, 64, 32), "sm_90a")
    assert "wgmma_f16_rs" in src and "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16" in src


@pytest.mark.parametrize("swap, words", [
    ("thread", "element (0, 2) is held by thread 8; the wgmma A fragment puts it in thread 1"),
    ("pair", "fragment elements 0 and 1 of K step 0 are its registers 0 and 2"),
])  # fmt: skip
def test_an_a_fragment_misplaced_declines_naming_the_element(swap, words):
    why = _reason(demos.wgmma_gemm_rs(64, 64, 32, a_layout=_a_layout(swap)))
    assert words in why, why


def test_a_register_a_the_form_does_not_take_declines():
    from tvm.tirx.layout import tid_in_wg  # noqa: F401

    @T.prim_func
    def float8_a(B_ptr: T.handle):
        T.match_buffer(B_ptr, (64, 64), "float8_e4m3fn")
        T.device_entry()
        T.cta_id([1])
        T.warpgroup_id([1])
        T.thread_id([128])
        pool = T.alloc_buffer((64 * 64,), "float8_e4m3fn", scope="shared.dyn", align=1024)
        B_s = T.decl_buffer(
            (64, 64),
            "float8_e4m3fn",
            pool.data,
            scope="shared.dyn",
            layout=ComposeLayout(4, 3, 3, TileLayout(S[(64, 64) : (64, 1)])),
        )
        A_r = T.alloc_buffer(
            (64, 64), "float8_e4m3fn", scope="local", layout=demos.wgmma_accumulator_layout(64, 1)
        )
        C = T.alloc_buffer((64, 64), "float32", scope="local",
                           layout=demos.wgmma_accumulator_layout(64, 1))  # fmt: skip
        Tx.wg.gemm_async(C[:, :], A_r[:, :], B_s[:, :], transA=False, transB=False)

    assert "the register form is built for float16 and bfloat16 A only" in _reason(float8_a)


RS_CASES = [
    (64, 64, 32, "float16", False),
    (128, 32, 64, "bfloat16", True),
    (64, 256, 16, "float16", False),
    (64, 128, 64, "bfloat16", False),
]


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("case", RS_CASES, ids=lambda c: "-".join(map(str, c)))
def test_register_form_product(case, rng, where, gpu):
    """A from registers: sm_90's summation bit for bit in the simulator and on the GPU
    (D poisoned first unless accumulated into)."""
    from tirx_cuda_dispatch import fuzz

    m, n, k, dtype, accum = case
    func = demos.wgmma_gemm_rs(m, n, k, dtype, accum, b_layout=_b_layout(k, n))
    a = runtime.random_array((m, k), dtype, rng)
    b = runtime.random_array((k, n), dtype, rng)
    d = runtime.random_array((m, n), "float32", rng)
    out = execute(func, [a, b, d if accum else runtime.poison_like(d)], where, gpu)
    want = fuzz._wgmma_chain(a, b, d if accum else None, (dtype, dtype), 16)
    assert np.array_equal(runtime.bits(out[2]), runtime.bits(want))


@pytest.mark.parametrize("clobber", [False, True], ids=["waited", "clobbered"])
def test_a_registers_written_before_the_wait_are_a_race(clobber, rng):
    """The register form's A stays the wgmma's until its group completes: the simulator
    names a write to A's registers before the wait; the control (no write) runs."""
    func = demos.wgmma_gemm_rs(64, 64, 32, clobber_a=clobber)
    args = [runtime.random_array(s, t, rng) for s, t in [((64, 32), "float16"),
            ((32, 64), "float16"), ((64, 64), "float32")]]  # fmt: skip
    if not clobber:
        sim.run(func, args, target="sm_90a")
        return
    with pytest.raises(
        sim.SimError, match=r"writes register A_r .* while wgmma\.mma_async.*the wgmma may see"
    ):
        sim.run(func, args, target="sm_90a")
