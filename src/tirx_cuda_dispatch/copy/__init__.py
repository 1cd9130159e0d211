"""Variants of the ``copy`` op (one module per variant, named after it)."""

from . import gmem_smem, ldstmatrix, local, reg  # noqa: F401  (registers the variants)
