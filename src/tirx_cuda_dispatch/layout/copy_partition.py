"""The partition of a copy between memory buffers, shared by the synchronous copy
(``copy -> gmem_smem``) and the asynchronous one (``copy_async -> ldgsts``).

Neither operand of such a copy says which thread owns which element, so the partition is
synthesized from the threads that run the call (:func:`.partition.scope_partition`). What
both copies decide alike lives here: which operand drives the order (the global side, so
consecutive threads touch consecutive global addresses; the source where both sides are in
the same memory), and the operands' memory views in that order. What differs is the access
widths an instruction has: ``ld``/``st`` move 8 to 128 bits, ``cp.async`` only 32, 64 or
128 (its cp-size is 4, 8 or 16 bytes, PTX ISA 9.7.9.25.3.1).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .atoms import memory_view
from .partition import PiecewisePartition, ScopePartition, scope_partition
from .vector import VECTOR_BITS
from .view import TileView


def copy_roles(src_memory: str, dst_memory: str) -> tuple[str, str]:
    """The partition's operand order: the global side first (it drives the order, so its
    accesses coalesce) where the copy has one global side, else the source first."""
    if src_memory != dst_memory and dst_memory == "global":
        return ("dst", "src")
    return ("src", "dst")


@dataclass(frozen=True)
class CopyPartition:
    """A copy's partition and the operand each of its positions stands for."""

    roles: tuple[str, str]  # ("src", "dst") or ("dst", "src"): the driving operand first
    partition: ScopePartition | PiecewisePartition

    def at(self, role: str) -> int:
        """The partition's index of operand ``role`` ("src" or "dst")."""
        return self.roles.index(role)


def copy_partition(
    src: TileView, dst: TileView, threads: int, widths: Sequence[int] = VECTOR_BITS
) -> CopyPartition:
    """The partition of a copy from ``src`` to ``dst`` over ``threads`` with accesses of
    ``widths`` bits: even, or masked where the threads do not divide the vectors (or where
    that takes fewer rounds). Declines (:class:`..errors.Decline`) with the reason where an
    operand has no memory view or no allowed width fits."""
    roles = copy_roles(src.memory, dst.memory)
    operands = {"src": src, "dst": dst}
    views = [memory_view(operands[role]) for role in roles]
    return CopyPartition(roles, scope_partition(views, threads, src.elem_bits, widths=widths))
