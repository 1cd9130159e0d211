"""copy_async -> tma_auto: box plans, declines, the tensor map the host encodes, the emitted
cp.async.bulk.tensor (CUDA text and SASS), and round trips in the simulator and on the GPU,
with the missing expect-tx / wait / alignment controls."""

from __future__ import annotations

import numpy as np
import pytest
from tvm import tirx
from tvm.script import tirx as T
from tvm.script.tirx import tile as Tx
from tvm.tirx.layout import ComposeLayout, S, TileLayout

import tirx_cuda_dispatch as tcd
from executors import execute
from tirx_cuda_dispatch import demos, runtime, sim, toolchain
from tirx_cuda_dispatch.copy_async.tma import TmaPlan
from tirx_cuda_dispatch.resources import Alignment, Completion, TensorMap
from tirx_cuda_dispatch.sim import SimError

WHERE = ["sim", pytest.param("gpu", marks=pytest.mark.gpu)]
roundtrip = demos.tma_roundtrip


def _report(func, arch="sm_90a") -> tcd.CallReport:
    [report] = [r for r in tcd.explain(func, arch) if r.op == "copy_async"]
    return report


def _plan(func, arch="sm_90a") -> TmaPlan:
    report = _report(func, arch)
    assert report.variant == "tma_auto", report
    return report.plan_object


def _reason(func, arch="sm_90a") -> str:
    report = _report(func, arch)
    assert report.variant != "tma_auto"
    [cand] = [c for c in report.candidates if c.variant == "tma_auto"]
    return cand.reason


def _expected(a: np.ndarray, tile, start) -> np.ndarray:
    r0, c0 = start
    return a[r0 : r0 + tile[0], c0 : c0 + tile[1]]


# -- plans ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "dtype, tile, swizzle, box, issues",
    [
        ("float16", (64, 128), 128, (64, 64), 2),  # two 128-byte column blocks
        ("float16", (128, 64), 128, (64, 128), 1),  # the example's A tile: one box
        ("float16", (64, 256), 128, (64, 64), 4),  # the example's B tile
        ("float16", (64, 128), 64, (32, 64), 4),
        ("float16", (64, 128), 32, (16, 64), 8),
        ("float32", (32, 64), 128, (32, 32), 2),
        ("int8", (16, 128), 128, (128, 16), 1),
        ("float16", (32, 64), 0, (64, 32), 1),  # no swizzle: the whole row
    ],
)
def test_the_box_is_the_shared_layout_s_dense_column_block(dtype, tile, swizzle, box, issues):
    plan = _plan(roundtrip(dtype, tile, swizzle, start=(0, 0)))
    size = np.dtype(dtype).itemsize
    assert tuple(d.box for d in plan.dims) == box
    assert plan.count == issues and plan.swizzle == swizzle
    assert plan.total_bytes == tile[0] * tile[1] * size  # what expect_tx must announce
    assert plan.shared_align == max(128, 8 * swizzle)
    tm = plan.tensor_map()
    assert tm.dims == (256, 256) and tm.strides == (256 * size,) and tm.box == box


def test_a_row_of_256_elements_is_one_box_and_a_longer_one_is_split():
    assert tuple(d.box for d in _plan(roundtrip("int8", (16, 256), 0)).dims) == (256, 16)
    plan = _plan(roundtrip("int8", (8, 512), 0, shape=(512, 512), start=(0, 0)))
    assert tuple(d.box for d in plan.dims) == (256, 1)
    assert plan.count == 16  # 2 halves of each of the 8 rows


def test_column_blocks_step_the_shared_offset_and_the_coordinates():
    """The example's B tile (64 x 256 in four 64-column blocks): four boxes, each 64
    columns further in A and one block (64 x 64 elements) further in shared memory."""
    plan = _plan(roundtrip("float16", (64, 256), 128, start=(0, 0)))
    [axis] = plan.issues
    assert (axis.count, axis.axis, axis.step, axis.shared_stride) == (4, 1, 64, 64 * 64)


@pytest.mark.parametrize("scope", ["thread", "warp", "cta"])
def test_one_thread_issues(scope):
    plan = _plan(roundtrip(scope=scope))
    assert ("calling thread" in plan.issuer) == (scope == "thread")


def test_explain_shows_the_tensor_map_and_the_completion_contract():
    report = _report(roundtrip())
    kinds = {type(r) for r in report.plan_object.resources()}
    assert kinds == {TensorMap, Completion}
    text = str(report)
    assert "tensor map tensor_map: float16 over src (dims 256x256" in text
    assert "box 64x64, 128B swizzle" in text
    assert "expect_tx(mbar, 16384)" in text


# -- declines -------------------------------------------------------------------------------
def test_a_copy_async_without_mbar_is_cp_async():
    """No mbar=: TMA declines, cp.async (ldgsts) takes it; with mbar=, ldgsts declines."""
    func = demos.ldgsts_roundtrip("float16", (64, 64), dispatch=None)
    assert _report(func).variant == "ldgsts"
    assert "no mbar= config" in _reason(func)
    assert "mbar" in next(
        c.reason for c in _report(roundtrip()).candidates if c.variant == "ldgsts"
    )


def test_declines_before_hopper():
    assert "needs sm_90 or newer; target is sm_80" in _reason(roundtrip(), "sm_80")


def tvm_style_load(align: int | None = None, **config):
    """TVM's test programs' form: a static shared tile under a 128-byte swizzle, allocated
    with no ``align=`` (64 bytes), an mbarrier beside it, a TMA load (``config``: more of
    its keys), the tile back out."""
    layout = demos.tma_shared_layout("float16", (64, 64), 128)
    kwargs = {} if align is None else {"align": align}

    # fmt: off
    @T.prim_func
    def tvm_style(A_ptr: T.handle, B_ptr: T.handle):
        A = T.match_buffer(A_ptr, (64, 64), "float16")
        B = T.match_buffer(B_ptr, (64, 64), "float16")
        T.device_entry()
        T.cta_id([1])
        tid = T.thread_id([128])
        bar = T.alloc_shared([1], "uint64")
        A_smem = T.alloc_buffer((64, 64), "float16", scope="shared", layout=layout, **kwargs)
        if tid == 0:
            T.ptx.mbarrier.init.shared.b64(bar.ptr_to([0]), 1)
        T.cuda.cta_sync()
        if tid == 0:
            Tx.copy_async(A_smem[:, :], A[:, :], mbar=bar.ptr_to([0]), **config)
            T.ptx["mbarrier.arrive.expect_tx.shared.b64"](bar.ptr_to([0]), 8192)
        T.cuda.mbarrier_wait(bar.ptr_to([0]), 0)
        Tx.cta.copy(B[:, :], A_smem[:, :])
    # fmt: on
    return tvm_style


def test_an_allocation_not_aligned_to_the_swizzle_is_raised_by_the_bridge():
    """TVM's own tests allocate swizzled TMA tiles with no align=: the plan asks the
    bridge to raise the allocation to the swizzle's 1,024 bytes (a resource explain()
    lists), and the kernel's CUDA declares it so; the control: declared aligned, no
    resource and the same declaration."""
    plan = _plan(tvm_style_load())
    [raised] = [r for r in plan.resources() if isinstance(r, Alignment)]
    assert (raised.allocation, raised.declared, raised.align) == ("A_smem", 64, 1024)
    assert "alignment: dst's allocation A_smem raised from 64 to 1024 bytes" in str(raised)
    src = toolchain.cuda_source(tvm_style_load(), "sm_90a", tcd.STRICT_PIPELINE)
    assert "__shared__ alignas(1024) half A_smem_ptr[4096];" in src
    declared = _plan(tvm_style_load(align=1024))
    assert not [r for r in declared.resources() if isinstance(r, Alignment)]
    src = toolchain.cuda_source(tvm_style_load(align=1024), "sm_90a", tcd.STRICT_PIPELINE)
    assert "__shared__ alignas(1024) half A_smem_ptr[4096];" in src
    # a pool carved by decl_buffer: its allocation is the one raised
    pooled = _plan(roundtrip(align=64))
    assert [r.allocation for r in pooled.resources() if isinstance(r, Alignment)] == ["pool"]


@pytest.mark.parametrize("where", WHERE)
def test_the_raised_allocation_round_trips(where, gpu, rng):
    """On the GPU a box under a 128-byte swizzle at an address not 1,024-byte aligned
    lands permuted; the raised allocation brings the tile back bit for bit."""
    a = rng.standard_normal((64, 64)).astype(np.float16)
    out = execute(tvm_style_load(), [a, runtime.poison_like(a)], where, gpu, tcd.STRICT_PIPELINE)
    assert np.array_equal(out[1], a)


def test_an_allocation_the_bridge_cannot_find_declines_with_the_fix():
    """allocation_alignment without the code around the call (no enclosing facts): the
    decline says what to declare."""
    from types import SimpleNamespace

    from tirx_cuda_dispatch.errors import Decline
    from tirx_cuda_dispatch.predicates import allocation_alignment

    opnd = SimpleNamespace(role="dst", name="A_smem", buffer=None)
    with pytest.raises(Decline, match=r"cannot be raised; .*align=1024\)"):
        allocation_alignment(SimpleNamespace(enclosing=None), opnd, 1024, "TMA needs it")


def test_a_swizzle_tma_cannot_apply_declines():
    layout = ComposeLayout(2, 3, 3, demos.tma_shared_layout("float16", (64, 128), 0))
    why = _reason(roundtrip(shared_layout=layout))
    assert "is not one TMA applies" in why and "per_element=3" in why


def test_an_inner_box_wider_than_the_swizzle_declines():
    layout = ComposeLayout(3, 3, 3, TileLayout(S[64, 128]))  # rows of 256 bytes, not blocked
    assert "wider than the 128-byte swizzle" in _reason(roundtrip(shared_layout=layout))


def test_a_transposing_shared_layout_declines():
    layout = TileLayout(S[(64, 128) : (1, 64)])  # column-major: no global row stays together
    why = _reason(roundtrip(swizzle=0, shared_layout=layout))
    assert "multiple of 16 bytes" in why


def test_an_unknown_config_key_declines_naming_the_accepted_ones():
    @T.prim_func
    def kernel(A_ptr: T.handle):
        A = T.match_buffer(A_ptr, (64, 64), "float16")
        T.device_entry()
        T.cta_id([1])
        T.thread_id([128])
        pool = T.alloc_buffer((64 * 64 + 4,), "float16", scope="shared.dyn", align=1024)
        A_s = T.decl_buffer((64, 64), "float16", pool.data, scope="shared.dyn")
        bar = T.decl_buffer((1,), "uint64", pool.data, elem_offset=1024, scope="shared.dyn")
        Tx.cta.copy_async(A_s[:, :], A[0:64, 0:64], mbar=bar.ptr_to([0]), oob="nan")
        Tx.cta.copy(A[0:64, 0:64], A_s[:, :])

    why = _reason(kernel)
    assert "oob=nan is not a key this TMA copy takes" in why and "accepted: mbar" in why


# -- emitted code -----------------------------------------------------------------------------
def test_the_host_encodes_one_tensor_map_the_kernel_takes_as_a_grid_constant():
    func = roundtrip()
    source = toolchain.cuda_source(func, "sm_90a")
    assert "const __grid_constant__ CUtensorMap A_tensormap" in source
    assert source.count("cp_async_bulk_tensor") == 2 + 1  # the helper and its 2 issues
    host, _ = toolchain.lowered(func)
    [(name, fields)] = toolchain.encoded_tensor_maps(host).items()
    assert name == "A_tensormap"
    assert (fields["dims"], fields["strides"], fields["box"]) == ((256, 256), (512,), (64, 64))
    assert fields["swizzle"] == 128 and fields["dtype"] == "float16"


def two_boxes_of_one_tensor():
    """A[0:128, 0:64] and A[128:192, 64:128] into two shared tiles (boxes of 128 and 64
    rows: two descriptors of A), one mbarrier, then to B and C."""
    big, small = (demos.tma_shared_layout("float16", t, 128) for t in ((128, 64), (64, 64)))

    # fmt: off
    @T.prim_func
    def kernel(A_ptr: T.handle, B_ptr: T.handle, C_ptr: T.handle):
        A = T.match_buffer(A_ptr, (256, 256), "float16")
        B = T.match_buffer(B_ptr, (128, 64), "float16")
        C = T.match_buffer(C_ptr, (64, 64), "float16")
        T.device_entry()
        T.cta_id([1])
        tid = T.thread_id([128])
        pool = T.alloc_buffer((192 * 64 + 4,), "float16", scope="shared.dyn", align=1024)
        B_s = T.decl_buffer((128, 64), "float16", pool.data, scope="shared.dyn", layout=big)
        C_s = T.decl_buffer((64, 64), "float16", pool.data, elem_offset=128 * 64,
                            scope="shared.dyn", layout=small)
        bar = T.decl_buffer((1,), "uint64", pool.data, elem_offset=192 * 64 // 4,
                            scope="shared.dyn")
        if tid == 0:
            T.ptx.mbarrier.init.shared.b64(bar.ptr_to([0]), 1)
        T.cuda.cta_sync()
        if tid == 0:
            T.ptx["mbarrier.arrive.expect_tx.shared.b64"](bar.ptr_to([0]), 192 * 64 * 2)
            Tx.copy_async(B_s[:, :], A[0:128, 0:64], mbar=bar.ptr_to([0]))
            Tx.copy_async(C_s[:, :], A[128:192, 64:128], mbar=bar.ptr_to([0]))
        T.cuda.mbarrier_wait(bar.ptr_to([0]), 0)
        Tx.cta.copy(B[:, :], B_s[:, :])
        Tx.cta.copy(C[:, :], C_s[:, :])
    # fmt: on
    return kernel


def test_two_descriptors_of_one_tensor_have_names_of_their_own(monkeypatch):
    """Two boxes of A are two tensor maps: the host encodes each under its own name (the
    kernel's parameters pair with them by it; the simulator's too), and the simulator
    runs the copies right. The control: named alike (as the bridge named them before),
    the simulator's pairing stops on the repeated name instead of giving one map to both."""
    host, _ = toolchain.lowered(two_boxes_of_one_tensor())
    maps = toolchain.encoded_tensor_maps(host)
    assert sorted((n, f["box"]) for n, f in maps.items()) == [
        ("A_tensormap", (64, 128)),
        ("A_tensormap_1", (64, 64)),
    ]
    a = runtime.random_array((256, 256), "float16", np.random.default_rng(5))
    b, c = (runtime.poison_like(np.zeros(s, a.dtype)) for s in ((128, 64), (64, 64)))
    out = sim.run(two_boxes_of_one_tensor(), [a, b, c], target="sm_90a")
    np.testing.assert_array_equal(runtime.bits(out[1]), runtime.bits(a[0:128, 0:64]))
    np.testing.assert_array_equal(runtime.bits(out[2]), runtime.bits(a[128:192, 64:128]))
    from tirx_cuda_dispatch.lowering import Session

    named = Session.tensor_map_var

    def alike(self, r, call):  # (each descriptor of this kernel is taken once)
        var = named(self, r, call)
        return tirx.Var(str(var.name).removesuffix("_1"), var.ty)

    monkeypatch.setattr(Session, "tensor_map_var", alike)
    host, _ = toolchain.lowered(two_boxes_of_one_tensor())
    with pytest.raises(ValueError, match="two tensor maps named A_tensormap"):
        toolchain.encoded_tensor_maps(host)


@pytest.mark.parametrize(
    "promotion, encoded", [(None, 256), ("L2::128B", 128), ("none", 0), (1, 64)]
)
def test_tvms_l2_promotion_config_reaches_the_tensor_map(promotion, encoded):
    """tensormap_l2_promotion= in TVM's forms (a name, 'none' or 0-3) is the descriptor's
    L2 promotion, encoded by the host; without it 256 bytes."""
    config = {} if promotion is None else {"tensormap_l2_promotion": promotion}
    host, _ = toolchain.lowered(tvm_style_load(align=1024, **config))
    [fields] = toolchain.encoded_tensor_maps(host).values()
    assert fields["l2_promotion"] == encoded


def test_an_l2_promotion_tma_does_not_have_declines_naming_the_forms():
    why = _reason(tvm_style_load(align=1024, tensormap_l2_promotion="L2::32B"))
    assert "tensormap_l2_promotion=L2::32B is not an L2 promotion" in why and "'L2::64B'" in why


def test_sass_issues_utmaldg_and_no_per_thread_loads():
    ops = toolchain.opcodes(toolchain.kernel_sass(roundtrip(), "sm_90a"))
    assert any(op.startswith("UTMALDG") for op in ops), ops
    assert not any(op.startswith(("LDGSTS", "LDG", "LDL", "STL")) for op in ops), ops


def test_the_sass_check_catches_cp_async():
    """Negative control: the cp.async round trip has LDGSTS and no UTMALDG."""
    func = demos.ldgsts_roundtrip("float16", (64, 64), dispatch=None)
    ops = toolchain.opcodes(toolchain.kernel_sass(func, "sm_90a"))
    assert any(op.startswith("LDGSTS") for op in ops)
    assert not any(op.startswith("UTMALDG") for op in ops)


# -- round trips ------------------------------------------------------------------------------
ROUNDTRIPS = [
    dict(dtype="float16", tile=(64, 128), swizzle=128),
    dict(dtype="float16", tile=(128, 64), swizzle=128),
    dict(dtype="float16", tile=(64, 256), swizzle=128, start=(192, 0)),
    dict(dtype="float16", tile=(64, 128), swizzle=64),
    dict(dtype="bfloat16", tile=(64, 128), swizzle=32),
    dict(dtype="float16", tile=(32, 64), swizzle=0),
    dict(dtype="float32", tile=(32, 64), swizzle=128, start=(0, 32)),
    dict(dtype="int8", tile=(16, 256), swizzle=128, start=(240, 0)),
    dict(dtype="float16", tile=(64, 128), swizzle=128, scope="thread"),
    dict(dtype="float16", tile=(64, 128), swizzle=128, scope="warp"),
]


def _case_id(case: dict) -> str:
    return "-".join(str(v).replace(" ", "") for v in case.values())


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("case", ROUNDTRIPS, ids=_case_id)
def test_roundtrip(case, rng, where, gpu):
    start = case.get("start", (64, 128))
    a = runtime.random_array((256, 256), case["dtype"], rng)
    b = runtime.poison_like(np.zeros(case["tile"], a.dtype))
    _, out = execute(roundtrip(**case), [a, b], where, gpu)
    np.testing.assert_array_equal(
        runtime.bits(out), runtime.bits(_expected(a, case["tile"], start))
    )


def test_the_simulator_counts_one_instruction_per_box():
    a = runtime.random_array((256, 256), "float16", np.random.default_rng(3))
    out = sim.run(roundtrip(), [a, np.zeros((64, 128), a.dtype)])
    assert out.counters.instructions["cp.async.bulk.tensor"] == 2
    assert out.counters.bytes["global.load"] >= 64 * 128 * 2


def test_a_missing_expect_tx_is_a_deadlock_naming_the_negative_tx_count():
    a = runtime.random_array((256, 256), "float16", np.random.default_rng(4))
    with pytest.raises(SimError, match=r"deadlock: .*tx-count -16384"):
        sim.run(roundtrip(expect=False), [a, np.zeros((64, 128), a.dtype)])


def test_a_missing_wait_is_reported_at_the_read():
    a = runtime.random_array((256, 256), "float16", np.random.default_rng(5))
    with pytest.raises(SimError, match=r"call \[1\] Tx.cta.copy .*(race|in flight)"):
        sim.run(roundtrip(wait=False), [a, np.zeros((64, 128), a.dtype)])


def test_a_read_before_the_phase_completes_names_the_copy():
    """The tile is read between the copy and the expect-tx (the phase is still open):
    the simulator says which copy is in flight there and what to wait for."""

    @T.prim_func
    def early(A_ptr: T.handle, B_ptr: T.handle):
        A = T.match_buffer(A_ptr, (256, 256), "float16")
        B = T.match_buffer(B_ptr, (64, 64), "float16")
        T.device_entry()
        T.cta_id([1])
        tid = T.thread_id([128])
        pool = T.alloc_buffer((64 * 64 + 4,), "float16", scope="shared.dyn", align=1024)
        A_s = T.decl_buffer((64, 64), "float16", pool.data, scope="shared.dyn")
        bar = T.decl_buffer((1,), "uint64", pool.data, elem_offset=1024, scope="shared.dyn")
        if tid == 0:
            T.ptx.mbarrier.init.shared.b64(bar.ptr_to([0]), 1)
        T.cuda.cta_sync()
        Tx.cta.copy_async(A_s[:, :], A[0:64, 0:64], mbar=bar.ptr_to([0]))
        Tx.cta.copy(B[:, :], A_s[:, :])
        if tid == 0:
            T.ptx["mbarrier.arrive.expect_tx.shared.b64"](bar.ptr_to([0]), 8192)
        T.cuda.mbarrier_wait(bar.ptr_to([0]), 0)

    a = runtime.random_array((256, 256), "float16", np.random.default_rng(6))
    with pytest.raises(SimError, match=r"while cp\.async\.bulk\.tensor.* still in flight"):
        sim.run(early, [a, np.zeros((64, 64), a.dtype)])


# -- stores (shared -> global) -------------------------------------------------------------
store = demos.tma_store_roundtrip


def test_a_store_plans_the_same_box_from_the_shared_layout():
    """The load's planner, the other way round: the box and issues come from src's shared
    layout, the tensor map is over dst, and the completion is a bulk async-group."""
    plan = _plan(store())
    assert plan.direction == "store" and plan.global_role == "dst"
    assert tuple(d.box for d in plan.dims) == (64, 64) and plan.count == 2
    assert plan.instruction == "cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group"
    assert plan.tensor_map().operand == "dst"
    text = str(_report(store()))
    assert "bulk async-group" in text and "fence.proxy.async" in text
    assert "expect_tx" not in text
    load = _plan(roundtrip())
    assert (load.dims, load.issues) == (plan.dims, plan.issues)


def test_a_reduce_store_is_cp_reduce():
    plan = _plan(store(reduce="add"))
    assert plan.reduce == "add"
    assert plan.instruction.startswith("cp.reduce.async.bulk.tensor.2d.global.shared::cta.add")
    source = toolchain.cuda_source(store(reduce="max", dtype="bfloat16"), "sm_90a")
    assert "cp.reduce.async.bulk.tensor.2d.global.shared::cta.max.tile.bulk_group" in source


@pytest.mark.parametrize(
    "kw, why",
    [
        (dict(reduce="min", dtype="float32"), "use_tma_reduce='min' on float32: cp.reduce"),
        (dict(reduce="xor"), "use_tma_reduce='xor': this variant reduces with add, min, max"),
    ],
)
def test_a_reduction_the_isa_does_not_list_declines(kw, why):
    assert why in _reason(store(**kw))


def test_an_mbarrier_on_a_store_declines():
    @T.prim_func
    def kernel(A_ptr: T.handle):
        A = T.match_buffer(A_ptr, (64, 64), "float16")
        T.device_entry()
        T.cta_id([1])
        T.thread_id([128])
        pool = T.alloc_buffer((64 * 64 + 4,), "float16", scope="shared.dyn", align=1024)
        A_s = T.decl_buffer((64, 64), "float16", pool.data, scope="shared.dyn")
        bar = T.decl_buffer((1,), "uint64", pool.data, elem_offset=1024, scope="shared.dyn")
        Tx.cta.copy(A_s[:, :], A[0:64, 0:64])
        Tx.cta.copy_async(A[0:64, 0:64], A_s[:, :], mbar=bar.ptr_to([0]))

    assert "mbar= on a store (shared -> global)" in _reason(kernel)


def test_the_store_is_utmastg_in_the_sass():
    ops = toolchain.opcodes(toolchain.kernel_sass(store(), "sm_90a"))
    assert any(op.startswith("UTMASTG") for op in ops)
    assert not any(op.startswith("UTMALDG") for op in ops)
    ops = toolchain.opcodes(toolchain.kernel_sass(store(reduce="add"), "sm_90a"))
    assert any(op.startswith("UTMAREDG") for op in ops)


STORES = [
    dict(dtype="float16", tile=(64, 128), swizzle=128),
    dict(dtype="bfloat16", tile=(128, 64), swizzle=64),
    dict(dtype="float32", tile=(32, 64), swizzle=128, start=(0, 32)),
    dict(dtype="float16", tile=(32, 64), swizzle=0, scope="thread"),
    dict(dtype="float16", tile=(64, 128), swizzle=128, shape=(100, 200)),  # clipped
    dict(dtype="float16", tile=(64, 128), swizzle=32, reduce="add"),
    dict(dtype="float32", tile=(32, 64), swizzle=128, reduce="add", shape=(80, 152)),
    dict(dtype="bfloat16", tile=(64, 64), swizzle=128, reduce="max"),
]


def _stored(b: np.ndarray, a: np.ndarray, start, reduce: str | None) -> np.ndarray:
    """B with A stored (or reduced) at ``start``, clipped to B's shape."""
    r0, c0 = start
    out = b.copy()
    rows, cols = min(a.shape[0], b.shape[0] - r0), min(a.shape[1], b.shape[1] - c0)
    old, new = out[r0 : r0 + rows, c0 : c0 + cols], a[:rows, :cols]
    if reduce is None:
        out[r0 : r0 + rows, c0 : c0 + cols] = new
    else:
        fn = {"add": np.add, "max": np.maximum}[reduce]
        out[r0 : r0 + rows, c0 : c0 + cols] = fn(
            old.astype(np.float64), new.astype(np.float64)
        ).astype(a.dtype)
    return out


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("case", STORES, ids=_case_id)
def test_store_roundtrip(case, rng, where, gpu):
    start, shape = case.get("start", (64, 128)), case.get("shape", (256, 256))
    a = runtime.random_array(case["tile"], case["dtype"], rng)
    b = runtime.random_array(shape, case["dtype"], rng)  # never zero: an unwritten cell shows
    _, out = execute(store(**case), [a, b], where, gpu)
    np.testing.assert_array_equal(
        runtime.bits(out), runtime.bits(_stored(b, a, start, case.get("reduce")))
    )


def test_a_store_past_the_edge_is_accepted_and_explained():
    """The tile reaches past B (100 x 200): a TMA store clips it, and a TMA load of the same
    region reads zeros there; the bounds check accepts both for tma_auto and explain()
    says what happens."""
    report = _report(store(shape=(100, 200)))
    assert report.error is None
    [note] = report.bounds_past_edge
    assert "past the edge: elements outside dst are not written (TMA clips the box)" in note
    load = _report(roundtrip(shape=(100, 200)))
    assert "read as zeros (TMA fills them)" in load.bounds_past_edge[0]


@pytest.mark.parametrize("where", WHERE)
def test_a_load_past_the_edge_reads_zeros(rng, where, gpu):
    a = runtime.random_array((100, 200), "float16", rng)
    b = runtime.poison_like(np.zeros((64, 128), a.dtype))
    _, out = execute(roundtrip(shape=(100, 200)), [a, b], where, gpu)
    expected = np.zeros((64, 128), a.dtype)
    expected[:36, :72] = a[64:100, 128:200]
    np.testing.assert_array_equal(runtime.bits(out), runtime.bits(expected))


def test_a_region_past_the_edge_is_still_an_error_for_other_variants():
    """Negative control: the same region read by a synchronous copy (gmem_smem) is out of
    bounds, and a TMA copy's shared operand may not reach past its buffer either."""
    from tirx_cuda_dispatch.bounds import OutOfBoundsError

    @T.prim_func
    def kernel(A_ptr: T.handle, B_ptr: T.handle):
        A = T.match_buffer(A_ptr, (100, 200), "float16")
        B = T.match_buffer(B_ptr, (64, 128), "float16")
        T.device_entry()
        T.cta_id([1])
        T.thread_id([128])
        A_s = T.alloc_buffer((64, 128), "float16", scope="shared")
        Tx.cta.copy(A_s[:, :], A[64:128, 128:256])
        Tx.cta.copy(B[:, :], A_s[:, :])

    with pytest.raises(OutOfBoundsError, match="A\\[64:128, 128:256\\]: axis 0 runs 64:128"):
        toolchain.cuda_source(kernel, "sm_90a")


def test_a_store_without_the_proxy_fence_is_reported(rng):
    a = runtime.random_array((64, 128), "float16", rng)
    b = runtime.random_array((256, 256), "float16", rng)
    with pytest.raises(
        SimError,
        match="a TMA copy issued by warp 0 reads byte .* which warp [0-3] wrote through the generic proxy with no fence.proxy.async",
    ):
        sim.run(store(fence=False), [a, b])


def test_a_store_whose_reads_are_not_waited_is_reported_at_the_exit(rng):
    a = runtime.random_array((64, 128), "float16", rng)
    b = runtime.random_array((256, 256), "float16", rng)
    with pytest.raises(
        SimError,
        match="the CTA exits with cp.async.bulk.tensor.* reading shared memory .*cp.async.bulk.wait_group.read",
    ):
        sim.run(store(wait=None), [a, b])
    out = sim.run(store(wait="read"), [a, b])  # the writes may land after the exit
    np.testing.assert_array_equal(
        runtime.bits(out[1]), runtime.bits(_stored(b, a, (64, 128), None))
    )


def test_rewriting_the_source_needs_the_read_wait(rng):
    a = runtime.random_array((64, 128), "float16", rng)
    b = runtime.random_array((256, 256), "float16", rng)
    out = sim.run(store(wait="read", rewrite=True), [a, b])
    np.testing.assert_array_equal(
        runtime.bits(out[1]), runtime.bits(_stored(b, a, (64, 128), None))
    )
    with pytest.raises(
        SimError,
        match=r"writes byte .* of shared .* while cp.async.bulk.tensor.* still reads it.*\(cp.async.bulk.wait_group.read\)",
    ):
        sim.run(store(wait=None, rewrite=True), [a, b])


# -- what may not fall back to TVM's built-in variants ------------------------------------------
def test_a_tma_load_ours_declines_does_not_fall_to_cp_async():
    """TVM's ldgsts would take a copy with mbar= and drop it (the reader's wait would never
    complete: a hang on the GPU, a deadlock in the simulator); the default pipeline says
    so, with tma_auto's reason, instead of lowering it."""
    from tirx_cuda_dispatch.errors import DispatchError

    func = roundtrip("bfloat16", (5, 256), 128, "cta", (10, 400), (3, 112))
    with pytest.raises(DispatchError, match="'ldgsts' would take this copy and drop its mbar="):
        toolchain.cuda_source(func, "sm_90a")
    report = _report(func)
    assert "boxes" in next(c.reason for c in report.candidates if c.variant == "tma_auto")


def test_a_reduction_the_isa_does_not_list_does_not_fall_to_tvms_tma():
    from tirx_cuda_dispatch.errors import DispatchError

    func = store("float32", (32, 64), 128, "thread", reduce="max")
    with pytest.raises(DispatchError, match=r"\.max on float32, which the PTX ISA does not list"):
        toolchain.cuda_source(func, "sm_90a")
    toolchain.cuda_source(store("float32", (32, 64), 128, "thread", reduce="add"), "sm_90a")


# -- coordinates the hardware stops on (isa/bulk.py) ------------------------------------------
def test_the_coordinate_rules_as_data():
    from tirx_cuda_dispatch.isa.bulk import coordinate_fault

    assert "not a multiple of 16" in coordinate_fault([2, 0], 2, store=False)
    assert coordinate_fault([8, 0], 2, store=False) is None  # 16 bytes of bfloat16
    assert coordinate_fault([4, 0], 4, store=True) is None
    assert "not a multiple of 16" in coordinate_fault([8, 0], 1, store=False)  # int8: 16
    assert coordinate_fault([-16, -3], 2, store=False) is None  # a load reads zeros there
    assert "negative" in coordinate_fault([-16, 3], 2, store=True)
    assert "negative" in coordinate_fault([16, -3], 2, store=True)


@pytest.mark.parametrize(
    "func, words",
    [
        (roundtrip("bfloat16", (32, 40), 0, "warp", (64, 96), (0, 2)), "multiple of 8 elements"),
        (roundtrip("int8", (8, 64), 0, "cta", (64, 96), (0, 8)), "multiple of 16 elements"),
        (store("float32", (8, 32), 0, "cta", (64, 64), (3, 6)), "multiple of 4 elements"),
        (store("float16", (16, 64), 128, "cta", (40, 96), (-3, 8)), "must not be negative"),
        (store("float16", (16, 64), 128, "cta", (40, 96), (3, -8), "add"), "must not be negative"),
    ],
)
def test_a_coordinate_the_hardware_stops_on_declines(func, words):
    assert words in _reason(func)


def test_a_load_may_start_before_the_tensor_and_a_store_at_16_bytes():
    """Controls of the rules: negative coordinates of a load (zeros), and a store's
    innermost start at a whole 16 bytes, are taken."""
    assert _plan(roundtrip("float16", (16, 64), 128, "cta", (40, 96), (-3, -8)))
    assert _plan(store("float32", (8, 32), 0, "cta", (64, 64), (3, 4)))


def _cta_store(offset: int = 0, scalar: bool = False, twice: bool = False):
    """A store of A (16 x 64) into B by CTA ``bx``: at rows ``16 * bx + offset``, or
    (``scalar``) at columns ``c0``, a register scalar: ``c0 = 64 * bx`` (one store: its
    value is known wherever it is read), with ``twice`` then ``c0 = c0 + 4`` as well (two
    stores: unknown)."""
    layout = demos.tma_shared_layout("float16", (16, 64), 128)

    @T.prim_func
    def func(A: T.Buffer((16, 64), "float16"), B: T.Buffer((64, 128), "float16")):
        T.device_entry()
        bx = T.cta_id([2])
        T.thread_id([128])
        pool = T.alloc_buffer((1024,), "float16", scope="shared.dyn", align=1024)
        A_s = T.decl_buffer((16, 64), "float16", pool.data, scope="shared.dyn", layout=layout)
        Tx.cta.copy(A_s[:, :], A[:, :])
        T.ptx["fence.proxy.async.shared::cta"]()
        T.cuda.cta_sync()
        if scalar:
            c0 = bx * 64
            if twice:
                c0 = c0 + 4
            Tx.cta.copy_async(B[0:16, c0 : c0 + 64], A_s[:, :])
        else:
            Tx.cta.copy_async(B[bx * 16 + offset : bx * 16 + offset + 16, 0:64], A_s[:, :])

    return func


def test_a_store_must_start_provably_at_zero_or_later():
    """``16 * bx - 8`` is negative for the first CTA: declined, naming the start; ``16 *
    bx`` is provably >= 0 over bx's range: taken."""
    why = _reason(_cta_store(-8))
    assert "starts at bx * 16 + -8 in dimension 0, not provably >= 0" in why
    assert _plan(_cta_store(0))


def test_the_simulator_stops_a_copy_the_hardware_stops_on(rng):
    """TVM's built-in lowers thread-scope TMA copies at any coordinate; the simulator stops
    the load off 16 bytes and the store before the tensor with an illegal instruction (as
    the H100 does), and runs such copies at legal coordinates."""
    a = runtime.random_array((16, 88), "float16", rng)
    b = runtime.random_array((8, 64), "float16", rng)
    with pytest.raises(SimError, match=r"illegal instruction: .*\{19, 0\}.* 38 bytes"):
        sim.run(roundtrip("float16", (8, 64), 128, "thread", (16, 88), (0, 19)), [a, b],
                pipeline="tirx")  # fmt: skip
    # (TVM's built-in takes this one with cp.async, dropping mbar=: ours shows the TMA load)
    sim.run(roundtrip("float16", (8, 64), 128, "thread", (16, 88), (0, 16)), [a, b])
    a, b = (
        runtime.random_array((16, 40), "float16", rng),
        runtime.random_array((12, 96), "float16", rng),
    )
    with pytest.raises(SimError, match=r"illegal instruction: .*coordinate -14 is negative"):
        sim.run(store("float16", (16, 40), 0, "thread", (12, 96), (-14, 64)), [a, b],
                pipeline="tirx")  # fmt: skip
    sim.run(store("float16", (16, 40), 0, "thread", (12, 96), (0, 56)), [a, b], pipeline="tirx")


def test_a_copy_tvms_tma_would_emit_at_a_faulting_coordinate_is_an_error():
    """Inside the tensor (no bounds error), off 16 bytes, at thread scope: tma_auto
    declines and TVM's built-in TMA variant would take it; the default pipeline refuses."""
    from tirx_cuda_dispatch.errors import DispatchError

    func = store("float16", (8, 64), 128, "thread", (64, 128), (8, 20))
    with pytest.raises(
        DispatchError, match=r"TVM's built-in 'tma\w*' would emit .*16 bytes of float16"
    ):
        toolchain.cuda_source(func, "sm_90a")


def test_a_region_past_the_edge_nothing_takes_lists_the_reasons():
    from tirx_cuda_dispatch.bounds import OutOfBoundsError

    func = roundtrip("bfloat16", (32, 40), 0, "thread", (21, 96), (0, 2))
    with pytest.raises(
        OutOfBoundsError, match=r"(?s)outside the extent 21.*tma_auto declined: .*multiple of 8"
    ):
        toolchain.cuda_source(func, "sm_90a")


def test_an_undecided_region_nothing_takes_lists_the_reasons():
    """An undecided region a TMA box could take past the edge, with TMA declined: the
    strict pipeline's bounds error says why each variant declined (the box's reason is
    the author's fix, not a T.assume); the control: the box taken, no error."""
    from tirx_cuda_dispatch.bounds import BoundsNotProvedError

    func = _cta_store(scalar=True, twice=True)
    with pytest.raises(BoundsNotProvedError) as err:
        toolchain.cuda_source(func, "sm_90a", tcd.STRICT_PIPELINE)
    text = str(err.value)
    assert text.startswith("region not proved in bounds at ")
    assert "\n  tma_auto declined: " in text and "region starts at c0" in text
    toolchain.cuda_source(_cta_store(scalar=True), "sm_90a", tcd.STRICT_PIPELINE)


def test_a_register_scalar_stored_once_is_its_value():
    """``c0 = 64 * bx`` is a register scalar in TVMScript (a load where it is read): stored
    once, the plan proves its multiple of 16 bytes and takes the store; stored twice
    (``c0 = c0 + 4`` after it), nothing is known of it and tma_auto declines."""
    assert _plan(_cta_store(scalar=True))
    assert "region starts at c0 in its innermost dimension 1" in _reason(
        _cta_store(scalar=True, twice=True)
    )


# -- multicast (cta_mask) ---------------------------------------------------------------------
def _multicast_load(mask, store: bool = False):
    @T.prim_func
    def kernel(A_ptr: T.handle):
        A = T.match_buffer(A_ptr, (64, 64), "float16")
        T.device_entry()
        T.cta_id([2])
        T.cta_id_in_cluster([2])
        tid = T.thread_id([128])
        A_s = T.alloc_buffer((64, 64), "float16", scope="shared", align=1024)
        bar = T.alloc_shared([1], "uint64")
        if tid == 0:
            if store:
                Tx.copy_async(A[0:64, 0:64], A_s[:, :], dispatch="tma_auto", cta_mask=mask)
            else:
                Tx.copy_async(A_s[:, :], A[0:64, 0:64], mbar=bar.ptr_to([0]),
                              dispatch="tma_auto", cta_mask=mask)  # fmt: skip

    return kernel


def test_a_cta_mask_is_a_multicast_load():
    plan = _plan(_multicast_load(3))
    assert plan.multicast and plan.cta_mask == 3
    assert plan.instruction.endswith("complete_tx::bytes.multicast::cluster")
    report = _report(_multicast_load(3))
    assert report.plan["cta_mask"] == "3" and report.plan["ptx"].endswith("[mbar], ctaMask")
    assert "lands in every CTA of cta_mask 3" in " ".join(report.resources)
    source = toolchain.cuda_source(_multicast_load(3), "sm_90a")
    assert "complete_tx::bytes.multicast::cluster [%0], [%1, {%2, %3}], [%4], %5;" in source


def test_a_zero_cta_mask_is_no_multicast():
    """Control: cta_mask=0 is the plain load."""
    plan = _plan(_multicast_load(0))
    assert not plan.multicast and "multicast" not in plan.instruction


@pytest.mark.parametrize(
    "mask, store, why",
    [
        (1 << 16, False, "cta_mask=65536 does not fit the 16-bit ctaMask operand"),
        (
            3,
            True,
            "cta_mask=3 on a store (shared -> global): a TMA store writes global memory once",
        ),
    ],
)
def test_a_cta_mask_the_isa_does_not_take_declines(mask, store, why):
    assert why in _reason(_multicast_load(mask, store))


# -- CTA pairs (cta_group=2, Blackwell) -------------------------------------------------------
def test_cta_group_2_names_the_pairs_barrier_on_blackwell():
    """TVM's gemm_async tests pass cta_group=2 with an mbarrier mapa'd into the pair's
    first CTA: the load is .cta_group::2 (mbar may be the peer's), sm_100a."""
    func = tvm_style_load(align=1024, cta_group=2)
    plan = _plan(func, "sm_100a")
    assert plan.cta_group == 2 and plan.instruction.endswith("complete_tx::bytes.cta_group::2")
    assert "this CTA's or its pair's" in " ".join(_report(func, "sm_100a").resources)
    source = toolchain.cuda_source(func, "sm_100a")
    assert "mbarrier::complete_tx::bytes.cta_group::2 [%0]" in source
    ops = toolchain.opcodes(toolchain.kernel_sass(func, "sm_100a"))
    assert any(op.startswith("UTMALDG") for op in ops), ops


def test_cta_group_1_is_the_plain_load():
    """Control: cta_group=1 (TVM's default) emits no .cta_group token."""
    plan = _plan(tvm_style_load(align=1024, cta_group=1), "sm_100a")
    assert plan.cta_group == 1 and "cta_group" not in plan.instruction


@pytest.mark.parametrize(
    "group, arch, why",
    [
        (2, "sm_90a", "cp.async.bulk.tensor .cta_group::2"),
        (3, "sm_100a", "cta_group=3: a tensor copy's CTA group is 1 or 2"),
    ],
)
def test_a_cta_group_the_target_does_not_have_declines(group, arch, why):
    assert why in _reason(tvm_style_load(align=1024, cta_group=group), arch)


def padded_rows_load():
    """A 128 x 64 float16 tile into shared rows padded to 128 elements: every row is a box
    of its own (128 boxes), more than are written out."""
    layout = TileLayout(S[(128, 64) : (128, 1)])

    # fmt: off
    @T.prim_func
    def kernel(A_ptr: T.handle, B_ptr: T.handle):
        A = T.match_buffer(A_ptr, (128, 64), "float16")
        B = T.match_buffer(B_ptr, (128, 64), "float16")
        T.device_entry()
        T.cta_id([1])
        tid = T.thread_id([128])
        bar = T.alloc_shared([1], "uint64")
        A_s = T.alloc_buffer((128, 128), "float16", scope="shared", align=128)
        tile = T.decl_buffer((128, 64), "float16", A_s.data, scope="shared", layout=layout)
        if tid == 0:
            T.ptx.mbarrier.init.shared.b64(bar.ptr_to([0]), 1)
        T.cuda.cta_sync()
        if tid == 0:
            Tx.copy_async(tile[:, :], A[:, :], mbar=bar.ptr_to([0]), dispatch="tma_auto")
            T.ptx["mbarrier.arrive.expect_tx.shared.b64"](bar.ptr_to([0]), 128 * 64 * 2)
        T.cuda.mbarrier_wait(bar.ptr_to([0]), 0)
        Tx.cta.copy(B[:, :], tile[:, :])
    # fmt: on
    return kernel


@pytest.mark.parametrize("where", WHERE)
def test_more_boxes_than_are_written_out_run_in_a_loop(rng, where, gpu):
    func = padded_rows_load()
    report = _report(func)
    assert report.variant == "tma_auto" and report.plan["issues"] == 128
    assert "a loop of 128 issues of 128 bytes" in report.plan["issue_loop"]
    a = rng.uniform(-2, 2, (128, 64)).astype(np.float16)
    out = execute(func, [a, np.full_like(a, np.nan)], where, gpu)[1]
    np.testing.assert_array_equal(out, a)


def test_a_call_of_few_boxes_is_written_out():
    """Control: the plain 64 x 64 tile is one box and names no loop."""
    plan_facts = _report(tvm_style_load(align=1024)).plan
    assert plan_facts["issues"] == 1 and "issue_loop" not in plan_facts


# -- a global operand in another dimension order ----------------------------------------------
COLUMN_MAJOR = TileLayout(S[(256, 256) : (1, 256)])  # A[i, j] at i + 256 j
MN_MAJOR_TILE = ComposeLayout(3, 3, 3, TileLayout(S[(64, 128) : (1, 64)]))


def _column_major(raw: np.ndarray) -> np.ndarray:
    """The logical A a column-major kernel reads from ``raw``'s bytes."""
    return raw.reshape(-1).reshape(raw.shape[::-1]).T


def test_a_column_major_global_maps_its_contiguous_dimension_first():
    """The tensor map's dimension 0 is the global dimension of stride 1 (A's rows here),
    whatever its place in the buffer's shape; the box is the shared tile's dense block."""
    plan = _plan(roundtrip(shared_layout=MN_MAJOR_TILE, global_layout=COLUMN_MAJOR))
    assert [(d.axis, d.stride, d.box) for d in plan.dims] == [(0, 2, 64), (1, 512, 128)]
    assert plan.count == 1


@pytest.mark.parametrize("where", WHERE)
def test_a_column_major_global_round_trips(rng, where, gpu):
    raw = runtime.random_array((256, 256), "float16", rng)
    func = roundtrip(shared_layout=MN_MAJOR_TILE, global_layout=COLUMN_MAJOR)
    out = execute(func, [raw, runtime.poison_like(np.zeros((64, 128), raw.dtype))], where, gpu)[1]
    np.testing.assert_array_equal(out, _column_major(raw)[64:128, 128:256])
    assert not np.array_equal(out, raw[64:128, 128:256])  # control: the bytes as row-major


def test_a_global_without_a_contiguous_dimension_declines():
    strided = TileLayout(S[(256, 256) : (512, 2)])  # every other element
    why = _reason(roundtrip(global_layout=strided))
    assert "has no dimension of stride 1" in why and "dimension 0 is contiguous" in why


def transposed_3d_load():
    """TVM's gemm_async test case "mn_major": A (3, 128, 128) whose middle dimension is
    contiguous in global memory, into an MN-major 128-byte swizzled tile (64-element
    columns of 8-row atoms): 96 boxes of 64 x 8, issued in a loop."""
    glob = TileLayout(S[(3, 128, 128) : (16384, 1, 128)])
    tile = ComposeLayout(3, 3, 3, TileLayout(S[(3, 2, 64, 16, 8) : (16384, 512, 1, 1024, 64)]))
    n = 3 * 128 * 128

    # fmt: off
    @T.prim_func
    def kernel(A_ptr: T.handle, B_ptr: T.handle):
        A = T.match_buffer(A_ptr, (3, 128, 128), "float16", layout=glob)
        B = T.match_buffer(B_ptr, (3, 128, 128), "float16")
        T.device_entry()
        T.cta_id([1])
        tid = T.thread_id([128])
        pool = T.alloc_buffer((n + 4,), "float16", scope="shared.dyn", align=1024)
        A_s = T.decl_buffer((3, 128, 128), "float16", pool.data, scope="shared.dyn", layout=tile)
        bar = T.decl_buffer((1,), "uint64", pool.data, elem_offset=n // 4, scope="shared.dyn")
        if tid == 0:
            T.ptx.mbarrier.init.shared.b64(bar.ptr_to([0]), 1)
        T.cuda.cta_sync()
        if tid == 0:
            Tx.copy_async(A_s[:, :, :], A[:, :, :], mbar=bar.ptr_to([0]), dispatch="tma_auto")
            T.ptx["mbarrier.arrive.expect_tx.shared.b64"](bar.ptr_to([0]), n * 2)
        T.cuda.mbarrier_wait(bar.ptr_to([0]), 0)
        Tx.cta.copy(B[:, :, :], A_s[:, :, :])
    # fmt: on
    return kernel


@pytest.mark.parametrize("where", WHERE)
def test_tvms_mn_major_load_of_a_transposed_operand_round_trips(rng, where, gpu):
    func = transposed_3d_load()
    plan = _plan(func)
    assert [d.axis for d in plan.dims] == [1, 2, 0] and plan.count == 96
    assert "x".join(str(d.box) for d in plan.dims) == "64x8x1"
    raw = runtime.random_array((3, 128, 128), "float16", rng)
    out = execute(func, [raw, runtime.poison_like(raw)], where, gpu)[1]
    logical = raw.reshape(3, 128, 128).transpose(0, 2, 1)  # A[b, i, j] at 16384 b + i + 128 j
    np.testing.assert_array_equal(out, logical)


# -- tma_dtype="tf32": a float32 load rounded to tf32 -----------------------------------------
def _tf32(a: np.ndarray) -> np.ndarray:
    """float32 rounded to tf32's 11 significant bits, to nearest, ties to even (float64
    arithmetic: numpy's round is half-to-even)."""
    mantissa, exponent = np.frexp(a.astype(np.float64))
    return np.ldexp(np.round(mantissa * 2**11) / 2**11, exponent).astype(np.float32)


def _tf32_load(**config):
    return roundtrip("float32", (32, 64), start=(0, 32), config={"tma_dtype": "tf32", **config})


def _with_ties(a: np.ndarray) -> np.ndarray:
    """Every fourth element a tie between two tf32 values (its 13 dropped bits 0x1000),
    half of them with an odd kept bit: round-half-even and round-half-away differ there."""
    bits = a.view(np.uint32).copy()
    bits.reshape(-1)[::4] = (bits.reshape(-1)[::4] & ~np.uint32(0x1FFF)) | np.uint32(0x1000)
    return bits.view(np.float32)


def test_a_tf32_load_names_the_descriptor_and_the_rounding():
    report = _report(_tf32_load())
    assert report.variant == "tma_auto"
    assert "ties to even" in report.plan["tma_dtype"]
    assert report.plan_object.tensor_map().tf32
    host, _ = toolchain.lowered(_tf32_load())
    [fields] = toolchain.encoded_tensor_maps(host).values()
    assert fields["tf32"] and fields["dtype"] == "float32"
    [plain] = toolchain.encoded_tensor_maps(toolchain.lowered(roundtrip("float32"))[0]).values()
    assert not plain["tf32"]  # control


@pytest.mark.parametrize("where", WHERE)
def test_a_tf32_load_rounds_every_element_to_nearest_even(rng, where, gpu):
    a = _with_ties(rng.uniform(-4, 4, (256, 256)).astype(np.float32))
    out = execute(_tf32_load(), [a, np.full((32, 64), np.nan, np.float32)], where, gpu)[1]
    np.testing.assert_array_equal(out, _tf32(a)[0:32, 32:96])
    plain = execute(roundtrip("float32", (32, 64), start=(0, 32)), [a, np.full_like(out, np.nan)],
                    where, gpu)[1]  # fmt: skip
    np.testing.assert_array_equal(plain, a[0:32, 32:96])  # control: no rounding without it
    assert not np.array_equal(plain, _tf32(a)[0:32, 32:96])


@pytest.mark.parametrize(
    "dtype, config, why",
    [
        ("float16", {"tma_dtype": "tf32"}, "needs a float32 global buffer"),
        ("float32", {"tma_dtype": "fp8"}, "is not a descriptor type this copy takes"),
    ],
)
def test_a_tma_dtype_the_descriptor_cannot_take_declines(dtype, config, why):
    assert why in _reason(roundtrip(dtype, (32, 64), config=config))


def test_a_tma_dtype_on_a_store_declines():
    report = _report(store("float32", (32, 64), config={"tma_dtype": "tf32"}))
    [cand] = [c for c in report.candidates if c.variant == "tma_auto"]
    assert not cand.accepted and "tma_dtype=tf32 on a store" in cand.reason
    assert _report(store("float32", (32, 64))).variant == "tma_auto"  # control


# -- one descriptor per kernel, prefetched ---------------------------------------------------
def two_loads(rows2: int = 64, **config):
    """Two TMA loads of A at two call sites (rows 0-63 and 64 to 64 + rows2 - 1, each into
    its own swizzled tile and on its own mbarrier), both tiles out to B. With ``rows2`` 64
    the two boxes are equal: one descriptor."""
    layout = demos.tma_shared_layout("float16", (64, 64), 128)
    layout2 = demos.tma_shared_layout("float16", (rows2, 64), 128)

    # fmt: off
    @T.prim_func
    def loads(A_ptr: T.handle, B_ptr: T.handle):
        A = T.match_buffer(A_ptr, (256, 64), "float16")
        B = T.match_buffer(B_ptr, (64 + rows2, 64), "float16")
        T.device_entry()
        T.cta_id([1])
        tid = T.thread_id([128])
        pool = T.alloc_buffer((128 * 64 + 8,), "float16", scope="shared.dyn", align=1024)
        A0 = T.decl_buffer((64, 64), "float16", pool.data, scope="shared.dyn", layout=layout)
        A1 = T.decl_buffer((rows2, 64), "float16", pool.data, elem_offset=64 * 64,
                           scope="shared.dyn", layout=layout2)
        bar = T.decl_buffer((2,), "uint64", pool.data, elem_offset=128 * 64 // 4,
                            scope="shared.dyn")
        if tid == 0:
            T.ptx.mbarrier.init.shared.b64(bar.ptr_to([0]), 1)
            T.ptx.mbarrier.init.shared.b64(bar.ptr_to([1]), 1)
        T.cuda.cta_sync()
        if tid == 0:
            Tx.copy_async(A0[:, :], A[0:64, :], mbar=bar.ptr_to([0]), **config)
            T.ptx["mbarrier.arrive.expect_tx.shared.b64"](bar.ptr_to([0]), 8192)
        if tid == 32:
            Tx.copy_async(A1[:, :], A[64:64 + rows2, :], mbar=bar.ptr_to([1]), **config)
            T.ptx["mbarrier.arrive.expect_tx.shared.b64"](bar.ptr_to([1]), rows2 * 128)
        T.cuda.mbarrier_wait(bar.ptr_to([0]), 0)
        T.cuda.mbarrier_wait(bar.ptr_to([1]), 0)
        Tx.cta.copy(B[0:64, :], A0[:, :])
        Tx.cta.copy(B[64:64 + rows2, :], A1[:, :])
    # fmt: on
    return loads


def test_equal_descriptors_of_one_buffer_are_one_tensor_map():
    """Two calls over A with one box share a descriptor: one kernel parameter, one host
    encode (it was one a call site: the key read the buffer's ``.data``, which TVM 0.27
    builds anew at every access). Control: a different box is a second descriptor."""
    host, _ = toolchain.lowered(two_loads())
    assert host.script().count("tensormap_encode_tiled(") == 1
    source = toolchain.cuda_source(two_loads(), "sm_90a")
    assert source.count("CUtensorMap A_tensormap") == 2  # the declaration and the definition
    assert "A_tensormap_1" not in source
    other = toolchain.cuda_source(two_loads(rows2=32), "sm_90a")
    assert "CUtensorMap A_tensormap," in other and "CUtensorMap A_tensormap_1," in other


def test_the_kernel_prefetches_each_descriptor_once_at_its_start():
    source = toolchain.cuda_source(two_loads(rows2=32), "sm_90a")
    body = source[source.index(") {", source.index("loads_kernel(")) :]  # the kernel's body
    calls = [line.strip() for line in body.splitlines() if "ptx_prefetch_tensormap((" in line]
    assert len(calls) == 2 and all("_tensormap" in c for c in calls), calls
    first = body.index("ptx_prefetch_tensormap((")
    assert "((int)threadIdx.x) == 0" in body[max(0, first - 200) : first]  # thread 0
    assert first < body.index("mbarrier_init_init")  # before anything the kernel waits for
    shared = toolchain.cuda_source(two_loads(), "sm_90a")  # one descriptor: one prefetch
    assert shared.count("ptx_prefetch_tensormap((") == 1
    off = toolchain.cuda_source(two_loads(prefetch_tensormap=False), "sm_90a")
    assert "ptx_prefetch_tensormap((" not in off  # control: asked not to


def test_prefetched_loads_simulate_right_and_count_the_prefetch(rng):
    a = runtime.random_array((256, 64), "float16", rng)
    for config, prefetches in (({}, 1), ({"prefetch_tensormap": False}, 0)):
        out = sim.run(two_loads(**config), [a, runtime.poison_like(np.zeros((128, 64), a.dtype))])
        np.testing.assert_array_equal(runtime.bits(out[1]), runtime.bits(a[0:128]))
        assert out.counters.instructions["prefetch.tensormap"] == prefetches


def test_explain_says_whether_the_descriptor_is_prefetched():
    plan = _plan(tvm_style_load(align=1024))
    assert plan.prefetch and "prefetch.tensormap" in plan.facts()["prefetch"]
    off = _plan(tvm_style_load(align=1024, prefetch_tensormap=False))
    assert not off.prefetch and "not prefetched" in str(off.tensor_map())


def test_a_prefetch_flag_that_is_not_a_constant_declines():
    """A flag only known at run time (here a variable: explain() plans, it does not run)
    declines; the control: the constant 1."""
    flag = tirx.Var("f", "int32")
    assert "prefetch_tensormap=f (Var) is not a constant" in _reason(
        tvm_style_load(align=1024, prefetch_tensormap=flag)
    )
    assert _report(tvm_style_load(align=1024, prefetch_tensormap=1)).variant == "tma_auto"


def offset_view_load(offset: int):
    """A TMA load from ``V``, a (64, 64) view ``offset`` elements into A's data."""
    layout = demos.tma_shared_layout("float16", (64, 64), 128)

    # fmt: off
    @T.prim_func
    def view_load(A_ptr: T.handle, B_ptr: T.handle):
        A = T.match_buffer(A_ptr, (256, 64), "float16")
        B = T.match_buffer(B_ptr, (64, 64), "float16")
        V = T.decl_buffer((64, 64), "float16", A.data, elem_offset=offset)
        T.device_entry()
        T.cta_id([1])
        tid = T.thread_id([128])
        bar = T.alloc_shared([1], "uint64")
        A_s = T.alloc_buffer((64, 64), "float16", scope="shared", align=1024, layout=layout)
        if tid == 0:
            T.ptx.mbarrier.init.shared.b64(bar.ptr_to([0]), 1)
        T.cuda.cta_sync()
        if tid == 0:
            Tx.copy_async(A_s[:, :], V[:, :], mbar=bar.ptr_to([0]))
            T.ptx["mbarrier.arrive.expect_tx.shared.b64"](bar.ptr_to([0]), 8192)
        T.cuda.mbarrier_wait(bar.ptr_to([0]), 0)
        Tx.cta.copy(B[:, :], A_s[:, :])
    # fmt: on
    return view_load


def test_a_global_view_into_its_data_declines(rng):
    """The host encodes a tensor map from the data's own address, so a view 4,096 elements
    in (rows 64-127 of A) would have loaded rows 0-63: ours declines naming the offset.
    The control: the view at offset 0 lowers and round-trips."""
    why = _reason(offset_view_load(4096))
    assert "src V is a view 4096 elements into its data" in why
    with pytest.raises(tcd.DispatchError, match="a view 4096 elements into its data"):
        toolchain.cuda_source(offset_view_load(4096), pipeline=tcd.STRICT_PIPELINE)
    assert _report(offset_view_load(0)).variant == "tma_auto"
    a = runtime.random_array((256, 64), "float16", rng)
    out = sim.run(offset_view_load(0), [a, runtime.poison_like(np.zeros((64, 64), a.dtype))])
    np.testing.assert_array_equal(runtime.bits(out[1]), runtime.bits(a[0:64]))
