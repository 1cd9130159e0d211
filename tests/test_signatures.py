"""Every op of TIRx as data: names, kinds, accesses (signatures.py)."""

from __future__ import annotations

import pytest
import tvm

import tirx_cuda_dispatch as tcd
from tirx_cuda_dispatch.signatures import (
    READ,
    READ_WRITE,
    SIGNATURES,
    WRITE,
    signature,
    signature_or_positional,
)


def test_the_catalog_is_tvms():
    """Exactly the ops TVM 0.27 registers as ``tirx.tile.*`` (a newer TVM's new op shows)."""
    tvms = {
        n.removeprefix("tirx.tile.")
        for n in tvm.ir.Op.list_op_names()
        if n.startswith("tirx.tile.")
    }
    assert set(SIGNATURES) == tvms and len(tvms) == 30


def test_a_reductions_dst_is_read_written_under_accum():
    sig = signature("sum")
    dst = sig.params[0]
    assert sig.access(dst, [None, None, (-1,), True]) == READ_WRITE
    assert sig.access(dst, [None, None, (-1,), False]) == WRITE
    assert sig.access(sig.params[1], [None, None, (-1,), True]) == READ


def test_ops_with_several_outputs_name_them_all():
    outputs = [p.name for p in signature("binary_reduce").params if p.access == WRITE]
    assert outputs == ["binary_output", "reduce_output"]


def test_gemm_async_forms_are_told_apart_by_their_length():
    sig = signature("gemm_async")
    assert [p.name for p in sig.params_for(6)][3:] == ["transA", "transB", "accum"]
    assert [p.name for p in sig.params_for(8)][3:5] == ["SFA", "SFB"]


def test_an_unknown_op_is_an_error_naming_the_catalog():
    with pytest.raises(ValueError, match="not a tile-primitive op of TIRx; the ops are: add"):
        signature("sumx")
    with pytest.raises(ValueError, match="not a tile-primitive op"):
        tcd.variant("sumx", "mine")(lambda plan, call: None)
    # an op of a newer TVM still reads positionally
    assert [p.name for p in signature_or_positional("newop", 2).params] == ["arg0", "arg1"]
