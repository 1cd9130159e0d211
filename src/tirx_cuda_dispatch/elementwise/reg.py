"""elementwise -> reg: an elementwise op over register tiles, each thread on its own bundle.

Accepts: a CUDA target; scope thread / warp / warpgroup / cta with every thread of it
active, or whole warps of it as a warp's vote decides (``if __any_sync(...)``: each warp
computes its own registers, the others keep theirs); every tensor operand in registers
(``local``) with a layout; the dtype combination the op's rule allows (:mod:`.ops`); a
dst register layout whose thread axes name the scope's threads, each once; inputs that
keep each element in the thread that owns it in dst (or hold a copy in every thread);
inputs may broadcast (extent-1 dimensions, scalars); select's ``pred`` a LambdaExpr over
dst's indices.

Emits: the dst layout induces the partition (:mod:`..layout.register`), so each thread
applies the op to its own registers: a serial loop over the bundle, one packed pair per
iteration where the target has an exact pair form for the op and dtypes
(``__hadd2``/``__hmax2``/``__hmin2``/``__hfma2`` on half and bfloat16 pairs,
``cvt.rn.f16x2.f32``, ``add/sub/mul/fma.rn.f32x2`` on sm_100) and the pairs are contiguous
and aligned, else one element per iteration in the op's scalar form. Mixed dtypes (float32
inputs, a float16 dst: :data:`.ops.MIXED_COMPUTE`) evaluate each element in float32 and
round it once into dst, two at a time with ``cvt.rn.f16x2.f32``/``cvt.rn.bf16x2.f32``
where the pairs allow. ``exp2`` over float32 takes ``ex2_emulation=k`` (FlashAttention-4's
exponential emulation): every k-th element of each thread's bundle is computed on the FMA
pipe instead of the MUFU pipe (:func:`ex2_on_fma`), for kernels whose exponentials
outrun the MUFU pipe (attention at head dim 64). A predicate's coordinates come from one more partition operand,
the row-major index of dst's region (:mod:`.element`). The statements are built node by
node (:class:`..build.Body`): one register view per tensor operand, however many.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from tvm import tirx
from tvm.script import tirx as T

from ..build import Body, address_of
from ..call import Operand, TileCall
from ..codegen import helper_call, storage_words, thread_index
from ..errors import Decline
from ..irfacts import as_int
from ..layout.partition import ScopePartition
from ..layout.register import (
    RegisterView,
    induced_partition,
    lift_to,
    register_layout_misfit,
    register_view,
)
from ..predicates import requires_cuda, requires_scope, requires_whole_warps_active
from ..registry import predicate, variant
from .element import Elements, index_view
from .ops import (
    OPS,
    Arithmetic,
    ElementwiseOp,
    Input,
    PackedForm,
    arithmetic,
    convert_form,
    input_dtypes,
    packed_form,
    requires_dtype_rule,
    requires_lambda_predicate,
    unary_argument,
)

EX2_EMULATION = "ex2_emulation"  # config key: one element in k of exp2 on the FMA pipe
# 2^f on [-1/2, 1/2], degree 3 (Horner: three FFMA) with p(0) = 1 exactly, fitted for the
# least largest relative error (Lawson's iteration over 4,001 Chebyshev points in float64,
# rounded to float32): at most 1.02e-4 relative (1.1e-4 with float32 rounding), below float16's half ulp (2.4e-4) that P
# is rounded to after, for x >= -126; 2^0 is exactly 1, 2^-127 (every x <= -127, -inf)
# exactly +0 and 2^128 (every x >= 128, +inf) +inf. Between -127 and -126 the result is a
# subnormal that is not 2^x (below 2^-126: every .ftz operation after flushes it to 0).
EX2_POLY = (1.0, 0.6932829, 0.24221097, 0.05500893)
EX2_POLY_ERROR = 1.1e-4
ROUND_MAGIC = 12582912.0  # 1.5 * 2^23: x + it holds round(x) in its low mantissa bits
EX2_MIN = -127.0  # n = -127 only with f >= 0 (p >= 1): the bits stay >= +0
EX2_MAX = 128.0  # n = 128 with f = 0: the bits of +inf; above, n << 23 would reach the sign


def ex2_on_fma(b: Body, x: Any, tmp: Any) -> Any:
    """2^x in float32 without the MUFU pipe: x (clamped to [-127, 128]; a NaN becomes
    -127, so 0, where MUFU.EX2 gives NaN) is split into n = round(x)
    and f = x - n in [-1/2, 1/2] by one add of 1.5 * 2^23 (FADD: n lands in the low bits,
    rounded to nearest) and one subtract; 2^f is :data:`EX2_POLY` in f; n << 23 added to
    its bits scales it by 2^n (SHL, IADD). About 8 instructions on the FMA and integer
    pipes where MUFU.EX2 takes one MUFU slot of 8 cycles a warp. ``tmp``: two float32
    registers (the stored intermediates keep the rounding add from being folded)."""
    b.store(tmp, 0, T.min(T.max(x, T.float32(EX2_MIN)), T.float32(EX2_MAX)))
    b.store(tmp, 1, tmp[0] + T.float32(ROUND_MAGIC))
    f = tmp[0] - (tmp[1] - T.float32(ROUND_MAGIC))
    poly = T.float32(EX2_POLY[3])
    for c in reversed(EX2_POLY[:3]):
        poly = poly * f + T.float32(c)
    scale = T.shift_left(T.reinterpret("uint32", tmp[1]), tirx.const(23, "uint32"))
    return T.reinterpret("float32", T.reinterpret("uint32", poly) + scale)


def requires_ex2_emulation(op: ElementwiseOp):
    """``ex2_emulation=k`` only on exp2 into float32 from float32, k a constant >= 1."""

    def ex2_emulation(call: TileCall) -> tuple[bool, str | None]:
        value = call.config.get(EX2_EMULATION)
        if value is None:
            return True, None
        if op.name != "exp2":
            return False, (
                f"{EX2_EMULATION}={value} is exp2's (2^x on the FMA pipe); {op.name} has no "
                f"such form: drop {EX2_EMULATION}="
            )
        k = as_int(value)
        if k is None or k < 1:
            return False, (
                f"{EX2_EMULATION}={value}: write a constant k >= 1 (every k-th element of a "
                "thread's bundle on the FMA pipe; 1: all of them)"
            )
        dst = _dst(call)
        dtypes, _ = input_dtypes(op, call)
        if str(dst.dtype) != "float32" or any(str(d) != "float32" for d in dtypes.values()):
            held = ", ".join(f"{role} {d}" for role, d in dtypes.items())
            return False, (
                f"{EX2_EMULATION}= computes in float32; dst {dst.name} is {dst.dtype} ({held}): "
                "exp2 of float32 into a float32 tile, or drop it"
            )
        return True, None

    return predicate(ex2_emulation, "ex2_emulation")


def _dst(call: TileCall) -> Operand:
    dst = call.operand("dst")
    if dst is None:
        raise Decline(f"{call.op} dst is not a tensor region")
    return dst


def _tensor_inputs(op: ElementwiseOp, call: TileCall) -> list[tuple[Input, Operand]]:
    return [(i, call.operand(i.role)) for i in op.inputs(call.args) if not i.is_scalar]


def requires_register_operands(op: ElementwiseOp):
    def register_operands(call: TileCall) -> tuple[bool, str | None]:
        try:
            operands = [_dst(call)] + [o for _, o in _tensor_inputs(op, call)]
        except Decline as why:
            return False, str(why)
        for o in operands:
            if o.memory != "local":
                return False, f"{o.role} {o.name} is {o.scope}; every operand must be local"
            if o.layout is None:
                return False, f"{o.role} {o.name} has no layout"
        return True, None

    return predicate(register_operands, "register_operands")


def requires_anchor_layout(call: TileCall) -> tuple[bool, str | None]:
    """dst's register layout induces the partition: it must name the scope's threads."""
    misfit = register_layout_misfit(_dst(call), call.scope)  # dst checked by register_operands
    return misfit is None, misfit


@dataclass(frozen=True)
class ElementwisePlan:
    """Facts of one elementwise op over registers: each thread's bundle and its steps."""

    op: str
    dtype: str  # dst dtype
    partition: ScopePartition  # operands: dst, then the tensor inputs in argument order
    packed: PackedForm | None
    arith: Arithmetic  # inputs -> compute -> dst dtypes
    convert: PackedForm | None = None  # the pair conversion compute -> dst, if paired
    # The partition operand whose offset is an element's row-major index in dst's region
    # (:func:`.element.index_view`), for a predicate over dst's indices; None without one.
    index: int | None = None
    emulate: int = 0  # exp2: every emulate-th step on the FMA pipe (ex2_on_fma); 0: none

    @property
    def vec(self) -> int:
        return self.partition.vec

    @property
    def outer(self) -> int:
        return self.partition.rounds

    def facts(self) -> dict:
        facts = {
            "vec": self.vec,
            "outer": self.outer,
            "regs_per_thread": self.vec * self.outer,
            "packed": self.packed.key if self.packed else None,
            "threads": self.partition.threads,
        }
        if self.arith.mixed:
            facts["dtypes"] = str(self.arith)
            facts["convert"] = self.convert.key if self.convert else None
        if self.index is not None:
            facts["index_operand"] = self.index
        if self.emulate:
            share = "every element" if self.emulate == 1 else f"one element in {self.emulate}"
            facts[EX2_EMULATION] = (
                f"{share} of each thread's bundle computed on the FMA pipe (a degree-3 "
                "polynomial of the fraction, the integer part added to the exponent bits: "
                f"about 8 instructions, relative error below {EX2_POLY_ERROR}), the rest "
                "MUFU.EX2"
            )
        return facts

    def __str__(self) -> str:
        form = (self.packed or self.convert).key if self.packed or self.convert else "scalar"
        return f"reg {self.op} {self.arith}: {self.outer} steps x {self.vec} ({form})"


def _lifted(opnd: Operand, dst: Operand) -> RegisterView:
    view = register_view(opnd)
    atoms = lift_to(view.atoms, opnd.extents, dst.extents, opnd.name)
    return RegisterView(view.operand, atoms, view.replicas, view.base)


def make_plan(op: ElementwiseOp):
    def plan(call: TileCall) -> ElementwisePlan:
        dst = _dst(call)
        tensors = _tensor_inputs(op, call)
        views = [register_view(dst)] + [_lifted(o, dst) for _, o in tensors]
        index = None
        if op.predicate is not None:
            index = len(views)
            views.append(index_view(dst.extents))
        src_dtype = tensors[0][1].dtype if tensors else dst.dtype
        arith = arithmetic(op, dst.dtype, *input_dtypes(op, call))
        convert = convert_form(arith, call.sm)
        # A scalar input (the dtype rule gave it the inputs' dtype) joins a pair form as a
        # broadcast pair: max(x, 0) on half pairs is one HMNMX2 per pair. A mixed call
        # computes element by element and rounds pairs into dst with one conversion.
        form = None
        if tensors and not arith.mixed:
            form = packed_form(op, dst.dtype, src_dtype, call.sm)
        bits = dst.elem_bits
        widths = ([(2 * bits, 2)] if form or convert else []) + [(bits, 1)]
        partition = induced_partition(views, 0, call.scope, call.thread_count, widths)
        paired = partition.vec == 2
        emulate = as_int(call.config.get(EX2_EMULATION, 0)) if op.name == "exp2" else 0
        return ElementwisePlan(
            op.name,
            dst.dtype,
            partition,
            form if paired else None,
            arith,
            convert if paired else None,
            index,
            emulate or 0,
        )

    return plan


def make_emit(op: ElementwiseOp):
    def emit(plan: ElementwisePlan, call: TileCall, given: Mapping[str, Any]):
        """Serial loop over each thread's bundle: one pair or one element per step."""
        b = Body()
        elements = Elements.of(op, call)
        # A pair form reads every operand as pairs; a pair conversion writes dst's pairs only.
        views = [
            _registers(b, f"v{k}", o, 2 if plan.packed or (plan.convert and k == 0) else 1)
            for k, o in enumerate(elements.operands(call))
        ]
        steps = (
            _packed_steps if plan.packed else _converted_steps if plan.convert else _scalar_steps
        )
        steps(b, plan, elements, views, thread_index(call))
        return b.func()

    return emit


def _registers(b: Body, name: str, o: Operand, lanes: int) -> Any:
    """A flat view of ``o``'s registers, ``lanes`` elements per item."""
    dtype = o.dtype if lanes == 1 else f"{o.dtype}x{lanes}"
    words = storage_words(o.buffer, o.elem_bits, o.elem_bits * lanes)
    return b.view(name, o.buffer, dtype, words, scope="local")


def _scalar_steps(
    b: Body, plan: ElementwisePlan, elements: Elements, views: list, tid: Any
) -> None:
    """One element a step, in the op's scalar form (exp2 with ``emulate``: every
    emulate-th step by :func:`ex2_on_fma`, the loop unrolled so each step is one or the
    other)."""
    p, every = plan.partition, plan.emulate
    if every:  # exp2's argument (src * scale + bias) and two registers for ex2_on_fma
        argument = replace(elements.op, compute=lambda v, dtype: unary_argument(v))
        tmp = b.local("ex2_tmp", "float32", 2)
    with b.loop("rnd", p.rounds, unroll=bool(every)) as rnd:
        values = elements.values(
            lambda k: views[k][p.slot(k, rnd, tid)],
            None if plan.index is None else p.offset(plan.index, rnd, tid),
        )
        slot = p.slot(0, rnd, tid)
        if every:
            with b.when(rnd % every == every - 1):
                x = argument.evaluate(values, plan.arith)
                b.store(views[0], slot, ex2_on_fma(b, x, tmp))
            with b.when(rnd % every != every - 1):
                b.store(views[0], slot, elements.op.evaluate(values, plan.arith))
        else:
            b.store(views[0], slot, elements.op.evaluate(values, plan.arith))


def _packed_steps(b: Body, plan: ElementwisePlan, elements: Elements, views: list, tid: Any):
    """One pair a step through the pair form's helper; each scalar input is broadcast once
    into a register pair, whose address the helper reads every step."""
    p, form = plan.partition, plan.packed
    pairs = elements.pairs(b, form.in_dtype)
    with b.loop("rnd", p.rounds) as rnd:
        b.evaluate(
            elements.pair_call(form, lambda k: address_of(views[k], p.slot(k, rnd, tid)), pairs)
        )


def _converted_steps(b: Body, plan: ElementwisePlan, elements: Elements, views: list, tid: Any):
    """The pair loop of a mixed call: both elements of a pair evaluated in the compute
    dtype into a register pair, which one conversion rounds into dst's pair (each element
    as the scalar conversion would: ``cvt.rn.f16x2.f32``, PTX ISA "cvt")."""
    p, form, arith = plan.partition, plan.convert, plan.arith
    # a vector-typed pair keeps the alignment the pair conversion reads with
    pair = b.local("pair", f"{arith.compute}x2", 1)
    wide = b.view("wide", pair, arith.compute, 2, scope="local")
    with b.loop("rnd", p.rounds) as rnd:
        with b.loop("j", 2, unroll=True) as j:
            values = elements.values(
                lambda k: views[k][p.offset(k, rnd, tid) + j],
                None if plan.index is None else p.offset(plan.index, rnd, tid) + j,
            )
            b.store(wide, j, elements.op.evaluate(values, arith, rounded=False))
        dst = address_of(views[0], p.slot(0, rnd, tid))
        b.evaluate(helper_call(form.helper, form.meaning, form.source(1), dst, address_of(pair, 0)))


def _register(op: ElementwiseOp) -> None:
    variant(
        op.name,
        "reg",
        priority=10,
        predicates=[
            requires_cuda,
            requires_scope("thread", "warp", "warpgroup", "cta"),
            requires_whole_warps_active,
            requires_register_operands(op),
            requires_dtype_rule(op, mixed=True),
            requires_anchor_layout,
            requires_ex2_emulation(op),
            *([requires_lambda_predicate(op)] if op.predicate else []),
        ],
        plan=make_plan(op),
    )(make_emit(op))


for _op in OPS.values():
    _register(_op)
