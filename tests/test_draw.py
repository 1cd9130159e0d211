"""Pictures of plans: owners, registers, rounds and bank conflicts, read as data."""

from __future__ import annotations

import dataclasses
import re
import struct
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from tvm.backend.cuda.tile_primitive.tma_utils import SwizzleMode, mma_shared_layout
from tvm.tirx.layout import Axis, R, S, TileLayout

import tirx_cuda_dispatch as tcd
from tirx_cuda_dispatch import demos, draw

lane, wid = Axis.laneid, Axis.wid_in_wg
A_FRAGMENT = TileLayout(S[(2, 8, 2, 4, 2) : (2, 4 @ lane, 4, 1 @ lane, 1)])
# The wgmma m64n128 float32 accumulator: warp w, lane l holds rows 16w + 8i + l // 4 and
# columns 8j + 2 (l % 4) + k in register 4j + 2i + k.
WG_FRAGMENT = TileLayout(S[(4, 2, 8, 16, 4, 2) : (1 @ wid, 2, 4 @ lane, 4, 1 @ lane, 1)])
# A column scale of the m16n8 accumulator: lane l holds columns 2 (l % 4) + {0, 1}, so
# the 8 lanes l % 4 == q hold the same two elements (a layout with a replicated lane axis).
COLUMN_SCALE = TileLayout(S[(4, 2) : (1 @ lane, 1)] + R[8 : 4 @ lane])
ROOT = Path(__file__).resolve().parents[1]


def _picture(func, variant, memory="shared", **view):
    """The picture of the first call ``variant`` lowers that touches ``memory``."""
    [report, *_] = [
        r
        for r in tcd.explain(func)
        if r.variant == variant and memory in {o["scope"] for o in r.operands}
    ]
    return draw.picture(report.call_object, report.plan_object, report.variant, **view)


@pytest.fixture(scope="module")
def wg_func():
    return demos.reg_roundtrip(WG_FRAGMENT, (64, 128), "float32", "warpgroup")


def _wg_owner(row: int, col: int) -> tuple[int, int]:
    """(thread, register) of WG_FRAGMENT's element [row, col], from the ISA's formula."""
    w, i, q = row // 16, row % 16 // 8, row % 8
    j, p, k = col // 8, col % 8 // 2, col % 2
    return 32 * w + 4 * q + p, 4 * j + 2 * i + k


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


def test_png_without_matplotlib_says_how_to_install_it(tmp_path, monkeypatch):
    pic = _picture(demos.gmem_smem_roundtrip(), "gmem_smem")
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import fails, installed or not
    with pytest.raises(draw.DrawError) as err:
        draw.write(pic, tmp_path / "x.png")
    # the project's real name (pyproject.toml) and the checkout form the docs give
    assert 'pip install "tirx_cuda_dispatch[plot]"' in str(err.value)
    assert 'pip install ".[plot]"' in str(err.value)
    assert not (tmp_path / "x.png").exists()


def test_install_hint_matches_the_project_name_and_the_docs():
    name = re.search(r'^name = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M)[1]
    assert f'"{name}[plot]"' in draw.PNG_HINT
    assert 'pip install ".[plot]"' in (ROOT / "docs" / "cli.md").read_text()


def test_png_is_written(tmp_path):
    pytest.importorskip("matplotlib")
    pic = _picture(demos.gmem_smem_roundtrip(), "gmem_smem")
    assert _png_size(draw.write(pic, tmp_path / "x.png"))[0] >= 760


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])  # IHDR: width, height


def _svg_size(svg: str) -> tuple[int, int]:
    m = re.match(r'<svg [^>]*width="(\d+)" height="(\d+)"', svg)
    return int(m[1]), int(m[2])


# -- windows: --rows, --cols -----------------------------------------------------------------
def test_a_window_holds_the_same_cells_as_the_whole_picture(wg_func):
    whole = _picture(wg_func, "reg", max_width=None)
    assert whole.shape == (64, 128) and (whole.rows, whole.cols) == ((0, 64), (0, 128))
    for row in (0, 17, 63):
        for col in (0, 9, 127):
            assert (whole.cells[row][col].thread, whole.cells[row][col].register) == _wg_owner(
                row, col
            )
    part = _picture(wg_func, "reg", rows="8:24", cols="40:56")
    assert (part.rows, part.cols) == ((8, 24), (40, 56))
    assert len(part.cells) == 16 and all(len(r) == 16 for r in part.cells)
    assert part.cells == [row[40:56] for row in whole.cells[8:24]]
    assert part.cells[0][0] != whole.cells[0][0]  # the window moved, it did not just shrink
    assert "showing rows 8:24 of 64, columns 40:56 of 128" in part.subtitle
    assert "use --cols" not in part.subtitle  # asked for, not cut
    # Open ends and negative ends read as Python slices do; slices work as well.
    tail = _picture(wg_func, "reg", rows=slice(60, None), cols="-8:")
    assert (tail.rows, tail.cols) == ((60, 64), (120, 128))
    assert tail.cells == [row[120:] for row in whole.cells[60:]]


@pytest.mark.parametrize(
    "view, message",
    [
        ({"rows": "70:80"}, "--rows 70:80: the tile has 64 rows (0:64)"),
        ({"rows": "8:8"}, "--rows 8:8: the tile has 64 rows (0:64)"),
        ({"rows": "20:10"}, "--rows 20:10: the tile has 64 rows"),
        ({"cols": "0:129"}, "--cols 0:129: the tile has 128 columns (0:128)"),
        ({"cols": "-200:"}, "--cols -200:: the tile has 128 columns"),
        ({"cols": "a:b"}, "--cols 'a:b': expected a half-open range a:b"),
        ({"cols": "4"}, "--cols '4': expected a half-open range a:b"),
        ({"cols": slice(0, 8, 2)}, "--cols 0:8: takes no step; the tile has 128 columns"),
        ({"warp": 4}, "--warp 4: call's scope warpgroup has 4 warps (0..3)"),
        ({"warp": -1}, "--warp -1: call's scope warpgroup has 4 warps"),
    ],
)
def test_bad_windows_are_refused_naming_the_option_and_the_extent(wg_func, view, message):
    with pytest.raises(draw.ViewError) as err:
        _picture(wg_func, "reg", **view)
    assert message in str(err.value)


# -- --warp ---------------------------------------------------------------------------------
def test_a_warps_picture_shows_only_its_threads(wg_func):
    every = {c.thread // 32 for row in _picture(wg_func, "reg").cells for c in row}
    assert every == {0, 1, 2, 3}  # control: without --warp all four warps appear
    pic = _picture(wg_func, "reg", warp=1)
    assert (pic.rows, pic.cols) == ((16, 32), (0, 40))  # warp 1's rows, cut to the width
    threads = {o.thread for row in pic.cells for c in row for o in c.owners}
    assert threads == set(range(32, 64))
    assert "warp 1's threads only" in pic.subtitle and "showing rows 16:32 of 64" in pic.subtitle
    # An explicit window shows other warps' cells blank.
    wider = _picture(wg_func, "reg", warp=1, rows="0:32", cols="0:8")
    assert all(c.owners == () and c.thread == -1 for row in wider.cells[:16] for c in row)
    assert all(c.thread // 32 == 1 for row in wider.cells[16:] for c in row)
    assert wider.cells[16:] == [row[:8] for row in pic.cells]


# -- the default width ----------------------------------------------------------------------
def test_a_large_tile_is_cut_to_about_2000_pixels_and_says_so(wg_func):
    pic = _picture(wg_func, "reg")
    assert pic.cols == (0, 40) and pic.rows == (0, 64) and len(pic.cells[0]) == 40
    assert pic.view == "showing columns 0:40 of 128; use --cols to pick others"
    assert pic.subtitle.endswith("; " + pic.view)
    width, _ = _svg_size(draw.to_svg(pic))
    assert width <= draw.MAX_WIDTH
    assert "use --cols to pick others" in draw.to_svg(pic)  # drawn, not only in the data
    # control: uncapped, the same tile is far wider and nothing is said to be cut
    whole = _picture(wg_func, "reg", max_width=None)
    assert _svg_size(draw.to_svg(whole))[0] > 5000 and whole.view == ""
    # asked for, the whole width is drawn
    assert _picture(wg_func, "reg", cols="0:128").cols == (0, 128)


def test_a_small_tile_is_not_cut():
    pic = _picture(demos.reg_roundtrip(TileLayout(S[(32, 8) : (1 @ lane, 1)]), (32, 8)), "reg")
    assert (pic.rows, pic.cols, pic.view) == ((0, 32), (0, 8), "")
    assert "showing" not in pic.subtitle


def test_png_of_a_large_tile_stays_under_2000_pixels_wide(wg_func, tmp_path):
    pytest.importorskip("matplotlib")  # PNG cells are slow to draw: a few rows tell
    pic = _picture(wg_func, "reg", rows="0:4")
    assert pic.cols == (0, 40)
    width, height = _png_size(draw.write(pic, tmp_path / "wg.png"))
    assert width <= draw.MAX_WIDTH and height > 4 * draw.CELL_H
    whole = draw.write(_picture(wg_func, "reg", rows="0:2", cols="0:128"), tmp_path / "all.png")
    assert _png_size(whole)[0] > 5000  # control: asked for, every column is drawn


# -- replicated owners ----------------------------------------------------------------------
def test_a_replicated_element_lists_every_owner():
    func = demos.reg_roundtrip(COLUMN_SCALE, (8,), "float32")
    for memory_call in ("shared->local", "local->shared"):
        [report] = [
            r
            for r in tcd.explain(func)
            if r.variant == "reg" and r.plan["direction"] == memory_call
        ]
        pic = draw.picture(report.call_object, report.plan_object, report.variant)
        assert pic.shape == (1, 8)
        for col, cell in enumerate(pic.cells[0]):
            quad = col // 2
            assert cell.threads == tuple(quad + 4 * k for k in range(8))
            assert {o.register for o in cell.owners} == {col % 2}
        assert pic.cell_width == draw.SHARED_CELL_W
    cell = pic.cells[0][0]
    assert draw.owner_label(cell) == ("t0,t4,t8 +5", "r0.0")
    svg = draw.to_svg(pic)
    tip = "[0, 0]: " + ", ".join(f"t{t} r0 round 0" for t in range(0, 32, 4))
    assert tip + " (8 threads hold it); bank 0" in svg
    assert ">t0,t4,t8 +5</text>" in svg


def test_replicated_rows_have_both_owners_and_plain_layouts_one():
    layout = TileLayout(S[(16, 8) : (1 @ lane, 1)] + R[2 : 16 @ lane])  # lanes l, l+16: row l
    pic = _picture(demos.reg_roundtrip(layout, (16, 8)), "reg")
    assert all(c.threads == (r, r + 16) for r, row in enumerate(pic.cells) for c in row)
    assert draw.owner_label(pic.cells[3][0], 12) == ("t3,t19", "r0.0")
    # control: one owner per element where nothing is replicated
    plain = _picture(demos.reg_roundtrip(TileLayout(S[(32, 8) : (1 @ lane, 1)]), (32, 8)), "reg")
    assert all(len(c.owners) == 1 for row in plain.cells for c in row)
    assert plain.cell_width == draw.CELL_W


@pytest.mark.parametrize("shift", [0, 4], ids=["multiple", "not-a-multiple"])
def test_a_region_at_a_warps_offset_is_drawn_from_its_start(shift):
    """``A_smem[w * 16 + shift : ...]``: each of 4 warps loads its 16 rows by ldmatrix. At
    a multiple of the 32-byte swizzle's period the picture is the region's own, noted, and
    equal to the picture of warp 0's rows at a constant offset; the control: 4 rows more
    is not a multiple of the period and is refused, naming the rule."""
    from tvm.script import tirx as T
    from tvm.script.tirx import tile as Tx

    layout = mma_shared_layout("float16", SwizzleMode.SWIZZLE_32B_ATOM, (72, 16))

    def kernel(constant: bool):
        # fmt: off
        @T.prim_func
        def f(A_ptr: T.handle):
            A = T.match_buffer(A_ptr, (72, 16), "float16")
            T.device_entry()
            T.cta_id([1])
            w = T.warp_id([4])
            T.lane_id([32])
            T.thread_id([128])
            A_s = T.alloc_buffer((72, 16), "float16", scope="shared", layout=layout)
            R_r = T.alloc_buffer((16, 16), "float16", scope="local", layout=A_FRAGMENT)
            Tx.cta.copy(A_s[:, :], A[:, :])
            if constant:
                Tx.warp.copy(R_r[:, :], A_s[shift : shift + 16, :])
            else:
                Tx.warp.copy(R_r[:, :], A_s[w * 16 + shift : w * 16 + shift + 16, :])
        # fmt: on
        return f

    if shift:
        with pytest.raises(draw.DrawError, match=r"not provably a multiple of .* elements"):
            _picture(kernel(False), "ldstmatrix")
        return
    moved, fixed = _picture(kernel(False), "ldstmatrix"), _picture(kernel(True), "ldstmatrix")
    assert "A_s's region starts at w * 256, drawn from its start" in moved.view
    assert [[c.owners for c in row] for row in moved.cells] == [
        [c.owners for c in row] for row in fixed.cells
    ]
    assert moved.worst_conflict == fixed.worst_conflict


def test_a_cp_async_into_a_ring_stage_at_a_loop_offset_is_drawn():
    """examples/attention_sm80.py's prefetch into stage (t + 1) % 2: drawn (it raised a
    TypeError through the partition's int())."""
    from modules import load_file

    sm80 = load_file("example_attention_sm80", ROOT / "examples" / "attention_sm80.py")
    reports = tcd.explain(sm80.attention_sm80_kernel(1, 128, 64), "sm_80")
    [prefetch, *_] = [r for r in reports if r.variant == "ldgsts" and "(t + 1)" in str(r.operands)]
    pic = draw.picture(prefetch.call_object, prefetch.plan_object, prefetch.variant)
    assert "K_s's region starts at" in pic.view and pic.worst_conflict == 1


# -- reductions of a shared tile ------------------------------------------------------------
def _read_once(pic) -> list[tuple[int, int]]:
    """The cells not read by exactly one thread (a reduction reads each element once)."""
    return [(r, c) for r, row in enumerate(pic.cells) for c, cell in enumerate(row)
            if len(cell.owners) != 1]  # fmt: skip


@pytest.mark.parametrize(
    "op, src, axes, dst",
    [("sum", (64, 64), (-1,), (64,)), ("max", (16, 128), (-1,), (16,)),
     ("sum", (8, 32), (0,), (32,)), ("min", (7, 13), (-1,), (7,))],
)  # fmt: skip
def test_a_shared_reduction_picture_shows_who_reads_each_element(op, src, axes, dst):
    """Each element of src read once, by one of the CTA's 128 threads, a load's ``vec``
    elements contiguous and in one round; odd extents (7 x 13) read only inside."""
    func = demos.shared_reduction(op, src, axes, dst)
    [report] = [r for r in tcd.explain(func) if r.variant == "shared"]
    plan = report.plan_object
    pic = draw.picture(report.call_object, plan, "shared", max_width=None)
    assert pic.shape == src and _read_once(pic) == []
    assert {o.thread for row in pic.cells for c in row for o in c.owners} <= set(range(128))
    for a in plan.memory_accesses().items:
        assert a.elements == plan.schedule.vec
    # the control: a plan whose every element a second thread also read is caught
    acc = plan.memory_accesses()
    other = tuple(dataclasses.replace(a, thread=(a.thread + 1) % 128) for a in acc.items)
    twice = SimpleNamespace(
        memory_accesses=lambda: dataclasses.replace(acc, items=acc.items + other)
    )
    again = draw.picture(report.call_object, twice, "shared", max_width=None)
    assert len(_read_once(again)) == src[0] * src[1]


def test_a_shared_reductions_bank_conflicts_are_the_ones_its_cost_rule_counted():
    """A column sum of 8 x 32 float32 over 128 threads: a warp's 32-bit loads take columns
    0-7 of four rows, banks 0-7 four times: the picture's 4-way conflict is the plan's 4
    wavefronts a load (its cost rule chose it over fewer threads)."""
    func = demos.shared_reduction("sum", (8, 32), (0,), (32,))
    [report] = [r for r in tcd.explain(func) if r.variant == "shared"]
    pic = draw.picture(report.call_object, report.plan_object, "shared")
    assert report.plan_object.schedule.vec == 1
    assert pic.worst_conflict == report.plan["wavefronts_per_load"] == 4
    row = demos.shared_reduction("sum", (64, 64), (-1,), (64,))  # the control: 16-byte rows
    [report] = [r for r in tcd.explain(row) if r.variant == "shared"]
    assert draw.picture(report.call_object, report.plan_object, "shared").worst_conflict == 1


# -- reductions of registers ----------------------------------------------------------------
def _rows_are_butterflies(pic, masks) -> bool:
    """Whether every row's holders are exactly the lanes the ``shfl.xor`` rounds of
    ``masks`` join: a butterfly from any holder reaches every holder and no other lane."""
    for row in pic.cells:
        held = {c.thread for c in row}
        joined = {min(held)}
        for m in masks:
            joined |= {t ^ m for t in joined}
        if joined != held:
            return False
    return True


def test_a_register_reduction_pictures_the_rows_quad_of_lanes():
    """The attention kernel's row max over the wgmma accumulator: each element held once,
    a row in a quad of lanes (two of each thread's registers per 8 columns), the quad the
    plan's shfl.xor 1/2 join; the controls: one round (mask 1 alone), or masks 1/4."""
    from modules import load_file

    attention = load_file("example_attention_draw", ROOT / "examples" / "attention.py")
    [report] = [r for r in tcd.explain(attention.attention_kernel(2, 128, 64)) if r.op == "max"]
    pic = draw.picture(report.call_object, report.plan_object, "local", max_width=None)
    assert pic.shape == (64, 64) and pic.memory == "local" and "shfl.xor 1/2" in pic.subtitle
    assert {len(c.owners) for row in pic.cells for c in row} == {1}
    assert [(c.thread, c.register) for c in pic.cells[0][:4]] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert all(len({c.thread for c in row}) == 4 for row in pic.cells)
    masks = report.plan_object.schedule.lane_masks
    assert masks == (1, 2) and _rows_are_butterflies(pic, masks)
    assert not _rows_are_butterflies(pic, (1,)) and not _rows_are_butterflies(pic, (1, 4))
