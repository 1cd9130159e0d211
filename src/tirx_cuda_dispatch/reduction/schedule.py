"""A reduction's schedule as data: who combines which elements, in which order.

Both reduction variants describe their plan the same way, as *digits* of one index space
(the way a layout's atoms describe a copy's): each digit is a loop over ``extent`` values
that moves along one src dimension, and it is one of

- ``serial``: a reduced digit walked inside one thread, into its accumulators;
- ``slot``: a spatial digit inside one thread (a thread computes several outputs);
- ``lane``: a digit over the lanes of a warp (thread-index step below 32);
- ``warp``: a digit over the warps of the scope (steps of 32 threads or more);
- ``idle``: threads that hold copies of other threads' data (a replicated src): they
  compute the same values and write nothing shared;
- ``unnamed``: threads src gives no data (its layout does not name them): they skip the
  call.

A ``lane`` or ``warp`` digit is *reduced* when it runs along a reduced axis: its threads
hold parts of one output and are combined, lanes by an ``shfl.xor`` butterfly, warps
through a shared-memory workspace.

The summation order is part of the schedule and :func:`emulate` reproduces it in numpy:

1. each thread reads its elements in the order of its serial digits (outer to inner, the
   vector's elements innermost); element ``n`` goes to accumulator ``n % accumulators``;
   accumulators start at the identity and fold left; masked elements (past an odd
   extent) are the identity;
2. the accumulators fold left, ``((a0 op a1) op a2) ...``;
3. the reduced lane digits, low thread-index bit first: ``v = v op shfl_xor(v, mask)``;
4. the reduced warps' partials fold left in warp order (``w = 0, 1, ...``);
5. with ``accum``, dst's old value comes first: ``old op v``; then one rounding into
   dst's dtype.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import ml_dtypes
import numpy as np

from .ops import REDUCERS

THREAD_KINDS = ("lane", "warp", "idle", "unnamed")


@dataclass(frozen=True)
class Digit:
    """One digit (see the module docstring). ``dim``/``index_stride``: its step along src
    dimension ``dim``; ``dst_dim``/``dst_index_stride``: its step along a dst dimension
    (spatial digits, and digits of a reduced axis dst keeps); ``src_stride``/``dst_stride``:
    its step in src's and dst's element offsets (registers or memory; 0 where the thread,
    not the address, tells the digit's values apart); ``thread_stride``: its step in the
    thread index (lane and warp digits)."""

    kind: str
    extent: int
    reduced: bool
    dim: int | None = None
    index_stride: int = 0
    src_stride: int = 0
    dst_dim: int | None = None
    dst_index_stride: int = 0
    dst_stride: int = 0
    thread_stride: int = 0

    def __str__(self) -> str:
        what = "reduced " if self.reduced else ""
        where = f" dim {self.dim}" if self.dim is not None else ""
        step = f" every {self.thread_stride} threads" if self.kind in ("lane", "warp") else ""
        return f"{self.extent} {what}{self.kind}{where}{step}"


@dataclass(frozen=True)
class Schedule:
    """Who combines what (the digits), and how: accumulators per chain, vector width."""

    op: str
    digits: tuple[Digit, ...]
    src_extents: tuple[int, ...]
    dst_extents: tuple[int, ...]
    threads: int  # threads of one scope instance that run the call
    accumulators: int
    vec: int = 1  # elements per src access (registers: 1)
    vec_on: str | None = None  # "serial" (the innermost serial digit) or "slot" (innermost slot)
    src_dtype: str = "float32"
    acc_dtype: str = "float32"
    dst_dtype: str = "float32"
    accum: bool = False

    # -- views -----------------------------------------------------------------------------
    def of(self, *kinds: str) -> tuple[Digit, ...]:
        return tuple(d for d in self.digits if d.kind in kinds)

    @property
    def serial(self) -> tuple[Digit, ...]:
        return self.of("serial")

    @property
    def slots(self) -> tuple[Digit, ...]:
        return self.of("slot")

    @property
    def per_thread(self) -> int:
        """Elements each thread folds per output."""
        return math.prod(d.extent for d in self.serial)

    @property
    def slot_count(self) -> int:
        return math.prod(d.extent for d in self.slots)

    @property
    def lane_masks(self) -> tuple[int, ...]:
        """The butterfly's ``shfl.xor`` masks, low bit first."""
        masks = []
        for d in sorted(self.of("lane"), key=lambda d: d.thread_stride):
            if d.reduced:
                masks += [d.thread_stride << b for b in range(d.extent.bit_length() - 1)]
        return tuple(sorted(masks))

    @property
    def reduced_warps(self) -> tuple[Digit, ...]:
        return tuple(d for d in self.of("warp") if d.reduced)

    @property
    def warp_partials(self) -> int:
        """Warps whose partials of one output meet in the workspace (1: none)."""
        return math.prod(d.extent for d in self.reduced_warps)

    @property
    def masked(self) -> bool:
        """Whether some digits run past their dimension (odd extents): guarded reads."""
        covered = [1] * len(self.src_extents)
        for d in self.digits:
            if d.dim is not None and d.kind != "idle":
                covered[d.dim] = max(covered[d.dim], d.index_stride * d.extent)
        return any(c > e for c, e in zip(covered, self.src_extents, strict=True))

    def describe(self) -> str:
        parts = []
        if self.slots:
            parts.append(f"{self.slot_count} outputs per thread")
        serial = f"{self.per_thread} serial"
        if self.vec > 1:
            serial += f" ({self.vec}-element vectors)"
        parts.append(f"{serial} into {self.accumulators} accumulators")
        if self.lane_masks:
            parts.append(f"shfl.xor {'/'.join(str(m) for m in self.lane_masks)}")
        if self.warp_partials > 1:
            parts.append(f"{self.warp_partials} warps through shared workspace")
        return ", ".join(parts)

    def order(self) -> str:
        """The summation order in words (explain shows it)."""
        acc = self.accumulators
        steps = [
            f"element n of a thread's {self.per_thread} into accumulator n % {acc}"
            if acc > 1
            else f"a thread's {self.per_thread} elements in order"
        ]
        if acc > 1:
            steps.append("accumulators folded left")
        if self.lane_masks:
            steps.append(
                f"lanes: v op shfl_xor(v, m) for m = {', '.join(map(str, self.lane_masks))}"
            )
        if self.warp_partials > 1:
            steps.append(f"warps' partials folded left in warp order ({self.warp_partials})")
        if self.accum:
            steps.append("old dst first")
        return "; ".join(steps)


# -- digit values, for emitters and the emulation ------------------------------------------
def digit_value(d: Digit, thread: Any, slot: Any, serial: Any, schedule: Schedule) -> Any:
    """The value of digit ``d`` (ints or TIR expressions) for a thread index, a slot index
    (mixed radix over the slot digits) and a serial index (over the serial digits)."""
    if d.kind in THREAD_KINDS:
        return _radix(thread // d.thread_stride if d.thread_stride > 1 else thread, d.extent, True)
    group = schedule.slots if d.kind == "slot" else schedule.serial
    index = slot if d.kind == "slot" else serial
    inner = 1
    for other in reversed(group):
        if other is d:
            break
        inner *= other.extent
    outermost = group and group[0] is d
    value = index // inner if inner > 1 else index
    return _radix(value, d.extent, not outermost)


def _radix(value: Any, extent: int, wrap: bool) -> Any:
    if extent == 1:
        return 0
    return value % extent if wrap else value


def src_coordinates(schedule: Schedule) -> tuple[list[np.ndarray], np.ndarray]:
    """Where each thread's elements come from: per src dimension, the coordinate that
    (thread, slot, serial index) folds (arrays ``[threads, slots, per_thread]``), and
    whether it lies inside src (odd extents: the guarded reads skip the others)."""
    t = np.arange(schedule.threads)[:, None, None]
    slots = np.arange(max(schedule.slot_count, 1))[None, :, None]
    serial = np.arange(max(schedule.per_thread, 1))[None, None, :]
    shape = (schedule.threads, max(schedule.slot_count, 1), max(schedule.per_thread, 1))
    coords = [np.zeros(shape, dtype=np.int64) for _ in schedule.src_extents]
    for d in schedule.digits:
        if d.kind in ("idle", "unnamed"):
            continue
        v = np.broadcast_to(digit_value(d, t, slots, serial, schedule), shape)
        coords[d.dim] = coords[d.dim] + v * d.index_stride
    valid = np.ones(shape, dtype=bool)
    for c, e in zip(coords, schedule.src_extents, strict=True):
        valid &= c < e
    return coords, valid


# -- the numpy emulation ------------------------------------------------------------------
def emulate(schedule: Schedule, src: np.ndarray, dst_old: np.ndarray | None = None) -> np.ndarray:
    """dst as the schedule computes it from the src region's values (``src``, in src's
    logical shape; ``dst_old``: dst's region before the call, read when ``accum``), in the
    summation order of the module docstring, bit for bit."""
    red = REDUCERS[schedule.op]
    acc_t = np.dtype(_np_dtype(schedule.acc_dtype))
    coords, valid = src_coordinates(schedule)
    shape = valid.shape  # (threads, slots, per_thread)
    t = np.arange(shape[0])[:, None, None]
    slots, serial = np.arange(shape[1])[None, :, None], np.arange(shape[2])[None, None, :]
    dst_coords = [np.zeros(shape[:2], dtype=np.int64) for _ in schedule.dst_extents]
    for d in schedule.digits:  # the digits dst keeps (a reduced serial one folds away)
        if d.dst_dim is None or d.kind in ("idle", "unnamed") or (d.reduced and d.kind == "serial"):
            continue
        v = np.broadcast_to(digit_value(d, t, slots, serial, schedule), shape)
        dst_coords[d.dst_dim] = dst_coords[d.dst_dim] + v[:, :, 0] * d.dst_index_stride
    safe = tuple(np.where(valid, c, 0) for c in coords)
    values = _widen(src[safe], schedule.src_dtype, acc_t)
    ident = red.identity_value(schedule.acc_dtype)
    k = schedule.accumulators
    with np.errstate(all="ignore"):
        acc = np.full((*shape[:2], k), ident, dtype=acc_t)
        for n in range(shape[2]):
            step = red.numpy(acc[:, :, n % k], values[:, :, n]).astype(acc_t)
            acc[:, :, n % k] = np.where(valid[:, :, n], step, acc[:, :, n % k])
        v = acc[:, :, 0]
        for j in range(1, k):
            v = red.numpy(v, acc[:, :, j]).astype(acc_t)
        tid = np.arange(schedule.threads)
        for m in schedule.lane_masks:
            v = red.numpy(v, v[tid ^ m]).astype(acc_t)
        v = _combine_warps(schedule, v, red, acc_t)
        inside = np.ones(shape[:2], dtype=bool)  # outputs past an odd extent do not exist
        for c, e in zip(dst_coords, schedule.dst_extents, strict=True):
            inside &= c < e
        if schedule.accum:
            at = tuple(np.where(inside, c, 0) for c in dst_coords)
            old = _widen(dst_old[at], schedule.dst_dtype, acc_t)
            v = red.numpy(old, v).astype(acc_t)
    out = np.array(dst_old if dst_old is not None else np.zeros(schedule.dst_extents), copy=True)
    out = out.astype(_np_dtype(schedule.dst_dtype))
    writes = inside.copy()  # outputs inside dst, from threads that hold data
    for d in schedule.of("unnamed"):
        writes &= np.broadcast_to(digit_value(d, t[:, :, 0], 0, 0, schedule) == 0, shape[:2])
    out[tuple(c[writes] for c in dst_coords)] = _narrow(v[writes], schedule.dst_dtype)
    return out


def _combine_warps(schedule: Schedule, v: np.ndarray, red: Any, acc_t: np.dtype) -> np.ndarray:
    """Every thread's value after the workspace: its output's partials of the reduced
    warps (their lane 0's, equal to every lane's after the butterfly) folded in warp order."""
    warps = schedule.reduced_warps
    if not warps:
        return v
    tid = np.arange(schedule.threads)
    base = tid.copy()
    for d in warps:  # the thread at reduced-warp digits 0, other digits as this thread's
        base -= ((tid // d.thread_stride) % d.extent) * d.thread_stride
    out = None
    for r in range(math.prod(d.extent for d in warps)):
        offset, rem = 0, r
        for d in reversed(warps):
            offset += (rem % d.extent) * d.thread_stride
            rem //= d.extent
        part = v[base + offset]
        out = part if out is None else red.numpy(out, part).astype(acc_t)
    return out


def _np_dtype(dtype: str) -> Any:
    return np.dtype(ml_dtypes.bfloat16) if dtype == "bfloat16" else np.dtype(dtype)


def _widen(values: np.ndarray, dtype: str, acc_t: np.dtype) -> np.ndarray:
    """Values of ``dtype`` in the accumulation type (widening is exact)."""
    return np.asarray(values).astype(acc_t)


def _narrow(values: np.ndarray, dtype: str) -> np.ndarray:
    """Rounded to nearest even into ``dtype``."""
    return np.asarray(values).astype(_np_dtype(dtype))
