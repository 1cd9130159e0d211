"""Variants of the ``permute_layout`` op (one module per variant, named after it)."""

from . import staged  # noqa: F401  (registers permute_layout -> staged)
