"""TVM's names for copies our variants make: ``dispatch="vec_auto"`` and the fixed-width
``dispatch="vec_16b"`` ... ``"vec_256b"`` (TVM 0.27's ``copy/vec_forced.py`` forms: one
vector access of exactly that many bytes per thread), as aliases of our variants
(:func:`..registry.alias`): every variant of ours is tried and the name holds the chosen
plan to what it asks. A call whose region no plan of ours moves that way declines with
the reason; the default pipeline then hands it to TVM's variant of that name, the strict
one refuses it (lowering.py).
"""

from __future__ import annotations

from typing import Any

from ..registry import alias

WIDTHS = {"vec_16b": 2, "vec_32b": 4, "vec_64b": 8, "vec_128b": 16, "vec_256b": 32}


# -- predicates --------------------------------------------------------------------------
def one_access_of(width: int, plan: Any) -> tuple[bool, str | None]:
    """The plan moves each thread's part as one ``width``-byte access."""
    bits = getattr(plan, "vec_bits", None)
    if bits is None:
        return False, f"the chosen plan ({plan}) makes no plain vector access of {width} bytes"
    if getattr(plan, "masked", False):
        return False, "the region is moved in masked pieces, not one access per thread"
    rounds = getattr(plan, "outer", 1)
    if bits != 8 * width or rounds != 1:
        return False, (
            f"asks for one {width}-byte access per thread; the region is {rounds} round(s) "
            f"of {bits // 8}-byte accesses here (give each thread exactly {width} bytes, "
            f"{width}-byte aligned, or leave the width to vec_auto)"
            + (
                "; a 32-byte access (ld/st.global.v8) needs sm_100 or newer and global memory"
                if width == 32
                else ""
            )
        )
    return True, None


def any_plan(plan: Any) -> tuple[bool, str | None]:
    return True, None


# -- registration ------------------------------------------------------------------------
alias("copy", "vec_auto", any_plan, "TVM's automatic vector copy: whichever copy of ours fits")
for _name, _width in WIDTHS.items():
    alias(
        "copy",
        _name,
        lambda plan, w=_width: one_access_of(w, plan),
        f"TVM's forced {_width}-byte vector copy: one {_width}-byte access per thread",
    )
