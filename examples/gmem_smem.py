"""Seed 004: a warp copies a 32x32 float32 tile global -> shared -> global.

Run it with ``python examples/gmem_smem.py``. It prints what each copy became (explain())
and the CUDA kernel; on a machine with a CUDA GPU it also runs the round trip on random
data into a poisoned output buffer and checks every bit.
"""

from __future__ import annotations

import sys

import numpy as np
import tvm
from tvm.script import tirx as T
from tvm.script.tirx import tile as Tx
from tvm.tirx.layout import S, TileLayout

import tirx_cuda_dispatch
from tirx_cuda_dispatch import runtime, toolchain

shape, dtype = (32, 32), "float32"
s_layout = TileLayout(S[shape])
fs = (slice(0, 32), slice(0, 32))


@T.prim_func
def kernel(A_ptr: T.handle, B_ptr: T.handle):
    A = T.match_buffer(A_ptr, shape, dtype)
    B = T.match_buffer(B_ptr, shape, dtype)
    T.device_entry()
    T.cta_id([1])
    T.lane_id([32])
    T.thread_id([32])
    A_smem = T.alloc_buffer(shape, dtype, scope="shared", layout=s_layout)
    Tx.warp.copy(A_smem[fs], A[fs])  # global -> shared  (gmem_smem)
    T.cuda.cta_sync()
    Tx.warp.copy(B[fs], A_smem[fs])  # shared -> global  (gmem_smem)


def main() -> int:
    print(tirx_cuda_dispatch.explain(kernel, "sm_90a"))
    source = toolchain.cuda_source(kernel, "sm_90a")
    print(source[source.rindex('extern "C" __global__') :])
    arch = runtime.gpu_arch()
    if arch is None:
        print("no CUDA GPU: lowered only")
        return 0
    ex = tvm.compile(
        kernel,
        target=tvm.target.Target({"kind": "cuda", "arch": arch}),
        tir_pipeline="tirx_cuda_dispatch",
    )
    a = np.random.default_rng(0).standard_normal(shape).astype(dtype)
    b = np.full(shape, np.nan, dtype=dtype)
    dev = tvm.cuda(0)
    a_dev, b_dev = tvm.runtime.tensor(a, device=dev), tvm.runtime.tensor(b, device=dev)
    ex["kernel"](a_dev, b_dev)
    ok = np.array_equal(b_dev.numpy(), a)
    print(f"round trip on {arch}: {'exact' if ok else 'WRONG'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
