"""elementwise -> reg, ``exp2(..., ex2_emulation=k)``: one element in k of each thread's
bundle computed on the FMA pipe (a polynomial) instead of MUFU.EX2: the plan's fact, its
declines, the SASS, and the values (simulator and GPU) against float64."""

from __future__ import annotations

import numpy as np
import pytest
from tvm.script import tirx as T
from tvm.script.tirx import tile as Tx

import tirx_cuda_dispatch as tcd
from executors import WHERE, execute
from tirx_cuda_dispatch import fragments, toolchain
from tirx_cuda_dispatch.elementwise.reg import EX2_POLY_ERROR

SCALE = 1.5
MUFU_ERROR = 1e-5  # the simulator's exp2 (float32 of the exact value, x rounded first)
TINY = 2.0**-126  # the least normal float32


def ex2_kernel(emulate=None, op="exp2", dtype="float32"):
    """A 64 x 128 wgmma accumulator tile (64 floats a thread) from A, ``2^(1.5 a)`` in
    place, to B (arguments A, B)."""
    acc = fragments.wgmma_accumulator_layout(128, 1)
    config = {} if emulate is None else {"ex2_emulation": emulate}
    fn = getattr(Tx.wg, op)

    # fmt: off
    @T.prim_func
    def kernel(A_ptr: T.handle, B_ptr: T.handle):
        A = T.match_buffer(A_ptr, (64, 128), dtype)
        B = T.match_buffer(B_ptr, (64, 128), dtype)
        T.device_entry()
        T.cta_id([1])
        T.warpgroup_id([1])
        T.thread_id_in_wg([128])
        S_r = T.alloc_buffer((64, 128), dtype, scope="local", layout=acc)
        Tx.wg.copy(S_r[:, :], A[:, :])
        fn(S_r[:, :], S_r[:, :], scale=T.float32(SCALE) if dtype == "float32" else None,
           **config)
        Tx.wg.copy(B[:, :], S_r[:, :])
    # fmt: on
    return kernel


def _report(func, op="exp2"):
    [report] = [r for r in tcd.explain(func, "sm_90a") if r.op == op]
    return report


def _inputs(rng):
    a = rng.uniform(-40, 3, (64, 128)).astype(np.float32)
    a[0, :4] = [-np.inf, 0.0, -200.0, -127.0 / SCALE]  # 0, 1, 0, 2^-127
    a[0, 4:7] = [np.inf, 200.0, 128.5 / SCALE]  # +inf: past float32's 2^128
    return a


def _relative_errors(out, a):
    """|out - 2^x| / 2^x where 2^x is a normal float32; below (flushed to zero under fast
    math) out must be below 2^-126 too (error 0, else 1)."""
    with np.errstate(over="ignore", invalid="ignore"):
        ref = np.exp2(a.astype(np.float64) * SCALE)
        huge = ref >= 2.0**128  # +inf in float32
        normal = (ref >= TINY) & ~huge
        rel = np.abs(out - ref) / np.where(normal, ref, 1)
    flushed = (np.abs(out) >= TINY).astype(np.float64)
    return np.where(normal, rel, np.where(huge, (out != np.inf).astype(np.float64), flushed))


def test_the_plan_names_the_share_and_the_error():
    facts = _report(ex2_kernel(4)).plan
    assert "one element in 4" in facts["ex2_emulation"] and "FMA pipe" in facts["ex2_emulation"]
    assert "ex2_emulation" not in _report(ex2_kernel()).plan  # control


@pytest.mark.parametrize(
    "emulate, op, dtype, why",
    [
        (4, "exp", "float32", "ex2_emulation=4 is exp2's"),
        (0, "exp2", "float32", "write a constant k >= 1"),
        (4, "exp2", "float16", "computes in float32"),
    ],
)
def test_what_it_cannot_emulate_declines(emulate, op, dtype, why):
    report = _report(ex2_kernel(emulate, op, dtype), op)
    [reg] = [c for c in report.candidates if c.variant == "reg"]
    assert not reg.accepted and why in reg.reason


def _mufu_ex2(func) -> int:
    sass = toolchain.kernel_sass(func, "sm_90a", pipeline=tcd.STRICT_PIPELINE)
    return sum("MUFU.EX2" in line for line in sass.splitlines())


def test_the_sass_has_one_mufu_fewer_for_every_emulated_element():
    assert _mufu_ex2(ex2_kernel()) == 64  # control: one MUFU.EX2 an element (fast math)
    assert _mufu_ex2(ex2_kernel(4)) == 48
    assert _mufu_ex2(ex2_kernel(1)) == 0


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("emulate", [1, 4])
def test_values_are_within_the_polynomials_error(emulate, rng, where, gpu):
    """Every element within the polynomial's bound of float64's 2^x (2^0 exactly 1,
    -inf and below -127 exactly 0); in the simulator, whose exp2 is float32's exact
    value, the emulated elements (every k-th of a thread's bundle) differ from it."""
    a = _inputs(rng)
    out = execute(ex2_kernel(emulate), [a, np.full_like(a, np.nan)], where, gpu)[1]
    errors = _relative_errors(out, a)
    assert errors.max() <= EX2_POLY_ERROR, errors.max()
    assert out[0, 0] == 0 and out[0, 1] == 1 and out[0, 2] == 0
    assert (out[0, 4:7] == np.inf).all()  # as MUFU: +inf, not a wrapped exponent
    if where == "sim":
        plain = execute(ex2_kernel(), [a, np.full_like(a, np.nan)], "sim", None)[1]
        assert _relative_errors(plain, a).max() <= MUFU_ERROR  # control: no polynomial
        share = (out != plain).mean()  # the polynomial's elements
        assert 0.9 / emulate < share <= 1 / emulate, share


def test_the_shared_memory_variant_declines_it_instead_of_dropping_it():
    """Control of silence: exp2 over a shared tile with ex2_emulation= is not lowered by
    elementwise -> smem without the emulation; it declines naming the key."""

    # fmt: off
    @T.prim_func
    def kernel(A_ptr: T.handle):
        A = T.match_buffer(A_ptr, (64, 64), "float32")
        T.device_entry()
        T.cta_id([1])
        T.thread_id([128])
        S = T.alloc_buffer((64, 64), "float32", scope="shared")
        Tx.cta.copy(S[:, :], A[:, :])
        Tx.cta.exp2(S[:, :], S[:, :], ex2_emulation=4)
        Tx.cta.copy(A[:, :], S[:, :])
    # fmt: on

    [smem] = [c for c in _report(kernel).candidates if c.variant == "smem"]
    assert not smem.accepted and "ex2_emulation= is the register variant's" in smem.reason
