"""The rules every reduction call meets (reduction/ops.py): axes, the reduced shape, dtypes,
config; each decline names the operand and the rule, and each has a control that passes."""

from __future__ import annotations

import pytest
from tvm.tirx.layout import S, TileLayout

import tirx_cuda_dispatch as tcd
from tirx_cuda_dispatch import demos
from tirx_cuda_dispatch.reduction.ops import REDUCERS, reduce_shape


def _report(kernel, op="sum"):
    return next(r for r in tcd.explain(kernel) if r.op == op)


def _reason(report, variant="shared"):
    return next(c.reason for c in report.candidates if c.variant == variant)


@pytest.mark.parametrize(
    "src, dst, axes, dims, kept",
    [
        ((4, 256), (4,), (1,), (0, None), ()),
        ((4, 256), (4, 1), (1,), (0, 1), ()),
        ((32, 32), (32,), (0,), (None, 0), ()),
        ((8, 16, 2, 22), (8, 16), (2, 3), (0, 1, None, None), ()),
        ((4, 8, 6), (4, 6), (1,), (0, None, 1), ()),
        ((16, 128), (16, 4), (1,), (0, 1), ((1, 4),)),
        ((1, 8), (1,), (1,), (0, None), ()),
    ],
)
def test_reduce_shape_maps_dst_dims(src, dst, axes, dims, kept):
    shape = reduce_shape(src, dst, axes)
    assert not isinstance(shape, str), shape
    assert shape.dst_dims == dims and shape.kept == kept


@pytest.mark.parametrize(
    "src, dst, axes",
    [((4, 256), (256,), (1,)), ((4, 256), (4, 2, 1), (1,)), ((4, 8), (4, 3), (1,))],
)
def test_reduce_shape_refuses_other_shapes_naming_the_one_needed(src, dst, axes):
    why = reduce_shape(src, dst, axes)
    assert isinstance(why, str) and "not the reduced shape" in why
    assert str([src[i] for i in range(len(src)) if i not in axes]) in why


def test_axis_out_of_range_is_declined_by_both_variants():
    k = demos.shared_reduction("sum", (4, 8), (2,), (4,))
    report = _report(k)
    assert report.variant is None
    why = _reason(report)
    assert "axis 2 is out of range for src A_s with 2 dimensions" in why
    assert "axes run from -2 to 1" in why
    control = _report(demos.shared_reduction("sum", (4, 8), (-1,), (4,)))
    assert control.variant == "shared"


def test_repeated_axis_is_declined():
    report = _report(demos.shared_reduction("sum", (4, 8, 2), (1, -2), (4,)))
    assert "name dimension 1 twice" in _reason(report)


def test_dst_of_the_wrong_shape_is_declined_with_the_shape_needed():
    report = _report(demos.shared_reduction("max", (4, 8), (1,), (8,)), "max")
    why = _reason(report)
    assert "dst extents [8] are not the reduced shape" in why and "[4]" in why
    assert report.error is not None  # nothing can lower it: our error, TVM's reasons


@pytest.mark.parametrize(
    "dtype, dst_dtype, ok",
    [
        ("float16", "float32", True),
        ("bfloat16", "float32", True),
        ("float32", "float16", False),
        ("float16", "bfloat16", False),
        ("int8", "int8", False),
    ],
)
def test_dtype_rule(dtype, dst_dtype, ok):
    report = _report(demos.shared_reduction("sum", (4, 64), (1,), (4,), dtype, dst_dtype))
    assert (report.variant == "shared") is ok, _reason(report)
    if not ok:
        why = _reason(report)
        assert "dst B_s is" in why or "src A_s is int8" in why


def test_explain_shows_the_arguments_the_accumulation_and_the_order():
    report = _report(demos.shared_reduction("sum", (4, 256), (-1,), (4,), "bfloat16", "float32"))
    text = str(report)
    assert "args: axes=(-1,), accum=False" in text
    assert report.plan["accumulate"] == "bfloat16 -> float32 -> float32"
    assert "shfl_xor" in report.plan["order"]


def test_reducers_identities_are_neutral():
    import numpy as np

    x = np.array([-0.0, 0.0, 1.5, -np.inf, np.inf], dtype=np.float32)
    for name, red in REDUCERS.items():
        ident = red.identity_value("float32")
        same = red.numpy(np.full_like(x, ident), x)
        np.testing.assert_array_equal(same.view(np.uint32), x.view(np.uint32), err_msg=name)


def test_unknown_config_key_is_declined():
    from tvm.script import tirx as T
    from tvm.script.tirx import tile as Tx

    @T.prim_func
    def kernel(A_ptr: T.handle, B_ptr: T.handle):
        A = T.match_buffer(A_ptr, (4, 8), "float32")
        B = T.match_buffer(B_ptr, (4,), "float32")
        T.device_entry()
        T.cta_id([1])
        T.thread_id([32])
        A_s = T.alloc_buffer((4, 8), "float32", scope="shared", layout=TileLayout(S[(4, 8)]))
        B_s = T.alloc_buffer((4,), "float32", scope="shared", layout=TileLayout(S[4]))
        Tx.cta.copy(A_s[:, :], A[:, :])
        T.cuda.cta_sync()
        Tx.cta.sum(B_s[:], A_s[:, :], axes=[-1], chunk=4)
        T.cuda.cta_sync()
        Tx.cta.copy(B[:], B_s[:])

    report = _report(kernel)
    assert "config chunk has no meaning for a reduction" in _reason(report)
