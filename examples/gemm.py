"""A multistage GEMM written only with tile primitives: C = relu(A B + bias).

A is float16 ``[M, K]``, B float16 ``[K, N]``, bias float16 ``[N]``, C float16 ``[M, N]``;
the products accumulate in float32. Each CTA of 4 warps computes a 128 x 128 tile of C,
each warp a 64 x 64 quarter of it:

- a ``stages``-deep cp.async pipeline (``copy_async -> ldgsts``) brings 128 x 32 tiles of
  A and 32 x 128 tiles of B into swizzled shared memory (one dynamic allocation, as
  TVM 0.27 allows); the caller's ``cp.async.commit_group`` / ``wait_group`` and a CTA
  barrier order it, as ``ldgsts`` leaves them to the caller;
- each warp loads its A and B fragments with ldmatrix (``copy -> ldstmatrix``; B with
  ``.trans``) and multiplies them with 64 ``mma.sync.m16n8k16`` per K step
  (``gemm -> mma.m16n8k*``), accumulating in registers;
- the epilogue adds the bias (staged in shared memory at the start; a fragment replicated
  over the lanes that share a column),
  applies relu while rounding to float16 once (``maximum`` with a float16 dst), stores
  the fragment to shared memory with stmatrix and the CTA copies the tile to C with
  16-byte stores (``copy -> gmem_smem``).

Where M, N or K is not a multiple of the tile the edge tiles are copied at their own
(static) extents into zero-filled shared memory: a K tail whose width cp.async cannot
move (under 4 bytes a row) is copied synchronously.

``python examples/gemm.py`` prints the explain() report, checks a small GEMM in the CPU
simulator against numpy, and on a CUDA GPU checks 4096 x 4096 x 4096 against torch.
"""

from __future__ import annotations

import sys

import numpy as np
from tvm.script import tirx as T
from tvm.script.tirx import tile as Tx
from tvm.tirx.layout import ComposeLayout, R, S, TileLayout, laneid

import tirx_cuda_dispatch
from tirx_cuda_dispatch import runtime, sim

BM, BN, BK = 128, 128, 32  # the CTA tile and the K step
WM, WN = 64, 64  # a warp's tile: warps 2 x 2
WARPS = 4

# The m16n8 accumulator (and float16 result) fragment and the m16n8k16 A / B fragments,
# PTX ISA "Matrix Fragments for mma.m16n8k16": lane 4 g + t holds rows g and g + 8,
# columns 2t and 2t + 1 of each 16 x 8 tile.
_ACC = TileLayout(S[(2, 8, 4, 2) : (2, 4 @ laneid, 1 @ laneid, 1)])
_A8 = TileLayout(S[(2, 8, 4, 2) : (2, 4 @ laneid, 1 @ laneid, 1)])
_B8 = TileLayout(S[(4, 2, 8) : (1 @ laneid, 1, 4 @ laneid)])
ACC_FRAG = _ACC.tile_to([WM, WN], [16, 8])
A_FRAG = _A8.tile_to([16, 16], [16, 8]).tile_to([WM, BK], [16, 16])
B_FRAG = _B8.tile_to([16, 8], [8, 8]).tile_to([BK, WN], [16, 8])
# The bias for a warp's 64 columns: lane 4 g + t holds columns 8 j + 2 t and + 1, the
# same in the 8 lanes of each t (a replica over g).
BIAS_FRAG = TileLayout(S[(1, 8, 4, 2) : (16, 2, 1 @ laneid, 1)] + R[8 : 4 @ laneid])


def _swizzled(shape: tuple[int, ...]) -> ComposeLayout:
    """``shape`` (its last two dimensions a row-major float16 tile) under the XOR swizzle of
    16-byte units that makes the 8 rows of an ldmatrix/stmatrix matrix hit 8 different
    bank groups (CuTe's Swizzle<B,3,3>). Rows of 64 bytes take B = 2; wider rows are cut
    into 128-byte column blocks (B = 3), each block rows x 64 elements contiguous."""
    *outer, rows, cols = shape
    if cols * 2 <= 64:
        return ComposeLayout(3, 2, 3, TileLayout(S[shape]))
    blocks = cols // 64
    strides = [rows * cols * int(np.prod(outer[i + 1 :])) for i in range(len(outer))]
    tile = S[(*outer, rows, blocks, 64) : (*strides, 64, rows * 64, 1)]
    return ComposeLayout(3, 3, 3, TileLayout(tile))


def _branch(cond, full, tail) -> None:
    """``tail()`` where ``cond`` holds, ``full()`` elsewhere; only ``full()`` when ``cond``
    is None (no tail: the condition never holds). Emitted into the kernel being parsed."""
    if cond is None:
        full()
        return
    with T.If(cond):
        with T.Then():
            tail()
        with T.Else():
            full()


def _blocks(cols: int) -> list[tuple[int, int]]:
    """``[0, cols)`` cut at the 64-column blocks of the 128-byte-swizzled layouts."""
    return [(c, min(c + 64, cols)) for c in range(0, cols, 64)]


def _copy(dst, src, asynchronous: bool) -> None:
    if asynchronous:
        Tx.cta.copy_async(dst, src)
    else:
        Tx.cta.copy(dst, src)


def gemm_kernel(m: int, n: int, k: int, stages: int = 4):
    """C = relu(A B + bias) for an ``m x k`` by ``k x n`` product, ``stages`` cp.async
    stages (2 to 4)."""
    if not 2 <= stages <= 4:
        raise ValueError(f"stages={stages}: the pipeline has 2 to 4 stages")
    gm, gn = -(-m // BM), -(-n // BN)
    m_tail, n_tail, k_tail = m % BM, n % BN, k % BK
    kts = -(-k // BK)
    a_elems, b_elems = stages * BM * BK, stages * BK * BN
    pool_elems = max(a_elems + b_elems, BM * BN)
    a_layout = _swizzled((stages, BM, BK))
    b_layout = _swizzled((stages, BK, BN))
    c_layout = _swizzled((BM, BN))
    preload = min(stages - 1, kts)
    has_tail = bool(m_tail or n_tail or k_tail)
    # cp.async moves 4, 8 or 16 aligned bytes: rows of an odd number of float16 elements
    # (an odd K for A, an odd N for B) are never 4-byte aligned, so they are copied
    # synchronously (the pipeline then overlaps less).
    a_async, b_async = k % 2 == 0, n % 2 == 0

    def load(A, B, A_s, B_s, bm, bn, kt, slot) -> None:
        """K tile ``kt`` of the CTA's rows of A and columns of B into stage ``slot``; edge
        tiles at their own extents (the rest of the stage holds zeros)."""
        m0, n0, k0 = bm * BM, bn * BN, kt * BK
        edge_m = (bm == gm - 1) if m_tail else None
        edge_n = (bn == gn - 1) if n_tail else None
        last_k = (kt == kts - 1) if k_tail else None

        def a_tile(rows: int, cols: int) -> None:
            _copy(A_s[slot, 0:rows, 0:cols], A[m0 : m0 + rows, k0 : k0 + cols], a_async)

        def b_tile(rows: int, cols: int) -> None:
            for c0, c1 in _blocks(cols):
                _copy(B_s[slot, 0:rows, c0:c1], B[k0 : k0 + rows, n0 + c0 : n0 + c1], b_async)

        def k_step(cols: int) -> None:
            if cols < BK:  # the stage's columns past the tail still hold an older K tile
                Tx.cta.fill(A_s[slot, :, cols:BK], T.float16(0.0))
                Tx.cta.fill(B_s[slot, cols:BK, :], T.float16(0.0))
            _branch(edge_m, lambda: a_tile(BM, cols), lambda: a_tile(m_tail, cols))
            _branch(edge_n, lambda: b_tile(cols, BN), lambda: b_tile(cols, n_tail))

        _branch(last_k, lambda: k_step(BK), lambda: k_step(k_tail))

    def store(C, C_s, bm, bn) -> None:
        """The CTA's tile of C from shared memory; edge tiles at their own extents."""
        m0, n0 = bm * BM, bn * BN
        edge_m = (bm == gm - 1) if m_tail else None
        edge_n = (bn == gn - 1) if n_tail else None

        def tile(rows: int, cols: int) -> None:
            for c0, c1 in _blocks(cols):
                Tx.cta.copy(C[m0 : m0 + rows, n0 + c0 : n0 + c1], C_s[0:rows, c0:c1])

        _branch(
            edge_m,
            lambda: _branch(edge_n, lambda: tile(BM, BN), lambda: tile(BM, n_tail)),
            lambda: _branch(edge_n, lambda: tile(m_tail, BN), lambda: tile(m_tail, n_tail)),
        )

    def load_bias(bias2, bias_s, bn) -> None:
        """The CTA's 128 bias values into shared memory; on the right edge only the columns
        that exist, the rest zero."""
        n0 = bn * BN

        def cols(count: int) -> None:
            Tx.cta.copy(bias_s[0:1, 0:count], bias2[0:1, n0 : n0 + count])

        if n_tail:
            Tx.cta.fill(bias_s[:, :], T.float16(0.0))
            T.cuda.cta_sync()
        _branch((bn == gn - 1) if n_tail else None, lambda: cols(BN), lambda: cols(n_tail))

    # fmt: off
    @T.prim_func
    def gemm(A_ptr: T.handle, B_ptr: T.handle, bias_ptr: T.handle, C_ptr: T.handle):
        A = T.match_buffer(A_ptr, (m, k), "float16")
        B = T.match_buffer(B_ptr, (k, n), "float16")
        bias = T.match_buffer(bias_ptr, (n,), "float16")
        C = T.match_buffer(C_ptr, (m, n), "float16")
        T.device_entry()
        bm, bn = T.cta_id([gm, gn])
        warp = T.warp_id([WARPS])
        T.lane_id([32])
        T.thread_id([WARPS * 32])
        pool = T.alloc_buffer((pool_elems,), "float16", scope="shared.dyn", layout=TileLayout(S[pool_elems]))
        T.attr({"tirx.dyn_smem_bytes": pool_elems * 2})
        A_s = T.decl_buffer((stages, BM, BK), "float16", pool.data, layout=a_layout)
        B_s = T.decl_buffer((stages, BK, BN), "float16", pool.data, elem_offset=a_elems, layout=b_layout)
        C_s = T.decl_buffer((BM, BN), "float16", pool.data, layout=c_layout)
        bias2 = T.decl_buffer((1, n), "float16", bias.data)
        A_f = T.alloc_buffer((WM, BK), "float16", scope="local", layout=A_FRAG)
        B_f = T.alloc_buffer((BK, WN), "float16", scope="local", layout=B_FRAG)
        D = T.alloc_buffer((WM, WN), "float32", scope="local", layout=ACC_FRAG)
        D16 = T.alloc_buffer((WM, WN), "float16", scope="local", layout=ACC_FRAG)
        bias_s = T.alloc_buffer((1, BN), "float16", scope="shared", layout=TileLayout(S[1, BN]))
        bias16 = T.alloc_buffer((1, WN), "float16", scope="local", layout=BIAS_FRAG)
        bias32 = T.alloc_buffer((1, WN), "float32", scope="local", layout=BIAS_FRAG)
        wm = T.meta_var(warp // 2)
        wn = T.meta_var(warp % 2)
        if has_tail:  # edge tiles leave part of a stage unwritten
            Tx.cta.fill(pool[:], T.float16(0.0))
            T.cuda.cta_sync()
        Tx.warp.fill(D[:, :], T.float32(0.0))
        load_bias(bias2, bias_s, bn)
        for s in T.unroll(preload):
            load(A, B, A_s, B_s, bm, bn, s, s)
            T.ptx.cp.async_.commit_group()
        for kt in range(kts):
            T.ptx.cp.async_.wait_group(stages - 2)
            T.cuda.cta_sync()
            if kt + stages - 1 < kts:
                load(A, B, A_s, B_s, bm, bn, kt + stages - 1, (kt + stages - 1) % stages)
            T.ptx.cp.async_.commit_group()
            cur = T.meta_var(kt % stages)
            Tx.warp.copy(A_f[:, :], A_s[cur, wm * WM : wm * WM + WM, :])
            Tx.warp.copy(B_f[:, :], B_s[cur, :, wn * WN : wn * WN + WN])
            Tx.warp.gemm(D, A_f, B_f, D, transpose_A=False, transpose_B=False, alpha=1.0, beta=1.0)
        T.ptx.cp.async_.wait_group(0)
        T.cuda.cta_sync()
        Tx.warp.copy(bias16[:, :], bias_s[0:1, wn * WN : wn * WN + WN])
        Tx.warp.cast(bias32[:, :], bias16[:, :])
        Tx.warp.add(D[:, :], D[:, :], bias32[:, :])
        Tx.warp.maximum(D16[:, :], D[:, :], T.float32(0.0))
        Tx.warp.copy(C_s[wm * WM : wm * WM + WM, wn * WN : wn * WN + WN], D16[:, :])
        T.cuda.cta_sync()
        store(C, C_s, bm, bn)
    # fmt: on
    return gemm


# The program at a small size, for `tirx-dispatch explain/lower/sim examples/gemm.py`.
kernel = gemm_kernel(128, 128, 96, stages=3)


def reference(a: np.ndarray, b: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """float64 products and sums, bias added, relu, one rounding into float16."""
    exact = a.astype(np.float64) @ b.astype(np.float64) + bias.astype(np.float64)
    return np.maximum(exact, 0.0).astype(np.float16)


def inputs(m: int, n: int, k: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    a = rng.uniform(-1, 1, (m, k)).astype(np.float16)
    b = rng.uniform(-1, 1, (k, n)).astype(np.float16)
    bias = rng.uniform(-1, 1, n).astype(np.float16)
    c = np.full((m, n), np.nan, dtype=np.float16)
    return [a, b, bias, c]


def close(c: np.ndarray, want: np.ndarray, k: int) -> bool:
    """Within the float32 accumulation bound plus one float16 rounding of the result."""
    a, b = c.astype(np.float64), want.astype(np.float64)
    return bool(np.all(np.abs(a - b) <= 2.0**-10 * np.abs(b) + k * 2.0**-22))


def main() -> int:
    print(tirx_cuda_dispatch.explain(kernel, "sm_90a"))
    m, n, k = 128, 128, 96
    a, b, bias, c = inputs(m, n, k)
    out = sim.run(kernel, [a, b, bias, c], target="sm_90a", pipeline="tirx_cuda_dispatch.strict")
    ok = close(out[3], reference(a, b, bias), k)
    print(f"simulator, {m}x{n}x{k}: {'ok' if ok else 'WRONG'}")
    arch = runtime.gpu_arch()
    if arch is None:
        print("no CUDA GPU: simulated only")
        return 0 if ok else 1
    m = n = k = 4096
    a, b, bias, c = inputs(m, n, k)
    exe = runtime.build(gemm_kernel(m, n, k), arch, "tirx_cuda_dispatch.strict")
    c = runtime.run(exe, "gemm", [a, b, bias, c])[3]
    gpu_ok = close(c, reference(a, b, bias), k)
    print(f"{arch}, {m}x{n}x{k}: {'ok' if gpu_ok else 'WRONG'}")
    return 0 if ok and gpu_ok else 1


if __name__ == "__main__":
    sys.exit(main())
