"""TVMScript macros at the cost of a dictionary lookup, not of reading source files.

Each call of a ``T.macro`` in TVM 0.27 finds the parser that is expanding it with
``inspect.getouterframes(inspect.currentframe())`` (``ScriptMacro._find_parser_def``):
that builds a ``FrameInfo`` for every frame on the stack, each reading its file's
source line, before looking for the parser in the frames' globals. Under pytest the
stack is deep and a macro call costs about 0.2 s; examples/attention.py makes about 40
of them a kernel, so building one took 6-8 s, most of the test suite's time.

:func:`install` replaces that lookup with a walk up ``frame.f_back``: the same frames
in the same order (from the lookup's caller up: neither lookup's own module defines a
parser), the same global looked up in each, the same parser found and the same error
without one. Nothing else of the macro changes.
"""

from __future__ import annotations

import sys
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
    """Use :func:`find_parser` for every macro (idempotent: the package's import calls it;
    TVM's own lookup stays in :data:`ORIGINAL`)."""
    global ORIGINAL
    original = getattr(ScriptMacro, "_find_parser_def", None)
    if original is None or getattr(original, _INSTALLED, False):
        return  # installed, or a TVM without that method (tests/test_tvm_macros.py says so)
    ORIGINAL = original

    def _find_parser_def(self: Any) -> Any:
        return find_parser(self)

    setattr(_find_parser_def, _INSTALLED, True)
    _find_parser_def.__doc__ = find_parser.__doc__
    ScriptMacro._find_parser_def = _find_parser_def
