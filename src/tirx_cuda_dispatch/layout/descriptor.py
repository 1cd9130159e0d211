"""A shared operand of a warpgroup MMA as matrix descriptors: which canonical layout of the
PTX ISA (9.7.15.5.1.2: K- or MN-major, swizzle mode, leading and stride byte offsets) puts
every element of the operand where its shared layout does, and each instruction's start.

The search is over the few candidates the layout allows (the swizzle mode is the layout's
own; LBO and SBO are read off the addresses of the elements the canonical layout's strides
name) and every candidate is checked element by element against the layout: a descriptor
is only ever returned for a layout it names exactly. Pure Python over a
:class:`.atoms.MemoryView`; the wgmma variant reads it (and the TMA variant shares the
swizzle rule, :func:`.swizzle.byte_swizzle`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import Decline
from ..irfacts import as_int, prove_multiple
from ..isa.wgmma import MAJORS, SWIZZLE_MODES, MatrixDescriptor, canonical_offset
from .atoms import MemoryView, element_offsets
from .swizzle import byte_swizzle

MODE_OF_BYTES = {0: "none", 32: "32B", 64: "64B", 128: "128B"}
PERIOD = {"none": 16, "32B": 256, "64B": 512, "128B": 1024}  # bytes a swizzle repeats in
FIELD_LIMIT = 1 << 18  # start, LBO and SBO: 14 bits in units of 16 bytes


@dataclass(frozen=True)
class OperandDescriptors:
    """The descriptors of one shared operand, an ``mn x k`` matrix cut into instruction
    tiles of ``tile_mn x tile_k``: the canonical layout they share and each tile's start
    (bytes from the allocation's start; the swizzle applies to the whole address)."""

    major: str
    swizzle: str
    lbo: int
    sbo: int
    elem_bits: int
    starts: tuple[tuple[int, ...], ...]  # [mn tile][k tile]
    offset: Any = 0  # a symbolic part of the start (bytes, a multiple of the swizzle period)

    def descriptor(self, mn_tile: int, k_tile: int) -> MatrixDescriptor:
        return MatrixDescriptor(self.starts[mn_tile][k_tile], self.lbo, self.sbo, self.swizzle)

    def __str__(self) -> str:
        return f"{self.major}-major, {self.swizzle} swizzle, LBO {self.lbo}, SBO {self.sbo}"


def _candidates(raw: np.ndarray, major: str, mode: str, t: int, w: int) -> list[tuple[int, int]]:
    """(LBO, SBO) pairs the canonical layout's strides read off the unswizzled byte
    offsets ``raw[mn, k]`` of one tile (a stride the tile does not reach is free: 16)."""

    def step(mn: int, k: int) -> int:
        if mn < raw.shape[0] and k < raw.shape[1]:
            return int(raw[mn, k] - raw[0, 0])
        return 16

    if major == "K":
        if mode == "none":
            return [(step(0, t), step(8, 0))]
        return [(16, step(8, 0))]  # a swizzled K-major layout has no LBO
    if mode == "none":
        return [(step(0, 8), step(t, 0))]
    return [(step(t * w, 0), step(0, 8))]


def match(
    view: MemoryView, shape: tuple[int, int], k_axis: int, tile: tuple[int, int], elem_bits: int
) -> OperandDescriptors:
    """The descriptors naming ``view`` (a region of ``shape``, row-major index; ``k_axis``
    says which of its two dimensions is K) in instruction tiles of ``tile`` (mn, k), or
    Decline saying why no canonical layout does."""
    size = elem_bits // 8
    swz = byte_swizzle(view.swizzle, size)
    if swz is None:
        raise Decline(
            f"{view.operand}'s swizzle {view.swizzle} is not one wgmma reads (16-byte units "
            "permuted by 32, 64 or 128 bytes)"
        )
    mode = MODE_OF_BYTES[swz]
    base, offset = as_int(view.base), 0
    if base is None:  # a stage's or a warpgroup's slice: a multiple of the period moves out
        if not prove_multiple(view.base, max(PERIOD[mode] // size, 1)):
            raise Decline(
                f"{view.operand} starts at element {view.base}, not provably a multiple of "
                f"the {PERIOD[mode]} bytes its {mode} swizzle repeats in"
            )
        base, offset = 0, view.base * size
    elif (base * size) % PERIOD[mode]:
        raise Decline(
            f"{view.operand} starts at element {view.base}, not a multiple of the "
            f"{PERIOD[mode]} bytes its {mode} swizzle repeats in"
        )
    raw = (element_offsets(view) + base) * size
    raw = raw.reshape(shape)
    if k_axis == 0:
        raw = raw.T  # (mn, k)
    mn, k = raw.shape
    tile_mn, tile_k = tile
    if mn % tile_mn or k % tile_k:
        raise Decline(
            f"{view.operand} is {mn} x {k} (mn x k); it must cut into {tile_mn} x {tile_k} tiles"
        )
    t, w = 128 // elem_bits, SWIZZLE_MODES[mode][1] // 16
    first = raw[:tile_mn, :tile_k]
    tried = []
    for major in MAJORS:
        for lbo, sbo in _candidates(first, major, mode, t, w):
            tried.append(f"{major}-major LBO {lbo} SBO {sbo}")
            if not all(0 < v < FIELD_LIMIT and v % 16 == 0 for v in (lbo, sbo)):
                continue
            canon = np.array(
                [
                    [
                        canonical_offset(major, mode, elem_bits, lbo, sbo, i, j)
                        for j in range(tile_k)
                    ]
                    for i in range(tile_mn)
                ],
                dtype=np.int64,
            )
            starts = []
            for a in range(0, mn, tile_mn):
                row = []
                for b in range(0, k, tile_k):
                    sub = raw[a : a + tile_mn, b : b + tile_k]
                    start = int(sub[0, 0])
                    if start % 16 or start >= FIELD_LIMIT or not np.array_equal(sub - start, canon):
                        break
                    row.append(start)
                else:
                    starts.append(tuple(row))
                    continue
                break
            else:
                return OperandDescriptors(major, mode, lbo, sbo, elem_bits, tuple(starts), offset)
    raise Decline(
        f"{view.operand}'s shared layout is no canonical wgmma layout with its {mode} swizzle "
        f"(tried {'; '.join(tried)}): lay it out as K-major rows of the swizzle's width or "
        "MN-major column blocks (bench/gemm_designs.py's A and B)"
    )
