"""Variants of the ``copy_async`` op (one module per variant, named after it)."""

from . import dsmem, ldgsts, tcgen05_ldst, tma  # noqa: F401  (registers the variants)
