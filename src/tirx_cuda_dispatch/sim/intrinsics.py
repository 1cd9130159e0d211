"""CUDA built-ins, addresses, barriers and math: the calls of a lowered kernel that are
not PTX table instructions (:mod:`.ptx`) or generated helpers (:mod:`.helpers`).

Each entry's docstring is its meaning, with the CUDA / PTX ISA section it comes from.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np

from .calls import Instruction, Table
from .errors import SimError
from .interpreter import Machine
from .numerics import cast, from_bits, parse_dtype
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
    b = m._bound(load.source)
    offsets, _ = m._address(b, load.indices)
    if offsets.ndim != 1:
        raise SimError(f"address_of a vector of addresses ({load})")
    dtype, lanes = parse_dtype(str(load.ty.dtype))
    return Pointer(b.pointer.memory, offsets, dtype.itemsize * lanes, b.pointer.shared_window)


@TABLE.entry("tirx.buffer_data")
def _buffer_data(m: Machine, call: Any) -> Pointer:
    """A buffer's data pointer, typed as a pointer to its element."""
    b = m._bound(call.args[0])
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
    """``__syncthreads()`` (PTX ``bar.sync 0``, PTX ISA "bar, barrier"): every thread of the CTA
    waits for all the others, which orders all their memory accesses; reaching it in
    divergent code is an error. ``tvm_storage_sync("warp")`` is ``__syncwarp()``."""
    scope = call.args[0].value if call.args and type(call.args[0]).__name__ == "StringImm" else ""
    if scope in ("warp",):
        m.require_full_warps("__syncwarp")
        m.counters.instructions["bar.warp.sync"] += len(m.warps())
        return
    if scope not in ("", "shared", "shared.dyn", "global"):
        raise SimError(f"the simulator has no barrier for scope {scope!r}")
    if not np.all(m.mask):
        idle = int(np.argmin(m.mask))
        raise SimError(f"__syncthreads reached while thread {idle} is not there: divergent barrier")
    m.counters.instructions["bar.sync"] += len(m.warps())
    m.clocks.barrier(range(m.clocks.warps))


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
    warps arrive whole. 128 arriving together are ordered with each other; a larger
    multiple of 128 (two warpgroups on one id) completes in groups the arrival order
    picks, so the simulator orders none of them; a count that is no multiple of 128
    leaves the last arrivals waiting forever (an error)."""
    (bar_id,) = call.args
    barrier = int(np.asarray(m.eval(bar_id)).ravel()[0])
    m.require_full_warps(f"bar.sync {barrier}, 128")
    warps = m.warps()
    arrived = 32 * len(warps)
    if arrived % 128:
        raise SimError(
            f"bar.sync {barrier}, 128 reached by {arrived} threads (warps {warps}): the "
            f"last {arrived % 128} wait for the rest of a group of 128 forever"
        )
    m.counters.instructions["bar.sync"] += len(warps)
    if arrived == 128:
        m.clocks.barrier(warps)


@TABLE.entry("tirx.cuda.__shfl_sync")
def _shfl(m: Machine, call: Any) -> np.ndarray:
    """``__shfl_sync(mask, var, lane, width)`` (PTX ``shfl.sync.idx``): each thread reads
    ``var`` of lane ``lane`` within its ``width``-lane segment; the thread must be in
    ``mask`` and the source lane active."""
    mask, var, lane, width = (m.per_thread(m.eval(a)) for a in call.args)
    w = int(width[0])
    src = (m.tid & ~(w - 1)) + (lane.astype(np.int64) & (w - 1))
    members = np.asarray(mask).astype(np.uint64)
    active = m._active_threads()
    for t in active:
        if not (int(members[t]) >> (t % 32)) & 1:
            raise SimError(f"thread {t} runs __shfl_sync without its bit in the mask")
        s = int(src[t])
        if not m.mask.reshape(-1)[s if m.mask.size > 1 else 0]:
            raise SimError(f"__shfl_sync: thread {t} reads lane {s % 32}, which is not active")
    m.counters.instructions["shfl.sync"] += len(m.warps())
    return var[src]


@TABLE.entry("tirx.cuda.trap_when_assert_failed")
def _trap(m: Machine, call: Any) -> None:
    """``__trap()`` when the condition is false: the kernel aborts (an error here)."""
    cond = m.per_thread(m.eval(call.args[0])).astype(bool)
    if not cond[m.mask if m.mask.size > 1 else slice(None)].all():
        raise SimError(f"the kernel traps: {call.args[0]} is false")


@TABLE.entry("tirx.likely")
def _likely(m: Machine, call: Any) -> Any:
    """A branch hint: the value of its argument."""
    return m.eval(call.args[0])


@TABLE.entry("tirx.if_then_else")
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
    "tirx.log2": _rounded(np.log2),
    "tirx.log10": _rounded(np.log10),
    "tirx.sqrt": _rounded(np.sqrt),
    "tirx.rsqrt": _rounded(lambda x: 1.0 / np.sqrt(x)),
    "tirx.fabs": _rounded(np.abs),
    "tirx.tanh": _rounded(np.tanh),
    "tirx.sigmoid": _rounded(lambda x: 1.0 / (1.0 + np.exp(-x))),
    "tirx.floor": _rounded(np.floor),
    "tirx.ceil": _rounded(np.ceil),
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
}


def _math_call(name: str, fn: Callable[..., np.ndarray]) -> Instruction:
    def run(m: Machine, call: Any) -> np.ndarray:
        values = [m.per_thread(m.eval(a)) for a in call.args]
        m.counters.instructions[name.removeprefix("tirx.")] += len(m.warps())
        with np.errstate(all="ignore"):
            return np.asarray(fn(*values)).astype(parse_dtype(str(call.ty.dtype))[0])

    short = name.removeprefix("tirx.")
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
        raise SimError(f"the simulator does not know the extern function {name}")
    values = [m.per_thread(m.eval(a)) for a in call.args[1:]]
    m.counters.instructions[name] += len(m.warps())
    with np.errstate(all="ignore"):
        return np.asarray(fn(*values)).astype(parse_dtype(str(call.ty.dtype))[0])
