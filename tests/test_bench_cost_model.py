"""bench/cost_model.py (part 10 of bench/run.py), what needs no GPU: the RMSNorm and the
softmax written the plain way (a row staged in shared memory) are right, in the
simulator, against float64 numpy (outputs poisoned first), so part 10 times kernels that
compute what they claim."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from modules import BENCH, load_file
from tirx_cuda_dispatch import sim

STRICT = "tirx_cuda_dispatch.strict"


@pytest.fixture(scope="module")
def cost_model():
    return load_file("bench_cost_model_for_sim", BENCH / "cost_model.py")


def test_the_staged_rmsnorm_equals_numpy(cost_model):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, cost_model.D)).astype(ml_dtypes.bfloat16)
    w = (1 + 0.1 * rng.standard_normal(cost_model.D)).astype(ml_dtypes.bfloat16)
    y = np.full(x.shape, np.nan, dtype=ml_dtypes.bfloat16)
    out = sim.run(cost_model.staged_rmsnorm_kernel(2), [x, w, y], target="sm_90a",
                  pipeline=STRICT)  # fmt: skip
    xf = x.astype(np.float64)
    want = xf / np.sqrt((xf**2).mean(-1, keepdims=True) + cost_model.EPS) * w.astype(np.float64)
    got = out[2].astype(np.float64)
    assert np.all(np.abs(got - want) <= 2.0**-7 * np.abs(want) + 1e-6)  # one bfloat16 ulp


def test_the_staged_softmax_equals_numpy(cost_model):
    rng = np.random.default_rng(4)
    x = (3 * rng.standard_normal((2, cost_model.D))).astype(np.float16)
    y = np.full(x.shape, np.nan, dtype=np.float16)
    out = sim.run(cost_model.staged_softmax_kernel(2), [x, y], target="sm_90a", pipeline=STRICT)
    xf = x.astype(np.float64)
    e = np.exp(xf - xf.max(-1, keepdims=True))
    want = e / e.sum(-1, keepdims=True)
    got = out[1].astype(np.float64)
    assert np.all(np.abs(got - want) <= 2.0**-9 * np.abs(want) + 2.0**-24)  # two ulps
