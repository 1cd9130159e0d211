"""Shared-memory bank conflicts of a plan's accesses: one model for every tool that counts.

A warp's shared-memory request is served in wavefronts of 128 bytes: 8 lanes of 16-byte
accesses, 16 of 8-byte ones, 32 of 4 bytes or less (ldmatrix/stmatrix: one 8x8 matrix,
8 rows of 16 bytes, a wavefront). Within one wavefront, distinct 4-byte words on the same
of the 32 banks serialize; the most such words on one bank is the conflict degree.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .partition import Access

BANKS, BANK_BYTES, WAVEFRONT_BYTES = 32, 4, 128
LANES = 32


def bank(offset: int, elem_bytes: int) -> int:
    """The bank of the element at ``offset`` (elements from a 128-byte aligned start)."""
    return (offset * elem_bytes // BANK_BYTES) % BANKS


def _wavefront_worst(
    step: np.ndarray, thread: np.ndarray, first_byte: np.ndarray, nbytes: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(wavefront of each access, worst conflict degree of each wavefront).

    Keys are packed into single int64s so that every grouping is a 1-D ``np.unique``.
    """
    step, thread = np.asarray(step, np.int64), np.asarray(thread, np.int64)
    first_byte, nbytes = np.asarray(first_byte, np.int64), np.asarray(nbytes, np.int64)
    lanes_per_wave = np.maximum(1, WAVEFRONT_BYTES // np.maximum(nbytes, BANK_BYTES))
    wave_key = (step * (thread.max() // LANES + 1) + thread // LANES) * LANES + (
        thread % LANES // lanes_per_wave
    )
    _, wave = np.unique(wave_key, return_inverse=True)
    wave = wave.reshape(-1)
    first_word = first_byte // BANK_BYTES
    words = (first_byte + nbytes - 1) // BANK_BYTES - first_word + 1
    if np.all(words == words[0]):
        word = (first_word[:, None] + np.arange(words[0])).reshape(-1)
        owner = np.repeat(np.arange(step.size), words[0])
    else:
        owner = np.repeat(np.arange(step.size), words)
        word = (
            first_word[owner] + np.arange(owner.size) - np.repeat(np.cumsum(words) - words, words)
        )
    # distinct (wavefront, word) pairs, then how many of them fall on each bank
    span = int(word.max() - word.min()) + 1
    distinct = np.unique(wave[owner] * span + (word - word.min()))
    d_wave, d_word = distinct // span, distinct % span + word.min()
    per_bank, count = np.unique(d_wave * BANKS + d_word % BANKS, return_counts=True)
    worst = np.zeros(wave.max() + 1, np.int64)
    np.maximum.at(worst, per_bank // BANKS, count)
    return wave, worst


def wavefront_costs(
    step: np.ndarray, thread: np.ndarray, first_byte: np.ndarray, nbytes: np.ndarray
) -> tuple[np.ndarray, int]:
    """(conflict degree per access, wavefronts in all, i.e. shared-memory clocks).

    Accesses are flat arrays: the instruction (``step``) that issues it, the thread, its
    first byte and its size. Accesses of one instruction, one warp and one group of lanes
    that fit a wavefront together (8 lanes of 16 bytes, ...) are served together.
    """
    if np.size(step) == 0:
        return np.zeros(0, np.int64), 0
    wave, worst = _wavefront_worst(step, thread, first_byte, nbytes)
    return worst[wave], int(worst.sum())


def _costs(accesses: Sequence[Access], elem_bytes: int) -> tuple[np.ndarray, int]:
    return wavefront_costs(
        np.array([a.round for a in accesses], np.int64),
        np.array([a.thread for a in accesses], np.int64),
        np.array([a.offset * elem_bytes for a in accesses], np.int64),
        np.array([a.elements * elem_bytes for a in accesses], np.int64),
    )


def conflict_ways(accesses: Sequence[Access], elem_bytes: int) -> list[int]:
    """Per access (same order): the conflict degree of the wavefront that serves it."""
    return [int(w) for w in _costs(accesses, elem_bytes)[0]]


def total_wavefronts(accesses: Sequence[Access], elem_bytes: int) -> int:
    """How many wavefronts (shared-memory clocks) the accesses take: conflict degrees summed."""
    return _costs(accesses, elem_bytes)[1]
