"""tirx_cuda_dispatch.fragments: the public fragment layouts are what the instructions
take as they are (the variants fit them, the row reductions leave the row vectors), and
demos' names are the same objects."""

from __future__ import annotations

import pytest
from tvm import tirx
from tvm.script import tirx as T
from tvm.script.tirx import tile as Tx

from tirx_cuda_dispatch import demos, explain, fragments
from tirx_cuda_dispatch.layout.register import register_table, register_view
from tirx_cuda_dispatch.layout.view import TileView


def _warp_kernel(d_l, a_l, b_l, rows, mt_k):
    (m, n, k) = mt_k

    # fmt: off
    @T.prim_func
    def kernel(A_ptr: T.handle, B_ptr: T.handle, M_ptr: T.handle):
        A = T.match_buffer(A_ptr, (m, k), "float16")
        B = T.match_buffer(B_ptr, (n, k), "float16")
        M = T.match_buffer(M_ptr, (m, 1), "float32")
        T.device_entry()
        T.cta_id([1]); T.lane_id([32]); T.thread_id([32])  # noqa: E702
        A_r = T.alloc_buffer((m, k), "float16", scope="local", layout=a_l)
        B_r = T.alloc_buffer((n, k), "float16", scope="local", layout=b_l)
        D_r = T.alloc_buffer((m, n), "float32", scope="local", layout=d_l)
        m_r = T.alloc_buffer((m, 1), "float32", scope="local", layout=rows)
        Tx.warp.copy(A_r[:, :], A[:, :])
        Tx.warp.copy(B_r[:, :], B[:, :])
        Tx.warp.fill(D_r[:, :], T.float32(0.0))
        Tx.warp.gemm(D_r[:, :], A_r[:, :], B_r[:, :], D_r[:, :], transpose_A=False,
                     transpose_B=True, alpha=1.0, beta=1.0)
        Tx.warp.max(m_r[:, :], D_r[:, :], axes=[-1])
        Tx.warp.copy(M[:, :], m_r[:, :])
    # fmt: on
    return kernel


def test_the_mma_fragments_fit_and_the_row_vector_is_where_the_row_max_lands():
    """S = Q K^T as FlashAttention-2 writes it (B given as [N, K]), then the row max into
    mma_row_vector_layout: every call ours, the max in a quad by two shuffles."""
    (d_l, a_l, b_l), shape = fragments.mma_fragments(1, 8, 4, tb=True)
    report = explain(_warp_kernel(d_l, a_l, b_l, fragments.mma_row_vector_layout(), shape),
                     "sm_80")  # fmt: skip
    assert [r.variant for r in report if r.op in ("gemm", "max")] == ["mma.m16n8k*", "local"]
    [row_max] = [r for r in report if r.op == "max"]
    assert "shfl.xor 1/2" in row_max.plan["schedule"]


def test_two_m_tiles_row_vector_holds_each_rows_max():
    """32 rows a warp (examples/attention_sm80.py): the row vector of two m16 tiles is
    where the row max lands, by the same two shuffles, and holds every row's max in the
    simulator (against numpy; output poisoned); the control: the one-tile vector does not
    cover 32 rows."""
    import numpy as np

    from tirx_cuda_dispatch import runtime, sim

    (d_l, a_l, b_l), shape = fragments.mma_fragments(2, 8, 2, tb=True)
    func = _warp_kernel(d_l, a_l, b_l, fragments.mma_row_vector_layout(2), shape)
    [row_max] = [r for r in explain(func, "sm_80") if r.op == "max"]
    assert row_max.variant == "local" and "shfl.xor 1/2" in row_max.plan["schedule"]
    rng = np.random.default_rng(4)
    a, b = (runtime.random_array((n, 32), "float16", rng) for n in (32, 64))
    m = runtime.poison_like(np.zeros((32, 1), "float32"))
    out = sim.run(func, [a, b, m], target="sm_80").arrays[2]
    expected = (a.astype(np.float64) @ b.astype(np.float64).T).max(axis=1, keepdims=True)
    np.testing.assert_allclose(out, expected, rtol=1e-3, atol=1e-3)
    assert fragments.mma_row_vector_layout(1).size() != fragments.mma_row_vector_layout(2).size()


def test_a_misplaced_fragment_is_declined():
    """The control: B's tiles with lanes 4g+1 and 4g+2 swapped (demos' test layout)."""
    (d_l, a_l, b_l), shape = demos.mma_fragments(1, 8, 4, 16, tb=True, swapped="B")
    report = explain(_warp_kernel(d_l, a_l, b_l, fragments.mma_row_vector_layout(), shape),
                     "sm_80")  # fmt: skip
    [gemm] = [r for r in report if r.op == "gemm"]
    assert gemm.variant is None


@pytest.mark.parametrize(
    "name",
    ["mma_accumulator_layout", "mma_rows_layout", "wgmma_accumulator_layout",
     "wgmma_rows_layout", "wgmma_row_parts_layout", "MMA_ACC", "MMA_A_K8", "MMA_B_K8"],
)  # fmt: skip
def test_demos_names_are_the_public_ones(name):
    assert getattr(demos, name) is getattr(fragments, name)


def _table(layout, rows: int, cols: int, scope: str, threads: int):
    buf = tirx.decl_buffer((rows, cols), "float32", name="X", scope="local", layout=layout)
    view = register_view(TileView("X", buf, ((0, rows), (0, cols))))
    return register_table(view, scope, threads)


def _warp_part_in_same_registers(wgmma_layout, warp_layout, cols: int) -> bool:
    """Whether every warp of the warpgroup holds its 16 rows of ``wgmma_layout`` (64 x
    ``cols``) in the registers where ``warp_layout`` (16 x ``cols``, one warp) puts them."""
    whole = _table(wgmma_layout, 64, cols, "warpgroup", 128)
    part = _table(warp_layout, 16, cols, "warp", 32)
    if whole.registers != part.registers:
        return False
    for w in range(4):
        mine = whole.elements[32 * w : 32 * w + 32]
        if not (mine - 16 * w * cols == part.elements).all():
            return False
    return True


@pytest.mark.parametrize(
    "wgmma_layout, warp_layout, cols",
    [
        (fragments.wgmma_accumulator_layout(64), fragments.mma_fragments(1, 8, 4)[0][0], 64),
        (fragments.wgmma_accumulator_layout(16), fragments.mma_fragments(1, 2, 1)[0][0], 16),
        (fragments.wgmma_rows_layout(), fragments.mma_row_vector_layout(1), 1),
        (fragments.wgmma_row_parts_layout(), fragments.mma_rows_layout(1), 4),
    ],
    ids=["accumulator-64", "accumulator-16", "rows", "row-parts"],
)
def test_a_warps_part_of_the_wgmma_fragments_is_mmas_fragment_in_the_same_registers(
    wgmma_layout, warp_layout, cols
):
    """A warp may compute its 16 rows with mma.sync into views of the warpgroup's wgmma
    registers (examples/attention.py's first block check did): each warp's part of the
    wgmma accumulator, row vector and row parts is mma.sync's fragment, register for
    register. The control: the accumulator against mma.sync's B^T fragment (another
    placement of the same shape) is caught."""
    assert _warp_part_in_same_registers(wgmma_layout, warp_layout, cols)
    b_t = fragments.mma_fragments(1, 2, 1, tb=True)[0][2]  # 16 keys x 16: K^T's fragment
    assert not _warp_part_in_same_registers(fragments.wgmma_accumulator_layout(16), b_t, 16)
