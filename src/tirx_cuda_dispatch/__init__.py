"""tirx_cuda_dispatch: dispatch and lowering of TIRx tile primitives on NVIDIA GPUs.

Importing the package is all the set-up a user needs: it registers our variants, the
``"tirx_cuda_dispatch"`` TIR pipeline (and ``"tirx_cuda_dispatch.strict"``) with TVM,
and the global function ``tirx_cuda_dispatch.transform.LowerTIRx``::

    import tirx_cuda_dispatch
    tvm.compile(func, target=tvm.target.Target({"kind": "cuda", "arch": "sm_90a"}),
                tir_pipeline="tirx_cuda_dispatch")
"""

from __future__ import annotations

from . import copy as _copy  # noqa: F401  (registers the copy variants)
from . import copy_async as _copy_async  # noqa: F401  (registers the copy_async variants)
from . import elementwise as _elementwise  # noqa: F401  (registers the elementwise variants)
from . import gemm as _gemm  # noqa: F401  (registers the gemm variants)
from . import gemm_async as _gemm_async  # noqa: F401  (registers the gemm_async variants)
from . import permute_layout as _permute_layout  # noqa: F401  (registers its variant)
from . import pipeline as _pipeline
from . import reduction as _reduction  # noqa: F401  (registers the reduction variants)
from . import tvm_frames as _tvm_frames
from . import tvm_guards as _tvm_guards
from .call import Operand, TileCall
from .errors import Decline, DispatchError, VariantError, check
from .explain import CallReport, Explanation, explain
from .lowering import LowerTIRx
from .registry import Predicate, list_variants, predicate, unregister, variant, variants_for

__version__ = "0.1.0"

_tvm_guards.install()
_tvm_frames.install()
_pipeline.register()

PIPELINE = _pipeline.PIPELINE_NAME
STRICT_PIPELINE = _pipeline.STRICT_PIPELINE_NAME

__all__ = [
    "PIPELINE",
    "STRICT_PIPELINE",
    "CallReport",
    "Decline",
    "DispatchError",
    "Explanation",
    "LowerTIRx",
    "Operand",
    "Predicate",
    "TileCall",
    "VariantError",
    "check",
    "explain",
    "list_variants",
    "predicate",
    "unregister",
    "variant",
    "variants_for",
]
