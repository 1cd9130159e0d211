"""The ``"tirx_cuda_dispatch"`` TIR pipeline: TVM 0.27's ``"tirx"`` pipeline with our LowerTIRx.

The pass list mirrors ``tvm.tirx.compilation_pipeline.tirx_pipeline`` of apache-tvm
0.27.0.post1 (the version we pin) with one change: the first pass, TVM's LowerTIRx, is
ours. ``tests/test_pipeline.py`` compares the two lists so a TVM upgrade that changes
theirs is noticed. ``"tirx_cuda_dispatch.strict"`` is the same pipeline with
``fallback="error"``.
"""

from __future__ import annotations

import tvm
from tvm import tirx
from tvm.backend.cuda import transforms as cuda_transforms
from tvm.tirx import compilation_pipeline as tvm_pipelines

from .lowering import LowerTIRx, run_lower

PIPELINE_NAME = "tirx_cuda_dispatch"
STRICT_PIPELINE_NAME = "tirx_cuda_dispatch.strict"


def pass_list(config: dict, fallback: str = "builtin") -> list[tvm.transform.Pass]:
    """The passes of the pipeline, in order, for a PassContext ``config``."""
    passes = [
        LowerTIRx(fallback=fallback),
        tvm.s_tir.transform.UnifyThreadBinding(),
        tirx.transform.StmtSimplify(),
        tirx.transform.LowerTIRxOpaque(),
        tirx.transform.FlattenBuffer(),
        tirx.transform.BF16ComputeLegalize(),
        tirx.transform.NarrowDataType(32),
        tirx.transform.VectorizeLoop(not bool(config.get("tir.disable_vectorize", False))),
        tirx.transform.UnrollLoop(),
        tirx.transform.StmtSimplify(),
    ]
    if not bool(config.get("tir.disable_cse_tir", False)):
        passes.append(tirx.transform.CommonSubexprElim())
    passes += [
        tirx.transform.FP8ComputeLegalize(),
        tirx.transform.VerifyMemory(),
        tirx.transform.AnnotateEntryFunc(),
        tirx.transform.SplitHostDevice(),
        cuda_transforms.LowerIket(),
        tirx.transform.MakePackedAPI(),
        tirx.transform.FP8StorageLegalize(),
        tirx.transform.BF16StorageLegalize(),
    ]
    return passes


def tirx_cuda_dispatch_pipeline(fallback: str = "builtin"):
    """Pipeline factory in the form ``register_tir_pipeline`` expects."""

    def _pipeline(mod: tvm.IRModule) -> tvm.IRModule:
        """Our LowerTIRx called from Python, not as a pass through TVM's FFI: an error of
        ours (out of bounds, a call nothing lowers, strict mode) reaches the caller of
        ``tvm.compile`` with a traceback of a few Python frames, not one through TVM's
        C++ pass machinery. The rest of the list runs as TVM's Sequential."""
        config = tvm.transform.PassContext.current().config
        lowered = run_lower(mod, fallback=fallback)[0]
        return tvm.ir.transform.Sequential(pass_list(config, fallback)[1:])(lowered)

    return (
        _pipeline,
        tvm_pipelines.finalize_host_passes,
        tvm_pipelines.finalize_device_passes,
    )


def _strict_pipeline():
    return tirx_cuda_dispatch_pipeline(fallback="error")


def register() -> None:
    """Register both pipeline names with TVM (done on import of the package)."""
    tvm_pipelines.register_tir_pipeline(PIPELINE_NAME, tirx_cuda_dispatch_pipeline)
    tvm_pipelines.register_tir_pipeline(STRICT_PIPELINE_NAME, _strict_pipeline)
