"""The calls a lowered kernel makes, executed: CUDA built-ins, math, generated helpers
(through their recorded :class:`~..codegen.HelperMeaning`) and PTX instructions
(``ldmatrix``/``stmatrix``, ``tcgen05.*``), the latter with the fragment maps of
:mod:`.fragments`, taken from the PTX ISA independently of our emitters.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..codegen import HELPER_MEANINGS
from . import fragments
from .errors import SimError
from .interpreter import Machine, Pointer
from .memory import BankRecord, bank_ways
from .numerics import cast, fma, from_bits, is_float, parse_dtype, to_bits

CALLS: dict[str, Callable[[Machine, Any], Any]] = {}


def _call(*names: str):
    def register(fn):
        for n in names:
            CALLS[n] = fn
        return fn

    return register


def _operands(call: Any) -> tuple[list[Any], list[str]]:
    """PTX table calls: leading operands, then modifier tokens (trailing strings)."""
    args = list(call.args)
    split = len(args)
    while split > 0 and type(args[split - 1]).__name__ == "StringImm":
        split -= 1
    return args[:split], [a.value for a in args[split:] if a.value]


# -- addresses -----------------------------------------------------------------------------
@_call("tirx.address_of")
def _address_of(m: Machine, call: Any) -> Pointer:
    load = call.args[0]
    if type(load).__name__ != "TensorLoad":
        raise SimError(f"address_of needs a buffer element, got {load}")
    b = m._bound(load.source)
    offsets, _ = m._address(b, load.indices)
    if offsets.ndim != 1:
        raise SimError(f"address_of a vector of addresses ({load})")
    return Pointer(b.pointer.memory, offsets, b.pointer.shared_window)


@_call("tirx.buffer_data")
def _buffer_data(m: Machine, call: Any) -> Pointer:
    return m._bound(call.args[0]).pointer


@_call("tirx.cuda.cvta_generic_to_shared")
def _cvta_shared(m: Machine, call: Any) -> Pointer:
    ptr = m.eval(call.args[0])
    if not isinstance(ptr, Pointer) or ptr.memory.space != "shared":
        what = ptr.memory.space if isinstance(ptr, Pointer) else "a non-pointer"
        raise SimError(f"cvta.to.shared of {what} memory: only shared addresses convert")
    return Pointer(ptr.memory, ptr.offsets, shared_window=True)


def _load_at(m: Machine, ptr: Pointer, dtype_text: str, what: str) -> np.ndarray:
    dtype, lanes = parse_dtype(dtype_text)
    threads = m._active_threads()
    size = dtype.itemsize * lanes
    offs = m.per_thread(ptr.offsets)[threads]
    m._count_access(ptr.memory, "load", threads, offs, size, ptr.memory.name, False)
    raw = ptr.memory.load(threads, offs, size, m.epoch)
    full = np.zeros((m.threads, size), dtype=np.uint8)
    full[threads] = raw
    return from_bits(full, dtype, lanes)


def _store_at(m: Machine, ptr: Pointer, values: np.ndarray, dtype_text: str) -> None:
    dtype, lanes = parse_dtype(dtype_text)
    threads = m._active_threads()
    size = dtype.itemsize * lanes
    offs = m.per_thread(ptr.offsets)[threads]
    raw = to_bits(m.per_thread(values), dtype, lanes, m.threads)[threads]
    m._count_access(ptr.memory, "store", threads, offs, size, ptr.memory.name, False)
    ptr.memory.store(threads, offs, raw, m.epoch)


def _store_register(m: Machine, target: Any, values: np.ndarray) -> None:
    """Write ``values`` (uint32 per thread) to the register a PTX output operand names."""
    if type(target).__name__ != "TensorLoad":
        raise SimError(f"a PTX destination must be a register element, got {target}")
    b = m._bound(target.source)
    dtype, lanes = parse_dtype(str(target.ty.dtype))
    if dtype.itemsize * lanes != 4:
        raise SimError(f"PTX register operand {target} is not 32 bits")
    offsets, size = m._address(b, target.indices)
    threads = m._active_threads()
    raw = values.astype(np.uint32).view(np.uint8).reshape(m.threads, 4)
    m._memory_op(b, threads, offsets, size, raw, 1)


def _register_bits(m: Machine, operand: Any) -> np.ndarray:
    value = m.per_thread(m.eval(operand))
    if value.dtype.itemsize != 4 or value.ndim != 1:
        raise SimError(f"PTX register operand {operand} is not 32 bits")
    return np.ascontiguousarray(value).view(np.uint32)


# -- synchronization and CUDA built-ins ----------------------------------------------------
@_call("tirx.cuda.cta_sync", "tirx.tvm_storage_sync")
def _barrier(m: Machine, call: Any) -> None:
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
    m.epoch += 1


@_call("tirx.cuda.__shfl_sync")
def _shfl(m: Machine, call: Any) -> np.ndarray:
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


@_call("tirx.cuda.trap_when_assert_failed")
def _trap(m: Machine, call: Any) -> None:
    cond = m.per_thread(m.eval(call.args[0])).astype(bool)
    if not cond[m.mask if m.mask.size > 1 else slice(None)].all():
        raise SimError(f"the kernel traps: {call.args[0]} is false")


@_call("tirx.likely")
def _likely(m: Machine, call: Any) -> Any:
    return m.eval(call.args[0])


@_call("tirx.if_then_else")
def _if_then_else(m: Machine, call: Any) -> np.ndarray:
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


@_call("tirx.reinterpret")
def _reinterpret(m: Machine, call: Any) -> np.ndarray:
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


def _math_call(name: str, fn: Callable[..., np.ndarray]) -> None:
    def run(m: Machine, call: Any) -> np.ndarray:
        values = [m.per_thread(m.eval(a)) for a in call.args]
        m.counters.instructions[name.removeprefix("tirx.")] += len(m.warps())
        with np.errstate(all="ignore"):
            return np.asarray(fn(*values)).astype(parse_dtype(str(call.ty.dtype))[0])

    CALLS[name] = run


for _name, _fn in _MATH.items():
    _math_call(_name, _fn)


@_call("tirx.call_pure_extern", "tirx.call_extern")
def _extern(m: Machine, call: Any) -> np.ndarray:
    name = call.args[0].value
    fn = _EXTERNS.get(name)
    if fn is None:
        raise SimError(f"the simulator does not know the extern function {name}")
    values = [m.per_thread(m.eval(a)) for a in call.args[1:]]
    m.counters.instructions[name] += len(m.warps())
    with np.errstate(all="ignore"):
        return np.asarray(fn(*values)).astype(parse_dtype(str(call.ty.dtype))[0])


# -- generated helpers -------------------------------------------------------------------------
def _pairwise(op: str, dtype: np.dtype, inputs: list[np.ndarray]) -> np.ndarray:
    if op == "add":
        return np.add(*inputs)
    if op == "sub":
        return np.subtract(*inputs)
    if op == "mul":
        return np.multiply(*inputs)
    if op == "max":
        return np.fmax(*inputs)
    if op == "fma":
        return fma(inputs[0], inputs[1], inputs[2], dtype)
    if op == "cvt":
        return cast(inputs[0], dtype)
    raise SimError(f"the simulator has no pairwise op {op!r}")


@_call("tirx.cuda.func_call")
def _func_call(m: Machine, call: Any) -> None:
    name = call.args[0].value
    meaning = HELPER_MEANINGS.get(name)
    if meaning is None:
        raise SimError(
            f"the kernel calls helper {name}, whose meaning is only its C source: the "
            f"simulator executes helpers that record a HelperMeaning (codegen.helper_call)"
        )
    pointers = [m.eval(a) for a in call.args[1:-1]]
    if not all(isinstance(p, Pointer) for p in pointers):
        raise SimError(f"helper {name} takes pointers")
    m.counters.instructions[name] += len(m.warps())
    if meaning.kind == "copy":
        dst, src = pointers
        dtype = {128: "uint32x4", 64: "uint32x2", 32: "uint32", 16: "uint16", 8: "uint8"}
        value = _load_at(m, src, dtype[meaning.bits], name)
        _store_at(m, dst, value, dtype[meaning.bits])
        return
    if meaning.kind == "pairwise":
        dst, *srcs = pointers
        ins = [_load_at(m, p, f"{meaning.in_dtype}x2", name) for p in srcs]
        out_dtype = parse_dtype(meaning.out_dtype)[0]
        if meaning.op != "cvt" and not is_float(out_dtype):
            raise SimError(f"helper {name}: pairwise {meaning.op} on {out_dtype}")
        with np.errstate(all="ignore"):
            result = _pairwise(meaning.op, out_dtype, ins).astype(out_dtype)
        _store_at(m, dst, result, f"{meaning.out_dtype}x2")
        return
    raise SimError(f"helper {name}: unknown meaning {meaning.kind!r}")


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
    operands, tokens = _operands(call)
    num, trans = _matrix_form(tokens, mnemonic)
    if len(operands) != num + 1:
        raise SimError(f"{mnemonic}.x{num} takes {num} registers and an address")
    regs, addr = (operands[:num], operands[num]) if load else (operands[1:], operands[0])
    m.require_full_warps(mnemonic)
    if load:
        out = np.zeros((m.threads, num), dtype=np.uint32)
    else:
        held = np.stack([_register_bits(m, r) for r in regs], axis=1)  # (T, num)
    kind = f"{mnemonic}.x{num}{'.trans' if trans else ''}"
    for warp in m.warps():
        mem, row_threads, row_offsets = _row_pointers(m, addr, num, warp, mnemonic)
        for w, ways in bank_ways(row_threads, row_offsets, 16).items():
            m.counters.bank_conflicts.append(BankRecord(kind, mem.name, w, ways))
        m.counters.instructions[kind] += 1
        if load:
            rows = mem.load(row_threads, row_offsets, 16, m.epoch)  # (8*num, 16) bytes
            m.counters.bytes["shared.load"] += rows.size
            matrices = rows.view(np.uint16).reshape(num, 8, 8)
            out[warp * 32 : (warp + 1) * 32] = fragments.ldmatrix_load(matrices, trans)
        else:
            words = held[warp * 32 : (warp + 1) * 32]
            matrices = fragments.stmatrix_store(words, trans)  # (num, 8, 8) uint16
            rows = np.ascontiguousarray(matrices).view(np.uint8).reshape(8 * num, 16)
            mem.store(row_threads, row_offsets, rows, m.epoch)
            m.counters.bytes["shared.store"] += rows.size
    if load:
        for k, reg in enumerate(regs):
            _store_register(m, reg, out[:, k])


@_call("tirx.ptx.ldmatrix")
def _ldmatrix(m: Machine, call: Any) -> None:
    _ldst_matrix(m, call, load=True)


@_call("tirx.ptx.stmatrix")
def _stmatrix(m: Machine, call: Any) -> None:
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


@_call("tirx.ptx.tcgen05_alloc")
def _tc_alloc(m: Machine, call: Any) -> None:
    (dst, ncols), tokens = _operands(call)
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
            _store_at(m, ptr, np.full(m.threads, col, dtype=np.uint32), "uint32")
            m.counters.instructions["tcgen05.alloc"] += 1
    finally:
        m.mask = saved


@_call("tirx.ptx.tcgen05_dealloc")
def _tc_dealloc(m: Machine, call: Any) -> None:
    (taddr, ncols), _ = _operands(call)
    m.require_full_warps("tcgen05.dealloc")
    tmem = _tensor_memory(m, "tcgen05.dealloc")
    for warp in m.warps():
        addr = _uniform_in_warp(m, m.eval(taddr), warp, "tcgen05.dealloc address")
        tmem.dealloc(addr, _uniform_in_warp(m, m.eval(ncols), warp, "tcgen05.dealloc columns"))
        m.counters.instructions["tcgen05.dealloc"] += 1


@_call("tirx.ptx.tcgen05_fence", "tirx.ptx.tcgen05_relinquish_alloc_permit")
def _tc_order(m: Machine, call: Any) -> None:
    _, tokens = _operands(call)
    m.counters.instructions["tcgen05." + (tokens[0] if tokens else "fence")] += len(m.warps())


@_call("tirx.ptx.tcgen05_wait")
def _tc_wait(m: Machine, call: Any) -> None:
    _, tokens = _operands(call)
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
    operands, tokens = _operands(call)
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
        held = np.stack([_register_bits(m, r) for r in regs], axis=1)
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
            _store_register(m, reg, out[:, k])
        for mem in m.local_memories():  # filled asynchronously until tcgen05.wait::ld
            for reg in regs:
                b = m._bound(reg.source)
                if b.pointer.memory is mem:
                    offsets, size = m._address(b, reg.indices)
                    offs = m.per_thread(offsets)
                    for t in m._active_threads():
                        mem.pending[t, int(offs[t]) : int(offs[t]) + size] = True


@_call("tirx.ptx.tcgen05_ld", "tirx.ptx.tcgen05_ld_split")
def _tc_ld(m: Machine, call: Any) -> None:
    _tc_ldst(m, call, load=True)


@_call("tirx.ptx.tcgen05_st", "tirx.ptx.tcgen05_st_split")
def _tc_st(m: Machine, call: Any) -> None:
    _tc_ldst(m, call, load=False)
