"""examples/attention.py: the FlashAttention forward lowers entirely through the strict
pipeline (P V with A from registers), equals float64 numpy within its bound in the
simulator and on the GPU, and a dropped rescale or wgmma wait is caught."""

from __future__ import annotations

import pytest

from executors import execute
from modules import ROOT, load_file
from tirx_cuda_dispatch import explain, sim

attention = load_file("example_attention", ROOT / "examples" / "attention.py")
STRICT = "tirx_cuda_dispatch.strict"
WHERE = ["sim", pytest.param("gpu", marks=pytest.mark.gpu)]


def test_every_call_is_ours_and_p_v_takes_a_from_registers():
    report = explain(attention.attention_kernel(2, 128, 64), "sm_90a")
    assert [r.index for r in report if r.variant is None] == []
    gemms = [r for r in report if r.op == "gemm_async"]
    assert [r.plan_object.a_in_registers for r in gemms] == [False, True]
    [row_max] = [r for r in report if r.op == "max"]
    assert "shfl.xor 1/2" in row_max.plan["schedule"]  # a row lives in a quad of lanes


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("shape", [(2, 128, 64), (1, 192, 128)], ids=["d64", "d128"])
def test_equals_numpy(shape, causal, where, gpu):
    args = attention.inputs(*shape, seed=1)
    func = attention.attention_kernel(*shape, causal=causal)
    out = execute(func, args, where, gpu, pipeline=STRICT)
    assert attention.close(out[3], out[4], *args[:3], causal=causal) is None
    # the control: the other reading of the mask is far off
    assert attention.close(out[3], out[4], *args[:3], causal=not causal) is not None


def test_a_dropped_rescale_is_caught_by_the_comparison():
    args = attention.inputs(1, 192, 64, seed=2)
    out = sim.run(attention.attention_kernel(1, 192, 64, omit="rescale"), args, target="sm_90a")
    assert "outputs of O" in attention.close(out[3], out[4], *args[:3])


def test_a_dropped_wgmma_wait_is_reported_by_the_simulator():
    """Without the P V wgmma's wait, the next K/V tile is copied over V_s while the wgmma
    still reads it: the simulator names the copy and the wgmma."""
    args = attention.inputs(1, 128, 64)
    with pytest.raises(sim.SimError, match=r"writes byte .* of shared pool while wgmma"):
        sim.run(attention.attention_kernel(1, 128, 64, omit="wait"), args, target="sm_90a")


def test_shapes_it_does_not_take_are_an_error():
    with pytest.raises(ValueError, match="head dim 96"):
        attention.attention_kernel(1, 128, 96)
