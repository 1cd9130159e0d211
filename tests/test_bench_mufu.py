"""bench/mufu.py's kernels: on sm_90 ptxas splits each packed 16-bit exponential
(``ex2.approx.f16x2``, ``ex2.approx.ftz.bf16x2``) into one ``MUFU.EX2.F16`` (``.BF16``) a
half, so the SFU computes them element by element; the float32 form is one ``MUFU.EX2``
an element. Read from the SASS of the bench's own source (NVRTC, no GPU needed)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from tirx_cuda_dispatch import toolchain

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import mufu  # noqa: E402

pytestmark = pytest.mark.skipif(
    not toolchain.cuda_include_dirs(), reason="no CUDA headers for NVRTC on this machine"
)
SFU = {"ex2_f32": "MUFU.EX2", "ex2_f16x2": "MUFU.EX2.F16", "ex2_bf16x2": "MUFU.EX2.BF16"}


def _functions(sass: str) -> dict[str, str]:
    """Each kernel's SASS text by its name."""
    parts = re.split(r"//-+ \.text\.(\w+) +-+", sass)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def _exponentials(text: str) -> list[tuple[str, bool]]:
    """Each MUFU.EX2 instruction's opcode and whether it reads a high half (``.H1``)."""
    found = re.findall(r"\b(MUFU\.EX2[.\w]*) R\d+, R\d+(\.H1)?", text)
    return [(op, bool(high)) for op, high in found]


def test_each_packed_exponential_is_one_sfu_instruction_a_half_on_sm_90():
    text = _functions(toolchain.sass(toolchain.nvrtc_compile(mufu.SOURCE, "sm_90a", "mufu.cu")))
    assert set(text) == set(mufu.KERNELS)
    for name, (ptx, per) in mufu.KERNELS.items():
        ops = _exponentials(text[name])
        assert {op for op, _ in ops} == {SFU[name]}, (ptx, ops[:4])
        high = sum(h for _, h in ops)
        # a packed instruction: as many SFU instructions read the high halves as the low
        # ones; the float32 form reads whole registers (the control: no high half)
        assert len(ops) >= mufu.CHAINS and high == (len(ops) // 2 if per == 2 else 0), (ptx, high)
