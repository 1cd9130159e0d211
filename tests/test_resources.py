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
    itself syncs on named barriers 1, 2 and 3 and votes at 4 (``bar.red``, whose id is its
    second operand; ``use_ids``) before."""

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
            V = T.alloc_buffer((1,), "uint32", scope="local")
            T.evaluate(T.ptx["bar.red.or.pred"](V[0], T.uint32(4), T.uint32(256),
                                                T.ptx.pred(A_s[0, 0] > T.float32(0))))  # fmt: skip
        if wg == 0:
            Tx.wg.sum(B_s[:], A_s[:, :], axes=[-1])
        T.cuda.cta_sync()
        Tx.cta.copy(B[:], B_s[:])

    return kernel


def test_barrier_ids_the_kernel_names_are_found():
    assert barrier_ids_in(_kernel_with_barriers(True)) == {1, 2, 3, 4}
    assert barrier_ids_in(_kernel_with_barriers(False)) == set()


def test_a_plans_named_barriers_avoid_the_kernels_own_ids():
    report = report_of(_kernel_with_barriers(True))
    first = report.given["sync"]
    assert first not in (0, 1, 2, 3, 4, 8) and first + 1 not in (0, 1, 2, 3, 4, 8)
    # the control: without the kernel's own barriers, the first free ids are taken
    control = report_of(_kernel_with_barriers(False)).given["sync"]
    assert control == 1


def test_barrier_pool_hands_out_runs_and_reuses_a_groups_ids():
    pool = BarrierPool({1, 2, 3})
    first = pool.take("warpgroup x 2", 2)
    assert first == 4 and pool.take("warpgroup x 2", 2) == 4  # the same threads: shared
    assert pool.take("cta 4 warps", 1) == 6
    assert pool.missing(9) is not None and "consecutive" in pool.missing(9)
    with pytest.raises(ValueError):
        pool.take("too many", 9)


def test_the_simulator_holds_a_call_to_the_completions_its_plan_declares(monkeypatch):
    """The lowering marks each call's code with its plan's Completion mechanisms; an
    asynchronous effect whose mechanism the plan does not declare is an error naming it.
    The control: ldgsts's plan declares its cp.async group, and the round trip runs."""
    import numpy as np

    from tirx_cuda_dispatch import demos, runtime, sim
    from tirx_cuda_dispatch.copy_async.ldgsts import LdgstsPlan
    from tirx_cuda_dispatch.resources import Completion

    func = demos.ldgsts_roundtrip("float16", (64, 64), dispatch=None)
    a = runtime.random_array((64, 64), "float16", np.random.default_rng(2))
    args = [a, runtime.poison_like(a), runtime.poison_like(a)]
    out = sim.run(func, args)
    np.testing.assert_array_equal(runtime.bits(out[1]), runtime.bits(a))
    wrong = (Completion("mbarrier complete-tx", "a wrong declaration, for this test"),)
    monkeypatch.setattr(LdgstsPlan, "resources", lambda self: wrong)
    with pytest.raises(
        sim.SimError,
        match="completes through the cp.async group, but the call's plan declares mbarrier complete-tx",
    ):
        sim.run(func, args)


def test_a_completion_outside_the_vocabulary_is_refused():
    from tirx_cuda_dispatch.resources import COMPLETIONS, Completion

    with pytest.raises(ValueError, match="'tcgen05.wait' is not one of"):
        Completion("tcgen05.wait", "the caller")
    assert {"cp.async group", "mbarrier complete-tx", "bulk async-group"} <= set(COMPLETIONS)
