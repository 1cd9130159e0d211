"""Shared-memory bank conflicts of a plan's accesses: one model for every tool that counts.

A warp's shared-memory request is served in wavefronts of 128 bytes: 8 lanes of 16-byte
accesses, 16 of 8-byte ones, 32 of 4 bytes or less (ldmatrix/stmatrix: one 8x8 matrix,
8 rows of 16 bytes, a wavefront). Within one wavefront, distinct 4-byte words on the same
of the 32 banks serialize; the most such words on one bank is the conflict degree.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from .partition import Access

BANKS, BANK_BYTES, WAVEFRONT_BYTES = 32, 4, 128


def bank(offset: int, elem_bytes: int) -> int:
    """The bank of the element at ``offset`` (elements from a 128-byte aligned start)."""
    return (offset * elem_bytes // BANK_BYTES) % BANKS


def conflict_ways(accesses: Sequence[Access], elem_bytes: int) -> list[int]:
    """Per access (same order): the conflict degree of the wavefront that serves it."""
    groups: dict[tuple[int, int, int], list[int]] = defaultdict(list)
    for i, a in enumerate(accesses):
        access_bytes = max(a.elements * elem_bytes, BANK_BYTES)
        lanes_per_wave = max(1, WAVEFRONT_BYTES // access_bytes)
        groups[(a.round, a.thread // 32, a.thread % 32 // lanes_per_wave)].append(i)
    ways = [1] * len(accesses)
    for members in groups.values():
        words_on_bank: dict[int, set[int]] = defaultdict(set)
        for i in members:
            a = accesses[i]
            first = a.offset * elem_bytes // BANK_BYTES
            last = ((a.offset + a.elements) * elem_bytes - 1) // BANK_BYTES
            for word in range(first, last + 1):
                words_on_bank[word % BANKS].add(word)
        worst = max(len(w) for w in words_on_bank.values())
        for i in members:
            ways[i] = worst
    return ways
