"""examples/gemm_hopper_ws.py: the warp-specialized persistent GEMM (a TMA producer
warpgroup, two wgmma consumer warpgroups, setmaxnreg, a TMA-store epilogue) lowers
entirely through the strict pipeline, the scheduling simulator runs it equal to numpy
within the accumulation bound (tiles and odd shapes, several tiles per CTA), and each of
its synchronizations left out is reported by name."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from executors import execute
from modules import ROOT, load_file
from tirx_cuda_dispatch import explain, sim, toolchain

gemm = load_file("example_gemm", ROOT / "examples" / "gemm.py")  # inputs, reference, close
ws = load_file("example_gemm_hopper_ws", ROOT / "examples" / "gemm_hopper_ws.py")
STRICT = "tirx_cuda_dispatch.strict"
WHERE = ["sim", pytest.param("gpu", marks=pytest.mark.gpu)]


def test_every_call_is_ours():
    report = explain(ws.gemm_kernel(256, 256, 192, stages=2, grid=2), "sm_90a")
    assert [r.index for r in report if r.variant is None] == []
    variants = {r.variant for r in report}
    assert {"tma_auto", "wgmma", "ldstmatrix", "reg"} <= variants
    stores = [r for r in report if r.op == "copy_async" and r.plan.get("direction") == "store"]
    assert len(stores) == 4 and "bulk async-group" in " ".join(stores[0].resources)  # 4 chunks


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize(
    "shape, stages, grid, dtype",
    [
        ((256, 512, 192), 2, 1, "float16"),  # four tiles on one CTA: the ring wraps
        ((200, 264, 136), 3, 2, "float16"),  # edge tiles in M, N and K
        ((128, 256, 128), 3, 1, "bfloat16"),
        ((256, 1024, 64), 2, 3, "float16"),  # fewer row tiles: numbered along M first
        ((160, 328, 224), 2, 2, "bfloat16"),  # the last row of tiles idles consumer 1
        ((200, 264, 40), 2, 1, "float16"),  # one K tile, the edge one: the bias, no free
    ],
    ids=["rounds", "edges", "bf16", "m_first", "idle", "one_k_tile"],
)
def test_equals_numpy(shape, stages, grid, dtype, where, gpu):
    m, n, k = shape
    a, b, bias, c = gemm.inputs(m, n, k, seed=5, dtype=dtype)
    func = ws.gemm_kernel(m, n, k, dtype=dtype, stages=stages, grid=grid)
    out = execute(func, [a, b, bias, c], where, gpu, pipeline=STRICT)[3]
    assert gemm.close(out, gemm.reference(a, b, bias), k)


def test_the_plain_epilogue_without_the_register_split_equals_numpy():
    m, n, k = 128, 256, 64
    a, b, bias, c = gemm.inputs(m, n, k, seed=6)
    func = ws.gemm_kernel(m, n, k, stages=2, grid=1, epilogue="plain", registers=False)
    out = sim.run(func, [a, b, bias, c], target="sm_90a", pipeline=STRICT)[3]
    assert gemm.close(out, gemm.reference(a, b, bias, "plain"), k)


@pytest.mark.parametrize(
    "omit, expect",
    [
        (
            "full_wait",
            r"race on pool byte .* warp [4-9] reads it after a TMA copy issued by warp 0",
        ),
        (
            "empty_arrive",
            r"deadlock: no warp can run: thread 0 waits at mbarrier_wait .*gemm_hopper_ws.py:\d+"
            r".*; warps 4-11 wait at mbarrier_wait",
        ),
        (
            "proxy_fence",
            r"Tx.warpgroup.copy_async .*wrote through the generic proxy with no fence.proxy.async",
        ),
        ("store_wait", r"Tx.warpgroup.copy .*still reads it.*cp.async.bulk.wait_group.read"),
    ],
)
def test_each_synchronization_left_out_is_reported(omit, expect):
    """Negative controls: a consumer that does not wait for its stage (the read races with
    the TMA), consumers that never free a stage (a deadlock naming the producer's wait and
    theirs, with their lines), a staging buffer stored without fence.proxy.async, and a
    staging buffer written again while the store of two chunks ago still reads it."""
    a, b, bias, c = gemm.inputs(256, 512, 192)
    func = ws.gemm_kernel(256, 512, 192, stages=2, grid=1, omit=omit)
    with pytest.raises(sim.SimError, match=expect):
        sim.run(func, [a, b, bias, c], target="sm_90a", pipeline=STRICT)


def wgmma_forms(func) -> set[tuple[str, str, str, int]]:
    """Each gemm_async call's C, A and B columns (regions past their first index) and its
    wgmma instructions."""
    forms = set()
    for r in explain(func, "sm_90a"):
        if r.op == "gemm_async":
            c, a, b = (o["region"].split(", ")[-1].rstrip("]") for o in r.operands)
            forms.add((c, a, b, r.plan["instructions"]))
    return forms


def test_edge_tiles_compute_only_as_far_as_they_reach():
    """At 160 x 328 x 224 the last column of tiles holds 72 columns (wgmma over 128: two
    64-column blocks of B) and the last K tile 32 of 64 (two k16 steps); trim=False is
    the control, every call a whole tile."""
    whole = ("0:256", "0:64", "0:256", 4)
    assert wgmma_forms(ws.gemm_kernel(160, 328, 224, stages=2, grid=2)) == {
        whole, ("0:128", "0:64", "0:128", 4), ("0:256", "0:32", "0:256", 2),
        ("0:128", "0:32", "0:128", 2),
    }  # fmt: skip
    assert wgmma_forms(ws.gemm_kernel(160, 328, 224, stages=2, grid=2, trim=False)) == {whole}
    # float8: B K-major, 8-column steps (264 = 256 + 8), K steps of 32 (144 = 128 + 16)
    f8 = wgmma_forms(ws.gemm_kernel(200, 264, 144, dtype="float8_e5m2", stages=2, grid=2))
    assert ("0:8", "0:32", "0:32", 1) in f8 and len(f8) == 4


def test_an_edge_trimmed_too_far_is_caught():
    """Negative control of the trimmed edges' check: the edge tiles' wgmma one step short
    (64 columns, 16 of K) loses products, and the comparison with numpy says so."""
    m, n, k = 160, 328, 224
    a, b, bias, c = gemm.inputs(m, n, k, seed=5)
    func = ws.gemm_kernel(m, n, k, stages=2, grid=2, omit="short_edge")
    out = sim.run(func, [a, b, bias, c], target="sm_90a", pipeline=STRICT)[3]
    assert not gemm.close(out, gemm.reference(a, b, bias), k)


def test_shapes_tma_cannot_address_are_an_error():
    with pytest.raises(ValueError, match="K must be a multiple of 8 and N of 8"):
        ws.gemm_kernel(1000, 1000, 1001)


def test_sass_is_tma_wgmma_and_a_register_split():
    ops = toolchain.opcodes(
        toolchain.kernel_sass(ws.gemm_kernel(1000, 1000, 1000), "sm_90a", STRICT)
    )
    assert sum(v for op, v in ops.items() if op.startswith("UTMALDG")) > 0
    assert sum(v for op, v in ops.items() if op.startswith("UTMASTG")) > 0
    assert ops["HGMMA.64x256x16.F32"] > 0
    assert sum(v for op, v in ops.items() if op.startswith("USETMAXREG")) == 2
    assert not [op for op in ops if op.startswith(("LDL", "STL", "LDGSTS", "HMMA"))]


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize(
    "shape, dtype",
    [((256, 512, 384), "float8_e4m3fn"), ((200, 264, 144), "float8_e5m2")],
    ids=["e4m3", "e5m2-edges"],
)
def test_float8_with_a_per_tensor_scale_equals_numpy(shape, dtype, where, gpu):
    """The same kernel on float8 operands (B K-major, as float8 wgmma reads it): K tiles of
    128, m64n256k32 steps, C = scale A B in bfloat16."""
    m, n, k = shape
    args = ws.scaled_inputs(m, n, k, dtype, seed=8)
    func = ws.gemm_kernel(m, n, k, dtype=dtype, stages=2, grid=2)
    out = execute(func, args, where, gpu, pipeline=STRICT)[3]
    assert ws.scaled_close(out, *args[:3])


def test_float8_epilogues_other_than_scaled_are_an_error():
    with pytest.raises(ValueError, match="epilogue='bias_relu' with float8_e4m3fn"):
        ws.gemm_kernel(256, 256, 256, dtype="float8_e4m3fn", epilogue="bias_relu")


def test_float8_sass_is_qgmma():
    func = ws.gemm_kernel(1024, 1024, 1024, dtype="float8_e4m3fn")
    ops = toolchain.opcodes(toolchain.kernel_sass(func, "sm_90a", STRICT))
    assert ops["QGMMA.64x256x32.F32.E4M3.E4M3"] > 0
    assert not [op for op in ops if op.startswith(("LDL", "STL", "HGMMA", "HMMA"))]


def test_the_float8_bound_catches_a_lost_k_tile():
    """Negative control of the comparison: C without its last K tile of 128 is outside
    the stated bound."""
    a, bt, scale, _ = ws.scaled_inputs(64, 64, 384, seed=3)
    whole = a.astype(np.float64) @ bt.astype(np.float64).T * float(scale[0])
    short = a[:, :256].astype(np.float64) @ bt[:, :256].astype(np.float64).T * float(scale[0])
    assert ws.scaled_close(whole.astype(ml_dtypes.bfloat16), a, bt, scale)
    assert not ws.scaled_close(short.astype(ml_dtypes.bfloat16), a, bt, scale)


# -- clusters of two: B multicast -------------------------------------------------------------
@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize(
    "shape, stages, grid, dtype, epilogue",
    [
        ((512, 256, 192), 2, 2, "float16", "bias_relu"),  # one pair, two rounds
        ((400, 264, 136), 3, 4, "float16", "bias_relu"),  # edge tiles in M, N and K
        ((256, 512, 128), 2, 2, "bfloat16", "plain"),
        ((400, 72, 24), 2, 2, "bfloat16", "bias_relu"),  # one K tile; rank 1 idles at M's edge
    ],
    ids=["rounds", "edges", "bf16-plain", "one_k_tile"],
)
def test_a_cluster_of_two_equals_numpy(shape, stages, grid, dtype, epilogue, where, gpu):
    m, n, k = shape
    a, b, bias, c = gemm.inputs(m, n, k, seed=9, dtype=dtype)
    func = ws.gemm_kernel(m, n, k, dtype=dtype, stages=stages, grid=grid, epilogue=epilogue,
                          cluster=2)  # fmt: skip
    out = execute(func, [a, b, bias, c], where, gpu, pipeline=STRICT)[3]
    assert gemm.close(out, gemm.reference(a, b, bias, epilogue), k)


@pytest.mark.parametrize("where", WHERE)
def test_a_float8_cluster_of_two_equals_numpy(where, gpu):
    """Float8 B is N x K: a CTA multicasts half of the tile's rows of B."""
    m, n, k = 256, 256, 384
    args = ws.scaled_inputs(m, n, k, seed=10)
    func = ws.gemm_kernel(m, n, k, dtype="float8_e4m3fn", stages=2, grid=2, cluster=2)
    out = execute(func, args, where, gpu, pipeline=STRICT)[3]
    assert ws.scaled_close(out, *args[:3])


@pytest.mark.parametrize(
    "omit, expect",
    [
        (
            "remote_arrive",
            r"Tx.thread.copy_async .*race on pool byte \d+ of the CTA of rank [01]: a TMA copy "
            r"issued by warp (0|12) overwrites it while warpgroup [1245]'s wgmma reads it",
        ),
        (
            "cluster_sync",
            r"race on pool byte \d+ of the CTA of rank 1: warp 0 reads it after warp 12 wrote it",
        ),
        (
            "exit_sync",
            r"the CTA of rank [01] exits while warp \d+ \(of the CTA of rank [01]\) uses shared "
            r"pool byte \d+ of the CTA of rank [01] with nothing ordering that before the exit",
        ),
        (
            "empty_arrive",
            r"deadlock: no warp can run: thread 384 \(the CTA of rank 1\) waits at mbarrier_wait "
            r"\(mbarrier.try_wait.parity.acquire.cluster\)",
        ),
    ],
)
def test_each_cluster_synchronization_left_out_is_reported(omit, expect):
    """Negative controls of the pair: consumers that free a stage in their own CTA only
    (the peer's producer multicasts into it while its wgmma still reads it), a CTA
    barrier instead of a cluster one after the mbarrier init (the peer's multicast uses
    a barrier nothing orders after its init), no cluster barrier at the end (a CTA exits
    while its peer's consumers still arrive on its empty barriers), and no arrival at all
    (a deadlock naming each CTA's producer)."""
    a, b, bias, c = gemm.inputs(512, 256, 192, seed=11)
    func = ws.gemm_kernel(512, 256, 192, stages=2, grid=2, cluster=2, omit=omit)
    with pytest.raises(sim.SimError, match=expect):
        sim.run(func, [a, b, bias, c], target="sm_90a", pipeline=STRICT)


def test_the_pair_multicasts_b_and_arrives_in_both_ctas():
    func = ws.gemm_kernel(512, 256, 192, stages=2, grid=2, cluster=2)
    loads = [
        r for r in explain(func, "sm_90a")
        if r.op == "copy_async" and r.plan.get("direction") == "load"
    ]  # fmt: skip
    casts = [r for r in loads if r.plan.get("cta_mask") == "3"]
    assert len(casts) == 1 and "multicast::cluster" in casts[0].plan["ptx"]
    assert casts[0].plan["box"] == "64x64" and casts[0].plan["issues"] == 2  # half of B
    source = toolchain.cuda_source(func, "sm_90a", STRICT)
    assert "mapa.shared::cluster.u32" in source
    assert "mbarrier.arrive.shared::cluster.b64" in source
    assert ".release.cluster.shared::cluster" not in source  # CTA-scope release (docstring)
    assert "barrier.cluster.arrive" in source


def test_the_default_pairs_large_grids_only():
    assert ws.default_cluster(4096, 4096) == 2 and ws.default_cluster(4000, 4000) == 2
    assert ws.default_cluster(16384, 1024) == 1 and ws.default_cluster(1024, 16384) == 1
    assert ws.default_cluster(128 * 33, 4096) == 1  # an odd number of row tiles
    assert ws.default_cluster(256, 256) == 1


def test_a_pair_needs_an_even_number_of_row_tiles():
    with pytest.raises(ValueError, match="M=384 spans 3 tiles of 128 rows, not a multiple of 2"):
        ws.gemm_kernel(384, 256, 128, cluster=2)


@pytest.mark.parametrize(
    "cluster, barrier", [(1, "T.cuda.cta_sync()"), (2, "T.cuda.cluster_sync()")]
)
def test_programmatic_dependent_launch_waits_before_any_global_access(cluster, barrier):
    """``pdl=True``: every thread's griddepcontrol.wait comes right after the mbarriers'
    CTA (or cluster) barrier, under no ``if`` and before any load or store, then
    launch_dependents; the launch parameters are TVM's own for the grid (the cluster's
    included) plus the programmatic-launch tag. The control, ``pdl=False`` (the default),
    has neither."""
    from tirx_cuda_dispatch.explain import PDL_TAG

    def launch(**kw):
        func = ws.gemm_kernel(512, 256, 192, stages=2, grid=2, cluster=cluster, **kw)
        _, device = toolchain.lowered(func, "sm_90a", STRICT)
        (kernel,) = device.functions.values()
        return [str(t) for t in kernel.attrs["tirx.kernel_launch_params"]]

    script = ws.gemm_kernel(512, 256, 192, stages=2, grid=2, cluster=cluster, pdl=True)
    lines = script.script().splitlines()
    at = [i for i, ln in enumerate(lines) if ln.strip() == barrier][0]  # (the init's)
    indent = lines[at][: len(lines[at]) - len(lines[at].lstrip())]
    assert lines[at + 1 : at + 3] == [
        indent + 'T.ptx.griddepcontrol("wait", "")',
        indent + 'T.ptx.griddepcontrol("launch_dependents", "")',
    ]
    assert not any("copy_async" in ln for ln in lines[:at])
    assert sum("griddepcontrol" in ln for ln in lines) == 2
    plain = ws.gemm_kernel(512, 256, 192, stages=2, grid=2, cluster=cluster).script()
    assert "griddepcontrol" not in plain
    tagged, untagged = launch(pdl=True), launch()
    assert tagged.count(PDL_TAG) == 1 and [t for t in tagged if t != PDL_TAG] == untagged
    assert ("clusterCtaIdx.x" in tagged) == (cluster == 2)


@pytest.mark.parametrize("where", WHERE)
def test_a_pair_with_programmatic_dependent_launch_equals_numpy(where, gpu):
    """On the GPU TVM's runtime launches it through cuLaunchKernelEx with both the
    cluster's dimension and programmatic stream serialization."""
    m, n, k = 400, 72, 24
    a, b, bias, c = gemm.inputs(m, n, k, seed=11, dtype="bfloat16")
    func = ws.gemm_kernel(m, n, k, dtype="bfloat16", stages=2, grid=2, cluster=2, pdl=True)
    out = execute(func, [a, b, bias, c], where, gpu, pipeline=STRICT)[3]
    assert gemm.close(out, gemm.reference(a, b, bias), k)
