"""Memory as the simulated kernel sees it, with the checks the hardware would fault on.

One :class:`Memory` per allocation: global (the caller's arrays), shared (per CTA, with
race tracking between barriers), local (per thread). Every access is checked: in bounds,
aligned to its own size (a misaligned vector access faults on the GPU), and reading only
bytes that something wrote. Shared memory remembers, per byte, which warp last wrote and
read it in which barrier epoch: a write and a read (or two writes) by different warps in
the same epoch are a race, because nothing orders them on the GPU (the lockstep
simulation would otherwise hide a missing barrier).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from ..layout.banks import conflict_ways
from ..layout.partition import Access
from .errors import SimError

NONE, MANY = -1, -2


@dataclass
class Counters:
    """What the simulated kernels did: instructions by kind (one per warp that issues
    them), bytes moved by memory space and direction, and each shared-memory access's
    bank-conflict degree (128-byte wavefront model, :mod:`..layout.banks`)."""

    instructions: Counter = field(default_factory=Counter)
    bytes: Counter = field(default_factory=Counter)  # "shared.load" -> bytes
    bank_conflicts: list[BankRecord] = field(default_factory=list)

    def conflict_histogram(self) -> dict[int, int]:
        """How many shared-memory warp accesses had each conflict degree."""
        return dict(sorted(Counter(r.ways for r in self.bank_conflicts).items()))

    def max_conflict(self, buffer: str | None = None) -> int:
        ways = [r.ways for r in self.bank_conflicts if buffer in (None, r.buffer)]
        return max(ways, default=1)

    def as_dict(self) -> dict:
        return {
            "instructions": dict(sorted(self.instructions.items())),
            "bytes": dict(sorted(self.bytes.items())),
            "bank_conflicts": self.conflict_histogram(),
        }


@dataclass(frozen=True)
class BankRecord:
    """One warp's shared-memory access: which instruction, buffer, warp, and the worst
    conflict degree among its wavefronts."""

    instruction: str
    buffer: str
    warp: int
    ways: int


class Memory:
    """One allocation's bytes. Local memory has one row per thread."""

    def __init__(
        self,
        name: str,
        space: str,
        nbytes: int,
        threads: int | None = None,
        data: np.ndarray | None = None,
        rng: np.random.Generator | None = None,
    ) -> None:
        self.name, self.space, self.nbytes = name, space, int(nbytes)
        shape = (threads, self.nbytes) if space == "local" else (self.nbytes,)
        if data is not None:
            self.data = data
            self.written = np.ones(shape, dtype=bool)
        else:
            rng = rng or np.random.default_rng(0)
            self.data = rng.integers(0, 256, size=shape, dtype=np.uint8)  # garbage, not 0
            self.written = np.zeros(shape, dtype=bool)
        if space == "shared":
            self.w_epoch = np.full(shape, -1, dtype=np.int64)
            self.w_warp = np.full(shape, NONE, dtype=np.int32)
            self.r_epoch = np.full(shape, -1, dtype=np.int64)
            self.r_warp = np.full(shape, NONE, dtype=np.int32)
        # tcgen05.ld results may not be read before tcgen05.wait::ld (local only)
        self.pending = np.zeros(shape, dtype=bool) if space == "local" else None

    def _cells(self, threads: np.ndarray, offsets: np.ndarray, size: int, what: str):
        """Byte indices ``(n, size)`` of an access, after bounds and alignment checks."""
        bad = (offsets < 0) | (offsets + size > self.nbytes)
        if bad.any():
            i = int(np.argmax(bad))
            raise SimError(
                f"{what} of {size} bytes at byte {int(offsets[i])} of {self.space} "
                f"{self.name} ({self.nbytes} bytes) is out of bounds (thread {int(threads[i])})"
            )
        align = size if size & (size - 1) == 0 else 1
        misaligned = offsets % min(align, 16) != 0
        if misaligned.any():
            i = int(np.argmax(misaligned))
            raise SimError(
                f"misaligned {size}-byte {what} at byte {int(offsets[i])} of {self.space} "
                f"{self.name} (thread {int(threads[i])}): a {size}-byte access must be "
                f"{min(align, 16)}-byte aligned, the GPU faults"
            )
        return offsets[:, None] + np.arange(size)

    def _index(self, threads: np.ndarray, cells: np.ndarray):
        return (threads[:, None], cells) if self.space == "local" else cells

    def load(self, threads: np.ndarray, offsets: np.ndarray, size: int, epoch: int) -> np.ndarray:
        """Bytes ``(n, size)`` that ``threads`` read at byte ``offsets``."""
        cells = self._cells(threads, offsets, size, "load")
        index = self._index(threads, cells)
        unwritten = ~self.written[index]
        if unwritten.any():
            i = int(np.argwhere(unwritten)[0][0])
            raise SimError(
                f"thread {int(threads[i])} reads byte {int(cells[i][0])} of {self.space} "
                f"{self.name}, which nothing wrote"
            )
        if self.pending is not None and self.pending[index].any():
            i = int(np.argwhere(self.pending[index])[0][0])
            raise SimError(
                f"thread {int(threads[i])} reads register {self.name} (byte "
                f"{int(cells[i][0])}) that a tcgen05.ld is still filling: "
                f"tcgen05.wait::ld is missing before the use"
            )
        if self.space == "shared":
            self._track(threads, cells, epoch, write=False)
        return self.data[index]

    def store(self, threads: np.ndarray, offsets: np.ndarray, raw: np.ndarray, epoch: int) -> None:
        cells = self._cells(threads, offsets, raw.shape[1], "store")
        if self.space == "shared":
            self._track(threads, cells, epoch, write=True)
        index = self._index(threads, cells)
        self.data[index] = raw
        self.written[index] = True
        if self.pending is not None:
            self.pending[index] = False

    def _track(self, threads: np.ndarray, cells: np.ndarray, epoch: int, write: bool) -> None:
        """Race check: another warp touched these bytes in the same barrier epoch."""
        warps = np.broadcast_to((threads // 32)[:, None], cells.shape).ravel()
        flat = cells.ravel()
        same_epoch_w = self.w_epoch[flat] == epoch
        other_w = same_epoch_w & (self.w_warp[flat] >= 0) & (self.w_warp[flat] != warps)
        if other_w.any():
            i = int(np.argmax(other_w))
            kind = "writes" if write else "reads"
            raise SimError(
                f"shared-memory race on {self.name} byte {int(flat[i])}: warp {int(warps[i])} "
                f"{kind} it after warp {int(self.w_warp[flat[i]])} wrote it, with no barrier "
                f"between"
            )
        if write:
            r_same = self.r_epoch[flat] == epoch
            r_w = self.r_warp[flat]
            other_r = r_same & ((r_w == MANY) | ((r_w >= 0) & (r_w != warps)))
            if other_r.any():
                i = int(np.argmax(other_r))
                raise SimError(
                    f"shared-memory race on {self.name} byte {int(flat[i])}: warp "
                    f"{int(warps[i])} overwrites it while another warp reads it in the same "
                    f"barrier interval (a barrier is missing between the read and the write)"
                )
            # two warps writing one byte in this very access
            lo = np.full(self.nbytes, np.iinfo(np.int32).max, dtype=np.int64)
            hi = np.full(self.nbytes, -1, dtype=np.int64)
            np.minimum.at(lo, flat, warps)
            np.maximum.at(hi, flat, warps)
            clash = (hi[flat] != lo[flat]) & (hi[flat] >= 0)
            if clash.any():
                i = int(np.argmax(clash))
                raise SimError(
                    f"shared-memory race on {self.name} byte {int(flat[i])}: warps "
                    f"{int(lo[flat[i]])} and {int(hi[flat[i]])} write it at once"
                )
            self.w_epoch[flat] = epoch
            self.w_warp[flat] = warps
        else:
            fresh = self.r_epoch[flat] != epoch
            prev = np.where(fresh, NONE, self.r_warp[flat])
            merged = np.where(
                (prev == NONE) | (prev == warps), warps, MANY
            )  # readers so far this epoch
            self.r_epoch[flat] = epoch
            self.r_warp[flat] = merged
            # several warps reading the same byte in this access
            lo = np.full(self.nbytes, np.iinfo(np.int32).max, dtype=np.int64)
            hi = np.full(self.nbytes, -1, dtype=np.int64)
            np.minimum.at(lo, flat, warps)
            np.maximum.at(hi, flat, warps)
            many = hi[flat] != lo[flat]
            if many.any():
                self.r_warp[flat[many]] = MANY


def bank_ways(threads: np.ndarray, offsets: np.ndarray, size: int) -> dict[int, int]:
    """Per warp of ``threads``: the worst conflict degree of its wavefronts, when each
    thread accesses ``size`` bytes at byte ``offsets`` of one shared allocation."""
    by_warp: dict[int, list[Access]] = {}
    for t, off in zip(threads.tolist(), offsets.tolist(), strict=True):
        by_warp.setdefault(t // 32, []).append(Access(0, t, off, size))
    return {w: max(conflict_ways(items, 1)) for w, items in by_warp.items()}
