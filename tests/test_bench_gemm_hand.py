"""bench/gemm_hand.py (part 8e of bench/run.py), what needs no GPU: the hand-written GEMM
is the example's design in its SASS (a main loop of 12 cp.async, 32 ldmatrix and 128 mma
a K tile, one barrier, no local memory), in both orders."""

from __future__ import annotations

import re
from collections import Counter

import pytest

from modules import BENCH, load_file
from tirx_cuda_dispatch import toolchain


@pytest.fixture(scope="module")
def hand():
    return load_file("bench_gemm_hand_under_test", BENCH / "gemm_hand.py")


def _main_loop(sass: str) -> Counter:
    """Opcode counts (without modifiers) of the largest backward-branch loop."""
    lines = sass.splitlines()
    labels = {}
    for i, line in enumerate(lines):
        m = re.match(r"\.(L_x_\d+):", line.strip())
        if m:
            labels[m.group(1)] = i
    loops = []
    for i, line in enumerate(lines):
        m = re.search(r"BRA\s+`?\(\.(L_x_\d+)\)", line)
        if m and labels.get(m.group(1), len(lines)) < i:
            ops = Counter()
            for text in lines[labels[m.group(1)] : i + 1]:
                op = re.match(r"\s*/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Za-z0-9_.]*)", text)
                if op:
                    ops[op.group(1).split(".")[0]] += 1
            loops.append(ops)
    return max(loops, key=lambda c: sum(c.values()))


@pytest.mark.parametrize("order", ["standard", "example"])
def test_the_hand_written_kernel_is_the_examples_design(hand, order):
    sass = toolchain.sass(toolchain.nvrtc_compile(hand.hand_gemm_source(order), "sm_90a"))
    loop = _main_loop(sass)
    assert loop["HMMA"] == 128 and loop["LDSM"] == 32 and loop["LDGSTS"] == 12
    assert loop["BAR"] == 1
    assert not [op for op in toolchain.opcodes(sass) if op.startswith(("LDL", "STL"))]
    assert f"DEPBAR.LE SB0, 0x{1 if order == 'standard' else 0}" in sass


def test_an_unknown_order_is_an_error(hand):
    with pytest.raises(ValueError, match="order='spread'"):
        hand.hand_gemm_source("spread")
