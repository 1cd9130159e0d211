"""The emitted CUDA kernels: no declaration or statement of ours that nothing uses.

TVM puts some into every kernel itself: each scope id the program declares becomes
``int v_N = ...;`` (unused once TVM's simplifier has inlined it) and, when the program
leaves it unnamed (``T.lane_id([32])`` as a statement), a bare ``v_N;`` statement that
keeps it live. The reference for "the program's own" is therefore the same program with
every tile-primitive call spliced out (our LowerTIRx in explain mode splices no-ops),
compiled by TVM alone: our kernel may have exactly its bare statements and unused
declarations, no more. (TVM's built-in variants add such lines of their own, so their
kernel would let ours pass unnoticed.)

``cse_vN`` declarations are left out: CommonSubexprElim does use its variables, inside
helper calls and ``T.address_of`` too, and TVM's final StmtSimplify (in
``finalize_device_passes``, the built-in pipeline's as well) inlines every pure binding
back and keeps the binding, so every ``cse_vN`` ends up unused, whoever repeated the
expression. ``test_cse_variables_are_inlined_back_by_tvm`` pins that behaviour.
"""

from __future__ import annotations

import re
from collections import Counter

import pytest
import tvm
from tvm.tirx.layout import Axis, S, TileLayout

import tirx_cuda_dispatch as tcd
from tirx_cuda_dispatch import demos, lowering, pipeline, toolchain
from tirx_cuda_dispatch.__main__ import _seed_programs

lane, tid_wg = Axis.laneid, Axis.tid_in_wg

_SEEDS = ("gmem_smem", "reg", "ldstmatrix", "sqrt", "tcgen05")


def _row_per_lane(k: int, rows: int = 32, axis=lane) -> TileLayout:
    return TileLayout(S[(rows, k) : (1 @ axis, 1)])


def _programs() -> dict:
    """name -> (program, arch): the demo's five seed programs and a few more."""
    out = {
        f"seed_{name}": (func, arch or "sm_90a")
        for name, (_, func, *_, arch) in zip(_SEEDS, _seed_programs(), strict=True)
    }
    out["gmem_smem_cta"] = (
        demos.gmem_smem_roundtrip("float32", (64, 64), scope="cta", cta_threads=128),
        "sm_90a",
    )
    out["reg_rotated"] = (demos.reg_roundtrip(_row_per_lane(16), (32, 16)), "sm_90a")
    out["reg_warpgroup"] = (
        demos.reg_roundtrip(_row_per_lane(8, 128, tid_wg), (128, 8), "float32", "warpgroup"),
        "sm_90a",
    )
    out["add_f16_packed"] = (
        demos.elementwise_roundtrip("add", _row_per_lane(8), (32, 8), "float16"),
        "sm_90a",
    )
    return out


PROGRAMS = _programs()

# `int v_1 = ((int)threadIdx.x);`, `half* tmem = ...;`: a scalar or pointer declaration
_DECLARATION = re.compile(r"^\s*((?:unsigned )?[A-Za-z_]\w*\*?) (\w+) = (.*);$")
_ASSIGNMENT = re.compile(r"[^=!<>]=[^=]")


def _kernel(source: str) -> str:
    """The last ``__global__`` definition of a CUDA source (the kernel, no preamble)."""
    starts = [m.start() for m in re.finditer(r'extern "C" __global__ [^;{]*\{', source)]
    assert starts, source
    return source[starts[-1] :]


def unused_declarations(kernel: str) -> Counter:
    """``(type, name, value)`` of every declaration whose name no later line mentions."""
    lines = kernel.splitlines()
    found = Counter()
    for i, line in enumerate(lines):
        m = _DECLARATION.match(line)
        if m:
            later = "\n".join(lines[i + 1 :])
            if not re.search(rf"\b{m.group(2)}\b", later):
                found[m.groups()] += 1
    return found


def bare_statements(kernel: str) -> Counter:
    """Expression statements that do nothing: ``((int)threadIdx.x);``, ``warp_id_in_cta;``."""
    found = Counter()
    for line in kernel.splitlines():
        text = line.strip()
        if not text.endswith(";") or _ASSIGNMENT.search(text):
            continue
        if text.startswith("(") or (re.fullmatch(r"\w+;", text) and text != "break;"):
            found[text] += 1
    return found


def ours(name: str) -> str:
    func, arch = PROGRAMS[name]
    return _kernel(toolchain.cuda_source(func, arch))


def programs_own(name: str) -> str:
    """The kernel of the program with its tile-primitive calls spliced out, by TVM alone."""
    func, arch = PROGRAMS[name]
    target = tvm.target.Target({"kind": "cuda", "arch": arch})
    with target:
        mod = tvm.tirx.transform.BindTarget(target.with_host("c"))(tvm.IRModule.from_expr(func))
        without_calls, _ = lowering.run_lower(mod, mode="explain")
        ex = tvm.compile(without_calls, target=target, tir_pipeline="tirx")
    return _kernel(ex.mod.imports[0].inspect_source())


def _not_cse(declarations: Counter) -> Counter:
    return Counter({d: n for d, n in declarations.items() if not d[1].startswith("cse_v")})


@pytest.mark.parametrize("name", PROGRAMS)
def test_no_unused_declarations_or_bare_statements_of_ours(name):
    kernel, reference = ours(name), programs_own(name)
    assert bare_statements(kernel) == bare_statements(reference), kernel
    assert _not_cse(unused_declarations(kernel)) == _not_cse(unused_declarations(reference)), kernel


def test_the_programs_cover_what_their_names_say():
    def plans(name, variant):
        func, arch = PROGRAMS[name]
        return [r.plan for r in tcd.explain(func, arch) if r.variant == variant]

    assert any(p.get("round_order", "").startswith("rotate") for p in plans("reg_rotated", "reg"))
    assert {p["packed"] for p in plans("add_f16_packed", "reg") if "packed" in p} == {"add_f16x2"}
    assert [r.variant for r in tcd.explain(*PROGRAMS["gmem_smem_cta"])] == ["gmem_smem"] * 2
    assert {r.scope for r in tcd.explain(*PROGRAMS["gmem_smem_cta"])} == {"cta"}


def test_the_checks_see_the_noise():
    kernel = """extern "C" __global__ void k(float* __restrict__ A) {
  int v = ((int)threadIdx.x);
  int used = ((int)threadIdx.x) * 2;
  half* tmem = ((half*)reinterpret_cast<half*>(0));
  warp_id_in_cta;
  ((int)threadIdx.x);
  tvm_builtin_cuda_cta_sync();
  if (v == 0) {
    A[used] = 0.0f;
  }
  ((uint4*)A)[used] = ((uint4*)A)[(used + 1)];
}"""
    assert unused_declarations(kernel) == Counter(
        {("half*", "tmem", "((half*)reinterpret_cast<half*>(0))"): 1}
    )
    assert bare_statements(kernel) == Counter({"warp_id_in_cta;": 1, "((int)threadIdx.x);": 1})


def test_cse_variables_are_inlined_back_by_tvm():
    """CommonSubexprElim replaces the index inside the helper call's ``T.address_of``
    operands; TVM's final StmtSimplify then inlines it back and keeps the binding. If a
    TVM upgrade drops such bindings, ``cse_vN`` can join the check above."""
    func, arch = PROGRAMS["seed_gmem_smem"]
    target = tvm.target.Target({"kind": "cuda", "arch": arch})
    with target:
        mod = tvm.tirx.transform.BindTarget(target.with_host("c"))(tvm.IRModule.from_expr(func))
        mod = tvm.ir.transform.Sequential(pipeline.pass_list({}))(mod)
        after_cse = mod.script()
        final = toolchain.lowered_tir(func, arch).script()
    # the gmem_smem copy's helper call with its two operands' index
    assert re.search(r"ld_global_cg_128\", T.address_of\(\w+\[cse_v\d+\]\)", after_cse)
    assert not re.search(r"ld_global_cg_128\", T.address_of\(\w+\[cse_v\d+\]\)", final)
    assert re.search(r"cse_v\d+: T.let\[T.int32\]", final)
