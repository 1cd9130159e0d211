"""The cost model (src/tirx_cuda_dispatch/cost.py, machines.py): occupancy, the throughput
and latency bounds, unique DRAM bytes, the register savings, each with its control; and
the kernel view of real programs (explain --cost): a row staged in shared memory is bound
by shared memory, the same RMSNorm in registers by DRAM. Its figures against the GPU are
bench/run.py's part 10 (bench/cost_model.py), not a test."""

from __future__ import annotations

import dataclasses

import pytest

from modules import BENCH, ROOT, load_file
from tirx_cuda_dispatch import cost, explain
from tirx_cuda_dispatch.explain import kernel_cost
from tirx_cuda_dispatch.machines import H100, H200, UnknownMachine, machine, machine_for

MIB = 2**20


def call(index, demand, phase=0, trips=1, buffers=(), scope="cta"):
    return cost.CallCost(index, f"[{index}]", demand, trips, phase, buffers, scope)


def test_occupancy_names_the_limit_that_binds():
    by_threads = cost.occupancy(cost.KernelShape(1000, 1024, 0, 32), H200)
    assert (by_threads.ctas, by_threads.limiter) == (2, "threads")
    # 128 registers x 32 lanes is 4096 a warp, 8 warps 32768: two CTAs of 65536
    by_registers = cost.occupancy(cost.KernelShape(1000, 256, 0, 128), H200)
    assert (by_registers.ctas, by_registers.limiter) == (2, "registers")
    # 100 KiB + the 1 KiB reserve: two of 228 KiB
    by_shared = cost.occupancy(cost.KernelShape(1000, 128, 100 * 1024, 32), H200)
    assert (by_shared.ctas, by_shared.limiter) == (2, "shared memory")
    # control: registers unknown are no limit at all (not zero CTAs)
    unknown = cost.occupancy(cost.KernelShape(1000, 256, 0, None), H200)
    assert "registers" not in dict(unknown.limits) and unknown.ctas == 8


def test_a_streaming_kernel_is_bound_by_dram_and_rereads_count_once():
    """Each of 1,320 CTAs reads its own MiB and one shared 64 KiB table: DRAM moves the
    table once (its buffer's size), L2 every time; the control (no size known) counts
    every read against DRAM."""
    d = cost.Demand(global_read=(("X", MIB), ("T", 64 * 1024)), global_write=(("Y", MIB),))
    shape = cost.KernelShape(1320, 256, 0, 32, (("X", 1320 * MIB), ("Y", 1320 * MIB),
                                                ("T", 64 * 1024)))  # fmt: skip
    view = cost.kernel_cost([call(0, d)], shape, H200)
    assert view.bound == "dram"
    assert view.dram_bytes == 2 * 1320 * MIB + 64 * 1024
    assert view.predicted_us == pytest.approx(view.dram_bytes / H200.dram_bytes_per_s * 1e6)
    unsized = cost.kernel_cost([call(0, d)], dataclasses.replace(shape, buffer_bytes=()), H200)
    assert unsized.dram_bytes == 1320 * (2 * MIB + 64 * 1024) > view.dram_bytes
    # the same bytes on the H100's slower DRAM take longer
    assert cost.kernel_cost([call(0, d)], shape, H100).predicted_us > view.predicted_us


def test_phases_run_one_after_another_and_barriers_make_them():
    """Eight calls that each wait for DRAM, a barrier after each, one CTA an SM: the
    CTA's phases add up and bound the kernel (latency); the control, the same calls with
    no barrier between (one phase), waits once and is bound by throughput."""
    d = cost.Demand(global_read=(("X", 4096),), waits_for_global=True)
    shape = cost.KernelShape(132, 256, 200 * 1024, 32)
    apart = cost.kernel_cost([call(i, d, phase=i) for i in range(8)], shape, H200)
    assert apart.bound == "latency" and len(apart.phases) == 8
    assert apart.latency_us > 8 * H200.dram_latency_clk / H200.clock_hz * 1e6
    together = cost.kernel_cost([call(i, d, phase=0) for i in range(8)], shape, H200)
    assert len(together.phases) == 1 and together.latency_us < apart.latency_us / 3
    # asynchronous copies (cp.async, TMA) only issue in their phase: their bytes overlap
    later = dataclasses.replace(d, waits_for_global=False, asynchronous=True)
    issued = cost.kernel_cost([call(i, later, phase=i) for i in range(8)], shape, H200)
    assert issued.latency_us < apart.latency_us / 3


def test_a_buffer_one_scope_touches_gets_a_register_saving():
    """x is read and written by CTA-scope calls only: moving it to registers saves its
    wavefronts; the control, a buffer a warp-scope call also touches, gets none."""
    shape = cost.KernelShape(8192, 256, 32 * 1024, 32)
    d = cost.Demand(shared=(("x", 2048.0),))
    only_cta = [call(0, d, buffers=("x",)), call(1, d, phase=1, buffers=("x",))]
    view = cost.kernel_cost(only_cta, shape, H200)
    assert view.bound == "shared"
    assert [b for b, _, _ in view.savings] == ["x"] and view.savings[0][1] > 0
    assert "only cta-scope calls touch it ([0], [1])" in str(view)
    mixed = [only_cta[0], call(1, d, phase=1, buffers=("x",), scope="warp")]
    assert cost.kernel_cost(mixed, shape, H200).savings == []


def test_machines_are_named_and_an_unknown_one_is_an_error_naming_the_known():
    assert machine("h200") is H200 and machine_for("sm_90a") is H200
    assert machine_for("sm_80") is None
    with pytest.raises(UnknownMachine, match="no machine facts for 'B300'; known: H200, H100"):
        machine("B300")
    assert all(H200.sources.get(f) for f in ("dram_bytes_per_s", "tensor_flop_per_clk"))


# -- the kernel view of programs ----------------------------------------------------------
@pytest.fixture(scope="module")
def cost_model():
    return load_file("bench_cost_model_under_test", BENCH / "cost_model.py")


def rmsnorm(rows: int):
    return load_file("rmsnorm_example_for_cost", ROOT / "examples" / "rmsnorm.py").rmsnorm_kernel(
        rows, 1, 1
    )


def test_the_staged_rmsnorm_is_bound_by_shared_memory_the_register_one_by_dram(cost_model):
    """The plain formulation moves every byte through shared memory about seven times:
    the model says so (bound by shared memory, about twice the register kernel's time)
    and names x as the buffer to keep in registers; the register kernel is bound by DRAM
    at the bytes it must move (x read, y written)."""
    staged = cost_model.staged_rmsnorm_kernel(8192)
    view = kernel_cost(explain(staged, "sm_90a"), staged, registers=40)
    assert view.bound == "shared" and view.occupancy.limiter == "shared memory"
    # the broadcast multiply (x * ss, 4 bytes a lane): each warp access is one wavefront
    # of x read, one of x written, one of the broadcast ss
    by_index = {c.index: c for c in view.calls}
    assert by_index[8].demand.shared_wavefronts == 3 * 16 * 8
    assert max(view.savings, key=lambda s: s[1])[0] == "x"
    plain = rmsnorm(8192)
    reg = kernel_cost(explain(plain, "sm_90a"), plain, registers=40)
    assert reg.bound == "dram" and reg.savings == []
    assert reg.dram_bytes == 2 * 8192 * 4096 * 2 + 4096 * 2  # x, y and the weight once
    assert view.predicted_us > 1.8 * reg.predicted_us


def test_warp_scope_calls_count_every_warp_and_an_elected_thread_counts_once():
    """examples/gemm.py: 8 warps each run the warp-scope gemm; examples/gemm_hopper.py:
    the TMA loads run under ``if`` on one thread, once per CTA; its wgmma on each of the
    two warpgroups."""
    from tirx_cuda_dispatch.participation import instances

    gemm = load_file("gemm_example_for_cost", ROOT / "examples" / "gemm.py")
    func = gemm.gemm_kernel(256, 256, 256, epilogue="plain")
    report = explain(func, "sm_90a")
    counts = {r.variant: instances(r.call_object) for r in report}
    assert counts["mma.m16n8k*"] == 4 and counts["ldgsts"] == 1  # 128 threads: 4 warps
    hopper = load_file("gemm_hopper_example_for_cost", ROOT / "examples" / "gemm_hopper.py")
    report = explain(hopper.gemm_kernel(256, 256, 128, epilogue="plain"), "sm_90a")
    counts = {r.variant: instances(r.call_object) for r in report}
    assert counts["tma_auto"] == 1 and counts["wgmma"] == 2


def test_ptxas_gives_the_register_count():
    from tirx_cuda_dispatch import toolchain

    func = rmsnorm(8)
    usage = toolchain.ptxas_usage(toolchain.cuda_source(func, "sm_90a"), "sm_90a")
    assert list(usage) == ["rmsnorm_kernel"] and 16 <= usage["rmsnorm_kernel"] <= 255


def test_exponentials_count_on_the_special_function_unit(cost_model):
    """The staged softmax's exp2 over a 4096-element row is 4096 MUFU results a CTA (16 a
    clock per SM: 256 clocks); the control, the subtraction before it, none."""
    staged = cost_model.staged_softmax_kernel(8192)
    view = kernel_cost(explain(staged, "sm_90a"), staged, registers=32)
    by_op = {c.label.split("] ")[1].split(" ->")[0]: c for c in view.calls}
    assert by_op["cta.exp2"].demand.sfu == 4096
    assert by_op["cta.exp2"].demand.clocks(H200)["sfu"] == 256
    assert by_op["cta.sub"].demand.sfu == 0
    assert view.resource_us["sfu"] > 0


def _triangle(ctas: int):
    """CTA ``bx`` copies a 32 x 32 float32 tile ``bx + 1`` times (a causal kernel's shape:
    the work grows with the block index)."""
    from tvm.script import tirx as T
    from tvm.script.tirx import tile as Tx

    # fmt: off
    @T.prim_func
    def triangle(A_ptr: T.handle, B_ptr: T.handle):
        A = T.match_buffer(A_ptr, (ctas * 32, 32), "float32")
        B = T.match_buffer(B_ptr, (ctas * 32, 32), "float32")
        T.device_entry()
        bx = T.cta_id([ctas])
        T.thread_id([128])
        s = T.alloc_buffer((32, 32), "float32", scope="shared")
        for _t in T.serial(bx + 1):
            Tx.cta.copy(s[:, :], A[bx * 32 : bx * 32 + 32, :])
            T.cuda.cta_sync()
            Tx.cta.copy(B[bx * 32 : bx * 32 + 32, :], s[:, :])
            T.cuda.cta_sync()
    # fmt: on
    return triangle


def test_a_loop_whose_extent_depends_on_the_cta_counts_its_mean_over_the_grid():
    """``for t in T.serial(bx + 1)`` over 4 CTAs runs 1, 2, 3 and 4 times: 2.5 a CTA on
    average; the control, a grid of 1 CTA, once."""
    func = _triangle(4)
    view = kernel_cost(explain(func, "sm_90a"), func, registers=32)
    assert [c.trips for c in view.calls] == [2.5, 2.5] and not view.shape.notes
    one = _triangle(1)
    assert [c.trips for c in kernel_cost(explain(one, "sm_90a"), one, registers=32).calls] == [1, 1]


def test_a_multicast_reads_l2_once_and_lands_in_every_cta():
    """examples/gemm_hopper_ws.py paired (B multicast, each CTA issuing half of B): a third
    less L2 traffic than unpaired, the same shared-memory bytes (each CTA still receives
    all of B: the multicast's landings count twice), and the tensor pipe now binds."""
    ws = load_file("gemm_hopper_ws_for_cost", ROOT / "examples" / "gemm_hopper_ws.py")
    views = {}
    for cluster in (1, 2):
        func = ws.gemm_kernel(4096, 4096, 4096, grid=132, epilogue="plain", cluster=cluster)
        views[cluster] = kernel_cost(explain(func, "sm_90a"), func, registers=168)
    alone, paired = views[1].resource_us, views[2].resource_us
    assert paired["l2"] == pytest.approx(alone["l2"] * 2 / 3, rel=0.02)  # C stores: once
    assert paired["shared"] == pytest.approx(alone["shared"], rel=0.01)
    assert views[1].bound == "l2" and views[2].bound == "tensor"
    casts = [c for c in views[2].calls if "lands in 2 CTAs" in " ".join(c.demand.notes)]
    assert len(casts) == 1
