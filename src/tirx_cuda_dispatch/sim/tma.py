"""The Tensor Memory Accelerator: ``cp.async.bulk.tensor`` loads (global -> shared, completion
on an mbarrier) and stores (shared -> global, ``cp.reduce`` too, completion through bulk
async-groups) (PTX ISA 9.7.9.25.5.1-2), and the tensor maps they read.

A kernel receives a tensor map (``CUtensorMap``, a ``__grid_constant__`` parameter) the host
encoded before the launch with ``cuTensorMapEncodeTiled``; the simulator binds it as a
:class:`.values.TensorMapValue`, after the driver's rules (:class:`.values.TensorMapArg`:
an encode that breaks one fails on the host, the kernel never runs). One instruction
copies one box: the elements at coordinates ``c + i`` for every ``i`` of the box (dimension
0 innermost), zeros where a coordinate lies outside the tensor, into shared memory box row
after box row, dimension 0 fastest, each 16-byte unit at address ``a`` moved to ``a ^
(((a >> 7) & (S/16 - 1)) << 4)`` under an ``S``-byte swizzle (the CUDA programming guide's
TMA swizzle patterns: address bits 4-6 xor bits 7-9 for 128 bytes). Its writes land when
the mbarrier phase it completes its bytes on completes (:mod:`.asynchrony`); before then a
read of them, or a write over them, is an error naming the copy.

A store reads its box from shared memory (the same addresses, swizzle included) as the
async proxy when it is issued, and writes the elements that lie inside the tensor (the
rest of the box is clipped). It joins the issuing thread's bulk async-group:
``cp.async.bulk.commit_group`` closes the group, ``cp.async.bulk.wait_group.read N``
completes the reads of all but the ``N`` most recent groups (their shared bytes may be
written again), ``cp.async.bulk.wait_group N`` completes them whole (their global bytes
may be read). Until then writing the shared source, or reading the global destination,
is an error naming the store; a CTA may exit with a store's writes in flight (they land
when the grid completes), not with its reads.

``prefetch.tensormap`` (threadIdx.x 0 at the kernel's start, where a copy's plan asks)
only checks that it names a tensor map: a prefetch has no effect on memory.

Where the hardware faults, so does the simulator (:func:`..isa.bulk.coordinate_fault`): an
innermost coordinate that is not a multiple of 16 bytes, a store's negative coordinate
(measured on an H100: an illegal instruction).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..isa.bulk import (
    BULK_ALIGN,
    CTA_MASK_BITS,
    SHARED_ALIGN,
    TF32_DROPPED_BITS,
    coordinate_fault,
)
from .asynchrony import Effect
from .calls import Table, guarded_ptx_operands, issued_at, plain_ptx_operands
from .errors import NotModeled, SimError
from .interpreter import Machine
from .memory import swizzled_address
from .numerics import cast, is_float, parse_dtype
from .ptx import cluster_address
from .values import Pointer, TensorMapValue

TABLE = Table()

_TOKENS = {"async", "bulk", "tensor", "shared::cluster", "global", "tile"}
_MULTICAST = "multicast::cluster"
_COMPLETE_TX = "mbarrier::complete_tx::bytes"


def _tensor_map(m: Machine, operand: Any, what: str) -> TensorMapValue:
    """The tensor map an operand names (``reinterpret(address_of(param))``)."""
    node = operand
    while getattr(getattr(node, "op", None), "name", None) in (
        "tirx.reinterpret",
        "tirx.address_of",
    ):
        node = node.args[0]
    value = m.env.get(node) if type(node).__name__ == "Var" else None
    if not isinstance(value, TensorMapValue):
        raise SimError(f"{what}: {operand} is not the address of a tensor map parameter")
    return value


def _shared_window(m: Machine, operand: Any, what: str, name: str) -> Pointer:
    ptr = m.eval(operand)
    if not isinstance(ptr, Pointer) or not ptr.shared_window or ptr.memory.space != "shared":
        raise SimError(f"{what}: {name} must be a .shared address of shared memory (cvta)")
    return ptr


def _thread_box(
    tm: TensorMapValue, coords: list[int], start: int, window: Pointer, what: str, t: int,
    store: bool, target: int | None = None,
):  # fmt: skip
    """Thread ``t``'s box (:func:`box_copy`) at ``coords`` and shared byte ``start`` of
    ``window``, after the checks the hardware makes: the shared address 128-byte aligned,
    coordinates it takes (:func:`..isa.bulk.coordinate_fault`), the box inside the window."""
    name, verb = ("srcMem", "reads") if store else ("dstMem", "writes")
    if start % SHARED_ALIGN:
        raise SimError(
            f"misaligned {what}: {name} is byte {start} of shared {window.memory.name} "
            f"(thread {t}); a tensor copy's shared address is 128-byte aligned"
        )
    fault = coordinate_fault(coords, tm.elem_bytes, store)
    if fault is not None:
        raise SimError(
            f"illegal instruction: {what} (thread {t}) at coordinates "
            f"{{{', '.join(map(str, coords))}}} of {tm.name}: {fault} (the hardware stops "
            "the kernel)"
        )
    shared, cells, inside, nbytes = box_copy(tm, coords, start)
    memory = window.memory
    if memory.window is not None:  # a cluster's: within the window of the CTA it lands in
        ends = np.array([shared.min(), shared.max()])
        ranks = None if target is None else np.full(2, target)
        memory.check_window(np.full(2, t), ends, 1, what, ranks)
    if shared.max() >= window.memory.nbytes:
        raise SimError(
            f"{what} (thread {t}) {verb} past the {window.memory.nbytes} bytes of shared "
            f"{window.memory.name}: its box of {nbytes} bytes starts at byte {start}"
        )
    return shared, cells, inside, nbytes


def round_tf32(values: np.ndarray) -> np.ndarray:
    """A TFLOAT32 descriptor's load: the bytes of float32 elements (rows of 4) rounded to
    tf32 as they land, to nearest, ties to even (:data:`..isa.bulk.TFLOAT32`, measured);
    infinities and NaNs kept."""
    bits = np.ascontiguousarray(values).view("<u4")
    drop = TF32_DROPPED_BITS
    odd = (bits >> np.uint32(drop)) & np.uint32(1)
    half = np.uint32((1 << (drop - 1)) - 1)
    rounded = (bits + half + odd) & ~np.uint32((1 << drop) - 1)
    special = (bits & np.uint32(0x7F800000)) == np.uint32(0x7F800000)
    return np.where(special, bits, rounded).astype("<u4").view(np.uint8).reshape(values.shape)


def box_copy(tm: TensorMapValue, coords: list[int], dst: int):
    """One box: the shared byte offsets it writes (swizzled), the global byte offsets it
    reads and which shared bytes those fill (the others are zeros), and the byte count."""
    box = tm.box
    n = math.prod(box)
    index = np.arange(n, dtype=np.int64)
    inside = np.ones(n, dtype=bool)
    source = np.zeros(n, dtype=np.int64)
    rest = index
    for d, extent in enumerate(box):
        g = coords[d] + rest % extent
        rest = rest // extent
        inside &= (g >= 0) & (g < tm.dims[d])
        stride = tm.elem_bytes if d == 0 else tm.strides[d - 1]
        source += g * stride
    byte = np.arange(tm.elem_bytes, dtype=np.int64)
    shared = dst + index[:, None] * tm.elem_bytes + byte  # (elements, bytes)
    return (
        swizzled_address(shared, tm.swizzle).reshape(-1),
        (source[:, None] + byte),
        inside,
        n * tm.elem_bytes,
    )


@TABLE.entry("tirx.ptx.cp_async_bulk_tensor_g2s_cluster")
def _bulk_tensor_load(m: Machine, call: Any) -> None:
    """``cp.async.bulk.tensor.{1-5}d.shared::cluster.global{.tile}.mbarrier::complete_tx::
    bytes [dstMem], [tensorMap, {c0, ...}], [mbar]`` (PTX ISA 9.7.9.25.5.1, sm_90): each
    executing thread starts the copy of one box of the tensor map's tensor, at coordinates
    ``c`` (dimension 0 first; elements outside the tensor are zeros), to ``dstMem``
    (128-byte aligned) laid out box row after box row, swizzled by the map's mode on the
    shared address bits; the copy performs a complete-tx of the box's bytes on ``mbar``'s
    current phase and lands when that phase completes. In one CTA its ``shared::cluster``
    addresses are the CTA's own shared addresses. ``.multicast::cluster`` (a trailing
    16-bit ``ctaMask``) copies the box into every CTA of the cluster whose rank's bit is
    set, at dstMem's offset in its shared memory, and performs the complete-tx on the
    mbarrier at mbar's offset in that CTA. Cache hints, im2col and gather4 are not
    modeled (an error naming them)."""
    parsed, guard = guarded_ptx_operands(call, "cp.async.bulk.tensor")
    if guard is not None:
        raise NotModeled("cp.async.bulk.tensor under a guard predicate")
    tokens = [t for t in parsed.tokens if t]
    what = ".".join(["cp", *tokens])
    dims = [t for t in tokens if t.endswith("d") and t[:-1].isdigit()]
    unknown = set(tokens) - _TOKENS - {_COMPLETE_TX, _MULTICAST, *dims}
    if unknown or _COMPLETE_TX not in tokens or len(dims) != 1:
        raise NotModeled(f"{what}: only the .tile load completing on an mbarrier is modeled")
    rank = int(dims[0][:-1])
    operands = list(parsed.operands)
    mask_node = operands.pop() if _MULTICAST in tokens else None
    dst_node, map_node, *coord_nodes, bar_node = operands
    if len(coord_nodes) != rank:
        raise SimError(f"{what}: {len(coord_nodes)} coordinates for a {rank}d copy")
    tm = _tensor_map(m, map_node, what)
    if len(tm.dims) != rank:
        raise SimError(f"{what}: the tensor map {tm.name} has rank {len(tm.dims)}, not {rank}")
    dst = _shared_window(m, dst_node, what, "dstMem")
    bar_ptr = _shared_window(m, bar_node, what, "mbar")
    threads = m.active_threads()
    coords = [m.per_thread(np.asarray(m.eval(c)).astype(np.int64)) for c in coord_nodes]
    dst_off = m.per_thread(dst.offsets)
    bar_off = m.per_thread(bar_ptr.offsets)
    masks = None
    if mask_node is not None:
        masks = m.per_thread(np.asarray(m.eval(mask_node)).astype(np.int64))
        masks = masks & ((1 << CTA_MASK_BITS) - 1)
    for t in threads.tolist():
        coord = [int(c[t]) for c in coords]
        values = None
        for target in _targets(m, t, masks, what):
            one = np.array([t])
            at = _in_cta(m, dst.memory, int(dst_off[t]), t, target)
            if target is not None and bar_ptr.memory.window is not None:  # its own first
                bar_ptr.memory.check_window(one, bar_off[t : t + 1], 8, what)
            bar = m.asynchrony.barrier(
                m, bar_ptr.memory, _in_cta(m, bar_ptr.memory, int(bar_off[t]), t, target),
                one, what, remote=target is not None,
            )  # fmt: skip
            shared, source, inside, nbytes = _thread_box(
                tm, coord, at, dst, what, t, store=False, target=target
            )
            if values is None:  # the box is read from global memory once
                values = np.zeros(source.shape, dtype=np.uint8)
                if inside.any():
                    read = source[inside]
                    values[inside] = tm.memory.load(
                        np.full(read.shape[0], t), read[:, 0], tm.elem_bytes, m.clocks
                    )
                if tm.tf32:
                    values = round_tf32(values)
                m.counters.instructions["cp.async.bulk.tensor"] += 1
                m.counters.bytes["global.load"] += int(inside.sum()) * tm.elem_bytes
            _land_box(m, call, what, tm, dst, one, shared, source, inside, values, bar, nbytes)


def _targets(m: Machine, t: int, masks: np.ndarray | None, what: str) -> list[int | None]:
    """The CTAs thread ``t``'s copy lands in: its own (None) without multicast, else the
    ranks of ``ctaMask``'s set bits, each one a CTA of the cluster."""
    if masks is None:
        return [None]
    mask = int(masks[t])
    ranks = [r for r in range(CTA_MASK_BITS) if mask >> r & 1]
    if not ranks:
        raise SimError(f"{what} (thread {t}): ctaMask 0 names no CTA to copy to")
    if ranks[-1] >= m.cluster:
        raise SimError(
            f"{what} (thread {t}): ctaMask {mask:#x} names CTA rank {ranks[-1]}, but the "
            f"cluster has {m.cluster} CTA{'s' if m.cluster > 1 else ''}"
        )
    return ranks


def _in_cta(m: Machine, memory: Any, offset: int, t: int, target: int | None) -> int:
    """Byte ``offset`` of thread ``t``'s own window of ``memory``, in CTA ``target``'s."""
    if target is None or memory.window is None:
        return offset
    return offset + (target - int(m.rank(t))) * memory.window


def _land_box(
    m: Machine, call: Any, what: str, tm: TensorMapValue, dst: Pointer, one: np.ndarray,
    shared: np.ndarray, source: np.ndarray, inside: np.ndarray, values: np.ndarray,
    bar: Any, nbytes: int,
) -> None:  # fmt: skip
    """Thread ``one``'s copy of a box into shared memory (``shared``: its bytes there),
    landing when the phase of ``bar`` it completes its bytes on completes."""
    t = int(one[0])
    cells = shared[None, :]
    agent = m.clocks.bulk_unit(t // 32)
    effect = Effect(
        "cp.async.bulk.tensor", what, issued_at(m, call), m.call, dst.memory, one,
        dst.memory.index(one, cells), values.reshape(1, -1),
        source=tm.memory, source_cells=source.reshape(1, -1),
        source_read=np.repeat(inside, tm.elem_bytes).reshape(1, -1),
        agent=agent, snapshot=m.clocks.issue(agent, [t // 32]),
    )  # fmt: skip
    # the copy's writes belong to the async proxy: ordered after what the issuing thread
    # knows, before only the waiters of the phase it completes
    dst.memory.track(one, cells, m.clocks, write=True, stamp=False, agents=np.array([agent]))
    m.asynchrony.issue_on_barrier(m, effect, bar, nbytes)
    m.counters.bytes["shared.store"] += nbytes


_STORE_TOKENS = {"async", "bulk", "tensor", "global", "shared::cta", "tile", "bulk_group"}
_REDUCE_OPS = {"add": np.add, "min": np.fmin, "max": np.fmax}


@TABLE.entry("tirx.ptx.cp_async_bulk_tensor_s2g", "tirx.ptx.cp_reduce_async_bulk_tensor")
def _bulk_tensor_store(m: Machine, call: Any) -> None:
    """``cp{.reduce}.async.bulk.tensor.{1-5}d.global.shared::cta{.op}.tile.bulk_group
    [tensorMap, {c0, ...}], [srcMem]`` (PTX ISA 9.7.9.25.5.2, sm_90): each executing thread
    starts the copy of one box from ``srcMem`` (128-byte aligned, laid out and swizzled as
    a load's box) to the tensor at coordinates ``c``; elements outside the tensor are not
    written. ``.reduce`` combines each element with the tensor's: ``.add`` (rounded to
    nearest in the element type), ``.min``, ``.max``. The shared bytes are read by the
    async proxy (a plain store to them needs fence.proxy.async before the copy); the copy
    joins the thread's bulk async-group, whose ``wait_group.read`` completes its reads and
    ``wait_group`` the whole copy."""
    reduce = call.op.name.endswith("cp_reduce_async_bulk_tensor")
    parsed = plain_ptx_operands(call, "cp.async.bulk.tensor")
    tokens = [t for t in parsed.tokens if t]
    what = ".".join(["cp", *tokens])
    dims = [t for t in tokens if t.endswith("d") and t[:-1].isdigit()]
    ops = [t for t in tokens if t in _REDUCE_OPS]
    allowed = _STORE_TOKENS | set(dims) | set(ops) | ({"reduce"} if reduce else set())
    if set(tokens) - allowed or len(dims) != 1 or (reduce and len(ops) != 1):
        raise NotModeled(f"{what}: the .tile store (and .add/.min/.max reduce) is modeled")
    rank = int(dims[0][:-1])
    map_node, *coord_nodes, src_node = parsed.operands
    if len(coord_nodes) != rank:
        raise SimError(f"{what}: {len(coord_nodes)} coordinates for a {rank}d copy")
    tm = _tensor_map(m, map_node, what)
    if len(tm.dims) != rank:
        raise SimError(f"{what}: the tensor map {tm.name} has rank {len(tm.dims)}, not {rank}")
    src = _shared_window(m, src_node, what, "srcMem")
    threads = m.active_threads()
    coords = [m.per_thread(np.asarray(m.eval(c)).astype(np.int64)) for c in coord_nodes]
    src_off = m.per_thread(src.offsets)
    combine = _combine(tm, ops[0], what) if reduce else None
    for t in threads.tolist():
        one = np.array([t])
        shared, dest, inside, nbytes = _thread_box(
            tm, [int(c[t]) for c in coords], int(src_off[t]), src, what, t, store=True
        )
        agent = m.clocks.bulk_unit(t // 32)
        snapshot = m.clocks.issue(agent, [t // 32])
        raw = src.memory.load(
            np.full(shared.size, t), shared, 1, m.clocks, np.full(shared.size, agent)
        ).reshape(dest.shape)  # the async proxy reads the box now; busy until the group's read
        cells = dest[inside].reshape(1, -1)
        effect = Effect(
            "cp.async.bulk", what, issued_at(m, call), m.call, tm.memory, one,
            tm.memory.index(one, cells), raw[inside].reshape(1, -1),
            group=m.asynchrony.open_groups(m, one, "cp.async.bulk"),
            source=src.memory, source_cells=shared[None, :],
            source_read=np.ones((1, shared.size), dtype=bool),
            agent=agent, snapshot=snapshot, combine=combine,
        )  # fmt: skip
        m.asynchrony.issue(m, effect)
        m.counters.instructions[
            "cp.reduce.async.bulk.tensor" if reduce else "cp.async.bulk.tensor.store"
        ] += 1
        m.counters.bytes["shared.load"] += nbytes
        m.counters.bytes["global.store"] += int(inside.sum()) * tm.elem_bytes


def _combine(tm: TensorMapValue, op: str, what: str):
    """A reduction's landing: the tensor's element ``op`` the box's, in the element type
    (a float sum rounded once to nearest even)."""
    dtype = parse_dtype(tm.dtype)[0]
    if op != "add" and is_float(dtype) and dtype.itemsize == 4:
        raise SimError(f"{what}: .{op} does not take float32 elements (PTX ISA)")
    size = tm.elem_bytes

    def combine(old: np.ndarray, new: np.ndarray) -> np.ndarray:
        a = np.ascontiguousarray(old).reshape(-1, size).view(dtype)
        b = np.ascontiguousarray(new).reshape(-1, size).view(dtype)
        with np.errstate(over="ignore", invalid="ignore"):
            if is_float(dtype):  # exact in float64, rounded once
                out = cast(_REDUCE_OPS[op](a.astype(np.float64), b.astype(np.float64)), dtype)
            else:
                out = _REDUCE_OPS[op](a, b).astype(dtype)
        return np.ascontiguousarray(out).view(np.uint8).reshape(old.shape)

    return combine


@TABLE.entry("tirx.ptx.prefetch")
def _prefetch(m: Machine, call: Any) -> None:
    """``prefetch{.space}.level [a]`` and ``prefetch{.tensormap_space}.tensormap [a]`` (PTX
    ISA 9.7.9.15): bring the line at ``a``, or the tensor map at ``a``, into a cache. No
    effect on memory, on the memory consistency model or on the thread: counted. The
    ``.tensormap`` form's operand must name a tensor map parameter (generic addressing,
    as a kernel's ``__grid_constant__`` descriptor is read)."""
    tokens = [t.value for t in call.args[1:] if isinstance(getattr(t, "value", None), str)]
    if "tensormap" in tokens:
        _tensor_map(m, call.args[0], "prefetch.tensormap")
        m.counters.instructions["prefetch.tensormap"] += len(m.warps())
    else:
        m.counters.instructions["prefetch"] += len(m.warps())


@TABLE.entry("tirx.ptx.cp_async_bulk_commit_group")
def _bulk_commit(m: Machine, call: Any) -> None:
    """``cp.async.bulk.commit_group`` (PTX ISA 9.7.9.25.6.1): the executing thread's bulk
    async operations not yet in a group (TMA stores) become one bulk async-group (an
    empty one if none)."""
    m.asynchrony.commit(m, m.active_threads(), "cp.async.bulk")
    m.counters.instructions["cp.async.bulk.commit_group"] += len(m.warps())


@TABLE.entry("tirx.ptx.cp_async_bulk_wait_group")
def _bulk_wait(m: Machine, call: Any) -> None:
    """``cp.async.bulk.wait_group{.read} N`` (PTX ISA 9.7.9.25.6.2): the executing thread
    waits until at most ``N`` of its most recent bulk async-groups are pending: with
    ``.read``, only their reads of the source are done (it may be written again), else
    the whole operations (the destination may be read); the thread is ordered after what
    they completed."""
    parsed = plain_ptx_operands(call, "cp.async.bulk.wait_group")
    tokens = [t for t in parsed.tokens if t]
    if not parsed.operands:
        raise SimError(f"cp.async.bulk.wait_group without N: {call}")
    n = int(np.asarray(m.eval(parsed.operands[0])).flat[0])
    reads = "read" in tokens
    m.asynchrony.wait_groups(m, m.active_threads(), n, "cp.async.bulk", reads=reads)
    m.counters.instructions[f"cp.async.bulk.wait_group{'.read' if reads else ''}"] += len(m.warps())


_S2C_TOKENS = {"async", "bulk", "shared::cluster", "shared::cta", _COMPLETE_TX}


@TABLE.entry("tirx.ptx.cp_async_bulk_s2c")
def _bulk_shared_to_cluster(m: Machine, call: Any) -> None:
    """``cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [dstMem],
    [srcMem], size, [mbar]`` (PTX ISA 9.7.9.25.4.1, sm_90): each executing thread starts
    the copy of ``size`` bytes (a multiple of 16; both addresses 16-byte aligned) from
    ``srcMem``, its own CTA's shared memory, to ``dstMem``, a ``.shared::cluster``
    address (another CTA's shared memory through ``mapa``), and performs a complete-tx of
    ``size`` bytes on the mbarrier at ``mbar``, a ``.shared::cluster`` address in the
    CTA of ``dstMem``. The source is read by the async proxy (a plain write to it needs
    ``fence.proxy.async`` first); the bytes land when that phase completes, and until then
    a write over the source or the destination is an error naming the copy."""
    parsed, guard = guarded_ptx_operands(call, "cp.async.bulk")
    tokens = [t for t in parsed.tokens if t]
    what = ".".join(["cp", *tokens])
    if guard is not None or set(tokens) != _S2C_TOKENS or len(parsed.operands) != 4:
        raise NotModeled(f"{what}: the simulator models {'.'.join(['cp', *sorted(_S2C_TOKENS)])}")
    dst_node, src_node, size_node, bar_node = parsed.operands
    dst = cluster_address(m, dst_node, what)
    bar_ptr = cluster_address(m, bar_node, what)
    src = _shared_window(m, src_node, what, "srcMem")
    sizes = m.per_thread(np.asarray(m.eval(size_node)).astype(np.int64))
    dst_off, src_off = m.per_thread(dst.offsets), m.per_thread(src.offsets)
    bar_off = m.per_thread(bar_ptr.offsets)
    for t in m.active_threads().tolist():
        size, d, s, b = int(sizes[t]), int(dst_off[t]), int(src_off[t]), int(bar_off[t])
        if size <= 0 or size % BULK_ALIGN or d % BULK_ALIGN or s % BULK_ALIGN:
            raise SimError(
                f"{what} (thread {t}): size {size} bytes from srcMem byte {s} to dstMem byte "
                f"{d}; the size and both addresses must be multiples of {BULK_ALIGN}"
            )
        window = dst.memory.window
        target = d // window if window is not None else 0
        if window is not None and b // bar_ptr.memory.window != target:
            raise SimError(
                f"{what} (thread {t}): dstMem lies in the CTA of rank {target} and mbar in "
                f"the CTA of rank {b // bar_ptr.memory.window}; the copy completes its bytes "
                "on an mbarrier of the destination CTA"
            )
        one = np.array([t])
        bar = m.asynchrony.barrier(m, bar_ptr.memory, b, one, what, remote=True)
        ranks = None if window is None else np.full(size, target)
        cells = dst.memory.cells(np.full(size, t), d + np.arange(size), 1, what, ranks)[:, 0]
        read = s + np.arange(size)
        agent = m.clocks.bulk_unit(t // 32)
        snapshot = m.clocks.issue(agent, [t // 32])  # ordered after what the issuer knows
        values = src.memory.load(np.full(size, t), read, 1, m.clocks, np.full(size, agent))
        effect = Effect(
            "cp.async.bulk.shared::cluster", what, issued_at(m, call), m.call, dst.memory, one,
            dst.memory.index(one, cells[None, :]), values.reshape(1, -1),
            source=src.memory, source_cells=read[None, :],
            source_read=np.ones((1, size), dtype=bool),
            agent=agent, snapshot=snapshot,
        )  # fmt: skip
        dst.memory.track(one, cells[None, :], m.clocks, write=True, stamp=False,
                         agents=np.array([agent]))  # fmt: skip
        m.asynchrony.issue_on_barrier(m, effect, bar, size)
        m.counters.instructions["cp.async.bulk.shared::cluster"] += 1
        m.counters.bytes["shared.load"] += size
        m.counters.bytes["shared.store"] += size
