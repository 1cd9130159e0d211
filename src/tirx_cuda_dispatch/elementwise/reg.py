"""elementwise -> reg: an elementwise op over register tiles, each thread on its own bundle.

Accepts: a CUDA target; scope thread / warp / warpgroup / cta with every thread of it
active; every tensor operand in registers (``local``) with a layout; the dtype combination
the op's rule allows (:mod:`.ops`); a dst register layout whose thread axes name the
scope's threads, each once; inputs that keep each element in the thread that owns it in
dst (or hold a copy in every thread); inputs may broadcast (extent-1 dimensions, scalars).

Emits: the dst layout induces the partition (:mod:`..layout.register`), so each thread
applies the op to its own registers: a serial loop over the bundle, one packed pair per
iteration where the target has an exact pair form for the op and dtypes
(``__hadd2``/``__hmax2``/``__hfma2`` on half and bfloat16 pairs, ``cvt.rn.f16x2.f32``,
``add/sub/mul/fma.rn.f32x2`` on sm_100) and the pairs are contiguous and aligned, else
one element per iteration in the op's scalar form. Mixed dtypes (float32 inputs, a
float16 dst: :data:`.ops.MIXED_COMPUTE`) evaluate each element in float32 and round it
once into dst, two at a time with ``cvt.rn.f16x2.f32``/``cvt.rn.bf16x2.f32`` where the
pairs allow.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tvm.script import tirx as T

from ..call import Operand, TileCall
from ..codegen import helper_call, impl_prim_func, storage_words, thread_index
from ..errors import Decline
from ..layout.partition import ScopePartition
from ..layout.register import (
    RegisterView,
    induced_partition,
    lift_to,
    register_layout_misfit,
    register_view,
)
from ..predicates import requires_all_threads_active, requires_cuda, requires_scope
from ..registry import predicate, variant
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
)


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
        return ElementwisePlan(
            op.name,
            dst.dtype,
            partition,
            form if paired else None,
            arith,
            convert if paired else None,
        )

    return plan


def make_emit(op: ElementwiseOp):
    def emit(plan: ElementwisePlan, call: TileCall):
        """Serial loop over each thread's bundle: one pair or one element per step."""
        dst = _dst(call)
        inputs = op.inputs(call.args)
        tensors = [call.operand(i.role) for i in inputs if not i.is_scalar]
        p, form = plan.partition, plan.packed

        def flat(o: Operand, lanes: int) -> Any:
            """A flat view of ``o``'s registers, ``lanes`` elements per item."""
            dtype = o.dtype if lanes == 1 else f"{o.dtype}x{lanes}"
            words = storage_words(o.buffer, o.elem_bits, o.elem_bits * lanes)
            return T.decl_buffer((words,), dtype, data=o.buffer.data, scope="local")

        def value_of(views: list[Any], rnd: Any, tid: Any) -> Any:
            vals, k = {}, 0
            for inp in inputs:
                if inp.is_scalar:
                    vals[inp.role] = inp.scalar
                else:
                    k += 1
                    vals[inp.role] = views[k][p.slot(k, rnd, tid)]
            return op.evaluate(vals, plan.arith)

        if plan.convert is not None:
            return _emit_converted(plan, call, op)
        packed = form is not None
        if packed and any(i.is_scalar for i in inputs):
            return _emit_packed_with_scalars(plan, call, op)
        lanes = 2 if packed else 1
        source = form.source(len(tensors)) if form else None
        operands = [dst] + tensors
        if len(operands) > 4:
            raise Decline(f"{op.name} has {len(operands)} tensor operands; at most 4 are supported")
        # Pad to four so the body below declares a fixed set of views.
        padded = operands + [dst] * (4 - len(operands))

        # fmt: off
        @impl_prim_func
        def impl():
            tid = T.meta_var(thread_index(call))
            v0 = flat(padded[0], lanes)
            v1 = flat(padded[1], lanes)
            v2 = flat(padded[2], lanes)
            v3 = flat(padded[3], lanes)
            views = T.meta_var([v0, v1, v2, v3][: len(operands)])
            for rnd in range(p.rounds):
                if packed:
                    T.evaluate(helper_call(
                        form.helper,
                        form.meaning,
                        source,
                        *[T.address_of(views[k][p.slot(k, rnd, tid)])
                          for k in range(len(views))],
                    ))
                else:
                    views[0][p.slot(0, rnd, tid)] = value_of(views, rnd, tid)
        # fmt: on
        return impl

    return emit


def _emit_converted(plan: ElementwisePlan, call: TileCall, op: ElementwiseOp):
    """The pair loop of a mixed call: both elements of a pair evaluated in the compute
    dtype into a register pair, which one conversion rounds into dst's pair (each element
    as the scalar conversion would: ``cvt.rn.f16x2.f32``, PTX ISA "cvt")."""
    dst = _dst(call)
    inputs = op.inputs(call.args)
    tensors = [call.operand(i.role) for i in inputs if not i.is_scalar]
    p, form, arith = plan.partition, plan.convert, plan.arith
    operands = [dst] + tensors
    if len(operands) > 4:
        raise Decline(f"{op.name} has {len(operands)} tensor operands; at most 4 are supported")
    padded = operands + [dst] * (4 - len(operands))
    source = form.source(1)

    def flat(o: Operand, lanes: int) -> Any:
        dtype = o.dtype if lanes == 1 else f"{o.dtype}x{lanes}"
        words = storage_words(o.buffer, o.elem_bits, o.elem_bits * lanes)
        return T.decl_buffer((words,), dtype, data=o.buffer.data, scope="local")

    def value_of(views: list[Any], rnd: Any, tid: Any, j: Any) -> Any:
        vals, k = {}, 0
        for inp in inputs:
            if inp.is_scalar:
                vals[inp.role] = inp.scalar
            else:
                k += 1
                vals[inp.role] = views[k][p.offset(k, rnd, tid) + j]
        return op.evaluate(vals, arith, rounded=False)

    # fmt: off
    @impl_prim_func
    def impl():
        tid = T.meta_var(thread_index(call))
        d2 = flat(padded[0], 2)
        v1 = flat(padded[1], 1)
        v2 = flat(padded[2], 1)
        v3 = flat(padded[3], 1)
        views = T.meta_var([d2, v1, v2, v3][: len(operands)])
        # a vector-typed pair keeps the alignment the pair conversion reads with
        pair = T.alloc_local((1,), f"{arith.compute}x2")
        wide = T.decl_buffer((2,), arith.compute, data=pair.data, scope="local")
        for rnd in range(p.rounds):
            for j in T.unroll(2):
                wide[j] = value_of(views, rnd, tid, j)
            T.evaluate(helper_call(
                form.helper, form.meaning, source,
                T.address_of(d2[p.slot(0, rnd, tid)]), T.address_of(pair[0]),
            ))
    # fmt: on
    return impl


def _emit_packed_with_scalars(plan: ElementwisePlan, call: TileCall, op: ElementwiseOp):
    """The pair loop where some inputs are scalars: each scalar is broadcast once into a
    two-element register pair, whose address the pair helper reads every step."""
    dst = _dst(call)
    inputs = op.inputs(call.args)
    tensors = [call.operand(i.role) for i in inputs if not i.is_scalar]
    scalars = [i.scalar for i in inputs if i.is_scalar]
    p, form = plan.partition, plan.packed
    in_dtype = form.in_dtype
    operands = [dst] + tensors
    padded = operands + [dst] * (3 - len(operands))
    scalar_pad = scalars + [scalars[0]] * (2 - len(scalars))
    # helper argument k after d: ("view", index into views) or ("pair", index into pairs)
    order, t = [], 0
    for i in inputs:
        if i.is_scalar:
            order.append(("pair", len([o for o in order if o[0] == "pair"])))
        else:
            t += 1
            order.append(("view", t))

    def flat(o: Operand) -> Any:
        words = storage_words(o.buffer, o.elem_bits, o.elem_bits * 2)
        return T.decl_buffer((words,), f"{o.dtype}x2", data=o.buffer.data, scope="local")

    def argument(views, pairs, kind, k, rnd, tid):
        if kind == "pair":
            return T.address_of(pairs[k][0])
        return T.address_of(views[k][p.slot(k, rnd, tid)])

    source = form.source(len(inputs))

    # fmt: off
    @impl_prim_func
    def impl():
        tid = T.meta_var(thread_index(call))
        v0 = flat(padded[0])
        v1 = flat(padded[1])
        v2 = flat(padded[2])
        views = T.meta_var([v0, v1, v2][: len(operands)])
        s0 = T.alloc_local((2,), in_dtype)
        s0[0] = scalar_pad[0]
        s0[1] = scalar_pad[0]
        if len(scalars) > 1:
            s1 = T.alloc_local((2,), in_dtype)
            s1[0] = scalar_pad[1]
            s1[1] = scalar_pad[1]
            for rnd in range(p.rounds):
                T.evaluate(helper_call(
                    form.helper, form.meaning, source,
                    T.address_of(views[0][p.slot(0, rnd, tid)]),
                    *[argument(views, [s0, s1], kind, k, rnd, tid) for kind, k in order],
                ))
        else:
            for rnd in range(p.rounds):
                T.evaluate(helper_call(
                    form.helper, form.meaning, source,
                    T.address_of(views[0][p.slot(0, rnd, tid)]),
                    *[argument(views, [s0], kind, k, rnd, tid) for kind, k in order],
                ))
    # fmt: on
    return impl


def _register(op: ElementwiseOp) -> None:
    variant(
        op.name,
        "reg",
        priority=10,
        predicates=[
            requires_cuda,
            requires_scope("thread", "warp", "warpgroup", "cta"),
            requires_all_threads_active,
            requires_register_operands(op),
            requires_dtype_rule(op, mixed=True),
            requires_anchor_layout,
        ],
        plan=make_plan(op),
    )(make_emit(op))


for _op in OPS.values():
    _register(_op)
