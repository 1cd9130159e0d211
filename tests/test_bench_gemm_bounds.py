"""bench/gemm_bounds.py (part 8c of bench/run.py), what needs no GPU: the fill kernel's
SASS and its check, the bytes a GEMM brings into shared memory, and that each ablation of
examples/gemm.py removes its half of the main loop and only that."""

from __future__ import annotations

import numpy as np
import pytest

from modules import BENCH, ROOT, load_file
from tirx_cuda_dispatch import toolchain


@pytest.fixture(scope="module")
def bounds():
    return load_file("bench_gemm_bounds_under_test", BENCH / "gemm_bounds.py")


@pytest.fixture(scope="module")
def example():
    return load_file("example_gemm_for_bounds", ROOT / "examples" / "gemm.py")


@pytest.mark.parametrize("stages", [3, 4])
def test_fill_kernel_issues_ldgsts_in_a_loop_and_no_local_memory(bounds, stages):
    sass = toolchain.sass(toolchain.nvrtc_compile(bounds.fill_source(stages)))
    ops = toolchain.opcodes(sass)
    assert any(op.startswith("LDGSTS") for op in ops)
    assert any(op.startswith("LDGDEPBAR") for op in ops)  # the commit
    assert not any(op.startswith(("LDL", "STL")) for op in ops)
    assert f"DEPBAR.LE SB0, 0x{stages - 2:x}" in sass  # wait_group stages - 2


def test_fill_check_wants_each_ctas_last_piece(bounds, rng):
    """The answer the GPU run is compared with: CTA b's last piece is (b + (iters - 1)
    grid) % pieces; another iteration count (a loop cut short) wants other bytes."""
    grid, pieces, piece16, iters = 3, 5, 512, 7
    src = rng.integers(0, 2**32, pieces * piece16 * 4, dtype=np.uint32)
    units = src.reshape(pieces, piece16, 4)
    want = bounds.fill_expected(src, grid, pieces, piece16, iters)
    threads = bounds.FILL_THREADS
    for b in range(grid):
        piece = (b + (iters - 1) * grid) % pieces
        np.testing.assert_array_equal(want[b * threads : (b + 1) * threads], units[piece, :threads])
    assert not np.array_equal(want, bounds.fill_expected(src, grid, pieces, piece16, iters - 1))


def test_filled_bytes_count_every_k_tile_of_every_cta(bounds):
    nbytes, per_byte = bounds._filled_bytes((4096, 4096, 4096), {"tile": (128, 256, 64)})
    ctas, k_tiles = (4096 // 128) * (4096 // 256), 4096 // 64
    assert nbytes == ctas * k_tiles * (128 * 64 + 64 * 256) * 2
    assert per_byte == pytest.approx(2 * 128 * 256 * 64 / ((128 + 256) * 64 * 2))
    small, _ = bounds._filled_bytes((4000, 4000, 4000), {"tile": (128, 256, 64)})
    assert small == nbytes * 63 // 64  # edge tiles whole (the rest zeros); 63 K tiles


def _main_loop_ops(example, ablate) -> dict[str, int]:
    func = example.gemm_kernel(
        256, 512, 256, stages=3, tile=(128, 256, 64), warp_grid=(2, 4), ablate=ablate
    )
    sass = toolchain.kernel_sass(func, "sm_90a", "tirx_cuda_dispatch.strict")
    ops = toolchain.opcodes(sass)
    return {
        "ldgsts": sum(v for k, v in ops.items() if k.startswith("LDGSTS")),
        "hmma": sum(v for k, v in ops.items() if k.startswith("HMMA")),
        "ldsm": sum(v for k, v in ops.items() if k.startswith("LDSM")),
    }


def test_each_ablation_removes_its_half_of_the_main_loop(example):
    whole = _main_loop_ops(example, None)
    assert whole["ldgsts"] and whole["hmma"] and whole["ldsm"]
    loads = _main_loop_ops(example, "math")  # loads only
    assert loads["ldgsts"] and loads["hmma"] == 0
    assert loads["ldsm"] < whole["ldsm"]  # the bias fragment's ldmatrix may stay
    math = _main_loop_ops(example, "loads")  # math only
    assert math["ldgsts"] == 0 and math["hmma"] and math["ldsm"]


def test_an_unknown_ablation_is_an_error(example):
    with pytest.raises(ValueError, match="ablate='mma'"):
        example.gemm_kernel(256, 256, 64, ablate="mma")


def test_run_registers_the_part():
    run_py = load_file("bench_run_for_bounds", BENCH / "run.py")
    assert "gemm_bounds" in run_py.TITLES and "gemm_bounds" in run_py.GPU_PARTS
    assert "gemm_bounds" in run_py.DEFAULT_PARTS.split(",")


def test_clock_reasons_name_the_bits_set(bounds):
    assert bounds.clock_reasons(0) == "none"
    assert bounds.clock_reasons(0x4) == "SW power cap"
    assert bounds.clock_reasons(0x4 | 0x20) == "SW power cap, SW thermal"
    assert bounds.clock_reasons(0x4 | 0x1000) == "SW power cap, 0x1000"  # an unnamed bit


def test_samples_parse_and_the_ramp_is_left_out(bounds):
    """nvidia-smi lines as the sampler writes them; a cut or "[N/A]" line is left out, and
    the first fifth (the ramp) does not count."""
    lines = ["345, 90.1, 40, 0x0000000000000001"] * 2  # idle, at the start
    lines += ["1725, 691.0, 61, 0x0000000000000004"] * 7 + ["1485, 700.2, 62, 0x0000000000000004"]
    lines += ["[N/A], 650.0, 61, 0x0", "1725, 69"]
    samples = bounds.parse_samples("\n".join(lines))
    assert len(samples) == 10
    got = bounds.summarize(samples)
    assert got["SM MHz"] == 1725 and got["SM MHz min"] == 1485
    assert got["clock held by"] == "SW power cap" and got["deg C max"] == 62
    # the control: with the ramp counted, the idle samples would show
    assert bounds.summarize(samples[2:] + samples[:2])["clock held by"] != "SW power cap"


def test_no_samples_is_an_error_not_a_row_of_zeros(bounds):
    with pytest.raises(RuntimeError, match="no samples"):
        bounds.summarize(bounds.parse_samples("garbage\n"))
