"""The register-induced partition (pure Python and TVM expressions: no codegen involved)."""

from __future__ import annotations

import itertools

import pytest
from tvm import ir, sym, tirx

from tirx_cuda_dispatch.errors import Decline
from tirx_cuda_dispatch.layout.atoms import MemoryView
from tirx_cuda_dispatch.layout.register import (
    MAX_GUARDED_SLOTS,
    THREAD_AXES,
    LoopOffset,
    LoopTerm,
    RegisterView,
    induced_partition,
    lift_to,
    loop_offset,
    register_table,
)
from tirx_cuda_dispatch.layout.vector import vector_candidates


def _owner(reg: RegisterView, index: int, threads: int) -> tuple[set[int], int]:
    """Independent oracle: the threads holding logical element ``index`` and its register."""
    coords: dict[str, int] = {}
    register = reg.base
    for ext, stride, axis in reversed(reg.atoms):
        digit = index % ext
        index //= ext
        if axis == "m":
            register += digit * stride
        else:
            coords[axis] = coords.get(axis, 0) + digit * stride
    homes = []  # the replicas put a copy at every combination of their digits
    for digits in itertools.product(*(range(ext) for ext, _, _ in reg.replicas)):
        home = dict(coords)
        for d, (_, stride, axis) in zip(digits, reg.replicas, strict=True):
            home[axis] = home.get(axis, 0) + d * stride
        homes.append(home)
    owners = set()
    for t in range(threads):
        values = {}
        for axis, spec in THREAD_AXES.items():
            extent = spec.extent or max(1, threads // spec.divisor)
            values[axis] = (t // spec.divisor) % extent
        if any(all(values[a] == c for a, c in home.items()) for home in homes):
            owners.add(t)
    return owners, register


def _check_moves_each_element_to_its_owner(reg, mem, p, threads):
    """Every (thread, register) pair receives the memory element the layouts assign it."""
    got = {}
    for rnd, tid in itertools.product(range(p.rounds), range(p.threads)):
        r_off, m_off = p.access(rnd, tid)
        assert r_off % p.vec == 0 and m_off % p.vec == 0
        for k in range(p.vec):
            assert (tid, r_off + k) not in got, "a register is written twice"
            got[(tid, r_off + k)] = m_off + k
    expected = {}
    for i in range(reg.size):
        owners, register = _owner(reg, i, threads)
        for t in owners:
            expected[(t, register)] = mem.offset(i)
    assert got == expected


def _seed(k: int) -> tuple[RegisterView, MemoryView]:
    return (
        RegisterView("R", ((32, 1, "laneid"), (k, 1, "m")), (), 0),
        MemoryView("S", ((32, k), (k, 1)), 0),
    )


@pytest.mark.parametrize(
    "k, elem_bits, vec, outer",
    [(8, 32, 4, 2), (16, 32, 4, 4), (8, 16, 8, 1), (16, 16, 8, 2)],
)
def test_seed_table(k, elem_bits, vec, outer):
    reg, mem = _seed(k)
    p = induced_partition([reg, mem], 0, "warp", 32, vector_candidates(elem_bits))
    assert (p.vec, p.rounds, p.vec_bits) == (vec, outer, 128)
    _check_moves_each_element_to_its_owner(reg, mem, p, 32)


CASES = {
    # lane l owns column l of an 8x32 tile: one element per round
    "column": (
        RegisterView("R", ((8, 1, "m"), (32, 1, "laneid")), (), 0),
        MemoryView("S", ((8, 32), (32, 1)), 0),
        "warp",
        32,
        1,
    ),
    # m16n8 accumulator fragment: lane = 4*(row%8) + col//2, pairs of columns
    "mma": (
        RegisterView("R", ((2, 2, "m"), (8, 4, "laneid"), (4, 1, "laneid"), (2, 1, "m")), (), 0),
        MemoryView("S", ((2, 64), (8, 8), (4, 2), (2, 1)), 0),
        "warp",
        32,
        2,
    ),
    # lane l owns rows l and l+32
    "two_rows": (
        RegisterView("R", ((2, 8, "m"), (32, 1, "laneid"), (8, 1, "m")), (), 0),
        MemoryView("S", ((2, 256), (32, 8), (8, 1)), 0),
        "warp",
        32,
        4,
    ),
    "warpgroup": (
        RegisterView("R", ((4, 1, "wid_in_wg"), (32, 1, "laneid"), (8, 1, "m")), (), 0),
        MemoryView("S", ((4, 256), (32, 8), (8, 1)), 0),
        "warpgroup",
        128,
        4,
    ),
    "cta_tx": (
        RegisterView("R", ((256, 1, "tx"), (4, 1, "m")), (), 0),
        MemoryView("S", ((256, 4), (4, 1)), 0),
        "cta",
        256,
        4,
    ),
    # replicated: lanes l and l+16 both hold row l
    "replica": (
        RegisterView("R", ((16, 1, "laneid"), (8, 1, "m")), ((2, 16, "laneid"),), 0),
        MemoryView("S", ((16, 8), (8, 1)), 0),
        "warp",
        32,
        4,
    ),
    # the memory tile starts 4 elements in: 128-bit still fits, 12 would not
    "offset": (
        RegisterView("R", ((32, 1, "laneid"), (8, 1, "m")), (), 0),
        MemoryView("S", ((32, 12), (8, 1)), 4),
        "warp",
        32,
        4,
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_partitions_move_every_element_to_its_owner(case):
    reg, mem, scope, threads, vec = CASES[case]
    p = induced_partition([reg, mem], 0, scope, threads, vector_candidates(32))
    assert p.vec == vec
    _check_moves_each_element_to_its_owner(reg, mem, p, threads)


def test_thread_strides_are_left_out_of_the_alignment_check():
    # Register thread stride 1 (laneid) would misalign a 4-wide vector if it counted.
    reg, mem = _seed(8)
    p = induced_partition([reg, mem], 0, "warp", 32, vector_candidates(32))
    assert p.vec == 4 and p.narrower_because is None


def test_memory_row_stride_does_count():
    reg = RegisterView("R", ((32, 1, "laneid"), (8, 1, "m")), (), 0)
    mem = MemoryView("S", ((32, 10), (8, 1)), 0)  # rows 10 apart: 4-wide misaligns
    p = induced_partition([reg, mem], 0, "warp", 32, vector_candidates(32))
    assert p.vec == 2 and "S per-thread stride 10" in p.narrower_because


@pytest.mark.parametrize(
    "atoms, replicas, scope, threads, reason",
    [
        (((32, 1, "laneid"), (8, 1, "m")), (), "cta", 128, "does not match scope cta"),
        (((16, 1, "laneid"), (8, 1, "m")), (), "warp", 32, "tells 16 threads apart"),
        (((32, 1, "tx"), (8, 1, "m")), (), "warp", 32, "thread axis tx of R does not match"),
        (((64, 1, "laneid"), (4, 1, "m")), (), "warp", 32, "laneid runs to 64"),
        (((16, 2, "laneid"), (8, 1, "m")), ((2, 16, "laneid"),), "warp", 32, r"strides \[2, 16\]"),
    ],
)
def test_declines_layouts_that_do_not_partition_the_scope(atoms, replicas, scope, threads, reason):
    n = 1
    for ext, _, _ in atoms:
        n *= ext
    reg = RegisterView("R", atoms, replicas, 0)
    mem = MemoryView("S", ((n, 1),), 0)
    with pytest.raises(Decline, match=reason):
        induced_partition([reg, mem], 0, scope, threads, vector_candidates(32))


def test_operands_that_disagree_on_ownership_decline():
    dst = RegisterView("Q", ((32, 1, "laneid"), (8, 1, "m")), (), 0)
    src = RegisterView("R", ((32, 8, "m"), (8, 1, "laneid")), (), 0)  # transposed ownership
    with pytest.raises(Decline, match="must agree"):
        induced_partition([dst, src], 0, "warp", 32, [(32, 1)])


def test_lift_to_broadcasts_extent_one_dimensions():
    row = ((8, 1, "m"),)  # a (1, 8) operand
    assert lift_to(row, (1, 8), (32, 8), "C") == ((32, 0, "m"), (8, 1, "m"))
    col = ((32, 1, "laneid"),)  # a (32, 1) operand
    assert lift_to(col, (32, 1), (32, 8), "C") == ((32, 1, "laneid"), (8, 0, "m"))
    assert lift_to(((8, 1, "m"),), (8,), (4, 8), "C") == ((4, 0, "m"), (8, 1, "m"))
    with pytest.raises(Decline, match="do not broadcast"):
        lift_to(((4, 1, "m"),), (1, 4), (32, 8), "C")


def test_register_operand_without_the_anchors_threads_must_replicate():
    dst = RegisterView("Q", ((32, 1, "laneid"), (8, 1, "m")), (), 0)
    row = RegisterView("C", ((32, 0, "m"), (8, 1, "m")), ((32, 1, "laneid"),), 0)
    p = induced_partition([dst, row], 0, "warp", 32, [(32, 1)])
    assert p.access(3, 5) == (3, 3)  # lane 5, register 3 reads the row's element 3
    unreplicated = RegisterView("C", ((32, 0, "m"), (8, 1, "laneid")), ((4, 8, "laneid"),), 0)
    with pytest.raises(Decline, match="does not replicate them"):
        induced_partition([dst, unreplicated], 0, "warp", 32, [(32, 1)])


@pytest.mark.parametrize("case", sorted(CASES))
def test_register_table_matches_the_owner_oracle(case):
    reg, _, scope, threads, _ = CASES[case]
    table = register_table(reg, scope, threads)
    expected = {}
    for i in range(reg.size):
        owners, register = _owner(reg, i, threads)
        for t in owners:
            expected[(t, register)] = i
    got = {
        (t, r): int(table.elements[t, col])
        for t in range(threads)
        for col, r in enumerate(table.registers)
        if table.elements[t, col] >= 0
    }
    assert got == expected
    assert table.holder_gaps() is None


def test_register_table_reports_gaps_and_collisions():
    half = RegisterView("R", ((16, 1, "laneid"), (8, 1, "m")), (), 0)
    assert register_table(half, "warp", 32).holder_gaps() == (16, 0)
    clash = RegisterView("R", ((2, 0, "m"), (32, 1, "laneid")), (), 0)
    with pytest.raises(Decline, match="several elements in one place"):
        register_table(clash, "warp", 32)


# -- register starts that move with loops ---------------------------------------------------
i_var, c_var, n_var = (tirx.Var(name, "int32") for name in ("i", "c", "n"))
# TVM's Range(begin, end): i in [0, 8), c in [1, 3)
LOOPS = {i_var: ir.Range(0, 8), c_var: ir.Range(1, 3)}


def _holds(cond, assignment) -> bool:
    analyzer = sym.Analyzer()
    for var, value in assignment.items():
        analyzer.bind(var, value)
    return bool(analyzer.simplify(cond))


def test_loop_offset_guards_pick_exactly_the_current_iteration():
    moving = LoopOffset((LoopTerm(c_var, 1, 2, 32), LoopTerm(i_var, 0, 8, 4)))
    assert moving.count == 16 and str(moving) == "32*c + 4*i (c in [1, 3), i in [0, 8))"
    assert moving.values() == [32 * c + 4 * i for c in (1, 2) for i in range(8)]
    for c, i in itertools.product((1, 2), range(8)):
        hits = [q for q in range(moving.count) if _holds(moving.at(q)[0], {c_var: c, i_var: i})]
        assert hits == [(c - 1) * 8 + i]


def test_loop_offset_splits_an_affine_start():
    base, moving = loop_offset("R", 8 + i_var * 4 + c_var * 32, LOOPS)
    assert base == 8
    terms = sorted((t.var.name, t.lo, t.trips, t.coeff) for t in moving.terms)
    assert terms == [("c", 1, 2, 32), ("i", 0, 8, 4)]
    assert sorted(moving.values()) == sorted(4 * i + 32 * c for i in range(8) for c in (1, 2))
    assert loop_offset("R", i_var * 4 - i_var * 4 + 12, LOOPS) == (12, None)  # the loop cancels


@pytest.mark.parametrize(
    "value, loops, reason",
    [
        (i_var * 4 + n_var, LOOPS, "depends on n: n is not the variable of an enclosing loop"),
        (
            i_var * 4,
            {i_var: ir.Range.from_min_extent(0, n_var)},
            "loop i starts at 0 and runs n times",
        ),
        (tirx.floordiv(i_var, 2) * 4, LOOPS, "not affine in loop i"),
        (i_var * 4, {i_var: ir.Range(0, MAX_GUARDED_SLOTS + 1)}, "takes 65 values"),
    ],
)
def test_loop_offset_declines_starts_that_cannot_become_constants(value, loops, reason):
    with pytest.raises(Decline, match=reason):
        loop_offset("R", value, loops)


def test_loop_offset_accepts_the_most_guarded_slots():  # control for the slot limit
    _, moving = loop_offset("R", i_var, {i_var: ir.Range(0, MAX_GUARDED_SLOTS)})
    assert moving.count == MAX_GUARDED_SLOTS


@pytest.mark.parametrize("coeff, vec", [(4, 4), (8, 4), (2, 2), (1, 1)])
def test_loop_offset_alignment_sets_the_vector_width(coeff, vec):
    """Each iteration's registers must stay aligned to the access: a start of ``2*i``
    allows 64-bit accesses of float32, not 128-bit ones (the control is ``4*i``)."""
    moving = LoopOffset((LoopTerm(i_var, 0, 4, coeff),))
    reg = RegisterView("R", ((4, 1, "m"),), (), 0, moving)
    mem = MemoryView("S", ((4, 1),), 0)
    p = induced_partition([reg, mem], 0, "thread", 1, vector_candidates(32))
    assert p.vec == vec
    if vec < 4:
        assert "R base offset" in p.narrower_because
    for value in moving.values():  # each iteration moves every element to its owner
        fixed = RegisterView("R", reg.atoms, (), value)
        p_fixed = induced_partition([fixed, mem], 0, "thread", 1, [(p.vec_bits, p.vec)])
        _check_moves_each_element_to_its_owner(fixed, mem, p_fixed, 1)
