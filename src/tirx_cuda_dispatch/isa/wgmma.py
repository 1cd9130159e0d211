"""Warpgroup MMA (``wgmma.mma_async``) facts, as data: the accumulator fragment, the
shared-memory matrix descriptor and the canonical layouts a descriptor names.

PTX ISA 9.0 numbering, section 9.7.15 ("Asynchronous Warpgroup Level Matrix
Multiply-Accumulate Instructions"): 9.7.15.5.1.1 (register fragments), 9.7.15.5.1.2
(shared memory matrix layout: swizzle atoms, leading and stride byte offsets, canonical
layouts) and 9.7.15.5.1.2.2 (matrix descriptor format). A warpgroup (128 threads, 4 warps) computes an ``m64nNk*`` tile; A
comes from shared memory through a descriptor (or from registers), B always from shared
memory through a descriptor, and D stays in the 128 threads' registers.

Checked against the GPU: bench/gemm_designs.py's wgmma kernels (H200, 2026-11-25) name
examples/gemm.py's shared layouts with these descriptors (A K-major, B N-major, both
128-byte swizzled) and their products equal the float64 reference; tests/isa/test_wgmma.py
checks that :func:`element_address` reproduces those layouts byte for byte.

Nothing here builds IR; formulas take ints.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .mma_fragments import mma_instructions
from .swizzle import Swizzle

WARPGROUP_THREADS = 128
M = 64  # rows of every wgmma tile
K_BY_DTYPE = {  # .atype/.btype -> K of one instruction (9.7.15.2, "Matrix Shape")
    "float16": 16,
    "bfloat16": 16,
    "tf32": 8,
    "float8_e4m3fn": 32,
    "float8_e5m2": 32,
    "int8": 32,
    "uint8": 32,
}
DTYPE_BITS = {
    "float16": 16,
    "bfloat16": 16,
    "tf32": 32,
    "float8_e4m3fn": 8,
    "float8_e5m2": 8,
    "int8": 8,
    "uint8": 8,
}
N_FLOAT = tuple(range(8, 257, 8))  # every multiple of 8 up to 256 (floating-point lines)

# swizzle mode -> (descriptor bits 62-63, swizzle bytes); "none" is the interleaved layout
SWIZZLE_MODES = {"none": (0, 16), "128B": (1, 128), "64B": (2, 64), "32B": (3, 32)}
MAJORS = ("K", "MN")
_M16N8 = mma_instructions("float16", "float32")[0]  # its C fragment is a warp's 16 rows


def accumulator_element(thread: Any, reg: int) -> tuple[Any, Any]:
    """(row, column) of the ``m64nN`` tile that register ``reg`` of warpgroup thread
    ``thread`` holds, for a 32-bit accumulator (.f32 or .s32; figure "WGMMA .m64nNk16
    register fragment layout for accumulator matrix D"): warp ``w`` holds rows ``16 w`` to
    ``16 w + 15``; in it, lane ``4 g + t`` holds, for each 8 columns ``j``, registers
    ``4 j .. 4 j + 3`` = (row ``g``, columns ``8 j + 2 t``, ``+ 1``) and (row ``g + 8``,
    the same columns): the m16n8 C fragment of mma.sync, repeated N / 8 times.
    ``thread``: an int, or an integer array (then rows and columns are arrays, as the
    mma records' element functions answer for arrays of lanes)."""
    low, high = (thread, thread) if isinstance(thread, int) else (thread.min(), thread.max())
    if not 0 <= low <= high < WARPGROUP_THREADS:
        bad = low if low < 0 else high
        raise ValueError(f"thread {bad} is not in a warpgroup of {WARPGROUP_THREADS}")
    warp, lane = divmod(thread, 32)
    row, col = _M16N8.c_element(lane, reg % 4)
    return 16 * warp + row, 8 * (reg // 4) + col


A_STEP_ELEMENTS = 8  # 16-bit A elements one thread holds per m64k16 step: four .b32 registers


def a_fragment_element(thread: Any, element: int) -> tuple[Any, Any]:
    """(row, column) of the ``m64k16`` A tile (16-bit types) that element ``element`` (0-7)
    of warpgroup thread ``thread`` holds in the register form (``wgmma.mma_async`` with A
    in registers: figure "WGMMA .m64nNk16 register fragment layout for matrix A"): the
    element is half ``element % 2`` (the lower first) of the thread's ``.b32`` A register
    ``element // 2``; warp ``w`` holds rows ``16 w`` to ``16 w + 15`` in mma.sync's
    m16n8k16 A pattern, which is the ``m64n16`` accumulator's: (row ``g``, columns ``2 t``,
    ``+ 1``), (row ``g + 8``, the same), then the same 8 columns on. ``thread`` as for
    :func:`accumulator_element`."""
    if not 0 <= element < A_STEP_ELEMENTS:
        raise ValueError(f"element {element}: a thread holds 8 A elements per K step of 16")
    return accumulator_element(thread, element)


def accumulator_registers(n: int) -> int:
    """32-bit accumulator registers a thread holds for ``m64nN``: N / 2."""
    if n not in N_FLOAT:
        raise ValueError(f"N={n}: wgmma takes N a multiple of 8 from 8 to 256")
    return n // 2


@dataclass(frozen=True)
class MatrixDescriptor:
    """The 64-bit shared-memory matrix descriptor (9.7.15.5.1.2.2): bits 0-13 the start
    address, 16-29 the leading dimension byte offset, 32-45 the stride dimension byte
    offset, each in units of 16 bytes; 49-51 the matrix base offset; 62-63 the swizzle
    mode. Byte values here; :meth:`encode` checks they fit."""

    start: int  # shared-memory byte address of the matrix
    lbo: int  # leading dimension byte offset
    sbo: int  # stride dimension byte offset
    swizzle: str = "128B"
    base_offset: int = 0

    def encode(self) -> int:
        if self.swizzle not in SWIZZLE_MODES:
            raise ValueError(f"swizzle {self.swizzle!r}: one of {list(SWIZZLE_MODES)}")
        for name in ("start", "lbo", "sbo"):
            value = getattr(self, name)
            if value % 16 or not 0 <= value < 1 << 18:
                raise ValueError(
                    f"descriptor {name} {value}: a multiple of 16 below 2**18 bytes "
                    "(14 bits in units of 16 bytes)"
                )
        if not 0 <= self.base_offset < 8:
            raise ValueError(f"descriptor base offset {self.base_offset}: 3 bits")
        return (
            (self.start >> 4)
            | (self.lbo >> 4) << 16
            | (self.sbo >> 4) << 32
            | self.base_offset << 49
            | SWIZZLE_MODES[self.swizzle][0] << 62
        )

    @classmethod
    def decode(cls, bits: int) -> MatrixDescriptor:
        modes = {code: name for name, (code, _) in SWIZZLE_MODES.items()}
        return cls(
            start=(bits & 0x3FFF) << 4,
            lbo=(bits >> 16 & 0x3FFF) << 4,
            sbo=(bits >> 32 & 0x3FFF) << 4,
            swizzle=modes[bits >> 62 & 3],
            base_offset=bits >> 49 & 7,
        )


def swizzle_of(mode: str) -> Swizzle:
    """The byte-address swizzle of ``mode``: CuTe's ``Swizzle<B, 4, 3>`` (9.7.15.5.1.2.1.3:
    B = 3, 2, 1, 0 for 128, 64, 32 bytes and none), 16-byte units of an address permuted by
    the address bits 3 above them."""
    bits = {"128B": 3, "64B": 2, "32B": 1, "none": 0}[mode]
    return Swizzle(per_element=4, bits=bits, shift=3)


def canonical_offset(major: str, mode: str, elem_bits: int, lbo: int, sbo: int, mn: int, k: int):
    """Byte offset from a descriptor's start of element (``mn``, ``k``) of its matrix (M x K
    for A, N x K for B), before the swizzle, by the canonical layouts of 9.7.15.5.1.2.1.3
    with T = 128 / element bits elements in 16 bytes and W = swizzle bytes / 16:

    - MN-major, swizzled: ``((T, W, m), (8, k)) : ((1, T, LBO), (W T, SBO))``;
    - MN-major, none: ``((T, 1, m), (8, k)) : ((1, T, SBO), (T, LBO))``;
    - K-major, swizzled: ``((8, m), (T, 2k)) : ((W T, SBO), (1, T))``;
    - K-major, none: ``((8, m), (T, 2k)) : ((T, SBO), (1, LBO))``.

    (LBO and SBO are bytes here, the strides of the ISA's tables in elements times the
    element size; a K-major swizzled layout does not use LBO.)"""
    if major not in MAJORS:
        raise ValueError(f"major {major!r}: one of {MAJORS}")
    t = 128 // elem_bits
    w = SWIZZLE_MODES[mode][1] // 16
    size = elem_bits // 8
    if major == "MN":
        i0, rest = mn % t, mn // t
        if mode == "none":
            offset = i0 * size + rest * sbo
            return offset + (k % 8) * t * size + (k // 8) * lbo
        i1, i2 = rest % w, rest // w
        offset = (i0 + t * i1) * size + i2 * lbo
        return offset + (k % 8) * w * t * size + (k // 8) * sbo
    i0, i1 = mn % 8, mn // 8
    j0, j1 = k % t, k // t
    if mode == "none":
        return i0 * t * size + i1 * sbo + j0 * size + j1 * lbo
    return i0 * w * t * size + i1 * sbo + (j0 + t * j1) * size


def element_address(desc: MatrixDescriptor, major: str, elem_bits: int, mn: int, k: int) -> int:
    """The shared-memory byte address wgmma reads element (``mn``, ``k``) from: the
    descriptor's start plus :func:`canonical_offset`, then the swizzle applied to the whole
    address (the pattern repeats every 1024 bytes for 128B, so a matrix whose swizzle atoms
    start 1024-byte aligned may start inside one, as a K step into a K-major row does; the
    base offset, for atoms not so aligned, is not modelled: it must be 0)."""
    if desc.base_offset:
        raise ValueError("a descriptor base offset other than 0 is not modelled")
    raw = desc.start + canonical_offset(major, desc.swizzle, elem_bits, desc.lbo, desc.sbo, mn, k)
    return swizzle_of(desc.swizzle).apply(raw)
