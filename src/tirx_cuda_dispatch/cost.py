"""The kernel view: what each tile call costs and what bounds the kernel at its occupancy.

Each call's :class:`Demand` comes from its operands and its plan: bytes read and written in
global memory (by buffer, so that bytes every CTA re-reads count once against DRAM and
every time against L2), shared-memory wavefronts (the plan's own accesses where it lists
them, bank conflicts included; else one wavefront per 128 bytes, or per warp access where
a lane moves less than 4 bytes), tensor-core FLOP by path (mma.sync, wgmma),
special-function results (exp2, reciprocal, ...: the MUFU pipe), warp instructions, and
whether the call waits for global loads before it returns.

The model (:func:`kernel_cost`) has two bounds and takes the larger:

- **throughput**: each resource's total demand over the kernel at its attainable rate
  (:mod:`.machines`): DRAM (unique bytes over the chip's bandwidth), L2 (every global byte
  over the SMs' fill rate), shared memory, the tensor pipe, the special-function unit,
  instruction issue. Within a phase, and between the CTAs an SM holds, these overlap.
- **latency**: a CTA runs its *phases* one after another. A phase is a run of calls with
  no barrier between them (a CTA barrier, an mbarrier or group wait, a call that
  synchronizes its warps); it costs its longest resource time at the SM's rates plus the
  latency it waits through (a load from DRAM that must arrive, a shared round trip, the
  barrier). An SM holds ``occupancy`` CTAs at once and overlaps them, so the SM needs at
  least ``ceil(CTAs per SM / occupancy)`` times one CTA's phases.

The resource that sets the larger bound is named; so is the gap between the two (a kernel
bound by latency says which phases its CTAs wait in). Pure Python over numbers: the
bridge (:mod:`.explain`) supplies the calls, trip counts, phases and the kernel's shape.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import NamedTuple

from .machines import Machine

RESOURCES = ("dram", "l2", "shared", "tensor", "sfu", "issue")
# elementwise ops that run on the special-function unit (MUFU), one result an element
SFU_OPS = frozenset({"exp2", "exp", "log2", "log", "sqrt", "rsqrt", "reciprocal", "sin", "cos",
                     "tanh", "sigmoid"})  # fmt: skip
_RESOURCE_TEXT = {
    "dram": "global memory bandwidth (DRAM)",
    "l2": "the L2 -> SM fill rate",
    "shared": "shared-memory bandwidth",
    "tensor": "the tensor pipe",
    "sfu": "the special-function unit (MUFU: exponentials, reciprocals)",
    "issue": "instruction issue",
    "latency": "latency: the CTA's phases run one after another",
}


@dataclass(frozen=True)
class Demand:
    """What one execution of a call by one CTA asks of each resource."""

    global_read: tuple[tuple[str, int], ...] = ()  # (buffer, bytes)
    global_write: tuple[tuple[str, int], ...] = ()
    shared: tuple[tuple[str, float], ...] = ()  # (buffer, wavefronts)
    tensor_flop: float = 0.0
    tensor_path: str = ""  # "mma.sync", "wgmma"
    tensor_dtype: str = ""
    issue: float = 0.0  # warp instructions
    sfu: float = 0.0  # special-function results (MUFU)
    waits_for_global: bool = False  # its global loads must arrive before it returns
    barrier: bool = False  # it synchronizes the CTA's warps itself (ends its phase)
    asynchronous: bool = False  # it completes later (cp.async, TMA, wgmma): a phase only issues it
    notes: tuple[str, ...] = ()  # what it assumed

    @property
    def shared_wavefronts(self) -> float:
        return sum(w for _, w in self.shared)

    @property
    def global_bytes(self) -> int:
        return sum(b for _, b in self.global_read) + sum(b for _, b in self.global_write)

    def clocks(self, m: Machine) -> dict[str, float]:
        """SM clocks of each resource at one SM's full rate (DRAM: the SM's even share)."""
        rate = m.tensor_rate(self.tensor_path, self.tensor_dtype) if self.tensor_flop else None
        return {
            "dram": self.global_bytes / m.dram_bytes_per_clk,
            "l2": self.global_bytes / m.l2_bytes_per_clk,
            "shared": self.shared_wavefronts,  # one wavefront a clock
            "tensor": self.tensor_flop / rate if rate else 0.0,
            "sfu": self.sfu / m.sfu_per_clk,
            "issue": self.issue / m.issue_per_clk,
        }


@dataclass(frozen=True)
class CallCost:
    """One call in the kernel view: its demand, how often a CTA runs it, its phase."""

    index: int
    label: str  # "[3] cta.mul -> smem"
    demand: Demand
    trips: float = 1  # executions per CTA (the loops around it; a mean over the CTAs)
    phase: int = 0  # calls of one phase have no barrier between them
    shared_buffers: tuple[str, ...] = ()  # the shared buffers it touches
    scope: str = ""


@dataclass(frozen=True)
class KernelShape:
    """What decides occupancy and how the grid spreads over the SMs."""

    ctas: int
    threads: int
    shared_bytes: int  # per CTA, static and dynamic
    registers: int | None = None  # per thread (ptxas); None: not known
    buffer_bytes: tuple[tuple[str, int], ...] = ()  # global buffers' sizes
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Occupancy:
    ctas: int  # CTAs an SM holds at once
    limiter: str
    limits: tuple[tuple[str, int], ...]


def occupancy(shape: KernelShape, m: Machine) -> Occupancy:
    """CTAs per SM under each limit (threads, registers, shared memory, the CTA cap)."""
    warps = -(-shape.threads // 32)
    limits = [("threads", m.threads_per_sm // max(shape.threads, 1)), ("CTAs", m.ctas_per_sm)]
    if shape.registers:
        per_warp = -(-shape.registers * 32 // m.register_granule) * m.register_granule
        limits.append(("registers", m.registers_per_sm // (per_warp * warps)))
    per_cta = shape.shared_bytes + m.shared_reserved_per_cta
    limits.append(("shared memory", m.shared_per_sm // per_cta))
    name, value = min(limits, key=lambda kv: kv[1])
    return Occupancy(max(value, 0), name, tuple(limits))


@dataclass(frozen=True)
class Phase:
    index: int
    calls: tuple[int, ...]
    trips: float
    clocks: float  # one execution: latency + the longest resource
    latency: float
    resource: str  # the longest resource of the phase


@dataclass
class KernelCost:
    """The kernel view's figures; ``str()`` is the text explain --cost prints."""

    machine: Machine
    shape: KernelShape
    occupancy: Occupancy
    calls: list[CallCost]
    resource_us: dict[str, float]  # throughput bound of each resource
    latency_us: float
    phases: list[Phase]
    dram_bytes: int
    global_bytes: int
    predicted_us: float = 0.0
    bound: str = ""
    savings: list[tuple[str, float, str]] = field(default_factory=list)

    def as_dict(self) -> dict:
        """The figures as plain data (``explain --cost --json``)."""
        return {
            "machine": self.machine.name,
            "predicted_us": self.predicted_us,
            "bound": self.bound,
            "bounds_us": {**self.resource_us, "latency": self.latency_us},
            "occupancy": {"ctas_per_sm": self.occupancy.ctas, "limiter": self.occupancy.limiter},
            "grid": {
                "ctas": self.shape.ctas,
                "threads": self.shape.threads,
                "shared_bytes": self.shape.shared_bytes,
                "registers": self.shape.registers,
            },  # fmt: skip
            "dram_bytes": self.dram_bytes,
            "global_bytes": self.global_bytes,
            "calls": [
                {
                    "index": c.index,
                    "trips": c.trips,
                    "phase": c.phase,
                    "clocks": c.demand.clocks(self.machine),
                    "assumed": list(c.demand.notes),
                }
                for c in self.calls
            ],  # fmt: skip
            "savings": [{"buffer": b, "us": us, "why": why} for b, us, why in self.savings],
            "notes": list(self.shape.notes),
        }

    @property
    def limiting(self) -> str:
        return _RESOURCE_TEXT[self.bound]

    def __str__(self) -> str:
        m, s, occ = self.machine, self.shape, self.occupancy
        lines = [
            f"kernel cost on {m.name} ({m.sms} SMs at {m.clock_hz / 1e9:.2f} GHz): "
            f"predicted {self.predicted_us:.1f} us, bound by {self.limiting}",
            f"  grid {s.ctas} CTAs x {s.threads} threads; {s.shared_bytes} B shared per CTA, "
            + (f"{s.registers} registers per thread" if s.registers else "registers unknown")
            + f"; {occ.ctas} CTAs per SM (limited by {occ.limiter}: "
            + ", ".join(f"{k} {v}" for k, v in occ.limits)
            + ")",
            f"  global memory: {_mb(self.global_bytes)} moved, {_mb(self.dram_bytes)} of it "
            "unique (DRAM)",
        ]
        lines.append("  bounds (us): " + ", ".join(
            f"{k} {v:.1f}" for k, v in [*self.resource_us.items(), ("latency", self.latency_us)]
        ))  # fmt: skip
        lines.append("  calls (per CTA, SM clocks at the SM's rates):")
        for c in self.calls:
            clk = c.demand.clocks(m)
            top = max(clk, key=clk.get)
            parts = [f"{k} {v:.0f}" for k, v in clk.items() if v >= 0.5]
            trips = f" x{c.trips:g}" if c.trips != 1 else ""
            lines.append(
                f"    {c.label}{trips}: "
                + (", ".join(parts) or "nothing measurable")
                + (f" (most: {top})" if parts else "")
            )
            lines += [f"      assumed: {n}" for n in c.demand.notes]
        lines.append("  phases (a CTA runs them one after another):")
        for p in self.phases:
            trips = f" x{p.trips:g}" if p.trips != 1 else ""
            calls = ", ".join(f"[{i}]" for i in p.calls)
            lines.append(
                f"    {calls}{trips}: {p.clocks:.0f} clk ({p.resource}, waits {p.latency:.0f})"
            )
        for buffer, us, why in self.savings:
            lines.append(f"  keeping {buffer} in registers would save about {us:.1f} us: {why}")
        lines += [f"  note: {n}" for n in s.notes]
        return "\n".join(lines)


def _mb(n: float) -> str:
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n / 2**10:.1f} KiB"


def phase_latency(calls: list[CallCost], m: Machine) -> float:
    """What a phase waits through besides its throughput: a DRAM round trip where a call
    waits for its global loads, else a shared round trip where it touches shared memory;
    plus a barrier at its end."""
    wait = 0.0
    for c in calls:
        if c.demand.waits_for_global:
            wait = max(wait, m.dram_latency_clk)
        elif c.demand.shared_wavefronts:
            wait = max(wait, m.shared_latency_clk)
    return wait + m.barrier_clk


def kernel_cost(
    calls: list[CallCost], shape: KernelShape, m: Machine, savings: bool = True
) -> KernelCost:
    """The two bounds of the module docstring, the larger one, and what bounds it; with
    ``savings``, what keeping each single-scope shared buffer in registers would save."""
    occ = occupancy(shape, m)
    per_sm = math.ceil(shape.ctas / m.sms)
    clock_us = 1e6 / m.clock_hz
    # throughput: every resource over the kernel
    totals = dict.fromkeys(RESOURCES, 0.0)
    accessed: dict[str, int] = {}
    for c in calls:
        for k, v in c.demand.clocks(m).items():
            totals[k] += v * c.trips
        for buf, b in (*c.demand.global_read, *c.demand.global_write):
            accessed[buf] = accessed.get(buf, 0) + b * c.trips * shape.ctas
    sizes = dict(shape.buffer_bytes)
    dram = sum(min(b, sizes.get(buf, b)) for buf, b in accessed.items())
    moved = sum(accessed.values())
    resource_us = {k: per_sm * v * clock_us for k, v in totals.items()}
    resource_us["dram"] = dram / m.dram_bytes_per_s * 1e6
    # latency: one CTA's phases, an SM's CTAs overlapping `occupancy` at a time
    phases = []
    for p in sorted({c.phase for c in calls}):
        members = [c for c in calls if c.phase == p]
        clk = dict.fromkeys(RESOURCES, 0.0)
        for c in members:
            for k, v in c.demand.clocks(m).items():
                if k == "issue" or not c.demand.asynchronous:
                    clk[k] += v
        top = max(clk, key=clk.get)
        wait = phase_latency(members, m)
        phases.append(
            Phase(p, tuple(c.index for c in members), members[0].trips, wait + clk[top], wait, top)
        )
    cta_clk = sum(p.clocks * p.trips for p in phases)
    waves = math.ceil(per_sm / max(occ.ctas, 1))
    latency_us = waves * cta_clk * clock_us
    cost = KernelCost(m, shape, occ, calls, resource_us, latency_us, phases, dram, moved)
    bound = max(resource_us, key=resource_us.get)
    cost.predicted_us = max(resource_us[bound], latency_us)
    cost.bound = bound if resource_us[bound] >= latency_us else "latency"
    cost.savings = _register_savings(cost) if savings else []
    return cost


def _register_savings(cost: KernelCost) -> list[tuple[str, float, str]]:
    """Shared buffers that tile ops of one scope only ever touch: the time the kernel
    would save with the buffer in registers (its wavefronts gone; the barriers around
    the calls stay, so this is the least it would save)."""
    out = []
    buffers = sorted({b for c in cost.calls for b in c.shared_buffers})
    for buf in buffers:
        users = [c for c in cost.calls if buf in c.shared_buffers]
        scopes = {c.scope for c in users}
        if len(scopes) != 1 or not next(iter(scopes)):
            continue
        lighter = []
        for c in cost.calls:
            if buf not in c.shared_buffers:
                lighter.append(c)
                continue
            d = replace(c.demand, shared=tuple(x for x in c.demand.shared if x[0] != buf))
            lighter.append(replace(c, demand=d))
        again = kernel_cost(lighter, cost.shape, cost.machine, savings=False)
        saved = cost.predicted_us - again.predicted_us
        if saved > 0.05 * cost.predicted_us:
            scope = next(iter(scopes))
            out.append((buf, saved, f"only {scope}-scope calls touch it ({_calls(users)})"))
    return out


def _calls(calls: list[CallCost]) -> str:
    return ", ".join(f"[{c.index}]" for c in calls)


# -- a call's demand, from its operands and its plan -------------------------------------
def demand_of(
    operands: list, plan: object | None, waits: bool, barrier: bool, op: str = ""
) -> Demand:
    """One CTA's execution of a call: ``operands`` are its regions (views with ``role``,
    ``memory``, ``name``, ``extents``, ``elem_bits``, ``access``), ``plan`` the chosen plan
    (None: no variant of ours), ``waits``: its global loads complete before it returns
    (no asynchronous completion), ``barrier``: it synchronizes the CTA's warps.

    Per operand, the warp accesses come from the plan's rounds x threads and vector width
    where its facts have them (``outer``, ``threads``, ``vec_bits`` per tensor operand);
    else 16 bytes a lane at best. A shared operand's wavefronts are the plan's own
    accesses' where it lists them (``memory_accesses()``, bank conflicts counted), else
    the warp accesses times the wavefronts one takes (a lane's bytes times 32 over 128:
    a broadcast read is one), else one per 128 bytes. One instruction per vector of the
    first written operand stands for the arithmetic; a GEMM plan adds its instructions,
    FLOP and (wgmma) the shared bytes the tensor core reads; an ``op`` of
    :data:`SFU_OPS` one special-function result per element of its first written operand."""
    reads, writes, shared, notes = [], [], [], []
    facts = plan.facts() if plan is not None and hasattr(plan, "facts") else {}
    listed = _plan_accesses(plan)
    tensor = _tensor(plan)
    issue, computed, sfu = 0.0, False, 0.0
    for index, o in enumerate(operands):
        elems = _elements(o)
        if elems is None:
            notes.append(f"{o.role}'s extent is not a constant: counted as 0 bytes")
            elems = 0
        nbytes = elems * o.elem_bits // 8
        warp = _warp_accesses(facts, index)
        accesses = warp[0] if warp else max(nbytes / 512, elems / 128)
        if o.access in ("write", "read-write") and not computed:
            issue, computed = issue + accesses, True
            sfu = float(elems) if op in SFU_OPS else 0.0
        if o.memory == "global":
            if o.access in ("read", "read-write"):
                reads.append((o.name, nbytes))
            if o.access in ("write", "read-write"):
                writes.append((o.name, nbytes))
            issue += accesses
        elif o.memory == "shared" and not (tensor and tensor.path == "wgmma"):
            if listed is not None and listed[0] == o.role:
                waves = listed[1](o.elem_bits // 8)
            elif warp is not None:
                waves = warp[0] * warp[1]
            else:
                waves = nbytes / 128
                notes.append(f"{o.role}: one wavefront per 128 bytes (the plan lists no accesses)")
            landings = getattr(plan, "landings", 1)  # a multicast lands in several CTAs
            if landings > 1 and o.access == "write":
                waves *= landings
                notes.append(
                    f"{o.role}: lands in {landings} CTAs (multicast): its shared bytes count "
                    f"{landings} times, its global bytes once"
                )
            shared.append((o.name, waves))
            issue += accesses
    flop, path, dtype = 0.0, "", ""
    if tensor is not None:
        flop, path = tensor.flop, tensor.path
        dtype = next((o.dtype for o in operands if o.role in ("A", "a")), operands[0].dtype)
        if tensor.shared_read:
            shared.append(("(wgmma operands)", tensor.shared_read / 128))
        issue += tensor.instructions
    elif plan is None:
        notes.append("no plan of ours: its operands' bytes only")
    return Demand(
        tuple(reads), tuple(writes), tuple(shared), flop, path, dtype, issue, sfu,
        waits and bool(reads), barrier, not waits, tuple(notes),
    )  # fmt: skip


def scaled(d: Demand, instances: int) -> Demand:
    """A call's demand when ``instances`` of its scope run it in one CTA (every warp of
    the CTA runs a warp-scope call on its own operands)."""
    if instances == 1:
        return d
    k = instances
    return replace(
        d,
        global_read=tuple((b, n * k) for b, n in d.global_read),
        global_write=tuple((b, n * k) for b, n in d.global_write),
        shared=tuple((b, n * k) for b, n in d.shared),
        tensor_flop=d.tensor_flop * k,
        sfu=d.sfu * k,
        issue=d.issue * k,
    )


def _elements(o: object) -> int | None:
    n = 1
    for e in o.extents:
        if e is None:
            return None
        n *= e
    return n


def _warp_accesses(facts: dict, index: int) -> tuple[float, int] | None:
    """(warp accesses, wavefronts each) of tensor operand ``index`` from a plan's
    ``outer`` rounds, ``threads`` and ``vec_bits`` (a list, one width per tensor operand,
    or one width for all); None where the plan has no such facts."""
    outer, threads, widths = facts.get("outer"), facts.get("threads"), facts.get("vec_bits")
    if isinstance(widths, int):
        widths = [widths] * (index + 1)
    if not (isinstance(outer, int) and isinstance(threads, int) and isinstance(widths, list)):
        return None
    if index >= len(widths) or not isinstance(widths[index], int):
        return None
    lane_bytes = widths[index] // 8
    return float(outer * -(-threads // 32)), max(1, -(-32 * lane_bytes // 128))


def _plan_accesses(plan: object | None):
    """(role, wavefronts of that operand given its element bytes) from the plan's own
    accesses (``memory_accesses()``), None where it lists none."""
    listed = getattr(plan, "memory_accesses", None)
    if listed is None:
        return None
    try:
        found = listed()
    except Exception:  # noqa: BLE001  # a plan whose picture needs a constant base
        return None
    from .layout.banks import total_wavefronts

    return found.role, lambda elem_bytes: float(total_wavefronts(found.items, elem_bytes))


class TensorWork(NamedTuple):
    """A GEMM plan's work on the tensor pipe."""

    flop: float
    path: str  # "mma.sync", "wgmma"
    instructions: int
    shared_read: float  # bytes the tensor core reads from shared memory itself (wgmma)


def _tensor(plan: object | None) -> TensorWork | None:
    """The tensor work of a GEMM plan (None: not a GEMM plan)."""
    if plan is None:
        return None
    kind = type(plan).__name__
    if kind == "WgmmaPlan":
        m, n, k = plan.m, plan.n, plan.k
        elem = 1 if plan.float8 else 2
        a = 0 if plan.a_in_registers else m * k * elem
        return TensorWork(
            2.0 * m * n * k, "wgmma", plan.count, float(a + n * k * elem * -(-m // 64))
        )
    if kind == "MmaPlan":
        s = plan.shape
        return TensorWork(2.0 * s.m * s.n * s.k, "mma.sync", plan.instructions, 0.0)
    return None
