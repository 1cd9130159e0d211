"""TVMScript's looks at the stack: the macro parser lookup gives the same kernels as TVM's
own lookup without reading a source line of the stack's frames (which made a macro call
cost about 0.2 s under pytest); the kernel entry points' ``inspect.stack()`` gives the same
frames with each file's module scan done once."""

from __future__ import annotations

import collections
import inspect
import sys

import pytest
from tvm.error import DiagnosticError
from tvm.script import ir as I
from tvm.script import tirx as T
from tvm.script.parser.core.parser import ScriptMacro
from tvm.tirx.script.parser import entry as tirx_entry

import tirx_cuda_dispatch  # noqa: F401  (installs the lookups)
from tirx_cuda_dispatch import tvm_frames


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
    assert ScriptMacro._find_parser_def is not tvm_frames.ORIGINAL
    ours = _kernel(3.0).script()
    assert "a[i] * T.float32(3.0)" in ours and "+ T.float32(1.0)" in ours
    monkeypatch.setattr(ScriptMacro, "_find_parser_def", tvm_frames.ORIGINAL)
    assert _kernel(3.0).script() == ours


def test_expanding_a_macro_reads_no_frame_s_source(monkeypatch):
    """Only ``T.prim_func`` itself (``inspect.stack``, once a kernel) reads the frames'
    source; the control: TVM's own lookup does it again for each macro call."""
    callers = _callers_of_getouterframes(monkeypatch)
    _kernel(2.0)
    assert callers == ["stack"]
    monkeypatch.setattr(ScriptMacro, "_find_parser_def", tvm_frames.ORIGINAL)
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
    tvm_frames.install()
    assert ScriptMacro._find_parser_def is installed


def _through_a_generated_function(fn):
    """Call ``fn`` from a function compiled from a string (its frame's file is
    ``<string>``, as a dataclass's generated ``__init__``), from another such."""
    namespace: dict = {}
    exec("def inner(fn):\n    return fn()\ndef outer(fn):\n    return inner(fn)\n", namespace)
    return namespace["outer"](fn)


def _scans(monkeypatch) -> collections.Counter:
    """Count inspect.getmodule's lookups by file name from now on."""
    counts: collections.Counter = collections.Counter()
    original = inspect.getmodule

    def counted(obj, _filename=None):
        counts[_filename] += 1
        return original(obj, _filename)

    monkeypatch.setattr(inspect, "getmodule", counted)
    return counts


def test_stack_is_inspect_s_stack():
    ours, theirs = _through_a_generated_function(lambda: (tvm_frames.stack(), inspect.stack()))
    assert len(ours) == len(theirs) > 3
    assert [f.filename for f in ours][1:3] == ["<string>", "<string>"]
    for a, b in zip(ours, theirs, strict=True):
        assert a.frame is b.frame
        assert (a.filename, a.lineno, a.function, a.code_context, a.index) == (
            b.filename, b.lineno, b.function, b.code_context, b.index,
        )  # fmt: skip
    # The line both were called from is the same; only their columns differ.
    assert ours[0].positions.col_offset < theirs[0].positions.col_offset
    assert [a.positions for a in ours[1:]] == [b.positions for b in theirs[1:]]
    for depth in (0, 3):
        assert [(f.code_context, f.index) for f in tvm_frames.stack(depth)][1:] == [
            (f.code_context, f.index) for f in inspect.stack(depth)
        ][1:]


def test_stack_looks_up_a_file_s_module_once(monkeypatch):
    scans = _scans(monkeypatch)
    _through_a_generated_function(tvm_frames.stack)
    assert scans["<string>"] == 1
    # Control: Python's inspect.stack() looks it up again for each frame and each use.
    scans.clear()
    _through_a_generated_function(inspect.stack)
    assert scans["<string>"] >= 4


def _annotated_kernel():
    """A kernel whose annotation names are locals of this function only: under PEP 563
    TVM finds them in the stack ``T.prim_func`` keeps (``resolve_closure_vars``)."""
    shape = (8,)
    dt = "float32"

    @T.prim_func
    def kernel(a: T.Buffer(shape, dt)):
        for i in range(8):
            a[i] = a[i] + T.float32(1)

    return kernel


def _module():
    """A module of two kernels: ``T.prim_func`` in an ``I.ir_module`` class leaves its
    function to the module (``is_defined_in_class``, a source line of the stack)."""

    @I.ir_module
    class Module:
        @T.prim_func
        def first(a: T.Buffer((8,), "float32")):
            for i in range(8):
                a[i] = a[i] * T.float32(2)

        @T.prim_func
        def second(a: T.Buffer((4,), "float32")):
            for i in range(4):
                a[i] = T.float32(0)

    return Module


class _NoStack:
    def stack(self, context: int = 1) -> list:
        return []

    def __getattr__(self, name):
        return getattr(inspect, name)


def test_kernels_are_those_tvm_s_stack_gives(monkeypatch):
    from tvm.script.parser.ir import entry as ir_entry

    assert tirx_entry.inspect.stack is tvm_frames.stack
    assert ir_entry.inspect.stack is tvm_frames.stack
    assert tirx_entry.inspect.isfunction is inspect.isfunction  # the rest is Python's
    ours = [_kernel(5.0).script(), _annotated_kernel().script(), _module().script()]
    assert "T.Buffer((8,)" in ours[1] and "def first" in ours[2] and "def second" in ours[2]
    monkeypatch.setattr(tirx_entry, "inspect", inspect)
    monkeypatch.setattr(ir_entry, "inspect", inspect)
    assert [_kernel(5.0).script(), _annotated_kernel().script(), _module().script()] == ours
    # Controls: both kernels that read the stack fail without it.
    monkeypatch.setattr(tirx_entry, "inspect", _NoStack())
    with pytest.raises(DiagnosticError, match="Unexpected type for TIR Arg"):
        _annotated_kernel()  # its annotation names unresolved
    with pytest.raises(DiagnosticError):
        _module()  # T.prim_func parses the class's method alone


def test_stack_gives_python_s_module_lookup_back(monkeypatch):
    original = inspect.getmodule
    tvm_frames.stack()
    assert inspect.getmodule is original

    def broken(*args, **kwargs):
        raise KeyError("broken")

    monkeypatch.setattr(inspect, "getouterframes", broken)
    with pytest.raises(KeyError, match="broken"):
        tvm_frames.stack()
    assert inspect.getmodule is original
