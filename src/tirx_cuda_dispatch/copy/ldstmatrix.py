"""copy -> ldstmatrix: MMA fragments between registers and shared memory, ldmatrix/stmatrix.

Accepts: a CUDA target of sm_75 or newer (ldmatrix) or sm_90 or newer (stmatrix); scope
warp / warpgroup / cta made of whole warps, every thread active; a valid copy between
registers (``local``) and shared memory, either way; 16-bit elements. Tried before ``reg``
at the same priority: when the layouts are not m8n8 fragments the plan declines with the
reason and ``reg`` takes the copy. Where both accept, the dispatch cost rule compares
their estimated shared-memory clocks: on a shared layout where the matrices' rows collide
on banks (row-major 16x16 float16: 2-way) and copy -> reg has a conflict-free order,
``reg`` wins; explain() reports the conflict degree and the swizzle that would remove it.

The fit (PTX ISA, "Warp-level matrix load instruction: ldmatrix"): one instruction moves
``num`` (1, 2, 4) 8x8 matrices of 16-bit elements. Lanes ``8j .. 8j+7`` supply the
addresses of the 8 rows of matrix ``j``, each row 16 contiguous, 16-byte aligned bytes;
lane ``i`` receives, in its ``j``-th 32-bit register, row ``i // 4``, columns
``2 (i % 4)`` and ``2 (i % 4) + 1`` of matrix ``j``. With ``.trans`` it receives column
``i // 4``, rows ``2 (i % 4)`` and ``2 (i % 4) + 1`` instead. stmatrix is the mirror image.
These facts are the records of ``isa/mma_fragments.py``, which mma fragments share.

Rather than pattern-matching the layouts' iterators, the plan reads the whole partition
the register layout induces (:func:`..layout.register.register_table`: thread, register
-> element) against the shared offsets of those elements, and *derives* each register
word's matrix and each row's address from it (:func:`..layout.fit.matrix_rows`); it
checks every lane of every warp. Row addresses must then be a sum of per-bit terms of the
thread index (:func:`..layout.fit.mixed_radix`: lane bits 0-2 pick the row, 3-4 the
matrix, the rest the warp), which covers the seed's ``[T/32, 8, 4, M/(2 num), num, 2]``
grouping and fragments whose matrices are not evenly spaced (the m16n8k16 A fragment:
matrices at rows 0/8 x columns 0/8). The emitter unrolls one instruction per group of
``num`` register words (m_outer groups).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
from tvm.script import tirx as T

from ..call import Operand, TileCall
from ..codegen import impl_prim_func, storage_words, thread_index
from ..errors import Decline
from ..irfacts import as_int, prove_multiple
from ..isa.mma_fragments import (
    M8N8,
    MATRIX_NUMS,
    MATRIX_TRANSFERS,
    WARP_LANES,
    MatrixTransfer,
    matrix_transfer,
)
from ..layout.atoms import element_offsets, memory_view
from ..layout.banks import conflict_ways, total_wavefronts
from ..layout.fit import Digit, matrix_rows, mixed_radix
from ..layout.partition import Access, MemoryAccesses
from ..layout.register import register_table, register_view
from ..layout.swizzle import Swizzle
from ..predicates import (
    register_side,
    requires_all_threads_active,
    requires_cuda,
    requires_memory_pair,
    requires_scope,
    requires_valid_copy,
    sm_at_least,
)
from ..registry import variant

MATRIX_PAIRS = (("shared", "local"), ("local", "shared"))
MATRIX_COUNTS = tuple(sorted(MATRIX_NUMS, reverse=True))  # widest first
ROW_ELEMS = M8N8.row_elems
LANES = WARP_LANES


def _sides(call: TileCall) -> tuple[Operand, Operand]:
    """(register operand, shared operand)."""
    return register_side(call)


def _direction(call: TileCall) -> str:
    return "ld" if call.operand("dst").memory == "local" else "st"


def requires_whole_warps(call: TileCall) -> tuple[bool, str | None]:
    """ldmatrix/stmatrix are warp-collective: the scope is made of whole warps."""
    threads = call.thread_count
    if threads is None or threads % LANES:
        return False, f"scope {call.scope} has {threads} threads; needs whole warps of 32"
    return True, None


def requires_16_bit(call: TileCall) -> tuple[bool, str | None]:
    """The instructions move .b16 elements: float16, bfloat16, int16, uint16."""
    reg, _ = _sides(call)
    if reg.elem_bits != 16:
        return False, (
            f"{reg.name} is {reg.dtype}; ldmatrix/stmatrix move 16-bit elements (.b16: "
            "float16, bfloat16, int16, uint16)"
        )
    return True, None


def requires_matrix_arch(call: TileCall) -> tuple[bool, str | None]:
    """ldmatrix needs sm_75 or newer, stmatrix sm_90 or newer."""
    forms = [t for t in MATRIX_TRANSFERS if t.direction == _direction(call)]
    return sm_at_least(call, min(t.min_sm for t in forms), forms[0].op)


@dataclass(frozen=True)
class MatrixInstruction:
    """One ldmatrix/stmatrix: the register words of its matrices and each thread's row."""

    words: tuple[int, ...]  # 32-bit register word per matrix (register element 2w, 2w+1)
    offset: int  # shared offset (elements, from the region base) of thread 0's row
    digits: tuple[Digit, ...]  # + sum(d.of(t)): the row thread t supplies


@dataclass(frozen=True)
class LdStMatrixPlan:
    """Facts of one fragment copy: the instruction form and each instruction's operands."""

    direction: str  # "ld" (shared -> registers) or "st"
    num: int
    trans: bool
    instructions: tuple[MatrixInstruction, ...]
    dtype: str
    threads: int
    base: Any  # the shared region's base offset (int or PrimExpr)
    swizzle: Swizzle | None

    @cached_property  # the plan is frozen; dispatch, facts() and the suggestion all ask
    def bank_conflict(self) -> int:
        """Worst bank-conflict degree of the instructions (1 = none): each matrix is one
        wavefront, so rows of a matrix on the same banks serialize."""
        return max(conflict_ways(self.memory_accesses().items, 2), default=1)

    @cached_property
    def est_clocks(self) -> float:
        """Estimated SM clocks: one per wavefront, a matrix a wavefront times its conflict
        degree (the dispatch cost rule weighs this against copy -> reg)."""
        return float(total_wavefronts(self.memory_accesses().items, 2))

    def swizzle_removing_conflicts(self) -> Swizzle | None:
        """The narrowest 16-byte-unit swizzle (CuTe ``Swizzle<B, 3, 3>``: TVM's 32/64/128-byte
        atoms for B = 1/2/3) under which these instructions are conflict-free; None when
        they already are, or when no such swizzle helps."""
        if self.bank_conflict == 1 or self.swizzle is not None:
            return None
        for bits in (1, 2, 3):
            trial = dataclasses.replace(self, swizzle=Swizzle(3, bits, 3))
            if trial.bank_conflict == 1:
                return trial.swizzle
        return None

    @property
    def m_outer(self) -> int:
        return len(self.instructions)

    @cached_property
    def form(self) -> MatrixTransfer:
        """The instruction's record (isa.mma_fragments)."""
        return matrix_transfer(self.direction, self.num, self.trans)

    @property
    def ptx(self) -> str:
        return self.form.spelling

    def memory_accesses(self) -> MemoryAccesses:
        """Each lane's row address per instruction (lanes past 8 num supply none), with
        the lane and register the ISA delivers each element of that row to."""
        base = as_int(self.base) or 0
        items = []
        for g, ins in enumerate(self.instructions):
            for warp in range(self.threads // LANES):
                for j, word in enumerate(ins.words):
                    for r in range(ROW_ELEMS):
                        t = warp * LANES + self.form.address_lane(j, r)
                        row = base + ins.offset + sum(d.of(t) for d in ins.digits)
                        if self.swizzle is not None:
                            row = self.swizzle.apply(row)
                        items.append(Access(g, t, row, ROW_ELEMS, self._owners(warp, word, r)))
        return MemoryAccesses("src" if self.direction == "ld" else "dst", tuple(items))

    def _owners(self, warp: int, word: int, r: int) -> tuple[tuple[int, int], ...]:
        """(thread, register) of each element of row ``r`` of register word ``word``'s
        matrix, in the row's order."""
        holders = (M8N8.holder(r, c, self.trans) for c in range(ROW_ELEMS))
        return tuple((warp * LANES + lane, 2 * word + half) for lane, half in holders)

    def facts(self) -> dict:
        facts = {
            "num": self.num,
            "trans": self.trans,
            "m_outer": self.m_outer,
            "direction": self.direction,
            "instruction": self.ptx,
            "threads": self.threads,
            "bank_conflict": self.bank_conflict,
            "est_clocks": self.est_clocks,
        }
        if self.swizzle is not None:
            facts["swizzle"] = str(self.swizzle)
        suggestion = self.swizzle_removing_conflicts()
        if suggestion is not None:
            atom = {1: 32, 2: 64, 3: 128}[suggestion.bits]
            facts["suggestion"] = (
                f"a shared layout swizzled as {suggestion} (TVM's SWIZZLE_{atom}B_ATOM for "
                f"16-bit data) makes these instructions conflict-free"
            )
        return facts

    def __str__(self) -> str:
        return f"{self.m_outer} x {self.ptx} ({self.dtype}, {self.threads} threads)"


def _element(trans: bool):
    """The m8n8 fragment's element function, plain or ``.trans``: (lane, half of its
    register word) -> (row, column) of the matrix as stored."""
    return lambda lane, half: M8N8.element(lane, half, trans)


def _group(rows: np.ndarray, words: list[int], num: int) -> list[MatrixInstruction] | None:
    """Instructions of ``num`` consecutive words each, or None when the rows the threads
    of one instruction supply are not a mixed radix of the thread index."""
    warps = rows.shape[0]
    lane = np.arange(LANES)
    matrix = (lane >> 3) % num  # lanes past 8 * num supply ignored, but valid, addresses
    out = []
    for g in range(len(words) // num):
        chosen = np.arange(g * num, (g + 1) * num)
        supplied = rows[:, chosen[matrix], lane % ROW_ELEMS].reshape(warps * LANES)
        digits = mixed_radix(supplied)
        if digits is None:
            return None
        out.append(MatrixInstruction(tuple(words[i] for i in chosen), int(supplied[0]), digits))
    return out


def plan(call: TileCall) -> LdStMatrixPlan:
    reg, smem = _sides(call)
    threads = call.thread_count
    mem = memory_view(smem)
    table = register_table(register_view(reg), call.scope, threads)
    gap = table.holder_gaps()
    if gap is not None:
        raise Decline(
            f"register layout of {reg.name} leaves thread {gap[0]} without register {gap[1]}; "
            "ldmatrix/stmatrix are warp-collective, every thread holds the same registers"
        )
    regs = table.registers
    if len(regs) % 2 or any(regs[i] != regs[0] + i for i in range(len(regs))) or regs[0] % 2:
        raise Decline(
            f"register layout of {reg.name} uses registers {list(regs)}; ldmatrix/stmatrix "
            "fill whole 32-bit words: an even number of registers from an even index"
        )
    words = [r // 2 for r in regs[::2]]
    offsets = element_offsets(mem)[table.elements]  # [threads, registers]
    offsets = offsets.reshape(threads // LANES, LANES, len(words), 2)

    found, why = {}, {}
    for trans in (False, True):
        found[trans], why[trans] = matrix_rows(offsets, _element(trans), ROW_ELEMS)
    trans = found[False] is None
    rows = found[trans]
    if rows is None:
        raise Decline(
            f"register layout of {reg.name} is not an m8n8 fragment of {smem.name}: "
            f"plain: {why[False]}; .trans: {why[True]}"
        )
    _check_rows_aligned(rows, mem.base, mem.swizzle, smem.name)

    for num in MATRIX_COUNTS:
        if len(words) % num:
            continue
        instructions = _group(rows, words, num)
        if instructions is not None:
            break
    else:
        raise Decline(
            f"the rows of {smem.name} that the threads would supply are not a mixed radix "
            "of the thread index for any matrix count 4/2/1"
        )
    return LdStMatrixPlan(
        direction=_direction(call),
        num=num,
        trans=trans,
        instructions=tuple(instructions),
        dtype=reg.dtype,
        threads=threads,
        base=mem.base,
        swizzle=mem.swizzle,
    )


def _check_rows_aligned(rows: np.ndarray, base: Any, swizzle: Swizzle | None, name: str) -> None:
    """Every row 16-byte aligned, and kept contiguous by the swizzle."""
    if swizzle is not None and swizzle.unit < ROW_ELEMS:
        raise Decline(
            f"{name}'s swizzle {swizzle} keeps {swizzle.unit}-element units together; an "
            f"ldmatrix row is {ROW_ELEMS} contiguous 16-bit elements (16 bytes)"
        )
    stride = int(rows[0, 0, 1] - rows[0, 0, 0])
    if stride % ROW_ELEMS:
        padded = -(-stride // ROW_ELEMS) * ROW_ELEMS
        raise Decline(
            f"shared row stride {stride} of {name} is not a multiple of {ROW_ELEMS} elements "
            f"(16 bytes, one ldmatrix row): pad the row to {padded}"
        )
    misaligned = np.argwhere(rows % ROW_ELEMS)
    if len(misaligned):
        w, k, r = (int(x) for x in misaligned[0])
        raise Decline(
            f"row {r} of register word {k}'s matrix (warp {w}) starts at offset "
            f"{int(rows[w, k, r])} of the {name} region, not a multiple of {ROW_ELEMS} "
            "elements (16 bytes)"
        )
    if not prove_multiple(base, ROW_ELEMS):
        proof = "" if as_int(base) is not None else "provably "
        raise Decline(
            f"{name} region base offset {base} is not {proof}a multiple of {ROW_ELEMS} "
            "elements (16 bytes): every ldmatrix row must be 16-byte aligned"
        )


@variant(
    "copy",
    "ldstmatrix",
    priority=10,
    predicates=[
        requires_cuda,
        requires_scope("warp", "warpgroup", "cta"),
        requires_whole_warps,
        requires_all_threads_active,
        requires_valid_copy,
        requires_memory_pair(MATRIX_PAIRS),
        requires_16_bit,
        requires_matrix_arch,
    ],
    plan=plan,
)
def emit(plan: LdStMatrixPlan, call: TileCall, given: Mapping[str, Any]):
    """One ldmatrix/stmatrix per group of num register words, unrolled."""
    reg, smem = _sides(call)
    r_buf, s_buf = reg.buffer, smem.buffer
    r_words = storage_words(r_buf, 16, 32)
    s_elems = storage_words(s_buf, 16, 16)

    def issue_all(t: Any, words: Any, shared: Any) -> None:
        for ins in plan.instructions:
            offset = plan.base + ins.offset
            for digit in ins.digits:
                offset = offset + digit.of(t)
            if plan.swizzle is not None:
                offset = plan.swizzle.apply(offset)
            row = shared.ptr_to([offset])
            regs = [words[w] for w in ins.words]
            if plan.direction == "ld":
                T.evaluate(T.ptx[plan.ptx](*regs, row))
            else:
                T.evaluate(T.ptx[plan.ptx](row, *regs))

    # fmt: off
    @impl_prim_func
    def impl():
        t = T.meta_var(thread_index(call))
        words = T.decl_buffer((r_words,), "uint32", data=r_buf.data, scope="local")
        shared = T.decl_buffer((s_elems,), "uint16", data=s_buf.data, scope=s_buf.scope())
        issue_all(t, words, shared)
    # fmt: on
    return impl
