"""Variants of the ``copy_async`` op (one module per variant, named after it)."""

from . import ldgsts, tcgen05_ldst  # noqa: F401  (registers the variants)
