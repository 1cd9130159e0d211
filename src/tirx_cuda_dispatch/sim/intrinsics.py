"""CUDA built-ins, addresses, barriers and math: the calls of a lowered kernel that are
not PTX table instructions (:mod:`.ptx`) or generated helpers (:mod:`.helpers`).

Each entry's docstring is its meaning, with the CUDA / PTX ISA section it comes from.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np

from .calls import Instruction, Table
from .errors import NotModeled, SimError
from .interpreter import Machine
from .numerics import cast, fma, from_bits, parse_dtype
from .values import Pointer

TABLE = Table()


# -- addresses -----------------------------------------------------------------------------
@TABLE.entry("tirx.address_of")
def _address_of(m: Machine, call: Any) -> Pointer:
    """``&buf[i]``: the address of a buffer element, a pointer to the element's type (C
    pointer arithmetic on it counts such elements)."""
    load = call.args[0]
    if type(load).__name__ != "TensorLoad":
        raise SimError(f"address_of needs a buffer element, got {load}")
    b = m.bound(load.source)
    offsets, _ = m.address(b, load.indices)
    if offsets.ndim != 1:
        raise SimError(f"address_of a vector of addresses ({load})")
    dtype, lanes = parse_dtype(str(load.ty.dtype))
    return Pointer(b.pointer.memory, offsets, dtype.itemsize * lanes, b.pointer.shared_window)


@TABLE.entry("tirx.buffer_data")
def _buffer_data(m: Machine, call: Any) -> Pointer:
    """A buffer's data pointer, typed as a pointer to its element."""
    b = m.bound(call.args[0])
    return replace(b.pointer, elem_bytes=b.elem_bytes)


@TABLE.entry("tirx.cuda.cvta_generic_to_shared")
def _cvta_shared(m: Machine, call: Any) -> Pointer:
    """``__cvta_generic_to_shared`` (PTX ``cvta.to.shared``, PTX ISA "cvta"): the 32-bit
    shared-window address of a generic address of shared memory, which ``.shared``
    instructions take; an address of any other memory is an error."""
    ptr = m.eval(call.args[0])
    if not isinstance(ptr, Pointer) or ptr.memory.space != "shared":
        what = ptr.memory.space if isinstance(ptr, Pointer) else "a non-pointer"
        raise SimError(f"cvta.to.shared of {what} memory: only shared addresses convert")
    return Pointer(ptr.memory, ptr.offsets, 0, shared_window=True)


@TABLE.entry("tirx.ptx.addr")
def _ptx_addr(m: Machine, call: Any) -> Pointer:
    """A PTX address operand with an immediate, ``[a+imm]`` (PTX ISA "Addresses as Operands"; TVM's
    ``T.ptx.addr(base, byte_offset)``): ``imm`` bytes past the address ``a``."""
    base, offset = call.args
    ptr = m.eval(base)
    if not isinstance(ptr, Pointer):
        raise SimError(f"T.ptx.addr of a non-address {base}")
    return ptr.plus_bytes(m.eval(offset).astype(np.int64))


@TABLE.entry("tirx.cuda.get_tmem_addr")
def _get_tmem_addr(m: Machine, call: Any) -> np.ndarray:
    """Tensor-memory address arithmetic (TVM's ``get_tmem_addr(addr, row, col)``; an
    address is ``lane << 16 | column``, PTX ISA "Tensor Memory Addressing"): the lane field advances by
    ``row`` and the column field by ``col``, each modulo 2^16, without carrying into the
    other."""
    addr, row, col = (m.per_thread(m.eval(a)).astype(np.int64) for a in call.args)
    lane = (((addr >> 16) & 0xFFFF) + row) & 0xFFFF
    column = ((addr & 0xFFFF) + col) & 0xFFFF
    return ((lane << 16) | column).astype(np.uint32)


# -- synchronization and CUDA built-ins ----------------------------------------------------
@TABLE.entry("tirx.cuda.cta_sync", "tirx.tvm_storage_sync")
def _barrier(m: Machine, call: Any) -> None:
    """``__syncthreads()`` (PTX ``bar.sync 0``, PTX ISA "bar, barrier"): the thread waits
    until every thread of the CTA has arrived, which orders all their memory accesses;
    warps arrive whole (a diverged warp is an error), and warps that reach it from
    different code (another branch, another loop) meet there. ``tvm_storage_sync("warp")``
    is ``__syncwarp()``."""
    scope = call.args[0].value if call.args and type(call.args[0]).__name__ == "StringImm" else ""
    if scope in ("warp",):
        m.require_full_warps("__syncwarp")
        m.counters.instructions["bar.warp.sync"] += len(m.warps())
        return
    if scope not in ("", "shared", "shared.dyn", "global"):
        raise SimError(f"the simulator has no barrier for scope {scope!r}")
    active = np.broadcast_to(m.mask, m.tid.shape)
    for w in m.warps():
        lanes = active[w * 32 : (w + 1) * 32]
        if not lanes.all():
            idle = w * 32 + int(np.argmin(lanes))
            raise SimError(
                f"__syncthreads reached by warp {w} while thread {idle} of it is not there: "
                f"divergent barrier"
            )
    named_barrier(m, np.zeros(1, dtype=np.int64), None, "__syncthreads (bar.sync 0)")


@TABLE.entry("tirx.cuda.cluster_sync")
def _cluster_sync(m: Machine, call: Any) -> None:
    """TVM's ``T.cuda.cluster_sync()``: ``barrier.cluster.arrive.aligned`` then
    ``barrier.cluster.wait.aligned`` (PTX ISA 9.7.13.2, sm_90): every thread of the cluster
    arrives (with release: the default), and waits (with acquire) until all have, which
    orders all their memory accesses, shared memory of every CTA of the cluster included.
    A kernel launched without a cluster is a cluster of one CTA. The barrier counts
    threads: a warp whose threads reach it from two paths of the simulator's scheduling
    (one of them waited alone inside an ``if``, :mod:`.schedule`) arrives in two parts,
    where the GPU reconverges it first."""
    warps = m.warps()
    arrived = m.active_threads().size
    m.counters.instructions["barrier.cluster"] += len(warps)
    what = f"barrier.cluster.arrive/wait (all {m.threads} threads of the cluster)"
    wait = m.barriers.arrive("cluster", m.threads, warps, True, what, threads=arrived)
    if wait is not None:
        m.block([(wait, None)])


@TABLE.entry("tirx.cuda.warp_sync")
def _warp_sync(m: Machine, call: Any) -> None:
    """``__syncwarp()`` (PTX ``bar.warp.sync 0xffffffff``, PTX ISA "bar.warp.sync"): all 32 lanes
    of the warp must reach it (the full mask names them all); it orders the lanes' own
    accesses, which the simulator's per-warp race model already treats as ordered, and
    no other warp's."""
    mask = np.broadcast_to(m.mask, m.tid.shape)
    for w in m.warps():
        lanes = np.flatnonzero(mask[w * 32 : (w + 1) * 32])
        if lanes.size != mask[w * 32 : (w + 1) * 32].size:  # lanes never launched: exited
            raise SimError(
                f"__syncwarp() names all 32 lanes, but warp {w} reaches it with lanes "
                f"{lanes.min()}-{lanes.max()} only ({lanes.size}): the rest never arrive"
            )
    m.counters.instructions["bar.warp.sync"] += len(m.warps())


@TABLE.entry("tirx.cuda.warpgroup_sync")
def _warpgroup_sync(m: Machine, call: Any) -> None:
    """``bar.sync id, 128`` (PTX ISA "bar, barrier": ``barrier.sync.aligned``): named
    barrier ``id`` completes each time 128 threads have arrived and orders exactly those;
    warps arrive whole. Arrivals of one statement that fill more than one group of 128
    (two warpgroups on one id) complete in groups the arrival order picks, so the
    simulator orders none of them."""
    (bar_id,) = call.args
    named_barrier(m, m.per_thread(m.eval(bar_id)), 128, "bar.sync")


def named_barrier(
    m: Machine,
    ids: np.ndarray,
    count: Any,
    spelling: str,
    aligned: bool = True,
    sync: bool = True,
    votes: np.ndarray | None = None,
    deliver: Callable[[np.ndarray, int, int], None] | None = None,
    reduction: str = "",
) -> None:
    """The active warps arrive at named barriers (PTX ISA "bar, barrier";
    :class:`.barriers.NamedBarriers`): ``ids`` gives each thread's barrier (0-15, the same
    for a whole warp), ``count`` the threads each barrier waits for (per thread, or one
    number; ``None``: every thread of the CTA, as ``bar.sync a`` without ``b``). Warps
    arrive whole and count 32 threads each. With ``sync`` (``bar.sync``) the warps wait
    for the completion, which orders them after every arrival; ``bar.arrive`` does not
    wait. ``spelling`` is the instruction as errors name it. ``votes`` (``bar.red``): each
    thread's predicate; once a generation completes, ``deliver(threads, true votes, false
    votes)`` gives its reduction (``reduction``: popc, and, or) to the arriving ``threads``."""
    active = np.broadcast_to(m.mask, m.tid.shape)
    ids = m.per_thread(ids).astype(np.int64)
    counts = None if count is None else m.per_thread(np.asarray(count)).astype(np.int64)
    groups: dict[int, list[int]] = {}
    for w in m.warps():
        lanes = active[w * 32 : (w + 1) * 32]
        mine = ids[w * 32 : (w + 1) * 32][lanes]
        if (mine != mine[0]).any():
            raise SimError(
                f"{spelling}: the threads of warp {w} name different barriers "
                f"{sorted(set(mine.tolist()))}; a warp arrives at one"
            )
        if not lanes.all():
            if aligned:
                raise SimError(
                    f"{spelling} {mine[0]} is .sync.aligned, but warp {w} runs it diverged"
                )
            raise SimError(
                f"{spelling} {mine[0]}: warp {w} arrives diverged; the simulator counts "
                f"arrivals by whole warps"
            )
        groups.setdefault(int(mine[0]), []).append(w)
    waits = []
    per_cta = max(1, -(-m.cta_threads // 32))  # in a cluster, each CTA has barriers of its own
    by_cta: dict[tuple[int, int], list[int]] = {}
    for barrier, warps in groups.items():
        for w in warps:
            by_cta.setdefault((w // per_cta, barrier), []).append(w)
    for (cta, barrier), warps in by_cta.items():
        threads = np.concatenate([np.arange(w * 32, min((w + 1) * 32, m.threads)) for w in warps])
        if not 0 <= barrier < 16:
            raise SimError(f"{spelling} {barrier}: a CTA has barriers 0-15")
        if counts is None:
            expected = 32 * per_cta  # warps arrive whole
            what = f"{spelling} {barrier} (all {expected} threads of the CTA)"
        else:
            mine = counts[threads]
            if (mine != mine[0]).any():
                raise SimError(
                    f"{spelling} {barrier}: its threads give different thread counts "
                    f"{sorted(set(mine.tolist()))}"
                )
            expected = int(mine[0])
            what = f"{spelling} {barrier}, {expected}"
            if expected <= 0 or expected % 32:
                raise SimError(f"{what}: the thread count must be a positive multiple of 32")
        kind = "bar.red" if votes is not None else "bar.sync" if sync else "bar.arrive"
        m.counters.instructions[kind] += len(warps)
        key = barrier if m.cluster == 1 else (cta, barrier)
        if m.cluster > 1:
            what += f" of the CTA of rank {cta}"
        tally = None
        if votes is not None:  # the arriving threads' true and false votes
            true = int(np.count_nonzero(m.per_thread(votes)[threads]))
            tally = (reduction, true, len(threads) - true)
        give = None if deliver is None else functools.partial(deliver, threads)
        wait = m.barriers.arrive(key, expected, warps, sync, what, votes=tally, deliver=give)
        if wait is not None:
            mask = np.zeros(m.threads, dtype=bool)
            mask[threads] = True
            waits.append((wait, mask))
    m.block(waits)


# -- warp shuffles and votes (CUDA C++ Programming Guide "Warp Shuffle Functions", "Warp
# Vote Functions"; PTX ISA "shfl.sync", "vote.sync") --------------------------------------
def _first_of(bad: np.ndarray) -> tuple[int, int]:
    t, k = np.argwhere(bad)[0] if bad.ndim == 2 else (np.argmax(bad), 0)
    return int(t), int(k)


def _warp_members(m: Machine, mask: np.ndarray, what: str):
    """The ``.sync`` rule of a warp collective: every thread that runs it has its bit in
    ``mask``, every launched lane the mask names runs it too (here, in this statement),
    with the same mask. Returns (active, lane, base, named, other, launched): ``named[t,
    k]`` that thread t's mask names lane k of its warp, which is thread ``other[t, k]``."""
    active = np.broadcast_to(m.mask, m.tid.shape)
    lane = m.tid % 32
    base = m.tid - lane
    members = np.asarray(mask).astype(np.int64) & 0xFFFFFFFF
    rows = np.arange(m.threads)
    named = (members[:, None] >> np.arange(32)) & 1 == 1  # (thread, lane of its warp)
    other = base[:, None] + np.arange(32)  # the thread each lane is
    launched = other < m.threads  # a lane never launched has exited: not waited for
    other = np.minimum(other, m.threads - 1)
    waits = named & launched & active[:, None]
    outside = active & ~named[rows, lane]
    if outside.any():
        t, _ = _first_of(outside)
        raise SimError(
            f"thread {t} runs {what} without its bit in the mask {int(members[t]):#010x}"
        )
    absent = waits & ~active[other]
    if absent.any():
        t, k = _first_of(absent)
        raise SimError(
            f"{what}: thread {t}'s mask {int(members[t]):#010x} names lane {k} (thread "
            f"{int(other[t, k])}), which does not execute it: .sync waits for it forever"
        )
    differs = waits & (members[other] != members[:, None])
    if differs.any():
        t, k = _first_of(differs)
        raise SimError(
            f"{what}: thread {t} passes mask {int(members[t]):#010x} and lane {k} (thread "
            f"{int(other[t, k])}) of its mask passes {int(members[other[t, k]]):#010x}"
        )
    return active, lane, base, named, other, launched


def _shuffle(m: Machine, call: Any, what: str, source: Callable[..., np.ndarray]) -> np.ndarray:
    """``__shfl*_sync(mask, var, b, width)`` as PTX ``shfl.sync`` executes it: lane ``l``
    of a ``width``-lane segment (``width`` a power of two up to 32) reads ``var`` of lane
    ``source(l, b mod 32, first, width)`` (``first``: the segment's first lane), or
    keeps its own where that is -1 (the ISA's ``pval`` false). Every thread must have
    its bit in ``mask``; every launched lane the mask names must execute the call, with
    the same mask (``.sync`` waits for them: here, in this statement); the lane read
    must be active and in the mask."""
    mask, var, b, width = (m.per_thread(m.eval(a)) for a in call.args)
    active = np.broadcast_to(m.mask, m.tid.shape)
    w = np.asarray(width).astype(np.int64)
    bad_width = active & ((w < 1) | (w > 32) | (w & (w - 1) != 0))
    if bad_width.any():
        t = int(np.argmax(bad_width))
        raise SimError(f"{what}: width {int(w[t])} (thread {t}) is not a power of two up to 32")
    active, lane, base, named, other, launched = _warp_members(m, mask, what)
    first = lane & ~(w - 1)
    src = source(lane, np.asarray(b).astype(np.int64) & 31, first, w)
    src = np.where(src < 0, lane, src)
    rows = np.arange(m.threads)
    reads = active & (src != lane)
    unnamed = reads & ~named[rows, src]
    if unnamed.any():
        t, _ = _first_of(unnamed)
        raise SimError(f"{what}: thread {t} reads lane {int(src[t])}, which is not in its mask")
    idle = reads & ~(launched[rows, src] & active[other[rows, src]])
    if idle.any():
        t, _ = _first_of(idle)
        raise SimError(f"{what}: thread {t} reads lane {int(src[t])}, which is not active")
    words = -(-var.dtype.itemsize * (var.shape[1] if var.ndim > 1 else 1) // 4)
    m.counters.instructions["shfl.sync"] += len(m.warps()) * words
    return var[np.where(active, base + src, m.tid)]


def _ballot(m: Machine, call: Any, what: str) -> np.ndarray:
    """PTX ``vote.sync.ballot.b32 d, p, membermask``: each thread gets the 32-bit word whose
    bit k is lane k's predicate, for the lanes of ``membermask`` (0 for the others); the
    mask's ``.sync`` rule as the shuffles'."""
    mask, pred = (m.per_thread(m.eval(a)) for a in call.args)
    active, _, _, named, other, launched = _warp_members(m, mask, what)
    votes = named & launched & (np.asarray(pred)[other] != 0)
    m.counters.instructions["vote.sync"] += len(m.warps())
    word = (votes.astype(np.int64) << np.arange(32)).sum(axis=1)
    return np.where(active, word, 0)


@TABLE.entry("tirx.cuda.any_sync")
def _any_sync(m: Machine, call: Any) -> np.ndarray:
    """``__any_sync(mask, pred)`` (PTX ``vote.sync.any.pred``): 1 in every thread of the
    mask when any lane of the mask has ``pred`` nonzero, else 0 (int32); every lane of the
    mask must execute it, with the same mask."""
    return (_ballot(m, call, "__any_sync") != 0).astype(np.int32)


@TABLE.entry("tirx.cuda.ballot_sync")
def _ballot_sync(m: Machine, call: Any) -> np.ndarray:
    """``__ballot_sync(mask, pred)`` (PTX ``vote.sync.ballot.b32``): the word of the mask's
    lanes' predicates, bit k lane k's (uint32), the same in every lane of the mask."""
    return _ballot(m, call, "__ballot_sync").astype(np.uint32)


@TABLE.entry("tirx.cuda.__shfl_sync")
def _shfl(m: Machine, call: Any) -> np.ndarray:
    """``__shfl_sync(mask, var, lane, width)`` (PTX ``shfl.sync.idx``): each thread reads
    ``var`` of lane ``lane mod width`` of its ``width``-lane segment; the thread must be
    in ``mask``, every lane of the mask must execute it, and the source lane be active."""
    return _shuffle(m, call, "__shfl_sync", lambda lane, b, first, w: first | (b & (w - 1)))


@TABLE.entry("tirx.cuda.__shfl_xor_sync")
def _shfl_xor(m: Machine, call: Any) -> np.ndarray:
    """``__shfl_xor_sync(mask, var, lane_mask, width)`` (PTX ``shfl.sync.bfly``; CUDA
    Programming Guide "Warp Shuffle Functions"): each thread reads ``var`` of lane ``lane
    ^ lane_mask``; a lane past the end of its ``width``-lane segment keeps its own value
    (a lane of an earlier segment is read, as the guide says). The thread must be in
    ``mask``, every lane of the mask must execute it, and the source lane be active."""
    return _shuffle(
        m,
        call,
        "__shfl_xor_sync",
        lambda lane, b, first, w: np.where((lane ^ b) < first + w, lane ^ b, -1),
    )


@TABLE.entry("tirx.cuda.__shfl_up_sync")
def _shfl_up(m: Machine, call: Any) -> np.ndarray:
    """``__shfl_up_sync(mask, var, delta, width)`` (PTX ``shfl.sync.up``; CUDA Programming
    Guide "Warp Shuffle Functions"): each thread reads ``var`` of lane ``lane - delta``; a
    lane below the start of its ``width``-lane segment keeps its own value. The thread
    must be in ``mask``, every lane of the mask must execute it, and the source be active."""
    return _shuffle(
        m,
        call,
        "__shfl_up_sync",
        lambda lane, b, first, w: np.where(lane - b >= first, lane - b, -1),
    )


@TABLE.entry("tirx.cuda.__shfl_down_sync")
def _shfl_down(m: Machine, call: Any) -> np.ndarray:
    """``__shfl_down_sync(mask, var, delta, width)`` (PTX ``shfl.sync.down``; CUDA
    Programming Guide "Warp Shuffle Functions"): each thread reads ``var`` of lane ``lane +
    delta``; past the end of its ``width``-lane segment it keeps its own value. The thread
    must be in ``mask``, every lane of the mask must execute it, and the source be active."""
    return _shuffle(
        m,
        call,
        "__shfl_down_sync",
        lambda lane, b, first, w: np.where(lane + b < first + w, lane + b, -1),
    )


_WARP_REDUCE_STEPS = {"sum": np.add, "max": np.fmax, "min": np.fmin}


@TABLE.entry("tirx.cuda.warp_reduce")
def _warp_reduce(m: Machine, call: Any) -> np.ndarray:
    """TVM's ``T.cuda.warp_reduce(value, op, width)``, which its CUDA codegen emits as the
    helper ``tvm_builtin_cuda_warp_reduce_<op>_<width>``: for ``mask`` = width / 2, ...,
    1 each lane reads ``__shfl_xor_sync(0xffffffff, val, mask)`` and combines it with its
    own in the value's type (``val += shuffled``, ``max``, ``min``). The full mask: every
    lane of the warp must execute it."""
    value = m.per_thread(m.eval(call.args[0]))
    op, width = str(call.args[1].value), int(call.args[2])
    if op not in _WARP_REDUCE_STEPS or width not in (2, 4, 8, 16, 32):
        raise SimError(f"warp_reduce({op!r}, width {width}): sum/max/min over 2-32 lanes")
    active = np.broadcast_to(m.mask, m.tid.shape)
    lane, base = m.tid % 32, m.tid - m.tid % 32
    for w in np.unique(m.tid[active] // 32):
        threads = np.arange(w * 32, w * 32 + 32)
        if threads[-1] >= m.threads or not active[threads].all():
            raise SimError(
                f"warp_reduce in warp {int(w)}: not every lane of the warp executes it, and "
                "its shuffles name all 32 (mask 0xffffffff): .sync waits forever"
            )
    val, step = value.copy(), width // 2
    while step:
        partner = base + (lane ^ step)
        with np.errstate(all="ignore"):
            val = _WARP_REDUCE_STEPS[op](val, val[partner]).astype(value.dtype, copy=False)
        m.counters.instructions["shfl.sync"] += len(m.warps())
        step //= 2
    return val


@TABLE.entry("tirx.cuda.__activemask")
def _activemask(m: Machine, call: Any) -> np.ndarray:
    """``__activemask()`` (PTX ``activemask.b32``; CUDA Programming Guide "Warp Vote
    Functions"): in each thread, one bit per lane of its warp that executes the call with
    it. The simulator runs a warp's active lanes in lockstep, so that is every one of them
    (a diverged warp on the GPU may report fewer: the guide promises no convergence)."""
    active = np.broadcast_to(m.mask, m.tid.shape)
    warp = m.tid // 32
    bits = np.where(active, np.left_shift(np.uint32(1), (m.tid % 32).astype(np.uint32)), 0)
    lanes = np.zeros(int(warp.max()) + 1, dtype=np.uint32)
    np.bitwise_or.at(lanes, warp, bits.astype(np.uint32))
    m.counters.instructions["activemask"] += len(m.warps())
    return lanes[warp]


@TABLE.entry("tirx.cuda.thread_rank")
def _thread_rank(m: Machine, call: Any) -> np.ndarray:
    """``cooperative_groups::this_thread_block().thread_rank()`` (CUDA C++ Programming
    Guide "Thread Block Group"): the thread's linear index in its CTA (``threadIdx.x``
    for the one-dimensional blocks the simulator launches)."""
    return m.tid.astype(np.int32)


@TABLE.entry("tirx.cuda.trap_when_assert_failed")
def _trap(m: Machine, call: Any) -> None:
    """``__trap()`` when the condition is false: the kernel aborts (an error here)."""
    cond = m.per_thread(m.eval(call.args[0])).astype(bool)
    if not cond[m.mask if m.mask.size > 1 else slice(None)].all():
        raise SimError(f"the kernel traps: {call.args[0]} is false")


@TABLE.entry("prim.likely")
def _likely(m: Machine, call: Any) -> Any:
    """A branch hint: the value of its argument."""
    return m.eval(call.args[0])


@TABLE.entry("prim.if_then_else")
def _if_then_else(m: Machine, call: Any) -> np.ndarray:
    """``c ? a : b`` evaluating only the side each thread takes (its loads included)."""
    cond = m.per_thread(m.eval(call.args[0])).astype(bool)
    saved = m.mask
    try:
        m.mask = np.broadcast_to(saved, cond.shape) & cond
        yes = m.per_thread(m.eval(call.args[1])) if m.mask.any() else None
        m.mask = np.broadcast_to(saved, cond.shape) & ~cond
        no = m.per_thread(m.eval(call.args[2])) if m.mask.any() else None
    finally:
        m.mask = saved
    if yes is None:
        return no
    if no is None:
        return yes
    c = cond.reshape(cond.shape + (1,) * (yes.ndim - 1))
    return np.where(c, yes, no)


@TABLE.entry("tirx.reinterpret")
def _reinterpret(m: Machine, call: Any) -> np.ndarray:
    """The same bits as another type of the same size."""
    dtype, lanes = parse_dtype(str(call.ty.dtype))
    value = np.ascontiguousarray(m.per_thread(m.eval(call.args[0])))
    if value.dtype.itemsize * (value.shape[1] if value.ndim > 1 else 1) != dtype.itemsize * lanes:
        raise SimError(f"reinterpret {value.dtype} as {call.ty.dtype}: sizes differ")
    raw = value.view(np.uint8).reshape(m.threads, -1)
    return from_bits(raw, dtype, lanes)


# -- math -------------------------------------------------------------------------------------
def _rounded(fn: Callable[[np.ndarray], np.ndarray]) -> Callable[..., np.ndarray]:
    """Correctly rounded in the argument's dtype: computed in float64, rounded once (for
    float16/bfloat16/float32 the float64 result of sqrt is already correctly rounded when
    narrowed, as 53 >= 2p+2). Approximate hardware functions (``exp``, ``log2``: MUFU)
    differ from this by an ulp or two; tests of those ops compare with a tolerance."""

    def compute(*values: np.ndarray) -> np.ndarray:
        dtype = values[0].dtype
        with np.errstate(all="ignore"):
            out = fn(*(v.astype(np.float64) for v in values))
        return cast(out, dtype)

    return compute


_MATH = {
    "tirx.exp": _rounded(np.exp),
    "tirx.exp2": _rounded(np.exp2),
    "tirx.exp10": _rounded(lambda x: np.power(10.0, x)),
    "tirx.log": _rounded(np.log),
    "prim.log2": _rounded(np.log2),
    "tirx.log10": _rounded(np.log10),
    "tirx.sqrt": _rounded(np.sqrt),
    "tirx.rsqrt": _rounded(lambda x: 1.0 / np.sqrt(x)),
    "tirx.fabs": _rounded(np.abs),
    "tirx.tanh": _rounded(np.tanh),
    "tirx.sigmoid": _rounded(lambda x: 1.0 / (1.0 + np.exp(-x))),
    "tirx.floor": _rounded(np.floor),
    "prim.ceil": _rounded(np.ceil),
}

# CUDA's math functions by name: the IEEE correctly rounded intrinsics the elementwise
# variant calls, and the functions TVM's codegen picks for T.exp & co. per dtype (``expf``,
# ``hexp``...; approximations on the GPU, correctly rounded here).
_EXTERNS = {
    **{
        f"{name}f": _rounded(fn)
        for name, fn in (
            ("exp", np.exp),
            ("exp2", np.exp2),
            ("log", np.log),
            ("log2", np.log2),
            ("sqrt", np.sqrt),
            ("tanh", np.tanh),
            ("fabs", np.abs),
        )
    },
    **{
        f"h{name}": _rounded(fn)
        for name, fn in (
            ("exp", np.exp),
            ("exp2", np.exp2),
            ("log", np.log),
            ("log2", np.log2),
            ("sqrt", np.sqrt),
            ("rsqrt", lambda x: 1.0 / np.sqrt(x)),
        )
    },
    "__fsqrt_rn": _rounded(np.sqrt),
    "__dsqrt_rn": np.sqrt,
    "__fdiv_rn": lambda a, b: np.divide(a, b),
    "__ddiv_rn": lambda a, b: np.divide(a, b),
    "__frcp_rn": lambda a: np.divide(np.ones_like(a), a),
    "__drcp_rn": lambda a: np.divide(np.ones_like(a), a),
    "__fmaf_rn": lambda a, b, c: fma(a, b, c, np.dtype(np.float32)),
}


# the counter names of what the GPU approximates and the simulator rounds correctly: the
# functions above (TVM compiles with --use_fast_math: sqrtf, 1/x and x/y in float32 are
# approximations within about 2 ulps; expf & co. MUFU approximations whose error grows
# with the argument) and a float32 ``/`` (``div.f32``, counted by the interpreter); where
# a kernel ran one, its bits may differ from the GPU's
APPROXIMATE = frozenset(
    {
        name.split(".", 1)[1]
        for name in _MATH
        if name not in ("tirx.fabs", "tirx.floor", "prim.ceil")
    }
    | {name for name in _EXTERNS if not name.startswith("__") and name != "fabsf"}
    | {"div.f32"}
)


def _math_call(name: str, fn: Callable[..., np.ndarray]) -> Instruction:
    def run(m: Machine, call: Any) -> np.ndarray:
        values = [m.per_thread(m.eval(a)) for a in call.args]
        m.counters.instructions[name.split(".", 1)[1]] += len(m.warps())
        with np.errstate(all="ignore"):
            return np.asarray(fn(*values)).astype(parse_dtype(str(call.ty.dtype))[0])

    short = name.split(".", 1)[1]
    meaning = f"TIR's {short}, correctly rounded in the argument's dtype (CUDA: an approximation)"
    return Instruction(name, meaning, run)


for _name, _fn in _MATH.items():
    TABLE.add(_math_call(_name, _fn))


@TABLE.entry("tirx.call_pure_extern", "tirx.call_extern")
def _extern(m: Machine, call: Any) -> np.ndarray:
    """A CUDA math function by name (``expf``, ``hexp``, ``__fsqrt_rn``, ...): the IEEE
    ``_rn`` intrinsics exactly, the others correctly rounded (approximations on the GPU);
    a name not in the simulator's list is an error."""
    name = call.args[0].value
    fn = _EXTERNS.get(name)
    if fn is None:
        raise NotModeled(f"the simulator does not know the extern function {name}")
    values = [m.per_thread(m.eval(a)) for a in call.args[1:]]
    m.counters.instructions[name] += len(m.warps())
    with np.errstate(all="ignore"):
        return np.asarray(fn(*values)).astype(parse_dtype(str(call.ty.dtype))[0])
