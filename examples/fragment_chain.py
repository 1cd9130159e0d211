"""A small realistic kernel that chains the variants: an MMA A-fragment round trip with a
ReLU in registers.

One warp: a 16x16 float16 tile of A goes global -> shared (``copy -> gmem_smem``) ->
registers as the m16n8k16 A fragment (``copy -> ldstmatrix``: one ``ldmatrix .x4``) ->
``maximum(x, 0)`` on the registers (``elementwise -> reg``) -> shared
(``copy -> ldstmatrix``: one ``stmatrix .x4``) -> B global (``copy -> gmem_smem``). Both
shared tiles use the 32-byte swizzle, so neither matrix instruction bank-conflicts (a
row-major 16x16 tile would: its rows are 32 bytes apart). The output tile is cleared
first, so a store that does nothing fails the check.

``python examples/fragment_chain.py`` prints what each call became, the kernel, and its
SASS memory instructions; on a CUDA GPU it runs and checks ``B == max(A, 0)`` bit for bit.
"""

from __future__ import annotations

import re
import sys
from collections import Counter

import numpy as np
from tvm.backend.cuda.tile_primitive.tma_utils import SwizzleMode, mma_shared_layout
from tvm.script import tirx as T
from tvm.script.tirx import tile as Tx
from tvm.tirx.layout import Axis, S, TileLayout

import tirx_cuda_dispatch
from tirx_cuda_dispatch import runtime, toolchain

laneid = Axis.laneid
dtype, shape = "float16", (16, 16)
# m16n8k16 A fragment: a0a1 = (g, 2c), a2a3 = (g + 8, 2c), a4a5 = (g, 2c + 8),
# a6a7 = (g + 8, 2c + 8), where lane = 4g + c.
a_fragment = TileLayout(S[(2, 8, 2, 4, 2) : (2, 4 @ laneid, 4, 1 @ laneid, 1)])
swizzled = mma_shared_layout(dtype, SwizzleMode.SWIZZLE_32B_ATOM, shape)
full = (slice(0, 16), slice(0, 16))


@T.prim_func
def kernel(A_ptr: T.handle, B_ptr: T.handle):
    A = T.match_buffer(A_ptr, shape, dtype)
    B = T.match_buffer(B_ptr, shape, dtype)
    T.device_entry()
    T.cta_id([1])
    T.lane_id([32])
    T.thread_id([32])
    A_smem = T.alloc_buffer(shape, dtype, scope="shared", layout=swizzled)
    B_smem = T.alloc_buffer(shape, dtype, scope="shared", layout=swizzled)
    R = T.alloc_buffer(shape, dtype, scope="local", layout=a_fragment)
    Tx.warp.copy(A_smem[full], A[full])  # global -> shared        (gmem_smem)
    Tx.warp.copy(B_smem[full], B[full])  # B's poison into the output tile
    T.cuda.cta_sync()
    Tx.warp.copy(R[full], A_smem[full])  # shared -> fragment      (ldstmatrix: ldmatrix.x4)
    Tx.warp.maximum(R[full], R[full], T.float16(0))  # ReLU       (elementwise -> reg)
    Tx.warp.copy(B_smem[full], R[full])  # fragment -> shared      (ldstmatrix: stmatrix.x4)
    T.cuda.cta_sync()
    Tx.warp.copy(B[full], B_smem[full])  # shared -> global        (gmem_smem)


def main() -> int:
    print(tirx_cuda_dispatch.explain(kernel, "sm_90a"))
    source = toolchain.cuda_source(kernel, "sm_90a", tirx_cuda_dispatch.STRICT_PIPELINE)
    print(source[source.rindex('extern "C" __global__') :])
    sass = toolchain.sass(toolchain.nvrtc_compile(source, "sm_90a"))
    memory = Counter(re.findall(r"\b(?:LDSM|STSM|LDS|STS|LDG|STG|HMNMX2)(?:\.\w+)*", sass))
    print("sm_90a SASS:", dict(memory))
    arch = runtime.gpu_arch()
    if arch is None:
        print("no CUDA GPU: lowered only")
        return 0
    a = np.random.default_rng(0).standard_normal(shape).astype(dtype)
    ex = runtime.build(kernel, arch, tirx_cuda_dispatch.STRICT_PIPELINE)
    _, b = runtime.run(ex, "kernel", [a, np.full(shape, np.nan, dtype=dtype)])
    ok = np.array_equal(runtime.bits(b), runtime.bits(np.maximum(a, np.float16(0))))
    print(f"ReLU on the A fragment on {arch}: {'exact' if ok else 'WRONG'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
