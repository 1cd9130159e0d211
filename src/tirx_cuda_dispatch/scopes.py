"""The execution scopes and thread axes of TIRx on CUDA: which threads each scope has.

One table, read by the call model (TVM's thread axes of a dispatch context), the
participation analysis (the full extent of each axis), the register-layout partitions
(which layout axes name threads inside a scope, and how many threads one step along each
spans) and the emitters (a thread's index inside its scope). The facts are TVM 0.27's
(``tvm.tirx.exec_scope``, the ``Axis`` names of ``tvm.tirx.layout``) and the PTX ISA's
(``%laneid``: 32 lanes a warp; a warpgroup is 4 consecutive warps, "Warpgroup" in the
``wgmma`` section).
"""

from __future__ import annotations

from dataclasses import dataclass

WARP_SIZE = 32
WARPGROUP_WARPS = 4


@dataclass(frozen=True)
class Scope:
    """One execution scope: its name, how messages call it, TVM's thread axes inside it
    (the ``intra`` axes of a dispatch context, outer first), how many threads one instance
    has (None: the CTA's launch decides), and the register-layout axes that name its
    threads."""

    name: str
    noun: str
    tvm_axes: tuple[str, ...]
    threads: int | None
    layout_axes: tuple[str, ...]


SCOPES: dict[str, Scope] = {
    s.name: s
    for s in (
        Scope("thread", "thread", (), 1, ()),
        Scope("warp", "warp", ("laneid",), WARP_SIZE, ("laneid",)),
        Scope(
            "warpgroup",
            "warpgroup",
            ("wid_in_wg", "laneid"),
            WARP_SIZE * WARPGROUP_WARPS,
            ("laneid", "wid_in_wg", "tid_in_wg"),
        ),
        Scope(
            "cta",
            "CTA",
            ("warpid", "laneid"),
            None,
            ("laneid", "wid_in_wg", "tid_in_wg", "warpid", "wgid", "tx"),
        ),
    )
}


@dataclass(frozen=True)
class ThreadAxis:
    """One thread axis as a digit of a scope's thread index: ``(t // divisor) % extent``."""

    divisor: int
    extent: int | None  # None: the rest of the scope (``tx``, ``warpid``, ``wgid`` at cta)


# TVM's thread axes, in units of the scope's thread index.
THREAD_AXES: dict[str, ThreadAxis] = {
    "laneid": ThreadAxis(1, WARP_SIZE),
    "wid_in_wg": ThreadAxis(WARP_SIZE, WARPGROUP_WARPS),
    "tid_in_wg": ThreadAxis(1, WARP_SIZE * WARPGROUP_WARPS),
    "warpid": ThreadAxis(WARP_SIZE, None),
    "wgid": ThreadAxis(WARP_SIZE * WARPGROUP_WARPS, None),
    "tx": ThreadAxis(1, None),
}
