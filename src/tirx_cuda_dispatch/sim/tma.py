"""The Tensor Memory Accelerator's loads: ``cp.async.bulk.tensor`` global -> shared with
completion on an mbarrier (PTX ISA 9.7.9.25.5.1), and the tensor maps they read.

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
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .asynchrony import Effect
from .calls import Table, guarded_ptx_operands, issued_at
from .errors import NotModeled, SimError
from .interpreter import Machine
from .memory import swizzled_address
from .values import Pointer, TensorMapValue

TABLE = Table()

SHARED_ALIGN = 128  # dstMem of a tensor copy
_TOKENS = {"async", "bulk", "tensor", "shared::cluster", "global", "tile"}
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
    addresses are the CTA's own shared addresses. Multicast, cache hints, im2col and
    gather4 are not modeled (an error naming them)."""
    parsed, guard = guarded_ptx_operands(call, "cp.async.bulk.tensor")
    if guard is not None:
        raise NotModeled("cp.async.bulk.tensor under a guard predicate")
    tokens = [t for t in parsed.tokens if t]
    what = ".".join(["cp", *tokens])
    dims = [t for t in tokens if t.endswith("d") and t[:-1].isdigit()]
    unknown = set(tokens) - _TOKENS - {_COMPLETE_TX, *dims}
    if unknown or _COMPLETE_TX not in tokens or len(dims) != 1:
        raise NotModeled(f"{what}: only the .tile load completing on an mbarrier is modeled")
    rank = int(dims[0][:-1])
    dst_node, map_node, *coord_nodes, bar_node = parsed.operands
    if len(coord_nodes) != rank:
        raise SimError(f"{what}: {len(coord_nodes)} coordinates for a {rank}d copy")
    tm = _tensor_map(m, map_node, what)
    if len(tm.dims) != rank:
        raise SimError(f"{what}: the tensor map {tm.name} has rank {len(tm.dims)}, not {rank}")
    dst = _shared_window(m, dst_node, what, "dstMem")
    bar_ptr = _shared_window(m, bar_node, what, "mbar")
    threads = m._active_threads()
    coords = [m.per_thread(np.asarray(m.eval(c)).astype(np.int64)) for c in coord_nodes]
    dst_off = m.per_thread(dst.offsets)
    bar_off = m.per_thread(bar_ptr.offsets)
    for t in threads.tolist():
        start = int(dst_off[t])
        if start % SHARED_ALIGN:
            raise SimError(
                f"misaligned {what}: dstMem is byte {start} of shared {dst.memory.name} "
                f"(thread {t}); a tensor copy's shared address is 128-byte aligned"
            )
        one = np.array([t])
        bar = m.asynchrony.barrier(m, bar_ptr.memory, int(bar_off[t]), one, what)
        shared, source, inside, nbytes = box_copy(tm, [int(c[t]) for c in coords], start)
        if shared.max() >= dst.memory.nbytes:
            raise SimError(
                f"{what} (thread {t}) writes past the {dst.memory.nbytes} bytes of shared "
                f"{dst.memory.name}: its box of {nbytes} bytes starts at byte {start}"
            )
        cells = shared[None, :]
        values = np.zeros(source.shape, dtype=np.uint8)
        if inside.any():
            read = source[inside]
            values[inside] = tm.memory.load(
                np.full(read.shape[0], t), read[:, 0], tm.elem_bytes, m.clocks
            )
        effect = Effect(
            "cp.async.bulk.tensor", what, issued_at(m, call), m.call, dst.memory, one,
            dst.memory.index(one, cells), values.reshape(1, -1),
            source=tm.memory, source_cells=source.reshape(1, -1),
            source_read=np.repeat(inside, tm.elem_bytes).reshape(1, -1),
        )  # fmt: skip
        dst.memory.track(one, cells, m.clocks, write=True, stamp=False)
        m.asynchrony.issue_on_barrier(m, effect, bar, nbytes)
        m.counters.instructions["cp.async.bulk.tensor"] += 1
        m.counters.bytes["global.load"] += int(inside.sum()) * tm.elem_bytes
        m.counters.bytes["shared.store"] += nbytes
