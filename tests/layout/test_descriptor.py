"""layout/descriptor.py: a shared operand's layout as wgmma matrix descriptors, checked
against the descriptors bench/gemm_designs.py's wgmma kernels ran on the H200 (part 8f),
with layouts no descriptor names as negative controls."""

from __future__ import annotations

import numpy as np
import pytest
from tvm.tirx.layout import ComposeLayout, S, TileLayout

from tirx_cuda_dispatch.errors import Decline
from tirx_cuda_dispatch.isa.wgmma import element_address
from tirx_cuda_dispatch.layout.atoms import MemoryView
from tirx_cuda_dispatch.layout.descriptor import match
from tirx_cuda_dispatch.layout.swizzle import Swizzle, byte_swizzle

SW128_F16 = Swizzle(3, 3, 3)  # ComposeLayout(3, 3, 3, ...): 8 halves a unit, 128-byte rows


def _view(atoms, swizzle=SW128_F16, base=0) -> MemoryView:
    return MemoryView("X", tuple(atoms), base, swizzle)


def _addresses(view: MemoryView, shape, k_axis, size=2) -> np.ndarray:
    """The swizzled byte address of every element, as (mn, k)."""
    out = np.array([view.offset(i) * size for i in range(int(np.prod(shape)))]).reshape(shape)
    return out.T if k_axis == 0 else out


def _check_every_element(view, shape, k_axis, tile, got):
    addr = _addresses(view, shape, k_axis)
    for a, row in enumerate(got.starts):
        for b, _ in enumerate(row):
            desc = got.descriptor(a, b)
            for i in range(tile[0]):
                for j in range(tile[1]):
                    want = addr[a * tile[0] + i, b * tile[1] + j]
                    assert element_address(desc, got.major, 16, i, j) == want


def test_the_example_s_a_tile_is_k_major_with_sbo_1024():
    """A: 128 rows of 64 float16, 128-byte swizzled rows (a stage at 16 KiB): each
    warpgroup's 64 rows are one M tile, each K step of 16 starts 32 bytes further."""
    view = _view([(128, 64), (64, 1)], base=0x4000 // 2)
    got = match(view, (128, 64), 1, (64, 16), 16)
    assert (got.major, got.swizzle, got.sbo) == ("K", "128B", 1024)
    assert got.starts == tuple(
        tuple(0x4000 + wg * 64 * 128 + kk * 32 for kk in range(4)) for wg in range(2)
    )
    _check_every_element(view, (128, 64), 1, (64, 16), got)


def test_the_example_s_b_tile_is_mn_major_with_lbo_the_column_block():
    """B: 64 K rows of 256 float16 in four 64-column blocks: N-major, LBO 8192 (the next
    block), SBO 1024 (8 K rows); a K step of 16 rows starts 2048 bytes further."""
    view = _view([(64, 64), (4, 64 * 64), (64, 1)])
    got = match(view, (64, 256), 0, (256, 16), 16)
    assert (got.major, got.swizzle, got.lbo, got.sbo) == ("MN", "128B", 8192, 1024)
    assert got.starts == (tuple(kk * 16 * 128 for kk in range(4)),)
    _check_every_element(view, (64, 256), 0, (256, 16), got)


def test_no_swizzle_k_major_core_matrices():
    """8 x 8 core matrices of float16 (128 contiguous bytes each), K-adjacent ones 128
    bytes apart (LBO) and M-adjacent ones 512 (SBO): the ISA's no-swizzle K-major form."""
    view = _view([(8, 256), (8, 8), (2, 64), (8, 1)], swizzle=None)
    got = match(view, (64, 16), 1, (64, 16), 16)
    assert (got.major, got.swizzle, got.lbo, got.sbo) == ("K", "none", 128, 512)
    _check_every_element(view, (64, 16), 1, (64, 16), got)


def test_a_row_major_unswizzled_tile_names_no_descriptor():
    """Negative control: plain 128-byte rows without the swizzle are no canonical layout
    (a no-swizzle layout needs 8 x 16-byte core matrices, each contiguous)."""
    view = _view([(64, 64), (64, 1)], swizzle=None)
    with pytest.raises(Decline, match="no canonical wgmma layout"):
        match(view, (64, 64), 1, (64, 16), 16)


def test_a_base_inside_the_swizzle_period_declines():
    with pytest.raises(Decline, match="1024 bytes its 128B swizzle repeats in"):
        match(_view([(64, 64), (64, 1)], base=64), (64, 64), 1, (64, 16), 16)


def test_a_swizzle_the_hardware_has_not_declines():
    with pytest.raises(Decline, match="not one wgmma reads"):
        match(_view([(64, 64), (64, 1)], swizzle=Swizzle(2, 3, 3)), (64, 64), 1, (64, 16), 16)


@pytest.mark.parametrize(
    "swizzle, size, want",
    [
        (None, 2, 0),
        (Swizzle(3, 3, 3), 2, 128),
        (Swizzle(3, 2, 3), 2, 64),
        (Swizzle(2, 1, 3), 4, 32),
        (Swizzle(4, 3, 3), 1, 128),
        (Swizzle(3, 3, 3), 4, None),
        (Swizzle(3, 3, 2), 2, None),
    ],
)
def test_byte_swizzle(swizzle, size, want):
    assert byte_swizzle(swizzle, size) == want


def test_layouts_tvm_builds_give_these_views():
    """The views above are what TVM's layouts of those tiles slice to (atoms.memory_view's
    input), so the matcher sees the example's layouts as written."""
    a = ComposeLayout(3, 3, 3, TileLayout(S[128, 64]))
    b = ComposeLayout(3, 3, 3, TileLayout(S[(64, 4, 64) : (64, 64 * 64, 1)]))
    assert Swizzle.of(a) == SW128_F16 and Swizzle.of(b) == SW128_F16
