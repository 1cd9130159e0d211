"""The project adopts ruff: lint and format are checked with the tests."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PATHS = ["src", "tests", "bench", "examples"]


def _ruff(*args: str) -> subprocess.CompletedProcess:
    exe = shutil.which("ruff")
    cmd = [exe] if exe else [sys.executable, "-m", "ruff"]
    return subprocess.run([*cmd, *args, *PATHS], cwd=ROOT, capture_output=True, text=True)


def test_ruff_lint():
    proc = _ruff("check")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_ruff_format():
    proc = _ruff("format", "--check")
    assert proc.returncode == 0, proc.stdout + proc.stderr
