"""RMSNorm written only with tile primitives: y = x / sqrt(mean(x^2) + eps) * weight.

x is bfloat16 ``[N, 4096]``, weight bfloat16 ``[4096]``; the statistics are float32. Each
CTA of 256 threads normalizes ``rows`` rows per step: the rows go global -> registers
(``copy -> reg``: 16-byte loads, each thread 16 columns of a row in two 8-wide chunks),
are widened to float32 (``cast``), squared (``mul``) and summed across the CTA
(``sum -> local``: a shuffle butterfly inside each warp, the 8 warps' partials through a
shared workspace), and every thread scales its columns by ``1/sqrt(ss / 4096 + eps)``
and the weight, rounds to bfloat16 and stores them (``copy -> reg``). Nothing but the
tile primitives below is written by hand, and ``tirx_cuda_dispatch.strict`` lowers every
call.

``python examples/rmsnorm.py`` prints the explain() report, checks the kernel against
numpy in the CPU simulator (a few rows), and on a CUDA GPU checks N = 8192 rows.
"""

from __future__ import annotations

import sys

import numpy as np
from tvm.script import tirx as T
from tvm.script.tirx import tile as Tx
from tvm.tirx.layout import S, TileLayout, laneid, warpid

import tirx_cuda_dispatch
from tirx_cuda_dispatch import runtime, sim

D = 4096
THREADS = 256
EPS = 1e-6


def column_layout(rows: int | None = None, threads: int = THREADS) -> TileLayout:
    """Column c = 8 threads j + 256 w + 8 l + v of a row (256 threads: c = 2048 j + 256 w +
    8 l + v): warp w, lane l, register 8 j + v. Each thread holds 16-byte chunks of a row;
    a warp's 32 lanes read 512 contiguous bytes."""
    warps, chunks = threads // 32, D // (threads * 8)
    per_row = chunks * 8
    cols = (chunks, warps, 32, 8)
    strides = (8, 1 @ warpid, 1 @ laneid, 1)
    if rows is None:
        return TileLayout(S[cols:strides])
    return TileLayout(S[(rows, *cols) : (per_row, *strides)])


def rmsnorm_kernel(n: int, rows: int = 2, steps: int = 1, eps: float = EPS, threads: int = THREADS):
    """RMSNorm of ``n`` rows: ``n / (rows * steps)`` CTAs of ``threads`` threads (128, 256
    or 512), each ``steps`` times ``rows`` rows."""
    if n % (rows * steps):
        raise ValueError(f"{n} rows do not divide into steps of {rows} x {steps}")
    ctas = n // (rows * steps)
    inv_d = 1.0 / D

    # fmt: off
    @T.prim_func
    def rmsnorm(X_ptr: T.handle, W_ptr: T.handle, Y_ptr: T.handle):
        X = T.match_buffer(X_ptr, (n, D), "bfloat16")
        W = T.match_buffer(W_ptr, (D,), "bfloat16")
        Y = T.match_buffer(Y_ptr, (n, D), "bfloat16")
        T.device_entry()
        bx = T.cta_id([ctas])
        T.warp_id([threads // 32])
        T.lane_id([32])
        T.thread_id([threads])
        w16 = T.alloc_buffer((D,), "bfloat16", scope="local", layout=column_layout(None, threads))
        w = T.alloc_buffer((D,), "float32", scope="local", layout=column_layout(None, threads))
        x16 = T.alloc_buffer((rows, D), "bfloat16", scope="local", layout=column_layout(rows, threads))
        x = T.alloc_buffer((rows, D), "float32", scope="local", layout=column_layout(rows, threads))
        sq = T.alloc_buffer((rows, D), "float32", scope="local", layout=column_layout(rows, threads))
        ss = T.alloc_buffer((rows, 1), "float32", scope="local", layout=TileLayout(S[(rows, 1)]))
        Tx.cta.copy(w16[:], W[:])
        Tx.cta.cast(w[:], w16[:])
        for step in range(steps):
            r0 = (bx * steps + step) * rows
            Tx.cta.copy(x16[:, :], X[r0 : r0 + rows, :])
            Tx.cta.cast(x[:, :], x16[:, :])
            Tx.cta.mul(sq[:, :], x[:, :], x[:, :])
            Tx.cta.sum(ss[:, :], sq[:, :], axes=[-1])
            Tx.sqrt(ss[:, :], ss[:, :], T.float32(eps), T.float32(inv_d))  # per thread
            Tx.reciprocal(ss[:, :], ss[:, :])
            Tx.cta.mul(x[:, :], x[:, :], ss[:, :])
            Tx.cta.mul(x[:, :], x[:, :], w[:])
            Tx.cta.cast(x16[:, :], x[:, :])
            Tx.cta.copy(Y[r0 : r0 + rows, :], x16[:, :])
    # fmt: on
    return rmsnorm


# The program at a small size, for `tirx-dispatch explain/lower/sim examples/rmsnorm.py`.
kernel = rmsnorm_kernel(8, rows=2)


def reference(x: np.ndarray, weight: np.ndarray, eps: float = EPS) -> np.ndarray:
    """numpy in float32, the kernel's arithmetic (one rounding into bfloat16 at the end)."""
    xf = x.astype(np.float32)
    ss = (xf * xf).sum(axis=-1, keepdims=True, dtype=np.float32)
    rstd = np.float32(1.0) / np.sqrt(ss * np.float32(1.0 / D) + np.float32(eps))
    return ((xf * rstd) * weight.astype(np.float32)).astype(x.dtype)


def inputs(n: int, seed: int = 0) -> list[np.ndarray]:
    import ml_dtypes

    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, D)).astype(np.float32).astype(ml_dtypes.bfloat16)
    w = (1 + 0.1 * rng.standard_normal(D)).astype(np.float32).astype(ml_dtypes.bfloat16)
    y = np.full((n, D), np.nan, dtype=np.float32).astype(ml_dtypes.bfloat16)
    return [x, w, y]


def close(y: np.ndarray, want: np.ndarray) -> bool:
    """Within one bfloat16 ulp of the float32 reference (summation orders differ)."""
    a, b = y.astype(np.float32), want.astype(np.float32)
    return bool(np.all(np.abs(a - b) <= 2.0**-7 * np.abs(b) + 1e-6))


def main() -> int:
    print(tirx_cuda_dispatch.explain(kernel, "sm_90a"))
    x, w, y = inputs(8)
    out = sim.run(kernel, [x, w, y], target="sm_90a", grid=2, pipeline="tirx_cuda_dispatch.strict")
    ok = close(out[2][:4], reference(x[:4], w))
    print(f"simulator, 4 rows: {'ok' if ok else 'WRONG'}")
    arch = runtime.gpu_arch()
    if arch is None:
        print("no CUDA GPU: simulated only")
        return 0 if ok else 1
    n = 8192
    x, w, y = inputs(n)
    exe = runtime.build(rmsnorm_kernel(n), arch, "tirx_cuda_dispatch.strict")
    _, _, y = runtime.run(exe, "rmsnorm", [x, w, y])
    gpu_ok = close(y, reference(x, w))
    print(f"{arch}, {n} rows: {'ok' if gpu_ok else 'WRONG'}")
    return 0 if ok and gpu_ok else 1


if __name__ == "__main__":
    sys.exit(main())
