"""TIR building blocks the emitters share: thread ids, access-width views, vector accesses.

Vector copies are plain TIR loads and stores on a view of the buffer whose element is one
access (``uint32x4`` for 128 bits), not ``asm volatile`` strings: TVM's CUDA codegen prints
them as ``((uint4*)p)[i]``, which the compiler may schedule freely (loads of several rounds
in flight at once), and a simulator can read them without parsing PTX.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tvm import tirx
from tvm.script import tirx as T
from tvm.script.parser._core import parse as parse_tvmscript
from tvm.script.parser._core import utils as parser_utils

from .call import TileCall

# Element type of a ``vec_bits``-wide access: the bits only travel, so the element type of
# the data does not matter. Vector types print as CUDA's uint4 / uint2.
_ACCESS_DTYPES = {128: "uint32x4", 64: "uint32x2", 32: "uint32", 16: "uint16", 8: "uint8"}
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
    op(a[i], b[i], c[i])`` for a pair, ``op`` one of add/sub/mul/max/fma/cvt, on
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


_SCOPE_THREADS = {"warp": 32, "warpgroup": 128}


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
    if call.scope in _SCOPE_THREADS:
        return tirx.floormod(linear_thread_index(call), _SCOPE_THREADS[call.scope])
    raise ValueError(f"no thread index for scope {call.scope}")


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
