"""Seed 003: a warpgroup round-trips a 128x8 float16 tile registers -> tmem -> registers.

Run it with ``python examples/tcgen05_ldst.py``. It prints what each copy became
(explain()), the CUDA kernel and the tensor-memory instructions of its SASS for sm_100a
(NVRTC, no GPU needed); on a Blackwell GPU it also runs the round trip on random data into
a poisoned output buffer and checks every bit.

The copies emit no wait: completion is the caller's, so the kernel waits itself
(``tcgen05.wait::st`` before reading tensor memory back, ``tcgen05.wait::ld`` before
using the loaded registers).
"""

from __future__ import annotations

import re
import sys
from collections import Counter

import numpy as np
from tvm.script import tirx as T
from tvm.script.tirx import tile as Tx
from tvm.tirx.layout import S, TCol, TileLayout, TLane, tid_in_wg

import tirx_cuda_dispatch
import tirx_cuda_dispatch.copy_async  # noqa: F401  (registers tcgen05_ldst)
from tirx_cuda_dispatch import runtime, toolchain

WIDTH, dtype = 8, "float16"  # 8 float16 = 4 32-bit registers per thread: .32x32b.x4
local_view = TileLayout(S[(128, WIDTH) : (1 @ tid_in_wg, 1)])  # thread t owns row t
tmem_view = TileLayout(S[(128, WIDTH) : (1 @ TLane, 1 @ TCol)])  # row r in TMEM lane r


@T.prim_func
def kernel(A_ptr: T.handle, B_ptr: T.handle):
    A = T.match_buffer(A_ptr, (128, WIDTH), dtype)
    B = T.match_buffer(B_ptr, (128, WIDTH), dtype)
    T.device_entry()
    warp_id = T.warp_id([4])
    T.warpgroup_id([1])
    tid = T.thread_id([128])
    pool = T.SMEMPool()
    tmem_addr = pool.alloc((1,), "uint32")
    pool.commit()
    if warp_id == 0:  # one warp allocates 32 TMEM columns (the minimum)
        T.ptx["tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32"](
            T.address_of(tmem_addr[0]), 32
        )
        T.ptx["tcgen05.fence::before_thread_sync"]()  # order the alloc before the barrier
    T.tvm_storage_sync("shared")
    T.ptx["tcgen05.fence::after_thread_sync"]()
    # TVM 0.27 takes a constant allocated_addr (as its TMEMPool does): the tile starts at
    # column 0, which the only allocation of a CTA alone on its SM gets; trap otherwise.
    T.cuda.trap_when_assert_failed(tmem_addr[0] == 0)
    tmem = T.decl_buffer((128, WIDTH), dtype, scope="tmem", allocated_addr=0, layout=tmem_view)
    A_reg = T.alloc_local((WIDTH,), dtype)
    B_reg = T.alloc_local((WIDTH,), dtype)
    A_local = A_reg.view(128, WIDTH, layout=local_view)
    B_local = B_reg.view(128, WIDTH, layout=local_view)
    for i in range(WIDTH):
        A_reg[i] = A[tid, i]
    Tx.wg.copy_async(tmem[:, :], A_local[:, :])  # local -> tmem: tcgen05.st
    T.ptx.tcgen05.wait__st.sync.aligned()  # the caller's wait
    T.cuda.cta_sync()
    Tx.wg.copy_async(B_local[:, :], tmem[:, :])  # tmem -> local: tcgen05.ld
    T.ptx.tcgen05.wait__ld.sync.aligned()  # the caller's wait
    for i in range(WIDTH):
        B[tid, i] = B_reg[i]
    T.ptx["tcgen05.fence::before_thread_sync"]()  # every warp's loads before the dealloc
    T.cuda.cta_sync()
    if warp_id == 0:
        T.ptx["tcgen05.fence::after_thread_sync"]()
        T.ptx["tcgen05.dealloc.cta_group::1.sync.aligned.b32"](tmem_addr[0], 32)


def main() -> int:
    print(tirx_cuda_dispatch.explain(kernel, "sm_100a"))
    source = toolchain.cuda_source(kernel, "sm_100a", tirx_cuda_dispatch.STRICT_PIPELINE)
    print(source[source.rindex('extern "C" __global__') :])
    sass = toolchain.sass(toolchain.nvrtc_compile(source, "sm_100a"))
    print("sm_100a SASS:", dict(Counter(re.findall(r"\b(?:LD|ST)TM(?:\.\w+)*", sass))))
    arch = runtime.gpu_arch()
    if arch is None or not arch.startswith(("sm_10", "sm_11")):
        print(f"no Blackwell GPU ({arch or 'no GPU'}): lowered and compiled only")
        return 0
    rng = np.random.default_rng(0)
    a = runtime.random_array((128, WIDTH), dtype, rng)
    b = runtime.poison_like(a)
    ex = runtime.build(kernel, arch, tirx_cuda_dispatch.STRICT_PIPELINE)
    _, out = runtime.run(ex, runtime.entry_name(kernel), [a, b])
    ok = np.array_equal(runtime.bits(out), runtime.bits(a))
    print(f"round trip on {arch}: {'exact' if ok else 'WRONG'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
