"""Random tile-primitive programs, and the differential check that runs each one lowered by
our pipeline and by TVM's built-in one.

Programs are drawn through a :class:`Chooser` (pick one of some options, an integer in a
range), so the hypothesis strategies of the tests and the seeded generator of the GPU
script (``bench/differential.py``) draw from the same space: copies global <-> shared
(every scope, odd element counts, column offsets, swizzled tiles), copies through register
layouts (rows, columns, fragments, warpgroup tiles), m8n8 fragments against row-major,
column-major, padded and swizzled tiles, elementwise ops on registers and on shared
memory (``minimum``, ``memset`` and ``select`` too, which TVM's built-in pipeline cannot
lower on CUDA), over every dtype the ops take; copies by the lanes and warps that
enclosing ifs leave; reductions; cp.async copies (``copy_async``: odd tiles, offsets
that leave 4-, 8- or 2-byte alignment, swizzles, CTA-uniform and per-thread predicates,
zero fill and skip); warp GEMMs on mma fragments (m16n8k16 / m16n8k8, float16 /
bfloat16, transposes, alpha and beta, C in place, fragments that must be refused); TMA
loads and stores (``copy_async -> tma_auto``: every swizzle and scope, boxes reaching
past the tensor's edges, reductions into global memory); warpgroup GEMMs (``gemm_async
-> wgmma``: float16, bfloat16 and float8 pairings, K- and MN-major operands under every
swizzle, accum).

:func:`differential` lowers a case with ``"tirx_cuda_dispatch"`` (ours: calls our
variants decline go to TVM's) and with ``"tirx"`` (TVM's built-in variants alone), runs
both through ``execute`` (the simulator, or the GPU), and compares each with numpy,
bit for bit (within an error bound where the answer depends on a summation order or
another choice of the lowering: :class:`Case`; on a GPU, wgmma's answer too, whose
summation there is not the simulator's), and checks that a program breaking a rule of
one of our variants is refused by it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import numpy as np
from tvm import tirx
from tvm.script import tirx as T
from tvm.script.tirx import tile as Tx
from tvm.tirx.layout import Axis, S, TileLayout

from . import demos, runtime

T_ = TypeVar("T_")
OURS, BUILTIN = "tirx_cuda_dispatch", "tirx"
COPY_DTYPES = ("float32", "float16", "bfloat16", "int8", "uint8", "int16", "int32", "float64")
FLOAT_DTYPES = ("float32", "float16", "bfloat16")
SCOPE_THREADS = {"warp": 32, "warpgroup": 128, "cta": 128}
MEMSET_VALUE = 1.5  # exact in every float dtype


def select_mask(i: Any, j: Any) -> Any:
    """select's predicate in generated programs: TIR over the LambdaExpr's variables, or
    numpy over index arrays (rows and columns both take both branches)."""
    return (i * 3 + j) % 5 < 2


EXACT_OPS: dict[str, Callable[..., np.ndarray]] = {
    "add": lambda x, y: x + y,
    "sub": lambda x, y: x - y,
    "mul": lambda x, y: x * y,
    "maximum": np.maximum,
    "minimum": np.minimum,
    "memset": lambda x, y: np.full_like(x, MEMSET_VALUE),
    "select": lambda x, y: np.where(select_mask(*np.indices(x.shape)), x, y),
}
lane = Axis.laneid


class Chooser(Protocol):
    """Where a generator's choices come from (hypothesis' ``draw``, or a numpy generator)."""

    def pick(self, options: Sequence[T_]) -> T_: ...

    def integer(self, lo: int, hi: int) -> int: ...  # lo..hi inclusive


class RandomChooser:
    """Choices from a seeded numpy generator (the GPU script)."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)

    def pick(self, options: Sequence[T_]) -> T_:
        return options[int(self.rng.integers(len(options)))]

    def integer(self, lo: int, hi: int) -> int:
        return int(self.rng.integers(lo, hi, endpoint=True))


class Deferred:
    """A kernel built on first use: drawing a case's parameters and data takes
    microseconds, building its TVMScript tens of milliseconds, and the generators'
    coverage tests read only the parameters of hundreds of cases."""

    def __init__(self, build: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        self.build, self.args, self.kwargs = build, args, kwargs

    def __call__(self) -> Any:
        return self.build(*self.args, **self.kwargs)


@dataclass
class Case:
    """One random program with its inputs (outputs poisoned) and numpy's answer.

    ``expected`` is compared bit for bit (where ``compared`` is true: the elements the
    program defines). A float reduction's bits depend on its summation order: there
    ``expected`` is our plan's order emulated in numpy (None where no plan of ours takes
    the call) and ``close`` says whether an output lies within the error bound of the
    exact result (``None`` if so, else what is off): how another order is judged, and
    how a program whose answer depends on a choice of the lowering (which thread a
    predicate turns off) is judged at all. ``declines`` names a variant of ours that must
    refuse the program (a 2-byte aligned cp.async, a misplaced mma fragment)."""

    kind: str
    params: dict[str, Any]
    program: Any  # the kernel, or a Deferred one (``func`` builds it on first use)
    args: list[np.ndarray]
    output: int  # the argument compared
    expected: np.ndarray | None
    close: Callable[[np.ndarray], str | None] | None = None
    compared: np.ndarray | None = None  # bool mask over the output
    # (variant, words): the program breaks a rule that variant of ours documents (a
    # 2-byte aligned cp.async, a misplaced mma fragment), so it must refuse the program
    # with a reason containing one of the words (the differential checks it); None: no
    # claim.
    declines: tuple[str, tuple[str, ...]] | None = None

    @property
    def func(self) -> Any:
        """The kernel (built now if it was deferred)."""
        if isinstance(self.program, Deferred):
            self.program = self.program()
        return self.program

    def __str__(self) -> str:
        shown = ", ".join(f"{k}={v}" for k, v in self.params.items())
        return f"{self.kind}({shown})"


# -- the generators ------------------------------------------------------------------------
def _swizzled(dtype: str, shape: tuple[int, int], mode: int) -> Any:
    from tvm.backend.cuda.tile_primitive.tma_utils import SwizzleMode, mma_shared_layout

    modes = {
        32: SwizzleMode.SWIZZLE_32B_ATOM,
        64: SwizzleMode.SWIZZLE_64B_ATOM,
        128: SwizzleMode.SWIZZLE_128B_ATOM,
    }
    try:
        return mma_shared_layout(dtype, modes[mode], shape)
    except Exception:  # noqa: BLE001  (the atom does not tile this shape: a plain tile then)
        return None


def gmem_smem_case(c: Chooser, seed: int) -> Case:
    dtype = c.pick(COPY_DTYPES)
    scope = c.pick(("warp", "warpgroup", "cta"))
    rows = c.pick((1, 3, 4, 5, 8, 16, 32))
    cols = c.pick((1, 3, 5, 6, 8, 12, 16, 24, 32, 40, 64, 128))
    extra = c.pick((0, 0, 8, 16, 3))
    offset = c.integer(0, extra) if extra else 0
    ctas = c.integer(1, 3)
    threads = SCOPE_THREADS[scope] * (c.pick((1, 2)) if scope == "cta" else 1)
    swizzle = c.pick((None, None, 32, 64, 128))
    layout = None
    if swizzle is not None and dtype in ("float16", "float32"):
        layout = _swizzled(dtype, (rows, cols), swizzle)
    path = c.pick(("shared", "shared", "shared", "global", "shared_shared"))
    if path == "global":  # no shared tile
        layout, swizzle = None, None
    second, second_swizzle = None, None
    if path == "shared_shared":
        second_swizzle = c.pick((None, 32, 64, 128))
        if second_swizzle is not None and dtype in ("float16", "float32"):
            second = _swizzled(dtype, (rows, cols), second_swizzle)
    params = dict(
        dtype=dtype,
        tile=(rows, cols),
        scope=scope,
        ctas=ctas,
        cta_threads=threads,
        shared_layout=layout,
        cols=cols + extra,
        col_offset=offset,
        path=path,
        second_layout=second,
    )
    a = runtime.random_array((ctas * rows, cols + extra), dtype, np.random.default_rng(seed))
    expected = runtime.poison_like(a).copy()
    expected[:, offset : offset + cols] = a[:, offset : offset + cols]
    shown = {
        **params,
        "shared_layout": None if layout is None else f"swizzle {swizzle}B",
        "second_layout": None if second is None else f"swizzle {second_swizzle}B",
    }
    func = Deferred(demos.gmem_smem_roundtrip, **params)
    return Case("gmem_smem", shown, func, [a, runtime.poison_like(a)], 1, expected)


def register_layout(c: Chooser) -> tuple[Any, tuple[int, int], str, str]:
    """A register layout of a warp (or a warpgroup): lane owns a row, a column, several
    rows, or an mma-like fragment; some do not fit (a variant must decline them)."""
    kind = c.pick(("row", "column", "rows", "fragment", "wide"))
    k = c.pick((1, 2, 3, 4, 6, 8, 16, 32))
    if kind == "row":
        return TileLayout(S[(32, k) : (1 @ lane, 1)]), (32, k), "warp", f"row x{k}"
    if kind == "column":
        return TileLayout(S[(k, 32) : (1, 1 @ lane)]), (k, 32), "warp", f"column x{k}"
    if kind == "rows":
        m = c.pick((2, 3, 4))
        layout = TileLayout(S[(m, 32, k) : (k, 1 @ lane, 1)])
        return layout, (m * 32, k), "warp", f"{m} rows x{k}"
    if kind == "fragment":
        num = c.pick((1, 2, 4))
        layout = TileLayout(S[(8, num, 4, 2) : (4 @ lane, 2, 1 @ lane, 1)])
        return layout, (8, num * 8), "warp", f"m8n8 fragment x{num}"
    layout = TileLayout(S[(4, 32, k) : (1 @ Axis.wid_in_wg, 1 @ lane, 1)])
    return layout, (128, k), "warpgroup", f"warpgroup rows x{k}"


def copy_reg_case(c: Chooser, seed: int) -> Case:
    layout, shape, scope, what = register_layout(c)
    dtype = c.pick(COPY_DTYPES)
    memory = c.pick(("shared", "global"))
    a = runtime.random_array(shape, dtype, np.random.default_rng(seed))
    func = demos.reg_roundtrip(layout, shape, dtype, scope, memory)
    params = dict(layout=what, dtype=dtype, memory=memory)
    return Case("copy_reg", params, func, [a, runtime.poison_like(a)], 1, a)


def fragment_case(c: Chooser, seed: int) -> Case:
    num = c.pick((1, 2, 4))
    blocks = c.pick((1, 2))
    extents, strides = (blocks, 8, num, 4, 2), (num * 2, 4 @ lane, 2, 1 @ lane, 1)
    shape = (blocks * 8, num * 8)
    shared = c.pick(("row", "column", "padded", "swizzle"))
    if shared == "row":
        s_layout = TileLayout(S[shape])
    elif shared == "column":
        s_layout = TileLayout(S[shape : (1, shape[0])])
    elif shared == "padded":
        s_layout = TileLayout(S[shape : (shape[1] + c.pick((4, 8, 12)), 1)])
    else:
        s_layout = _swizzled("float16", shape, c.pick((32, 64, 128))) or TileLayout(S[shape])
    dtype = c.pick(("float16", "bfloat16", "float32", "int16"))
    regs = blocks * num * 2
    a = runtime.random_array(shape, dtype, np.random.default_rng(seed))
    func = demos.ldstmatrix_roundtrip(TileLayout(S[extents:strides]), s_layout, shape, regs, dtype)
    f = runtime.poison_like(np.zeros((32, regs), a.dtype))
    params = dict(num=num, blocks=blocks, shared=shared, dtype=dtype)
    return Case("fragment", params, func, [a, runtime.poison_like(a), f], 1, a)


def catalog_roundtrip(
    op: str, shape: tuple[int, int], dtype: str, scope: str, layout: Any = None
) -> Any:
    """``B = op(A, C)`` (arguments A, C, B) for the ops demos' round trips do not build:
    ``minimum(X, A, C)``, ``memset(X, 1.5)``, ``select(X, A, C, select_mask)`` on registers
    of ``layout``, or on row-major shared tiles without one."""
    threads = SCOPE_THREADS[scope]
    warps = threads // 32
    shared = layout is None
    memory, layout = ("shared", TileLayout(S[shape])) if shared else ("local", layout)
    ns = getattr(Tx, scope)
    full = tuple(slice(0, e) for e in shape)
    value = tirx.const(MEMSET_VALUE, dtype)

    # fmt: off
    @T.prim_func
    def catalog(A_ptr: T.handle, C_ptr: T.handle, B_ptr: T.handle):
        A = T.match_buffer(A_ptr, shape, dtype)
        C = T.match_buffer(C_ptr, shape, dtype)
        B = T.match_buffer(B_ptr, shape, dtype)
        T.device_entry()
        T.cta_id([1])
        if warps % 4 == 0:
            T.warpgroup_id([warps // 4])
            T.warp_id_in_wg([4])
        T.warp_id([warps])
        T.lane_id([32])
        T.thread_id([threads])
        XA = T.alloc_buffer(shape, dtype, scope=memory, layout=layout)
        XC = T.alloc_buffer(shape, dtype, scope=memory, layout=layout)
        XB = T.alloc_buffer(shape, dtype, scope=memory, layout=layout)
        ns.copy(XA[full], A[full])
        ns.copy(XC[full], C[full])
        ns.copy(XB[full], B[full])  # poison: an op that writes nothing shows
        if shared:
            T.cuda.cta_sync()
        if op == "memset":
            ns.memset(XB[full], value)
        elif op == "minimum":
            ns.minimum(XB[full], XA[full], XC[full])
        else:
            ns.select(XB[full], XA[full], XC[full], select_mask)
        if shared:
            T.cuda.cta_sync()
        ns.copy(B[full], XB[full])
    # fmt: on
    return catalog


def elementwise_case(c: Chooser, seed: int) -> Case:
    op = c.pick(sorted(EXACT_OPS))
    dtype = c.pick(FLOAT_DTYPES)
    layout, shape, scope, what = register_layout(c)
    rng = np.random.default_rng(seed)
    a, cc, d = (runtime.random_array(shape, dtype, rng) for _ in range(3))
    expected = EXACT_OPS[op](a, cc).astype(a.dtype)
    params = dict(op=op, dtype=dtype, layout=what)
    if op not in demos.ELEMENTWISE_FAMILIES:
        func = catalog_roundtrip(op, shape, dtype, scope, layout)
        return Case("elementwise", params, func, [a, cc, runtime.poison_like(a)], 2, expected)
    func = demos.elementwise_roundtrip(op, layout, shape, dtype, scope)
    return Case("elementwise", params, func, [a, cc, d, runtime.poison_like(a)], 3, expected)


def mixed_elementwise_case(c: Chooser, seed: int) -> Case:
    """A float32 register tile into a float16/bfloat16 dst through a correctly rounded
    unary op (TVM's accumulator epilogues): float32 math, one rounding into dst."""
    op = c.pick(("sqrt", "reciprocal"))
    dst = c.pick(("float16", "bfloat16"))
    layout, shape, scope, what = register_layout(c)
    rng = np.random.default_rng(seed)
    a = np.abs(runtime.random_array(shape, "float32", rng)) + np.float32(0.25)
    cc, d = (runtime.random_array(shape, dst, rng) for _ in range(2))
    func = demos.elementwise_roundtrip(op, layout, shape, dst, scope, src_dtype="float32")
    exact = np.sqrt(a) if op == "sqrt" else np.float32(1.0) / a
    expected = exact.astype(np.float32).astype(cc.dtype)
    params = dict(op=op, dst=dst, layout=what)
    return Case("mixed_elementwise", params, func, [a, cc, d, runtime.poison_like(cc)], 3, expected)


def smem_elementwise_case(c: Chooser, seed: int) -> Case:
    op = c.pick(sorted(EXACT_OPS))
    dtype = c.pick(FLOAT_DTYPES)
    scope = c.pick(("warp", "warpgroup", "cta"))
    shape = (c.pick((1, 4, 5, 8, 16, 32)), c.pick((3, 6, 8, 16, 32, 64)))
    rng = np.random.default_rng(seed)
    a, cc = (runtime.random_array(shape, dtype, rng) for _ in range(2))
    if op in demos.ELEMENTWISE_FAMILIES:
        func = demos.smem_elementwise_roundtrip(op, shape, dtype, scope)
    else:
        func = catalog_roundtrip(op, shape, dtype, scope)
    expected = EXACT_OPS[op](a, cc).astype(a.dtype)
    params = dict(op=op, dtype=dtype, scope=scope, shape=shape)
    return Case("smem_elementwise", params, func, [a, cc, runtime.poison_like(a)], 2, expected)


def narrowed_case(c: Chooser, seed: int) -> Case:
    """A copy in and out through shared memory by a range of lanes (x a range of warps)
    that enclosing ifs leave: TVM narrows some of them, the conditions say the rest."""
    dtype = c.pick(COPY_DTYPES)
    scope = c.pick(("warp", "warpgroup", "cta"))
    threads = {"warp": c.pick((32, 64)), "warpgroup": 128, "cta": c.pick((64, 128, 256))}[scope]
    lo = c.integer(0, 31)
    lanes = (lo, c.integer(lo + 1, 32))
    warps = None
    if scope != "warp":
        n = 4 if scope == "warpgroup" else threads // 32
        w0 = c.integer(0, n - 1)
        warps = (w0, c.integer(w0 + 1, n))
    tile = (c.pick((1, 3, 4, 8, 16)), c.pick((5, 6, 8, 24, 40, 64)))
    a = runtime.random_array(tile, dtype, np.random.default_rng(seed))
    func = demos.narrowed_roundtrip(dtype, tile, scope, threads, lanes, warps)
    params = dict(dtype=dtype, tile=tile, scope=scope, cta_threads=threads, lanes=lanes)
    params["warps"] = warps
    return Case("narrowed", params, func, [a, runtime.poison_like(a)], 1, a.copy())


# -- cp.async and mma ---------------------------------------------------------------------
# The odd tiles: element counts that do not divide into threads x vectors.
LDGSTS_TILES = (("float32", (30, 100)), ("float16", (48, 40)), ("bfloat16", (5, 70)))
LDGSTS_PREDICATES = ("none", "cta_zero", "cta_skip", "thread_zero", "thread_skip")


def _tile_swizzle(dtype: str, shape: tuple[int, int], mode: int | None) -> Any:
    """A swizzled layout of the tile when the atom tiles it exactly (every element its own
    offset in ``[0, rows * cols)``), else None."""
    layout = _swizzled(dtype, shape, mode) if mode is not None else None
    if layout is None:
        return None
    size = shape[0] * shape[1]
    offsets = sorted(int(layout.apply(i)["m"]) for i in range(size))
    return layout if offsets == list(range(size)) else None


def _cp_async_runs_misaligned(elem: int, tile, cols: int, offset: int, ctas: int) -> bool:
    """Whether some contiguous run of A's region (a row, or the CTA's whole tile where it
    spans full rows) starts or ends off a 4-byte boundary. cp.async moves 4, 8 or 16
    bytes from an address aligned to that size and has no narrower form, so the access
    that moves the run's first (last) bytes would start (end) misaligned: no plan can
    issue the copy, whatever the shared layout (A's base is aligned to 256 bytes)."""
    tm, tn = tile
    if tn == cols:  # full rows: the CTA's tile is one run in both memories
        runs = [(bx * tm * cols * elem, tm * tn * elem) for bx in range(ctas)]
    else:
        runs = [((r * cols + offset) * elem, tn * elem) for r in range(ctas * tm)]
    return any(start % 4 or length % 4 for start, length in runs)


def ldgsts_case(c: Chooser, seed: int, wait: bool = True) -> Case:
    """copy_async global -> shared (cp.async) and back through a synchronous copy: every
    copy dtype, warp / warpgroup / CTA scope (128 or 256 threads), odd tiles, column
    offsets into a wider A (4-, 8- and 2-byte aligned regions: the last must be refused),
    swizzled shared tiles, and predicates: a CTA-uniform ``bx < k`` zero-filling or
    skipping (the shared tile starts as C's region, so what is skipped is C's), and a
    per-thread ``tid < t``. Which elements a per-thread predicate turns off is the
    lowering's partition, a choice the answer must not depend on: where it turns off
    some threads but not all, an output passes when every element is A's or the fill
    (zero, or C's); ``t <= 0`` and ``t >= threads`` have exact answers. The shared tile
    always starts as C's region: without that copy the device kernel takes no C, and
    the simulator and the GPU must get the same arguments. ``wait=False`` draws the same
    program without its ``cp.async.wait_group`` (a negative control)."""
    # as many draws whatever is drawn, so hypothesis' mutated examples do not overrun
    named = c.pick(LDGSTS_TILES)
    dtype = c.pick(COPY_DTYPES)
    rows = c.pick((1, 2, 3, 4, 5, 8, 16, 30, 32))
    cols = c.pick((1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 40, 64, 70, 100, 128))
    if c.integer(0, 3) == 0:
        dtype, (rows, cols) = named
    scope = c.pick(("warp", "warpgroup", "cta"))
    threads = {"warp": 32, "warpgroup": 128, "cta": c.pick((128, 256))}[scope]
    extra = c.pick((0, 0, 1, 2, 4, 8, 16))
    offset = c.integer(0, extra)
    ctas = c.integer(1, 3)
    swizzle = c.pick((None, None, 32, 64, 128))
    layout = _tile_swizzle(dtype, (rows, cols), swizzle)
    predicate = c.pick(LDGSTS_PREDICATES)
    bound = c.integer(0, ctas) if predicate.startswith("cta") else c.integer(-1, threads + 32)
    prefetch = c.pick((None, None, 64, 128, 256))
    dispatch = c.pick((None, "ldgsts"))
    zero = predicate.endswith("zero")

    def config(tid, bx):
        cfg: dict[str, Any] = {} if prefetch is None else {"prefetch_size": prefetch}
        if predicate != "none":
            cfg["predicate"] = (bx if predicate.startswith("cta") else tid) < bound
        if zero:
            cfg["fill_mode"] = "zero"
        return cfg

    wide = cols + extra
    params = dict(dtype=dtype, tile=(rows, cols), scope=scope, threads=threads, ctas=ctas,
                  cols=wide, col_offset=offset, shared_layout=layout, config=config,
                  init=True, dispatch=dispatch, wait=wait)  # fmt: skip
    func = Deferred(demos.ldgsts_roundtrip, **params)
    rng = np.random.default_rng(seed)
    a, init = (runtime.random_array((ctas * rows, wide), dtype, rng) for _ in range(2))
    off_value = np.zeros_like(a) if zero else init
    expected = runtime.poison_like(a).copy()
    region = (slice(None), slice(offset, offset + cols))
    expected[region] = a[region]
    close = None
    if predicate.startswith("cta"):
        expected[bound * rows :, offset : offset + cols] = off_value[bound * rows :, region[1]]
    elif predicate != "none" and bound <= 0:
        expected[region] = off_value[region]
    elif predicate != "none" and bound < threads:  # the partition's choice: A's or the fill
        close = _either(expected, off_value, region)
        expected = None
    shown = {
        "dtype": dtype, "tile": (rows, cols), "scope": scope, "cta_threads": threads,
        "ctas": ctas, "cols": wide, "col_offset": offset,
        "swizzle": None if layout is None else swizzle,
        "predicate": "none" if predicate == "none" else
        f"{'bx' if predicate.startswith('cta') else 'tid'} < {bound} "
        f"({'zero fill' if zero else 'skip'})",
        "prefetch": prefetch, "dispatch": dispatch,
    }  # fmt: skip
    declines = None
    if _cp_async_runs_misaligned(a.itemsize, (rows, cols), wide, offset, ctas):
        declines = ("ldgsts", ("no cp.async access fits",))
    args = [a, runtime.poison_like(a), init]
    return Case("ldgsts", shown, func, args, 1, expected, close, declines=declines)


def _either(expected: np.ndarray, fill: np.ndarray, region: tuple[slice, slice]) -> Callable:
    """``close(out)``: outside ``region`` the expected (poison) bits, inside each element
    ``expected``'s bits (A's) or ``fill``'s."""
    want, other = runtime.bits(expected), runtime.bits(fill)
    inside = np.zeros(expected.shape, dtype=bool)
    inside[region] = True

    def close(out: np.ndarray) -> str | None:
        got = runtime.bits(out)
        ok = (got == want) | (inside & (got == other))
        bad = int(np.count_nonzero(~ok))
        return f"{bad} of {got.size} elements are neither A's nor the fill" if bad else None

    return close


MMA_ALPHAS = (1.0, 1.0, 0.0, -1.0, "random")
MMA_BETAS = (1.0, 1.0, 0.0, 0.5, -2.0, "random")


def _fma32(x: float, y: np.ndarray, z: np.ndarray) -> np.ndarray:
    """``x * y + z`` in float32 rounded once, as CUDA's default contraction of
    ``alpha * d + beta * c`` into ``fma.rn.f32`` computes it: the product is exact in
    float64, the sum is rounded to odd there (TwoSum's error decides), and one rounding
    to float32 follows (53 >= 24 + 2 bits: correctly rounded)."""
    p = np.float64(x) * y.astype(np.float64)
    z64 = z.astype(np.float64)
    s = p + z64
    back = s - p
    err = (p - (s - back)) + (z64 - back)
    even = (s.view(np.int64) & 1) == 0
    odd = np.where((err != 0) & even, np.nextafter(s, np.where(err > 0, np.inf, -np.inf)), s)
    return odd.astype(np.float32)


def _mma_chain(a, b, c, ta, tb, alpha, beta, step) -> np.ndarray:
    """``D = alpha A B + beta C`` as the hardware computes it in ``step``-wide K steps:
    D starts as C (beta 1), ``beta C`` rounded into float32, or zero (beta 0, or alpha
    not 1, which is applied after); each step is one mma.sync over its products and D,
    which on sm_90 is :func:`.sim.numerics.mma_sum_sm90`, a rule measured on the H200
    (bench/mma_numerics.py, docs/simulator.md "mma numerics"), not derived from any
    lowering; then ``alpha D + beta C`` contracted into one fma (``alpha D`` rounded
    alone where beta is 0). Alpha 0 reads no A B (as BLAS; TVM's simplifier folds the
    epilogue's ``0 * D`` to 0): D is ``beta C``, +0 where beta is 0 too."""
    from .sim.numerics import mma_sum_sm90

    if alpha == 0.0:  # A B is not read (BLAS; TVM's simplifier folds 0 * D to 0)
        return np.float32(beta) * c if beta != 0.0 else np.zeros(c.shape, np.float32)
    a, b = (a.T if ta else a), (b.T if tb else b)  # (M, K) and (K, N), their own dtype
    if beta == 0.0 or alpha != 1.0:
        d = np.zeros(c.shape, np.float32)
    elif beta == 1.0:
        d = c.copy()
    else:
        d = np.float32(beta) * c
    for k in range(0, a.shape[1], step):
        d = mma_sum_sm90(a[:, k : k + step], b[k : k + step], d, np.float32)
    if alpha != 1.0:
        d = np.float32(alpha) * d if beta == 0.0 else _fma32(alpha, d, np.float32(beta) * c)
    return d.astype(np.float32)


def _mma_bound(a, b, c, ta, tb, alpha, beta) -> Callable:
    """``close(out)`` for a warp GEMM summed in any order of 8- or 16-wide mma steps:
    within ``(2 K / 8 + 4) 2^-23 (|alpha| |A| |B| + |beta| |C|)`` of the exact result, a
    float32 rounding per 8 of K with room to spare for the truncating sum
    (docs/gemm_mma.md "Accumulation"), and the initial ``beta C`` and the epilogue."""
    a64 = (a.T if ta else a).astype(np.float64)
    b64 = (b.T if tb else b).astype(np.float64)
    c64 = c.astype(np.float64)
    exact = alpha * (a64 @ b64) + beta * c64
    scale = abs(alpha) * (np.abs(a64) @ np.abs(b64)) + abs(beta) * np.abs(c64)
    bound = (2 * a64.shape[1] // 8 + 4) * 2.0**-23 * scale + 2.0**-140

    close = _within(exact, bound)

    return close


def _operands(rng: np.random.Generator, spread: str) -> Callable[[tuple, str], np.ndarray]:
    """``data(shape, dtype)``: random tensor-core operands drawn from ``rng``, their
    exponents spread over 2^-6 .. 2^6 where ``spread`` is "wide"."""

    def data(shape, dt):
        x = runtime.random_array(shape, "float32", rng)
        if spread == "wide":
            x = x * np.exp2(rng.integers(-6, 7, size=shape)).astype(np.float32)
        return x.astype(_np_type(dt))

    return data


def _within(exact: np.ndarray, bound: np.ndarray) -> Callable[[np.ndarray], str | None]:
    """``close(out)``: None where every output lies within ``bound`` of ``exact``."""

    def close(out: np.ndarray) -> str | None:
        err = np.abs(out.astype(np.float64) - exact)
        bad = int(np.count_nonzero(~(err <= bound)))
        return f"{bad} of {out.size} outputs outside the error bound" if bad else None

    return close


def mma_case(c: Chooser, seed: int) -> Case:
    """A warp's ``D = alpha A B + beta C`` over register fragments (demos.mma_roundtrip):
    m16n8k16 and m16n8k8 tilings of 1-2 x 1-4 x 1-3 tiles, float16 and bfloat16, A and B
    transposed or not, alpha and beta 0, 1 or random, C in place (D), and layouts that
    are no mma fragment (an operand with two lanes of each quad swapped) or C in place
    under alpha, which the variant must refuse.

    The answer, where ours must lower the call, is the sum as sm_90 computes it in the
    widest instruction whose K divides the GEMM's (the variant's documented choice, two
    k8 tiles side by side being one k16 tile): bit for bit on the simulator and on an
    H100/H200; other orders (TVM's built-in) are judged by the error bound."""
    k = c.pick((16, 8))
    dtype = c.pick(("float16", "bfloat16"))
    mt, nt, kt = c.integer(1, 2), c.integer(1, 4), c.integer(1, 3)
    ta, tb = bool(c.integer(0, 1)), bool(c.integer(0, 1))
    alpha, beta = c.pick(MMA_ALPHAS), c.pick(MMA_BETAS)
    if alpha == -1.0 and beta == "random":
        # -1 * D + beta * C: LLVM may rewrite -1 * D as -D and then fuse beta * C rather
        # than alpha * D (its choice, which the TIR does not show); a power of two beta
        # makes beta * C exact, so either fusion gives the same bits.
        beta = 0.5
    c_is_d = c.integer(0, 2) == 0
    swapped = c.pick((None,) * 12 + ("A", "B", "D"))
    spread = c.pick(("normal", "wide"))
    rng = np.random.default_rng(seed)
    alpha, beta = (
        float(np.float32(rng.uniform(-2, 2))) if x == "random" else x for x in (alpha, beta)
    )
    m, n, kk = 16 * mt, 8 * nt, k * kt

    data = _operands(rng, spread)

    a = data((kk, m) if ta else (m, kk), dtype)
    b = data((n, kk) if tb else (kk, n), dtype)
    cc = data((m, n), "float32")
    func = Deferred(demos.mma_roundtrip, mt, nt, kt, k, dtype=dtype, ta=ta, tb=tb,
                    alpha=alpha, beta=beta, c_is_d=c_is_d, swapped=swapped)  # fmt: skip
    refusals = ()
    if swapped is not None:  # no fragment: the first misplaced element is named
        refusals += ("no mma form fits",)
    if c_is_d and alpha != 1.0 and beta != 0.0:  # alpha D + beta C would read C after D
        refusals += ("C is D",)
    declines = ("mma.m16n8k*", refusals) if refusals else None
    step = 16 if kk % 16 == 0 else 8
    expected = None if declines else _mma_chain(a, b, cc, ta, tb, alpha, beta, step)
    close = _mma_bound(a, b, cc, ta, tb, alpha, beta)
    params = dict(shape=f"m16n8k{k}", tiles=(mt, nt, kt), dtype=dtype, ta=ta, tb=tb,
                  alpha=alpha, beta=beta, c_is_d=c_is_d, swapped=swapped, data=spread)  # fmt: skip
    poison = runtime.poison_like(cc)
    return Case("mma", params, func, [a, b, cc, poison], 3, expected, close, declines=declines)


# -- TMA and wgmma ---------------------------------------------------------------------------
TMA_DTYPES = ("float16", "bfloat16", "float32", "int8")
TMA_SCOPES = ("thread", "warp", "warpgroup", "cta")
# cp.reduce.async.bulk.tensor's element types (PTX ISA 9.7.9.25.5.2), of the dtypes drawn
TMA_REDUCE_TYPES = {"add": ("float16", "bfloat16", "float32"), "max": ("float16", "bfloat16")}


def _inside(start, tile, shape) -> tuple[tuple[slice, ...], tuple[slice, ...]]:
    """The part of the box ``[start, start + tile)`` inside ``[0, shape)``: its slices of
    the tensor and of the tile (empty where the box lies wholly outside)."""
    outer, inner = [], []
    for s, e, n in zip(start, tile, shape, strict=True):
        lo = min(max(s, 0), n)
        hi = max(min(s + e, n), lo)
        outer.append(slice(lo, hi))
        inner.append(slice(lo - s, hi - s))
    return tuple(outer), tuple(inner)


def _tma_combined(old: np.ndarray, new: np.ndarray, reduce: str | None) -> np.ndarray:
    """What a TMA store leaves in global memory: ``new``, or ``old`` reduced with it and
    rounded once into the element type (``.add`` rounds to nearest even)."""
    from .sim.numerics import cast

    if reduce is None:
        return new
    if reduce == "max" or np.issubdtype(old.dtype, np.integer):
        fn = np.maximum if reduce == "max" else np.add
        with np.errstate(over="ignore"):
            if np.issubdtype(old.dtype, np.integer):
                return fn(old, new)
            return fn(old.astype(np.float64), new.astype(np.float64)).astype(old.dtype)
    if old.dtype == np.float32:
        return old + new  # IEEE float32 addition: rounded once
    # the float64 sum of two 16-bit floats is exact; rounded once into their type
    return cast(old.astype(np.float64) + new.astype(np.float64), old.dtype)


def tma_case(c: Chooser, seed: int) -> Case:
    """copy_async -> tma_auto both ways (demos.tma_roundtrip, demos.tma_store_roundtrip):
    a load (global -> shared on an mbarrier: one thread's ``arrive.expect_tx`` of the
    tile's bytes, every reader's ``mbarrier_wait``) or a store (shared -> global after
    ``fence.proxy.async`` and a CTA barrier; thread 0 commits the bulk group and waits),
    float16 / bfloat16 / float32 / int8, shared tiles of whole column blocks of each
    swizzle (none, 32, 64, 128 bytes: demos.tma_shared_layout, whose blocks are as wide
    as the swizzle in bytes, 128 int8 elements under 128 bytes), every scope (thread
    under ``if tid == 0``), tensors whose rows are a multiple of 16 bytes, and boxes at
    any start: inside the tensor, reaching past its far edge or before its start (a
    negative coordinate), or wholly outside, the innermost coordinate mostly at a whole 16
    bytes. A quarter of the draws transpose all of it (``order="column"``): the global
    tensor column-major (its rows contiguous: the tensor map's dimension 0 is the
    buffer's dimension 0) and the shared tile in dense row blocks
    (``demos.tma_shared_layout(transposed=True)``). A load reads zeros outside the tensor;
    a store writes only inside it (TMA clips the box past the far edge), optionally a
    reduction
    (``use_tma_reduce="add"`` / ``"max"``) into B's old values. The variant must refuse
    a reduction the ISA does not list for the dtype, column blocks that are not a whole
    number of swizzle periods apart (rows not a multiple of 8): stores at warp, warpgroup
    and CTA scope, where nothing else lowers them; and coordinates the hardware stops on
    with an illegal instruction (:mod:`.isa.bulk`): an innermost one not at a whole 16
    bytes, a store's negative one (ours refuses them whatever would take them next).

    TVM's built-in pipeline lowers these calls otherwise or not at all (it has no TMA at
    warp, warpgroup or CTA scope; its cp.async takes the loads and ignores mbar=, so the
    mbarrier never completes): what it does is recorded, a finding about the baseline."""
    direction = c.pick(("load", "store"))
    dtype = c.pick(TMA_DTYPES)
    size = np.dtype(_np_type(dtype)).itemsize
    swizzle = c.pick((0, 32, 64, 128))
    scope = c.pick(TMA_SCOPES)
    rows = c.pick((8, 8, 16, 16, 24, 32, 3, 5))
    blocks = c.pick((1, 1, 2, 4))  # column blocks of the swizzle's width
    plain = c.pick((1, 2, 3, 5, 8, 16))  # without a swizzle: 16-byte units a row
    unit = 16 // size  # elements of 16 bytes: the tensor's row stride is a multiple
    cols = blocks * swizzle // size if swizzle else plain * unit
    # the tensor: about the tile's size, smaller or larger (rows a multiple of 16 bytes)
    shape = (
        c.integer(max(1, rows // 2), 2 * rows + 8),
        unit * c.integer(max(1, cols // (2 * unit)), 2 * cols // unit + 2),
    )
    where = c.pick(("inside", "inside", "past", "past", "before"))
    starts = []
    for extent, n in zip((rows, cols), shape, strict=True):
        lo, hi = {"inside": (0, max(0, n - extent)), "past": (max(0, n - extent), n),
                  "before": (-extent, n - 1)}[where]  # fmt: skip
        starts.append(c.integer(lo, hi))
    if c.integer(0, 7):  # mostly at a whole 16 bytes: the innermost coordinate TMA takes
        starts[1] -= starts[1] % unit
    start = (starts[0], starts[1])
    reduce = c.pick((None, None, "add", "max")) if direction == "store" else None
    unlisted = c.integer(0, 3) == 3  # keep a reduction the ISA does not list for dtype
    # refusals are drawn only where nothing else lowers the call: what tma_auto refuses
    # goes to TVM's variants, whose cp.async takes many a load (at any scope) and drops
    # mbar= (the mbarrier never completes: a deadlock), and whose thread-scope TMA store
    # takes a store (and emits a reduction the ISA does not list)
    if (direction == "load" or scope == "thread") and swizzle and blocks > 1 and rows % 8:
        rows = 8
    unlisted = unlisted and scope != "thread"
    if reduce is not None and dtype not in TMA_REDUCE_TYPES[reduce] and not unlisted:
        reduce = next((r for r in TMA_REDUCE_TYPES if dtype in TMA_REDUCE_TYPES[r]), None)

    order = c.pick(("row", "row", "row", "column"))
    tile = (rows, cols)
    layouts: dict = {}
    if order == "column":  # all of it transposed: the contiguous dimension first
        tile, shape, start = (cols, rows), shape[::-1], start[::-1]
        layouts = dict(shared_layout=demos.tma_shared_layout(dtype, tile, swizzle, True),
                       global_layout=TileLayout(S[shape : (1, shape[0])]))  # fmt: skip
    inner_axis = 0 if order == "column" else 1

    def logical(raw: np.ndarray) -> np.ndarray:  # the global tensor a kernel sees in raw
        return raw.reshape(-1).reshape(shape[::-1]).T if order == "column" else raw

    rng = np.random.default_rng(seed)
    outer, inner = _inside(start, tile, shape)
    declines = None
    if blocks > 1 and swizzle and rows % 8:
        # the column blocks are rows * swizzle bytes apart; a box's swizzled shared address
        # must be a multiple of the swizzle's period (8 rows of it)
        declines = ("tma_auto", ("bytes TMA needs",))
    if direction == "load":
        func = Deferred(demos.tma_roundtrip, dtype, tile, swizzle, scope, shape, start, **layouts)
        a = runtime.random_array(shape, dtype, rng)
        expected = np.zeros(tile, a.dtype)  # TMA fills what lies outside A
        expected[inner] = logical(a)[outer]
        args = [a, runtime.poison_like(expected)]
    else:
        func = Deferred(demos.tma_store_roundtrip, dtype, tile, swizzle, scope, shape, start,
                        reduce=reduce, **layouts)  # fmt: skip
        a = runtime.random_array(tile, dtype, rng)
        b = runtime.random_array(shape, dtype, rng)  # old values: what is not written shows
        expected = b.copy()
        view = logical(expected)  # (a view of expected's bytes)
        view[outer] = _tma_combined(logical(b)[outer], a[inner], reduce)
        args = [a, b]
    # coordinates the hardware faults on (isa.bulk): refused before the shared alignment
    if start[inner_axis] % unit:
        declines = ("tma_auto", ("16 bytes of",))
    elif direction == "store" and min(start) < 0:
        declines = ("tma_auto", ("must not be negative",))
    if direction == "store" and reduce is not None and dtype not in TMA_REDUCE_TYPES[reduce]:
        declines = ("tma_auto", ("use_tma_reduce=",))
    params = dict(direction=direction, dtype=dtype, tile=tile, swizzle=swizzle, scope=scope,
                  shape=shape, start=start, where=where, reduce=reduce, order=order)  # fmt: skip
    return Case("tma", params, func, args, 1, expected, declines=declines)


WGMMA_N = (8, 16, 24, 64, 128, 256)
WGMMA_K = {"16-bit": (16, 32, 64, 128), "float8": (32, 64, 128, 256)}
WGMMA_DTYPES = ("float16", "bfloat16", "float8_e4m3fn", "float8_e5m2")
F8_DTYPES = ("float8_e4m3fn", "float8_e5m2")


# a multiplicand format's smallest normal exponent (subnormal operands are bounded as if
# normal: they align as normal ones in the measured mma, sim.numerics.mma_bound)
def wgmma_operand_layout(shape: tuple[int, int], contiguous: int, swizzle: int, size: int):
    """A canonical wgmma layout of a shared ``shape`` operand whose dimension
    ``contiguous`` (1: the row, 0: the column) runs contiguously: under a ``swizzle``-byte
    swizzle, blocks as wide as it (8-row atoms of ``swizzle``-byte rows, blocks after
    each other); without one, 8 x 16-byte core matrices, along the contiguous dimension
    first. A swizzle wider than the contiguous extent is kept at that extent (no
    canonical layout: the variant must refuse it)."""
    from tvm.tirx.layout import ComposeLayout

    r, c_ = shape
    unit = 16 // size  # elements of 16 bytes
    per_element = unit.bit_length() - 1
    if swizzle:
        atom = (swizzle // 16).bit_length() - 1
        if contiguous == 1:
            w = min(swizzle // size, c_)
            base = TileLayout(S[(r, c_ // w, w) : (w, r * w, 1)])
        else:
            w = min(swizzle // size, r)
            base = TileLayout(S[(r // w, w, c_) : (c_ * w, 1, w)])
        return ComposeLayout(per_element, atom, 3, base)
    if contiguous == 1:
        return TileLayout(S[(r // 8, 8, c_ // unit, unit) : (8 * c_, unit, 8 * unit, 1)])
    return TileLayout(S[(r // unit, unit, c_ // 8, 8) : (8 * unit, 1, 8 * r, unit)])


_PTX_TYPES = {"float16": "f16", "bfloat16": "bf16", "float8_e4m3fn": "e4m3", "float8_e5m2": "e5m2"}


def _wgmma_chain(
    a: np.ndarray, b: np.ndarray, d: np.ndarray | None, types: tuple[str, str], step: int
) -> np.ndarray:
    """``A B (+ D)`` as an sm_90 kernel's wgmma computes it, in the simulator and on the
    H200 bit for bit (:func:`.sim.numerics.wgmma_sum_sm90`): one instruction per
    ``step`` of K (16; 32 for float8), in K order; D starts as the old tile (accum) or
    zero (scale-d 0 on the first step). ``a`` is (M, K), ``b`` (K, N); ``types`` their
    dtypes."""
    from .sim.numerics import wgmma_sum_sm90

    ptx = (_PTX_TYPES[types[0]], _PTX_TYPES[types[1]])
    a32, b32 = a.astype(np.float32), b.astype(np.float32)  # every multiplicand is exact
    acc = np.zeros((a.shape[0], b.shape[1]), np.float32) if d is None else d.astype(np.float32)
    for k in range(0, a.shape[1], step):
        acc = wgmma_sum_sm90(a32[:, k : k + step], b32[k : k + step], acc, ptx)
    return acc


def _wgmma_bound(
    a: np.ndarray, b: np.ndarray, d: np.ndarray | None, types: tuple[str, str]
) -> tuple[np.ndarray, np.ndarray]:
    """How far an sm_90 wgmma's ``A B (+ D)`` (:func:`.sim.numerics.wgmma_sum_sm90`) may
    lie from the exact result, per output, with ``M' = sum_k |a_k|' |b_k|' (+ |D|)``
    (``|x|'``: ``|x|`` raised to its format's smallest normal, as in
    :func:`.sim.numerics.mma_bound`, so that ``2^(e(a) + e(b)) <= |a|' |b|'``):

    * 16-bit: ``(n + 1) 2^-24 M' + 2^-23 |exact| + 2^-148`` with ``n`` the addends (K
      products, and D with accum). Each 16-wide step truncates 17 addends to
      ``2^(E - 25)`` and rounds toward zero once: less than ``17 2^-25 M' + 2^-23 |S|``;
      the ``K / 16`` chained steps less than ``0.66 K 2^-24 M'``.
    * float8: ``K / 32 * 35 2^-13 M'``: each 32-wide step truncates its 33 addends to
      ``2^(E - 13)``, each by less than ``2^-13 M'``, and the sum to 14 bits, by less than
      ``2^-13 |S|``; 35 leaves room for the accumulator's growth along the chain. The
      H200 measured errors up to ``292 K 2^-24 M`` (wide operands), about an eighth of it.

    Returns (exact, bound); ``a`` is (M, K), ``b`` (K, N)."""
    from .sim.numerics import format_emin

    fp8 = any(t in F8_DTYPES for t in types)
    scaled = []
    for x, t in zip((a, b), types, strict=True):
        x64 = np.abs(x.astype(np.float64))
        scaled.append(np.maximum(x64, 2.0 ** format_emin(t)) * (x64 != 0))
    mag = scaled[0] @ scaled[1]
    exact = a.astype(np.float64) @ b.astype(np.float64)
    n = a.shape[1]
    if d is not None:
        mag = mag + np.abs(d.astype(np.float64))
        exact = exact + d.astype(np.float64)
        n += 1
    if fp8:
        return exact, a.shape[1] / 32 * 35 * 2.0**-13 * mag + 2.0**-148
    return exact, (n + 1) * 2.0**-24 * mag + 2.0**-23 * np.abs(exact) + 2.0**-148


def wgmma_case(c: Chooser, seed: int) -> Case:
    """A warpgroup's ``gemm_async -> wgmma`` (demos.wgmma_gemm, demos.wgmma_gemm_f8): M 64
    or 128, N 8 .. 256, float16 / bfloat16 with K 16 .. 128, A K- or M-major and B N- or
    K-major under every swizzle (none, 32, 64, 128 bytes) that fits, accum (D's old tile
    added) or not; float8 e4m3 / e5m2 with K 32 .. 256: a pair of one type through
    wgmma_gemm (K-major operands of any swizzle, accum too), a mixed pair through
    wgmma_gemm_f8 (128-byte swizzled K-major tiles: K 128 or 256). Some draws break a
    rule the variant documents and must be refused: a swizzle wider than the operand's
    contiguous run (no canonical layout), an MN-major float8 operand.

    ``expected`` is sm_90's wgmma summation in the variant's documented K order
    (:func:`_wgmma_chain`), which the simulator and the H200 both compute, compared bit
    for bit; ``close`` says whether an output lies within :func:`_wgmma_bound` of the
    exact product."""
    # as many draws whatever is drawn
    a_type = c.pick(WGMMA_DTYPES)
    b_f8 = c.pick(F8_DTYPES)
    mixed = c.integer(0, 1) == 1  # a float8 A with a B of the other float8 type
    m = c.pick((64, 128))
    n = c.pick(WGMMA_N)
    k_at = c.integer(0, 3)
    # the rare choices last, so that hypothesis' simplest draws are the common ones
    a_mn, b_k = c.integer(0, 2) == 2, c.integer(0, 2) == 2  # not the demo's majors
    f8_mn = c.integer(0, 9) == 9  # a float8 B MN-major (refused)
    swizzles = (c.pick((128, 64, 32, 0)), c.pick((128, 64, 32, 0)))
    fits = c.integer(0, 7) != 7  # most draws narrow a swizzle to one that fits
    accum = bool(c.integer(0, 1))
    spread = c.pick(("normal", "wide"))
    f8 = a_type in F8_DTYPES
    b_type = b_f8 if f8 and mixed else a_type
    f8_mn = f8_mn and f8
    if f8_mn:  # whole 128-byte N blocks, so that the layout is one (just not K-major)
        n = 128
    k = WGMMA_K["float8" if f8 else "16-bit"][k_at]
    size = 1 if f8 else 2
    rng = np.random.default_rng(seed)

    data = _operands(rng, spread)

    refusals: tuple[str, ...] = ()
    if f8 and a_type != b_type:  # a mixed pair: wgmma_gemm_f8's 128-byte swizzled tiles
        k, accum = (128, 256)[k_at % 2], False
        a = data((m, k), a_type)
        if f8_mn:  # B given N-major (K x N): no float8 wgmma reads it
            b = b_arg = data((k, n), b_type)
            refusals += ("K-major operands only",)
        else:  # Bt (N x K), K-major
            b_arg = data((n, k), b_type)
            b = b_arg.T
        func = Deferred(
            demos.wgmma_gemm_f8, m, n, k, a_type, b_type, b_major="MN" if f8_mn else "K"
        )
        shown = {"a": "K-major 128B", "b": f"{'MN' if f8_mn else 'K'}-major 128B"}
    else:
        # A (M x K): K-major (rows contiguous) or M-major; B (K x N): N-major or K-major
        majors = ("MN" if a_mn else "K", "K" if b_k else "MN")
        if f8:
            majors = ("K", "MN" if f8_mn else "K")
            if f8_mn:
                refusals += ("K-major operands only",)
        contiguous = (0 if majors[0] == "MN" else 1, 0 if majors[1] == "K" else 1)
        layouts, shown = [], {}
        for name, shape, major, cont, swz in zip(
            "ab", ((m, k), (k, n)), majors, contiguous, swizzles, strict=True
        ):
            run = shape[cont] * size  # bytes of a contiguous run
            if fits or swz <= run:  # whole swizzle-wide blocks: the swizzle divides the run
                swz = next(s for s in (swz, 128, 64, 32, 0) if s == 0 or run % s == 0)
            else:  # wider than the run: no canonical layout
                refusals += ("no canonical wgmma layout",)
            layouts.append(wgmma_operand_layout(shape, cont, swz, size))
            shown[name] = f"{major}-major {swz}B" if swz else f"{major}-major unswizzled"
        a, b = data((m, k), a_type), data((k, n), b_type)
        b_arg = b
        func = Deferred(demos.wgmma_gemm, m, n, k, a_type, a_layout=layouts[0],
                        b_layout=layouts[1], accum=accum)  # fmt: skip
    d_old = data((m, n), "float32") if accum else None
    exact, bound = _wgmma_bound(a, b, d_old, (a_type, b_type))
    declines = ("wgmma", tuple(dict.fromkeys(refusals))) if refusals else None
    expected = None if declines else _wgmma_chain(a, b, d_old, (a_type, b_type), 32 if f8 else 16)

    close = _within(exact, bound)

    d = d_old if accum else runtime.poison_like(np.zeros((m, n), np.float32))
    params = dict(m=m, n=n, k=k, a_dtype=a_type, b_dtype=b_type, a=shown["a"], b=shown["b"],
                  accum=accum, data=spread)  # fmt: skip
    return Case("wgmma", params, func, [a, b_arg, d], 2, expected, close, declines=declines)


def _misplaced_a_fragment(m: int, k: int) -> Any:
    """The register A fragment (:func:`.fragments.wgmma_accumulator_layout` over K) with its two
    lane digits exchanged: rows on ``l % 4``, columns on ``l / 4`` (every element in the
    wrong thread but the diagonal ones), which the variant must refuse."""
    from tvm.tirx.layout import tid_in_wg

    return TileLayout(
        S[(m // 64, 4, 2, 8, k // 8, 4, 2) : (k // 2, 32 @ tid_in_wg, 2, 1 @ tid_in_wg, 4,
                                              8 @ tid_in_wg, 1)]
    )  # fmt: skip


def wgmma_rs_case(c: Chooser, seed: int) -> Case:
    """A warpgroup's ``gemm_async -> wgmma`` with A in registers (the register form:
    demos.wgmma_gemm_rs): M 64 or 128, N 8 .. 256, K 16 .. 128, float16 or bfloat16, A
    loaded into the A fragment, B N- or K-major under every swizzle that fits, accum or
    not; a rare draw lays A out with two lane digits exchanged, which the variant must
    refuse naming a misplaced element. ``expected`` is sm_90's summation per K step of
    16 (:func:`_wgmma_chain`), bit for bit in the simulator and on the GPU."""
    dtype = c.pick(("float16", "bfloat16"))
    m = c.pick((64, 128))
    n = c.pick(WGMMA_N)
    k = c.pick(WGMMA_K["16-bit"])
    accum = bool(c.integer(0, 1))
    spread = c.pick(("normal", "wide"))
    b_k = c.integer(0, 2) == 2  # B K-major (the demo's is N-major)
    swizzle = c.pick((128, 64, 32, 0))
    misplaced = c.integer(0, 9) == 9  # the rare choice last
    cont = 0 if b_k else 1  # B (k x n): K-major runs down a column, N-major along a row
    run = (k, n)[cont] * 2
    swizzle = next(x for x in (swizzle, 128, 64, 32, 0) if x == 0 or run % x == 0)
    b_layout = wgmma_operand_layout((k, n), cont, swizzle, 2)
    a_layout = _misplaced_a_fragment(m, k) if misplaced else None
    func = Deferred(
        demos.wgmma_gemm_rs, m, n, k, dtype, accum, a_layout=a_layout, b_layout=b_layout
    )
    rng = np.random.default_rng(seed)

    data = _operands(rng, spread)

    a, b = data((m, k), dtype), data((k, n), dtype)
    d_old = data((m, n), "float32") if accum else None
    exact, bound = _wgmma_bound(a, b, d_old, (dtype, dtype))
    declines = ("wgmma", ("the wgmma A fragment puts it",)) if misplaced else None
    expected = None if declines else _wgmma_chain(a, b, d_old, (dtype, dtype), 16)

    close = _within(exact, bound)

    d = d_old if accum else runtime.poison_like(np.zeros((m, n), np.float32))
    shown = f"{'K' if b_k else 'MN'}-major {f'{swizzle}B' if swizzle else 'unswizzled'}"
    params = dict(m=m, n=n, k=k, dtype=dtype, a="misplaced" if misplaced else "fragment",
                  b=shown, accum=accum, data=spread)  # fmt: skip
    return Case("wgmma_rs", params, func, [a, b, d], 2, expected, close, declines=declines)


# -- reductions -----------------------------------------------------------------------------
REDUCE_OPS = ("sum", "max", "min")
REDUCE_DTYPES = ("float32", "float16", "bfloat16", "int32")
REDUCE_EXTENTS = (1, 2, 3, 4, 5, 7, 8, 16, 32, 33, 64, 100, 128, 256)
# (scope, CTA threads, the if that narrows the call: demos.shared_reduction's names)
REDUCE_SCOPES = (
    ("warp", 32, None), ("warp", 256, "warp5"), ("warpgroup", 128, None),
    ("warpgroup", 256, "wg0"), ("cta", 32, None), ("cta", 128, None), ("cta", 256, None),
    ("cta", 256, "warps0-3"), ("thread", 128, "tid65"),
)  # fmt: skip


def _np_type(dtype: str) -> np.dtype:
    return runtime.random_array((1,), dtype, np.random.default_rng(0)).dtype


def _reduced(op: str, src: np.ndarray, axes: tuple[int, ...], old, dst_shape) -> np.ndarray:
    """The exact reduction in float64 (int32: wrapping), old value first, in dst's shape."""
    if np.issubdtype(src.dtype, np.integer):
        fn = {"sum": np.add, "max": np.maximum, "min": np.minimum}[op]
        with np.errstate(over="ignore"):
            out = fn.reduce(src, axis=axes, dtype=src.dtype).reshape(dst_shape)
            return out if old is None else fn(old, out)
    x = src.astype(np.float64)
    fn = {"sum": np.add, "max": np.fmax, "min": np.fmin}[op]
    out = fn.reduce(x, axis=axes).reshape(dst_shape)
    return out if old is None else fn(old.astype(np.float64), out)


def _reduction_bound(op, src, axes, old, dst_shape, dst_dtype, at=None) -> Callable:
    """``close(out)`` for a reduction: max/min and int32 exact; a float sum within
    ``(n + 1) u |x|_1`` (float32 accumulation) plus one rounding into dst's dtype
    (docs/reduction.md). ``at(out)`` picks the outputs from the program's output array."""
    exact = _reduced(op, src, axes, old, dst_shape)
    units = {"float32": 2.0**-24, "float16": 2.0**-11, "bfloat16": 2.0**-8}
    n = int(np.prod([src.shape[a] for a in axes])) + (old is not None)
    mag = np.abs(src.astype(np.float64)).sum(axis=axes).reshape(dst_shape)
    if old is not None:
        mag = mag + np.abs(old.astype(np.float64))
    bound = (n + 1) * units["float32"] * mag + units.get(dst_dtype, 0.0) * np.abs(exact)

    def close(out: np.ndarray) -> str | None:
        got = (at(out) if at else out).astype(np.float64)
        if op != "sum" or np.issubdtype(src.dtype, np.integer):
            want = exact.astype(_np_type(dst_dtype)).astype(np.float64)
            bad = int(np.count_nonzero(~((got == want) | (np.isnan(got) & np.isnan(want)))))
            return f"differs from the exact {op} in {bad} of {got.size}" if bad else None
        err = np.abs(got - exact)
        bad = int(np.count_nonzero(~(err <= bound)))
        return f"{bad} of {got.size} outputs outside the error bound" if bad else None

    return close


def _our_order(func: Any, src: np.ndarray, old: np.ndarray | None) -> np.ndarray | None:
    """dst as our plan sums it (its order, emulated in numpy), or None when no plan of
    ours takes the call."""
    from . import explain
    from .reduction.schedule import emulate

    report = next((r for r in explain(func) if r.op in REDUCE_OPS), None)
    if report is None or report.plan_object is None:
        return None
    return emulate(report.plan_object.schedule, src, old)


def shared_reduction_case(c: Chooser, seed: int) -> Case:
    """A reduction of a shared tile into a shared dst: any op, dtype (16-bit data into
    float32 statistics too), rank, axes (negative or not), dst dropping or keeping the
    reduced axes, every scope (narrowed ones too), odd extents, accum; without accum, the
    call may run twice in a loop, with or without a CTA barrier after it (the workspace
    reused: a wait the plan left out is a race the simulator reports)."""
    rng = np.random.default_rng(seed)
    op, dtype = c.pick(REDUCE_OPS), c.pick(REDUCE_DTYPES)
    dst_dtype = c.pick((dtype, "float32")) if dtype in ("float16", "bfloat16") else dtype
    shape = tuple(c.pick(REDUCE_EXTENTS) for _ in range(c.integer(1, 3)))
    while int(np.prod(shape)) > 4096:
        shape = shape[1:]
    ndim = len(shape)
    axes = tuple(i for i in range(ndim) if c.integer(0, 1)) or (ndim - 1,)
    spelled = tuple(a - ndim if c.integer(0, 1) else a for a in axes)
    if c.integer(0, 1):
        dst_shape = tuple(1 if i in axes else e for i, e in enumerate(shape))
    else:
        dst_shape = tuple(e for i, e in enumerate(shape) if i not in axes) or (1,)
    scope, threads, narrow = c.pick(REDUCE_SCOPES)
    accum = bool(c.integer(0, 1))
    repeat = 1 if accum else c.pick((1, 2))  # run twice, dst overwritten with the same
    loop_sync = repeat == 1 or bool(c.integer(0, 1))
    func = demos.shared_reduction(op, shape, spelled, dst_shape, dtype, dst_dtype, scope,
                                  threads, accum, narrow=narrow, repeat=repeat,
                                  loop_sync=loop_sync)  # fmt: skip
    src = runtime.random_array(shape, dtype, rng)
    if accum:
        old = runtime.random_array(dst_shape, dst_dtype, rng)
    else:
        old = runtime.poison_like(np.zeros(dst_shape, _np_type(dst_dtype)))
    params = dict(op=op, dtype=dtype, dst_dtype=dst_dtype, shape=shape, axes=spelled,
                  dst_shape=dst_shape, scope=scope, cta_threads=threads, narrow=narrow,
                  accum=accum, repeat=repeat, loop_sync=loop_sync)  # fmt: skip
    prior = old if accum else None
    return Case(
        "shared_reduction", params, func, [src, old], 1, _our_order(func, src, prior),
        close=_reduction_bound(op, src, axes, prior, dst_shape, dst_dtype),
    )  # fmt: skip


def register_reduction_case(c: Chooser, seed: int) -> Case:
    """A reduction of register tiles as TVM's layouts place them (demos.register_reductions:
    thread-wise, the warp shuffle, wg_local, the mma accumulator's rows both ways, across
    warps, dst filled from a workspace), any op and dtype, accum; every holder of every
    output is compared."""
    rng = np.random.default_rng(seed)
    catalog = demos.register_reductions()
    case = catalog[c.pick(sorted(catalog))]
    op = c.pick(REDUCE_OPS)
    dtype = c.pick(REDUCE_DTYPES)
    dst_dtype = c.pick((dtype, "float32")) if dtype in ("float16", "bfloat16") else dtype
    accum = bool(c.integer(0, 1))
    func = case.kernel(op, dtype, dst_dtype, accum)
    threads = max(case.threads, 1)
    x = runtime.random_array(case.src_shape, dtype, rng)
    old = runtime.random_array(case.dst_shape, dst_dtype, rng)
    a = demos.pack_registers(x, case.src_layout, case.scope, threads, fill=0)
    b = demos.pack_registers(old, case.dst_layout, case.scope, threads)
    if not accum:
        b = runtime.poison_like(b)
    registers, table = demos.register_holders(case.dst_layout, case.dst_shape, case.scope, threads)
    compared = np.zeros(b.shape, dtype=bool)
    for i, r in enumerate(registers):
        compared[:, r] = table[:, i] >= 0

    prior = old if accum else None
    ours = _our_order(func, x, prior)
    expected = None
    if ours is not None:  # every holder of an output has its value; the rest stays as it was
        expected = b.copy()
        for i, r in enumerate(registers):
            held = table[:, i] >= 0
            expected[held, r] = ours.reshape(-1)[table[held, i]]
    kept = bool(case.thread_reduce is not None or case.name == "warp_multi_elem")
    params = dict(layouts=case.name, op=op, dtype=dtype, dst_dtype=dst_dtype, accum=accum)
    close = None
    if not kept:  # TVM's kept forms reduce what the layout says: judged bit for bit only
        axes = case.reduced or tuple(a % len(case.src_shape) for a in (case.axes or (-1,)))

        def held_outputs(out_b):
            got = np.zeros(int(np.prod(case.dst_shape)), dtype=out_b.dtype)
            for i, r in enumerate(registers):
                held = table[:, i] >= 0
                got[table[held, i]] = out_b[held, r]
            return got.reshape(case.dst_shape)

        close = _reduction_bound(op, x, axes, prior, case.dst_shape, dst_dtype, held_outputs)
    return Case("register_reduction", params, func, [a, b], 1, expected, close, compared)


GENERATORS: dict[str, Callable[[Chooser, int], Case]] = {
    "shared_reduction": shared_reduction_case,
    "register_reduction": register_reduction_case,
    "gmem_smem": gmem_smem_case,
    "copy_reg": copy_reg_case,
    "fragment": fragment_case,
    "elementwise": elementwise_case,
    "mixed_elementwise": mixed_elementwise_case,
    "smem_elementwise": smem_elementwise_case,
    "narrowed": narrowed_case,
    "ldgsts": ldgsts_case,
    "mma": mma_case,
    "tma": tma_case,
    "wgmma": wgmma_case,
    "wgmma_rs": wgmma_rs_case,
}


def random_case(c: Chooser, kind: str | None = None) -> Case:
    """One program of ``kind`` (or of a kind chosen too); data seeded from the chooser."""
    kind = kind or c.pick(sorted(GENERATORS))
    return GENERATORS[kind](c, c.integer(0, 2**32 - 1))


# -- the differential check ----------------------------------------------------------------
Execute = Callable[[Any, list[np.ndarray], str], list[np.ndarray]]


def simulate(func: Any, args: list[np.ndarray], pipeline: str) -> list[np.ndarray]:
    from . import sim

    return sim.run(func, args, pipeline=pipeline).arrays


@dataclass
class Verdict:
    """What happened to one case.

    ``ours``: ``lowered`` when our variants took every call, else the kind of the first
    decline (the built-in took that call), or why our pipeline refused the program.
    ``builtin``: what TVM's built-in pipeline did: ``lowered`` (and right), ``cannot
    lower``, or ``WRONG``/``faults``: a finding about the baseline, not a failure of ours.
    ``problems``: every failure of ours (empty: the case passed): our output differs from
    numpy or from a correct built-in, our kernel faults in the simulator, the simulator
    cannot run a lowering, or we refuse a sound program TVM lowers.
    """

    case: Case
    ours: str = "lowered"
    builtin: str = "lowered"
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def reason_kind(reason: str) -> str:
    """A decline reason without its names and numbers: what fuzz statistics count."""
    text = re.sub(r"\b[A-Za-z_]\w*_(smem|ptr|s)\b|\b[A-Z]\w*\b", "X", reason)
    text = re.sub(r"\d+", "N", text)
    return text.split(";")[0].split(":")[0].strip()[:80]


def our_coverage(func: Any) -> str:
    """``lowered`` when our variants take every call, else the kind of the first decline."""
    from . import explain

    for report in explain(func):
        if report.variant is None:
            reasons = [c.reason for c in report.candidates if c.reason]
            return "declined: " + (reason_kind(reasons[0]) if reasons else "no variant")
    return "lowered"


def differential(case: Case, execute: Execute = simulate) -> Verdict:
    """Run ``case`` through both pipelines with ``execute`` (the simulator, or a GPU:
    bench/differential.py); compare with numpy and with each other (see
    :class:`Verdict`). The tensor-core cases are bit for bit on an sm_90 GPU too: their
    ``expected`` is the summation the H200 was measured to perform (mma, wgmma)."""
    from .bounds import OutOfBoundsError
    from .errors import DispatchError
    from .sim.errors import NotModeled, SimError

    verdict = Verdict(case, ours=our_coverage(case.func))
    if case.declines is not None and (missed := _missed_decline(case)) is not None:
        verdict.problems.append(missed)
    outputs: dict[str, Any] = {}
    for name, pipeline in (("ours", OURS), ("builtin", BUILTIN)):
        try:
            outputs[name] = execute(case.func, [a.copy() for a in case.args], pipeline)[case.output]
        except Exception as err:  # noqa: BLE001  (every outcome is classified below)
            outputs[name] = err
    ours, builtin = outputs["ours"], outputs["builtin"]
    rejected = isinstance(ours, OutOfBoundsError)
    if rejected:
        verdict.ours = "rejected: out of bounds"
    elif isinstance(ours, DispatchError):
        verdict.ours = "cannot lower: " + reason_kind(str(ours).splitlines()[0])
    elif isinstance(ours, Exception):
        verdict.problems.append(f"ours: {_summary(ours)}")
    elif (off := _off(case, ours, exact=case.expected is not None)) is not None:
        verdict.problems.append(f"ours {off}")
    if isinstance(builtin, NotModeled):
        verdict.problems.append(
            f"the simulator cannot run the built-in's kernel: {_summary(builtin)}"
        )
    elif isinstance(builtin, SimError):  # a finding about the baseline (ours was checked)
        verdict.builtin = f"faults: {_summary(builtin)}"
    elif isinstance(builtin, Exception):
        verdict.builtin = f"cannot lower: {_summary(builtin)}"
    elif (off := _off(case, builtin, exact=case.close is None)) is not None:
        verdict.builtin = f"WRONG: {off}"
    elif isinstance(ours, DispatchError) and not rejected:
        verdict.problems.append("ours cannot lower a program TVM's built-in lowers correctly")
    return verdict


def _missed_decline(case: Case) -> str | None:
    """None when the variant ``case.declines`` names refuses a call of the program with a
    reason containing its words; else what it did instead."""
    from . import explain

    variant, words = case.declines
    seen = []
    for report in explain(case.func):
        for cand in report.candidates:
            if cand.variant != variant:
                continue
            reason = cand.reason or ""
            if report.variant != variant and any(w in reason for w in words):
                return None
            seen.append("took it" if report.variant == variant else f"declined: {reason}")
    did = "; ".join(seen) or "was not tried"
    return f"ours must refuse it ({variant}: {' or '.join(map(repr, words))}), but {variant} {did}"


def _off(case: Case, out: np.ndarray, exact: bool) -> str | None:
    """How ``out`` differs from the case's answer (bit for bit, or within its bound), or
    None where it does not; only the elements the program defines count."""
    mask = case.compared if case.compared is not None else np.ones(out.shape, dtype=bool)
    if not exact:
        if case.close is None:
            return "has no answer to compare with (no plan of ours, no error bound)"
        return case.close(out)
    got, want = runtime.bits(out)[mask], runtime.bits(case.expected)[mask]
    bad = int(np.count_nonzero(got != want))
    return f"differs from numpy in {bad} of {want.size} elements" if bad else None


_TVM_DECLINED = "declined \u2014 "  # how TVM's dispatch failure table gives a reason


# a source file's directories, which a one-line summary drops (the install prefix is as
# long as the reason after it: CI's site-packages path pushed a reason past the cut)
_SOURCE_DIRS = re.compile(r"(?:[A-Za-z]:)?[\\/](?:[^\s:\\/]+[\\/])+(?=[^\s:\\/]+\.py\b)")


def _summary(err: BaseException, limit: int = 300) -> str:
    """The error's type and its telling line: the first reason of a TVM dispatch failure
    (its table of variants), else the last line that is not a caret underline; source
    paths shortened to their file names, then cut to ``limit`` characters."""
    lines = [line.strip() for line in str(err).strip().splitlines() if line.strip(" ^")]
    declined = next((line for line in lines if _TVM_DECLINED in line), None)
    if declined is not None:
        text = declined.split(_TVM_DECLINED, 1)[1].strip(" |")
    else:
        text = lines[-1] if lines else ""
    text = _SOURCE_DIRS.sub("", text)
    return f"{type(err).__name__}: {text[:limit]}"
