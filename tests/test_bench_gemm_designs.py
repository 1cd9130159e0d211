"""bench/gemm_designs.py (part 8f of bench/run.py), what needs no GPU: each hand-written
design is in its SASS what its name says (its load instruction, its math instruction, no
local memory), and part 8e's kernel, which none of them is, fails those checks."""

from __future__ import annotations

import re
from collections import Counter

import pytest

from modules import BENCH, load_file
from tirx_cuda_dispatch import toolchain


@pytest.fixture(scope="module")
def designs():
    return load_file("bench_gemm_designs_under_test", BENCH / "gemm_designs.py")


def _opcodes(sass: str) -> Counter:
    """How often each opcode (without modifiers) appears in ``sass``."""
    ops = Counter()
    for line in sass.splitlines():
        m = re.match(r"\s*/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Za-z0-9_.]*)", line)
        if m:
            ops[m.group(1).split(".")[0]] += 1
    return ops


def _design_of(ops: Counter) -> tuple[str | None, str | None]:
    """(loads, math) as the SASS shows them; None where it shows neither or both."""
    loads = {"cp.async": ops["LDGSTS"] > 0, "TMA": ops["UTMALDG"] > 0}
    math = {"wgmma": ops["HGMMA"] > 0, "mma.sync": ops["HMMA"] > 0}
    pick = lambda d: next(iter(k for k, v in d.items() if v)) if sum(d.values()) == 1 else None  # noqa: E731
    return pick(loads), pick(math)


def _sass(source: str) -> str:
    return toolchain.sass(toolchain.nvrtc_compile(source, "sm_90a"))


@pytest.mark.parametrize(
    "name", ["cp.async + wgmma", "TMA + mma.sync", "TMA + wgmma, warp-specialized"]
)
def test_each_design_is_what_its_name_says(designs, name):
    ops = _opcodes(_sass(designs.design_source(name)))
    loads, math = name.split(",")[0].split(" + ")
    assert _design_of(ops) == (loads, math)
    assert not ops["LDL"] and not ops["STL"]
    if math == "wgmma":  # 4 m64n256k16 a K tile, and nothing left of ldmatrix
        assert ops["HGMMA"] == 4 and not ops["LDSM"]
    if loads == "TMA":  # one box of A and 4 of B a stage, issued by one thread
        assert ops["UTMALDG"] % 5 == 0


def test_the_check_tells_part_8e_s_kernel_apart(designs):
    """Negative control: the cp.async + mma.sync kernel of part 8e is none of the designs."""
    ops = _opcodes(_sass(designs.gemm_hand.hand_gemm_source("example")))
    assert _design_of(ops) == ("cp.async", "mma.sync")
    assert all(
        _design_of(ops) != tuple(name.split(",")[0].split(" + ")) for name in designs.DESIGNS
    )


def test_shared_memory_fits_a_cta(designs):
    for name in designs.DESIGNS:
        assert designs.smem_bytes(name) <= 227 * 1024


def test_an_unknown_design_is_an_error(designs):
    with pytest.raises(ValueError, match="design='TMA'"):
        designs.design_source("TMA")


def test_run_registers_the_part():
    run_py = load_file("bench_run_for_designs", BENCH / "run.py")
    assert "gemm_designs" in run_py.TITLES and "gemm_designs" in run_py.GPU_PARTS
    assert "gemm_designs" in run_py.DEFAULT_PARTS.split(",")
    assert run_py.gemm_designs.part_gemm_designs.__module__ == "gemm_designs"
