"""The pipeline is TVM's "tirx" pipeline with our LowerTIRx in place of TVM's."""

from __future__ import annotations

import tvm

import tirx_cuda_dispatch as tcd
from tirx_cuda_dispatch import demos


@tvm.instrument.pass_instrument
class _PassNames:
    def __init__(self):
        self.names: list[str] = []

    def run_before_pass(self, mod, info):
        self.names.append(str(info.name))


def _passes_run(pipeline: str) -> list[str]:
    rec = _PassNames()
    target = tvm.target.Target({"kind": "cuda", "arch": "sm_90a"})
    with tvm.transform.PassContext(instruments=[rec]):
        tvm.compile(demos.gmem_smem_roundtrip(), target=target, tir_pipeline=pipeline)
    return rec.names


def test_pipeline_names_are_registered():
    from tvm.tirx import compilation_pipeline as cp

    assert tcd.PIPELINE in cp.PIPELINE_MAP
    assert tcd.STRICT_PIPELINE in cp.PIPELINE_MAP


def test_same_passes_as_tvm_tirx_except_lower_tirx():
    ours = _passes_run("tirx_cuda_dispatch")
    theirs = _passes_run("tirx")
    # Ours wraps TVM's LowerTIRx (the bridge lives in TVM's dispatch table), so the
    # recorded nesting shows our pass directly before TVM's; everything else is identical.
    # Ours calls our LowerTIRx from Python (run_lower: no pass of its own, so that its
    # errors reach tvm.compile's caller without TVM's FFI frames), which runs TVM's;
    # the rest of the list is TVM's Sequential, as theirs.
    ours = ours[ours.index("tirx.BindTarget") :]  # from the pipeline's start, on both sides
    theirs = theirs[theirs.index("tirx.BindTarget") :]
    assert "tirx_cuda_dispatch.LowerTIRx" not in ours and ours[1] == "tirx.LowerTIRx"
    theirs = [n for n in theirs if n not in ("_pipeline", "sequential")]
    ours = [n for n in ours if n != "sequential"]
    assert ours == theirs


def test_lower_tirx_is_a_global_function():
    f = tvm.get_global_func("tirx_cuda_dispatch.transform.LowerTIRx")
    assert isinstance(f("builtin"), tvm.transform.Pass)
