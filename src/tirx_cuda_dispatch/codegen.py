"""TIR building blocks the emitters share: thread ids, access-width views, vector accesses.

Vector copies are plain TIR loads and stores on a view of the buffer whose element is one
access (``uint32x4`` for 128 bits), not ``asm volatile`` strings: TVM's CUDA codegen prints
them as ``((uint4*)p)[i]``, which the compiler may schedule freely (loads of several rounds
in flight at once), and a simulator can read them without parsing PTX. Where a form has no
plain spelling (the L2-only load, a copy's cache hints: ``ld.global.nc.L1::no_allocate``,
an L2 cache policy), a small ``__device__`` helper holds it, its meaning recorded as data
(:class:`HelperMeaning`) for tools that read the TIR.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tvm import tirx
from tvm.script import tirx as T
from tvm.script.parser._core import parse as parse_tvmscript
from tvm.script.parser._core import utils as parser_utils

from .call import TileCall
from .errors import Decline
from .isa.bulk import TFLOAT32
from .resources import TensorMap
from .scopes import SCOPES

# Element type of a ``vec_bits``-wide access: the bits only travel, so the element type of
# the data does not matter. Vector types print as CUDA's uint4 / uint2.
_ACCESS_DTYPES = {
    256: "uint32x8",  # sm_100+, global memory only: through a helper (load_global_hinted)
    128: "uint32x4",
    64: "uint32x2",
    32: "uint32",
    16: "uint16",
    8: "uint8",
}
_ACCESS_CTYPES = {
    128: "uint4",
    64: "uint2",
    32: "unsigned int",
    16: "unsigned short",
    8: "unsigned char",
}


# The attribute the lowering puts around each call body it emits, valued with the call's
# explain() index: the simulator attributes counts and faults to calls by it.
CALL_MARK = "tirx_cuda_dispatch.call"
COMPLETION_MARK = "tirx_cuda_dispatch.completion"  # the completions a call's plan declares


def impl_prim_func(body: Any) -> Any:
    """``@T.prim_func(check_well_formed=False)`` for an emitter's closure, parsed directly.

    TVM's decorator calls ``inspect.stack()`` (every frame's source context) when it is
    applied and again when the parser evaluates the decorator line: on a lowering call
    stack that took longer than all of our planning, and made our LowerTIRx slower than
    the built-in one. An emitter's body has no annotations and is not in a class, so the
    stack is not needed: its globals and closure are all the parser reads.
    """
    return parse_tvmscript(
        body, parser_utils.inspect_function_capture(body), check_well_formed=False
    )


impl_prim_func.dispatch_token = "tirx"  # the parser reads the dialect off the decorator


def sequence(funcs: list[Any]) -> Any:
    """One emitted PrimFunc whose body runs the bodies of ``funcs`` in order (an emitter
    whose plan has parts of different shapes emits one small function per part)."""
    if len(funcs) == 1:
        return funcs[0]
    return funcs[0].with_body(tirx.SeqStmt([f.body for f in funcs]))


def access_dtype(vec_bits: int) -> str:
    """TIR dtype of one ``vec_bits``-wide access."""
    return _ACCESS_DTYPES[vec_bits]


def access_view(buffer: Any, vec_bits: int, elem_bits: int) -> Any:
    """A flat view of ``buffer``'s data as ``vec_bits``-wide words (inside a prim_func body).

    Indexing it with ``offset // vec`` gives the aligned vector at element ``offset``: TVM
    prints ``((uint4*)p)[i]``, one vector access, whatever expression ``i`` is.
    """
    return T.decl_buffer(
        (storage_words(buffer, elem_bits, vec_bits),),
        access_dtype(vec_bits),
        data=buffer.data,
        scope=buffer.scope(),
    )


@dataclass(frozen=True)
class HelperMeaning:
    """What a generated ``__device__`` helper does, as data.

    The helper's C body is for the compiler; tools that read the TIR (the simulator,
    :mod:`..sim`) execute this instead, so no meaning lives only in a C string.
    ``kind`` "copy": ``*dst = *src``, ``bits`` wide. ``kind`` "pairwise": ``dst[i] =
    op(a[i], b[i], c[i])`` for a pair, ``op`` one of add/sub/mul/max/min/fma/cvt, on
    ``in_dtype`` inputs giving ``out_dtype``, each element rounded as the scalar op.
    """

    kind: str
    bits: int = 0
    op: str = ""
    out_dtype: str = ""
    in_dtype: str = ""


HELPER_MEANINGS: dict[str, HelperMeaning] = {}


def helper_call(name: str, meaning: HelperMeaning, source: str, *args: Any) -> Any:
    """``name(*args)``, a helper defined by ``source``, recorded with its ``meaning``."""
    known = HELPER_MEANINGS.setdefault(name, meaning)
    if known != meaning:
        raise ValueError(f"helper {name} registered twice with different meanings")
    return T.cuda.func_call(name, *args, source_code=source)


def load_global_l2_only(dst_ptr: Any, src_ptr: Any, vec_bits: int) -> Any:
    """``*dst = ld.global.cg(src)``: copy one access from global memory, caching it in L2 only.

    Streaming copies read every byte once, so allocating the data in L1 only costs: on the
    H200 this form streamed up to 2.5% faster than a plain (read-only path) load and never
    slower than any other form (bench/load_forms.py, docs/performance.md). The helper's
    whole meaning is that one line, recorded as a :class:`HelperMeaning` for tools that
    read the TIR.
    """
    ctype = _ACCESS_CTYPES[vec_bits]
    name = f"tirx_cuda_dispatch_ld_global_cg_{vec_bits}"
    source = (
        f"__forceinline__ __device__ void {name}(void* dst, const void* src) {{\n"
        f"  *({ctype}*)dst = __ldcg((const {ctype}*)src);\n}}\n"
    )
    return helper_call(name, HelperMeaning("copy", bits=vec_bits), source, dst_ptr, src_ptr)


# -- cache hints ------------------------------------------------------------------------
# The config keys TVM 0.27 reads off a copy (backend/cuda/tile_primitive/copy/vec_forced.py,
# ``_ld_cache_config``), each with the PTX qualifiers it may name (PTX ISA 9.7.10.8 ld,
# 9.7.10.9 ld.global.nc, 9.7.10.11 st, 9.7.10.21 createpolicy; the value sets are those of
# TVM's PTX table, backend/cuda/ptx/table.py ``_L1_EVICT``/``_L2_EVICT``/prefetch slot).
@dataclass(frozen=True)
class CacheHintKey:
    """One config key: the values it accepts, whether stores take it, the SM floor of
    each value (PTX ISA target notes), and what it becomes in PTX."""

    key: str
    values: tuple[str, ...]
    on_store: bool
    min_sm: dict[str, int]
    means: str


CACHE_HINT_KEYS: dict[str, CacheHintKey] = {
    k.key: k
    for k in (
        CacheHintKey(
            "cache",
            ("nc",),
            on_store=False,
            min_sm={},
            means="ld.global.nc: the data is read-only for the kernel (non-coherent path)",
        ),
        CacheHintKey(
            "l1_evict",
            (
                "L1::evict_normal",
                "L1::evict_unchanged",
                "L1::evict_first",
                "L1::evict_last",
                "L1::no_allocate",
            ),
            on_store=True,
            min_sm={"*": 70},
            means="the .level1::eviction_priority qualifier of ld / st",
        ),
        CacheHintKey(
            "l2_evict",
            ("L2::evict_first", "L2::evict_last", "L2::evict_normal"),
            on_store=True,
            min_sm={"*": 80},
            means=(
                "createpolicy.fractional.<priority>.b64 and .L2::cache_hint on ld / st (the "
                "ISA spells .level2::eviction_priority only on 256-bit accesses; ptxas refuses "
                "it on narrower ones)"
            ),
        ),
        CacheHintKey(
            "prefetch_size",
            ("L2::64B", "L2::128B", "L2::256B"),
            on_store=False,
            min_sm={"L2::64B": 75, "L2::128B": 75, "L2::256B": 80},
            means="the .level::prefetch_size qualifier of ld",
        ),
    )
}


@dataclass(frozen=True)
class CacheHints:
    """The cache hints of one copy's global accesses, validated (:func:`cache_hints`).

    A hint changes where data is cached, never a value: every form below moves the same
    bits as a plain access, and the helpers record the same :class:`HelperMeaning`.
    """

    nc: bool = False
    l1_evict: str = ""
    l2_evict: str = ""
    prefetch_size: str = ""

    @property
    def empty(self) -> bool:
        return not (self.nc or self.l1_evict or self.l2_evict or self.prefetch_size)

    def qualifiers(self, op: str) -> str:
        """``ld.global.nc.L1::no_allocate.L2::cache_hint.L2::256B`` (``op`` "ld" or "st"):
        the instruction up to its vector and type, qualifiers in the ISA's order."""
        toks = [op, "global"]
        if self.nc:
            toks.append("nc")
        if self.l1_evict:
            toks.append(self.l1_evict)
        if self.l2_evict:
            toks.append("L2::cache_hint")
        if self.prefetch_size:
            toks.append(self.prefetch_size)
        return ".".join(toks)

    def policy(self) -> str | None:
        """The ``createpolicy`` instruction whose result the ``.L2::cache_hint`` operand is."""
        if not self.l2_evict:
            return None
        return f"createpolicy.fractional.{self.l2_evict}.b64"

    def __str__(self) -> str:
        parts = [
            f"{key}={value}"
            for key, value in (
                ("cache", "nc" if self.nc else ""),
                ("l1_evict", self.l1_evict),
                ("l2_evict", self.l2_evict),
                ("prefetch_size", self.prefetch_size),
            )
            if value
        ]
        return ", ".join(parts) if parts else "none"


def cache_hints(config: Any, access: str, sm: int | None) -> CacheHints:
    """The :class:`CacheHints` a copy's ``config`` asks for on its global ``access`` ("load"
    or "store"); raises :class:`~.errors.Decline` naming an unknown key or value (with the
    accepted ones), a hint a store has no place for, or one the arch lacks."""
    values: dict[str, str] = {}
    for key, value in dict(config).items():
        key = str(key)
        spec = CACHE_HINT_KEYS.get(key)
        if spec is None:
            raise Decline(
                f"config key {key}={value} is not a cache hint; accepted: "
                + "; ".join(f"{k.key} in {list(k.values)}" for k in CACHE_HINT_KEYS.values())
            )
        if value is None or str(value) == "":
            continue
        text = str(value)
        if text not in spec.values:
            raise Decline(f"{key}={text!r} is not a hint PTX has; accepted: {list(spec.values)}")
        if access == "store" and not spec.on_store:
            stores = [k.key for k in CACHE_HINT_KEYS.values() if k.on_store]
            raise Decline(
                f"{key}={text} is a load hint ({spec.means}) and this copy stores to global; "
                f"a store takes {', '.join(stores)}"
            )
        floor = spec.min_sm.get(text, spec.min_sm.get("*"))
        if floor is not None and sm is not None and sm < floor:
            raise Decline(
                f"{key}={text} needs sm_{floor} or newer ({spec.means}); target is sm_{sm}"
            )
        values[key] = text
    return CacheHints(
        nc=values.get("cache") == "nc",
        l1_evict=values.get("l1_evict", ""),
        l2_evict=values.get("l2_evict", ""),
        prefetch_size=values.get("prefetch_size", ""),
    )


# (ctype of one access, PTX {.vec}.type, the access's 32-bit (or 16-bit) parts as C lvalues
# of a variable ``v``, their asm constraint): 8-bit accesses travel in a 16-bit register,
# which ld.u8 / st.u8 accept (PTX ISA 9.7.10.8: the register may be wider than the type).
_HINTED_FORMS = {
    # 256 bits (sm_100+): eight registers, moved through two uint4 halves (a 32-byte C
    # vector type compiles to two 16-byte accesses; the PTX .v8 form is one)
    256: ("uint4", "v8.u32", tuple(f"v[{i // 4}].{'xyzw'[i % 4]}" for i in range(8)), "r"),
    128: ("uint4", "v4.u32", ("v.x", "v.y", "v.z", "v.w"), "r"),
    64: ("uint2", "v2.u32", ("v.x", "v.y"), "r"),
    32: ("unsigned int", "u32", ("v",), "r"),
    16: ("unsigned short", "u16", ("v",), "h"),
    8: ("unsigned short", "u8", ("v",), "h"),
}


WIDE_BITS = 256  # a global access this wide (sm_100+) goes through the helpers below


def _hinted_helper_name(hints: CacheHints, op: str, vec_bits: int) -> str:
    mangled = hints.qualifiers(op).replace("::", "_").replace(".", "_")
    return f"tirx_cuda_dispatch_{mangled}_{vec_bits}"


def _asm_operands(regs: tuple[str, ...], first: int) -> str:
    names = [f"%{first + i}" for i in range(len(regs))]
    return names[0] if len(names) == 1 else "{" + ", ".join(names) + "}"


def _policy_lines(hints: CacheHints) -> tuple[str, str, str]:
    """(C lines making the policy, the asm address suffix, the extra asm input)."""
    policy = hints.policy()
    if policy is None:
        return "", "", ""
    make = f'  unsigned long long policy;\n  asm("{policy} %0;" : "=l"(policy));\n'
    return make, ", %{n}", ', "l"(policy)'


def load_global_hinted(dst_ptr: Any, src_ptr: Any, vec_bits: int, hints: CacheHints) -> Any:
    """``*dst = ld.global<hints>(src)``: one ``vec_bits``-wide load from global memory in
    the form the cache hints name (``ld.global.nc.L1::no_allocate.L2::256B.v4.u32``),
    stored to ``dst`` (shared memory or registers) by a plain access.

    ``asm volatile`` without a memory clobber, as CUDA's own ``__ldcg``: the loads of
    several rounds may be in flight at once. An ``l2_evict`` hint makes its policy with
    ``createpolicy`` in the helper (no inputs, not volatile: the compiler may hoist and share it).
    """
    if hints.empty and vec_bits != WIDE_BITS:
        raise ValueError("load_global_hinted needs hints; use load_global_l2_only without")
    ctype, tail, regs, con = _HINTED_FORMS[vec_bits]
    name = _hinted_helper_name(hints, "ld", vec_bits)
    make, suffix, extra = _policy_lines(hints)
    n = len(regs)
    outs = ", ".join(f'"={con}"({r})' for r in regs)
    store = f"*({ctype}*)dst = v;" if vec_bits != 8 else "*(unsigned char*)dst = (unsigned char)v;"
    declare = f"{ctype} v;"
    if vec_bits == WIDE_BITS:
        store = f"(({ctype}*)dst)[0] = v[0]; (({ctype}*)dst)[1] = v[1];"
        declare = f"{ctype} v[2];"
    source = (
        f"__forceinline__ __device__ void {name}(void* dst, const void* src) {{\n"
        f"{make}"
        f"  {declare}\n"
        f'  asm volatile("{hints.qualifiers("ld")}.{tail} {_asm_operands(regs, 0)}, [%{n}]'
        f'{suffix.format(n=n + 1)};"\n'
        f'               : {outs} : "l"(src){extra});\n'
        f"  {store}\n}}\n"
    )
    return helper_call(name, HelperMeaning("copy", bits=vec_bits), source, dst_ptr, src_ptr)


def store_global_hinted(dst_ptr: Any, src_ptr: Any, vec_bits: int, hints: CacheHints) -> Any:
    """``st.global<hints>(dst, *src)``: one ``vec_bits``-wide store to global memory in the
    form the cache hints name (``st.global.L1::evict_first.v4.u32``), of the bits a plain
    access reads at ``src`` (shared memory or registers). Stores take ``l1_evict`` and
    ``l2_evict`` only (:data:`CACHE_HINT_KEYS`); ``asm volatile`` with a memory clobber,
    as CUDA's ``__stcs``."""
    if hints.empty and vec_bits != WIDE_BITS:
        raise ValueError("store_global_hinted needs hints; store plainly without")
    if hints.nc or hints.prefetch_size:
        raise ValueError(f"a store has no place for {hints}")
    ctype, tail, regs, con = _HINTED_FORMS[vec_bits]
    name = _hinted_helper_name(hints, "st", vec_bits)
    make, suffix, extra = _policy_lines(hints)
    n = len(regs)
    ins = ", ".join(f'"{con}"({r})' for r in regs)
    load = (
        f"{ctype} v = *(const {ctype}*)src;"
        if vec_bits != 8
        else "unsigned short v = *(const unsigned char*)src;"
    )
    if vec_bits == WIDE_BITS:
        load = f"{ctype} v[2] = {{(({ctype} const*)src)[0], (({ctype} const*)src)[1]}};"
    source = (
        f"__forceinline__ __device__ void {name}(void* dst, const void* src) {{\n"
        f"{make}"
        f"  {load}\n"
        f'  asm volatile("{hints.qualifiers("st")}.{tail} [%0], {_asm_operands(regs, 1)}'
        f'{suffix.format(n=n + 1)};"\n'
        f'               :: "l"(dst), {ins}{extra} : "memory");\n}}\n'
    )
    return helper_call(name, HelperMeaning("copy", bits=vec_bits), source, dst_ptr, src_ptr)


def thread_index(call: TileCall) -> Any:
    """The thread's index within the call's scope, as a TIR expression of the launch's
    thread variables (what TVM resolves ``T.lane_id()`` / ``T.thread_id_in_wg()`` to).

    Written out rather than declared with TVM's scope-id helpers: each such call in an
    emitter's body adds a kernel-level binding that TVM's simplifier inlines and leaves
    behind as an unused ``int v_N = ...;``, and, the variable being unnamed, a bare
    ``v_N;`` statement that TVM adds to keep it live.
    """
    if call.scope == "thread":
        return tirx.IntImm("int32", 0)
    if call.scope == "cta":
        return linear_thread_index(call)
    known = SCOPES.get(call.scope)
    if known is not None and known.threads is not None:
        return tirx.floormod(linear_thread_index(call), known.threads)
    raise ValueError(f"no thread index for scope {call.scope}")


def participant_index(call: TileCall) -> Any:
    """The thread's index among the threads that execute the call: the scope's threads,
    or those of the ranges an enclosing ``if`` narrowed them to (:mod:`.participation`):
    ``(warp - w0) * lanes + (lane - l0)`` with the warp counted inside the scope."""
    parts = call.participation.participants
    if call.scope == "thread" or parts is None or not parts.renumbered:
        return thread_index(call)
    tid = linear_thread_index(call)
    l0, lanes = parts.lane
    index = tirx.floormod(tid, 32) - l0 if l0 else tirx.floormod(tid, 32)
    if parts.warp is not None:
        warp = tirx.floordiv(tid, 32)
        if call.scope == "warpgroup":
            warp = tirx.floormod(warp, 4)
        w0 = parts.warp[0]
        index = (warp - w0 if w0 else warp) * lanes + index
    return index


def warp_index_in_warpgroup(call: TileCall) -> Any:
    """The warp's index within its warpgroup, from TVM's warp-uniform ``warp_id_in_cta``
    (a shuffle of the linear thread index over 32, bound once per kernel)."""
    return tirx.floormod(call.launch_var("warp_id_in_cta"), 4)


def linear_thread_index(call: TileCall) -> Any:
    """``threadIdx.x + threadIdx.y * X + threadIdx.z * X * Y`` over the launched axes."""
    index = stride = None
    for axis in ("x", "y", "z"):
        iv = call.ctx.launch_params.get(f"threadIdx.{axis}")
        if iv is None:
            continue
        term = iv.var if stride is None else iv.var * stride
        index = term if index is None else index + term
        stride = iv.dom.extent if stride is None else stride * iv.dom.extent
    if index is None:
        raise ValueError(f"{call} is in a kernel that launches no threadIdx axis")
    return index


def storage_words(buffer: Any, elem_bits: int, word_bits: int) -> Any:
    """How many words the buffer's data holds: its layout's span (padding included)."""
    elems: Any = buffer.layout.span() if buffer.layout is not None else None
    if elems is None:
        elems = 1
        for ext in buffer.shape:
            elems = elems * ext
    if elem_bits >= word_bits:
        return elems * (elem_bits // word_bits)
    per_word = word_bits // elem_bits  # no elems * bits product: it overflows int32 shapes
    return tirx.floordiv(elems + per_word - 1, per_word)


def round_loops(
    call: TileCall,
    runs: list[Any],
    buffers: tuple[Any, Any],
    at: tuple[int, int],
    elem_bits: int,
    move: Any,
    guard: Any = None,
) -> Any:
    """The emitted loops of a copy partition's :class:`..layout.partition.RoundRun` s:
    per run, the full rounds, then round ``full`` for threads ``tid < tail``. ``buffers``
    and ``at`` are (dst, src) and their operand indices in the partition;
    ``move(dst_vecs, dst_slot, src_vecs, src_slot, vec_bits)`` emits one access inside
    the body; ``guard``, where given, encloses each access (a predicate that skips it)."""
    dst_buf, src_buf = buffers
    dst_at, src_at = at

    def one(run: Any) -> Any:
        vec_bits, full, tail, slot = run.vec_bits, run.full, run.tail, run.slot

        def access(dst_vecs: Any, src_vecs: Any, rnd: Any, tid: Any) -> None:
            move(dst_vecs, slot(dst_at, rnd, tid), src_vecs, slot(src_at, rnd, tid), vec_bits)

        # fmt: off
        @impl_prim_func
        def impl():
            tid = T.meta_var(participant_index(call))
            src_vecs = access_view(src_buf, vec_bits, elem_bits)
            dst_vecs = access_view(dst_buf, vec_bits, elem_bits)
            for rnd in range(full):
                if guard is not None:
                    if guard:
                        access(dst_vecs, src_vecs, rnd, tid)
                else:
                    access(dst_vecs, src_vecs, rnd, tid)
            if tail > 0:
                if tid < tail:
                    if guard is not None:
                        if guard:
                            access(dst_vecs, src_vecs, full, tid)
                    else:
                        access(dst_vecs, src_vecs, full, tid)
        # fmt: on
        return impl

    return sequence([one(run) for run in runs])


# CUDA driver enums (cuda.h: CUtensorMapSwizzle, CUtensorMapL2promotion), by bytes.
_SWIZZLE_ENUM = {0: 0, 32: 1, 64: 2, 128: 3}
_L2_PROMOTION_ENUM = {0: 0, 64: 1, 128: 2, 256: 3}


def encode_tensor_map(var: Any, buffer: Any, tm: TensorMap) -> Any:
    """The host statements that encode ``tm`` over ``buffer``'s data into ``var`` before the
    launch: a descriptor on the host stack, then TVM 0.27's ``tensormap_encode_tiled``
    (``cuTensorMapEncodeTiled``); the kernel receives it as a ``__grid_constant__``."""
    wide = [tirx.const(v, "int64") if isinstance(v, int) else v for v in (*tm.dims, *tm.strides)]
    narrow = [tirx.const(v, "int32") for v in (*tm.box, *([1] * tm.rank))]
    encode = T.tensormap_encode_tiled(
        var,
        buffer.data,
        *wide,
        *narrow,
        descriptor_dtype=tm.dtype,
        rank=tm.rank,
        swizzle=_SWIZZLE_ENUM[tm.swizzle],
        l2_promotion=_L2_PROMOTION_ENUM[tm.l2_promotion],
        force_cu_dtype=TFLOAT32 if tm.tf32 else -1,
    )
    return tirx.SeqStmt(
        [
            tirx.Bind(var, T.tvm_stack_alloca("tensormap", 1)),
            tirx.Evaluate(encode),
            tirx.Evaluate(T.tvm_kernel_replace_point()),
        ]
    )


def prefetch_tensor_map(var: Any, launch_params: Any) -> Any:
    """The kernel statements, first in its body, that prefetch the descriptor in ``var``
    (a ``__grid_constant__`` parameter) by the threads of ``threadIdx.x`` 0 (the CTA's first
    thread in a one-dimensional block; every thread where the kernel binds no threadIdx.x;
    a prefetch is a hint, so more than one is harmless): ``prefetch.tensormap``
    (PTX ISA 9.7.9.15, generic addressing of the parameter)."""
    prefetch = tirx.Evaluate(T.ptx.prefetch.tensormap(T.address_of(var)))
    tx = launch_params.get("threadIdx.x") if launch_params is not None else None
    first = prefetch if tx is None else tirx.IfThenElse(tx.var == 0, prefetch, None)
    return tirx.SeqStmt([first, tirx.Evaluate(T.tvm_kernel_replace_point())])
