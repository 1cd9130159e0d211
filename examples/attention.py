"""FlashAttention forward, written only with tile primitives: O = softmax(Q K^T scale) V and
the row log-sum-exp, causal or not, one warpgroup per 64 query rows (a first step toward
issue 33's kernel: not warp-specialized, no TMA, no ragged lengths).

Q, K, V and O are float16 ``[B*H, S, D]`` (D 64 or 128, S a multiple of 64), LSE float32
``[B*H, S]`` (natural log). Each CTA of one warpgroup takes 64 query rows of one head:

- Q's 64 x D tile into 128-byte swizzled shared memory once (K-major: ``copy -> gmem_smem``);
- per 64-row tile of K and V: both into shared memory (K K-major, V as N-major B), a
  proxy fence and a CTA barrier; S = Q K^T with ``gemm_async -> wgmma`` (both operands
  from shared memory) into a float32 accumulator;
- the online softmax on the accumulator's rows, in base 2 with ``scale log2(e)`` folded
  into S: the tile's row max (``max -> local``: in-thread folds and two shuffles, the
  rows a quad of lanes hold), the new running max, ``alpha = exp2(m_old - m_new)``,
  ``P = exp2(S - m_new)`` (the row vector broadcast over the columns), the row sums;
  ``l = l alpha + rowsum(P)``, ``O = O alpha``;
- P cast to float16 in the same registers, which is already wgmma's A fragment, and
  O += P V with ``gemm_async -> wgmma`` taking A from registers (the register form
  FlashAttention-3 uses: no trip through shared memory);
- at the end O / l rounded to float16 once, and LSE = (m + log2(l)) ln 2.

``python examples/attention.py`` prints the explain() report and checks a small head in
the CPU simulator against float64 numpy.
"""

from __future__ import annotations

import math
import sys

import numpy as np
from tvm.script import tirx as T
from tvm.script.tirx import tile as Tx
from tvm.tirx.layout import ComposeLayout, R, S, TileLayout, tid_in_wg

from tirx_cuda_dispatch import demos

BM = 64  # query rows per CTA: one warpgroup's wgmma tile
BN = 64  # key rows per step
LOG2E = 1.4426950408889634


def row_layout() -> TileLayout:
    """A value per row of a wgmma accumulator (64 x 1): row ``16 w + l / 4 (+ 8)`` in the 4
    lanes ``l % 4`` of its quad (replicas), register 0 and 1 for the two row halves."""
    return TileLayout(S[(4, 2, 8) : (32 @ tid_in_wg, 1, 4 @ tid_in_wg)] + R[4 : 1 @ tid_in_wg])


def k_major(rows: int, d: int) -> ComposeLayout:
    """A (rows x d) float16 tile, rows of d contiguous in 64-column blocks, 128-byte swizzle
    (wgmma's K-major canonical layout for Q and K)."""
    return ComposeLayout(3, 3, 3, TileLayout(S[(rows, d // 64, 64) : (64, rows * 64, 1)]))


def attention_kernel(heads: int, seq: int, d: int, causal: bool = False, omit: str | None = None):
    """The kernel for ``heads`` (B*H) heads of ``seq`` rows and head dim ``d``; ``causal``
    masks key ``j`` from query ``i`` where ``j > i`` (``select`` over the tile's
    coordinates to -inf, and the key tiles past the diagonal skipped). ``omit`` breaks it
    for the tests' negative controls: ``"wait"`` drops the wait of the P V wgmma,
    ``"rescale"`` drops ``O = O alpha``."""
    if d not in (64, 128) or seq % BN or seq % BM:
        raise ValueError(f"head dim {d} (64 or 128), seq {seq} (a multiple of {BN})")
    scale = LOG2E / math.sqrt(d)  # softmax in base 2
    acc_s = demos.wgmma_accumulator_layout(BN, 1)
    acc_o = demos.wgmma_accumulator_layout(d, 1)
    rows = row_layout()
    q_l, k_l = k_major(BM, d), k_major(BN, d)
    v_l = ComposeLayout(3, 3, 3, TileLayout(S[(BN, d // 64, 64) : (64, BN * 64, 1)]))
    tiles = seq // BN
    wait_pv = omit != "wait"
    rescale = omit != "rescale"

    # fmt: off
    @T.prim_func
    def attention(Q_ptr: T.handle, K_ptr: T.handle, V_ptr: T.handle, O_ptr: T.handle,
                  LSE_ptr: T.handle):
        Q = T.match_buffer(Q_ptr, (heads, seq, d), "float16")
        K = T.match_buffer(K_ptr, (heads, seq, d), "float16")
        V = T.match_buffer(V_ptr, (heads, seq, d), "float16")
        Out = T.match_buffer(O_ptr, (heads, seq, d), "float16")
        LSE = T.match_buffer(LSE_ptr, (heads, seq, 1), "float32")
        T.device_entry()
        qb, h = T.cta_id([seq // BM, heads])
        T.warpgroup_id([1])
        T.warp_id_in_wg([4])
        T.lane_id([32])
        T.thread_id([128])
        pool = T.alloc_buffer((BM * d + 2 * BN * d,), "float16", scope="shared.dyn", align=1024)
        Q_s = T.decl_buffer((BM, d), "float16", pool.data, scope="shared.dyn", layout=q_l)
        K_s = T.decl_buffer((BN, d), "float16", pool.data, elem_offset=BM * d,
                            scope="shared.dyn", layout=k_l)
        V_s = T.decl_buffer((BN, d), "float16", pool.data, elem_offset=BM * d + BN * d,
                            scope="shared.dyn", layout=v_l)
        S_r = T.alloc_buffer((BM, BN), "float32", scope="local", layout=acc_s)
        P16 = T.alloc_buffer((BM, BN), "float16", scope="local", layout=acc_s)
        O_r = T.alloc_buffer((BM, d), "float32", scope="local", layout=acc_o)
        O16 = T.alloc_buffer((BM, d), "float16", scope="local", layout=acc_o)
        m_old = T.alloc_buffer((BM, 1), "float32", scope="local", layout=rows)
        m_new = T.alloc_buffer((BM, 1), "float32", scope="local", layout=rows)
        alpha = T.alloc_buffer((BM, 1), "float32", scope="local", layout=rows)
        l_sum = T.alloc_buffer((BM, 1), "float32", scope="local", layout=rows)
        l_tile = T.alloc_buffer((BM, 1), "float32", scope="local", layout=rows)
        q0 = T.meta_var(qb * BM)
        Tx.cta.copy(Q_s[:, :], Q[h, q0 : q0 + BM, :])
        Tx.wg.fill(O_r[:, :], T.float32(0.0))
        Tx.wg.fill(m_old[:, :], T.float32(-math.inf))
        Tx.wg.fill(l_sum[:, :], T.float32(0.0))
        for t in T.serial(qb + 1 if causal else tiles):  # causal: up to the diagonal
            k0 = T.meta_var(t * BN)
            Tx.cta.copy(K_s[:, :], K[h, k0 : k0 + BN, :])
            Tx.cta.copy(V_s[:, :], V[h, k0 : k0 + BN, :])
            T.ptx["fence.proxy.async.shared::cta"]()
            T.cuda.cta_sync()
            # S = Q K^T (scale log2 e folded in below)
            Tx.wg.gemm_async(S_r[:, :], Q_s[:, :], K_s[:, :], transA=False, transB=False)
            T.ptx["wgmma.commit_group.sync.aligned"]()
            T.ptx["wgmma.wait_group.sync.aligned"](0)
            Tx.wg.mul(S_r[:, :], S_r[:, :], T.float32(scale))
            if causal:  # key k0 + j is masked from query q0 + i where it comes later
                Tx.wg.select(S_r[:, :], S_r[:, :], T.float32(-math.inf),
                             lambda i, j: k0 + j <= q0 + i)  # noqa: B023 (parsed here)
            # the online softmax on the accumulator's rows
            Tx.wg.max(m_new[:, :], S_r[:, :], axes=[-1])
            Tx.wg.maximum(m_new[:, :], m_new[:, :], m_old[:, :])
            Tx.wg.sub(alpha[:, :], m_old[:, :], m_new[:, :])
            Tx.wg.exp2(alpha[:, :], alpha[:, :])
            Tx.wg.sub(S_r[:, :], S_r[:, :], m_new[:, :])
            Tx.wg.exp2(S_r[:, :], S_r[:, :])
            Tx.wg.sum(l_tile[:, :], S_r[:, :], axes=[-1])
            Tx.wg.fma(l_sum[:, :], l_sum[:, :], alpha[:, :], l_tile[:, :])
            if rescale:
                Tx.wg.mul(O_r[:, :], O_r[:, :], alpha[:, :])
            Tx.wg.maximum(m_old[:, :], m_old[:, :], m_new[:, :])  # = m_new (m_new >= m_old)
            # P in float16 is wgmma's A fragment: O += P V from registers
            Tx.wg.cast(P16[:, :], S_r[:, :])
            Tx.wg.gemm_async(O_r[:, :], P16[:, :], V_s[:, :], transA=False, transB=True,
                             accum=True)
            T.ptx["wgmma.commit_group.sync.aligned"]()
            if wait_pv:
                T.ptx["wgmma.wait_group.sync.aligned"](0)
            T.cuda.cta_sync()  # every warp is past its reads of K_s and V_s
        if not wait_pv:
            T.ptx["wgmma.wait_group.sync.aligned"](0)
        Tx.wg.reciprocal(l_tile[:, :], l_sum[:, :])
        Tx.wg.mul(O_r[:, :], O_r[:, :], l_tile[:, :])
        Tx.wg.cast(O16[:, :], O_r[:, :])
        Tx.wg.copy(Out[h, q0 : q0 + BM, :], O16[:, :])
        Tx.wg.log2(l_tile[:, :], l_sum[:, :])
        Tx.wg.add(l_tile[:, :], l_tile[:, :], m_old[:, :])
        Tx.wg.mul(l_tile[:, :], l_tile[:, :], T.float32(math.log(2.0)))
        Tx.wg.copy(LSE[h, q0 : q0 + BM, :], l_tile[:, :])
    # fmt: on
    return attention


def inputs(heads: int, seq: int, d: int, seed: int = 0) -> list[np.ndarray]:
    """Q, K, V random float16 (standard normal), O and LSE poisoned (NaN)."""
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal((heads, seq, d)).astype(np.float16) for _ in range(3))
    o = np.full((heads, seq, d), np.nan, np.float16)
    lse = np.full((heads, seq, 1), np.nan, np.float32)
    return [q, k, v, o, lse]


def reference(q, k, v, causal: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """O and LSE in float64."""
    s = np.einsum("hqd,hkd->hqk", q.astype(np.float64), k.astype(np.float64))
    s /= math.sqrt(q.shape[-1])
    if causal:
        n = s.shape[-1]
        s = np.where(np.arange(n)[None, :] <= np.arange(n)[:, None], s, -np.inf)
    m = s.max(axis=-1, keepdims=True)
    p = np.exp(s - m)
    lse = m + np.log(p.sum(axis=-1, keepdims=True))
    return np.einsum("hqk,hkd->hqd", p / p.sum(axis=-1, keepdims=True), v.astype(np.float64)), lse


def close(o: np.ndarray, lse: np.ndarray, q, k, v, causal: bool = False) -> str | None:
    """O within ``2^-9 max |V|`` of float64 (P rounded to float16 before P V: 2^-11 of each
    weight, and O rounded to float16 once) and LSE within ``2^-16 (1 + |LSE|)``; None if
    so, else what is off."""
    want_o, want_lse = reference(q, k, v, causal)
    err_o = np.abs(o.astype(np.float64) - want_o)
    bound_o = 2.0**-9 * np.abs(v.astype(np.float64)).max()
    err_lse = np.abs(lse.astype(np.float64) - want_lse)
    bad_o = int(np.count_nonzero(~(err_o <= bound_o)))
    bad_lse = int(np.count_nonzero(~(err_lse <= 2.0**-16 * (1 + np.abs(want_lse)))))
    if bad_o or bad_lse:
        return f"{bad_o} of {o.size} outputs of O and {bad_lse} of {lse.size} of LSE off"
    return None


# The program at a small size, for `tirx-dispatch explain/lower/sim examples/attention.py`.
kernel = attention_kernel(2, 128, 64)


def main() -> int:
    from tirx_cuda_dispatch import explain, sim

    print(explain(kernel, "sm_90a"))
    args = inputs(2, 128, 64)
    out = sim.run(kernel, args, target="sm_90a", pipeline="tirx_cuda_dispatch.strict")
    off = close(out[3], out[4], *args[:3])
    print("simulator:", off or "O and LSE equal float64 numpy within the bound")
    return 0 if off is None else 1


if __name__ == "__main__":
    sys.exit(main())
