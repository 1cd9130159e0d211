"""The partition of a copy between memory buffers (shared by gmem_smem and ldgsts), and the
access widths an instruction allows (pure Python over memory views)."""

from __future__ import annotations

import itertools

import pytest

from tirx_cuda_dispatch.errors import Decline
from tirx_cuda_dispatch.layout.atoms import MemoryView
from tirx_cuda_dispatch.layout.copy_partition import copy_roles
from tirx_cuda_dispatch.layout.partition import (
    PiecewisePartition,
    scope_partition,
    synthesize_partition,
    synthesize_pieces,
)
from tirx_cuda_dispatch.layout.swizzle import Swizzle

CP_ASYNC = (128, 64, 32)


@pytest.mark.parametrize(
    "src, dst, roles",
    [
        ("global", "shared", ("src", "dst")),
        ("shared", "global", ("dst", "src")),
        ("global", "global", ("src", "dst")),
        ("shared", "shared", ("src", "dst")),
    ],
)
def test_the_global_side_drives_the_order(src, dst, roles):
    assert copy_roles(src, dst) == roles


def _elements(views, part):
    """Every (offset per view) an access moves, each access aligned to its width."""
    moved = []
    if isinstance(part, PiecewisePartition):
        accesses = zip(*(part.accesses(i) for i in range(len(views))), strict=True)
        for accs in accesses:
            assert all(a.offset % a.elements == 0 for a in accs)
            moved += [tuple(a.offset + k for a in accs) for k in range(accs[0].elements)]
        return sorted(moved)
    for rnd, tid in itertools.product(range(part.rounds), range(part.threads)):
        offs = part.access(rnd, tid)
        assert all(o % part.vec == 0 for o in offs)
        moved += [tuple(o + k for o in offs) for k in range(part.vec)]
    return sorted(moved)


def _expected(views):
    return sorted(tuple(v.offset(i) for v in views) for i in range(views[0].size))


def _widths(part):
    if isinstance(part, PiecewisePartition):
        return {p.vec_bits for p in part.pieces}
    return {part.vec_bits}


@pytest.mark.parametrize(
    "atoms, elem_bits, threads",
    [
        (((30, 100), (100, 1)), 32, 128),  # 750 vectors over 128 threads: masked
        (((5, 70), (70, 1)), 16, 128),  # 350 contiguous halves: 16 + 8 + 4 bytes
        (((6, 20), (20, 1)), 8, 32),  # 120 bytes: 7 x 16 and one 8
        (((32, 32), (32, 1)), 32, 32),  # even
    ],
)
def test_allowed_widths_move_every_element_once(atoms, elem_bits, threads):
    views = [MemoryView("A", atoms, 0), MemoryView("S", atoms, 0)]
    part = scope_partition(views, threads, elem_bits, widths=CP_ASYNC)
    assert _widths(part) <= set(CP_ASYNC)
    assert _elements(views, part) == _expected(views)


def test_the_default_widths_are_unchanged():
    """gmem_smem's partition: 8- and 16-bit accesses still cover what cp.async cannot."""
    views = [MemoryView(n, ((5, 35), (35, 1)), 0) for n in ("A", "S")]
    part = scope_partition(views, 128, 16)
    assert min(_widths(part)) == 16 and _elements(views, part) == _expected(views)
    with pytest.raises(
        Decline, match=r"1 elements \(16 bits\) are left of each contiguous run of 175 after 174"
    ):
        scope_partition(views, 128, 16, widths=CP_ASYNC)  # the same region for cp.async


def test_a_2_byte_aligned_base_declines_naming_it():
    views = [MemoryView("A", ((32, 64), (32, 1)), 1), MemoryView("S", ((32, 32), (32, 1)), 0)]
    with pytest.raises(Decline) as err:
        synthesize_pieces(views, 32, 16, widths=CP_ASYNC)
    assert "32-bit: A base offset 1 is not provably a multiple of 2" in str(err.value)
    assert "a contiguous run of 32 elements (512 bits) fits no 128/64/32-bit access" in str(
        err.value
    )
    aligned = [MemoryView("A", ((32, 64), (32, 1)), 2), views[1]]  # the control
    assert _widths(synthesize_pieces(aligned, 32, 16, widths=CP_ASYNC)) == {32}


def test_elements_that_are_not_contiguous_decline_below_32_bits():
    views = [MemoryView("A", ((16, 1), (64, 16)), 0), MemoryView("S", ((16, 64), (64, 1)), 0)]
    with pytest.raises(Decline, match="not contiguous on every operand"):
        synthesize_pieces(views, 32, 16, widths=CP_ASYNC)
    part = synthesize_pieces(views, 32, 32, widths=CP_ASYNC)  # the control: one float32 each
    assert _widths(part) == {32} and _elements(views, part) == _expected(views)


def test_even_partition_takes_the_widths_too():
    views = [MemoryView("A", ((32, 16), (16, 1)), 0)] * 2
    part = synthesize_partition(views, 32, 8, widths=CP_ASYNC)
    assert part.vec_bits == 128
    with pytest.raises(Decline, match="no access of \\[32\\] bits holds whole 64-bit elements"):
        synthesize_partition(views, 32, 64, widths=(32,))


def test_swizzle_unit_caps_the_allowed_widths():
    g = MemoryView("A", ((32, 16), (16, 1)), 0)
    s = MemoryView("S", ((32, 16), (16, 1)), 0, Swizzle(2, 2, 3))  # 4-byte units of uint8
    part = synthesize_partition([g, s], 32, 8, widths=CP_ASYNC)
    assert part.vec_bits == 32 and "swizzle unit" in part.narrower_because
    assert _elements([g, s], part) == _expected([g, s])
