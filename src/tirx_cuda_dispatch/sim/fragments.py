"""Register-fragment maps of PTX warp data-movement instructions, derived from the PTX ISA.

This module is the simulator's *independent oracle* for which thread register holds which
matrix / Tensor Memory (TMEM) element. It was written from the PTX ISA text alone, never
from this project's variants (``copy/ldstmatrix.py``, ``copy_async/tcgen05_ldst.py``,
``layout/*``) nor TVM, so that tests can check those against it. Pure Python + numpy.

ISA sections read (numbering of the PTX ISA 8.7/8.8 manual; PTX ISA 9.x renumbers the
tcgen05 chapter 9.7.16 -> 9.7.17 and the table/figure numbers shift by a few):

* 9.7.14.5.15 "Warp-level matrix load instruction: ldmatrix" (address table, Figure 104
  "ldmatrix fragment layout for one 8x8 Matrix with 16-bit elements", the sm_75 note).
* 9.7.14.5.16 "Warp-level matrix store instruction: stmatrix" (Figure 107).
* 9.7.14.5.7 "Matrix Fragments for mma.m16n8k8" and 9.7.14.5.8 "Matrix Fragments for
  mma.m16n8k16 with floating point type" (PTX ISA 9.x numbering; 9.7.15.5.x in older
  manuals): the A/B/C/D fragments of ``.f16``/``.bf16`` (and ``.tf32`` at ``.m16n8k8``)
  multiplicands with ``.f16``/``.f32`` accumulators. These are *formulas* in the ISA's
  prose (``groupID = %laneid >> 2``, ...), transcribed directly; their "Elements (low to
  high)" column also fixes the packing of two 16-bit elements in one ``.b32`` register.
* 9.7.16.2.3 "Data Movement Shape" and 9.7.16.2.3.1 "Memory Layout": 9.7.16.2.3.1.1-5
  "Matrix fragments for shape .32x32b / .16x64b / .16x128b / .16x256b / .16x32bx2"
  (Figures 183-187).
* 9.7.16.8.1 "Access restrictions", 9.7.16.8.2 "Packing and Unpacking" (Figure 193),
  9.7.16.8.3 "tcgen05.ld" (Table 49) and 9.7.16.8.4 "tcgen05.st" (Table 50).

Ambiguities and the choices made here:

1. The per-thread layouts of ldmatrix (Figure 104) and of tcgen05.ld/st (Figures 183-187)
   and the pack/unpack picture (Figure 193) are *images*; the ISA's prose only says how
   many lanes / bits a warp touches. The exact thread -> (row, column) maps below were
   read off those figures' published transcriptions in NVIDIA CUTLASS
   (``cute/atom/copy_traits_sm75.hpp`` ``SM75_U32x1_LDSM_N`` / ``SM75_U16x2_LDSM_T`` and
   ``cute/atom/copy_traits_sm100.hpp`` ``SM100_TMEM_LOAD_{32dp32b,16dp64b,16dp128b,
   16dp256b,16dp32b}*`` and their ``_16b`` (pack) variants), decoded by hand into the
   closed forms below; CUTLASS is NVIDIA's own encoding of those figures and is
   unrelated to this project and to TVM. Every closed form is checked against the
   ISA prose (lane counts, bits per lane, register counts of Table 49) in the tests.
2. ldmatrix: the ISA does not say in words which 16-bit half of ``r`` holds which column.
   We take the lower-address element (even column) in the low 16 bits: each group of four
   threads "loads 16 bytes", i.e. thread ``k`` of the group gets bytes ``4k..4k+3`` of the
   row as one little-endian 32-bit word, and the mma fragment tables list the two elements
   of a ``.f16x2`` register "low to high" as ``a0, a1`` (column ``2k`` then ``2k+1``).
3. ldmatrix ``.trans``: the ISA only says "the matrix is loaded in column-major format".
   We read it as: the eight supplied addresses still point at eight 16-byte memory rows,
   and the fragment of Figure 104 is applied to the transpose of that 8x8 block, so lane
   ``l`` half ``h`` receives memory row ``2*(l%4)+h``, element ``l//4``.
4. ``.pack::16b`` / ``.unpack::16b``: the ISA says two 16-bit chunks "from adjacent
   columns" are packed into one 32-bit register. We take the *low* 16 bits of each 32-bit
   TMEM cell; the even (lower-address) column goes to the register's low half. The ISA
   does not say what ``tcgen05.st.unpack::16b`` leaves in the upper 16 bits of a cell;
   :func:`tcgen05_unpack16` writes zeros there and callers must not rely on them.
5. ``.16x32bx2``: "two accesses into Tensor Memory of the shape .16x32b ... the first
   access by taddr and ... the second ... by taddr+immHalfSplitoff". Which threads do
   which access is only in Figure 187: threads 0-15 do the first, threads 16-31 the second
   (the SASS spelling ``16dp32bit_t0_t15`` / ``_t16_t31`` says the same).
"""

from __future__ import annotations

import functools

import numpy as np

WARP_SIZE = 32
"""Threads per warp."""

# ---------------------------------------------------------------------------------------
# ldmatrix / stmatrix, shape .m8n8, 16-bit elements
# ---------------------------------------------------------------------------------------

LDMATRIX_NUMS: tuple[int, ...] = (1, 2, 4)
"""Valid ``.num`` values (``.x1 .x2 .x4``) of ldmatrix/stmatrix (ISA 9.7.14.5.15/16)."""

M8N8_ROWS = 8
"""Rows of one ``.m8n8`` matrix; each row is 16 bytes = 8 elements of 16 bits."""
M8N8_COLS = 8


def _check_num(num: int) -> None:
    if num not in LDMATRIX_NUMS:
        raise ValueError(f"ldmatrix/stmatrix .num must be one of {LDMATRIX_NUMS}, got {num}")


def _check_lane(lane: int, limit: int = WARP_SIZE) -> None:
    if not 0 <= lane < limit:
        raise ValueError(f"lane must be in [0, {limit}), got {lane}")


def _check_half(half: int) -> None:
    if half not in (0, 1):
        raise ValueError(f"half must be 0 (low 16 bits) or 1 (high 16 bits), got {half}")


def ldmatrix_row_address_lanes(num: int) -> list[tuple[int, int]]:
    """Which (matrix, row) each lane's address operand names, for ``.x1 .x2 .x4``.

    ISA 9.7.14.5.15 (and the identical table in 9.7.14.5.16 stmatrix): "The eight addresses
    required for each matrix are provided by eight threads ... Each address corresponds to
    the start of a matrix row. Addresses addr0-addr7 correspond to the rows of the first
    matrix, addresses addr8-addr15 correspond to the rows of the second matrix, and so
    on", with threads 0-7 giving addr0-addr7, threads 8-15 addr8-addr15, etc. So lane
    ``l`` supplies row ``l % 8`` of matrix ``l // 8``.

    The result is indexed by lane and has ``8 * num`` entries (lanes 0-7 for ``.x1``, 0-15
    for ``.x2``, 0-31 for ``.x4``). The other lanes' addresses appear as "-" in the ISA
    table: they name no row and are not used. The ISA adds one caveat: "For .target sm_75
    or below, all threads must contain valid addresses. Otherwise, the behavior is
    undefined. For .num = .x1 and .num = .x2, addresses contained in lower threads can be
    copied to higher threads to achieve the expected behavior." (stmatrix needs sm_90 and
    has no such note.)
    """
    _check_num(num)
    return [(lane // M8N8_ROWS, lane % M8N8_ROWS) for lane in range(M8N8_ROWS * num)]


def ldmatrix_fragment(lane: int, half: int, trans: bool) -> tuple[int, int]:
    """(row, col) of the element in 16-bit ``half`` of ``lane``'s register for one matrix.

    ``row`` is the matrix row whose start address some lane supplied (see
    :func:`ldmatrix_row_address_lanes`), ``col`` the 16-bit element index inside that
    16-byte row; ``half`` 0 is bits 0-15 of the ``.b32`` register, 1 is bits 16-31. The
    same map applies to every matrix: register ``r[m]`` holds matrix ``m`` ("When .num =
    .x2, the elements of the second matrix are loaded in the next destination register").

    Non-transposed (ISA 9.7.14.5.15, Figure 104): "a group of four consecutive threads
    loads 16 bytes ... Each thread in a warp loads fragments of a row, with thread 0
    receiving the first fragment in its register r, and so on. A group of four threads
    loads an entire row": lane ``l`` holds row ``l // 4``, columns ``2*(l%4)`` (low half)
    and ``2*(l%4)+1`` (high half; see the module notes for the half order).

    ``.trans`` ("the matrix is loaded in column-major format"): the same fragment of the
    transposed block, i.e. lane ``l`` half ``h`` holds row ``2*(l%4)+h``, column ``l//4``.

    stmatrix (ISA 9.7.14.5.16, Figure 107) uses the same fragment in the other direction:
    "Each thread in a warp stores fragments of a row, with thread 0 storing the first
    fragment from its register r, and so on. A group of four threads stores an entire row
    of the matrix", with the same address table and the same ``.trans`` meaning.
    """
    _check_lane(lane)
    _check_half(half)
    group_row = lane // 4
    pair_col = 2 * (lane % 4) + half
    if trans:
        return (pair_col, group_row)
    return (group_row, pair_col)


def ldmatrix_destination(lane: int, reg: int, trans: bool) -> tuple[int, int]:
    """(row, col) in matrix ``reg`` of the element in the *low* half of ``lane``'s ``r[reg]``.

    ``reg`` (0..num-1) is both the register index and the matrix index. The high half holds
    ``(row, col + 1)`` without ``.trans`` and ``(row + 1, col)`` with it. Equivalent to
    ``ldmatrix_fragment(lane, 0, trans)``; kept for callers that think per register.
    """
    if reg not in range(max(LDMATRIX_NUMS)):
        raise ValueError(f"reg must be in [0, {max(LDMATRIX_NUMS)}), got {reg}")
    return ldmatrix_fragment(lane, 0, trans)


def _as_matrices(matrices: np.ndarray) -> np.ndarray:
    mats = np.asarray(matrices)
    if mats.ndim != 3 or mats.shape[1:] != (M8N8_ROWS, M8N8_COLS):
        raise ValueError(f"expected (num, 8, 8) 16-bit matrices, got shape {mats.shape}")
    _check_num(mats.shape[0])
    return mats.astype(np.uint16)


@functools.cache
def ldmatrix_fragment_map(trans: bool) -> tuple[np.ndarray, np.ndarray]:
    """All of :func:`ldmatrix_fragment` at once: (rows, cols), each ``int64`` ``(32, 2)``
    by lane and half. Cached, hence read-only."""
    cells = np.array(
        [[ldmatrix_fragment(lane, half, trans) for half in (0, 1)] for lane in range(WARP_SIZE)]
    )
    rows, cols = cells[..., 0].copy(), cells[..., 1].copy()
    rows.flags.writeable = cols.flags.writeable = False
    return rows, cols


def ldmatrix_load(matrices: np.ndarray, trans: bool = False) -> np.ndarray:
    """Simulate ``ldmatrix.sync.aligned.m8n8.x{num}{.trans}.b16`` on already-gathered rows.

    ``matrices[m, i, :]`` are the eight 16-bit elements at the address lane ``8*m + i``
    supplied (memory order). Returns the destination registers as ``uint32`` of shape
    ``(32, num)``: ``out[lane, m]`` is ``r[m]`` of that lane (half ``h`` of it the element
    :func:`ldmatrix_fragment` names).
    """
    mats = _as_matrices(matrices)
    rows, cols = ldmatrix_fragment_map(trans)
    halves = mats[:, rows, cols].astype(np.uint32)  # (num, 32, 2)
    return np.ascontiguousarray((halves[..., 0] | (halves[..., 1] << np.uint32(16))).T)


def stmatrix_store(regs: np.ndarray, trans: bool = False) -> np.ndarray:
    """Simulate ``stmatrix.sync.aligned.m8n8.x{num}{.trans}.b16``: inverse of ldmatrix_load.

    ``regs`` is ``uint32`` of shape ``(32, num)`` (``regs[lane, m]`` = source ``r[m]``).
    Returns ``(num, 8, 8)`` ``uint16``: ``out[m, i, :]`` is what lands at the 16 bytes
    addressed by lane ``8*m + i``.
    """
    r = np.asarray(regs)
    if r.ndim != 2 or r.shape[0] != WARP_SIZE:
        raise ValueError(f"expected (32, num) registers, got shape {r.shape}")
    num = r.shape[1]
    _check_num(num)
    words = (r.astype(np.int64) & 0xFFFFFFFF).T  # (num, 32)
    out = np.zeros((num, M8N8_ROWS, M8N8_COLS), dtype=np.uint16)
    rows, cols = ldmatrix_fragment_map(trans)
    for half in (0, 1):
        out[:, rows[:, half], cols[:, half]] = (words >> (16 * half)) & 0xFFFF
    return out


# ---------------------------------------------------------------------------------------
# tcgen05.ld / tcgen05.st
# ---------------------------------------------------------------------------------------

TCGEN05_SHAPES: tuple[str, ...] = ("32x32b", "16x64b", "16x128b", "16x256b", "16x32bx2")
"""``.shape`` values of tcgen05.ld/st (ISA 9.7.16.2.3 "Data Movement Shape")."""

# Registers per thread at .x1 -- the ".x1" row of Table 49 (ld) / Table 50 (st).
_REGS_X1 = {"32x32b": 1, "16x64b": 1, "16x32bx2": 1, "16x128b": 2, "16x256b": 4}
# Largest .num -- where the Table 49/50 column stops before "NA".
_MAX_NUM = {"32x32b": 128, "16x64b": 128, "16x32bx2": 128, "16x128b": 64, "16x256b": 32}
# TMEM lanes one access touches ("will access 32 lanes" / "will access 16 lanes").
_LANES = {"32x32b": 32, "16x64b": 16, "16x128b": 16, "16x256b": 16, "16x32bx2": 16}
# 32-bit columns per lane at .x1: the "size" of `lane x size`, in units of 32 bits
# (".16x32bx2" is two .16x32b accesses, one column each).
_COLS_X1 = {"32x32b": 1, "16x64b": 2, "16x128b": 4, "16x256b": 8, "16x32bx2": 1}

TMEM_LANES = 128
"""Lanes (rows) of a CTA's Tensor Memory (ISA 9.7.16.8.1: four 32-lane chunks)."""


def _check_shape(shape: str) -> str:
    s = shape.lstrip(".")
    if s not in _REGS_X1:
        raise ValueError(f"unknown tcgen05.ld/st shape {shape!r}; expected one of {TCGEN05_SHAPES}")
    return s


def tcgen05_nums(shape: str) -> tuple[int, ...]:
    """Valid ``.num`` repeat factors for ``shape`` (ISA Table 49/50, "NA" entries excluded).

    ``.x1 .x2 .x4 ... .x128`` for ``.32x32b``, ``.16x64b``, ``.16x32bx2``; up to ``.x64``
    for ``.16x128b``; up to ``.x32`` for ``.16x256b`` (the register vector never exceeds
    128). ``tcgen05.ld.red`` additionally needs ``.num >= .x2``; not modelled here.
    """
    s = _check_shape(shape)
    nums = []
    n = 1
    while n <= _MAX_NUM[s]:
        nums.append(n)
        n *= 2
    return tuple(nums)


def _check_num_tc(shape: str, num: int) -> str:
    s = _check_shape(shape)
    if num not in tcgen05_nums(s):
        raise ValueError(f"tcgen05 .{s} does not allow .x{num}; valid: {tcgen05_nums(s)}")
    return s


def tcgen05_regs_per_thread(shape: str, num: int) -> int:
    """Length of the ``r`` vector of ``tcgen05.{ld,st}.shape.x{num}``: ISA Table 49/50.

    1 per ``.num`` for ``.16x32bx2 / .16x64b / .32x32b``, 2 for ``.16x128b``, 4 for
    ``.16x256b``. ``.pack::16b`` / ``.unpack::16b`` do not change it (the table has no
    pack column): each register then carries two 16-bit chunks instead of one cell.
    """
    s = _check_num_tc(shape, num)
    return _REGS_X1[s] * num


def tcgen05_lanes(shape: str) -> int:
    """TMEM lanes one instruction touches: 32 for ``.32x32b``, else 16 (ISA 9.7.16.2.3.1)."""
    return _LANES[_check_shape(shape)]


def tcgen05_columns(shape: str, num: int, *, pack16: bool = False) -> int:
    """32-bit TMEM columns per lane one access touches: ``size * num / 32`` bits (x2 packed).

    ISA 9.7.16.2.3.1.x: "It loads from or stores to each of the lane (size * .num)-bits of
    data". For ``.16x32bx2`` this is per access (each half-warp's access); the whole
    instruction then spans ``[0, cols)`` and ``[immHalfSplitoff, immHalfSplitoff + cols)``.
    """
    s = _check_num_tc(shape, num)
    return _COLS_X1[s] * num * (2 if pack16 else 1)


def tcgen05_fragment(
    shape: str, num: int, lane: int, reg: int, *, half_split_offset: int = 0
) -> tuple[int, int]:
    """(TMEM lane offset, TMEM 32-bit column offset) moved by register ``reg`` of ``lane``.

    Offsets are relative to the instruction's ``taddr`` (lane field = bits 31-16, column
    field = bits 15-0): "All the threads in the warp must specify the same value of taddr,
    which must be the base address of the collective load operation" (ISA 9.7.16.8.3).
    ``lane`` is the thread's lane in the warp (0..31), ``reg`` indexes the ``r`` vector
    (0 .. ``tcgen05_regs_per_thread(shape, num)``-1). Without pack/unpack each register
    moves one whole 32-bit cell; see :func:`tcgen05_fragment_packed` for ``.pack::16b``.

    Per shape (Figures 183-187; see the module notes for how they were transcribed), with
    ``g = lane // 4`` and ``q = lane % 4``:

    * ``.32x32b`` (Fig. 183, "will access 32 lanes"): lane ``lane``, column ``reg``.
    * ``.16x64b`` (Fig. 184, 16 lanes x 64 bits): lane ``g + 8*(lane % 2)``, column
      ``(lane // 2) % 2 + 2*reg``.
    * ``.16x128b`` (Fig. 185, 16 lanes x 128 bits): lane ``g + 8*(reg % 2)``, column
      ``q + 4*(reg // 2)``.
    * ``.16x256b`` (Fig. 186, 16 lanes x 256 bits; the mma ``m16n8`` accumulator pattern):
      lane ``g + 8*((reg // 2) % 2)``, column ``2*q + reg % 2 + 8*(reg // 4)``.
    * ``.16x32bx2`` (Fig. 187, two ``.16x32b`` accesses): lane ``lane % 16``, column
      ``reg``, plus ``half_split_offset`` (the ``immHalfSplitoff`` immediate) for threads
      16-31, which perform the second access at ``taddr + immHalfSplitoff``; threads 0-15
      perform the first access at ``taddr``. ``half_split_offset`` is ignored (must be 0)
      for the other shapes.

    For every shape ``.xN`` repeats the ``.x1`` pattern ``N`` times along the columns:
    register ``reg`` is register ``reg % regs_x1`` of repeat ``reg // regs_x1``, shifted by
    ``repeat * cols_x1`` columns.
    """
    s = _check_num_tc(shape, num)
    _check_lane(lane)
    nregs = _REGS_X1[s] * num
    if not 0 <= reg < nregs:
        raise ValueError(f"reg must be in [0, {nregs}) for .{s}.x{num}, got {reg}")
    if s != "16x32bx2" and half_split_offset != 0:
        raise ValueError(f"half_split_offset applies only to .16x32bx2, not .{s}")
    if half_split_offset < 0:
        raise ValueError(f"half_split_offset must be non-negative, got {half_split_offset}")
    g, q = lane // 4, lane % 4
    if s == "32x32b":
        return (lane, reg)
    if s == "16x64b":
        return (g + 8 * (lane % 2), (lane // 2) % 2 + 2 * reg)
    if s == "16x128b":
        return (g + 8 * (reg % 2), q + 4 * (reg // 2))
    if s == "16x256b":
        return (g + 8 * ((reg // 2) % 2), 2 * q + reg % 2 + 8 * (reg // 4))
    # 16x32bx2
    return (lane % 16, reg + (half_split_offset if lane >= 16 else 0))


def tcgen05_fragment_packed(
    shape: str, num: int, lane: int, reg: int, half: int, *, half_split_offset: int = 0
) -> tuple[int, int]:
    """(TMEM lane offset, column offset) of the 16-bit ``half`` of ``reg`` under pack/unpack.

    ``.pack::16b`` (ld) / ``.unpack::16b`` (st), ISA 9.7.16.8.2: "two 16-bit chunks can be
    packed into a single 32-bit chunk in the register", "two 16-bit elements from adjacent
    columns". The register count is unchanged, so the footprint doubles: the unpacked cell
    column ``c`` of :func:`tcgen05_fragment` becomes columns ``2c`` (register bits 0-15)
    and ``2c + 1`` (bits 16-31); each chunk is the low 16 bits of its 32-bit TMEM cell.
    For ``.16x32bx2`` the ``immHalfSplitoff`` is a raw column offset added afterwards for
    threads 16-31 (it is added to ``taddr``).
    """
    _check_half(half)
    t_lane, col = tcgen05_fragment(shape, num, lane, reg)
    split = 0
    if _check_shape(shape) == "16x32bx2":
        if half_split_offset < 0:
            raise ValueError(f"half_split_offset must be non-negative, got {half_split_offset}")
        split = half_split_offset if lane >= 16 else 0
    elif half_split_offset != 0:
        raise ValueError(f"half_split_offset applies only to .16x32bx2, not {shape}")
    return (t_lane, 2 * col + half + split)


def tcgen05_fragment_map(
    shape: str, num: int, *, half_split_offset: int = 0, pack16: bool = False
) -> np.ndarray:
    """All of :func:`tcgen05_fragment` (or ``_packed``) at once, as an ``int64`` array.

    Shape ``(32, regs, 2)`` -> ``[lane, reg] = (tmem_lane, column)`` without pack, and
    ``(32, regs, 2, 2)`` -> ``[lane, reg, half] = (tmem_lane, column)`` with ``pack16``.
    """
    nregs = tcgen05_regs_per_thread(shape, num)
    if pack16:
        out = np.zeros((WARP_SIZE, nregs, 2, 2), dtype=np.int64)
        for lane in range(WARP_SIZE):
            for reg in range(nregs):
                for half in (0, 1):
                    out[lane, reg, half] = tcgen05_fragment_packed(
                        shape, num, lane, reg, half, half_split_offset=half_split_offset
                    )
        return out
    out = np.zeros((WARP_SIZE, nregs, 2), dtype=np.int64)
    for lane in range(WARP_SIZE):
        for reg in range(nregs):
            out[lane, reg] = tcgen05_fragment(
                shape, num, lane, reg, half_split_offset=half_split_offset
            )
    return out


def tcgen05_pack16(cells: np.ndarray) -> np.ndarray:
    """``.pack::16b`` on values: pairs of adjacent 32-bit TMEM cells -> one 32-bit register.

    ``cells[..., 2k]`` and ``cells[..., 2k+1]`` (adjacent columns) give their low 16 bits;
    the even column lands in bits 0-15, the odd one in bits 16-31 (module note 4). The last
    axis must be even; the result has half as many entries on it, dtype ``uint32``.
    """
    c = np.asarray(cells).astype(np.uint32)
    if c.shape[-1] % 2:
        raise ValueError(f"pack16 needs an even number of columns, got {c.shape[-1]}")
    lo = c[..., 0::2] & np.uint32(0xFFFF)
    hi = c[..., 1::2] & np.uint32(0xFFFF)
    return (lo | (hi << np.uint32(16))).astype(np.uint32)


def tcgen05_unpack16(regs: np.ndarray) -> np.ndarray:
    """``.unpack::16b`` on values: one 32-bit register -> two adjacent 32-bit TMEM cells.

    Inverse of :func:`tcgen05_pack16` on the low halves: bits 0-15 go to the even column,
    bits 16-31 to the odd one, each in the low 16 bits of its cell. The upper 16 bits of
    each cell are *not specified by the ISA*; this returns them as 0.
    """
    r = np.asarray(regs).astype(np.uint32)
    out = np.zeros(r.shape[:-1] + (2 * r.shape[-1],), dtype=np.uint32)
    out[..., 0::2] = r & np.uint32(0xFFFF)
    out[..., 1::2] = r >> np.uint32(16)
    return out


def tcgen05_lane_quarter(warp_id_in_cta: int) -> range:
    """The 32 TMEM lanes warp ``warp_id_in_cta`` may access with tcgen05.ld/st.

    ISA 9.7.16.8.1 "Access restrictions": "The Tensor Memory of a CTA is divided into 4
    equal chunks such that each warp of a warpgroup in the CTA can access a chunk of the
    Tensor Memory. All the columns of the Tensor Memory can be accessed by all the four
    warps of a warpgroup. A lane of the Tensor Memory can be accessed by a single warp in
    the warpgroup." Table: warp 0 of the warpgroup -> lanes 0-31, 1 -> 32-63, 2 -> 64-95,
    3 -> 96-127. The warp's ID within its warpgroup is ``warp_id_in_cta % 4``.
    """
    if warp_id_in_cta < 0:
        raise ValueError(f"warp id must be non-negative, got {warp_id_in_cta}")
    base = 32 * (warp_id_in_cta % 4)
    return range(base, base + 32)


def _tmem_cells(tmem: np.ndarray, base_lane: int, base_col: int, t_lane, col):
    lanes = base_lane + t_lane
    cols = base_col + col
    if np.any(lanes >= tmem.shape[0]) or np.any(cols >= tmem.shape[1]):
        raise IndexError("tcgen05 access runs past the end of the TMEM array")
    return lanes, cols


def tcgen05_load_warp(
    tmem: np.ndarray,
    shape: str,
    num: int,
    base_lane: int,
    base_col: int,
    *,
    pack16: bool = False,
    half_split_offset: int = 0,
) -> np.ndarray:
    """Simulate one warp's ``tcgen05.ld.sync.aligned.shape.x{num}{.pack::16b}.b32``.

    ``tmem`` is a ``(lanes, columns)`` ``uint32`` array of 32-bit cells; ``base_lane`` /
    ``base_col`` are the fields of ``taddr``. Returns ``(32, regs)`` ``uint32``. Checking
    that the lanes are in the warp's quarter (:func:`tcgen05_lane_quarter`) is left to the
    caller, which knows the warp id.
    """
    t = np.asarray(tmem, dtype=np.uint32)
    nregs = tcgen05_regs_per_thread(shape, num)
    m = tcgen05_fragment_map(shape, num, half_split_offset=half_split_offset, pack16=pack16)
    lanes, cols = _tmem_cells(t, base_lane, base_col, m[..., 0], m[..., 1])
    vals = t[lanes, cols]
    if pack16:  # vals: (32, regs, 2) -> low 16 bits of each chunk
        out = (vals[..., 0] & np.uint32(0xFFFF)) | ((vals[..., 1] & np.uint32(0xFFFF)) << 16)
        return out.astype(np.uint32).reshape(WARP_SIZE, nregs)
    return vals.astype(np.uint32).reshape(WARP_SIZE, nregs)


def tcgen05_store_warp(
    tmem: np.ndarray,
    regs: np.ndarray,
    shape: str,
    num: int,
    base_lane: int,
    base_col: int,
    *,
    unpack16: bool = False,
    half_split_offset: int = 0,
) -> None:
    """Simulate one warp's ``tcgen05.st.sync.aligned.shape.x{num}{.unpack::16b}.b32``.

    Writes ``regs`` (``(32, regs)`` ``uint32``) into ``tmem`` in place. With ``unpack16``
    each chunk goes to the low 16 bits of its cell and the upper 16 bits are set to 0
    (unspecified by the ISA, module note 4). With ``.16x32bx2`` and
    ``half_split_offset == 0`` both half-warps write the same cells; which one wins is not
    specified -- this simulator lets threads 16-31 win.
    """
    nregs = tcgen05_regs_per_thread(shape, num)
    r = np.asarray(regs).astype(np.uint32)
    if r.shape != (WARP_SIZE, nregs):
        raise ValueError(f"expected registers of shape {(WARP_SIZE, nregs)}, got {r.shape}")
    m = tcgen05_fragment_map(shape, num, half_split_offset=half_split_offset, pack16=unpack16)
    lanes, cols = _tmem_cells(tmem, base_lane, base_col, m[..., 0], m[..., 1])
    if unpack16:
        vals = np.stack([r & np.uint32(0xFFFF), r >> np.uint32(16)], axis=-1)
    else:
        vals = r
    # One thread at a time, in lane order, so threads 16-31 win where the halves overlap.
    for lane in range(WARP_SIZE):
        tmem[lanes[lane].reshape(-1), cols[lane].reshape(-1)] = vals[lane].reshape(-1)


# ---------------------------------------------------------------------------------------
# mma.sync .m16n8k16 / .m16n8k8, floating point
# ---------------------------------------------------------------------------------------

MMA_SHAPES: dict[str, tuple[int, int, int]] = {"m16n8k16": (16, 8, 16), "m16n8k8": (16, 8, 8)}
"""(M, N, K) of the ``mma.sync`` shapes whose floating-point fragments are recorded here."""

MMA_TYPE_BITS: dict[str, int] = {"f16": 16, "bf16": 16, "tf32": 32, "f32": 32}
"""Bits of one element of an mma operand type as the fragment tables store it (a ``.tf32``
element fills a whole ``.b32`` register)."""

MMA_OPERANDS: tuple[str, ...] = ("a", "b", "c")
"""A (MxK, row-major), B (KxN, column-major), C and D (MxN; D shares C's fragment)."""

# The (shape, operand, element bits) the ISA tabulates a fragment for.
_MMA_FORMS = {
    ("m16n8k16", "a", 16),
    ("m16n8k16", "b", 16),
    ("m16n8k16", "c", 16),
    ("m16n8k16", "c", 32),
    ("m16n8k8", "a", 16),
    ("m16n8k8", "b", 16),
    ("m16n8k8", "a", 32),
    ("m16n8k8", "b", 32),
    ("m16n8k8", "c", 16),
    ("m16n8k8", "c", 32),
}


def _mma_form(shape: str, operand: str, type_: str) -> tuple[int, int, int]:
    """(rows, cols, element bits) of one operand's matrix; ValueError for an untabulated
    combination (e.g. ``.tf32`` at ``.m16n8k16``, which has no tf32 line)."""
    if shape not in MMA_SHAPES:
        raise ValueError(f"mma shape {shape!r} is not recorded; expected one of {list(MMA_SHAPES)}")
    if operand not in MMA_OPERANDS:
        raise ValueError(f"mma operand must be one of {MMA_OPERANDS}, got {operand!r}")
    if type_ not in MMA_TYPE_BITS:
        raise ValueError(f"mma element type {type_!r} not recorded; expected {list(MMA_TYPE_BITS)}")
    bits = MMA_TYPE_BITS[type_]
    if (shape, operand, bits) not in _MMA_FORMS or (operand != "c" and type_ == "f32"):
        raise ValueError(f"the PTX ISA has no .{shape} fragment of operand {operand} with .{type_}")
    m, n, k = MMA_SHAPES[shape]
    rows, cols = {"a": (m, k), "b": (k, n), "c": (m, n)}[operand]
    return rows, cols, bits


def mma_registers(shape: str, operand: str, type_: str) -> int:
    """32-bit registers per thread of one operand: ``rows * cols * bits / 32 / 32``.

    ISA "Matrix Fragments for mma.m16n8k16 with floating point type": A ``.f16/.bf16`` "a
    vector expression containing four .f16x2 registers", B "two .f16x2 registers", C/D
    ``.f16`` "two .f16x2 registers", ``.f32`` "four .f32 registers". ".m16n8k8": A
    ``.f16/.bf16`` two ``.f16x2``, ``.tf32`` "four .b32 registers"; B ``.f16/.bf16`` one
    ``.f16x2``, ``.tf32`` two ``.b32``; C/D as at ``.m16n8k16``.
    """
    rows, cols, bits = _mma_form(shape, operand, type_)
    return rows * cols * bits // WARP_SIZE // 32


def mma_halves(type_: str) -> int:
    """Elements per 32-bit register: 2 for 16-bit types (``.f16x2``), else 1."""
    return 32 // MMA_TYPE_BITS[type_]


def mma_element(
    shape: str, operand: str, type_: str, lane: int, reg: int, half: int = 0
) -> tuple[int, int]:
    """(row, col) of the element ``half`` of register ``reg`` of ``lane`` holds.

    The ISA numbers a thread's elements "low to high" (``a0, a1, ...``): element ``i`` is
    ``half`` ``i % 2`` of register ``i // 2`` for 16-bit types (``a0`` in bits 0-15, the
    module notes' convention 2) and register ``i`` for 32-bit ones. With ``groupID = lane
    >> 2`` and ``threadID_in_group = lane % 4`` the ISA computes, quoted per operand:

    ``.m16n8k16``, A ``.f16/.bf16`` (``a0..a7``)::

        row = groupID                                  for ai where 0 <= i < 2 || 4 <= i < 6
              groupID + 8                              Otherwise
        col = (threadID_in_group * 2) + (i & 0x1)      for ai where i < 4
              (threadID_in_group * 2) + (i & 0x1) + 8  for ai where i >= 4

    B ``.f16/.bf16`` (``b0..b3``)::

        row = (threadID_in_group * 2) + (i & 0x1)      for bi where i < 2
              (threadID_in_group * 2) + (i & 0x1) + 8  for bi where i >= 2
        col = groupID

    C/D ``.f16`` and ``.f32`` (``c0..c3``), the same at ``.m16n8k8``::

        row = groupID                                  for ci where i < 2
              groupID + 8                              for ci where i >= 2
        col = (threadID_in_group * 2) + (i & 0x1)      for ci where i = {0,..,3}

    ``.m16n8k8``, A ``.f16/.bf16`` (``a0..a3``)::

        row = groupID              for a0 and a1
              groupID + 8          for a2 and a3
        col = threadID_in_group * 2 + (i & 0x1)        for ai where i = {0,..,3}

    A ``.tf32`` (``a0..a3``)::

        row = groupID              for a0 and a2
              groupID + 8          for a1 and a3
        col = threadID_in_group         for a0 and a1
              threadID_in_group + 4     for a2 and a3

    B ``.f16/.bf16`` (``b0, b1``)::

        row = threadID_in_group * 2 + i                for bi where i = {0,1}
        col = groupID

    B ``.tf32`` (``b0, b1``)::

        row = threadID_in_group         for b0
              threadID_in_group + 4     for b1
        col = groupID
    """
    _, _, bits = _mma_form(shape, operand, type_)
    _check_lane(lane)
    nregs = mma_registers(shape, operand, type_)
    if not 0 <= reg < nregs:
        raise ValueError(f"mma .{shape} {operand} .{type_} has {nregs} registers, got reg {reg}")
    halves = mma_halves(type_)
    if not 0 <= half < halves:
        raise ValueError(f"a .{type_} register holds {halves} element(s), got half {half}")
    i = reg * halves + half
    group, tig = lane >> 2, lane % 4
    if operand == "c":
        return (group if i < 2 else group + 8, tig * 2 + (i & 0x1))
    if shape == "m16n8k16":  # .f16 / .bf16 only
        if operand == "a":
            row = group if (0 <= i < 2 or 4 <= i < 6) else group + 8
            col = tig * 2 + (i & 0x1) if i < 4 else tig * 2 + (i & 0x1) + 8
            return (row, col)
        row = tig * 2 + (i & 0x1) if i < 2 else tig * 2 + (i & 0x1) + 8
        return (row, group)
    if bits == 16:  # .m16n8k8 .f16 / .bf16
        if operand == "a":
            return (group if i in (0, 1) else group + 8, tig * 2 + (i & 0x1))
        return (tig * 2 + i, group)
    if operand == "a":  # .m16n8k8 .tf32
        return (group if i in (0, 2) else group + 8, tig if i in (0, 1) else tig + 4)
    return (tig if i == 0 else tig + 4, group)


@functools.cache
def mma_fragment_map(shape: str, operand: str, type_: str) -> np.ndarray:
    """All of :func:`mma_element` at once: ``int64`` ``(32, regs, halves, 2)``, the last
    axis (row, col). Cached, hence read-only."""
    nregs, halves = mma_registers(shape, operand, type_), mma_halves(type_)
    out = np.zeros((WARP_SIZE, nregs, halves, 2), dtype=np.int64)
    for lane in range(WARP_SIZE):
        for reg in range(nregs):
            for half in range(halves):
                out[lane, reg, half] = mma_element(shape, operand, type_, lane, reg, half)
    out.flags.writeable = False
    return out


def mma_unpack(shape: str, operand: str, type_: str, words: np.ndarray) -> np.ndarray:
    """The warp's registers of one operand -> the operand's matrix, as raw bits.

    ``words`` is ``(..., 32, regs)`` (``words[..., lane, r]`` the ``r``-th register of the
    operand's vector in that lane; leading axes: several warps at once). Returns ``(...,
    rows, cols)`` of ``uint16`` (16-bit types; a register's low half is its
    lower-numbered element) or ``uint32``.
    """
    rows, cols, bits = _mma_form(shape, operand, type_)
    w = np.asarray(words)
    nregs = mma_registers(shape, operand, type_)
    if w.shape[-2:] != (WARP_SIZE, nregs):
        raise ValueError(f"expected ({WARP_SIZE}, {nregs}) registers, got shape {w.shape}")
    w = w.astype(np.uint32)
    cells = mma_fragment_map(shape, operand, type_)
    out = np.zeros((*w.shape[:-2], rows, cols), dtype=np.uint16 if bits == 16 else np.uint32)
    for half in range(mma_halves(type_)):
        part = (w >> np.uint32(16 * half)) & np.uint32(0xFFFF) if bits == 16 else w
        out[..., cells[:, :, half, 0], cells[:, :, half, 1]] = part
    return out


def mma_pack(shape: str, operand: str, type_: str, matrix: np.ndarray) -> np.ndarray:
    """Inverse of :func:`mma_unpack`: ``(..., rows, cols)`` raw bits -> ``(..., 32, regs)``
    ``uint32``."""
    rows, cols, bits = _mma_form(shape, operand, type_)
    mat = np.asarray(matrix)
    if mat.shape[-2:] != (rows, cols):
        raise ValueError(f"expected a ({rows}, {cols}) matrix, got shape {mat.shape}")
    if mat.dtype.itemsize * 8 != bits:
        raise ValueError(f"expected {bits}-bit elements for .{type_}, got {mat.dtype}")
    mat = mat.view(np.uint16 if bits == 16 else np.uint32).astype(np.uint32)
    cells = mma_fragment_map(shape, operand, type_)
    out = np.zeros((*mat.shape[:-2], WARP_SIZE, mma_registers(shape, operand, type_)), np.uint32)
    for half in range(mma_halves(type_)):
        out |= mat[..., cells[:, :, half, 0], cells[:, :, half, 1]] << np.uint32(16 * half)
    return out
