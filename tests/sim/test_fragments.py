"""Checks of the simulator's fragment oracle (sim/fragments.py) against the PTX ISA.

Structural checks (every (lane, reg) cell distinct, every cell covered once, .xN built
from .x1) plus spot values. ISA prose is quoted verbatim in comments; where the fact only
exists in an ISA figure (an image), the comment names the figure and the value.
"""

from __future__ import annotations

import importlib.util
import sys
from itertools import product
from pathlib import Path

import numpy as np
import pytest

_PATH = Path(__file__).resolve().parents[2] / "src/tirx_cuda_dispatch/sim/fragments.py"


def _load():
    # By file path: the sim package may not have its __init__ yet, and the installed
    # tirx_cuda_dispatch may be an older copy.
    spec = importlib.util.spec_from_file_location("_sim_fragments_under_test", _PATH)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


F = _load()

SHAPES = ("32x32b", "16x64b", "16x128b", "16x256b", "16x32bx2")


# --------------------------------------------------------------------------- ldmatrix


@pytest.mark.parametrize("num", [1, 2, 4])
def test_ldmatrix_row_addresses(num):
    # "Addresses addr0-addr7 correspond to the rows of the first matrix, addresses
    # addr8-addr15 correspond to the rows of the second matrix, and so on."
    # Table: .x1 threads 0-7; .x2 threads 0-15; .x4 threads 0-31.
    lanes = F.ldmatrix_row_address_lanes(num)
    assert len(lanes) == 8 * num
    assert sorted(lanes) == [(m, r) for m in range(num) for r in range(8)]
    assert lanes[0] == (0, 0) and lanes[7] == (0, 7)
    if num >= 2:
        assert lanes[8] == (1, 0) and lanes[15] == (1, 7)
    if num == 4:
        assert lanes[16] == (2, 0) and lanes[31] == (3, 7)


def test_ldmatrix_bad_num():
    with pytest.raises(ValueError):
        F.ldmatrix_row_address_lanes(3)


@pytest.mark.parametrize("trans", [False, True])
def test_ldmatrix_fragment_is_a_bijection(trans):
    cells = [F.ldmatrix_fragment(lane, h, trans) for lane in range(32) for h in (0, 1)]
    assert len(set(cells)) == 64
    assert set(cells) == set(product(range(8), range(8)))


def test_ldmatrix_fragment_spot_values():
    # "When reading 8x8 matrices, a group of four consecutive threads loads 16 bytes."
    # "Each thread in a warp loads fragments of a row, with thread 0 receiving the first
    # fragment in its register r, and so on. A group of four threads loads an entire row
    # of the matrix as shown in Figure 104."  Figure 104: row 0 = T0 T1 T2 T3 (two
    # elements each), row 1 = T4..T7, ..., row 7 = T28..T31.
    assert F.ldmatrix_fragment(0, 0, False) == (0, 0)  # thread 0: row 0 elements 0,1
    assert F.ldmatrix_fragment(0, 1, False) == (0, 1)
    assert F.ldmatrix_fragment(1, 0, False) == (0, 2)  # thread 1: row 0 elements 2,3
    assert F.ldmatrix_fragment(1, 1, False) == (0, 3)
    assert F.ldmatrix_fragment(3, 1, False) == (0, 7)
    assert F.ldmatrix_fragment(4, 0, False) == (1, 0)  # thread 4: row 1 elements 0,1
    assert F.ldmatrix_fragment(31, 1, False) == (7, 7)
    # Four consecutive threads cover exactly one row.
    for g in range(8):
        row = {F.ldmatrix_fragment(4 * g + k, h, False) for k in range(4) for h in (0, 1)}
        assert row == {(g, c) for c in range(8)}


def test_ldmatrix_trans_is_transpose():
    # ".trans indicates that the matrix is loaded in column-major format."
    for lane, h in product(range(32), (0, 1)):
        r, c = F.ldmatrix_fragment(lane, h, False)
        assert F.ldmatrix_fragment(lane, h, True) == (c, r)
    assert F.ldmatrix_fragment(0, 1, True) == (1, 0)  # thread 0 high half: row 1, elem 0
    assert F.ldmatrix_fragment(4, 0, True) == (0, 1)  # thread 4 low half: row 0, elem 1


def test_ldmatrix_destination_matches_fragment():
    for lane, reg, trans in product(range(32), range(4), (False, True)):
        assert F.ldmatrix_destination(lane, reg, trans) == F.ldmatrix_fragment(lane, 0, trans)
    with pytest.raises(ValueError):
        F.ldmatrix_destination(0, 4, False)


def test_ldmatrix_load_register_contents():
    # Matrix m, row i, element j holds 0x{m}{i}{j} (distinct 16-bit values).
    mats = np.array(
        [[[(m << 8) | (i << 4) | j for j in range(8)] for i in range(8)] for m in range(4)],
        dtype=np.uint16,
    )
    regs = F.ldmatrix_load(mats, trans=False)
    assert regs.shape == (32, 4) and regs.dtype == np.uint32
    # thread 0, r0: row 0 elements 0 (low half) and 1 (high half) of matrix 0
    assert regs[0, 0] == (0x001 << 16) | 0x000
    # thread 5, r2: row 1 elements 2,3 of matrix 2 ("elements of the third ... matrices
    # are loaded in the subsequent destination registers")
    assert regs[5, 2] == (0x213 << 16) | 0x212
    t = F.ldmatrix_load(mats, trans=True)
    # trans: thread 5 r2 low half = memory row 2 element 1, high half = row 3 element 1
    assert t[5, 2] == (0x231 << 16) | 0x221
    # .x1 / .x2 are the leading registers of .x4
    assert np.array_equal(F.ldmatrix_load(mats[:1]), regs[:, :1])
    assert np.array_equal(F.ldmatrix_load(mats[:2]), regs[:, :2])


@pytest.mark.parametrize("num,trans", list(product([1, 2, 4], [False, True])))
def test_stmatrix_inverts_ldmatrix(num, trans, rng):
    # stmatrix: "Each thread in a warp stores fragments of a row, with thread 0 storing the
    # first fragment from its register r, and so on" -- the same fragment as ldmatrix.
    mats = rng.integers(0, 1 << 16, size=(num, 8, 8), dtype=np.uint16)
    regs = F.ldmatrix_load(mats, trans)
    assert np.array_equal(F.stmatrix_store(regs, trans), mats)
    regs2 = rng.integers(0, 1 << 32, size=(32, num), dtype=np.uint32)
    assert np.array_equal(F.ldmatrix_load(F.stmatrix_store(regs2, trans), trans), regs2)


# --------------------------------------------------------------------------- tcgen05


# Table 49 (tcgen05.ld) / Table 50 (tcgen05.st), "Various-combinations of .num and .shape":
#   .num  | .16x32bx2 / .16x64b / .32x32b | .16x128b | .16x256b
TABLE_49 = {
    1: (1, 2, 4),
    2: (2, 4, 8),
    4: (4, 8, 16),
    8: (8, 16, 32),
    16: (16, 32, 64),
    32: (32, 64, 128),
    64: (64, 128, None),
    128: (128, None, None),
}


def test_tcgen05_register_table():
    for num, (narrow, mid, wide) in TABLE_49.items():
        for shape in ("16x32bx2", "16x64b", "32x32b"):
            assert F.tcgen05_regs_per_thread(shape, num) == narrow
        for shape, want in (("16x128b", mid), ("16x256b", wide)):
            if want is None:
                assert num not in F.tcgen05_nums(shape)
                with pytest.raises(ValueError):
                    F.tcgen05_regs_per_thread(shape, num)
            else:
                assert F.tcgen05_regs_per_thread(shape, num) == want
    assert F.tcgen05_nums("32x32b") == (1, 2, 4, 8, 16, 32, 64, 128)
    assert F.tcgen05_nums(".16x128b") == (1, 2, 4, 8, 16, 32, 64)
    assert F.tcgen05_nums("16x256b") == (1, 2, 4, 8, 16, 32)
    with pytest.raises(ValueError):
        F.tcgen05_nums("16x32b")


def _cases():
    return [(s, n) for s in SHAPES for n in F.tcgen05_nums(s)]


@pytest.mark.parametrize("shape,num", _cases())
def test_tcgen05_fragment_covers_each_cell_once(shape, num):
    # "A warp executing tcgen05{.ld,.st}.32x32b will access 32 lanes ... It loads from or
    # stores to each of the lane (32 * .num)-bits"; ".16x64b will access 16 lanes ...
    # (64 * .num)-bits"; likewise 128/256; ".16x32bx2 ... 16 lanes ... (32 * .num)-bits"
    # per access, two accesses (the second at taddr+immHalfSplitoff).
    split = num if shape == "16x32bx2" else 0  # place the 2nd access right after the 1st
    m = F.tcgen05_fragment_map(shape, num, half_split_offset=split)
    nregs = F.tcgen05_regs_per_thread(shape, num)
    assert m.shape == (32, nregs, 2)
    lanes = 32 if shape == "32x32b" else 16
    bits = {"32x32b": 32, "16x64b": 64, "16x128b": 128, "16x256b": 256, "16x32bx2": 32}[shape]
    cols = bits * num // 32 * (2 if shape == "16x32bx2" else 1)
    cells = [tuple(c) for c in m.reshape(-1, 2)]
    assert len(set(cells)) == len(cells) == 32 * nregs  # each (lane, reg) a distinct cell
    assert set(cells) == set(product(range(lanes), range(cols)))  # the whole rectangle
    assert F.tcgen05_lanes(shape) == lanes
    assert F.tcgen05_columns(shape, num) * (2 if shape == "16x32bx2" else 1) == cols


@pytest.mark.parametrize("shape,num", _cases())
def test_tcgen05_xn_repeats_x1_along_columns(shape, num):
    # ".num qualifier indicates the repeat factor on the base dimension"
    r1 = F.tcgen05_regs_per_thread(shape, 1)
    c1 = F.tcgen05_columns(shape, 1)
    for lane, reg in product(range(32), range(F.tcgen05_regs_per_thread(shape, num))):
        base_lane, base_col = F.tcgen05_fragment(shape, 1, lane, reg % r1)
        want = (base_lane, base_col + (reg // r1) * c1)
        assert F.tcgen05_fragment(shape, num, lane, reg) == want


def test_tcgen05_32x32b_values():
    # Figure 183: thread i <-> TMEM lane i; register rj <-> the j-th 32-bit column.
    for lane, reg in product(range(32), range(4)):
        assert F.tcgen05_fragment("32x32b", 4, lane, reg) == (lane, reg)


def test_tcgen05_16x256b_values():
    # Figure 186 (same pattern as the mma m16n8 accumulator): T0..T3 hold lane 0, two
    # columns each in r0,r1 (T0: cols 0,1; T1: cols 2,3; ...) and lane 8 in r2,r3.
    assert [F.tcgen05_fragment("16x256b", 1, 0, r) for r in range(4)] == [
        (0, 0),
        (0, 1),
        (8, 0),
        (8, 1),
    ]
    assert F.tcgen05_fragment("16x256b", 1, 1, 0) == (0, 2)
    assert F.tcgen05_fragment("16x256b", 1, 3, 1) == (0, 7)
    assert F.tcgen05_fragment("16x256b", 1, 4, 0) == (1, 0)
    assert F.tcgen05_fragment("16x256b", 1, 31, 3) == (15, 7)
    assert F.tcgen05_fragment("16x256b", 2, 0, 4) == (0, 8)  # .x2: next 256 bits


def test_tcgen05_16x128b_values():
    # Figure 185: T0..T3 hold lane 0 cols 0..3 in r0 and lane 8 cols 0..3 in r1.
    assert F.tcgen05_fragment("16x128b", 1, 0, 0) == (0, 0)
    assert F.tcgen05_fragment("16x128b", 1, 3, 0) == (0, 3)
    assert F.tcgen05_fragment("16x128b", 1, 0, 1) == (8, 0)
    assert F.tcgen05_fragment("16x128b", 1, 4, 0) == (1, 0)
    assert F.tcgen05_fragment("16x128b", 2, 5, 3) == (9, 5)


def test_tcgen05_16x64b_values():
    # Figure 184: lane 0 = T0 T2, lane 8 = T1 T3, lane 1 = T4 T6, lane 9 = T5 T7, ...
    assert F.tcgen05_fragment("16x64b", 1, 0, 0) == (0, 0)
    assert F.tcgen05_fragment("16x64b", 1, 1, 0) == (8, 0)
    assert F.tcgen05_fragment("16x64b", 1, 2, 0) == (0, 1)
    assert F.tcgen05_fragment("16x64b", 1, 3, 0) == (8, 1)
    assert F.tcgen05_fragment("16x64b", 1, 4, 0) == (1, 0)
    assert F.tcgen05_fragment("16x64b", 1, 31, 0) == (15, 1)
    assert F.tcgen05_fragment("16x64b", 2, 0, 1) == (0, 2)


def test_tcgen05_16x32bx2_halves():
    # "The shape .16x32bx2 performs two accesses into Tensor Memory of the shape .16x32b.
    # The base address of the first access is specified by taddr and the base address of
    # the second access is specified by taddr+immHalfSplitoff"; Figure 187: threads 0-15
    # do the first access, threads 16-31 the second.
    for lane, reg in product(range(32), range(4)):
        got = F.tcgen05_fragment("16x32bx2", 4, lane, reg, half_split_offset=16)
        assert got == (lane % 16, reg + (16 if lane >= 16 else 0))
    # Offset 0: both halves read the same 16 x num cells.
    a = F.tcgen05_fragment_map("16x32bx2", 2)
    assert np.array_equal(a[:16], a[16:])
    with pytest.raises(ValueError):
        F.tcgen05_fragment("16x64b", 1, 0, 0, half_split_offset=4)


def test_tcgen05_bad_reg_and_lane():
    with pytest.raises(ValueError):
        F.tcgen05_fragment("16x128b", 1, 0, 2)
    with pytest.raises(ValueError):
        F.tcgen05_fragment("32x32b", 1, 32, 0)


def test_pack16_values():
    # ".pack::16b can be used to pack two 16-bit elements from adjacent columns into a
    # single 32-bit element"; low half <- even (lower-address) column, low 16 bits of each
    # cell (module note 4).
    cells = np.array([[0x1111AAAA, 0x2222BBBB, 0x3333CCCC, 0x4444DDDD]], dtype=np.uint32)
    assert F.tcgen05_pack16(cells).tolist() == [[0xBBBBAAAA, 0xDDDDCCCC]]
    assert F.tcgen05_unpack16(np.array([0xBBBBAAAA], dtype=np.uint32)).tolist() == [
        0x0000AAAA,
        0x0000BBBB,
    ]
    with pytest.raises(ValueError):
        F.tcgen05_pack16(np.zeros(3, dtype=np.uint32))


def test_pack16_roundtrip(rng):
    regs = rng.integers(0, 1 << 32, size=(5, 8), dtype=np.uint32)
    assert np.array_equal(F.tcgen05_pack16(F.tcgen05_unpack16(regs)), regs)


@pytest.mark.parametrize("shape", SHAPES)
def test_tcgen05_packed_fragment_covers_twice_the_columns(shape):
    num = 2
    split = 2 * num if shape == "16x32bx2" else 0
    m = F.tcgen05_fragment_map(shape, num, half_split_offset=split, pack16=True)
    cells = [tuple(c) for c in m.reshape(-1, 2)]
    lanes = 32 if shape == "32x32b" else 16
    cols = 2 * F.tcgen05_columns(shape, num) * (2 if shape == "16x32bx2" else 1)
    assert len(set(cells)) == len(cells)
    assert set(cells) == set(product(range(lanes), range(cols)))
    # half h of reg r sits at column 2c+h of the unpacked cell c (+ the split, upper half)
    unpacked = F.tcgen05_fragment_map(shape, num)
    upper = (np.arange(32) >= 16)[:, None] * split
    assert np.array_equal(m[..., 0, 1], 2 * unpacked[..., 1] + upper)
    assert np.array_equal(m[..., 1, 1], m[..., 0, 1] + 1)
    assert np.array_equal(m[..., 0, 0], unpacked[..., 0])


def test_tcgen05_load_store_warp(rng):
    tmem = rng.integers(0, 1 << 32, size=(128, 64), dtype=np.uint32)
    regs = F.tcgen05_load_warp(tmem, "16x256b", 2, 48, 8)
    assert regs.shape == (32, 8)
    # thread 6 (g=1, q=2) r3: lane g + 8 = 9, column 2*2 + 1 = 5 -> TMEM (48 + 9, 8 + 5)
    assert regs[6, 3] == tmem[57, 13]
    # thread 6 r5 (second 256-bit repeat): lane 1, column 2*2 + 1 + 8 = 13
    assert regs[6, 5] == tmem[49, 21]
    out = np.zeros_like(tmem)
    F.tcgen05_store_warp(out, regs, "16x256b", 2, 48, 8)
    assert np.array_equal(out[48:64, 8:24], tmem[48:64, 8:24])
    assert not out[:48].any() and not out[64:].any()
    # packed: thread 0 r0 = cells (0, 0) low | (0, 1) low << 16
    p = F.tcgen05_load_warp(tmem, "32x32b", 1, 0, 0, pack16=True)
    want = (int(tmem[0, 0]) & 0xFFFF) | ((int(tmem[0, 1]) & 0xFFFF) << 16)
    assert p[0, 0] == want
    out2 = np.full_like(tmem, 0xFFFFFFFF)
    F.tcgen05_store_warp(out2, p, "32x32b", 1, 0, 0, unpack16=True)
    assert out2[0, 0] == int(tmem[0, 0]) & 0xFFFF and out2[0, 2] == 0xFFFFFFFF
    # 16x32bx2 with split 32: upper half-warp reads columns 32+
    s = F.tcgen05_load_warp(tmem, "16x32bx2", 1, 0, 0, half_split_offset=32)
    assert s[3, 0] == tmem[3, 0] and s[19, 0] == tmem[3, 32]


def test_tcgen05_lane_quarter():
    # 9.7.16.8.1: "ID of the warp within the warpgroup | Accessible Lanes":
    # 0 | 0-31, 1 | 32-63, 2 | 64-95, 3 | 96-127
    assert F.tcgen05_lane_quarter(0) == range(0, 32)
    assert F.tcgen05_lane_quarter(1) == range(32, 64)
    assert F.tcgen05_lane_quarter(3) == range(96, 128)
    assert F.tcgen05_lane_quarter(6) == range(64, 96)  # warp 6 = warp 2 of warpgroup 1
