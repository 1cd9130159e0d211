"""copy_async -> tcgen05_ldst (seed 003): plans, declines, the emitted instructions checked
element by element against both layouts, SASS on sm_100a, and Blackwell round trips."""

from __future__ import annotations

import re
from collections import Counter

import numpy as np
import pytest
import tvm
import tvm_ffi
from tvm import sym
from tvm.script import tirx as T
from tvm.script.tirx import tile as Tx
from tvm.tirx.layout import (
    S,
    TCol,
    TileLayout,
    TLane,
    tcgen05_atom_layout,
    tid_in_wg,
    tmem_datapath_layout,
    wg_local_layout,
)

import tirx_cuda_dispatch as tcd
import tirx_cuda_dispatch.copy_async  # noqa: F401  (registers the variant)
from executors import WHERE_SM100, execute
from tirx_cuda_dispatch import runtime, toolchain
from tirx_cuda_dispatch.copy_async.tcgen05_ldst import SHAPES, half_warp_layout

ARCH = "sm_100a"


# -- kernels ------------------------------------------------------------------------------
def register_layout(shape: str, rows: int, cols: int, dtype: str):
    """The register tile a shape's fragment describes (what a user allocates)."""
    if shape == "32x32b":
        return wg_local_layout(cols)
    if shape == "16x32bx2":
        return half_warp_layout(rows, cols)
    return tcgen05_atom_layout(shape, (rows, cols), dtype)


def tmem_layout(rows: int, width: int, unpacked: bool = False, sub_slab: int = 0):
    """Datapath D (128 rows) or F (64 rows); ``unpacked`` puts one 16-bit element per cell."""
    if not unpacked:
        return tmem_datapath_layout("D" if rows == 128 else "F", rows, width, sub_slab=sub_slab)
    if rows == 128:
        return TileLayout(S[(128, width) : (1 @ TLane, 2 @ TCol)])
    spec = S[(4, 16, width) : (32 @ TLane, 1 @ TLane, 2 @ TCol)]
    return TileLayout(spec + (16 @ TLane) if sub_slab else spec)


def roundtrip(
    dtype="float16",
    rows=128,
    cols=8,
    st_shape="32x32b",
    ld_shape=None,
    unpacked=False,
    sub_slab=0,
    col0=0,
    width=None,
    scope="wg",
    st_layout=None,
    t_layout=None,
):
    """Registers (thread t's values from row t of A) -> tmem[:, col0:col0+cols] ->
    registers -> B, with a register layout per direction; the waits are the caller's."""
    width = width or col0 + cols
    per = rows * cols // 128
    bits = tvm.runtime.DataType(dtype).bits
    cells = (col0 + cols) * (32 if unpacked else bits) // 32
    ncols = max(32, 1 << (cells - 1).bit_length())
    st_l = st_layout or register_layout(st_shape, rows, cols, dtype)
    ld_l = register_layout(ld_shape or st_shape, rows, cols, dtype)
    t_l = t_layout or tmem_layout(rows, width, unpacked, sub_slab)
    copy = getattr(Tx, scope).copy_async

    # fmt: off
    @T.prim_func
    def tcgen05_roundtrip(A_ptr: T.handle, B_ptr: T.handle):
        A = T.match_buffer(A_ptr, (128, per), dtype)
        B = T.match_buffer(B_ptr, (128, per), dtype)
        T.device_entry()
        warp_id = T.warp_id([4])
        T.warpgroup_id([1])
        T.warp_id_in_wg([4])
        T.lane_id([32])
        tid = T.thread_id([128])
        pool = T.SMEMPool()
        tmem_addr = pool.alloc((1,), "uint32")
        pool.commit()
        if warp_id == 0:
            T.ptx["tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32"](
                T.address_of(tmem_addr[0]), ncols)
            T.ptx["tcgen05.fence::before_thread_sync"]()
        T.tvm_storage_sync("shared")
        T.ptx["tcgen05.fence::after_thread_sync"]()
        T.cuda.trap_when_assert_failed(tmem_addr[0] == 0)  # the layouts assume column 0
        tmem = T.decl_buffer((rows, width), dtype, scope="tmem", allocated_addr=0, layout=t_l)
        A_reg = T.alloc_local((per,), dtype)
        B_reg = T.alloc_local((per,), dtype)
        A_frag = A_reg.view(rows, cols, layout=st_l)
        B_frag = B_reg.view(rows, cols, layout=ld_l)
        for i in range(per):
            A_reg[i] = A[tid, i]
        copy(tmem[:, col0:col0 + cols], A_frag[:, :])
        T.ptx.tcgen05.wait__st.sync.aligned()
        T.cuda.cta_sync()
        copy(B_frag[:, :], tmem[:, col0:col0 + cols])
        T.ptx.tcgen05.wait__ld.sync.aligned()
        for i in range(per):
            B[tid, i] = B_reg[i]
        T.ptx["tcgen05.fence::before_thread_sync"]()
        T.cuda.cta_sync()
        if warp_id == 0:
            T.ptx["tcgen05.fence::after_thread_sync"]()
            T.ptx["tcgen05.dealloc.cta_group::1.sync.aligned.b32"](tmem_addr[0], ncols)
    # fmt: on
    return tcgen05_roundtrip


def shared_to_local():
    """A warpgroup copy_async from shared memory to registers: not a tmem pair."""

    @T.prim_func
    def kernel(A_ptr: T.handle):
        A = T.match_buffer(A_ptr, (128, 8), "float32")
        T.device_entry()
        T.warpgroup_id([1])
        T.warp_id_in_wg([4])
        T.lane_id([32])
        T.thread_id([128])
        A_s = T.alloc_buffer((128, 8), "float32", scope="shared", layout=TileLayout(S[(128, 8)]))
        R = T.alloc_local((8,), "float32")
        R_frag = R.view(128, 8, layout=wg_local_layout(8))
        Tx.wg.copy_async(R_frag[:, :], A_s[:, :])
        A[0, 0] = R[0]

    return kernel


def _plans(func, arch=ARCH):
    return [r.plan for r in tcd.explain(func, arch)]


# -- the seed demo ------------------------------------------------------------------------
def test_seed_demo_is_32x32b_x4_one_issue_each_way():
    [st, ld] = tcd.explain(roundtrip("float16", 128, 8), ARCH)
    assert (st.variant, ld.variant) == ("tcgen05_ldst", "tcgen05_ldst")
    for report, direction in ((st, "st"), (ld, "ld")):
        p = report.plan
        assert (p["shape"], p["num"], p["slabs"], p["direction"], p["pack"]) == (
            "32x32b",
            4,
            1,
            direction,
            False,
        )
        assert p["instructions"] == 1 and p["regs_per_thread"] == 4
    assert st.plan["ptx"] == "tcgen05.st.sync.aligned.32x32b.x4.b32"


# -- plans of every shape -----------------------------------------------------------------
PLAN_CASES = [
    # dtype, rows, cols, register fragment, extra -> shape, nums, slabs, pack
    ("float32", 128, 8, "32x32b", {}, ("32x32b", [8], 1, False)),
    ("float32", 128, 1, "32x32b", {}, ("32x32b", [1], 1, False)),
    ("float32", 128, 96, "32x32b", {}, ("32x32b", [64, 32], 1, False)),
    ("float32", 128, 256, "32x32b", {}, ("32x32b", [128, 128], 1, False)),
    ("float16", 128, 64, "32x32b", {}, ("32x32b", [32], 1, False)),
    ("float16", 128, 512, "32x32b", {}, ("32x32b", [128, 128], 1, False)),
    ("float16", 128, 16, "32x32b", {"unpacked": True}, ("32x32b", [8], 1, True)),
    ("float32", 128, 16, "16x64b", {}, ("16x64b", [8], 2, False)),
    ("float32", 64, 16, "16x64b", {}, ("16x64b", [8], 1, False)),
    ("float16", 64, 32, "16x64b", {}, ("16x64b", [8], 1, False)),
    ("float16", 128, 4, "16x64b", {}, ("16x64b", [1], 2, False)),
    ("float32", 64, 32, "16x128b", {}, ("16x128b", [8], 1, False)),
    ("float16", 128, 64, "16x128b", {}, ("16x128b", [8], 2, False)),
    ("float32", 64, 64, "16x256b", {}, ("16x256b", [8], 1, False)),
    ("float32", 64, 256, "16x256b", {}, ("16x256b", [32], 1, False)),
    ("float16", 128, 32, "16x256b", {}, ("16x256b", [2], 2, False)),
    ("bfloat16", 64, 32, "16x256b", {"unpacked": True}, ("16x256b", [2], 1, True)),
    ("float32", 64, 8, "16x32bx2", {}, ("16x32bx2", [4], 1, False)),
    ("float16", 128, 32, "16x32bx2", {}, ("16x32bx2", [8], 2, False)),
    ("float16", 64, 16, "16x32bx2", {"unpacked": True}, ("16x32bx2", [4], 1, True)),
]


@pytest.mark.parametrize(
    "dtype, rows, cols, frag, extra, expected",
    PLAN_CASES,
    ids=[f"{c[0]}-{c[1]}x{c[2]}-{c[3]}{'-unpacked' if c[4] else ''}" for c in PLAN_CASES],
)
def test_plan_per_shape_dtype_and_width(dtype, rows, cols, frag, extra, expected):
    shape, nums, slabs, pack = expected
    bits = tvm.runtime.DataType(dtype).bits
    for plan in _plans(roundtrip(dtype, rows, cols, frag, **extra)):
        assert (plan["shape"], plan.get("nums", [plan["num"]]), plan["slabs"], plan["pack"]) == (
            shape,
            nums,
            slabs,
            pack,
        )
        assert plan["datapath"] == ("D" if rows == 128 else "F")
        assert plan["regs_per_thread"] == rows * cols * bits // (32 * 128)
        assert plan["instructions"] == slabs * len(nums)


def test_split_half_warp_offset_is_half_the_row():
    [st, ld] = _plans(roundtrip("float32", 64, 16, "16x32bx2"))
    assert st["split_offset"] == ld["split_offset"] == 8
    [st, _] = _plans(roundtrip("float16", 64, 16, "16x32bx2", unpacked=True))
    assert st["split_offset"] == 8  # 8 16-bit elements, one cell each


# -- the hardware table agrees with TVM's atom layouts ------------------------------------
@pytest.mark.parametrize("shape", ["16x64b", "16x128b", "16x256b"])
def test_fragment_table_matches_tcgen05_atom_layout(shape):
    atom = SHAPES[shape]
    cols = 2 * atom.bits // 32  # .x2, float32
    layout = tcgen05_atom_layout(shape, (64, cols), "float32")
    for r in range(64):
        for c in range(cols):
            at = {str(k): int(v) for k, v in layout.apply(r, c, shape=(64, cols)).items()}
            lane, col = atom.fragment(at["laneid"], at["m"])
            assert (16 * at["wid_in_wg"] + lane, col) == (r, c)


# -- the emitted instructions, simulated against both layouts -----------------------------
_TCGEN05_OPS = ("tirx.ptx.tcgen05_ld", "tirx.ptx.tcgen05_st")


def _lowered(func):
    with tvm.target.Target({"kind": "cuda", "arch": ARCH}):
        return tcd.LowerTIRx(fallback="error")(tvm.IRModule({"main": func}))["main"]


def emitted_instructions(func):
    """Every tcgen05.ld/st of the lowered kernel: (action, shape, num, pack, taddr, split,
    register buffer, register indices), and the function's let bindings."""
    lets, found = {}, []

    def visit(node):
        kind = type(node).__name__
        if kind == "Bind":
            lets[node.var] = node.value
        elif kind == "Call" and str(node.op.name).startswith(_TCGEN05_OPS):
            mods = [a.value for a in node.args if type(a).__name__ == "StringImm"]
            ops = [a for a in node.args if type(a).__name__ != "StringImm"]
            split = str(node.op.name).endswith("_split")
            regs = [a for a in ops if type(a).__name__ == "TensorLoad"]
            rest = [a for a in ops if type(a).__name__ != "TensorLoad"]
            taddr, imm = rest[0], (int(rest[1]) if split else 0)
            found.append(
                dict(
                    action=mods[0],
                    shape=mods[3],
                    num=int(mods[4][1:]),
                    pack=bool(mods[5]),
                    taddr=taddr,
                    split=imm,
                    buffer=str(regs[0].source.name),
                    regs=[int(r.indices[0]) for r in regs],
                )
            )

    tvm_ffi.structural_walk(_lowered(func).body, visit)
    return found, lets


def _evaluate(expr, lets, warp):
    """``expr`` for warp ``warp`` of warpgroup 0 (its lane 0)."""
    ana = sym.Analyzer()
    for var in tvm.tirx.analysis.undefined_vars(expr):
        if var.name == "warp_id_in_cta":
            value = warp
        elif var.name.startswith("threadIdx"):
            value = 32 * warp
        else:
            value = _evaluate(lets[var], lets, warp)
        ana.bind(var, value)
    return int(ana.simplify(expr))


def simulate(instrs, lets, bits):
    """(thread, 32-bit register, 16-bit half) -> (TMEM lane, cell, half) as the hardware
    would move it, from the fragment table; every TMEM cell a warp names is in its chunk."""
    moves = {}
    per_reg = 32 // bits
    for ins in instrs:
        atom = SHAPES[ins["shape"]]
        assert len(ins["regs"]) == ins["num"] * atom.regs_per_num <= 128
        for warp in range(4):
            taddr = _evaluate(ins["taddr"], lets, warp)
            lane0, col0 = taddr >> 16, taddr & 0xFFFF
            for t in range(32):
                for j, word in enumerate(ins["regs"]):
                    dl, dc = atom.fragment(t, j)
                    lane = lane0 + dl
                    assert 32 * warp <= lane < 32 * warp + 32, "a lane outside the warp's chunk"
                    col = col0 + (ins["split"] if atom.accesses == 2 and t >= 16 else 0)
                    for h in range(per_reg):
                        where = (lane, col + 2 * dc + h, 0) if ins["pack"] else (lane, col + dc, h)
                        key = (32 * warp + t, word, h)
                        assert key not in moves, "a register value moved twice"
                        moves[key] = where
    return moves


def expected_moves(reg_layout, rows, cols, t_layout, t_shape, col0, bits):
    """The same map, from the register layout and the TMEM layout of each element."""
    per_reg = 32 // bits
    out = {}
    for r in range(rows):
        for c in range(cols):
            reg = {str(k): int(v) for k, v in reg_layout.apply(r, c, shape=(rows, cols)).items()}
            thread = reg.get("tid_in_wg", 32 * reg.get("wid_in_wg", 0) + reg.get("laneid", 0))
            tm = {str(k): int(v) for k, v in t_layout.apply(r, col0 + c, shape=t_shape).items()}
            out[(thread, reg["m"] // per_reg, reg["m"] % per_reg)] = (
                tm["TLane"],
                tm["TCol"] * bits // 32,
                tm["TCol"] % per_reg,
            )
    return out


SIM_CASES = [
    dict(dtype="float16", rows=128, cols=8, st_shape="32x32b"),
    dict(dtype="float32", rows=128, cols=12, st_shape="32x32b"),
    dict(dtype="float32", rows=128, cols=200, st_shape="32x32b"),
    dict(dtype="float16", rows=128, cols=8, st_shape="32x32b", unpacked=True, col0=4, width=16),
    dict(dtype="float16", rows=128, cols=24, st_shape="32x32b", unpacked=True),
    dict(dtype="float32", rows=128, cols=8, st_shape="16x64b"),
    dict(dtype="float16", rows=64, cols=16, st_shape="16x64b", sub_slab=1),
    dict(dtype="float32", rows=64, cols=16, st_shape="16x128b", col0=8, width=32),
    dict(dtype="bfloat16", rows=128, cols=32, st_shape="16x128b"),
    dict(dtype="float32", rows=128, cols=16, st_shape="16x256b"),
    dict(dtype="float16", rows=64, cols=32, st_shape="16x256b", unpacked=True),
    dict(dtype="float32", rows=64, cols=16, st_shape="16x32bx2"),
    dict(dtype="float16", rows=128, cols=16, st_shape="16x32bx2", unpacked=True),
    dict(dtype="float16", rows=64, cols=24, st_shape="16x32bx2", unpacked=True),
    dict(dtype="float32", rows=128, cols=16, st_shape="32x32b", ld_shape="16x256b"),
]


@pytest.mark.parametrize(
    "case", SIM_CASES, ids=["-".join(str(v) for v in c.values()) for c in SIM_CASES]
)
def test_emitted_instructions_move_every_element_to_its_tmem_cell(case):
    rows, cols, col0 = case["rows"], case["cols"], case.get("col0", 0)
    width = case.get("width") or col0 + cols
    bits = tvm.runtime.DataType(case["dtype"]).bits
    t_layout = tmem_layout(rows, width, case.get("unpacked", False), case.get("sub_slab", 0))
    instrs, lets = emitted_instructions(roundtrip(**case))
    assert {i["action"] for i in instrs} == {"st", "ld"}
    for action, shape in (("st", case["st_shape"]), ("ld", case.get("ld_shape", case["st_shape"]))):
        mine = [i for i in instrs if i["action"] == action]
        assert {i["shape"] for i in mine} == {shape}
        assert len({i["buffer"] for i in mine}) == 1  # A_reg for the store, B_reg for the load
        reg_layout = register_layout(shape, rows, cols, case["dtype"])
        expected = expected_moves(reg_layout, rows, cols, t_layout, (rows, width), col0, bits)
        assert simulate(mine, lets, bits) == expected


def test_register_window_of_a_wider_fragment():
    """Two copies of the two column halves of one (128, 16) register tile."""
    full = wg_local_layout(16)
    t_l = tmem_datapath_layout("D", 128, 16)

    @T.prim_func
    def halves(A_ptr: T.handle):
        A = T.match_buffer(A_ptr, (128, 16), "float32")
        T.device_entry()
        T.warpgroup_id([1])
        T.warp_id_in_wg([4])
        T.lane_id([32])
        tid = T.thread_id([128])
        tmem = T.decl_buffer((128, 16), "float32", scope="tmem", allocated_addr=64, layout=t_l)
        R = T.alloc_local((16,), "float32")
        R_frag = R.view(128, 16, layout=full)
        Tx.wg.copy_async(R_frag[:, 8:16], tmem[:, 8:16])
        T.ptx.tcgen05.wait__ld.sync.aligned()
        A[tid, 0] = R[8]

    [report] = tcd.explain(halves, ARCH)
    assert report.plan_object.reg_offset == 8 and report.plan_object.col_offset == 8
    [ins], lets = emitted_instructions(halves)
    assert ins["regs"] == list(range(8, 16))
    assert _evaluate(ins["taddr"], lets, 2) == (64 << 16) + 64 + 8  # lane 64, column 64+8


# -- declines -----------------------------------------------------------------------------
def _reasons(func, arch=ARCH, calls=None):
    """Why tcgen05_ldst declined each call (or the calls numbered in ``calls``)."""
    out = []
    for report in tcd.explain(func, arch):
        if calls is not None and report.index not in calls:
            continue
        assert report.variant != "tcgen05_ldst"
        [cand] = [c for c in report.candidates if c.variant == "tcgen05_ldst"]
        out.append(cand.reason)
    return out


def test_declines_warp_scope():
    for reason in _reasons(roundtrip(scope="warp")):
        assert reason.startswith("scope is warp, needs warpgroup")


def test_declines_a_pair_without_tensor_memory():
    [reason] = _reasons(shared_to_local())
    assert reason == "src A_s is shared and dst R_frag is local; needs tmem->local, local->tmem"


@pytest.mark.parametrize(
    "arch, says",
    [
        ("sm_90a", "target sm_90a is not Blackwell (needs sm_100a/sm_100f"),
        ("sm_80", "target sm_80 is not Blackwell (needs sm_100a/sm_100f"),
        ("sm_100", "target sm_100 lacks the arch-specific suffix"),
        ("sm_120a", "target sm_120a is a Blackwell without tensor memory"),
    ],
)
def test_declines_targets_without_tcgen05(arch, says):
    for reason in _reasons(roundtrip(), arch):
        assert reason.startswith(says), reason


@pytest.mark.parametrize("arch", ["sm_100a", "sm_100f", "sm_103a", "sm_110f"])
def test_accepts_the_tensor_memory_family(arch):
    assert [p["shape"] for p in _plans(roundtrip(), arch)] == ["32x32b", "32x32b"]


def test_declines_a_register_layout_no_fragment_has():
    # Columns across threads: thread t holds column t of every row.
    transposed = TileLayout(S[(128, 8) : (1, 1 @ tid_in_wg)])
    [st] = _reasons(roundtrip("float32", 128, 8, st_layout=transposed), calls=[0])
    assert st.startswith("src A_frag: register layout") and "matches no tcgen05 fragment" in st
    assert "tried .16x256b, .16x128b, .16x64b, .16x32bx2, .32x32b" in st


def test_declines_a_64_row_fragment_on_an_identity_tmem_layout():
    identity = TileLayout(S[(64, 16) : (1 @ TLane, 1 @ TCol)])
    for reason in _reasons(roundtrip("float32", 64, 16, "16x64b", t_layout=identity)):
        assert re.match(r"(src|dst) tmem: TMEM layout TileLayout\(S\[\(64, 16\)", reason)
        assert "is not datapath F (row r at lane 32*(r//16) + r%16" in reason


def test_declines_8_bit_data_odd_widths_and_split_cells():
    assert all("needs 16- or 32-bit elements" in r for r in _reasons(roundtrip("uint8", 128, 8)))
    odd = _reasons(roundtrip("float16", 128, 7, st_layout=wg_local_layout(7)))
    assert all("a row of 7 float16 is not a whole number of 32-bit registers" in r for r in odd)
    split = _reasons(roundtrip("float16", 128, 8, col0=1, width=16))
    assert all("first column 1 is not at a 32-bit TMEM cell boundary" in r for r in split)


def test_strict_mode_names_the_rule():
    target = tvm.target.Target({"kind": "cuda", "arch": "sm_90a"})
    with pytest.raises(tcd.DispatchError) as err:
        tvm.compile(roundtrip(), target=target, tir_pipeline=tcd.STRICT_PIPELINE)
    assert "tcgen05_ldst" in str(err.value) and "is not Blackwell" in str(err.value)


# -- emitted code: CUDA and SASS ----------------------------------------------------------
_TM = re.compile(r"\b((?:LD|ST)TM(?:\.\w+)*)")


def tm_opcodes(func) -> Counter:
    """Tensor-memory load/store SASS opcodes (with modifiers) of the kernel, for sm_100a."""
    src = toolchain.cuda_source(func, ARCH, tcd.STRICT_PIPELINE)
    return Counter(_TM.findall(toolchain.sass(toolchain.nvrtc_compile(src, ARCH))))


SASS_CASES = [
    (dict(dtype="float16", rows=128, cols=8), {"STTM.x4": 1, "LDTM.x4": 1}),
    (dict(dtype="float32", rows=128, cols=256), {"STTM.x128": 2, "LDTM.x128": 2}),
    (
        dict(dtype="float32", rows=128, cols=96),
        {"STTM.x64": 1, "STTM.x32": 1, "LDTM.x64": 1, "LDTM.x32": 1},
    ),
    (
        dict(dtype="float16", rows=128, cols=16, unpacked=True),
        {"STTM.x8.EXPAND16BIT": 1, "LDTM.x8.PACK16BIT": 1},
    ),
    (
        dict(dtype="float32", rows=128, cols=16, st_shape="16x64b"),
        {"STTM.16dp64bit.x8": 2, "LDTM.16dp64bit.x8": 2},
    ),
    (
        dict(dtype="float16", rows=64, cols=64, st_shape="16x128b"),
        {"STTM.16dp128bit.x8": 1, "LDTM.16dp128bit.x8": 1},
    ),
    (
        dict(dtype="float32", rows=128, cols=64, st_shape="16x256b"),
        {"STTM.16dp256bit.x8": 2, "LDTM.16dp256bit.x8": 2},
    ),
    (
        dict(dtype="float32", rows=64, cols=16, st_shape="16x32bx2"),
        {
            "STTM.16dp32bit_t0_t15.x8": 1,
            "STTM.16dp32bit_t16_t31.x8": 1,
            "LDTM.16dp32bit_t0_t15.x8": 1,
            "LDTM.16dp32bit_t16_t31.x8": 1,
        },
    ),
]


@pytest.mark.parametrize(
    "case, expected", SASS_CASES, ids=["-".join(map(str, c.values())) for c, _ in SASS_CASES]
)
def test_sass_has_the_tensor_memory_instructions(case, expected):
    assert tm_opcodes(roundtrip(**case)) == Counter(expected)


def test_no_wait_is_emitted_the_waits_are_the_callers():
    src = toolchain.cuda_source(roundtrip("float32", 128, 16, "16x64b"), ARCH, tcd.STRICT_PIPELINE)
    kernel = src[src.rindex('extern "C" __global__') :]
    # One wait::st and one wait::ld, both written in the kernel, none added by the variant.
    assert kernel.count("tcgen05_wait_wait__st") == 1
    assert kernel.count("tcgen05_wait_wait__ld") == 1
    assert kernel.count("tcgen05_st_st_sync_aligned_16x64b_x8_b32(") == 2


# -- Blackwell round trips ----------------------------------------------------------------
def _run(func, per, dtype, rng, where, gpu):
    a = runtime.random_array((128, per), dtype, rng)
    b = runtime.poison_like(a)
    _, out = execute(func, [a, b], where, gpu, tcd.STRICT_PIPELINE, target=ARCH)
    return a, out


SAME_LAYOUT_CASES = [c for c in SIM_CASES if "ld_shape" not in c]


@pytest.mark.parametrize("where", WHERE_SM100)
@pytest.mark.parametrize(
    "case",
    SAME_LAYOUT_CASES,
    ids=["-".join(str(v) for v in c.values()) for c in SAME_LAYOUT_CASES],
)
def test_roundtrip_is_exact(case, rng, where, gpu):
    per = case["rows"] * case["cols"] // 128
    a, out = _run(roundtrip(**case), per, case["dtype"], rng, where, gpu)
    np.testing.assert_array_equal(runtime.bits(out), runtime.bits(a))


@pytest.mark.parametrize("where", WHERE_SM100)
@pytest.mark.parametrize("ld_shape", ["16x64b", "16x128b", "16x256b", "16x32bx2"])
def test_store_one_fragment_load_another(ld_shape, rng, where, gpu):
    """Store row-per-thread (.32x32b), load with a .16x* fragment: the registers must hold
    what the two layouts say, which checks the fragment figures on the hardware."""
    rows, cols, dtype = 128, 32, "float32"
    func = roundtrip(dtype, rows, cols, "32x32b", ld_shape)
    a, out = _run(func, cols, dtype, rng, where, gpu)
    ld_layout = register_layout(ld_shape, rows, cols, dtype)
    expected = np.empty_like(a)
    for r in range(rows):
        for c in range(cols):
            at = {str(k): int(v) for k, v in ld_layout.apply(r, c, shape=(rows, cols)).items()}
            thread = at.get("tid_in_wg", 32 * at.get("wid_in_wg", 0) + at.get("laneid", 0))
            expected[thread, at["m"]] = a[r, c]  # thread r holds row r after the store
    np.testing.assert_array_equal(runtime.bits(out), runtime.bits(expected))
