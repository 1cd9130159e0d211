"""copy_async -> ldgsts: plans, declines, the emitted cp.async (CUDA text and SASS), and
round trips in the simulator and on the GPU."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest
import tvm
from tvm import sym
from tvm.script import tirx as T
from tvm.script.tirx import tile as Tx
from tvm.tirx.layout import Axis, ComposeLayout, S, TileLayout

import tirx_cuda_dispatch as tcd
from executors import execute
from tirx_cuda_dispatch import demos, runtime, sim, toolchain
from tirx_cuda_dispatch.copy_async.ldgsts import LdgstsPlan
from tirx_cuda_dispatch.layout.partition import PiecewisePartition
from tirx_cuda_dispatch.resources import Completion

SWIZZLE_128B_F16 = ComposeLayout(3, 3, 3, TileLayout(S[64 * 64 : 1]))  # 128-byte rows of fp16
SWIZZLE_64B_F32 = ComposeLayout(2, 2, 3, TileLayout(S[(32, 16) : (16, 1)]))
TARGET = tvm.target.Target({"kind": "cuda", "arch": "sm_90a"})
ELEMENT_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "uint8": 1, "int8": 1}

# The simulator calls the emitted code and the caller's commit / wait make. They are being
# added to the simulator (sim/asynchrony.py); until they are, its round trips skip.
CP_ASYNC_CALLS = {
    f"tirx.ptx.{name}"
    for name in (
        "cp_async_cg",
        "cp_async_ca",
        "cp_async_cg_src_size",
        "cp_async_ca_src_size",
        "cp_async_commit_group",
        "cp_async_wait_group",
    )
}
SIM_MISSING = sorted(CP_ASYNC_CALLS - set(sim.CALLS))
needs_sim_cp_async = pytest.mark.skipif(
    bool(SIM_MISSING),
    reason="the simulator has no cp.async yet (sim.CALLS lacks " + ", ".join(SIM_MISSING) + ")",
)
WHERE = [
    pytest.param("sim", marks=needs_sim_cp_async, id="sim"),
    pytest.param("gpu", marks=pytest.mark.gpu, id="gpu"),
]


# -- kernels ------------------------------------------------------------------------------
roundtrip = demos.ldgsts_roundtrip  # A -> shared (copy_async) -> B; the fuzzer draws it too


def thread_rows(dtype="uint8", threads=32, cols=16, config=None, scope="thread"):
    """TVM's own test form: each thread copies its row of A (one 16-byte access) into
    shared memory, then back to B after the wait."""
    config = config or (lambda tid: {})
    copy_async = Tx.copy_async if scope == "thread" else getattr(Tx, scope).copy_async

    # fmt: off
    @T.prim_func
    def kernel(A_ptr: T.handle, B_ptr: T.handle):
        A = T.match_buffer(A_ptr, (threads, cols), dtype, layout=TileLayout(S[threads, cols]))
        B = T.match_buffer(B_ptr, (threads, cols), dtype, layout=TileLayout(S[threads, cols]))
        T.device_entry()
        T.cta_id([1])
        T.warp_id([threads // 32])
        T.lane_id([32])
        tid = T.thread_id([threads])
        A_s = T.alloc_buffer((threads, cols), dtype, scope="shared",
                             layout=TileLayout(S[threads, cols]))
        copy_async(A_s[tid, :], A[tid, :], dispatch="ldgsts", **config(tid))
        T.ptx.cp.async_.commit_group()
        T.ptx.cp.async_.wait_group(0)
        T.cuda.cta_sync()
        Tx.copy(B[tid, :], A_s[tid, :])
    # fmt: on
    return kernel


def to_shared_and_back(src_scope="global", dst_scope="shared", dtype="float32"):
    """A warp's copy_async from a ``src_scope`` tile to a ``dst_scope`` one (for declines)."""
    reg_layout = TileLayout(S[(32, 8) : (1 @ Axis.laneid, 1)])

    def tile(scope):
        if scope == "local":
            return T.alloc_buffer((32, 8), dtype, scope="local", layout=reg_layout)
        return T.alloc_buffer((32, 8), dtype, scope="shared", layout=TileLayout(S[(32, 8)]))

    @T.prim_func
    def kernel(A_ptr: T.handle):
        A = T.match_buffer(A_ptr, (32, 8), dtype)
        T.device_entry()
        T.cta_id([1])
        T.warp_id([1])
        T.lane_id([32])
        T.thread_id([32])
        X = tile(src_scope) if src_scope != "global" else A
        Y = tile(dst_scope) if dst_scope != "global" else A
        Tx.warp.copy_async(Y[:, :], X[:, :])

    return kernel


def _ldgsts(func, arch="sm_90a") -> tcd.CallReport:
    """The report of the kernel's one copy_async call."""
    [report] = [r for r in tcd.explain(func, arch) if r.op == "copy_async"]
    return report


def _reason(func, arch="sm_90a") -> str:
    report = _ldgsts(func, arch)
    assert report.variant != "ldgsts"
    [cand] = [c for c in report.candidates if c.variant == "ldgsts"]
    return cand.reason


def _plan(func, arch="sm_90a") -> LdgstsPlan:
    report = _ldgsts(func, arch)
    assert report.variant == "ldgsts", report
    return report.plan_object


# -- plans --------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["float32", "float16", "uint8"])
@pytest.mark.parametrize("scope, threads", [("warp", 32), ("warpgroup", 128), ("cta", 256)])
def test_aligned_tiles_take_16_byte_cg_accesses(dtype, scope, threads):
    plan = _plan(roundtrip(dtype, (64, 64), scope, threads))
    vec = 16 // ELEMENT_BYTES[dtype]
    assert (plan.vec_bits, plan.vec, plan.threads) == (128, vec, threads)
    assert plan.outer == 64 * 64 // (threads * vec) and not plan.masked
    assert plan.instruction(128) == "cp.async.cg.shared.global"
    assert "L2 only" in plan.facts()["cache_operator"]


def test_unforced_global_to_shared_copy_async_is_ours():
    report = _ldgsts(roundtrip(dispatch=None))
    assert report.variant == "ldgsts"
    [cand] = [c for c in report.candidates if c.variant == "tcgen05_ldst"]
    assert not cand.accepted


@pytest.mark.parametrize("offset, bits", [(2, 64), (1, 32), (4, 128)])
def test_alignment_picks_the_access_width_and_ca_below_16_bytes(offset, bits):
    plan = _plan(roundtrip("float32", (16, 32), "warp", cols=96, col_offset=offset))
    assert set(plan.widths) == {bits}
    op = "cg" if bits == 128 else "ca"
    assert plan.facts()["ptx"] == [f"cp.async.{op}.shared.global [dst], [src], {bits // 8}"]
    if bits < 128:
        assert "base offset" in plan.facts()["narrower_because"]
        assert "cg takes 16-byte accesses only" in plan.facts()["cache_operator"]


def test_cache_hint_ca_keeps_16_byte_accesses_in_l1():
    plan = _plan(roundtrip(config=lambda tid, bx: {"cache": "ca"}))
    assert plan.widths == (128,) and plan.instruction(128) == "cp.async.ca.shared.global"
    assert plan.facts()["cache_operator"] == "cache='ca': L1 and L2"


def test_cache_cg_needs_16_byte_accesses():
    cg = lambda tid, bx: {"cache": "cg"}  # noqa: E731
    misaligned = roundtrip("float32", (16, 32), "warp", cols=96, col_offset=2, config=cg)
    assert "cache='cg' but the region also needs 8-byte accesses" in _reason(misaligned)
    aligned = roundtrip("float32", (16, 32), "warp", config=cg)
    assert _plan(aligned).instruction(128) == "cp.async.cg.shared.global"  # the control


@pytest.mark.parametrize("value, spelled", [(64, "64"), (128, "128"), ("L2::256B", "256")])
def test_prefetch_size_lands_in_the_instruction(value, spelled):
    plan = _plan(roundtrip(config=lambda tid, bx: {"prefetch_size": value}))
    assert plan.instruction(128) == f"cp.async.cg.shared.global.L2::{spelled}B"
    none = _plan(roundtrip(config=lambda tid, bx: {"prefetch_size": -1}))  # TVM's "none"
    assert none.instruction(128) == "cp.async.cg.shared.global"


# Odd tiles: the element counts do not divide into threads x vector.
ODD_TILES = [
    ("float32", (30, 100), "cta", 128),
    ("float16", (48, 40), "cta", 128),
    ("bfloat16", (5, 70), "cta", 128),
    ("float16", (48, 40), "cta", 256),
    ("float32", (4, 6), "warp", 32),
    ("uint8", (6, 20), "warp", 32),
]


def _concrete(partition, bx: int = 0):
    """The partition with its base offsets evaluated for CTA ``bx`` (its only variable)."""

    def ev(base):
        if isinstance(base, int):
            return base
        ana = sym.Analyzer()
        for var in tvm.tirx.analysis.undefined_vars(base):
            ana.bind(var, bx)
        return int(ana.simplify(base))

    if isinstance(partition, PiecewisePartition):
        pieces = tuple(
            dataclasses.replace(p, bases=tuple(ev(b) for b in p.bases)) for p in partition.pieces
        )
        return dataclasses.replace(partition, pieces=pieces)
    return dataclasses.replace(partition, bases=tuple(ev(b) for b in partition.bases))


def _case_id(case: dict) -> str:
    """A test id: the case's values, a layout named by its kind."""
    return "-".join(
        "swizzled" if isinstance(v, ComposeLayout) else str(v).replace(" ", "")
        for v in case.values()
    )


def _moves(plan: LdgstsPlan) -> list[tuple[int, int]]:
    """(global offset, shared offset) of every element the plan moves (CTA 0)."""
    p = _concrete(plan.partition)
    moved = []
    for g, s in zip(p.accesses(0), p.accesses(1), strict=True):
        assert (g.round, g.thread, g.elements) == (s.round, s.thread, s.elements)
        assert g.offset % g.elements == 0 and s.offset % s.elements == 0  # aligned access
        assert g.elements * plan.elem_bits in (32, 64, 128)  # a cp-size of 4, 8 or 16
        moved += [(g.offset + k, s.offset + k) for k in range(g.elements)]
    return moved


def _expected_moves(tile, cols, c0, s_layout):
    tm, tn = tile
    return sorted(
        (r * cols + c0 + c, int(s_layout.apply(r * tn + c)["m"]))
        for r in range(tm)
        for c in range(tn)
    )


@pytest.mark.parametrize("dtype, tile, scope, threads", ODD_TILES)
def test_odd_tiles_are_masked_and_move_every_element_once(dtype, tile, scope, threads):
    plan = _plan(roundtrip(dtype, tile, scope, threads))
    assert plan.masked and isinstance(plan.partition, PiecewisePartition)
    assert sorted(_moves(plan)) == _expected_moves(tile, tile[1], 0, TileLayout(S[tile]))
    assert all(piece.threads == threads for piece in plan.partition.pieces)


def test_odd_runs_take_narrower_pieces():
    """5x70 bfloat16: 350 contiguous elements, 43 16-byte accesses, then an 8-byte and a
    4-byte one; each width its own instruction."""
    plan = _plan(roundtrip("bfloat16", (5, 70), "cta", 128))
    assert plan.widths == (128, 64, 32)
    assert [p.count * p.vec for p in plan.partition.pieces] == [344, 4, 2]
    assert plan.facts()["ptx"] == [
        "cp.async.cg.shared.global [dst], [src], 16",
        "cp.async.ca.shared.global [dst], [src], 8",
        "cp.async.ca.shared.global [dst], [src], 4",
    ]


MAPPING_CASES = [
    dict(dtype="float16", tile=(64, 64), scope="warpgroup", shared_layout=SWIZZLE_128B_F16),
    dict(dtype="float32", tile=(32, 16), scope="warp", shared_layout=SWIZZLE_64B_F32),
    dict(dtype="float32", tile=(16, 32), scope="warp", cols=96, col_offset=2),
    dict(dtype="bfloat16", tile=(16, 32), scope="warp", cols=80, col_offset=6),
    dict(dtype="uint8", tile=(32, 32), scope="warp", cols=64, col_offset=4),
]


@pytest.mark.parametrize("case", MAPPING_CASES, ids=_case_id)
def test_plan_moves_every_element_once_to_its_place(case):
    tm, tn = case["tile"]
    s_layout = case.get("shared_layout") or TileLayout(S[(tm, tn)])
    plan = _plan(roundtrip(**case))
    expected = _expected_moves(
        case["tile"], case.get("cols", tn), case.get("col_offset", 0), s_layout
    )
    assert sorted(_moves(plan)) == expected
    if "shared_layout" in case:
        assert plan.facts()["swizzle"].startswith("Swizzle<")


def test_the_check_catches_a_wrong_mapping():
    """The control of the mapping check: an unswizzled expectation fails on a swizzle."""
    plan = _plan(roundtrip("float16", (64, 64), "warpgroup", shared_layout=SWIZZLE_128B_F16))
    assert sorted(_moves(plan)) != _expected_moves((64, 64), 64, 0, TileLayout(S[(64, 64)]))


def test_narrowed_scope_splits_among_the_lanes_that_run():
    @T.prim_func
    def kernel(A_ptr: T.handle):
        A = T.match_buffer(A_ptr, (16, 32), "float32")
        T.device_entry()
        T.cta_id([1])
        T.warp_id([1])
        lane = T.lane_id([32])
        T.thread_id([32])
        A_s = T.alloc_buffer((16, 32), "float32", scope="shared", layout=TileLayout(S[(16, 32)]))
        if lane < 16:
            Tx.warp.copy_async(A_s[:, :], A[:, :])

    assert _plan(kernel).threads == 16


# -- config: predicate, fill_mode, direct ---------------------------------------------------
def test_predicate_with_zero_fill_uses_src_size():
    plan = _plan(roundtrip(config=lambda tid, bx: {"predicate": tid < 100, "fill_mode": "zero"}))
    facts = plan.facts()
    assert facts["predicate"] == "tid < 100" and facts["predicated_off"].startswith("zero-filled")
    assert facts["ptx"] == ["cp.async.cg.shared.global [dst], [src], 16, src-size"]


def test_predicate_without_fill_mode_skips():
    plan = _plan(roundtrip(config=lambda tid, bx: {"predicate": tid < 100}))
    assert plan.facts()["predicated_off"].startswith("skipped")
    assert plan.facts()["ptx"] == ["cp.async.cg.shared.global [dst], [src], 16"]


def test_tvm_no_predicate_value_and_fill_mode_alone():
    plan = _plan(roundtrip(config=lambda tid, bx: {"predicate": -1, "fill_mode": "zero"}))
    assert "predicate" not in plan.facts() and not plan.zero_fills
    assert plan.facts()["fill_mode"].startswith("zero, but no predicate")


def test_tvm_thread_scope_direct_form():
    """TVM 0.27's own test of the form: one 16-byte access per thread, prefetch, zero fill."""
    config = lambda tid: dict(  # noqa: E731
        direct=True, prefetch_size=128, predicate=tid < 16, fill_mode="zero"
    )
    func = thread_rows(config=config)
    plan = _plan(func)
    assert (plan.outer, plan.threads, plan.widths) == (1, 1, (128,)) and plan.config.direct
    src = toolchain.cuda_source(func, "sm_100a")
    assert "cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;" in src


def test_direct_declines_what_is_not_one_access():
    wide = thread_rows(cols=32, config=lambda tid: {"direct": True})
    assert _reason(wide).startswith("direct=True: A[tid:tid+1, 0:32] (global uint8) is not one")
    assert _plan(thread_rows(cols=32)).outer == 2  # the control: without direct, two accesses
    cta = roundtrip(config=lambda tid, bx: {"direct": True})
    assert "direct=True is TVM's thread-scope form" in _reason(cta)


@pytest.mark.parametrize(
    "config, words",
    [
        ({"evict": "first"}, ["config evict=first is not a key cp.async takes", "predicate ("]),
        ({"l1_evict": "L1::evict_last"}, ["l1_evict=L1::evict_last: cp.async has no L1 evict"]),
        ({"l2_evict": "L2::evict_last"}, ["(.L2::cache_hint with a createpolicy operand)"]),
        ({"prefetch_size": 100}, ["prefetch_size=100 is not one cp.async has", "[64, 128, 256]"]),
        ({"fill_mode": "ones"}, ["fill_mode='ones' is not one of ['zero']"]),
        ({"cache": "nc"}, ["cache='nc' is not one of ['ca', 'cg']"]),
        ({"direct": "yes"}, ["direct='yes' is not a flag"]),
        ({"predicate": 1.5}, ["predicate=1.5 is a float"]),
    ],
    ids=["unknown-key", "l1-evict", "l2-evict", "prefetch", "fill", "cache", "direct", "predicate"],
)
def test_declines_unknown_keys_and_values(config, words):
    reason = _reason(roundtrip(config=lambda tid, bx: config))
    for w in words:
        assert w in reason, reason


def test_every_key_tvm_reads_is_accepted():
    """The control of the key check: TVM 0.27's ldgsts keys (and ours) all together."""
    config = lambda tid, bx: dict(  # noqa: E731
        predicate=tid < 64, fill_mode="zero", prefetch_size=256, direct=False, cache="cg"
    )
    assert _plan(roundtrip(config=config)).instruction(128) == "cp.async.cg.shared.global.L2::256B"


def test_a_float_predicate_expression_declines():
    config = lambda tid, bx: {"predicate": T.float32(tid) * T.float32(0.5)}  # noqa: E731
    assert "is float32; needs a bool or integer condition" in _reason(roundtrip(config=config))
    config = lambda tid, bx: {"predicate": tid % 2}  # noqa: E731  (the control: an integer)
    assert _plan(roundtrip(config=config)).facts()["predicate"] == "tid % 2 != 0"


# -- declines -----------------------------------------------------------------------------
def test_declines_shared_to_global():
    reason = _reason(to_shared_and_back("shared", "global"))
    assert reason.startswith(
        "src X is shared and dst Y is global; cp.async copies global -> shared only"
    )
    assert _plan(to_shared_and_back("global", "shared")).widths == (128,)  # the control


@pytest.mark.parametrize("src, dst", [("local", "shared"), ("global", "local")])
def test_declines_register_operands(src, dst):
    reason = _reason(to_shared_and_back(src, dst))
    assert "is local (registers); cp.async copies global memory into shared memory" in reason


def test_declines_a_2_byte_aligned_region_naming_operand_and_alignment():
    reason = _reason(roundtrip("float16", (32, 32), "warp", cols=64, col_offset=1))
    assert reason.startswith("no cp.async access fits A[0:32, 1:33] (global float16)")
    assert "has no 1- or 2-byte form" in reason
    assert "src A starts at a 2-byte aligned address" in reason
    assert "dst A_s starts at a 16-byte aligned address" in reason
    # The control: two elements further the region is 4-byte aligned, and 4-byte accesses fit.
    assert _plan(roundtrip("float16", (32, 32), "warp", cols=64, col_offset=2)).widths == (32,)


def test_declines_a_run_that_leaves_2_bytes():
    reason = _reason(roundtrip("bfloat16", (5, 35), "cta", 128))
    assert "1 elements (16 bits) are left of each contiguous run of 175 after 174" in reason
    assert _plan(roundtrip("bfloat16", (5, 36), "cta", 128)).masked  # the control


@pytest.mark.parametrize("arch, ok", [("sm_75", False), ("sm_80", True), ("sm_86", True)])
def test_needs_sm_80(arch, ok):
    func = roundtrip()
    if ok:
        assert _plan(func, arch).widths == (128,)
    else:
        assert _reason(func, arch) == (
            "cp.async needs sm_80 or newer; target is sm_75; use a synchronous "
            "Tx.copy (copy -> gmem_smem) there"
        )


def test_forced_dispatch_that_declines_is_an_error_naming_the_rule():
    func = roundtrip("float16", (32, 32), "warp", cols=64, col_offset=1)
    with pytest.raises(tcd.DispatchError) as err:
        with TARGET:
            tvm.compile(func, target=TARGET, tir_pipeline=tcd.PIPELINE)
    msg = str(err.value)
    assert "dispatch='ldgsts' was forced and declined" in msg and "no 1- or 2-byte form" in msg


def test_out_of_bounds_region_is_an_error():
    @T.prim_func
    def kernel(A_ptr: T.handle):
        A = T.match_buffer(A_ptr, (32, 32), "float32")
        T.device_entry()
        bx = T.cta_id([2])
        T.warp_id([1])
        T.lane_id([32])
        T.thread_id([32])
        A_s = T.alloc_buffer((32, 32), "float32", scope="shared", layout=TileLayout(S[(32, 32)]))
        Tx.warp.copy_async(A_s[:, :], A[bx * 16 : bx * 16 + 32, :])

    assert _ldgsts(kernel).error.startswith("region out of bounds")
    assert _ldgsts(roundtrip("float32", (16, 32), "warp", ctas=2)).error is None  # the control


# -- explain and the completion ---------------------------------------------------------------
def test_explain_shows_the_completion_contract():
    reports = tcd.explain(roundtrip(), "sm_90a")
    [async_call] = [r for r in reports if r.op == "copy_async"]
    completion = Completion(
        "cp.async group",
        "the caller commits (cp.async.commit_group) and waits (cp.async.wait_group N) then "
        "syncs the CTA before reading dst",
    )
    assert async_call.resources == [str(completion)]
    assert f"resource: {completion}" in str(async_call)
    [sync_copy] = [r for r in reports if r.op == "copy"]
    assert sync_copy.resources == []  # the control: a synchronous copy completes itself


# -- emitted code -------------------------------------------------------------------------
def _kernel_text(func, arch="sm_90a"):
    src = toolchain.cuda_source(func, arch)
    return src, src[src.rindex('extern "C" __global__') :]


def test_cuda_issues_cp_async_and_leaves_commit_and_wait_to_the_caller():
    src, kernel = _kernel_text(roundtrip("float16", (64, 64), "cta", 128))
    assert "cp.async.cg.shared.global [%0], [%1], 16;" in src
    assert kernel.count("tvm_builtin_ptx_cp_async_cg_") == 1  # one call in the round loop
    assert kernel.count("commit_group();") == 1 and kernel.count("wait_group_0();") == 1  # user's
    assert kernel.count("cta_sync") == 1


def test_masked_cuda_has_one_thread_predicate_and_a_select_for_zero_fill():
    config = lambda tid, bx: {"predicate": tid < 100, "fill_mode": "zero"}  # noqa: E731
    src, kernel = _kernel_text(roundtrip("float32", (30, 100), "cta", 128, config=config))
    assert "cp.async.cg.shared.global [%0], [%1], 16, %2;" in src
    assert kernel.count("if (((int)threadIdx.x) < 110)") == 2  # cp.async's round, copy back's
    # src-size is a select of two constants in the full and the tail rounds, not a branch
    assert kernel.count("(((int)threadIdx.x) < 100) ? (uint)16 : (uint)0)") >= 2
    assert "if (((int)threadIdx.x) < 100)" not in kernel


def test_skipping_predicate_is_a_branch_without_src_size():
    config = lambda tid, bx: {"predicate": tid < 100}  # noqa: E731
    src, kernel = _kernel_text(roundtrip("float32", (32, 32), "cta", 128, config=config))
    assert "cp.async.cg.shared.global [%0], [%1], 16;" in src and "16, %2" not in src
    assert kernel.count("if (((int)threadIdx.x) < 100)") == 1


def _memory_ops(func, arch):
    ops = toolchain.opcodes(toolchain.kernel_sass(func, arch))
    return {
        k: n for k, n in ops.items() if k.startswith(("LDG", "STG", "LDS", "STS", "LDL", "STL"))
    }


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize(
    "case, width",
    [
        (dict(dtype="float32", tile=(32, 32), scope="cta"), "128"),
        (dict(dtype="float32", tile=(16, 32), scope="warp", cols=96, col_offset=2), "64"),
        (dict(dtype="float32", tile=(16, 32), scope="warp", cols=96, col_offset=1), ""),
    ],
    ids=["16B", "8B", "4B"],
)
def test_sass_has_ldgsts_and_no_local_memory(case, width, arch):
    ops = _memory_ops(roundtrip(**case), arch)
    ldgsts = {k: n for k, n in ops.items() if k.startswith("LDGSTS")}
    assert ldgsts and not any(k.startswith(("LDL", "STL")) for k in ops), ops
    # .64 / .128 for 8- and 16-byte accesses, no width suffix for 4 bytes
    assert {k.split(".")[-1] if k.split(".")[-1] in ("64", "128") else "" for k in ldgsts} == {
        width
    }, ldgsts
    if width == "128":
        assert all("BYPASS" in k for k in ldgsts)  # .cg: L2 only
    assert not any(k.startswith("LDG.") for k in ops)  # no synchronous global load


def _ldgsts_lines(func):
    sass = toolchain.kernel_sass(func, "sm_90a")
    return [line.split("*/", 1)[1].strip() for line in sass.splitlines() if "LDGSTS" in line]


def test_sass_zero_fill_ignores_the_source_and_skip_is_a_guard():
    """ptxas turns the src-size select into LDGSTS's ignore-src predicate operand (no
    branch, the copy always writes); the skipping form is a guarded LDGSTS. Each check is
    the other's control."""
    zero = _ldgsts_lines(
        roundtrip(config=lambda tid, bx: {"predicate": tid < 100, "fill_mode": "zero"})
    )
    skip = _ldgsts_lines(roundtrip(config=lambda tid, bx: {"predicate": tid < 100}))
    for lines, guarded in ((zero, False), (skip, True)):
        assert lines and all(line.startswith("@") == guarded for line in lines), lines
        assert all(re.search(r", !?P\d+ ;$", line) is not None for line in lines) != guarded


def test_the_sass_checks_catch_a_synchronous_copy_and_local_memory():
    """Controls: the synchronous copy has no LDGSTS; a spilled array shows LDL/STL."""
    sync = demos.gmem_smem_roundtrip("float32", (32, 32), "cta", cta_threads=128)
    ops = _memory_ops(sync, "sm_90a")
    assert not any(k.startswith("LDGSTS") for k in ops) and any(k.startswith("LDG") for k in ops)
    spill = toolchain.opcodes(toolchain.sass(toolchain.nvrtc_compile(_SPILL, "sm_90a")))
    assert any(k.startswith(("LDL", "STL")) for k in spill)


# A register array indexed by a value known only at run time lives in local memory.
_SPILL = """
extern "C" __global__ void spill(float* out, int n) {
  float a[256];
  for (int k = 0; k < 256; ++k) a[k] = out[k];
  for (int k = 0; k < n; ++k) a[(k * 7) & 255] += out[k & 255];
  out[threadIdx.x] = a[n & 255];
}
"""


# -- round trips ----------------------------------------------------------------------------
def _run(func, shape, dtype, rng, where, gpu, init=None):
    """A random, B poisoned (and C, the shared tile's first contents, when given) through
    the kernel; A and B's bits as the kernel left them. C is always passed: the host
    function keeps it even where the device kernel, not reading it, drops it."""
    a = runtime.random_array(shape, dtype, rng)
    b = runtime.poison_like(a)
    arrays = [a, b, init if init is not None else runtime.poison_like(a)]
    out = execute(func, arrays, where, gpu)
    return a, runtime.bits(out[1])


ROUNDTRIPS = [
    dict(dtype="float32", tile=(32, 32), scope="warp", ctas=2),
    dict(dtype="float16", tile=(64, 32), scope="cta", threads=256, ctas=2),
    dict(dtype="uint8", tile=(32, 64), scope="warpgroup", ctas=2),
    dict(dtype="float32", tile=(30, 100), scope="cta", threads=128, ctas=2),
    dict(dtype="float16", tile=(48, 40), scope="cta", threads=128, ctas=2),
    dict(dtype="bfloat16", tile=(5, 70), scope="cta", threads=128, ctas=2),
    dict(dtype="float16", tile=(64, 64), scope="warpgroup", ctas=2, shared_layout=SWIZZLE_128B_F16),
    dict(dtype="float32", tile=(32, 16), scope="warp", ctas=2, shared_layout=SWIZZLE_64B_F32),
    dict(dtype="float32", tile=(16, 32), scope="warp", ctas=2, cols=96, col_offset=2),
    dict(dtype="float32", tile=(16, 32), scope="warp", ctas=2, cols=96, col_offset=1),
]


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("case", ROUNDTRIPS, ids=_case_id)
def test_roundtrip(case, rng, where, gpu):
    tm, tn = case["tile"]
    cols, c0, ctas = case.get("cols", tn), case.get("col_offset", 0), case["ctas"]
    a, out = _run(roundtrip(**case), (ctas * tm, cols), case["dtype"], rng, where, gpu)
    expected = runtime.bits(runtime.poison_like(a)).copy()
    expected[:, c0 : c0 + tn] = runtime.bits(a)[:, c0 : c0 + tn]
    np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("fill", [True, False], ids=["zero-fill", "skip"])
@pytest.mark.parametrize("dtype, tile", [("float32", (30, 100)), ("float16", (64, 64))])
def test_cta_uniform_predicate(dtype, tile, fill, rng, where, gpu):
    """CTA 0 copies, CTA 1 is predicated off: its tile is zeros (fill_mode="zero") or
    what the shared tile held before (C's tile: skipped)."""

    def config(tid, bx):
        return {"predicate": bx < 1, **({"fill_mode": "zero"} if fill else {})}

    tm, tn = tile
    func = roundtrip(dtype, tile, "cta", 128, ctas=2, config=config, init=True)
    c = runtime.random_array((2 * tm, tn), dtype, rng)
    a, out = _run(func, (2 * tm, tn), dtype, rng, where, gpu, init=c)
    expected = runtime.bits(a).copy()
    expected[tm:] = 0 if fill else runtime.bits(c)[tm:]
    np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("dtype, tile", [("float32", (30, 100)), ("bfloat16", (30, 70))])
def test_per_thread_predicate_zero_fills_the_slices_of_the_threads_it_turns_off(
    dtype, tile, rng, where, gpu
):
    """``predicate=tid < 50``: what a thread at or past 50 would move is zero; which
    elements those are is the plan's partition (this checks the code against the plan)."""
    config = lambda tid, bx: {"predicate": tid < 50, "fill_mode": "zero"}  # noqa: E731
    func = roundtrip(dtype, tile, "cta", 128, config=config)
    p = _concrete(_plan(func).partition)
    off = np.zeros(tile[0] * tile[1], dtype=bool)
    for acc in p.accesses(0):
        off[acc.offset : acc.offset + acc.elements] = acc.thread >= 50
    assert off.any() and not off.all()
    a, out = _run(func, tile, dtype, rng, where, gpu)
    expected = runtime.bits(a).copy().reshape(-1)
    expected[off] = 0
    np.testing.assert_array_equal(out.reshape(-1), expected)


@pytest.mark.parametrize("where", WHERE)
def test_tvm_thread_scope_form_roundtrip(rng, where, gpu):
    config = lambda tid: dict(  # noqa: E731
        direct=True, prefetch_size=128, predicate=tid < 16, fill_mode="zero"
    )
    a = runtime.random_array((32, 16), "uint8", rng)
    out = execute(thread_rows(config=config), [a, runtime.poison_like(a)], where, gpu)
    expected = a.copy()
    expected[16:] = 0
    np.testing.assert_array_equal(out[1], expected)
