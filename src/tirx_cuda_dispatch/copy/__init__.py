"""Variants of the ``copy`` op (one module per variant, named after it)."""

from . import gmem_smem, ldstmatrix, local, reg, threadwise, tvm_names  # noqa: F401
