"""elementwise -> smem: an elementwise op over shared-memory tiles.

Accepts: a CUDA target; scope thread / warp / warpgroup / cta with every thread of it
active; dst and every tensor input in shared memory with a layout and constant extents;
the dtype combination the op's rule allows (:mod:`.ops`, the same rule as ``reg``: float32
inputs into a float16/bfloat16 dst, and back, are evaluated in float32 and rounded once);
inputs that broadcast to dst (extent-1 dimensions, numpy's rules; scalars); select's
``pred`` a LambdaExpr over dst's indices.

Emits: no operand says which thread owns which element, so the partition is synthesized
from the scope as for a global <-> shared copy (:func:`..layout.partition.scope_partition`:
``[outer, threads, vec]`` with dst driving the order, the widest vector every operand's
alignment allows, swizzled layouts honoured, masked rounds where the threads do not divide
the vectors). Each step, a thread loads its vector of every tensor input from shared
memory into registers (one ``ld.shared.v*`` each, PTX ISA "ld"), applies the op there, two
elements per instruction where the op has an exact pair form (:data:`.ops.PACKED_FORMS`;
a scalar input broadcast into a register pair), one element at a time otherwise, and
stores the vector of results with one ``st.shared.v*``. An input that broadcasts along
the innermost dimension is read one element at a time (the vector is 1). A predicate's
coordinates come from one more partition operand, the row-major index of dst's region
(:mod:`.element`). The statements are built node by node (:class:`..build.Body`): a shared
view, a vector of registers and its access-wide word per tensor operand, however many.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tvm import tirx

from ..build import Body, address_of
from ..call import Operand, TileCall
from ..codegen import access_dtype, participant_index, storage_words
from ..errors import Decline
from ..layout.atoms import MemoryView, memory_view
from ..layout.partition import (
    MemoryAccesses,
    OnPartition,
    PiecewisePartition,
    ScopePartition,
    scope_partition,
)
from ..layout.register import lift_to
from ..predicates import requires_cuda, requires_known_participants, requires_scope
from ..registry import predicate, variant
from .element import Elements, index_view
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
    requires_lambda_predicate,
)


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
        return True, None

    return predicate(shared_operands, "shared_operands")


@dataclass(frozen=True)
class SmemElementwisePlan(OnPartition):
    """Facts of one elementwise op over shared tiles: who computes which vector."""

    op: str
    dtypes: tuple[str, ...]  # dst, then the tensor inputs in argument order
    bits: tuple[int, ...]  # element bits, same order
    partition: ScopePartition | PiecewisePartition  # operands in the same order
    packed: PackedForm | None
    arith: Arithmetic  # the dtypes inputs are read in, computed in, stored in
    # The partition operand whose offset is an element's row-major index in dst's region
    # (:func:`.element.index_view`), for a predicate over dst's indices; None without one.
    index: int | None = None

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
        if self.index is not None:
            facts["index_operand"] = self.index
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
        index = None
        if op.predicate is not None:
            index = len(views)
            views.append(index_view(dst.extents))
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
        return SmemElementwisePlan(op.name, dtypes, bits, partition, form, arith, index)

    return plan


@dataclass(frozen=True)
class _Steps:
    """One loop of the emitted code: ``full`` rounds for every thread, then (``tail``)
    one round for threads ``tid < tail``; ``offset(k, rnd, tid)`` is the element offset
    of the thread's vector on operand k."""

    vec: int
    full: int
    tail: int
    offset: Any

    def slot(self, k: int, rnd: Any, tid: Any) -> Any:
        """The vector's index in a view of operand k whose element is one vector."""
        return self.offset(k, rnd, tid) // self.vec

    def active(self, rnd: Any, tid: Any) -> Any:
        """Every thread in the full rounds; in the last, partial one, ``tid < tail``."""
        return tirx.Or(rnd < self.full, tid < self.tail) if self.tail else True


def _steps(plan: SmemElementwisePlan) -> list[_Steps]:
    p = plan.partition
    if not plan.masked:
        return [_Steps(p.vec, p.rounds, 0, p.offset)]
    out = []
    for i, piece in enumerate(p.pieces):

        def offset(k, rnd, tid, i=i, piece=piece):
            return p.offset(i, k, rnd * piece.threads + tid)

        out.append(_Steps(piece.vec, piece.full_rounds, piece.tail, offset))
    return out


def make_emit(op: ElementwiseOp):
    def emit(plan: SmemElementwisePlan, call: TileCall, given: Mapping[str, Any]):
        """Load each input's vector into registers, compute, store dst's vector."""
        b = Body()
        elements = Elements.of(op, call)
        tid = participant_index(call)
        for steps in _steps(plan):
            _emit_steps(b, plan, elements, elements.operands(call), steps, tid)
        return b.func()

    return emit


def _emit_steps(
    b: Body, plan: SmemElementwisePlan, elements: Elements, operands: list, s: _Steps, tid: Any
) -> None:
    """One loop of ``s``: each step loads the thread's vector of every tensor input into
    registers, computes dst's vector there (pairs through the pair form's helper, else
    element by element) and stores it."""
    vec, form = s.vec, plan.packed
    # per operand (dst first): its shared tile as vectors, one vector's registers, and
    # those registers as one access-wide word
    tiles, regs, words = [], [], []
    for k, (o, bits) in enumerate(zip(operands, plan.bits, strict=True)):
        wide = access_dtype(vec * bits)
        tiles.append(b.view(f"s{k}", o.buffer, wide, storage_words(o.buffer, bits, vec * bits)))
        regs.append(b.local(f"r{k}", o.dtype, vec))
        words.append(b.view(f"w{k}", regs[k], wide, 1, scope="local"))
    pairs = elements.pairs(b, form.in_dtype) if form else {}
    with b.loop("rnd", s.full + (1 if s.tail else 0)) as rnd, b.when(s.active(rnd, tid)):
        for k in range(1, len(operands)):
            b.store(words[k], 0, tiles[k][s.slot(k, rnd, tid)])
        if form:
            with b.loop("j", vec // 2, unroll=True) as j:
                b.evaluate(elements.pair_call(form, lambda k: address_of(regs[k], 2 * j), pairs))
        else:
            first = None if plan.index is None else s.offset(plan.index, rnd, tid)
            with b.loop("j", vec, unroll=True) as j:
                values = elements.values(lambda k: regs[k][j], None if first is None else first + j)
                b.store(regs[0], j, elements.op.evaluate(values, plan.arith))
        b.store(tiles[0], s.slot(0, rnd, tid), words[0][0])


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
            requires_no_ex2_emulation,
            *([requires_lambda_predicate(op)] if op.predicate else []),
        ],
        plan=make_plan(op),
    )(make_emit(op))


def requires_no_ex2_emulation(call: TileCall) -> tuple[bool, str | None]:
    """``ex2_emulation=`` is elementwise -> reg's (register tiles): not silently dropped."""
    if call.config.get("ex2_emulation") is not None:
        return False, (
            "ex2_emulation= is the register variant's (exp2 of a float32 register tile); "
            "this variant computes from shared memory with MUFU: drop it, or keep the tile "
            "in registers"
        )
    return True, None


for _op in OPS.values():
    _register(_op)
