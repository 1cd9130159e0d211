"""The Hopper GEMM, written only with tile primitives: C = relu(A B + bias) with TMA loads
and wgmma.

A is float16 ``[M, K]``, B float16 ``[K, N]``, bias float16 ``[N]``, C float16 ``[M, N]``;
the products accumulate in float32. Each CTA of two warpgroups computes a 128 x 256 tile
of C, each warpgroup 64 rows of it (M, N and K must be multiples of 128, 256 and 64):

- a ``stages``-deep pipeline of TMA loads (``copy_async -> tma_auto``: one thread issues a
  box of A, 128 x 64, and four of B, 64 x 64 column blocks, per K tile) into 128-byte
  swizzled shared memory, each stage completing on its ``full`` mbarrier (the issuing
  thread announces the stage's 48 KiB with ``arrive.expect_tx``);
- each warpgroup waits for the stage and runs its four ``wgmma.m64n256k16`` on it
  (``gemm_async -> wgmma``, descriptors found from the layouts), commits, and waits for
  all but this K tile's group: the previous tile's MMAs are done, so one thread per
  warpgroup arrives on that stage's ``empty`` mbarrier, and the issuing thread refills the
  stage (``stages - 1`` tiles ahead) once both warpgroups have;
- the epilogue adds the bias (a fragment replicated over the threads that share a
  column), applies relu while rounding to float16 once (``maximum`` with a float16 dst),
  stores the fragment to shared memory, and the CTA copies the tile to C with 16-byte
  stores (``copy -> gmem_smem``).

No warp specialization: every warp runs the same loop, which the CPU simulator runs in
lockstep (a producer warp spinning on an ``empty`` barrier while consumers run would not).

``python examples/gemm_hopper.py`` prints the explain() report, checks a small GEMM in the
CPU simulator against numpy, and on an sm_90 GPU checks 4096 x 4096 x 4096.
"""

from __future__ import annotations

import sys

from tvm.script import tirx as T
from tvm.script.tirx import tile as Tx
from tvm.tirx.layout import ComposeLayout, R, S, TileLayout, tid_in_wg

from tirx_cuda_dispatch import fragments

BM, BN, BK = 128, 256, 64
WGS = 2  # warpgroups, each 64 rows of the tile
WG_ROWS = BM // WGS


def bias_fragment(n: int) -> TileLayout:
    """The columns of a wgmma accumulator (1 x n): thread ``32 w + l`` holds columns
    ``8 j + 2 (l % 4)`` and ``+ 1``, the same in the 8 threads of each ``l % 4`` of every
    warp (replicas over ``l / 4`` and ``w``)."""
    return TileLayout(
        S[(1, n // 8, 4, 2) : (n // 4, 2, 1 @ tid_in_wg, 1)]
        + R[(4, 8) : (32 @ tid_in_wg, 4 @ tid_in_wg)]
    )


def gemm_kernel(
    m: int,
    n: int,
    k: int,
    stages: int = 4,
    epilogue: str = "bias_relu",
    omit: str | None = None,
):
    """C = relu(A B + bias) (``epilogue="plain"``: C = A B rounded to float16) with
    ``stages`` TMA stages (2 to 4). ``omit`` breaks the kernel on purpose, for the tests'
    negative controls: ``"tma_wait"`` leaves out the wait for a stage's full barrier,
    ``"wgmma_wait"`` the final wait for the wgmma groups."""
    if omit not in (None, "tma_wait", "wgmma_wait"):
        raise ValueError(f"omit={omit!r}: None, 'tma_wait' or 'wgmma_wait'")
    wait_full, wait_mma = omit != "tma_wait", omit != "wgmma_wait"
    if m % BM or n % BN or k % BK:
        raise ValueError(f"{m}x{n}x{k}: M, N, K must be multiples of {BM}, {BN}, {BK}")
    if not 2 <= stages <= 4:
        raise ValueError(f"stages={stages}: 2 to 4 (48 KiB each)")
    if epilogue not in ("bias_relu", "plain"):
        raise ValueError(f"epilogue={epilogue!r}: 'bias_relu' or 'plain'")
    with_bias = epilogue == "bias_relu"
    gm, gn, kts = m // BM, n // BN, k // BK
    a_elems, b_elems = stages * BM * BK, stages * BK * BN
    c_elems = BM * BN  # the epilogue's tile reuses the stages
    bias_at = max(a_elems + b_elems, c_elems)
    bars_at = bias_at + BN  # float16 elements; 2 * stages mbarriers of 8 bytes after it
    pool_elems = bars_at + 2 * stages * 4
    stage_bytes = (BM * BK + BK * BN) * 2
    a_layout = ComposeLayout(3, 3, 3, TileLayout(S[(stages, BM, BK) : (BM * BK, BK, 1)]))
    b_layout = ComposeLayout(
        3, 3, 3, TileLayout(S[(stages, BK, BN // 64, 64) : (BK * BN, 64, BK * 64, 1)])
    )
    c_layout = ComposeLayout(3, 3, 3, TileLayout(S[(BM, BN // 64, 64) : (64, BM * 64, 1)]))
    acc = fragments.wgmma_accumulator_layout(BN, 1)
    bias_frag = bias_fragment(BN)

    def issue(A, B, A_s, B_s, bars, bm, bn, kt) -> None:
        """Thread 0: K tile ``kt`` of A's rows and B's columns into its stage, completing on
        the stage's full barrier (announced first)."""
        s = kt % stages
        T.evaluate(T.ptx["mbarrier.arrive.expect_tx.shared.b64"](bars.ptr_to([s]), stage_bytes))
        m0, n0, k0 = bm * BM, bn * BN, kt * BK
        Tx.copy_async(A_s[s, :, :], A[m0 : m0 + BM, k0 : k0 + BK], mbar=bars.ptr_to([s]))
        Tx.copy_async(B_s[s, :, :], B[k0 : k0 + BK, n0 : n0 + BN], mbar=bars.ptr_to([s]))

    # fmt: off
    @T.prim_func
    def gemm(A_ptr: T.handle, B_ptr: T.handle, bias_ptr: T.handle, C_ptr: T.handle):
        A = T.match_buffer(A_ptr, (m, k), "float16")
        B = T.match_buffer(B_ptr, (k, n), "float16")
        bias = T.match_buffer(bias_ptr, (n,), "float16")
        C = T.match_buffer(C_ptr, (m, n), "float16")
        T.device_entry()
        bm, bn = T.cta_id([gm, gn])
        wg = T.warpgroup_id([WGS])
        T.warp_id_in_wg([4])
        T.lane_id([32])
        tid_wg = T.thread_id_in_wg([128])
        tid = T.thread_id([WGS * 128])
        pool = T.alloc_buffer((pool_elems,), "float16", scope="shared.dyn", align=1024)
        T.attr({"tirx.dyn_smem_bytes": pool_elems * 2})
        A_s = T.decl_buffer((stages, BM, BK), "float16", pool.data, scope="shared.dyn", layout=a_layout)
        B_s = T.decl_buffer((stages, BK, BN), "float16", pool.data, elem_offset=a_elems,
                            scope="shared.dyn", layout=b_layout)
        C_s = T.decl_buffer((BM, BN), "float16", pool.data, scope="shared.dyn", layout=c_layout)
        bias_s = T.decl_buffer((1, BN), "float16", pool.data, elem_offset=bias_at, scope="shared.dyn")
        bars = T.decl_buffer((2 * stages,), "uint64", pool.data, elem_offset=bars_at // 4,
                             scope="shared.dyn")
        bias2 = T.decl_buffer((1, n), "float16", bias.data)
        D = T.alloc_buffer((WG_ROWS, BN), "float32", scope="local", layout=acc)
        D16 = T.alloc_buffer((WG_ROWS, BN), "float16", scope="local", layout=acc)
        bias16 = T.alloc_buffer((1, BN), "float16", scope="local", layout=bias_frag)
        bias32 = T.alloc_buffer((1, BN), "float32", scope="local", layout=bias_frag)
        if tid == 0:
            for s in range(stages):
                T.ptx.mbarrier.init.shared.b64(bars.ptr_to([s]), 1)
                T.ptx.mbarrier.init.shared.b64(bars.ptr_to([stages + s]), WGS)
            T.ptx["fence.mbarrier_init.release.cluster"]()
        if with_bias:
            Tx.cta.copy(bias_s[:, :], bias2[0:1, bn * BN : bn * BN + BN])
        T.cuda.cta_sync()
        Tx.wg.fill(D[:, :], T.float32(0.0))
        if tid == 0:
            for t in range(min(stages - 1, kts)):
                issue(A, B, A_s, B_s, bars, bm, bn, t)
        for kt in range(kts):
            s = T.meta_var(kt % stages)
            if wait_full:
                T.cuda.mbarrier_wait(bars.ptr_to([s]), (kt // stages) % 2)
            Tx.wg.gemm_async(D[:, :], A_s[s, wg * WG_ROWS : wg * WG_ROWS + WG_ROWS, :], B_s[s, :, :],
                             transA=False, transB=True, accum=True)
            T.ptx["wgmma.commit_group.sync.aligned"]()
            T.ptx["wgmma.wait_group.sync.aligned"](1)
            if kt > 0:  # tile kt - 1's MMAs are done: its stage is free for this warpgroup
                if tid_wg == 0:
                    T.ptx["mbarrier.arrive.shared.b64"](bars.ptr_to([stages + (kt - 1) % stages]))
            if tid == 0:
                if kt + stages - 1 < kts:
                    if kt > 0:  # the stage held tile kt - 1: wait until both warpgroups freed it
                        T.cuda.mbarrier_wait(bars.ptr_to([stages + (kt - 1) % stages]),
                                             ((kt - 1) // stages) % 2)
                    issue(A, B, A_s, B_s, bars, bm, bn, kt + stages - 1)
        if wait_mma:
            T.ptx["wgmma.wait_group.sync.aligned"](0)
        T.cuda.cta_sync()  # every warpgroup is past its reads of the stages C_s reuses
        if with_bias:
            Tx.wg.copy(bias16[:, :], bias_s[:, :])
            Tx.wg.cast(bias32[:, :], bias16[:, :])
            Tx.wg.add(D[:, :], D[:, :], bias32[:, :])
            Tx.wg.maximum(D16[:, :], D[:, :], T.float32(0.0))
        else:
            Tx.wg.cast(D16[:, :], D[:, :])
        Tx.wg.copy(C_s[wg * WG_ROWS : wg * WG_ROWS + WG_ROWS, :], D16[:, :])
        T.cuda.cta_sync()
        for cb in T.unroll(BN // 64):
            Tx.cta.copy(C[bm * BM : bm * BM + BM, bn * BN + cb * 64 : bn * BN + cb * 64 + 64],
                        C_s[:, cb * 64 : cb * 64 + 64])
    # fmt: on
    return gemm


# The program at a small size, for `tirx-dispatch explain/lower/sim examples/gemm_hopper.py`.
kernel = gemm_kernel(128, 256, 192, stages=2)


def main() -> int:
    sys.path.insert(0, __file__.rsplit("/", 1)[0])
    from gemm import check

    return check(kernel, (128, 256, 192), gemm_kernel, gpu_archs=("sm_90a",))


if __name__ == "__main__":
    sys.exit(main())
