"""The bulk tensor copy's facts (PTX ISA 9.7.9.25.5.1-2, ``cp.async.bulk.tensor`` and
``cp.reduce.async.bulk.tensor``), as data: which element types each reduction into global
memory takes, and the coordinates a tile-mode copy may start at.

The coordinate rules are measured, not written in the ISA: on an H100 (sm_90a, this
project's fuzzed programs and a grid of hand-picked ones) a tile-mode copy, load or
store, whose innermost coordinate is not a multiple of 16 bytes stops the kernel with an
illegal instruction (``cudaErrorIllegalInstruction``), and so does a store (``.tile`` or
``.reduce``) with any negative coordinate, while a load's negative coordinates read zeros
and a store past the tensor's far edge is clipped. Triton's TMA rules say the first too
(its Gluon tutorial: "the innermost coordinate must be 16-byte aligned")."""

from __future__ import annotations

# .redOp -> the element types (the tensor map's) it takes; .inc/.dec/.and/.or/.xor (integer
# bit operations) are left out: no variant emits them
REDUCE_TYPES = {
    "add": ("float16", "bfloat16", "float32", "int32", "uint32", "uint64"),
    "min": ("float16", "bfloat16", "int32", "uint32", "int64", "uint64"),
    "max": ("float16", "bfloat16", "int32", "uint32", "int64", "uint64"),
}

COORD_ALIGN = 16  # bytes: the innermost coordinate times the element size is a multiple
STORE_MIN_COORD = 0  # a store's coordinates are never below it
SHARED_ALIGN = 128  # bytes: a box's shared address without a swizzle
BULK_ALIGN = 16  # bytes: a non-tensor bulk copy's size and both of its addresses (9.7.9.25.4)
CTA_MASK_BITS = 16  # ctaMask is a .u16 operand: one bit per CTA, so at most 16 a cluster
# CUtensorMapDataType CU_TENSOR_MAP_DATA_TYPE_TFLOAT32 (TVM 0.27's force_cu_dtype): float32
# in global memory; a load rounds each element to tf32 (10 mantissa bits) to nearest, ties
# to even (measured on an H200: 4,096 of 4,096 random normal values, 1,538 of them ties;
# values near FLT_MAX, subnormals and NaN payloads were not measured)
TFLOAT32 = 11
TF32_DROPPED_BITS = 13  # float32's 23 mantissa bits less tf32's 10


def shared_align(swizzle: int) -> int:
    """Bytes a tensor copy's shared address must be a multiple of under a ``swizzle``-byte
    swizzle (0: none): the pattern repeats every 8 rows of its span, and TMA reads it
    off the address's bits."""
    return max(SHARED_ALIGN, 8 * swizzle)


def reduce_takes(op: str, dtype: str) -> bool:
    """Whether ``cp.reduce.async.bulk.tensor .op`` takes elements of ``dtype``."""
    return dtype in REDUCE_TYPES.get(op, ())


def coordinate_fault(coords: list[int], elem_bytes: int, store: bool) -> str | None:
    """Why a tile-mode copy at ``coords`` (dimension 0 innermost) of elements of
    ``elem_bytes`` bytes faults on the hardware, None where it does not."""
    if (coords[0] * elem_bytes) % COORD_ALIGN:
        return (
            f"its innermost coordinate {coords[0]} is {coords[0] * elem_bytes} bytes, not a "
            f"multiple of {COORD_ALIGN}"
        )
    if store and min(coords) < STORE_MIN_COORD:
        return f"a store's coordinate {min(coords)} is negative"
    return None
