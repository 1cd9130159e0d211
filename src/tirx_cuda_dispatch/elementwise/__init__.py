"""Variants of the elementwise ops (one module per variant, named after it)."""

from . import (
    reg,  # noqa: F401  (registers the variant for every op of .ops)
    smem,  # noqa: F401  (registers the shared-memory variant for every op)
)
