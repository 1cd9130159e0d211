"""Blackwell tensor memory of one CTA: 128 lanes x 512 columns of 32-bit cells.

PTX ISA 9.7.16 ("Tensor Memory"): columns are allocated by ``tcgen05.alloc`` in powers of
two from 32 to 512 and must be freed with ``tcgen05.dealloc`` before the kernel exits; an
address is ``lane << 16 | column``; warp ``w`` of a warpgroup reaches only the 32 lanes
``32 * (w % 4) ...``. ``tcgen05.st`` completes asynchronously: reading its cells back
before ``tcgen05.wait::st`` is a hazard, and so is it here.
"""

from __future__ import annotations

import numpy as np

from .errors import SimError

LANES, COLUMNS = 128, 512


class TensorMemory:
    def __init__(self, rng: np.random.Generator) -> None:
        self.cells = rng.integers(0, 2**32, size=(LANES, COLUMNS), dtype=np.uint32)
        self.written = np.zeros((LANES, COLUMNS), dtype=bool)
        self.pending_st = np.full((LANES, COLUMNS), -1, dtype=np.int32)  # warp, or -1
        self.allocated: dict[int, int] = {}  # first column -> columns

    def alloc(self, ncols: int) -> int:
        if ncols < 32 or ncols > COLUMNS or ncols & (ncols - 1):
            raise SimError(f"tcgen05.alloc of {ncols} columns: needs a power of 2 in [32, 512]")
        for start in range(0, COLUMNS, ncols):
            if all(s + n <= start or start + ncols <= s for s, n in self.allocated.items()):
                self.allocated[start] = ncols
                return start
        raise SimError(f"tcgen05.alloc of {ncols} columns: tensor memory is full")

    def dealloc(self, address: int, ncols: int) -> None:
        col = address & 0xFFFF
        if self.allocated.get(col) != ncols:
            raise SimError(
                f"tcgen05.dealloc of {ncols} columns at column {col}: no such allocation "
                f"(allocated: {self.allocated or 'none'})"
            )
        del self.allocated[col]

    def check_freed(self) -> None:
        if self.allocated:
            raise SimError(
                f"the kernel exits with tensor memory still allocated (columns "
                f"{self.allocated}): tcgen05.dealloc is missing"
            )

    def _check(self, lanes: np.ndarray, cols: np.ndarray, what: str) -> None:
        if ((lanes < 0) | (lanes >= LANES)).any() or ((cols < 0) | (cols >= COLUMNS)).any():
            raise SimError(f"{what} outside tensor memory (lanes {lanes.min()}..{lanes.max()})")
        inside = np.zeros(cols.shape, dtype=bool)
        for start, n in self.allocated.items():
            inside |= (cols >= start) & (cols < start + n)
        if not inside.all():
            col = int(cols[~inside].flat[0])
            raise SimError(f"{what} touches column {col}, which no tcgen05.alloc gave this CTA")

    def store(self, warp: int, lanes: np.ndarray, cols: np.ndarray, values: np.ndarray) -> None:
        self._check(lanes, cols, "tcgen05.st")
        self.cells[lanes, cols] = values
        self.written[lanes, cols] = True
        self.pending_st[lanes, cols] = warp

    def load(self, warp: int, lanes: np.ndarray, cols: np.ndarray) -> np.ndarray:
        self._check(lanes, cols, "tcgen05.ld")
        if not self.written[lanes, cols].all():
            raise SimError("tcgen05.ld reads tensor-memory cells that nothing wrote")
        if (self.pending_st[lanes, cols] >= 0).any():
            raise SimError(
                "tcgen05.ld reads cells a tcgen05.st has not finished writing: "
                "tcgen05.wait::st is missing between them"
            )
        return self.cells[lanes, cols]

    def wait_st(self, warp: int) -> None:
        self.pending_st[self.pending_st == warp] = -1
