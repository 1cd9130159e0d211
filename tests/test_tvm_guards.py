"""The guards against TVM 0.27 crashes: each crash happens without its guard (in a child
process) and is an exception with it."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
from tvm.tirx.layout import ComposeLayout, S, TileLayout

import tirx_cuda_dispatch  # noqa: F401  (installs the guards)

_CRASH = "from tvm.tirx.layout import ComposeLayout\nComposeLayout(3, 3, 3, None)\n"


def test_unguarded_compose_layout_of_none_crashes_the_process():
    """The negative control: TVM alone dies of a signal, not an exception."""
    run = subprocess.run([sys.executable, "-c", _CRASH], capture_output=True, timeout=120)
    assert run.returncode < 0 or b"Segfault" in run.stderr, run.stderr[-500:]
    assert b"Traceback" not in run.stderr


def test_guarded_compose_layout_of_none_raises():
    with pytest.raises(TypeError, match="needs a TileLayout"):
        ComposeLayout(3, 3, 3, None)


def test_guarded_compose_layout_still_composes():
    layout = ComposeLayout(3, 3, 3, TileLayout(S[64, 64]))
    assert int(layout.swizzle_len) == 3 and isinstance(layout.tile_layout, TileLayout)


def test_the_gemm_edge_tile_that_crashed_explain_is_reported():
    """A 1-row K tail of a 128-byte-swizzled B stage sent TVM's built-in ldgsts into the
    crash; explain() now finishes and says why the built-in cannot lower it."""
    path = Path(__file__).resolve().parent.parent / "examples" / "gemm.py"
    spec = importlib.util.spec_from_file_location("example_gemm", path)
    gemm = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gemm)
    report = tirx_cuda_dispatch.explain(gemm.gemm_kernel(130, 72, 33, stages=3), "sm_90a")
    assert len(report) > 10
