"""Seed 000: a warp round-trips a 32x8 float32 tile shared -> registers -> shared.

The register layout ``S[(32, 8) : (1 @ laneid, 1)]`` says lane i owns row i (8 registers),
so each lane moves its row as two 128-bit accesses. Run it with
``python examples/copy_reg.py``: it prints what each copy became (explain()) and the CUDA
kernel; on a machine with a CUDA GPU it also runs the round trip and checks every bit.
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

shape, dtype = (32, 8), "float32"
r_layout = TileLayout(S[shape : (1 @ Axis.laneid, 1)])  # lane i -> row i, 8 registers
s_layout = TileLayout(S[shape])
fs = (slice(0, 32), slice(0, 8))


@T.prim_func
def kernel(A_ptr: T.handle, B_ptr: T.handle):
    A = T.match_buffer(A_ptr, shape, dtype)
    B = T.match_buffer(B_ptr, shape, dtype)
    T.device_entry()
    T.cta_id([1])
    T.lane_id([32])
    tid = T.thread_id([32])
    A_smem = T.alloc_buffer(shape, dtype, scope="shared", layout=s_layout)
    for kk in range(8):
        A_smem[tid, kk] = A[tid, kk]
    T.cuda.cta_sync()
    R = T.alloc_buffer(shape, dtype, scope="local", layout=r_layout)
    Tx.warp.copy(R[fs], A_smem[fs])  # shared -> registers  (reg)
    T.cuda.cta_sync()
    for kk in range(8):
        A_smem[tid, kk] = T.float32(0)  # clear: a no-op copy cannot pass
    T.cuda.cta_sync()
    Tx.warp.copy(A_smem[fs], R[fs])  # registers -> shared  (reg)
    T.cuda.cta_sync()
    for kk in range(8):
        B[tid, kk] = A_smem[tid, kk]


def main() -> int:
    print(tirx_cuda_dispatch.explain(kernel, "sm_90a"))
    source = toolchain.cuda_source(kernel, "sm_90a")
    print(source[source.rindex('extern "C" __global__') :])
    arch = runtime.gpu_arch()
    if arch is None:
        print("no CUDA GPU: lowered only")
        return 0
    ex = runtime.build(kernel, arch)
    a = np.random.default_rng(0).standard_normal(shape).astype(dtype)
    _, b = runtime.run(ex, "kernel", [a, np.full(shape, np.nan, dtype=dtype)])
    ok = np.array_equal(b, a)
    print(f"round trip on {arch}: {'exact' if ok else 'WRONG'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
