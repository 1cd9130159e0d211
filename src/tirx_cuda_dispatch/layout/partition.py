"""The scope-synthesized partition: ``[outer, threads, vec]`` when no operand names threads.

A global<->shared copy has no register operand whose layout says which thread owns which
element, so the partition is made from the execution scope's thread count:

1. walk both operands' regions together as common (extent, strides) dimensions;
2. order them by the *driving* operand's stride, largest first (global drives, so
   consecutive threads touch consecutive global addresses: coalesced), and fuse
   neighbours that are contiguous on every operand;
3. take the widest vector that fits (:mod:`.vector`) off the innermost dimension;
4. carve the thread count off the next dimensions, innermost first; what is left is the
   round loop.

Each thread then moves ``vec`` elements per round, at
``base + sum(digit_i(round) * stride_i) + sum(digit_j(tid) * stride_j)``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..errors import Decline
from ..irfacts import as_int
from .atoms import MemoryView, common_refinement
from .swizzle import Swizzle
from .vector import VECTOR_BITS, vector_candidates, vector_misfit


@dataclass(frozen=True)
class Access:
    """One thread's access to a memory operand in one round (or instruction)."""

    round: int
    thread: int
    offset: int  # physical element offset in the operand's buffer (swizzle applied)
    elements: int  # contiguous elements it moves
    owners: tuple[tuple[int, int], ...] = ()  # (thread, register) per element, if registers


@dataclass(frozen=True)
class MemoryAccesses:
    """Every access a plan makes to its shared or global operand (tools draw and count
    them: bank conflicts, bytes moved). ``role`` names the operand: "dst" or "src"."""

    role: str
    items: tuple[Access, ...]


@dataclass(frozen=True)
class Dim:
    """One loop dimension of a partition: its extent and its stride on each operand."""

    extent: int
    strides: tuple[int, ...]


@dataclass(frozen=True)
class ScopePartition:
    """Who moves what: rounds x threads x vec, with per-operand strides and bases."""

    outer: tuple[Dim, ...]  # indexed by the round, outer -> inner
    thread: tuple[Dim, ...]  # indexed by the thread id, outer -> inner
    vec: int  # contiguous elements per access on every operand
    vec_bits: int
    bases: tuple[Any, ...]  # per operand, element offset (int or PrimExpr)
    swizzles: tuple[Swizzle | None, ...]
    narrower_because: str | None = None  # why the next wider vector did not fit

    @property
    def rounds(self) -> int:
        return _product(d.extent for d in self.outer)

    @property
    def threads(self) -> int:
        return _product(d.extent for d in self.thread)

    def offset(self, which: int, rnd: Any, tid: Any) -> Any:
        """Element offset on operand ``which`` of thread ``tid``'s vector in round ``rnd``.

        Works on ints (tests and tools check or draw a plan with it) and on TIR
        expressions (the emitter writes the same arithmetic into the kernel).
        """
        off = (
            self.bases[which]
            + dims_offset(rnd, self.outer, which)
            + dims_offset(tid, self.thread, which)
        )
        swz = self.swizzles[which]
        return swz.apply(off) if swz is not None else off

    def slot(self, which: int, rnd: Any, tid: Any) -> Any:
        """:meth:`offset` in units of one access (``vec`` elements): the index into a view
        whose element is one access. Exact: the plan aligned every offset to ``vec``."""
        return self.offset(which, rnd, tid) // self.vec

    def accesses(
        self, which: int, registers: int | None = None, round_of: Any = None
    ) -> tuple[Access, ...]:
        """Every access to operand ``which``, steps outer; ``registers`` names the register
        operand whose offsets say where each element lives in the thread. ``round_of(step,
        tid)`` is the round a thread moves in each step (default: the step itself). A
        symbolic base (a region at a warp's or a loop's offset) counts as 0: the offsets are
        the region's own (what its picture shows, where the base keeps the banks)."""
        at = replace(self, bases=_concrete(self.bases))
        out = []
        for step in range(self.rounds):
            for tid in range(self.threads):
                rnd = round_of(step, tid) if round_of is not None else step
                owners = ()
                if registers is not None:
                    first = int(at.offset(registers, rnd, tid))
                    owners = tuple((tid, first + k) for k in range(self.vec))
                out.append(Access(step, tid, int(at.offset(which, rnd, tid)), self.vec, owners))
        return tuple(out)

    def access(self, rnd: int, tid: int) -> tuple[int, ...]:
        """Element offsets of thread ``tid``'s vector in round ``rnd``, one per operand."""
        return tuple(int(self.offset(i, rnd, tid)) for i in range(len(self.bases)))


def dims_offset(index: Any, dims: Sequence[Dim], which: int) -> Any:
    """``sum(digit_i(index) * stride_i)`` over ``dims`` (outer -> inner) on operand ``which``.

    ``index`` is an int or a TIR expression (``//`` and ``%`` are floordiv and floormod
    there). The outermost digit needs no wrap (``index < prod(extents)``), and unit or
    zero-stride digits add nothing, so the emitted arithmetic stays minimal.
    """
    total: Any = 0
    inner = 1
    for i in range(len(dims) - 1, -1, -1):
        extent, stride = dims[i].extent, dims[i].strides[which]
        if extent != 1 and stride != 0:
            digit = index if inner == 1 else index // inner
            if i > 0:
                digit = digit % extent
            total = total + digit * stride
        inner *= extent
    return total


def _product(values) -> int:
    n = 1
    for v in values:
        n *= v
    return n


def fuse_contiguous(dims: list[Dim]) -> list[Dim]:
    """Merge neighbours that are contiguous on every operand (outer stride = inner span):
    the fewest loops that walk the same offsets."""
    fused: list[Dim] = []
    for d in dims:
        if fused:
            prev = fused[-1]
            if all(ps == d.extent * s for ps, s in zip(prev.strides, d.strides, strict=True)):
                fused[-1] = Dim(prev.extent * d.extent, d.strides)
                continue
        fused.append(d)
    return fused


def _carve(dims: list[Dim], count: int) -> tuple[list[Dim], list[Dim]] | None:
    """Split ``dims`` into (outer, inner) with ``prod(inner) == count``, or None."""
    outer = list(dims)
    inner: list[Dim] = []
    need = count
    while need > 1:
        if not outer:
            return None
        d = outer.pop()
        if need % d.extent == 0:
            inner.insert(0, d)
            need //= d.extent
        elif d.extent % need == 0:
            inner.insert(0, Dim(need, d.strides))
            outer.append(Dim(d.extent // need, tuple(s * need for s in d.strides)))
            need = 1
        else:
            return None
    return outer, inner


def synthesize_partition(
    views: Sequence[MemoryView],
    threads: int,
    elem_bits: int,
    driver: int = 0,
    widths: Sequence[int] = VECTOR_BITS,
) -> ScopePartition:
    """The ``[outer, threads, vec]`` partition of equally sized ``views`` over ``threads``,
    with accesses of one of ``widths`` bits (an instruction's sizes: cp.async has 32, 64
    and 128 only)."""
    rows = common_refinement(*(v.atoms for v in views))
    dims = [Dim(ext, strides) for ext, strides in rows]
    # Stable: equal driver strides keep their logical order.
    dims.sort(key=lambda d: -d.strides[driver])
    dims = fuse_contiguous(dims)
    if not dims:
        dims = [Dim(1, tuple(1 for _ in views))]
    total = _product(d.extent for d in dims)
    if total % threads:
        raise Decline(f"region of {total} elements is not divisible by {threads} threads")
    caps = [v.swizzle.unit for v in views if v.swizzle is not None]
    cap = min(caps) if caps else None
    names = [v.operand for v in views]
    refusals: list[str] = []
    for bits, elems in _candidates(elem_bits, widths):
        misfit = None
        if cap is not None and elems > cap:
            misfit = f"wider than one {cap}-element swizzle unit"
        misfit = misfit or vector_misfit(
            elems,
            (dims[-1].extent, dims[-1].strides),
            [(f"{names[i]} dimension", d.strides[i]) for d in dims[:-1] for i in range(len(views))],
            [(names[i], v.base) for i, v in enumerate(views)],
        )
        if misfit is None and (total // elems) % threads:
            misfit = f"{total // elems} vectors do not divide among {threads} threads"
        carved = None
        if misfit is None:
            inner = dims[-1]
            body = list(dims[:-1])
            if inner.extent > elems:
                body.append(Dim(inner.extent // elems, tuple(s * elems for s in inner.strides)))
            carved = _carve(body, threads)
            if carved is None:
                misfit = f"dimensions {[d.extent for d in body]} cannot be split evenly among {threads} threads"
        if misfit is not None:
            refusals.append(f"{bits}-bit: {misfit}")
            continue
        outer, thread = carved
        return ScopePartition(
            outer=tuple(outer),
            thread=tuple(thread),
            vec=elems,
            vec_bits=bits,
            bases=tuple(v.base for v in views),
            swizzles=tuple(v.swizzle for v in views),
            narrower_because=refusals[0] if refusals else None,
        )
    raise Decline("no access width fits: " + ("; ".join(refusals) or _no_width(elem_bits, widths)))


def _candidates(elem_bits: int, widths: Sequence[int]) -> list[tuple[int, int]]:
    """(bits, elements) per access of the allowed ``widths``, widest first."""
    return [(bits, elems) for bits, elems in vector_candidates(elem_bits) if bits in widths]


def _no_width(elem_bits: int, widths: Sequence[int]) -> str:
    return f"no access of {sorted(widths, reverse=True)} bits holds whole {elem_bits}-bit elements"


# -- masked partitions: element counts the scope's threads do not divide ------------------
@dataclass(frozen=True)
class Piece:
    """A part of the region moved ``vec`` elements at a time: vector ``v`` of the piece
    (``0 <= v < count``) is at ``bases[i] + dims_offset(v, dims, i)`` on operand ``i``.

    Vector ``v`` goes to thread ``v % threads`` in round ``v // threads``: every thread
    moves one vector in each of the ``full_rounds``, and in one last round only threads
    ``tid < tail`` do (one predicate on the thread index, no per-element branch).
    Consecutive threads take consecutive vectors of the driving operand (coalesced)."""

    dims: tuple[Dim, ...]  # over vectors, outer -> inner
    vec: int
    vec_bits: int
    bases: tuple[Any, ...]
    threads: int

    @property
    def count(self) -> int:
        return _product(d.extent for d in self.dims)

    @property
    def full_rounds(self) -> int:
        return self.count // self.threads

    @property
    def tail(self) -> int:
        return self.count % self.threads

    def offset(self, which: int, v: Any, swizzle: Swizzle | None = None) -> Any:
        off = self.bases[which] + dims_offset(v, self.dims, which)
        return swizzle.apply(off) if swizzle is not None else off

    def __str__(self) -> str:
        tail = f" + 1 round of {self.tail} of {self.threads} threads" if self.tail else ""
        return f"{self.vec_bits}-bit x {self.count}: {self.full_rounds} full rounds{tail}"


@dataclass(frozen=True)
class PiecewisePartition:
    """A masked partition: one or more :class:`Piece` s, widest vectors first; a contiguous
    run the widest vector does not divide gets narrower pieces for its tail."""

    pieces: tuple[Piece, ...]
    threads: int
    swizzles: tuple[Swizzle | None, ...]
    narrower_because: str | None = None  # why the first piece is not wider

    @property
    def vec(self) -> int:
        return self.pieces[0].vec

    @property
    def vec_bits(self) -> int:
        return self.pieces[0].vec_bits

    @property
    def rounds(self) -> int:
        return sum(p.full_rounds + (1 if p.tail else 0) for p in self.pieces)

    def offset(self, piece: int, which: int, v: Any) -> Any:
        return self.pieces[piece].offset(which, v, self.swizzles[which])

    def accesses(self, which: int) -> tuple[Access, ...]:
        """Every access to operand ``which``; rounds numbered across the pieces (a symbolic
        base counts as 0, as :meth:`Partition.accesses`)."""
        at = replace(self, pieces=tuple(replace(p, bases=_concrete(p.bases)) for p in self.pieces))
        out = []
        first_round = 0
        for i, p in enumerate(self.pieces):
            for v in range(p.count):
                rnd, tid = first_round + v // self.threads, v % self.threads
                out.append(Access(rnd, tid, int(at.offset(i, which, v)), p.vec))
            first_round += p.full_rounds + (1 if p.tail else 0)
        return tuple(out)


@dataclass(frozen=True)
class RoundRun:
    """Rounds of one access width, as an emitter walks them: in each of ``full`` rounds
    every thread moves one ``vec_bits`` vector, then (``tail`` > 0) one round in which
    threads ``tid < tail`` do. ``slot(which, rnd, tid)`` is the vector index of round
    ``rnd``'s access by thread ``tid`` on operand ``which``."""

    vec_bits: int
    full: int
    tail: int
    slot: Callable[[int, Any, Any], Any]


def round_runs(partition: ScopePartition | PiecewisePartition) -> list[RoundRun]:
    """An even partition is one run of full rounds; a masked one a run per piece."""
    if not isinstance(partition, PiecewisePartition):
        return [RoundRun(partition.vec_bits, partition.rounds, 0, partition.slot)]

    def piece_slot(i: int, piece: Piece) -> Callable[[int, Any, Any], Any]:
        return lambda which, rnd, tid: (
            partition.offset(i, which, rnd * piece.threads + tid) // piece.vec
        )

    return [
        RoundRun(piece.vec_bits, piece.full_rounds, piece.tail, piece_slot(i, piece))
        for i, piece in enumerate(partition.pieces)
    ]


class OnPartition:
    """The facts a copy plan reads off its ``partition`` (even or masked)."""

    partition: ScopePartition | PiecewisePartition

    @property
    def masked(self) -> bool:
        return isinstance(self.partition, PiecewisePartition)

    @property
    def vec(self) -> int:
        return self.partition.vec

    @property
    def vec_bits(self) -> int:
        return self.partition.vec_bits

    @property
    def outer(self) -> int:
        return self.partition.rounds

    @property
    def threads(self) -> int:
        return self.partition.threads

    def describe(self, head: str, access: str) -> str:
        """``head`` and the partition in one line: its pieces where masked, else rounds x
        threads x vec with ``access`` (the access form)."""
        if self.masked:
            pieces = "; ".join(str(piece) for piece in self.partition.pieces)
            return f"{head}, masked: {pieces}"
        return f"{head}: {self.outer} rounds x {self.threads} threads x {self.vec} ({access})"


def synthesize_pieces(
    views: Sequence[MemoryView],
    threads: int,
    elem_bits: int,
    driver: int = 0,
    widths: Sequence[int] = VECTOR_BITS,
) -> PiecewisePartition:
    """The masked partition of equally sized ``views`` over ``threads`` (any element count).

    The innermost contiguous run is cut into pieces, widest aligned vector first: a
    ``w``-wide piece needs every other dimension's stride and the piece's start offset on
    every operand to be multiples of ``w``; what it leaves of the run goes to narrower ones.
    Accesses are ``widths`` bits wide; with every width down to one element the run is
    always covered, and where a narrower width is missing (cp.async has no 8- or 16-bit
    form) and something is left that no allowed width covers, it declines saying what.
    """
    rows = common_refinement(*(v.atoms for v in views))
    dims = [Dim(ext, strides) for ext, strides in rows]
    dims.sort(key=lambda d: -d.strides[driver])
    dims = fuse_contiguous(dims) or [Dim(1, tuple(1 for _ in views))]
    caps = [v.swizzle.unit for v in views if v.swizzle is not None]
    cap = min(caps) if caps else None
    inner, body = dims[-1], dims[:-1]
    if any(s != 1 for s in inner.strides):  # no contiguous run: one element at a time
        body, run = dims, 1
    else:
        run = inner.extent
    names = [v.operand for v in views]
    pieces: list[Piece] = []
    refusals: list[str] = []
    start = 0
    for bits, elems in _candidates(elem_bits, widths):
        if start == run:
            break
        count = (run - start) // elems
        misfit = None
        if count == 0:
            misfit = f"the remaining run of {run - start} elements is narrower"
        elif cap is not None and elems > cap:
            misfit = f"wider than one {cap}-element swizzle unit"
        else:
            misfit = vector_misfit(
                elems,
                (elems, tuple(1 for _ in views)),
                [(f"{names[i]} dimension", d.strides[i]) for d in body for i in range(len(views))],
                [(names[i], v.base + start) for i, v in enumerate(views)],
            )
        if misfit is not None:
            if not pieces:
                refusals.append(f"{bits}-bit: {misfit}")
            continue
        vec_dims = [*body, Dim(count, tuple(elems for _ in views))] if run > 1 else list(body)
        pieces.append(
            Piece(
                dims=tuple(d for d in vec_dims if d.extent != 1)
                or (Dim(1, tuple(0 for _ in views)),),
                vec=elems,
                vec_bits=bits,
                bases=tuple(v.base + start for v in views),
                threads=threads,
            )
        )
        start += count * elems
    if start < run:
        raise Decline(_uncovered(run, start, elem_bits, widths, refusals))
    return PiecewisePartition(
        pieces=tuple(pieces),
        threads=threads,
        swizzles=tuple(v.swizzle for v in views),
        narrower_because=refusals[0] if refusals else None,
    )


def _uncovered(
    run: int, start: int, elem_bits: int, widths: Sequence[int], refusals: list[str]
) -> str:
    """Why the ``widths`` leave part of each contiguous ``run`` uncovered after ``start``."""
    fits = f"{'/'.join(str(w) for w in widths)}-bit access"
    if run == 1:
        return (
            f"the elements are not contiguous on every operand, and one {elem_bits}-bit "
            f"element fits no {fits}"
        )
    if start == 0:
        why = f": {'; '.join(refusals)}" if refusals else ""
        return f"a contiguous run of {run} elements ({run * elem_bits} bits) fits no {fits}{why}"
    left = run - start
    return (
        f"{left} elements ({left * elem_bits} bits) are left of each contiguous run of {run} "
        f"after {start} in wider accesses, and fit no {fits}"
    )


def scope_partition(
    views: Sequence[MemoryView],
    threads: int,
    elem_bits: int,
    driver: int = 0,
    widths: Sequence[int] = VECTOR_BITS,
) -> ScopePartition | PiecewisePartition:
    """The even ``[outer, threads, vec]`` split where the threads divide the vectors, else
    (or where it takes fewer rounds: a wider vector with one masked round) the masked one.
    Accesses are ``widths`` bits wide (:func:`synthesize_pieces`)."""
    masked = synthesize_pieces(views, threads, elem_bits, driver, widths)
    try:
        even = synthesize_partition(views, threads, elem_bits, driver, widths)
    except Decline:
        return masked
    return masked if masked.rounds < even.rounds else even


def _concrete(bases: Sequence[Any]) -> tuple[int, ...]:
    """Constant bases as ints, symbolic ones as 0."""
    return tuple(0 if as_int(b) is None else as_int(b) for b in bases)
