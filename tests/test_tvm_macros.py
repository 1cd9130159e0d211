"""The macro parser lookup: the same kernels as TVM's own lookup, without reading a source
line of the stack's frames (which made a macro call cost about 0.2 s under pytest)."""

from __future__ import annotations

import inspect
import sys

import pytest
from tvm.script import tirx as T
from tvm.script.parser.core.parser import ScriptMacro

import tirx_cuda_dispatch  # noqa: F401  (installs the lookup)
from tirx_cuda_dispatch import tvm_macros


def _kernel(scale: float):
    """A kernel whose body is two nested macro calls (a macro that calls a macro)."""

    @T.macro
    def inner(buf, i):
        buf[i] = buf[i] * T.float32(scale)

    @T.macro
    def outer(buf, i):
        inner(buf, i)
        buf[i] = buf[i] + T.float32(1)

    @T.prim_func
    def kernel(a: T.Buffer((8,), "float32")):
        for i in range(8):
            outer(a, i)

    return kernel


def _callers_of_getouterframes(monkeypatch) -> list[str]:
    """Record which function calls ``inspect.getouterframes`` from now on."""
    callers: list[str] = []
    original = inspect.getouterframes

    def counted(*args, **kwargs):
        callers.append(sys._getframe(1).f_code.co_name)
        return original(*args, **kwargs)

    monkeypatch.setattr(inspect, "getouterframes", counted)
    return callers


def test_the_lookup_is_installed_and_kernels_are_those_tvm_s_lookup_gives(monkeypatch):
    assert ScriptMacro._find_parser_def is not tvm_macros.ORIGINAL
    ours = _kernel(3.0).script()
    assert "a[i] * T.float32(3.0)" in ours and "+ T.float32(1.0)" in ours
    monkeypatch.setattr(ScriptMacro, "_find_parser_def", tvm_macros.ORIGINAL)
    assert _kernel(3.0).script() == ours


def test_expanding_a_macro_reads_no_frame_s_source(monkeypatch):
    """Only ``T.prim_func`` itself (``inspect.stack``, once a kernel) reads the frames'
    source; the control: TVM's own lookup does it again for each macro call."""
    callers = _callers_of_getouterframes(monkeypatch)
    _kernel(2.0)
    assert callers == ["stack"]
    monkeypatch.setattr(ScriptMacro, "_find_parser_def", tvm_macros.ORIGINAL)
    del callers[:]
    _kernel(2.0)
    assert callers == ["stack", "_find_parser_def", "_find_parser_def"]


def test_a_macro_called_outside_a_parser_is_the_error_tvm_gives():
    @T.macro
    def lone(buf):
        buf[0] = T.float32(0)

    with pytest.raises(RuntimeError, match="__current_script_parser__ not available"):
        lone(None)


def test_install_is_idempotent():
    installed = ScriptMacro._find_parser_def
    tvm_macros.install()
    assert ScriptMacro._find_parser_def is installed
