"""Row softmax written only with tile primitives: y = exp(x - max(x)) / sum(exp(x - max(x))).

x is float16 ``[N, 4096]``, computed in float32, y float16. Each CTA of 256 threads takes
``rows`` rows per step: global -> registers (``copy -> reg``, 16-byte loads), widened to
float32 (``cast``), the row maximum across the CTA (``max -> local``: shuffles in each
warp, the warps through a shared workspace), ``exp2((x - max) * log2 e)`` per element
(``sub``, ``exp2`` with a scale), the row sum the same way (``sum -> local``), one
reciprocal per row and thread, the product, rounded to float16 and stored. Every call is
lowered by ``tirx_cuda_dispatch.strict``.

``python examples/softmax.py`` prints the explain() report, checks the kernel against
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
LOG2E = 1.4426950408889634


def row_layout(rows: int, threads: int = THREADS) -> TileLayout:
    """Column c = 8 threads j + 256 w + 8 l + v of a row: warp w, lane l, register 8 j + v."""
    warps, chunks = threads // 32, D // (threads * 8)
    return TileLayout(S[(rows, chunks, warps, 32, 8) : (chunks * 8, 8, 1 @ warpid, 1 @ laneid, 1)])


def softmax_kernel(n: int, rows: int = 2, steps: int = 1, threads: int = THREADS):
    """Softmax of ``n`` rows: ``n / (rows * steps)`` CTAs of ``threads`` threads (128, 256
    or 512), each ``steps`` times ``rows`` rows."""
    if n % (rows * steps):
        raise ValueError(f"{n} rows do not divide into steps of {rows} x {steps}")
    ctas = n // (rows * steps)

    # fmt: off
    @T.prim_func
    def softmax(X_ptr: T.handle, Y_ptr: T.handle):
        X = T.match_buffer(X_ptr, (n, D), "float16")
        Y = T.match_buffer(Y_ptr, (n, D), "float16")
        T.device_entry()
        bx = T.cta_id([ctas])
        T.warp_id([threads // 32])
        T.lane_id([32])
        T.thread_id([threads])
        x16 = T.alloc_buffer((rows, D), "float16", scope="local", layout=row_layout(rows, threads))
        x = T.alloc_buffer((rows, D), "float32", scope="local", layout=row_layout(rows, threads))
        m = T.alloc_buffer((rows, 1), "float32", scope="local", layout=TileLayout(S[(rows, 1)]))
        s = T.alloc_buffer((rows, 1), "float32", scope="local", layout=TileLayout(S[(rows, 1)]))
        for step in range(steps):
            r0 = (bx * steps + step) * rows
            Tx.cta.copy(x16[:, :], X[r0 : r0 + rows, :])
            Tx.cta.cast(x[:, :], x16[:, :])
            Tx.cta.max(m[:, :], x[:, :], axes=[-1])
            Tx.cta.sub(x[:, :], x[:, :], m[:, :])
            Tx.cta.exp2(x[:, :], x[:, :], None, T.float32(LOG2E))
            Tx.cta.sum(s[:, :], x[:, :], axes=[-1])
            Tx.reciprocal(s[:, :], s[:, :])  # per thread: every thread holds the row sums
            Tx.cta.mul(x[:, :], x[:, :], s[:, :])
            Tx.cta.cast(x16[:, :], x[:, :])
            Tx.cta.copy(Y[r0 : r0 + rows, :], x16[:, :])
    # fmt: on
    return softmax


# The program at a small size, for `tirx-dispatch explain/lower/sim examples/softmax.py`.
kernel = softmax_kernel(8, rows=2)


def reference(x: np.ndarray) -> np.ndarray:
    xf = x.astype(np.float64)
    e = np.exp(xf - xf.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True)).astype(x.dtype)


def inputs(n: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    x = (3 * rng.standard_normal((n, D))).astype(np.float16)
    return [x, np.full((n, D), np.nan, dtype=np.float16)]


def close(y: np.ndarray, want: np.ndarray) -> bool:
    """Within two float16 ulps of the float64 reference (exp2 is an approximation)."""
    a, b = y.astype(np.float64), want.astype(np.float64)
    return bool(np.all(np.abs(a - b) <= 2.0**-9 * np.abs(b) + 2.0**-24))


def main() -> int:
    print(tirx_cuda_dispatch.explain(kernel, "sm_90a"))
    x, y = inputs(8)
    out = sim.run(kernel, [x, y], target="sm_90a", grid=2, pipeline="tirx_cuda_dispatch.strict")
    ok = close(out[1][:4], reference(x[:4]))
    print(f"simulator, 4 rows: {'ok' if ok else 'WRONG'}")
    arch = runtime.gpu_arch()
    if arch is None:
        print("no CUDA GPU: simulated only")
        return 0 if ok else 1
    n = 8192
    x, y = inputs(n)
    exe = runtime.build(softmax_kernel(n), arch, "tirx_cuda_dispatch.strict")
    _, y = runtime.run(exe, "softmax", [x, y])
    gpu_ok = close(y, reference(x))
    print(f"{arch}, {n} rows: {'ok' if gpu_ok else 'WRONG'}")
    return 0 if ok and gpu_ok else 1


if __name__ == "__main__":
    sys.exit(main())
