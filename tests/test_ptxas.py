"""ptxas's performance verdicts reach explain() and the CLI, on the calls they concern: a
warp-specialized loop written with both roles in one K loop gets 'setmaxnreg' ignored
(C7508, the kernel's own code) and an injected wgmma wait (C7517, the gemm_async call);
the roles as one branch each (examples/gemm_hopper_ws.py) get neither."""

from __future__ import annotations

import os
import subprocess
import sys

from tvm.script import tirx as T
from tvm.script.tirx import tile as Tx
from tvm.tirx.layout import ComposeLayout, S, TileLayout

from modules import ROOT, load_file
from tirx_cuda_dispatch import demos, explain, toolchain


def one_loop(setmaxnreg: bool = True):
    """Two warpgroups, both roles inside one K loop: warpgroup 0 only syncs, warpgroup 1
    runs a wgmma per step keeping one group in flight (``setmaxnreg`` in each branch)."""
    swz = ComposeLayout(3, 3, 3, TileLayout(S[(64, 64) : (64, 1)]))
    acc = demos.wgmma_accumulator_layout(64, 1)

    # fmt: off
    @T.prim_func
    def kernel(A_ptr: T.handle, B_ptr: T.handle, D_ptr: T.handle):
        A = T.match_buffer(A_ptr, (64, 64), "float16")
        B = T.match_buffer(B_ptr, (64, 64), "float16")
        D = T.match_buffer(D_ptr, (64, 64), "float32")
        T.device_entry()
        T.cta_id([1])
        wg = T.warpgroup_id([2])
        T.warp_id_in_wg([4])
        T.lane_id([32])
        T.thread_id([256])
        pool = T.alloc_buffer((2 * 64 * 64,), "float16", scope="shared.dyn", align=1024)
        A_s = T.decl_buffer((64, 64), "float16", pool.data, scope="shared.dyn", layout=swz)
        B_s = T.decl_buffer((64, 64), "float16", pool.data, elem_offset=4096,
                            scope="shared.dyn", layout=swz)
        C = T.alloc_buffer((64, 64), "float32", scope="local", layout=acc)
        Tx.cta.copy(A_s[:, :], A[:, :])
        Tx.cta.copy(B_s[:, :], B[:, :])
        T.ptx["fence.proxy.async.shared::cta"]()
        T.cuda.cta_sync()
        for _ in range(4):
            if wg == 0:
                if setmaxnreg:
                    T.ptx.setmaxnreg.dec.sync.aligned.u32(40)
                T.cuda.warpgroup_sync(1)
            else:
                if setmaxnreg:
                    T.ptx.setmaxnreg.inc.sync.aligned.u32(232)
                Tx.wg.gemm_async(C[:, :], A_s[:, :], B_s[:, :], transA=False, transB=False,
                                 accum=True)
                T.ptx["wgmma.commit_group.sync.aligned"]()
                T.ptx["wgmma.wait_group.sync.aligned"](1)
                T.cuda.warpgroup_sync(2)
        if wg == 1:
            T.ptx["wgmma.wait_group.sync.aligned"](0)
            Tx.wg.copy(D[:, :], C[:, :])
    # fmt: on
    return kernel


def test_the_verdicts_join_the_calls_they_concern():
    report = explain(one_loop(), "sm_90a", ptxas=True)
    [mma] = [r for r in report if r.variant == "wgmma"]
    assert any(n.startswith("(C7517) wgmma.wait_group is injected") for n in mma.ptxas)
    assert any("(C7508)" in n and "'setmaxnreg' ignored" in n for n in report.kernel_notes)
    assert "ptxas, on the kernel's own code: (C7508)" in str(report)
    assert "    ptxas: (C7517)" in str(mma)
    assert all(not r.ptxas for r in report if r.variant != "wgmma")


def test_without_setmaxnreg_there_is_no_c7508_and_without_ptxas_no_compile():
    notes = toolchain.ptxas_notes(toolchain.cuda_source(one_loop(False), "sm_90a"))
    assert [n.code for n in notes if n.subject == "setmaxnreg"] == []
    assert explain(one_loop(), "sm_90a").kernel_notes == []  # not asked: not compiled


def test_the_roles_as_branches_of_their_own_keep_setmaxnreg():
    """Negative control: the example's form draws neither verdict."""
    ws = load_file("example_gemm_hopper_ws", ROOT / "examples" / "gemm_hopper_ws.py")
    source = toolchain.cuda_source(ws.gemm_kernel(1000, 1000, 1000), "sm_90a")
    assert [n.code for n in toolchain.ptxas_notes(source)] == []


def test_the_cli_prints_them():
    program = f"{ROOT / 'tests' / 'test_ptxas.py'}:KERNEL"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "tests"), *sys.path]))
    out = subprocess.run(
        [sys.executable, "-m", "tirx_cuda_dispatch", "explain", program, "--ptxas"],
        capture_output=True, text=True, cwd=ROOT, check=False, env=env,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "ptxas, on the kernel's own code: (C7508)" in out.stdout
    lowered = subprocess.run(
        [sys.executable, "-m", "tirx_cuda_dispatch", "lower", program, "--emit", "cuda"],
        capture_output=True, text=True, cwd=ROOT, check=False, env=env,
    )  # fmt: skip
    assert lowered.returncode == 0 and "ptxas: (C7508)" in lowered.stderr


KERNEL = one_loop()
