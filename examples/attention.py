"""FlashAttention forward, written only with tile primitives: O = softmax(Q K^T scale) V and
the row log-sum-exp, causal or not, any sequence length, grouped-query heads, one
warpgroup per 64 query rows (a first step toward issue 33's kernel: not warp-specialized,
no TMA).

Q and O are float16 or bfloat16 ``[B*H, S, D]``, K and V ``[B*H_kv, S, D]`` (D 64, 128 or
256), LSE float32 ``[B*H, S]`` (natural log). Each CTA of one warpgroup takes 64 query
rows of one head:

- Q's 64 x D tile into 128-byte swizzled shared memory once (K-major: ``copy -> gmem_smem``);
- per 64-row tile of K and V: both into shared memory (K K-major, V as N-major B), a
  proxy fence and a CTA barrier; S = Q K^T with ``gemm_async -> wgmma`` (both operands
  from shared memory) into a float32 accumulator;
- the online softmax on the accumulator's rows, in base 2 with ``c = scale log2(e)``
  folded into the exponent: the tile's row max (``max -> local``: in-thread folds and
  two shuffles, the rows a quad of lanes hold), the new running max, ``alpha =
  exp2((m_old - m_new) c)``, ``P = exp2(S c - m_new c)`` (``exp2`` with a scale and the
  row vector as its bias: one FFMA and one ex2 an element), the row sums;
  ``l = l alpha + rowsum(P)``, ``O = O alpha``;
- P cast to Q's type in the same registers, which is already wgmma's A fragment, and
  O += P V with ``gemm_async -> wgmma`` taking A from registers (the register form
  FlashAttention-3 uses: no trip through shared memory);
- at the end O / l rounded to O's type once, and LSE = (m c + log2(l)) ln 2.

:func:`attention_ws_kernel` is FlashAttention-3's structure, for any length: a producer
warpgroup (``setmaxnreg.dec``) whose first thread loads Q and a ring of 128-row K/V tiles
with TMA on full/empty mbarriers (at head dim 256 a ring each for K and V, 80-row tiles),
and two consumer warpgroups (``setmaxnreg.inc``) of 64 query rows each, taking turns to
issue their wgmma at two named barriers (ping-pong), each running tile t's softmax while its
P V of tile t-1 runs (the intra-warpgroup overlap), O out through shared memory by one TMA
store (three consumers at head dim 64). Kernels up to 4,096 rows run on a persistent
grid: each CTA takes one query block of several heads in turn (causal: a pair of blocks
of equal total work), its producer loading the next head's Q and tiles while the
consumers finish the last (where O leaves through a buffer of its own, a consumer's rows
of Q are free as soon as its block's last Q K^T is in). After a block's first key tile
its consumers take the exponentials against the rows' last reference max (the lagged
reference max: no row max before them), and rebase a tile, on a warpgroup vote
(``bar.red``), only where a lane's sum of P passes 2^8. The simulator schedules the
warpgroups apart.

``python examples/attention.py`` prints the explain() report and checks small heads of
both kernels in the CPU simulator against float64 numpy.
"""

from __future__ import annotations

import math
import sys
from types import SimpleNamespace

import numpy as np
from tvm import tirx
from tvm.script import tirx as T
from tvm.script.tirx import tile as Tx
from tvm.tirx.layout import ComposeLayout, S, TileLayout

from tirx_cuda_dispatch import fragments
from tirx_cuda_dispatch.explain import PDL_TAG

BM = 64  # query rows per CTA: one warpgroup's wgmma tile
BN = 64  # key rows per step
LOG2E = 1.4426950408889634
DTYPES = ("float16", "bfloat16")  # Q, K, V, O; P rounded to it for P V


def k_major(rows: int, d: int) -> ComposeLayout:
    """A (rows x d) float16 tile, rows of d contiguous in 64-column blocks, 128-byte swizzle
    (wgmma's K-major canonical layout for Q and K)."""
    return ComposeLayout(3, 3, 3, TileLayout(S[(rows, d // 64, 64) : (64, rows * 64, 1)]))


def softmax_rows(
    S_r, m_old, m_new, alpha, l_sum, l_tile, scale: float, tx=Tx.wg, ex2_emulation: int = 0
) -> None:
    """One key tile's online softmax on the accumulator's rows (S as the wgmma left it,
    masked to -inf), emitted into the kernel being parsed: the tile's row max (``max ->
    local``: in-thread folds and two shuffles over the quad of lanes a row lives in), the
    new running max, ``alpha = exp2((m_old - m_new) scale)``, ``P = exp2(S scale - m_new
    scale)`` in S's registers (``scale`` is ``log2(e) / sqrt(d)``: one FFMA and one ex2 an
    element, the row bias broadcast over the columns), and ``l = l alpha + rowsum(P)``.
    ``l_tile`` holds ``-m_new scale`` before it holds the tile's row sums. ``tx``: the
    scope of the calls (``Tx.wg`` for a wgmma accumulator, ``Tx.warp`` for mma.sync's:
    examples/attention_sm80.py). ``ex2_emulation`` k > 0: one exponential of P in k on
    the FMA pipe instead of MUFU (elementwise -> reg's ``ex2_emulation=``). An ``l_sum``
    of 64 x 4 (``fragments.wgmma_row_parts_layout``) keeps each lane's part of its rows'
    sums, ``l = l alpha + `` the lane's columns of P, and :func:`finish` adds the parts
    (FlashAttention-3's row sum: the quad's shuffles once a block, not once a tile)."""
    tx.max(m_new[:, :], S_r[:, :], axes=[-1])
    tx.maximum(m_new[:, :], m_new[:, :], m_old[:, :])
    tx.sub(alpha[:, :], m_old[:, :], m_new[:, :])
    tx.exp2(alpha[:, :], alpha[:, :], scale=T.float32(scale))
    tx.mul(l_tile[:, :], m_new[:, :], T.float32(-scale))
    emulate = {"ex2_emulation": ex2_emulation} if ex2_emulation else {}
    tx.exp2(S_r[:, :], S_r[:, :], bias=l_tile[:, :], scale=T.float32(scale), **emulate)
    if int(l_sum.shape[1]) == 1:  # the rows' sums: folds, then two shuffles over the quad
        tx.sum(l_tile[:, :], S_r[:, :], axes=[-1])
        tx.fma(l_sum[:, :], l_sum[:, :], alpha[:, :], l_tile[:, :])
    else:  # each lane's part of its rows (64 x 4): its own columns, no shuffle
        tx.mul(l_sum[:, :], l_sum[:, :], alpha[:, :])
        tx.sum(l_sum[:, :], S_r[:, :], axes=[-1], accum=True)


def lagged_rows(S_r, l_lane, l_tile, scale: float, tx=Tx.wg) -> None:
    """A key tile's P against the rows' reference max (``lagged_max``), emitted into the
    kernel being parsed: ``P = exp2(S scale + l_tile)`` (``l_tile`` holds ``-m scale`` of
    the reference ``m``: one FFMA and one ex2 an element, no row max before them) and each
    lane's sums of its part of P in ``l_lane`` (the rows' parts layout: no shuffle), which
    bound every P the lane holds."""
    tx.exp2(S_r[:, :], S_r[:, :], bias=l_tile[:, :], scale=T.float32(scale))
    tx.sum(l_lane[:, :], S_r[:, :], axes=[-1])


def rebase_rows(
    S_r, O_r, m_old, m_new, alpha, l_run, l_lane, l_tile, scale: float, rescale: bool, tx=Tx.wg
) -> None:
    """After :func:`lagged_rows` tripped the bound and S was computed again (masked): the
    tile's whole online softmax against the rows' true max, the new reference in
    ``m_old`` and its bias in ``l_tile``, the running lane sums ``l_run`` and O rescaled by
    ``alpha`` (O unless ``rescale`` is False: a broken kernel), P and ``l_lane`` again."""
    tx.max(m_new[:, :], S_r[:, :], axes=[-1])
    tx.maximum(m_new[:, :], m_new[:, :], m_old[:, :])
    tx.sub(alpha[:, :], m_old[:, :], m_new[:, :])
    tx.exp2(alpha[:, :], alpha[:, :], scale=T.float32(scale))
    tx.mul(l_tile[:, :], m_new[:, :], T.float32(-scale))
    lagged_rows(S_r, l_lane, l_tile, scale, tx)
    tx.mul(l_run[:, :], l_run[:, :], alpha[:, :])
    if rescale:
        tx.mul(O_r[:, :], O_r[:, :], alpha[:, :])
    tx.copy(m_old[:, :], m_new[:, :])


def rebase_warp_rows(
    S_r, O_r, m_old, m_new, alpha, l_run, l_lane, l_tile, scale: float, rescale: bool, tx=Tx.wg
) -> None:
    """After :func:`lagged_rows` passed the bound in a warp's lanes (``lag_check="warp"``):
    the warp's rows rebased on P's own row max (no Q K^T again): the reference ``m_old``
    moved up by ``log2`` of the row max of P (at least 1: the reference only grows) over
    ``scale``, ``alpha = exp2`` of the new bias less the old (``l_tile``'s: about one over
    that max, and exactly the ratio of the tiles' P after it to theirs before), and P, its
    lane sums ``l_lane``, the running sums ``l_run`` and O (unless ``rescale`` is False: a
    broken kernel) multiplied by ``alpha``. Every op is the quad's or the thread's own:
    the warp runs it alone."""
    tx.max(m_new[:, :], S_r[:, :], axes=[-1])
    tx.maximum(m_new[:, :], m_new[:, :], T.float32(1.0))
    tx.log2(m_new[:, :], m_new[:, :])
    tx.fma(m_old[:, :], m_new[:, :], T.float32(1.0 / scale), m_old[:, :])
    tx.mul(alpha[:, :], m_old[:, :], T.float32(-scale))  # the new bias
    tx.sub(m_new[:, :], alpha[:, :], l_tile[:, :])
    tx.mul(l_tile[:, :], m_old[:, :], T.float32(-scale))
    tx.exp2(alpha[:, :], m_new[:, :])
    tx.mul(S_r[:, :], S_r[:, :], alpha[:, :])
    tx.mul(l_lane[:, :], l_lane[:, :], alpha[:, :])
    tx.mul(l_run[:, :], l_run[:, :], alpha[:, :])
    if rescale:
        tx.mul(O_r[:, :], O_r[:, :], alpha[:, :])


def lane_total(view, count: int):
    """The sum of a thread's ``count`` registers of a rows' parts tile (``view``: its
    registers as a flat local buffer): at most ``LAG_BOUND`` keeps every P of its rows
    below it."""
    total = view[0]
    for k in range(1, count):
        total = total + view[k]
    return total


def rescale_and_round(S_r, P16, O_r, m_old, m_new, alpha, rescale: bool, tx=Tx.wg) -> None:
    """After :func:`softmax_rows`: ``O = O alpha`` (unless ``rescale`` is False: a broken
    kernel), ``m_old = m_new`` (``copy -> threadwise``), and P rounded to Q's type in
    ``P16``, which is the A fragment for O += P V (wgmma's, or mma.sync's at warp scope)."""
    if rescale:
        tx.mul(O_r[:, :], O_r[:, :], alpha[:, :])
    tx.copy(m_old[:, :], m_new[:, :])
    tx.cast(P16[:, :], S_r[:, :])


def online_softmax(
    S_r,
    P16,
    O_r,
    m_old,
    m_new,
    alpha,
    l_sum,
    l_tile,
    scale: float,
    rescale: bool,
    tx=Tx.wg,
    ex2_emulation: int = 0,
) -> None:
    """:func:`softmax_rows` then :func:`rescale_and_round`: one key tile's online softmax,
    P ready for O += P V."""
    softmax_rows(S_r, m_old, m_new, alpha, l_sum, l_tile, scale, tx, ex2_emulation)
    rescale_and_round(S_r, P16, O_r, m_old, m_new, alpha, rescale, tx)


def finish(O_r, O16, m_old, l_sum, l_tile, scale: float, tx=Tx.wg, parts=None) -> None:
    """O / l rounded to Q's type once into ``O16``; the rows' LSE, ``(m scale + log2 l)
    ln 2``, into ``l_tile``. ``parts``: the lanes' parts of l (:func:`softmax_rows`'s 64 x 4
    ``l_sum``), added into ``l_sum`` first."""
    if parts is not None:
        tx.sum(l_sum[:, :], parts[:, :], axes=[-1])
    tx.reciprocal(l_tile[:, :], l_sum[:, :])
    tx.mul(O_r[:, :], O_r[:, :], l_tile[:, :])
    tx.cast(O16[:, :], O_r[:, :])
    tx.log2(l_tile[:, :], l_sum[:, :])
    tx.fma(l_tile[:, :], m_old[:, :], T.float32(scale), l_tile[:, :])
    tx.mul(l_tile[:, :], l_tile[:, :], T.float32(math.log(2.0)))


@T.macro
def store_rows(Out, LSE, O_s, lse_v, h, q0, qb, qbs, q_tail, rows):
    """A block's ``rows`` rows of O and LSE from shared memory (``O_s``, ``lse_v``) to
    global, by the CTA; the last of ``qbs`` blocks only its ``q_tail`` rows before the end
    (where ``q_tail`` is not 0)."""
    if q_tail > 0:
        if qb < qbs - 1:
            Tx.cta.copy(Out[h, q0 : q0 + rows, :], O_s[:, :])
            Tx.cta.copy(LSE[h, q0 : q0 + rows], lse_v[:])
        else:
            Tx.cta.copy(Out[h, q0 : q0 + q_tail, :], O_s[0:q_tail, :])
            Tx.cta.copy(LSE[h, q0 : q0 + q_tail], lse_v[0:q_tail])
    else:
        Tx.cta.copy(Out[h, q0 : q0 + rows, :], O_s[:, :])
        Tx.cta.copy(LSE[h, q0 : q0 + rows], lse_v[:])


def attention_kernel(
    heads: int,
    seq: int,
    d: int,
    causal: bool = False,
    kv_heads: int | None = None,
    omit: str | None = None,
    dtype: str = "float16",
):
    """The kernel for ``heads`` (B*H) query heads of ``seq`` rows, head dim ``d``, and
    ``kv_heads`` key/value heads (grouped-query attention: query head ``h`` reads key/value
    head ``h / (heads / kv_heads)``; None: as many as query heads). ``causal`` masks key
    ``j`` from query ``i`` where ``j > i`` (``select`` over the tile's coordinates to -inf,
    and the key tiles past the diagonal skipped). ``seq`` need not be a multiple of 64:
    the last query block and key tile are partial (the stage zero-filled first, the keys
    past the end masked to -inf, the rows past it not stored). ``omit`` breaks it for the
    tests' negative controls: ``"wait"`` drops the wait of the P V wgmma, ``"rescale"``
    drops ``O = O alpha``."""
    kv_heads = heads if kv_heads is None else kv_heads
    if dtype not in DTYPES:
        raise ValueError(f"dtype {dtype!r}: one of {DTYPES}")
    if d not in (64, 128, 256) or seq < 1 or heads % kv_heads:
        raise ValueError(
            f"head dim {d} (64, 128 or 256), seq {seq} (1 or more), {heads} query heads in "
            f"groups over {kv_heads} key/value heads"
        )
    group = heads // kv_heads
    zero = tirx.const(0.0, dtype)
    scale = LOG2E / math.sqrt(d)  # softmax in base 2
    acc_s = fragments.wgmma_accumulator_layout(BN, 1)
    acc_o = fragments.wgmma_accumulator_layout(d, 1)
    rows = fragments.wgmma_rows_layout()
    q_l, k_l = k_major(BM, d), k_major(BN, d)
    v_l = ComposeLayout(3, 3, 3, TileLayout(S[(BN, d // 64, 64) : (64, BN * 64, 1)]))
    o_l = TileLayout(S[(BM, d) : (d, 1)])
    qbs, kts = -(-seq // BM), -(-seq // BN)
    q_tail, k_tail = seq % BM, seq % BN
    kv0, kv1 = BM * d, BM * d + 2 * BN * d  # the K and V stages in the pool
    wait_pv = omit != "wait"
    rescale = omit != "rescale"

    # fmt: off
    @T.prim_func
    def attention(Q_ptr: T.handle, K_ptr: T.handle, V_ptr: T.handle, O_ptr: T.handle,
                  LSE_ptr: T.handle):
        Q = T.match_buffer(Q_ptr, (heads, seq, d), dtype)
        K = T.match_buffer(K_ptr, (kv_heads, seq, d), dtype)
        V = T.match_buffer(V_ptr, (kv_heads, seq, d), dtype)
        Out = T.match_buffer(O_ptr, (heads, seq, d), dtype)
        LSE = T.match_buffer(LSE_ptr, (heads, seq), "float32")
        T.device_entry()
        qb, h = T.cta_id([qbs, heads])
        T.warpgroup_id([1])
        T.warp_id_in_wg([4])
        T.lane_id([32])
        T.thread_id([128])
        pool = T.alloc_buffer((BM * d + 2 * BN * d,), dtype, scope="shared.dyn", align=1024)
        Q_s = T.decl_buffer((BM, d), dtype, pool.data, scope="shared.dyn", layout=q_l)
        K_s = T.decl_buffer((BN, d), dtype, pool.data, elem_offset=BM * d,
                            scope="shared.dyn", layout=k_l)
        V_s = T.decl_buffer((BN, d), dtype, pool.data, elem_offset=BM * d + BN * d,
                            scope="shared.dyn", layout=v_l)
        O_s = T.decl_buffer((BM, d), dtype, pool.data, scope="shared.dyn", layout=o_l)
        lse_s = T.alloc_buffer((BM, 1), "float32", scope="shared", layout=TileLayout(S[BM, 1]))
        lse_v = T.decl_buffer((BM,), "float32", lse_s.data, scope="shared")  # a row vector
        S_r = T.alloc_buffer((BM, BN), "float32", scope="local", layout=acc_s)
        P16 = T.alloc_buffer((BM, BN), dtype, scope="local", layout=acc_s)
        O_r = T.alloc_buffer((BM, d), "float32", scope="local", layout=acc_o)
        O16 = T.alloc_buffer((BM, d), dtype, scope="local", layout=acc_o)
        m_old = T.alloc_buffer((BM, 1), "float32", scope="local", layout=rows)
        m_new = T.alloc_buffer((BM, 1), "float32", scope="local", layout=rows)
        alpha = T.alloc_buffer((BM, 1), "float32", scope="local", layout=rows)
        l_sum = T.alloc_buffer((BM, 1), "float32", scope="local", layout=rows)
        l_tile = T.alloc_buffer((BM, 1), "float32", scope="local", layout=rows)
        q0 = T.meta_var(qb * BM)
        kv = T.meta_var(h // group)
        if q_tail > 0:  # the last query block is partial: its stage zero-filled first
            if qb < qbs - 1:
                Tx.cta.copy(Q_s[:, :], Q[h, q0 : q0 + BM, :])
            else:
                Tx.cta.fill(pool[0:kv0], zero)
                T.cuda.cta_sync()
                Tx.cta.copy(Q_s[0:q_tail, :], Q[h, q0 : q0 + q_tail, :])
        else:
            Tx.cta.copy(Q_s[:, :], Q[h, q0 : q0 + BM, :])
        Tx.wg.fill(O_r[:, :], T.float32(0.0))
        Tx.wg.fill(m_old[:, :], T.float32(-math.inf))
        Tx.wg.fill(l_sum[:, :], T.float32(0.0))
        for t in T.serial(qb + 1 if causal else kts):  # causal: up to the diagonal
            k0 = T.meta_var(t * BN)
            if k_tail > 0:  # the last key tile is partial: zeros past the end
                if t < kts - 1:
                    Tx.cta.copy(K_s[:, :], K[kv, k0 : k0 + BN, :])
                    Tx.cta.copy(V_s[:, :], V[kv, k0 : k0 + BN, :])
                else:
                    Tx.cta.fill(pool[kv0:kv1], zero)
                    T.cuda.cta_sync()
                    Tx.cta.copy(K_s[0:k_tail, :], K[kv, k0 : k0 + k_tail, :])
                    Tx.cta.copy(V_s[0:k_tail, :], V[kv, k0 : k0 + k_tail, :])
            else:
                Tx.cta.copy(K_s[:, :], K[kv, k0 : k0 + BN, :])
                Tx.cta.copy(V_s[:, :], V[kv, k0 : k0 + BN, :])
            T.ptx["fence.proxy.async.shared::cta"]()
            T.cuda.cta_sync()
            # S = Q K^T (scale log2 e folded into the softmax's exp2)
            Tx.wg.gemm_async(S_r[:, :], Q_s[:, :], K_s[:, :], transA=False, transB=False)
            T.ptx["wgmma.commit_group.sync.aligned"]()
            T.ptx["wgmma.wait_group.sync.aligned"](0)
            if causal:  # key k0 + j is masked from query q0 + i where it comes later
                Tx.wg.select(S_r[:, :], S_r[:, :], T.float32(-math.inf),
                             lambda i, j: k0 + j <= q0 + i)  # noqa: B023 (parsed here)
            elif k_tail > 0:  # the keys past the end
                Tx.wg.select(S_r[:, :], S_r[:, :], T.float32(-math.inf),
                             lambda i, j: k0 + j < seq)  # noqa: B023 (parsed here)
            # the online softmax on the accumulator's rows
            online_softmax(S_r, P16, O_r, m_old, m_new, alpha, l_sum, l_tile, scale, rescale)
            Tx.wg.gemm_async(O_r[:, :], P16[:, :], V_s[:, :], transA=False, transB=True,
                             accum=True)
            T.ptx["wgmma.commit_group.sync.aligned"]()
            if wait_pv:
                T.ptx["wgmma.wait_group.sync.aligned"](0)
            T.cuda.cta_sync()  # every warp is past its reads of K_s and V_s
        if not wait_pv:
            T.ptx["wgmma.wait_group.sync.aligned"](0)
        finish(O_r, O16, m_old, l_sum, l_tile, scale)
        # out through shared memory (Q's stage, read by no wgmma any more): rows past the
        # end of a partial block are not stored
        Tx.wg.copy(O_s[:, :], O16[:, :])
        Tx.wg.copy(lse_s[:, :], l_tile[:, :])
        T.cuda.cta_sync()
        store_rows(Out, LSE, O_s, lse_v, h, q0, qb, qbs, q_tail, BM)
    # fmt: on
    return attention


def default_consumers(d: int, seq: int, causal: bool, lagged_max: bool = True) -> int:
    """Consumer warpgroups of the warp-specialized kernel (64 query rows each): three at
    head dim 64 (FA3's tile; on an H100 1.05-1.13 of cuDNN from 4,096 rows where two reach
    0.88-0.96), except causal below 4,096 rows (1,024: 0.82 with three, 0.93 with two: the
    192-row blocks' diagonal work is uneven) and, without ``lagged_max``, at 4,096 rows
    too (two pair their blocks on the persistent grid: on an H200 1.003 of cuDNN against
    0.990 with three, one CTA a block; with the lagged max 1.046 against 1.081 with
    three); two at head dim 128 (three need more shared memory than a CTA has with three
    stages)."""
    return 3 if d == 64 and (not causal or seq > 4096 or lagged_max and seq == 4096) else 2


REGISTERS = {2: (40, 232), 3: (24, 160)}  # setmaxnreg by consumers: producer's, consumers'
SHARED_BYTES = 227 * 1024  # the most dynamic shared memory a CTA may have (sm_90)
WS_OMITS = (
    None, "full_wait", "empty_arrive", "rescale", "first_turn", "pv_wait", "store_fence",
    "store_wait", "q_empty_wait", "v_wait", "rebase", "idle_store", "recompute",
)  # fmt: skip
LAG_CHECKS = ("tile", "block", "warp")  # lagged_max: where the bound on P is checked
# named barriers (0 is the CTA's): consumer c's turn to issue is 1 + c; its barrier
# before the TMA store of O is 1 + consumers + c; its vote (lagged_max) 9 + c (8 is TVM's
# built-ins'); the consumers' meeting before they redo blocks (lag_check "block",
# "warp") 12
REDO_BARRIER = 12
SECTION_BYTES = 16 << 20  # (section) K and V of a section's heads: a third of the L2
LAG_BOUND = 256.0  # lagged_max: a lane's sum of P over a tile (so every P) stays below it
# lag_check "block": P must only stay finite in float16 for P V (its largest power of two,
# below 65,504); a redo is dear, a rebase cheap (FlashAttention-4 rebases past 2^8)
BLOCK_BOUND = 2.0**15
# lag_check "warp": past it a tile's P may have left float32's range (its sums overflow)
WARP_BOUND = 2.0**120


def attention_ws_kernel(
    heads: int,
    seq: int,
    d: int,
    causal: bool = False,
    kv_heads: int | None = None,
    stages: int | None = None,
    omit: str | None = None,
    dtype: str = "float16",
    pingpong: bool = True,
    block_n: int | None = None,
    overlap: bool = True,
    registers: tuple[int, int] | None = None,
    tma_store: bool = True,
    consumers: int | None = None,
    persistent: bool | None = None,
    sms: int = 132,
    split_kv: bool | None = None,
    ex2_emulation: int | None = None,
    q_split: bool | None = None,
    o_buffer: bool | None = None,
    lane_sums: bool | None = None,
    lagged_max: bool | None = None,
    own_tiles: bool = True,
    section: int | None = None,
    balanced: bool | None = None,
    pdl: bool = True,
    lag_check: str | None = None,
):
    """FlashAttention-3's structure: per CTA 64 ``consumers`` query rows of one head and
    ``1 + consumers`` warpgroups. Warpgroup 0, the producer, gives registers back
    (``setmaxnreg.dec``) and its first thread loads Q once (``copy_async -> tma_auto``
    on the Q mbarrier) and every ``block_n``-row tile of K and V into a ring of ``stages``
    (a stage's ``full`` mbarrier announces its bytes; it is refilled once every consumer
    arrived on its ``empty`` barrier). The other warpgroups, the consumers
    (``setmaxnreg.inc``), each own 64 query rows: per tile they wait for the stage, run S
    = Q K^T (wgmma from shared memory), the online softmax on the accumulator's rows, O
    += P V (wgmma with P in registers), and free the stage. ``split_kv`` (FA3's two
    pipelines): a ring each for K and V, V loaded a tile behind K, K's stage freed as soon
    as S is in and V's after P V (None: at head dim 256, whose two stages are all shared
    memory holds: on an H200 at 4,096 x 256 with 64-key tiles 0.97 of cuDNN against 0.62
    with one ring; at head dim 128 with ``o_buffer``, two stages a ring; and on the
    persistent non-causal grids of three consumers at head dim 64 up to 1,024 rows, where a
    block's 8 key tiles make its first Q K^T's wait for V's tile count: +0.4-0.6% at 1,024
    x 64 (the ablation "ws per block", one CTA a block, keeps one ring);
    elsewhere one ring, which measured 3-6% faster at head dims 64 and 128). Arguments as
    :func:`attention_kernel`'s (head dim 64, 128 or 256); ``seq`` any length: the TMA
    boxes past the end read zeros (the last key tile's keys there masked to -inf) and the store of O
    clips them; the LSE rows of the last block are stored up to the end. Causal kernels
    load the tiles up to the CTA's diagonal and mask only the tiles that cross a
    consumer's diagonal (``select`` under an ``if``). ``pingpong``: the consumers take
    turns issuing their wgmma (FA3's warp scheduler barriers: consumer ``c`` waits at
    named barrier ``1 + c`` for 256 threads, issues, and arrives at the next one's; the
    last consumer grants the first turn), so one's softmax runs while another's wgmma
    does. ``overlap`` (FA3's intra-warpgroup overlap): a consumer issues tile t's Q K^T
    and tile t-1's P V together, runs tile t's softmax while the P V wgmma runs
    (``wait_group 1``), and rescales O and rounds P into the A fragment only after it
    (``wait_group 0``, which also frees tile t-1's stage of V); without it, each tile's P V is
    waited for before the next tile. ``consumers``: 2 or 3 consumer warpgroups (128 or
    192 query rows a CTA; :func:`default_consumers` where None). ``registers``: the
    producer's and the consumers' ``setmaxnreg`` counts (``REGISTERS`` by consumers
    where None). ``tma_store``: a consumer's O leaves through its own rows of Q's stage
    (no wgmma reads them after its last Q K^T), or of the O buffer (``o_buffer``), and
    one TMA store (``copy_async ->
    tma_auto``: the register tile into the swizzled rows, ``fence.proxy.async``, the
    consumer's named barrier, the store, ``cp.async.bulk.commit_group`` and
    ``wait_group.read``); else straight from the registers. Causal kernels take the
    query blocks heaviest first (CTA ``x`` of a head runs block ``blocks - 1 - x``), so
    the last CTAs are short. ``stages``: with the overlap 3 (V's stage is held from one
    tile's Q K^T to the next tile's P V, so two stages are the consumers'), and 4 at
    head dim 64 where four fit (on an H200 +3-4% at 4,096-16,384 rows, +3.4% causal at
    1,024, level at 1,024 and +0.6-0.9% causal at 4,096 and 8,192; 5 stages measured
    slower than 4); without it 2; 2 at head dim 256 and at head dim 128 with
    ``o_buffer``.
    ``block_n``: keys a tile, a multiple of 16 from 64 to 256
    (None: 128, 80 at head dim 256: FA3's tile there, two stages of
    it 160 KiB; on an H200 1.018 of cuDNN at 4,096 x 256 and 1.004 causal at 8,192,
    against 0.975 and 0.907 with 64-key tiles; FA3's 176 at head dim 128 measured no
    faster, docs/performance.md). ``omit``
    breaks it:
    ``"full_wait"`` and ``"empty_arrive"`` (every ring), ``"v_wait"`` (V's ring of a
    split kernel), ``"rescale"``, ``"first_turn"`` (nobody grants the first turn: a
    deadlock), ``"pv_wait"`` (the overlap's O and P touched before the P V wgmma is
    waited for), ``"store_fence"`` (O's rows stored by TMA with no proxy fence after
    they were written), ``"store_wait"`` (the CTA leaves while the store may still read
    them; with ``o_buffer``, also the next block writes O there before the last store
    read them), ``"q_empty_wait"`` (persistent: the producer loads the next head's Q without
    waiting for the consumers to be done with the stage). ``persistent`` (None: kernels up
    to 4,096 rows, causal ones where their blocks pair, below): a grid of at most ``sms`` CTAs
    (one an SM: 132 on an H100 or H200), ``blocks x min(heads, sms // blocks)``, each CTA
    taking one query block of every ``sms // blocks``-th head in turn: its producer loads
    the next head's Q once every consumer is done with Q's stage (a ``Q empty``
    mbarrier: the consumer stored its O out of it, or with ``o_buffer`` its block's last
    Q K^T is in) and the next K/V tiles into the ring while the consumers finish the last head,
    and the ping-pong runs on across heads (on an H200 2-3% faster than one CTA a block at S
    1024 and 4096; at 8192 1-4% slower, the last round part full; at 16384 x 64 a third
    slower: 86 blocks a head, so 86 CTAs); else one CTA a block. A causal persistent grid
    pairs the blocks: a CTA takes block ``blocks - 1 - p`` and then block ``p`` of each of
    its heads (``blocks - p`` and ``p + 1`` key tiles: every CTA the same work, which one
    CTA a block does not have), so ``blocks / 2 x min(heads, sms // (blocks / 2))`` CTAs;
    it takes an even number of whole blocks of whole key tiles (else a ValueError; one CTA
    a block runs the others); on an H200 at 1,024 rows 1.13-1.14 of cuDNN against
    0.93-0.995 one CTA a block. ``q_split`` (None: where
    the grid is persistent): each consumer's 64 rows of Q have their own full and empty
    mbarriers, so the producer loads the next head's rows of a consumer as soon as that
    consumer stored its O out of them, not after the last consumer did, and the next
    head's first key tile goes before them (its stage is free before the stores are done;
    on an H200 at 1,024-4,096 rows 0.1-4% faster than one Q barrier). ``o_buffer`` (the
    TMA store; None: persistent grids, where it fits in shared memory): O's rows go out
    through a buffer of their own, not Q's rows, so a consumer frees its rows of Q for
    the next block as soon as its block's last Q K^T is in (the next Q loads under the
    last tile's softmax, P V and the store of O) and waits for its last store to have
    read the buffer only before it writes the next block's O there (two stages of two
    rings at head dim 128); on an H200 at 1,024 x 128 1.08 of cuDNN against 0.99 without,
    causal 1,024 and 2,048 rows 5-8% faster, non-causal 4,096 rows 1-2% (with
    ``lane_sums``; without them it was 0.5-2% slower there). ``lane_sums``: each lane
    keeps its part of its rows' sums of P over the block and the quad's two shuffles add
    them once at the end, as FlashAttention-3 does, instead of once a key tile (None: but
    with two consumers at head dim 64 and non-causal at head dim 128 off the persistent
    grid; on an H200 +0.6-4% at S 1024-16384, the most at 1,024 x 128, and slower at
    causal 4,096 x 64 by 2% and at 16,384 x 128 by 0.2-1.8%). ``lagged_max``: after a
    block's first key tile, a tile's exponentials take the rows' last reference max (the
    first tile's, at first) instead of the tile's row max, so no max, no rescale of O and
    no shuffle stand before them (FlashAttention-4 rescales only where the max grew far);
    each lane's sum of its part of P then bounds every P of its rows, and where a lane's
    exceeds ``LAG_BOUND`` (P past 2^8, or infinite) the consumer's warpgroup votes
    (``bar.red.or``) to rebase the tile: Q K^T again (so K's stage, with a ring of its
    own, is freed after the vote, not once S is in), the row max, O and the sums
    rescaled, P again. It takes the overlap and the lane sums, and no ``ex2_emulation``
    (None: wherever those hold, with the lane sums then on by default; on an H200 1-13%
    faster, docs/performance.md). ``omit="rebase"``: the vote is ignored (a broken
    kernel); ``omit="idle_store"``: a consumer whose rows lie past its block's stores
    them anyway. ``lag_check``: where the lagged max's bound is checked: ``"tile"``, the
    warpgroup's vote on every lagged tile (above), or ``"block"``: each thread keeps a
    flag over the block's lagged tiles, against ``BLOCK_BOUND`` (2^15: P need only stay
    finite in float16; no vote, no rebase between them, and P V waited for before a
    tile's exponentials, so ptxas interleaves the rounding of P with them); at the
    block's end, after the consumer passed its turns, one vote a block marks the blocks
    where a lane passed it, and after the consumer's last block it computes those again:
    once every consumer is done (the rings' stages free), it loads its rows of Q and the
    key tiles its rows need by TMA into its rows of Q's stage and its own stage of each
    ring (an mbarrier of its own) and computes them as the loop's first tile (each tile's
    row max first, wgmma, no overlap and no turns), then stores them again. It takes
    ``lagged_max`` and a stage of each ring a consumer (a bit a block of the CTA's, in as
    many words as its blocks take); ``omit="recompute"``: the marks ignored (a broken
    kernel). On an H200 (float16,
    docs/performance.md, "The block check") it is 0-5% faster than the vote on random
    inputs (1,024 x 64: 1.828-1.845 of flash against 1.781-1.798), level at causal head
    dim 128; where scores grow along the keys it loses: with the keys from 128 on 2.5
    times (some rows past 2^15 somewhere in most heads) 1.16-1.24 times the vote's time,
    and where every block trips (4 and 16 times) a redo of each, 2.3-2.8 times its time
    on random keys against the vote's 1.2-1.6. Or ``"warp"``: as ``"block"`` (P V waited
    for before the exponentials, the block's flag, its redo), but each warp checks each
    lagged tile against ``LAG_BOUND`` (``__any_sync``: no barrier between warps) and,
    where a lane passed it, rebases its own rows on P's row max (the quad's shuffles; P, O
    and the sums scaled: no Q K^T again, no wgmma in the branch, so a warp's rows move
    alone); only a P past ``WARP_BOUND`` (2^120: float32's range) flags the block for its
    redo. On an H200 (docs/performance.md, "The warp's rebase") it is 0.7-2.8% faster
    than the vote on random inputs at head dim 64 and at 128 non-causal (1,024 x 64:
    1.823-1.835 of flash against 1.780-1.793), 0.8-2.7% slower causal at head dim 128,
    and 5-23% faster where the scores grow along the keys. None (the default): ``"warp"``
    at head dim 64 and at 128 non-causal (with ``lagged_max``, and a stage of each ring a
    consumer), else ``"tile"``.
    ``own_tiles``: a consumer computes only the key tiles its own rows need (causal: to
    its own diagonal, where the CTA's tiles reach its last consumer's; none
    where its rows start past the sequence's end, in a ragged last block) and, for the
    CTA's tiles past them, waits for the stage, passes its turn and frees the stage
    (without it, every consumer computes every tile of the CTA's). ``section`` (causal,
    one CTA a block): the launch order takes the heads ``section`` at a time and, within
    such a section, the query blocks heaviest first across its heads (as the LPT tile
    scheduler of FlashAttention's CuTe kernels does, its sections the heads whose K and V
    fit the L2), so the grid's last CTAs are the short blocks of the last heads (1: a
    head's blocks heaviest first, head after head; None: the most heads, dividing
    ``heads``, whose K and V take at most ``SECTION_BYTES``). ``balanced`` (non-causal,
    persistent, three consumers, where 192-row blocks leave a head a 64-row block: its
    64-row chunks number 3 q + 1 with q - 1 even; it takes ``own_tiles``): a head's rows
    are q - 1 blocks of 192 rows and two of 128 (their third consumer idle), and two CTAs
    take a head, each half the 192-row blocks and one of 128, so no CTA takes a whole
    block more than another (at 1,024 rows: five blocks of 192 and one of 64 over six
    CTAs a head left the busiest CTAs three whole blocks against 2.59 on average;
    balanced, two CTAs a head take two and a two-thirds block each; None: where it holds
    up to 1,024 rows: on an H200 3.4% faster at 1,024 x 64, 2.4% slower at 4,096 x 64).
    ``pdl`` (programmatic dependent launch): every thread waits for the grid before it in
    the stream to complete (``griddepcontrol.wait``, after the mbarriers' init, before any
    global access) and lets the next grid launch (``griddepcontrol.launch_dependents``),
    and the kernel's launch parameters carry TVM 0.27's tag for it, so its launch and
    prologue overlap the end of the grid before (on an H200 +1.7% at 1,024 x 64, +2.2%
    causal, +1.2% causal at 1,024 x 128, +0.9% at 16,384 x 64, level at 4,096 rows).
    """
    kv_heads = heads if kv_heads is None else kv_heads
    e2e = 0 if ex2_emulation is None else ex2_emulation
    if lagged_max is None:  # where the kernel takes it (on an H200 1-13% faster: docs)
        lagged_max = overlap and lane_sums is not False and not e2e
    block_n = (80 if d == 256 else 128) if block_n is None else block_n
    if dtype not in DTYPES:
        raise ValueError(f"dtype {dtype!r}: one of {DTYPES}")
    consumers = default_consumers(d, seq, causal, lagged_max) if consumers is None else consumers
    br = BM * consumers  # query rows per CTA
    if (d not in (64, 128, 256) or seq < 1 or (seq % br and not tma_store) or heads % kv_heads
            or omit not in WS_OMITS or block_n % 16 or not 64 <= block_n <= 256
            or consumers not in REGISTERS):  # fmt: skip
        raise ValueError(
            f"head dim {d} (64, 128 or 256), seq {seq} (1 or more; a multiple of {br} "
            f"without the TMA store), {heads} query heads over {kv_heads} key/value heads, block_n "
            f"{block_n} (a multiple of 16, 64 to 256), {consumers} consumers (2 or 3), omit {omit!r} (one of "
            f"{WS_OMITS})"
        )
    qbs, kts = -(-seq // br), -(-seq // block_n)  # query blocks, key tiles
    pairable = not (seq % br or qbs % 2 or br % block_n)  # causal blocks p, qbs - 1 - p
    if persistent is None:  # where it measured faster (an H200: S 1024-4096, not 8192+;
        # causal: where the blocks pair, to 4,096 rows; at head dim 64 with two consumers)
        persistent = seq <= 4096 and (pairable or not causal)
    if persistent and causal and not pairable:
        raise ValueError(
            "persistent: a causal persistent grid pairs query block p with block "
            f"{qbs} - 1 - p (equal work, p + 1 and {qbs} - p key tiles): it takes a "
            f"sequence of an even number of whole {br}-row blocks, each a whole "
            "number of key tiles (causal blocks of other lengths run one CTA a block)"
        )
    bn = block_n
    q_split = persistent if q_split is None else q_split
    q_bars = consumers if q_split else 1  # Q's full (and, persistent, empty) mbarriers
    if lag_check is None:  # the warp's rebase where it measured faster (an H200, 1-3%:
        # head dim 64, and 128 non-causal; causal at 128 the vote, 1-3% faster), and where
        # each consumer has a stage of each ring for a redo (the default stages: 3 or 4 at
        # head dim 64, 2 or 3 at 128)
        fits = (stages if stages is not None else 3 if d == 64 else 2) >= consumers
        warp = lagged_max and (d == 64 or d == 128 and not causal) and fits
        lag_check = "warp" if warp else "tile"
    redo_bars = consumers if lag_check != "tile" else 0  # a consumer's redo loads

    def rings_of(ob):  # (stages, split_kv) with or without the O buffer: at head dim 128
        narrow = ob and d == 128  # Q, O and two stages of K and V fill shared memory
        short = (d == 64 and persistent and not causal and seq <= 1024  # where the grid
                 and consumers == 3)  # may be balanced (measured at 1,024 x 64)  # fmt: skip
        sk = (d == 256 or narrow or short) if split_kv is None else split_kv
        if stages is not None:
            return stages, sk
        if overlap and d == 64:  # four where they fit (an H200: 3-4% faster from 4,096
            four = pool_of(ob, 4, sk)[-1] * 2 <= SHARED_BYTES  # rows, level at 1,024)
            return (4 if four else 3), sk
        return (3 if overlap and d < 256 and not narrow else 2), sk

    def pool_of(ob, st, sk):  # the pool's parts (elements of dtype; float32 and uint64
        o_at = br * d + 2 * st * bn * d  # index); Q, K's and V's stages, then O's rows,
        lse_at = (o_at + (br * d if ob else 0)) // 2  # the LSE rows and the mbarriers:
        bars_at = (lse_at + consumers * BM) // 2  # Q's full, the rings' full and empty,
        n_bars = q_bars + 2 * (2 if sk else 1) * st + (q_bars if persistent else 0) + redo_bars
        return o_at, lse_at, bars_at, n_bars, (bars_at + n_bars) * 4  # empty

    if o_buffer is None:  # where it measured faster (an H200) and fits: persistent grids
        o_buffer = persistent and tma_store
        o_buffer = o_buffer and pool_of(True, *rings_of(True))[-1] * 2 <= SHARED_BYTES
    if o_buffer and not tma_store:
        raise ValueError("o_buffer: O's rows go out through it by TMA; it takes tma_store")
    stages, split_kv = rings_of(o_buffer)
    registers = REGISTERS[consumers] if registers is None else registers
    if lane_sums is None and lagged_max:
        lane_sums = True
    if lane_sums is None:  # where it measured faster (an H200): not with two consumers at
        # head dim 64 (causal to 4,096 rows), nor non-causal at head dim 128 off the
        # persistent grid (8,192 rows and more)
        lane_sums = not (d == 64 and consumers == 2 or d == 128 and not (persistent or causal))
    if lagged_max and not (overlap and lane_sums and not e2e):
        raise ValueError(
            "lagged_max sums P per lane and votes between a tile's Q K^T and its P V, its "
            "exponentials on MUFU: it takes overlap=True, lane_sums=True and no "
            f"ex2_emulation (got overlap={overlap}, lane_sums={lane_sums}, ex2_emulation={e2e})"
        )
    if lag_check not in LAG_CHECKS:
        raise ValueError(f"lag_check {lag_check!r}: one of {LAG_CHECKS}")
    if lag_check != "tile" and not lagged_max:
        raise ValueError(
            f"lag_check {lag_check!r} checks the lagged max's bound without the tile vote and "
            "computes a block whose lanes passed it again: it takes lagged_max=True"
        )
    if (omit, lag_check) in (("recompute", "tile"), ("rebase", "block")):
        raise ValueError(
            f"omit {omit!r} breaks lag_check {'block' if omit == 'recompute' else 'tile'!r}; "
            f"with lag_check {lag_check!r} it would change nothing"
        )
    by_block = lag_check != "tile"  # a flag over a block's tiles, its check and redo
    by_warp = lag_check == "warp"  # each tile's bound by each warp: a rebase of its rows
    group = heads // kv_heads
    scale = LOG2E / math.sqrt(d)
    acc_s = fragments.wgmma_accumulator_layout(bn, 1)
    acc_o = fragments.wgmma_accumulator_layout(d, 1)
    rows = fragments.wgmma_rows_layout()
    parts = fragments.wgmma_row_parts_layout()
    blocks = d // 64
    q_l = ComposeLayout(3, 3, 3, TileLayout(S[(br, blocks, 64) : (64, br * 64, 1)]))
    kv_l = ComposeLayout(
        3, 3, 3, TileLayout(S[(stages, bn, blocks, 64) : (bn * d, 64, bn * 64, 1)])
    )
    q_at, k_at = 0, br * d  # elements of the pool
    v_at = k_at + stages * bn * d
    o_at, lse_at, bars_at, n_bars, pool_elems = pool_of(o_buffer, stages, split_kv)
    rings = 2 if split_kv else 1
    ring_at = q_bars  # the rings' full then empty mbarriers
    q_empty = ring_at + 2 * rings * stages  # (persistent) Q's rows stored out, per q_bars
    redo_at = q_empty + (q_bars if persistent else 0)  # (by_block) a consumer's redo loads
    if pool_elems * 2 > SHARED_BYTES:
        raise ValueError(
            f"{consumers} consumers, head dim {d}, {stages} stages of {bn} keys"
            f"{', an O buffer' if o_buffer else ''}: {pool_elems * 2} bytes of shared "
            f"memory, more than {SHARED_BYTES}: take fewer stages, consumers or keys a tile"
            f"{' (or o_buffer=False)' if o_buffer else ''}"
        )
    # a box reaching past the tensor still delivers its whole size (zeros there)
    q_bytes, tile_bytes = br * d * 2 // q_bars, bn * d * 2  # q_bytes: one Q mbarrier's
    tail = seq - (qbs - 1) * br  # the rows of the last query block: 1 to br
    tails = tuple(min(BM, max(0, tail - c * BM)) for c in range(consumers))  # per consumer
    last = (qbs - 1) * br  # its first row
    paired = persistent and causal  # a CTA takes blocks p and qbs - 1 - p of a head
    ordered = causal and not persistent  # one CTA a block, heaviest first

    def section_kv(n):  # key/value heads the widest section of n heads reads
        return max((k * n + n - 1) // group - k * n // group + 1 for k in range(heads // n))

    if section is None:  # the most heads whose K and V fit SECTION_BYTES, dividing heads
        fits = [n for n in range(1, heads + 1) if heads % n == 0
                and section_kv(n) * seq * d * 2 * 2 <= SECTION_BYTES]  # fmt: skip
        section = max(fits, default=1) if ordered else 1
    if section < 1 or heads % section or (section > 1 and not ordered):
        raise ValueError(
            f"section {section}: a divisor of the {heads} heads, and 1 but for causal "
            "kernels of one CTA a block (persistent=False)"
        )
    units = seq // BM  # (balanced) a head's 64-row chunks: 3 q + 1
    balances = not (causal or not persistent or consumers != 3 or not tma_store or not own_tiles
                    or seq % BM or units % 3 != 1 or units < 4 or (units - 4) // 3 % 2)  # fmt: skip
    if balanced is None:  # where it measured faster (an H200): 1,024 rows, not 4,096
        balanced = balances and seq <= 1024
    if balanced and not balances:
        raise ValueError(
            f"balanced: a non-causal persistent grid of three consumers with the TMA store "
            f"and own_tiles (the 128-row blocks' third consumer computes and stores nothing), "
            f"over 64-row chunks numbering 3 q + 1 with q - 1 even (seq {seq}: {seq / BM:g} "
            f"chunks; causal={causal}, persistent={persistent}, consumers={consumers}, "
            f"own_tiles={own_tiles})"
        )
    per = (units - 4) // 6 + 1 if balanced else 1  # (balanced) blocks a CTA takes a head
    wide = per - 1  # of them, 192-row blocks

    def narrow_at(qx):  # (balanced) the first row of column qx's 128-row block
        return 2 * wide * br + qx * 2 * BM

    columns = 2 if balanced else qbs // 2 if paired else qbs * section  # CTAs a head's
    head_ctas = (min(heads, max(1, sms // columns)) if persistent
                 else heads // section)  # a column's CTAs  # fmt: skip
    rounds = -(-heads // head_ctas)  # (persistent) heads a CTA takes at most
    pair_tiles = (qbs + 1) * (br // bn) if paired else 0  # key tiles of a pair of blocks
    cta_blocks = 2 * rounds if paired else rounds * per if balanced else rounds if persistent else 1
    if by_block and stages < consumers:
        raise ValueError(
            f"lag_check {lag_check!r} redoes a consumer's blocks through its own stage of each "
            f"ring: it takes at least one stage a consumer (got {stages} stages, {consumers} "
            f"consumers): take more stages or fewer consumers"
        )
    redo_words = -(-cta_blocks // 32)  # (by_block) a bit a block of the CTA's
    wait_full, arrive_empty = omit != "full_wait", omit != "empty_arrive"
    rescale = omit != "rescale"
    first_turn = omit != "first_turn"
    early_q = persistent and o_buffer  # Q free after the last Q K^T

    def tiles_of(qb):  # key tiles of query block qb: causal, to its diagonal (and the end)
        return tiles_from(qb * br)

    def tiles_from(r0):  # key tiles of the block of rows r0 to r0 + br - 1
        return T.min((r0 + br - 1) // bn + 1, kts) if causal else kts

    # a consumer's rows may start past the end (or, balanced, past its block's)
    idle = own_tiles and (0 in tails or balanced)

    def tiles_mine(q0, stop):  # key tiles of a consumer's rows q0 to q0 + BM - 1 (own_tiles)
        n = T.min((q0 + BM - 1) // bn + 1, kts) if causal else kts
        return T.if_then_else(q0 < stop, n, 0) if idle else n

    @T.macro
    def turn(c):  # ping-pong: wait for my turn to issue
        if pingpong:
            T.ptx.bar.sync(T.Cast("uint32", 1 + c), 256)

    @T.macro
    def pass_turn(c, t, n_tiles, more):  # the next consumer's turn (unless it has no more)
        if pingpong:
            if c < consumers - 1 or t < n_tiles - 1 or more:
                T.ptx.bar.arrive(T.Cast("uint32", 1 + (c + 1) % consumers), 256)

    @T.macro
    def lse_tail(c, cs, h, LSE, lse_s):  # consumer cs's LSE rows of the last query block
        if tails[cs] > 0:
            if c == cs:
                Tx.wg.copy(LSE[h, last + cs * BM : last + cs * BM + tails[cs]],
                           lse_s[cs, 0 : tails[cs]])  # fmt: skip

    @T.macro
    def mask(S_r, t, q0):
        if causal:  # key t bn + j is masked from query q0 + i past it (and so the keys
            # past the end from the rows before it; the rows past it are not stored)
            if t * bn + bn - 1 > q0:  # the tile crosses this consumer's diagonal
                Tx.wg.select(S_r[:, :], S_r[:, :], T.float32(-math.inf),
                             lambda i, j: t * bn + j <= q0 + i)  # fmt: skip
        elif seq % bn != 0:  # the last tile's keys past the end (TMA read zeros there)
            if t == kts - 1:
                Tx.wg.select(S_r[:, :], S_r[:, :], T.float32(-math.inf),
                             lambda i, j: t * bn + j < seq)  # fmt: skip

    def full(ring, g):  # ring 0: K (and V, not split), 1: V; announces tile g's bytes
        return ring_at + ring % rings * stages + g % stages

    def empty(ring, g):  # every consumer is done with tile g's stage of the ring
        return ring_at + (rings + ring % rings) * stages + g % stages

    def q_full(c):  # Q's rows of consumer c (all of Q without q_split) have landed
        return c if q_split else 0

    def q_free(c):  # (persistent) consumer c (every consumer) stored O out of Q's rows
        return q_empty + (c if q_split else 0)

    def redo_bar(c):  # (by_block) consumer c's redo tile (K, V; Q with the first) landed
        return redo_at + c

    @T.macro
    def release_q(b, c, tid_wg, last):  # (the O buffer) Q's rows are free once
        if early_q:  # the block's last Q K^T is in: the next block's may load
            if last:
                if tid_wg == 0:
                    T.ptx["mbarrier.arrive.shared.b64"](b.bars.ptr_to([q_free(c)]))

    @T.macro
    def wait_stage(bars, ring, g):  # (one ring: V came with K)
        if wait_full and (ring == 0 or (split_kv and omit != "v_wait")):
            T.cuda.mbarrier_wait(bars.ptr_to([full(ring, g)]), (g // stages) % 2)

    @T.macro
    def free_stage(bars, ring, g, tid_wg):  # (one ring: freed after P V)
        if arrive_empty and (split_kv or ring == 1):
            if tid_wg == 0:  # this consumer is done with the stage
                T.ptx["mbarrier.arrive.shared.b64"](bars.ptr_to([empty(ring, g)]))

    @T.macro
    def load_tile(b, ring, g, kv, t):  # the producer: tile t of K or V (or both: one ring)
        if g >= stages:  # the stage held tile g - stages: every consumer done?
            T.cuda.mbarrier_wait(b.bars.ptr_to([empty(ring, g)]), (g // stages - 1) % 2)
        T.evaluate(T.ptx["mbarrier.arrive.expect_tx.shared.b64"](
            b.bars.ptr_to([full(ring, g)]), tile_bytes * (1 if split_kv else 2)))  # fmt: skip
        if ring == 0:
            Tx.copy_async(b.K_s[g % stages, :, :], b.K[kv, t * bn : t * bn + bn, :],
                          mbar=b.bars.ptr_to([full(ring, g)]))  # fmt: skip
        if ring == 1 or not split_kv:
            Tx.copy_async(b.V_s[g % stages, :, :], b.V[kv, t * bn : t * bn + bn, :],
                          mbar=b.bars.ptr_to([full(ring, g)]))  # fmt: skip

    @T.macro
    def issue_qk(b, c, g):  # S = Q K^T of the CTA's tile g (wgmma from shared memory)
        Tx.wg.gemm_async(b.S_r[:, :], b.Q_s[c * BM : c * BM + BM, :], b.K_s[g % stages, :, :],
                         transA=False, transB=False)  # fmt: skip
        T.ptx["wgmma.commit_group.sync.aligned"]()

    @T.macro
    def issue_pv(b, g):  # O += P V of the CTA's tile g (P, wgmma's A, in registers)
        Tx.wg.gemm_async(b.O_r[:, :], b.P16[:, :], b.V_s[g % stages, :, :], transA=False,
                         transB=True, accum=True)  # fmt: skip
        T.ptx["wgmma.commit_group.sync.aligned"]()

    @T.macro
    def load_q(
        b, i, r0, h, c
    ):  # (i: the CTA's block, counted from 0)  # Q's rows of consumer c (all of Q without q_split)
        if i > 0 and omit != "q_empty_wait":  # they stored the last block's O out of them
            T.cuda.mbarrier_wait(b.bars.ptr_to([q_free(c)]), (i - 1) % 2)
        T.evaluate(T.ptx["mbarrier.arrive.expect_tx.shared.b64"](
            b.bars.ptr_to([q_full(c)]), q_bytes))  # fmt: skip
        if q_split:
            q0 = T.meta_var(r0 + c * BM)
            Tx.copy_async(b.Q_s[c * BM : c * BM + BM, :], b.Q[h, q0 : q0 + BM, :],
                          mbar=b.bars.ptr_to([q_full(c)]))  # fmt: skip
        else:
            Tx.copy_async(b.Q_s[:, :], b.Q[h, r0 : r0 + br, :],
                          mbar=b.bars.ptr_to([q_full(c)]))  # fmt: skip

    def vote(b, c, cond) -> None:
        """Consumer c's warpgroup vote (``bar.red.or``, named barrier 9 + c) into
        ``b.vote``: does ``cond`` hold on any of its threads? (Its register is then the
        warpgroup's alike, provably: a branch on it keeps whole warpgroups.)"""
        T.evaluate(T.ptx["bar.red.or.pred"](b.vote[0], T.uint32(9 + c), T.uint32(128),
                                            T.ptx.pred(cond)))  # fmt: skip

    def any_word(words):
        """The redo mask's words or-ed together: not 0 where any block's bit is set."""
        word = words[0]
        for k in range(1, redo_words):
            word = word | words[k]
        return word

    def fresh_rows(b) -> None:
        """A block's rows before its first tile: O 0, the running max -inf, the sums 0."""
        Tx.wg.fill(b.O_r[:, :], T.float32(0.0))
        Tx.wg.fill(b.m_old[:, :], T.float32(-math.inf))
        Tx.wg.fill(b.l_run[:, :], T.float32(0.0))

    @T.macro
    def lagged_tile(b, c, g, t, q0):
        """(``lagged_max``) Tile t's P against the rows' reference max ``m_old`` (its bias
        ``-m_old scale`` in ``l_tile``), each lane's sums of its part of P in ``l_lane``,
        and the warpgroup's vote: does any lane's pass ``LAG_BOUND``? Then rebase: S
        again, the row max, alpha, O and the running sums rescaled, P again."""
        lagged_rows(b.S_r, b.l_lane, b.l_tile, scale)
        mine = T.decl_buffer((2,), "float32", data=b.l_lane.data, scope="local")
        vote(b, c, lane_total(mine, 2) > T.float32(LAG_BOUND))
        if omit != "rebase":
            if b.vote[0] != T.uint32(0):
                issue_qk(b, c, g)
                T.ptx["wgmma.wait_group.sync.aligned"](0)  # (P V of tile g - 1 too)
                mask(b.S_r, t, q0)
                rebase_rows(b.S_r, b.O_r, b.m_old, b.m_new, b.alpha, b.l_run, b.l_lane,
                            b.l_tile, scale, rescale)  # fmt: skip

    @T.macro
    def warp_check(b, mine):
        """(``lag_check="warp"``) Did a lane of the warp pass ``LAG_BOUND`` on this tile
        (``__any_sync``)? Then the warp rebases its rows on P's row max
        (:func:`rebase_warp_rows`); where that max passed ``WARP_BOUND`` (P may have left
        float32's range) the block is flagged for its redo."""
        passed = T.meta_var(lane_total(mine, 2) > T.float32(LAG_BOUND))
        if omit != "rebase":  # (omitted: the vote taken and ignored, a broken kernel)
            if T.cuda.any_sync(T.uint32(0xFFFFFFFF), passed) != 0:
                rebase_warp_rows(b.S_r, b.O_r, b.m_old, b.m_new, b.alpha, b.l_run, b.l_lane,
                                 b.l_tile, scale, rescale)  # fmt: skip
                top = T.decl_buffer((2,), "float32", data=b.alpha.data, scope="local")
                far = T.meta_var(T.Or(top[0] < T.float32(1.0 / WARP_BOUND),
                                      top[1] < T.float32(1.0 / WARP_BOUND)))  # fmt: skip
                b.trip[0] = b.trip[0] | T.Cast("uint32", far)
                Tx.wg.cast(b.P16[:, :], b.S_r[:, :])  # P rounded again
        else:
            T.evaluate(T.cuda.any_sync(T.uint32(0xFFFFFFFF), passed))

    @T.macro
    def check_block(b, i, c):
        """(``lag_check="block"``, ``"warp"``) Did any lane of the consumer pass the bound
        on a lagged tile of block i (one vote a block)? Then its bit in ``b.redo``: the block is
        computed again after the CTA's last (:func:`redo_block`)."""
        vote(b, c, b.trip[0] != T.uint32(0))
        if omit != "recompute":
            if b.vote[0] != T.uint32(0):
                w = T.meta_var(0 if redo_words == 1 else i // 32)  # (a constant index
                b.redo[w] = b.redo[w] | (T.uint32(1) << T.Cast("uint32", i % 32))  # keeps it
                # in a register where one word does)

    @T.macro
    def produce(b, i, base, r0, h):
        """The producer's first thread: block i (of this CTA), query rows from r0, of head
        h. Tile t is the CTA's tile base + t: its stage and the phases follow from that."""
        kv = T.meta_var(h // group)
        n_tiles = T.meta_var(tiles_from(r0))
        if not q_split:
            load_q(b, i, r0, h, 0)
        for t in T.serial(n_tiles):  # V a tile behind K: P V of tile t - 1 goes with
            load_tile(b, 0, base + t, kv, t)  # Q K^T of tile t
            if q_split and t == 0:  # each consumer's rows of Q, after tile 0
                for c in range(consumers):
                    load_q(b, i, r0, h, c)
            if split_kv and t > 0:
                load_tile(b, 1, base + t - 1, kv, t - 1)
        if split_kv:
            load_tile(b, 1, base + n_tiles - 1, kv, n_tiles - 1)

    @T.macro
    def own_tiles_of(b, base, c, tid_wg, more, n_tiles, n_mine, q0):
        """Consumer c's key tiles (the first ``n_mine`` of the CTA's ``n_tiles``): S, the
        online softmax and O += P V."""
        if overlap:
            # tile 0: S, its softmax and P; its P V goes with tile 1's Q K^T
            wait_stage(b.bars, 0, base)
            turn(c)
            issue_qk(b, c, base)
            pass_turn(c, 0, n_tiles, more)
            T.ptx["wgmma.wait_group.sync.aligned"](0)
            free_stage(b.bars, 0, base, tid_wg)
            release_q(b, c, tid_wg, n_mine == 1)
            mask(b.S_r, 0, q0)
            online_softmax(b.S_r, b.P16, b.O_r, b.m_old, b.m_new, b.alpha, b.l_run, b.l_tile,
                           scale, rescale, ex2_emulation=e2e)  # fmt: skip
            for t in T.serial(1, n_mine):
                g = T.meta_var(base + t)
                wait_stage(b.bars, 0, g)
                wait_stage(b.bars, 1, g - 1)
                turn(c)
                issue_qk(b, c, g)
                issue_pv(b, g - 1)
                pass_turn(c, t, n_tiles, more)
                T.ptx["wgmma.wait_group.sync.aligned"](1)  # S is in; P V still runs
                if by_block:  # P V waited for too (so ptxas interleaves the rounding of P
                    # with the exponentials; the overlap of P V with them is given up),
                    if omit != "pv_wait":  # no vote: a flag
                        T.ptx["wgmma.wait_group.sync.aligned"](0)
                    free_stage(b.bars, 1, g - 1, tid_wg)
                    mask(b.S_r, t, q0)
                    lagged_rows(b.S_r, b.l_lane, b.l_tile, scale)
                    mine = T.decl_buffer((2,), "float32", data=b.l_lane.data, scope="local")
                    if by_warp:  # P rounded with the exponentials, again in a rebase
                        Tx.wg.cast(b.P16[:, :], b.S_r[:, :])
                        free_stage(b.bars, 0, g, tid_wg)
                        release_q(b, c, tid_wg, t == n_mine - 1)
                        warp_check(b, mine)
                        Tx.wg.add(b.l_run[:, :], b.l_run[:, :], b.l_lane[:, :])
                    else:
                        passed = T.meta_var(lane_total(mine, 2) > T.float32(BLOCK_BOUND))
                        b.trip[0] = b.trip[0] | T.Cast("uint32", passed)
                        free_stage(b.bars, 0, g, tid_wg)
                        release_q(b, c, tid_wg, t == n_mine - 1)
                        Tx.wg.add(b.l_run[:, :], b.l_run[:, :], b.l_lane[:, :])
                        Tx.wg.cast(b.P16[:, :], b.S_r[:, :])
                elif lagged_max:  # (a rebase reads Q's rows and K's stage again)
                    mask(b.S_r, t, q0)
                    lagged_tile(b, c, g, t, q0)
                    free_stage(b.bars, 0, g, tid_wg)
                    release_q(b, c, tid_wg, t == n_mine - 1)
                else:
                    free_stage(b.bars, 0, g, tid_wg)
                    release_q(b, c, tid_wg, t == n_mine - 1)
                    mask(b.S_r, t, q0)
                    softmax_rows(b.S_r, b.m_old, b.m_new, b.alpha, b.l_run, b.l_tile, scale,
                                 ex2_emulation=e2e)  # fmt: skip
                if not by_block:
                    if omit != "pv_wait":
                        T.ptx["wgmma.wait_group.sync.aligned"](0)  # P V is in: O, P free
                    free_stage(b.bars, 1, g - 1, tid_wg)
                    if lagged_max:
                        Tx.wg.add(b.l_run[:, :], b.l_run[:, :], b.l_lane[:, :])
                        Tx.wg.cast(b.P16[:, :], b.S_r[:, :])
                    else:
                        rescale_and_round(b.S_r, b.P16, b.O_r, b.m_old, b.m_new, b.alpha,
                                          rescale)  # fmt: skip
            g_last = T.meta_var(base + n_mine - 1)
            wait_stage(b.bars, 1, g_last)
            issue_pv(b, g_last)
            T.ptx["wgmma.wait_group.sync.aligned"](0)
            free_stage(b.bars, 1, g_last, tid_wg)
        else:
            for t in T.serial(n_mine):
                g = T.meta_var(base + t)
                wait_stage(b.bars, 0, g)
                turn(c)
                issue_qk(b, c, g)
                pass_turn(c, t, n_tiles, more)
                T.ptx["wgmma.wait_group.sync.aligned"](0)
                free_stage(b.bars, 0, g, tid_wg)
                release_q(b, c, tid_wg, t == n_mine - 1)
                mask(b.S_r, t, q0)
                online_softmax(b.S_r, b.P16, b.O_r, b.m_old, b.m_new, b.alpha, b.l_run,
                               b.l_tile, scale, rescale, ex2_emulation=e2e)  # fmt: skip
                wait_stage(b.bars, 1, g)
                issue_pv(b, g)
                T.ptx["wgmma.wait_group.sync.aligned"](0)
                free_stage(b.bars, 1, g, tid_wg)

    @T.macro
    def store_o(b, i, r0, h, c, tid_wg, q0):
        """Consumer c's rows of O and the LSE, from q0 (block i of the CTA's, rows from r0
        of head h)."""
        finish(b.O_r, b.O16, b.m_old, b.l_sum, b.l_tile, scale,
               parts=b.l_run if lane_sums else None)  # fmt: skip
        if tma_store:  # through the consumer's rows of Q's stage or of the O buffer
            if o_buffer and omit != "store_wait":  # (clipped at the end)
                if i > 0:  # the last block's store has read the rows
                    if tid_wg == 0:
                        T.ptx["cp.async.bulk.wait_group.read"](0)
                    T.cuda.warpgroup_sync(1 + consumers + c)
            Tx.wg.copy(b.O_s[c * BM : c * BM + BM, :], b.O16[:, :])
            Tx.wg.copy(b.lse_w[c, :, :], b.l_tile[:, :])
            if omit != "store_fence":
                T.ptx["fence.proxy.async.shared::cta"]()
            T.cuda.warpgroup_sync(1 + consumers + c)
            Tx.wg.copy_async(b.Out[h, q0 : q0 + BM, :], b.O_s[c * BM : c * BM + BM, :])
            if tid_wg == 0:
                T.ptx["cp.async.bulk.commit_group"]()
            # LSE: 64 floats, a plain copy (a tensor map needs rows of 16 bytes)
            if tail == br or balanced:
                Tx.wg.copy(b.LSE[h, q0 : q0 + BM], b.lse_s[c, :])
            else:  # the last block stores its rows before the end only
                if r0 < last:
                    Tx.wg.copy(b.LSE[h, q0 : q0 + BM], b.lse_s[c, :])
                else:  # (rows counted from the last block's first)
                    lse_tail(c, 0, h, b.LSE, b.lse_s)
                    lse_tail(c, 1, h, b.LSE, b.lse_s)
                    if consumers > 2:
                        lse_tail(c, 2, h, b.LSE, b.lse_s)
        else:
            Tx.wg.copy(b.Out[h, q0 : q0 + BM, :], b.O16[:, :])
            Tx.wg.copy(b.LSE_rows[h, q0 : q0 + BM, :], b.l_tile[:, :])

    @T.macro
    def consume(b, i, base, r0, h, c, tid_wg, more, stop):
        """Consumer c's 64 rows of block i (of this CTA): query rows from r0 of head h,
        before row ``stop`` (the end, or with ``balanced`` one past the block's last);
        ``more``: this CTA has a later block (the ping-pong goes on into it)."""
        n_tiles = T.meta_var(tiles_from(r0))  # the CTA's key tiles
        q0 = T.meta_var(r0 + c * BM)  # the consumer's first row in the head
        n_mine = T.meta_var(tiles_mine(q0, stop) if own_tiles else n_tiles)  # its own
        fresh_rows(b)
        if by_block:  # no lane passed the bound on this block's lagged tiles yet
            b.trip[0] = T.uint32(0)
        T.cuda.mbarrier_wait(b.bars.ptr_to([q_full(c)]), i % 2)
        if pingpong and first_turn:
            if i == 0:
                if c == consumers - 1:  # consumer 0 issues first
                    T.ptx.bar.arrive(1, 256)
        if idle:  # rows past the end (the block's) compute nothing (n_mine is 0)
            if q0 < stop:
                own_tiles_of(b, base, c, tid_wg, more, n_tiles, n_mine, q0)
        else:
            own_tiles_of(b, base, c, tid_wg, more, n_tiles, n_mine, q0)
        if own_tiles:  # the CTA's tiles past the consumer's: its turn passed, stages freed
            for t in T.serial(n_mine, n_tiles):
                g = T.meta_var(base + t)
                wait_stage(b.bars, 0, g)
                turn(c)
                pass_turn(c, t, n_tiles, more)
                free_stage(b.bars, 0, g, tid_wg)
                release_q(b, c, tid_wg, t == 0)  # (rows past the end: no Q K^T released it)
                wait_stage(b.bars, 1, g)
                free_stage(b.bars, 1, g, tid_wg)
        if by_block:  # (after the turns passed above: the vote holds up no other consumer)
            if idle:
                if q0 < stop:
                    check_block(b, i, c)
            else:
                check_block(b, i, c)
        if idle and omit != "idle_store":  # rows past the end (the block's): no store
            if q0 < stop:
                store_o(b, i, r0, h, c, tid_wg, q0)
        else:
            store_o(b, i, r0, h, c, tid_wg, q0)
        if tid_wg == 0:
            if tma_store and omit != "store_wait":  # the store has read the rows (before
                if not o_buffer:  # the CTA leaves or refills them; the O buffer's:
                    T.ptx["cp.async.bulk.wait_group.read"](0)  # before the next block
                elif not more:  # writes them, or the CTA leaves)
                    T.ptx["cp.async.bulk.wait_group.read"](0)
            if persistent and not early_q:  # Q's stage is free for the next block
                T.ptx["mbarrier.arrive.shared.b64"](b.bars.ptr_to([q_free(c)]))
        if persistent and not pingpong:  # every thread done with lse_s before the next
            T.cuda.warpgroup_sync(1 + consumers + c)  # block writes it

    @T.macro
    def redo_wait(b, c):  # (by_block) consumer c's redo load has landed
        T.cuda.mbarrier_wait(b.bars.ptr_to([redo_bar(c)]), b.redo_n[0] % 2)
        b.redo_n[0] = b.redo_n[0] + 1

    @T.macro
    def redo_block(b, i, r0, h, c, tid_wg, q0, stop):
        """(``lag_check="block"``, ``"warp"``) Consumer c's rows of block i again, where a lane passed
        the bound on a lagged tile: after every consumer's blocks (the rings' stages are
        free), the consumer loads its rows of Q into its rows of Q's stage and the key
        tiles its rows need into its own stage of each ring, by TMA on an mbarrier of its
        own, and computes them as the loop's first tile, each tile's row max first (wgmma,
        no overlap, no turns); then the store, as the block's."""
        kv = T.meta_var(h // group)
        fresh_rows(b)
        for t in T.serial(tiles_mine(q0, stop)):
            if tid_wg == 0:  # (Q's rows with the first tile: one phase, one wait; each
                # phase armed after every warp's wait on the last, by the sync below)
                T.evaluate(T.ptx["mbarrier.arrive.expect_tx.shared.b64"](
                    b.bars.ptr_to([redo_bar(c)]),
                    T.if_then_else(t == 0, T.uint32(2 * tile_bytes + BM * d * 2),
                                   T.uint32(2 * tile_bytes))))  # fmt: skip
                if t == 0:
                    Tx.copy_async(b.Q_s[c * BM : c * BM + BM, :], b.Q[h, q0 : q0 + BM, :],
                                  mbar=b.bars.ptr_to([redo_bar(c)]))  # fmt: skip
                Tx.copy_async(b.K_s[c, :, :], b.K[kv, t * bn : t * bn + bn, :],
                              mbar=b.bars.ptr_to([redo_bar(c)]))  # fmt: skip
                Tx.copy_async(b.V_s[c, :, :], b.V[kv, t * bn : t * bn + bn, :],
                              mbar=b.bars.ptr_to([redo_bar(c)]))  # fmt: skip
            redo_wait(b, c)
            issue_qk(b, c, c)  # (tile c of the rings: stage c)
            T.ptx["wgmma.wait_group.sync.aligned"](0)
            mask(b.S_r, t, q0)
            online_softmax(b.S_r, b.P16, b.O_r, b.m_old, b.m_new, b.alpha, b.l_run, b.l_tile,
                           scale, rescale)  # fmt: skip
            issue_pv(b, c)
            T.ptx["wgmma.wait_group.sync.aligned"](0)
            T.cuda.warpgroup_sync(1 + consumers + c)  # every warp's wgmma read the stage
        store_o(b, i, r0, h, c, tid_wg, q0)
        if tid_wg == 0:
            if tma_store:  # the store has read the rows (before the next redo or the end)
                T.ptx["cp.async.bulk.wait_group.read"](0)
        T.cuda.warpgroup_sync(1 + consumers + c)  # every thread done with lse_s

    @T.macro
    def visit(b, i, base, r0, h, c, tid_wg, more, stop, redo):
        """Block i of the CTA: its consumption, or (``redo``) its recompute where its bit
        in ``b.redo`` is set."""
        if redo:
            w = T.meta_var(0 if redo_words == 1 else i // 32)
            bit = T.meta_var((b.redo[w] >> T.Cast("uint32", i % 32)) & T.uint32(1))
            vote(b, c, bit != T.uint32(0))
            if b.vote[0] != T.uint32(0):
                if idle:  # (rows past the end, or the block's: never set, and not stored)
                    if r0 + c * BM < stop:
                        redo_block(b, i, r0, h, c, tid_wg, r0 + c * BM, stop)
                else:
                    redo_block(b, i, r0, h, c, tid_wg, r0 + c * BM, stop)
        else:
            consume(b, i, base, r0, h, c, tid_wg, more, stop)

    @T.macro
    def blocks(b, qx, hx, c, tid_wg, redo):
        """Consumer c's blocks of the CTA, in the producer's order (``redo``: those whose
        bit in ``b.redo`` is set, computed again)."""
        if paired:
            for i in T.serial(rounds):
                if hx + i * head_ctas < heads:
                    visit(b, 2 * i, i * pair_tiles, (qbs - 1 - qx) * br,
                          hx + i * head_ctas, c, tid_wg, T.bool(True), seq, redo)  # fmt: skip
                    visit(b, 2 * i + 1, i * pair_tiles + tiles_of(qbs - 1 - qx), qx * br,
                          hx + i * head_ctas, c, tid_wg,
                          hx + i * head_ctas + head_ctas < heads, seq, redo)  # fmt: skip
        elif balanced:
            for i in T.serial(rounds):
                if hx + i * head_ctas < heads:
                    if wide > 0:  # the 192-row blocks, then one of 128
                        for j in T.serial(wide):
                            visit(b, i * per + j, (i * per + j) * kts,
                                  (qx * wide + j) * br, hx + i * head_ctas, c, tid_wg,
                                  T.bool(True), seq, redo)  # fmt: skip
                    visit(b, i * per + wide, (i * per + wide) * kts, narrow_at(qx),
                          hx + i * head_ctas, c, tid_wg,
                          hx + i * head_ctas + head_ctas < heads,
                          narrow_at(qx) + 2 * BM, redo)  # fmt: skip
        elif persistent:
            for i in T.serial(rounds):
                if hx + i * head_ctas < heads:
                    visit(b, i, i * kts, qx * br, hx + i * head_ctas, c, tid_wg,
                          hx + i * head_ctas + head_ctas < heads, seq, redo)  # fmt: skip
        else:
            visit(b, 0, 0, (qbs - 1 - qx // section if causal else qx) * br,
                  hx * section + qx % section, c, tid_wg, T.bool(False), seq, redo)  # fmt: skip

    @T.macro
    def redo_pass(b, qx, hx, c, tid_wg):
        """(``lag_check="block"``, ``"warp"``) After the consumer's last block: where it set a block's
        bit, it waits for every consumer to finish (the rings' stages are then free, the
        producer's loads all landed) and computes those blocks again; where it set none, it
        only says it is done (``bar.arrive``: no wait)."""
        vote(b, c, any_word(b.redo) != T.uint32(0))
        if b.vote[0] != T.uint32(0):
            T.ptx.bar.sync(T.uint32(REDO_BARRIER), consumers * 128)
            b.redo_n[0] = 0
            if tid_wg == 0:
                if tma_store:  # the block's first store of the rows landed (not only read)
                    T.ptx["cp.async.bulk.wait_group"](0)
            blocks(b, qx, hx, c, tid_wg, True)
        else:
            T.ptx.bar.arrive(T.uint32(REDO_BARRIER), consumers * 128)

    # fmt: off
    @T.prim_func
    def attention_ws(Q_ptr: T.handle, K_ptr: T.handle, V_ptr: T.handle, O_ptr: T.handle,
                     LSE_ptr: T.handle):
        Q = T.match_buffer(Q_ptr, (heads, seq, d), dtype)
        K = T.match_buffer(K_ptr, (kv_heads, seq, d), dtype)
        V = T.match_buffer(V_ptr, (kv_heads, seq, d), dtype)
        Out = T.match_buffer(O_ptr, (heads, seq, d), dtype)
        LSE = T.match_buffer(LSE_ptr, (heads, seq), "float32")
        LSE_rows = T.decl_buffer((heads, seq, 1), "float32", LSE.data)  # l_tile's shape
        T.device_entry()
        qx, hx = T.cta_id([columns, head_ctas])
        wg = T.warpgroup_id([1 + consumers])
        T.warp_id_in_wg([4])
        T.lane_id([32])
        tid_wg = T.thread_id_in_wg([128])
        tid = T.thread_id([(1 + consumers) * 128])
        pool = T.alloc_buffer((pool_elems,), dtype, scope="shared.dyn", align=1024)
        Q_s = T.decl_buffer((br, d), dtype, pool.data, elem_offset=q_at,
                            scope="shared.dyn", layout=q_l)
        O_s = T.decl_buffer((br, d), dtype, pool.data, elem_offset=o_at if o_buffer else q_at,
                            scope="shared.dyn", layout=q_l)  # O's rows out (or Q's)
        K_s = T.decl_buffer((stages, bn, d), dtype, pool.data, elem_offset=k_at,
                            scope="shared.dyn", layout=kv_l)
        V_s = T.decl_buffer((stages, bn, d), dtype, pool.data, elem_offset=v_at,
                            scope="shared.dyn", layout=kv_l)
        bars = T.decl_buffer((n_bars,), "uint64", pool.data, elem_offset=bars_at,
                             scope="shared.dyn")  # Q full, K/V full, K/V empty, Q empty
        lse_w = T.decl_buffer((consumers, BM, 1), "float32", pool.data, elem_offset=lse_at,
                              scope="shared.dyn")  # the consumers' LSE rows, written
        lse_s = T.decl_buffer((consumers, BM), "float32", pool.data, elem_offset=lse_at,
                              scope="shared.dyn")  # and read as rows
        S_r = T.alloc_buffer((BM, bn), "float32", scope="local", layout=acc_s)
        P16 = T.alloc_buffer((BM, bn), dtype, scope="local", layout=acc_s)
        O_r = T.alloc_buffer((BM, d), "float32", scope="local", layout=acc_o)
        O16 = T.alloc_buffer((BM, d), dtype, scope="local", layout=acc_o)
        m_old = T.alloc_buffer((BM, 1), "float32", scope="local", layout=rows)
        m_new = T.alloc_buffer((BM, 1), "float32", scope="local", layout=rows)
        alpha = T.alloc_buffer((BM, 1), "float32", scope="local", layout=rows)
        l_sum = T.alloc_buffer((BM, 1), "float32", scope="local", layout=rows)
        l_tile = T.alloc_buffer((BM, 1), "float32", scope="local", layout=rows)
        l_parts = T.alloc_buffer((BM, 4), "float32", scope="local", layout=parts)
        l_lane = T.alloc_buffer((BM, 4), "float32", scope="local", layout=parts)
        vote = T.alloc_buffer((1,), "uint32", scope="local")
        trip = T.alloc_buffer((1,), "uint32", scope="local")  # (by_block) a lane passed
        redo = T.alloc_buffer((redo_words,), "uint32", scope="local")  # (by_block) to redo
        redo_n = T.alloc_buffer((1,), "int32", scope="local")  # (by_block) tiles redone
        b = T.meta_var(SimpleNamespace(
            Q=Q, K=K, V=V, Out=Out, LSE=LSE, LSE_rows=LSE_rows, Q_s=Q_s, O_s=O_s, K_s=K_s, V_s=V_s,
            bars=bars, lse_w=lse_w, lse_s=lse_s, S_r=S_r, P16=P16, O_r=O_r, O16=O16,
            m_old=m_old, m_new=m_new, alpha=alpha, l_sum=l_sum, l_tile=l_tile,
            l_run=l_parts if lane_sums else l_sum,  # the running sums
            l_lane=l_lane, vote=vote, trip=trip, redo=redo,
            redo_n=redo_n))  # (lagged_max) a tile's lane sums; the vote; (by_block) the redo
        if tid == 0:
            for c in range(q_bars):  # Q's full (the producer's expect_tx)
                T.ptx.mbarrier.init.shared.b64(bars.ptr_to([c]), 1)
            for s in range(rings * stages):  # full (the producer's expect_tx), empty
                T.ptx.mbarrier.init.shared.b64(bars.ptr_to([ring_at + s]), 1)
                T.ptx.mbarrier.init.shared.b64(bars.ptr_to([ring_at + rings * stages + s]),
                                               consumers)  # fmt: skip
            if persistent:  # Q's rows stored out: by its consumer (by every one)
                for c in range(q_bars):
                    T.ptx.mbarrier.init.shared.b64(bars.ptr_to([q_empty + c]),
                                                   1 if q_split else consumers)  # fmt: skip
            if by_block:  # a consumer's redo tiles (its expect_tx)
                for c in range(consumers):
                    T.ptx.mbarrier.init.shared.b64(bars.ptr_to([redo_bar(c)]), 1)
            T.ptx["fence.mbarrier_init.release.cluster"]()
        T.cuda.cta_sync()
        if pdl:  # the grid before is done (its writes visible), and the next may launch
            T.ptx.griddepcontrol.wait()
            T.ptx.griddepcontrol.launch_dependents()
        if wg == 0:  # the producer
            T.ptx.setmaxnreg.dec.sync.aligned.u32(registers[0])
            if tid_wg == 0:
                if paired:  # blocks qbs - 1 - qx, then qx, of heads hx, hx + head_ctas, ...
                    for i in T.serial(rounds):
                        if hx + i * head_ctas < heads:
                            produce(b, 2 * i, i * pair_tiles, (qbs - 1 - qx) * br,
                                    hx + i * head_ctas)  # fmt: skip
                            produce(b, 2 * i + 1, i * pair_tiles + tiles_of(qbs - 1 - qx),
                                    qx * br, hx + i * head_ctas)  # fmt: skip
                elif balanced:  # column qx's blocks of heads hx, hx + head_ctas, ...
                    for i in T.serial(rounds):
                        if hx + i * head_ctas < heads:
                            if wide > 0:  # the 192-row blocks, then one of 128
                                for j in T.serial(wide):
                                    produce(b, i * per + j, (i * per + j) * kts,
                                            (qx * wide + j) * br, hx + i * head_ctas)  # fmt: skip
                            produce(b, i * per + wide, (i * per + wide) * kts, narrow_at(qx),
                                    hx + i * head_ctas)  # fmt: skip
                elif persistent:  # query block qx of heads hx, hx + head_ctas, ...
                    for i in T.serial(rounds):
                        if hx + i * head_ctas < heads:
                            produce(b, i, i * kts, qx * br, hx + i * head_ctas)
                else:  # causal: the longest query blocks first (of a section's heads)
                    produce(b, 0, 0, (qbs - 1 - qx // section if causal else qx) * br,
                            hx * section + qx % section)  # fmt: skip
        if wg >= 1:  # the consumers, 64 query rows each
            T.ptx.setmaxnreg.inc.sync.aligned.u32(registers[1])
            if by_block:
                for k in range(redo_words):
                    redo[k] = T.uint32(0)
            blocks(b, qx, hx, wg - 1, tid_wg, False)
            if by_block:
                redo_pass(b, qx, hx, wg - 1, tid_wg)
    # fmt: on
    if pdl:  # TVM 0.27's runtime launches it with programmatic stream serialization; its
        # SplitHostDevice reads only such flags here and derives the grid's own tags
        return attention_ws.with_attr("tirx.kernel_launch_params", [PDL_TAG])
    return attention_ws


def inputs(
    heads: int,
    seq: int,
    d: int,
    seed: int = 0,
    kv_heads: int | None = None,
    dtype: str = "float16",
) -> list[np.ndarray]:
    """Q, K, V random (standard normal) in ``dtype``, O and LSE poisoned (NaN)."""
    import ml_dtypes

    kind = np.float16 if dtype == "float16" else ml_dtypes.bfloat16
    rng = np.random.default_rng(seed)
    kv_heads = heads if kv_heads is None else kv_heads
    q = rng.standard_normal((heads, seq, d)).astype(kind)
    k, v = (rng.standard_normal((kv_heads, seq, d)).astype(kind) for _ in range(2))
    o = np.full((heads, seq, d), np.nan, kind)
    lse = np.full((heads, seq), np.nan, np.float32)
    return [q, k, v, o, lse]


def growing_keys(args: list, factor: float, first: int = 128) -> list:
    """:func:`inputs` with the keys from ``first`` on scaled by ``factor``: their scores
    outgrow the first key tile's row max (at 4, P past 2^8 against it; at 60, past
    float32's exponent), so ``lagged_max`` must rebase those tiles."""
    k = args[1].astype(np.float32)
    k[:, first:, :] *= factor
    return [args[0], k.astype(args[1].dtype), *args[2:]]


def reference(q, k, v, causal: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """O ``[heads, seq, d]`` and LSE ``[heads, seq]`` in float64 (K and V repeated over the
    query heads of their group)."""
    k, v = (np.repeat(x, q.shape[0] // x.shape[0], axis=0) for x in (k, v))
    s = np.einsum("hqd,hkd->hqk", q.astype(np.float64), k.astype(np.float64))
    s /= math.sqrt(q.shape[-1])
    if causal:
        n = s.shape[-1]
        s = np.where(np.arange(n)[None, :] <= np.arange(n)[:, None], s, -np.inf)
    m = s.max(axis=-1, keepdims=True)
    p = np.exp(s - m)
    lse = (m + np.log(p.sum(axis=-1, keepdims=True)))[..., 0]
    return np.einsum("hqk,hkd->hqd", p / p.sum(axis=-1, keepdims=True), v.astype(np.float64)), lse


def close(o: np.ndarray, lse: np.ndarray, q, k, v, causal: bool = False) -> str | None:
    """O within ``4 u max |V|`` of float64, ``u`` the unit roundoff of O's type (2^-11 for
    float16, 2^-8 for bfloat16: P is rounded to it before P V, each weight by ``u``, and O
    once at the end), and LSE within ``2^-16 (1 + |LSE|)``; None if so, else what is off."""
    want_o, want_lse = reference(q, k, v, causal)
    unit = 2.0**-11 if o.dtype == np.float16 else 2.0**-8
    err_o = np.abs(o.astype(np.float64) - want_o)
    bound_o = 4 * unit * np.abs(v.astype(np.float64)).max()
    if lse.shape != want_lse.shape:
        return f"LSE has shape {lse.shape}, not {want_lse.shape}"
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
    args = inputs(2, 256, 64, kv_heads=1)
    ws = attention_ws_kernel(2, 256, 64, causal=True, kv_heads=1)
    out = sim.run(ws, args, target="sm_90a", pipeline="tirx_cuda_dispatch.strict")
    off_ws = close(out[3], out[4], *args[:3], causal=True)
    print("simulator, warp-specialized:", off_ws or "equal to float64 numpy within the bound")
    return 0 if off is None and off_ws is None else 1


if __name__ == "__main__":
    sys.exit(main())
