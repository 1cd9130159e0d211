"""Property-based differential fuzzing of every variant through the simulator.

Random programs (:mod:`tirx_cuda_dispatch.fuzz`: copies global <-> shared at every scope
with odd counts, offsets and swizzles, register layouts, m8n8 fragments against row-major,
column-major, padded and swizzled tiles, elementwise ops on registers and on shared
memory, every dtype, reductions, cp.async copies with predicates, warp GEMMs on mma
fragments, TMA loads and stores with boxes past the tensor's edges, warpgroup GEMMs on
wgmma) are lowered by our pipeline and by TVM's built-in one and simulated.
Our output must equal numpy and the built-in's (where the built-in is right) bit for bit;
a program ours refuses must be one nothing can lower, or one that is out of bounds. Each
case records, as hypothesis events, whether our variants took every call or why one
declined, and what the built-in did (``--hypothesis-show-statistics`` prints them).

CI runs a fast profile. The long one (10,000 cases or more)::

    TIRX_FUZZ_EXAMPLES=2000 python3 -m pytest -q tests/sim/test_fuzz.py --hypothesis-show-statistics
"""

from __future__ import annotations

import os
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import tirx_cuda_dispatch as tcd
from tirx_cuda_dispatch import fuzz, runtime

EXAMPLES = int(os.environ.get("TIRX_FUZZ_EXAMPLES", "10"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize="TIRX_FUZZ_EXAMPLES" not in os.environ,  # CI: the same cases every run
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


class DrawChooser:
    """A :class:`fuzz.Chooser` over hypothesis' ``draw`` (so cases shrink)."""

    def __init__(self, draw):
        self.draw = draw

    def pick(self, options):
        return self.draw(st.sampled_from(list(options)))

    def integer(self, lo, hi):
        return self.draw(st.integers(lo, hi))


@st.composite
def cases(draw, kind):
    return fuzz.random_case(DrawChooser(draw), kind)


@pytest.mark.parametrize("kind", sorted(fuzz.GENERATORS))
@given(data=st.data())
@FUZZ
def test_ours_equals_numpy_and_the_builtin(kind, data):
    case = data.draw(cases(kind))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # TVM's scalar-fallback warning
        verdict = fuzz.differential(case)
    event(f"ours: {verdict.ours}")
    event(f"built-in: {verdict.builtin.split(':')[0]}")
    assert verdict.ok, f"{case}: {verdict.problems}"


def test_the_generators_cover_what_the_issue_asks_for():
    """Odd element counts, offsets, every copy dtype, every scope, global->global and
    shared->shared copies (swizzled too) and shared-memory elementwise are in the space (a generator that lost them would pass silently)."""
    seen = {"odd": False, "offset": False, "dtypes": set(), "scopes": set(), "paths": set()}
    for seed in range(300):
        case = fuzz.random_case(fuzz.RandomChooser(seed), "gmem_smem")
        rows, cols = case.params["tile"]
        seen["odd"] |= (rows * cols) % 32 != 0
        seen["offset"] |= case.params["col_offset"] > 0
        seen["dtypes"].add(case.params["dtype"])
        seen["scopes"].add(case.params["scope"])
        seen["paths"].add((case.params["path"], case.params["second_layout"] is not None))
    assert seen["odd"] and seen["offset"]
    assert seen["paths"] == {
        ("shared", False),
        ("global", False),
        ("shared_shared", False),
        ("shared_shared", True),
    }
    assert seen["dtypes"] == set(fuzz.COPY_DTYPES)
    assert seen["scopes"] == {"warp", "warpgroup", "cta"}


def test_a_wrong_output_is_caught():
    """Negative control: a case whose expected answer is off in one bit fails."""
    case = fuzz.random_case(fuzz.RandomChooser(3), "gmem_smem")
    case.expected = case.expected.copy()
    runtime.bits(case.expected).reshape(-1)[0] ^= 1
    verdict = fuzz.differential(case)
    assert not verdict.ok and "ours differs from numpy" in verdict.problems[0]


def test_a_simulator_gap_in_the_builtins_kernel_is_a_problem_not_a_finding(monkeypatch):
    """TVM's built-in warp reduction calls ``T.cuda.warp_reduce``: with the simulator's
    entry for it, the case passes; without it, the gap is reported as ours to fix (not
    filed as a fault of the built-in)."""
    from tirx_cuda_dispatch import sim

    case = next(
        c
        for c in (fuzz.random_case(fuzz.RandomChooser(s), "register_reduction") for s in range(400))
        if c.params["layouts"] == "warp_shuffle"
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        verdict = fuzz.differential(case)
        assert verdict.ok and verdict.builtin == "lowered", verdict.problems
        monkeypatch.delitem(sim.CALLS, "tirx.cuda.warp_reduce")
        verdict = fuzz.differential(case)
    assert verdict.problems and "cannot run the built-in's kernel" in verdict.problems[0]
    assert "tirx.cuda.warp_reduce" in verdict.problems[0]


def test_a_builtin_that_is_wrong_is_a_finding_not_a_failure():
    """TVM's built-in ldstmatrix takes float32 fragments with 16-bit matrix loads (it has no
    dtype check) and scrambles them; ours declines ldmatrix there and copies right."""
    for seed in range(200):
        case = fuzz.random_case(fuzz.RandomChooser(seed), "fragment")
        if case.params["dtype"] == "float32" and case.params["shared"] == "row":
            break
    verdict = fuzz.differential(case)
    assert verdict.ok, verdict.problems
    assert verdict.builtin.startswith("WRONG"), verdict.builtin


def _alignment(case) -> int:
    """The widest power of two (16 at most) dividing every row start of A's region, in
    bytes."""
    elem = case.args[0].itemsize
    rows = case.args[0].shape[0]
    starts = [(r * case.params["cols"] + case.params["col_offset"]) * elem for r in range(rows)]
    return next(a for a in (16, 8, 4, 2, 1) if all(x % a == 0 for x in starts))


def test_the_ldgsts_generator_covers_what_the_issue_asks_for():
    """cp.async programs: the issue's odd tiles, column offsets making 16-, 8-, 4- and
    2-byte aligned regions (the last refused), swizzles, every predicate form with exact
    and partition-independent answers, every dtype and scope."""
    seen = {k: set() for k in ("tiles", "align", "swizzle", "pred", "dtype", "threads")}
    claims = 0
    for seed in range(150):
        case = fuzz.random_case(fuzz.RandomChooser(seed), "ldgsts")
        p = case.params
        seen["tiles"].add((p["dtype"], p["tile"]))
        seen["align"].add(_alignment(case))
        seen["swizzle"].add(p["swizzle"])
        var, _, fill = p["predicate"].partition(" < ")
        seen["pred"].add((var, fill.partition("(")[2].rstrip(")"), case.expected is not None))
        seen["dtype"].add(p["dtype"])
        seen["threads"].add((p["scope"], p["cta_threads"]))
        claims += case.declines is not None
    assert set(fuzz.LDGSTS_TILES) <= seen["tiles"]
    assert {16, 8, 4, 2} <= seen["align"] and 0 < claims < 100
    assert seen["swizzle"] == {None, 32, 64, 128}
    assert seen["pred"] >= {
        ("none", "", True),
        *((v, f, True) for v in ("bx", "tid") for f in ("zero fill", "skip")),
        *(("tid", f, False) for f in ("zero fill", "skip")),  # only A's or the fill
    }
    assert seen["dtype"] == set(fuzz.COPY_DTYPES)
    assert seen["threads"] == {("warp", 32), ("warpgroup", 128), ("cta", 128), ("cta", 256)}


def test_the_mma_generator_covers_what_the_issue_asks_for():
    """mma programs: both shapes and dtypes, every transpose, C in place, alpha and beta
    0, 1 and others, tilings up to 2 x 4 x 3, and fragments the variant must refuse."""
    seen = {k: set() for k in ("shape", "dtype", "t", "c_is_d", "alpha", "beta", "tiles")}
    refusals = set()
    for seed in range(150):
        case = fuzz.random_case(fuzz.RandomChooser(seed), "mma")
        p = case.params
        seen["shape"].add(p["shape"])
        seen["dtype"].add(p["dtype"])
        seen["t"].add((p["ta"], p["tb"]))
        seen["c_is_d"].add(p["c_is_d"])
        seen["alpha"].add(p["alpha"] if p["alpha"] in (0.0, 1.0, -1.0) else "other")
        seen["beta"].add(p["beta"] if p["beta"] in (0.0, 1.0) else "other")
        seen["tiles"].add(p["tiles"])
        if case.declines is not None:
            refusals.update(case.declines[1])
            refusals.add(p["swapped"])
    assert seen["shape"] == {"m16n8k16", "m16n8k8"}
    assert seen["dtype"] == {"float16", "bfloat16"}
    assert len(seen["t"]) == 4 and seen["c_is_d"] == {True, False}
    assert seen["alpha"] == {0.0, 1.0, -1.0, "other"} and seen["beta"] == {0.0, 1.0, "other"}
    assert max(seen["tiles"]) == (2, 4, 3) and min(seen["tiles"]) == (1, 1, 1)
    assert refusals >= {"no mma form fits", "C is D", "A", "B", "D"}


def _lowered(kind: str, want=lambda case: True):
    """The first generated case of ``kind`` our variants lower whole, with an exact answer."""
    for seed in range(100):
        case = fuzz.random_case(fuzz.RandomChooser(seed), kind)
        exact = case.expected is not None and case.declines is None
        if exact and want(case) and fuzz.our_coverage(case.func) == "lowered":
            return seed, case
    raise AssertionError(f"no {kind} case our variants lower")


@pytest.mark.parametrize("kind", ["ldgsts", "mma", "tma", "wgmma", "wgmma_rs"])
def test_a_wrong_bit_in_a_new_kind_is_caught(kind):
    """Negative control of the cp.async, mma, TMA and wgmma (both forms) answers: one bit
    off fails the case, and the same case passes as drawn."""
    _, case = _lowered(kind)
    assert fuzz.differential(case).ok
    case.expected = case.expected.copy()
    runtime.bits(case.expected).reshape(-1)[0] ^= 1
    verdict = fuzz.differential(case)
    assert not verdict.ok and "ours differs from numpy in 1 of" in verdict.problems[0]


def test_a_missing_cp_async_wait_is_caught():
    """Negative control: the same cp.async program without its wait_group reads the tile
    while the copies are in flight; the simulator names it and the case fails."""
    seed, case = _lowered("ldgsts", lambda c: c.params["predicate"] == "none")
    chooser = fuzz.RandomChooser(seed)
    broken = fuzz.ldgsts_case(chooser, chooser.integer(0, 2**32 - 1), wait=False)
    assert str(broken) == str(case)
    assert fuzz.differential(case).ok  # the control: with the wait it passes
    verdict = fuzz.differential(broken)
    assert not verdict.ok and "cp.async" in verdict.problems[0], verdict.problems


def test_the_mma_answer_is_the_instructions_k_order():
    """The mma answer is exact to the instruction's K steps: the same sum in m16n8k8
    steps where the variant issues m16n8k16 differs in some bits (so a plan that summed
    in another order would be caught), and stays within the error bound."""
    _, case = _lowered(
        "mma", lambda c: c.params["shape"] == "m16n8k16" and c.params["alpha"] != 0.0
    )
    a, b, c, _ = case.args
    p = case.params
    k8 = fuzz._mma_chain(a, b, c, p["ta"], p["tb"], p["alpha"], p["beta"], 8)
    assert (runtime.bits(k8) != runtime.bits(case.expected)).any()
    assert case.close(k8) is None and case.close(case.expected) is None
    case.expected = k8
    verdict = fuzz.differential(case)
    assert not verdict.ok and "ours differs from numpy" in verdict.problems[0]


def test_the_tma_generator_covers_what_the_issue_asks_for():
    """TMA programs: loads and stores, every dtype, swizzle and scope, boxes inside the
    tensor, past its far edge, before its start and wholly outside, reductions (add,
    max), and draws the variant must refuse (an unlisted reduction, column blocks not a
    whole number of swizzle periods apart, an innermost coordinate not at a whole 16 bytes,
    a store's negative coordinate) at under a third."""
    seen = {
        k: set() for k in ("dir", "dtype", "swizzle", "scope", "where", "reduce", "words", "order")
    }
    outside = refused = 0
    for seed in range(150):
        case = fuzz.random_case(fuzz.RandomChooser(seed), "tma")
        p = case.params
        seen["dir"].add(p["direction"])
        seen["dtype"].add(p["dtype"])
        seen["swizzle"].add(p["swizzle"])
        seen["scope"].add(p["scope"])
        seen["reduce"].add(p["reduce"])
        seen["order"].add(p["order"])
        box = zip(p["start"], p["tile"], p["shape"], strict=True)
        beyond = [(s < 0, s + e > n) for s, e, n in box]
        seen["where"].add("before" if any(b for b, _ in beyond) else
                          "past" if any(a for _, a in beyond) else "inside")  # fmt: skip
        outside += any(s >= n or s + e <= 0 for s, e, n in
                       zip(p["start"], p["tile"], p["shape"], strict=True))  # fmt: skip
        if case.declines is not None:
            refused += 1
            seen["words"].update(case.declines[1])
    assert seen["dir"] == {"load", "store"}
    assert seen["dtype"] == set(fuzz.TMA_DTYPES) and seen["swizzle"] == {0, 32, 64, 128}
    assert seen["scope"] == set(fuzz.TMA_SCOPES)
    assert seen["where"] == {"inside", "past", "before"} and outside > 0
    assert seen["reduce"] == {None, "add", "max"} and seen["order"] == {"row", "column"}
    assert seen["words"] == {
        "bytes TMA needs",
        "use_tma_reduce=",
        "16 bytes of",
        "must not be negative",
    }
    assert refused < 50, refused


def _tma_control(want, corrupt) -> None:
    """The first TMA case ``want`` picks passes as drawn and fails once ``corrupt(case)``
    changed its answer."""
    _, case = _lowered("tma", want)
    assert fuzz.differential(case).ok
    case.expected = case.expected.copy()
    corrupt(case)
    verdict = fuzz.differential(case)
    assert not verdict.ok and "ours differs from numpy" in verdict.problems[0]


def _box(case) -> tuple:
    p = case.params
    return fuzz._inside(p["start"], p["tile"], p["shape"])


def test_a_tma_load_past_the_edge_must_read_zeros():
    """Negative control of the edge: a load whose box reaches past A passes with zeros
    there, and fails when the answer says A's poison (nothing written) instead."""

    def poison_past_the_edge(case):
        rows = max(case.params["shape"][0] - case.params["start"][0], 0)  # inside A
        case.expected[rows:] = runtime.poison_like(case.expected[rows:])

    _tma_control(
        lambda c: (
            c.params["direction"] == "load"
            and c.params["order"] == "row"
            and c.params["start"][0] + c.params["tile"][0] > c.params["shape"][0]
        ),
        poison_past_the_edge,
    )


def test_a_column_major_tma_load_reads_the_global_column_major():
    """Negative control of the transposed draws: a column-major load passes as drawn and
    fails when the answer reads A's bytes row-major."""

    def read_row_major(case):
        outer, inner = _box(case)
        case.expected[inner] = case.args[0][outer]

    _tma_control(
        lambda c: (
            c.params["direction"] == "load"
            and c.params["order"] == "column"
            and c.params["where"] == "inside"
        ),
        read_row_major,
    )


def test_a_tma_store_must_clip_and_reduce():
    """Negative control of the store: a reduction into B passes as drawn and fails when
    the answer is a plain store of the tile (B's old values dropped)."""

    def plain_store(case):
        outer, inner = _box(case)
        case.expected[outer] = case.args[0][inner]

    _tma_control(
        lambda c: (
            c.params["reduce"] == "add"
            and c.params["where"] == "inside"
            and c.params["order"] == "row"
        ),
        plain_store,
    )


def test_the_simulator_runs_tvms_thread_scope_tma_store():
    """TVM's built-in lowers a thread-scope TMA store with a 3-D tensor map encoded over
    ``handle_add_byte_offset(B.data, 0)``: the simulator finds the buffer under the call
    (it once unwrapped one call only and failed)."""
    import numpy as np

    from tirx_cuda_dispatch import demos, sim

    func = demos.tma_store_roundtrip("float16", (16, 64), 64, "thread", (64, 128), (0, 0))
    rng = np.random.default_rng(0)
    a = runtime.random_array((16, 64), "float16", rng)
    b = runtime.random_array((64, 128), "float16", rng)
    out = sim.run(func, [a, b], pipeline="tirx").arrays[1]
    want = b.copy()
    want[:16, :64] = a
    assert (runtime.bits(out) == runtime.bits(want)).all()


def test_a_case_builds_its_kernel_when_read_and_once(monkeypatch):
    """Generating a case draws its parameters and data; the kernel is built the first
    time ``case.func`` is read (the coverage tests read only parameters), and kept."""
    built = []
    real = fuzz.demos.wgmma_gemm_rs

    def counted(*args, **kwargs):
        built.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(fuzz.demos, "wgmma_gemm_rs", counted)
    case = fuzz.random_case(fuzz.RandomChooser(0), "wgmma_rs")
    assert built == []
    func = case.func
    assert case.func is func and len(built) == 1
    p = case.params
    assert built[0][:5] == (p["m"], p["n"], p["k"], p["dtype"], p["accum"])
    assert "wgmma" in str(tcd.explain(func, "sm_90a"))


def test_the_register_form_generator_covers_its_space():
    """wgmma with A in registers: both 16-bit types, M 64 and 128, every N and K of the
    16-bit lines, B K- and N-major under every swizzle, accum, and a misplaced A fragment
    (refused, naming the element) at a few percent."""
    seen = {k: set() for k in ("dtype", "m", "n", "k", "b", "accum")}
    refused = 0
    for seed in range(200):
        case = fuzz.random_case(fuzz.RandomChooser(seed), "wgmma_rs")
        p = case.params
        for key in seen:
            seen[key].add(p[key])
        if case.declines is not None:
            refused += 1
            assert p["a"] == "misplaced" and case.expected is None
    assert seen["dtype"] == {"float16", "bfloat16"} and seen["m"] == {64, 128}
    assert seen["n"] == set(fuzz.WGMMA_N) and seen["k"] == set(fuzz.WGMMA_K["16-bit"])
    swizzles = ("unswizzled", "32B", "64B", "128B")
    assert {f"{m}-major {s}" for m in ("K", "MN") for s in swizzles} <= seen["b"]
    assert seen["accum"] == {True, False} and 0 < refused < 40


def test_a_register_form_program_ours_must_refuse_is_checked():
    """The misplaced fragment's claim: ours refuses it with the element named (the
    differential passes), and a claim on a program ours lowers fails it (the control)."""
    for seed in range(100):
        refused = fuzz.random_case(fuzz.RandomChooser(seed), "wgmma_rs")
        if refused.declines is not None:
            break
    assert fuzz.differential(refused).ok
    _, lowered = _lowered("wgmma_rs")
    lowered.declines = refused.declines
    verdict = fuzz.differential(lowered)
    assert not verdict.ok and "ours must refuse it" in verdict.problems[0]


def test_the_wgmma_generator_covers_what_the_issue_asks_for():
    """wgmma programs: float16, bfloat16 and every float8 pairing, M 64 and 128, N from 8
    to 256, every K, A K- and M-major, B N- and K-major, every swizzle on each, accum,
    and layouts the variant must refuse (a swizzle wider than the operand's run, an
    MN-major float8 operand) at a few percent."""
    seen = {k: set() for k in ("types", "m", "n", "k", "a", "b", "accum", "words")}
    refused = 0
    for seed in range(150):
        case = fuzz.random_case(fuzz.RandomChooser(seed), "wgmma")
        p = case.params
        seen["types"].add((p["a_dtype"], p["b_dtype"]))
        seen["m"].add(p["m"])
        seen["n"].add(p["n"])
        seen["k"].add(p["k"])
        seen["a"].add(p["a"])
        seen["b"].add(p["b"])
        seen["accum"].add(p["accum"])
        if case.declines is not None:
            refused += 1
            seen["words"].update(case.declines[1])
    f8 = ("float8_e4m3fn", "float8_e5m2")
    assert seen["types"] == {("float16",) * 2, ("bfloat16",) * 2} | {(a, b) for a in f8 for b in f8}
    assert seen["m"] == {64, 128} and seen["n"] == set(fuzz.WGMMA_N)
    assert seen["k"] == {16, 32, 64, 128, 256} and seen["accum"] == {True, False}
    swizzles = ("unswizzled", "32B", "64B", "128B")
    assert {f"{m}-major {s}" for m in ("K", "MN") for s in swizzles} <= seen["a"]
    assert {f"{m}-major {s}" for m in ("K", "MN") for s in swizzles} <= seen["b"]
    assert seen["words"] == {"no canonical wgmma layout", "K-major operands only"}
    assert 0 < refused < 30


def test_the_wgmma_answer_is_the_instructions_k_order():
    """The wgmma answer is sm_90's summation per K step (16; 32 for float8): the same rule
    over the whole K at once differs in some bits (so a plan that summed in another order
    would be caught), and both lie within the error bound of the exact product."""
    _, case = _lowered("wgmma", lambda c: c.params["k"] >= 64 and not c.params["accum"])
    a, b, _ = case.args
    p = case.params
    b = b.T if p["b_dtype"] != p["a_dtype"] else b  # a mixed float8 pair passes Bt
    once = fuzz._wgmma_chain(a, b, None, (p["a_dtype"], p["b_dtype"]), p["k"])
    assert (runtime.bits(once) != runtime.bits(case.expected)).any()
    assert case.close(once) is None and case.close(case.expected) is None
    case.expected = once
    verdict = fuzz.differential(case)
    assert not verdict.ok and "ours differs from numpy" in verdict.problems[0]


def _simulated_then(change):
    """An ``execute`` that simulates and hands back the output changed by ``change``, as
    a GPU that computes otherwise would."""

    def execute(func, args, pipeline):
        out = fuzz.simulate(func, args, pipeline)
        return [change(x) if i == len(out) - 1 else x for i, x in enumerate(out)]

    return execute


def _ulps(x, n):
    """``x`` with every element moved ``n`` floats up (its bits plus n)."""
    y = x.copy()
    runtime.bits(y)[...] += n
    return y


def test_a_wgmma_one_float_off_is_caught():
    """A wgmma output one float off sm_90's summation fails (the GPU is held to it bit for
    bit, as for mma), and one off by the error bound fails ``close`` as well."""
    _, case = _lowered("wgmma")
    verdict = fuzz.differential(case, _simulated_then(lambda x: _ulps(x, 1)))
    assert not verdict.ok and "ours differs from numpy" in verdict.problems[0]
    a, b, d = case.args
    p = case.params
    b = b.T if p["b_dtype"] != p["a_dtype"] else b
    _, bound = fuzz._wgmma_bound(a, b, d if p["accum"] else None, (p["a_dtype"], p["b_dtype"]))
    assert case.close(case.expected) is None
    assert "outside the error bound" in case.close((case.expected + 2 * bound).astype(np.float32))


def test_a_partition_independent_answer_catches_a_foreign_value():
    """Negative control of the per-thread predicate's answer (every element A's or the
    fill): A's region passes, and one element that is neither A's nor zero fails."""
    for seed in range(200):
        case = fuzz.random_case(fuzz.RandomChooser(seed), "ldgsts")
        if case.expected is None and "zero" in case.params["predicate"]:
            break
    a = case.args[0]
    p = case.params
    region = (slice(None), slice(p["col_offset"], p["col_offset"] + p["tile"][1]))
    out = runtime.poison_like(a).copy()
    out[region] = a[region]
    assert case.close(out) is None
    bits, cell = runtime.bits(out), (0, p["col_offset"])
    foreign = bits[cell] ^ 1
    bits[cell] = foreign if foreign != 0 else foreign ^ 2
    assert "1 of" in case.close(out)


def test_a_program_ours_must_refuse_but_lowers_is_caught():
    """Negative control of ``Case.declines``: a claim that ours refuses a program it
    lowers is a problem; a refused one with the claim passes."""
    _, case = _lowered("mma")
    case.declines = ("mma.m16n8k*", ("no mma form fits",))
    verdict = fuzz.differential(case)
    assert not verdict.ok and "ours must refuse it" in verdict.problems[0]
    for seed in range(100):
        refused = fuzz.random_case(fuzz.RandomChooser(seed), "mma")
        if refused.declines is not None:
            break
    assert fuzz.differential(refused).ok


@pytest.mark.gpu
def test_gpu_agrees_with_the_simulator_on_random_programs():
    """bench/differential.py's worker on a few programs: both pipelines on the GPU and in
    the simulator, bit for bit (the script runs thousands in parallel)."""
    import importlib.util
    import time
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "bench" / "differential.py"
    spec = importlib.util.spec_from_file_location("differential", path)
    differential = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(differential)
    rows = differential._worker((list(range(16)), time.time() + 600))
    assert len(rows) == 16
    assert not [r for r in rows if r["problems"]], rows


def test_a_summary_keeps_the_reason_behind_a_long_install_path():
    """A located simulator error names its source file by the full path; an install under
    a deep prefix (CI's site-packages) pushed the reason past the one-line cut. The summary
    drops the directories, so the reason survives; the control shows the raw line alone
    would have been cut before it."""
    from tirx_cuda_dispatch.sim import SimError

    prefix = "/root/" + "deep/" * 40 + "site-packages/tirx_cuda_dispatch/demos.py:209"
    message = f"in call [2] Tx.warpgroup.copy at {prefix}: copy(B, A_s): read while cp.async"
    assert "cp.async" not in message[:300]  # the control: a plain cut loses the reason
    summary = fuzz._summary(SimError(message))
    assert summary.endswith("at demos.py:209: copy(B, A_s): read while cp.async"), summary
    assert "deep/" not in summary


def test_a_reduction_that_skips_its_workspace_wait_in_a_loop_is_caught(monkeypatch):
    """Negative control of the drawn loops: a case that runs a CTA reduction twice with no
    barrier after it passes as planned (the call waits before reusing its workspace);
    planned as if it ran once, the simulator reports the race and the case fails."""
    from tirx_cuda_dispatch import bounds

    def looping(case):
        p = case.params
        return p["repeat"] == 2 and not p["loop_sync"] and p["scope"] == "cta"

    for seed in range(400):
        case = fuzz.random_case(fuzz.RandomChooser(seed), "shared_reduction")
        if looping(case) and "workspace" in str(tcd.explain(case.func, "sm_90a")):
            break
    else:
        raise AssertionError("no looping CTA reduction with a workspace drawn")
    assert fuzz.differential(case).ok
    monkeypatch.setattr(bounds.Enclosing, "repeats", property(lambda self: False))
    verdict = fuzz.differential(case)
    assert not verdict.ok and "race" in verdict.problems[0], verdict.problems
