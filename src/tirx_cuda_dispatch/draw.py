"""Pictures of a plan: the tile as a grid, who owns each element, and the banks it hits.

Kernel authors reach for this picture (CuTe prints layouts, Triton draws them): each
element of the call's memory-side tile is a cell coloured by the thread that owns it and
labelled with that thread's register index and the round (or instruction) that moves it;
for shared memory, each cell also shows its bank, and elements whose access shares a bank
with another word of the same wavefront are outlined in red.

It knows nothing about variants: a plan that can be drawn has a ``memory_accesses()``
method returning a :class:`..layout.partition.MemoryAccesses` (the pictured operand's
role and every access). SVG is written here without any dependency; PNG needs
matplotlib (``pip install "tirx-cuda-dispatch[plot]"``).
"""

from __future__ import annotations

import colorsys
import math
from collections import defaultdict
from dataclasses import dataclass
from html import escape
from pathlib import Path
from typing import Any

import numpy as np

from .call import TileCall
from .errors import Decline
from .layout.atoms import element_offsets, memory_view
from .layout.banks import bank, conflict_ways
from .layout.partition import MemoryAccesses

CELL_W, CELL_H, MARGIN, HEADER = 46, 36, 12, 92


class DrawError(Exception):
    """The call cannot be pictured; the message says why."""


@dataclass
class Cell:
    thread: int = -1
    register: int = -1
    round: int = -1
    bank: int = -1
    conflict: int = 1  # ways of the worst bank conflict of the access that moves it


@dataclass(frozen=True)
class Picture:
    """What the picture shows, as data (tests read it; renderers draw it)."""

    title: str
    subtitle: str
    operand: str
    memory: str
    cells: list[list[Cell]]  # rows x columns of the tile
    worst_conflict: int
    conflicts_by_round: dict[int, int]


def picture(call: TileCall, plan: Any, variant: str) -> Picture:
    """The :class:`Picture` of ``call`` lowered by ``variant`` with ``plan``."""
    accesses_of = getattr(plan, "memory_accesses", None)
    if accesses_of is None:
        raise DrawError(
            f"variant {variant} moves no data through shared or global memory in a way the "
            "picture can show (it has no memory_accesses())"
        )
    acc: MemoryAccesses = accesses_of()
    opnd = call.operand(0 if acc.role == "dst" else 1, acc.role)
    try:
        view = memory_view(opnd)
    except Decline as why:
        raise DrawError(str(why)) from None
    if not isinstance(view.base, int):
        raise DrawError(f"{opnd.name}'s region starts at a symbolic offset ({view.base})")
    logical = element_offsets(view) + view.base
    if view.swizzle is not None:
        logical = np.vectorize(view.swizzle.apply)(logical)
    where = {int(off): i for i, off in enumerate(logical)}
    extents = [int(e) for e in opnd.extents]
    cols = extents[-1] if extents else 1
    rows = max(1, math.prod(extents) // cols)
    cells = [[Cell() for _ in range(cols)] for _ in range(rows)]
    elem_bytes = opnd.elem_bits // 8
    shared = opnd.memory == "shared"

    degree = conflict_ways(acc.items, elem_bytes) if shared else [1] * len(acc.items)
    by_round: dict[int, int] = defaultdict(lambda: 1)
    for a, ways in zip(acc.items, degree, strict=True):
        by_round[a.round] = max(by_round[a.round], ways)
        for k in range(a.elements):
            index = where.get(a.offset + k)
            if index is None:
                raise DrawError(f"access at offset {a.offset + k} falls outside {opnd.name}")
            cell = cells[index // cols][index % cols]
            thread, register = a.owners[k] if a.owners else (a.thread, -1)
            cell.thread, cell.register, cell.round = thread, register, a.round
            cell.conflict = ways
            if shared:
                cell.bank = bank(a.offset + k, elem_bytes)
    worst = max(by_round.values(), default=1)
    return Picture(
        title=f"{call.op} -> {variant}: {opnd.name}[{', '.join(str(e) for e in extents)}] "
        f"({opnd.memory}, {opnd.dtype}) at {_where(call)}",
        subtitle=str(plan),
        operand=opnd.name,
        memory=opnd.memory,
        cells=cells,
        worst_conflict=worst,
        conflicts_by_round=dict(by_round),
    )


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


def _primitives(pic: Picture) -> tuple[int, int, list[tuple]]:
    rows, cols = len(pic.cells), len(pic.cells[0])
    text_width = 7.5 * max(len(pic.title), len(pic.subtitle))  # about 7.5 px a character
    width = int(max(2 * MARGIN + cols * CELL_W, 2 * MARGIN + text_width, 760))
    height = HEADER + rows * CELL_H + 2 * MARGIN
    prims: list[tuple] = [
        ("text", MARGIN, 20, pic.title, 13, "start", "#000000"),
        ("text", MARGIN, 40, pic.subtitle, 12, "start", "#333333"),
    ]
    legend = "cell: t<thread> / r<register> . <round>"
    if pic.memory == "shared":
        worst = ", ".join(f"round {r}: {w}-way" for r, w in sorted(pic.conflicts_by_round.items()))
        legend += "; corner: bank; red outline: bank conflict"
        prims.append(
            (
                "text",
                MARGIN,
                76,
                f"bank conflicts: {_clip(worst, 120)}",
                12,
                "start",
                "#b00000" if pic.worst_conflict > 1 else "#006000",
            )
        )
    prims.append(("text", MARGIN, 58, legend, 12, "start", "#333333"))
    top = HEADER
    for i, row in enumerate(pic.cells):
        for j, cell in enumerate(row):
            x, y = MARGIN + j * CELL_W, top + i * CELL_H
            conflict = cell.conflict > 1
            prims.append(
                (
                    "rect",
                    x,
                    y,
                    CELL_W,
                    CELL_H,
                    _colour(cell.thread),
                    "#d00000" if conflict else "#ffffff",
                    2.5 if conflict else 1.0,
                )
            )
            if cell.thread >= 0:
                reg = f"r{cell.register}" if cell.register >= 0 else ""
                prims.append(
                    ("text", x + CELL_W / 2, y + 15, f"t{cell.thread}", 11, "middle", "#000000")
                )
                prims.append(
                    (
                        "text",
                        x + CELL_W / 2,
                        y + 29,
                        f"{reg}.{cell.round}".lstrip("."),
                        10,
                        "middle",
                        "#222222",
                    )
                )
            if cell.bank >= 0:
                prims.append(("text", x + CELL_W - 3, y + 9, str(cell.bank), 7, "end", "#555555"))
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
            _, x, y, w, h, fill, stroke, sw = p
            out.append(
                f'<rect x="{x}" y="{y}" width="{w}" height="{h}" fill="{fill}" '
                f'stroke="{stroke}" stroke-width="{sw}"/>'
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
        raise DrawError(
            'PNG output needs matplotlib: pip install "tirx-cuda-dispatch[plot]" (or write .svg)'
        ) from None
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
            _, x, y, w, h, fill, stroke, sw = p
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
