"""explain(): what each tile-primitive call of a program becomes, and why.

It runs our LowerTIRx in explain mode: the same predicates and planners as lowering,
without emitting, so the plan reported is the plan the emitter would receive.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tvm
from tvm import sym

from .call import Operand, tensor_region
from .dispatch import Candidate, Outcome, plan_facts
from .irfacts import (
    BARRIER_REDUCTIONS,
    as_int,
    barrier_reduction,
    evaluated_calls,
    location_of,
    statements,
)
from .lowering import run_lower
from .resources import (
    COMPLETIONS,
    Completion,
    NamedBarrier,
    TensorMap,
    Workspace,
    resources_of,
)
from .signatures import AXES, FLAG, OP, PREDICATE, SCALAR, TENSOR, TENSOR_OR_SCALAR
from .targets import as_target


def as_module(func_or_mod: Any) -> tvm.IRModule:
    if isinstance(func_or_mod, tvm.IRModule):
        return func_or_mod
    if isinstance(func_or_mod, tvm.tirx.PrimFunc):
        return tvm.IRModule({"main": func_or_mod})
    raise TypeError(f"expected a PrimFunc or an IRModule, got {type(func_or_mod).__name__}")


def _layout_text(layout: Any) -> str:
    return "None" if layout is None else str(layout).replace("T.", "")


@dataclass
class CallReport:
    """One tile-primitive call: where it is, what it touches, what was chosen and why."""

    index: int
    op: str
    scope: str
    location: str
    operands: list[dict[str, Any]]
    variant: str | None
    plan: dict[str, Any]
    candidates: list[Candidate] = field(default_factory=list)
    # What TVM's built-in variants would do when none of ours accepts (None otherwise).
    fallback: str | None = None
    scalar_fallback: bool = False
    # The error lowering raises for this call (out of bounds, a forced variant that
    # declines, strict mode, nothing can lower it); None when it lowers.
    error: str | None = None
    # Operands whose bounds the analyzer could not decide: "role region: why".
    bounds_undecided: list[str] = field(default_factory=list)
    # Operands that reach past their buffer where the chosen plan handles it (TMA).
    bounds_past_edge: list[str] = field(default_factory=list)
    # Arguments that are neither regions nor scalars (axes, flags, ops): name -> text.
    arguments: dict[str, str] = field(default_factory=dict)
    # What the chosen plan needs the bridge to provide (workspace, barriers, completion).
    resources: list[str] = field(default_factory=list)
    # The chosen variant's plan object itself (what the emitter receives); not serialized.
    plan_object: Any = field(default=None, repr=False, compare=False)
    call_object: Any = field(default=None, repr=False, compare=False)  # the TileCall
    # What the bridge provided for the plan's resources, by name (barrier ids, buffers).
    given: Any = field(default=None, repr=False, compare=False)
    # ptxas's performance verdicts on the code of this call (explain(..., ptxas=True)).
    ptxas: list[str] = field(default_factory=list)
    # What the chosen plan asks the author to read (``plan.attention()``): a reading of
    # the call that differs from what it seems to say (a reduction's lane form).
    attention: list[str] = field(default_factory=list)
    # The loops around the call, outermost first ("for t in [1, n) at file.py:12").
    loops: list[str] = field(default_factory=list)

    @classmethod
    def from_outcome(cls, index: int, out: Outcome) -> CallReport:
        call = out.call
        return cls(
            index=index,
            op=call.op,
            scope=call.scope,
            location=str(call.location),
            operands=_operand_rows(call),
            variant=out.variant,
            plan=plan_facts(out.plan),
            candidates=list(out.candidates),
            fallback=None if out.builtin is None else str(out.builtin),
            scalar_fallback=bool(out.builtin is not None and out.builtin.scalar),
            error=None if out.error is None else str(out.error),
            bounds_undecided=[str(o) for o in out.bounds.undecided] if out.bounds else [],
            bounds_past_edge=[str(o) for o in out.bounds.past_edge] if out.bounds else [],
            arguments=_argument_values(call),
            resources=[_resource_text(r, out.given) for r in resources_of(out.plan)],
            plan_object=out.plan,
            call_object=call,
            given=dict(out.given),
            attention=list(getattr(out.plan, "attention", lambda: ())()),
            loops=_loops_around(out),
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "op": self.op,
            "scope": self.scope,
            "location": self.location,
            "operands": self.operands,
            "variant": self.variant,
            "plan": {k: _plain(v) for k, v in self.plan.items()},
            "candidates": [list(c) for c in self.candidates],
            "fallback": self.fallback,
            "scalar_fallback": self.scalar_fallback,
            "error": self.error,
            "bounds_undecided": self.bounds_undecided,
            "ptxas": self.ptxas,
            "bounds_past_edge": self.bounds_past_edge,
            "arguments": self.arguments,
            "resources": self.resources,
            "attention": self.attention,
            "loops": self.loops,
        }

    def __str__(self) -> str:
        if self.variant is not None:
            chosen = self.variant
        elif self.fallback is not None and self.error is None:
            chosen = f"none of ours: {self.fallback} (an error in strict mode)"
            if self.scalar_fallback:
                chosen = "WARNING " + chosen
        else:
            chosen = "none"
        lines = [f"[{self.index}] Tx.{self.scope}.{self.op} at {self.location}"]
        width = max([4, *(len(o["role"]) for o in self.operands)])
        for o in self.operands:
            lines.append(
                f"    {o['role']:<{width}} {_ACCESS_MARK.get(o['access'], ' '):<2} {o['region']:<28} "
                f"{o['scope']:<7} {o['dtype']:<9} {o['layout']}"
            )
        if self.arguments:
            lines.append("    args: " + ", ".join(f"{k}={v}" for k, v in self.arguments.items()))
        lines.append(f"    variant: {chosen}")
        for note in self.attention:
            lines.append(f"    NOTE: {note}")
        if self.error is not None:
            lines += _error_lines(self.error, self.fallback)
        for note in self.bounds_undecided:
            lines.append(f"    bounds not proved: {note}")
        for note in self.bounds_past_edge:
            lines.append(f"    bounds: {note}")
        for note in self.ptxas:
            lines.append(f"    ptxas: {note}")
        if self.plan:
            facts = ", ".join(f"{k}={_plain(v)}" for k, v in self.plan.items())
            lines.append(f"    plan: {facts}")
        for r in self.resources:
            lines.append(f"    resource: {r}")
        for c in self.candidates:
            verdict = "accepted" if c.accepted else "declined"
            lines.append(f"      - {c.variant}: {verdict}" + (f" ({c.reason})" if c.reason else ""))
        return "\n".join(lines)


_ACCESS_MARK = {"read": "r", "write": "w", "read-write": "rw"}


def _operand_rows(call: Any) -> list[dict[str, Any]]:
    """One row per argument that is a region or a value (``s_local[0]``, ``0.5``), in
    argument order, named by the op's signature, with its access."""
    rows = []
    for i, arg in enumerate(call.args):
        param = call.params[i] if i < len(call.params) else None
        role = param.name if param else f"arg{i}"
        access = call.signature.access(param, call.args) if param else "-"
        found = tensor_region(arg)
        if found is not None:
            o = Operand(role, found[0], found[1], access=access)
            rows.append(
                {
                    "role": role,
                    "access": access,
                    "buffer": o.name,
                    "scope": o.scope,
                    "dtype": o.dtype,
                    "region": o.describe.rsplit(" (", 1)[0],  # less "(scope dtype)"
                    "layout": _layout_text(o.layout),
                }
            )
            continue
        if param is not None and param.kind not in (TENSOR, TENSOR_OR_SCALAR, SCALAR):
            continue  # axes, flags, ops: _argument_values
        source = getattr(arg, "source", None)  # an element read: s_local[0]
        dtype = source.dtype if source is not None else getattr(arg, "ty", None)
        if dtype is None or str(dtype) in ("handle", ""):
            continue
        rows.append(
            {
                "role": role,
                "access": access,
                "buffer": None,
                "scope": "scalar",
                "dtype": str(dtype),
                "region": (
                    f"{source.name}[{', '.join(str(x) for x in arg.indices)}]"
                    if source is not None and hasattr(arg, "indices")
                    else str(arg)
                ),
                "layout": "-",
            }
        )
    return rows


def _resource_text(resource: Any, provided: Any) -> str:
    """A plan's resource, with what the bridge gave it (barrier ids)."""
    text = str(resource)
    given = provided.get(getattr(resource, "name", None))
    count = getattr(resource, "instances", None)
    if isinstance(given, int) and count:
        ids = f"id {given}" if count == 1 else f"ids {given}-{given + count - 1}"
        text += f" = {ids}"
    return text


def _argument_values(call: Any) -> dict[str, str]:
    """The arguments that are not operands (reduction axes, flags, ops), as text."""
    values = {}
    for param, arg in zip(call.params, call.args, strict=False):
        if param.kind in (AXES, FLAG, OP, PREDICATE):
            values[param.name] = _value_text(arg)
    return values


def _value_text(arg: Any) -> str:
    if isinstance(arg, list | tuple) or type(arg).__name__ == "Array":
        return "(" + ", ".join(_value_text(a) for a in arg) + ("," if len(arg) == 1 else "") + ")"
    value = getattr(arg, "value", None)
    if isinstance(value, bool | int | float):
        return str(bool(value)) if str(getattr(arg, "ty", "")) == "bool" else str(value)
    name = getattr(arg, "name", None)
    return str(name) if isinstance(name, str) else str(arg)


def _error_lines(error: str, fallback: str | None) -> list[str]:
    """The error, without what the report shows anyway (the call, our variants' reasons)."""
    first, *rest = error.splitlines()
    lines = [f"    ERROR when lowered: {first}"]
    if first.startswith("region out of bounds"):
        return lines + [f"      {line.strip()}" for line in rest]
    if fallback is not None:  # what TVM's built-in variants said, one line each
        return lines + [f"      {line.strip()}" for line in fallback.splitlines()]
    return lines + [f"      {line.strip()}" for line in rest if line.strip().startswith("and ")]


def _loops_around(out: Outcome) -> list[str]:
    """The For and While statements around a call, outermost first, as text."""
    enclosing = getattr(out.bounds, "enclosing", None) if out.bounds is not None else None
    texts = []
    ana = sym.Analyzer()
    for loop in getattr(enclosing, "loops", None) or []:
        if type(loop).__name__ == "For":
            end = ana.simplify(loop.min + loop.extent)
            text = f"for {loop.loop_var.name} in [{loop.min}, {end})"
        else:
            text = f"while {getattr(loop, 'condition', '?')}"
        loc = location_of(loop)
        if loc.file is not None:
            text += f" at {Path(loc.file).name}:{loc.line}"
        texts.append(text)
    return texts


def _resource_summary(res: Any, report: CallReport) -> str:
    """A resource as one line, equal for the calls that share one of its kind: a tensor
    map by its buffer, dtype, box and swizzle; a completion by its mechanism."""
    if isinstance(res, TensorMap):
        role = next((o for o in report.operands if o["role"] == res.operand), None)
        buffer = role["region"].split("[", 1)[0] if role else res.operand
        box = "x".join(str(b) for b in res.box)
        swz = f", {res.swizzle}B swizzle" if res.swizzle else ""
        return f"tensor map over {buffer} ({res.dtype}, box {box}{swz})"
    if isinstance(res, Completion):
        return f"{res.mechanism}: {COMPLETIONS[res.mechanism]}"
    return str(res).split(" (", 1)[0]


def _calls_text(indices: list[int]) -> str:
    return ("call " if len(indices) == 1 else "calls ") + ", ".join(f"[{i}]" for i in indices)


_SHORT_FACT = 32  # characters: a fact longer than this stays in the full report


def _call_line(r: CallReport) -> str:
    """One call: scope.op, the variant, written <- read regions, the plan's short facts."""
    head = f"[{r.index}] {r.scope}.{r.op} -> {r.variant or 'NONE OF OURS'}"
    written = [o["region"] for o in r.operands if o["access"] in ("write", "read-write")]
    read = [o["region"] for o in r.operands if o["access"] == "read"]
    if written or read:
        head += ": " + ", ".join(written) + (" <- " + ", ".join(read) if read else "")
    facts = [
        f"{k}={_plain(v)}"
        for k, v in r.plan.items()
        if _plain(v) not in (None, [], (), "") and len(str(_plain(v))) <= _SHORT_FACT
    ]
    if facts:
        head += "; " + ", ".join(facts[:4])
    if r.error is not None:
        head += "; ERROR " + r.error.splitlines()[0]
    return head


def _plain(value: Any) -> Any:
    if isinstance(value, bool | int | float | str) or value is None:
        return value
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return str(value)


class Explanation(list):
    """The reports of a program, in program order; prints as text, dumps as JSON.
    ``kernel_notes``: ptxas's verdicts on the kernel's own code (explain(..., ptxas=True))."""

    kernel_notes: list[str]
    # the synchronization the kernel's own code writes (not a call's plan), one line a kind
    kernel_sync: list[str]

    def __init__(self, reports: Any = ()) -> None:
        super().__init__(reports)
        self.kernel_notes = []
        self.kernel_sync = []

    def __str__(self) -> str:
        if not self:
            return "no tile-primitive calls"
        lines = [str(r) for r in self]
        lines += [f"ptxas, on the kernel's own code: {note}" for note in self.kernel_notes]
        return "\n".join(lines)

    def as_dicts(self) -> list[dict[str, Any]]:
        return [r.as_dict() for r in self]

    def overview(self) -> str:
        """The kernel in one screen per loop: how many calls are ours and by which
        variants, every resource the plans need listed once (with the calls that use it),
        then one line per call (variant, regions, the plan's short facts) under the loops
        around it."""
        if not self:
            return "no tile-primitive calls"
        ours = [r for r in self if r.variant is not None]
        lines = [f"{len(self)} tile-primitive calls, {len(ours)} lowered by our variants"]
        others = [r for r in self if r.variant is None]
        if others:
            lines[0] += " (not: " + ", ".join(f"[{r.index}]" for r in others) + ")"
        count = Counter(r.variant for r in ours)
        lines.append("variants: " + ", ".join(f"{v} x{n}" for v, n in count.most_common()))
        used: dict[str, list[int]] = {}
        for r in self:
            for res in resources_of(r.plan_object) if r.plan_object is not None else ():
                used.setdefault(_resource_summary(res, r), []).append(r.index)
        if used:
            lines.append("resources:")
            lines += [f"  {text}: {_calls_text(calls)}" for text, calls in used.items()]
        if self.kernel_sync:
            lines.append("synchronization in the kernel's own code:")
            lines += [f"  {text}" for text in self.kernel_sync]
        nest: list[str] = []
        for r in self:
            shared = zip(nest, r.loops, strict=False)
            depth = next((i for i, (a, b) in enumerate(shared) if a != b), None)
            depth = min(len(nest), len(r.loops)) if depth is None else depth
            for i, loop in enumerate(r.loops[depth:], start=depth):
                lines.append("  " * (i + 1) + loop)
            nest = r.loops
            lines.append("  " * (len(nest) + 1) + _call_line(r))
        lines += [f"ptxas, on the kernel's own code: {note}" for note in self.kernel_notes]
        return "\n".join(lines)

    def to_json(self, **kwargs: Any) -> str:
        return json.dumps(self.as_dicts(), **kwargs)


def explain(func_or_mod: Any, target: Any = "sm_90a", ptxas: bool = False) -> Explanation:
    """One :class:`CallReport` per tile-primitive call of ``func_or_mod``, in program order.
    With ``ptxas`` the kernel is also compiled (NVRTC) and ptxas's performance verdicts
    (:func:`.toolchain.ptxas_notes`) join the reports of the calls whose code they concern
    (wgmma's: the gemm_async calls lowered to wgmma) or the kernel's notes."""
    tgt = as_target(target)
    mod = as_module(func_or_mod)
    with tgt:
        _, session = run_lower(mod, mode="explain")
    report = Explanation(CallReport.from_outcome(i, out) for i, out in enumerate(session.outcomes))
    report.kernel_sync = kernel_synchronization(mod)
    if ptxas:
        _attach_ptxas(report, func_or_mod, tgt)
    return report


# The kernel's own synchronization, by the intrinsic that writes it: (kind, what the
# overview calls it, the argument that names the barrier or the count, if any).
_SYNC = {
    "tirx.ptx.setmaxnreg": ("registers", "setmaxnreg"),
    "tirx.ptx.bar_sync_count": ("named barriers", "bar.sync"),
    "tirx.ptx.bar_sync": ("named barriers", "bar.sync"),
    "tirx.ptx.bar_arrive": ("named barriers", "bar.arrive"),
    **{name: ("named barriers", "bar.red") for name in BARRIER_REDUCTIONS},
    "tirx.cuda.warpgroup_sync": ("named barriers", "warpgroup_sync"),
    "tirx.cuda.cta_sync": ("CTA barriers", "cta_sync"),
    "tirx.ptx.mbarrier_init": ("mbarriers initialised", "init"),
    "tirx.ptx.mbarrier_arrive_expect_tx": ("mbarrier arrivals", "arrive.expect_tx"),
    "tirx.ptx.mbarrier_arrive_nocount": ("mbarrier arrivals", "arrive"),
    "tirx.ptx.mbarrier_arrive": ("mbarrier arrivals", "arrive"),
    "tirx.cuda.mbarrier_wait": ("mbarrier waits", "wait"),
    "tirx.ptx.cp_async_commit_group": ("groups", "cp.async commit"),
    "tirx.ptx.cp_async_wait_group": ("groups", "cp.async wait"),
    "tirx.ptx.wgmma_commit_group": ("groups", "wgmma commit"),
    "tirx.ptx.wgmma_wait_group": ("groups", "wgmma wait"),
    "tirx.ptx.cp_async_bulk_commit_group": ("groups", "bulk commit"),
    "tirx.ptx.cp_async_bulk_wait_group": ("groups", "bulk wait"),
    "tirx.ptx.fence_proxy": ("fences", "fence.proxy.async"),
    "tirx.ptx.fence_mbarrier_init": ("fences", "fence.mbarrier_init"),
    "tirx.ptx.griddepcontrol": ("grid dependency", "griddepcontrol"),
}
# TVM 0.27's launch tag for programmatic dependent launch (its spelling): its runtime
# launches such a kernel with programmatic stream serialization (cuLaunchKernelEx)
PDL_TAG = "tirx.use_programtic_dependent_launch"


def kernel_synchronization(mod: Any) -> list[str]:
    """What the kernel's own code (not a tile call's plan) writes to order its threads, one
    line a kind, each statement once in program text: ``setmaxnreg`` counts, named
    barriers with their ids and thread counts, mbarriers by the element initialised (and
    its arrival count), the commit/wait groups, CTA barriers, proxy fences, and the grid
    dependency (``griddepcontrol``; a kernel launched with programmatic dependent launch
    but no ``griddepcontrol.wait`` is named: it may touch global memory before the grid
    before it completes)."""
    seen: dict[str, list[str]] = {}
    for func in mod.functions.values():
        waits = False  # this function's own griddepcontrol.wait
        for call in evaluated_calls(getattr(func, "body", None)):
            kind = _SYNC.get(str(getattr(call.op, "name", "")))
            if kind is None:
                continue
            text = _sync_text(kind[1], call)
            waits = waits or text == "griddepcontrol.wait"
            if text not in seen.setdefault(kind[0], []):
                seen[kind[0]].append(text)
        params = func.attrs.get("tirx.kernel_launch_params") if func.attrs else None
        if params is not None and PDL_TAG in [str(p) for p in params]:
            launch = "programmatic dependent launch"
            if not waits:
                launch += (
                    " with no griddepcontrol.wait: the kernel may read or write global "
                    "memory before the grid before it in the stream completes; call "
                    "T.ptx.griddepcontrol.wait() before its first global access"
                )
            seen.setdefault("launch", []).append(launch)
    return [f"{kind}: {', '.join(texts)}" for kind, texts in seen.items()]


def _arg(value: Any) -> str:
    """An intrinsic's argument as the author wrote it: constants as numbers, a barrier id
    without its ``uint32`` cast."""
    number = as_int(value)
    if number is not None:
        return str(number)
    if type(value).__name__ == "Cast":
        return _arg(value.value)
    return str(value).replace("T.", "")


def _sync_text(what: str, call: Any) -> str:
    args = list(call.args)
    if what == "setmaxnreg":
        return f"{str(args[1]).strip(chr(34))} {_arg(args[0])}"
    if what in ("bar.sync", "bar.arrive"):
        return f"{what} {_arg(args[0])} ({_arg(args[1])} threads)"
    if what == "bar.red":
        red = barrier_reduction(call)
        threads = "the CTA" if red.threads is None else f"{_arg(red.threads)} threads"
        return f"bar.red.{red.op} {_arg(red.barrier)} ({threads})"
    if what == "warpgroup_sync":
        return f"{what} {_arg(args[0])}"
    if what == "init":
        return f"{_mbar(_arg(args[0]))} (count {_arg(args[1])})"
    if what == "wait":
        return _mbar(_arg(args[0]))
    if what in ("arrive", "arrive.expect_tx"):
        return f"{what} {_mbar(_arg(args[0]))}"
    if what == "griddepcontrol":
        return f"{what}.{getattr(args[0], 'value', args[0])}"
    return what


def _mbar(text: str) -> str:
    """``cuda.cvta_generic_to_shared(address_of(bars[1 + s]))`` -> ``bars[1 + s]``."""
    m = re.search(r"address_of\((.*)\)", text)
    inner = m.group(1) if m else text
    return inner[:-1] if inner.count(")") > inner.count("(") else inner


def _attach_ptxas(report: Explanation, func_or_mod: Any, target: Any) -> None:
    """ptxas's verdicts, each on the calls whose instructions it concerns."""
    from .targets import describe
    from .toolchain import cuda_source, ptxas_notes

    arch = describe(target)
    notes = ptxas_notes(cuda_source(func_or_mod, target), arch)
    for note in notes:
        calls = [r for r in report if note.subject == "wgmma" and r.variant == "wgmma"]
        for r in calls:
            r.ptxas.append(str(note))
        if not calls:
            report.kernel_notes.append(str(note))


# -- the kernel view (explain --cost) ----------------------------------------------------
# Statements after which a CTA's warps no longer overlap the work before with the work
# after: barriers and the waits for asynchronous copies and wgmma.
_PHASE_ENDS = {
    "tirx.cuda.cta_sync", "tirx.tvm_storage_sync", "tirx.ptx.bar_sync", "tirx.ptx.bar_sync_count",
    "tirx.cuda.warpgroup_sync", "tirx.cuda.mbarrier_wait", "tirx.ptx.cp_async_wait_group",
    "tirx.ptx.wgmma_wait_group", "tirx.ptx.cp_async_bulk_wait_group", *BARRIER_REDUCTIONS,
}  # fmt: skip


def kernel_cost(
    report: Explanation,
    mod: Any,
    machine: Any = None,
    registers: int | None = None,
    target: Any = "sm_90a",
) -> Any:
    """The kernel view of an explained program (:mod:`.cost`): each call's demand from its
    operands and plan, how often a CTA runs it (the loops around it, :func:`_trips`), the
    phases the kernel's barriers cut its CTAs into, the grid and the shared memory per CTA, on
    ``machine`` (a :class:`.machines.Machine` or its name; default: the target's).
    ``registers`` per thread: None compiles the kernel (NVRTC) and reads ptxas's count."""
    from . import cost, machines
    from .participation import instances
    from .targets import describe

    tgt = as_target(target)
    arch = describe(tgt)
    m = machines.machine(machine) if isinstance(machine, str) else machine
    if m is None:
        m = machines.machine_for(arch)
    if m is None:
        raise machines.UnknownMachine(
            f"the cost model has no machine facts for {arch}; name one with machine= "
            f"(--machine): {', '.join(machines.MACHINES)}"
        )
    mod = as_module(mod)
    register_note = None
    if registers is None:
        registers, register_note = _ptxas_registers(mod, tgt)
    after_barrier, shared_bytes = _program_order(mod)
    calls, notes = [], []
    phase, prev_loops, prev_barrier = 0, None, False
    for r in report:
        out_call = r.call_object
        ended = after_barrier.get(r.index, False) or prev_barrier
        if prev_loops is not None and (ended or r.loops != prev_loops):
            phase += 1
        prev_loops = r.loops
        opnds = out_call.operands if out_call is not None else []
        res = resources_of(r.plan_object) if r.plan_object is not None else ()
        asynchronous = any(isinstance(x, Completion) for x in res)
        barrier = any(isinstance(x, Workspace | NamedBarrier) for x in res)
        prev_barrier = barrier
        demand = cost.demand_of(opnds, r.plan_object, not asynchronous, barrier, r.op)
        if out_call is not None:
            demand = cost.scaled(demand, instances(out_call))
        trips, why = _trips(r)
        if why:
            notes.append(f"[{r.index}]: {why}")
        shared = tuple(sorted({o.name for o in opnds if o.memory == "shared"}))
        label = f"[{r.index}] {r.scope}.{r.op} -> {r.variant or 'not ours'}"
        calls.append(cost.CallCost(r.index, label, demand, trips, phase, shared, r.scope))
        shared_bytes += sum(
            x.nbytes for x in res if isinstance(x, Workspace) and x.scope.startswith("shared")
        )
    launch = report[0].call_object.launch_extents if report and report[0].call_object else {}
    ctas, threads = (
        math.prod(ext or 1 for tag, ext in launch.items() if tag.startswith(axis))
        for axis in ("blockIdx", "threadIdx")
    )
    if register_note:
        notes.append(register_note)
    shape = cost.KernelShape(
        ctas, threads, shared_bytes, registers, _global_sizes(report), tuple(notes)
    )
    return cost.kernel_cost(calls, shape, m)


def _ptxas_registers(mod: Any, target: Any) -> tuple[int | None, str | None]:
    """The most registers ptxas gives a kernel of ``mod`` (NVRTC), or why not known."""
    from .targets import describe
    from .toolchain import cuda_source, ptxas_usage

    try:
        usage = ptxas_usage(cuda_source(mod, target), describe(target))
    except Exception as exc:  # noqa: BLE001  # no NVRTC here, or the kernel does not build
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return None, (
            f"registers per thread unknown ({first}): occupancy from threads and shared memory only"
        )
    if not usage:
        return None, "ptxas reported no register count: occupancy from threads and shared memory"
    return max(usage.values()), None


def _program_order(mod: Any) -> tuple[dict[int, bool], int]:
    """For each tile call (by report index), whether a phase-ending statement (a barrier,
    a wait) stands between the call before it and it; and the shared bytes the kernel
    allocates itself."""
    after_barrier, shared, index, seen = {}, 0, 0, False
    for func in mod.functions.values():
        for node in statements(getattr(func, "body", None)):
            kind = type(node).__name__
            if kind == "TilePrimitiveCall":
                after_barrier[index], index, seen = seen, index + 1, False
            elif kind == "Evaluate" and type(node.value).__name__ == "Call":
                seen = seen or str(getattr(node.value.op, "name", "")) in _PHASE_ENDS
            elif kind == "AllocBuffer" and str(node.buffer.scope()).startswith("shared"):
                shared += _bytes(node.buffer)
    return after_barrier, shared


def _bytes(buffer: Any) -> int:
    n = 1
    for d in buffer.shape:
        n *= as_int(d) or 0
    return n * buffer.dtype.bits * buffer.dtype.lanes // 8


def _trips(r: CallReport) -> tuple[float, str | None]:
    """How many times a CTA runs the call: the product of the loop extents around it. An
    extent that depends on the CTA's index or an outer loop (a causal kernel's tiles up
    to its diagonal) is averaged over every value of those (:func:`_mean_extent`); one
    the model cannot enumerate, and a while loop, counts once, and is said."""
    enclosing = getattr(r.call_object, "enclosing", None)
    trips, why = 1.0, None
    for loop in getattr(enclosing, "loops", None) or []:
        extent = getattr(loop, "extent", None)
        ext = as_int(extent)
        if ext is None and extent is not None:
            ext = _mean_extent(extent, enclosing)
        if ext is None:
            why = "a loop around it has no trip count the model can average: counted once"
            continue
        trips *= ext
    return trips, why


_ENUMERATED = 4096  # values of a symbolic extent's variables the model tries at most


def _mean_extent(extent: Any, enclosing: Any) -> float | None:
    """The mean of ``extent`` over every value of the variables it depends on (the CTA's
    index, thread ids, outer loops: their ranges where the call stands, lets substituted);
    None where one has no range or there are more than ``_ENUMERATED`` values."""
    import itertools

    ana = sym.Analyzer()
    for var, value in getattr(enclosing, "lets", None) or []:
        ana.bind(var, value)
    expr = ana.simplify(extent)
    free = list(tvm.tirx.analysis.undefined_vars(expr))
    ranges = []
    for var in free:
        found = next((r for r in enclosing.ranges if r[0].same_as(var)), None)
        if found is None:
            return None
        _, lo, hi, step = found
        ranges.append(range(int(lo), int(hi), int(step) or 1))
    count = 1
    for rng in ranges:
        count *= len(rng)
    if count == 0 or count > _ENUMERATED:
        return None
    total = 0
    for values in itertools.product(*ranges):
        inner = sym.Analyzer()
        for var, value in zip(free, values, strict=True):
            inner.bind(var, tvm.tirx.IntImm(str(var.ty), value))  # ids and loop vars: ints
        got = as_int(inner.simplify(expr))
        if got is None:
            return None
        total += max(got, 0)
    return total / count


def _global_sizes(report: Explanation) -> tuple[tuple[str, int], ...]:
    sizes = {}
    for r in report:
        for o in r.call_object.operands if r.call_object is not None else []:
            if o.memory == "global":
                sizes[o.name] = _bytes(o.buffer)
    return tuple(sizes.items())
