"""bench/norms.py (parts 6 and 7 of bench/run.py), what needs no GPU: the hand-written
references of the CTA row-sum (7a) compute our plan's summation order where they claim
to, and compile to a loop of 16-byte shared loads with no local memory."""

from __future__ import annotations

import numpy as np
import pytest

from modules import BENCH, load_file
from tirx_cuda_dispatch import toolchain
from tirx_cuda_dispatch.runtime import bits, random_array


@pytest.fixture(scope="module")
def norms():
    return load_file("bench_norms_under_test", BENCH / "norms.py")


def hand_order(a: np.ndarray, rows: int, lanes: int, masks_down: bool = False) -> np.ndarray:
    """The hand-written kernel's sums in float32, as its CUDA adds them: vector s * lanes +
    l of a row, element j into accumulator j, folded left, then the xor butterfly, low
    mask first (``masks_down``: high first, another order)."""
    cols = a.shape[-1]
    v = a.reshape(-1, rows, cols // 4 // lanes, lanes, 4)
    acc = np.full((v.shape[0], rows, lanes, 4), -0.0, np.float32)
    for s in range(v.shape[2]):
        acc = acc + v[:, :, s]
    x = ((acc[..., 0] + acc[..., 1]) + acc[..., 2]) + acc[..., 3]
    lane = np.arange(lanes)
    masks = [1 << b for b in range(lanes.bit_length() - 1)]
    for m in reversed(masks) if masks_down else masks:
        x = x + x[:, :, lane ^ m]
    return x[:, :, 0].reshape(-1)


@pytest.mark.parametrize(
    "rows,cols,threads,dynamic",
    [
        (8, 1024, 256, False),
        (32, 256, 256, False),
        (8, 1024, 128, False),
        (8, 1024, 64, True),
        (16, 1024, 128, True),
    ],
)
def test_the_hand_written_kernel_adds_in_our_plans_order(norms, rows, cols, threads, dynamic, rng):
    func = norms.cta_sum_loop(rows, cols, 2, threads, dynamic)
    _, schedule = norms.cta_sum_plan(func)
    lanes = norms._hand_lanes(schedule, rows, threads)
    assert lanes == threads // rows
    a = random_array((2 * rows, cols), "float32", rng)
    want = norms.cta_sum_expected(schedule, a, rows)
    assert np.array_equal(bits(hand_order(a, rows, lanes)), bits(want))
    # the control: the butterfly high mask first is another order; the check tells it apart
    assert not np.array_equal(bits(hand_order(a, rows, lanes, masks_down=True)), bits(want))


def test_a_plan_with_a_workspace_gets_no_hand_written_twin(norms):
    """2 x 4096 over 8 warps combines 4 warps per row through the workspace, which the
    hand-written kernel does not: the bench times only its no-combine bound there."""
    _, schedule = norms.cta_sum_plan(norms.cta_sum_loop(2, 4096, 2, 256))
    assert schedule.warp_partials == 4
    assert norms._hand_lanes(schedule, 2, 256) is None


@pytest.mark.parametrize("dynamic", [False, True])
@pytest.mark.parametrize("combine", [True, False])
def test_the_hand_written_loop_loads_16_bytes_and_keeps_to_registers(norms, combine, dynamic):
    source = norms.hand_cta_sum_source(8, 1024, 128, combine, dynamic)
    assert ("extern __shared__" in source) == dynamic
    sass = toolchain.sass(toolchain.nvrtc_compile(source))
    ops = toolchain.opcodes(sass)
    assert any(op.startswith("LDS.128") for op in ops)
    assert not any(op.startswith(("LDL", "STL")) for op in ops)
    shuffles = sum(n for op, n in ops.items() if op.startswith("SHFL"))
    assert shuffles == (4 if combine else 0)  # log2(16 lanes per row), or none


def test_the_dynamic_tile_is_one_dynamic_allocation_of_ours(norms):
    """The 64 KiB tile is over the static limit: ours declares it ``extern __shared__``."""
    source = toolchain.cuda_source(
        norms.cta_sum_loop(16, 1024, 2, 128, True), "sm_90a", norms.STRICT
    )
    assert "extern __shared__" in source
    static = toolchain.cuda_source(norms.cta_sum_loop(8, 1024, 2, 128), "sm_90a", norms.STRICT)
    assert "extern __shared__" not in static
