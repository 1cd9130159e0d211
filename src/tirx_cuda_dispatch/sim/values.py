"""The values a simulated kernel computes besides numbers: addresses and buffer bindings.

Shared by the interpreter (which binds buffers and evaluates expressions) and the
instruction table (whose entries read and write memory through addresses); neither
imports the other for them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from .errors import NotModeled, SimError
from .memory import Memory

CLUSTER_WINDOW = 1 << 24
"""``.shared::cluster`` addresses as numbers: below it, the executing CTA's own shared
window (a ``.shared::cta`` address is a ``.shared::cluster`` address of the executing
CTA, PTX ISA 5.1.5.1); ``(r + 1) * CLUSTER_WINDOW + a``, byte ``a`` of the window of the
cluster's CTA of rank ``r`` (what ``mapa`` returns). Only dynamic shared memory has
numbers in the simulator (``Machine.shared_address``)."""


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
    # the element strides and offset when all are constants (the interpreter's fast path)
    static: tuple[tuple[int, ...], int] | None = None

    @property
    def elem_bytes(self) -> int:
        return self.dtype.itemsize * self.lanes


@dataclass(frozen=True)
class TensorMapValue:
    """A ``CUtensorMap`` the kernel received, as the host encoded it: the global memory it
    maps and its fields in the driver's order (dimension 0 innermost; ``strides`` in
    bytes for dimensions 1 and up; ``swizzle`` in bytes, 0 for none)."""

    name: str
    memory: Memory
    dtype: str
    elem_bytes: int
    dims: tuple[int, ...]
    strides: tuple[int, ...]
    box: tuple[int, ...]
    element_strides: tuple[int, ...]
    swizzle: int
    tf32: bool = False  # TFLOAT32: a load rounds each float32 to tf32


MAX_BOX = 256  # boxDim


@dataclass(frozen=True)
class TensorMapArg:
    """A tensor-map argument of a kernel: the global array it maps and the fields the host
    encodes (:func:`...toolchain.encoded_tensor_maps`)."""

    array: np.ndarray
    fields: dict

    def bind(self, name: str, memory: Memory) -> TensorMapValue:
        dtype = self.fields["dtype"]
        size = np.dtype(dtype if dtype != "bfloat16" else "uint16").itemsize
        return _checked(name, memory, dtype, size, self.fields)


def _checked(
    name: str, memory: Memory, dtype: str, elem_bytes: int, fields: dict
) -> TensorMapValue:
    """The tensor map ``fields`` over ``memory``, after the rules ``cuTensorMapEncodeTiled``
    checks (CUDA driver API): a :class:`SimError` naming the broken one."""
    dims, strides, box = fields["dims"], fields["strides"], fields["box"]
    estrides, swizzle = fields["element_strides"], fields["swizzle"]
    what = f"tensor map {name} (cuTensorMapEncodeTiled fails on the host)"
    if any(v is None for v in (*dims, *strides, *box, *estrides)):
        raise NotModeled(f"{what}: a field is not a constant")
    if not 1 <= len(dims) <= 5:
        raise SimError(f"{what}: rank {len(dims)} is not in 1..5")
    if fields.get("tf32") and dtype != "float32":
        raise SimError(f"{what}: a TFLOAT32 descriptor maps float32, not {dtype}")
    if any(d <= 0 or d > 1 << 32 for d in dims):
        raise SimError(f"{what}: globalDim {dims} must lie in (0, 2^32]")
    if any(s % 16 or s >= 1 << 40 for s in strides):
        raise SimError(f"{what}: globalStrides {strides} must be multiples of 16 below 2^40")
    if any(not 1 <= b <= MAX_BOX for b in box):
        raise SimError(f"{what}: boxDim {box} must lie in [1, 256]")
    if any(e != 1 for e in estrides):
        raise NotModeled(f"{what}: element strides {estrides} other than 1")
    inner = box[0] * elem_bytes
    if inner % 16:
        raise SimError(f"{what}: the inner box is {inner} bytes, not a multiple of 16")
    if swizzle and inner > swizzle:
        raise SimError(f"{what}: the inner box is {inner} bytes, over the {swizzle}-byte swizzle")
    return TensorMapValue(
        name, memory, dtype, elem_bytes, tuple(dims), tuple(strides), tuple(box),
        tuple(estrides), swizzle, bool(fields.get("tf32", False)),
    )  # fmt: skip
