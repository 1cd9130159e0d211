"""The instruction table: what each call a lowered kernel makes means, as data.

One :class:`Instruction` per TIR op name (``tirx.ptx.ld_vec``, ``tirx.cuda.warp_sync``,
...): its meaning in one or two sentences with the PTX ISA / CUDA section it comes from,
and the function that executes it. The modules that define instructions each fill a
:class:`Table` (:mod:`.intrinsics`, :mod:`.ptx`, :mod:`.helpers`); :func:`merge` joins
them, refusing a name defined twice, and the interpreter is handed the result. The
registry knows no instruction, and the interpreter looks names up in what it is given: a
name in no table is a :class:`SimError` naming it.

Also here: what several instruction modules share, namely reading the operands of a PTX
table call and moving bytes between registers, memory and addresses.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .asynchrony import Effect
from .errors import SimError
from .numerics import from_bits, parse_dtype, to_bits
from .values import Pointer

Handler = Callable[[Any, Any], Any]  # (machine, call) -> value


@dataclass(frozen=True)
class Instruction:
    """One call the simulator executes: the op name, its meaning, and how to run it."""

    name: str
    meaning: str
    run: Handler

    def __call__(self, machine: Any, call: Any) -> Any:
        return self.run(machine, call)


class Table(dict[str, Instruction]):
    """Instructions by op name; ``@table.entry(name, ...)`` registers a function whose
    docstring is the meaning."""

    def entry(self, *names: str) -> Callable[[Handler], Handler]:
        def register(fn: Handler) -> Handler:
            for name in names:
                self.add(Instruction(name, _meaning_of(fn, name), fn))
            return fn

        return register

    def add(self, instruction: Instruction) -> None:
        if instruction.name in self:
            raise ValueError(f"instruction {instruction.name} is defined twice")
        if not instruction.meaning.strip():
            raise ValueError(f"instruction {instruction.name} has no meaning")
        self[instruction.name] = instruction


def _meaning_of(fn: Handler, name: str) -> str:
    doc = (fn.__doc__ or "").strip()
    if not doc:
        raise ValueError(f"instruction {name}: its function {fn.__name__} has no docstring")
    return " ".join(doc.split())


def issued_at(m: Any, call: Any) -> Origin:
    """Where ``call`` runs, for messages about what it left pending: the tile call our
    lowering emitted it for (its explain() index), and the TIR (printed when a message
    needs it: printing TIR costs about a millisecond)."""
    return Origin(m.call, call)


@dataclass(frozen=True)
class Origin:
    """What :func:`issued_at` names, as text when formatted."""

    index: int | None
    call: Any

    def __str__(self) -> str:
        where = f"call [{self.index}]" if self.index is not None else "the kernel's own code"
        text = " ".join(str(self.call).split())
        return f"{where}: {text if len(text) <= 160 else text[:157] + '...'}"


def merge(*tables: Table) -> Table:
    """One table of all instructions; a name two tables define is an error."""
    out = Table()
    for table in tables:
        for instruction in table.values():
            out.add(instruction)
    return out


# -- PTX table calls --------------------------------------------------------------------------
@dataclass(frozen=True)
class PtxOperands:
    """A ``T.ptx`` call's arguments: ``[operands...] [modifier tokens] [marker]``.

    TVM's PTX table emits every modifier slot of the entry (``""`` where omitted) and a
    trailing marker naming what the list alone cannot say (a predicate operand, sunk
    destination lanes, ``.pred`` operands). ``tokens`` are the given modifiers in order.
    """

    operands: list[Any]
    tokens: list[str]
    marker: str


def ptx_operands(call: Any) -> PtxOperands:
    args = list(call.args)
    split = len(args)
    while split > 0 and type(args[split - 1]).__name__ == "StringImm":
        split -= 1
    strings = [a.value for a in args[split:]]
    marker = strings[-1] if strings else ""
    tokens = [t for t in strings[:-1] if t]
    return PtxOperands(args[:split], tokens, marker)


def guarded_ptx_operands(call: Any, what: str) -> tuple[PtxOperands, Any]:
    """The operands of a call that may carry a guard predicate (``@p``, TVM's ``pred=``:
    the last operand, marker ``pred``), and the guard (None without one). Sunk lanes
    and kept destinations are not modeled (an error)."""
    parsed = ptx_operands(call)
    flags = [f for f in parsed.marker.split(",") if f]
    if any(f == "keep" or (f.startswith("s") and f[1:].isdigit()) for f in flags):
        raise SimError(
            f"{what}: sunk-lane or kept-destination form ({parsed.marker!r}) is not modeled"
        )
    if "pred" not in flags:
        return parsed, None
    return PtxOperands(parsed.operands[:-1], parsed.tokens, parsed.marker), parsed.operands[-1]


def plain_ptx_operands(call: Any, what: str) -> PtxOperands:
    """The operands of a call without predicate or sunk lanes (which the simulator does
    not model: it says so instead of executing them unpredicated)."""
    parsed = ptx_operands(call)
    flags = [f for f in parsed.marker.split(",") if f]
    if any(f == "pred" or f == "keep" or (f.startswith("s") and f[1:].isdigit()) for f in flags):
        raise SimError(f"{what}: predicated or sunk-lane form ({parsed.marker!r}) is not modeled")
    return parsed


# -- moving bytes -------------------------------------------------------------------------------
def load_at(m: Any, ptr: Pointer, dtype_text: str, remote: bool = False) -> np.ndarray:
    """Each active thread reads one ``dtype_text`` value at its address (counted; reads
    of registers are not accesses, :meth:`Machine._count_access`); ``remote``: a
    ``.shared::cluster`` address, which may name another CTA's window."""
    dtype, lanes = parse_dtype(dtype_text)
    threads = m.active_threads()
    size = dtype.itemsize * lanes
    offs = m.per_thread(ptr.offsets)[threads]
    m.count_access(ptr.memory, "load", threads, offs, size, ptr.memory.name, False)
    ranks = _window_ranks(ptr, offs) if remote else None
    raw = ptr.memory.load(threads, offs, size, m.clocks, ranks=ranks)
    full = np.zeros((m.threads, size), dtype=np.uint8)
    full[threads] = raw
    return from_bits(full, dtype, lanes)


def store_at(
    m: Any, ptr: Pointer, values: np.ndarray, dtype_text: str, remote: bool = False
) -> None:
    """Each active thread writes its ``dtype_text`` value at its address (counted as
    :func:`load_at` is; ``remote`` as there)."""
    dtype, lanes = parse_dtype(dtype_text)
    threads = m.active_threads()
    size = dtype.itemsize * lanes
    offs = m.per_thread(ptr.offsets)[threads]
    raw = to_bits(m.per_thread(values), dtype, lanes, m.threads)[threads]
    m.count_access(ptr.memory, "store", threads, offs, size, ptr.memory.name, False)
    ranks = _window_ranks(ptr, offs) if remote else None
    ptr.memory.store(threads, offs, raw, m.clocks, ranks=ranks)


def _window_ranks(ptr: Pointer, offsets: np.ndarray) -> np.ndarray | None:
    """The CTA whose window each offset of a cluster's shared memory lies in (None outside
    a cluster: one window)."""
    window = ptr.memory.window
    return None if window is None else offsets // window


def register_operand(m: Any, target: Any, what: str) -> tuple[Any, np.dtype]:
    """The register buffer element a PTX output operand names, and its dtype."""
    if type(target).__name__ != "TensorLoad":
        raise SimError(f"{what}: a PTX destination must be a register element, got {target}")
    dtype, lanes = parse_dtype(str(target.ty.dtype))
    if lanes != 1:
        raise SimError(f"{what}: PTX register operand {target} is a vector")
    return target, dtype


def write_register(
    m: Any, target: Any, values: np.ndarray, what: str = "PTX", threads: np.ndarray | None = None
) -> None:
    """Write ``values`` (one per thread, the register's own dtype or its bits as an
    unsigned integer of the same width) to the register element ``target`` of the active
    threads (or of ``threads``)."""
    target, dtype = register_operand(m, target, what)
    b = m.bound(target.source)
    offsets, size = m.address(b, target.indices)
    values = np.ascontiguousarray(m.per_thread(values))
    if values.dtype.itemsize != dtype.itemsize:
        raise SimError(f"{what}: {values.dtype} value into {dtype} register {target}")
    raw = values.view(np.uint8).reshape(m.threads, dtype.itemsize)
    m.memory_op(b, m.active_threads() if threads is None else threads, offsets, size, raw, 1)


def register_bits(m: Any, operand: Any, bits: int, what: str = "PTX") -> np.ndarray:
    """An operand's bits per thread as ``uint{bits}`` (a register of exactly that width)."""
    value = np.ascontiguousarray(m.per_thread(m.eval(operand)))
    if value.dtype.itemsize * 8 != bits or value.ndim != 1:
        raise SimError(f"{what}: register operand {operand} is not {bits} bits")
    return value.view(np.dtype(f"uint{bits}"))


def register_cells(
    m: Any, regs: list[Any], what: str, threads: np.ndarray
) -> list[tuple[Any, list[int], np.ndarray]]:
    """The bytes of the 32-bit register elements ``regs`` in ``threads``, by register
    memory: ``(memory, positions in regs, cells)``, the cells ``(len(positions) * n, 4)``
    register after register (each ``threads`` in order), bounds and alignment checked."""
    parts: dict[int, tuple[Any, list, list]] = {}
    for source, ks, indices in _register_groups(m, regs, what):
        b = m.bound(source)
        base = b.pointer.offsets
        if indices is None or b.static is None or base.shape != (1,):
            return _register_cells_each(m, regs, what, threads)
        strides, offset = b.static  # constant indices into a uniform buffer: one offset each
        offsets = int(base[0]) + (offset + indices @ np.asarray(strides, np.int64)) * b.elem_bytes
        entry = parts.setdefault(id(b.pointer.memory), (b.pointer.memory, [], []))
        entry[1].append(ks)
        entry[2].append(offsets)
    out = []
    for mem, kss, offsets in parts.values():
        ks, flat = np.concatenate(kss), np.concatenate(offsets)
        order = np.argsort(ks, kind="stable")  # register after register, as regs has them
        who = np.tile(threads, len(ks))
        cells = mem.cells(who, np.repeat(flat[order], len(threads)), 4, what)
        out.append((mem, ks[order].tolist(), cells))
    return out


def _register_groups(m: Any, regs: list[Any], what: str) -> list[tuple[Any, np.ndarray, Any]]:
    """``regs`` (32-bit register elements, checked once) grouped by buffer: ``(buffer,
    positions in regs, their indices as a (positions, dims) int64 array, or None where
    one is not a constant)``, cached by the registers' handles (a call's list is the same
    nodes every time it runs)."""
    key = tuple(r.__chandle__() for r in regs)
    hit = m.nodes.registers.get(key)
    if hit is None:
        groups: dict[int, tuple[Any, list, list]] = {}
        for k, reg in enumerate(regs):
            _, dtype = register_operand(m, reg, what)
            if dtype.itemsize != 4:
                raise SimError(f"{what}: register {reg} is not 32 bits")
            entry = groups.setdefault(reg.source.__chandle__(), (reg.source, [], []))
            entry[1].append(k)
            entry[2].append(m.nodes.constant_indices(reg.indices))
        found = [
            (source, np.array(ks, np.int64),
             None if any(c is None for c in consts) else np.array(consts, np.int64).reshape(len(ks), -1))
            for source, ks, consts in groups.values()
        ]  # fmt: skip
        hit = m.nodes.registers[key] = (list(regs), found)
    return hit[1]


def _register_cells_each(
    m: Any, regs: list[Any], what: str, threads: np.ndarray
) -> list[tuple[Any, list[int], np.ndarray]]:
    """:func:`register_cells` register by register (indices that are not constants, a
    buffer whose layout or place differs between threads)."""
    parts: dict[int, tuple[Any, list, list]] = {}
    for k, reg in enumerate(regs):
        b = m.bound(reg.source)
        offsets, _ = m.address(b, reg.indices)
        entry = parts.setdefault(id(b.pointer.memory), (b.pointer.memory, [], []))
        entry[1].append(k)
        entry[2].append(offsets)
    out = []
    for mem, ks, offsets in parts.values():
        who = np.tile(threads, len(ks))
        if all(o.shape == (1,) for o in offsets):  # constant indices: one offset each
            flat = np.repeat(np.concatenate(offsets), len(threads))
        else:
            flat = np.concatenate([m.per_thread(o)[threads] for o in offsets])
        out.append((mem, ks, mem.cells(who, flat, 4, what)))
    return out


def read_registers(m: Any, regs: list[Any], what: str) -> np.ndarray:
    """The bits ``(T, len(regs))`` (uint32) of the 32-bit register elements ``regs`` in
    local memory, as evaluating each would read them (checked and guarded alike, not
    counted: register reads are not accesses; inactive threads: 0). Where several
    registers are faulty at once, the fault named may be another register's than the
    first in order (all checks of one kind run over all registers together)."""
    threads = m.active_threads()
    out = np.zeros((m.threads, len(regs)), dtype=np.uint32)
    for mem, ks, cells in register_cells(m, regs, what, threads):
        if mem.space != "local":
            raise SimError(f"{what}: register {regs[ks[0]]} is not in local memory")
        raw = mem.load(np.tile(threads, len(ks)), cells[:, 0], 4, m.clocks)
        bits = np.ascontiguousarray(raw).view(np.uint32).reshape(len(ks), len(threads))
        out[np.ix_(threads, ks)] = bits.T
    return out


def queue_register_writes(
    m: Any, kind: str, what: str, origin: Any, regs: list[Any], out: np.ndarray, group: str = ""
) -> None:
    """Queue ``what``'s asynchronous write of ``out[:, k]`` (32-bit, per thread) into register
    ``regs[k]`` of every active thread: one effect of ``kind`` per register memory, in each
    thread's open ``group`` of that kind (none: "")."""
    threads = m.active_threads()
    for mem, ks, cells in register_cells(m, regs, what, threads):
        who = np.tile(threads, len(ks))
        index = mem.index(who, cells)
        raw = np.ascontiguousarray(out[threads][:, ks].T).view(np.uint8).reshape(-1, 4)
        groups = m.asynchrony.open_groups(m, who, group) if group else None
        effect = Effect(kind, what, origin, m.call, mem, who, index, raw, groups)
        m.asynchrony.issue(m, effect)
