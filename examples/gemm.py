"""A multistage GEMM written only with tile primitives: C = relu(A B + bias).

A is float16 ``[M, K]``, B float16 ``[K, N]``, bias float16 ``[N]``, C float16 ``[M, N]``;
the products accumulate in float32. By default each CTA of 4 warps computes a 128 x 128
tile of C, each warp a 64 x 64 quarter of it (``tile`` and ``warp_grid`` choose others):

- a ``stages``-deep cp.async pipeline (``copy_async -> ldgsts``) brings K tiles of A and
  B into swizzled shared memory (one dynamic allocation, as TVM 0.27 allows); the
  caller's ``cp.async.commit_group`` / ``wait_group`` and a CTA barrier order it, as
  ``ldgsts`` leaves them to the caller, once per K tile;
- each warp loads its A and B fragments 16 of K at a time with ldmatrix
  (``copy -> ldstmatrix``; B with ``.trans``), double-buffered: the next step's fragments
  load while this step's 32 ``mma.sync.m16n8k16`` run (``gemm -> mma.m16n8k*``),
  accumulating in registers; the mma of a K tile's last step go before its wait and barrier;
- the epilogue adds the bias (staged in shared memory at the start; a fragment
  replicated over the lanes that share a column), applies relu while rounding to float16
  once (``maximum`` with a float16 dst), stores the fragment to shared memory with
  stmatrix, and the CTA copies the tile to C with 16-byte stores (``copy -> gmem_smem``).
  ``epilogue="plain"`` leaves out bias and relu.

Where M, N or K is not a multiple of the tile, the edge tiles are copied at their own
(static) extents into zero-filled shared memory. Rows of an odd number of float16
elements (an odd K for A, an odd N for B) are never 4-byte aligned, which cp.async needs,
so they are copied synchronously.

``python examples/gemm.py`` prints the explain() report, checks a small GEMM in the CPU
simulator against numpy, and on a CUDA GPU checks 4096 x 4096 x 4096 against numpy.
"""

from __future__ import annotations

import sys

import ml_dtypes
import numpy as np
from tvm.script import tirx as T
from tvm.script.tirx import tile as Tx
from tvm.tirx.layout import ComposeLayout, R, S, TileLayout, laneid

import tirx_cuda_dispatch
from tirx_cuda_dispatch import runtime, sim

# The default shape: a 128 x 128 CTA tile, K steps of 32, 2 x 2 warps of 64 x 64 each.
TILE = (128, 128, 32)
WARP_GRID = (2, 2)

# The m16n8 accumulator (and float16 result) fragment and the m16n8k16 A / B fragments,
# PTX ISA "Matrix Fragments for mma.m16n8k16": lane 4 g + t holds rows g and g + 8,
# columns 2t and 2t + 1 of each 16 x 8 tile.
_ACC = TileLayout(S[(2, 8, 4, 2) : (2, 4 @ laneid, 1 @ laneid, 1)])
_A8 = TileLayout(S[(2, 8, 4, 2) : (2, 4 @ laneid, 1 @ laneid, 1)])
_B8 = TileLayout(S[(4, 2, 8) : (1 @ laneid, 1, 4 @ laneid)])


def fragments(wm: int, wn: int, bk: int) -> tuple[TileLayout, ...]:
    """A warp's accumulator (wm x wn), A (wm x bk), B (bk x wn) and bias (1 x wn)
    fragments. The bias: lane 4 g + t holds columns 8 j + 2 t and + 1, the same in the 8
    lanes of each t (a replica over g)."""
    acc = _ACC.tile_to([wm, wn], [16, 8])
    a = _A8.tile_to([16, 16], [16, 8]).tile_to([wm, bk], [16, 16])
    b = _B8.tile_to([16, 8], [8, 8]).tile_to([bk, wn], [16, 8])
    bias = TileLayout(S[(1, wn // 8, 4, 2) : (wn // 4, 2, 1 @ laneid, 1)] + R[8 : 4 @ laneid])
    return acc, a, b, bias


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
    is None (no tail: the condition never holds). Emitted into the kernel being parsed.

    The helpers below run while the kernel is parsed: tile-primitive calls and ``T.If``
    add themselves to it, but an intrinsic such as ``T.cuda.cta_sync()`` is only an
    expression there and needs ``T.evaluate`` to become a statement."""
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


def gemm_kernel(
    m: int,
    n: int,
    k: int,
    stages: int = 4,
    tile: tuple[int, int, int] = TILE,
    warp_grid: tuple[int, int] = WARP_GRID,
    epilogue: str = "bias_relu",
    ablate: str | None = None,
):
    """C = relu(A B + bias) for an ``m x k`` by ``k x n`` product: ``stages`` cp.async
    stages (3 or 4), CTA tiles of ``tile`` = (rows, columns, K step), ``warp_grid`` warps
    each computing a (rows / warps_m) x (columns / warps_n) part. ``epilogue="plain"``
    leaves out the bias and relu (C = A B rounded to float16; the kernel still takes the
    bias argument): the program TVM's built-in variants can lower, for comparison.

    ``ablate`` removes one half of the main loop, for bench/gemm.py's study of what bounds
    the kernel (the result is then not the product): ``"math"`` keeps only the copies into
    shared memory (the cp.async pipeline with its waits and barriers), ``"loads"`` keeps
    only the fragment loads and mma over whatever the stages hold."""
    if epilogue not in ("bias_relu", "plain"):
        raise ValueError(f"epilogue={epilogue!r}: 'bias_relu' or 'plain'")
    if ablate not in (None, "math", "loads"):
        raise ValueError(f"ablate={ablate!r}: None, 'math' or 'loads'")
    keep_loads, keep_math = ablate != "loads", ablate != "math"
    with_bias = epilogue == "bias_relu"
    if not 3 <= stages <= 4:
        raise ValueError(f"stages={stages}: the pipeline has 3 or 4 stages")
    BM, BN, BK = tile
    WARPS = warp_grid[0] * warp_grid[1]
    WM, WN = BM // warp_grid[0], BN // warp_grid[1]
    if WM % 16 or WN % 16 or BK % 16 or BN % 64 or BK not in (32, 64):
        raise ValueError(f"tile {tile} over warps {warp_grid}: warp tiles of 16s, K 32 or 64")
    FK = 16  # the K width of the fragments a warp loads at a time (one mma K step)
    SUB = BK // FK  # fragment steps per K tile: even, so the double buffer alternates
    ACC_FRAG, A_FRAG, B_FRAG, BIAS_FRAG = fragments(WM, WN, FK)
    gm, gn = -(-m // BM), -(-n // BN)
    m_tail, n_tail, k_tail = m % BM, n % BN, k % BK
    kts = -(-k // BK)
    a_elems, b_elems = stages * BM * BK, stages * BK * BN
    pool_elems = max(a_elems + b_elems, BM * BN)
    a_layout = _swizzled((stages, BM, BK))
    b_layout = _swizzled((stages, BK, BN))
    c_layout = _swizzled((BM, BN))
    has_tail = bool(m_tail or n_tail or k_tail)
    # cp.async moves 4, 8 or 16 aligned bytes: rows of an odd number of float16 elements
    # (an odd K for A, an odd N for B) are never 4-byte aligned, so they are copied
    # synchronously (the pipeline then overlaps less).
    a_async, b_async = k % 2 == 0, n % 2 == 0

    def load(A, B, A_s, B_s, bm, bn, kt, slot) -> None:
        """K tile ``kt`` of the CTA's rows of A and columns of B into stage ``slot``; edge
        tiles at their own extents (the rest of the stage holds zeros)."""
        if not keep_loads:
            return
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

    def prologue(A, B, A_s, B_s, bm, bn) -> None:
        """K tiles 0 .. stages - 2 into their stages, one commit group each (empty groups
        where K has fewer tiles: the counting below stays the same)."""
        for t in range(stages - 1):
            if t < kts:
                load(A, B, A_s, B_s, bm, bn, t, t)
            T.evaluate(T.ptx.cp.async_.commit_group())

    def fragment_step(A_s, B_s, A_f, B_f, slot, kk, buf, wm, wn) -> None:
        """Fragment step ``kk`` of the K tile in stage ``slot`` into buffer ``buf``."""
        if not keep_math:
            return
        cols = slice(kk * FK, kk * FK + FK)
        Tx.warp.copy(A_f[buf][:, :], A_s[slot, wm * WM : wm * WM + WM, cols])
        Tx.warp.copy(B_f[buf][:, :], B_s[slot, cols, wn * WN : wn * WN + WN])

    def k_tile(A, B, A_s, B_s, A_f, B_f, D, bm, bn, kt, wm, wn) -> None:
        """K tile ``kt``: each fragment step's mma while the next step's fragments load.
        The last step's mma (its fragments are in registers already) go first, so the
        tensor cores have work while the warps wait; then wait for tile kt + 1 (groups
        committed so far: stages - 1 + kt; tiles 0 .. kt + 1 are the oldest kt + 2), the
        CTA barrier (every warp is past its reads of stage kt - 1), refill that stage with
        tile kt + stages - 1, and load tile kt + 1's first fragments."""

        def mma(buf: int) -> None:
            if keep_math:
                Tx.warp.gemm(
                    D,
                    A_f[buf],
                    B_f[buf],
                    D,
                    transpose_A=False,
                    transpose_B=False,
                    alpha=1.0,
                    beta=1.0,
                )

        for kk in range(SUB):
            buf, nxt = kk % 2, (kk + 1) % 2
            if kk < SUB - 1:
                fragment_step(A_s, B_s, A_f, B_f, kt % stages, kk + 1, nxt, wm, wn)
                mma(buf)
                continue
            mma(buf)
            T.evaluate(T.ptx.cp.async_.wait_group(stages - 3))
            T.evaluate(T.cuda.cta_sync())
            ahead = kt + stages - 1
            with T.If(ahead < kts):
                with T.Then():
                    load(A, B, A_s, B_s, bm, bn, ahead, ahead % stages)
            T.evaluate(T.ptx.cp.async_.commit_group())
            with T.If(kt + 1 < kts):
                with T.Then():
                    fragment_step(A_s, B_s, A_f, B_f, (kt + 1) % stages, 0, nxt, wm, wn)

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
            T.evaluate(T.cuda.cta_sync())
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
        A_f0 = T.alloc_buffer((WM, FK), "float16", scope="local", layout=A_FRAG)
        A_f1 = T.alloc_buffer((WM, FK), "float16", scope="local", layout=A_FRAG)
        B_f0 = T.alloc_buffer((FK, WN), "float16", scope="local", layout=B_FRAG)
        B_f1 = T.alloc_buffer((FK, WN), "float16", scope="local", layout=B_FRAG)
        A_f = T.meta_var((A_f0, A_f1))
        B_f = T.meta_var((B_f0, B_f1))
        D = T.alloc_buffer((WM, WN), "float32", scope="local", layout=ACC_FRAG)
        D16 = T.alloc_buffer((WM, WN), "float16", scope="local", layout=ACC_FRAG)
        bias_s = T.alloc_buffer((1, BN), "float16", scope="shared", layout=TileLayout(S[1, BN]))
        bias16 = T.alloc_buffer((1, WN), "float16", scope="local", layout=BIAS_FRAG)
        bias32 = T.alloc_buffer((1, WN), "float32", scope="local", layout=BIAS_FRAG)
        wm = T.meta_var(warp // warp_grid[1])
        wn = T.meta_var(warp % warp_grid[1])
        if has_tail:  # edge tiles leave part of a stage unwritten
            Tx.cta.fill(pool[:], T.float16(0.0))
            T.cuda.cta_sync()
        Tx.warp.fill(D[:, :], T.float32(0.0))
        if with_bias:
            load_bias(bias2, bias_s, bn)
        prologue(A, B, A_s, B_s, bm, bn)
        T.ptx.cp.async_.wait_group(stages - 2)
        T.cuda.cta_sync()
        fragment_step(A_s, B_s, A_f, B_f, 0, 0, 0, wm, wn)
        for kt in range(kts):
            k_tile(A, B, A_s, B_s, A_f, B_f, D, bm, bn, kt, wm, wn)
        T.ptx.cp.async_.wait_group(0)
        T.cuda.cta_sync()
        if with_bias:
            Tx.warp.copy(bias16[:, :], bias_s[0:1, wn * WN : wn * WN + WN])
            Tx.warp.cast(bias32[:, :], bias16[:, :])
            Tx.warp.add(D[:, :], D[:, :], bias32[:, :])
            Tx.warp.maximum(D16[:, :], D[:, :], T.float32(0.0))
        else:
            Tx.warp.cast(D16[:, :], D[:, :])
        Tx.warp.copy(C_s[wm * WM : wm * WM + WM, wn * WN : wn * WN + WN], D16[:, :])
        T.cuda.cta_sync()
        store(C, C_s, bm, bn)
    # fmt: on
    return gemm


# The program at a small size, for `tirx-dispatch explain/lower/sim examples/gemm.py`.
kernel = gemm_kernel(128, 128, 96, stages=3)


def reference(a: np.ndarray, b: np.ndarray, bias: np.ndarray, epilogue: str = "bias_relu"):
    """float64 products and sums, bias added, relu, one rounding into A's type."""
    exact = a.astype(np.float64) @ b.astype(np.float64)
    if epilogue == "plain":
        return exact.astype(a.dtype)
    return np.maximum(exact + bias.astype(np.float64), 0.0).astype(a.dtype)


def inputs(m: int, n: int, k: int, seed: int = 0, dtype: str = "float16") -> list[np.ndarray]:
    """A, B, bias uniform in [-1, 1) of ``dtype`` (float16, bfloat16) and C poisoned."""
    rng = np.random.default_rng(seed)
    kind = ml_dtypes.bfloat16 if dtype == "bfloat16" else np.float16
    a = rng.uniform(-1, 1, (m, k)).astype(kind)
    b = rng.uniform(-1, 1, (k, n)).astype(kind)
    bias = rng.uniform(-1, 1, n).astype(kind)
    c = np.full((m, n), np.nan, dtype=kind)
    return [a, b, bias, c]


def close(c: np.ndarray, want: np.ndarray, k: int) -> bool:
    """Within the float32 accumulation bound plus one rounding of the result into its type
    (float16: 2^-10 relative; bfloat16: 2^-7)."""
    ulp = 2.0**-7 if c.dtype == ml_dtypes.bfloat16 else 2.0**-10
    a, b = c.astype(np.float64), want.astype(np.float64)
    return bool(np.all(np.abs(a - b) <= ulp * np.abs(b) + k * 2.0**-22))


def check(kernel, shape, make, gpu_archs=None, gpu_shapes=((4096, 4096, 4096),)) -> int:
    """The example's run: explain() of ``kernel`` (``shape``), the simulator against numpy,
    then on a GPU (of ``gpu_archs``, any when None) ``make(m, n, k)`` of each of
    ``gpu_shapes`` against numpy; 0 when every check passed."""
    print(tirx_cuda_dispatch.explain(kernel, "sm_90a"))
    m, n, k = shape
    a, b, bias, c = inputs(m, n, k)
    out = sim.run(kernel, [a, b, bias, c], target="sm_90a", pipeline="tirx_cuda_dispatch.strict")
    ok = close(out[3], reference(a, b, bias), k)
    print(f"simulator, {m}x{n}x{k}: {'ok' if ok else 'WRONG'}")
    arch = runtime.gpu_arch()
    if arch is None or (gpu_archs is not None and arch not in gpu_archs):
        print(f"no CUDA GPU{'' if arch is None else ' it runs on (' + arch + ')'}: simulated only")
        return 0 if ok else 1
    for m, n, k in gpu_shapes:
        a, b, bias, c = inputs(m, n, k)
        exe = runtime.build(make(m, n, k), arch, "tirx_cuda_dispatch.strict")
        c = runtime.run(exe, "gemm", [a, b, bias, c])[3]
        gpu_ok = close(c, reference(a, b, bias), k)
        ok = ok and gpu_ok
        print(f"{arch}, {m}x{n}x{k}: {'ok' if gpu_ok else 'WRONG'}")
    return 0 if ok else 1


def main() -> int:
    return check(kernel, (128, 128, 96), gemm_kernel)


if __name__ == "__main__":
    sys.exit(main())
