"""explain(): one report per call, in program order, as text and as plain data."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import tvm

import tirx_cuda_dispatch as tcd
from kernels import warp_g2s
from tirx_cuda_dispatch import demos
from tirx_cuda_dispatch.explain import PDL_TAG


def test_reports_in_program_order_with_required_keys():
    reports = tcd.explain(demos.gmem_smem_roundtrip("float32"), "sm_90a")
    assert len(reports) == 2
    first, second = reports
    assert (first.op, first.scope, first.variant) == ("copy", "warp", "gmem_smem")
    assert first.plan["direction"] == "global->shared"
    assert second.plan["direction"] == "shared->global"
    # Every variant of the op is reported in trial order, the chosen one and the others.
    assert first.candidates[0] == tcd.dispatch.Candidate("gmem_smem", True, None)
    assert [list(c) for c in first.candidates][0] == ["gmem_smem", True, None]
    [reg] = [c for c in first.candidates if c.variant == "reg"]
    assert not reg.accepted and "needs shared->local" in reg.reason
    assert "demos.py:" in first.location
    assert first.operands[0]["buffer"] == "A_smem" and first.operands[1]["scope"] == "global"


def test_declined_call_keeps_reason_and_has_no_variant():
    [report] = tcd.explain(warp_g2s(32, 32, guard="data"))
    assert report.variant is None and report.plan == {}
    assert report.candidates[0].variant == "gmem_smem"
    assert report.candidates[0].accepted is False
    assert "cannot prove that every thread" in report.candidates[0].reason


def test_text_and_json_rendering():
    reports = tcd.explain(demos.gmem_smem_roundtrip("float16"), "sm_90a")
    text = str(reports)
    assert "variant: gmem_smem" in text and "vec=8" in text and "outer=4" in text
    data = json.loads(reports.to_json())
    assert data[0]["plan"]["vec_bits"] == 128
    assert data[0]["candidates"][0] == ["gmem_smem", True, None]


def test_target_forms():
    func = demos.gmem_smem_roundtrip()
    a = tcd.explain(func, "sm_90a").as_dicts()
    b = tcd.explain(func, {"kind": "cuda", "arch": "sm_90a"}).as_dicts()
    c = tcd.explain(func, tvm.target.Target({"kind": "cuda", "arch": "sm_90a"})).as_dicts()
    assert a == b == c
    with pytest.raises(TypeError, match="target must be"):
        tcd.explain(func, 90)


def test_explain_does_not_need_the_builtin_to_succeed():
    # explain plans only; a call nobody could lower is still reported.
    [report] = tcd.explain(warp_g2s(32, 32, "float32", "float16"))
    assert "dtype mismatch" in report.candidates[0].reason


EXAMPLES = sorted((Path(__file__).resolve().parent.parent / "examples").glob("*.py"))


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_explain_never_raises_on_the_examples(path):
    from tirx_cuda_dispatch.__main__ import load_namespace

    programs = [v for v in load_namespace(str(path)).values() if isinstance(v, tvm.tirx.PrimFunc)]
    assert programs, f"{path.name} defines no program"
    for program in programs:
        for arch in ("sm_90a", "sm_100a"):
            reports = tcd.explain(program, arch)
            assert len(reports) >= 1 and all(str(r) for r in reports)


def test_the_overview_reads_as_the_kernel():
    """examples/attention.py's warp-specialized kernel in one screen: the variant count, each
    tensor map and completion mechanism listed once with its calls, one line per call under
    the loops around it (the producer's ring loop, the consumers' overlapped loop)."""
    from modules import ROOT, load_file

    attention = load_file("example_attention", ROOT / "examples" / "attention.py")
    # one ring of K and V (two are the default at these short rows; the indices below
    # are the one ring's)
    # are the one ring's), the vote on each lagged tile (the default at head dim 64 is
    # each warp's rebase)
    func = attention.attention_ws_kernel(2, 256, 64, kv_heads=1, split_kv=False,
                                         lag_check="tile")  # fmt: skip
    report = tcd.explain(func, "sm_90a")
    text = report.overview()
    lines = text.splitlines()
    assert lines[0] == f"{len(report)} tile-primitive calls, {len(report)} lowered by our variants"
    assert "tma_auto x4" in lines[1] and "wgmma x5" in lines[1]  # and the rebase's Q K^T
    for buffer in ("Q", "K", "V", "Out"):
        assert sum(ln.strip().startswith(f"tensor map over {buffer} ") for ln in lines) == 1
    assert "wgmma group: " in text and "calls [6], [18], [19], [22], [35]" in text
    for r in report:  # every call once, indented under its loops
        [line] = [ln for ln in lines if ln.strip().startswith(f"[{r.index}] ")]
        assert line.startswith("  " * (len(r.loops) + 1) + f"[{r.index}] {r.scope}.{r.op} -> ")
    loops = [ln.strip() for ln in lines if ln.strip().startswith("for t in ")]
    assert len(loops) == 2 and "attention.py:" in loops[0]
    assert len(lines) < len(str(report).splitlines()) / 5
    # the kernel's own synchronization, once each: the register split of three consumers,
    # the ping-pong's named barriers, the ring's mbarriers with their arrival counts
    assert "  registers: dec 24, inc 160" in lines
    assert "bar.sync 1 + (wg - 1) (256 threads)" in text and "bar.arrive 1 (256 threads)" in text
    assert "bar.red.or 9 + (wg - 1) (128 threads)" in text  # the lagged max's rebase vote
    # each consumer's Q full, the ring's full and empty (four stages), each consumer's Q
    # empty (q_split)
    assert (
        "bars[c] (count 1), bars[3 + s] (count 1), bars[7 + s] (count 3), bars[11 + c] (count 1)"
        in text
    )
    assert "CTA barriers: cta_sync" in text
    # programmatic dependent launch: the grid before waited for, the next let launch
    assert "  grid dependency: griddepcontrol.wait, griddepcontrol.launch_dependents" in lines
    assert "  launch: programmatic dependent launch" in lines  # (it waits: no warning)


def test_the_overview_names_the_calls_that_are_not_ours():
    """The control: a call no variant of ours takes is named in the first line and marked."""
    report = tcd.explain(warp_g2s(32, 32, guard="data"))
    text = report.overview()
    assert text.splitlines()[0] == "1 tile-primitive calls, 0 lowered by our variants (not: [0])"
    assert "[0] warp.copy -> NONE OF OURS" in text
    assert "synchronization in the kernel's own code" not in text  # it writes none


def test_a_programmatic_dependent_launch_with_no_wait_is_named():
    """A kernel whose launch parameters carry TVM 0.27's programmatic-dependent-launch tag
    but which never executes griddepcontrol.wait may touch global memory before the grid
    before it completes: the overview says so and what to add; the attention kernel,
    which waits, carries no such words (test above)."""
    func = warp_g2s(32, 32)
    params = ["blockIdx.x", "threadIdx.x", PDL_TAG]
    text = tcd.explain(func.with_attr("tirx.kernel_launch_params", params)).overview()
    assert "launch: programmatic dependent launch with no griddepcontrol.wait" in text
    assert "T.ptx.griddepcontrol.wait() before its first global access" in text
    assert "programmatic dependent launch" not in tcd.explain(func).overview()


def test_a_region_with_parenthesised_offsets_is_reported_whole():
    """``K[h, (t + 1) * 64 : ...]``: the region text keeps its parentheses (it was cut at
    the first " (", where the "(scope dtype)" suffix starts); the control: a plain one."""
    from modules import ROOT, load_file

    sm80 = load_file("example_attention_sm80", ROOT / "examples" / "attention_sm80.py")
    report = tcd.explain(sm80.attention_sm80_kernel(2, 128, 64), "sm_80")
    regions = [o["region"] for r in report for o in r.operands if o["buffer"] == "K"]
    assert "K[h:h+1, (t + 1) * 64:(t + 1) * 64+64, 0:64]" in regions
    assert "K[h:h+1, 0:64, 0:64]" in regions
