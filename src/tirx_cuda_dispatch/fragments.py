"""TVM layouts of the tensor-core register fragments, for kernel authors.

A register tile declared with one of these layouts is what the instruction takes or
leaves as it is: ``gemm -> mma.m16n8k*`` and ``gemm_async -> wgmma`` fit operands whose
layouts place every element where the PTX ISA's fragment does (any spelling that does
so fits; these are one spelling each), ``copy -> ldstmatrix`` fills and stores them with
ldmatrix/stmatrix, and the reductions over their rows (``max``/``sum -> local``) leave
the row vectors below. Written from the PTX ISA's fragment figures (the instruction
records in :mod:`.isa` state the same facts as element functions; tests check the two
agree).

- mma.sync m16n8k16 / m16n8k8 (PTX ISA "Matrix Fragments for mma.m16n8k16 with floating
  point type"), lane ``4 g + t``: C/D ``[M, N]`` at ``M = g (+ 8)``, ``N = 2 t (+ 1)``;
  A ``[M, K]`` at ``M = g (+ 8)``, ``K = 2 t (+ 1) (+ 8)``; B ``[K, N]`` at ``N = g``,
  ``K = 2 t (+ 1) (+ 8)``: :func:`mma_fragments`, :func:`mma_accumulator_layout`, and
  the row vectors :func:`mma_row_vector_layout` (replicated over a quad) and
  :func:`mma_rows_layout` (TVM's per-lane partial form).
- wgmma m64nNk16 (PTX ISA "wgmma D fragment", "register fragment layout for matrix A"):
  thread ``32 w + l`` holds row ``16 w + l / 4 (+ 8)``, columns ``8 j + 2 (l % 4) (+ 1)``:
  :func:`wgmma_accumulator_layout` (D, and A in registers over K), the row vector
  :func:`wgmma_rows_layout` and each lane's part of the rows :func:`wgmma_row_parts_layout`.
"""

from __future__ import annotations

from typing import Any

from tvm.tirx.layout import R, S, TileLayout, laneid, tid_in_wg

# One m16n8 tile of C/D, one m16k8 tile of A, one k8n8 tile of B (lane = 4 g + t).
MMA_ACC = TileLayout(S[(2, 8, 4, 2) : (2, 4 @ laneid, 1 @ laneid, 1)])  # 16 x 8, C and D
MMA_A_K8 = TileLayout(S[(2, 8, 4, 2) : (2, 4 @ laneid, 1 @ laneid, 1)])  # 16 x 8 of [M, K]
MMA_B_K8 = TileLayout(S[(4, 2, 8) : (1 @ laneid, 1, 4 @ laneid)])  # 8 x 8 of [K, N]


def transposed(layout: Any, shape: list[int]) -> Any:
    """A 2-D ``layout`` of ``shape`` with its two axes swapped (an operand given transposed:
    B as ``[N, K]``)."""
    grouped, seps = layout.group(shape)
    return grouped.permute_by_groups(seps, [1, 0])


def mma_fragments(
    mt: int, nt: int, kt: int, k: int = 16, ta: bool = False, tb: bool = False,
    a_tile: Any = MMA_A_K8, b_tile: Any = MMA_B_K8, acc_tile: Any = MMA_ACC,
) -> tuple[tuple[Any, Any, Any], tuple[int, int, int]]:  # fmt: skip
    """A warp's (D, A, B) layouts and (M, N, K) for ``mt x nt x kt`` tiles of
    m16n8k``k``: the single tiles repeated over each operand, A as ``[K, M]`` under ``ta``
    and B as ``[N, K]`` under ``tb`` (``Tx.warp.gemm``'s ``transpose_A``/``_B``).
    ``a_tile``, ``b_tile``, ``acc_tile`` replace the k8 tiles (the tests build misplaced
    ones that a variant must decline)."""
    m, n, kk = 16 * mt, 8 * nt, k * kt
    a = a_tile if k == 8 else a_tile.tile_to([16, 16], [16, 8])
    b = b_tile if k == 8 else b_tile.tile_to([16, 8], [8, 8])
    d = acc_tile.tile_to([m, n], [16, 8])
    a = a.tile_to([m, kk], [16, k])
    b = b.tile_to([kk, n], [k, 8])
    if ta:
        a = transposed(a, [m, kk])
    if tb:
        b = transposed(b, [kk, n])
    return (d, a, b), (m, n, kk)


def mma_accumulator_layout(cols: int = 128) -> Any:
    """The m16n8 accumulator fragment of a warp, 16 x ``cols``: row r in lane
    4 (r % 8) + c, two values per lane and 8 columns (TVM's spelling, as its
    test_reduction_local_view_complex writes it)."""
    atom = TileLayout(S[(1, 2) : (2, 1)])
    warp_layout = TileLayout(S[(8, 4) : (4 @ laneid, 1 @ laneid)])
    warp_atom = atom.tile(warp_layout, (8, 4), (1, 2))
    tile = TileLayout(S[(2, cols // 8) : (1, 2)])
    return warp_atom.tile(tile, (2, cols // 8), (8, 8))


def mma_row_vector_layout(m_tiles: int = 1) -> Any:
    """A value per row of a warp's accumulator of ``m_tiles`` m16 tiles (``16 m_tiles`` x
    1): row ``16 i + g`` and ``16 i + g + 8`` in registers ``2 i`` and ``2 i + 1`` of the
    four lanes ``4 g + t`` (replicas over ``t``): where a row reduction of the accumulator
    leaves its result (FlashAttention-2's row max and sum)."""
    if m_tiles == 1:
        return TileLayout(S[(2, 8) : (1, 4 @ laneid)] + R[4 : 1 @ laneid])
    return TileLayout(S[(m_tiles, 2, 8) : (2, 1, 4 @ laneid)] + R[4 : 1 @ laneid])


def mma_rows_layout(m_tiles: int = 1) -> Any:
    """Row statistics of the accumulator in TVM's partial form: 16 x 4, column c in the
    lanes with lane % 4 == c (each lane its own partial; reduce over the 4 after). Over
    ``m_tiles`` m16 tiles (``16 m_tiles`` x 4): row ``16 i + g (+ 8)`` in registers ``2 i
    (+ 1)``, as :func:`mma_row_vector_layout` places them."""
    if m_tiles > 1:
        return TileLayout(S[(m_tiles, 2, 8, 4) : (2, 1, 4 @ laneid, 1 @ laneid)])
    red_atom = TileLayout(S[(1, 1) : (1, 1)])
    warp_layout = TileLayout(S[(8, 4) : (4 @ laneid, 1 @ laneid)])
    red_warp_atom = red_atom.tile(warp_layout, (8, 4), (1, 1))
    return red_warp_atom.tile(TileLayout(S[(2, 1) : (1, 1)]), (2, 1), (8, 4))


def wgmma_accumulator_layout(n: int = 256, m_tiles: int = 1) -> Any:
    """The wgmma accumulator fragment of a warpgroup over ``64 m_tiles`` x ``n`` float32
    (PTX ISA "wgmma D fragment"): thread ``32 w + l`` holds row ``16 w + l // 4 (+ 8)`` and
    columns ``8 j + 2 (l % 4) (+ 1)``; register ``4 j + 2 h + e`` is row half ``h``, column
    ``e`` of column block ``j``; a second 64-row tile takes the next ``n / 2`` registers.
    Over K (``n`` = K) it is also the register form's A fragment, 16-bit elements paired
    in .b32 registers."""
    return TileLayout(
        S[
            (m_tiles, 4, 2, 8, n // 8, 4, 2) : (
                n // 2, 32 @ tid_in_wg, 2, 4 @ tid_in_wg, 4, 1 @ tid_in_wg, 1,
            )
        ]
    )  # fmt: skip


def wgmma_rows_layout() -> Any:
    """A value per row of an m64 wgmma accumulator (64 x 1): row ``16 w + l / 4 (+ 8)`` in
    the 4 lanes ``l % 4`` of its quad (replicas), registers 0 and 1 for the two row
    halves: where a row reduction of the accumulator leaves its result."""
    return TileLayout(S[(4, 2, 8) : (32 @ tid_in_wg, 1, 4 @ tid_in_wg)] + R[4 : 1 @ tid_in_wg])


def wgmma_row_parts_layout() -> Any:
    """Each lane's part of a row of an m64 wgmma accumulator (64 x 4): row ``16 w + l / 4
    (+ 8)``, column ``l % 4`` in lane ``l`` of warp ``w`` (registers 0 and 1 for the two
    row halves): a row sum into it folds each thread's own columns only (no shuffle), and
    a sum over its 4 columns after (two shuffles) gives the rows (:func:`wgmma_rows_layout`)."""
    return TileLayout(S[(4, 2, 8, 4) : (32 @ tid_in_wg, 1, 4 @ tid_in_wg, 1 @ tid_in_wg)])
