"""FlashAttention forward in FlashAttention-2's structure, written only with tile primitives,
for Ampere and Ada (sm_80 and newer: cp.async and mma.sync, no TMA or wgmma): O =
softmax(Q K^T scale) V and the row log-sum-exp, causal or not, any sequence length,
grouped-query heads. The arguments are examples/attention.py's: Q and O ``[B*H, S, D]``,
K and V ``[B*H_kv, S, D]`` (float16 or bfloat16, D 64, 128 or 256), LSE float32
``[B*H, S]``.

Each CTA of four warps takes 128 query rows of one head, 32 rows a warp (two m16 tiles,
so every K and V fragment read from shared memory feeds two mma; ``block_m`` 64: 16, the
default at head dim 256):

- Q's 128 x D tile and the first 64-row tile of K and V into 128-byte swizzled shared
  memory with cp.async (``copy_async -> ldgsts``); at head dim 64 each warp's 32 rows of
  Q into registers as the m16n8k16 A fragment (``copy -> ldstmatrix``), once; at 128
  (where O and S fill the registers) 16 columns of them per k16 step, as
  FlashAttention-2 does;
- per key tile, double-buffered: wait for the tile (``cp.async.wait_group 0``, a CTA
  barrier, which also says every warp is done with the other stage), start the next
  tile's cp.async into the other stage, and compute on this one:
- S = Q K^T: per 16 columns of D, the K tile's 64 x 16 slice as the transposed B
  fragment (``ldmatrix``), and ``gemm -> mma.m16n8k*`` (16 ``mma.sync.m16n8k16``) into
  a float32 32 x 64 accumulator;
- the online softmax on the accumulator's rows (a row lives in a quad of lanes: the row
  max and sum are in-thread folds and two shuffles), in base 2 with ``scale log2(e)``
  folded into ``exp2``'s scale and the row max into its bias, as examples/attention.py;
- P rounded to Q's type in registers (the accumulator's fragment is already mma's A
  fragment: FlashAttention-2's register reuse), and O += P V: per 16 keys the V tile's
  16 x D slice as the B fragment (``ldmatrix.trans``) and ``mma.sync``;
- at the end O / l rounded once, through shared memory (stmatrix) to O, and the LSE.

A partial last tile is zero-filled past the end (its copy synchronous, at its own
extent), its keys past the end masked to -inf; a partial query block's rows past the end
are not stored. Causal kernels stop at the diagonal, mask only the tiles that reach past
a warp's first row, and run the longest query blocks first.

``python examples/attention_sm80.py`` prints the explain() overview and checks small
heads in the CPU simulator (sm_80) against float64 numpy.
"""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

from tvm.script import tirx as T
from tvm.script.tirx import tile as Tx
from tvm.tirx.layout import ComposeLayout, S, TileLayout

from tirx_cuda_dispatch import fragments

WARPS = 4  # warps a CTA, each its own query rows
LOG2E = 1.4426950408889634
DTYPES = ("float16", "bfloat16")
OMITS = (None, "wait", "barrier", "rescale", "rebase")
FULL = 0xFFFFFFFF  # a warp vote over every lane

# The Hopper kernels' helpers: inputs, the float64 reference and its bound, and the online
# softmax and its finish, emitted here at warp scope.
_spec = importlib.util.spec_from_file_location(
    "example_attention_for_sm80", Path(__file__).with_name("attention.py")
)
hopper = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(hopper)
inputs, reference, close = hopper.inputs, hopper.reference, hopper.close
growing_keys = hopper.growing_keys


def swizzled(shape: tuple[int, ...]) -> ComposeLayout:
    """``shape`` (its last two dimensions a row-major 16-bit tile, rows of 64 or 128
    elements) cut into 64-column blocks of 128 bytes a row, under the XOR swizzle of
    16-byte units that spreads the 8 rows of an ldmatrix matrix over all banks."""
    *outer, rows, cols = shape
    blocks = cols // 64
    strides = [rows * cols * math.prod(outer[i + 1 :]) for i in range(len(outer))]
    return ComposeLayout(3, 3, 3, TileLayout(S[(*outer, rows, blocks, 64) :
                                               (*strides, 64, rows * 64, 1)]))  # fmt: skip


def _branch(cond, full, tail) -> None:
    """``tail()`` where ``cond`` holds, ``full()`` elsewhere (only ``full()`` where
    ``cond`` is None), emitted into the kernel being parsed."""
    if cond is None:
        full()
        return
    with T.If(cond):
        with T.Then():
            tail()
        with T.Else():
            full()


def default_blocks(d: int) -> tuple[int, int]:
    """(query rows a CTA, keys a tile): 128 x 64 at both head dims, 32 query rows a warp,
    so each K and V fragment read from shared memory feeds two m16 tiles. Measured on an
    H200 (one run, S 4096 unless said; docs/performance.md, "Ampere form"): 128 x 64 beat
    64 x 64 by 9-14% (37-43% causal at head dim 128, S 4096 and 16384; 6% slower causal
    at 1024 x 64) and 128 x 128 by 7% at head dim 64 (FlashAttention-2 takes 128 x 128
    there); at head dim 128 Q is read from shared memory (in registers beside O and S it
    cost 24%). At head dim 256, 64 x 64, FlashAttention-2's blocks there: O's 16 x 256
    rows a warp are 128 registers a thread; Q and one stage each of K and V take 96 KiB
    of shared memory, so two CTAs share an SM (two stages, 160 KiB, held it to one)."""
    return (64, 64) if d == 256 else (128, 64)


def attention_sm80_kernel(
    heads: int,
    seq: int,
    d: int,
    causal: bool = False,
    kv_heads: int | None = None,
    dtype: str = "float16",
    omit: str | None = None,
    block_m: int | None = None,
    block_n: int | None = None,
    q_in_registers: bool | None = None,
    stages: int | None = None,
    lane_sums: bool = True,
    lagged_max: bool | None = None,
):
    """The kernel for ``heads`` (B*H) query heads of ``seq`` rows, head dim ``d``, and
    ``kv_heads`` key/value heads (query head ``h`` reads key/value head ``h / (heads /
    kv_heads)``). ``block_m`` query rows a CTA (64 or 128: 16 or 32 a warp) and
    ``block_n`` keys a tile (64 or 128, at most ``block_m``), :func:`default_blocks`
    where None. ``q_in_registers``: each warp's rows of Q held in registers for the
    whole loop (None: where they fit beside O and S, 16 rows a warp below head dim 256 or
    head dim 64), else read from shared memory per 16 columns of D as FlashAttention-2
    does. ``stages``: 2,
    K and V of tile t + 1 loaded by cp.async into the other stage while tile t computes
    (one wait and barrier a tile); 1, FlashAttention-2's schedule for the largest head
    dims: one stage each of K and V, V of tile t loaded while S = Q K^T runs and K of
    tile t + 1 while O += P V does (two waits and barriers a tile), so that two CTAs fit
    an SM. None: 1 at head dim 256, where two stages take 160 KiB (on an H200 at 64 x 4096
    x 256, one run: 0.94 of the flash backend, causal 0.79, against 0.52 and 0.55 with
    two stages and Q in registers), and at head dim 128 non-causal (1.005 / 1.039 of flash
    at S 4096 / 16384 against two stages' 0.983 / 1.004, with fewer registers spilled);
    2 at head dim 64 (1.096 against 1.058) and causal head dim 128 (1.059 against 0.965). ``omit`` breaks
    it for the tests' negative controls: ``"wait"`` drops the ``cp.async.wait_group``
    before a tile is read, ``"barrier"`` the CTA barrier after it (a warp may refill the
    stage another still reads), ``"rescale"`` drops ``O = O alpha``. ``lane_sums``: each
    lane keeps its part of its rows' sums of P over the block
    (``fragments.mma_rows_layout``) and the quad's shuffles add them once at the end, as
    examples/attention.py's ``lane_sums`` (on an H200, 2026-11-29, one run, float16,
    against the sums added over the quad every tile: head dim 64 +1.5% to +5.6%, 128 and
    256 -0.4% to +5.2%, within 0.4% where slower); else the sums are added every tile.
    ``lagged_max``: examples/attention.py's lagged reference max at warp scope: after
    the block's first key tile, a tile's exponentials take the rows' last reference max,
    and where a lane's sums of P pass ``LAG_BOUND`` the warp votes (``__any_sync`` over
    its 32 lanes: a warp's rows are its own) to rebase the tile: S = Q K^T again (K's
    stage is still held), the row max, O and the sums rescaled, P again (None: at head
    dim 64, with the lane sums, which it takes; on an H200, 2026-11-29, one run, float16,
    against the whole softmax every tile: head dim 64 +1.4 / +2.3 / +2.2% at S 1024 /
    4096 / 16384, causal 4096 +5.7%; head dim 128 -1.4 to +0.6% (24 registers spilled);
    head dim 256 -22% non-causal, -3% causal, which was not looked into). ``omit="rebase"``:
    the vote is ignored."""
    kv_heads = heads if kv_heads is None else kv_heads
    if dtype not in DTYPES:
        raise ValueError(f"dtype {dtype!r}: one of {DTYPES}")
    BM, BN = default_blocks(d)
    BM, BN = block_m or BM, block_n or BN
    if (d not in (64, 128, 256) or seq < 1 or heads % kv_heads or omit not in OMITS
            or BM not in (64, 128) or BN not in (64, 128) or BN > BM):  # fmt: skip
        raise ValueError(
            f"head dim {d} (64, 128 or 256), seq {seq} (1 or more), {heads} query heads in "
            f"groups over {kv_heads} key/value heads, omit {omit!r} (one of {OMITS}), "
            f"block_m {BM} (64 or 128), block_n {BN} (64 or 128, at most block_m)"
        )
    if stages is None:  # one stage where it measured faster (docstring)
        stages = 1 if d == 256 or (d == 128 and not causal) else 2
    if stages not in (1, 2):
        raise ValueError(f"stages {stages}: 1 or 2")
    WM = BM // WARPS
    if q_in_registers is None:
        q_in_registers = (WM == 16 and d < 256) or d == 64
    group = heads // kv_heads
    zero = T.Cast(dtype, 0)
    scale = LOG2E / math.sqrt(d)
    mt = WM // 16  # m16 tiles a warp
    (acc_s, q16_frag, k_frag), _ = fragments.mma_fragments(mt, BN // 8, 1, tb=True)  # S, K^T
    (acc_o, q_frag, _), _ = fragments.mma_fragments(mt, d // 8, d // 16)  # O, Q
    v_frag = fragments.mma_fragments(mt, d // 8, 1)[0][2]  # 16 x d: one k16 step of V
    rows = fragments.mma_row_vector_layout(mt)
    parts = fragments.mma_rows_layout(mt)
    qbs, kts = -(-seq // BM), -(-seq // BN)
    q_tail, k_tail = seq % BM, seq % BN
    q_at, k_at = 0, BM * d  # elements of the pool: Q, K[stages], V[stages]
    v_at = k_at + stages * BN * d
    pool_elems = v_at + stages * BN * d
    wait = omit != "wait"
    barrier = omit != "barrier"
    rescale = omit != "rescale"
    if lagged_max is None:  # where it measured faster (docstring)
        lagged_max = lane_sums and d == 64
    if lagged_max and not lane_sums:
        raise ValueError("lagged_max bounds P by each lane's sums of it: it takes lane_sums=True")

    def load(X, X_s, kv, t, slot) -> None:
        """Tile ``t`` of K or V into stage ``slot`` by cp.async; a partial last tile copied
        at its extent (synchronously) over a zero-filled stage."""
        k0 = t * BN

        def full() -> None:
            Tx.cta.copy_async(X_s[slot, :, :], X[kv, k0 : k0 + BN, :])

        def tail() -> None:
            Tx.cta.fill(X_s[slot, k_tail:BN, :], zero)
            Tx.cta.copy(X_s[slot, 0:k_tail, :], X[kv, k0 : k0 + k_tail, :])

        _branch(t >= kts - 1 if k_tail else None, full, tail)  # (the last tile: ">=" is
        # what lets the bounds check see that the full copies stop before it)

    def load_kv(K, V, K_s, V_s, kv, t, slot) -> None:
        """Key tile ``t`` of K and V into stage ``slot``."""
        load(K, K_s, kv, t, slot)
        load(V, V_s, kv, t, slot)

    def scores(S_r, Q_r, Q_s, K_s, K_f, slot, r0) -> None:
        """S = Q K^T, 16 columns of D at a time (unrolled: every register slice constant);
        Q's 16 columns from the warp's registers, or into them from shared memory."""
        Tx.warp.fill(S_r[:, :], T.float32(0.0))
        for kk in range(d // 16):
            cols = slice(kk * 16, kk * 16 + 16)
            if not q_in_registers:
                Tx.warp.copy(Q_r[:, :], Q_s[r0 : r0 + WM, cols])
            Tx.warp.copy(K_f[:, :], K_s[slot, :, cols])
            Tx.warp.gemm(S_r[:, :], Q_r[:, cols] if q_in_registers else Q_r[:, :], K_f[:, :],
                         S_r[:, :], transpose_A=False, transpose_B=True, alpha=1.0,
                         beta=1.0)  # fmt: skip

    def mask(S_r, t, q0, r0) -> None:
        """-inf where the warp's row ``i`` may not see key ``t BN + j``: causal, only the
        tiles on the diagonal have keys past the warp's rows; else the last tile's keys
        past the end."""
        if causal:
            with T.If(t * BN + BN > q0 + r0 + 1):
                with T.Then():
                    Tx.warp.select(S_r[:, :], S_r[:, :], T.float32(-math.inf),
                                   lambda i, j: t * BN + j <= q0 + r0 + i)  # fmt: skip
        elif k_tail > 0:
            with T.If(t == kts - 1):
                with T.Then():
                    Tx.warp.select(S_r[:, :], S_r[:, :], T.float32(-math.inf),
                                   lambda i, j: t * BN + j < seq)  # fmt: skip

    def values(O_r, P16, V_s, V_f, slot) -> None:
        """O += P V, 16 keys at a time."""
        for kk in range(BN // 16):
            Tx.warp.copy(V_f[:, :], V_s[slot, kk * 16 : kk * 16 + 16, :])
            Tx.warp.gemm(O_r[:, :], P16[:, kk * 16 : kk * 16 + 16], V_f[:, :], O_r[:, :],
                         transpose_A=False, transpose_B=False, alpha=1.0, beta=1.0)  # fmt: skip

    # fmt: off
    @T.prim_func
    def attention_sm80(Q_ptr: T.handle, K_ptr: T.handle, V_ptr: T.handle, O_ptr: T.handle,
                       LSE_ptr: T.handle):
        Q = T.match_buffer(Q_ptr, (heads, seq, d), dtype)
        K = T.match_buffer(K_ptr, (kv_heads, seq, d), dtype)
        V = T.match_buffer(V_ptr, (kv_heads, seq, d), dtype)
        Out = T.match_buffer(O_ptr, (heads, seq, d), dtype)
        LSE = T.match_buffer(LSE_ptr, (heads, seq), "float32")
        T.device_entry()
        bx, h = T.cta_id([qbs, heads])
        w = T.warp_id([WARPS])
        T.lane_id([32])
        T.thread_id([WARPS * 32])
        pool = T.alloc_buffer((pool_elems,), dtype, scope="shared.dyn", align=1024)
        Q_s = T.decl_buffer((BM, d), dtype, pool.data, elem_offset=q_at, scope="shared.dyn",
                            layout=swizzled((BM, d)))
        K_s = T.decl_buffer((stages, BN, d), dtype, pool.data, elem_offset=k_at,
                            scope="shared.dyn", layout=swizzled((stages, BN, d)))
        V_s = T.decl_buffer((stages, BN, d), dtype, pool.data, elem_offset=v_at,
                            scope="shared.dyn", layout=swizzled((stages, BN, d)))
        lse_s = T.alloc_buffer((BM, 1), "float32", scope="shared", layout=TileLayout(S[BM, 1]))
        lse_v = T.decl_buffer((BM,), "float32", lse_s.data, scope="shared")
        Q_r = T.alloc_buffer((WM, d if q_in_registers else 16), dtype, scope="local",
                             layout=q_frag if q_in_registers else q16_frag)
        K_f = T.alloc_buffer((BN, 16), dtype, scope="local", layout=k_frag)
        V_f = T.alloc_buffer((16, d), dtype, scope="local", layout=v_frag)
        S_r = T.alloc_buffer((WM, BN), "float32", scope="local", layout=acc_s)
        P16 = T.alloc_buffer((WM, BN), dtype, scope="local", layout=acc_s)
        O_r = T.alloc_buffer((WM, d), "float32", scope="local", layout=acc_o)
        O16 = T.alloc_buffer((WM, d), dtype, scope="local", layout=acc_o)
        m_old = T.alloc_buffer((WM, 1), "float32", scope="local", layout=rows)
        m_new = T.alloc_buffer((WM, 1), "float32", scope="local", layout=rows)
        alpha = T.alloc_buffer((WM, 1), "float32", scope="local", layout=rows)
        l_sum = T.alloc_buffer((WM, 1), "float32", scope="local", layout=rows)
        l_tile = T.alloc_buffer((WM, 1), "float32", scope="local", layout=rows)
        l_parts = T.alloc_buffer((WM, 4), "float32", scope="local", layout=parts)
        l_lane = T.alloc_buffer((WM, 4), "float32", scope="local", layout=parts)  # (lagged)
        l_run = T.meta_var(l_parts if lane_sums else l_sum)  # the running sums
        qb = T.meta_var(qbs - 1 - bx if causal else bx)  # causal: the longest blocks first
        q0 = T.meta_var(qb * BM)
        kv = T.meta_var(h // group)
        r0 = T.meta_var(w * WM)  # the warp's first row in the block
        diagonal = T.meta_var((qb + 1) * (BM // BN))  # causal: the tiles to the diagonal
        n_tiles = T.meta_var(T.min(diagonal, kts) if causal else kts)
        # Q (a partial last block over zeros) and key tile 0, one cp.async group
        if q_tail > 0:
            if qb < qbs - 1:
                Tx.cta.copy_async(Q_s[:, :], Q[h, q0 : q0 + BM, :])
            else:
                Tx.cta.fill(Q_s[q_tail:BM, :], zero)
                Tx.cta.copy(Q_s[0:q_tail, :], Q[h, q0 : q0 + q_tail, :])
        else:
            Tx.cta.copy_async(Q_s[:, :], Q[h, q0 : q0 + BM, :])
        if stages == 2:
            load_kv(K, V, K_s, V_s, kv, 0, 0)
        else:  # V of tile 0 comes in the loop, while S = Q K^T runs
            load(K, K_s, kv, 0, 0)
        T.ptx.cp.async_.commit_group()
        T.ptx.cp.async_.wait_group(0)
        T.cuda.cta_sync()
        if q_in_registers:
            Tx.warp.copy(Q_r[:, :], Q_s[r0 : r0 + WM, :])
        Tx.warp.fill(O_r[:, :], T.float32(0.0))
        Tx.warp.fill(m_old[:, :], T.float32(-math.inf))
        Tx.warp.fill(l_run[:, :], T.float32(0.0))
        for t in T.serial(n_tiles):
            if stages == 2:
                if wait:  # tile t is in (the group of the previous iteration)
                    T.ptx.cp.async_.wait_group(0)
                if barrier:  # ... for every thread, and every warp is done with tile t - 1
                    T.cuda.cta_sync()
                if t + 1 < kts:  # tile t + 1 into the other stage while this one computes
                    if causal:  # (two conditions, not t + 1 < n_tiles: the bounds check
                        if t + 1 < diagonal:  # reads each, where it cannot see through T.min)
                            load_kv(K, V, K_s, V_s, kv, t + 1, (t + 1) % 2)
                    else:
                        load_kv(K, V, K_s, V_s, kv, t + 1, (t + 1) % 2)
                T.ptx.cp.async_.commit_group()
            else:
                if t > 0:
                    if wait:  # K of tile t is in (loaded during the last P V)
                        T.ptx.cp.async_.wait_group(0)
                    if barrier:  # ... for every thread; every warp is done with V's stage
                        T.cuda.cta_sync()
                load(V, V_s, kv, t, 0)  # V of tile t while S = Q K^T runs
                T.ptx.cp.async_.commit_group()
            scores(S_r, Q_r, Q_s, K_s, K_f, t % stages, r0)
            mask(S_r, t, q0, r0)
            if lagged_max:
                if t == 0:  # the whole softmax: the rows' first reference
                    hopper.online_softmax(S_r, P16, O_r, m_old, m_new, alpha, l_run, l_tile,
                                          scale, rescale, Tx.warp)
                else:
                    hopper.lagged_rows(S_r, l_lane, l_tile, scale, Tx.warp)
                    mine = T.decl_buffer((2 * mt,), "float32", data=l_lane.data, scope="local")
                    passed = T.meta_var(hopper.lane_total(mine, 2 * mt) > T.float32(hopper.LAG_BOUND))
                    if omit != "rebase":
                        if T.cuda.any_sync(T.uint32(FULL), passed) != 0:  # the warp's rows
                            scores(S_r, Q_r, Q_s, K_s, K_f, t % stages, r0)
                            mask(S_r, t, q0, r0)
                            hopper.rebase_rows(S_r, O_r, m_old, m_new, alpha, l_run, l_lane,
                                               l_tile, scale, rescale, Tx.warp)  # fmt: skip
                    Tx.warp.add(l_run[:, :], l_run[:, :], l_lane[:, :])
                    Tx.warp.cast(P16[:, :], S_r[:, :])
            else:
                hopper.online_softmax(S_r, P16, O_r, m_old, m_new, alpha, l_run, l_tile, scale,
                                      rescale, Tx.warp)
            if stages == 1:
                if wait:  # V of tile t is in
                    T.ptx.cp.async_.wait_group(0)
                if barrier:  # ... for every thread; every warp is done with K's stage
                    T.cuda.cta_sync()
                if t + 1 < kts:  # K of tile t + 1 while O += P V runs
                    if causal:
                        if t + 1 < diagonal:
                            load(K, K_s, kv, t + 1, 0)
                    else:
                        load(K, K_s, kv, t + 1, 0)
                T.ptx.cp.async_.commit_group()
            values(O_r, P16, V_s, V_f, t % stages)
        # O / l and the LSE, through shared memory (Q's stage: no warp reads it any more
        # once every warp is past the barrier)
        hopper.finish(O_r, O16, m_old, l_sum, l_tile, scale, Tx.warp,
                      l_parts if lane_sums else None)
        T.cuda.cta_sync()
        Tx.warp.copy(Q_s[r0 : r0 + WM, :], O16[:, :])
        Tx.warp.copy(lse_s[r0 : r0 + WM, :], l_tile[:, :])
        T.cuda.cta_sync()
        hopper.store_rows(Out, LSE, Q_s, lse_v, h, q0, qb, qbs, q_tail, BM)
    # fmt: on
    return attention_sm80


# The program at a small size, for `tirx-dispatch explain/lower/sim examples/attention_sm80.py`.
kernel = attention_sm80_kernel(2, 128, 64)


def main() -> int:
    from tirx_cuda_dispatch import explain, sim

    print(explain(kernel, "sm_80").overview())
    ok = True
    for heads, kv_heads, seq, d, causal in [(2, 2, 128, 64, False), (2, 1, 100, 128, True)]:
        args = inputs(heads, seq, d, kv_heads=kv_heads)
        func = attention_sm80_kernel(heads, seq, d, causal=causal, kv_heads=kv_heads)
        out = sim.run(func, args, target="sm_80", pipeline="tirx_cuda_dispatch.strict")
        off = close(out[3], out[4], *args[:3], causal=causal)
        ok &= off is None
        print(f"simulator, {heads} heads over {kv_heads}, {seq} x {d}, causal {causal}:",
              off or "O and LSE equal float64 numpy within the bound")  # fmt: skip
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
