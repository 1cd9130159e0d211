"""examples/rmsnorm.py and examples/softmax.py: every call lowered by the strict pipeline,
the simulator (a few rows) and the GPU (N = 8192, the benchmark's shape) equal to numpy
within each example's bound, into outputs poisoned with NaN first."""

from __future__ import annotations

import numpy as np
import pytest

from modules import ROOT, load_file
from tirx_cuda_dispatch import explain, runtime, sim

STRICT = "tirx_cuda_dispatch.strict"
rmsnorm = load_file("example_rmsnorm", ROOT / "examples" / "rmsnorm.py")
softmax = load_file("example_softmax", ROOT / "examples" / "softmax.py")


def _check(example, out: np.ndarray, args: list[np.ndarray], rows: int) -> bool:
    *ins, _ = args
    want = example.reference(*(a[:rows] if a.ndim == 2 else a for a in ins))
    return example.close(out[:rows], want)


@pytest.mark.parametrize("example", [rmsnorm, softmax], ids=["rmsnorm", "softmax"])
def test_every_call_is_ours(example):
    reports = explain(example.kernel, "sm_90a")
    assert reports and [r.index for r in reports if r.variant is None] == []


@pytest.mark.parametrize("example", [rmsnorm, softmax], ids=["rmsnorm", "softmax"])
def test_simulator_equals_numpy_and_the_check_can_fail(example):
    """Two of the small program's CTAs (4 rows); the control: one output off by 2% fails
    the same check."""
    args = example.inputs(8)
    out = sim.run(example.kernel, args, target="sm_90a", grid=2, pipeline=STRICT)[-1]
    assert _check(example, out, args, 4)
    bad = out.copy()
    bad[1, 7] = (bad[1, 7].astype(np.float32) * 1.02 + 1e-3).astype(bad.dtype)
    assert not _check(example, bad, args, 4)


@pytest.mark.gpu
@pytest.mark.parametrize(
    "example, build",
    [
        (rmsnorm, lambda n: rmsnorm.rmsnorm_kernel(n)),
        (softmax, lambda n: softmax.softmax_kernel(n)),
    ],
    ids=["rmsnorm", "softmax"],
)
def test_gpu_equals_numpy_at_the_benchmarks_shape(example, build, gpu):
    n = 8192
    args = example.inputs(n)
    func = build(n)
    out = runtime.run(runtime.build(func, gpu, STRICT), runtime.entry_name(func), args)[-1]
    assert _check(example, out, args, n)
