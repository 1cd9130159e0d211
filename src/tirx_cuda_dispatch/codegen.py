"""TIR building blocks the emitters share: thread ids, flat word views, vector accesses.

Vector copies are emitted as plain TIR vector loads and stores (``Ramp`` indices on a
word-typed view of the buffer), not as ``asm volatile`` strings: TVM's CUDA codegen prints
them as ``*(uint4*)(p + i)``, which the compiler may schedule freely (loads of several
rounds in flight at once), and a simulator can read them without parsing PTX.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tvm import tirx
from tvm.script import tirx as T

from .call import TileCall

# Word type per access width: the bits only travel, so the element type does not matter.
_WORDS = {128: ("uint32", 4), 64: ("uint32", 2), 32: ("uint32", 1), 16: ("uint16", 1), 8: ("uint8", 1)}


def word_type(vec_bits: int) -> tuple[str, int]:
    """(scalar word dtype, lanes) used for a ``vec_bits``-wide access."""
    return _WORDS[vec_bits]


def thread_index(call: TileCall) -> Any:
    """The thread's index within the call's scope, as a TIR expression.

    Call it inside a ``@T.prim_func`` body: the scope-id helpers declare their variables
    in the body being built, and TVM binds them after dispatch.
    """
    if call.scope == "thread":
        return tirx.IntImm("int32", 0)
    if call.scope == "warp":
        return T.lane_id()
    if call.scope == "warpgroup":
        return T.thread_id_in_wg()
    if call.scope == "cta":
        return call.launch_var("threadIdx.x")
    raise ValueError(f"no thread index for scope {call.scope}")


def digits_offset(index: Any, extents: Sequence[int], strides: Sequence[int]) -> Any:
    """``sum(digit_i(index) * stride_i)`` for the mixed radix ``extents`` (outer -> inner)."""
    total: Any = tirx.IntImm("int32", 0)
    inner = 1
    n = len(extents)
    for i in range(n - 1, -1, -1):
        ext, stride = extents[i], strides[i]
        if ext == 1 or stride == 0:
            inner *= ext
            continue
        digit = index if inner == 1 else tirx.floordiv(index, inner)
        if i > 0:  # the outermost digit needs no wrap: index < prod(extents)
            digit = tirx.floormod(digit, ext)
        total = total + digit * stride
        inner *= ext
    return total


def elems_to_words(offset: Any, elem_bits: int, word_bits: int) -> Any:
    """An element offset in units of ``word_bits`` (exact: callers align offsets first)."""
    if elem_bits == word_bits:
        return offset
    if word_bits > elem_bits:
        return tirx.floordiv(offset, word_bits // elem_bits)
    return offset * (elem_bits // word_bits)


def vector_slot(offset: Any, lanes: int) -> Any:
    """Index of a ``lanes``-wide access starting at ``offset`` (a Ramp, or the scalar).

    ``offset`` must be a multiple of ``lanes``. It is written as ``(offset // lanes) * lanes``
    because TVM's CUDA codegen emits one vector access only when it can prove the Ramp's
    base a multiple of the lane count; through a swizzle's xor it cannot, and it would
    fall back to ``lanes`` scalar accesses.
    """
    if lanes == 1:
        return offset
    return tirx.Ramp(tirx.floordiv(offset, lanes) * lanes, 1, lanes)


def storage_words(buffer: Any, elem_bits: int, word_bits: int) -> Any:
    """How many words the buffer's data holds: its layout's span (padding included)."""
    elems: Any = buffer.layout.span() if buffer.layout is not None else None
    if elems is None:
        elems = 1
        for ext in buffer.shape:
            elems = elems * ext
    return tirx.floordiv(elems * elem_bits + word_bits - 1, word_bits)
