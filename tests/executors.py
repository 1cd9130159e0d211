"""Where a round trip runs: in the CPU simulator (everywhere, CI included) and on the GPU.

A round-trip test takes ``where`` from :data:`WHERE` (or :data:`WHERE_SM100` for
Blackwell-only kernels): its ``sim`` case runs in CI, its ``gpu`` case carries the marker
and skips itself without such a device. Both run the same kernel on the same data.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from tirx_cuda_dispatch import runtime, sim

WHERE = [pytest.param("sim", id="sim"), pytest.param("gpu", marks=pytest.mark.gpu, id="gpu")]
WHERE_SM100 = [
    pytest.param("sim", id="sim"),
    pytest.param("gpu", marks=pytest.mark.sm100, id="gpu"),
]


def cases_where(cases: Sequence, in_sim, ids) -> list:
    """``(case, where)`` parameters: every case on the GPU (the ``gpu`` marker), and in the
    simulator only where ``in_sim(case)``: for cases whose simulator coverage the test's
    others already give, so the CPU suite's time goes to those. ``ids(case)`` names one."""
    params = []
    for case in cases:
        if in_sim(case):
            params.append(pytest.param(case, "sim", id=f"{ids(case)}-sim"))
        params.append(pytest.param(case, "gpu", marks=pytest.mark.gpu, id=f"{ids(case)}-gpu"))
    return params


def execute(
    func,
    arrays: Sequence[np.ndarray],
    where: str,
    gpu: str | None,
    pipeline: str = "tirx_cuda_dispatch",
    target: str = "sm_90a",
) -> list[np.ndarray]:
    """Run ``func`` on ``arrays``; the arrays as the kernel left them."""
    if where == "sim":
        return sim.run(func, list(arrays), target=target, pipeline=pipeline).arrays
    return runtime.run(runtime.build(func, gpu, pipeline), runtime.entry_name(func), arrays)
