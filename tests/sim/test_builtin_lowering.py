"""The simulator runs what TVM's built-in lowerings ("tirx") emit, with meanings written
from CUDA and the PTX ISA, never from TVM's code: each new meaning is checked by a program
whose result numpy (or a hand computation) knows, bit for bit, with outputs poisoned
first; negative controls show a wrong meaning is caught; the same programs lowered by our
pipeline and by TVM's simulate to the same bits.

Where a built-in lowering disagrees with numpy, the test says what the simulator shows
and keeps the meaning as the ISA has it (the findings at the bottom).
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from tvm.script import tirx as T
from tvm.script.tirx import tile as Tx
from tvm.tirx.layout import Axis, S, TileLayout

from tirx_cuda_dispatch import demos, runtime, sim
from tirx_cuda_dispatch.sim import SimError, helpers
from tirx_cuda_dispatch.sim.calls import Instruction

BUILTIN = "tirx"
OURS = "tirx_cuda_dispatch"
lane = Axis.laneid
ROW = TileLayout(S[(32, 8) : (1 @ lane, 1)])  # lane t owns row t
SCOPE_THREADS = {"warp": 32, "warpgroup": 128, "cta": 128}


def bits(x):
    return runtime.bits(x)


# -- programs ---------------------------------------------------------------------------------
def elementwise_on_shared(op: str, shape, dtype: str, scope: str, src_dtype: str | None = None):
    """B = op(A[, C[, D]]) on shared tiles at ``scope`` (global -> shared by the whole CTA,
    B's shared tile poisoned from B first); TVM's built-in variant ends the op with the
    scope's barrier (__syncwarp, bar.sync 8 128, __syncthreads)."""
    threads = SCOPE_THREADS[scope]
    warps = threads // 32
    src_dtype = src_dtype or dtype
    fn = getattr(getattr(Tx, scope), op)
    arity = {"fma": 3, "cast": 1}.get(op, 2)
    full = tuple(slice(0, e) for e in shape)
    lay = TileLayout(S[shape])
    with_wg = warps == 4

    # fmt: off
    @T.prim_func
    def kernel(A_ptr: T.handle, C_ptr: T.handle, D_ptr: T.handle, B_ptr: T.handle):
        A = T.match_buffer(A_ptr, shape, src_dtype)
        C = T.match_buffer(C_ptr, shape, dtype)
        D = T.match_buffer(D_ptr, shape, dtype)
        B = T.match_buffer(B_ptr, shape, dtype)
        T.device_entry()
        T.cta_id([1])
        if with_wg:
            T.warpgroup_id([1])
            T.warp_id_in_wg([4])
        T.warp_id([warps])
        T.lane_id([32])
        T.thread_id([threads])
        As = T.alloc_buffer(shape, src_dtype, scope="shared", layout=lay)
        Cs = T.alloc_buffer(shape, dtype, scope="shared", layout=lay)
        Ds = T.alloc_buffer(shape, dtype, scope="shared", layout=lay)
        Bs = T.alloc_buffer(shape, dtype, scope="shared", layout=lay)
        Tx.cta.copy(As[full], A[full])
        Tx.cta.copy(Cs[full], C[full])
        Tx.cta.copy(Ds[full], D[full])
        Tx.cta.copy(Bs[full], B[full])
        T.cuda.cta_sync()
        if arity == 1:
            fn(Bs[full], As[full])
        elif arity == 2:
            fn(Bs[full], As[full], Cs[full])
        else:
            fn(Bs[full], As[full], Cs[full], Ds[full])
        T.cuda.cta_sync()
        Tx.cta.copy(B[full], Bs[full])
    # fmt: on
    return kernel


def add_then_warp0_reads(warpgroups: int, rows: int = 8, cols: int = 32):
    """Each warpgroup adds its own rows of a shared tile (TVM ends the op with ``bar.sync
    8, 128``); then warp 0 of the warpgroup alone copies those rows out, reading what
    warps 1-3 wrote: only the op's named barrier orders the two."""
    shape = (warpgroups * rows, cols)
    full = (slice(0, shape[0]), slice(0, cols))
    lay = TileLayout(S[shape])

    # fmt: off
    @T.prim_func
    def kernel(A_ptr: T.handle, C_ptr: T.handle, B_ptr: T.handle):
        A = T.match_buffer(A_ptr, shape, "float32")
        C = T.match_buffer(C_ptr, shape, "float32")
        B = T.match_buffer(B_ptr, shape, "float32")
        T.device_entry()
        T.cta_id([1])
        wg = T.warpgroup_id([warpgroups])
        wid = T.warp_id_in_wg([4])
        T.warp_id([4 * warpgroups])
        T.lane_id([32])
        T.thread_id([128 * warpgroups])
        As = T.alloc_buffer(shape, "float32", scope="shared", layout=lay)
        Cs = T.alloc_buffer(shape, "float32", scope="shared", layout=lay)
        Bs = T.alloc_buffer(shape, "float32", scope="shared", layout=lay)
        Tx.cta.copy(As[full], A[full])
        Tx.cta.copy(Cs[full], C[full])
        T.cuda.cta_sync()
        mine = T.meta_var(slice(wg * rows, (wg + 1) * rows))
        Tx.warpgroup.add(Bs[mine, :], As[mine, :], Cs[mine, :])
        if wid == 0:
            Tx.warp.copy(B[mine, 0:cols], Bs[mine, :])
    # fmt: on
    return kernel


def thread_vector_load(n: int = 8, **hints):
    """Each thread loads row ``tid`` of A (n float32) into registers with TVM's forced
    256-bit vector copy (``ld.global{.nc}...v8.u32`` on sm_100) and stores it to B."""

    # fmt: off
    @T.prim_func
    def kernel(A_ptr: T.handle, B_ptr: T.handle):
        A = T.match_buffer(A_ptr, (32, n), "float32")
        B = T.match_buffer(B_ptr, (32, n), "float32")
        T.device_entry()
        T.cta_id([1])
        T.warp_id([1])
        T.lane_id([32])
        tid = T.thread_id([32])
        R = T.alloc_local((n,), "float32")
        Tx.thread.copy(R[0:n], A[tid, 0:n], dispatch="vec_256b", **hints)
        for i in range(n):
            B[tid, i] = R[i]
    # fmt: on
    return kernel


def mov_kernel():
    """Register packing: w0 = mov.b32 {h0, h1}; d = mov.b64 {h0..h3}; {w1, w2} = d;
    {u0, u1} = w0; {u2, u3} = 0x00020001."""

    # fmt: off
    @T.prim_func
    def kernel(H_ptr: T.handle, W_ptr: T.handle, U_ptr: T.handle):
        H = T.match_buffer(H_ptr, (32, 4), "uint16")
        W = T.match_buffer(W_ptr, (32, 3), "uint32")
        U = T.match_buffer(U_ptr, (32, 4), "uint16")
        T.device_entry()
        T.cta_id([1])
        tid = T.thread_id([32])
        h = T.alloc_local((4,), "uint16")
        w = T.alloc_local((3,), "uint32")
        d = T.alloc_local((1,), "uint64")
        u = T.alloc_local((4,), "uint16")
        for i in range(4):
            h[i] = H[tid, i]
        T.evaluate(T.ptx.mov.b32(w[0], h[0], h[1]))
        T.evaluate(T.ptx.mov.b64(d[0], h[0], h[1], h[2], h[3]))
        T.evaluate(T.ptx.mov.b64(w[1], w[2], d[0]))
        T.evaluate(T.ptx.mov.b32(u[0], u[1], w[0]))
        T.evaluate(T.ptx.mov.b32(u[2], u[3], T.uint32(0x00020001)))
        for i in range(3):
            W[tid, i] = w[i]
        for i in range(4):
            U[tid, i] = u[i]
    # fmt: on
    return kernel


def f32_instruction(op: str, mode: str):
    """D = ``op.mode.f32`` of A, B (and C for fma), one PTX instruction per thread."""

    # fmt: off
    @T.prim_func
    def kernel(A_ptr: T.handle, B_ptr: T.handle, C_ptr: T.handle, D_ptr: T.handle):
        A = T.match_buffer(A_ptr, (32,), "float32")
        B = T.match_buffer(B_ptr, (32,), "float32")
        C = T.match_buffer(C_ptr, (32,), "float32")
        D = T.match_buffer(D_ptr, (32,), "float32")
        T.device_entry()
        T.cta_id([1])
        tid = T.thread_id([32])
        r = T.alloc_local((4,), "float32")
        r[0] = A[tid]
        r[1] = B[tid]
        r[2] = C[tid]
        if op == "fma":
            T.evaluate(T.ptx[f"fma.{mode}.f32"](r[3], r[0], r[1], r[2]))
        else:
            T.evaluate(T.ptx[f"{op}.{mode}.f32"](r[3], r[0], r[1]))
        D[tid] = r[3]
    # fmt: on
    return kernel


def load_with_immediate_offset():
    """B[t] = ld.global.u32 [&A[2t] + 4]: the word after A[2t]."""

    # fmt: off
    @T.prim_func
    def kernel(A_ptr: T.handle, B_ptr: T.handle):
        A = T.match_buffer(A_ptr, (64,), "uint32")
        B = T.match_buffer(B_ptr, (32,), "uint32")
        T.device_entry()
        T.cta_id([1])
        tid = T.thread_id([32])
        r = T.alloc_local((1,), "uint32")
        T.evaluate(T.ptx.ld.global_.u32(r[0], T.ptx.addr(T.address_of(A[tid * 2]), 4)))
        B[tid] = r[0]
    # fmt: on
    return kernel


def tmem_address_kernel():
    """Out[t] = get_tmem_addr(A[t], R[t], C[t])."""

    # fmt: off
    @T.prim_func
    def kernel(A_ptr: T.handle, R_ptr: T.handle, C_ptr: T.handle, Out_ptr: T.handle):
        A = T.match_buffer(A_ptr, (32,), "uint32")
        R = T.match_buffer(R_ptr, (32,), "int32")
        C = T.match_buffer(C_ptr, (32,), "int32")
        Out = T.match_buffer(Out_ptr, (32,), "uint32")
        T.device_entry()
        T.cta_id([1])
        tid = T.thread_id([32])
        Out[tid] = T.cuda.get_tmem_addr(A[tid], R[tid], C[tid])
    # fmt: on
    return kernel


def tmem_columns(lane_of_warp: bool = True):
    """A warpgroup stores A[t, 0:4] to TMEM lane t, columns 0-3, and loads columns 2-3
    back into B[t, 0:2]; warp w addresses ``get_tmem_addr(base, 32 w, column)`` (or lane
    0 from every warp when ``lane_of_warp`` is False)."""

    # fmt: off
    @T.prim_func
    def kernel(A_ptr: T.handle, B_ptr: T.handle):
        A = T.match_buffer(A_ptr, (128, 4), "uint32")
        B = T.match_buffer(B_ptr, (128, 2), "uint32")
        T.device_entry()
        warp = T.warp_id([4])
        T.warpgroup_id([1])
        tid = T.thread_id([128])
        pool = T.SMEMPool()
        tmem_addr = pool.alloc((1,), "uint32")
        pool.commit()
        if warp == 0:
            T.ptx["tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32"](
                T.address_of(tmem_addr[0]), 32)
        T.tvm_storage_sync("shared")
        r = T.alloc_local((4,), "uint32")
        s = T.alloc_local((2,), "uint32")
        for i in range(4):
            r[i] = A[tid, i]
        first = T.meta_var(32 * warp if lane_of_warp else 0)
        T.ptx["tcgen05.st.sync.aligned.32x32b.x4.b32"](
            T.cuda.get_tmem_addr(tmem_addr[0], first, 0), r[0], r[1], r[2], r[3])
        T.ptx.tcgen05.wait__st.sync.aligned()
        T.ptx["tcgen05.ld.sync.aligned.32x32b.x2.b32"](
            s[0], s[1], T.cuda.get_tmem_addr(tmem_addr[0], first, 2))
        T.ptx.tcgen05.wait__ld.sync.aligned()
        for i in range(2):
            B[tid, i] = s[i]
        T.cuda.cta_sync()
        if warp == 0:
            T.ptx["tcgen05.dealloc.cta_group::1.sync.aligned.b32"](tmem_addr[0], 32)
    # fmt: on
    return kernel


def warp_sync_under(lanes: int):
    # fmt: off
    @T.prim_func
    def kernel(A_ptr: T.handle):
        A = T.match_buffer(A_ptr, (32,), "float32")
        T.device_entry()
        T.cta_id([1])
        tid = T.thread_id([32])
        if tid < lanes:
            T.cuda.warp_sync()
            A[tid] = A[tid] + T.float32(1)
    # fmt: on
    return kernel


def named_barrier_by(warps_in: int, threads: int = 256):
    # fmt: off
    @T.prim_func
    def kernel(A_ptr: T.handle):
        A = T.match_buffer(A_ptr, (threads,), "float32")
        T.device_entry()
        T.cta_id([1])
        warp = T.warp_id([threads // 32])
        T.lane_id([32])
        tid = T.thread_id([threads])
        if warp < warps_in:
            T.cuda.warpgroup_sync(8)
            A[tid] = A[tid] + T.float32(1)
    # fmt: on
    return kernel


# -- references ---------------------------------------------------------------------------------
def rounded_f32(x: Fraction, mode: str) -> np.float32:
    """The float32 nearest ``x`` in rounding ``mode`` (rn/rz/rm/rp), from exact rationals."""
    lo = np.float32(float(x))
    up, down = np.float32(np.inf), np.float32(-np.inf)
    while Fraction(float(lo)) > x:
        lo = np.nextafter(lo, down)
    while Fraction(float(np.nextafter(lo, up))) <= x:
        lo = np.nextafter(lo, up)
    hi = lo if Fraction(float(lo)) == x else np.nextafter(lo, up)
    if mode == "rm" or (mode == "rz" and x >= 0):
        return lo
    if mode in ("rp", "rz"):
        return hi
    d_lo, d_hi = x - Fraction(float(lo)), Fraction(float(hi)) - x
    if d_lo != d_hi:
        return lo if d_lo < d_hi else hi
    return lo if int(lo.view(np.uint32)) % 2 == 0 else hi


def exact(op: str, a, b, c=None) -> list[Fraction]:
    a, b = [Fraction(float(v)) for v in a], [Fraction(float(v)) for v in b]
    if op == "add":
        return [x + y for x, y in zip(a, b, strict=True)]
    if op == "sub":
        return [x - y for x, y in zip(a, b, strict=True)]
    if op == "mul":
        return [x * y for x, y in zip(a, b, strict=True)]
    cs = [Fraction(float(v)) for v in c]
    return [x * y + z for x, y, z in zip(a, b, cs, strict=True)]


def rounded(op: str, mode: str, a, b, c=None) -> np.ndarray:
    flat = [v.ravel() for v in (a, b, c) if v is not None]
    out = [rounded_f32(x, mode) for x in exact(op, *flat)]
    return np.array(out, dtype=np.float32).reshape(a.shape)


def nearest_even(x: Fraction, dtype: np.dtype):
    """The ``dtype`` value nearest ``x``, ties to even (finite, nonzero values)."""
    uint = np.dtype(f"uint{dtype.itemsize * 8}")
    near = np.array([float(x)]).astype(dtype)
    step = int(near.view(uint)[0])
    steps = [step + k for k in (-1, 0, 1) if 0 <= step + k < 2 ** (8 * dtype.itemsize)]
    candidates = [np.array([k], dtype=uint).view(dtype)[0] for k in steps]
    candidates = [v for v in candidates if np.isfinite(float(v))]
    return min(
        candidates,
        key=lambda v: (abs(Fraction(float(v)) - x), int(np.array([v]).view(uint)[0]) & 1),
    )


def numpy_elementwise(op: str, a, c, d):
    """The correctly rounded answer from exact rationals (``maximum``: numpy's)."""
    if op == "maximum":
        return np.maximum(a, c)
    values = exact(op, a.ravel(), c.ravel(), d.ravel() if op == "fma" else None)
    out = np.array([nearest_even(x, a.dtype) for x in values], dtype=a.dtype)
    return out.reshape(a.shape)


# -- pointer_offset, ld/st (+ scalar fallback): copies global <-> shared ----------------------
@pytest.mark.parametrize(
    "dtype, tile, scope",
    [
        ("float16", (32, 64), "warpgroup"),
        ("float32", (32, 32), "warp"),
        ("bfloat16", (8, 24), "cta"),
        ("float16", (8, 24), "thread"),
        ("float32", (7, 5), "warp"),  # odd: TVM's scalar single-thread fallback
        ("float16", (3, 8), "warpgroup"),
    ],
)
def test_builtin_copies_global_shared(dtype, tile, scope, rng):
    a = runtime.random_array(tile, dtype, rng)
    out = sim.run(
        demos.gmem_smem_roundtrip(dtype, tile, scope), [a, runtime.poison_like(a)], pipeline=BUILTIN
    )
    np.testing.assert_array_equal(bits(out[1]), bits(a))


@pytest.mark.parametrize(
    "dtype, layout, shape, scope, memory",
    [
        ("float32", ROW, (32, 8), "warp", "shared"),
        ("float16", TileLayout(S[(8, 32) : (1, 1 @ lane)]), (8, 32), "warp", "global"),
        ("bfloat16", TileLayout(S[(8, 2, 4, 2) : (4 @ lane, 2, 1 @ lane, 1)]), (8, 16), "warp", "shared"),
        ("float32", TileLayout(S[(4, 32, 4) : (1 @ Axis.wid_in_wg, 1 @ lane, 1)]), (128, 4), "warpgroup", "shared"),
    ],
    ids=["row-f32", "column-f16-global", "fragment-bf16-ldmatrix", "warpgroup-f32"],
)  # fmt: skip
def test_builtin_copies_registers(dtype, layout, shape, scope, memory, rng):
    a = runtime.random_array(shape, dtype, rng)
    func = demos.reg_roundtrip(layout, shape, dtype, scope, memory)
    out = sim.run(func, [a, runtime.poison_like(a)], pipeline=BUILTIN)
    np.testing.assert_array_equal(bits(out[1]), bits(a))


def test_builtin_256_bit_load_with_cache_hints(rng):
    a = runtime.random_array((32, 8), "float32", rng)
    hints = dict(cache="nc", l1_evict="L1::no_allocate", l2_evict="L2::evict_first")
    for kw in ({}, hints):
        out = sim.run(
            thread_vector_load(**kw), [a, runtime.poison_like(a)], "sm_100a", pipeline=BUILTIN
        )
        np.testing.assert_array_equal(out[1], a)
        assert out.counters.instructions["ld.global.b256"] == 1


def test_immediate_address_offset(rng):
    a = rng.integers(0, 2**32, 64, dtype=np.uint32)
    out = sim.run(load_with_immediate_offset(), [a, np.zeros(32, np.uint32)], pipeline=BUILTIN)
    np.testing.assert_array_equal(out[1], a[1::2])


# -- cast helpers ---------------------------------------------------------------------------------
CASTS = [("float32", "float16"), ("float32", "bfloat16"), ("float16", "float32"), ("bfloat16", "float32")]  # fmt: skip


@pytest.mark.parametrize("src, dst", CASTS, ids=[f"{s}-{d}" for s, d in CASTS])
@pytest.mark.parametrize("where", ["registers", "shared"])
def test_builtin_pair_casts(src, dst, where, rng):
    shape = (32, 8) if where == "registers" else (8, 32)
    a = runtime.random_array(shape, src, rng)
    c = runtime.random_array(shape, dst, rng)
    if where == "registers":
        func = demos.elementwise_roundtrip("cast", ROW, shape, dst, src_dtype=src)
    else:
        func = elementwise_on_shared("cast", shape, dst, "warp", src_dtype=src)
    out = sim.run(func, [a, c, c, runtime.poison_like(c)], pipeline=BUILTIN)
    # element by element, in order: narrowing rounds to nearest even, widening is exact
    expected = np.array([nearest_even(Fraction(float(v)), c.dtype) for v in a.ravel()])
    np.testing.assert_array_equal(bits(out[3]), bits(expected.astype(c.dtype).reshape(shape)))


def test_a_cast_helper_meaning_with_swapped_halves_is_caught(rng, monkeypatch):
    a = runtime.random_array((32, 8), "float32", rng)
    c = runtime.random_array((32, 8), "float16", rng)
    func = demos.elementwise_roundtrip("cast", ROW, (32, 8), "float16", src_dtype="float32")
    right = helpers._pairwise

    def swapped(op, dtype, inputs):
        return right(op, dtype, inputs)[:, ::-1]  # the pair's halves the wrong way round

    monkeypatch.setattr(helpers, "_pairwise", swapped)
    out = sim.run(func, [a, c, c, runtime.poison_like(c)], pipeline=BUILTIN)
    assert not np.array_equal(bits(out[3]), bits(a.astype(np.float16)))


def test_a_pointer_offset_in_bytes_instead_of_elements_is_caught(rng, monkeypatch):
    a = runtime.random_array((32, 32), "float32", rng)
    func = demos.gmem_smem_roundtrip("float32", (32, 32), "warp")
    monkeypatch.setattr(
        helpers, "_pointer_offset", lambda name, args: args[0].plus_bytes(args[1].astype(np.int64))
    )
    with pytest.raises(SimError, match="misaligned|nothing wrote"):
        sim.run(func, [a, runtime.poison_like(a)], pipeline=BUILTIN)


def test_a_helper_whose_source_changed_is_an_error(rng, monkeypatch):
    builtin = helpers.BUILTIN_HELPERS["tvm_builtin_pointer_offset"]
    monkeypatch.setitem(
        helpers.BUILTIN_HELPERS,
        builtin.name,
        helpers.BuiltinHelper(builtin.name, builtin.meaning, builtin.semantics, "0" * 64),
    )
    a = runtime.random_array((32, 32), "float32", rng)
    with pytest.raises(SimError, match="not the one its meaning was written from"):
        sim.run(demos.gmem_smem_roundtrip("float32", (32, 32), "warp"), [a, a], pipeline=BUILTIN)


def test_every_builtin_helper_meaning_names_its_cuda_semantics():
    for h in helpers.BUILTIN_HELPERS.values():
        assert h.semantics and len(h.source_sha256) == 64
    assert all(i.meaning for i in sim.CALLS.values())


# -- elementwise on shared: warp_sync, warpgroup_sync, cta_sync -----------------------------------
@pytest.mark.parametrize("scope", ["warp", "warpgroup", "cta"])
@pytest.mark.parametrize(
    "op, dtype", [("add", "float16"), ("sub", "bfloat16"), ("mul", "float32"), ("maximum", "float16"), ("fma", "float32")]
)  # fmt: skip
def test_builtin_elementwise_on_shared(op, dtype, scope, rng):
    a, c, d = (runtime.random_array((8, 32), dtype, rng) for _ in range(3))
    out = sim.run(
        elementwise_on_shared(op, (8, 32), dtype, scope), [a, c, d, runtime.poison_like(a)],
        pipeline=BUILTIN,
    )  # fmt: skip
    np.testing.assert_array_equal(bits(out[3]), bits(numpy_elementwise(op, a, c, d)))
    barrier = {"warp": "bar.warp.sync", "warpgroup": "bar.sync", "cta": "bar.sync"}[scope]
    assert out.counters.instructions[barrier] >= 1


def test_warp_sync_needs_every_lane():
    a = np.zeros(32, np.float32)
    np.testing.assert_array_equal(sim.run(warp_sync_under(32), [a], pipeline=BUILTIN)[0], a + 1)
    with pytest.raises(SimError, match="__syncwarp.*lanes 0-15 only"):
        sim.run(warp_sync_under(16), [a], pipeline=BUILTIN)


def test_named_barrier_completes_in_groups_of_128():
    a = np.zeros(256, np.float32)
    for warps in (4, 8):  # one group of 128, two groups
        out = sim.run(named_barrier_by(warps), [a], pipeline=BUILTIN)
        np.testing.assert_array_equal(out[0][: 32 * warps], 1)
    for warps in (2, 6):
        with pytest.raises(SimError, match="deadlock: .*bar.sync 8, 128 .*more of its 128"):
            sim.run(named_barrier_by(warps), [a], pipeline=BUILTIN)


def test_named_barrier_orders_one_warpgroup(rng):
    a, c = (runtime.random_array((8, 32), "float32", rng) for _ in range(2))
    out = sim.run(add_then_warp0_reads(1), [a, c, runtime.poison_like(a)], pipeline=BUILTIN)
    np.testing.assert_array_equal(out[2], a + c)


# -- mov pack / unpack, float instructions ------------------------------------------------------
def test_mov_packs_the_first_operand_into_the_low_bits(rng):
    h = rng.integers(0, 2**16, (32, 4), dtype=np.uint16)
    out = sim.run(
        mov_kernel(), [h, np.zeros((32, 3), np.uint32), np.zeros((32, 4), np.uint16)], pipeline=BUILTIN
    )  # fmt: skip
    h32 = h.astype(np.uint32)
    np.testing.assert_array_equal(out[1][:, 0], h32[:, 0] | h32[:, 1] << 16)
    np.testing.assert_array_equal(out[1][:, 1], h32[:, 0] | h32[:, 1] << 16)  # low half of d
    np.testing.assert_array_equal(out[1][:, 2], h32[:, 2] | h32[:, 3] << 16)  # high half of d
    u = np.stack([h[:, 0], h[:, 1], np.full(32, 1, np.uint16), np.full(32, 2, np.uint16)], 1)
    np.testing.assert_array_equal(out[2], u)


@pytest.mark.parametrize("op", ["add", "sub", "mul", "fma"])
@pytest.mark.parametrize("mode", ["rn", "rz", "rm", "rp"])
def test_f32_instructions_round_in_their_mode(op, mode, rng):
    a, b, c = (rng.standard_normal(32).astype(np.float32) for _ in range(3))
    b[:4] = np.float32(2.0**-30)  # inexact sums, where the modes differ
    out = sim.run(f32_instruction(op, mode), [a, b, c, np.zeros(32, np.float32)], pipeline=BUILTIN)
    expected = rounded(op, mode, a, b, c if op == "fma" else None)
    np.testing.assert_array_equal(bits(out[3]), bits(expected))


# -- get_tmem_addr -------------------------------------------------------------------------------
def test_get_tmem_addr_adds_to_each_field_modulo_2_16():
    addr = np.array([0x0003FFFF, 0x00000010, 0xFFFF0000, 0x00050007] * 8, np.uint32)
    row = np.array([1, 32, 1, -1] * 8, np.int32)
    col = np.array([2, -1, 0, 0] * 8, np.int32)
    out = sim.run(
        tmem_address_kernel(), [addr, row, col, np.zeros(32, np.uint32)], pipeline=BUILTIN
    )
    # (lane, column): (3, 0xffff)+(1, 2) -> (4, 1); (0, 16)+(32, -1) -> (32, 15);
    # (0xffff, 0)+(1, 0) -> (0, 0); (5, 7)+(-1, 0) -> (4, 7): no carry between fields
    expected = np.array([0x00040001, 0x0020000F, 0x00000000, 0x00040007] * 8, np.uint32)
    np.testing.assert_array_equal(out[3], expected)


def test_get_tmem_addr_names_each_warps_lanes(rng):
    a = rng.integers(0, 2**32, (128, 4), dtype=np.uint32)
    out = sim.run(tmem_columns(), [a, np.zeros((128, 2), np.uint32)], "sm_100a", pipeline=BUILTIN)
    np.testing.assert_array_equal(out[1], a[:, 2:4])
    with pytest.raises(SimError, match="reaches TMEM lanes 32-63 only"):
        sim.run(tmem_columns(lane_of_warp=False), [a, a[:, :2]], "sm_100a", pipeline=BUILTIN)


# -- the same programs through both pipelines ----------------------------------------------------
def _differential_cases():
    """(name, program, input specs, output spec, whether the counters agree too)."""
    frag = TileLayout(S[(8, 2, 4, 2) : (4 @ lane, 2, 1 @ lane, 1)])
    f16_64 = ((64, 64), "float16")
    yield "gmem_smem-f16-2cta", demos.gmem_smem_roundtrip("float16", (32, 64), "warpgroup", ctas=2), [f16_64], f16_64, True  # fmt: skip
    yield "gmem_smem-f32-odd", demos.gmem_smem_roundtrip("float32", (7, 5), "warp"), [((7, 5), "float32")], ((7, 5), "float32"), False  # fmt: skip
    yield "reg-f32-row", demos.reg_roundtrip(ROW, (32, 8), "float32"), [((32, 8), "float32")], ((32, 8), "float32"), False  # fmt: skip
    yield "reg-f16-fragment", demos.reg_roundtrip(frag, (8, 16), "float16"), [((8, 16), "float16")], ((8, 16), "float16"), False  # fmt: skip
    for op, dtype, src in (("add", "bfloat16", None), ("fma", "float16", None), ("cast", "float16", "float32")):  # fmt: skip
        func = demos.elementwise_roundtrip(op, ROW, (32, 8), dtype, src_dtype=src)
        ins = [((32, 8), src or dtype), ((32, 8), dtype), ((32, 8), dtype)]
        yield f"{op}-{dtype}", func, ins, ((32, 8), dtype), op == "cast"


DIFFERENTIAL = list(_differential_cases())


@pytest.mark.parametrize(
    "name, func, ins, out_spec, same_counts", DIFFERENTIAL, ids=[c[0] for c in DIFFERENTIAL]
)
def test_both_pipelines_compute_the_same_bits(name, func, ins, out_spec, same_counts, rng):
    inputs = [runtime.random_array(shape, dtype, rng) for shape, dtype in ins]
    poisoned = runtime.poison_like(runtime.random_array(*out_spec, rng))
    ours = sim.run(func, [*inputs, poisoned], pipeline=OURS)
    theirs = sim.run(func, [*inputs, poisoned], pipeline=BUILTIN)
    for x, y in zip(ours.arrays, theirs.arrays, strict=True):
        np.testing.assert_array_equal(bits(x), bits(y))
    assert not np.array_equal(bits(ours.arrays[-1]), bits(poisoned))  # something was written
    if same_counts:  # the two lowerings issue the same memory instructions here
        assert ours.counters.as_dict() == theirs.counters.as_dict()


def test_unknown_calls_and_helpers_are_errors(monkeypatch, rng):
    a = runtime.random_array((32, 32), "float32", rng)
    func = demos.gmem_smem_roundtrip("float32", (32, 32), "warp")
    monkeypatch.delitem(helpers.BUILTIN_HELPERS, "tvm_builtin_pointer_offset")
    with pytest.raises(SimError, match="tvm_builtin_pointer_offset"):
        sim.run(func, [a, a], pipeline=BUILTIN)
    monkeypatch.undo()
    monkeypatch.delitem(sim.CALLS, "tirx.ptx.st_vec")
    with pytest.raises(SimError, match="does not know the call tirx.ptx.st_vec"):
        sim.run(func, [a, a], pipeline=BUILTIN)


# -- findings: where the built-in lowering disagrees with numpy ----------------------------------
@pytest.mark.parametrize("op", ["add", "sub", "mul", "fma"])
def test_finding_builtin_f32_pairs_on_sm100_round_toward_zero(op, rng):
    """TVM's f32x2 forms (sm_100) default to ``{add,sub,mul,fma}.rz.ftz.f32x2``: toward
    zero, where the scalar path and numpy round to nearest. The simulator executes the
    PTX as written (checked against exact rationals) and so disagrees with numpy."""
    a, c, d = (runtime.random_array((32, 8), "float32", rng) for _ in range(3))
    func = demos.elementwise_roundtrip(op, ROW, (32, 8), "float32")
    out = sim.run(func, [a, c, d, runtime.poison_like(a)], "sm_100a", pipeline=BUILTIN)
    assert out.counters.instructions[f"{op}.f32x2"] > 0
    np.testing.assert_array_equal(bits(out[3]), bits(rounded(op, "rz", a, c, d if op == "fma" else None)))  # fmt: skip
    assert not np.array_equal(bits(out[3]), bits(numpy_elementwise(op, a, c, d)))
    ours = sim.run(func, [a, c, d, runtime.poison_like(a)], "sm_100a", pipeline=OURS)
    np.testing.assert_array_equal(bits(ours[3]), bits(numpy_elementwise(op, a, c, d)))


@pytest.mark.xfail(strict=True, reason="TVM's built-in copy picks ldmatrix.x2 (b16) for float32")
def test_finding_builtin_float32_fragment_through_ldmatrix(rng):
    """A float32 (8, 16) fragment (lane 4r + l holds columns 2l, 2l+1, 8+2l, 9+2l of row
    r): TVM's built-in shared -> register copy emits ``ldmatrix.x2.b16``, which gives each
    lane one float32 per matrix (column l, 8+l) and leaves two of its four registers
    unwritten; our pipeline moves the fragment exactly."""
    frag = TileLayout(S[(8, 2, 4, 2) : (4 @ lane, 2, 1 @ lane, 1)])
    func = demos.ldstmatrix_roundtrip(frag, TileLayout(S[(8, 16)]), (8, 16), 4, "float32")
    a = runtime.random_array((8, 16), "float32", rng)
    f = runtime.poison_like(np.zeros((32, 4), np.float32))
    args = [a, runtime.poison_like(a), f]
    expected = np.stack(
        [a[t // 4, [2 * (t % 4), 2 * (t % 4) + 1, 8 + 2 * (t % 4), 9 + 2 * (t % 4)]] for t in range(32)]
    )  # fmt: skip
    np.testing.assert_array_equal(sim.run(func, args, pipeline=OURS)[2], expected)
    out = sim.run(func, args, pipeline=BUILTIN)
    np.testing.assert_array_equal(bits(out[2]), bits(expected))


def test_finding_one_named_barrier_for_two_warpgroups_is_a_race(rng):
    """TVM's shared elementwise at warpgroup scope ends with ``bar.sync 8, 128`` for every
    warpgroup: with two warpgroups, barrier 8 releases the first 128 threads to arrive, in
    any mix, so a warpgroup's warps are not ordered with each other by it."""
    a, c = (runtime.random_array((16, 32), "float32", rng) for _ in range(2))
    with pytest.raises(SimError, match="shared-memory race on Bs"):
        sim.run(add_then_warp0_reads(2), [a, c, runtime.poison_like(a)], pipeline=BUILTIN)


def test_finding_builtin_tcgen05_copies_address_lane_0_from_every_warp(rng):
    """TVM's built-in tcgen05 copies pass the same TMEM address (lane 0, or 16 for a
    slab) from all four warps. The ISA lets warp w reach lanes 32w..32w+31 only, and the
    simulator takes the address's lane as given, so warp 1 is outside its quarter; ours
    names lane 32w. (If the hardware ignored the upper lane bits, TVM's form would work:
    the ISA does not say so; only a Blackwell run can tell.)"""
    a = runtime.random_array((128, 8), "float16", rng)
    out = sim.run(demos.tcgen05_roundtrip(), [a, runtime.poison_like(a)], "sm_100a", pipeline=OURS)
    np.testing.assert_array_equal(bits(out[1]), bits(a))
    with pytest.raises(SimError, match="warp 1 .* reaches TMEM lanes 32-63 only"):
        sim.run(demos.tcgen05_roundtrip(), [a, runtime.poison_like(a)], "sm_100a", pipeline=BUILTIN)


def test_instruction_table_is_data():
    entry = sim.CALLS["tirx.cuda.warpgroup_sync"]
    assert isinstance(entry, Instruction) and "128" in entry.meaning
    assert "cvt.rn.f16x2.f32" in helpers.BUILTIN_HELPERS["tvm_builtin_cast_float32x2_float16x2"].semantics  # fmt: skip
