"""What TVM's built-in variants would do with a call ours decline, and one failure channel
for a call nobody can lower."""

from __future__ import annotations

import pytest
import tvm
from tvm.script import tirx as T
from tvm.script.tirx import tile as Tx
from tvm.tirx.layout import S, TileLayout

import tirx_cuda_dispatch as tcd
from kernels import warp_g2s
from tirx_cuda_dispatch import DispatchError

TARGET = tvm.target.Target({"kind": "cuda", "arch": "sm_90a"})
PIPELINES = ["tirx_cuda_dispatch", "tirx_cuda_dispatch.strict"]


def async_copy():
    """A cp.async copy global -> shared with a config key TVM 0.27 ignores: ours decline the
    unknown key, TVM's 'ldgsts' variant takes the call."""

    @T.prim_func
    def kernel(A_ptr: T.handle):
        A = T.match_buffer(A_ptr, (32, 32), "float32")
        T.device_entry()
        T.cta_id([1])
        T.warp_id([4])
        T.lane_id([32])
        T.thread_id([128])
        A_s = T.alloc_buffer((32, 32), "float32", scope="shared", layout=TileLayout(S[(32, 32)]))
        Tx.cta.copy_async(A_s[:, :], A[:, :], evict="first")

    return kernel


def test_explain_names_the_builtin_variant_that_takes_the_call():
    [report] = tcd.explain(async_copy())
    assert report.variant is None and report.error is None
    assert report.fallback == "falls back to TVM's built-in variant 'ldgsts'"
    assert not report.scalar_fallback
    assert "variant: none of ours: falls back to TVM's built-in variant 'ldgsts'" in str(report)


def test_explain_says_loudly_when_the_fallback_is_the_scalar_copy():
    # int4 elements: our variants decline (sub-byte), and TVM copies the 5x7 tile with one thread
    [report] = tcd.explain(warp_g2s(5, 7, "int4"))
    assert report.scalar_fallback
    assert "SCALAR single-thread copy (one thread copies 35 elements one at a time)" in str(report)
    assert str(report).count("WARNING") == 1
    # negative control: a tile our variant takes has no fallback and no warning
    [report] = tcd.explain(warp_g2s(32, 32))
    assert report.fallback is None and "WARNING" not in str(report)


@pytest.mark.parametrize("pipeline", PIPELINES)
def test_a_call_nobody_can_lower_raises_our_error(pipeline):
    with pytest.raises(DispatchError) as err:
        tvm.compile(warp_g2s(32, 32, "float32", "float16"), target=TARGET, tir_pipeline=pipeline)
    message = str(err.value)
    assert "dtype mismatch: dst A_s is float16, src A is float32" in message  # our reasons
    assert "TVM's built-in variants cannot lower it either" in message  # and TVM's, one line each
    assert "fallback       validate_copy_op failed" in message
    assert "+---" not in message and "Traceback" not in message  # no dispatch table, no frames


def test_explain_reports_a_call_nobody_can_lower():
    [report] = tcd.explain(warp_g2s(32, 32, "float32", "float16"))
    assert report.variant is None
    assert report.error.startswith("nothing can lower this call")
    assert "ERROR when lowered: nothing can lower this call" in str(report)


def test_a_forced_variant_that_declines_is_reported_as_the_error_it_becomes():
    func = warp_g2s(32, 32, "float32", "float16", dispatch="gmem_smem")
    [report] = tcd.explain(func)
    assert report.error.startswith("dispatch='gmem_smem' was forced and declined")
    assert report.fallback is None  # a forced call does not fall back
    with pytest.raises(DispatchError, match="dispatch='gmem_smem' was forced and declined"):
        tvm.compile(func, target=TARGET, tir_pipeline="tirx_cuda_dispatch")


@pytest.mark.parametrize("pipeline", PIPELINES)
def test_a_non_cuda_target_gets_our_declines_and_our_error(pipeline):
    llvm = tvm.target.Target("llvm")
    [report] = tcd.explain(warp_g2s(32, 32), llvm)
    assert {c.reason for c in report.candidates} == {"target is llvm, needs cuda"}
    assert report.error.startswith("nothing can lower this call for target llvm")
    with pytest.raises(DispatchError, match="target is llvm, needs cuda"):
        tvm.compile(warp_g2s(32, 32), target=llvm, tir_pipeline=pipeline)


def test_candidates_are_tuples():
    [report] = tcd.explain(warp_g2s(32, 32))
    first = report.candidates[0]
    assert first[0] == "gmem_smem" and first[1] is True and first[2] is None
    variant, accepted, reason = first
    assert (variant, accepted, reason) == tuple(first)


def test_explain_lists_a_scalar_operand():
    @T.prim_func
    def kernel(A_ptr: T.handle):
        A = T.match_buffer(A_ptr, (32, 8), "float32")
        T.device_entry()
        T.cta_id([1])
        T.warp_id([1])
        T.lane_id([32])
        T.thread_id([32])
        s = T.alloc_buffer((1,), "float32", scope="local")
        a = T.alloc_buffer((32, 8), "float32", scope="local", layout=TileLayout(S[(32, 8)]))
        Tx.warp.copy(a[:, :], A[:, :])
        Tx.warp.mul(a[:, :], a[:, :], s[0])

    report = tcd.explain(kernel, "sm_100a")[1]
    assert report.operands[-1] == {
        "role": "src2",
        "access": "read",
        "buffer": None,
        "scope": "scalar",
        "dtype": "float32",
        "region": "s[0]",
        "layout": "-",
    }


def test_explain_lists_constant_operands_in_argument_order():
    @T.prim_func
    def kernel(A_ptr: T.handle):
        A = T.match_buffer(A_ptr, (16, 16), "float16")
        T.device_entry()
        T.cta_id([1])
        T.warp_id([1])
        T.lane_id([32])
        T.thread_id([32])
        s = T.alloc_buffer((16, 16), "float16", scope="shared", layout=TileLayout(S[(16, 16)]))
        Tx.warp.copy(s[:, :], A[:, :])
        Tx.warp.add(s[:, :], T.float16(3.0), s[:, :])

    report = tcd.explain(kernel)[1]
    assert [(o["role"], o["scope"], o["region"]) for o in report.operands] == [
        ("dst", "shared", "s[0:16, 0:16]"),
        ("src", "scalar", "T.float16(3.0)"),
        ("src2", "shared", "s[0:16, 0:16]"),
    ]
    assert "src  r  T.float16(3.0)" in str(report)
