"""copy -> ldstmatrix (seed 002): plans, declines, SASS, GPU round trips and fragments."""

from __future__ import annotations

import numpy as np
import pytest
from tvm.backend.cuda.tile_primitive.tma_utils import SwizzleMode, mma_shared_layout
from tvm.tirx.layout import Axis, ComposeLayout, S, TileLayout

import tirx_cuda_dispatch as tcd
from executors import WHERE, execute
from tirx_cuda_dispatch import demos, runtime, toolchain

lane = Axis.laneid
WARP_AXIS = {"warp": None, "warpgroup": Axis.wid_in_wg, "cta": Axis.warpid}
SCOPE_WARPS = {"warp": 1, "warpgroup": 4, "cta": 4}


def fragment(num: int, row_blocks: int = 1, scope: str = "warp", col_groups: int = 1):
    """An m8n8 fragment layout: each warp holds ``row_blocks`` x ``col_groups`` x ``num``
    8x8 matrices side by side; lane i holds row i // 4, columns 2 (i % 4) + {0, 1}.
    Returns (layout, tile shape, registers per thread)."""
    warps, axis = SCOPE_WARPS[scope], WARP_AXIS[scope]
    extents = (row_blocks, 8, col_groups, num, 4, 2)
    strides = (col_groups * num * 2, 4 @ lane, num * 2, 2, 1 @ lane, 1)
    if warps > 1:
        extents, strides = (warps, *extents), (1 @ axis, *strides)
    shape = (warps * row_blocks * 8, col_groups * num * 8)
    return TileLayout(S[extents:strides]), shape, row_blocks * col_groups * num * 2


def row_major(shape):
    return TileLayout(S[shape])


def column_major(shape):
    return TileLayout(S[shape : (1, shape[0])])


# The m16n8k16 A fragment: a0a1 (g, 2c), a2a3 (g+8, 2c), a4a5 (g, 2c+8), a6a7 (g+8, 2c+8).
A_FRAGMENT = TileLayout(S[(2, 8, 2, 4, 2) : (2, 4 @ lane, 4, 1 @ lane, 1)])


def _reports(func, arch="sm_90a", variant="ldstmatrix"):
    return [r for r in tcd.explain(func, arch) if r.variant == variant]


def _reason(func, arch="sm_90a", call=0):
    shared_copies = [
        r
        for r in tcd.explain(func, arch)
        if sorted(o["scope"] for o in r.operands) == ["local", "shared"]
    ]
    [cand] = [c for c in shared_copies[call].candidates if c.variant == "ldstmatrix"]
    assert not cand.accepted
    return cand.reason, shared_copies[call].variant


# -- plans --------------------------------------------------------------------------------
CASES = {
    # name: (layout, shape, regs, scope, cta threads, shared layout maker, (num, trans, m_outer))
    **{
        f"warp_x{num}{'_trans' if trans else ''}": (
            *fragment(num),
            "warp",
            None,
            column_major if trans else row_major,
            (num, trans, 1),
        )
        for num in (1, 2, 4)
        for trans in (False, True)
    },
    "warp_x4_m_outer2": (*fragment(4, row_blocks=2), "warp", None, row_major, (4, False, 2)),
    "warp_x4_m_outer2_trans": (
        *fragment(4, row_blocks=2),
        "warp",
        None,
        column_major,
        (4, True, 2),
    ),
    "warp_x1_pairs_into_x2": (*fragment(1, row_blocks=2), "warp", None, row_major, (2, False, 1)),
    "warp_x4_m_outer4": (
        *fragment(4, row_blocks=2, col_groups=2),
        "warp",
        None,
        row_major,
        (4, False, 4),
    ),
    "warpgroup_x2": (*fragment(2, scope="warpgroup"), "warpgroup", None, row_major, (2, False, 1)),
    "warpgroup_x4_trans": (
        *fragment(4, scope="warpgroup"),
        "warpgroup",
        None,
        column_major,
        (4, True, 1),
    ),
    "cta_x4": (*fragment(4, scope="cta"), "cta", 128, row_major, (4, False, 1)),
    "cta_x2_trans_m_outer2": (
        *fragment(2, row_blocks=2, scope="cta"),
        "cta",
        128,
        column_major,
        (4, True, 1),
    ),
    "a_fragment": (A_FRAGMENT, (16, 16), 8, "warp", None, row_major, (4, False, 1)),
    "a_fragment_trans": (A_FRAGMENT, (16, 16), 8, "warp", None, column_major, (4, True, 1)),
}

SWIZZLED = {
    # name: (layout, shape, regs, shared layout)
    "a_fragment_swizzle32": (
        A_FRAGMENT,
        (16, 16),
        8,
        mma_shared_layout("float16", SwizzleMode.SWIZZLE_32B_ATOM, (16, 16)),
    ),
    "x4_swizzle64": (
        *fragment(4, row_blocks=2),
        mma_shared_layout("float16", SwizzleMode.SWIZZLE_64B_ATOM, (16, 32)),
    ),
    "x4_swizzle128": (
        *fragment(4, row_blocks=2, col_groups=2),
        mma_shared_layout("float16", SwizzleMode.SWIZZLE_128B_ATOM, (16, 64)),
    ),
}


def _case_func(name, dtype="float16", dispatch="ldstmatrix"):
    """The case's program; the variant under test is forced unless ``dispatch=None`` (on
    conflicting row-major tiles the cost rule would choose copy -> reg)."""
    layout, shape, regs, scope, threads, shared, _ = CASES[name]
    return demos.ldstmatrix_roundtrip(
        layout, shared(shape), shape, regs, dtype, scope, threads, dispatch=dispatch
    )


def _swizzled_func(name, dtype="float16"):
    """Conflict-free swizzled tiles: the cost rule keeps ldstmatrix, nothing is forced."""
    layout, shape, regs, shared = SWIZZLED[name]
    return demos.ldstmatrix_roundtrip(layout, shared, shape, regs, dtype)


@pytest.mark.parametrize("name", sorted(CASES))
def test_plans(name):
    *_, scope, _, _, (num, trans, m_outer) = CASES[name]
    reports = _reports(_case_func(name))
    assert [r.plan["direction"] for r in reports] == ["ld", "st"]
    for r in reports:
        assert (r.plan["num"], r.plan["trans"], r.plan["m_outer"]) == (num, trans, m_outer)
        assert r.scope == scope
        assert r.plan["instruction"].endswith(f".x{num}{'.trans' if trans else ''}.shared.b16")


def test_seed_demo_plan():
    """Seed 002's program: num = 2 row-major tiles, M, N = 8, 16."""
    r_layout = TileLayout(S[(8, 4, 2, 2) : (4 @ lane, 1 @ lane, 2, 1)])
    s_layout = TileLayout(S[(8, 4, 2, 2) : (16, 2, 8, 1)])
    func = demos.ldstmatrix_roundtrip(r_layout, s_layout, (8, 4, 2, 2), 4, dispatch="ldstmatrix")
    [ld, st] = _reports(func)
    assert ld.plan["num"] == 2 and not ld.plan["trans"] and ld.plan["m_outer"] == 1
    assert st.plan["direction"] == "st"


def _register_copies(func):
    return [
        r
        for r in tcd.explain(func, "sm_90a")
        if sorted(o["scope"] for o in r.operands) == ["local", "shared"]
    ]


def test_cost_rule_chooses_reg_where_ldmatrix_conflicts():
    """Row-major 16x16 float16: each matrix's rows 32 bytes apart, 2-way conflicts, 8
    wavefronts; copy -> reg rotates its 32-bit rounds to 4 conflict-free wavefronts plus
    8 selects (4 clocks). On the H200 that loop ran 62 against 40 B/clk/SM
    (docs/performance.md). explain() says why and which swizzle would make ldmatrix win."""
    ld, st = _register_copies(_case_func("a_fragment", dispatch=None))
    for r in (ld, st):
        assert r.variant == "reg" and r.plan["est_clocks"] == 4.0
        [cand] = [c for c in r.candidates if c.variant == "ldstmatrix"]
        assert cand.accepted
        assert "cost rule: est. 8 SM clocks against 4 for reg" in cand.reason
        assert "Swizzle<1,3,3>" in cand.reason and "SWIZZLE_32B_ATOM" in cand.reason


def test_cost_rule_keeps_ldmatrix_where_it_is_conflict_free():
    for r in _register_copies(_swizzled_func("a_fragment_swizzle32")):
        assert r.variant == "ldstmatrix" and r.plan["est_clocks"] == 4.0
        [cand] = [c for c in r.candidates if c.variant == "reg"]
        assert "cost rule: est. 4 SM clocks against 4 for ldstmatrix" in cand.reason


def test_forced_plan_reports_the_conflict_and_the_swizzle_that_removes_it():
    [ld, _] = _reports(_case_func("a_fragment"))
    assert ld.plan["bank_conflict"] == 2 and ld.plan["est_clocks"] == 8.0
    assert "Swizzle<1,3,3>" in ld.plan["suggestion"]
    [ld, _] = _reports(_case_func("warp_x4"))  # 8 x 32 row-major: rows 64 bytes apart
    assert ld.plan["bank_conflict"] == 4 and "Swizzle<2,3,3>" in ld.plan["suggestion"]


def test_bank_conflict_degree():
    """Rows 32 bytes apart put two rows of a matrix on each bank group; the 32-byte swizzle
    spreads them out (the issue's 60.0 vs 112.7 B/clk/SM on the H200)."""
    [plain, _] = _reports(_case_func("a_fragment"))
    [swizzled, _] = _reports(_swizzled_func("a_fragment_swizzle32"))
    assert plain.plan["bank_conflict"] == 2
    assert swizzled.plan["bank_conflict"] == 1
    assert swizzled.plan["swizzle"] == "Swizzle<1,3,3>"


@pytest.mark.parametrize("name", sorted(SWIZZLED))
def test_swizzled_plans(name):
    for r in _reports(_swizzled_func(name)):
        assert r.plan["num"] == 4 and not r.plan["trans"] and r.plan["bank_conflict"] == 1


# -- declines -----------------------------------------------------------------------------
def test_declines_float32_and_reg_takes_it():
    reason, chosen = _reason(_case_func("warp_x2", "float32", dispatch=None))
    assert "R is float32; ldmatrix/stmatrix move 16-bit elements" in reason
    assert chosen == "reg"


def test_declines_a_padded_layout_the_buffer_does_not_hold():
    # An (8, 16) buffer with row stride 36 spans 268 elements; TVM allocates 128. The
    # simulator's fuzzing caught the reg copy writing past the allocation: now every copy
    # variant declines it (and the ldstmatrix alignment rule is not even reached).
    layout, shape, regs = fragment(2)
    shared = TileLayout(S[shape : (36, 1)])
    reason, chosen = _reason(demos.ldstmatrix_roundtrip(layout, shared, shape, regs))
    assert "spans 268 elements but the buffer holds 128" in reason
    assert chosen is None or chosen != "reg"


def test_declines_a_layout_that_is_not_a_fragment():
    layout = TileLayout(S[(32, 8) : (1 @ lane, 1)])  # lane i owns row i
    func = demos.ldstmatrix_roundtrip(layout, row_major((32, 8)), (32, 8), 8)
    reason, chosen = _reason(func)
    assert "register layout of R is not an m8n8 fragment of A_smem" in reason
    assert "plain: lane 0 " in reason and ".trans: lane 0 " in reason
    assert chosen == "reg"


def test_declines_stmatrix_before_sm90():
    ld_reports = _reports(_case_func("warp_x4"), "sm_80")
    assert [r.plan["direction"] for r in ld_reports] == ["ld"]  # ldmatrix exists on sm_80
    reason, chosen = _reason(_case_func("warp_x4", dispatch=None), "sm_80", call=1)
    assert reason == "stmatrix needs sm_90 or newer; target is sm_80"
    assert chosen == "reg"


def test_declines_ldmatrix_before_sm75():
    reason, _ = _reason(_case_func("warp_x4"), "sm_70")
    assert reason == "ldmatrix needs sm_75 or newer; target is sm_70"


def test_declines_a_swizzle_unit_narrower_than_a_row():
    layout, shape, regs = fragment(2)
    shared = ComposeLayout(2, 1, 3, TileLayout(S[shape]))  # 4-element (8-byte) units
    reason, chosen = _reason(demos.ldstmatrix_roundtrip(layout, shared, shape, regs))
    assert "keeps 4-element units together" in reason and chosen == "reg"


def test_declines_a_misaligned_region():
    layout, _, regs = fragment(1)
    shared = TileLayout(S[(8, 16)])
    func = _offset_region(layout, shared, regs)
    reason, _ = _reason(func)
    assert "A_smem region base offset 4 is not a multiple of 8 elements (16 bytes)" in reason


def _offset_region(layout, shared, regs):
    """An 8x8 region four columns into an 8x16 shared tile: rows start at 4 + 16 r."""
    from tvm.script import tirx as T
    from tvm.script.tirx import tile as Tx

    # fmt: off
    @T.prim_func
    def offset_region(A_ptr: T.handle):
        A = T.match_buffer(A_ptr, (8, 8), "float16")
        T.device_entry()
        T.cta_id([1])
        T.warp_id([1])
        T.lane_id([32])
        T.thread_id([32])
        A_smem = T.alloc_buffer((8, 16), "float16", scope="shared", layout=shared)
        R = T.alloc_buffer((8, 8), "float16", scope="local", layout=layout)
        Tx.warp.copy(R[:, :], A_smem[:, 4:12])
        Tx.warp.copy(A[:, :], R[:, :])
    # fmt: on
    return offset_region


# -- emitted code -------------------------------------------------------------------------
@pytest.mark.parametrize("num", [1, 2, 4])
@pytest.mark.parametrize("trans", [False, True])
def test_sass_has_the_matrix_instructions(num, trans):
    name = f"warp_x{num}{'_trans' if trans else ''}"
    ops = toolchain.opcodes(toolchain.kernel_sass(_case_func(name), "sm_90a"))
    # nvdisasm spells .trans as MT88 and .x1 with no count: LDSM.16.M88, LDSM.16.MT88.4
    form = ("MT88" if trans else "M88") + ("" if num == 1 else f".{num}")
    assert ops[f"LDSM.16.{form}"] == 1 and ops[f"STSM.16.{form}"] == 1, ops
    assert not any(op.startswith(("LDL", "STL")) for op in ops), ops


def test_m_outer_is_unrolled_one_instruction_per_group():
    ops = toolchain.opcodes(toolchain.kernel_sass(_case_func("warp_x4_m_outer4"), "sm_90a"))
    assert ops["LDSM.16.M88.4"] == 4 and ops["STSM.16.M88.4"] == 4


# -- GPU: round trips and the fragment each lane receives ---------------------------------
def expected_registers(layout, shape, threads, regs, a):
    """F[t, r] predicted from TVM's own layout.apply: which element lands in which register."""
    out = np.zeros((threads, regs), dtype=a.dtype)
    seen = np.zeros((threads, regs), dtype=bool)
    for coord in np.ndindex(*shape):
        where = {str(k): int(v) for k, v in layout.apply(*coord, shape=shape).items()}
        t = (
            where.get("laneid", 0)
            + 32 * where.get("wid_in_wg", 0)
            + 32 * where.get("warpid", 0)
            + where.get("tid_in_wg", 0)
            + where.get("tx", 0)
        )
        out[t, where["m"]] = a[coord]
        seen[t, where["m"]] = True
    assert seen.all()
    return out


def _roundtrip(func, layout, shape, regs, threads, dtype, rng, where, gpu):
    a = runtime.random_array(shape, dtype, rng)
    poison = runtime.poison_like(a)
    f = runtime.poison_like(np.zeros((threads, regs), dtype=a.dtype))
    out = execute(func, [a, poison, f], where, gpu)
    np.testing.assert_array_equal(runtime.bits(out[1]), runtime.bits(a))
    want = expected_registers(layout, shape, threads, regs, a)
    np.testing.assert_array_equal(runtime.bits(out[2]), runtime.bits(want))


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_fragment_roundtrip(name, dtype, rng, where, gpu):
    layout, shape, regs, scope, threads, _, _ = CASES[name]
    threads = threads or {"warp": 32, "warpgroup": 128}[scope]
    assert _reports(_case_func(name, dtype))  # the matrix instructions are what runs
    _roundtrip(_case_func(name, dtype), layout, shape, regs, threads, dtype, rng, where, gpu)


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("name", sorted(SWIZZLED))
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_swizzled_roundtrip(name, dtype, rng, where, gpu):
    layout, shape, regs, _ = SWIZZLED[name]
    assert _reports(_swizzled_func(name, dtype))
    _roundtrip(_swizzled_func(name, dtype), layout, shape, regs, 32, dtype, rng, where, gpu)
