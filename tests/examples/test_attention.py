"""examples/attention.py: the FlashAttention forward lowers entirely through the strict
pipeline (P V with A from registers), equals float64 numpy within its bound in the
simulator and on the GPU, and a dropped rescale or wgmma wait is caught."""

from __future__ import annotations

import pytest

from executors import execute
from modules import ROOT, load_file
from tirx_cuda_dispatch import explain, sim

attention = load_file("example_attention", ROOT / "examples" / "attention.py")
STRICT = "tirx_cuda_dispatch.strict"
WHERE = ["sim", pytest.param("gpu", marks=pytest.mark.gpu)]


def test_every_call_is_ours_and_p_v_takes_a_from_registers():
    report = explain(attention.attention_kernel(2, 128, 64), "sm_90a")
    assert [r.index for r in report if r.variant is None] == []
    gemms = [r for r in report if r.op == "gemm_async"]
    assert [r.plan_object.a_in_registers for r in gemms] == [False, True]
    [row_max] = [r for r in report if r.op == "max"]
    assert "shfl.xor 1/2" in row_max.plan["schedule"]  # a row lives in a quad of lanes


SHAPES = [  # (query heads, key/value heads, sequence, head dim)
    (2, 2, 128, 64),
    (1, 1, 192, 128),
    (4, 2, 150, 64),  # grouped-query heads, a partial last block and key tile
    (2, 1, 100, 128),
    (1, 1, 64, 256),
]


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "h{}-kv{}-s{}-d{}".format(*s))
def test_equals_numpy(shape, causal, where, gpu):
    """Every configuration against float64 numpy within the bound (O and LSE poisoned
    first, so a row left unwritten fails)."""
    heads, kv_heads, seq, d = shape
    args = attention.inputs(heads, seq, d, seed=1, kv_heads=kv_heads)
    func = attention.attention_kernel(heads, seq, d, causal=causal, kv_heads=kv_heads)
    out = execute(func, args, where, gpu, pipeline=STRICT)
    assert attention.close(out[3], out[4], *args[:3], causal=causal) is None
    # the control: the other reading of the mask is far off
    assert attention.close(out[3], out[4], *args[:3], causal=not causal) is not None


def test_every_region_is_proved():
    """Partial blocks, grouped heads, causal loops to the diagonal: no region undecided."""
    for heads, kv_heads, seq, d in SHAPES:
        func = attention.attention_kernel(heads, seq, d, causal=True, kv_heads=kv_heads)
        assert not [r.bounds_undecided for r in explain(func, "sm_90a") if r.bounds_undecided]


def test_a_dropped_rescale_is_caught_by_the_comparison():
    args = attention.inputs(1, 192, 64, seed=2)
    out = sim.run(attention.attention_kernel(1, 192, 64, omit="rescale"), args, target="sm_90a")
    assert "outputs of O" in attention.close(out[3], out[4], *args[:3])


def test_a_dropped_wgmma_wait_is_reported_by_the_simulator():
    """Without the P V wgmma's wait, the next K/V tile is copied over V_s while the wgmma
    still reads it: the simulator names the copy and the wgmma."""
    args = attention.inputs(1, 128, 64)
    with pytest.raises(sim.SimError, match=r"writes byte .* of shared pool while wgmma"):
        sim.run(attention.attention_kernel(1, 128, 64, omit="wait"), args, target="sm_90a")


def test_shapes_it_does_not_take_are_an_error():
    with pytest.raises(ValueError, match="head dim 96"):
        attention.attention_kernel(1, 128, 96)
    with pytest.raises(ValueError, match="3 query heads in groups over 2"):
        attention.attention_kernel(3, 128, 64, kv_heads=2)


# -- the warp-specialized kernel (FA3's structure) ----------------------------------------------
WS_SHAPES = [(2, 1, 256, 64), (1, 1, 256, 128)]  # (heads, kv heads, seq, head dim)


def _flat(args):
    return [a.reshape(-1, a.shape[-1]) for a in args]


def test_the_warp_specialized_kernel_is_all_ours_with_the_register_split():
    func = attention.attention_ws_kernel(2, 256, 64, kv_heads=1)
    report = explain(func, "sm_90a")
    assert [r.index for r in report if r.variant is None] == []
    variants = [r.variant for r in report]
    assert variants.count("tma_auto") == 3 and variants.count("wgmma") == 2
    assert "threadwise" in variants  # m_old <- m_new in registers
    assert not [r.bounds_undecided for r in report if r.bounds_undecided]


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("shape", WS_SHAPES, ids=lambda s: "h{}-kv{}-s{}-d{}".format(*s))
def test_the_warp_specialized_kernel_equals_numpy(shape, causal, where, gpu):
    """The producer's TMA ring and two consumers scheduled apart in the simulator (a
    consumer waits on a stage its producer fills later in program order), equal to
    float64 within the bound; O and LSE poisoned first."""
    heads, kv_heads, seq, d = shape
    args = attention.inputs(heads, seq, d, seed=4, kv_heads=kv_heads)
    func = attention.attention_ws_kernel(heads, seq, d, causal=causal, kv_heads=kv_heads)
    out = execute(func, _flat(args), where, gpu, pipeline=STRICT)
    o, lse = out[3].reshape(args[3].shape), out[4].reshape(args[4].shape)
    assert attention.close(o, lse, *args[:3], causal=causal) is None


@pytest.mark.parametrize(
    "omit, expect",
    [
        ("full_wait", r"race on pool byte .*wgmma reads it after a TMA copy"),
        ("empty_arrive", r"deadlock: no warp can run.*2 of 2 arrivals still pending"),
        ("first_turn", r"deadlock: no warp can run.*wait at bar.sync 2, 256"),
    ],
)
def test_a_missing_wait_or_arrival_is_named_by_the_simulator(omit, expect):
    args = _flat(attention.inputs(1, 256, 64, seed=5))
    with pytest.raises(sim.SimError, match=expect):
        sim.run(attention.attention_ws_kernel(1, 256, 64, omit=omit), args, target="sm_90a")


def test_the_warp_specialized_kernel_without_the_rescale_is_caught():
    args = attention.inputs(1, 256, 64, seed=5)
    out = sim.run(attention.attention_ws_kernel(1, 256, 64, omit="rescale"), _flat(args),
                  target="sm_90a")  # fmt: skip
    o, lse = out[3].reshape(args[3].shape), out[4].reshape(args[4].shape)
    assert "outputs of O" in attention.close(o, lse, *args[:3])


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("warp_specialized", [False, True], ids=["simple", "ws"])
def test_bfloat16_equals_numpy(warp_specialized, where, gpu):
    """bfloat16 Q, K, V and O (P rounded to bfloat16 for P V): within the bound of its
    unit roundoff; the control: one output moved by twice that bound fails."""
    heads, seq, d = 2, 256, 64
    args = attention.inputs(heads, seq, d, seed=6, kv_heads=1, dtype="bfloat16")
    if warp_specialized:
        func = attention.attention_ws_kernel(heads, seq, d, causal=True, kv_heads=1,
                                             dtype="bfloat16")  # fmt: skip
        out = execute(func, _flat(args), where, gpu, pipeline=STRICT)
    else:
        func = attention.attention_kernel(heads, seq, d, causal=True, kv_heads=1,
                                          dtype="bfloat16")  # fmt: skip
        out = execute(func, args, where, gpu, pipeline=STRICT)
    o, lse = out[3].reshape(args[3].shape), out[4].reshape(args[4].shape)
    assert attention.close(o, lse, *args[:3], causal=True) is None
    moved = o.astype("float32")
    moved[0, 0, 0] += 8 * 2.0**-8 * float(abs(args[2].astype("float32")).max())
    assert attention.close(moved.astype(o.dtype), lse, *args[:3], causal=True) is not None


def test_the_consumers_take_turns_at_named_barriers():
    """Ping-pong: each consumer's Q K^T between its bar.sync and the other's bar.arrive
    (256 threads, ids 1 and 2; consumer 1 grants the first turn); without it (the
    control) the kernel is still right, with no named barrier."""
    from tirx_cuda_dispatch import toolchain

    src = toolchain.cuda_source(attention.attention_ws_kernel(1, 256, 64), "sm_90a",
                                pipeline=STRICT)  # fmt: skip
    assert "tvm_builtin_ptx_bar_arrive_arrive((uint)1, (uint)256);" in src
    assert "bar_sync_count_sync(((uint)(c_ptr[0] + 1)), (uint)256);" in src
    plain = attention.attention_ws_kernel(1, 256, 64, pingpong=False)
    assert "bar.arrive" not in toolchain.cuda_source(plain, "sm_90a", pipeline=STRICT)
    args = attention.inputs(1, 256, 64, seed=7)
    out = sim.run(plain, _flat(args), target="sm_90a", pipeline=STRICT)
    o, lse = out[3].reshape(args[3].shape), out[4].reshape(args[4].shape)
    assert attention.close(o, lse, *args[:3]) is None
