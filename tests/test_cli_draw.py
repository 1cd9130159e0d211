"""``tirx-dispatch draw``: windows (--rows, --cols), --warp, the default width, exit codes."""

from __future__ import annotations

import re
import sys

import pytest

from tirx_cuda_dispatch.__main__ import EXIT_OK, EXIT_UNAVAILABLE, EXIT_USAGE, main

WG_PROGRAM = """
from tvm.tirx.layout import Axis, S, TileLayout
from tirx_cuda_dispatch import demos

# the wgmma m64n128 float32 accumulator fragment, staged through shared memory
lane, wid = Axis.laneid, Axis.wid_in_wg
WG = TileLayout(S[(4, 2, 8, 16, 4, 2) : (1 @ wid, 2, 4 @ lane, 4, 1 @ lane, 1)])
kernel = demos.reg_roundtrip(WG, (64, 128), "float32", "warpgroup")
"""

SCALE_PROGRAM = """
from tvm.tirx.layout import Axis, R, S, TileLayout
from tirx_cuda_dispatch import demos

# a column scale: lanes l, l + 4, ..., l + 28 hold the same two elements
lane = Axis.laneid
kernel = demos.reg_roundtrip(TileLayout(S[(4, 2) : (1 @ lane, 1)] + R[8 : 4 @ lane]), (8,))
"""

SHARED_TO_REGS = "2"  # the calls of demos.reg_roundtrip, as explain numbers them


@pytest.fixture(scope="module")
def programs(tmp_path_factory):
    where = tmp_path_factory.mktemp("programs")
    (where / "wg.py").write_text(WG_PROGRAM)
    (where / "scale.py").write_text(SCALE_PROGRAM)
    return where


def _draw(programs, name, *options, out):
    return main(["draw", str(programs / name), "--call", SHARED_TO_REGS, "-o", str(out), *options])


def _svg_width(path) -> int:
    return int(re.match(r'<svg [^>]*width="(\d+)"', path.read_text())[1])


def _cells(path) -> int:
    return path.read_text().count("<rect") - 1  # less the background


def _threads(path) -> set[int]:
    """Every thread the cells' labels and tooltips name."""
    labels = re.findall(
        r">(t\d+(?:,t\d+)*)(?: \+\d+)?</text>|<title>([^<]*)</title>", path.read_text()
    )
    return {int(t) for pair in labels for text in pair for t in re.findall(r"\bt(\d+)", text)}


def test_a_large_tile_is_cut_to_2000_pixels_and_the_line_says_so(programs, tmp_path, capsys):
    out = tmp_path / "wg.svg"
    assert _draw(programs, "wg.py", out=out) == EXIT_OK
    line = capsys.readouterr().out
    assert (
        "worst bank conflict 1-way; showing columns 0:40 of 128; use --cols to pick others" in line
    )
    assert _svg_width(out) <= 2000 and _cells(out) == 64 * 40
    assert "showing columns 0:40 of 128" in out.read_text()
    # control: the whole width, asked for, is drawn and nothing is said to be cut
    assert _draw(programs, "wg.py", "--cols", "0:128", out=out) == EXIT_OK
    assert "showing" not in capsys.readouterr().out
    assert _svg_width(out) > 5000 and _cells(out) == 64 * 128


def test_rows_and_cols_pick_a_window(programs, tmp_path, capsys):
    out = tmp_path / "part.svg"
    assert _draw(programs, "wg.py", "--rows", "8:24", "--cols=-16:", out=out) == EXIT_OK
    assert "showing rows 8:24 of 64, columns 112:128 of 128" in capsys.readouterr().out
    assert _cells(out) == 16 * 16
    # lane l of warp w holds row 16w + 8i + l // 4: rows 8:24 are warps 0 and 1's
    assert _threads(out) == set(range(64))
    assert ">112</text>" in out.read_text() and ">111</text>" not in out.read_text()


def test_warp_keeps_only_its_threads(programs, tmp_path, capsys):
    out = tmp_path / "w2.svg"
    assert _draw(programs, "wg.py", "--warp", "2", "--cols", "0:16", out=out) == EXIT_OK
    line = capsys.readouterr().out
    assert "showing rows 32:48 of 64, columns 0:16 of 128; warp 2's threads only" in line
    assert _threads(out) == set(range(64, 96)) and _cells(out) == 16 * 16
    # control: the same window without --warp has all four warps' threads
    assert _draw(programs, "wg.py", "--rows", "0:64", "--cols", "0:16", out=out) == EXIT_OK
    assert _threads(out) == set(range(128))


def test_replicated_cells_name_every_owner(programs, tmp_path, capsys):
    out = tmp_path / "scale.svg"
    assert _draw(programs, "scale.py", out=out) == EXIT_OK
    svg = out.read_text()
    assert svg.count(">t0,t4,t8 +5</text>") == 2  # columns 0 and 1
    assert "t0 r0 round 0, t4 r0 round 0, t8 r0 round 0, t12 r0 round 0, t16 r0 round 0" in svg
    assert "t28 r1 round 0 (8 threads hold it)" in svg
    assert _threads(out) == set(range(32))


@pytest.mark.parametrize(
    "options, message",
    [
        (["--rows", "64:70"], "--rows 64:70: the tile has 64 rows (0:64)"),
        (["--rows", "3:3"], "--rows 3:3: the tile has 64 rows (0:64)"),
        (["--cols", "0:200"], "--cols 0:200: the tile has 128 columns (0:128)"),
        (["--cols", "x"], "--cols 'x': expected a half-open range a:b"),
        (["--warp", "4"], "--warp 4: call's scope warpgroup has 4 warps (0..3)"),
    ],
)
def test_bad_windows_exit_2_and_say_why(programs, tmp_path, capsys, options, message):
    out = tmp_path / "x.svg"
    assert _draw(programs, "wg.py", *options, out=out) == EXIT_USAGE
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_a_warp_that_is_not_a_number_is_an_argparse_usage_error(programs, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        _draw(programs, "wg.py", "--warp", "one", out=tmp_path / "x.svg")
    assert exit_.value.code == EXIT_USAGE
    assert "--warp: invalid int value: 'one'" in capsys.readouterr().err


def test_png_without_matplotlib_exits_4_with_the_install_command(
    programs, tmp_path, capsys, monkeypatch
):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert _draw(programs, "scale.py", out=tmp_path / "x.png") == EXIT_UNAVAILABLE
    err = capsys.readouterr().err
    assert 'pip install "tirx_cuda_dispatch[plot]"' in err and 'pip install ".[plot]"' in err


def test_png_of_a_window(programs, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    out = tmp_path / "w.png"
    assert _draw(programs, "wg.py", "--rows", "0:2", out=out) == EXIT_OK
    assert "showing rows 0:2 of 64, columns 0:40 of 128" in capsys.readouterr().out
    width = int.from_bytes(out.read_bytes()[16:20], "big")
    assert 1000 < width <= 2000


def test_a_register_reduction_is_drawn_and_the_line_says_registers(tmp_path, capsys):
    """examples/softmax.py's row max (call 2): src's registers as its layout places them,
    the plan's line naming the shuffle rounds and the warps' workspace; no banks claimed
    (the control: a shared-memory picture's line names its bank conflicts, above)."""
    from modules import ROOT

    out = tmp_path / "max.svg"
    code = main(["draw", str(ROOT / "examples" / "softmax.py"), "--call", "2", "-o", str(out)])
    line = capsys.readouterr().out
    assert code == EXIT_OK and "call 2, local, registers, as the layout places them" in line
    assert "bank conflict" not in line
    svg = out.read_text()
    assert "shfl.xor 1/2/4/8/16" in svg and "warps through shared workspace" in svg
    assert "bank conflicts (whole call)" not in svg
