"""Pictures of a plan: the tile as a grid, who owns each element, and the banks it hits.

Kernel authors reach for this picture (CuTe prints layouts, Triton draws them): each
element of the call's memory-side tile is a cell coloured by the thread that owns it and
labelled with that thread's register index and the round (or instruction) that moves it;
an element that several threads hold (a replicated register layout: a row scale every
lane of a quad keeps) lists every owner. For shared memory, each cell also shows its
bank, and elements whose access shares a bank with another word of the same wavefront
are outlined in red.

Large tiles are shown in part: a window of rows and columns (half-open, like Python
slices), optionally one warp's cells only; by default the columns are cut to what fits in
about :data:`MAX_WIDTH` pixels, and the picture says what it left out.

It knows nothing about variants: a plan that can be drawn has a ``memory_accesses()``
method returning a :class:`..layout.partition.MemoryAccesses` (the pictured operand's
role and every access), or names a register operand (``pictured_registers``: a register
reduction's src), drawn as its layout places it, the plan's line saying how its holders
combine (the serial fold, the ``shfl.xor`` rounds, the warps' workspace). SVG is written
here without any dependency; PNG needs matplotlib (``pip install
"tirx_cuda_dispatch[plot]"``, or ``pip install ".[plot]"`` from a checkout).
"""

from __future__ import annotations

import colorsys
import math
import re
import textwrap
from collections import defaultdict
from dataclasses import dataclass
from html import escape
from pathlib import Path
from typing import Any

import numpy as np

from .call import TileCall
from .errors import Decline
from .irfacts import prove_multiple
from .layout.atoms import element_offsets, memory_view
from .layout.banks import WAVEFRONT_BYTES, bank, conflict_ways
from .layout.partition import MemoryAccesses
from .layout.register import register_table, register_view

MAX_WIDTH = 2000  # px: wider pictures show the columns that fit, unless columns are asked for
CELL_W, CELL_H = 46, 36
SHARED_CELL_W = 84  # cells listing several owners ("t0,t4,t8 +5") need the room
MARGIN, GUTTER, LINE = 12, 30, 18  # GUTTER: the row numbers left of the grid
CHAR_W = 7.5  # about 7.5 px a character of the 12-13 px header text
WARP = 32
PNG_HINT = 'pip install "tirx_cuda_dispatch[plot]" (from a checkout: pip install ".[plot]")'


class DrawError(Exception):
    """The call cannot be pictured; the message says why."""


class ViewError(DrawError, ValueError):
    """The part of the tile asked for (rows, columns, warp) does not exist; the message
    names the option and the tile's extent."""


@dataclass(frozen=True)
class Owner:
    """One thread holding (or moving) an element: where it keeps it and when it moves."""

    thread: int
    register: int  # -1 where no register holds it (a memory-to-memory copy)
    round: int


@dataclass
class Cell:
    owners: tuple[Owner, ...] = ()  # every owner, by thread: several where replicated
    bank: int = -1
    conflict: int = 1  # ways of the worst bank conflict of the accesses that move it

    @property
    def thread(self) -> int:
        """The first owner's thread (-1: nobody's)."""
        return self.owners[0].thread if self.owners else -1

    @property
    def register(self) -> int:
        return self.owners[0].register if self.owners else -1

    @property
    def round(self) -> int:
        return self.owners[0].round if self.owners else -1

    @property
    def threads(self) -> tuple[int, ...]:
        return tuple(dict.fromkeys(o.thread for o in self.owners))


@dataclass(frozen=True)
class Picture:
    """What the picture shows, as data (tests read it; renderers draw it)."""

    title: str
    subtitle: str  # the plan, then what the window leaves out (if anything)
    operand: str
    memory: str
    cells: list[list[Cell]]  # the window's rows x columns
    worst_conflict: int  # of the whole call, not only the window
    conflicts_by_round: dict[int, int]
    shape: tuple[int, int] = (0, 0)  # the whole tile's grid: rows, columns
    rows: tuple[int, int] = (0, 0)  # the window, half-open
    cols: tuple[int, int] = (0, 0)
    warp: int | None = None  # only this warp's owners are shown
    view: str = ""  # what the window leaves out, "" when it shows everything

    @property
    def cell_width(self) -> int:
        return _cell_width(self.cells)


def _symbolic_base(opnd: Any, view: Any) -> int:
    """A region at a symbolic offset (``Q_s[w * 16 : ...]``, a ring's stage ``t % 2``) is
    drawn from its start, where the offset moves no element to another bank or swizzle
    phase: it is a provable multiple of the swizzle's period, or of a wavefront's bytes
    without a swizzle. Else a DrawError says so."""
    elem_bytes = max(1, opnd.elem_bits // 8)
    if view.swizzle is not None:
        period, what = view.swizzle.period, "its swizzle's period"
    else:
        period, what = max(1, WAVEFRONT_BYTES // elem_bytes), f"{WAVEFRONT_BYTES} bytes"
    if not prove_multiple(view.base, period):
        raise DrawError(
            f"{opnd.name}'s region starts at {view.base}, not provably a multiple of {period} "
            f"elements ({what}): its banks depend on the value; draw a call whose region "
            "starts at a constant, or at such a multiple"
        )
    return 0


def _memory_cells(call: TileCall, acc: MemoryAccesses) -> tuple:
    """The pictured memory operand, every owner of each of its elements (with the conflict
    degree of the access that moves it: a replicated layout moves one element in several
    threads, and each is an owner), each element's bank, the worst conflict per round,
    and a note where the region's start is symbolic."""
    opnd = call.operand(acc.role)
    try:
        view = memory_view(opnd)
    except Decline as why:
        raise DrawError(str(why)) from None
    base, moved = view.base, ""
    if not isinstance(base, int):  # a warp's rows, a ring's stage: drawn from its start
        base, moved = _symbolic_base(opnd, view), f"{opnd.name}'s region starts at {base}"
    logical = element_offsets(view) + base
    if view.swizzle is not None:
        logical = np.vectorize(view.swizzle.apply)(logical)
    where = {int(off): i for i, off in enumerate(logical)}
    elem_bytes = opnd.elem_bits // 8
    shared = opnd.memory == "shared"
    owners: list[dict[Owner, int]] = [{} for _ in range(len(logical))]
    banks = [-1] * len(logical)
    degree = conflict_ways(acc.items, elem_bytes) if shared else [1] * len(acc.items)
    by_round: dict[int, int] = defaultdict(lambda: 1)
    for a, ways in zip(acc.items, degree, strict=True):
        by_round[a.round] = max(by_round[a.round], ways)
        for k in range(a.elements):
            index = where.get(a.offset + k)
            if index is None:
                raise DrawError(f"access at offset {a.offset + k} falls outside {opnd.name}")
            thread, register = a.owners[k] if a.owners else (a.thread, -1)
            owner = Owner(thread, register, a.round)
            owners[index][owner] = max(owners[index].get(owner, 1), ways)
            if shared:
                banks[index] = bank(a.offset + k, elem_bytes)
    return opnd, owners, banks, by_round, moved


def _register_cells(call: TileCall, role: str) -> tuple:
    """The register operand ``role`` (a register reduction's src): each element's holders,
    thread and register, as its layout places them (round 0: no memory access moves
    them; the plan's line says how the holders combine)."""
    opnd = call.operand(role)
    try:
        table = register_table(register_view(opnd), call.scope, call.thread_count or 1)
    except Decline as why:
        raise DrawError(str(why)) from None
    owners: list[dict[Owner, int]] = [{} for _ in range(math.prod(int(e) for e in opnd.extents))]
    for t, row in enumerate(table.elements):
        for register, e in zip(table.registers, row, strict=True):
            if e >= 0:
                owners[int(e)][Owner(t, int(register), 0)] = 1
    return opnd, owners, [-1] * len(owners), {0: 1}, ""


def picture(
    call: TileCall,
    plan: Any,
    variant: str,
    *,
    rows: str | slice | None = None,
    cols: str | slice | None = None,
    warp: int | None = None,
    max_width: int | None = MAX_WIDTH,
) -> Picture:
    """The :class:`Picture` of ``call`` lowered by ``variant`` with ``plan``.

    ``rows``/``cols`` pick a window (``"16:32"`` or ``slice(16, 32)``, half-open, negative
    ends count from the end); ``warp`` keeps only the owners in that warp and, where no
    window is given, crops to the cells it owns. Unless ``cols`` is given, columns past
    ``max_width`` pixels are cut (None: never). Bad windows raise :class:`ViewError`.
    """
    accesses_of = getattr(plan, "memory_accesses", None)
    registers = getattr(plan, "pictured_registers", None)
    if accesses_of is not None:
        opnd, owners, banks, by_round, moved = _memory_cells(call, accesses_of())
    elif registers is not None:
        opnd, owners, banks, by_round, moved = _register_cells(call, registers)
    else:
        raise DrawError(
            f"variant {variant} moves no data through shared or global memory in a way the "
            "picture can show (it has no memory_accesses()) and pictures no registers"
        )
    extents = [int(e) for e in opnd.extents]
    n_cols = extents[-1] if extents else 1
    n_rows = max(1, math.prod(extents) // n_cols)

    threads = call.thread_count or 1 + max((o.thread for c in owners for o in c), default=0)
    warps = max(1, -(-threads // WARP))
    if warp is not None:
        if not 0 <= warp < warps:
            raise ViewError(
                f"--warp {warp}: call's scope {call.scope} has {warps} warp"
                f"{'s' if warps > 1 else ''} (0..{warps - 1})"
            )
        owners = [{o: w for o, w in c.items() if o.thread // WARP == warp} for c in owners]

    def cell(index: int) -> Cell:
        mine = sorted(owners[index], key=lambda o: (o.thread, o.round, o.register))
        return Cell(tuple(mine), banks[index], max(owners[index].values(), default=1))

    grid = [[cell(r * n_cols + c) for c in range(n_cols)] for r in range(n_rows)]
    r0, r1 = 0, n_rows
    c0, c1 = 0, n_cols
    if warp is not None:  # crop to the warp's cells; an explicit window overrides
        held = [(r, c) for r in range(n_rows) for c in range(n_cols) if grid[r][c].owners]
        if not held:
            raise ViewError(f"--warp {warp}: the warp owns no element of {opnd.name}")
        r0, r1 = min(r for r, _ in held), max(r for r, _ in held) + 1
        c0, c1 = min(c for _, c in held), max(c for _, c in held) + 1
    if rows is not None:
        r0, r1 = _window(rows, n_rows, "--rows", "rows")
    if cols is not None:
        c0, c1 = _window(cols, n_cols, "--cols", "columns")
    cut = False
    if cols is None and max_width is not None:
        fit = max(1, (max_width - 2 * MARGIN - GUTTER) // _cell_width(grid[r0:r1]))
        if c1 - c0 > fit:
            c1, cut = c0 + (fit // 8 * 8 if fit >= 8 else fit), True  # whole 8-column groups
    cells = [row[c0:c1] for row in grid[r0:r1]]

    shown = []
    if (r0, r1) != (0, n_rows):
        shown.append(f"rows {r0}:{r1} of {n_rows}")
    if (c0, c1) != (0, n_cols):
        shown.append(f"columns {c0}:{c1} of {n_cols}")
    notes = [f"showing {', '.join(shown)}"] if shown else []
    if moved:
        notes.append(f"{moved}, drawn from its start (the same banks for every value)")
    if warp is not None:
        notes.append(f"warp {warp}'s threads only (other warps' cells blank)")
    if cut:
        notes.append("use --cols to pick others")
    view_note = "; ".join(notes)
    return Picture(
        title=f"{call.op} -> {variant}: {opnd.name}[{', '.join(str(e) for e in extents)}] "
        f"({opnd.memory}, {opnd.dtype}) at {_where(call)}",
        subtitle=f"{plan}; {view_note}" if view_note else str(plan),
        operand=opnd.name,
        memory=opnd.memory,
        cells=cells,
        worst_conflict=max(by_round.values(), default=1),
        conflicts_by_round=dict(by_round),
        shape=(n_rows, n_cols),
        rows=(r0, r1),
        cols=(c0, c1),
        warp=warp,
        view=view_note,
    )


def parse_range(text: str, option: str) -> slice:
    """``"a:b"`` (either end may be left out, as in a Python slice) -> ``slice(a, b)``."""
    m = re.fullmatch(r"\s*(-?\d+)?\s*:\s*(-?\d+)?\s*", text)
    if m is None:
        raise ViewError(
            f"{option} {text!r}: expected a half-open range a:b like a Python slice "
            "(e.g. 0:32, 16:, :40)"
        )
    return slice(*(int(g) if g is not None else None for g in m.groups()))


def _window(spec: str | slice, extent: int, option: str, what: str) -> tuple[int, int]:
    """``spec`` resolved against ``extent``: (start, stop), both in range, start < stop."""
    sl = parse_range(spec, option) if isinstance(spec, str) else spec
    text = spec if isinstance(spec, str) else f"{_str(sl.start)}:{_str(sl.stop)}"
    if sl.step not in (None, 1):
        raise ViewError(f"{option} {text}: takes no step; the tile has {extent} {what}")
    ends = []
    for end, default in ((sl.start, 0), (sl.stop, extent)):
        end = default if end is None else int(end)
        ends.append(end + extent if end < 0 else end)
    lo, hi = ends
    if not 0 <= lo < hi <= extent:
        raise ViewError(
            f"{option} {text}: the tile has {extent} {what} (0:{extent}); "
            f"pick a non-empty a:b with 0 <= a < b <= {extent}"
        )
    return lo, hi


def _str(end: int | None) -> str:
    return "" if end is None else str(end)


def _cell_width(cells: list[list[Cell]]) -> int:
    replicated = any(len(c.threads) > 1 for row in cells for c in row)
    return SHARED_CELL_W if replicated else CELL_W


def _where(call: TileCall) -> str:
    loc = call.location
    if loc.file is None or loc.line is None:
        return "<unknown location>"
    return f"{Path(loc.file).name}:{loc.line}" + (f": {loc.text.strip()}" if loc.text else "")


# -- rendering ----------------------------------------------------------------------------
def _colour(thread: int) -> str:
    """Neighbouring lanes get distant hues; warps alternate lightness."""
    if thread < 0:
        return "#eeeeee"
    hue = ((thread % 32) * 0.382) % 1.0
    light = 0.80 if (thread // 32) % 2 == 0 else 0.66
    r, g, b = colorsys.hls_to_rgb(hue, light, 0.65)
    return f"#{int(r * 255):02x}{int(g * 255):02x}{int(b * 255):02x}"


def _listing(items: list[str], chars: int, sep: str = ",") -> str:
    """As many of ``items`` as fit in ``chars`` characters, then ``+<rest>``."""
    for n in range(len(items), 0, -1):
        text = sep.join(items[:n]) + (f" +{len(items) - n}" if n < len(items) else "")
        if len(text) <= chars:
            return text
    return f"{items[0]} +{len(items) - 1}" if len(items) > 1 else items[0]


def owner_label(cell: Cell, chars: int = 11) -> tuple[str, str]:
    """The cell's two lines: its owners' threads, and their register.round where they
    differ (``r3.0`` when every owner keeps it in the same register and round)."""
    if not cell.owners:
        return "", ""
    threads = _listing([f"t{t}" for t in cell.threads], chars)
    slots = dict.fromkeys(
        f"{f'r{o.register}' if o.register >= 0 else ''}.{o.round}".lstrip(".") for o in cell.owners
    )
    return threads, _listing(list(slots), chars)


def tooltip(cell: Cell, row: int, col: int) -> str:
    """Everything about one cell, every owner included (the SVG's hover text)."""
    owners = ", ".join(
        f"t{o.thread}" + (f" r{o.register}" if o.register >= 0 else "") + f" round {o.round}"
        for o in cell.owners
    )
    text = f"[{row}, {col}]: " + (owners or "not shown")
    if len(cell.threads) > 1:
        text += f" ({len(cell.threads)} threads hold it)"
    if cell.bank >= 0:
        text += f"; bank {cell.bank}"
    if cell.conflict > 1:
        text += f"; {cell.conflict}-way bank conflict"
    return text


def _primitives(pic: Picture) -> tuple[int, int, list[tuple]]:
    rows, cols = len(pic.cells), len(pic.cells[0])
    cell_w = pic.cell_width
    grid_w = 2 * MARGIN + GUTTER + cols * cell_w
    legend = "cell: t<thread>[,t<thread>...] / r<register> . <round>; numbers: row, column"
    if pic.memory == "shared":
        legend += "; corner: bank; red outline: bank conflict"
    text_w = 2 * MARGIN + CHAR_W * max(len(pic.title), len(pic.subtitle), len(legend))
    width = int(max(grid_w, min(text_w, MAX_WIDTH), 760))
    chars = int((width - 2 * MARGIN) / CHAR_W)
    lines = [(_clip(pic.title, chars), 13, "#000000")]
    # The subtitle ends with what the window leaves out: wrap it rather than clip it away.
    lines += [(t, 12, "#333333") for t in textwrap.wrap(pic.subtitle, chars)[:3]]
    lines.append((_clip(legend, chars), 12, "#333333"))
    if pic.memory == "shared":
        worst = ", ".join(f"round {r}: {w}-way" for r, w in sorted(pic.conflicts_by_round.items()))
        colour = "#b00000" if pic.worst_conflict > 1 else "#006000"
        lines.append((_clip(f"bank conflicts (whole call): {worst}", chars), 12, colour))
    prims: list[tuple] = [
        ("text", MARGIN, 20 + LINE * i, text, size, "start", colour)
        for i, (text, size, colour) in enumerate(lines)
    ]
    top = 20 + LINE * len(lines) + 14
    left = MARGIN + GUTTER
    height = top + rows * CELL_H + 2 * MARGIN
    r0, c0 = pic.rows[0], pic.cols[0]
    for j in range(cols):
        x = left + j * cell_w + cell_w / 2
        prims.append(("text", x, top - 4, str(c0 + j), 8, "middle", "#555555"))
    many = cell_w > CELL_W
    for i, row in enumerate(pic.cells):
        y = top + i * CELL_H
        prims.append(("text", left - 4, y + CELL_H / 2 + 3, str(r0 + i), 8, "end", "#555555"))
        for j, cell in enumerate(row):
            x = left + j * cell_w
            conflict = cell.conflict > 1 and bool(cell.owners)
            prims.append(
                (
                    "rect",
                    x,
                    y,
                    cell_w,
                    CELL_H,
                    _colour(cell.thread),
                    "#d00000" if conflict else "#ffffff",
                    2.5 if conflict else 1.0,
                    tooltip(cell, r0 + i, c0 + j),
                )
            )
            if cell.owners:
                who, slot = owner_label(cell, 12 if many else 6)
                size = 10 if many else 11
                prims.append(("text", x + cell_w / 2, y + 15, who, size, "middle", "#000000"))
                prims.append(("text", x + cell_w / 2, y + 29, slot, 10, "middle", "#222222"))
            if cell.bank >= 0:
                prims.append(("text", x + cell_w - 3, y + 9, str(cell.bank), 7, "end", "#555555"))
    return width, height, prims


def _clip(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 3] + "..."


def to_svg(pic: Picture) -> str:
    width, height, prims = _primitives(pic)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'font-family="DejaVu Sans, Arial, sans-serif">',
        f'<rect width="{width}" height="{height}" fill="#ffffff"/>',
    ]
    for p in prims:
        if p[0] == "rect":
            _, x, y, w, h, fill, stroke, sw, tip = p
            out.append(
                f'<rect x="{x}" y="{y}" width="{w}" height="{h}" fill="{fill}" '
                f'stroke="{stroke}" stroke-width="{sw}"><title>{escape(tip)}</title></rect>'
            )
        else:
            _, x, y, text, size, anchor, colour = p
            out.append(
                f'<text x="{x}" y="{y}" font-size="{size}" text-anchor="{anchor}" '
                f'fill="{colour}">{escape(text)}</text>'
            )
    out.append("</svg>")
    return "\n".join(out) + "\n"


def to_png(pic: Picture, path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.patches import Rectangle
    except ImportError:
        raise DrawError(f"PNG output needs matplotlib: {PNG_HINT}; or write .svg") from None
    width, height, prims = _primitives(pic)
    dpi = 100
    fig = plt.figure(figsize=(width / dpi, height / dpi), dpi=dpi)
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(0, width)
    ax.set_ylim(height, 0)
    ax.axis("off")
    align = {"start": "left", "middle": "center", "end": "right"}
    for p in prims:
        if p[0] == "rect":
            _, x, y, w, h, fill, stroke, sw, _tip = p
            ax.add_patch(Rectangle((x, y), w, h, facecolor=fill, edgecolor=stroke, linewidth=sw))
        else:
            _, x, y, text, size, anchor, colour = p
            ax.text(x, y, text, fontsize=size * 0.75, ha=align[anchor], va="baseline", color=colour)
    fig.savefig(path, dpi=dpi, facecolor="white")
    plt.close(fig)


def write(pic: Picture, path: str | Path) -> Path:
    """Write ``pic`` as SVG or PNG, chosen by the file suffix."""
    path = Path(path)
    if path.suffix.lower() == ".svg":
        path.write_text(to_svg(pic))
    elif path.suffix.lower() == ".png":
        to_png(pic, path)
    else:
        raise DrawError(f"output {path} must end in .svg or .png")
    return path
