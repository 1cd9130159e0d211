"""How fast the CPU simulator runs: a 128-thread CTA copies a 128x64 float16 tile
global -> shared -> registers -> shared -> global (issue 6's yardstick: under 1 s on one
core). Times the simulation of the already lowered kernel (median of 5) and, once, the
lowering. Run: ``python3 bench/sim_speed.py``."""

from __future__ import annotations

import statistics
import time

import numpy as np
from tvm.tirx.layout import Axis, S, TileLayout

from tirx_cuda_dispatch import demos, runtime, sim, toolchain


def main() -> int:
    shape, dtype = (128, 64), "float16"
    layout = TileLayout(S[shape : (1 @ Axis.tid_in_wg, 1)])  # thread t owns row t
    func = demos.reg_roundtrip(layout, shape, dtype, "warpgroup", "shared")
    a = runtime.random_array(shape, dtype, np.random.default_rng(0))
    start = time.perf_counter()
    device = toolchain.lowered_tir(func, "sm_90a")
    lowering = time.perf_counter() - start
    names = [p.name for p in func.params]
    times = []
    for _ in range(5):
        start = time.perf_counter()
        out = sim.simulate(device, [a, runtime.poison_like(a)], names=names)
        times.append(time.perf_counter() - start)
    assert np.array_equal(runtime.bits(out[1]), runtime.bits(a)), "the simulated copy is wrong"
    c = out.counters
    print(f"kernel: {c.as_dict()['instructions']}")
    print(f"lowering (TVM pipeline, once): {lowering:.3f} s")
    print(f"simulation, median of 5: {statistics.median(times):.3f} s (goal < 1 s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
