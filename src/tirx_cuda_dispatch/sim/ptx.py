"""PTX table instructions (TVM's ``T.ptx``): loads and stores, register packing, float
arithmetic, ``ldmatrix``/``stmatrix`` and ``tcgen05``, each with the PTX ISA's semantics.

A ``T.ptx`` call carries its operands, then every modifier slot of its table entry (empty
where omitted), then a marker (:func:`.calls.ptx_operands`). The matrix and tensor-memory
fragments come from :mod:`.fragments`, written from the ISA independently of any emitter.
Each entry's docstring is its meaning.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..irfacts import BARRIER_REDUCTIONS, barrier_reduction
from . import fragments
from .asynchrony import Effect
from .calls import (
    Instruction,
    PtxOperands,
    Table,
    guarded_ptx_operands,
    issued_at,
    load_at,
    plain_ptx_operands,
    ptx_operands,
    queue_register_writes,
    register_bits,
    register_operand,
    store_at,
    write_register,
)
from .errors import NotModeled, SimError
from .interpreter import Machine
from .intrinsics import named_barrier
from .memory import BankRecord, bank_ways
from .numerics import ROUNDING_MODES, f32_arith
from .schedule import Wait
from .values import CLUSTER_WINDOW, Pointer

TABLE = Table()


# -- ld / st (PTX ISA "Data Movement and Conversion Instructions: ld, st") --------------------
_TYPE_BYTES = {f"{k}{bits}": bits // 8 for k in "bus" for bits in (8, 16, 32, 64)}
_TYPE_BYTES.update({"f32": 4, "f64": 8, "b128": 16})
_SPACES = {"": "", "global": "global", "shared": "shared", "shared::cta": "shared",
           "shared::cluster": "shared::cluster"}  # fmt: skip
# Hints that change where data is cached or how soon it is evicted, never its value.
_HINTS = {"ca", "cg", "cs", "lu", "cv", "wb", "wt", "nc", "weak", "L2::cache_hint"} | {
    f"{level}::{p}"
    for level, ps in (
        ("L1", ("evict_normal", "evict_unchanged", "evict_first", "evict_last", "no_allocate")),
        ("L2", ("evict_first", "evict_last", "evict_normal", "64B", "128B", "256B")),
    )
    for p in ps
}


@dataclass(frozen=True)
class MemoryForm:
    """An ``ld``/``st``'s modifiers: state space ("" generic), vector lanes, element type."""

    space: str
    lanes: int
    type: str
    cache_policy: bool  # .L2::cache_hint takes one more (value-free) operand

    @property
    def elem_bytes(self) -> int:
        return _TYPE_BYTES[self.type]


def memory_form(tokens: list[str], what: str) -> MemoryForm:
    space, lanes, type_ = "", 1, None
    for t in tokens:
        if t in _SPACES:
            space = _SPACES[t]
        elif t in ("v2", "v4", "v8"):
            lanes = int(t[1:])
        elif t in _TYPE_BYTES:
            type_ = t
        elif t not in _HINTS:
            raise SimError(
                f"{what} .{t}: the simulator models weak {what} of global and shared memory "
                "(.shared::cluster: this CTA's or another's of the cluster)"
            )
    if type_ is None:
        raise SimError(f"{what} {tokens}: no type")
    return MemoryForm(space, lanes, type_, "L2::cache_hint" in tokens)


def _address(m: Machine, operand: Any, form: MemoryForm, what: str) -> Pointer:
    """The operand as an address of ``form.space``: ``.shared`` takes a shared-window
    address (``cvta.to.shared``), ``.shared::cluster`` one of any CTA of the cluster
    (:func:`cluster_address`: a ``mapa`` result, PTX ISA 9.7.9.21; distributed shared
    memory, sm_90), ``.global`` and generic take generic addresses, of global memory for
    ``.global``."""
    if form.space == "shared::cluster":
        return cluster_address(m, operand, what)
    ptr = m.eval(operand)
    if not isinstance(ptr, Pointer):
        raise SimError(f"{what}: the address {operand} is not an address")
    space = ptr.memory.space
    if form.space == "shared" and not (ptr.shared_window and space == "shared"):
        raise SimError(f"{what}.shared of a generic address of {space} memory ({operand})")
    if form.space != "shared" and ptr.shared_window:
        raise SimError(f"{what}.{form.space or 'generic'} of a shared-window address {operand}")
    if form.space == "global" and space != "global":
        raise SimError(f"{what}.global of an address of {space} memory ({operand})")
    return ptr


def _ld(m: Machine, call: Any, what: str = "ld") -> None:
    """``ld{.ss}{.vec}.type d, [a]`` (PTX ISA "ld"): each thread reads ``vec`` consecutive
    ``type`` elements at its address (one access, aligned to its whole size) into the
    destination registers in order. A register wider than the type gets the value
    sign-extended for ``.s`` types and zero-extended otherwise. ``.shared`` needs a
    shared-window address, ``.shared::cluster`` names this CTA's or another CTA's shared
    memory of the cluster (weak: another CTA's write is ordered before it by a cluster
    barrier or an mbarrier arrival the reader waited for, whatever scope either names:
    the simulator does not tell .cta from .cluster; the race tracker checks the rest);
    cache and eviction hints do not change values."""
    parsed = plain_ptx_operands(call, what)
    form = memory_form(parsed.tokens, what)
    operands = parsed.operands[: len(parsed.operands) - form.cache_policy]
    if len(operands) != form.lanes + 1:
        raise SimError(f"{what}: .v{form.lanes} takes {form.lanes} registers and an address")
    *regs, addr = operands
    ptr = _address(m, addr, form, what)
    size = form.elem_bytes
    remote = form.space == "shared::cluster"  # another CTA's window: ordered by the cluster
    raw = load_at(m, ptr, f"uint8x{size * form.lanes}", remote)  # (T, bytes)
    for k, reg in enumerate(regs):
        _, dtype = register_operand(m, reg, what)
        value = _extend(raw[:, k * size : (k + 1) * size], dtype.itemsize, form.type, what)
        write_register(m, reg, value.view(dtype).reshape(m.threads), what)


def _st(m: Machine, call: Any, what: str = "st") -> None:
    """``st{.ss}{.vec}.type [a], b`` (PTX ISA "st"): each thread writes ``vec``
    consecutive ``type`` elements from its source registers at its address (one access,
    aligned to its whole size); a register wider than the type gives its low bits.
    ``.shared`` needs a shared-window address, ``.shared::cluster`` as ``ld``'s; hints do
    not change values."""
    parsed = plain_ptx_operands(call, what)
    form = memory_form(parsed.tokens, what)
    operands = parsed.operands[: len(parsed.operands) - form.cache_policy]
    if len(operands) != form.lanes + 1:
        raise SimError(f"{what}: .v{form.lanes} takes an address and {form.lanes} registers")
    addr, *values = operands
    ptr = _address(m, addr, form, what)
    size = form.elem_bytes
    parts = []
    for v in values:
        bits = np.ascontiguousarray(m.per_thread(m.eval(v)))
        if bits.ndim != 1 or bits.dtype.itemsize < size:
            raise SimError(f"{what}.{form.type}: register {v} is narrower than the type")
        parts.append(bits.view(np.uint8).reshape(m.threads, -1)[:, :size])  # little-endian
    raw = np.concatenate(parts, axis=1)
    store_at(m, ptr, raw, f"uint8x{raw.shape[1]}", form.space == "shared::cluster")


def _extend(raw: np.ndarray, width: int, type_: str, what: str) -> np.ndarray:
    """Bytes ``(T, n)`` of a loaded element, widened to a ``width``-byte register."""
    n = raw.shape[1]
    if width < n:
        raise SimError(f"{what}.{type_}: a {width * 8}-bit register cannot hold it")
    if width == n:
        return np.ascontiguousarray(raw)
    if type_.startswith("f"):
        raise SimError(f"{what}.{type_} into a {width * 8}-bit register: not defined")
    fill = np.zeros((raw.shape[0], width - n), dtype=np.uint8)
    if type_.startswith("s"):
        fill[raw[:, -1] >= 0x80] = 0xFF  # sign of the most significant byte
    return np.ascontiguousarray(np.concatenate([raw, fill], axis=1))


for _name in ("ld", "ld_vec", "ld_vec256"):
    TABLE.add(Instruction(f"tirx.ptx.{_name}", " ".join(_ld.__doc__.split()), _ld))
for _name in ("st", "st_vec", "st_vec256"):
    TABLE.add(Instruction(f"tirx.ptx.{_name}", " ".join(_st.__doc__.split()), _st))


# -- mov pack / unpack (PTX ISA "mov": vector operands) ---------------------------------------
def _mov_entry(direction: str, lane_bits: int, lanes: int) -> Instruction:
    total = lane_bits * lanes
    name = f"tirx.ptx.mov_{direction}_b{lane_bits}x{lanes}"
    if direction == "pack":
        meaning = (
            f'mov.b{total} d, {{a0, ..}} (PTX ISA "mov"): d = the {lanes} b{lane_bits} '
            f"values side by side, a0 in the least significant bits"
        )
    else:
        meaning = (
            f'mov.b{total} {{d0, ..}}, a (PTX ISA "mov"): d_i = bits '
            f"[{lane_bits}i, {lane_bits}(i+1)) of a, d0 the least significant"
        )

    def run(m: Machine, call: Any) -> None:
        parsed = plain_ptx_operands(call, name)
        if len(parsed.operands) != lanes + 1:
            raise SimError(f"{name} takes {lanes + 1} operands")
        if direction == "pack":
            d, *parts = parsed.operands
            words = [register_bits(m, p, lane_bits, name).astype(np.uint64) for p in parts]
            value = sum(w << np.uint64(lane_bits * i) for i, w in enumerate(words))
            write_register(m, d, value.astype(np.dtype(f"uint{total}")), name)
        else:
            *ds, a = parsed.operands
            word = register_bits(m, a, total, name).astype(np.uint64)
            mask = np.uint64((1 << lane_bits) - 1)
            for i, d in enumerate(ds):
                part = (word >> np.uint64(lane_bits * i)) & mask
                write_register(m, d, part.astype(np.dtype(f"uint{lane_bits}")), name)

    return Instruction(name, meaning, run)


# .b128 aggregates (numpy has no 128-bit register type) are not modeled: unknown calls
for _lanes, _lane_bits in ((2, 16), (2, 32), (4, 16)):
    for _direction in ("pack", "unpack"):
        TABLE.add(_mov_entry(_direction, _lane_bits, _lanes))


# -- float arithmetic (PTX ISA "Floating Point Instructions": add, sub, mul, fma) ------------
def _float_entry(op: str) -> Instruction:
    arity = 3 if op == "fma" else 2
    name = f"tirx.ptx.{op}"
    meaning = (
        f'{op}{{.rnd}}{{.ftz}}{{.sat}}.f32 / .f32x2 (PTX ISA "{op}"): the exact result '
        f"rounded once in .rnd (.rn when absent; each instruction alone: ptxas may fuse an "
        f"unrounded mul into a following add, the simulator does not); .ftz flushes "
        f"subnormal inputs and results to signed zero, .sat clamps to [0, 1]. .f32x2 "
        f"operands are .b64 registers holding two .f32, element 0 in the low 32 bits, "
        f"computed element by element"
    )

    def run(m: Machine, call: Any) -> None:
        parsed = plain_ptx_operands(call, name)
        tokens = set(parsed.tokens)
        type_ = next((t for t in parsed.tokens if t in ("f32", "f32x2", "f64")), None)
        unknown = tokens - {"f32", "f32x2", "ftz", "sat", *ROUNDING_MODES}
        if type_ not in ("f32", "f32x2") or unknown:
            raise SimError(f"{name} {parsed.tokens}: the simulator models .f32 and .f32x2")
        if len(parsed.operands) != arity + 1:
            raise SimError(f"{name} takes {arity + 1} operands")
        mode = next((t for t in parsed.tokens if t in ROUNDING_MODES), "rn")
        d, *srcs = parsed.operands
        bits = 64 if type_ == "f32x2" else 32
        ins = [
            register_bits(m, s, bits, name).view(np.float32).reshape(m.threads, -1) for s in srcs
        ]
        out = f32_arith(op, ins, mode, ftz="ftz" in tokens, sat="sat" in tokens)
        m.counters.instructions[f"{op}.{type_}"] += len(m.warps())
        write_register(m, d, np.ascontiguousarray(out).view(np.dtype(f"uint{bits}"))[:, 0], name)

    return Instruction(name, meaning, run)


for _op in ("add", "sub", "mul", "fma"):
    TABLE.add(_float_entry(_op))


# -- bar / barrier (PTX ISA 9.7.15.1 "bar, barrier") ------------------------------------------
@TABLE.entry(
    "tirx.ptx.bar_sync",
    "tirx.ptx.bar_sync_count",
    "tirx.ptx.barrier_sync",
    "tirx.ptx.barrier_sync_count",
)
def _bar_sync(m: Machine, call: Any) -> None:
    """``bar{.cta}.sync a{, b}`` = ``barrier{.cta}.sync.aligned a{, b}``, and
    ``barrier{.cta}.sync a{, b}`` (PTX ISA "bar, barrier"): the threads arrive at named
    barrier ``a`` (0-15) and wait until ``b`` threads (a multiple of 32; without ``b``,
    every thread of the CTA) have arrived, from this statement or others (``bar.sync`` or
    ``bar.arrive``), which orders them after every arrival. Warps arrive whole, 32
    threads each (a diverged warp is an error, ``.aligned`` or not); arrivals of one
    statement that fill more than one group complete in groups the arrival order picks
    (ordered by none). Counted as ``bar.sync`` per warp."""
    mnemonic, parsed, spelling = _bar_form(call, "sync")
    if len(parsed.operands) not in (1, 2):
        raise SimError(f"{spelling} takes a barrier and an optional thread count")
    ids = m.per_thread(m.eval(parsed.operands[0]))
    count = m.per_thread(m.eval(parsed.operands[1])) if len(parsed.operands) == 2 else None
    aligned = mnemonic == "bar" or "aligned" in parsed.tokens
    named_barrier(m, ids, count, spelling, aligned=aligned)


@TABLE.entry("tirx.ptx.bar_arrive", "tirx.ptx.barrier_arrive")
def _bar_arrive(m: Machine, call: Any) -> None:
    """``bar{.cta}.arrive a, b`` / ``barrier{.cta}.arrive{.aligned} a, b`` (PTX ISA "bar,
    barrier"): the threads count towards named barrier ``a`` completing at ``b`` threads
    without waiting for it; their memory accesses before it are ordered before the
    threads that wait there (``bar.sync``) once it completes. Warps arrive whole.
    Counted as ``bar.arrive`` per warp."""
    mnemonic, parsed, spelling = _bar_form(call, "arrive")
    if len(parsed.operands) != 2:
        raise SimError(f"{spelling} takes a barrier and a thread count")
    ids = m.per_thread(m.eval(parsed.operands[0]))
    count = m.per_thread(m.eval(parsed.operands[1]))
    aligned = mnemonic == "bar" or "aligned" in parsed.tokens
    named_barrier(m, ids, count, spelling, aligned=aligned, sync=False)


@TABLE.entry(*BARRIER_REDUCTIONS)
def _bar_red(m: Machine, call: Any) -> None:
    """``bar{.cta}.red.popc.u32 d, a{, b}, c`` and ``bar{.cta}.red.{and,or}.pred d, a{, b},
    c`` (= ``barrier{.cta}.red...aligned``; ``barrier.red`` likewise; PTX ISA "bar,
    barrier"): the threads arrive at named barrier ``a`` as ``bar.sync`` does and wait for
    it to complete; the predicates ``c`` of every thread of the completing generation are
    reduced (``.popc``: how many are true; ``.and``: all; ``.or``: any) and each of them
    receives the result in ``d`` (a ``.pred`` result reads 1 or 0 in the ``u32`` register
    TVM gives it). PTX forbids ``bar.red`` and ``bar.sync``/``bar.arrive`` at one barrier
    at once, and reductions of different operations in one generation (errors here); so
    are arrivals of one statement that complete a generation and start the next (whose
    votes each reduces is unknown) and, this library's rule, a barrier of a count that is
    a multiple of 128 reached by more warps than one generation holds (:mod:`.barriers`).
    Counted as ``bar.red`` per warp."""
    plain_ptx_operands(call, "bar.red")  # no predicated form
    red = barrier_reduction(call)
    ids = m.per_thread(m.eval(red.barrier))
    count = None if red.threads is None else m.per_thread(m.eval(red.threads))
    votes = m.per_thread(m.eval(red.predicate)) != 0

    def deliver(threads: np.ndarray, true: int, false: int) -> None:
        value = {"popc": true, "and": int(false == 0), "or": int(true > 0)}[red.op]
        write_register(m, red.destination, np.full(m.threads, value, np.uint32), red.spelling,
                       threads)  # fmt: skip

    named_barrier(m, ids, count, red.spelling, aligned=red.aligned, votes=votes,
                  deliver=deliver, reduction=red.op)  # fmt: skip


def _bar_form(call: Any, action: str) -> tuple[str, PtxOperands, str]:
    mnemonic = call.op.name.removeprefix("tirx.ptx.").split("_")[0]
    parsed = plain_ptx_operands(call, mnemonic)
    tokens = parsed.tokens
    spelling = ".".join([mnemonic, *tokens])
    if action not in tokens or not set(tokens) <= {"cta", action, "aligned"}:
        raise SimError(f"{spelling}: the simulator models {mnemonic}{{.cta}}.{action}")
    return mnemonic, parsed, spelling


@TABLE.entry("tirx.ptx.setmaxnreg")
def _setmaxnreg(m: Machine, call: Any) -> None:
    """``setmaxnreg.{inc,dec}.sync.aligned.u32 n`` (PTX ISA "setmaxnreg", sm_90a): every
    warp of the executing warpgroup sets its per-thread register count to ``n`` (a
    multiple of 8 in [24, 256]); ``.dec`` gives the difference back to the CTA's pool,
    ``.inc`` takes it from the pool and waits until the pool holds it
    (:class:`.barriers.RegisterFile`: warps start with the count the launch allows). All
    warps of a warpgroup execute the same instruction together (.sync.aligned)."""
    parsed = plain_ptx_operands(call, "setmaxnreg")
    action = next((t for t in parsed.tokens if t in ("inc", "dec")), None)
    what = ".".join(["setmaxnreg", *parsed.tokens])
    if action is None or len(parsed.operands) != 1:
        raise SimError(f"{what}: setmaxnreg.inc or .dec with one register count")
    count = _uniform_int(m, parsed.operands[0], what)
    m.require_full_warps(what)
    warps = m.warps()
    m.counters.instructions[f"setmaxnreg.{action}"] += len(warps)
    waits = m.registers.setmaxnreg(action, count, warps, f"{what} {count}")
    m.block([(wait, _warp_mask(m, mine)) for wait, mine in waits])


def _warp_mask(m: Machine, warps: list[int]) -> np.ndarray:
    mask = np.zeros(m.threads, dtype=bool)
    for w in warps:
        mask[w * 32 : (w + 1) * 32] = True
    return mask


# -- ldmatrix / stmatrix (PTX ISA 9.7.14.5.15 / 9.7.14.5.16) ------------------------------------
def _matrix_form(tokens: list[str], mnemonic: str) -> tuple[int, bool]:
    shape = next((t for t in tokens if t.startswith("m")), None)
    if shape != "m8n8" or "b16" not in tokens:
        raise NotModeled(f"{mnemonic} .{shape} {tokens}: the simulator knows .m8n8 .b16")
    num = {"x1": 1, "x2": 2, "x4": 4}.get(next((t for t in tokens if t in ("x1", "x2", "x4")), ""))
    if num is None:
        raise SimError(f"{mnemonic} without .x1/.x2/.x4: {tokens}")
    return num, "trans" in tokens


def _row_pointers(m: Machine, addr: Any, num: int, warp: int, mnemonic: str):
    ptr = m.eval(addr)
    if not isinstance(ptr, Pointer) or not ptr.shared_window:
        raise SimError(f"{mnemonic} needs a shared-window address (cvta.to.shared)")
    offsets = m.per_thread(ptr.offsets)
    order = [0] * (8 * num)  # row 8*matrix + r <- the lane that supplies its address
    for lane, (matrix, row) in enumerate(fragments.ldmatrix_row_address_lanes(num)):
        order[8 * matrix + row] = warp * 32 + lane
    lanes = np.array(order)
    return ptr.memory, lanes, offsets[lanes]


def _ldst_matrix(m: Machine, call: Any, load: bool) -> None:
    mnemonic = "ldmatrix" if load else "stmatrix"
    parsed = plain_ptx_operands(call, mnemonic)
    operands, tokens = parsed.operands, parsed.tokens
    num, trans = _matrix_form(tokens, mnemonic)
    if len(operands) != num + 1:
        raise SimError(f"{mnemonic}.x{num} takes {num} registers and an address")
    regs, addr = (operands[:num], operands[num]) if load else (operands[1:], operands[0])
    m.require_full_warps(mnemonic)
    if load:
        out = np.zeros((m.threads, num), dtype=np.uint32)
    else:
        held = np.stack([register_bits(m, r, 32, mnemonic) for r in regs], axis=1)  # (T, num)
    kind = f"{mnemonic}.x{num}{'.trans' if trans else ''}"
    for warp in m.warps():
        mem, row_threads, row_offsets = _row_pointers(m, addr, num, warp, mnemonic)
        for w, ways in bank_ways(row_threads, row_offsets, 16).items():
            m.counters.bank_conflicts.append(BankRecord(kind, mem.name, w, ways))
        m.counters.instructions[kind] += 1
        if load:
            rows = mem.load(row_threads, row_offsets, 16, m.clocks)  # (8*num, 16) bytes
            m.counters.bytes["shared.load"] += rows.size
            matrices = rows.view(np.uint16).reshape(num, 8, 8)
            out[warp * 32 : (warp + 1) * 32] = fragments.ldmatrix_load(matrices, trans)
        else:
            words = held[warp * 32 : (warp + 1) * 32]
            matrices = fragments.stmatrix_store(words, trans)  # (num, 8, 8) uint16
            rows = np.ascontiguousarray(matrices).view(np.uint8).reshape(8 * num, 16)
            mem.store(row_threads, row_offsets, rows, m.clocks)
            m.counters.bytes["shared.store"] += rows.size
    if load:
        for k, reg in enumerate(regs):
            write_register(m, reg, out[:, k], mnemonic)


@TABLE.entry("tirx.ptx.ldmatrix")
def _ldmatrix(m: Machine, call: Any) -> None:
    """``ldmatrix.sync.aligned.m8n8.x{1,2,4}{.trans}.shared.b16`` (PTX ISA "ldmatrix"):
    the warp loads 1, 2 or 4 8x8 matrices of 16-bit elements; lane ``8i + r`` gives the
    address of row ``r`` of matrix ``i``, and lane ``t`` receives row ``t // 4``, elements
    ``2 (t % 4)`` and ``+1`` of each matrix (of its transpose with ``.trans``) in one
    32-bit register per matrix."""
    _ldst_matrix(m, call, load=True)


@TABLE.entry("tirx.ptx.stmatrix")
def _stmatrix(m: Machine, call: Any) -> None:
    """``stmatrix.sync.aligned.m8n8.x{1,2,4}{.trans}.shared.b16`` (PTX ISA "stmatrix"): the
    inverse of ``ldmatrix``: the same lanes give the row addresses and hold the same
    fragment, which the warp writes as 8x8 matrices (transposed with ``.trans``)."""
    _ldst_matrix(m, call, load=False)


# -- tcgen05 (PTX ISA 9.7.16) ------------------------------------------------------------------
def _uniform_in_warp(m: Machine, value: Any, warp: int, what: str) -> int:
    v = m.per_thread(value)[warp * 32 : (warp + 1) * 32]
    if (v != v[0]).any():
        raise SimError(f"{what}: every thread of warp {warp} must give the same value")
    return int(v[0])


def _tensor_memory(m: Machine, what: str):
    if m.tmem is None:
        raise SimError(f"{what} outside a CTA")
    if m.cluster > 1:
        raise NotModeled(f"{what} in a cluster: the simulator models tensor memory of one CTA")
    return m.tmem


@TABLE.entry("tirx.ptx.tcgen05_alloc")
def _tc_alloc(m: Machine, call: Any) -> None:
    """``tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [dst], ncols`` (PTX ISA
    9.7.16): each issuing warp allocates ``ncols`` tensor-memory columns (a power of two,
    32 to 512) and writes their address to shared memory at ``dst``."""
    parsed = plain_ptx_operands(call, "tcgen05.alloc")
    (dst, ncols), tokens = parsed.operands, parsed.tokens
    if "cta_group::1" not in tokens:
        raise NotModeled(f"tcgen05.alloc {tokens}: the simulator knows .cta_group::1")
    m.require_full_warps("tcgen05.alloc")
    ptr = m.eval(dst)
    if not isinstance(ptr, Pointer) or ptr.memory.space != "shared":
        raise SimError("tcgen05.alloc writes the address to shared memory")
    tmem = _tensor_memory(m, "tcgen05.alloc")
    saved = m.mask
    try:
        for warp in m.warps():
            n = _uniform_in_warp(m, m.eval(ncols), warp, "tcgen05.alloc column count")
            col = tmem.alloc(n)
            first = np.zeros_like(np.broadcast_to(saved, m.tid.shape))
            first[warp * 32] = True  # one 4-byte write of the address per warp
            m.mask = first
            store_at(m, ptr, np.full(m.threads, col, dtype=np.uint32), "uint32")
            m.counters.instructions["tcgen05.alloc"] += 1
    finally:
        m.mask = saved


@TABLE.entry("tirx.ptx.tcgen05_dealloc")
def _tc_dealloc(m: Machine, call: Any) -> None:
    """``tcgen05.dealloc.cta_group::1.sync.aligned.b32 taddr, ncols`` (PTX ISA 9.7.16):
    frees an allocation exactly as it was allocated."""
    (taddr, ncols) = plain_ptx_operands(call, "tcgen05.dealloc").operands
    m.require_full_warps("tcgen05.dealloc")
    tmem = _tensor_memory(m, "tcgen05.dealloc")
    for warp in m.warps():
        addr = _uniform_in_warp(m, m.eval(taddr), warp, "tcgen05.dealloc address")
        tmem.dealloc(addr, _uniform_in_warp(m, m.eval(ncols), warp, "tcgen05.dealloc columns"))
        m.counters.instructions["tcgen05.dealloc"] += 1


@TABLE.entry("tirx.ptx.tcgen05_fence", "tirx.ptx.tcgen05_relinquish_alloc_permit")
def _tc_order(m: Machine, call: Any) -> None:
    """``tcgen05.fence::{before,after}_thread_sync``, ``tcgen05.relinquish_alloc_permit``
    (PTX ISA 9.7.16): ordering and allocation-permit bookkeeping, which lockstep
    execution already satisfies; counted only."""
    tokens = ptx_operands(call).tokens
    m.counters.instructions["tcgen05." + (tokens[0] if tokens else "fence")] += len(m.warps())


@TABLE.entry("tirx.ptx.tcgen05_wait")
def _tc_wait(m: Machine, call: Any) -> None:
    """``tcgen05.wait::st`` / ``wait::ld`` (PTX ISA 9.7.16.8.5): the warp waits for all its
    earlier ``tcgen05.st`` / ``tcgen05.ld``; their tensor-memory cells / registers are
    written then (the effects land, :mod:`.asynchrony`), and reading them before is an
    error here."""
    tokens = ptx_operands(call).tokens
    kind = tokens[0] if tokens else ""
    _tensor_memory(m, "tcgen05.wait")
    if kind not in ("wait::st", "wait::ld"):
        raise NotModeled(f"tcgen05.{kind}: the simulator knows wait::ld and wait::st")
    warps = m.warps()
    m.asynchrony.wait_tcgen05(m, "tcgen05." + kind.removeprefix("wait::"), warps)
    m.counters.instructions[f"tcgen05.{kind}"] += len(warps)


def _tc_form(tokens: list[str], what: str) -> tuple[str, int, bool]:
    shape = next((t for t in tokens if t in fragments.TCGEN05_SHAPES), None)
    num_token = next((t for t in tokens if t.startswith("x") and t[1:].isdigit()), None)
    if shape is None or num_token is None or "b32" not in tokens:
        raise SimError(f"{what} {tokens}: needs a .shape, a .num and .b32")
    packing = {"pack::16b", "unpack::16b"} & set(tokens)
    return shape, int(num_token[1:]), bool(packing)


def _tc_cells(m: Machine, warp: int, taddr: Any, imm: int, shape: str, num: int, pack: bool):
    """TMEM (lanes, columns) of each (thread, register[, half]) of one warp's access."""
    addr = _uniform_in_warp(m, m.eval(taddr), warp, f"tcgen05 .{shape} address")
    base_lane, base_col = addr >> 16, addr & 0xFFFF
    cells = fragments.tcgen05_fragment_map(shape, num, half_split_offset=imm, pack16=pack)
    lanes, cols = base_lane + cells[..., 0], base_col + cells[..., 1]
    quarter = fragments.tcgen05_lane_quarter(warp)
    if lanes.min() < quarter.start or lanes.max() >= quarter.stop:
        raise SimError(
            f"warp {warp} (warp {warp % 4} of its warpgroup) reaches TMEM lanes "
            f"{quarter.start}-{quarter.stop - 1} only; its tcgen05 .{shape} at lane "
            f"{base_lane} touches lanes {lanes.min()}-{lanes.max()}"
        )
    return lanes, cols


def _tc_ldst(m: Machine, call: Any, load: bool) -> None:
    what = "tcgen05.ld" if load else "tcgen05.st"
    parsed = plain_ptx_operands(call, what)
    operands, tokens = parsed.operands, parsed.tokens
    shape, num, pack = _tc_form(tokens, what)
    nregs = fragments.tcgen05_regs_per_thread(shape, num)
    extra = 1 if shape == "16x32bx2" else 0
    if len(operands) != nregs + 1 + extra:
        raise SimError(f"{what}.{shape}.x{num} takes {nregs} registers, got {len(operands)}")
    if load:
        regs, taddr, rest = operands[:nregs], operands[nregs], operands[nregs + 1 :]
    else:
        taddr, rest, regs = operands[0], operands[1 : 1 + extra], operands[1 + extra :]
    imm = int(m.eval(rest[0])[0]) if extra else 0
    m.require_full_warps(what)
    tmem = _tensor_memory(m, what)
    kind = f"{what}.{shape}.x{num}{'.pack' if pack else ''}"
    if load:
        out = np.zeros((m.threads, nregs), dtype=np.uint32)
    else:
        held = np.stack([register_bits(m, r, 32, what) for r in regs], axis=1)
    origin = issued_at(m, call)
    for warp in m.warps():
        lanes, cols = _tc_cells(m, warp, taddr, imm, shape, num, pack)
        m.counters.instructions[kind] += 1
        rows = slice(warp * 32, (warp + 1) * 32)
        threads = np.arange(warp * 32, (warp + 1) * 32)
        if load:
            vals = tmem.load(threads, lanes, cols)
            if pack:  # [lane, reg, half] cells -> one register per (lane, reg)
                vals = fragments.tcgen05_pack16(vals)[..., 0]
            out[rows] = vals
            m.counters.bytes["tmem.load"] += vals.size * 4
        else:
            words = held[rows]
            vals = fragments.tcgen05_unpack16(words[..., None]) if pack else words
            index = tmem.cells(lanes.reshape(32, -1), cols.reshape(32, -1), what)
            values = vals.reshape(32, -1)
            m.asynchrony.issue(
                m, Effect("tcgen05.st", kind, origin, m.call, tmem, threads, index, values)
            )
            m.counters.bytes["tmem.store"] += words.size * 4
    if load:  # the registers are filled asynchronously, until tcgen05.wait::ld
        queue_register_writes(m, "tcgen05.ld", kind, origin, regs, out)


@TABLE.entry("tirx.ptx.tcgen05_ld", "tirx.ptx.tcgen05_ld_split")
def _tc_ld(m: Machine, call: Any) -> None:
    """``tcgen05.ld.sync.aligned.shape.num{.pack::16b}.b32`` (PTX ISA 9.7.16.8.3): the
    warp reads tensor-memory cells at ``taddr`` into registers by the shape's fragment
    map (:mod:`.fragments`); warp ``w`` reaches only lanes ``32 (w % 4)`` to ``+31``; the
    registers are usable after ``tcgen05.wait::ld``."""
    _tc_ldst(m, call, load=True)


@TABLE.entry("tirx.ptx.tcgen05_st", "tirx.ptx.tcgen05_st_split")
def _tc_st(m: Machine, call: Any) -> None:
    """``tcgen05.st.sync.aligned.shape.num{.unpack::16b}.b32`` (PTX ISA 9.7.16.8.3): the
    warp writes registers to tensor-memory cells by the same fragment map as
    ``tcgen05.ld``, in its own lane quarter; readable after ``tcgen05.wait::st``."""
    _tc_ldst(m, call, load=False)


# -- cp.async (PTX ISA 9.7.10.28.3; sm_80+) --------------------------------------------------
_CP_TOKENS = {"async", "ca", "cg", "shared", "shared::cta", "global", "L2::cache_hint"} | {
    f"L2::{n}B" for n in (64, 128, 256)
}


@contextmanager
def _guarded(m: Machine, guard: Any) -> Iterator[None]:
    """Run with the active mask narrowed to the threads whose guard predicate (``@p``,
    TVM's ``pred=``) is true; without a guard, unchanged."""
    saved = m.mask
    try:
        if guard is not None:
            m.mask = np.broadcast_to(saved, m.tid.shape) & _bools(m, guard)
        yield
    finally:
        m.mask = saved


def _bools(m: Machine, operand: Any) -> np.ndarray:
    return np.asarray(m.per_thread(m.eval(operand))).astype(bool)


def _ints(m: Machine, operand: Any) -> np.ndarray:
    return np.asarray(m.per_thread(m.eval(operand))).astype(np.int64)


def _uniform_int(m: Machine, operand: Any, what: str) -> int:
    v = _ints(m, operand)
    if (v != v.flat[0]).any():
        raise SimError(f"{what} differs between threads")
    return int(v.flat[0])


def _check_tokens(what: str, tokens: list[str], allowed: set[str]) -> None:
    unknown = set(tokens) - allowed
    if unknown:
        raise NotModeled(f"{what}: modifiers {sorted(unknown)} are not modeled")


def _pointer(m: Machine, operand: Any, what: str) -> Pointer:
    ptr = m.eval(operand)
    if not isinstance(ptr, Pointer):
        raise SimError(f"{what}: {operand} is not an address")
    return ptr


def cp_async(
    m: Machine,
    call: Any,
    what: str,
    cop: str,
    dst: Pointer,
    src: Pointer,
    cp_size: int,
    read: np.ndarray | None = None,
) -> None:
    """Each active thread issues one cp.async of ``cp_size`` bytes from global ``src`` to
    the shared-window address ``dst``, reading ``read`` bytes of it (per thread; all when
    None) and zero-filling the rest: an effect of the thread's open cp.async group."""
    threads = m.active_threads()
    if threads.size == 0:
        return
    if cp_size not in (4, 8, 16) or (cop == "cg" and cp_size != 16):
        need = "16 (.cg copies 16 bytes only)" if cop == "cg" else "4, 8 or 16"
        raise SimError(f"{what}: cp-size {cp_size}, needs {need}")
    if not (dst.shared_window and dst.memory.space == "shared"):
        form = "a shared-window" if dst.shared_window else "a generic"
        raise SimError(
            f"{what}: dst must be a .shared address of shared memory (cvta.to.shared), got "
            f"{form} address of {dst.memory.space} memory"
        )
    if src.shared_window or src.memory.space != "global":
        raise SimError(f"{what}: src must be an address of global memory, got {src.memory.space}")
    dst_off = m.per_thread(dst.offsets)[threads]
    src_off = m.per_thread(src.offsets)[threads]
    for name, offs, ptr in (("dst", dst_off, dst), ("src", src_off, src)):
        bad = offs % cp_size != 0
        if bad.any():
            i = int(np.argmax(bad))
            raise SimError(
                f"misaligned {what}: {name} byte {int(offs[i])} of {ptr.memory.space} "
                f"{ptr.memory.name} (thread {int(threads[i])}) is not {cp_size}-byte aligned; "
                f"a cp.async of {cp_size} bytes needs both addresses {cp_size}-byte aligned "
                f"(PTX ISA 'Addresses as Operands'), the GPU faults"
            )
    read = np.full(threads.size, cp_size) if read is None else read[threads]
    if (read > cp_size).any() or (read < 0).any():
        i = int(np.argmax((read > cp_size) | (read < 0)))
        raise SimError(
            f"{what}: src-size {int(read[i])} (thread {int(threads[i])}) is not in "
            f"[0, cp-size {cp_size}]; a larger one is undefined (PTX ISA cp.async)"
        )
    cells = dst.memory.cells(threads, dst_off, cp_size, f"{what} dst")
    values = np.zeros((threads.size, cp_size), dtype=np.uint8)  # the zero fill
    for n in np.unique(read[read > 0]).tolist():
        sel = read == n
        values[sel, :n] = src.memory.load(threads[sel], src_off[sel], n, m.clocks)
    kind = f"cp.async.{cop}.b{cp_size * 8}"
    m.counters.instructions[kind] += len(np.unique(threads // 32))
    m.counters.bytes["global.load"] += int(read.sum())
    m.counters.bytes["shared.store"] += threads.size * cp_size
    for w, ways in bank_ways(threads, dst_off, cp_size).items():
        m.counters.bank_conflicts.append(BankRecord(kind, dst.memory.name, w, ways))
    index = dst.memory.index(threads, cells)
    group = m.asynchrony.open_groups(m, threads)
    effect = Effect(
        "cp.async", what, issued_at(m, call), m.call, dst.memory, threads, index, values, group,
        source=src.memory,
        source_cells=src_off[:, None] + np.arange(cp_size),
        source_read=np.arange(cp_size) < read[:, None],
    )  # fmt: skip
    m.asynchrony.issue(m, effect)
    # the copy may write at any time after it is issued: an unordered earlier access races
    dst.memory.track(threads, cells, m.clocks, write=True, stamp=False)


@TABLE.entry(
    *(
        f"tirx.ptx.cp_async_{cop}{tail}"
        for cop in ("ca", "cg")
        for tail in ("", "_src_size", "_ignore_src")
    )
)
def _cp_async(m: Machine, call: Any) -> None:
    """``cp.async.{ca,cg}.shared{::cta}.global{.L2::cache_hint}{.L2::64B/128B/256B} [dst],
    [src], cp-size{, src-size | , ignore-src}{, cache-policy}`` (PTX ISA 9.7.10.28.3.1,
    sm_80+): each thread starts an asynchronous copy of cp-size bytes (4, 8 or 16; 16
    only with .cg) from global ``src`` to shared ``dst``, both aligned to cp-size. With
    ``src-size`` only that many bytes are read and the rest of ``dst`` is filled with
    zeros (a src-size above cp-size is undefined: an error); with ``ignore-src`` true
    nothing is read and all of ``dst`` is zeros. The write joins the thread's open
    cp.async group and lands when a wait completes that group (or an mbarrier phase that
    tracks it): reading or overwriting ``dst`` before is an error. Cache hints and the
    L2 prefetch size change no value. A guard predicate (``@p``) leaves out the threads
    where it is false."""
    name = call.op.name
    parsed, guard = guarded_ptx_operands(call, "cp.async")
    tokens = parsed.tokens
    what = ".".join(["cp", *tokens])
    _check_tokens(what, tokens, _CP_TOKENS)
    operands = parsed.operands[: len(parsed.operands) - ("L2::cache_hint" in tokens)]
    tail = name.endswith(("_src_size", "_ignore_src"))
    if len(operands) != 3 + tail:
        raise SimError(f"{what} takes {3 + tail} operands, got {len(operands)}: {call}")
    cp_size = _uniform_int(m, operands[2], f"{what} cp-size")
    what = f"{what} (cp-size {cp_size})"
    read = None
    if name.endswith("_src_size"):
        read = _ints(m, operands[3])
    elif name.endswith("_ignore_src"):
        read = np.where(_bools(m, operands[3]), 0, cp_size)
    with _guarded(m, guard):
        dst = _pointer(m, operands[0], what)
        src = _pointer(m, operands[1], what)
        cp_async(m, call, what, "cg" if "_cg" in name else "ca", dst, src, cp_size, read)


@TABLE.entry("tirx.ptx.cp_async_commit_group")
def _cp_commit(m: Machine, call: Any) -> None:
    """``cp.async.commit_group`` (PTX ISA 9.7.10.28.3.2): each executing thread closes its
    open group of cp.async operations into a committed group (an empty one if it issued
    none since the last commit)."""
    _, guard = guarded_ptx_operands(call, "cp.async.commit_group")
    with _guarded(m, guard):
        m.asynchrony.commit(m, m.active_threads())
        m.counters.instructions["cp.async.commit_group"] += len(m.warps())


@TABLE.entry("tirx.ptx.cp_async_wait_group")
def _cp_wait_group(m: Machine, call: Any) -> None:
    """``cp.async.wait_group N`` (PTX ISA 9.7.10.28.3.3): each executing thread waits until
    at most its ``N`` most recent committed cp.async groups are pending: the copies of
    all its older groups land, visible to the thread (other threads see them after a
    barrier). Copies not yet committed are not waited for."""
    parsed, guard = guarded_ptx_operands(call, "cp.async.wait_group")
    n = _uniform_int(m, parsed.operands[0], "cp.async.wait_group N")
    if n < 0:
        raise SimError(f"cp.async.wait_group {n}: N must not be negative")
    with _guarded(m, guard):
        m.asynchrony.wait_groups(m, m.active_threads(), n)
        m.counters.instructions["cp.async.wait_group"] += len(m.warps())


@TABLE.entry("tirx.ptx.cp_async_wait_all")
def _cp_wait_all(m: Machine, call: Any) -> None:
    """``cp.async.wait_all`` (PTX ISA 9.7.10.28.3.3) = ``cp.async.commit_group;
    cp.async.wait_group 0``: every cp.async the executing thread issued lands."""
    _, guard = guarded_ptx_operands(call, "cp.async.wait_all")
    with _guarded(m, guard):
        threads = m.active_threads()
        m.asynchrony.commit(m, threads)
        m.asynchrony.wait_groups(m, threads, 0)
        m.counters.instructions["cp.async.wait_all"] += len(m.warps())


@TABLE.entry("tirx.ptx.cp_async_mbarrier_arrive")
def _cp_mbarrier_arrive(m: Machine, call: Any) -> None:
    """``cp.async.mbarrier.arrive{.noinc}{.shared{::cta}}.b64 [addr]`` (PTX ISA
    9.7.15.16.18): an arrive-on operation on the mbarrier, triggered once every cp.async
    the thread issued before has completed: those copies land when the barrier's current
    phase completes (or earlier, through a wait_group). Without ``.noinc`` the pending
    count is first raised by one, so the arrive changes nothing net; with ``.noinc`` it
    counts as one of the arrivals mbarrier.init expects."""
    what = "cp.async.mbarrier.arrive"
    parsed, guard = guarded_ptx_operands(call, what)
    _check_tokens(what, parsed.tokens, {"async", "mbarrier", "arrive", "noinc", *_SHARED, "b64"})
    with _guarded(m, guard):
        for bar, threads in _barriers(m, parsed, parsed.operands[0], what):
            m.asynchrony.track_copies(m, bar, threads)
            released = _release(m, threads, True)
            for t in threads.tolist():
                if "noinc" in parsed.tokens:
                    m.asynchrony.arrive(m, bar, 1, released[t // 32])
                else:  # +1, then the arrive: no net change, but it releases
                    m.asynchrony.join(bar, released[t // 32])
        m.counters.instructions[what] += len(m.warps())


@TABLE.entry("tirx.s_tir.cp_async_raw")
def _cp_async_raw(m: Machine, call: Any) -> None:
    """TVM's raw cp.async op (``T.s_tir.cp_async_raw``, what ``InjectPTXAsyncCopy``
    leaves; its C helper in ``backend/cuda/cpp/asm.py``): ``(dst, dst_off, src, src_off,
    cp_size[, predicate])`` copies ``cp_size`` bytes from ``src + src_off`` to the
    generic shared address ``dst + dst_off`` (offsets in elements of each pointer's
    type) with ``cp.async.cg`` for 16 bytes and ``cp.async.ca`` otherwise. With a
    predicate, threads where it is 1 copy and the others store ``cp_size`` zero bytes to
    ``dst`` with a plain, synchronous ``st.shared``."""
    dst_p, dst_off, src_p, src_off, size, *pred = call.args
    cp_size = _uniform_int(m, size, "cp_async_raw cp_size")
    cop = "cg" if cp_size == 16 else "ca"
    what = f"cp.async.{cop}.shared.global (cp-size {cp_size}, TVM's cp_async_raw)"

    def at(ptr_node: Any, off_node: Any) -> Pointer:
        ptr = _pointer(m, ptr_node, what)
        scale = ptr.elem_bytes or 1  # the helper scales by the pointee's size; void*: 1
        return ptr.plus_bytes(_ints(m, off_node) * scale)

    dst, src = at(dst_p, dst_off), at(src_p, src_off)
    if dst.memory.space != "shared" or dst.shared_window:
        raise SimError(f"{what}: dst must be a generic address of shared memory")
    window = Pointer(dst.memory, dst.offsets, 0, shared_window=True)  # __cvta_generic_to_shared
    copy = _ints(m, pred[0]) == 1 if pred else np.ones(m.threads, dtype=bool)  # setp.eq.u32
    saved = m.mask
    try:
        m.mask = np.broadcast_to(saved, m.tid.shape) & copy
        cp_async(m, call, what, cop, window, src, cp_size)
        m.mask = np.broadcast_to(saved, m.tid.shape) & ~copy
        if m.mask.any():
            store_at(m, window, np.zeros((m.threads, cp_size), np.uint8), f"uint8x{cp_size}")
    finally:
        m.mask = saved


# -- mbarrier (PTX ISA 9.7.15.16; sm_80+, tx-count sm_90+) ---------------------------------
_SHARED = {"shared", "shared::cta"}
_SEM_SCOPE = {"release", "acquire", "relaxed", "cta", "cluster"}


def cluster_address(m: Machine, operand: Any, what: str) -> Pointer:
    """A ``.shared::cluster`` address operand: a shared-window pointer (the executing
    CTA's own) or a number (:data:`CLUSTER_WINDOW`), as the dynamic shared memory of the
    CTA it names, per active thread."""
    value = m.eval(operand)
    if isinstance(value, Pointer):
        if not value.shared_window or value.memory.space != "shared":
            raise SimError(f"{what} takes a .shared::cluster address, got {operand}")
        return value
    threads = m.active_threads()
    full = np.zeros(m.threads, dtype=np.int64)
    full[threads] = m.per_thread(np.asarray(value).astype(np.int64))[threads]
    return m.shared_pointer(full, m.tid, what)


def _barriers(m: Machine, parsed: PtxOperands, operand: Any, what: str):
    """The live mbarriers the active threads name at ``operand``, each with its threads
    (for ``mbarrier.init``: the (memory, offset) pairs). An mbarrier lives in shared
    memory, 8-byte aligned; ``.shared{::cta}`` takes a shared-window address, no space a
    generic one, ``.shared::cluster`` one of any CTA of the cluster (:func:`cluster_address`)."""
    window = bool(set(parsed.tokens) & (_SHARED | {"shared::cluster"}))
    if "shared::cluster" in parsed.tokens:
        ptr = cluster_address(m, operand, what)
    else:
        ptr = _pointer(m, operand, what)
    if ptr.memory.space != "shared" or ptr.shared_window != window:
        kind = "a .shared address" if window else "a generic address"
        form = "a shared-window" if ptr.shared_window else "a generic"
        raise SimError(
            f"{what} takes {kind} of shared memory, got {form} address of {ptr.memory.space} memory"
        )
    threads = m.active_threads()
    offsets = m.per_thread(ptr.offsets)[threads]
    bad = offsets % 8 != 0
    if bad.any():
        i = int(np.argmax(bad))
        raise SimError(
            f"misaligned {what}: byte {int(offsets[i])} of shared {ptr.memory.name} (thread "
            f"{int(threads[i])}); an mbarrier object is 8 bytes, 8-byte aligned"
        )
    groups = []
    for off in np.unique(offsets).tolist():
        mine = threads[offsets == off]
        if what == "mbarrier.init":
            groups.append(((ptr.memory, off), mine))
        else:
            remote = "shared::cluster" in parsed.tokens
            groups.append((m.asynchrony.barrier(m, ptr.memory, off, mine, what, remote), mine))
    return groups


def _release(m: Machine, threads: np.ndarray, release: bool) -> dict[int, np.ndarray | None]:
    """Each warp of ``threads`` releases its clock once (None for ``.relaxed``)."""
    warps = np.unique(threads // 32).tolist()
    return {w: m.clocks.release(w) if release else None for w in warps}


@TABLE.entry("tirx.ptx.mbarrier_init")
def _mbarrier_init(m: Machine, call: Any) -> None:
    """``mbarrier.init{.shared{::cta}}.b64 [addr], count`` (PTX ISA 9.7.15.16.9): makes the
    8 bytes at ``addr`` an mbarrier object in phase 0 expecting ``count`` arrivals (1 to
    2^20-1) with tx-count 0. Until ``mbarrier.inval`` only mbarrier instructions may
    access those bytes; initializing a live object again is an error (one thread
    initializes), and its users must be ordered after the init (a barrier)."""
    parsed, guard = guarded_ptx_operands(call, "mbarrier.init")
    _check_tokens("mbarrier.init", parsed.tokens, {"init", *_SHARED, "b64"})
    addr, count = parsed.operands
    with _guarded(m, guard):
        counts = _ints(m, count)
        for (memory, offset), threads in _barriers(m, parsed, addr, "mbarrier.init"):
            for t in threads.tolist():
                m.asynchrony.init(m, memory, offset, int(counts[t]), t)
        m.counters.instructions["mbarrier.init"] += len(m.warps())


@TABLE.entry("tirx.ptx.mbarrier_inval")
def _mbarrier_inval(m: Machine, call: Any) -> None:
    """``mbarrier.inval{.shared{::cta}}.b64 [addr]`` (PTX ISA 9.7.15.16.10): the mbarrier
    object at ``addr`` is invalidated; its 8 bytes may be used as plain memory again."""
    parsed, guard = guarded_ptx_operands(call, "mbarrier.inval")
    _check_tokens("mbarrier.inval", parsed.tokens, {"inval", *_SHARED, "b64"})
    with _guarded(m, guard):
        for bar, threads in _barriers(m, parsed, parsed.operands[0], "mbarrier.inval"):
            m.asynchrony.inval(m, bar, int(threads[0]))
        m.counters.instructions["mbarrier.inval"] += len(m.warps())


@TABLE.entry("tirx.ptx.mapa_u32")
def _mapa(m: Machine, call: Any) -> None:
    """``mapa.shared::cluster.u32 d, a, b`` (PTX ISA 9.7.9.21, sm_90): ``d`` is the
    ``.shared::cluster`` address of the variable at shared address ``a`` of the executing
    CTA in the cluster's CTA of rank ``b`` (:data:`CLUSTER_WINDOW`)."""
    parsed = plain_ptx_operands(call, "mapa")
    what = ".".join(["mapa", *parsed.tokens])
    if set(parsed.tokens) != {"shared::cluster", "u32"} or len(parsed.operands) != 3:
        raise SimError(f"{what}: the simulator models mapa.shared::cluster.u32 d, a, b")
    d, a, b = parsed.operands
    value = m.eval(a)
    local = m.shared_address(value, what) if isinstance(value, Pointer) else value
    local = m.per_thread(np.asarray(local).astype(np.int64))
    if (local >= CLUSTER_WINDOW).any():
        raise SimError(f"{what}: a is not a .shared::cta address of the executing CTA")
    ranks = m.per_thread(_ints(m, b))
    threads = m.active_threads()
    bad = (ranks[threads] < 0) | (ranks[threads] >= m.cluster)
    if bad.any():
        t = int(threads[np.argmax(bad)])
        raise SimError(
            f"{what}: thread {t} maps into CTA rank {int(ranks[t])}; the cluster has "
            f"{m.cluster} CTA{'s' if m.cluster > 1 else ''}"
        )
    out = ((ranks + 1) * CLUSTER_WINDOW + local).astype(np.uint32)
    _, dtype = register_operand(m, d, what)
    if dtype.itemsize != 4:
        raise SimError(f"{what}: the destination {d} is not a 32-bit register")
    write_register(m, d, out, what)
    m.counters.instructions["mapa"] += len(m.warps())


@TABLE.entry("tirx.ptx.fence_mbarrier_init")
def _fence_mbarrier_init(m: Machine, call: Any) -> None:
    """``fence.mbarrier_init.release.cluster`` (PTX ISA 9.7.13.4 "membar/fence"): orders
    prior mbarrier.init operations before later accesses of the cluster's threads, which
    in lockstep they already are; counted only (other warps still need a barrier after
    the init, which the race tracker checks)."""
    m.counters.instructions["fence.mbarrier_init"] += len(m.warps())


@TABLE.entry("tirx.ptx.griddepcontrol")
def _griddepcontrol(m: Machine, call: Any) -> None:
    """``griddepcontrol.wait`` / ``griddepcontrol.launch_dependents`` (PTX ISA
    "griddepcontrol", sm_90+; programmatic dependent launch): ``.wait`` holds the executing
    thread until every prerequisite grid has completed and its memory operations are
    visible to it; ``.launch_dependents`` lets the dependent grids be scheduled once every
    CTA of this grid has issued it or completed. The simulator runs one grid, which has no
    prerequisite and no dependent grid: both complete at once; counted."""
    action = getattr(call.args[0], "value", None) if call.args else None
    if action not in ("wait", "launch_dependents"):
        named = "no action" if action is None else f"griddepcontrol.{action}"
        raise NotModeled(f"{named}: the PTX ISA has .wait and .launch_dependents")
    m.counters.instructions[f"griddepcontrol.{action}"] += len(m.warps())


_ARRIVE_SHAPES = {  # entry suffix -> (returns state, trailing operand: "count" / "tx")
    "_nocount": (False, None),
    "": (False, "count"),
    "_expect_tx": (False, "tx"),
    "_no_complete": (True, "count"),
    "_no_complete_sink": (False, "count"),
    "_state": (True, None),
    "_count_state": (True, "count"),
    "_expect_tx_state": (True, "tx"),
}


@TABLE.entry(
    *(f"tirx.ptx.mbarrier_{act}{s}" for act in ("arrive", "arrive_drop") for s in _ARRIVE_SHAPES)
)
def _mbarrier_arrive(m: Machine, call: Any) -> None:
    """``mbarrier.arrive{_drop}{.expect_tx}{.noComplete}{.sem.scope}{.shared{::cta}}.b64
    state|_, [addr]{, count | txCount}`` (PTX ISA 9.7.15.16.16-17): each executing thread
    performs an arrive-on operation: the pending arrival count drops by ``count`` (1
    when absent; ``.expect_tx`` first raises the tx-count by ``txCount`` and arrives
    once), and the phase completes when the pending count and the tx-count are both zero
    (the phase advances, the pending count is reset to the expected one). ``arrive_drop``
    also lowers the expected count by ``count`` for later phases. ``.noComplete`` may not
    complete the phase (an error if it does). ``state`` receives the phase the arrival
    was in. The arrive releases (``.release``, the default; not ``.relaxed``) the
    thread's prior memory accesses to whoever waits for the phase."""
    name = call.op.name.removeprefix("tirx.ptx.mbarrier_")
    act = "arrive_drop" if name.startswith("arrive_drop") else "arrive"
    returns_state, trailing = _ARRIVE_SHAPES[name.removeprefix(act)]
    parsed, guard = guarded_ptx_operands(call, f"mbarrier.{act}")
    tokens = parsed.tokens
    what = ".".join(["mbarrier", *tokens])
    allowed = {act, "expect_tx", "noComplete", *_SEM_SCOPE, *_SHARED, "shared::cluster", "b64"}
    _check_tokens(what, tokens, allowed)
    operands = list(parsed.operands)
    state = operands.pop(0) if returns_state else None
    addr = operands[0]
    with _guarded(m, guard):
        amounts = _ints(m, operands[1]) if trailing else np.ones(m.threads, dtype=np.int64)
        phases = np.zeros(m.threads, dtype=np.uint64)
        for bar, threads in _barriers(m, parsed, addr, what):
            released = _release(m, threads, "relaxed" not in tokens)
            for t in threads.tolist():
                phases[t] = bar.token()
                if trailing == "tx":
                    m.asynchrony.transaction(m, bar, int(amounts[t]), 0)
                count = 1 if trailing == "tx" else int(amounts[t])
                no_complete = "noComplete" in tokens
                drop = act == "arrive_drop"
                m.asynchrony.arrive(
                    m, bar, count, released[t // 32], drop=drop, no_complete=no_complete
                )
        if state is not None:
            _, dtype = register_operand(m, state, what)
            if dtype.itemsize != 8:
                raise SimError(f"{what}: the state register {state} is not 64 bits")
            write_register(m, state, phases.view(dtype), what)
        m.counters.instructions[f"mbarrier.{act}"] += len(m.warps())


@TABLE.entry("tirx.ptx.mbarrier_expect_tx", "tirx.ptx.mbarrier_complete_tx")
def _mbarrier_tx(m: Machine, call: Any) -> None:
    """``mbarrier.{expect,complete}_tx{.relaxed.scope}{.shared{::cta}}.b64 [addr],
    txCount`` (PTX ISA 9.7.15.16.12-13): each executing thread raises (expect-tx) or
    lowers (complete-tx) the current phase's tx-count by ``txCount``; a complete-tx that
    brings it to zero with no arrival pending completes the phase. complete-tx is what
    asynchronous copies signal as their bytes land; issued directly it stands for them."""
    action = call.op.name.removeprefix("tirx.ptx.mbarrier_")
    what = f"mbarrier.{action}"
    parsed, guard = guarded_ptx_operands(call, what)
    _check_tokens(what, parsed.tokens, {action, *_SEM_SCOPE, *_SHARED, "b64"})
    addr, amount = parsed.operands
    with _guarded(m, guard):
        amounts = _ints(m, amount)
        for bar, threads in _barriers(m, parsed, addr, what):
            for t in threads.tolist():
                n = int(amounts[t])
                if not 0 <= n <= (1 << 20) - 1:
                    raise SimError(f"{what}: txCount {n} not in [0, 2^20-1]")
                expect, complete = (n, 0) if action == "expect_tx" else (0, n)
                m.asynchrony.transaction(m, bar, expect, complete)
        m.counters.instructions[what] += len(m.warps())


def _wait_phase(bar: Any, value: int, parity: bool, what: str) -> int:
    """The phase a wait operand names: a parity the current phase (same parity) or the
    one before it; a state token the phase its arrive was in."""
    if parity:
        if value not in (0, 1):
            raise SimError(f"{what}: phaseParity {value}, must be 0 or 1")
        return bar.phase if bar.phase % 2 == value else bar.phase - 1
    if value >> 32 != bar.offset + 1:
        raise SimError(f"{what}: the state operand comes from an arrive on another mbarrier")
    return value & 0xFFFFFFFF


@TABLE.entry(
    "tirx.ptx.mbarrier_test_wait_parity",
    "tirx.ptx.mbarrier_try_wait_parity",
    "tirx.ptx.mbarrier_try_wait_parity_no_hint",
    "tirx.ptx.mbarrier_test_wait",
    "tirx.ptx.mbarrier_try_wait",
    "tirx.ptx.mbarrier_try_wait_hint",
)
def _mbarrier_wait(m: Machine, call: Any) -> None:
    """``mbarrier.{test,try}_wait{.parity}{.sem.scope}{.shared{::cta}}.b64 waitComplete,
    [addr], phaseParity | state{, timeHint}`` (PTX ISA 9.7.15.16.19): ``waitComplete``
    becomes 1 when the phase named has completed (with ``.parity``: the current phase if
    its parity is ``phaseParity``, else the one before it; with ``state``: the phase of
    the arrive that returned it), else 0. When it has, ``.acquire`` (the default; not
    ``.relaxed``) orders the thread after the phase's arrivals. ``try_wait`` may suspend
    the thread until the phase completes or a time limit passes; the simulator answers at
    once, as ``test_wait`` does (a spin loop over it waits for other warps to change
    something, and is a deadlock when none can)."""
    action = call.op.name.removeprefix("tirx.ptx.mbarrier_").split("_parity")[0]
    action = action.removesuffix("_hint")
    parsed, guard = guarded_ptx_operands(call, f"mbarrier.{action}")
    what = ".".join(["mbarrier", *parsed.tokens])
    _check_tokens(what, parsed.tokens, {action, "parity", *_SEM_SCOPE, *_SHARED, "b64"})
    done_reg, addr, which, *_hint = parsed.operands
    parity, acquire = "parity" in parsed.tokens, "relaxed" not in parsed.tokens
    with _guarded(m, guard):
        values = _ints(m, which)
        done = np.zeros(m.threads, dtype=np.uint32)
        for bar, threads in _barriers(m, parsed, addr, what):
            for t in threads.tolist():
                phase = _wait_phase(bar, int(values[t]), parity, what)
                done[t] = m.asynchrony.phase_done(m, bar, phase, [t // 32], acquire)
        _, dtype = register_operand(m, done_reg, what)
        write_register(m, done_reg, done.astype(dtype), what)
        m.counters.instructions[f"mbarrier.{action}"] += len(m.warps())


@TABLE.entry("tirx.cuda.mbarrier_wait", "tirx.cuda.mbarrier_wait_acquire_cluster")
def _cuda_mbarrier_wait(m: Machine, call: Any) -> None:
    """TVM's ``T.cuda.mbarrier_wait(bar, phase)`` (its helper in ``backend/cuda/cpp/
    asm.py``): retries ``mbarrier.try_wait.parity.acquire.cta.shared::cta.b64`` on the
    generic address ``bar`` with parity ``phase`` until it succeeds: a thread whose phase
    has not completed waits (other warps run) and then acquires the phase's arrivals; a
    phase nothing can complete any more is a deadlock naming the barrier and what it
    still waits for. ``T.cuda.mbarrier_wait_acquire_cluster`` is the same loop with
    ``.acquire.cluster`` (for arrivals from other CTAs of the cluster): the simulator
    orders the waiter after every arrival of the phase either way."""
    bar_node, phase_node = call.args
    scope = "cluster" if call.op.name.endswith("cluster") else "cta"
    what = f"mbarrier_wait (mbarrier.try_wait.parity.acquire.{scope})"
    values = _ints(m, phase_node)
    waits = []
    for bar, threads in _barriers(m, PtxOperands([], [], ""), bar_node, what):
        late: dict[int, list[int]] = {}
        for t in threads.tolist():
            phase = _wait_phase(bar, int(values[t]), True, what)
            if not m.asynchrony.phase_done(m, bar, phase, [t // 32], True):
                late.setdefault(phase, []).append(t)
        for phase, tids in late.items():
            waits.append(_phase_wait(m, bar, phase, np.array(tids), what))
    m.counters.instructions["mbarrier.try_wait"] += len(m.warps())
    m.block(waits)


def _phase_wait(m: Machine, bar: Any, phase: int, tids: np.ndarray, what: str):
    """Threads ``tids`` wait for ``bar`` to complete ``phase``, then acquire it."""
    mask = np.zeros(m.threads, dtype=bool)
    mask[tids] = True
    warps = sorted(set((tids // 32).tolist()))
    asynchrony = m.asynchrony
    wait = Wait(
        what,
        lambda: bar.phase > phase,
        lambda: asynchrony.describe_unmet((bar, phase)),
        then=lambda: asynchrony.phase_done(m, bar, phase, warps, True),
    )
    return wait, mask
