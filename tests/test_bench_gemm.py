"""bench/gemm.py (parts 8 and 9 of bench/run.py), the parts that need no GPU: the mma.sync
limit kernel's SASS and its checks, the tables, the streaming-copy program and what the
pipelines make of it, and the parts' registration in bench/run.py."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from tvm.script import tirx as T
from tvm.script.tirx import tile as Tx

import tirx_cuda_dispatch
from modules import BENCH, ROOT, load_file
from tirx_cuda_dispatch import runtime, sim, toolchain


@pytest.fixture(scope="module")
def bench():
    return load_file("bench_gemm_under_test", BENCH / "gemm.py")


@pytest.fixture(scope="module")
def run_py():
    return load_file("bench_run_under_test", BENCH / "run.py")


def _columns(table: str) -> set[int]:
    """The number of cells of each line of a markdown table (an unescaped ``|`` in a
    cell adds one)."""
    return {len(line.replace("\\|", "").split("|")) for line in table.splitlines()}


# -- 8a. the mma.sync kernel --------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("tiles", [8, 16])
def test_mma_kernel_keeps_every_chain_in_a_loop(bench, dtype, tiles):
    sass = toolchain.sass(toolchain.nvrtc_compile(bench.mma_limit_source(dtype, tiles)))
    ops = toolchain.opcodes(sass)
    assert ops[bench.MMA_SASS[dtype]] >= tiles
    other = bench.MMA_SASS["bfloat16" if dtype == "float16" else "float16"]
    assert ops[other] == 0  # the dtype's own instruction, not the other's
    loops = [(n, regs) for n, regs in bench.sass_loops(sass, bench.MMA_SASS[dtype]) if n]
    assert loops, "no loop issues mma"
    n, regs = max(loops, key=lambda loop: loop[0])
    # unrolled or not, the loop issues whole rounds over the independent accumulators
    assert n % tiles == 0 and len(regs) == tiles


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_mma_kernel_without_its_store_loses_the_mma(bench, dtype):
    """The negative control: the conditional store is what keeps the mma alive."""
    sass = toolchain.sass(toolchain.nvrtc_compile(bench.mma_limit_source(dtype, 8, store=False)))
    assert toolchain.opcodes(sass)[bench.MMA_SASS[dtype]] == 0
    assert not any(n for n, _ in bench.sass_loops(sass, bench.MMA_SASS[dtype]))


def test_sass_loops_counts_only_backward_branches(bench):
    sass = """
        /*0000*/                   MOV R1, R2 ;
.L_x_0:
        /*0010*/                   HMMA.16816.F32 R8, R4, R2, R8 ;
        /*0020*/                   HMMA.16816.F32 R12, R4, R2, R12 ;
        /*0030*/               @P0 BRA `(.L_x_0) ;
        /*0040*/                   HMMA.16816.F32 R16, R4, R2, R16 ;
        /*0050*/              @!P1 BRA `(.L_x_1) ;
        /*0060*/                   HMMA.16816.F32 R20, R4, R2, R20 ;
.L_x_1:
        /*0070*/                   EXIT ;
"""
    loops = bench.sass_loops(sass, "HMMA.16816.F32")
    assert loops == [(2, frozenset({"R8", "R12"}))]  # the forward branch is no loop


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_mma_operands_pack_two_values_per_register(bench, dtype, rng):
    import ml_dtypes

    regs = bench.mma_operands(dtype, rng)
    assert regs.dtype == np.uint32 and regs.shape == (32 * bench.MMA_OPERANDS,)
    halves = np.stack([regs & 0xFFFF, regs >> 16], axis=-1).reshape(-1).astype(np.uint16)
    values = halves.view(np.float16 if dtype == "float16" else ml_dtypes.bfloat16)
    values = values.astype(np.float32)
    assert np.isfinite(values).all() and np.count_nonzero(values) > 0.9 * values.size
    assert len(np.unique(values)) > values.size // 2  # random, not a constant


def test_mma_scaling_check(bench, rng):
    iters = bench.MMA_ITERS
    once = (rng.standard_normal(2048) * 4).astype(np.float32)
    many = np.zeros_like(once)
    for _ in range(iters):  # float32 accumulation, one rounding per iteration
        many += once
    assert bench.mma_scaling_error(once, many, iters) <= bench.MMA_SCALING_TOL
    short = once * np.float32(int(iters * 0.99))  # a loop cut short by a percent
    assert not bench.mma_scaling_error(once, short, iters) <= bench.MMA_SCALING_TOL
    assert not bench.mma_scaling_error(once, once, iters) <= bench.MMA_SCALING_TOL
    poisoned = many.copy()
    poisoned[rng.integers(many.size)] = np.nan
    assert not bench.mma_scaling_error(once, poisoned, iters) <= bench.MMA_SCALING_TOL
    zero = np.zeros_like(once)
    assert not bench.mma_scaling_error(zero, zero, iters) <= bench.MMA_SCALING_TOL


def test_mark_best_picks_the_fastest_of_each_dtype(bench, rng):
    rows = [
        {"dtype": d, "tiles/warp": t, "TFLOP/s": float(rng.uniform(100, 700))}
        for d in ("float16", "bfloat16")
        for t in (8, 16, 32)
    ]
    rows.append({"dtype": "float16", "tiles/warp": 64, "note": "CompileError: x"})
    bench.mark_best(rows)
    for d in ("float16", "bfloat16"):
        mine = [r for r in rows if r["dtype"] == d]
        best = [r for r in mine if r["best"] == "yes"]
        assert len(best) == 1
        assert best[0]["TFLOP/s"] == max(r.get("TFLOP/s", 0) for r in mine)


def test_mma_tflops_counts_every_warp_tile_and_iteration(bench):
    base = bench.mma_tflops(132, 8, 1000, 2.0)
    assert bench.mma_tflops(264, 8, 1000, 2.0) == pytest.approx(2 * base)
    assert bench.mma_tflops(132, 16, 1000, 2.0) == pytest.approx(2 * base)
    assert bench.mma_tflops(132, 8, 1000, 4.0) == pytest.approx(base / 2)
    warps = 132 * bench.MMA_CTA_THREADS // 32
    assert base == pytest.approx(warps * 8 * 1000 * 2 * 16 * 8 * 16 / 2e-3 / 1e12)


# -- 8b. the GEMM table ------------------------------------------------------------------
def test_gemm_rows(bench, run_py, rng):
    shape = (4096, 4096, 4000)
    names = bench.gemm_order()
    ours_name, builtin_name = "ours 128x128x32 s4 plain", "built-in 128x128x32 s4 plain"
    failed = "built-in 128x256x64 s3 plain"
    ms = {n: float(rng.uniform(0.2, 2.0)) for n in names if n != failed}
    notes = {failed: "cannot lower: RuntimeError: a | b"}
    errors = {n: float(rng.uniform(1e-5, 1e-3)) for n in ms}
    limit = float(rng.uniform(400, 700))
    rows = bench.gemm_rows(shape, ms, errors, {}, notes, limit)
    assert [r["contender"] for r in rows] == names  # the table's order, failures included
    by = {r["contender"]: r for r in rows}
    ours = by[ours_name]
    flops = 2 * 4096 * 4096 * 4000
    assert ours["TFLOP/s"] == pytest.approx(flops / (ms[ours_name] * 1e-3) / 1e12)
    assert ours["speed / built-in"] == pytest.approx(ms[builtin_name] / ms[ours_name])
    # plain is compared with the bare matmul, bias_relu with addmm + relu
    assert ours["speed / torch"] == pytest.approx(ms[bench.TORCH_BARE] / ms[ours_name])
    fused = by["ours 128x128x32 s4 bias_relu"]
    assert fused["speed / torch"] == pytest.approx(
        ms[bench.TORCH_FUSED] / ms["ours 128x128x32 s4 bias_relu"]
    )
    assert ours["of mma.sync limit"] == pytest.approx(ours["TFLOP/s"] / limit)
    assert by["ours 128x256x64 s3 plain"]["speed / built-in"] == ""  # its twin was not timed
    assert "TFLOP/s" not in by[failed]
    assert float(ours["max err / max ref"]) == pytest.approx(errors[ours_name], rel=1e-2)
    table = run_py.markdown_table(rows)
    assert len(table.splitlines()) == len(rows) + 2
    assert len(_columns(table)) == 1  # the note's "|" is escaped
    raw = [dict(r) for r in rows]
    raw[-1]["note"] = "a | b"
    assert len(_columns(run_py.markdown_table(raw))) == 2  # the control: unescaped, it splits


def test_gemm_rows_leave_out_what_never_ran(bench):
    rows = bench.gemm_rows((64, 64, 64), {bench.TORCH_FUSED: 0.5}, {}, {}, {}, None)
    assert [r["contender"] for r in rows] == [bench.TORCH_FUSED]
    assert rows[0]["of mma.sync limit"] == ""  # no limit measured


# fmt: off
@T.prim_func
def _global_to_global(A_ptr: T.handle, B_ptr: T.handle):
    A = T.match_buffer(A_ptr, (32, 64), "float32")
    B = T.match_buffer(B_ptr, (32, 64), "float32")
    T.device_entry()
    T.cta_id([1])
    T.warp_id([4])
    T.lane_id([32])
    T.thread_id([128])
    Tx.cta.copy_async(B[:, :], A[:, :], dispatch="ldgsts")
# fmt: on


# -- 9. the cp.async streaming copy ------------------------------------------------------
def test_stream_program_copies_every_step(bench, rng):
    """The synchronous program in the simulator (it has no cp.async yet), 2 CTAs of 2 steps:
    each tile lands where it came from."""
    func = bench.stream_program("float16", (16, 64), 64, ctas=2, steps=2, asynchronous=False)
    a = runtime.random_array((2 * 2 * 16, 64), "float16", rng)
    out = sim.run(func, [a, runtime.poison_like(a)], target="sm_90a")[1]
    assert np.array_equal(runtime.bits(out), runtime.bits(a))
    shifted = np.roll(a, 16, axis=0)  # the control: another tile's data is told apart
    assert not np.array_equal(runtime.bits(out), runtime.bits(shifted))


def test_stream_program_lowers_to_cp_async(bench):
    func = bench.stream_program("float32", (32, 256), 256, ctas=8)
    builtin = toolchain.cuda_source(func, "sm_90a", bench.BUILTIN)
    assert bench.cp_async_forms(builtin).startswith("cp.async.cg 16 B")
    ours = toolchain.cuda_source(func, "sm_90a", bench.OURS)
    assert "cp.async" in bench.cp_async_forms(ours)
    assert "copy_async -> " in bench.our_variants(func)
    sync = bench.stream_program("float32", (32, 256), 256, ctas=8, asynchronous=False)
    sync_src = toolchain.cuda_source(sync, "sm_90a", bench.OURS)
    assert bench.cp_async_forms(sync_src) == "no cp.async"
    assert bench.our_variants(sync) == "copy -> gmem_smem; copy -> gmem_smem"


def test_builtin_refusal_is_one_line_with_its_reason(bench):
    func = bench.stream_program("float32", (30, 100), 128, ctas=4)
    with pytest.raises(Exception) as info:  # noqa: B017  # whatever TVM raises, reported
        toolchain.cuda_source(func, "sm_90a", bench.BUILTIN)
    text = bench.first_line(info.value)
    assert "\n" not in text and "ldgsts: rejected:" in text
    assert "tirx_cuda_dispatch" not in text  # our bridge's rows are left out
    assert bench.first_line(ValueError("first\nsecond")) == "ValueError: first"


def test_our_refusal_names_the_call_and_the_reason(bench):
    """A forced ldgsts on a global -> global copy: cp.async has no such form, so ours
    declines whatever else it learns; the line names the call and our reason."""
    with pytest.raises(Exception) as info:  # noqa: B017  # whatever lowering raises, reported
        toolchain.cuda_source(_global_to_global, "sm_90a", bench.STRICT)
    text = bench.first_line(info.value)
    assert "\n" not in text and "(Tx.cta.copy_async)" in text
    assert "[ldgsts: declined: " in text
    assert "tcgen05_ldst" not in text  # listed as not tried: not a reason


def test_cp_async_forms(bench):
    src = (
        'asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(a), "l"(b));\n'
        'asm volatile("cp.async.ca.shared.global.L2::128B [%0], [%1], 4, %2;" :: ...);\n'
        'asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(c), "l"(d));\n'
    )
    assert bench.cp_async_forms(src) == "cp.async.cg 16 B x2, cp.async.ca 4 B x1"
    assert bench.cp_async_forms("ld.global.v4.u32") == "no cp.async"


def test_cp_async_rows(bench, run_py, rng):
    ms = {n: float(rng.uniform(0.1, 1.0)) for n in (bench.CP_OURS, bench.CP_SYNC, bench.CP_D2D)}
    notes = {bench.CP_BUILTIN: "cannot lower: X", bench.CP_BUILTIN_UNFORCED: "cannot lower: Y"}
    facts = {bench.CP_OURS: "copy_async -> ldgsts; cp.async.cg 16 B x1"}
    nbytes = int(rng.integers(2**20, 2**30))
    rows = bench.cp_async_rows("f32 30x100", ms, facts, notes, nbytes)
    assert [r["contender"] for r in rows] == [
        n for n in bench.cp_async_order() if n in ms or n in notes
    ]
    ours = rows[0]
    assert ours["GB/s"] == pytest.approx(nbytes / (ms[bench.CP_OURS] * 1e-3) / 1e9)
    assert ours["/ D2D"] == pytest.approx(ms[bench.CP_D2D] / ms[bench.CP_OURS])
    assert ours["/ ours sync"] == pytest.approx(ms[bench.CP_SYNC] / ms[bench.CP_OURS])
    assert ours["/ built-in"] == ""  # the built-in could not be had
    assert "GB/s" not in rows[1]
    assert len(_columns(run_py.markdown_table(rows))) == 1


def test_cell_is_one_short_escaped_line(bench):
    text = "a | b\n" + "x" * 1000
    got = bench.cell(text)
    assert "\n" not in got and "\\|" in got and len(got) <= bench.CELL_CHARS + 1


# -- registration in bench/run.py ----------------------------------------------------------
NEW_PARTS = ("mma_limit", "gemm", "cp_async_stream")


def test_run_registers_the_parts(run_py):
    for part in NEW_PARTS:
        assert part in run_py.TITLES and part in run_py.GPU_PARTS
        assert part in run_py.DEFAULT_PARTS.split(",")
    assert run_py.gemm.part_gemm.__module__ == "gemm"  # bench/gemm.py, not the example


def test_run_names_the_parts_in_its_usage_error():
    proc = subprocess.run(
        [sys.executable, str(BENCH / "run.py"), "--only", "mma_limit,no_such_part", "--no-docs"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert proc.returncode == 2
    assert "unknown part(s) no_such_part" in proc.stderr
    for part in NEW_PARTS:
        assert part in proc.stderr


def test_run_writes_only_the_new_sections(run_py, rng, tmp_path):
    old = {"sass": [{"op": "add float32", "ours total": int(rng.integers(10, 99))}]}
    doc = tmp_path / "performance.md"
    doc.write_text("# Performance\n\nprose before\n")
    run_py.write_docs(old, "Run A.", doc)
    new = {
        part: [{"contender": f"{part} x", "GB/s": float(rng.uniform(1, 9))}] for part in NEW_PARTS
    }
    run_py.write_docs(new, "Run B.", doc)
    text = doc.read_text()
    assert "prose before" in text and run_py.section("sass", old["sass"]) in text
    for part in NEW_PARTS:
        assert f"### {run_py.TITLES[part]}" in text
        assert f"{part} x" in text
    assert text.count("Measured separately from the run above. Run B.") == len(NEW_PARTS)


def test_the_hopper_configuration_builds_the_hopper_example_through_ours(bench):
    """Part 8b's TMA + wgmma row is examples/gemm_hopper.py, every call ours; the
    ablations (part 8c) keep to examples/gemm.py's configurations."""
    import norms

    [config] = [c for c, name in bench.GEMM_EXAMPLE.items() if name == "gemm_hopper"]
    assert config not in bench.MMA_SYNC_CONFIGS and config in bench.GEMM_CONFIGS
    func = norms.example("gemm_hopper").gemm_kernel(
        256, 256, 128, epilogue="plain", **bench.GEMM_CONFIGS[config]
    )
    report = tirx_cuda_dispatch.explain(func, "sm_90a")
    assert [r.index for r in report if r.variant is None] == []
    assert {"tma_auto", "wgmma"} <= {r.variant for r in report}
