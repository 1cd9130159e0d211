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

import tirx_cuda_dispatch
import tirx_cuda_dispatch.copy_async  # noqa: F401  (registers tcgen05_ldst)
from tirx_cuda_dispatch import demos, runtime, toolchain

WIDTH, dtype = 8, "float16"
# The program (seed 003, shared with `tirx-dispatch demo`): thread t of a warpgroup owns
# row t (local layout S[(128, 8) : (1 @ tid_in_wg, 1)]), TMEM lane t holds it (S[(128, 8) :
# (1 @ TLane, 1 @ TCol)]); one warp allocates 32 columns; Tx.wg.copy_async moves
# registers -> tmem (tcgen05.st), the kernel waits (tcgen05.wait::st), then tmem ->
# registers (tcgen05.ld) and waits again (tcgen05.wait::ld). Read it in
# src/tirx_cuda_dispatch/demos.py, or print it: `tirx-dispatch lower examples/tcgen05_ldst.py
# --emit tir --arch sm_100a`.
kernel = demos.tcgen05_roundtrip()


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
