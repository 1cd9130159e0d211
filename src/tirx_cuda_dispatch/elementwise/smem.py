"""elementwise -> smem: an elementwise op over shared-memory tiles.

Accepts: a CUDA target; scope thread / warp / warpgroup / cta with every thread of it
active; dst and every tensor input in shared memory with a layout and constant extents;
the dtype combination the op's rule allows (:mod:`.ops`, the same rule as ``reg``: float32
inputs into a float16/bfloat16 dst, and back, are evaluated in float32 and rounded once);
inputs that broadcast to dst (extent-1 dimensions, numpy's rules; scalars).

Emits: no operand says which thread owns which element, so the partition is synthesized
from the scope as for a global <-> shared copy (:func:`..layout.partition.scope_partition`:
``[outer, threads, vec]`` with dst driving the order, the widest vector every operand's
alignment allows, swizzled layouts honoured, masked rounds where the threads do not divide
the vectors). Each step, a thread loads its vector of every tensor input from shared
memory into registers (one ``ld.shared.v*`` each, PTX ISA "ld"), applies the op there, two
elements per instruction where the op has an exact pair form (:data:`.ops.PACKED_FORMS`;
a scalar input broadcast into a register pair), one element at a time otherwise, and
stores the vector of results with one ``st.shared.v*``. An input that broadcasts along
the innermost dimension is read one element at a time (the vector is 1).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tvm import tirx
from tvm.script import tirx as T

from ..call import Operand, TileCall
from ..codegen import (
    access_dtype,
    access_view,
    helper_call,
    impl_prim_func,
    participant_index,
    sequence,
)
from ..errors import Decline
from ..layout.atoms import MemoryView, memory_view
from ..layout.partition import (
    MemoryAccesses,
    PiecewisePartition,
    ScopePartition,
    scope_partition,
)
from ..layout.register import lift_to
from ..predicates import requires_cuda, requires_known_participants, requires_scope
from ..registry import predicate, variant
from .ops import (
    OPS,
    Arithmetic,
    ElementwiseOp,
    Input,
    PackedForm,
    arithmetic,
    input_dtypes,
    packed_form,
    requires_dtype_rule,
)

MAX_TENSORS = 4  # dst and at most three tensor inputs (fma)


def _tensor_inputs(op: ElementwiseOp, call: TileCall) -> list[tuple[Input, Operand | None]]:
    return [(i, call.operand(i.role)) for i in op.inputs(call.args) if not i.is_scalar]


def requires_shared_operands(op: ElementwiseOp):
    def shared_operands(call: TileCall) -> tuple[bool, str | None]:
        dst = call.operand("dst")
        if dst is None:
            return False, f"{op.name} dst is not a tensor region"
        try:
            inputs = _tensor_inputs(op, call)
        except Decline as why:
            return False, str(why)
        for inp, o in [(None, dst), *inputs]:
            if o is None:
                return False, f"{op.name} {inp.role} is not a tensor region"
            if o.memory != "shared":
                return False, f"{o.role} {o.name} is {o.scope}; every operand must be shared"
            if o.layout is None:
                return False, f"{o.role} {o.name} has no layout"
            if any(e is None for e in o.extents):
                return False, f"{o.role} {o.name} region extents {list(o.extents)} are not constant"
        if 1 + len(inputs) > MAX_TENSORS:
            return False, f"{op.name} has {1 + len(inputs)} tensor operands; at most 4"
        return True, None

    return predicate(shared_operands, "shared_operands")


@dataclass(frozen=True)
class SmemElementwisePlan:
    """Facts of one elementwise op over shared tiles: who computes which vector."""

    op: str
    dtypes: tuple[str, ...]  # dst, then the tensor inputs in argument order
    bits: tuple[int, ...]  # element bits, same order
    partition: ScopePartition | PiecewisePartition  # operands in the same order
    packed: PackedForm | None
    arith: Arithmetic  # the dtypes inputs are read in, computed in, stored in

    @property
    def masked(self) -> bool:
        return isinstance(self.partition, PiecewisePartition)

    @property
    def vec(self) -> int:
        return self.partition.vec

    @property
    def outer(self) -> int:
        return self.partition.rounds

    def memory_accesses(self) -> MemoryAccesses:
        """dst's accesses (what the picture shows)."""
        return MemoryAccesses("dst", self.partition.accesses(0))

    def facts(self) -> dict:
        p = self.partition
        facts = {
            "vec": self.vec,
            "vec_bits": [self.vec * b for b in self.bits],
            "outer": self.outer,
            "threads": p.threads,
            "packed": self.packed.key if self.packed else None,
        }
        if self.masked:
            facts["pieces"] = [str(piece) for piece in p.pieces]
        if p.narrower_because:
            facts["narrower_because"] = p.narrower_because
        if self.arith.mixed:
            facts["dtypes"] = str(self.arith)
        return facts

    def __str__(self) -> str:
        form = self.packed.key if self.packed else "scalar"
        return f"smem {self.op} {self.dtypes[0]}: {self.outer} rounds x {self.vec} ({form})"


def _lifted(opnd: Operand, dst: Operand) -> MemoryView:
    """``opnd``'s view broadcast to dst's region (stride-0 atoms where it repeats)."""
    view = memory_view(opnd)
    tagged = [(e, s, None) for e, s in view.atoms]
    atoms = lift_to(tagged, [e for e in opnd.extents], list(dst.extents), opnd.name)
    return MemoryView(view.operand, tuple((e, s) for e, s, _ in atoms), view.base, view.swizzle)


def make_plan(op: ElementwiseOp):
    def plan(call: TileCall) -> SmemElementwisePlan:
        dst = call.operand("dst")
        tensors = [o for _, o in _tensor_inputs(op, call)]
        views = [memory_view(dst)] + [_lifted(o, dst) for o in tensors]
        bits = tuple(o.elem_bits for o in [dst, *tensors])
        if min(bits) < 8:
            raise Decline("elements narrower than a byte; needs 8 bits or more")
        threads = call.participation.participants.count  # the threads that run the call
        partition = scope_partition(views, threads, max(bits), driver=0)
        src_dtype = tensors[0].dtype if tensors else dst.dtype
        arith = arithmetic(op, dst.dtype, *input_dtypes(op, call))
        form = (
            packed_form(op, dst.dtype, src_dtype, call.sm) if tensors and not arith.mixed else None
        )
        pieces = partition.pieces if isinstance(partition, PiecewisePartition) else [partition]
        if form is not None and any(p.vec % 2 for p in pieces):
            form = None  # an odd vector has no whole pairs
        dtypes = tuple(o.dtype for o in [dst, *tensors])
        return SmemElementwisePlan(op.name, dtypes, bits, partition, form, arith)

    return plan


@dataclass(frozen=True)
class _Steps:
    """One loop of the emitted code: ``full`` rounds for every thread, then (``tail``)
    one round for threads ``tid < tail``; ``slot(k, rnd, tid)`` indexes operand k's view."""

    vec: int
    full: int
    tail: int
    slot: Any


def _steps(plan: SmemElementwisePlan) -> list[_Steps]:
    p = plan.partition
    if not plan.masked:
        return [_Steps(p.vec, p.rounds, 0, lambda k, rnd, tid: p.slot(k, rnd, tid))]
    out = []
    for i, piece in enumerate(p.pieces):

        def slot(k, rnd, tid, i=i, piece=piece):
            return p.offset(i, k, rnd * piece.threads + tid) // piece.vec

        out.append(_Steps(piece.vec, piece.full_rounds, piece.tail, slot))
    return out


def make_emit(op: ElementwiseOp):
    def emit(plan: SmemElementwisePlan, call: TileCall):
        """Load each input's vector into registers, compute, store dst's vector."""
        return sequence([_emit_steps(op, plan, call, s) for s in _steps(plan)])

    return emit


def _emit_steps(op: ElementwiseOp, plan: SmemElementwisePlan, call: TileCall, steps: _Steps):
    dst = call.operand("dst")
    inputs = op.inputs(call.args)
    tensors = [call.operand(i.role) for i in inputs if not i.is_scalar]
    operands = [dst, *tensors]
    n = len(operands)
    padded = operands + [dst] * (MAX_TENSORS - n)
    bits = list(plan.bits) + [plan.bits[0]] * (MAX_TENSORS - n)
    vec, full, tail, slot = steps.vec, steps.full, steps.tail, steps.slot
    form = plan.packed
    packed = form is not None
    scalars = [i.scalar for i in inputs if i.is_scalar]
    pair_dtype = form.in_dtype if packed else plan.dtypes[0]
    scalar_pad = scalars + [scalars[0] if scalars else 0] * (2 - len(scalars))
    source = form.source(len(inputs)) if packed else None

    rounds = full + (1 if tail else 0)

    def active(rnd: Any, tid: Any) -> Any:
        """Every thread in the full rounds; in the last, partial one, ``tid < tail``."""
        if not tail:
            return tirx.const(True, "bool")
        return tirx.Or(rnd < full, tid < tail)

    def word(buf: Any, k: int) -> Any:
        """The registers of operand k's vector, as one access-wide word."""
        return T.decl_buffer((1,), access_dtype(vec * bits[k]), data=buf.data, scope="local")

    def compute(regs: list[Any], j: int) -> Any:
        vals, k = {}, 0
        for inp in inputs:
            if inp.is_scalar:
                vals[inp.role] = inp.scalar
            else:
                k += 1
                vals[inp.role] = regs[k][j]
        if plan.arith.mixed:  # widened exactly, computed in float32, rounded once into dst
            return op.evaluate(vals, plan.arith)
        return op.compute(vals, plan.dtypes[0])

    def pair_args(regs: list[Any], pairs: list[Any], j: int) -> list[Any]:
        args, k, s = [T.address_of(regs[0][2 * j])], 0, 0
        for inp in inputs:
            if inp.is_scalar:
                args.append(T.address_of(pairs[s][0]))
                s += 1
            else:
                k += 1
                args.append(T.address_of(regs[k][2 * j]))
        return args

    # fmt: off
    @impl_prim_func
    def impl():
        tid = T.meta_var(participant_index(call))
        # views of the shared tiles, registers of one vector and its access-wide word,
        # per operand (dst first); only the operands the call has are declared
        s0 = access_view(padded[0].buffer, vec * bits[0], bits[0])
        r0 = T.alloc_local((vec,), padded[0].dtype)
        w0 = word(r0, 0)
        if n > 1:
            s1 = access_view(padded[1].buffer, vec * bits[1], bits[1])
            r1 = T.alloc_local((vec,), padded[1].dtype)
            w1 = word(r1, 1)
        if n > 2:
            s2 = access_view(padded[2].buffer, vec * bits[2], bits[2])
            r2 = T.alloc_local((vec,), padded[2].dtype)
            w2 = word(r2, 2)
        if n > 3:
            s3 = access_view(padded[3].buffer, vec * bits[3], bits[3])
            r3 = T.alloc_local((vec,), padded[3].dtype)
            w3 = word(r3, 3)
        regs = T.meta_var(
            [r0] if n == 1 else [r0, r1] if n == 2 else [r0, r1, r2] if n == 3 else [r0, r1, r2, r3]
        )
        if packed and len(scalars) > 0:
            p0 = T.alloc_local((2,), pair_dtype)
            p0[0] = scalar_pad[0]
            p0[1] = scalar_pad[0]
        if packed and len(scalars) > 1:
            p1 = T.alloc_local((2,), pair_dtype)
            p1[0] = scalar_pad[1]
            p1[1] = scalar_pad[1]
        pairs = T.meta_var([] if not (packed and scalars) else [p0] if len(scalars) == 1 else [p0, p1])
        for rnd in range(rounds):
            if active(rnd, tid):
                if n > 1:
                    w1[0] = s1[slot(1, rnd, tid)]
                if n > 2:
                    w2[0] = s2[slot(2, rnd, tid)]
                if n > 3:
                    w3[0] = s3[slot(3, rnd, tid)]
                if packed:
                    for j in T.unroll(vec // 2):
                        T.evaluate(helper_call(
                            form.helper, form.meaning, source, *pair_args(regs, pairs, j)
                        ))
                else:
                    for j in T.unroll(vec):
                        r0[j] = compute(regs, j)
                s0[slot(0, rnd, tid)] = w0[0]
    # fmt: on
    return impl


def _register(op: ElementwiseOp) -> None:
    variant(
        op.name,
        "smem",
        priority=10,
        order=1,
        predicates=[
            requires_cuda,
            requires_scope("thread", "warp", "warpgroup", "cta"),
            requires_known_participants,
            requires_shared_operands(op),
            requires_dtype_rule(op, mixed=True),
        ],
        plan=make_plan(op),
    )(make_emit(op))


for _op in OPS.values():
    _register(_op)
