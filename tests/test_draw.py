"""Pictures of plans: owners, registers, rounds and bank conflicts, read as data."""

from __future__ import annotations

import pytest
from tvm.backend.cuda.tile_primitive.tma_utils import SwizzleMode, mma_shared_layout
from tvm.tirx.layout import Axis, S, TileLayout

import tirx_cuda_dispatch as tcd
from tirx_cuda_dispatch import demos, draw

lane = Axis.laneid
A_FRAGMENT = TileLayout(S[(2, 8, 2, 4, 2) : (2, 4 @ lane, 4, 1 @ lane, 1)])


def _picture(func, variant, memory="shared"):
    """The picture of the first call ``variant`` lowers that touches ``memory``."""
    [report, *_] = [
        r
        for r in tcd.explain(func)
        if r.variant == variant and memory in {o["scope"] for o in r.operands}
    ]
    return draw.picture(report.call_object, report.plan_object, report.variant)


def test_ldmatrix_picture_follows_the_isa_fragment():
    """Lane i holds row i // 4, columns 2 (i % 4) + {0, 1} of each 8x8 matrix; the A
    fragment's registers 0-1 / 2-3 / 4-5 / 6-7 are the matrices at rows 0/8 x cols 0/8."""
    pic = _picture(
        demos.ldstmatrix_roundtrip(
            A_FRAGMENT, TileLayout(S[(16, 16)]), (16, 16), 8, dispatch="ldstmatrix"
        ),
        "ldstmatrix",
    )
    for row in range(16):
        for col in range(16):
            cell = pic.cells[row][col]
            assert cell.thread == 4 * (row % 8) + (col % 8) // 2
            assert cell.register == 2 * (row // 8) + 4 * (col // 8) + col % 2
            assert cell.round == 0
            assert cell.bank == (row * 16 + col) * 2 // 4 % 32
    assert pic.worst_conflict == 2  # rows 32 bytes apart: rows r and r + 4 share banks


def test_swizzle_removes_the_ldmatrix_conflict():
    shared = mma_shared_layout("float16", SwizzleMode.SWIZZLE_32B_ATOM, (16, 16))
    pic = _picture(demos.ldstmatrix_roundtrip(A_FRAGMENT, shared, (16, 16), 8), "ldstmatrix")
    assert pic.worst_conflict == 1
    assert all(c.conflict == 1 for row in pic.cells for c in row)


@pytest.mark.parametrize("k, plain_ways, group", [(4, 1, None), (8, 2, 4), (16, 4, 2), (32, 8, 1)])
def test_copy_reg_rows_are_drawn_in_the_rotated_order(k, plain_ways, group):
    """Lane i owns row i of K float32: 128-bit rounds, 8 lanes per wavefront, rows 4K bytes
    apart (2/4/8-way conflicts in the plain order, as measured on the H200 for K = 8/16/32).
    The picture shows the order the emitter uses: lane i moves chunk c in step
    (c - shift(i)) mod chunks, shift(i) = (i // group) % chunks, and no step conflicts."""
    layout = TileLayout(S[(32, k) : (1 @ lane, 1)])
    func = demos.reg_roundtrip(layout, (32, k))
    [plan] = [r.plan for r in tcd.explain(func) if r.plan.get("direction") == "shared->local"]
    assert max(plan["plain_conflict_ways" if group else "conflict_ways"]) == plain_ways
    pic = _picture(func, "reg")
    assert pic.worst_conflict == 1
    chunks = k // 4
    for lane_ in (0, 5, 13, 31):
        shift = (lane_ // group) % chunks if group else 0
        for col in range(k):
            cell = pic.cells[lane_][col]
            assert (cell.thread, cell.register) == (lane_, col)
            assert cell.round == (col // 4 - shift) % chunks


def test_global_memory_has_no_banks():
    layout = TileLayout(S[(32, 8) : (1 @ lane, 1)])
    pic = _picture(demos.reg_roundtrip(layout, (32, 8), memory="global"), "reg", "global")
    assert pic.memory == "global" and all(c.bank == -1 for row in pic.cells for c in row)
    assert all(c.thread == i for i, row in enumerate(pic.cells) for c in row)


def test_png_needs_matplotlib_or_says_so(tmp_path):
    pic = _picture(demos.gmem_smem_roundtrip(), "gmem_smem")
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        with pytest.raises(draw.DrawError, match=r"pip install \"tirx-cuda-dispatch\[plot\]\""):
            draw.write(pic, tmp_path / "x.png")
    else:
        path = draw.write(pic, tmp_path / "x.png")
        assert path.read_bytes()[:4] == b"\x89PNG"
