"""irfacts.location_of: a statement a ``T.macro`` expanded has a SequentialSpan (the call
site, then the macro's line); its location is the macro's line, naming the call."""

from __future__ import annotations

from tvm.script import tirx as T

from tirx_cuda_dispatch.irfacts import location_of


@T.macro
def _bump(A, i):
    A[i] = A[i] + T.float32(1)


@T.prim_func
def _uses_the_macro(A: T.Buffer((4,), "float32")):
    for i in range(4):
        _bump(A, i)


@T.prim_func
def _plain(A: T.Buffer((4,), "float32")):
    for i in range(4):
        A[i] = A[i] + T.float32(1)


def test_a_macro_statement_is_placed_at_the_macro_line_and_names_the_call():
    loc = location_of(_uses_the_macro.body.body)
    assert loc.text.strip() == "A[i] = A[i] + T.float32(1)"
    assert len(loc.via) == 1 and loc.via[0].endswith(f":{loc.line + 6}")
    assert "in a macro called at" in str(loc)


def test_a_plain_statement_has_no_macro_call():
    loc = location_of(_plain.body.body)
    assert loc.text.strip() == "A[i] = A[i] + T.float32(1)" and loc.via == ()
    assert "macro" not in str(loc)
