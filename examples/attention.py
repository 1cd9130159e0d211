"""FlashAttention forward, written only with tile primitives: O = softmax(Q K^T scale) V and
the row log-sum-exp, causal or not, any sequence length, grouped-query heads, one
warpgroup per 64 query rows (a first step toward issue 33's kernel: not warp-specialized,
no TMA).

Q and O are float16 or bfloat16 ``[B*H, S, D]``, K and V ``[B*H_kv, S, D]`` (D 64, 128 or
256), LSE float32 ``[B*H, S, 1]`` (natural log). Each CTA of one warpgroup takes 64 query rows of one head:

- Q's 64 x D tile into 128-byte swizzled shared memory once (K-major: ``copy -> gmem_smem``);
- per 64-row tile of K and V: both into shared memory (K K-major, V as N-major B), a
  proxy fence and a CTA barrier; S = Q K^T with ``gemm_async -> wgmma`` (both operands
  from shared memory) into a float32 accumulator;
- the online softmax on the accumulator's rows, in base 2 with ``scale log2(e)`` folded
  into S: the tile's row max (``max -> local``: in-thread folds and two shuffles, the
  rows a quad of lanes hold), the new running max, ``alpha = exp2(m_old - m_new)``,
  ``P = exp2(S - m_new)`` (the row vector broadcast over the columns), the row sums;
  ``l = l alpha + rowsum(P)``, ``O = O alpha``;
- P cast to Q's type in the same registers, which is already wgmma's A fragment, and
  O += P V with ``gemm_async -> wgmma`` taking A from registers (the register form
  FlashAttention-3 uses: no trip through shared memory);
- at the end O / l rounded to O's type once, and LSE = (m + log2(l)) ln 2.

:func:`attention_ws_kernel` is FlashAttention-3's structure for sequences a multiple of
128: a producer warpgroup (``setmaxnreg.dec``) whose first thread loads Q and a ring of
K/V tiles with TMA on full/empty mbarriers, and two consumer warpgroups
(``setmaxnreg.inc``) of 64 query rows each running the loop above, taking turns to issue
their Q K^T at two named barriers (ping-pong); the simulator schedules the three
warpgroups apart. The softmax under the same consumer's next wgmma is not built yet.

``python examples/attention.py`` prints the explain() report and checks small heads of
both kernels in the CPU simulator against float64 numpy.
"""

from __future__ import annotations

import math
import sys

import numpy as np
from tvm import tirx
from tvm.script import tirx as T
from tvm.script.tirx import tile as Tx
from tvm.tirx.layout import ComposeLayout, R, S, TileLayout, tid_in_wg

from tirx_cuda_dispatch import demos

BM = 64  # query rows per CTA: one warpgroup's wgmma tile
BN = 64  # key rows per step
LOG2E = 1.4426950408889634
DTYPES = ("float16", "bfloat16")  # Q, K, V, O; P rounded to it for P V


def row_layout() -> TileLayout:
    """A value per row of a wgmma accumulator (64 x 1): row ``16 w + l / 4 (+ 8)`` in the 4
    lanes ``l % 4`` of its quad (replicas), register 0 and 1 for the two row halves."""
    return TileLayout(S[(4, 2, 8) : (32 @ tid_in_wg, 1, 4 @ tid_in_wg)] + R[4 : 1 @ tid_in_wg])


def k_major(rows: int, d: int) -> ComposeLayout:
    """A (rows x d) float16 tile, rows of d contiguous in 64-column blocks, 128-byte swizzle
    (wgmma's K-major canonical layout for Q and K)."""
    return ComposeLayout(3, 3, 3, TileLayout(S[(rows, d // 64, 64) : (64, rows * 64, 1)]))


def online_softmax(S_r, P16, O_r, m_old, m_new, alpha, l_sum, l_tile, rescale: bool) -> None:
    """One key tile's online softmax on the accumulator's rows (S already in base 2 and
    masked), emitted into the kernel being parsed: the tile's row max (``max -> local``:
    in-thread folds and two shuffles over the quad of lanes a row lives in), the new
    running max, ``alpha = exp2(m_old - m_new)``, ``P = exp2(S - m_new)`` (the row vector
    broadcast over the columns), ``l = l alpha + rowsum(P)``, ``O = O alpha`` (unless
    ``rescale`` is False: a broken kernel), ``m_old = m_new`` (``copy -> threadwise``),
    and P rounded to float16 in ``P16``: wgmma's A fragment, for O += P V."""
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
    Tx.wg.copy(m_old[:, :], m_new[:, :])
    Tx.wg.cast(P16[:, :], S_r[:, :])


def finish(O_r, O16, m_old, l_sum, l_tile) -> None:
    """O / l rounded to float16 once into ``O16``; the rows' LSE, ``(m + log2 l) ln 2``,
    into ``l_tile``."""
    Tx.wg.reciprocal(l_tile[:, :], l_sum[:, :])
    Tx.wg.mul(O_r[:, :], O_r[:, :], l_tile[:, :])
    Tx.wg.cast(O16[:, :], O_r[:, :])
    Tx.wg.log2(l_tile[:, :], l_sum[:, :])
    Tx.wg.add(l_tile[:, :], l_tile[:, :], m_old[:, :])
    Tx.wg.mul(l_tile[:, :], l_tile[:, :], T.float32(math.log(2.0)))


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
    acc_s = demos.wgmma_accumulator_layout(BN, 1)
    acc_o = demos.wgmma_accumulator_layout(d, 1)
    rows = row_layout()
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
        LSE = T.match_buffer(LSE_ptr, (heads, seq, 1), "float32")
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
            # S = Q K^T (scale log2 e folded in below)
            Tx.wg.gemm_async(S_r[:, :], Q_s[:, :], K_s[:, :], transA=False, transB=False)
            T.ptx["wgmma.commit_group.sync.aligned"]()
            T.ptx["wgmma.wait_group.sync.aligned"](0)
            Tx.wg.mul(S_r[:, :], S_r[:, :], T.float32(scale))
            if causal:  # key k0 + j is masked from query q0 + i where it comes later
                Tx.wg.select(S_r[:, :], S_r[:, :], T.float32(-math.inf),
                             lambda i, j: k0 + j <= q0 + i)  # noqa: B023 (parsed here)
            elif k_tail > 0:  # the keys past the end
                Tx.wg.select(S_r[:, :], S_r[:, :], T.float32(-math.inf),
                             lambda i, j: k0 + j < seq)  # noqa: B023 (parsed here)
            # the online softmax on the accumulator's rows
            online_softmax(S_r, P16, O_r, m_old, m_new, alpha, l_sum, l_tile, rescale)
            Tx.wg.gemm_async(O_r[:, :], P16[:, :], V_s[:, :], transA=False, transB=True,
                             accum=True)
            T.ptx["wgmma.commit_group.sync.aligned"]()
            if wait_pv:
                T.ptx["wgmma.wait_group.sync.aligned"](0)
            T.cuda.cta_sync()  # every warp is past its reads of K_s and V_s
        if not wait_pv:
            T.ptx["wgmma.wait_group.sync.aligned"](0)
        finish(O_r, O16, m_old, l_sum, l_tile)
        # out through shared memory (Q's stage, read by no wgmma any more): rows past the
        # end of a partial block are not stored
        Tx.wg.copy(O_s[:, :], O16[:, :])
        Tx.wg.copy(lse_s[:, :], l_tile[:, :])
        T.cuda.cta_sync()
        if q_tail > 0:
            if qb < qbs - 1:
                Tx.cta.copy(Out[h, q0 : q0 + BM, :], O_s[:, :])
                Tx.cta.copy(LSE[h, q0 : q0 + BM, :], lse_s[:, :])
            else:
                Tx.cta.copy(Out[h, q0 : q0 + q_tail, :], O_s[0:q_tail, :])
                Tx.cta.copy(LSE[h, q0 : q0 + q_tail, :], lse_s[0:q_tail, :])
        else:
            Tx.cta.copy(Out[h, q0 : q0 + BM, :], O_s[:, :])
            Tx.cta.copy(LSE[h, q0 : q0 + BM, :], lse_s[:, :])
    # fmt: on
    return attention


WS_ROWS = 128  # query rows per CTA in the warp-specialized kernel: two consumers of 64
CONSUMERS = 2
PRODUCER_REGS, CONSUMER_REGS = 40, 232
WS_OMITS = (None, "full_wait", "empty_arrive", "rescale", "first_turn")
TURNS = (1, 2)  # the consumers' named barriers for their Q K^T turns (0 is the CTA's)


def attention_ws_kernel(
    heads: int,
    seq: int,
    d: int,
    causal: bool = False,
    kv_heads: int | None = None,
    stages: int = 2,
    omit: str | None = None,
    dtype: str = "float16",
    pingpong: bool = True,
):
    """FlashAttention-3's structure: per CTA 128 query rows of one head and three
    warpgroups. Warpgroup 0, the producer, gives registers back (``setmaxnreg.dec``) and
    its first thread loads Q once (``copy_async -> tma_auto`` on the Q mbarrier) and every
    64-row tile of K and V into a ring of ``stages`` (their ``full`` mbarrier announces the
    bytes; a stage is refilled once both consumers arrived on its ``empty`` barrier).
    Warpgroups 1 and 2, the consumers (``setmaxnreg.inc``), each own 64 query rows: per
    tile they wait for the stage, run S = Q K^T (wgmma from shared memory), the online
    softmax on the accumulator's rows, O += P V (wgmma with P in registers), wait for it
    and free the stage. Q, K, V, O are given flat, ``[heads * seq, d]`` (K and V
    ``[kv_heads * seq, d]``), LSE ``[heads * seq, 1]``; ``seq`` a multiple of 128. Causal
    kernels load the tiles up to the CTA's diagonal; a consumer's tile past its own rows
    is masked whole (it adds nothing). ``pingpong``: the consumers take turns issuing
    their Q K^T (FA3's warp scheduler barriers: consumer ``c`` waits at named barrier
    ``TURNS[c]`` for 256 threads, issues, and arrives at the other's; consumer 1 grants
    the first turn), so one's softmax runs while the other's wgmma does. Not built yet:
    the softmax of one tile under the same consumer's next Q K^T. ``omit`` breaks it:
    ``"full_wait"``, ``"empty_arrive"``, ``"rescale"``, ``"first_turn"`` (nobody grants
    the first turn: a deadlock)."""
    kv_heads = heads if kv_heads is None else kv_heads
    if dtype not in DTYPES:
        raise ValueError(f"dtype {dtype!r}: one of {DTYPES}")
    if d not in (64, 128) or seq % WS_ROWS or heads % kv_heads or omit not in WS_OMITS:
        raise ValueError(
            f"head dim {d} (64 or 128), seq {seq} (a multiple of {WS_ROWS}), {heads} query "
            f"heads over {kv_heads} key/value heads, omit {omit!r} (one of {WS_OMITS})"
        )
    group = heads // kv_heads
    scale = LOG2E / math.sqrt(d)
    acc_s = demos.wgmma_accumulator_layout(BN, 1)
    acc_o = demos.wgmma_accumulator_layout(d, 1)
    rows = row_layout()
    blocks = d // 64
    q_l = ComposeLayout(3, 3, 3, TileLayout(S[(WS_ROWS, blocks, 64) : (64, WS_ROWS * 64, 1)]))
    kv_l = ComposeLayout(
        3, 3, 3, TileLayout(S[(stages, BN, blocks, 64) : (BN * d, 64, BN * 64, 1)])
    )
    q_at, k_at = 0, WS_ROWS * d  # elements of the float16 pool
    v_at = k_at + stages * BN * d
    bars_at = (v_at + stages * BN * d) // 4  # uint64 index: after the tiles
    pool_elems = (bars_at + 1 + 2 * stages) * 4
    q_bytes, stage_bytes = WS_ROWS * d * 2, 2 * BN * d * 2
    kts = seq // BN
    wait_full, arrive_empty = omit != "full_wait", omit != "empty_arrive"
    rescale = omit != "rescale"
    first_turn = omit != "first_turn"

    # fmt: off
    @T.prim_func
    def attention_ws(Q_ptr: T.handle, K_ptr: T.handle, V_ptr: T.handle, O_ptr: T.handle,
                     LSE_ptr: T.handle):
        Q = T.match_buffer(Q_ptr, (heads * seq, d), dtype)
        K = T.match_buffer(K_ptr, (kv_heads * seq, d), dtype)
        V = T.match_buffer(V_ptr, (kv_heads * seq, d), dtype)
        Out = T.match_buffer(O_ptr, (heads * seq, d), dtype)
        LSE = T.match_buffer(LSE_ptr, (heads * seq, 1), "float32")
        T.device_entry()
        qb, h = T.cta_id([seq // WS_ROWS, heads])
        wg = T.warpgroup_id([1 + CONSUMERS])
        T.warp_id_in_wg([4])
        T.lane_id([32])
        tid_wg = T.thread_id_in_wg([128])
        tid = T.thread_id([(1 + CONSUMERS) * 128])
        pool = T.alloc_buffer((pool_elems,), dtype, scope="shared.dyn", align=1024)
        Q_s = T.decl_buffer((WS_ROWS, d), dtype, pool.data, elem_offset=q_at,
                            scope="shared.dyn", layout=q_l)
        K_s = T.decl_buffer((stages, BN, d), dtype, pool.data, elem_offset=k_at,
                            scope="shared.dyn", layout=kv_l)
        V_s = T.decl_buffer((stages, BN, d), dtype, pool.data, elem_offset=v_at,
                            scope="shared.dyn", layout=kv_l)
        bars = T.decl_buffer((1 + 2 * stages,), "uint64", pool.data, elem_offset=bars_at,
                             scope="shared.dyn")  # Q, full[stages], empty[stages]
        S_r = T.alloc_buffer((BM, BN), "float32", scope="local", layout=acc_s)
        P16 = T.alloc_buffer((BM, BN), dtype, scope="local", layout=acc_s)
        O_r = T.alloc_buffer((BM, d), "float32", scope="local", layout=acc_o)
        O16 = T.alloc_buffer((BM, d), dtype, scope="local", layout=acc_o)
        m_old = T.alloc_buffer((BM, 1), "float32", scope="local", layout=rows)
        m_new = T.alloc_buffer((BM, 1), "float32", scope="local", layout=rows)
        alpha = T.alloc_buffer((BM, 1), "float32", scope="local", layout=rows)
        l_sum = T.alloc_buffer((BM, 1), "float32", scope="local", layout=rows)
        l_tile = T.alloc_buffer((BM, 1), "float32", scope="local", layout=rows)
        q_row = T.meta_var(h * seq + qb * WS_ROWS)  # the CTA's first row of Q and O
        kv_row = T.meta_var((h // group) * seq)
        n_tiles = T.meta_var(2 * qb + 2 if causal else kts)
        if tid == 0:
            T.ptx.mbarrier.init.shared.b64(bars.ptr_to([0]), 1)
            for s in range(stages):
                T.ptx.mbarrier.init.shared.b64(bars.ptr_to([1 + s]), 1)
                T.ptx.mbarrier.init.shared.b64(bars.ptr_to([1 + stages + s]), CONSUMERS)
            T.ptx["fence.mbarrier_init.release.cluster"]()
        T.cuda.cta_sync()
        if wg == 0:  # the producer
            T.ptx.setmaxnreg.dec.sync.aligned.u32(PRODUCER_REGS)
            if tid_wg == 0:
                T.evaluate(T.ptx["mbarrier.arrive.expect_tx.shared.b64"](
                    bars.ptr_to([0]), q_bytes))
                Tx.copy_async(Q_s[:, :], Q[q_row : q_row + WS_ROWS, :], mbar=bars.ptr_to([0]))
                for t in T.serial(n_tiles):
                    s = T.meta_var(t % stages)
                    if t >= stages:  # the stage held tile t - stages: both consumers done?
                        T.cuda.mbarrier_wait(bars.ptr_to([1 + stages + s]),
                                             (t // stages - 1) % 2)
                    T.evaluate(T.ptx["mbarrier.arrive.expect_tx.shared.b64"](
                        bars.ptr_to([1 + s]), stage_bytes))
                    Tx.copy_async(K_s[s, :, :], K[kv_row + t * BN : kv_row + t * BN + BN, :],
                                  mbar=bars.ptr_to([1 + s]))
                    Tx.copy_async(V_s[s, :, :], V[kv_row + t * BN : kv_row + t * BN + BN, :],
                                  mbar=bars.ptr_to([1 + s]))
        if wg >= 1:  # the consumers, 64 query rows each
            T.ptx.setmaxnreg.inc.sync.aligned.u32(CONSUMER_REGS)
            c = wg - 1
            q0 = T.meta_var(qb * WS_ROWS + c * BM)  # the consumer's first row in the head
            Tx.wg.fill(O_r[:, :], T.float32(0.0))
            Tx.wg.fill(m_old[:, :], T.float32(-math.inf))
            Tx.wg.fill(l_sum[:, :], T.float32(0.0))
            T.cuda.mbarrier_wait(bars.ptr_to([0]), 0)
            if pingpong and first_turn:
                if c == 1:  # consumer 0 issues first
                    T.ptx.bar.arrive(TURNS[0], 256)
            for t in T.serial(n_tiles):
                s = T.meta_var(t % stages)
                if wait_full:
                    T.cuda.mbarrier_wait(bars.ptr_to([1 + s]), (t // stages) % 2)
                if pingpong:  # my turn to issue: the other consumer's wgmma is issued
                    T.ptx.bar.sync(T.Cast("uint32", TURNS[0] + c), 256)
                Tx.wg.gemm_async(S_r[:, :], Q_s[c * BM : c * BM + BM, :], K_s[s, :, :],
                                 transA=False, transB=False)
                T.ptx["wgmma.commit_group.sync.aligned"]()
                if pingpong:  # the other consumer's turn (consumer 0's next one, if any)
                    if c == 0 or t < n_tiles - 1:
                        T.ptx.bar.arrive(T.Cast("uint32", TURNS[1] - c), 256)
                T.ptx["wgmma.wait_group.sync.aligned"](0)
                Tx.wg.mul(S_r[:, :], S_r[:, :], T.float32(scale))
                if causal:
                    Tx.wg.select(S_r[:, :], S_r[:, :], T.float32(-math.inf),
                                 lambda i, j: t * BN + j <= q0 + i)  # noqa: B023
                online_softmax(S_r, P16, O_r, m_old, m_new, alpha, l_sum, l_tile, rescale)
                Tx.wg.gemm_async(O_r[:, :], P16[:, :], V_s[s, :, :], transA=False,
                                 transB=True, accum=True)
                T.ptx["wgmma.commit_group.sync.aligned"]()
                T.ptx["wgmma.wait_group.sync.aligned"](0)
                if arrive_empty:
                    if tid_wg == 0:  # this consumer is done with the stage
                        T.ptx["mbarrier.arrive.shared.b64"](bars.ptr_to([1 + stages + s]))
            finish(O_r, O16, m_old, l_sum, l_tile)
            Tx.wg.copy(Out[h * seq + q0 : h * seq + q0 + BM, :], O16[:, :])
            Tx.wg.copy(LSE[h * seq + q0 : h * seq + q0 + BM, :], l_tile[:, :])
    # fmt: on
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
    lse = np.full((heads, seq, 1), np.nan, np.float32)
    return [q, k, v, o, lse]


def reference(q, k, v, causal: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """O and LSE in float64 (K and V repeated over the query heads of their group)."""
    k, v = (np.repeat(x, q.shape[0] // x.shape[0], axis=0) for x in (k, v))
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
    """O within ``4 u max |V|`` of float64, ``u`` the unit roundoff of O's type (2^-11 for
    float16, 2^-8 for bfloat16: P is rounded to it before P V, each weight by ``u``, and O
    once at the end), and LSE within ``2^-16 (1 + |LSE|)``; None if so, else what is off."""
    want_o, want_lse = reference(q, k, v, causal)
    unit = 2.0**-11 if o.dtype == np.float16 else 2.0**-8
    err_o = np.abs(o.astype(np.float64) - want_o)
    bound_o = 4 * unit * np.abs(v.astype(np.float64)).max()
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
    flat = [a.reshape(-1, a.shape[-1]) for a in args]
    out = sim.run(ws, flat, target="sm_90a", pipeline="tirx_cuda_dispatch.strict")
    off_ws = close(out[3].reshape(args[3].shape), out[4].reshape(args[4].shape), *args[:3],
                   causal=True)  # fmt: skip
    print("simulator, warp-specialized:", off_ws or "equal to float64 numpy within the bound")
    return 0 if off is None and off_ws is None else 1


if __name__ == "__main__":
    sys.exit(main())
