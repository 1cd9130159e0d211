"""Helpers a kernel calls by name (``T.cuda.func_call(name, ..., source_code=...)``).

The C source of a helper is for the compiler; the simulator executes a meaning recorded
as data. Our emitters record it when they emit the helper
(:class:`~..codegen.HelperMeaning`, :data:`~..codegen.HELPER_MEANINGS`). TVM's built-in
lowerings record none, so :data:`BUILTIN_HELPERS` holds one for each helper they emit,
written from the CUDA semantics of the source TVM attaches, together with that source's
SHA-256: a helper whose source differs from the one its meaning was written from (another
TVM release) is an error, not a guess. A helper with no meaning is an error naming it.

Counting: a helper is not an instruction of its own. It is counted as what it does: the
memory accesses it makes (through :func:`.calls.load_at`/``store_at``) and, for a packed
operation, the one PTX instruction that operation is (:func:`pair_instruction`).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..codegen import HELPER_MEANINGS, HelperMeaning
from .calls import Table, load_at, store_at
from .errors import NotModeled, SimError
from .interpreter import Machine
from .numerics import cast, fma, is_float, parse_dtype, ptx_type
from .values import Pointer

TABLE = Table()


@dataclass(frozen=True)
class PointerOffset:
    """``ptr + offset`` in C for a typed pointer ``T* ptr`` and an ``int offset``: the
    address ``offset`` elements of ``T`` past ``ptr`` (``offset * sizeof(T)`` bytes)."""

    kind: str = "pointer_offset"


@dataclass(frozen=True)
class BuiltinHelper:
    """A helper TVM's built-in lowerings emit: its meaning as data, the meaning in words
    (from the CUDA / PTX semantics of its source), and the SHA-256 of that source."""

    name: str
    meaning: HelperMeaning | PointerOffset
    semantics: str
    source_sha256: str


def _cast_pair(src: str, dst: str, function: str, semantics: str, sha256: str) -> BuiltinHelper:
    return BuiltinHelper(
        f"tvm_builtin_cast_{src}x2_{dst}x2",
        HelperMeaning("pairwise", op="cvt", out_dtype=dst, in_dtype=src),
        f"(dst, src): the {dst} pair at dst = {function} of the {src} pair at src; {semantics}",
        sha256,
    )


_LOW_HIGH = "element 0 (the low half, .x) from element 0, element 1 (.y) from element 1"

BUILTIN_HELPERS: dict[str, BuiltinHelper] = {
    h.name: h
    for h in (
        BuiltinHelper(
            "tvm_builtin_pointer_offset",
            PointerOffset(),
            "(T* ptr, int offset) -> T*: C pointer arithmetic, offset elements of T past ptr",
            "464df3848a41bf47797a4df6c2c1da4d00d5af997399d4e1e8e0a34a8e16453c",
        ),
        _cast_pair(
            "float32",
            "float16",
            "__float22half2_rn",
            "cvt.rn.f16x2.f32 d, a.y, a.x (round to nearest even, the first source to the "
            f"upper half): {_LOW_HIGH}",
            "c42b54a30335ba90b40339ae657874072ee0f6ca1292d10d14ce90fb641300a1",
        ),
        _cast_pair(
            "float32",
            "bfloat16",
            "__float22bfloat162_rn",
            f"cvt.rn.bf16x2.f32 d, a.y, a.x (round to nearest even): {_LOW_HIGH}",
            "41011cdcf2c338442f13d2ac4052bfaa7c952241ed39db307a53ef289e7802e6",
        ),
        _cast_pair(
            "float16",
            "float32",
            "__half22float2",
            f"two exact cvt.f32.f16: {_LOW_HIGH}",
            "e10753d2c9460196e7a7703765bbfdd8ce90c33e08027034511c5a314f33d3da",
        ),
        _cast_pair(
            "bfloat16",
            "float32",
            "__bfloat1622float2",
            f"two exact widenings (bf16 bits << 16): {_LOW_HIGH}",
            "fe012b5fe73a1249853775ab40cb6edd7ef9cade010d5a3e722516d30b722b4e",
        ),
    )
}


def source_sha256(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()


def meaning_of(name: str, source: str) -> HelperMeaning | PointerOffset:
    """The recorded meaning of helper ``name`` whose C source is ``source``."""
    ours = HELPER_MEANINGS.get(name)
    if ours is not None:
        return ours
    builtin = BUILTIN_HELPERS.get(name)
    if builtin is None:
        raise SimError(
            f"the kernel calls helper {name}, whose meaning is only its C source: the "
            f"simulator executes helpers that record a HelperMeaning (codegen.helper_call) "
            f"or have one in sim.helpers.BUILTIN_HELPERS"
        )
    if source_sha256(source) != builtin.source_sha256:
        raise SimError(
            f"helper {name}'s C source is not the one its meaning was written from "
            f"(sha256 {source_sha256(source)[:12]}..., expected "
            f"{builtin.source_sha256[:12]}...): read the new source and record its meaning"
        )
    return builtin.meaning


def pair_instruction(meaning: HelperMeaning) -> tuple[str, int]:
    """The PTX instruction a packed pair operation is, and how many per pair: ``add`` of
    float16 is one ``add.f16x2``; a narrowing ``cvt`` one ``cvt.rn.f16x2.f32``; a
    widening one two ``cvt.f32.f16``."""
    out, src = ptx_type(meaning.out_dtype), ptx_type(meaning.in_dtype)
    if out is None or src is None:
        raise SimError(f"no packed instruction for {meaning}")
    if meaning.op == "cvt":
        if src == "f32":
            return f"cvt.rn.{out}x2.f32", 1
        return f"cvt.{out}.{src}", 2
    rounding = "rn." if meaning.op == "fma" else ""
    return f"{meaning.op}.{rounding}{out}x2", 1


def _pairwise(op: str, dtype: np.dtype, inputs: list[np.ndarray]) -> np.ndarray:
    if op == "add":
        return np.add(*inputs)
    if op == "sub":
        return np.subtract(*inputs)
    if op == "mul":
        return np.multiply(*inputs)
    if op == "max":
        return np.fmax(*inputs)
    if op == "min":  # __hmin2 (PTX min.f16x2 / min.bf16x2): a NaN operand is ignored
        return np.fmin(*inputs)
    if op == "fma":
        return fma(inputs[0], inputs[1], inputs[2], dtype)
    if op == "cvt":
        return cast(inputs[0], dtype)
    raise SimError(f"the simulator has no pairwise op {op!r}")


_ACCESS = {256: "uint32x8", 128: "uint32x4", 64: "uint32x2", 32: "uint32", 16: "uint16", 8: "uint8"}


@TABLE.entry("tirx.cuda.func_call")
def _func_call(m: Machine, call: Any) -> Any:
    """A helper by name, run by its recorded meaning (:func:`meaning_of`): ``copy``
    (``*dst = *src``, ``bits`` wide: one load and one store), ``pairwise`` (``dst[i] =
    op(a[i], b[i], c[i])`` for a pair, each element rounded as the scalar op), or
    pointer arithmetic; a helper without a meaning is an error naming it."""
    name = call.args[0].value
    source = call.args[-1].value if type(call.args[-1]).__name__ == "StringImm" else ""
    meaning = meaning_of(name, source)
    args = [m.eval(a) for a in call.args[1:-1]]
    if isinstance(meaning, PointerOffset):
        return _pointer_offset(name, args)
    if not all(isinstance(p, Pointer) for p in args):
        raise SimError(f"helper {name} takes pointers")
    if meaning.kind == "copy":
        dst, src = args
        value = load_at(m, src, _ACCESS[meaning.bits])
        store_at(m, dst, value, _ACCESS[meaning.bits])
        return None
    if meaning.kind == "pairwise":
        dst, *srcs = args
        ins = [load_at(m, p, f"{meaning.in_dtype}x2") for p in srcs]
        out_dtype = parse_dtype(meaning.out_dtype)[0]
        if meaning.op != "cvt" and not is_float(out_dtype):
            raise SimError(f"helper {name}: pairwise {meaning.op} on {out_dtype}")
        with np.errstate(all="ignore"):
            result = _pairwise(meaning.op, out_dtype, ins).astype(out_dtype)
        instruction, per_pair = pair_instruction(meaning)
        m.counters.instructions[instruction] += per_pair * len(m.warps())
        store_at(m, dst, result, f"{meaning.out_dtype}x2")
        return None
    raise NotModeled(f"helper {name}: unknown meaning {meaning.kind!r}")


def _pointer_offset(name: str, args: list[Any]) -> Pointer:
    ptr, offset = args
    if not isinstance(ptr, Pointer) or isinstance(offset, Pointer):
        raise SimError(f"helper {name} takes a typed pointer and an int")
    offset = np.asarray(offset)
    if offset.dtype.kind not in "iu":
        raise SimError(f"helper {name}: the offset is {offset.dtype}, not an int")
    wide = offset.astype(np.int64)
    if ((wide < -(2**31)) | (wide >= 2**31)).any():
        raise SimError(f"helper {name}: offset {wide.max()} does not fit its int parameter")
    return ptr.plus_elements(wide, f"helper {name}")
