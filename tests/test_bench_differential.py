"""bench/differential.py, what needs no GPU: how the GPU's output is compared with the
simulator's. Bit for bit, except where the kernel ran a function the GPU approximates
(TVM compiles with --use_fast_math; the simulator rounds correctly): there floats may
differ by a couple of units in their last place; and a wgmma program's output, which the
GPU sums otherwise than the simulator: there within the case's error bound."""

from __future__ import annotations

import numpy as np
import pytest

from modules import BENCH, load_file
from tirx_cuda_dispatch import fuzz, sim
from tirx_cuda_dispatch.runtime import bits, random_array
from tirx_cuda_dispatch.sim.intrinsics import APPROXIMATE


@pytest.fixture(scope="module")
def differential():
    return load_file("bench_differential_under_test", BENCH / "differential.py")


def _steps(a: np.ndarray, n: int) -> np.ndarray:
    """``a`` with element 0 moved ``n`` floats up (its bits plus n)."""
    b = a.copy()
    bits(b).reshape(-1)[0] += n
    return b


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_approximate_math_may_differ_by_two_ulps_and_no_more(differential, dtype, rng):
    a = np.abs(random_array((64,), dtype, rng)) + 1  # positive, away from 0
    assert a.dtype.name == dtype
    assert differential.disagreement([a], [a.copy()], approximate=False) is None
    one = _steps(a, 1)
    assert differential.disagreement([one], [a], approximate=True) is None
    assert differential.disagreement([_steps(a, 2)], [a], approximate=True) is None
    # the controls: exact math allows no step, and three steps are past the bound
    assert "differ in 1 elements" in differential.disagreement([one], [a], approximate=False)
    far = differential.disagreement([_steps(a, 3)], [a], approximate=True)
    assert (
        far
        == "argument 0: GPU and simulator differ in 1 elements (beyond 2 ulps of approximate math)"
    )


def test_a_sign_an_infinity_or_an_integer_is_never_approximate(differential):
    zero = np.zeros(4, np.float32)
    negative = -zero  # one step away in the bits' sign, a different float
    assert differential.disagreement([negative], [zero], approximate=True) is not None
    biggest = np.full(4, np.finfo(np.float32).max, np.float32)
    infinite = _steps(biggest, 1)  # the next bit pattern after FLT_MAX is +Inf
    assert np.isinf(infinite[0])
    assert differential.disagreement([infinite], [biggest], approximate=True) is not None
    nan = _steps(infinite, 1)  # and after +Inf a NaN
    assert differential.disagreement([nan], [infinite], approximate=True) is not None
    ints = np.arange(4, dtype=np.int32)
    assert differential.disagreement([ints + (ints == 0)], [ints], approximate=True) is not None


@pytest.mark.parametrize(
    "seed, op, builtin, ours",
    [(36, "sqrt", "sqrtf", "__fsqrt_rn"), (9, "reciprocal", "div.f32", "__frcp_rn")],
)
def test_the_built_ins_math_counts_as_approximate_and_ours_does_not(seed, op, builtin, ours):
    """Programs of float32 math into 16-bit floats: TVM's built-in writes ``sqrtf(x)`` or
    ``1.0f / x`` (fast-math approximations on the GPU; such a sqrt program, seed 1942
    before the TMA and wgmma kinds were added, differed from the simulator in 1 element),
    ours the correctly rounded ``__fsqrt_rn`` / ``__frcp_rn``: only the built-in's kernel
    is compared within the bound."""
    chooser = fuzz.RandomChooser(seed)
    case = fuzz.random_case(chooser, None)
    assert case.kind == "mixed_elementwise" and case.params["op"] == op
    ran = {
        pipeline: set(sim.run(case.func, [a.copy() for a in case.args], pipeline=pipeline)
                      .counters.instructions)
        for pipeline in ("tirx", "tirx_cuda_dispatch")
    }  # fmt: skip
    assert builtin in ran["tirx"] & APPROXIMATE
    assert ours in ran["tirx_cuda_dispatch"] and not ran["tirx_cuda_dispatch"] & APPROXIMATE


class _SimulatedGpu:
    """A stand-in for the GPU in the harness: runs the kernel in the simulator, with
    ``flip`` one bit of every output flipped (a GPU that disagrees), or the last output
    changed by ``change``."""

    def __init__(self, monkeypatch, flip: bool = False, change=None) -> None:
        from tirx_cuda_dispatch import runtime

        self.flip, self.change = flip, change
        monkeypatch.setattr(runtime, "build", lambda func, arch, pipeline: (func, pipeline))
        monkeypatch.setattr(runtime, "run", self.run)

    def run(self, exe, name, arrays):
        func, pipeline = exe
        out = sim.run(func, [a.copy() for a in arrays], pipeline=pipeline).arrays
        if self.flip:
            bits(out[-1]).reshape(-1)[0] ^= 1
        if self.change is not None:
            out[-1] = self.change(out[-1])
        return out


SEEDS = [36, 0, 1, 2]  # an approximate sqrt, then a few others (a TMA store, mma, ...)
WGMMA_SEED = 18  # a small wgmma (m64n24k16, float16, accum)


def test_the_harness_passes_a_gpu_that_agrees(differential, monkeypatch):
    """``_worker``'s plumbing on the CPU: a GPU that computes what the simulator does
    passes every case, the approximate one included."""
    import time

    _SimulatedGpu(monkeypatch)
    rows = differential._worker((SEEDS, time.time() + 600))
    assert [r["seed"] for r in rows] == SEEDS
    assert not [r for r in rows if r["problems"]], rows


def test_the_harness_fails_a_gpu_that_disagrees(differential, monkeypatch):
    """The control: one bit off in the last output is a failure on every case whose
    kernels ran (both pipelines' disagreements are reported)."""
    import time

    _SimulatedGpu(monkeypatch, flip=True)
    rows = differential._worker((SEEDS[1:], time.time() + 600))
    assert rows and all(r["problems"] for r in rows), rows
    assert any("GPU and simulator differ" in p for r in rows for p in r["problems"])


def test_a_wgmma_is_compared_bit_for_bit(differential, monkeypatch):
    """A wgmma program is compared bit for bit like every other (sm_90's wgmma summation
    is the simulator's): a GPU that agrees passes it, one a single float off fails it."""
    import time

    case = fuzz.random_case(fuzz.RandomChooser(WGMMA_SEED), None)
    assert case.kind == "wgmma" and case.declines is None
    _SimulatedGpu(monkeypatch)
    [row] = differential._worker(([WGMMA_SEED], time.time() + 600))
    assert row["ours"] == "lowered" and not row["problems"], row
    _SimulatedGpu(monkeypatch, change=lambda x: _steps_all(x, 1))
    [row] = differential._worker(([WGMMA_SEED], time.time() + 600))
    assert any("GPU and simulator differ" in p for p in row["problems"]), row


def _steps_all(a: np.ndarray, n: int) -> np.ndarray:
    """``a`` with every element moved ``n`` floats up."""
    b = a.copy()
    bits(b)[...] += n
    return b
