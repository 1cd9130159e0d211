"""Seed 001: a warp takes the elementwise sqrt of a 32x8 float32 register tile.

global -> shared (gmem_smem) -> registers (copy -> reg) -> sqrt (elementwise -> reg) ->
shared -> global. Run it with ``python examples/elementwise_reg.py``: it prints the
explain() report and the CUDA kernel, and on a CUDA GPU checks the result against numpy
bit for bit (float32 sqrt is emitted correctly rounded, ``__fsqrt_rn``).
"""

from __future__ import annotations

import sys

import numpy as np
from tvm.script import tirx as T
from tvm.script.tirx import tile as Tx
from tvm.tirx.layout import Axis, S, TileLayout

import tirx_cuda_dispatch
from tirx_cuda_dispatch import runtime, toolchain

r_layout = TileLayout(S[(32, 8) : (1 @ Axis.laneid, 1)])
fs = (slice(0, 32), slice(0, 8))


@T.prim_func
def kernel(A_ptr: T.handle, B_ptr: T.handle):
    A = T.match_buffer(A_ptr, (32, 8), "float32")
    B = T.match_buffer(B_ptr, (32, 8), "float32")
    T.device_entry()
    T.cta_id([1])
    T.lane_id([32])
    T.thread_id([32])
    A_smem = T.alloc_buffer((32, 8), "float32", scope="shared", layout=TileLayout(S[(32, 8)]))
    Tx.warp.copy(A_smem[fs], A[fs])
    T.cuda.cta_sync()
    R = T.alloc_buffer((32, 8), "float32", scope="local", layout=r_layout)
    Tx.warp.copy(R[fs], A_smem[fs])
    Tx.warp.sqrt(R[fs], R[fs])  # elementwise -> reg
    Tx.warp.copy(A_smem[fs], R[fs])
    T.cuda.cta_sync()
    Tx.warp.copy(B[fs], A_smem[fs])


def main() -> int:
    print(tirx_cuda_dispatch.explain(kernel, "sm_90a"))
    source = toolchain.cuda_source(kernel, "sm_90a")
    print(source[source.rindex('extern "C" __global__') :])
    arch = runtime.gpu_arch()
    if arch is None:
        print("no CUDA GPU: lowered only")
        return 0
    a = np.abs(np.random.default_rng(0).standard_normal((32, 8))).astype("float32")
    _, b = runtime.run(runtime.build(kernel, arch), "kernel", [a, np.full_like(a, np.nan)])
    ok = np.array_equal(b, np.sqrt(a))
    print(f"sqrt on {arch}: {'exact' if ok else 'WRONG'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
