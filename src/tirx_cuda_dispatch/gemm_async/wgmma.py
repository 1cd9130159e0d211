"""gemm_async -> wgmma: a warpgroup's asynchronous MMA from shared memory (Hopper).

Accepts: an sm_90a target (``wgmma.mma_async`` exists on sm_90a only: PTX ISA 9.7.15,
target notes; Blackwell has tcgen05 instead); warpgroup scope with all 128 threads
(``Tx.wg.gemm_async``); C a float32 register tile (``local``) of M x N, M a multiple of
64, N a multiple of 8 up to 256, in the wgmma accumulator fragment (thread ``t``, register
``j`` of an m64nN tile: :func:`..isa.wgmma.accumulator_element`; M = 128 takes two sets of
registers); A (M x K, or K x M with ``transA``) and B (N x K, or K x N with ``transB``) in
shared memory, both float16 or both bfloat16 (K a multiple of 16), or each float8
(``float8_e4m3fn`` or ``float8_e5m2``, in any pairing; K a multiple of 32), each laid out
as one of the ISA's canonical layouts (:mod:`..layout.descriptor`: K-major rows or
MN-major column blocks under the 128-, 64- or 32-byte swizzle, or none; float8 operands
K-major only, the ISA has no transpose for them) in an allocation aligned to the
swizzle's period (``T.alloc_buffer(..., align=1024)``); constant ``transA``, ``transB``,
``accum``.

Emits ``wgmma.fence.sync.aligned`` (orders the warpgroup's earlier register accesses
before the MMAs read C) and, per 64-row tile and K step (16; 32 for float8), ``wgmma.mma_async.sync.
aligned.m64nNk16.f32.<ab>.<ab> {C registers}, descA, descB, scale-d, 1, 1, trans-a,
trans-b`` (float8: ``m64nNk32.f32.<a>.<b>`` without trans-a/b): descriptors built from
the operands' shared addresses (the start advancing by the layout's K step), trans-a/b 1
where the layout is MN-major, scale-d 0 on the first K step unless ``accum`` (C = A B,
else C += A B).

Completion is the caller's: nothing here commits or waits, so the MMAs run while the
warpgroup goes on. Before reading C, or writing A's or B's shared memory, the caller
commits (``T.ptx.wgmma.commit_group.sync.aligned()``) and waits
(``T.ptx.wgmma.wait_group.sync.aligned(N)``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from tvm import tirx
from tvm.script import tirx as T

from ..build import Body
from ..call import Operand, TileCall
from ..codegen import storage_words
from ..errors import check
from ..irfacts import as_flag, as_int
from ..isa.wgmma import (
    A_STEP_ELEMENTS,
    K_BY_DTYPE,
    SWIZZLE_MODES,
    WARPGROUP_THREADS,
    M,
    a_fragment_element,
    accumulator_element,
)
from ..layout.atoms import memory_view
from ..layout.descriptor import PERIOD, OperandDescriptors, match
from ..layout.fit import Holders, word
from ..predicates import (
    allocation_alignment,
    requires_all_threads_active,
    requires_cuda,
    requires_scope,
)
from ..registry import variant
from ..resources import Alignment, Completion

MULTIPLICANDS = {"float16": "f16", "bfloat16": "bf16"}
FLOAT8 = {"float8_e4m3fn": "e4m3", "float8_e5m2": "e5m2"}  # any pairing of the two
ACCUMULATOR = "float32"
MAX_N = 256


# -- predicates ------------------------------------------------------------------------------
def requires_sm90a(call: TileCall) -> tuple[bool, str | None]:
    """wgmma.mma_async is an sm_90a instruction: Hopper with its architecture-specific
    features (an sm_90 target without the ``a`` has none; sm_100 has tcgen05 instead)."""
    if call.sm == 90 and str(call.arch).endswith("a"):
        return True, None
    return False, (
        f"wgmma.mma_async needs sm_90a; target is {call.arch or '(no arch)'} (on Blackwell "
        "use gemm_async -> tcgen05, before Hopper gemm -> mma.m16n8k*)"
    )


def requires_operand_memories(call: TileCall) -> tuple[bool, str | None]:
    """C in registers, B in shared memory, A in shared memory or in registers (the
    ``wgmma`` register form, 16-bit A only)."""
    c, a, b = (call.operand(n) for n in ("C", "A", "B"))
    if None in (c, a, b):
        return False, "C, A and B must be tensor regions"
    if c.memory != "local":
        return False, f"C {c.name} is {c.scope}; wgmma accumulates in registers (local)"
    if a.memory not in ("shared", "local"):
        return False, (
            f"A {a.name} is {a.scope}; wgmma reads A from shared memory (a matrix descriptor) "
            "or from registers (local, in the A fragment)"
        )
    if b.memory != "shared":
        return False, (
            f"B {b.name} is {b.scope}; wgmma reads B from shared memory through a matrix descriptor"
        )
    return True, None


def requires_wgmma_dtypes(call: TileCall) -> tuple[bool, str | None]:
    """A and B both float16, both bfloat16, or each float8 (e4m3 or e5m2); C float32."""
    c, a, b = (call.operand(n) for n in ("C", "A", "B"))
    pair = (a.dtype in MULTIPLICANDS and b.dtype == a.dtype) or (
        a.dtype in FLOAT8 and b.dtype in FLOAT8
    )
    if not pair:
        return False, (
            f"A {a.name} is {a.dtype} and B {b.name} {b.dtype}; this variant multiplies "
            "float16 by float16, bfloat16 by bfloat16, or float8 (e4m3, e5m2) by float8"
        )
    if c.dtype != ACCUMULATOR:
        return False, f"C {c.name} is {c.dtype}; the accumulator is float32 here"
    return True, None


def requires_constant_flags(call: TileCall) -> tuple[bool, str | None]:
    """transA, transB and accum are constants (they pick the layouts and scale-d)."""
    for name in ("transA", "transB", "accum"):
        if as_flag(call.arg(name)) is None:
            return False, f"{name} is {call.arg(name)}, not a constant; pass True or False"
    return True, None


# -- the plan --------------------------------------------------------------------------------
@dataclass(frozen=True)
class WgmmaPlan:
    """The instruction, the operands' descriptors and C's registers per 64-row tile."""

    ab: str  # "f16" / "bf16", or float8 "e4m3.e5m2" (atype.btype)
    m: int
    n: int
    k: int
    a: OperandDescriptors | None  # None: A in registers
    b: OperandDescriptors
    c_registers: tuple[tuple[int, ...], ...]  # [m tile] -> N/2 registers, in fragment order
    accum: bool
    # A in registers (the register form): [m tile][K step] -> its four .b32 registers, as
    # word indices of A's storage; None: A in shared memory
    a_registers: tuple[tuple[tuple[int, ...], ...], ...] | None = None
    # the shared allocations' alignments the bridge raises (a swizzle's period)
    alignments: tuple[Alignment, ...] = ()

    @property
    def a_in_registers(self) -> bool:
        return self.a_registers is not None

    @property
    def float8(self) -> bool:
        return "." in self.ab

    @property
    def k_step(self) -> int:
        return K_BY_DTYPE["float8_e4m3fn" if self.float8 else "float16"]

    @property
    def shape(self) -> str:
        return f"m{M}n{self.n}k{self.k_step}"

    @property
    def types(self) -> str:
        return self.ab if self.float8 else f"{self.ab}.{self.ab}"

    @property
    def instruction(self) -> str:
        return f"wgmma.mma_async.sync.aligned.{self.shape}.f32.{self.types}"

    @property
    def count(self) -> int:
        return (self.m // M) * (self.k // self.k_step)

    def resources(self) -> tuple[Completion | Alignment, ...]:
        return (
            Completion(
                "wgmma group",
                "the caller commits (T.ptx.wgmma.commit_group.sync.aligned()) and waits "
                "(T.ptx.wgmma.wait_group.sync.aligned(N)) before reading C or writing A's or "
                "B's shared memory",
            ),
            *self.alignments,
        )

    def facts(self) -> dict:
        if self.a_in_registers:
            ptx = f"{self.instruction} {{C}}, {{A}}, descB, scale-d, 1, 1, {int(self.b.major == 'MN')}"
            a = f"registers: {len(self.a_registers)} x {len(self.a_registers[0])} x 4 .b32 (the A fragment)"
        else:
            trans = (
                "" if self.float8 else f", {int(self.a.major == 'MN')}, {int(self.b.major == 'MN')}"
            )
            ptx, a = f"{self.instruction} {{C}}, descA, descB, scale-d, 1, 1{trans}", str(self.a)
        return {
            "ptx": ptx,
            "instructions": self.count,
            "A": a,
            "B": str(self.b),
            "scale_d": "1 (C += A B)" if self.accum else "0 on the first K step (C = A B)",
            "c_registers": f"{len(self.c_registers)} x {len(self.c_registers[0])}",
        }

    def __str__(self) -> str:
        if self.a_in_registers:
            operands = f"A in registers, B {self.b.major}-major {self.b.swizzle}"
        else:
            operands = (
                f"A {self.a.major}-major, B {self.b.major}-major, {self.a.swizzle}/{self.b.swizzle}"
            )
        return (
            f"wgmma {self.m}x{self.n}x{self.k} {self.types}->f32: {self.count} x {self.shape} "
            f"({operands})"
        )


def _dims(o: Operand, trans: bool, what: str) -> tuple[int, int]:
    """(mn, k) of A (mn = M) or B (mn = N) from its region and transpose flag."""
    ext = [e for e in o.extents if e != 1]
    check(len(ext) == 2, f"{what} {o.describe} is not a 2-D region")
    return (ext[1], ext[0]) if trans else (ext[0], ext[1])


def _descriptors(
    call: TileCall, o: Operand, trans: bool, tile: tuple[int, int]
) -> tuple[OperandDescriptors, Alignment | None]:
    view = memory_view(o)
    ext = [e for e in o.extents if e != 1]
    found = match(view, (ext[0], ext[1]), 0 if trans else 1, tile, o.elem_bits)
    align = PERIOD[found.swizzle]
    needs = f"its {found.swizzle} swizzle repeats every {align} bytes of the address wgmma reads"
    return found, allocation_alignment(call, o, align, needs)


def _fragment_registers(
    o: Operand, cols: int, slots: int, at: Any, what: Any, fix: str
) -> list[int]:
    """The register of ``o`` (a warpgroup register tile of ``cols`` columns) that holds each
    of the fragment's ``slots`` slots, the same in every thread (:mod:`..layout.fit`):
    ``at(j)`` is the (rows, columns) slot ``j`` holds in each thread (arrays over the
    warpgroup's threads), ``what(t, j)`` the slot in words. Decline naming the first
    element ``o``'s layout puts elsewhere, or a slot in different registers of different
    threads."""
    holders = Holders.of_view(o, "warpgroup", WARPGROUP_THREADS, "thread", unique=False)
    regs = []
    for j in range(slots):
        row, col = at(j)
        regs.append(holders.slot(row * cols + col, (row, col),
                                 lambda t, j=j: f"the wgmma {what(t, j)}", what(None, j), fix))  # fmt: skip
    return regs


def _c_registers(c: Operand, m: int, n: int) -> tuple[tuple[int, ...], ...]:
    """C's register of each accumulator slot, per 64-row tile; Decline where C's layout is
    not the wgmma fragment."""
    threads = np.arange(WARPGROUP_THREADS)
    tiles = []
    for mi in range(m // M):

        def at(j: int, mi: int = mi) -> tuple[np.ndarray, np.ndarray]:
            row, col = accumulator_element(threads, j)
            return mi * M + row, col

        def what(t: int | None, j: int, mi: int = mi) -> str:
            if t is None:
                return f"accumulator register {j} of tile {mi}"
            return f"accumulator puts it in thread {t}, register {j} of tile {mi}"

        fix = "lay C out as the m64nN fragment: fragments.wgmma_accumulator_layout"
        tiles.append(tuple(_fragment_registers(c, n, n // 2, at, what, fix)))
    return tuple(tiles)


def _a_registers(a: Operand, m: int, k: int) -> tuple[tuple[tuple[int, ...], ...], ...]:
    """A's four .b32 registers per 64-row tile and K step of 16 (word indices of A's
    storage); Decline naming the first element A's layout puts elsewhere than the A
    fragment (:func:`..isa.wgmma.a_fragment_element`), or a .b32 pair split."""
    threads = np.arange(WARPGROUP_THREADS)
    tiles = []
    for mi in range(m // M):
        steps = []
        for kk in range(k // 16):

            def at(i: int, mi: int = mi, kk: int = kk) -> tuple[np.ndarray, np.ndarray]:
                row, col = a_fragment_element(threads, i)
                return mi * M + row, kk * 16 + col

            def what(t: int | None, i: int, kk: int = kk) -> str:
                if t is None:
                    return f"fragment element {i} of K step {kk}"
                return (
                    f"A fragment puts it in thread {t}, register {i // 2} (half {i % 2}) of "
                    f"K step {kk}"
                )

            fix = (
                "lay A out as the m64n16 accumulator fragment per 16 columns: "
                "fragments.wgmma_accumulator_layout"
            )
            slots = _fragment_registers(a, k, A_STEP_ELEMENTS, at, what, fix)
            words = [
                word(
                    f"A {a.name}",
                    slots[2 * r],
                    slots[2 * r + 1],
                    f"fragment elements {2 * r} and {2 * r + 1} of K step {kk}",
                )
                for r in range(A_STEP_ELEMENTS // 2)
            ]
            steps.append(tuple(words))
        tiles.append(tuple(steps))
    return tuple(tiles)


def plan(call: TileCall) -> WgmmaPlan:
    c, a, b = (call.operand(n) for n in ("C", "A", "B"))
    ta, tb, accum = (as_flag(call.arg(n)) for n in ("transA", "transB", "accum"))
    m, k = _dims(a, ta, "A")
    n, kb = _dims(b, tb, "B")
    check(k == kb, f"A's K is {k} and B's {kb}; they must agree")
    c_ext = [e for e in c.extents if e != 1]
    check(c_ext == [m, n], f"C {c.describe} is {c_ext}, not M x N = [{m}, {n}]")
    check(m % M == 0, f"M = {m}; wgmma computes 64-row tiles: M must be a multiple of 64")
    check(
        n % 8 == 0 and n <= MAX_N,
        f"N = {n}; one wgmma covers N = 8, 16, ..., 256: split a wider tile into calls",
    )
    float8 = a.dtype in FLOAT8
    step = K_BY_DTYPE[a.dtype]
    check(k % step == 0, f"K = {k}; a {a.dtype} wgmma takes K in steps of {step}")
    in_registers = a.memory == "local"
    if in_registers:
        check(
            not float8,
            f"A {a.name} ({a.dtype}) is in registers; the register form is built for float16 "
            "and bfloat16 A only: stage a float8 A in shared memory",
        )
        check(
            not ta,
            f"A {a.name} is in registers with transA=True; the register form reads A as "
            "M x K (the fragment has no transpose): pass A as M x K",
        )
    descs_a, raise_a = (None, None) if in_registers else _descriptors(call, a, ta, (M, step))
    descs_b, raise_b = _descriptors(call, b, tb, (n, step))
    raised = tuple(r for r in (raise_a, raise_b) if r is not None)
    if float8:
        for o, d in ((a, descs_a), (b, descs_b)):
            check(
                d.major == "K",
                f"{o.role} {o.name} ({o.dtype}) is laid out {d.major}-major; a float8 wgmma "
                f"reads K-major operands only (the ISA has no transpose for .e4m3/.e5m2): "
                f"keep each row of K contiguous ({o.role} as "
                f"{'M x K' if o.role == 'A' else 'N x K'})",
            )
    regs = _c_registers(c, m, n)
    a_regs = _a_registers(a, m, k) if in_registers else None
    ab = f"{FLOAT8[a.dtype]}.{FLOAT8[b.dtype]}" if float8 else MULTIPLICANDS[a.dtype]
    return WgmmaPlan(ab, m, n, k, descs_a, descs_b, regs, bool(accum), a_regs, raised)


# -- emission --------------------------------------------------------------------------------
def _stage_offset(offset: Any) -> Any:
    """A stage's byte offset into its buffer as the uint32 added to the buffer's
    shared-window address, masked to 18 bits. The mask changes no descriptor:
    :func:`_descriptor_low` keeps bits 4-17 of the (wrapping) uint32 sum, which the bits
    above 17 of the offset never reach. TVM's simplifier may rewrite a stage index into a
    form it cannot bound below 0 (a causal kernel's ``(base + t) % stages`` as ``t + 1 -
    x`` at 512 rows); binding a plain cast of it, TVM's StmtSimplify cast that negative
    bound to uint and stopped ("cannot make uint from negative value"). The mask bounds it
    (0 to 2^18 - 1); where TVM or ptxas proves it idle, it costs nothing (docs)."""
    return tirx.Cast("uint32", offset & 0x3FFFF)


def _descriptor_low(base: Any, d: OperandDescriptors) -> Any:
    """The descriptor's low word for ``base`` (the allocation's shared-window address):
    its start address field (bits 0-13, ``base`` in 16-byte units) and LBO (bits 16-29).
    One expression for every K step and 64-row tile of the call, so the compiler builds it
    once and each instruction's descriptor is one add (:func:`_descriptor`)."""
    return tirx.shift_right(base, 4) & 0x3FFF | tirx.const((d.lbo >> 4) << 16, "uint32")


def _descriptor(low: Any, start: int, d: OperandDescriptors) -> Any:
    """The descriptor of the operand ``start`` bytes past the address of ``low``
    (:func:`_descriptor_low`): the start field plus ``start`` in 16-byte units, SBO and the
    swizzle mode above. ``start`` is a multiple of 16 (:func:`..layout.descriptor.match`
    takes no other), so the sum is the field of ``base + start``; it carries out of the
    14-bit field only at 256 KiB, past any CTA's shared memory (228 KiB on sm_90)."""
    high = (d.sbo >> 4) << 32 | SWIZZLE_MODES[d.swizzle][0] << 62
    return tirx.Cast("uint64", low + (start >> 4)) | tirx.const(high, "uint64")


@variant(
    "gemm_async",
    "wgmma",
    priority=10,
    predicates=[
        requires_cuda,
        requires_sm90a,
        requires_scope("warpgroup"),
        requires_all_threads_active,
        requires_operand_memories,
        requires_wgmma_dtypes,
        requires_constant_flags,
    ],
    plan=plan,
)
def emit(plan: WgmmaPlan, call: TileCall, given: Mapping[str, Any]):
    """The fence, then every instruction, unrolled: 64-row tiles outside, K steps inside."""
    c, a, b = (call.operand(n).buffer for n in ("C", "A", "B"))
    body = Body()
    dv = body.view("c_regs", c, "float32", storage_words(c, 32, 32), "local")
    lows = {}
    for name, buf, descs in (("a", a, plan.a), ("b", b, plan.b)):
        if descs is None:
            continue  # A in registers
        flat = body.view(f"{name}_flat", buf, buf.dtype, 1, buf.scope())
        address = tirx.Cast("uint32", T.cuda.cvta_generic_to_shared(T.address_of(flat[0])))
        offset = descs.offset  # a stage's slice, in bytes
        base = address if as_int(offset) == 0 else address + _stage_offset(offset)
        lows[name] = _descriptor_low(base, descs)
    a_words = None
    if plan.a_in_registers:  # the register form: A's .b32 registers, two elements each
        a_words = body.view("a_regs", a, "uint32", storage_words(a, 16, 32), "local")
    body.evaluate(T.ptx["wgmma.fence.sync.aligned"]())
    spelling = T.ptx[plan.instruction]  # TVM picks the register form by the operands
    if plan.float8:
        trans = ()
    elif plan.a_in_registers:
        trans = (int(plan.b.major == "MN"),)
    else:
        trans = (int(plan.a.major == "MN"), int(plan.b.major == "MN"))
    for mi, regs in enumerate(plan.c_registers):
        d = [dv[r] for r in regs]
        for kk in range(plan.k // plan.k_step):
            if a_words is not None:
                a_operand = [a_words[w] for w in plan.a_registers[mi][kk]]
            else:
                a_operand = [_descriptor(lows["a"], plan.a.starts[mi][kk], plan.a)]
            desc_b = _descriptor(lows["b"], plan.b.starts[0][kk], plan.b)
            scale_d = tirx.const(bool(plan.accum or kk > 0), "bool")
            body.evaluate(spelling(*d, *a_operand, desc_b, scale_d, 1, 1, *trans))
    return body.func()
