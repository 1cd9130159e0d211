"""Warp-level ``mma.sync.aligned`` (PTX ISA 9.7.14.5.14 "mma"), floating point.

TVM's PTX table spells it ``T.ptx.mma`` (``.f32`` accumulators) and ``T.ptx.mma_f16acc``
(``.f16`` ones): the D, A, B, C registers in that order, then the modifiers ``sync
aligned shape alayout blayout dtype atype btype ctype``. The simulator executes the
``.m16n8k16`` and ``.m16n8k8`` lines with ``.f16``/``.bf16`` multiplicands (``.f32`` or,
for ``.f16``, ``.f16`` accumulators) and ``.m16n8k8`` with ``.tf32``; the fragments come
from :mod:`.fragments` (the ISA's formulas). The arithmetic: for an sm_90 target the
summation the H200 was measured to perform, bit for bit (:func:`.numerics.mma_sum_sm90`);
for any other target, which no GPU of ours has measured, the exact sum rounded once
(:func:`.numerics.mma_sum`), within :func:`.numerics.mma_bound` of sm_90's
(docs/simulator.md "mma numerics"). Any other line is a :class:`SimError` naming it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from . import fragments
from .calls import Table, plain_ptx_operands, register_bits, write_register
from .errors import SimError
from .interpreter import Machine
from .numerics import mma_sum, mma_sum_sm90, ptx_operand_values, ptx_value_dtype

TABLE = Table()

_SLOTS = ("sync", "aligned", "shape", "alayout", "blayout", "dtype", "atype", "btype", "ctype")
# (atype, dtype == ctype) -> the shapes whose syntax line has them (ISA "mma" Syntax:
# ".m16n8k8/.m16n8k16 .dtype.f16.f16.ctype", ".m16n8k8.f32.{bf16,tf32}...f32",
# ".m16n8k16.f32.bf16.bf16.f32"), of those this simulator executes.
_LINES = {
    ("f16", "f32"): ("m16n8k16", "m16n8k8"),
    ("f16", "f16"): ("m16n8k16", "m16n8k8"),
    ("bf16", "f32"): ("m16n8k16", "m16n8k8"),
    ("tf32", "f32"): ("m16n8k8",),
}


@dataclass(frozen=True)
class MmaForm:
    """One ``mma.sync.aligned.shape.alayout.blayout.dtype.atype.btype.ctype`` line."""

    shape: str
    alayout: str
    blayout: str
    dtype: str
    atype: str
    btype: str
    ctype: str

    def __str__(self) -> str:
        return (
            f"mma.sync.aligned.{self.shape}.{self.alayout}.{self.blayout}"
            f".{self.dtype}.{self.atype}.{self.btype}.{self.ctype}"
        )

    def registers(self, operand: str) -> int:
        type_ = {"a": self.atype, "b": self.btype, "c": self.ctype, "d": self.dtype}[operand]
        return fragments.mma_registers(self.shape, "c" if operand == "d" else operand, type_)


def mma_form(tokens: list[str]) -> MmaForm:
    """The line a call's modifier tokens name, if the simulator executes it; otherwise a
    :class:`SimError` saying which part is not modeled and what is."""
    spelling = "mma." + ".".join(tokens)
    if len(tokens) != len(_SLOTS) or tokens[:2] != ["sync", "aligned"]:
        raise SimError(f"{spelling}: expected mma.sync.aligned.shape.alayout.blayout.d.a.b.c")
    form = MmaForm(*tokens[2:])
    shapes = _LINES.get((form.atype, form.dtype))
    known = ", ".join(f".{a} -> .{d} at .{'/.'.join(s)}" for (a, d), s in _LINES.items())
    if form.btype != form.atype or form.ctype != form.dtype or shapes is None:
        raise SimError(
            f"{form}: the simulator executes .dtype == .ctype and .atype == .btype lines "
            f"only, of these: {known}"
        )
    if form.shape not in shapes:
        raise SimError(
            f"{form}: shape .{form.shape} is not modeled for .{form.atype} -> .{form.dtype}; "
            f"the simulator executes {known}"
        )
    if (form.alayout, form.blayout) != ("row", "col"):
        raise SimError(
            f"{form}: .{form.alayout}.{form.blayout} does not exist for .{form.shape}: "
            f"its only layout is .row.col (A row-major, B column-major)"
        )
    return form


def _operand_words(m: Machine, regs: list[Any], what: str) -> np.ndarray:
    """The registers' bits per thread: ``(threads, len(regs))`` uint32."""
    return np.stack([register_bits(m, r, 32, what) for r in regs], axis=1)


def _values(form: MmaForm, operand: str, bits: np.ndarray) -> np.ndarray:
    type_ = {"a": form.atype, "b": form.btype, "c": form.ctype}[operand]
    return ptx_operand_values(bits, type_)


def _require_whole_warps(m: Machine, what: str) -> None:
    """``.sync.aligned`` and a warp-wide fragment: all 32 lanes of each issuing warp."""
    m.require_full_warps(what)
    for warp in m.warps():
        if (warp + 1) * 32 > m.threads:
            raise SimError(
                f"{what} needs all 32 lanes of warp {warp}, but the CTA has only "
                f"{m.threads} threads (lanes {warp * 32}-{m.threads - 1} exist)"
            )


def _summation(m: Machine):
    """The kernel's target's mma summation: sm_90's measured rule, else the exact one."""
    return mma_sum_sm90 if m.arch().startswith("sm_90") else mma_sum


@TABLE.entry("tirx.ptx.mma", "tirx.ptx.mma_f16acc")
def _mma(m: Machine, call: Any) -> None:
    """``mma.sync.aligned.{m16n8k16,m16n8k8}.row.col.dtype.atype.btype.ctype d, a, b, c``
    (PTX ISA "mma"): the warp computes D (16x8) = A (16xK) B (Kx8) + C, every matrix
    spread over its 32 lanes by the ISA's fragment formulas (``.f16``/``.bf16`` in two
    16-bit halves of each register, the lower-numbered element low); ``.f16``/``.bf16``
    with ``.f32`` accumulators, ``.f16`` with ``.f16``, ``.tf32`` at ``.m16n8k8``. Each
    output is ``c`` plus the ``K`` exact products, summed as the target's tensor cores do
    (:func:`_summation`). Every lane of the warp must execute it."""
    parsed = plain_ptx_operands(call, "mma")
    form = mma_form(parsed.tokens)
    what = str(form)
    counts = [form.registers(x) for x in ("d", "a", "b", "c")]
    if len(parsed.operands) != sum(counts):
        raise SimError(
            f"{what} takes {counts[0]} D, {counts[1]} A, {counts[2]} B and {counts[3]} C "
            f"registers ({sum(counts)}), got {len(parsed.operands)} operands"
        )
    ends = np.cumsum(counts)
    d_regs, a_regs, b_regs, c_regs = (
        parsed.operands[e - n : e] for e, n in zip(ends, counts, strict=True)
    )
    _require_whole_warps(m, what)
    held = {
        name: _operand_words(m, regs, what)
        for name, regs in (("a", a_regs), ("b", b_regs), ("c", c_regs))
    }
    out = np.zeros((m.threads, counts[0]), dtype=np.uint32)
    types = {"a": form.atype, "b": form.btype, "c": form.ctype}
    warps = m.warps()  # all issuing warps at once: each warp's product is its own
    if warps:
        lanes = (np.asarray(warps)[:, None] * 32 + np.arange(32)).reshape(-1)
        mats = {
            name: _values(
                form,
                name,
                fragments.mma_unpack(
                    form.shape, name, types[name], w[lanes].reshape(len(warps), 32, -1)
                ),
            )
            for name, w in held.items()
        }
        d = _summation(m)(mats["a"], mats["b"], mats["c"], ptx_value_dtype(form.dtype))
        out[lanes] = fragments.mma_pack(form.shape, "c", form.dtype, d).reshape(len(lanes), -1)
        m.counters.instructions[f"mma.{form.shape}.{form.dtype}.{form.atype}"] += len(warps)
    for k, reg in enumerate(d_regs):
        write_register(m, reg, out[:, k], what)
