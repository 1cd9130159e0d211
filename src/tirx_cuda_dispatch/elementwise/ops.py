"""The elementwise ops TVM 0.27 defines for CUDA, as data: operands, dtype rules, math.

Each :class:`ElementwiseOp` says how to read a call's arguments (which are tensor regions,
which scalars, which a predicate over dst's indices), which dtype combinations it accepts,
the scalar TIR expression of one element, and the packed two-element forms (PTX ISA "Half
Precision Floating-Point Instructions": ``add/sub/mul/fma/max/min .f16x2 .bf16x2``; "cvt
... .f16x2.f32"; and on sm_100 ``add/sub/mul/fma .f32x2``) whose results equal the scalar
form bit for bit. A variant picks from this table; the table knows nothing about
partitions.

TVM 0.27 defines ``minimum``, ``memset`` and ``select`` but has no CUDA variant of them;
ours are their only CUDA lowering. ``select(dst, true_value, false_value, pred)`` takes
``pred``, a ``LambdaExpr`` over dst's indices: ``pred.apply([i0, i1, ...])`` is the
condition of the element at those coordinates of dst's region (counted from the region's
first element, as TVM's Trainium lowering applies it).

Mixed dtypes (:data:`MIXED_COMPUTE`, :class:`Arithmetic`): a math op whose tensor inputs
share one float dtype and whose dst has another is evaluated in float32, the inputs widened
exactly, and its result rounded once to nearest even into dst; the scalars (bias, scale)
have float32's dtype. TVM's built-in variant does the same for float32 inputs (it
evaluates in the inputs' dtype and casts the result); for float16/bfloat16 inputs it rounds
at the inputs' precision first, which we do not copy (docs/elementwise_reg.md).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any

from tvm import tirx
from tvm.ir import TensorRegion, is_prim_expr
from tvm.script import tirx as T
from tvm.tirx import LambdaExpr

from ..codegen import HelperMeaning
from ..errors import Decline
from ..registry import Predicate, predicate

FLOATS = ("float16", "bfloat16", "float32", "float64")


@dataclass(frozen=True)
class Input:
    """One input of an elementwise call: a tensor region (argument ``index``) or a scalar."""

    role: str  # "src", "src2", "bias", "scale", "value", ...
    index: int | None  # argument index of a tensor region, None for a scalar
    scalar: Any = None  # the scalar expression

    @property
    def is_scalar(self) -> bool:
        return self.index is None


@dataclass(frozen=True)
class ElementwiseOp:
    name: str
    family: str  # unary / binary / fma / cast / fill / zero / select
    roles: tuple[str, ...]  # the inputs after dst, in argument order
    float_only: bool
    compute: Callable[[dict[str, Any], str], Any]  # (value per role, dst dtype) -> value
    packed: tuple[str, ...] = ()  # keys of PACKED_FORMS
    # The argument that is a LambdaExpr over dst's indices (select's "pred"); compute
    # receives its body applied to the element's coordinates under that name.
    predicate: str | None = None

    def inputs(self, args: Sequence[Any]) -> list[Input]:
        """The call's inputs (tensor regions or scalars) in the op's roles."""
        out = []
        for i, role in enumerate(self.roles, start=1):
            arg = args[i] if i < len(args) else None
            if arg is None:
                continue
            if isinstance(arg, TensorRegion):
                out.append(Input(role, i))
            elif is_prim_expr(arg):
                out.append(Input(role, None, arg))
            else:
                raise Decline(
                    f"{self.name} {role} is a {type(arg).__name__}, needs a region or scalar"
                )
        return out

    def evaluate(self, values: dict[str, Any], arith: Arithmetic, rounded: bool = True) -> Any:
        """One element's value under ``arith``: tensor inputs widened (exactly) to the
        compute dtype, the op evaluated there, the result rounded once into dst; with
        ``rounded=False`` the compute-dtype value (a pair conversion rounds it)."""
        if arith.inputs != arith.compute:
            values = {
                role: v
                if role not in self.roles or str(v.ty) == arith.compute
                else T.Cast(arith.compute, v)
                for role, v in values.items()
            }
        out = self.compute(values, arith.compute)
        if rounded and arith.compute != arith.dst:
            out = T.Cast(arith.dst, out)
        return out


def _const(dtype: str, value: float) -> Any:
    return tirx.const(value, dtype)


# IEEE round-to-nearest intrinsics: CUDA's own ``/`` and ``sqrtf`` become approximations
# under fast-math flags (TVM's NVRTC build differs from numpy by 1 ulp in 18% of float32
# quotients on the H200); these stay correctly rounded whatever the flags.
_CORRECTLY_ROUNDED = {
    ("div", "float32"): "__fdiv_rn",
    ("div", "float64"): "__ddiv_rn",
    ("sqrt", "float32"): "__fsqrt_rn",
    ("sqrt", "float64"): "__dsqrt_rn",
    ("rcp", "float32"): "__frcp_rn",
    ("rcp", "float64"): "__drcp_rn",
}


def _rounded(kind: str, fallback: Callable[..., Any]) -> Callable[..., Any]:
    def compute(*args: Any) -> Any:
        dtype = str(args[0].ty)
        name = _CORRECTLY_ROUNDED.get((kind, dtype))
        return T.call_pure_extern(dtype, name, *args) if name else fallback(*args)

    return compute


_div = _rounded("div", lambda a, b: a / b)
_sqrt = _rounded("sqrt", T.sqrt)
_reciprocal = _rounded("rcp", lambda x: _const(str(x.ty), 1.0) / x)


def _silu(x: Any) -> Any:
    return x / (_const(str(x.ty), 1.0) + T.exp(_const(str(x.ty), 0.0) - x))


def unary_argument(v: dict[str, Any]) -> Any:
    """``src * scale + bias``: what TVM's unary math (optional scale and bias) applies its
    function to."""
    x = v["src"]
    if "scale" in v:
        x = x * v["scale"]
    if "bias" in v:
        x = x + v["bias"]
    return x


def _unary(fn: Callable[[Any], Any]) -> Callable[[dict[str, Any], str], Any]:
    """``fn(src * scale + bias)``: TVM's unary math takes an optional scale and bias."""
    return lambda v, dtype: fn(unary_argument(v))


def _binary(fn: Callable[[Any, Any], Any]) -> Callable[[dict[str, Any], str], Any]:
    return lambda v, dtype: fn(v["src"], v["src2"])


def _cast(v: dict[str, Any], dtype: str) -> Any:
    return T.Cast(dtype, v["src"])


def _fma(v: dict[str, Any], dtype: str) -> Any:
    return v["src"] * v["scale"] + v["bias"]  # CUDA contracts this to one rounding (fma)


def _select(v: dict[str, Any], dtype: str) -> Any:
    return tirx.Select(v["pred"], v["true_value"], v["false_value"])


@dataclass(frozen=True)
class PackedForm:
    """A pair of elements in one instruction, rounding exactly as the scalar form does."""

    key: str  # e.g. "max_f16x2"
    out_dtype: str  # element dtype of the result
    in_dtype: str  # element dtype of the inputs
    min_sm: int
    statement: str  # one C statement over d, a, b, c (pointers to pairs)

    @property
    def helper(self) -> str:
        return f"tirx_cuda_dispatch_{self.key}"

    @property
    def meaning(self) -> HelperMeaning:
        """The helper's semantics as data (what the simulator executes)."""
        op = self.key.split("_")[0]
        return HelperMeaning("pairwise", op=op, out_dtype=self.out_dtype, in_dtype=self.in_dtype)

    def source(self, n_inputs: int) -> str:
        out_t, in_t = _PAIR_CTYPE[self.out_dtype], _PAIR_CTYPE[self.in_dtype]
        names = "abc"[:n_inputs]
        params = ", ".join(["void* d_"] + [f"const void* {n}_" for n in names])
        casts = "".join(f"  const {in_t}* {n} = (const {in_t}*){n}_;\n" for n in names)
        return (
            f"__forceinline__ __device__ void {self.helper}({params}) {{\n"
            f"  {out_t}* d = ({out_t}*)d_;\n{casts}  {self.statement}\n}}\n"
        )


_PAIR_CTYPE = {"float16": "half2", "bfloat16": "nv_bfloat162", "float32": "float2"}


def _f32x2(mnemonic: str, n: int) -> str:
    """Inline PTX for sm_100's packed f32 pair (a .b64 register holds both)."""
    ops = ", ".join(f"%{i}" for i in range(n + 1))
    ins = ", ".join(f'"l"(*(const unsigned long long*){x})' for x in "abc"[:n])
    return f'asm("{mnemonic}.rn.f32x2 {ops};" : "=l"(*(unsigned long long*)d) : {ins});'


def _packed(key: str, out_dtype: str, in_dtype: str, min_sm: int, stmt: str) -> PackedForm:
    return PackedForm(key, out_dtype, in_dtype, min_sm, stmt)


# PTX ISA 9.7.4 (half precision .f16x2/.bf16x2), 9.7.3 (.f32x2, sm_100), 9.7.9.21 (cvt pack).
PACKED_FORMS = {
    f.key: f
    for f in [
        *(
            _packed(f"{op}_{t}", dt, dt, sm, f"*d = __h{op}2(*a, *b);")
            for t, dt, sm in (("f16x2", "float16", 53), ("bf16x2", "bfloat16", 90))
            for op in ("add", "sub", "mul")
        ),
        *(
            _packed(f"{op}_{t}", dt, dt, sm, f"*d = __h{op}2(*a, *b);")
            for t, dt, sm in (("f16x2", "float16", 80), ("bf16x2", "bfloat16", 90))
            for op in ("max", "min")
        ),
        _packed("fma_f16x2", "float16", "float16", 53, "*d = __hfma2(*a, *b, *c);"),
        _packed("fma_bf16x2", "bfloat16", "bfloat16", 90, "*d = __hfma2(*a, *b, *c);"),
        _packed("cvt_f16x2_f32", "float16", "float32", 53, "*d = __float22half2_rn(*a);"),
        _packed("cvt_bf16x2_f32", "bfloat16", "float32", 80, "*d = __float22bfloat162_rn(*a);"),
        _packed("add_f32x2", "float32", "float32", 100, _f32x2("add", 2)),
        _packed("sub_f32x2", "float32", "float32", 100, _f32x2("sub", 2)),
        _packed("mul_f32x2", "float32", "float32", 100, _f32x2("mul", 2)),
        _packed("fma_f32x2", "float32", "float32", 100, _f32x2("fma", 3)),
    ]
}


def _pairs(op: str, *dtypes: str) -> tuple[str, ...]:
    short = {"float16": "f16x2", "bfloat16": "bf16x2", "float32": "f32x2"}
    return tuple(f"{op}_{short[d]}" for d in dtypes)


UNARY_ROLES = ("src", "bias", "scale")
OPS = {
    op.name: op
    for op in [
        ElementwiseOp("zero", "zero", (), False, lambda v, dt: _const(dt, 0)),
        ElementwiseOp("fill", "fill", ("value",), False, lambda v, dt: v["value"]),
        ElementwiseOp("memset", "fill", ("value",), False, lambda v, dt: v["value"]),
        *(
            ElementwiseOp(name, "unary", UNARY_ROLES, True, _unary(fn))
            for name, fn in (
                ("sqrt", _sqrt),
                ("exp", T.exp),
                ("exp2", T.exp2),
                ("log2", T.log2),
                ("reciprocal", _reciprocal),
                ("silu", _silu),
            )
        ),
        ElementwiseOp(
            "add",
            "binary",
            ("src", "src2"),
            False,
            _binary(lambda a, b: a + b),
            _pairs("add", "float16", "bfloat16", "float32"),
        ),
        ElementwiseOp(
            "sub",
            "binary",
            ("src", "src2"),
            False,
            _binary(lambda a, b: a - b),
            _pairs("sub", "float16", "bfloat16", "float32"),
        ),
        ElementwiseOp(
            "mul",
            "binary",
            ("src", "src2"),
            False,
            _binary(lambda a, b: a * b),
            _pairs("mul", "float16", "bfloat16", "float32"),
        ),
        ElementwiseOp("fdiv", "binary", ("src", "src2"), True, _binary(_div)),
        ElementwiseOp(
            "maximum",
            "binary",
            ("src", "src2"),
            False,
            _binary(T.max),
            _pairs("max", "float16", "bfloat16"),
        ),
        ElementwiseOp(
            "minimum",
            "binary",
            ("src", "src2"),
            False,
            _binary(T.min),
            _pairs("min", "float16", "bfloat16"),
        ),
        ElementwiseOp(
            "fma",
            "fma",
            ("src", "scale", "bias"),
            False,
            _fma,
            _pairs("fma", "float16", "bfloat16", "float32"),
        ),
        ElementwiseOp("cast", "cast", ("src",), False, _cast, ("cvt_f16x2_f32", "cvt_bf16x2_f32")),
        ElementwiseOp(
            "select", "select", ("true_value", "false_value"), False, _select, predicate="pred"
        ),
    ]
}


# Mixed dtypes: (tensor inputs' dtype, dst dtype) -> the dtype the op is evaluated in.
# float32 holds every float16 and bfloat16 value exactly, so widening the inputs loses
# nothing, and one float32 rounding then one rounding to nearest even into dst is what
# numpy's float32 math followed by astype computes. TVM's built-in variant evaluates in the
# inputs' dtype and casts the result (backend/cuda/tile_primitive/elementwise/reg.py, the
# scalar emit): the same for float32 inputs; for 16-bit inputs it rounds at their precision
# first (float16 exp into a float32 dst is hexp's float16 result, widened). float64 is
# left out: no caller needs it, and its emitted conversions to 16 bits are unchecked.
MIXED_COMPUTE = {
    ("float32", "float16"): "float32",
    ("float32", "bfloat16"): "float32",
    ("float16", "float32"): "float32",
    ("bfloat16", "float32"): "float32",
    ("float16", "bfloat16"): "float32",
    ("bfloat16", "float16"): "float32",
}
MIXED_FAMILIES = ("unary", "binary", "fma")  # ops that compute from tensor inputs


@dataclass(frozen=True)
class Arithmetic:
    """The dtypes of one call's element computation: tensor inputs, evaluation, dst."""

    inputs: str
    compute: str
    dst: str

    @property
    def mixed(self) -> bool:
        return not self.inputs == self.compute == self.dst

    def __str__(self) -> str:
        if not self.mixed:
            return self.dst
        return f"{self.inputs} -> {self.compute} -> {self.dst}"


def arithmetic(
    op: ElementwiseOp, dst_dtype: str, inputs: dict[str, str], scalars: Collection[str] = ()
) -> Arithmetic:
    """The dtypes ``op`` computes in for these operand dtypes (``check_dtypes(...,
    mixed=True)`` accepted them); ``scalars`` names the roles that are scalars."""
    tensors = [dtype for role, dtype in inputs.items() if role not in scalars]
    src = tensors[0] if tensors else dst_dtype
    if op.family in MIXED_FAMILIES and src != dst_dtype:
        return Arithmetic(src, MIXED_COMPUTE[(src, dst_dtype)], dst_dtype)
    return Arithmetic(dst_dtype, dst_dtype, dst_dtype)


def _check_mixed(
    op: ElementwiseOp, dst_dtype: str, inputs: dict[str, str], scalars: Collection[str]
) -> str | None:
    """The mixed-dtype rule: one float dtype for the tensor inputs, the pair in
    :data:`MIXED_COMPUTE`, every scalar in the compute dtype."""
    tensors = [(role, dtype) for role, dtype in inputs.items() if role not in scalars]
    first, src = tensors[0]
    for role, dtype in tensors[1:]:
        if dtype != src:
            return (
                f"{op.name} {role} is {dtype} but {first} is {src}; the tensor inputs must "
                f"share one dtype (Tx.cast {role} to {src} first)"
            )
    compute = MIXED_COMPUTE.get((src, dst_dtype))
    if compute is None:
        return (
            f"{op.name} {first} is {src} but dst is {dst_dtype}; mixed dtypes need float16, "
            f"bfloat16 or float32 on both sides (Tx.cast {first} to {dst_dtype} first)"
        )
    for role, dtype in inputs.items():
        if role in scalars and dtype != compute:
            return (
                f"{op.name} {role} is {dtype} but the op computes in {compute} ({first} {src}, "
                f"dst {dst_dtype}); write scalars as T.{compute}(...)"
            )
    return None


def check_dtypes(
    op: ElementwiseOp,
    dst_dtype: str,
    inputs: dict[str, str],
    scalars: Collection[str] = (),
    mixed: bool = False,
) -> str | None:
    """Why the dtype combination is not accepted (naming the operand), or None.

    ``inputs`` maps each input's role to its dtype. With ``mixed`` (the caller evaluates
    with :meth:`ElementwiseOp.evaluate` under :func:`arithmetic`), math ops whose tensor
    inputs have another float dtype than dst follow :data:`MIXED_COMPUTE`; ``scalars``
    names the roles that are scalars. Without it every operand has dst's dtype.
    """
    if op.float_only and dst_dtype not in FLOATS:
        return f"{op.name} needs a floating-point dtype ({'/'.join(FLOATS)}), dst is {dst_dtype}"
    tensors = [dtype for role, dtype in inputs.items() if role not in scalars]
    if mixed and op.family in MIXED_FAMILIES and tensors and tensors[0] != dst_dtype:
        return _check_mixed(op, dst_dtype, inputs, scalars)
    for role, dtype in inputs.items():
        if op.family == "cast":
            if dtype == dst_dtype:
                continue
            numeric = ("float", "bfloat", "int", "uint")
            if not dtype.startswith(numeric) or not dst_dtype.startswith(numeric):
                return f"cast from {dtype} to {dst_dtype} is not a numeric conversion"
        elif dtype != dst_dtype:
            return (
                f"{op.name} {role} is {dtype} but dst is {dst_dtype}; every operand must have "
                f"the dst dtype (write scalars as T.{dst_dtype}(...), or cast first)"
            )
    return None


def packed_form(
    op: ElementwiseOp, dst_dtype: str, src_dtype: str, sm: int | None
) -> PackedForm | None:
    """The pair form of ``op`` for these dtypes on SM ``sm``, if the table has one."""
    for key in op.packed:
        form = PACKED_FORMS[key]
        if form.out_dtype == dst_dtype and form.in_dtype == src_dtype and (sm or 0) >= form.min_sm:
            return form
    return None


def convert_form(arith: Arithmetic, sm: int | None) -> PackedForm | None:
    """The pair conversion that rounds two compute-dtype results into dst at once
    (``cvt.rn.f16x2.f32``: each element rounded as the scalar ``cvt.rn.f16.f32``)."""
    if arith.compute == arith.dst:
        return None
    return packed_form(OPS["cast"], arith.dst, arith.compute, sm)


# -- the dtype rule as a predicate, for every elementwise variant ---------------------------
def input_dtypes(op: ElementwiseOp, call: Any) -> tuple[dict[str, str], set[str]]:
    """Each input's dtype by role, and the roles that are scalars, of a call of ``op``."""
    dtypes, scalars = {}, set()
    for inp in op.inputs(call.args):
        opnd = None if inp.is_scalar else call.operand(inp.role)
        dtypes[inp.role] = str(inp.scalar.ty) if opnd is None else opnd.dtype
        if opnd is None:
            scalars.add(inp.role)
    return dtypes, scalars


def requires_dtype_rule(op: ElementwiseOp, mixed: bool = False) -> Predicate:
    """The predicate ``dtype_rule``: the call's dtypes follow :func:`check_dtypes`
    (``mixed``: the variant evaluates mixed float dtypes, :data:`MIXED_COMPUTE`)."""

    def dtype_rule(call: Any) -> tuple[bool, str | None]:
        dst = call.operand("dst")
        if dst is None:
            return False, f"{op.name} dst is not a tensor region"
        dtypes, scalars = input_dtypes(op, call)
        why = check_dtypes(op, dst.dtype, dtypes, scalars, mixed=mixed)
        return why is None, why

    return predicate(dtype_rule, "dtype_rule")


def requires_lambda_predicate(op: ElementwiseOp) -> Predicate:
    """The predicate ``lambda_predicate``: ``op``'s predicate argument (select's ``pred``)
    is a LambdaExpr with one index per dst dimension and a bool body."""

    def lambda_predicate(call: Any) -> tuple[bool, str | None]:
        pred, dst = call.arg(op.predicate), call.operand("dst")
        if dst is None:
            return False, f"{op.name} dst is not a tensor region"
        dims = len(dst.region)
        if not isinstance(pred, LambdaExpr):
            return False, (
                f"{op.name} {op.predicate} is a {type(pred).__name__}, needs a LambdaExpr over "
                f"dst's {dims} indices (lambda {', '.join('ijklmn'[:dims])}: ...)"
            )
        if len(pred.vars) != dims:
            return False, (
                f"{op.name} {op.predicate} takes {len(pred.vars)} indices, dst "
                f"{dst.describe} has {dims} dimensions"
            )
        if str(pred.pred.ty) != "bool":
            return False, f"{op.name} {op.predicate} gives a {pred.pred.ty}, needs a bool"
        return True, None

    return predicate(lambda_predicate, "lambda_predicate")
