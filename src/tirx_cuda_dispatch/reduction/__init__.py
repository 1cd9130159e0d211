"""Reductions (sum, max, min): registering the variants."""

from . import (
    local,  # noqa: F401  (registers reduction -> local)
    shared,  # noqa: F401  (registers reduction -> shared)
)
