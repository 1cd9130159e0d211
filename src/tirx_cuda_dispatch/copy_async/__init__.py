"""Variants of the ``copy_async`` op (one module per variant, named after it)."""

from . import tcgen05_ldst  # noqa: F401  (registers the variant)
