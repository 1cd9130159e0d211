"""The values a simulated kernel computes besides numbers: addresses and buffer bindings.

Shared by the interpreter (which binds buffers and evaluates expressions) and the
instruction table (whose entries read and write memory through addresses); neither
imports the other for them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from .errors import SimError
from .memory import Memory


@dataclass(frozen=True)
class Pointer:
    """An address: an allocation and a byte offset per thread (``(1,)`` when uniform).

    ``elem_bytes`` is the size of what a C pointer of this type points to (``float*``: 4,
    ``uint4*``: 16), which C pointer arithmetic scales by; 0 when the type is unknown
    (``void*``, or a 32-bit shared-window address, which is an integer in CUDA).
    ``shared_window`` marks an address that went through ``cvta.to.shared``.
    """

    memory: Memory
    offsets: np.ndarray
    elem_bytes: int = 0
    shared_window: bool = False

    def plus_bytes(self, delta: Any) -> Pointer:
        return replace(self, offsets=self.offsets + np.asarray(delta, dtype=np.int64))

    def plus_elements(self, count: Any, what: str) -> Pointer:
        """``ptr + count`` in C: ``count`` elements of the pointed-to type."""
        if self.elem_bytes == 0:
            raise SimError(f"{what}: arithmetic on a pointer whose element type is unknown")
        return self.plus_bytes(np.asarray(count, dtype=np.int64) * self.elem_bytes)


@dataclass
class Binding:
    """A buffer variable: its storage, where it starts, and how it is indexed."""

    name: str
    pointer: Pointer
    dtype: np.dtype
    lanes: int
    shape: tuple[int, ...]
    strides: tuple[Any, ...]
    elem_offset: Any

    @property
    def elem_bytes(self) -> int:
        return self.dtype.itemsize * self.lanes
