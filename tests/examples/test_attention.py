"""examples/attention.py: the FlashAttention forward lowers entirely through the strict
pipeline (P V with A from registers), equals float64 numpy within its bound in the
simulator and on the GPU, and a dropped rescale or wgmma wait is caught."""

from __future__ import annotations

import re

import numpy as np
import pytest
import tvm

from executors import cases_where, execute
from modules import ROOT, load_file
from tirx_cuda_dispatch import explain, sim, toolchain
from tirx_cuda_dispatch.bounds import OutOfBoundsError
from tirx_cuda_dispatch.gemm_async import wgmma

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
    with pytest.raises(ValueError, match="a multiple of 192 without the TMA store"):
        attention.attention_ws_kernel(1, 200, 64, tma_store=False)
    with pytest.raises(ValueError, match=r"lagged_max .* it takes overlap=True"):
        attention.attention_ws_kernel(1, 256, 64, lagged_max=True, overlap=False)


# -- the warp-specialized kernel (FA3's structure) ----------------------------------------------
WS_SHAPES = [  # (heads, kv heads, seq, head dim)
    (2, 1, 256, 64),
    (1, 1, 256, 128),
    (1, 1, 200, 64),  # ragged: the last query block's second consumer has 8 rows
    (2, 1, 100, 128),  # one block, one key tile, grouped heads
    (1, 1, 200, 256),  # 80-key tiles (80, 80, 40), two stages; ragged: 72 rows in the last block
]


def test_the_warp_specialized_kernel_is_all_ours_with_the_register_split():
    func = attention.attention_ws_kernel(2, 256, 64, kv_heads=1, lag_check="tile")
    report = explain(func, "sm_90a")
    assert [r.index for r in report if r.variant is None] == []
    variants = [r.variant for r in report]
    # Q, K (V a tile behind it, in the loop and after it: two rings, the default of the
    # persistent non-causal grids to 1,024 rows at head dim 64), O out; tile 0's Q K^T,
    # the loop's Q K^T and P V, the rebase's Q K^T (lagged_max), the last P V
    assert variants.count("tma_auto") == 5 and variants.count("wgmma") == 5
    # the default's warp rebase: no Q K^T again; its block redo loads Q, K and V and
    # stores O again, with a Q K^T and a P V of its own
    warp = explain(attention.attention_ws_kernel(2, 256, 64, kv_heads=1), "sm_90a")
    assert [r.index for r in warp if r.variant is None] == []
    assert [r.variant for r in warp].count("tma_auto") == 9
    assert [r.variant for r in warp].count("wgmma") == 6
    unlagged = explain(attention.attention_ws_kernel(2, 256, 64, kv_heads=1, lagged_max=False))
    assert [r.variant for r in unlagged].count("wgmma") == 4
    # one ring: K and V of a tile together
    one = explain(
        attention.attention_ws_kernel(2, 256, 64, kv_heads=1, split_kv=False, lag_check="tile"),
        "sm_90a",
    )
    assert [r.variant for r in one].count("tma_auto") == 4
    plain = [
        r.variant
        for r in explain(
            attention.attention_ws_kernel(2, 256, 64, kv_heads=1, overlap=False), "sm_90a"
        )
    ]
    assert plain.count("wgmma") == 2
    assert "threadwise" in variants  # m_old <- m_new in registers
    assert not [r.bounds_undecided for r in report if r.bounds_undecided]


@pytest.mark.parametrize(
    "case, where",
    cases_where(
        [(shape, causal) for shape in WS_SHAPES for causal in (False, True)],
        # head dim 128 over several key tiles: the persistent grid's tests run it
        in_sim=lambda case: case[0] != (1, 1, 256, 128),
        ids=lambda case: "h{}-kv{}-s{}-d{}".format(*case[0]) + ("-causal" if case[1] else "-full"),
    ),
)
def test_the_warp_specialized_kernel_equals_numpy(case, where, gpu):
    """The producer's TMA ring and two consumers scheduled apart in the simulator (a
    consumer waits on a stage its producer fills later in program order), equal to
    float64 within the bound; O and LSE poisoned first."""
    shape, causal = case
    heads, kv_heads, seq, d = shape
    args = attention.inputs(heads, seq, d, seed=4, kv_heads=kv_heads)
    func = attention.attention_ws_kernel(heads, seq, d, causal=causal, kv_heads=kv_heads)
    out = execute(func, args, where, gpu, pipeline=STRICT)
    o, lse = out[3].reshape(args[3].shape), out[4].reshape(args[4].shape)
    assert attention.close(o, lse, *args[:3], causal=causal) is None


def test_the_ragged_causal_kernels_key_tiles_are_taken_past_the_edge():
    """The causal loop's key tiles (a loop of symbolic extent) may reach past the last
    key: TMA reads zeros there, and explain says so instead of listing them unproved."""
    report = explain(attention.attention_ws_kernel(2, 200, 128, causal=True), "sm_90a")
    assert not [r.bounds_undecided for r in report if r.bounds_undecided]
    edges = [e for r in report for e in r.bounds_past_edge]
    assert any(e.startswith("src K[") and "not decided whether it does" in e for e in edges)


CONFIGS = {  # the ablations bench/attention.py times: (block_n, overlap, consumers), and
    # which mask the simulator runs too (the GPU both)
    "n64": ((64, False, 2), True),
    "n128": ((128, False, 2), False),
    "n64-overlap": ((64, True, 2), True),
    "three-consumers": ((128, True, 3), True),
    "two-consumers": ((128, True, 2), False),
    "n80": ((80, True, 3), True),  # FA3's head-dim-256 tile: 5 tiles, the last 64
}


@pytest.mark.parametrize(
    "case, where",
    cases_where(
        [(name, causal) for name in CONFIGS for causal in (False, True)],
        in_sim=lambda case: CONFIGS[case[0]][1] == case[1],
        ids=lambda case: case[0] + ("-causal" if case[1] else "-full"),
    ),
)
def test_every_configuration_equals_numpy(case, where, gpu):
    """Key tiles of 64 or 128 rows, with and without the intra-warpgroup overlap, two or
    three consumers (the defaults are tested above), on 384 rows: three tiles of 128, two
    query blocks of 192. The simulator runs each with one mask, the GPU with both."""
    name, causal = case
    block_n, overlap, consumers = CONFIGS[name][0]
    args = attention.inputs(1, 384, 64, seed=8)
    func = attention.attention_ws_kernel(1, 384, 64, causal=causal, block_n=block_n,
                                         overlap=overlap, consumers=consumers)  # fmt: skip
    out = execute(func, args, where, gpu, pipeline=STRICT)
    o, lse = out[3].reshape(args[3].shape), out[4].reshape(args[4].shape)
    assert attention.close(o, lse, *args[:3], causal=causal) is None


@pytest.mark.parametrize("overlap, causal", [(True, False), (False, True)])
def test_a_ring_each_for_k_and_v_equals_numpy(overlap, causal):
    """FA3's two pipelines (head dim 256's default) at head dim 64: K's stage freed once S
    is in, V's after P V, V loaded a tile behind K; 384 rows, three key tiles through four
    stages of each ring with the overlap, two without."""
    args = attention.inputs(1, 384, 64, seed=10)
    func = attention.attention_ws_kernel(1, 384, 64, causal=causal, overlap=overlap,
                                         split_kv=True)  # fmt: skip
    out = sim.run(func, args, target="sm_90a", pipeline=STRICT)
    o, lse = out[3].reshape(args[3].shape), out[4].reshape(args[4].shape)
    assert attention.close(o, lse, *args[:3], causal=causal) is None


def test_head_dim_256_with_64_key_tiles_equals_numpy_and_three_stages_do_not_fit():
    """64-key tiles at head dim 256 (the ablation against the default, FA3's 80): 200
    causal rows (tiles of 64, 64, 64 and 8 keys) equal numpy. The control: three stages
    of the default 80-key tiles (Q's 64 KiB and 240 KiB of K and V) do not fit the CTA's
    227 KiB, and the error says how many bytes."""
    args = attention.inputs(1, 200, 256, seed=11)
    func = attention.attention_ws_kernel(1, 200, 256, causal=True, block_n=64)
    out = sim.run(func, args, target="sm_90a", pipeline=STRICT)
    o, lse = out[3].reshape(args[3].shape), out[4].reshape(args[4].shape)
    assert attention.close(o, lse, *args[:3], causal=True) is None
    with pytest.raises(ValueError, match=r"3 stages of 80 keys: \d+ bytes of shared memory"):
        attention.attention_ws_kernel(1, 200, 256, causal=True, block_n=80, stages=3)


def test_causal_masks_only_the_tiles_that_cross_the_diagonal():
    """Every masking loop (a write of S_r that compares coordinates) sits right under an
    ``if`` on the CTA's block, the tile's one in the loop (``t``); the control: the full
    kernel has no masking loop."""
    from tirx_cuda_dispatch import toolchain

    def guards(func):
        lines = toolchain.cuda_source(func, "sm_90a", pipeline=STRICT).splitlines()
        masks = [i for i, ln in enumerate(lines) if "S_r_ptr[" in ln and "<=" in ln]
        return [lines[i - 2].strip() for i in masks]

    found = guards(
        attention.attention_ws_kernel(1, 256, 64, causal=True, persistent=False, lag_check="tile")
    )  # (not the redo's masks)
    assert len(found) == 3  # tile 0, the loop's tiles, and the loop's rebase (lagged_max)
    assert all(g.startswith("if (") and "blockIdx.x" in g for g in found)
    assert "t_1 * 128" in found[1] and "t_1 * 128" in found[2]
    assert guards(attention.attention_ws_kernel(1, 256, 64)) == []


@pytest.mark.parametrize(
    "omit, expect",
    [
        ("full_wait", r"race on pool byte .*wgmma reads it after a TMA copy"),
        # V's ring starts at byte 73,728 (Q's 192 rows and three K stages before it)
        ("v_wait", r"b\.V_s\[.*race on pool byte 73728: .*wgmma reads it after a TMA copy"),
        ("empty_arrive", r"deadlock: no warp can run.*3 of 3 arrivals still pending"),
        ("first_turn", r"deadlock: no warp can run.*wait at bar.sync 2, 256"),
        (
            "pv_wait",
            r"while wgmma\.mma_async\.m64n64k16\.f32\.f16\.f16 .*(in flight|still reads it)",
        ),
        ("store_fence", r"copy_async .*wrote through the generic proxy with no fence.proxy.async"),
        ("store_wait", r"the CTA exits with cp\.async\.bulk\.tensor.*reading shared memory"),
    ],
)
def test_a_missing_wait_or_arrival_is_named_by_the_simulator(omit, expect):
    """512 rows: four key tiles through three stages (head dim 64's default is four), so
    the producer refills one (V's wait dropped from the kernel with a ring each for K and
    V)."""
    args = attention.inputs(1, 512, 64, seed=5)
    func = attention.attention_ws_kernel(1, 512, 64, omit=omit, split_kv=omit == "v_wait",
                                         stages=3)  # fmt: skip
    with pytest.raises(sim.SimError, match=expect):
        sim.run(func, args, target="sm_90a")


PERSISTENT = [  # (heads, kv heads, seq, head dim, SMs): CTAs that take two heads or one
    (3, 1, 200, 64, 4),  # 2 blocks x 2 CTAs: heads 0 and 2, then 1; ragged, grouped, three
    (2, 2, 256, 128, 2),  # consumers; two consumers, 2 blocks x 1 CTA: both heads each
]


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("shape", PERSISTENT, ids=lambda s: "h{}-kv{}-s{}-d{}-sms{}".format(*s))
def test_the_persistent_kernel_equals_numpy(shape, where, gpu):
    """A persistent grid (each CTA one query block of several heads: the producer reloads
    Q after the consumers' stores, the ring's phases and the ping-pong run on across
    heads, and a CTA with one head fewer skips the last round) equals float64 numpy; every
    region proved."""
    heads, kv_heads, seq, d, sms = shape
    args = attention.inputs(heads, seq, d, seed=9, kv_heads=kv_heads)
    func = attention.attention_ws_kernel(heads, seq, d, kv_heads=kv_heads, persistent=True,
                                         sms=sms)  # fmt: skip
    assert not [r.bounds_undecided for r in explain(func, "sm_90a") if r.bounds_undecided]
    out = execute(func, args, where, gpu, pipeline=STRICT)
    o, lse = out[3].reshape(args[3].shape), out[4].reshape(args[4].shape)
    assert attention.close(o, lse, *args[:3]) is None


PAIRED = [  # (heads, kv heads, seq, head dim, SMs, keywords): causal, blocks 1 and 0 a head
    (3, 1, 256, 64, 2, {}),  # grouped; 2 CTAs: heads 0 and 2, then 1 (a round skipped)
    (2, 2, 256, 128, 1, {}),  # 1 CTA: both heads, the ring counted on across them
    (1, 1, 384, 64, 1, {"consumers": 3, "block_n": 64}),  # 192-row blocks, 3 and 6 tiles
]


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("shape", PAIRED, ids=lambda s: "h{}-kv{}-s{}-d{}-sms{}".format(*s[:5]))
def test_the_causal_persistent_kernel_pairs_blocks_and_equals_numpy(shape, where, gpu):
    """A causal persistent grid (a CTA takes query blocks 1 and 0 of each of its heads:
    the ring's tiles counted on across the pair and the heads) equals float64 numpy."""
    heads, kv_heads, seq, d, sms, kw = shape
    args = attention.inputs(heads, seq, d, seed=9, kv_heads=kv_heads)
    func = attention.attention_ws_kernel(heads, seq, d, kv_heads=kv_heads, causal=True,
                                         persistent=True, sms=sms, **kw)  # fmt: skip
    out = execute(func, args, where, gpu, pipeline=STRICT)
    o, lse = out[3].reshape(args[3].shape), out[4].reshape(args[4].shape)
    assert attention.close(o, lse, *args[:3], causal=True) is None


def test_a_paired_producer_that_does_not_wait_for_the_stores_is_caught():
    """Control: without the Q-empty wait, the producer runs ahead of the consumers on Q's
    mbarriers: its next block's Q lands on rows a wgmma still reads (a race) or completes
    a phase nobody waits for, so a consumer waits for one that never comes (a deadlock),
    whichever the schedule meets first (this shape: the deadlock)."""
    args = attention.inputs(2, 256, 64, seed=5)
    func = attention.attention_ws_kernel(2, 256, 64, causal=True, persistent=True, sms=1,
                                         omit="q_empty_wait")  # fmt: skip
    with pytest.raises(sim.SimError, match=r"deadlock: no warp can run|race on pool byte 0"):
        sim.run(func, args, target="sm_90a")


def test_the_persistent_kernel_with_one_q_barrier_equals_numpy():
    """``q_split=False`` (Q's rows of every consumer behind one full and one empty
    mbarrier, the form before the split) with O out through Q's rows (``o_buffer=False``,
    the default before the O buffer, and at head dim 256 where the buffer does not fit)
    still equals float64 numpy across the grid's blocks."""
    args = attention.inputs(2, 256, 64, seed=9)
    func = attention.attention_ws_kernel(2, 256, 64, persistent=True, sms=1, q_split=False,
                                         o_buffer=False)  # fmt: skip
    out = sim.run(func, args, target="sm_90a", pipeline=STRICT)
    o, lse = out[3].reshape(args[3].shape), out[4].reshape(args[4].shape)
    assert attention.close(o, lse, *args[:3]) is None


@pytest.mark.parametrize(
    "omit, expect",
    [
        ("store_wait", r"race on pool byte 0: a TMA copy .* overwrites it while a TMA copy"),
        ("q_empty_wait", r"deadlock: no warp can run"),
    ],
)
def test_a_persistent_producer_that_does_not_wait_for_the_stores_is_caught(omit, expect):
    """O out through Q's rows (``o_buffer=False``): without the store's read wait, the
    next head's Q lands on rows the TMA store of O still reads; without the Q-empty wait,
    the producer runs ahead into the Q barrier's next phase."""
    args = attention.inputs(2, 256, 64, seed=5)
    func = attention.attention_ws_kernel(2, 256, 64, omit=omit, persistent=True, sms=1,
                                         o_buffer=False)  # fmt: skip
    with pytest.raises(sim.SimError, match=expect):
        sim.run(func, args, target="sm_90a")
    with pytest.raises(ValueError, match="a causal persistent grid pairs query block p"):
        attention.attention_ws_kernel(2, 200, 64, causal=True, persistent=True)  # ragged


@pytest.mark.parametrize("causal", [False, True])
def test_an_o_buffer_rewritten_before_the_store_read_it_is_caught(causal):
    """``o_buffer``: Q's rows go free after the last Q K^T and O leaves through rows of its
    own, which the next block writes only after the last store has read them (the
    consumer's ``wait_group.read`` before its named barrier); without that wait the next
    block's O lands on bytes the TMA store still reads (byte 122,880: non-causal, the
    buffer's first, after Q's 192 rows and three stages of K and V; causal, two
    consumers, the second consumer's first; or 131,072, the next consumer's first, where
    that one writes first: the warp rebase's schedule)."""
    args = attention.inputs(2, 256, 64, seed=5)
    func = attention.attention_ws_kernel(2, 256, 64, causal=causal, omit="store_wait",
                                         persistent=True, sms=1, o_buffer=True,
                                         stages=3)  # fmt: skip
    with pytest.raises(sim.SimError, match=r"O_s\[.*writes byte (122880|131072) of shared pool "
                       r"while cp\.async\.bulk\.tensor.* still reads it"):  # fmt: skip
        sim.run(func, args, target="sm_90a")
    with pytest.raises(ValueError, match="o_buffer: .* it takes tma_store"):
        attention.attention_ws_kernel(2, 384, 64, o_buffer=True, tma_store=False)
    with pytest.raises(ValueError, match=r"3 stages of 128 keys, an O buffer: \d+ bytes"):
        attention.attention_ws_kernel(2, 1024, 128, o_buffer=True, stages=3)


def test_the_o_buffer_outside_the_persistent_grid_equals_numpy():
    """``o_buffer`` on one CTA a block (no next block: the last store's read waited for
    before the CTA leaves), three consumers, 96-key tiles (a tile the defaults never
    take), a ragged last block: equal to float64 numpy."""
    args = attention.inputs(1, 200, 64, seed=3)
    func = attention.attention_ws_kernel(1, 200, 64, o_buffer=True, block_n=96,
                                         persistent=False)  # fmt: skip
    out = sim.run(func, args, target="sm_90a", pipeline=STRICT)
    o, lse = out[3].reshape(args[3].shape), out[4].reshape(args[4].shape)
    assert attention.close(o, lse, *args[:3]) is None


def test_the_o_buffer_is_the_default_only_where_it_fits():
    """A causal head-dim-256 kernel of 64-key tiles pairs its blocks on the persistent
    grid, where the O buffer would take shared memory past 227 KiB: the default leaves it
    out and the kernel builds; asked for, the error names it."""
    attention.attention_ws_kernel(2, 1024, 256, causal=True, block_n=64)
    with pytest.raises(ValueError, match=r"an O buffer: \d+ bytes .*\(or o_buffer=False\)"):
        attention.attention_ws_kernel(2, 1024, 256, causal=True, block_n=64, o_buffer=True)


def test_an_oversubscribed_register_split_is_a_deadlock_the_simulator_names():
    """Three consumers at 168 registers and a producer at 24 ask 128 (24 + 3 168) = 67,584
    of the SM's 65,536 (on an H100 the kernel hangs); the simulator names the warps waiting
    at setmaxnreg.inc. The control: 160 each, the default, runs."""
    args = attention.inputs(1, 192, 64, seed=5)
    func = attention.attention_ws_kernel(1, 192, 64, consumers=3, registers=(24, 168))
    with pytest.raises(sim.SimError, match=r"deadlock: .*wait at setmaxnreg\.inc.* 168 .*pool"):
        sim.run(func, args, target="sm_90a")
    out = sim.run(attention.attention_ws_kernel(1, 192, 64, consumers=3), args, target="sm_90a")
    assert attention.close(out[3], out[4], *args[:3]) is None


@pytest.mark.parametrize("lane_sums", [True, False], ids=["lane-sums", "row-sums"])
def test_the_row_sums_shuffle_once_a_block_with_lane_sums_and_equal_numpy(lane_sums):
    """lane_sums: the tiles' sums of P stay each lane's part (no shuffle) and the finish
    adds the quad's parts (two shuffles, once); without, every tile's sum shuffles (the
    control the count tells apart; without lane sums, no lagged max either). Both equal
    float64 on a ragged length, three consumers."""
    args = attention.inputs(1, 200, 64, seed=9)
    func = attention.attention_ws_kernel(
        1, 200, 64, consumers=3, lane_sums=lane_sums, lag_check="tile"
    )  # (the warp form redoes too)
    sums = [r for r in explain(func, "sm_90a") if r.op == "sum"]
    shuffled = [r for r in sums if "shfl.xor 1/2" in r.plan["schedule"]]
    # tile 0's, the loop's (and with the lane sums the rebase's and the finish's)
    assert len(sums) == (4 if lane_sums else 2)
    assert len(shuffled) == (1 if lane_sums else 2)
    out = sim.run(func, args, target="sm_90a", pipeline=STRICT)
    o, lse = out[3].reshape(args[3].shape), out[4].reshape(args[4].shape)
    assert attention.close(o, lse, *args[:3]) is None


@pytest.mark.parametrize("lagged_max", [False, True], ids=["every-tile", "lagged"])
def test_the_warp_specialized_kernel_without_the_rescale_is_caught(lagged_max):
    """Every tile rescales O without the lagged max; with it, only a rebase does, so the
    keys grow past the first tile's for the comparison to see the missing rescale."""
    args = attention.inputs(1, 256, 64, seed=5)
    if lagged_max:
        args = attention.growing_keys(args, 4.0)
    func = attention.attention_ws_kernel(1, 256, 64, omit="rescale", lagged_max=lagged_max)
    out = sim.run(func, args, target="sm_90a")
    o, lse = out[3].reshape(args[3].shape), out[4].reshape(args[4].shape)
    assert "outputs of O" in attention.close(o, lse, *args[:3])


LAGGED = [  # (heads, seq, head dim, causal, keywords, the keys' factor, from which key)
    (2, 256, 64, False, {"sms": 2}, 4.0, 128),  # persistent CTAs taking a block of both heads
    (2, 256, 64, False, {"sms": 2}, 60.0, 128),  # (GPU only: the next runs past float32)
    (1, 200, 128, True, {"persistent": False}, 60.0, 128),  # ragged, causal, a CTA a block
    # a ring each for K and V, two stages of 64 keys: tile 1's rebase reads K's stage 1
    # while tile 3's load waits for it (K's stage is freed after the vote)
    (1, 256, 64, False, {"split_kv": True, "block_n": 64, "stages": 2}, 4.0, 64),
]


@pytest.mark.parametrize(
    "shape, where",
    cases_where(
        LAGGED,
        in_sim=lambda s: s != LAGGED[1],
        ids=lambda s: "h{}-s{}-d{}-{}-{}-x{:g}".format(*s[:4], len(s[4]), s[5]),
    ),
)
def test_the_lagged_max_rebases_the_tiles_that_outgrow_it(shape, where, gpu):
    """Keys whose scores outgrow the first tile's max (by 2^8 and more; past float32's
    exponent): the lanes' sums of P pass the bound (or overflow), the consumer votes, and
    the tile is rebased (Q K^T again, the rescale): equal to float64. The simulator counts
    the rebases' wgmma groups against the same kernel on data that never trips the vote."""
    heads, seq, d, causal, keywords, factor, first = shape
    func = attention.attention_ws_kernel(heads, seq, d, causal=causal, lag_check="tile",
                                         **keywords)  # fmt: skip
    plain = attention.inputs(heads, seq, d, seed=8)
    args = attention.growing_keys(plain, factor, first)
    out, calm = run_tripped(func, args, plain if factor == 4.0 else None, where, gpu)
    if calm is not None:
        groups = [r.counters.instructions["wgmma.commit_group"] for r in (out, calm)]
        assert groups[0] > groups[1]  # the rebases' Q K^T
    assert attention.close(*shaped(out, args), *args[:3], causal=causal) is None


def run_tripped(func, args, plain, where, gpu):
    """``func`` on keys that trip the lagged max's bound (``args``), and in the simulator
    on ``plain`` keys that never trip it (None: not run), for the counters to compare:
    (the outputs or the simulator's result, the plain run's result or None)."""
    if where != "sim":
        return execute(func, args, where, gpu, pipeline=STRICT), None
    calm = None if plain is None else sim.run(func, plain, target="sm_90a", pipeline=STRICT)
    return sim.run(func, args, target="sm_90a", pipeline=STRICT), calm


def shaped(out, args) -> tuple:
    """O and LSE of a run (a simulator result or the outputs) in the arguments' shapes."""
    arrays = getattr(out, "arrays", out)
    return arrays[3].reshape(args[3].shape), arrays[4].reshape(args[4].shape)


def test_a_kernel_that_ignores_the_vote_is_caught():
    """The control: the vote taken and ignored (``omit="rebase"``) leaves P against a max
    the scores outgrew (infinite past float32's range), which the comparison names."""
    args = attention.growing_keys(attention.inputs(1, 256, 64, seed=8), 60.0)
    func = attention.attention_ws_kernel(1, 256, 64, omit="rebase", lag_check="tile")
    out = sim.run(func, args, target="sm_90a")
    assert "outputs of O" in attention.close(out[3], out[4], *args[:3])


BLOCK_CHECK = [  # (heads, seq, head dim, causal, keywords, the keys' factor, from which key,
    # in the simulator too: the GPU runs every shape)
    # three stages of 64 keys (one a consumer), a ring each: tiles 1 to 5 trip (past
    # float32's exponent)
    (1, 384, 64, False, {"split_kv": True, "block_n": 64, "stages": 3}, 60.0, 64, False),
    (2, 256, 128, True, {"persistent": False}, 60.0, 128, False),  # causal, a CTA a block
    # grouped heads, the balanced persistent grid (its 128-row block's third consumer idle)
    (2, 256, 64, False, {"kv_heads": 1, "sms": 2}, 16.0, 128, True),
    # a ragged last block (TMA reads zeros past the end)
    (1, 200, 64, False, {}, 60.0, 128, True),
]


def checked_cases(shapes) -> list:
    """A ``BLOCK_CHECK`` or ``WARP_CHECK`` list's ``(shape, where)`` parameters: every shape
    on the GPU, those marked so in the simulator too."""
    return cases_where(
        shapes,
        in_sim=lambda s: s[7],
        ids=lambda s: "h{}-s{}-d{}-{}-{}-x{:g}".format(*s[:4], len(s[4]), s[5]),
    )


def checked_case(shape, lag_check: str, where: str) -> tuple:
    """A ``BLOCK_CHECK`` or ``WARP_CHECK`` shape's kernel with ``lag_check``, its plain
    inputs and the inputs with its keys scaled."""
    heads, seq, d, causal, keywords, factor, first, _ = shape
    func = attention.attention_ws_kernel(heads, seq, d, causal=causal, lag_check=lag_check,
                                         **keywords)  # fmt: skip
    plain = attention.inputs(heads, seq, d, seed=8, kv_heads=keywords.get("kv_heads"))
    return func, plain, attention.growing_keys(plain, factor, first)


def groups(*results) -> list[int]:
    """The wgmma groups each simulator result committed."""
    return [r.counters.instructions["wgmma.commit_group"] for r in results]


@pytest.mark.parametrize("shape, where", checked_cases(BLOCK_CHECK))
def test_the_block_check_recomputes_the_rows_that_outgrow_the_lagged_max(shape, where, gpu):
    """``lag_check="block"``: no vote on the lagged tiles, a flag per thread, one vote a
    block; after the CTA's last block a consumer that tripped computes those blocks again
    from its own stages, loaded by TMA: equal to float64. The simulator runs two shapes
    (the GPU every one) and counts the redos' wgmma groups (keys at 16 times) against the
    same kernel on data that never trips the bound, which is right too (at 60 times the
    comparison itself needs the redo: the control below)."""
    func, plain, args = checked_case(shape, "block", where)
    causal, factor = shape[3], shape[5]
    out, calm = run_tripped(func, args, plain if factor == 16.0 else None, where, gpu)
    if calm is not None:
        tripped, never = groups(out, calm)
        assert tripped > never  # the redos' Q K^T and P V
        assert attention.close(*shaped(calm, plain), *plain[:3], causal=causal) is None
    assert attention.close(*shaped(out, args), *args[:3], causal=causal) is None


def test_a_causal_kernel_whose_stage_index_the_simplifier_rewrites_lowers(monkeypatch):
    """Causal, 512 rows: TVM's simplifier rewrites a stage index ``(base + t) % stages``
    into ``t + 1 - x``, which it cannot bound below 0; the wgmma emitter's stage offset
    is masked to 18 bits, so TVM's StmtSimplify still lowers it, and the simulator runs it
    equal to float64. The control: the plain cast stops inside TVM (TVM 0.27; a TVM that
    bounds the cast fails the control, and the mask may go then)."""
    args = attention.inputs(1, 512, 64, seed=3)
    func = attention.attention_ws_kernel(1, 512, 64, causal=True)
    out = sim.run(func, args, target="sm_90a", pipeline=STRICT)
    assert attention.close(*shaped(out, args), *args[:3], causal=True) is None
    monkeypatch.setattr(wgmma, "_stage_offset", lambda offset: tvm.tirx.Cast("uint32", offset))
    with pytest.raises(tvm.error.InternalError, match="cannot make uint from negative"):
        toolchain.lowered(attention.attention_ws_kernel(1, 512, 64, causal=True), "sm_90a",
                          STRICT)  # fmt: skip


def test_the_block_check_lets_p_grow_past_the_votes_bound_without_a_redo():
    """Keys from 128 on at 2.5 times: rows' scores outgrow the first tile's max past 2^8
    (the vote's bound: checked on the data, the control that it passes it) and none past
    2^15 (the block check's: P stays finite in float16). The block check redoes nothing
    (as many wgmma groups as on the plain keys) and is equal to float64."""
    plain = attention.inputs(1, 256, 64, seed=8)
    args = attention.growing_keys(plain, 2.5, 128)
    s = args[0][0].astype(np.float64) @ args[1][0].astype(np.float64).T * (attention.LOG2E / 8)
    past = s[:, 128:].max(axis=1) - s[:, :128].max(axis=1)  # log2 of each row's largest P
    assert (past > 8).sum() >= 10 and past.max() < 15
    block = attention.attention_ws_kernel(1, 256, 64, lag_check="block")
    out, calm = run_tripped(block, args, plain, "sim", None)
    assert groups(out, calm)[0] == groups(out, calm)[1]
    assert attention.close(*shaped(out, args), *args[:3]) is None


def test_a_block_check_that_does_not_recompute_is_caught():
    """The control: the flags set and the recompute left out (``omit="recompute"``)
    leaves the tripped rows against a max the scores outgrew, which the comparison names."""
    args = attention.growing_keys(attention.inputs(1, 384, 64, seed=8), 60.0, 64)
    func = attention.attention_ws_kernel(1, 384, 64, split_kv=True, block_n=64, stages=3,
                                         lag_check="block", omit="recompute")  # fmt: skip
    out = sim.run(func, args, target="sm_90a", pipeline=STRICT)
    assert "outputs of O" in attention.close(*shaped(out, args), *args[:3])


@pytest.mark.parametrize(
    "keywords, named",
    [
        ({"lag_check": "row"}, "one of ('tile', 'block', 'warp')"),
        ({"lag_check": "block", "lagged_max": False}, "it takes lagged_max=True"),
        ({"omit": "recompute", "lag_check": "tile"}, "breaks lag_check 'block'"),
        ({"lag_check": "block", "omit": "rebase"}, "breaks lag_check 'tile'"),
        ({"lag_check": "block", "consumers": 3, "stages": 2}, "at least one stage a consumer"),
        ({"lag_check": "warp", "consumers": 3, "stages": 2}, "at least one stage a consumer"),
        ({"lag_check": "warp", "lagged_max": False}, "it takes lagged_max=True"),
    ],
)
def test_a_block_check_it_cannot_take_is_an_error(keywords, named):
    keywords = {"seq": 256, "heads": 1, **keywords}
    seq, heads = keywords.pop("seq"), keywords.pop("heads")
    with pytest.raises(ValueError, match=re.escape(named)):
        attention.attention_ws_kernel(heads, seq, 64, **keywords)


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
        out = execute(func, args, where, gpu, pipeline=STRICT)
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
    # consumer c = warpgroup - 1 waits at barrier 1 + c: the warpgroup's index
    assert "bar_sync_count_sync(((uint)(warp_id_in_cta >> 2)), (uint)256);" in src
    plain = attention.attention_ws_kernel(1, 256, 64, pingpong=False, lag_check="tile")
    assert "bar.arrive" not in toolchain.cuda_source(plain, "sm_90a", pipeline=STRICT)
    args = attention.inputs(1, 256, 64, seed=7)
    out = sim.run(plain, args, target="sm_90a", pipeline=STRICT)
    o, lse = out[3].reshape(args[3].shape), out[4].reshape(args[4].shape)
    assert attention.close(o, lse, *args[:3]) is None


PDL_FORMS = {  # grid forms of attention_ws_kernel: (heads, seq, keywords)
    "persistent": (1, 256, {}),
    "paired": (2, 256, {"causal": True}),
    "balanced": (3, 256, {"kv_heads": 1, "sms": 4, "balanced": True}),
    "per block": (2, 200, {"causal": True, "persistent": False}),
}


def test_programmatic_dependent_launch_waits_before_any_global_access():
    """``pdl`` (the default): in every grid form every thread's griddepcontrol.wait comes
    right after the mbarriers' CTA barrier, under no ``if`` and before anything else (the
    grid before may still write what this one reads or writes), then launch_dependents;
    the launch parameters are TVM's own for the grid plus its programmatic-launch tag, so
    its runtime launches the grid with programmatic stream serialization; ``pdl=False``
    (the control) has neither."""
    from tirx_cuda_dispatch import toolchain
    from tirx_cuda_dispatch.explain import PDL_TAG

    def launch(heads, seq, kw):
        _, device = toolchain.lowered(attention.attention_ws_kernel(heads, seq, 64, **kw),
                                      "sm_90a", STRICT)  # fmt: skip
        (func,) = device.functions.values()
        return [str(t) for t in func.attrs["tirx.kernel_launch_params"]]

    for heads, seq, kw in PDL_FORMS.values():
        script = attention.attention_ws_kernel(heads, seq, 64, **kw).script().splitlines()
        [at] = [i for i, ln in enumerate(script) if ln.strip() == "T.cuda.cta_sync()"]
        indent = script[at][: len(script[at]) - len(script[at].lstrip())]
        assert script[at + 1 : at + 3] == [
            indent + 'T.ptx.griddepcontrol("wait", "")',
            indent + 'T.ptx.griddepcontrol("launch_dependents", "")',
        ]
        assert sum("griddepcontrol" in ln for ln in script) == 2
    assert "griddepcontrol" not in attention.attention_ws_kernel(1, 256, 64, pdl=False).script()
    tagged, untagged = launch(1, 256, {}), launch(1, 256, {"pdl": False})
    assert tagged.count(PDL_TAG) == 1 and [t for t in tagged if t != PDL_TAG] == untagged


def test_two_rings_are_the_default_on_the_short_persistent_grids_of_head_dim_64_only():
    """A ring each for K and V by default to 1,024 rows at head dim 64 (persistent,
    non-causal, three consumers); one ring past 1,024 rows and causal (the controls)."""

    def src(seq, **kw):
        return attention.attention_ws_kernel(2, seq, 64, **kw).script()

    assert src(640) == src(640, split_kv=True) != src(640, split_kv=False)
    assert src(1152) == src(1152, split_kv=False)
    assert src(640, causal=True) == src(640, causal=True, split_kv=False)


def test_four_stages_at_head_dim_64_where_they_fit_and_a_missing_arrival_is_caught():
    """Head dim 64 rings four stages by default, three where four do not fit (192- and
    256-key tiles); at four stages, 640 rows (five key tiles) refill one stage, and
    without the consumers' empty arrivals (the control) the producer waits forever."""
    import re

    def stages(**kw):
        script = attention.attention_ws_kernel(1, 640, 64, **kw).script()
        return re.findall(r"K_s = T.decl_buffer\(\((\d+), (\d+), 64\)", script)

    assert stages() == [("4", "128")]
    assert stages(block_n=192) == [("3", "192")] and stages(block_n=256) == [("3", "256")]
    args = attention.inputs(1, 640, 64, seed=5)
    broken = attention.attention_ws_kernel(1, 640, 64, omit="empty_arrive")
    with pytest.raises(sim.SimError, match=r"deadlock: no warp can run.*3 of 3 arrivals"):
        sim.run(broken, args, target="sm_90a")


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_exponentials_on_the_fma_pipe_equal_numpy(causal):
    """``ex2_emulation=4`` (one exponential of P in four by a polynomial, FlashAttention-4's
    emulation; slower on the H200, docs/performance.md) still equals float64 within the
    bound, and the exp2 call says so."""
    args = attention.inputs(1, 384, 64, seed=8)
    func = attention.attention_ws_kernel(1, 384, 64, causal=causal, ex2_emulation=4)
    assert any("ex2_emulation" in r.plan for r in explain(func, "sm_90a") if r.op == "exp2")
    out = sim.run(func, args, target="sm_90a", pipeline=STRICT)
    o, lse = out[3].reshape(args[3].shape), out[4].reshape(args[4].shape)
    assert attention.close(o, lse, *args[:3], causal=causal) is None


OWN = [  # (seq, causal, the consumers' key tiles with own_tiles, every consumer all the CTA's)
    # causal, blocks of 192 rows over 128-key tiles: block 0 takes 2 tiles, whose second
    # only consumer 2's rows reach; block 1 takes 3, consumer 0's rows only 2
    (384, True, 1 + 1 + 2 + 2 + 3 + 3, 3 * 2 + 3 * 3),
    # ragged: the last block's 8 rows are consumer 0's; consumers 1 and 2 compute nothing
    (200, False, 3 * 2 + 1 * 2, 3 * 2 + 3 * 2),
]


@pytest.mark.parametrize("seq, causal, own, every", OWN)
def test_each_consumer_computes_only_the_key_tiles_of_its_rows(seq, causal, own, every):
    """``own_tiles`` (the default): a consumer's Q K^T and P V stop at the tiles its rows
    need (the simulator counts two wgmma groups a tile, one a warp, on data that never trips the
    lagged max's vote) and it passes its turn and frees the stages of the CTA's others;
    equal to float64 either way. The control: ``own_tiles=False`` computes every tile."""
    args = attention.inputs(1, seq, 64, seed=3)
    groups = []
    for own_tiles in (True, False):
        func = attention.attention_ws_kernel(1, seq, 64, causal=causal, consumers=3,
                                             persistent=False, own_tiles=own_tiles)  # fmt: skip
        result = sim.run(func, args, target="sm_90a", pipeline=STRICT)
        o, lse = result.arrays[3].reshape(args[3].shape), result.arrays[4].reshape(args[4].shape)
        assert attention.close(o, lse, *args[:3], causal=causal) is None
        groups.append(result.counters.instructions["wgmma.commit_group"])
    assert groups == [2 * 4 * own, 2 * 4 * every]  # Q K^T and P V, in each of 4 warps


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("section", [2])
def test_a_sectioned_launch_order_of_the_causal_grid_equals_numpy(section, where, gpu):
    """One CTA a block, causal, ragged and grouped: the launch order takes ``section``
    heads at a time, their blocks heaviest first (a kernel other than head after head,
    section 1, which the causal tests of one head run); equal to float64 with every
    region proved. Sections that do not divide the heads, or on the persistent grid,
    are an error; the default counts the key/value heads a section reads (grouped heads
    5 to 9 read three of 5)."""
    func = attention.attention_ws_kernel(4, 200, 64, causal=True, kv_heads=2, persistent=False,
                                         section=section)  # fmt: skip
    assert not [r.bounds_undecided for r in explain(func, "sm_90a") if r.bounds_undecided]
    args = attention.inputs(4, 200, 64, seed=2, kv_heads=2)
    out = execute(func, args, where, gpu, pipeline=STRICT)
    o, lse = out[3].reshape(args[3].shape), out[4].reshape(args[4].shape)
    assert attention.close(o, lse, *args[:3], causal=True) is None
    if section > 1:  # another launch order than head after head (section 1)
        assert (
            func.script()
            != attention.attention_ws_kernel(
                4, 200, 64, causal=True, kv_heads=2, persistent=False, section=1
            ).script()
        )
    kept = attention.SECTION_BYTES
    try:  # 15 heads over 5 key/value heads: a section of 5 (heads 5-9) reads 3 of them
        attention.SECTION_BYTES = 2 * 200 * 128 * 2 * 2  # room for two
        grouped = attention.attention_ws_kernel(15, 200, 128, causal=True, kv_heads=5,
                                                persistent=False).script()  # fmt: skip
        assert (
            grouped
            == attention.attention_ws_kernel(
                15, 200, 128, causal=True, kv_heads=5, persistent=False, section=3
            ).script()
        )
    finally:
        attention.SECTION_BYTES = kept
    with pytest.raises(ValueError, match="section 3: a divisor of the 4 heads"):
        attention.attention_ws_kernel(4, 200, 64, causal=True, persistent=False, section=3)
    with pytest.raises(ValueError, match="section 2: .* one CTA a block"):
        attention.attention_ws_kernel(4, 256, 64, causal=True, section=2)  # paired


BALANCED = [  # (heads, seq, SMs): two CTAs a head, each half its 192-row blocks and one of 128
    (3, 256, 4),  # blocks of 128 rows only (the third consumer idle), two heads a CTA in turn
    (1, 640, 2),  # one of 192 and one of 128 a CTA (10 chunks of 64: 3 x 3 + 1)
]


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("shape", BALANCED, ids=lambda s: "h{}-s{}-sms{}".format(*s))
def test_the_balanced_grid_equals_numpy(shape, where, gpu):
    """``balanced``: a head's rows as 192-row blocks and two of 128 whose third consumer
    computes and stores nothing; equal to float64, every region proved."""
    heads, seq, sms = shape
    func = attention.attention_ws_kernel(heads, seq, 64, kv_heads=1, sms=sms, balanced=True)
    assert not [r.bounds_undecided for r in explain(func, "sm_90a") if r.bounds_undecided]
    args = attention.inputs(heads, seq, 64, seed=6, kv_heads=1)
    out = execute(func, args, where, gpu, pipeline=STRICT)
    o, lse = out[3].reshape(args[3].shape), out[4].reshape(args[4].shape)
    assert attention.close(o, lse, *args[:3]) is None


def test_the_balanced_grid_is_the_default_to_1024_rows_and_an_error_where_it_cannot_be():
    """On at 1,024 rows (16 chunks of 64: 3 x 5 + 1), off at 4,096; the control: the idle
    consumer that stores its rows anyway writes past the block's (here past the end),
    which the bounds proof names; shapes it cannot take are an error."""

    def source(**kw):
        return attention.attention_ws_kernel(2, 1024, 64, **kw).script()

    assert source() == source(balanced=True) != source(balanced=False)
    assert source(own_tiles=False) == source(own_tiles=False, balanced=False)
    wide = attention.attention_ws_kernel(2, 4096, 64).script()
    assert wide == attention.attention_ws_kernel(2, 4096, 64, balanced=False).script()
    args = attention.inputs(3, 256, 64, seed=6, kv_heads=1)
    broken = attention.attention_ws_kernel(3, 256, 64, kv_heads=1, sms=4, balanced=True,
                                           omit="idle_store")  # fmt: skip
    with pytest.raises(OutOfBoundsError, match=r"(?s)region out of bounds .*LSE\[.*extent 256"):
        sim.run(broken, args, target="sm_90a", pipeline=STRICT)
    for kw in ({"causal": True}, {"consumers": 2}, {"persistent": False}, {"own_tiles": False}):
        with pytest.raises(ValueError, match="balanced: a non-causal persistent grid"):
            attention.attention_ws_kernel(2, 1024, 64, balanced=True, **kw)
    with pytest.raises(ValueError, match=r"seq 1216: 19 chunks"):  # 3 x 6 + 1, 5 odd
        attention.attention_ws_kernel(2, 1216, 64, balanced=True)


WARP_CHECK = [  # (heads, seq, head dim, causal, keywords, the keys' factor, from which key, sim)
    # persistent CTAs taking a block of both heads: rows past 2^8 and 2^15, within float32
    (2, 256, 64, False, {"sms": 2}, 16.0, 128, True),
    (1, 200, 128, True, {"persistent": False}, 16.0, 128, False),  # ragged, causal
    # a ring each for K and V, two stages of 64 keys, grouped heads
    (2, 256, 64, False, {"split_kv": True, "block_n": 64, "stages": 3, "kv_heads": 1},
     4.0, 64, False),
    # every block past float32's range, 54 blocks a CTA (the redo mask's second word)
    (36, 1024, 64, False, {"sms": 4}, 60.0, 128, False),
]  # fmt: skip


@pytest.mark.parametrize("shape, where", checked_cases(WARP_CHECK))
def test_the_warp_rebase_keeps_the_rows_that_outgrow_the_lagged_max(shape, where, gpu):
    """``lag_check="warp"``: a warp whose lanes pass 2^8 on a lagged tile rebases its own
    rows on P's row max (no Q K^T again, no wgmma in its branch): equal to float64; in the
    simulator (the first shape) with as many wgmma groups as on keys that never trip (no
    rebase's Q K^T, no redo) and the warps' row max shuffles counted (none on the plain
    keys past each block's first tile). The GPU runs every shape, the last with every
    block past float32's range, so each is redone (54 blocks a CTA: the redo mask's
    second word)."""
    func, plain, args = checked_case(shape, "warp", where)
    causal = shape[3]
    out, calm = run_tripped(func, args, plain, where, gpu)
    if calm is not None:
        assert groups(out, calm)[0] == groups(out, calm)[1]
        shuffles = [r.counters.instructions["shfl.sync"] for r in (out, calm)]
        assert shuffles[0] > shuffles[1]
    assert attention.close(*shaped(out, args), *args[:3], causal=causal) is None


def test_the_warp_rebase_redoes_a_block_past_float32s_range():
    """Keys at 60 times: a tile's P passes 2^120 (float32's range: its sums overflow), the
    block is flagged and computed again after the CTA's last (as ``lag_check="block"``
    does): more wgmma groups than on the plain keys, equal to float64."""
    plain = attention.inputs(1, 256, 64, seed=8)
    args = attention.growing_keys(plain, 60.0, 128)
    func = attention.attention_ws_kernel(1, 256, 64, lag_check="warp")
    out, calm = run_tripped(func, args, plain, "sim", None)
    assert groups(out, calm)[0] > groups(out, calm)[1]
    assert attention.close(*shaped(out, args), *args[:3]) is None


@pytest.mark.parametrize("omit, factor", [("rebase", 16.0), ("rescale", 4.0)])
def test_a_warp_rebase_left_out_or_without_the_rescale_is_caught(omit, factor):
    """Controls: the warp's vote taken and ignored (P past float16's range at 16 times),
    and the rebase without O's rescale (at 4 times), each named by the comparison."""
    args = attention.growing_keys(attention.inputs(1, 256, 64, seed=8), factor, 128)
    func = attention.attention_ws_kernel(1, 256, 64, lag_check="warp", omit=omit)
    out = sim.run(func, args, target="sm_90a", pipeline=STRICT)
    assert "outputs of O" in attention.close(*shaped(out, args), *args[:3])


@pytest.mark.parametrize(
    "heads, seq, words, index",
    [(256, 4096, 2, "redo_ptr[(i_1 >> 5)]"), (1, 256, 1, "redo_ptr[0] = (redo_ptr[0] |")],
    ids=["43-blocks", "one-block"],
)
def test_the_redo_mask_takes_a_word_per_32_blocks_of_a_cta(heads, seq, words, index):
    """256 heads of 4,096 rows take 43 blocks a CTA (the balanced grid on 132 SMs): the
    block check's mask of blocks to redo is two words, indexed by the block (before, an
    error past 32 blocks); the control: one block a CTA keeps one word at a constant index
    (a register). The GPU runs a two-word mask (the warp rebase's 54-block shape)."""
    func = attention.attention_ws_kernel(heads, seq, 64, lag_check="warp")
    src = toolchain.cuda_source(func, "sm_90a", STRICT)
    assert f"uint redo_ptr[{words}];" in src
    assert index in src
