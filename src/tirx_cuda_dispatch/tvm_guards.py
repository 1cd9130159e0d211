"""Guards against crashes of TVM 0.27 itself: an error where TVM would kill the process.

explain() asks TVM's built-in variants what they would do with the calls ours decline,
and the non-strict pipeline lets them lower such calls. A few of their paths crash the
interpreter instead of raising, which no ``try`` can catch. Each guard here turns one
such crash into a Python exception at the point TVM would crash; TVM's dispatcher then
sees a refusal like any other, and explain() reports it.

- ``ComposeLayout(per_element, swizzle_len, atom_len, tile_layout)`` with a
  ``tile_layout`` that is None dereferences a null pointer (a segmentation fault). TVM's
  built-in ``ldgsts`` passes None there when its partition of a swizzled shared region
  fails (``recompose_swizzle``; seen with a one-row region of a 128-byte-swizzled tile).
"""

from __future__ import annotations

from typing import Any

from tvm.tirx.layout import ComposeLayout, TileLayout

_GUARDED = "_tirx_cuda_dispatch_guarded"


def install() -> None:
    """Install every guard (idempotent: the package's import calls it)."""
    init = ComposeLayout.__init__
    if getattr(init, _GUARDED, False):
        return

    def guarded_init(
        self: Any,
        per_element: Any,
        swizzle_len: Any,
        atom_len: Any,
        tile_layout: Any,
        *rest: Any,
        **kw: Any,
    ) -> None:
        if not isinstance(tile_layout, TileLayout):
            raise TypeError(
                f"ComposeLayout needs a TileLayout to compose the swizzle with, got "
                f"{type(tile_layout).__name__} (TVM 0.27 crashes on this; guarded by "
                "tirx_cuda_dispatch.tvm_guards)"
            )
        init(self, per_element, swizzle_len, atom_len, tile_layout, *rest, **kw)

    setattr(guarded_init, _GUARDED, True)
    guarded_init.__doc__ = init.__doc__
    ComposeLayout.__init__ = guarded_init
