"""examples/gemm_hopper.py: the TMA + wgmma GEMM lowers entirely through the strict
pipeline, the simulator runs it equal to numpy within the accumulation bound, and a
missing wait (of the TMA's mbarrier phase, or of the wgmma group) is reported."""

from __future__ import annotations

import pytest

from executors import execute
from modules import ROOT, load_file
from tirx_cuda_dispatch import explain, sim, toolchain

gemm = load_file("example_gemm", ROOT / "examples" / "gemm.py")  # inputs, reference, close
hopper = load_file("example_gemm_hopper", ROOT / "examples" / "gemm_hopper.py")
STRICT = "tirx_cuda_dispatch.strict"
WHERE = ["sim", pytest.param("gpu", marks=pytest.mark.gpu)]


def test_every_call_is_ours():
    report = explain(hopper.gemm_kernel(128, 256, 192, stages=2), "sm_90a")
    assert [r.index for r in report if r.variant is None] == []
    variants = {r.variant for r in report}
    assert {"tma_auto", "wgmma", "ldstmatrix", "gmem_smem", "reg"} <= variants


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize(
    "shape, stages", [((128, 256, 192), 2), ((256, 256, 256), 3)], ids=["2x", "3x"]
)
def test_equals_numpy(shape, stages, where, gpu):
    m, n, k = shape
    a, b, bias, c = gemm.inputs(m, n, k, seed=2)
    func = hopper.gemm_kernel(m, n, k, stages=stages)
    out = execute(func, [a, b, bias, c], where, gpu, pipeline=STRICT)[3]
    assert gemm.close(out, gemm.reference(a, b, bias), k)


def test_the_plain_epilogue_equals_numpy():
    m, n, k = 128, 256, 128
    a, b, bias, c = gemm.inputs(m, n, k, seed=3)
    func = hopper.gemm_kernel(m, n, k, stages=2, epilogue="plain")
    out = sim.run(func, [a, b, bias, c], target="sm_90a", pipeline=STRICT)[3]
    assert gemm.close(out, gemm.reference(a, b, bias, "plain"), k)


def test_shapes_off_the_tile_are_an_error():
    with pytest.raises(ValueError, match="multiples of 128, 256, 64"):
        hopper.gemm_kernel(130, 256, 64)


@pytest.mark.parametrize(
    "omit, expect",
    [
        ("wgmma_wait", r"wgmma.* still in flight.*wait_group"),
        # in lockstep the phase completes at the expect-tx: what is left is the race
        ("tma_wait", r"call \[4\] Tx.warpgroup.gemm_async .*race on pool byte"),
    ],
)
def test_a_missing_wait_is_reported(omit, expect):
    """Negative controls: the kernel without its final wgmma wait (the epilogue reads the
    accumulator still being written), or without the wait for a stage's TMA bytes (the
    wgmma reads them in flight)."""
    a, b, bias, c = gemm.inputs(128, 256, 192)
    func = hopper.gemm_kernel(128, 256, 192, stages=2, omit=omit)
    with pytest.raises(sim.SimError, match=expect):
        sim.run(func, [a, b, bias, c], target="sm_90a", pipeline=STRICT)


def test_sass_is_tma_and_wgmma():
    ops = toolchain.opcodes(
        toolchain.kernel_sass(hopper.gemm_kernel(256, 256, 256), "sm_90a", STRICT)
    )
    assert sum(v for op, v in ops.items() if op.startswith("UTMALDG")) > 0
    hgmma = ops["HGMMA.64x256x16.F32"]
    assert hgmma > 0 and hgmma % 4 == 0  # 4 K steps a K tile (the loop may be unrolled)
    assert not [op for op in ops if op.startswith(("LDL", "STL", "LDGSTS", "HMMA"))]
