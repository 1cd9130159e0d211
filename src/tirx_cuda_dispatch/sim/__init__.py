"""A CPU simulator of lowered kernels: the oracle for machines without a GPU.

``run`` lowers a TVMScript kernel through a pipeline (ours, or TVM's built-in ``"tirx"``;
the device TIR right before CUDA codegen, :func:`..toolchain.lowered_tir`) and executes
it for every thread of the chosen CTAs, warps scheduled as the GPU would let them run
(:mod:`.schedule`), with the PTX ISA's semantics for what
the lowerings produce: vector loads and stores (bounds and alignment enforced), PTX
``ld``/``st``, ``ldmatrix``/``stmatrix``, ``tcgen05.alloc/ld/st/wait/dealloc``, barriers
(a missing one is a reported race), the elementwise math, casts and packed forms, and the
helpers both lowerings call by name. Every call it knows is one entry of :data:`CALLS`,
with its meaning. It returns the arrays as the kernel left them and counters
(instructions, bytes by memory space, shared-memory bank conflicts per access)::

    out = sim.run(kernel, [a, b_poisoned], target="sm_90a")
    np.testing.assert_array_equal(out.arrays[1], a)
    out.counters.max_conflict()   # worst bank-conflict degree of any shared access

Anything it does not know (a node, a call, a helper without a recorded meaning) raises
:class:`SimError` naming it; nothing is skipped.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import helpers, intrinsics, mma, ptx, tma, wgmma
from .calls import Instruction, merge
from .errors import NotModeled, SimError
from .interpreter import Machine
from .memory import BankRecord, Counters
from .values import TensorMapArg

__all__ = [
    "CALLS",
    "BankRecord",
    "Counters",
    "Instruction",
    "SimError",
    "SimResult",
    "run",
    "simulate",
]

CALLS = merge(intrinsics.TABLE, ptx.TABLE, mma.TABLE, tma.TABLE, wgmma.TABLE, helpers.TABLE)
"""Every call the simulator executes, by TIR op name, with its meaning."""


@dataclass
class SimResult:
    """The arrays as the kernel left them (copies of the inputs), and what it did: in all
    (``counters``) and per tile-primitive call our lowering emitted (``by_call``, keyed by
    the call's explain() index; ``None`` holds the kernel's own statements and the calls
    TVM's built-in variants lowered)."""

    arrays: list[np.ndarray]
    counters: Counters
    by_call: dict[int | None, Counters] = field(default_factory=dict)

    def __getitem__(self, i: int) -> np.ndarray:
        return self.arrays[i]


def run(
    func_or_mod: Any,
    args: Sequence[Any],
    target: str = "sm_90a",
    grid: int | Iterable[int] | None = None,
    pipeline: str = "tirx_cuda_dispatch",
    seed: int = 0,
) -> SimResult:
    """Lower ``func_or_mod`` for ``target`` through ``pipeline`` and simulate it.

    ``args`` are the kernel's parameters in order (numpy arrays; never modified: the
    result holds written copies). ``grid`` picks the CTAs to run: all of the launch
    (None), the first ``n``, or the given block indices. ``seed`` fills uninitialized
    memory with different garbage (reading it is an error either way).
    """
    from ..toolchain import encoded_tensor_maps, lowered

    host_mod, device_mod = lowered(func_or_mod, target, pipeline)
    host = func_or_mod
    if hasattr(host, "functions"):
        host = next(iter(host.functions.values()))
    # the device kernel may list its parameters in another order than the user's function
    names = [p.name for p in host.params]
    try:
        maps = encoded_tensor_maps(host_mod)
        return simulate(device_mod, args, grid=grid, seed=seed, names=names, tensor_maps=maps)
    except SimError as err:
        raise _located(err, func_or_mod, target) from None


def _located(err: SimError, func_or_mod: Any, target: Any) -> SimError:
    """``err`` naming the tile-primitive call (and its source line) the faulting access
    came from, when it came from one our lowering emitted."""
    index = getattr(err, "call", None)
    if index is None:
        return err
    from ..explain import explain

    reports = explain(func_or_mod, target)
    if not 0 <= index < len(reports):
        return err
    r = reports[index]
    located = SimError(f"in call [{index}] Tx.{r.scope}.{r.op} at {r.location}: {err}")
    located.call = index
    located.location = r.location
    return located


def simulate(
    device: Any,
    args: Sequence[Any],
    grid: int | Iterable[int] | None = None,
    seed: int = 0,
    names: Sequence[str] | None = None,
    tensor_maps: dict[str, dict] | None = None,
) -> SimResult:
    """Simulate an already lowered device module (or its one PrimFunc). ``args`` are in
    the device function's parameter order, or in the order of ``names`` if given.
    ``tensor_maps``: what the host encodes for the kernel's tensor-map parameters, by
    parameter name (:func:`..toolchain.encoded_tensor_maps`); each maps one of ``args``."""
    func = device
    if hasattr(device, "functions"):
        funcs = list(device.functions.values())
        if len(funcs) != 1:
            raise SimError(f"expected one device function, got {len(funcs)}")
        func = funcs[0]
    arrays = [np.array(a, copy=True) if isinstance(a, np.ndarray) else a for a in args]
    for a in arrays:
        if isinstance(a, np.ndarray) and not a.flags.c_contiguous:
            raise SimError("arrays must be C-contiguous")
    device_args = arrays
    if names is not None:  # by name: the device kernel may have dropped an unused parameter
        if len(arrays) != len(names):
            raise SimError(f"the function takes {len(names)} arguments, got {len(arrays)}")
        device_args = [_device_arg(p.name, arrays, names, tensor_maps or {}) for p in func.params]
    elif len(arrays) != len(func.params):
        raise SimError(f"the kernel takes {len(func.params)} arguments, got {len(arrays)}")
    blocks = range(grid) if isinstance(grid, int) else (list(grid) if grid is not None else None)
    machine = Machine(func, device_args, blocks, np.random.default_rng(seed), CALLS)
    machine.run()
    arrays_out = [a for a in arrays if isinstance(a, np.ndarray)]
    return SimResult(arrays_out, machine.total_counters(), dict(machine.by_call))


def _device_arg(name: str, arrays: list, names: Sequence[str], maps: dict[str, dict]) -> Any:
    """The argument of the device parameter ``name``: one of ``arrays``, or a tensor map
    over one (the array of the buffer whose data the host encoded it over)."""
    fields = maps.get(name)
    if fields is None:
        return arrays[_argument_of(name, names)]
    node, offset = fields["data"], 0
    while getattr(getattr(node, "op", None), "name", ""):  # a call over the buffer's data
        if node.op.name == "tirx.handle_add_byte_offset":
            step = getattr(node.args[1], "value", None)
            if step is None:
                raise SimError(f"tensor map {name}: its base {fields['data']} is not constant")
            offset += int(step)
        node = node.args[0]
    if offset:
        raise NotModeled(f"tensor map {name}: a base {offset} bytes into its buffer")
    return TensorMapArg(arrays[_argument_of(str(node.name), names)], fields)


def _argument_of(device_name: str, names: Sequence[str]) -> int:
    """Which of the user's parameters a device-kernel parameter is: the kernel names it
    after the handle (``A_ptr`` for ``A = T.match_buffer(A_ptr, ...)``)."""
    for suffix in ("", "_ptr", "_handle"):
        hits = [i for i, n in enumerate(names) if n + suffix == device_name]
        if len(hits) == 1:
            return hits[0]
    raise SimError(
        f"the device kernel's parameter {device_name} matches none of the function's "
        f"parameters {list(names)} (by name, or name + _ptr / _handle)"
    )
