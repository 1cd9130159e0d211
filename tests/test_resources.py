"""Resources a plan declares: named-barrier ids the kernel does not use, workspaces."""

from __future__ import annotations

import pytest
from tvm.script import tirx as T
from tvm.script.tirx import tile as Tx
from tvm.tirx.layout import S, TileLayout

from reduction_checks import report_of
from tirx_cuda_dispatch.resources import BarrierPool, barrier_ids_in


def _kernel_with_barriers(use_ids: bool):
    """Warpgroup 0 reduces a shared tile (its warps meet at a named barrier); the kernel
    itself syncs on named barriers 1, 2 and 3 (``use_ids``) before."""

    @T.prim_func
    def kernel(A_ptr: T.handle, B_ptr: T.handle):
        A = T.match_buffer(A_ptr, (2, 2048), "float32")
        B = T.match_buffer(B_ptr, (2,), "float32")
        T.device_entry()
        T.cta_id([1])
        wg = T.warpgroup_id([2])
        T.warp_id_in_wg([4])
        T.warp_id([8])
        T.lane_id([32])
        T.thread_id([256])
        A_s = T.alloc_buffer((2, 2048), "float32", scope="shared", layout=TileLayout(S[(2, 2048)]))
        B_s = T.alloc_buffer((2,), "float32", scope="shared", layout=TileLayout(S[2]))
        Tx.cta.copy(A_s[:, :], A[:, :])
        T.cuda.cta_sync()
        if use_ids:
            T.ptx.bar.sync(T.uint32(1), T.uint32(256))
            T.ptx.bar.sync(T.uint32(3), T.uint32(256))
            T.cuda.warpgroup_sync(2)
        if wg == 0:
            Tx.wg.sum(B_s[:], A_s[:, :], axes=[-1])
        T.cuda.cta_sync()
        Tx.cta.copy(B[:], B_s[:])

    return kernel


def test_barrier_ids_the_kernel_names_are_found():
    assert barrier_ids_in(_kernel_with_barriers(True)) == {1, 2, 3}
    assert barrier_ids_in(_kernel_with_barriers(False)) == set()


def test_a_plans_named_barriers_avoid_the_kernels_own_ids():
    report = report_of(_kernel_with_barriers(True))
    first = report.call_object.resources["sync"]
    assert first not in (0, 1, 2, 3, 8) and first + 1 not in (0, 1, 2, 3, 8)
    # the control: without the kernel's own barriers, the first free ids are taken
    control = report_of(_kernel_with_barriers(False)).call_object.resources["sync"]
    assert control == 1


def test_barrier_pool_hands_out_runs_and_reuses_a_groups_ids():
    pool = BarrierPool({1, 2, 3})
    first = pool.take("warpgroup x 2", 2)
    assert first == 4 and pool.take("warpgroup x 2", 2) == 4  # the same threads: shared
    assert pool.take("cta 4 warps", 1) == 6
    assert pool.missing(9) is not None and "consecutive" in pool.missing(9)
    with pytest.raises(ValueError):
        pool.take("too many", 9)
