"""copy_async -> tcgen05_ldst (seed 003): plans, declines, the emitted instructions checked
element by element against both layouts, SASS on sm_100a, and Blackwell round trips."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

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
    laneid,
    tcgen05_atom_layout,
    tid_in_wg,
    tmem_datapath_layout,
    wg_local_layout,
    wid_in_wg,
)

import tirx_cuda_dispatch as tcd
import tirx_cuda_dispatch.copy_async  # noqa: F401  (registers the variant)
from executors import WHERE_SM100, execute
from tirx_cuda_dispatch import runtime, sim, toolchain
from tirx_cuda_dispatch.isa.tcgen05 import DATAPATHS, SHAPES
from tirx_cuda_dispatch.layout.tmem import datapath_b_layout, half_warp_layout
from tirx_cuda_dispatch.resources import Completion
from tirx_cuda_dispatch.sim import SimError

ARCH = "sm_100a"


# -- kernels ------------------------------------------------------------------------------
def register_layout(shape: str, rows: int, cols: int, dtype: str):
    """The register tile a shape's fragment describes (what a user allocates)."""
    if shape == "32x32b":
        return datapath_b_layout(cols) if rows == 64 else wg_local_layout(cols)
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


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_shape_cells_match_the_simulators_fragments(shape):
    """isa's element function of each shape, at every .num, against the simulator's
    fragments (written from the ISA apart from isa/ and layout/)."""
    atom = SHAPES[shape]
    for num in atom.split(atom.max_num * 2 - 1):
        lane, reg = np.meshgrid(np.arange(32), np.arange(num * atom.regs_per_num), indexing="ij")
        got = np.stack(np.broadcast_arrays(*atom.cell(lane, reg)), axis=-1)
        want = sim.fragments.tcgen05_fragment_map(shape, num)
        assert np.array_equal(got, want), (shape, num)


@pytest.mark.parametrize("datapath, rows", [("D", 128), ("F", 64), ("B", 64), ("E", 64)])
def test_datapath_places_match_tvm_datapath_layouts(datapath, rows):
    """isa's place of each data path against TVM's ``tmem_datapath_layout`` (E has B's)."""
    path = DATAPATHS["B" if datapath == "E" else datapath]
    cols = 16
    layout = tmem_datapath_layout(datapath, rows, cols)
    for r in range(rows):
        for c in range(cols):
            at = {str(k): int(v) for k, v in layout.apply(r, c, shape=(rows, cols)).items()}
            assert (at.get("TLane", 0), at.get("TCol", 0)) == path.place(r, c, cols)


def test_declines_registers_out_of_the_fragments_order_naming_the_element():
    """The .16x256b tile with each row pair's halves and column pairs swapped in the
    registers (every register in use, the data placed elsewhere): the fit names the first
    element the instructions would move to another TMEM cell."""
    swapped = TileLayout(
        S[(4, 2, 2, 8, 1, 4, 2) : (1 @ wid_in_wg, 4, 1, 4 @ laneid, 4, 1 @ laneid, 2)]
    )
    [st] = _reasons(roundtrip("float32", 128, 8, st_layout=swapped), calls=[0])
    assert "matches no tcgen05 fragment of datapath D" in st
    assert st.endswith(
        ".16x256b: src A_frag: element (0, 1) is in thread 0 register 2, where the "
        "instructions move TMEM lane, column (8, 0); the tile has it at (0, 1)"
    ), st
    # The control: the fragment's own order is taken.
    atom = tcgen05_atom_layout("16x256b", (128, 8), "float32")
    assert [p["shape"] for p in _plans(roundtrip("float32", 128, 8, st_layout=atom))][0] == (
        "16x256b"
    )


def test_declines_a_register_tile_read_as_no_register_tile_is():
    """The register tile is read as every register tile is (layout/register.py): lane ids
    past 31 decline, naming the operand; a slab 1 before slab 0's registers is named. The
    controls: the same tiles spelled right are taken."""
    over = TileLayout(S[(128, 8) : (1 @ laneid, 1)])
    [st] = _reasons(roundtrip("float32", 128, 8, st_layout=over), calls=[0])
    assert st == "src A_frag: thread axis laneid runs to 128 but has 32 values in scope warpgroup"
    right = TileLayout(S[(4, 32, 8) : (1 @ wid_in_wg, 1 @ laneid, 1)])
    assert _plans(roundtrip("float32", 128, 8, st_layout=right))[0]["shape"] == "32x32b"
    atom = tcgen05_atom_layout("16x64b", (128, 16), "float32")
    iters = [(int(it.extent), int(it.stride), it.axis) for it in atom.shard]
    assert str(iters[1][2].name) == "m" and iters[1][:2] == (2, 8)  # the slab, 8 on
    before = TileLayout(
        S[
            tuple(e for e, _, _ in iters) : tuple(
                (-8 if i == 1 else st) if str(a.name) == "m" else st @ a
                for i, (_, st, a) in enumerate(iters)
            )
        ]
    )
    [st] = _reasons(roundtrip("float32", 128, 16, st_layout=before), calls=[0])
    assert st.endswith(
        "; nearest src A_frag: its second 16-lane slab starts -8 float32 after the first; a "
        "warp's second issue reads it from a whole register at or past the end of the first's "
        "8 registers"
    ), st
    assert _plans(roundtrip("float32", 128, 16, st_layout=atom))[0]["shape"] == "16x64b"


def int8_fragment(shape: str, rows: int, cols: int) -> TileLayout:
    """An 8-bit ``.16x*`` register tile (TVM's factory has none): the float32 fragment of
    ``cols / 4`` columns, each register holding four adjacent 8-bit columns."""
    atom = tcgen05_atom_layout(shape, (rows, cols // 4), "float32")
    iters = [(int(it.extent), int(it.stride), it.axis) for it in atom.shard]
    extents = tuple(e for e, _, _ in iters) + (4,)
    strides = tuple(st * 4 if str(a.name) == "m" else st @ a for _, st, a in iters) + (1,)
    return TileLayout(S[extents:strides])


@pytest.mark.parametrize("rows", [128, 64])
@pytest.mark.parametrize("shape", ["16x256b", "16x128b", "16x64b"])
def test_8_bit_16x_tiles_fit_and_move_every_element_to_its_cell(shape, rows):
    """Tiles no structural comparison with TVM's factories took: the fit takes them as
    the shape they are, and the emitted instructions put every element in its cell."""
    cols, width = 64, 64
    layout = int8_fragment(shape, rows, cols)
    back = "32x32b" if rows == 128 else "16x32bx2"  # the load back: a tile TVM spells
    func = roundtrip("int8", rows, cols, st_layout=layout, ld_shape=back)
    st = _plans(func)[0]
    assert (st["shape"], st["direction"]) == (shape, "st")
    instrs, lets = emitted_instructions(func)
    mine = [i for i in instrs if i["action"] == "st"]
    t_layout = tmem_layout(rows, width)
    expected = expected_moves(layout, rows, cols, t_layout, (rows, width), 0, 8)
    assert simulate(mine, lets, 8) == expected


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


def test_declines_a_64_row_tile_that_is_neither_f_nor_b():
    # Row r at lane 2r: no data-path layout of the ISA.
    spread = TileLayout(S[(64, 16) : (2 @ TLane, 1 @ TCol)])
    for reason in _reasons(roundtrip("float32", 64, 16, "16x64b", t_layout=spread)):
        assert re.match(r"(src|dst) tmem: TMEM layout TileLayout\(S\[\(64, 16\):\(2 @", reason)
        assert "is not datapath F or B (F: row r at lane 32*(r//16) + r%16" in reason
        assert "B: row r, column c at lane r + 64*(c // (N/2))" in reason


def test_declines_wide_data_odd_widths_and_split_cells():
    assert all(
        "holds float64; needs 8-, 16- or 32-bit elements" in r
        for r in _reasons(roundtrip("float64", 128, 8))
    )
    odd = _reasons(roundtrip("float16", 128, 7, st_layout=wg_local_layout(7)))
    assert all("a row of 7 float16 is not a whole number of 32-bit registers" in r for r in odd)
    odd8 = _reasons(roundtrip("int8", 128, 6, st_layout=wg_local_layout(6)))
    assert all("a row of 6 int8 is not a whole number of 32-bit registers" in r for r in odd8)
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


def test_the_plan_declares_the_callers_wait_and_explain_lists_it():
    [st, ld] = tcd.explain(roundtrip("float32", 128, 16, "16x64b"), ARCH)
    wait_ld = Completion(
        "tcgen05.ld", "the caller: T.ptx.tcgen05.wait__ld.sync.aligned() before reading dst"
    )
    assert ld.plan_object.resources() == (wait_ld,)
    assert f"    resource: {wait_ld}" in str(ld).splitlines()
    assert str(wait_ld).startswith("completion: tcgen05.ld completes asynchronously")
    # The control: a store's completion is tcgen05.st's, waited for with wait::st.
    [wait_st] = st.plan_object.resources()
    assert (wait_st.mechanism, "wait__st" in wait_st.waiter) == ("tcgen05.st", True)
    assert st.resources == [str(wait_st)] and "tcgen05.ld" not in str(st)


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


# -- TVM's conventions: datapath B, column windows, 8-bit; 64 rows of a D tile -------------
# Where the ISA's data-path figures (PTX ISA 9.2 section 9.7.16.10.5, Figures 207-216) put
# element (row r, column c) of a tile N columns wide. The figures are images; these are
# their transcriptions in CUTLASS's ``tmem_frg`` atoms (D ``(128,N):(1,_)``, F
# ``((16,4),N):((1,32),_)``, B ``(64,(N/2,2)):(1,(_,64))``), written here without the
# variant's tables. E (M=64 .ws) has B's organization.
def isa_place(datapath: str, r: int, c: int, n: int, sub_slab: int = 0) -> tuple[int, int]:
    """(TMEM lane, column in elements of the tile) of element (r, c)."""
    if datapath == "D":
        return r, c
    if datapath == "F":
        return 32 * (r // 16) + 16 * sub_slab + r % 16, c
    assert datapath == "B"
    return r + 64 * (c // (n // 2)), c % (n // 2)


def _swapped_halves(datapath, r, c, n, sub_slab=0):
    """A wrong reading of B (its column halves exchanged): the negative control."""
    lane, col = isa_place(datapath, r, c, n, sub_slab)
    return (lane + 64) % 128, col


def _f_as_rows(datapath, r, c, n, sub_slab=0):
    """A wrong reading of F (row r at lane r, TVM's ``tmem[0:64]`` of a D tile)."""
    return r + 16 * sub_slab, c


@dataclass(frozen=True)
class Tile:
    """A tensor-memory tile and the register fragment that moves it."""

    datapath: str  # D, F or B
    dtype: str
    n: int  # columns
    shape: str  # the register fragment (.32x32b on B is its image)
    unpacked: bool = False
    sub_slab: int = 0
    chunks: int = 1  # column windows, chosen by a loop variable

    @property
    def rows(self) -> int:
        return 128 if self.datapath == "D" else 64

    @property
    def bits(self) -> int:
        return tvm.runtime.DataType(self.dtype).bits

    @property
    def per(self) -> int:
        return self.rows * self.n // 128

    @property
    def lane_cols(self) -> int:
        """Elements of the tile in one TMEM lane."""
        return self.n // 2 if self.datapath == "B" else self.n

    @property
    def ncols(self) -> int:
        cells = self.lane_cols * (32 if self.unpacked else self.bits) // 32
        return max(32, 1 << (cells - 1).bit_length())

    @property
    def width(self) -> int:
        """Dense elements per lane of the physical (lane = row) view of the allocation."""
        return self.ncols * 32 // self.bits

    def reg_layout(self):
        if self.datapath == "B":
            return datapath_b_layout(self.n)
        return register_layout(self.shape, self.rows, self.n, self.dtype)

    def tmem_layout(self):
        if self.datapath != "B":
            return tmem_layout(self.rows, self.n, self.unpacked, self.sub_slab)
        stride = 2 if self.unpacked else 1
        return TileLayout(S[(64, 2, self.n // 2) : (1 @ TLane, 64 @ TLane, stride @ TCol)])

    def __str__(self) -> str:
        extra = "-unpacked" * self.unpacked + f"-sub{self.sub_slab}" * bool(self.sub_slab)
        chunks = f"-{self.chunks}windows" if self.chunks > 1 else ""
        return f"{self.datapath}-{self.dtype}-{self.rows}x{self.n}-{self.shape}{extra}{chunks}"


def physical_kernel(tile: Tile, direction: str, reg_layout=None, t_layout=None):
    """Tensor memory as the ISA sees it around copies of ours. ``P`` (128 lanes x ``width``
    dense elements) goes in through a lane = row view first. ``st``: the register tile
    (``A[t, i]`` is value ``i`` of thread ``t``) is stored into the tile, then the whole
    physical view is read back into ``Out``. ``ld``: the tile is loaded into the same
    registers (holding ``A`` before) and they are written to ``Out[t, i]``. With ``chunks`` > 1 the tile moves in column
    windows, one per iteration of a loop."""
    dtype, rows, n, per, width, ncols = (
        tile.dtype, tile.rows, tile.n, tile.per, tile.width, tile.ncols,
    )  # fmt: skip
    reg_l = reg_layout or tile.reg_layout()
    t_l = t_layout or tile.tmem_layout()
    out_cols = width if direction == "st" else per
    w = n // tile.chunks
    chunks = tile.chunks
    phys_l = wg_local_layout(width)
    store = direction == "st"

    # fmt: off
    @T.prim_func
    def tmem_image(A_ptr: T.handle, P_ptr: T.handle, O_ptr: T.handle):
        A = T.match_buffer(A_ptr, (128, per), dtype)
        P = T.match_buffer(P_ptr, (128, width), dtype)
        Out = T.match_buffer(O_ptr, (128, out_cols), dtype)
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
        phys = T.decl_buffer((128, width), dtype, scope="tmem", allocated_addr=0,
                             layout=tmem_datapath_layout("D", 128, width))
        tmem = T.decl_buffer((rows, n), dtype, scope="tmem", allocated_addr=0, layout=t_l)
        P_reg = T.alloc_local((width,), dtype)
        P_frag = P_reg.view(128, width, layout=phys_l)
        R = T.alloc_local((per,), dtype)
        R_frag = R.view(rows, n, layout=reg_l)
        for i in range(width):
            P_reg[i] = P[tid, i]
        Tx.wg.copy_async(phys[:, :], P_frag[:, :])
        T.ptx.tcgen05.wait__st.sync.aligned()
        T.cuda.cta_sync()
        for i in range(per):
            R[i] = A[tid, i]  # a load must overwrite all of it
        if store:
            if chunks == 1:  # one window, no loop
                Tx.wg.copy_async(tmem[:, :], R_frag[:, :])
            else:
                for ck in range(chunks):
                    Tx.wg.copy_async(tmem[:, ck * w:ck * w + w], R_frag[:, ck * w:ck * w + w])
            T.ptx.tcgen05.wait__st.sync.aligned()
            T.cuda.cta_sync()
            Tx.wg.copy_async(P_frag[:, :], phys[:, :])
            T.ptx.tcgen05.wait__ld.sync.aligned()
            for i in range(width):
                Out[tid, i] = P_reg[i]
        else:
            if chunks == 1:
                Tx.wg.copy_async(R_frag[:, :], tmem[:, :])
            else:
                for ck in range(chunks):
                    Tx.wg.copy_async(R_frag[:, ck * w:ck * w + w], tmem[:, ck * w:ck * w + w])
            T.ptx.tcgen05.wait__ld.sync.aligned()
            for i in range(per):
                Out[tid, i] = R[i]
        T.ptx["tcgen05.fence::before_thread_sync"]()
        T.cuda.cta_sync()
        if warp_id == 0:
            T.ptx["tcgen05.fence::after_thread_sync"]()
            T.ptx["tcgen05.dealloc.cta_group::1.sync.aligned.b32"](tmem_addr[0], ncols)
    # fmt: on
    return tmem_image


def element_cells(tile: Tile, place=isa_place):
    """(thread, register value) -> (TMEM lane, element of the physical view) of every
    element of the tile: the register side as the register layout says, the TMEM side as
    ``place`` (the ISA's figure) says. An unpacked 16-bit element is the low half of its
    32-bit cell."""
    layout = tile.reg_layout()
    out = {}
    for r in range(tile.rows):
        for c in range(tile.n):
            at = {str(k): int(v) for k, v in layout.apply(r, c, shape=(tile.rows, tile.n)).items()}
            thread = at.get("tid_in_wg", 32 * at.get("wid_in_wg", 0) + at.get("laneid", 0))
            lane, col = place(tile.datapath, r, c, tile.n, tile.sub_slab)
            out[(thread, at["m"])] = (lane, 2 * col if tile.unpacked else col)
    assert len(out) == tile.rows * tile.n  # the register layout holds each element once
    return out


def check_store(tile: Tile, a, p, out, place=isa_place):
    """Every element is in the cell the ISA's figure names; every other cell kept ``P``
    (the upper half of an unpacked cell is unspecified by the ISA: not checked)."""
    a, p, out = runtime.bits(a), runtime.bits(p), runtime.bits(out)
    untouched = np.ones(p.shape, dtype=bool)
    for (thread, m), (lane, col) in element_cells(tile, place).items():
        assert out[lane, col] == a[thread, m], f"thread {thread} value {m} -> ({lane}, {col})"
        untouched[lane, col] = False
        if tile.unpacked:
            untouched[lane, col + 1] = False
    np.testing.assert_array_equal(out[untouched], p[untouched])


def check_load(tile: Tile, p, out, place=isa_place):
    p, out = runtime.bits(p), runtime.bits(out)
    cells = element_cells(tile, place)
    assert len(cells) == out.size  # every register of the fragment is written
    for (thread, m), (lane, col) in cells.items():
        assert out[thread, m] == p[lane, col], f"thread {thread} value {m} <- ({lane}, {col})"


TVM_TILES = [
    Tile("B", "float32", 64, "32x32b"),
    Tile("B", "float32", 256, "32x32b"),
    Tile("B", "bfloat16", 64, "32x32b"),
    Tile("B", "float16", 32, "32x32b", unpacked=True),
    Tile("D", "float32", 64, "16x256b", chunks=4),
    Tile("D", "bfloat16", 64, "16x128b", chunks=2),
    Tile("D", "float32", 32, "16x64b", chunks=2),
    Tile("D", "float16", 32, "16x32bx2", unpacked=True),
    Tile("D", "float16", 64, "32x32b", chunks=4),
    Tile("D", "uint8", 32, "32x32b"),
    Tile("D", "int8", 64, "16x32bx2"),
    Tile("F", "float32", 16, "16x256b"),
    Tile("F", "float16", 32, "16x64b", sub_slab=1),
    Tile("F", "float32", 64, "16x256b", chunks=2),
]


def _tile_plans(tile, direction, **layouts):
    """Plan of the tile's copy (call 1: call 0 is the staging view's, a loop over windows
    is one call)."""
    reports = tcd.explain(physical_kernel(tile, direction, **layouts), ARCH)
    return [reports[1].plan]


def _run_image(tile, direction, rng, where, gpu, pipeline=tcd.STRICT_PIPELINE, **layouts):
    a = runtime.random_array((128, tile.per), tile.dtype, rng)
    p = runtime.random_array((128, tile.width), tile.dtype, rng)
    out = runtime.poison_like(a if direction == "ld" else p)
    func = physical_kernel(tile, direction, **layouts)
    _, _, got = execute(func, [a, p, out], where, gpu, pipeline, target=ARCH)
    return a, p, got


@pytest.mark.parametrize("where", WHERE_SM100)
@pytest.mark.parametrize("tile", TVM_TILES, ids=str)
def test_store_puts_each_element_where_the_isa_figure_says(tile, rng, where, gpu):
    a, p, out = _run_image(tile, "st", rng, where, gpu)
    check_store(tile, a, p, out)


@pytest.mark.parametrize("where", WHERE_SM100)
@pytest.mark.parametrize("tile", TVM_TILES, ids=str)
def test_load_reads_each_element_where_the_isa_figure_says(tile, rng, where, gpu):
    _, p, out = _run_image(tile, "ld", rng, where, gpu)
    check_load(tile, p, out)


@pytest.mark.parametrize(
    "tile, wrong",
    [
        (Tile("B", "float32", 64, "32x32b"), _swapped_halves),
        (Tile("F", "float32", 16, "16x256b"), _f_as_rows),
    ],
    ids=["B-halves-swapped", "F-read-as-rows"],
)
def test_negative_control_a_wrong_figure_fails_the_cell_check(tile, wrong, rng):
    a, p, out = _run_image(tile, "st", rng, "sim", None)
    check_store(tile, a, p, out)
    with pytest.raises(AssertionError):
        check_store(tile, a, p, out, place=wrong)
    _, p, out = _run_image(tile, "ld", rng, "sim", None)
    with pytest.raises(AssertionError):
        check_load(tile, p, out, place=wrong)


def test_negative_control_the_builtin_b_copy_names_lane_0_from_every_warp(rng):
    """TVM's built-in moves a B tile with one address for all four warps (lane 0): the ISA
    lets warp w reach lanes 32w..32w+31 only, so the simulator stops at warp 1's store.
    The same program lowered by ours round-trips."""
    b_tile = tmem_datapath_layout("B", 64, 64)
    tvm_frag = tcgen05_atom_layout("32x32b", (64, 64), "float32")
    func = roundtrip("float32", 64, 64, "32x32b", st_layout=tvm_frag, t_layout=b_tile)
    a = runtime.random_array((128, 32), "float32", rng)
    out = sim.run(func, [a, runtime.poison_like(a)], target=ARCH, pipeline=tcd.STRICT_PIPELINE)
    np.testing.assert_array_equal(runtime.bits(out[1]), runtime.bits(a))
    with pytest.raises(SimError, match=r"warp 1 .* its tcgen05 \.32x32b at lane 0 touches"):
        sim.run(func, [a, runtime.poison_like(a)], target=ARCH, pipeline="tirx")


def test_tvm_b_fragment_is_our_b_layout_and_takes_the_same_plan():
    for n in (32, 64, 256):
        with tvm.target.Target({"kind": "cuda", "arch": ARCH}):
            tvm_frag = tcgen05_atom_layout("32x32b", (64, n), "float32").canonicalize()
            assert tvm_ffi.structural_equal(datapath_b_layout(n).canonicalize(), tvm_frag)
    tile = Tile("B", "float32", 64, "32x32b")
    theirs = tcgen05_atom_layout("32x32b", (64, 64), "float32")
    assert _tile_plans(tile, "ld", reg_layout=theirs) == _tile_plans(tile, "ld")


B_PLANS = [
    # tile -> nums, pack, regs per thread
    (Tile("B", "float32", 64, "32x32b"), [32], False, 32),
    (Tile("B", "float32", 512, "32x32b"), [128, 128], False, 256),
    (Tile("B", "bfloat16", 64, "32x32b"), [16], False, 16),
    (Tile("B", "float16", 32, "32x32b", unpacked=True), [8], True, 8),
]


@pytest.mark.parametrize("tile, nums, pack, regs", B_PLANS, ids=[str(c[0]) for c in B_PLANS])
def test_plan_of_a_datapath_b_tile(tile, nums, pack, regs):
    """Datapath B (.cta_group::2, M=128: 64 rows per CTA) is a .32x32b copy of its
    (128, N/2) image: thread t, lane t, every warp in its own chunk."""
    for plan in _tile_plans(tile, "st") + _tile_plans(tile, "ld"):
        assert plan["datapath"] == "B" and plan["shape"] == "32x32b" and plan["slabs"] == 1
        assert (plan.get("nums", [plan["num"]]), plan["pack"], plan["regs_per_thread"]) == (
            nums,
            pack,
            regs,
        )


def test_a_tile_declared_datapath_e_is_taken_as_b():
    """E (M=64 .ws) has B's organization: TVM's factory builds the same layout."""
    tile = Tile("B", "float32", 64, "32x32b")
    [plan] = _tile_plans(tile, "ld", t_layout=tmem_datapath_layout("E", 64, 64))
    assert plan["datapath"] == "B"


WINDOW_PLANS = [
    # tile -> shape, nums, slab stride, reg offset of window 0 and of the loop's window
    (Tile("D", "float32", 64, "16x256b", chunks=4), "16x256b", [2], 32, "ck * 8"),
    (Tile("D", "bfloat16", 64, "16x128b", chunks=2), "16x128b", [4], 16, "ck * 8"),
    (Tile("D", "float32", 32, "16x64b", chunks=2), "16x64b", [8], 16, "ck * 8"),
]


@pytest.mark.parametrize(
    "tile, shape, nums, stride, offset", WINDOW_PLANS, ids=[str(c[0]) for c in WINDOW_PLANS]
)
def test_plan_of_a_column_window_of_a_128_row_fragment(tile, shape, nums, stride, offset):
    """A window keeps the whole fragment's register distance between the two 16-lane
    slabs (TVM's sliced .16x256b views): slab 1 starts ``slab_stride`` registers on."""
    [plan] = _tile_plans(tile, "ld")
    assert (plan["shape"], plan.get("nums", [plan["num"]]), plan["slabs"]) == (shape, nums, 2)
    assert plan["slab_stride"] == stride and plan["reg_offset"] == offset


def test_a_constant_window_has_a_constant_register_offset():
    full = tcgen05_atom_layout("16x256b", (128, 64), "float32")

    @T.prim_func
    def window(A_ptr: T.handle):
        A = T.match_buffer(A_ptr, (128, 64), "float32")
        T.device_entry()
        T.warpgroup_id([1])
        T.warp_id_in_wg([4])
        T.lane_id([32])
        tid = T.thread_id([128])
        tmem = T.decl_buffer((128, 64), "float32", scope="tmem", allocated_addr=0,
                             layout=tmem_datapath_layout("D", 128, 64))  # fmt: skip
        R = T.alloc_local((64,), "float32")
        R_frag = R.view(128, 64, layout=full)
        Tx.wg.copy_async(R_frag[:, 16:32], tmem[:, 16:32])
        T.ptx.tcgen05.wait__ld.sync.aligned()
        A[tid, 0] = R[8]

    [report] = tcd.explain(window, ARCH)
    p = report.plan_object
    assert (p.reg_offset, p.slab_stride, p.col_offset, p.nums) == (8, 32, 16, (2,))


def test_declines_a_register_window_chosen_by_the_thread():
    """A window that moves with the thread id has a runtime register index: declined (the
    control, a window moving with a loop, is taken above)."""
    full = tcgen05_atom_layout("16x256b", (128, 32), "float32")

    @T.prim_func
    def by_thread(A_ptr: T.handle):
        A = T.match_buffer(A_ptr, (128, 32), "float32")
        T.device_entry()
        T.warpgroup_id([1])
        T.warp_id_in_wg([4])
        T.lane_id([32])
        tid = T.thread_id([128])
        tmem = T.decl_buffer((128, 32), "float32", scope="tmem", allocated_addr=0,
                             layout=tmem_datapath_layout("D", 128, 32))  # fmt: skip
        R = T.alloc_local((32,), "float32")
        R_frag = R.view(128, 32, layout=full)
        s = T.meta_var(tid % 2 * 16)
        Tx.wg.copy_async(R_frag[:, s : s + 16], tmem[:, 0:16])
        T.ptx.tcgen05.wait__ld.sync.aligned()
        A[tid, 0] = R[8]

    [reason] = _reasons(by_thread)
    assert "register offset" in reason and "not the variable of an enclosing loop" in reason


# -- what stays declined, and why ---------------------------------------------------------
def _tile_reasons(tile, direction="ld", **layouts):
    return _reasons(physical_kernel(tile, direction, **layouts), calls=[1])


@pytest.mark.parametrize("first", [0, 64])
def test_declines_64_rows_of_a_lane_equals_row_tile_naming_the_isa_rule(first):
    """TVM reads ``tmem[0:64, :]`` of a D tile with a 64-row fragment as lanes
    32w..32w+15 (datapath F's placement). The tile says row r is lane r, and the ISA lets
    warp w (rows 16w..16w+15 of the fragment) reach only lanes 32w..32w+31."""
    layout = tcgen05_atom_layout("16x64b", (64, 16), "float32")

    @T.prim_func
    def rows_of_d(A_ptr: T.handle):
        A = T.match_buffer(A_ptr, (128, 8), "float32")
        T.device_entry()
        T.warpgroup_id([1])
        T.warp_id_in_wg([4])
        T.lane_id([32])
        tid = T.thread_id([128])
        tmem = T.decl_buffer((128, 16), "float32", scope="tmem", allocated_addr=0,
                             layout=tmem_datapath_layout("D", 128, 16))  # fmt: skip
        R = T.alloc_local((8,), "float32")
        R_frag = R.view(64, 16, layout=layout)
        Tx.wg.copy_async(R_frag[:, :], tmem[first : first + 64, :])
        T.ptx.tcgen05.wait__ld.sync.aligned()
        A[tid, 0] = R[0]

    [reason] = _reasons(rows_of_d)
    lane = "r" if first == 0 else "64 + r"
    assert reason.startswith("src tmem: TMEM layout TileLayout(S[(64, 16):(1 @ Axis.TLane")
    assert f"puts row r at lane {lane}: rows of a lane = row tile (datapath D" in reason
    assert "warp w reaches only lanes 32w..32w+31 (9.7.16.8.1)" in reason
    assert "declare the tile tmem_datapath_layout('F', 64, N)" in reason
    # The control: the same fragment on the tile declared F is taken.
    [plan] = _tile_plans(Tile("F", "float32", 16, "16x64b"), "ld")
    assert plan["datapath"] == "F"


def test_declines_a_16x_fragment_on_a_datapath_b_tile():
    tile = Tile("B", "float32", 64, "32x32b")
    wrong = tcgen05_atom_layout("16x256b", (64, 64), "float32")
    [reason] = _tile_reasons(tile, reg_layout=wrong)
    assert "is not datapath B's register tile (thread t holds TMEM lane t" in reason
    assert "a .16x* fragment reads datapath F's lanes" in reason


def test_declines_a_column_window_of_a_datapath_b_tile():
    tile = Tile("B", "float32", 64, "32x32b", chunks=2)
    reasons = _tile_reasons(tile)
    assert reasons and all("is a column window of a datapath B tile" in r for r in reasons)
    assert all("copy the whole (64, N) tile" in r for r in reasons)


def test_declines_a_window_narrower_than_one_instruction_unit():
    # .16x256b moves 8 float32 columns per .num unit: a 4-column window is no instruction.
    tile = Tile("D", "float32", 64, "16x256b", chunks=16)
    reasons = _tile_reasons(tile)
    assert reasons and all("matches no tcgen05 fragment of datapath D" in r for r in reasons)


def test_strict_mode_refuses_64_rows_of_a_d_tile():
    tile = Tile("F", "float32", 16, "16x64b")
    d_rows = TileLayout(S[(64, 16) : (1 @ TLane, 1 @ TCol)])
    with pytest.raises(tcd.DispatchError, match="warp w reaches only lanes 32w..32w"):
        toolchain.cuda_source(
            physical_kernel(tile, "ld", t_layout=d_rows), ARCH, tcd.STRICT_PIPELINE
        )


# -- SASS of TVM's kinds of call ----------------------------------------------------------
def copies_kernel(tile: Tile, direction: str):
    """Only the tile's copies (as TVM's codegen tests write them): the SASS to count."""
    dtype, rows, n, per, w, chunks = tile.dtype, tile.rows, tile.n, tile.per, tile.n // tile.chunks, tile.chunks  # fmt: skip
    reg_l, t_l, store = tile.reg_layout(), tile.tmem_layout(), direction == "st"

    # fmt: off
    @T.prim_func
    def copies(A_ptr: T.handle):
        A = T.match_buffer(A_ptr, (128, per), dtype)
        T.device_entry()
        T.warpgroup_id([1])
        T.warp_id_in_wg([4])
        T.lane_id([32])
        tid = T.thread_id([128])
        tmem = T.decl_buffer((rows, n), dtype, scope="tmem", allocated_addr=0, layout=t_l)
        R = T.alloc_local((per,), dtype)
        R_frag = R.view(rows, n, layout=reg_l)
        if store:
            for i in range(per):
                R[i] = A[tid, i]
            if chunks == 1:  # one window, no loop
                Tx.wg.copy_async(tmem[:, :], R_frag[:, :])
            else:
                for ck in range(chunks):
                    Tx.wg.copy_async(tmem[:, ck * w:ck * w + w], R_frag[:, ck * w:ck * w + w])
            T.ptx.tcgen05.wait__st.sync.aligned()
        else:
            if chunks == 1:
                Tx.wg.copy_async(R_frag[:, :], tmem[:, :])
            else:
                for ck in range(chunks):
                    Tx.wg.copy_async(R_frag[:, ck * w:ck * w + w], tmem[:, ck * w:ck * w + w])
            T.ptx.tcgen05.wait__ld.sync.aligned()
            for i in range(per):
                A[tid, i] = R[i]
    # fmt: on
    return copies


TVM_SASS = [
    (Tile("B", "float32", 64, "32x32b"), "ld", {"LDTM.x32": 1}),
    (Tile("B", "float32", 64, "32x32b"), "st", {"STTM.x32": 1}),
    (Tile("B", "float16", 32, "32x32b", unpacked=True), "ld", {"LDTM.x8.PACK16BIT": 1}),
    (Tile("D", "float32", 128, "16x256b", chunks=8), "ld", {"LDTM.16dp256bit.x2": 16}),
    (Tile("D", "float32", 64, "16x64b", chunks=4), "st", {"STTM.16dp64bit.x8": 8}),
    (Tile("D", "uint8", 32, "32x32b"), "st", {"STTM.x8": 1}),
]


@pytest.mark.parametrize(
    "tile, direction, expected", TVM_SASS, ids=[f"{c[0]}-{c[1]}" for c in TVM_SASS]
)
def test_sass_of_tvm_kinds_of_call(tile, direction, expected):
    """The instructions, and no local memory: the loop over windows is unrolled, so its
    register indices are constants again."""
    src = toolchain.cuda_source(copies_kernel(tile, direction), ARCH, tcd.STRICT_PIPELINE)
    sass = toolchain.sass(toolchain.nvrtc_compile(src, ARCH))
    assert Counter(_TM.findall(sass)) == Counter(expected)
    assert not re.search(r"\b(LDL|STL)\b", sass)
