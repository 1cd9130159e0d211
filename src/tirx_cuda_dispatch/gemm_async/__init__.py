"""Variants of the ``gemm_async`` op (one module per variant, named after it)."""

from . import wgmma  # noqa: F401  (registers gemm_async -> wgmma)
