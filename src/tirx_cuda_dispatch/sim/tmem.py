"""Blackwell tensor memory of one CTA: 128 lanes x 512 columns of 32-bit cells.

PTX ISA 9.7.16 ("Tensor Memory"): columns are allocated by ``tcgen05.alloc`` in powers of
two from 32 to 512 and must be freed with ``tcgen05.dealloc`` before the kernel exits; an
address is ``lane << 16 | column``; warp ``w`` of a warpgroup reaches only the 32 lanes
``32 * (w % 4) ...``. ``tcgen05.st`` completes asynchronously: its cells are written when
the warp's ``tcgen05.wait::st`` lands them (:mod:`.asynchrony`); until then they are
guarded, and reading them back is an error the queue of pending effects explains.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .errors import SimError
from .memory import IN_FLIGHT

LANES, COLUMNS = 128, 512


class TensorMemory:
    space, name = "tensor", "memory"

    def __init__(self, rng: np.random.Generator) -> None:
        self.data = rng.integers(0, 2**32, size=(LANES, COLUMNS), dtype=np.uint32)
        self.written = np.zeros((LANES, COLUMNS), dtype=bool)
        self.guard: np.ndarray | None = None  # as Memory.guard, set by the asynchrony
        self.owner: Any = None
        self.allocated: dict[int, int] = {}  # first column -> columns

    def describe(self, cell: tuple[int, ...]) -> str:
        return f"tensor-memory lane {cell[0]} column {cell[1]}"

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

    def cells(self, lanes: np.ndarray, cols: np.ndarray, what: str) -> tuple[np.ndarray, ...]:
        """The cells ``(lanes, cols)`` as an index of ``data``, after checking that they
        lie in tensor memory and in columns this CTA allocated."""
        if ((lanes < 0) | (lanes >= LANES)).any() or ((cols < 0) | (cols >= COLUMNS)).any():
            raise SimError(f"{what} outside tensor memory (lanes {lanes.min()}..{lanes.max()})")
        inside = np.zeros(cols.shape, dtype=bool)
        for start, n in self.allocated.items():
            inside |= (cols >= start) & (cols < start + n)
        if not inside.all():
            col = int(cols[~inside].flat[0])
            raise SimError(f"{what} touches column {col}, which no tcgen05.alloc gave this CTA")
        return (lanes, cols)

    def load(self, threads: np.ndarray, lanes: np.ndarray, cols: np.ndarray) -> np.ndarray:
        """The cells a ``tcgen05.ld`` reads (``threads``: the reading thread of each row);
        cells an earlier ``tcgen05.st`` has not landed are an error."""
        index = self.cells(lanes, cols, "tcgen05.ld")
        if self.guard is not None:
            hit = self.guard[index]
            if hit.any():
                raise self.owner.hazard(self, threads, index, hit, "reads")
        if not self.written[index].all():
            raise SimError("tcgen05.ld reads tensor-memory cells that nothing wrote")
        return self.data[index]

    def land(
        self,
        threads: np.ndarray,
        index: tuple[np.ndarray, ...],
        values: np.ndarray,
        clocks: Any,
        steps: np.ndarray | None = None,
        agents: np.ndarray | None = None,
    ) -> None:
        """A ``tcgen05.st`` lands (tensor memory has no race tracker)."""
        self.data[index] = values
        self.written[index] = True
        self.guard[index] &= ~np.uint8(IN_FLIGHT)
