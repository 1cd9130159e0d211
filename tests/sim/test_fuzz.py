"""Property-based differential fuzzing of every variant through the simulator.

Random programs (:mod:`tirx_cuda_dispatch.fuzz`: copies global <-> shared at every scope
with odd counts, offsets and swizzles, register layouts, m8n8 fragments against row-major,
column-major, padded and swizzled tiles, elementwise ops on registers and on shared
memory, every dtype) are lowered by our pipeline and by TVM's built-in one and simulated.
Our output must equal numpy and the built-in's (where the built-in is right) bit for bit;
a program ours refuses must be one nothing can lower, or one that is out of bounds. Each
case records, as hypothesis events, whether our variants took every call or why one
declined, and what the built-in did (``--hypothesis-show-statistics`` prints them).

CI runs a fast profile. The long one (10,000 cases or more)::

    TIRX_FUZZ_EXAMPLES=2000 python3 -m pytest -q tests/sim/test_fuzz.py --hypothesis-show-statistics
"""

from __future__ import annotations

import os
import warnings

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tirx_cuda_dispatch import fuzz, runtime

EXAMPLES = int(os.environ.get("TIRX_FUZZ_EXAMPLES", "10"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize="TIRX_FUZZ_EXAMPLES" not in os.environ,  # CI: the same cases every run
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


class DrawChooser:
    """A :class:`fuzz.Chooser` over hypothesis' ``draw`` (so cases shrink)."""

    def __init__(self, draw):
        self.draw = draw

    def pick(self, options):
        return self.draw(st.sampled_from(list(options)))

    def integer(self, lo, hi):
        return self.draw(st.integers(lo, hi))


@st.composite
def cases(draw, kind):
    return fuzz.random_case(DrawChooser(draw), kind)


@pytest.mark.parametrize("kind", sorted(fuzz.GENERATORS))
@given(data=st.data())
@FUZZ
def test_ours_equals_numpy_and_the_builtin(kind, data):
    case = data.draw(cases(kind))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # TVM's scalar-fallback warning
        verdict = fuzz.differential(case)
    event(f"ours: {verdict.ours}")
    event(f"built-in: {verdict.builtin.split(':')[0]}")
    assert verdict.ok, f"{case}: {verdict.problems}"


def test_the_generators_cover_what_the_issue_asks_for():
    """Odd element counts, offsets, every copy dtype, every scope, global->global and
    shared->shared copies (swizzled too) and shared-memory elementwise are in the space (a generator that lost them would pass silently)."""
    seen = {"odd": False, "offset": False, "dtypes": set(), "scopes": set(), "paths": set()}
    for seed in range(300):
        case = fuzz.random_case(fuzz.RandomChooser(seed), "gmem_smem")
        rows, cols = case.params["tile"]
        seen["odd"] |= (rows * cols) % 32 != 0
        seen["offset"] |= case.params["col_offset"] > 0
        seen["dtypes"].add(case.params["dtype"])
        seen["scopes"].add(case.params["scope"])
        seen["paths"].add((case.params["path"], case.params["second_layout"] is not None))
    assert seen["odd"] and seen["offset"]
    assert seen["paths"] == {
        ("shared", False),
        ("global", False),
        ("shared_shared", False),
        ("shared_shared", True),
    }
    assert seen["dtypes"] == set(fuzz.COPY_DTYPES)
    assert seen["scopes"] == {"warp", "warpgroup", "cta"}


def test_a_wrong_output_is_caught():
    """Negative control: a case whose expected answer is off in one bit fails."""
    case = fuzz.random_case(fuzz.RandomChooser(3), "gmem_smem")
    case.expected = case.expected.copy()
    runtime.bits(case.expected).reshape(-1)[0] ^= 1
    verdict = fuzz.differential(case)
    assert not verdict.ok and "ours differs from numpy" in verdict.problems[0]


def test_a_builtin_that_is_wrong_is_a_finding_not_a_failure():
    """TVM's built-in ldstmatrix takes float32 fragments with 16-bit matrix loads (it has no
    dtype check) and scrambles them; ours declines ldmatrix there and copies right."""
    for seed in range(200):
        case = fuzz.random_case(fuzz.RandomChooser(seed), "fragment")
        if case.params["dtype"] == "float32" and case.params["shared"] == "row":
            break
    verdict = fuzz.differential(case)
    assert verdict.ok, verdict.problems
    assert verdict.builtin.startswith("WRONG"), verdict.builtin


@pytest.mark.gpu
def test_gpu_agrees_with_the_simulator_on_random_programs():
    """bench/differential.py's worker on a few programs: both pipelines on the GPU and in
    the simulator, bit for bit (the script runs thousands in parallel)."""
    import importlib.util
    import time
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "bench" / "differential.py"
    spec = importlib.util.spec_from_file_location("differential", path)
    differential = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(differential)
    rows = differential._worker((list(range(16)), time.time() + 600))
    assert len(rows) == 16
    assert not [r for r in rows if r["problems"]], rows
