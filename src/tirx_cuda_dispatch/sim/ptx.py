"""PTX table instructions (TVM's ``T.ptx``): loads and stores, register packing, float
arithmetic, ``ldmatrix``/``stmatrix`` and ``tcgen05``, each with the PTX ISA's semantics.

A ``T.ptx`` call carries its operands, then every modifier slot of its table entry (empty
where omitted), then a marker (:func:`.calls.ptx_operands`). The matrix and tensor-memory
fragments come from :mod:`.fragments`, written from the ISA independently of any emitter.
Each entry's docstring is its meaning.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from . import fragments
from .calls import (
    Instruction,
    Table,
    load_at,
    plain_ptx_operands,
    ptx_operands,
    register_bits,
    register_operand,
    store_at,
    write_register,
)
from .errors import SimError
from .interpreter import Machine
from .intrinsics import named_barrier
from .memory import BankRecord, bank_ways
from .numerics import ROUNDING_MODES, f32_arith
from .values import Pointer

TABLE = Table()


# -- ld / st (PTX ISA "Data Movement and Conversion Instructions: ld, st") --------------------
_TYPE_BYTES = {f"{k}{bits}": bits // 8 for k in "bus" for bits in (8, 16, 32, 64)}
_TYPE_BYTES.update({"f32": 4, "f64": 8, "b128": 16})
_SPACES = {"": "", "global": "global", "shared": "shared", "shared::cta": "shared"}
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
            raise SimError(f"{what} .{t}: the simulator models weak {what} of global and shared")
    if type_ is None:
        raise SimError(f"{what} {tokens}: no type")
    return MemoryForm(space, lanes, type_, "L2::cache_hint" in tokens)


def _address(m: Machine, operand: Any, form: MemoryForm, what: str) -> Pointer:
    """The operand as an address of ``form.space``: ``.shared`` takes a shared-window
    address (``cvta.to.shared``), ``.global`` and generic take generic addresses, of
    global memory for ``.global``."""
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
    shared-window address; cache and eviction hints do not change values."""
    parsed = plain_ptx_operands(call, what)
    form = memory_form(parsed.tokens, what)
    operands = parsed.operands[: len(parsed.operands) - form.cache_policy]
    if len(operands) != form.lanes + 1:
        raise SimError(f"{what}: .v{form.lanes} takes {form.lanes} registers and an address")
    *regs, addr = operands
    ptr = _address(m, addr, form, what)
    size = form.elem_bytes
    raw = load_at(m, ptr, f"uint8x{size * form.lanes}")  # (T, bytes)
    for k, reg in enumerate(regs):
        _, dtype = register_operand(m, reg, what)
        value = _extend(raw[:, k * size : (k + 1) * size], dtype.itemsize, form.type, what)
        write_register(m, reg, value.view(dtype).reshape(m.threads), what)


def _st(m: Machine, call: Any, what: str = "st") -> None:
    """``st{.ss}{.vec}.type [a], b`` (PTX ISA "st"): each thread writes ``vec``
    consecutive ``type`` elements from its source registers at its address (one access,
    aligned to its whole size); a register wider than the type gives its low bits.
    ``.shared`` needs a shared-window address; hints do not change values."""
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
    store_at(m, ptr, raw, f"uint8x{raw.shape[1]}")


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
    ``barrier{.cta}.sync a{, b}`` (PTX ISA "bar, barrier"): the threads wait at named
    barrier ``a`` (0-15) until ``b`` threads (a multiple of 32; without ``b``, every
    thread of the CTA) have arrived, which orders their memory accesses. Warps arrive
    whole, 32 threads each (a diverged warp is an error, ``.aligned`` or not: lockstep
    execution cannot have the rest of the warp arrive from other code); the warps of
    one statement arrive together: ``b`` of them are ordered, a larger multiple of ``b``
    completes in groups the arrival order picks (ordered by none), any other number
    waits forever (an error). Counted as ``bar.sync`` per warp."""
    mnemonic = call.op.name.removeprefix("tirx.ptx.").split("_")[0]
    parsed = plain_ptx_operands(call, mnemonic)
    tokens = parsed.tokens
    spelling = ".".join([mnemonic, *tokens])
    if "sync" not in tokens or not set(tokens) <= {"cta", "sync", "aligned"}:
        raise SimError(f"{spelling}: the simulator models {mnemonic}{{.cta}}.sync")
    if len(parsed.operands) not in (1, 2):
        raise SimError(f"{spelling} takes a barrier and an optional thread count")
    ids = m.per_thread(m.eval(parsed.operands[0]))
    count = m.per_thread(m.eval(parsed.operands[1])) if len(parsed.operands) == 2 else None
    aligned = mnemonic == "bar" or "aligned" in tokens
    named_barrier(m, ids, count, spelling, aligned=aligned)


@TABLE.entry("tirx.ptx.bar_arrive", "tirx.ptx.barrier_arrive")
def _bar_arrive(m: Machine, call: Any) -> None:
    """``bar{.cta}.arrive a, b`` / ``barrier{.cta}.arrive{.aligned} a, b`` (PTX ISA "bar,
    barrier"): the threads count towards named barrier ``a`` completing at ``b`` arrivals
    without waiting for it. Not modeled: pairing arrivals with the waiting ``bar.sync``
    of later statements needs barrier state across statements, which the simulator does
    not keep, so it is an error naming the instruction."""
    mnemonic = call.op.name.removeprefix("tirx.ptx.").split("_")[0]
    spelling = ".".join([mnemonic, *ptx_operands(call).tokens])
    raise SimError(f"{spelling} is not modeled by the simulator (only {mnemonic}.sync is)")


# -- ldmatrix / stmatrix (PTX ISA 9.7.14.5.15 / 9.7.14.5.16) ------------------------------------
def _matrix_form(tokens: list[str], mnemonic: str) -> tuple[int, bool]:
    shape = next((t for t in tokens if t.startswith("m")), None)
    if shape != "m8n8" or "b16" not in tokens:
        raise SimError(f"{mnemonic} .{shape} {tokens}: the simulator knows .m8n8 .b16")
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
    return m.tmem


@TABLE.entry("tirx.ptx.tcgen05_alloc")
def _tc_alloc(m: Machine, call: Any) -> None:
    """``tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [dst], ncols`` (PTX ISA
    9.7.16): each issuing warp allocates ``ncols`` tensor-memory columns (a power of two,
    32 to 512) and writes their address to shared memory at ``dst``."""
    parsed = plain_ptx_operands(call, "tcgen05.alloc")
    (dst, ncols), tokens = parsed.operands, parsed.tokens
    if "cta_group::1" not in tokens:
        raise SimError(f"tcgen05.alloc {tokens}: the simulator knows .cta_group::1")
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
    """``tcgen05.wait::st`` / ``wait::ld`` (PTX ISA 9.7.16): the warp's earlier
    ``tcgen05.st`` writes become visible / its ``tcgen05.ld`` registers become usable
    (before that, reading them is an error here)."""
    tokens = ptx_operands(call).tokens
    kind = tokens[0] if tokens else ""
    tmem = _tensor_memory(m, "tcgen05.wait")
    for warp in m.warps():
        if kind == "wait::st":
            tmem.wait_st(warp)
        elif kind == "wait::ld":
            for mem in m.local_memories():
                mem.pending[warp * 32 : (warp + 1) * 32] = False
        else:
            raise SimError(f"tcgen05.{kind}: the simulator knows wait::ld and wait::st")
        m.counters.instructions[f"tcgen05.{kind}"] += 1


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
    for warp in m.warps():
        lanes, cols = _tc_cells(m, warp, taddr, imm, shape, num, pack)
        m.counters.instructions[kind] += 1
        rows = slice(warp * 32, (warp + 1) * 32)
        if load:
            vals = tmem.load(warp, lanes, cols)
            if pack:  # [lane, reg, half] cells -> one register per (lane, reg)
                vals = fragments.tcgen05_pack16(vals)[..., 0]
            out[rows] = vals
            m.counters.bytes["tmem.load"] += vals.size * 4
        else:
            words = held[rows]
            vals = fragments.tcgen05_unpack16(words[..., None]) if pack else words
            tmem.store(warp, lanes.reshape(-1), cols.reshape(-1), vals.reshape(-1))
            m.counters.bytes["tmem.store"] += words.size * 4
    if load:
        for k, reg in enumerate(regs):
            write_register(m, reg, out[:, k], what)
        for mem in m.local_memories():  # filled asynchronously until tcgen05.wait::ld
            for reg in regs:
                b = m._bound(reg.source)
                if b.pointer.memory is mem:
                    offsets, size = m._address(b, reg.indices)
                    offs = m.per_thread(offsets)
                    for t in m._active_threads():
                        mem.pending[t, int(offs[t]) : int(offs[t]) + size] = True


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
