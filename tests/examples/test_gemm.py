"""examples/gemm.py: the multistage GEMM lowers entirely through the strict pipeline, the
simulator runs it equal to numpy within the accumulation bound (tiles and tails), and a
missing cp.async wait is reported as the race it is."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
import tvm

from executors import WHERE, execute
from tirx_cuda_dispatch import explain, sim, toolchain


def _example(name: str):
    """examples/<name>.py as a module of its own name (bench/ has a ``gemm`` module too)."""
    path = Path(__file__).resolve().parents[2] / "examples" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"example_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


gemm = _example("gemm")

STRICT = "tirx_cuda_dispatch.strict"


def _run(func, m, n, k, where, gpu, seed=0):
    a, b, bias, c = gemm.inputs(m, n, k, seed)
    out = execute(func, [a, b, bias, c], where, gpu, pipeline=STRICT)[3]
    return out, gemm.reference(a, b, bias)


@pytest.mark.parametrize(
    "shape", [(128, 128, 96), (130, 72, 66)], ids=lambda s: "x".join(map(str, s))
)
def test_every_call_is_ours(shape):
    report = explain(gemm.gemm_kernel(*shape, stages=3), "sm_90a")
    assert [r.index for r in report if r.variant is None] == []
    variants = {r.variant for r in report}
    assert {"ldgsts", "ldstmatrix", "mma.m16n8k*", "gmem_smem"} <= variants


@pytest.mark.parametrize("where", WHERE)
def test_tile_multiple_equals_numpy(where, gpu):
    out, want = _run(gemm.gemm_kernel(128, 128, 96, stages=3), 128, 128, 96, where, gpu)
    assert gemm.close(out, want, 96)


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize(
    "shape",
    [(130, 72, 66), (40, 136, 33), (128, 200, 40)],
    ids=lambda s: "x".join(map(str, s)),
)
def test_tails_equal_numpy(shape, where, gpu):
    m, n, k = shape
    out, want = _run(gemm.gemm_kernel(m, n, k, stages=3), m, n, k, where, gpu, seed=1)
    assert gemm.close(out, want, k)


def test_closeness_check_catches_a_wrong_result():
    """The negative control of the comparison: one element off by a float16 ulp of 2."""
    m, n, k = 16, 16, 32
    a, b, bias, _ = gemm.inputs(m, n, k)
    want = gemm.reference(a, b, bias)
    bad = want.copy()
    i = np.argmax(np.abs(want.astype(np.float32)))
    bad.flat[i] = np.float16(bad.flat[i] * np.float16(1.01))
    assert gemm.close(want, want, k) and not gemm.close(bad, want, k)


def _without_first_wait(func):
    """The kernel with its first ``cp.async.wait_group`` removed (through its TVMScript
    text: TVM 0.27 has no Python statement mutator)."""
    lines = func.script().splitlines()
    first = next(i for i, line in enumerate(lines) if "wait_group" in line)
    del lines[first]
    return tvm.script.from_source("\n".join(lines))


def test_a_missing_wait_is_reported_with_the_call_and_line():
    whole = gemm.gemm_kernel(128, 128, 96, stages=3)
    func = _without_first_wait(whole)
    assert func.script().count("wait_group") == whole.script().count("wait_group") - 1
    a, b, bias, c = gemm.inputs(128, 128, 96)
    with pytest.raises(sim.SimError) as err:
        sim.run(func, [a, b, bias, c], target="sm_90a", pipeline=STRICT)
    text = str(err.value)  # the reading call, its line, the write still in flight, the fix
    assert "in call [" in text and "Tx.warp.copy at <str>:" in text
    assert "cp.async" in text and "still in flight" in text and "wait_group" in text


def test_sass_is_the_pipeline():
    ops = toolchain.opcodes(
        toolchain.kernel_sass(gemm.gemm_kernel(256, 256, 128), "sm_90a", STRICT)
    )
    assert sum(v for op, v in ops.items() if op.startswith("LDGSTS")) > 0
    assert ops["HMMA.16816.F32"] == 64
    assert ops["LDSM.16.M88.4"] > 0 and ops["LDSM.16.MT88.4"] > 0 and ops["STSM.16.M88.4"] > 0
    assert not [op for op in ops if op.startswith(("LDL", "STL"))]


def _swizzled_parts(source: str, instruction: str) -> list[str]:
    """The parenthesised expression around each ``^`` on the source lines that call
    ``instruction``: what the kernel swizzles."""
    parts = []
    for line in source.splitlines():
        if instruction not in line:
            continue
        for at in (i for i, ch in enumerate(line) if ch == "^"):
            depth, lo = 0, at
            while lo > 0 and depth >= 0:
                lo -= 1
                depth += {")": 1, "(": -1}.get(line[lo], 0)
            depth, hi = 0, at
            while hi < len(line) - 1 and depth >= 0:
                hi += 1
                depth += {"(": 1, ")": -1}.get(line[hi], 0)
            parts.append(line[lo : hi + 1])
    return parts


def _stage_inside_swizzle(func) -> list[str]:
    source = toolchain.cuda_source(func, "sm_90a", STRICT)
    parts = [p for ins in ("ldmatrix", "cp_async_cg") for p in _swizzled_parts(source, ins)]
    assert parts, "no swizzled address found"
    return [p for p in parts if "kt" in p]


def test_the_stage_offset_is_added_after_the_swizzle(monkeypatch):
    """A K tile's stage (``kt % stages``) is a multiple of the swizzle's period, so the
    ldmatrix and cp.async addresses add it after the xor: the swizzled part depends on the
    lane only and the compiler computes it once (about 8% faster at 4096^3 on the H200).
    Negative control: swizzling the whole offset puts the stage inside the xor."""
    func = gemm.gemm_kernel(256, 256, 256, stages=3, tile=(128, 256, 64), warp_grid=(2, 4))
    assert _stage_inside_swizzle(func) == []
    from tirx_cuda_dispatch.layout.swizzle import Swizzle

    monkeypatch.setattr(Swizzle, "apply", lambda self, offset: self._xor(offset))
    func = gemm.gemm_kernel(256, 256, 256, stages=3, tile=(128, 256, 64), warp_grid=(2, 4))
    assert _stage_inside_swizzle(func)
