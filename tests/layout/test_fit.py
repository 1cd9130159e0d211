"""layout.fit: one fragment-fitting check for every register-fragment instruction (mma.sync's
A, B, C, D and wgmma's accumulator and register A go through it), on register tables built
by hand; each rule with the table that breaks it."""

from __future__ import annotations

import numpy as np
import pytest

from tirx_cuda_dispatch.errors import Decline
from tirx_cuda_dispatch.isa.mma_fragments import M8N8, mma_instructions
from tirx_cuda_dispatch.layout.fit import Digit, Holders, matrix_rows, mixed_radix, word
from tirx_cuda_dispatch.layout.register import RegisterTable

M16N8K16 = next(i for i in mma_instructions("float16", "float32") if i.shape == "m16n8k16")


def accumulator_table(swap_lanes: tuple[int, int] | None = None) -> RegisterTable:
    """A warp's 16 x 8 float32 accumulator as the ISA places it (lane 4g + t holds rows g
    and g + 8, columns 2t and 2t + 1, in registers 0-3), optionally two lanes swapped."""
    elements = np.full((32, 4), -1, dtype=np.int64)
    for lane in range(32):
        for r in range(4):
            row, col = M16N8K16.c_element(lane, r)
            elements[lane, r] = row * 8 + col
    if swap_lanes is not None:
        a, b = swap_lanes
        elements[[a, b]] = elements[[b, a]]
    return RegisterTable((0, 1, 2, 3), elements)


def fit_accumulator(table: RegisterTable) -> list[int]:
    holders = Holders.of(table, 128, "D acc", "lane")
    lanes = np.arange(32)
    regs = []
    for r in range(4):
        row, col = M16N8K16.c_element(lanes, r)
        regs.append(
            holders.slot(
                row * 8 + col,
                (row, col),
                lambda j, r=r: f"register {r} puts it in lane {j}",
                f"register {r}",
            )  # fmt: skip
        )
    return regs


def test_the_isas_placement_fits_in_its_own_registers():
    assert fit_accumulator(accumulator_table()) == [0, 1, 2, 3]


def test_a_misplaced_element_is_named_with_its_holder_and_where_it_belongs():
    with pytest.raises(Decline, match=r"D acc: element \(0, 0\) is held by lane 1; register 0 "
                                      r"puts it in lane 0"):  # fmt: skip
        fit_accumulator(accumulator_table(swap_lanes=(0, 1)))


def test_a_slot_in_different_registers_of_different_lanes_declines():
    table = accumulator_table()
    table.elements[5, [0, 1]] = table.elements[5, [1, 0]]  # lane 5 keeps its pair swapped
    with pytest.raises(Decline, match=r"register 0 is register 0 in lane 0 but 1 in lane 5"):
        fit_accumulator(table)


def test_a_replicated_element_declines_where_the_fragment_holds_it_once():
    table = accumulator_table()
    table.elements[7, 0] = table.elements[3, 0]  # lane 7 holds lane 3's element too
    table.elements[3, 0] = -1
    table.elements[7, 3] = table.elements[3, 1]
    with pytest.raises(Decline, match=r"D acc holds element \d+ in 2 lanes"):
        Holders.of(table, 128, "D acc", "lane")
    kept = Holders.of(table, 128, "D acc", "lane", unique=False)  # the last holder counts
    assert kept.thread[table.elements[7, 3]] == 7


@pytest.mark.parametrize("low, high, ok", [(4, 5, 2), (0, 1, 0), (4, 6, None), (3, 4, None)])
def test_a_16_bit_pair_is_one_b32_register_only_at_2w_and_2w_plus_1(low, high, ok):
    if ok is not None:
        assert word("A a", low, high, "pair 0") == ok
    else:
        with pytest.raises(Decline, match=rf"A a: pair 0 are its registers {low} and {high}"):
            word("A a", low, high, "pair 0")


# -- matrix loads: row addresses ------------------------------------------------------------
def test_mixed_radix_merges_bits_into_digits():
    t = np.arange(32)
    # The A fragment's x4 rows: row (t % 8) + 8 (bit 3) of a 16-wide tile, column 8 (bit 4).
    assert mixed_radix((t % 8) * 16 + ((t >> 3) & 1) * 128 + ((t >> 4) & 1) * 8) == (
        Digit(0, 4, 16),  # bits 0-3 are one digit: rows 0..15
        Digit(4, 1, 8),
    )
    assert mixed_radix((t % 8) * 16 + ((t >> 3) & 1) * 8) == (Digit(0, 3, 16), Digit(3, 1, 8))
    assert mixed_radix(t * 8) == (Digit(0, 5, 8),)
    assert mixed_radix(np.array([0, 3, 5, 9])) is None  # thread 3 would supply 3 + 5 = 8


def _m8n8_offsets(row_stride: int, trans: bool) -> np.ndarray:
    """[1 warp, 32 lanes, 1 word, 2]: the shared offsets of an 8x8 matrix whose rows are
    ``row_stride`` apart, where the m8n8 fragment (plain or .trans) puts them."""
    lane, half = np.arange(32)[:, None], np.arange(2)[None, :]
    row, col = M8N8.element(lane, half, trans)
    return (row * row_stride + col).reshape(1, 32, 1, 2)


def test_matrix_rows_fit_the_m8n8_fragment_and_name_the_first_misfit():
    """A row-major 8x8 matrix (rows 16 elements apart) fits the plain fragment: row r
    starts at 16 r. Read as .trans it does not, and the reason names lane 0's pair and
    where the fragment puts it (the control)."""
    plain = lambda lane, half: M8N8.element(lane, half, False)  # noqa: E731
    trans = lambda lane, half: M8N8.element(lane, half, True)  # noqa: E731
    rows, why = matrix_rows(_m8n8_offsets(16, False), plain, 8)
    assert why is None and rows[0, 0].tolist() == [16 * r for r in range(8)]
    rows, why = matrix_rows(_m8n8_offsets(16, False), trans, 8)
    assert rows is None
    assert why.startswith("lane 0 (warp 0) holds shared offsets 0, 1 in register word 0")
    assert "rows 0 and 1 of column 0" in why
    rows, why = matrix_rows(_m8n8_offsets(16, True), trans, 8)  # stored transposed: fits
    assert why is None and rows[0, 0].tolist() == [16 * r for r in range(8)]
