"""Variants of the ``gemm`` op (one module per variant, named after it)."""

from . import mma_m16n8k  # noqa: F401  (registers gemm -> mma.m16n8k*)
