"""Warpgroup MMA: ``wgmma.fence``, ``wgmma.mma_async`` (A and B from shared memory through
matrix descriptors), ``wgmma.commit_group`` and ``wgmma.wait_group`` (PTX ISA 9.7.15).

Written from the ISA independently of the variant's :mod:`..isa.wgmma`: the descriptor's
fields (9.7.15.5.1.2.2), the canonical layouts as core matrices (9.7.15.5.1.2.1), the
address swizzle, and the D fragment (9.7.15.5.1.1: thread ``32 w + l``, register ``j``
holds row ``16 w + l / 4 + 8 ((j / 2) % 2)``, column ``8 (j / 4) + 2 (l % 4) + j % 2``).

The product is summed as the H200 sums it, bit for bit (:func:`.numerics.wgmma_sum_sm90`,
measured: 16-bit operands as ``mma`` sums them, float8 ones keeping 14 bits), for a
kernel whose target is sm_90; without one, the exact sum rounded once to float32
(:func:`.numerics.mma_sum`). Asynchrony: the new D values are an effect of the warpgroup's open wgmma
group; they land at a ``wgmma.wait_group`` that completes the group. Until then reading
or writing D's registers is an error naming the wgmma, and so is writing the shared bytes
it reads (A and B). A wgmma chained on the accumulator of an earlier one of the same
warpgroup reads it in order (the ISA allows that without a wait).
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

from .asynchrony import Effect
from .calls import (
    Table,
    issued_at,
    plain_ptx_operands,
    queue_register_writes,
    read_registers,
    register_cells,
)
from .errors import NotModeled, SimError
from .interpreter import Machine
from .memory import swizzled_address
from .numerics import mma_sum, wgmma_sum_sm90

TABLE = Table()

WARPGROUP = 128
_MODES = {0: ("none", 0), 1: ("128B", 128), 2: ("64B", 64), 3: ("32B", 32)}  # bits 62-63


def decode(desc: int) -> dict:
    """The descriptor's fields (byte values): start address, LBO, SBO, swizzle bytes."""
    if desc >> 49 & 7:
        raise NotModeled("a wgmma descriptor base offset other than 0")
    return {
        "start": (desc & 0x3FFF) << 4,
        "lbo": (desc >> 16 & 0x3FFF) << 4,
        "sbo": (desc >> 32 & 0x3FFF) << 4,
        "swizzle": _MODES[desc >> 62 & 3][1],
    }


def operand_bytes(fields: dict, mn_major: bool, rows: int, k: int, size: int) -> np.ndarray:
    """The shared byte address of element (row, k) of a ``rows x k`` operand (rows: M of A
    or N of B) as the descriptor names it: core matrices of 8 x 16 bytes, the K-major ones
    8 rows of 16 bytes, the MN-major ones 8 K rows of 16 bytes of MN; under a swizzle an
    atom is 8 rows of the swizzle's width and the 16-byte units of an address ``a`` move
    to ``a ^ (((a >> 7) & (S / 16 - 1)) << 4)``."""
    start, lbo, sbo, swz = (fields[f] for f in ("start", "lbo", "sbo", "swizzle"))
    per16 = 16 // size  # elements in 16 bytes
    r = np.arange(rows)[:, None]
    c = np.arange(k)[None, :]
    if not mn_major:  # K-major: rows of K
        if swz:
            raw = (r % 8) * swz + (r // 8) * sbo + c * size
        else:
            raw = (r % 8) * 16 + (r // 8) * sbo + (c % per16) * size + (c // per16) * lbo
    else:  # MN-major: columns of MN, K rows
        width = (swz or 16) // size  # MN elements in one row of an atom
        if swz:
            raw = (r % width) * size + (r // width) * lbo + (c % 8) * swz + (c // 8) * sbo
        else:
            raw = (r % per16) * size + (r // per16) * sbo + (c % 8) * 16 + (c // 8) * lbo
    return swizzled_address(start + raw, swz)


def fragment(n: int) -> tuple[np.ndarray, np.ndarray]:
    """(row, column) of register ``j`` of each of the 128 threads, ``(128, n / 2)``."""
    t = np.arange(WARPGROUP)[:, None]
    j = np.arange(n // 2)[None, :]
    w, lane = t // 32, t % 32
    row = 16 * w + lane // 4 + 8 * ((j // 2) % 2)
    col = 8 * (j // 4) + 2 * (lane % 4) + j % 2
    return row, col


_ELEMENT_BYTES = {"f16": 2, "bf16": 2, "e4m3": 1, "e5m2": 1}


def _values(raw: np.ndarray, type_: str) -> np.ndarray:
    """Element bytes ``(..., size)`` as float32 values of f16 / bf16 / e4m3 / e5m2 (each
    exact in float32: e4m3 has 3 significand bits, bias 7, no infinity, S.1111.111 NaN;
    e5m2 is float16's top byte)."""
    if type_ in ("e4m3", "e5m2"):
        bits = np.ascontiguousarray(raw[..., 0])
        kind = ml_dtypes.float8_e4m3fn if type_ == "e4m3" else ml_dtypes.float8_e5m2
        return bits.view(kind).astype(np.float32)
    bits = np.ascontiguousarray(raw).view(np.uint16)[..., 0]
    if type_ == "f16":
        return bits.view(np.float16).astype(np.float32)
    return (bits.astype(np.uint32) << 16).view(np.float32)


@TABLE.entry("tirx.ptx.wgmma_fence")
def _wgmma_fence(m: Machine, call: Any) -> None:
    """``wgmma.fence.sync.aligned`` (PTX ISA 9.7.15.7.1): orders the warpgroup's prior
    register accesses (of the accumulator and A registers) before its following
    wgmma.mma_async. The simulator orders a warpgroup's own register accesses in program
    order already: counted only. (Shared bytes plain stores wrote still need
    fence.proxy.async.)"""
    m.counters.instructions["wgmma.fence"] += len(m.warps())


@TABLE.entry("tirx.ptx.fence_proxy")
def _fence_proxy(m: Machine, call: Any) -> None:
    """``fence.proxy.async{.shared::cta}`` (PTX ISA 9.7.13.4, "Proxies"): orders the
    thread's generic-proxy accesses (and all it is ordered after) before the async-proxy
    operations ordered after the fence. A wgmma or TMA store that reads shared bytes a
    plain store wrote needs such a fence between them (:meth:`.memory.Clocks.fenced`);
    bytes TMA wrote reach a wgmma without one (the mbarrier phase orders them)."""
    parsed = plain_ptx_operands(call, "fence.proxy")
    tokens = [t for t in parsed.tokens if t]
    if "async" not in tokens:
        raise NotModeled(f"fence.proxy {tokens}: only fence.proxy.async is modeled")
    for w in m.warps():
        m.clocks.fence(w)
    m.counters.instructions["fence.proxy.async"] += len(m.warps())


@TABLE.entry("tirx.ptx.wgmma_commit_group")
def _wgmma_commit(m: Machine, call: Any) -> None:
    """``wgmma.commit_group.sync.aligned`` (9.7.15.7.2): the warpgroup's wgmma.mma_async
    operations not yet in a group become one group (an empty one if none)."""
    m.asynchrony.commit(m, m.active_threads(), "wgmma")
    m.counters.instructions["wgmma.commit_group"] += len(m.warps())


@TABLE.entry("tirx.ptx.wgmma_wait_group")
def _wgmma_wait(m: Machine, call: Any) -> None:
    """``wgmma.wait_group.sync.aligned N`` (9.7.15.7.3): waits until at most the ``N``
    most recent groups of the warpgroup are pending: the D registers of the older ones
    are written, and their shared reads done."""
    parsed = plain_ptx_operands(call, "wgmma.wait_group")
    tokens = [t for t in parsed.tokens if t]
    counts = [t for t in tokens if t.isdigit()]
    if parsed.operands:
        n = int(np.asarray(m.eval(parsed.operands[0])).flat[0])
    elif counts:
        n = int(counts[0])
    else:
        raise SimError(f"wgmma.wait_group without N: {call}")
    m.asynchrony.wait_groups(m, m.active_threads(), n, "wgmma")
    m.counters.instructions["wgmma.wait_group"] += len(m.warps())


@TABLE.entry(
    "tirx.ptx.wgmma_f16_ss",
    "tirx.ptx.wgmma_bf16_ss",
    "tirx.ptx.wgmma_fp8_ss",
    "tirx.ptx.wgmma_f16_rs",
    "tirx.ptx.wgmma_bf16_rs",
)
def _wgmma_mma(m: Machine, call: Any) -> None:
    """``wgmma.mma_async.sync.aligned.m64nNk16.f32.{f16,bf16}.{f16,bf16} d, a-desc,
    b-desc, scale-d, imm-scale-a, imm-scale-b, imm-trans-a, imm-trans-b`` and
    ``...m64nNk32.f32.{e4m3,e5m2}.{e4m3,e5m2} d, a-desc, b-desc, scale-d, imm-scale-a,
    imm-scale-b`` (9.7.15.5.2): the warpgroup's 128 threads compute ``D = A B + (scale-d ?
    D : 0)`` for a 64 x N tile, A (64 x K) and B (K x N, given as N x K) read from shared
    memory through their descriptors, K-major unless imm-trans says MN-major (float8
    operands are K-major: the line has no imm-trans); float8 elements are e4m3 (bias 7, no
    infinity) or e5m2 (bias 15); scale-a/b -1 negate. The register form (``..._rs``:
    ``d, {a0, a1, a2, a3}, b-desc, scale-d, imm-scale-a, imm-scale-b, imm-trans-b``, f16 and
    bf16) takes A from four .b32 registers of each thread: element ``e`` (0-7, the lower
    half first) of thread ``32 w + l`` is A's row ``16 w + l / 4 + 8 ((e / 2) % 2)``,
    column ``8 (e / 4) + 2 (l % 4) + e % 2`` (figure "WGMMA .m64nNk16 register fragment
    layout for matrix A"); their values are taken at the issue, and a write to them before
    a wgmma.wait_group completes the group is an error (the ISA makes any access to them
    before that wait undefined; a read is not flagged). The new D lands when a
    wgmma.wait_group completes the warpgroup's group of it."""
    parsed = plain_ptx_operands(call, "wgmma.mma_async")
    tokens = [t for t in parsed.tokens if t]
    shape = next((t for t in tokens if t.startswith("m64n")), None)
    float8 = call.op.name.endswith("fp8_ss")
    registers_a = call.op.name.endswith("_rs")  # A from four .b32 registers per thread
    types = [t for t in tokens if t in _ELEMENT_BYTES]
    if float8:
        kk, trailing, (at, bt) = 32, 5, types[-2:]
    else:
        ab = "bf16" if "bf16" in call.op.name else "f16"
        kk, trailing, (at, bt) = 16, (9 if registers_a else 7), (ab, ab)
    if shape is None or not shape.endswith(f"k{kk}"):
        raise NotModeled(f"wgmma.mma_async {tokens}: only the m64nNk16/k32 lines are modeled")
    n = int(shape[4:].split("k")[0])
    ops = parsed.operands
    regs, tail = ops[:-trailing], ops[-trailing:]
    if registers_a:  # a0..a3, b-desc, scale-d, scale-a, scale-b, trans-b
        a_regs, (desc_b, scale_d, scale_a, scale_b, trans_b) = tail[:4], tail[4:]
        desc_a, trans_a = None, None
    else:
        a_regs = None
        desc_a, desc_b, scale_d, scale_a, scale_b = tail[:5]
        trans_a, trans_b = tail[5:] if not float8 else (None, None)
    what = f"wgmma.mma_async.{shape}.f32.{at}.{bt}"
    if len(regs) != n // 2:
        raise SimError(f"{what}: {len(regs)} D registers, needs {n // 2}")
    threads = m.active_threads()
    m.require_whole_warpgroups(what)
    groups = np.unique(threads // WARPGROUP)
    if threads.size != groups.size * WARPGROUP:
        raise SimError(f"{what}: every thread of a warpgroup executes it (.sync.aligned)")
    mems = {id(m.bound(r.source).pointer.memory): m.bound(r.source).pointer.memory for r in regs}
    for mem in mems.values():  # chained on an earlier wgmma's accumulator: in order
        m.asynchrony.settle(m, "wgmma", mem, threads)
    scale = [int(np.asarray(m.eval(x)).flat[0]) for x in (scale_a, scale_b)]
    flags = [0 if x is None else int(np.asarray(m.eval(x)).flat[0]) for x in (trans_a, trans_b)]
    keep = np.asarray(m.per_thread(m.eval(scale_d))).astype(bool)
    if keep[threads].any():  # scale-d 0: D is not read (it may hold anything)
        if all(
            m.nodes.dtype(r) == "float32" and m.bound(r.source).pointer.memory.space == "local"
            for r in regs
        ):  # registers, as wgmma's D always is: one gather
            d = read_registers(m, regs, what).view(np.float32)
        else:
            d = np.stack([np.asarray(m.per_thread(m.eval(r)), dtype=np.float32) for r in regs], 1)
    else:
        d = np.zeros((m.threads, len(regs)), dtype=np.float32)
    if registers_a:  # (threads, 4) .b32 words, read at the issue
        words = np.stack([np.asarray(m.per_thread(m.eval(r))).astype(np.uint32) for r in a_regs], 1)
        da = np.zeros(m.threads, dtype=np.uint64)
    else:
        da = np.asarray(m.per_thread(m.eval(desc_a))).astype(np.uint64)
    db = np.asarray(m.per_thread(m.eval(desc_b))).astype(np.uint64)
    out = np.zeros_like(d)
    reads = []
    measured = m.arch().startswith("sm_90")  # the H200's rule; else the exact sum
    row, col = fragment(n)
    for g in groups.tolist():
        mine = np.arange(g * WARPGROUP, (g + 1) * WARPGROUP)
        if len({int(x) for x in da[mine]}) != 1 or len({int(x) for x in db[mine]}) != 1:
            raise SimError(f"{what}: the descriptors differ between the warpgroup's threads")
        memory = _shared_memory(m, what)
        # a descriptor's address is in the issuing CTA's window (of a cluster's memory)
        base = 0 if memory.window is None else int(m.rank(mine[0])) * memory.window
        if registers_a:
            a_at = np.zeros((0,), dtype=np.int64)  # no shared bytes: A is in registers
        else:
            a_at = base + operand_bytes(
                decode(int(da[mine[0]])), bool(flags[0]), 64, kk, _ELEMENT_BYTES[at]
            )
        b_at = base + operand_bytes(
            decode(int(db[mine[0]])), bool(flags[1]), n, kk, _ELEMENT_BYTES[bt]
        )
        reader = np.full(a_at.size + b_at.size, mine[0])
        cells = np.concatenate([a_at.ravel(), b_at.ravel()])
        # the operand reads belong to the async proxy (the warpgroup's wgmma unit): ordered
        # after what its warps know at the issue, and after their fence.proxy.async for
        # bytes they wrote with plain stores; done for others only at the group's wait
        agent = m.clocks.wgmma_unit(g)
        snapshot = m.clocks.issue(agent, range(4 * g, 4 * g + 4))
        agents = np.full(reader.size, agent)
        cells_a, cells_b = cells[: a_at.size], cells[a_at.size :]
        raw_a = None
        if not registers_a:
            raw_a = memory.load(
                reader[: a_at.size], cells_a, _ELEMENT_BYTES[at], m.clocks, agents[: a_at.size]
            )
        raw_b = memory.load(
            reader[a_at.size :], cells_b, _ELEMENT_BYTES[bt], m.clocks, agents[a_at.size :]
        )
        if registers_a:  # each word's lower half is the even element (a_fragment)
            halves = np.ascontiguousarray(words[mine]).view(np.uint16).reshape(-1, 8, 1)
            a = np.zeros((64, kk), np.float32)
            a_row, a_col = fragment(kk)
            a[a_row, a_col] = _values(halves.view(np.uint8).reshape(-1, 8, 2), at)
            a = a * scale[0]
        else:
            a = _values(raw_a, at).reshape(64, kk) * scale[0]  # guards: TMA bytes in flight
        b = _values(raw_b, bt).reshape(n, kk).T * scale[1]
        c = np.zeros((64, n), np.float32)
        c[row, col] = np.where(keep[mine][:, None], d[mine], 0.0)
        full = wgmma_sum_sm90(a, b, c, (at, bt)) if measured else mma_sum(a, b, c, np.float32)
        out[mine] = full[row, col]
        read = np.concatenate([
            (cells_a[:, None] + np.arange(_ELEMENT_BYTES[at])).ravel(),
            (cells_b[:, None] + np.arange(_ELEMENT_BYTES[bt])).ravel(),
        ])  # fmt: skip
        reads.append((memory, mine[0], read, agent, snapshot))
    queue_register_writes(m, "wgmma", what, issued_at(m, call), regs, out, group="wgmma")
    for memory, reader, cells, agent, snapshot in reads:
        _queue_reads(m, call, what, memory, reader, cells, agent, snapshot)
    if registers_a:
        _queue_register_reads(m, call, what, a_regs, groups)
    m.counters.instructions[what] += len(m.warps())


def _shared_memory(m: Machine, what: str) -> Any:
    """The shared memory descriptors address: the CTA's (dynamic) shared allocation."""
    if m.dynamic_shared is None:
        raise NotModeled(f"{what}: descriptors into static shared memory")
    return m.dynamic_shared


def _queue_register_reads(m: Machine, call: Any, what: str, a_regs: list, groups) -> None:
    """The register form's A registers stay the wgmma's until its group completes (PTX ISA
    9.7.15.5.2: accessing them before a wgmma.wait_group that covers the instruction is
    undefined): per warpgroup, an effect that writes nothing and reads them, so a plain
    write before the ``wgmma.wait_group`` is an error naming the wgmma (a read is not)."""
    threads = m.active_threads()
    by_memory = []
    for mem, ks, cells in register_cells(m, a_regs, what, threads):
        who = np.tile(threads, len(ks))
        by_memory.append((mem, who, who[:, None] * mem.nbytes + cells))  # flattened bytes
    for g in np.asarray(groups).tolist():
        one = np.array([g * WARPGROUP])
        group = m.asynchrony.open_groups(m, one, "wgmma")
        for mem, who, flat in by_memory:
            source = np.unique(flat[(who // WARPGROUP) == g].ravel())[None, :]
            effect = Effect(
                "wgmma", what, issued_at(m, call), m.call, mem, one,
                mem.index(one, np.zeros((1, 0), dtype=np.int64)),
                np.zeros((1, 0), dtype=np.uint8), group,
                source=mem, source_cells=source,
                source_read=np.ones(source.shape, dtype=bool),
            )  # fmt: skip
            m.asynchrony.issue(m, effect)


def _queue_reads(
    m: Machine, call: Any, what: str, memory: Any, reader: int, cells: np.ndarray,
    agent: int, snapshot: np.ndarray,
) -> None:  # fmt: skip
    """The shared bytes (``cells``) the wgmma reads, busy until its group completes: an effect that
    writes nothing and reads them (a plain write over them before the wait is an error);
    the wait orders the warpgroup after the reads (the unit's clock at the issue)."""
    one = np.array([reader])
    index = memory.index(one, np.zeros((1, 0), dtype=np.int64))
    group = m.asynchrony.open_groups(m, one, "wgmma")
    seen = np.zeros(memory.nbytes, dtype=bool)  # the distinct bytes (np.unique sorts: slower)
    seen[cells] = True
    source = np.flatnonzero(seen)[None, :]
    effect = Effect(
        "wgmma", what, issued_at(m, call), m.call, memory, one, index,
        np.zeros((1, 0), dtype=np.uint8), group,
        source=memory, source_cells=source, source_read=np.ones(source.shape, dtype=bool),
        agent=agent, snapshot=snapshot,
    )  # fmt: skip
    m.asynchrony.issue(m, effect)
