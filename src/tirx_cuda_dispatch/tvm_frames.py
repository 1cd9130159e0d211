"""TVMScript's looks at the Python stack, at the cost of a frame walk, not of reading
source files.

Macros. Each call of a ``T.macro`` in TVM 0.27 finds the parser that is expanding it with
``inspect.getouterframes(inspect.currentframe())`` (``ScriptMacro._find_parser_def``):
that builds a ``FrameInfo`` for every frame on the stack, each reading its file's
source line, before looking for the parser in the frames' globals. Under pytest the
stack is deep and a macro call costs about 0.2 s; examples/attention.py makes about 40
of them a kernel, so building one took 6-8 s, most of the test suite's time.
:func:`install` replaces that lookup with a walk up ``frame.f_back``: the same frames
in the same order (from the lookup's caller up: neither lookup's own module defines a
parser), the same global looked up in each, the same parser found and the same error
without one. Nothing else of the macro changes.

Kernels. ``T.prim_func`` (and ``I.ir_module``) keep ``inspect.stack()`` of their caller.
Reading a frame's source line asks ``inspect.getmodule`` for the frame's module, and for
a file that is no module's (``<string>``: a dataclass's generated ``__init__``; TVM's
``<ast>``) that scans every module in ``sys.modules``, two or three times a frame: about
0.17 s a kernel under pytest, a fifth of building one. :func:`stack` is
``inspect.stack`` with each file's scan done once a call: the same ``FrameInfo`` list
(nothing imports a module during it, so a second scan would find what the first did).
:func:`install` gives it to those two entry modules only, as their ``inspect``.
"""

from __future__ import annotations

import inspect
import sys
import threading
from typing import Any

from tvm.script.parser.core.parser import ScriptMacro

_INSTALLED = "_tirx_cuda_dispatch_frame_walk"
ORIGINAL: Any = None  # TVM's ScriptMacro._find_parser_def, once install() replaced it


def find_parser(macro: Any) -> Any:
    """The parser expanding ``macro``: the innermost frame whose globals hold
    ``ScriptMacro.parser_object_name`` (what ``_find_parser_def`` answers)."""
    name = ScriptMacro.parser_object_name
    frame = sys._getframe(1)
    while frame is not None:
        parser = frame.f_globals.get(name)
        if parser is not None:
            return parser
        frame = frame.f_back
    raise RuntimeError(f"{name} not available")


def install() -> None:
    """Use :func:`find_parser` for every macro and :func:`stack` for TVM's kernel entry
    points (idempotent: the package's import calls it; TVM's own lookup stays in
    :data:`ORIGINAL`)."""
    global ORIGINAL
    _install_stack()
    original = getattr(ScriptMacro, "_find_parser_def", None)
    if original is None or getattr(original, _INSTALLED, False):
        return  # installed, or a TVM without that method (tests/test_tvm_frames.py says so)
    ORIGINAL = original

    def _find_parser_def(self: Any) -> Any:
        return find_parser(self)

    setattr(_find_parser_def, _INSTALLED, True)
    _find_parser_def.__doc__ = find_parser.__doc__
    ScriptMacro._find_parser_def = _find_parser_def


def stack(context: int = 1) -> list[inspect.FrameInfo]:
    """``inspect.stack(context)`` of the caller, each file's module lookup done once (one
    thread at a time: the lookup is swapped in ``inspect`` for the call)."""
    frame = sys._getframe(1)
    with _SWAP:
        scan = inspect.getmodule
        found: dict[str, Any] = {}

        def getmodule(obj: Any, _filename: str | None = None) -> Any:
            if _filename is None or not (inspect.isframe(obj) or inspect.iscode(obj)):
                return scan(obj, _filename)  # the lookup by the object, not by its file
            if _filename not in found:
                found[_filename] = scan(obj, _filename)
            return found[_filename]

        inspect.getmodule = getmodule
        try:
            return inspect.getouterframes(frame, context)
        finally:
            if inspect.getmodule is getmodule:
                inspect.getmodule = scan


_SWAP = threading.RLock()


class _Inspect:
    """The ``inspect`` TVM's kernel entry modules see: Python's, with :func:`stack`."""

    stack = staticmethod(stack)

    def __getattr__(self, name: str) -> Any:
        return getattr(inspect, name)


# TVM's modules that take inspect.stack() of a kernel's definition (T.prim_func, I.ir_module).
STACK_USERS = ("tvm.tirx.script.parser.entry", "tvm.script.parser.ir.entry")


def _install_stack() -> None:
    for name in STACK_USERS:
        module = sys.modules.get(name)
        if module is None:
            try:
                module = __import__(name, fromlist=["_"])
            except ImportError:
                continue  # a TVM without it: tests/test_tvm_frames.py says so
        if getattr(module, "inspect", None) is inspect:
            module.inspect = _Inspect()
