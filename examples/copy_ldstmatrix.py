"""Seed 002: a warp loads two 8x8 float16 matrices shared -> registers with ldmatrix.

The register layout ``S[(8, 4, 2, 2) : (4 @ laneid, 1 @ laneid, 2, 1)]`` is the m8n8
fragment (lane i holds row i // 4, columns 2 (i % 4) and 2 (i % 4) + 1 of each matrix),
and the shared tile is row-major, so the copy becomes one ``ldmatrix .x2``; the copy back
becomes one ``stmatrix .x2``. Run it with ``python examples/copy_ldstmatrix.py``: it prints
what each copy became (explain()) and the CUDA kernel; on a machine with a CUDA GPU it
also runs the kernel and checks both the registers each lane received and the round trip.
The shared tile is cleared between the two copies, so a copy that does nothing fails.
"""

from __future__ import annotations

import sys

import numpy as np
from tvm.script import tirx as T
from tvm.script.tirx import tile as Tx
from tvm.tirx.layout import Axis, S, TileLayout

import tirx_cuda_dispatch
from tirx_cuda_dispatch import runtime, toolchain

num = 2
M, N = 8, num * 8
dtype = "float16"
laneid = Axis.laneid
r_layout = TileLayout(S[(8, 4, num, 2) : (4 @ laneid, 1 @ laneid, 2, 1)])
s_layout = TileLayout(S[(8, 4, num, 2) : (num * 8, 2, 8, 1)])  # row-major 8 x 16
full = (slice(0, 8), slice(0, 4), slice(0, num), slice(0, 2))


@T.prim_func
def kernel(A_ptr: T.handle, B_ptr: T.handle, F_ptr: T.handle):
    A = T.match_buffer(A_ptr, (M, N), dtype)
    B = T.match_buffer(B_ptr, (M, N), dtype)
    F = T.match_buffer(F_ptr, (32, 2 * num), dtype)  # each lane's registers
    T.device_entry()
    T.cta_id([1])
    T.lane_id([32])
    tid = T.thread_id([32])
    A_smem = T.alloc_buffer((8, 4, num, 2), dtype, scope="shared", layout=s_layout)
    A_rows = T.decl_buffer((M, N), dtype, data=A_smem.data, scope="shared")  # same bytes
    row = T.meta_var(tid // 4)
    quarter = T.meta_var(tid % 4 * (N // 4))
    for c in range(N // 4):  # stage A: lane t writes a quarter of row t // 4
        A_rows[row, quarter + c] = A[row, quarter + c]
    T.cuda.cta_sync()
    R = T.alloc_buffer((8, 4, num, 2), dtype, scope="local", layout=r_layout)
    R_flat = T.decl_buffer((2 * num,), dtype, data=R.data, scope="local")
    # ldmatrix .x2, forced: its rows here are 32 B apart (2-way bank conflicts), so the cost rule alone picks copy -> reg
    Tx.warp.copy(R[full], A_smem[full], dispatch="ldstmatrix")
    for r in range(2 * num):
        F[tid, r] = R_flat[r]
    T.cuda.cta_sync()
    for c in range(N // 4):
        A_rows[row, quarter + c] = T.float16(0)  # clear: a no-op copy cannot pass
    T.cuda.cta_sync()
    Tx.warp.copy(A_smem[full], R[full], dispatch="ldstmatrix")  # registers -> shared (stmatrix)
    T.cuda.cta_sync()
    for c in range(N // 4):
        B[row, quarter + c] = A_rows[row, quarter + c]


def fragment(a: np.ndarray) -> np.ndarray:
    """What the PTX ISA says lane i holds: register 2j + h = matrix j, row i // 4,
    column 2 (i % 4) + h."""
    f = np.empty((32, 2 * num), dtype=a.dtype)
    for i in range(32):
        for j in range(num):
            for h in range(2):
                f[i, 2 * j + h] = a[i // 4, 8 * j + 2 * (i % 4) + h]
    return f


def main() -> int:
    print(tirx_cuda_dispatch.explain(kernel, "sm_90a"))
    source = toolchain.cuda_source(kernel, "sm_90a")
    print(source[source.rindex('extern "C" __global__') :])
    arch = runtime.gpu_arch()
    if arch is None:
        print("no CUDA GPU: lowered only")
        return 0
    ex = runtime.build(kernel, arch)
    a = np.random.default_rng(0).standard_normal((M, N)).astype(dtype)
    poison = np.full((M, N), np.nan, dtype=dtype)
    _, b, f = runtime.run(ex, "kernel", [a, poison, np.full((32, 2 * num), np.nan, dtype)])
    ok_f = np.array_equal(f, fragment(a))
    ok_b = np.array_equal(b, a)
    print(f"fragment on {arch}: {'as the ISA says' if ok_f else 'WRONG'}")
    print(f"round trip on {arch}: {'exact' if ok_b else 'WRONG'}")
    return 0 if ok_f and ok_b else 1


if __name__ == "__main__":
    sys.exit(main())
