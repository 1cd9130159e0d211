"""One parser for every target form the library and the CLI accept."""

from __future__ import annotations

import pytest
import tvm

from tirx_cuda_dispatch import demos
from tirx_cuda_dispatch.targets import TargetError, as_target, check_arch, describe


@pytest.mark.parametrize(
    "form",
    [
        "sm_90a",
        {"kind": "cuda", "arch": "sm_90a"},
        '{"kind": "cuda", "arch": "sm_90a"}',
        tvm.target.Target({"kind": "cuda", "arch": "sm_90a"}),
    ],
    ids=["arch", "dict", "json", "Target"],
)
def test_every_form_gives_the_same_target(form):
    tgt = as_target(form)
    assert tgt.kind.name == "cuda" and describe(tgt) == "sm_90a"


@pytest.mark.parametrize(
    "bad, message",
    [
        ("90a", "write sm_90a"),
        ("sm_9O", "not a digit"),
        ("sm_91", "unknown CUDA arch 'sm_91'"),
        ({"kind": "cuda", "arch": "sm_9O"}, "unknown CUDA arch"),
        ({"kind": "cuda"}, "names no arch"),
        ({"kind": "cudaa"}, "unknown target kind 'cudaa'"),
        ("{not json", "not valid JSON"),
        ("nonsense", "neither a CUDA arch"),
    ],
)
def test_bad_targets_say_what_to_write(bad, message):
    with pytest.raises(TargetError, match=message):
        as_target(bad)


def test_known_arches_pass_and_other_kinds_are_targets():
    assert check_arch("sm_100a") == "sm_100a"
    assert as_target("llvm").kind.name == "llvm"
    with pytest.raises(TypeError, match="target must be"):
        as_target(90)


def test_the_simulator_takes_the_same_forms():
    from tirx_cuda_dispatch import runtime, sim

    func = demos.gmem_smem_roundtrip("float32", (32, 32), scope="warp")
    a = runtime.random_array((32, 32), "float32", __import__("numpy").random.default_rng(1))
    for form in ("sm_90a", {"kind": "cuda", "arch": "sm_90a"}, as_target("sm_90a")):
        out = sim.run(func, [a, runtime.poison_like(a)], target=form)
        assert (out[1] == a).all()
    with pytest.raises(TargetError):
        sim.run(func, [a, runtime.poison_like(a)], target="sm_9O")
