"""Loading a script of the repository (bench/, examples/: not packages) as a module."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"


def load_file(name: str, path: Path):
    """``path`` as a module called ``name`` (a name no test or example module has:
    examples/ and tests/ have a ``gemm`` of their own); bench/ goes on the path first, as
    the bench scripts import each other."""
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
