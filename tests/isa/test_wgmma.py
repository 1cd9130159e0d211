"""isa.wgmma: the accumulator fragment, the descriptor's bits and the canonical layouts,
checked against the PTX ISA's worked examples and against the shared layouts whose wgmma
products bench/gemm_designs.py checked on the GPU (examples/gemm.py's 128-byte swizzled A
and B, named by the descriptors of that bench)."""

from __future__ import annotations

import numpy as np
import pytest

from tirx_cuda_dispatch.isa import wgmma
from tirx_cuda_dispatch.isa.wgmma import MatrixDescriptor, element_address


def _swz(r: int, c: int) -> int:
    """examples/gemm.py's 128-byte swizzle: 16-byte unit ``c`` of 128-byte row ``r``."""
    return r * 128 + ((c ^ (r % 8)) << 4)


# -- the accumulator ------------------------------------------------------------------------
def test_the_accumulator_covers_the_tile_once():
    n = 256
    seen = np.zeros((64, n), dtype=int)
    for thread in range(128):
        for reg in range(wgmma.accumulator_registers(n)):
            seen[wgmma.accumulator_element(thread, reg)] += 1
    assert (seen == 1).all()


@pytest.mark.parametrize(
    "thread, reg, want",
    [(0, 0, (0, 0)), (0, 3, (8, 1)), (5, 2, (9, 2)), (31, 127, (15, 255)), (45, 6, (27, 10))],
)
def test_the_accumulator_is_the_isa_figure(thread, reg, want):
    """Figure "WGMMA .m64nNk16 register fragment layout for accumulator matrix D": warp w
    rows 16 w + g (+ 8 for d2, d3), columns 8 j + 2 t (+ 1), lane 4 g + t, d[4 j ..]."""
    assert wgmma.accumulator_element(thread, reg) == want


def test_the_accumulator_of_every_thread_at_once_is_each_thread_s():
    """An array of threads answers arrays: each thread's own (row, column), for the
    accumulator and the register-A fragment (the plan asks it so, slot by slot)."""
    threads = np.arange(128)
    for element_of, slots in ((wgmma.accumulator_element, 64), (wgmma.a_fragment_element, 8)):
        for j in range(slots):
            rows, cols = element_of(threads, j)
            assert [(int(r), int(c)) for r, c in zip(rows, cols, strict=True)] == [
                element_of(t, j) for t in range(128)
            ]


def test_the_accumulator_declines_what_is_not_a_warpgroup_or_a_shape():
    with pytest.raises(ValueError, match="thread 128"):
        wgmma.accumulator_element(128, 0)
    with pytest.raises(ValueError, match="thread 130"):
        wgmma.accumulator_element(np.arange(3, 131), 0)
    with pytest.raises(ValueError, match="thread -1"):
        wgmma.accumulator_element(np.arange(-1, 5), 0)
    with pytest.raises(ValueError, match="N=12"):
        wgmma.accumulator_registers(12)


# -- the descriptor -------------------------------------------------------------------------
def test_the_descriptor_bits():
    desc = MatrixDescriptor(start=0x1230, lbo=8192, sbo=1024, swizzle="128B")
    bits = desc.encode()
    assert bits & 0x3FFF == 0x123 and bits >> 16 & 0x3FFF == 512 and bits >> 32 & 0x3FFF == 64
    assert bits >> 62 == 1 and bits >> 49 & 7 == 0
    assert MatrixDescriptor.decode(bits) == desc
    for mode, code in (("none", 0), ("64B", 2), ("32B", 3)):
        assert MatrixDescriptor(0, 16, 16, mode).encode() >> 62 == code


@pytest.mark.parametrize(
    "field, value", [("start", 8), ("lbo", 1 << 18), ("sbo", -16), ("swizzle", "256B")]
)
def test_a_descriptor_that_does_not_fit_is_an_error(field, value):
    fields = {"start": 0, "lbo": 16, "sbo": 1024, "swizzle": "128B"} | {field: value}
    with pytest.raises(ValueError, match=field if field != "swizzle" else "256B"):
        MatrixDescriptor(**fields).encode()


# -- the canonical layouts: the ISA's worked examples (in elements there) ------------------
def test_k_major_no_swizzle_tf32_example():
    """Swizzle<0,4,3> o ((8,2),(4,4)):((4,32),(1,64)), LBO 64 and SBO 32 tf32 elements."""
    for mn in range(16):
        for k in range(16):
            want = (mn % 8) * 4 + (mn // 8) * 32 + (k % 4) + (k // 4) * 64
            got = wgmma.canonical_offset("K", "none", 32, 64 * 4, 32 * 4, mn, k)
            assert got == want * 4


def test_k_major_32b_swizzle_tf32_example():
    """((8,2),(4,4)):((8,64),(1,4)), SBO 64 tf32 elements, LBO unused."""
    for mn in range(16):
        for k in range(16):
            want = (mn % 8) * 8 + (mn // 8) * 64 + k
            assert wgmma.canonical_offset("K", "32B", 32, 0, 64 * 4, mn, k) == want * 4


def test_mn_major_no_swizzle_bf16_example():
    """((8,1,2),(8,2)):((1,8,64),(8,128)), LBO 128 and SBO 64 bf16 elements."""
    for mn in range(16):
        for k in range(16):
            want = (mn % 8) + (mn // 8) * 64 + (k % 8) * 8 + (k // 8) * 128
            got = wgmma.canonical_offset("MN", "none", 16, 128 * 2, 64 * 2, mn, k)
            assert got == want * 2


# -- the layouts the GPU checked (bench/gemm_designs.py) ------------------------------------
A_STAGE, B_BLOCK = 0x4000, 64 * 128  # a stage of A at 16 KiB; B's 64-column blocks


@pytest.mark.parametrize("wg", [0, 1])
@pytest.mark.parametrize("kk", range(4))
def test_the_a_descriptor_names_examples_gemm_a_tile(wg, kk):
    """A, 128 rows of 64 float16 (128-byte rows, swizzled), K-major; warpgroup ``wg``'s 64
    rows, K step ``kk``: start + 32 kk bytes into the row, SBO 1024 (8 rows)."""
    desc = MatrixDescriptor(A_STAGE + wg * 64 * 128 + kk * 32, 16, 1024, "128B")
    for m in range(64):
        for k in range(16):
            row, col = wg * 64 + m, kk * 16 + k
            want = A_STAGE + _swz(row, col // 8) + 2 * (col % 8)
            assert element_address(desc, "K", 16, m, k) == want


@pytest.mark.parametrize("kk", range(4))
def test_the_b_descriptor_names_examples_gemm_b_tile(kk):
    """B, 64 K rows of 256 float16 cut into 64-column blocks of 128-byte rows (swizzled),
    N-major: LBO 8192 (the next block), SBO 1024 (8 K rows)."""
    desc = MatrixDescriptor(A_STAGE + kk * 16 * 128, B_BLOCK, 1024, "128B")
    for n in range(256):
        for k in range(16):
            r = kk * 16 + k
            want = A_STAGE + (n // 64) * B_BLOCK + _swz(r, (n % 64) // 8) + 2 * (n % 8)
            assert element_address(desc, "MN", 16, n, k) == want


def test_a_wrong_stride_names_other_bytes():
    """Negative control: SBO 512 (as if rows were 64 bytes) misses the A tile's bytes."""
    good = MatrixDescriptor(A_STAGE, 16, 1024, "128B")
    bad = MatrixDescriptor(A_STAGE, 16, 512, "128B")
    misses = sum(
        element_address(bad, "K", 16, m, k) != element_address(good, "K", 16, m, k)
        for m in range(64)
        for k in range(16)
    )
    assert misses == 56 * 16  # every row past the first 8


def test_a_base_offset_is_not_modelled():
    with pytest.raises(ValueError, match="base offset"):
        element_address(MatrixDescriptor(0, 16, 1024, "128B", base_offset=1), "K", 16, 0, 0)
    with pytest.raises(ValueError, match="major 'M'"):
        wgmma.canonical_offset("M", "128B", 16, 16, 1024, 0, 0)
