"""Vector-width choice: the widest access (128 -> 8 bits) that keeps every address aligned.

A ``v``-element access is legal when the innermost dimension is contiguous on every
operand and its extent is a multiple of ``v``, and every other address term a thread adds
(strides of the remaining dimensions, base offsets) is a multiple of ``v``: then each
per-thread, per-round address is naturally aligned to the access width. Callers decide
which strides count (a register-induced partition leaves out thread-axis strides, which
never appear in one thread's address).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..irfacts import prove_multiple

VECTOR_BITS = (128, 64, 32, 16, 8)


def vector_candidates(elem_bits: int) -> list[tuple[int, int]]:
    """(bits, elements) per access, widest first, for ``elem_bits``-wide elements."""
    return [
        (bits, bits // elem_bits)
        for bits in VECTOR_BITS
        if bits >= elem_bits and bits % elem_bits == 0
    ]


def vector_misfit(
    elems: int,
    tail: tuple[int, Sequence[int]],
    strides: Sequence[tuple[str, int]],
    bases: Sequence[tuple[str, Any]],
) -> str | None:
    """Why an ``elems``-wide access does not fit, or None when it does.

    ``tail`` is the innermost dimension (extent, per-operand strides); ``strides`` and
    ``bases`` are named address terms that must be multiples of ``elems``.
    """
    if elems == 1:
        return None
    extent, tail_strides = tail
    if any(s != 1 for s in tail_strides):
        return f"innermost dimension is not contiguous (strides {list(tail_strides)})"
    if extent % elems:
        return f"contiguous run of {extent} elements is not a multiple of {elems}"
    for what, stride in strides:
        if stride % elems:
            return f"{what} stride {stride} is not a multiple of {elems}"
    for what, base in bases:
        if not prove_multiple(base, elems):
            return f"{what} base offset {base} is not provably a multiple of {elems}"
    return None
