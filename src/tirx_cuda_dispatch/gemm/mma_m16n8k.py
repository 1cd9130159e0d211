"""gemm -> mma.m16n8k*: a warp's GEMM over register fragments on the tensor cores.

``Tx.warp.gemm(D, A, B, C, transpose_A, transpose_B, alpha, beta)`` computes
``D = alpha A B + beta C`` with ``mma.sync.aligned.m16n8k16`` (or ``m16n8k8``) per 16x8
tile of D and 16- (8-) wide step of K.

Accepts: a CUDA target of sm_80 or newer (sm_75 for the float16 m16n8k8 form); warp
scope with every lane taking part; D, A, B, C in registers (``local``); A and B both
float16 or both bfloat16, C and D float32; extents D MxN, A MxK (KxM under
``transpose_A``), B KxN (NxK under ``transpose_B``), C MxN, with M a multiple of 16, N of 8
and K of 8; constant transpose flags; any float ``alpha`` and ``beta`` (constants or
runtime values). The register layouts decide the fit, not their spelling: every element
of every instruction's tile must sit where the PTX ISA's fragment puts it, in the lane
the ISA names and in a register the same for all 32 lanes, the two 16-bit elements of
an A or B register in one aligned 32-bit word (PTX ISA "Matrix Fragments for mma.m16n8k16
with floating point type", and "... mma.m16n8k8"; the facts are ``isa.mma_fragments``).
So TVM's fragment layouts, their tilings and their transposed orientations fit, and so
does any other layout that puts the elements in those places.

Emits, unrolled, with every register index a constant: D initialised (C when ``beta`` is
1, nothing when C is D, ``beta C`` otherwise, zero when ``beta`` is 0), then for each K
step and each (M, N) tile one mma accumulating into D's registers (the K step outermost,
so consecutive instructions are independent), then ``D = alpha D + beta C`` where
``alpha`` is not 1. The instruction adds C's products inside the tensor core; the
accumulation rule is in docs/gemm_mma.md.
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
from ..errors import Decline
from ..irfacts import as_flag, buffer_var
from ..isa.mma_fragments import WARP_LANES, MmaInstruction, mma_instructions
from ..layout.fit import Holders, word
from ..predicates import (
    requires_all_threads_active,
    requires_cuda,
    requires_scope,
    sm_at_least,
)
from ..registry import variant

OPERANDS = ("D", "A", "B", "C")
MULTIPLICANDS = ("float16", "bfloat16")
ACCUMULATOR = "float32"


def requires_registers(call: TileCall) -> tuple[bool, str | None]:
    """D, A, B and C are register (``local``) regions."""
    for name in OPERANDS:
        opnd = call.operand(name)
        if opnd is None:
            return False, f"{name} is not a tensor region"
        if opnd.memory != "local":
            return False, (
                f"{name} {opnd.name} is in {opnd.scope} memory; mma.sync takes its operands "
                "in registers: copy it to a local fragment first (ldmatrix for shared)"
            )
    return True, None


def requires_mma_dtypes(call: TileCall) -> tuple[bool, str | None]:
    """A and B both float16 or both bfloat16; C and D float32."""
    a, b = call.operand("A"), call.operand("B")
    if a.dtype not in MULTIPLICANDS or b.dtype != a.dtype:
        return False, (
            f"A {a.name} is {a.dtype} and B {b.name} {b.dtype}; mma.m16n8k* multiplies "
            "float16 by float16 or bfloat16 by bfloat16"
        )
    for name in ("D", "C"):
        opnd = call.operand(name)
        if opnd.dtype != ACCUMULATOR:
            return False, (
                f"{name} {opnd.name} is {opnd.dtype}; the accumulator of mma.m16n8k* with "
                f"{a.dtype} multiplicands is float32 here"
            )
    return True, None


def requires_mma_arch(call: TileCall) -> tuple[bool, str | None]:
    """sm_80 or newer; sm_75 for the float16 m16n8k8 form."""
    dtype = call.operand("A").dtype
    need = min(f.min_sm for f in mma_instructions(dtype, ACCUMULATOR))
    return sm_at_least(call, need, f"mma.sync on {dtype}")


def requires_constant_transposes(call: TileCall) -> tuple[bool, str | None]:
    """transpose_A and transpose_B are constants: they decide which axis of A and B is K."""
    for name in ("transpose_A", "transpose_B"):
        if as_flag(call.arg(name)) is None:
            return False, f"{name} is {call.arg(name)}, not a constant; pass True or False"
    return True, None


def _is(value: Any, x: float) -> bool:
    """Whether ``value`` is the constant ``x`` (a runtime value never is)."""
    return isinstance(value, float) and value == x


def _scalar(value: Any) -> float | Any:
    """A Python float for a constant ``alpha``/``beta``, else the expression itself."""
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, tirx.FloatImm | tirx.IntImm):
        return float(value.value)
    return value


@dataclass(frozen=True)
class Shape:
    """The GEMM's extents and how many instructions tile each."""

    m: int
    n: int
    k: int


@dataclass(frozen=True)
class MmaPlan:
    """One warp GEMM: the instruction and, per tile, the registers each operand gives it."""

    instruction: MmaInstruction
    shape: Shape
    a_words: dict[tuple[int, int], tuple[int, ...]]  # (mt, kt) -> A's 32-bit words
    b_words: dict[tuple[int, int], tuple[int, ...]]  # (kt, nt) -> B's words
    d_registers: dict[tuple[int, int], tuple[int, ...]]  # (mt, nt) -> D's registers
    c_registers: dict[tuple[int, int], tuple[int, ...]] | None  # None: C is not read
    init: str  # "zero", "C", "beta*C" or "D" (C is D: accumulate in place)
    alpha: Any
    beta: Any

    @property
    def tiles(self) -> tuple[int, int, int]:
        i = self.instruction
        return self.shape.m // i.m, self.shape.n // i.n, self.shape.k // i.k

    @property
    def instructions(self) -> int:
        mt, nt, kt = self.tiles
        return mt * nt * kt

    @property
    def scales(self) -> bool:
        """Whether an epilogue ``D = alpha D + beta C`` follows the instructions."""
        return not _is(self.alpha, 1.0)

    @property
    def est_clocks(self) -> float:
        """Tensor-core issue slots, one per 8 of K per instruction (the only variant of the
        op: a relative figure)."""
        return float(self.instructions * self.instruction.k // 8)

    def facts(self) -> dict[str, Any]:
        mt, nt, kt = self.tiles
        return {
            "instruction": self.instruction.spelling,
            "tiles (M x N x K)": f"{mt} x {nt} x {kt}",
            "instructions": self.instructions,
            "D init": self.init,
            "epilogue": f"D = {self.alpha} D + {self.beta} C" if self.scales else "none",
            "order": "K step outermost, then M tile, then N tile",
        }

    def __str__(self) -> str:
        s = self.shape
        return f"{self.instructions} x {self.instruction.spelling} for {s.m}x{s.n}x{s.k}"


@dataclass(frozen=True)
class Fragment:
    """An operand seen as a matrix of logical (row, column): who holds each element
    (:class:`..layout.fit.Holders`)."""

    opnd: Operand
    rows: int
    cols: int
    transposed: bool  # stored as (cols, rows)
    holders: Holders

    @classmethod
    def of(cls, opnd: Operand, rows: int, cols: int, transposed: bool = False) -> Fragment:
        return cls(opnd, rows, cols, transposed,
                   Holders.of_view(opnd, "warp", WARP_LANES, "lane"))  # fmt: skip

    def index(self, row: np.ndarray, col: np.ndarray) -> np.ndarray:
        return col * self.rows + row if self.transposed else row * self.cols + col

    def registers(self, what: str, element: Any) -> int:
        """The register of every lane's element ``element`` (a (row, col) pair of arrays
        over the lanes): the lane the instruction names holds it, in one register for all
        lanes."""
        row, col = element
        return self.holders.slot(
            self.index(row, col), (row, col), lambda j: f"{what} puts it in lane {j}", what
        )


def _word(frag: Fragment, what: str, pair: tuple[Any, Any]) -> int:
    """The 32-bit word holding a 16-bit pair (the elements of halves 0 and 1)."""
    low, high = (frag.registers(what, element) for element in pair)
    return word(frag.holders.name, low, high, f"{what}'s 16-bit pair")


def _multiplicand(frag: Fragment, what: str, element: Any, words: int, tile: tuple[int, int]):
    """The words of one instruction's A (or B) tile whose top-left element is ``tile``."""
    lanes = np.arange(WARP_LANES)
    return tuple(
        _word(
            frag,
            f"{what} word {w}",
            tuple(_offset(element(lanes, w, h), *tile) for h in (0, 1)),
        )
        for w in range(words)
    )


def _accumulator(frag: Fragment, what: str, inst: MmaInstruction, tile: tuple[int, int]):
    """The registers of one instruction's C (or D) tile whose top-left element is ``tile``."""
    lanes = np.arange(WARP_LANES)
    return tuple(
        frag.registers(f"{what} register {r}", _offset(inst.c_element(lanes, r), *tile))
        for r in range(inst.c_registers)
    )


def _fit(inst: MmaInstruction, a: Fragment, b: Fragment, d: Fragment, c: Fragment | None):
    """Each operand's registers per tile, or Decline naming the first misplaced element."""
    mt, nt, kt = d.rows // inst.m, d.cols // inst.n, a.cols // inst.k
    name = f"mma.{inst.shape}"
    a_words = {
        (i, k): _multiplicand(
            a, f"{name} A", inst.a_element, inst.a_words, (i * inst.m, k * inst.k)
        )
        for i in range(mt)
        for k in range(kt)
    }
    b_words = {
        (k, j): _multiplicand(
            b, f"{name} B", inst.b_element, inst.b_words, (k * inst.k, j * inst.n)
        )
        for k in range(kt)
        for j in range(nt)
    }

    def accumulators(frag: Fragment, what: str) -> dict[tuple[int, int], tuple[int, ...]]:
        return {
            (i, j): _accumulator(frag, f"{name} {what}", inst, (i * inst.m, j * inst.n))
            for i in range(mt)
            for j in range(nt)
        }

    return a_words, b_words, accumulators(d, "D"), None if c is None else accumulators(c, "C")


def _offset(element: tuple[Any, Any], rows: int, cols: int) -> tuple[Any, Any]:
    return element[0] + rows, element[1] + cols


def _matrix(opnd: Operand) -> tuple[int, int]:
    """The region's two non-unit extents (a 1 x n or n x 1 region is a matrix too)."""
    ext = list(opnd.extents)
    if any(e is None for e in ext):
        raise Decline(f"{opnd.role} {opnd.describe} has extents that are not constants")
    big = [e for e in ext if e != 1]
    if len(ext) == 2:
        return ext[0], ext[1]
    if len(big) == 2:
        return big[0], big[1]
    raise Decline(
        f"{opnd.role} {opnd.describe} is not a matrix: extents {ext}; gemm takes 2-D regions"
    )


def _shape(call: TileCall, ta: bool, tb: bool) -> Shape:
    a_rows, a_cols = _matrix(call.operand("A"))
    b_rows, b_cols = _matrix(call.operand("B"))
    m, k = (a_cols, a_rows) if ta else (a_rows, a_cols)
    kb, n = (b_cols, b_rows) if tb else (b_rows, b_cols)
    if kb != k:
        raise Decline(
            f"A's K is {k} and B's K is {kb} (transpose_A={ta}, transpose_B={tb}); they "
            "must be equal"
        )
    for name in ("D", "C"):
        got = _matrix(call.operand(name))
        if got != (m, n):
            raise Decline(
                f"{name} {call.operand(name).name} is {got[0]}x{got[1]}; A x B is {m}x{n}"
            )
    bad = [
        f"{n_}={v} (a multiple of {q})"
        for n_, v, q in (("M", m, 16), ("N", n, 8), ("K", k, 8))
        if v % q
    ]
    if bad:
        raise Decline(f"mma.m16n8k* tiles M by 16, N by 8 and K by 8 or 16; needs {', '.join(bad)}")
    return Shape(m, n, k)


def _same_storage(x: Operand, y: Operand) -> bool:
    """Whether two operands are regions of one register array (or views of it)."""
    if x.buffer.same_as(y.buffer):
        return True
    vx, vy = buffer_var(x.buffer.data), buffer_var(y.buffer.data)
    return vx is not None and vy is not None and vx.same_as(vy)


def _init(call: TileCall, alpha: Any, beta: Any) -> str:
    """How D starts: "zero", "C", "beta*C", or "D" (C is D and is accumulated into)."""
    d, c = call.operand("D"), call.operand("C")
    if _is(beta, 0.0):
        return "zero"
    in_place = _same_storage(d, c)
    if not _is(alpha, 1.0):
        if in_place:
            raise Decline(
                f"C is D ({d.name}) with alpha={alpha}: the instructions overwrite C before "
                "alpha D + beta C could read it; give D its own registers"
            )
        return "zero"
    if _is(beta, 1.0):
        return "D" if in_place else "C"
    return "beta*C"


def plan(call: TileCall) -> MmaPlan:
    ta, tb = as_flag(call.arg("transpose_A")), as_flag(call.arg("transpose_B"))
    alpha, beta = _scalar(call.arg("alpha")), _scalar(call.arg("beta"))
    shape = _shape(call, ta, tb)
    init = _init(call, alpha, beta)
    a = Fragment.of(call.operand("A"), shape.m, shape.k, ta)
    b = Fragment.of(call.operand("B"), shape.k, shape.n, tb)
    d = Fragment.of(call.operand("D"), shape.m, shape.n)
    reads_c = init in ("C", "beta*C") or (init == "zero" and not _is(beta, 0.0))
    in_place = _same_storage(call.operand("D"), call.operand("C"))
    c = Fragment.of(call.operand("C"), shape.m, shape.n) if reads_c or init == "D" else None
    refusals = []
    for inst in mma_instructions(call.operand("A").dtype, ACCUMULATOR):
        if shape.k % inst.k:
            refusals.append(f"{inst.shape}: K={shape.k} is not a multiple of {inst.k}")
            continue
        if call.sm is not None and call.sm < inst.min_sm:
            refusals.append(f"{inst.shape}: needs sm_{inst.min_sm}")
            continue
        try:
            a_w, b_w, d_r, c_r = _fit(inst, a, b, d, c)
        except Decline as why:
            refusals.append(f"{inst.shape}: {why}")
            continue
        if in_place and c is not None and c_r != d_r:
            raise Decline(
                f"C and D share {call.operand('D').name}'s registers but place the elements "
                "differently; pass the same region and layout for both, or separate ones"
            )
        return MmaPlan(inst, shape, a_w, b_w, d_r, c_r if reads_c else None, init, alpha, beta)
    raise Decline("no mma form fits: " + "; ".join(refusals))


@variant(
    "gemm",
    "mma.m16n8k*",
    priority=10,
    predicates=[
        requires_cuda,
        requires_scope("warp"),
        requires_all_threads_active,
        requires_registers,
        requires_mma_dtypes,
        requires_mma_arch,
        requires_constant_transposes,
    ],
    plan=plan,
)
def emit(plan: MmaPlan, call: TileCall, given: Mapping[str, Any]):
    """D's initial value, the unrolled instructions, the alpha/beta epilogue."""
    d_buf, c_buf = call.operand("D").buffer, call.operand("C").buffer
    a_buf, b_buf = call.operand("A").buffer, call.operand("B").buffer
    b = Body()
    dv = b.view("d_regs", d_buf, "float32", storage_words(d_buf, 32, 32), "local")
    cv = None
    if plan.c_registers is not None:
        cv = b.view("c_regs", c_buf, "float32", storage_words(c_buf, 32, 32), "local")
    aw = b.view("a_words", a_buf, "uint32", storage_words(a_buf, 16, 32), "local")
    bw = b.view("b_words", b_buf, "uint32", storage_words(b_buf, 16, 32), "local")
    f32 = "float32"

    def scalar(v: Any) -> Any:
        return tirx.const(v, f32) if isinstance(v, float) else tirx.Cast(f32, v)

    if plan.init != "D":
        for key, regs in plan.d_registers.items():
            for r, reg in enumerate(regs):
                if plan.init == "zero":
                    value = tirx.const(0.0, f32)
                elif plan.init == "C":
                    value = cv[plan.c_registers[key][r]]
                else:
                    value = scalar(plan.beta) * cv[plan.c_registers[key][r]]
                b.store(dv, reg, value)
    mt, nt, kt = plan.tiles
    spelling = plan.instruction.spelling
    for k in range(kt):
        for i in range(mt):
            for j in range(nt):
                d = [dv[r] for r in plan.d_registers[(i, j)]]
                a = [aw[w] for w in plan.a_words[(i, k)]]
                bb = [bw[w] for w in plan.b_words[(k, j)]]
                b.evaluate(T.ptx[spelling](*d, *a, *bb, *d))
    if plan.scales:
        for key, regs in plan.d_registers.items():
            for r, reg in enumerate(regs):
                value = scalar(plan.alpha) * dv[reg]
                if plan.c_registers is not None:  # one rounding of alpha D, spelled out:
                    # left to nvcc, which of the two products it fuses is its choice
                    beta_c = scalar(plan.beta) * cv[plan.c_registers[key][r]]
                    value = T.call_pure_extern(
                        f32, "__fmaf_rn", scalar(plan.alpha), dv[reg], beta_c
                    )
                b.store(dv, reg, value)
    return b.func()
