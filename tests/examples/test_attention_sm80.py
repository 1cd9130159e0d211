"""examples/attention_sm80.py: FlashAttention-2's structure for Ampere and Ada (cp.async,
ldmatrix, mma.sync) lowers entirely through the strict pipeline, equals float64 numpy
within its bound in the simulator and on the GPU, and a dropped wait, barrier or rescale
is caught."""

from __future__ import annotations

import pytest

from executors import cases_where, execute
from modules import ROOT, load_file
from tirx_cuda_dispatch import explain, sim

attention = load_file("example_attention_sm80", ROOT / "examples" / "attention_sm80.py")
STRICT = "tirx_cuda_dispatch.strict"
WHERE = ["sim", pytest.param("gpu", marks=pytest.mark.gpu)]


def test_every_call_is_ours_and_every_region_is_proved():
    report = explain(attention.attention_sm80_kernel(4, 150, 64, causal=True, kv_heads=2),
                     "sm_80")  # fmt: skip
    assert [r.index for r in report if r.variant is None or r.error] == []
    assert not [r.bounds_undecided for r in report if r.bounds_undecided]
    variants = {r.variant for r in report}
    assert {"ldgsts", "ldstmatrix", "mma.m16n8k*", "local"} <= variants
    # S = Q K^T four k16 steps of D 64 (and again in the lagged max's rebase), O += P V
    # four of the 64 keys: 12 gemm calls
    assert sum(r.op == "gemm" for r in report) == 12
    maxes = [r for r in report if r.op == "max"]  # tile 0's and the rebase's
    assert len(maxes) == 2 and all("shfl.xor 1/2" in r.plan["schedule"] for r in maxes)


SHAPES = [  # (query heads, key/value heads, sequence, head dim)
    (2, 2, 128, 64),
    (2, 1, 150, 64),  # grouped-query heads, a partial last block and key tile
    (2, 1, 100, 128),  # one key tile, partial (one stage non-causal, two causal)
    (1, 1, 192, 128),
    (1, 1, 100, 256),  # 64 x 64 blocks, one stage, Q from shared; partial last block, tile
]
# the simulator runs each head dim's other shape (at 128 the one of two query blocks, the
# second ragged; grouped heads and one key tile: at head dim 64 and the one-stage schedule)
GPU_ONLY = {(2, 2, 128, 64), (2, 1, 100, 128)}


@pytest.mark.parametrize(
    "case, where",
    cases_where(
        [(shape, causal) for shape in SHAPES for causal in (False, True)],
        in_sim=lambda case: case[0] not in GPU_ONLY,
        ids=lambda case: "h{}-kv{}-s{}-d{}".format(*case[0]) + ("-causal" if case[1] else "-full"),
    ),
)
def test_equals_numpy(case, where, gpu):
    """Every configuration against float64 numpy within the bound (O and LSE poisoned
    first); the control: the other reading of the mask is far off. The simulator runs
    every head dim, causal and not, grouped heads and ragged lengths; the GPU every shape."""
    shape, causal = case
    heads, kv_heads, seq, d = shape
    args = attention.inputs(heads, seq, d, seed=3, kv_heads=kv_heads)
    func = attention.attention_sm80_kernel(heads, seq, d, causal=causal, kv_heads=kv_heads)
    out = execute(func, args, where, gpu, pipeline=STRICT, target="sm_80")
    assert attention.close(out[3], out[4], *args[:3], causal=causal) is None
    assert attention.close(out[3], out[4], *args[:3], causal=not causal) is not None


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize(
    "blocks",
    [(64, 64, None), (128, 128, False), (128, 64, True)],
    ids=lambda b: "{}x{}-{}".format(*b),
)
def test_other_block_sizes_equal_numpy(blocks, where, gpu):
    """The blocks the defaults were chosen among (16 query rows a warp, 128-key tiles with
    Q read per k16 step, Q in registers at head dim 128), causal over a partial last
    block: each equals float64 numpy; the control: the other mask is far off."""
    block_m, block_n, q_regs = blocks
    d = 128 if q_regs else 64
    args = attention.inputs(1, 200, d, seed=8)
    func = attention.attention_sm80_kernel(1, 200, d, causal=True, block_m=block_m,
                                           block_n=block_n, q_in_registers=q_regs)  # fmt: skip
    out = execute(func, args, where, gpu, pipeline=STRICT, target="sm_80")
    assert attention.close(out[3], out[4], *args[:3], causal=True) is None
    assert attention.close(out[3], out[4], *args[:3], causal=False) is not None


@pytest.mark.parametrize("where", WHERE)
def test_bfloat16_equals_numpy(where, gpu):
    """bfloat16 (P rounded to bfloat16 for P V) within its unit roundoff's bound; the
    control: one output moved by twice that bound fails."""
    args = attention.inputs(2, 130, 64, seed=6, kv_heads=1, dtype="bfloat16")
    func = attention.attention_sm80_kernel(2, 130, 64, causal=True, kv_heads=1,
                                           dtype="bfloat16")  # fmt: skip
    out = execute(func, args, where, gpu, pipeline=STRICT, target="sm_80")
    assert attention.close(out[3], out[4], *args[:3], causal=True) is None
    moved = out[3].astype("float32")
    moved[0, 0, 0] += 8 * 2.0**-8 * float(abs(args[2].astype("float32")).max())
    assert attention.close(moved.astype(out[3].dtype), out[4], *args[:3], causal=True)


@pytest.mark.parametrize(
    "case, where",
    cases_where(
        [(stages, d, causal) for stages, d in [(1, 64), (2, 256)] for causal in (False, True)],
        in_sim=lambda case: case != (2, 256, False),  # d256: causal only in the simulator
        ids=lambda case: (
            ("one-stage-d64", "two-d256")[case[0] - 1] + ("-causal" if case[2] else "-full")
        ),
    ),
)
def test_the_other_schedule_equals_numpy(case, where, gpu):
    """FlashAttention-2's one-stage schedule (head dim 256's default) at head dim 64, and
    the two-stage one at head dim 256; ragged (150 rows)."""
    stages, d, causal = case
    args = attention.inputs(1, 150, d, seed=6)
    func = attention.attention_sm80_kernel(1, 150, d, causal=causal, stages=stages)
    out = execute(func, args, where, gpu, pipeline=STRICT, target="sm_80")
    assert attention.close(out[3], out[4], *args[:3], causal=causal) is None


@pytest.mark.parametrize("stages", [1, 2], ids=["one-stage", "two-stages"])
@pytest.mark.parametrize(
    "omit, expect",
    [
        ("wait", r"cp\.async.* in flight"),
        ("barrier", r"race"),
    ],
)
def test_a_missing_wait_or_barrier_is_named_by_the_simulator(omit, expect, stages):
    """Without the wait a warp reads a stage cp.async may still write; without the
    barrier a warp refills the stage another warp still reads (both schedules: the
    one-stage one waits twice a tile, for K and for V)."""
    args = attention.inputs(1, 192, 64, seed=5)
    func = attention.attention_sm80_kernel(1, 192, 64, omit=omit, stages=stages)
    with pytest.raises(sim.SimError, match=expect):
        sim.run(func, args, target="sm_80")


@pytest.mark.parametrize("block_m", [64, 128], ids=["16-rows-a-warp", "32-rows-a-warp"])
def test_lane_sums_shuffle_once_a_block_and_equal_numpy(block_m):
    """``lane_sums``: the tiles' row sums of P stay each lane's part (one m16 tile a warp,
    or two) and the finish adds the quad's parts; the control: without, every tile's sum
    shuffles. Causal over a ragged length, equal to float64."""
    args = attention.inputs(1, 200, 64, seed=7)
    for lane_sums in (True, False):
        func = attention.attention_sm80_kernel(1, 200, 64, causal=True, block_m=block_m,
                                               block_n=64, lane_sums=lane_sums)  # fmt: skip
        sums = [r for r in explain(func, "sm_80") if r.op == "sum"]
        shuffled = [r for r in sums if "shfl.xor 1/2" in r.plan["schedule"]]
        # tile 0's, the lagged tiles' and the rebase's (with the lane sums), the finish's
        assert (len(sums), len(shuffled)) == ((4, 1) if lane_sums else (1, 1))
        if lane_sums:
            out = sim.run(func, args, target="sm_80", pipeline=STRICT)
            assert attention.close(out[3], out[4], *args[:3], causal=True) is None


@pytest.mark.parametrize("lagged_max", [False, True], ids=["every-tile", "lagged"])
def test_a_dropped_rescale_is_caught_by_the_comparison(lagged_max):
    """With the lagged max only a rebase rescales: the keys grow for the comparison to see
    the missing rescale."""
    args = attention.inputs(1, 128, 64, seed=2)
    if lagged_max:
        args = attention.growing_keys(args, 4.0, first=64)
    func = attention.attention_sm80_kernel(1, 128, 64, omit="rescale", lagged_max=lagged_max)
    out = sim.run(func, args, target="sm_80")
    assert "outputs of O" in attention.close(out[3], out[4], *args[:3])


LAGGED = [  # (heads, seq, head dim, causal, keywords, the keys' factor from key 64 on)
    (1, 128, 64, False, {}, 4.0),  # the default (head dim 64): 32 rows a warp, two tiles
    (1, 100, 64, True, {}, 60.0),  # ragged, causal; past float32's exponent
    (1, 128, 128, False, {"lagged_max": True, "stages": 2}, 4.0),  # Q from shared memory
]


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("shape", LAGGED, ids=lambda s: "h{}-s{}-d{}-{}-x{:g}".format(*s[:4], s[5]))
def test_the_lagged_max_rebases_the_tiles_that_outgrow_it(shape, where, gpu):
    """The warp's vote (``__any_sync``) rebases the tiles whose keys outgrow the first
    tile's max: equal to float64; the simulator counts the rebases' mma against the same
    kernel on data that never trips the vote."""
    heads, seq, d, causal, keywords, factor = shape
    func = attention.attention_sm80_kernel(heads, seq, d, causal=causal, **keywords)
    plain = attention.inputs(heads, seq, d, seed=8)
    args = attention.growing_keys(plain, factor, first=64)
    if where == "sim":
        result = sim.run(func, args, target="sm_80", pipeline=STRICT)
        if factor == 4.0:
            calm = sim.run(func, plain, target="sm_80", pipeline=STRICT)

            def mma(r):
                return sum(n for k, n in r.counters.instructions.items() if k.startswith("mma"))

            assert mma(result) > mma(calm)  # the rebases' S = Q K^T
        out = result.arrays
    else:
        out = execute(func, args, where, gpu, pipeline=STRICT, target="sm_80")
    assert attention.close(out[3], out[4], *args[:3], causal=causal) is None


def test_a_kernel_that_ignores_the_vote_is_caught():
    args = attention.growing_keys(attention.inputs(1, 128, 64, seed=8), 60.0, first=64)
    out = sim.run(attention.attention_sm80_kernel(1, 128, 64, omit="rebase"), args,
                  target="sm_80")  # fmt: skip
    assert "outputs of O" in attention.close(out[3], out[4], *args[:3])


def test_shapes_it_does_not_take_are_an_error():
    with pytest.raises(ValueError, match=r"head dim 96 \(64, 128 or 256\)"):
        attention.attention_sm80_kernel(1, 128, 96)
    with pytest.raises(ValueError, match="3 query heads in groups over 2"):
        attention.attention_sm80_kernel(3, 128, 64, kv_heads=2)
    with pytest.raises(ValueError, match="lagged_max bounds P .* takes lane_sums=True"):
        attention.attention_sm80_kernel(1, 128, 64, lane_sums=False, lagged_max=True)
    with pytest.raises(ValueError, match="stages 3: 1 or 2"):
        attention.attention_sm80_kernel(1, 128, 64, stages=3)
    with pytest.raises(ValueError, match="block_n 128 .* at most block_m"):
        attention.attention_sm80_kernel(1, 128, 64, block_m=64, block_n=128)
