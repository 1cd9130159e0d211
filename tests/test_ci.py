"""CI runs .ci/run, which runs the README's test command verbatim; the command's pytest
options need what the test extras install (``-n`` is pytest-xdist's)."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def readme_test_commands(readme: str) -> list[str]:
    """The README's lines that install the test extras and run the tests."""
    return [ln.strip() for ln in readme.splitlines() if 'pip install ".[test]"' in ln]


def ci_runs(readme: str, ci: str) -> bool:
    """Whether the CI script runs the README's one test command as it is written."""
    commands = readme_test_commands(readme)
    return len(commands) == 1 and commands[0] in [ln.strip() for ln in ci.splitlines()]


def test_ci_runs_the_readmes_test_command():
    readme, ci = (ROOT / "README.md").read_text(), (ROOT / ".ci" / "run").read_text()
    assert ci_runs(readme, ci)
    # the control: a README whose command differs from the script's is caught
    changed = readme.replace("python3 -m pytest -q -n auto", "python3 -m pytest -q")
    assert changed != readme and not ci_runs(changed, ci)


def test_the_test_extras_install_what_the_command_uses():
    [command] = readme_test_commands((ROOT / "README.md").read_text())
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = extras["optional-dependencies"]["test"]
    names = {e.split(">")[0].split("=")[0].split("<")[0].strip() for e in extras}
    assert "pytest" in names
    if " -n " in command:
        assert "pytest-xdist" in names
