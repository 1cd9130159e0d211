"""TVM's copy names as aliases of ours (copy/tvm_names.py): ``dispatch="vec_auto"`` and
``"vec_16b"`` ... ``"vec_256b"`` are taken by our variants where the chosen plan is what
the name asks (one access of that width per thread), declined with the reason where it
is not (then TVM's variant of the name under the default pipeline, an error under the
strict one)."""

from __future__ import annotations

import numpy as np
import pytest
from tvm.script import tirx as T
from tvm.script.tirx import tile as Tx

import tirx_cuda_dispatch as tcd
from tirx_cuda_dispatch import registry, sim, toolchain


def thread_copy(dispatch: str, n: int = 8, start: int = 8, dtype: str = "float16"):
    """Each of 128 threads copies A[tid * start : tid * start + n] through registers into B
    (two thread-scope copies, both forced to ``dispatch``)."""

    # fmt: off
    @T.prim_func
    def kernel(A_ptr: T.handle, B_ptr: T.handle):
        A = T.match_buffer(A_ptr, (1024,), dtype)
        B = T.match_buffer(B_ptr, (1024,), dtype)
        T.device_entry()
        T.cta_id([1])
        tid = T.thread_id([128])
        R = T.alloc_buffer((n,), dtype, scope="local")
        Tx.copy(R[0:n], A[tid * start : tid * start + n], dispatch=dispatch)
        Tx.copy(B[tid * start : tid * start + n], R[0:n], dispatch=dispatch)
    # fmt: on
    return kernel


@pytest.mark.parametrize("name", ["vec_auto", "vec_128b"])
def test_a_tvm_name_our_plan_fits_is_ours(name):
    func = thread_copy(name)
    for report in tcd.explain(func):
        assert report.variant == "reg" and report.fallback is None
        assert report.plan_object.vec_bits == 128 and report.plan_object.outer == 1
    src = toolchain.cuda_source(func, pipeline=tcd.STRICT_PIPELINE)
    assert "tvm_builtin" not in src  # none of TVM's helpers: our access forms
    a = np.random.default_rng(1).standard_normal(1024).astype(np.float16)
    out = sim.run(func, [a, np.full_like(a, np.nan)], target="sm_90a")
    assert np.array_equal(out[1], a)


def test_a_width_our_plan_does_not_make_declines_with_the_reason():
    """8-byte aligned starts: ours moves each thread's 16 bytes as two 8-byte accesses, so
    vec_128b declines saying so; TVM's vec_128b takes it under the default pipeline (its
    semantics: the author vouches for the alignment), the strict one refuses it."""
    func = thread_copy("vec_128b", start=4)
    report = tcd.explain(func)[0]
    assert report.variant is None
    assert report.fallback == "falls back to TVM's built-in variant 'vec_128b'"
    reasons = {c.variant: c.reason for c in report.candidates}
    assert (
        "asks for one 16-byte access per thread; the region is 2 round(s) of 8-byte"
        in (reasons["reg"])
    )
    with pytest.raises(tcd.DispatchError, match="dispatch='vec_128b' was forced and declined"):
        toolchain.cuda_source(func, pipeline=tcd.STRICT_PIPELINE)
    # the control: vec_64b asks for what ours makes there
    assert tcd.explain(thread_copy("vec_64b", n=4, start=4))[0].variant == "reg"


def test_a_region_wider_than_the_name_declines():
    report = tcd.explain(thread_copy("vec_64b", n=8))[0]
    assert report.variant is None
    assert (
        "asks for one 8-byte access per thread"
        in dict((c.variant, c.reason) for c in report.candidates)["reg"]
    )


def test_an_alias_may_not_shadow_a_variant():
    with pytest.raises(ValueError, match="is a variant of 'copy': it cannot be an alias too"):
        registry.alias("copy", "reg", lambda plan: (True, None))
    assert "vec_256b" in registry.names_for("copy") and "reg" in registry.names_for("copy")


def test_vec_256b_is_one_v8_access_on_blackwell():
    """32 bytes a thread (8 float32) on sm_100a: one ld.global.v8 and one st.global.v8
    (a C vector of 32 bytes would compile to two 16-byte accesses); the simulator round
    trip and the SASS (one 256-bit LDG and STG per thread)."""
    func = thread_copy("vec_256b", dtype="float32")
    for report in tcd.explain(func, "sm_100a"):
        assert report.variant == "reg" and report.plan_object.vec_bits == 256
    src = toolchain.cuda_source(func, "sm_100a", tcd.STRICT_PIPELINE)
    assert "ld.global.v8.u32 {%0, %1, %2, %3, %4, %5, %6, %7}, [%8];" in src
    assert "st.global.v8.u32 [%0], {%1, %2, %3, %4, %5, %6, %7, %8};" in src
    ops = toolchain.opcodes(toolchain.kernel_sass(func, "sm_100a", tcd.STRICT_PIPELINE))
    assert ops.get("LDG.E.ENL2.256") == 1 and ops.get("STG.E.ENL2.256") == 1, ops
    a = np.random.default_rng(2).standard_normal(1024).astype(np.float32)
    out = sim.run(func, [a, np.full_like(a, np.nan)], target="sm_100a")
    assert np.array_equal(out[1], a)


def test_vec_256b_before_blackwell_declines_naming_the_target():
    """Control: on sm_90a the same copy is two 16-byte accesses, which vec_256b refuses."""
    report = tcd.explain(thread_copy("vec_256b", dtype="float32"), "sm_90a")[0]
    reason = dict((c.variant, c.reason) for c in report.candidates)["reg"]
    assert "2 round(s) of 16-byte accesses" in reason and "needs sm_100 or newer" in reason
