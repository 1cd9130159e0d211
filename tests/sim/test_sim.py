"""The CPU simulator: it must catch what the GPU would get wrong, count what the kernel
did, and agree with the H200 bit for bit."""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from tvm.script import tirx as T
from tvm.script.tirx import tile as Tx
from tvm.tirx.layout import Axis, S, TileLayout

import tirx_cuda_dispatch as tcd
from tirx_cuda_dispatch import demos, runtime, sim
from tirx_cuda_dispatch.sim import SimError
from tirx_cuda_dispatch.sim.calls import Instruction
from tirx_cuda_dispatch.sim.numerics import fma

lane = Axis.laneid
A_FRAGMENT = TileLayout(S[(2, 8, 2, 4, 2) : (2, 4 @ lane, 4, 1 @ lane, 1)])


# -- hand-written kernels: a correct form and a deliberately broken one -------------------
def ldmatrix_x1(row_of_lane):
    """A warp loads one 8x8 float16 matrix with ldmatrix.x1; lane i supplies the address of
    row ``row_of_lane(i)`` (the ISA says: row i % 8). F[lane] = the lane's register."""

    # fmt: off
    @T.prim_func
    def kernel(A_ptr: T.handle, F_ptr: T.handle):
        A = T.match_buffer(A_ptr, (64,), "float16")
        F = T.match_buffer(F_ptr, (32, 2), "float16")
        T.device_entry()
        T.cta_id([1])
        tid = T.thread_id([32])
        A_smem = T.alloc_buffer((64,), "float16", scope="shared")
        R = T.alloc_local((2,), "float16")
        words = R.view("uint32")
        A_smem[tid * 2] = A[tid * 2]
        A_smem[tid * 2 + 1] = A[tid * 2 + 1]
        T.cuda.cta_sync()
        T.ptx["ldmatrix.sync.aligned.m8n8.x1.shared.b16"](
            words[0], T.cuda.cvta_generic_to_shared(A_smem.ptr_to([row_of_lane(tid) * 8]))
        )
        F[tid, 0] = R[0]
        F[tid, 1] = R[1]
    # fmt: on
    return kernel


def vector_copy(offset_of_thread, elem_offset=0):
    """32 threads copy 128 float32 as 128-bit vectors; thread t moves the 4 elements at
    ``offset_of_thread(t) + elem_offset`` (correct: 4 t)."""

    # fmt: off
    @T.prim_func
    def kernel(A_ptr: T.handle, B_ptr: T.handle):
        A = T.match_buffer(A_ptr, (132,), "float32")
        B = T.match_buffer(B_ptr, (132,), "float32")
        T.device_entry()
        T.cta_id([1])
        tid = T.thread_id([32])
        base = T.meta_var(offset_of_thread(tid) + elem_offset)
        B[T.Ramp(base, 1, 4)] = A[T.Ramp(base, 1, 4)]
    # fmt: on
    return kernel


def staged_copy(barrier: bool):
    """A 128-thread CTA copies 32x64 float32 global -> shared (all four warps), then warp 0
    alone copies the tile on to global: it reads what warps 1-3 wrote. ``barrier`` puts
    __syncthreads between the two copies."""

    # fmt: off
    @T.prim_func
    def kernel(A_ptr: T.handle, B_ptr: T.handle):
        A = T.match_buffer(A_ptr, (32, 64), "float32")
        B = T.match_buffer(B_ptr, (32, 64), "float32")
        T.device_entry()
        T.cta_id([1])
        T.warpgroup_id([1])
        T.warp_id_in_wg([4])
        wid = T.warp_id([4])
        T.lane_id([32])
        T.thread_id([128])
        A_smem = T.alloc_buffer((32, 64), "float32", scope="shared")
        Tx.cta.copy(A_smem[:, :], A[:, :])
        if barrier:
            T.cuda.cta_sync()
        if wid == 0:
            Tx.warp.copy(B[:, :], A_smem[:, :])
    # fmt: on
    return kernel


def _expected_x1(a: np.ndarray) -> np.ndarray:
    """The ISA's ldmatrix fragment, written out: lane i holds row i // 4, columns
    2 (i % 4) and 2 (i % 4) + 1 (PTX ISA, ldmatrix, "Figure: fragment layout")."""
    m = a.reshape(8, 8)
    return np.array([[m[i // 4, 2 * (i % 4)], m[i // 4, 2 * (i % 4) + 1]] for i in range(32)])


# -- negative controls: each must be caught --------------------------------------------------
def test_ldmatrix_fragment_is_the_isa_one(rng):
    a = runtime.random_array((64,), "float16", rng)
    out = sim.run(
        ldmatrix_x1(lambda t: t % 8), [a, runtime.poison_like(np.zeros((32, 2), a.dtype))]
    )
    np.testing.assert_array_equal(runtime.bits(out[1]), runtime.bits(_expected_x1(a)))


def test_a_wrong_ldmatrix_lane_mapping_is_caught(rng):
    a = runtime.random_array((64,), "float16", rng)
    f = runtime.poison_like(np.zeros((32, 2), a.dtype))
    out = sim.run(ldmatrix_x1(lambda t: (t + 1) % 8), [a, f])  # each lane names the next row
    assert not np.array_equal(runtime.bits(out[1]), runtime.bits(_expected_x1(a)))


def test_the_vector_copy_itself_is_exact(rng):
    a = runtime.random_array((132,), "float32", rng)
    out = sim.run(vector_copy(lambda t: t * 4), [a, runtime.poison_like(a)])
    np.testing.assert_array_equal(out[1][:128], a[:128])


def test_an_off_by_one_vector_offset_is_caught(rng):
    a = runtime.random_array((132,), "float32", rng)
    out = sim.run(vector_copy(lambda t: (t + 1) * 4), [a, runtime.poison_like(a)])
    assert not np.array_equal(out[1][:128], a[:128])  # every vector lands one slot late


def test_a_misaligned_vector_access_faults():
    a = np.arange(132, dtype=np.float32) + 1
    with pytest.raises(SimError, match="misaligned 16-byte"):
        sim.run(vector_copy(lambda t: t * 4, elem_offset=1), [a, np.zeros_like(a)])


def test_a_missing_barrier_between_warps_is_a_race(rng):
    a = runtime.random_array((32, 64), "float32", rng)
    out = sim.run(staged_copy(barrier=True), [a, runtime.poison_like(a)])
    np.testing.assert_array_equal(out[1], a)
    with pytest.raises(SimError, match="shared-memory race"):
        sim.run(staged_copy(barrier=False), [a, runtime.poison_like(a)])


def test_out_of_bounds_and_unwritten_reads_are_errors():
    a = np.arange(132, dtype=np.float32) + 1
    with pytest.raises(SimError, match="out of bounds"):
        sim.run(vector_copy(lambda t: t * 4 + 8), [a, np.zeros_like(a)])


def test_reading_tensor_memory_before_wait_st_is_caught(rng):
    a = runtime.random_array((128, 8), "float16", rng)
    out = sim.run(demos.tcgen05_roundtrip(), [a, runtime.poison_like(a)], target="sm_100a")
    np.testing.assert_array_equal(runtime.bits(out[1]), runtime.bits(a))
    with pytest.raises(SimError, match="wait::st is missing"):
        sim.run(demos.tcgen05_roundtrip(wait_st=False), [a, a.copy()], target="sm_100a")


# -- counters ---------------------------------------------------------------------------------
def _swizzle_32b():
    from tvm.backend.cuda.tile_primitive.tma_utils import SwizzleMode, mma_shared_layout

    return mma_shared_layout("float16", SwizzleMode.SWIZZLE_32B_ATOM, (16, 16))


def test_counts_ldmatrix_bank_conflicts_of_the_shared_layout(rng):
    a = runtime.random_array((16, 16), "float16", rng)
    args = [a, runtime.poison_like(a), np.zeros((32, 8), a.dtype)]
    plain = demos.ldstmatrix_roundtrip(
        A_FRAGMENT, TileLayout(S[(16, 16)]), (16, 16), 8, dispatch="ldstmatrix"
    )
    swizzled = demos.ldstmatrix_roundtrip(A_FRAGMENT, _swizzle_32b(), (16, 16), 8)
    c_plain = sim.run(plain, args).counters
    c_swizzled = sim.run(swizzled, args).counters
    assert c_plain.instructions["ldmatrix.x4"] == 1 and c_plain.instructions["stmatrix.x4"] == 1
    ld = [r.ways for r in c_plain.bank_conflicts if r.instruction.startswith("ldmatrix")]
    assert ld == [2]  # row-major 16x16 float16: rows 32 bytes apart, two per bank group
    assert {r.ways for r in c_swizzled.bank_conflicts} == {1}


def test_counts_bytes_and_vector_widths(rng):
    a = runtime.random_array((64, 64), "float16", rng)
    func = demos.gmem_smem_roundtrip("float16", (32, 64), "warpgroup", ctas=2)
    c = sim.run(func, [a, runtime.poison_like(a)]).counters
    assert c.bytes["global.load"] == c.bytes["global.store"] == a.nbytes
    assert c.instructions["ld.shared.b128"] == 2 * 4 * 2  # 2 CTAs x 4 warps x 2 rounds
    assert c.instructions["bar.sync"] == 2 * 4


@pytest.mark.parametrize("k", [8, 16, 32])
def test_row_per_lane_float32_conflicts_as_the_plan_says(k, rng):
    # In the plain order lanes 128 B apart share banks (2/4/8-way); the plan rotates each
    # lane's order, and the simulator, counting what the emitted code does, agrees it is
    # conflict-free.
    a = runtime.random_array((32, k), "float32", rng)
    func = demos.reg_roundtrip(TileLayout(S[(32, k) : (1 @ lane, 1)]), (32, k))
    plans = [
        r.plan for r in tcd.explain(func) if r.variant == "reg" and "shared" in r.plan["direction"]
    ]
    assert [max(p["plain_conflict_ways"]) for p in plans] == [k // 4] * 2
    assert [max(p["conflict_ways"]) for p in plans] == [1, 1]
    c = sim.run(func, [a, runtime.poison_like(a)]).counters
    reg_side = [
        r.ways for r in c.bank_conflicts if r.buffer == "A_smem" and "b128" in r.instruction
    ]
    assert len(reg_side) >= 2 * k // 4 and max(reg_side) == 1


def _each_access_listed_once(counters, expected: dict[str, int]) -> None:
    """The kinds are exactly ``expected``, none of them a helper's name, and the bytes
    each space and direction moved are those of the listed loads and stores (full warps):
    an access counted twice, or under two names, shows."""
    kinds = dict(counters.instructions)
    assert kinds == expected
    assert not [k for k in kinds if k.startswith(("tirx_cuda_dispatch_", "tvm_builtin_"))]
    moved = Counter()
    for kind, n in kinds.items():
        op, _, rest = kind.partition(".")
        if op in ("ld", "st"):
            space, width = rest.rsplit(".b", 1)
            moved[f"{space}.{'load' if op == 'ld' else 'store'}"] += n * 32 * int(width) // 8
    assert moved == counters.bytes


GMEM_SMEM_COUNTS = {
    "bar.sync": 8,  # 2 CTAs x 4 warps
    "ld.global.b128": 16,  # the L2-only load helper: one ld.global.b128 per warp and round
    "st.shared.b128": 16,
    "ld.shared.b128": 16,
    "st.global.b128": 16,
    "shfl.sync": 8,  # the warp index, made uniform
}


@pytest.mark.parametrize("pipeline", ["tirx_cuda_dispatch", "tirx"])
def test_each_access_is_counted_once(pipeline, rng):
    a = runtime.random_array((64, 64), "float16", rng)
    func = demos.gmem_smem_roundtrip("float16", (32, 64), "warpgroup", ctas=2)
    out = sim.run(func, [a, runtime.poison_like(a)], pipeline=pipeline)
    _each_access_listed_once(out.counters, GMEM_SMEM_COUNTS)
    # a packed pair: one cvt per warp and pair, its register operands no accesses of their own
    x = runtime.random_array((32, 8), "float32", rng)
    c = runtime.random_array((32, 8), "float16", rng)
    layout = TileLayout(S[(32, 8) : (1 @ lane, 1)])
    cast = demos.elementwise_roundtrip("cast", layout, (32, 8), "float16", src_dtype="float32")
    out = sim.run(cast, [x, c, c, runtime.poison_like(c)], pipeline=pipeline)
    expected = {"cvt.rn.f16x2.f32": 4, "ld.global.b128": 5, "st.global.b128": 1, "shfl.sync": 1}
    _each_access_listed_once(out.counters, expected)


def test_a_helper_also_listed_by_name_is_caught(rng, monkeypatch):
    a = runtime.random_array((64, 64), "float16", rng)
    func = demos.gmem_smem_roundtrip("float16", (32, 64), "warpgroup", ctas=2)
    helper = sim.CALLS["tirx.cuda.func_call"]

    def counted_twice(m, call):  # what the simulator used to do
        m.counters.instructions[call.args[0].value] += len(m.warps())
        return helper.run(m, call)

    monkeypatch.setitem(
        sim.CALLS, helper.name, Instruction(helper.name, helper.meaning, counted_twice)
    )
    out = sim.run(func, [a, runtime.poison_like(a)])
    with pytest.raises(AssertionError):
        _each_access_listed_once(out.counters, GMEM_SMEM_COUNTS)


def test_the_simulator_modules_import_without_a_circle():
    """No import circle among the simulator's modules, and no import inside a function
    to dodge one: the interpreter is handed the instruction table as data."""
    root = Path(sim.__file__).parent
    graph: dict[str, set[str]] = {}
    for path in root.glob("*.py"):
        tree = ast.parse(path.read_text())
        top = {id(n) for n in tree.body}
        deps = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                names = [node.module] if node.module else [a.name for a in node.names]
                if id(node) not in top:
                    raise AssertionError(f"{path.name}: late import of .{names} in a function")
                deps.update(n.split(".")[0] for n in names)
        graph[path.stem] = deps

    def visit(module: str, stack: tuple[str, ...]) -> None:
        assert module not in stack, f"import circle {' -> '.join((*stack, module))}"
        for dep in graph.get(module, ()):
            visit(dep, (*stack, module))

    for module in graph:
        visit(module, ())
    assert "intrinsics" not in graph["interpreter"] and "calls" not in graph["interpreter"]


# -- numerics ---------------------------------------------------------------------------------
def test_fma_rounds_once():
    # a*b+c where rounding twice (to float64, then float16) differs from rounding once
    rng = np.random.default_rng(5)
    a, b, c = (rng.standard_normal(20000).astype(np.float16) for _ in range(3))
    from fractions import Fraction

    got = fma(a, b, c, np.dtype(np.float16))
    for x, y, z, g in list(zip(a, b, c, got, strict=True))[:2000]:
        exact = Fraction(float(x)) * Fraction(float(y)) + Fraction(float(z))
        lo = np.float16(float(exact))
        candidates = [
            lo,
            np.nextafter(lo, np.float16(np.inf)),
            np.nextafter(lo, np.float16(-np.inf)),
        ]
        best = min(
            candidates, key=lambda v: (abs(Fraction(float(v)) - exact), int(v.view(np.uint16)) & 1)
        )
        assert g.view(np.uint16) == best.view(np.uint16)


def test_unknown_calls_are_errors_not_skips():
    # fmt: off
    @T.prim_func
    def kernel(A_ptr: T.handle):
        A = T.match_buffer(A_ptr, (32,), "float32")
        T.device_entry()
        T.cta_id([1])
        tid = T.thread_id([32])
        A[tid] = T.call_pure_extern("float32", "__nv_mystery", A[tid])
    # fmt: on
    with pytest.raises(SimError, match="__nv_mystery"):
        sim.run(kernel, [np.ones(32, np.float32)])


def _unregistered(names) -> list[str]:
    import tvm

    missing = []
    for name in names:
        try:
            tvm.ir.Op.get(name)
        except AttributeError:  # what TVM 0.27 raises for a name it does not register
            missing.append(name)
    return missing


def test_every_instruction_is_an_op_tvm_has():
    """An entry under a name TVM does not register never matches a call (``tirx.likely``
    once sat where TVM 0.27 says ``prim.likely``): the entry is dead and the call unknown."""
    assert _unregistered(sim.CALLS) == []
    assert _unregistered(["tirx.if_then_else", "prim.if_then_else"]) == ["tirx.if_then_else"]


def test_if_then_else_evaluates_each_side_where_its_condition_says(rng):
    # fmt: off
    @T.prim_func
    def kernel(A_ptr: T.handle, B_ptr: T.handle):
        A = T.match_buffer(A_ptr, (32,), "float32")
        B = T.match_buffer(B_ptr, (32,), "float32")
        T.device_entry()
        T.cta_id([1])
        tid = T.thread_id([32])
        B[tid] = T.if_then_else(T.likely(tid < 5), A[tid], T.float32(-1.0))
    # fmt: on
    a = runtime.random_array((32,), "float32", rng)
    out = sim.run(kernel, [a, runtime.poison_like(a)]).arrays[1]
    want = np.where(np.arange(32) < 5, a, np.float32(-1.0))
    np.testing.assert_array_equal(runtime.bits(out), runtime.bits(want))


def _warp_reduce_kernel(op: str, width: int, threads: int = 64, active: int = 64):
    # fmt: off
    @T.prim_func
    def kernel(A_ptr: T.handle, B_ptr: T.handle):
        A = T.match_buffer(A_ptr, (threads,), "float32")
        B = T.match_buffer(B_ptr, (threads,), "float32")
        T.device_entry()
        T.cta_id([1])
        tid = T.thread_id([threads])
        if tid < active:
            B[tid] = T.cuda.warp_reduce(A[tid], op, width)
    # fmt: on
    return kernel


@pytest.mark.parametrize("op, width", [("sum", 8), ("sum", 32), ("max", 4), ("min", 32)])
def test_warp_reduce_is_the_butterfly_tvm_emits(op, width, rng):
    """TVM's helper: for mask = width/2 .. 1, val = val op shfl_xor(val, mask), rounded to
    float32 each step; every lane of a width-lane segment ends with the same value."""
    a = runtime.random_array((64,), "float32", rng)
    out = sim.run(_warp_reduce_kernel(op, width), [a, runtime.poison_like(a)]).arrays[1]
    fn = {"sum": np.add, "max": np.fmax, "min": np.fmin}[op]
    want, lane, step = a.copy(), np.arange(64), width // 2
    while step:
        want = fn(want, want[(lane - lane % 32) + ((lane % 32) ^ step)]).astype(np.float32)
        step //= 2
    np.testing.assert_array_equal(runtime.bits(out), runtime.bits(want))
    segments = want.reshape(-1, width)
    assert (segments == segments[:, :1]).all()


def test_warp_reduce_with_lanes_missing_never_returns():
    a = np.arange(64, dtype=np.float32) + 1
    with pytest.raises(SimError, match="not every lane of the warp executes it"):
        sim.run(_warp_reduce_kernel("sum", 32, active=48), [a, np.zeros(64, np.float32)])


def _leaving_loop(form: str):
    """Thread t sums A[t, i] over i, skipping negatives (``continue``) and stopping at the
    first value over 90 (``break``); ``form``: Python's statements or TVM's
    ``T.continue_loop()`` / ``T.break_loop()`` ops."""

    # fmt: off
    @T.prim_func
    def kernel(A_ptr: T.handle, B_ptr: T.handle):
        A = T.match_buffer(A_ptr, (64, 8), "int32")
        B = T.match_buffer(B_ptr, (64,), "int32")
        T.device_entry()
        T.cta_id([1])
        tid = T.thread_id([64])
        acc = T.alloc_buffer((1,), "int32", scope="local")
        acc[0] = 0
        for i in range(8):
            if A[tid, i] < 0:
                if form == "ops":
                    T.continue_loop()
                else:
                    continue
            if A[tid, i] > 90:
                if form == "ops":
                    T.break_loop()
                else:
                    break
            acc[0] = acc[0] + A[tid, i]
        B[tid] = acc[0]
    # fmt: on
    return kernel


@pytest.mark.parametrize("form", ["statements", "ops"])
def test_break_and_continue_leave_per_thread(form, rng):
    """Threads leave an iteration (continue) or the loop (break) on their own; the rest
    go on, and all of them run what follows the loop."""
    a = rng.integers(-50, 100, size=(64, 8)).astype(np.int32)
    out = sim.run(_leaving_loop(form), [a, np.full(64, -1, np.int32)]).arrays[1]
    want = []
    for row in a.tolist():
        total = 0
        for v in row:
            if v < 0:
                continue
            if v > 90:
                break
            total += v
        want.append(total)
    assert (a < 0).any() and (a > 90).any()  # both exits are taken
    np.testing.assert_array_equal(out, np.array(want, np.int32))
    # the control: a plain sum of the row is another answer
    assert not np.array_equal(out, a.sum(axis=1))


def test_activemask_names_the_lanes_that_run_the_call():
    """``__activemask()`` under ``if tid < 40`` over 64 threads: warp 0 all 32 lanes, warp
    1 its first 8; the threads left out write nothing (the control: poison stays)."""

    # fmt: off
    @T.prim_func
    def kernel(B_ptr: T.handle):
        B = T.match_buffer(B_ptr, (64,), "uint32")
        T.device_entry()
        T.cta_id([1])
        tid = T.thread_id([64])
        if tid < 40:
            B[tid] = T.cuda.__activemask()
    # fmt: on
    poison = np.full(64, 0xDEADBEEF, np.uint32)
    out = sim.run(kernel, [poison.copy()]).arrays[0]
    want = np.concatenate([np.full(32, 0xFFFFFFFF), np.full(8, 0xFF), poison[40:]])
    np.testing.assert_array_equal(out, want.astype(np.uint32))


def test_arguments_follow_the_host_function_where_the_kernel_drops_one(rng):
    """The C of an ldgsts round trip without ``init`` is never read: the device kernel
    drops it, the host function (what a user calls, and the GPU run) keeps it."""
    func = demos.ldgsts_roundtrip("float32", (8, 32), "warp")
    a = runtime.random_array((8, 32), "float32", rng)
    out = sim.run(func, [a, runtime.poison_like(a), runtime.poison_like(a)]).arrays[1]
    np.testing.assert_array_equal(runtime.bits(out), runtime.bits(a))
    with pytest.raises(SimError, match="takes 3 arguments, got 2"):
        sim.run(func, [a, runtime.poison_like(a)])


# -- agreement with the hardware -----------------------------------------------------------------
def _agreement_kernels():
    from tirx_cuda_dispatch.demos import elementwise_roundtrip

    yield (
        "gmem_smem-f16",
        demos.gmem_smem_roundtrip("float16", (32, 64), "warpgroup", ctas=3),
        [
            ((96, 64), "float16"),
        ],
    )
    yield (
        "reg-f32",
        demos.reg_roundtrip(TileLayout(S[(32, 16) : (1 @ lane, 1)]), (32, 16)),
        [
            ((32, 16), "float32"),
        ],
    )
    yield (
        "ldstmatrix-A",
        demos.ldstmatrix_roundtrip(A_FRAGMENT, _swizzle_32b(), (16, 16), 8),
        [
            ((16, 16), "float16"),
            ((32, 8), "float16"),
        ],
    )
    layout = TileLayout(S[(32, 8) : (1 @ lane, 1)])
    for op, dtype in (
        ("fma", "float32"),
        ("fma", "float16"),
        ("add", "bfloat16"),
        ("cast", "float16"),
    ):
        src = "float32" if op == "cast" else dtype
        yield (
            f"{op}-{dtype}",
            elementwise_roundtrip(op, layout, (32, 8), dtype, src_dtype=src),
            [
                ((32, 8), src),
                ((32, 8), dtype),
                ((32, 8), dtype),
            ],
        )


AGREEMENT = list(_agreement_kernels())


@pytest.mark.gpu
@pytest.mark.parametrize("name, func, specs", AGREEMENT, ids=[n for n, _, _ in AGREEMENT])
def test_simulator_agrees_with_the_gpu(name, func, specs, rng, gpu):
    inputs = [runtime.random_array(shape, dtype, rng) for shape, dtype in specs]
    if name.startswith(("gmem", "reg")):
        args = [inputs[0], runtime.poison_like(inputs[0])]
    elif name.startswith("ldstmatrix"):
        args = [inputs[0], runtime.poison_like(inputs[0]), runtime.poison_like(inputs[1])]
    else:
        args = [*inputs, runtime.poison_like(inputs[1])]
    on_gpu = runtime.run(runtime.build(func, gpu), runtime.entry_name(func), args)
    simulated = sim.run(func, args, target=gpu).arrays
    for g, s in zip(on_gpu, simulated, strict=True):
        np.testing.assert_array_equal(runtime.bits(s), runtime.bits(g))
