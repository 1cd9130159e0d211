"""copy_async -> dsmem: a CTA's shared memory into another CTA's of its cluster
(``cp.async.bulk.shared::cluster.shared::cta``), the runs planned from both layouts, the
declines, the emitted code, and round trips in the simulator (which runs the cluster's
CTAs together) and on the GPU, with the missing fence / expect-tx / source-reuse
controls."""

from __future__ import annotations

import math

import numpy as np
import pytest
from tvm.script import tirx as T
from tvm.script.tirx import tile as Tx
from tvm.tirx.layout import S, TileLayout

import tirx_cuda_dispatch as tcd
from executors import execute
from tirx_cuda_dispatch import sim, toolchain
from tirx_cuda_dispatch.copy_async.dsmem import DsmemPlan

WHERE = ["sim", pytest.param("gpu", marks=pytest.mark.gpu)]


def _span(spec) -> int:
    """Elements a layout's offsets reach (its largest offset + 1)."""
    layout = TileLayout(spec)
    return 1 + sum((int(it.extent) - 1) * int(it.stride) for it in layout.shard)


def dsmem_kernel(
    shape, src_spec, dst_spec, fence=True, expect=True, reuse=False, exit_sync=True, **config
):
    """CTA 0 of a cluster of two loads A into its src tile and copies it into CTA 1's dst
    tile (``copy_async -> dsmem``); CTA 1 announces the bytes, waits, and writes B.
    Controls: no ``fence.proxy.async`` after the plain writes of src, no expect-tx in CTA
    1, (``reuse``) CTA 0 writing src again right after the copy, and (not ``exit_sync``)
    no cluster barrier at the end: CTA 0 may exit while the copy still reads its src."""
    dtype = "float16"
    src_elems = _span(src_spec)
    dst_at = -(-src_elems // 64) * 64  # 128-byte aligned
    bar_at = -(-(dst_at + _span(dst_spec)) * 2 // 8) * 8  # bytes
    pool_bytes = bar_at + 8
    nbytes = math.prod(shape) * 2
    config = {"remote_cta_id": 1, **config}
    full = tuple(slice(0, s) for s in shape)

    # fmt: off
    @T.prim_func
    def kernel(A_ptr: T.handle, B_ptr: T.handle):
        A = T.match_buffer(A_ptr, shape, dtype)
        B = T.match_buffer(B_ptr, shape, dtype)
        T.device_entry()
        rank = T.cta_id_in_cluster([2])
        T.cta_id([2])
        tid = T.thread_id([128])
        pool = T.alloc_buffer((pool_bytes,), "uint8", scope="shared.dyn", align=128)
        T.attr({"tirx.dyn_smem_bytes": pool_bytes})
        src_s = T.decl_buffer(shape, dtype, pool.data, scope="shared.dyn",
                              layout=TileLayout(src_spec))
        dst_s = T.decl_buffer(shape, dtype, pool.data, elem_offset=dst_at, scope="shared.dyn",
                              layout=TileLayout(dst_spec))
        bar = T.decl_buffer((1,), "uint64", pool.data, elem_offset=bar_at // 8,
                            scope="shared.dyn")
        if tid == 0:
            T.ptx.mbarrier.init.shared.b64(bar.ptr_to([0]), 1)
            T.ptx["fence.mbarrier_init.release.cluster"]()
        T.cuda.cluster_sync()
        if rank == 0:
            Tx.cta.copy(src_s[full], A[full])
            if fence:
                T.ptx["fence.proxy.async.shared::cta"]()
            T.cuda.cta_sync()
            if tid == 0:
                Tx.copy_async(dst_s[full], src_s[full], dispatch="dsmem",
                              mbar=bar.ptr_to([0]), **config)
            if reuse:
                Tx.cta.fill(src_s[full], T.float16(0.0))
        else:
            if tid == 0:
                if expect:
                    T.evaluate(T.ptx["mbarrier.arrive.expect_tx.shared.b64"](
                        bar.ptr_to([0]), nbytes))
                else:
                    T.evaluate(T.ptx["mbarrier.arrive.shared.b64"](bar.ptr_to([0])))
            T.cuda.mbarrier_wait(bar.ptr_to([0]), 0)
            Tx.cta.copy(B[full], dst_s[full])
        if exit_sync:
            T.cuda.cluster_sync()
    # fmt: on
    return kernel


def _report(func, arch="sm_90a") -> tcd.CallReport:
    [report] = [r for r in tcd.explain(func, arch) if r.op == "copy_async"]
    return report


def _reason(func, arch="sm_90a") -> str:
    report = _report(func, arch)
    assert report.variant != "dsmem"
    [cand] = [c for c in report.candidates if c.variant == "dsmem"]
    return cand.reason


CONFIGS = [  # shape, src layout, dst layout, bulk copies (TVM's test_dsmem.py cases)
    pytest.param((128, 64), S[128, 64], S[128, 64], 1, id="contiguous-2d"),
    pytest.param((256,), S[256], S[256], 1, id="contiguous-1d"),
    pytest.param((8, 128), S[(8, 128) : (256, 1)], S[(8, 128) : (256, 1)], 8, id="stride-gap"),
    pytest.param(
        (8, 128), S[(8, 128) : (256, 1)], S[(8, 128) : (512, 1)], 8, id="different-strides"
    ),
]


@pytest.mark.parametrize("shape, src, dst, issues", CONFIGS)
def test_one_bulk_copy_per_run_both_layouts_share(shape, src, dst, issues):
    plan = _report(dsmem_kernel(shape, src, dst)).plan_object
    assert isinstance(plan, DsmemPlan) and plan.count == issues
    assert plan.total_bytes == math.prod(shape) * 2


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("shape, src, dst, issues", CONFIGS)
def test_roundtrip(shape, src, dst, issues, rng, where, gpu):
    a = rng.uniform(-2, 2, shape).astype(np.float16)
    b = np.full(shape, np.nan, np.float16)
    out = execute(dsmem_kernel(shape, src, dst), [a, b], where, gpu)[1]
    np.testing.assert_array_equal(out, a)


def test_a_row_and_a_column_major_tile_share_no_run():
    why = _reason(dsmem_kernel((4, 64), S[4, 64], S[(4, 64) : (1, 4)]))
    assert "contiguous together for 1 elements (2 bytes)" in why and "share no run" in why


def test_the_copy_maps_dst_and_the_mbarrier_into_the_remote_cta():
    source = toolchain.cuda_source(dsmem_kernel((8, 128), S[8, 128], S[8, 128]), "sm_90a")
    assert "mapa.shared::cluster.u32" in source
    assert "cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes" in source
    report = _report(dsmem_kernel((8, 128), S[8, 128], S[8, 128]))
    assert report.plan["expect_tx_bytes"] == 2048
    assert "on the mbarrier at mbar's offset in the destination CTA" in " ".join(report.resources)


@pytest.mark.parametrize(
    "config, arch, why",
    [
        ({"remote_cta_id": None}, "sm_90a", "no remote_cta_id= config"),
        ({"cta_mask": 3}, "sm_90a", "config cta_mask=3 is not a key this DSMEM copy takes"),
        ({}, "sm_80", "distributed shared memory (cp.async.bulk.shared::cluster)"),
    ],
)
def test_a_copy_the_hardware_cannot_make_declines(config, arch, why):
    func = dsmem_kernel((8, 128), S[8, 128], S[8, 128], **config)
    assert why in _reason(func, arch)


@pytest.mark.parametrize(
    "control, expect",
    [
        ({"fence": False}, r"wrote through the generic proxy with no fence.proxy.async"),
        (
            {"expect": False},
            r"deadlock.*the mbarrier at byte \d+ of shared pool of the CTA of rank 1",
        ),
        ({"reuse": True}, r"cp.async.bulk.shared::cluster.*still reads"),
        (
            {"exit_sync": False},
            r"the CTA of rank 0 exits while (a TMA copy issued by warp 0 \(of the CTA of rank "
            r"0\) uses|cp.async.bulk.shared::cluster.* still reads) shared pool byte \d+ of the "
            r"CTA of rank 0",
        ),
    ],
    ids=["no-fence", "no-expect-tx", "source-reused", "no-exit-barrier"],
)
def test_each_missing_synchronization_is_reported(control, expect, rng):
    a = rng.uniform(-2, 2, (8, 128)).astype(np.float16)
    b = np.full((8, 128), np.nan, np.float16)
    with pytest.raises(sim.SimError, match=expect):
        sim.run(dsmem_kernel((8, 128), S[8, 128], S[8, 128], **control), [a, b])
