"""The cost model against the GPU, for bench/run.py (part 10, ``cost``).

``explain --cost`` predicts a kernel's time from its plans (:mod:`tirx_cuda_dispatch.cost`)
on the machine's facts (:mod:`tirx_cuda_dispatch.machines`). This part times bench/run.py's
kernels (two streaming copies of part 1, examples/rmsnorm.py and examples/softmax.py as
part 6 runs them, examples/gemm.py, examples/gemm_hopper.py and the warp-specialized
examples/gemm_hopper_ws.py at 4096^3, examples/attention.py at 64 x 4096 x 128 and x 64) and the same
RMSNorm and softmax written the plain way (:func:`staged_rmsnorm_kernel`,
:func:`staged_softmax_kernel`: a row staged in shared memory, CTA-scope tile ops one after
another over the whole row with a CTA barrier between), each result checked first, and
prints predicted over measured time with the bound the model names. The model is good
where that ratio lies within 0.75-1.33.

The staged kernels are what a new user writes first; the model is what tells them why
they run at half of a device copy (shared-memory bandwidth) and which buffer to keep in
registers.

``python3 bench/cost_model.py --machine H100`` (no GPU needed) prints what the model says
bounds the warp-specialized GEMM at each of issue 32's shapes (:func:`ws_bounds`).
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from tvm.script import tirx as T  # noqa: E402
from tvm.script.tirx import tile as Tx  # noqa: E402

D = 4096
EPS = 1e-6
LOG2E = 1.4426950408889634
N_ROWS = 8192
GEMM_SHAPE = (4096, 4096, 4096)
WITHIN = (0.75, 1.33)  # predicted / measured, where the model counts as right


def staged_rmsnorm_kernel(n: int, threads: int = 256, eps: float = EPS):
    """RMSNorm of ``n`` bfloat16 rows of 4096 written the plain way: one row per CTA,
    staged in shared memory, each step a CTA-scope tile op over the whole row."""
    inv_d = 1.0 / D

    # fmt: off
    @T.prim_func
    def rmsnorm_staged(X_ptr: T.handle, W_ptr: T.handle, Y_ptr: T.handle):
        X = T.match_buffer(X_ptr, (n, D), "bfloat16")
        W = T.match_buffer(W_ptr, (D,), "bfloat16")
        Y = T.match_buffer(Y_ptr, (n, D), "bfloat16")
        T.device_entry()
        bx = T.cta_id([n])
        T.warp_id([threads // 32])
        T.lane_id([32])
        T.thread_id([threads])
        x16 = T.alloc_buffer((1, D), "bfloat16", scope="shared")
        x = T.alloc_buffer((1, D), "float32", scope="shared")
        sq = T.alloc_buffer((1, D), "float32", scope="shared")
        w = T.alloc_buffer((1, D), "float32", scope="shared")
        ss = T.alloc_buffer((1, 1), "float32", scope="shared")
        Tx.cta.copy(x16[0, :], W[:])
        T.cuda.cta_sync()
        Tx.cta.cast(w[:, :], x16[:, :])
        T.cuda.cta_sync()
        Tx.cta.copy(x16[:, :], X[bx : bx + 1, :])
        T.cuda.cta_sync()
        Tx.cta.cast(x[:, :], x16[:, :])
        T.cuda.cta_sync()
        Tx.cta.mul(sq[:, :], x[:, :], x[:, :])
        T.cuda.cta_sync()
        Tx.cta.sum(ss[:, :], sq[:, :], axes=[-1])
        T.cuda.cta_sync()
        Tx.cta.sqrt(ss[:, :], ss[:, :], T.float32(eps), T.float32(inv_d))
        T.cuda.cta_sync()
        Tx.cta.reciprocal(ss[:, :], ss[:, :])
        T.cuda.cta_sync()
        Tx.cta.mul(x[:, :], x[:, :], ss[:, :])
        T.cuda.cta_sync()
        Tx.cta.mul(x[:, :], x[:, :], w[:, :])
        T.cuda.cta_sync()
        Tx.cta.cast(x16[:, :], x[:, :])
        T.cuda.cta_sync()
        Tx.cta.copy(Y[bx : bx + 1, :], x16[:, :])
    # fmt: on
    return rmsnorm_staged


def staged_softmax_kernel(n: int, threads: int = 256):
    """Row softmax of ``n`` float16 rows of 4096 written the plain way (as
    :func:`staged_rmsnorm_kernel`)."""

    # fmt: off
    @T.prim_func
    def softmax_staged(X_ptr: T.handle, Y_ptr: T.handle):
        X = T.match_buffer(X_ptr, (n, D), "float16")
        Y = T.match_buffer(Y_ptr, (n, D), "float16")
        T.device_entry()
        bx = T.cta_id([n])
        T.warp_id([threads // 32])
        T.lane_id([32])
        T.thread_id([threads])
        x16 = T.alloc_buffer((1, D), "float16", scope="shared")
        x = T.alloc_buffer((1, D), "float32", scope="shared")
        m = T.alloc_buffer((1, 1), "float32", scope="shared")
        s = T.alloc_buffer((1, 1), "float32", scope="shared")
        Tx.cta.copy(x16[:, :], X[bx : bx + 1, :])
        T.cuda.cta_sync()
        Tx.cta.cast(x[:, :], x16[:, :])
        T.cuda.cta_sync()
        Tx.cta.max(m[:, :], x[:, :], axes=[-1])
        T.cuda.cta_sync()
        Tx.cta.sub(x[:, :], x[:, :], m[:, :])
        T.cuda.cta_sync()
        Tx.cta.exp2(x[:, :], x[:, :], None, T.float32(LOG2E))
        T.cuda.cta_sync()
        Tx.cta.sum(s[:, :], x[:, :], axes=[-1])
        T.cuda.cta_sync()
        Tx.cta.reciprocal(s[:, :], s[:, :])
        T.cuda.cta_sync()
        Tx.cta.mul(x[:, :], x[:, :], s[:, :])
        T.cuda.cta_sync()
        Tx.cta.cast(x16[:, :], x[:, :])
        T.cuda.cta_sync()
        Tx.cta.copy(Y[bx : bx + 1, :], x16[:, :])
    # fmt: on
    return softmax_staged


def predicted(func, machine=None):
    """The kernel view of ``func`` (registers from ptxas) on ``machine`` (default H200)."""
    import tirx_cuda_dispatch as tcd
    from tirx_cuda_dispatch.explain import kernel_cost

    return kernel_cost(tcd.explain(func, "sm_90a"), func, machine, target="sm_90a")


def _contenders(torch):
    """(name, func, launch, bytes or FLOP note) for every kernel of the part, each run
    once and checked."""
    import copy_stream
    import norms

    import gemm
    from tirx_cuda_dispatch import demos, runtime

    out = []
    for name, dtype, tm, tn, scope, threads in (copy_stream.CONFIGS[0], copy_stream.CONFIGS[3]):
        elem = 4 if dtype == "float32" else 2
        ctas = (256 * 2**20 // (elem * tn)) // tm
        func = demos.gmem_smem_roundtrip(dtype, (tm, tn), scope, ctas=ctas, cta_threads=threads)
        a = torch.randn(ctas * tm, tn, device="cuda").to(copy_stream.TORCH_DTYPE[dtype])
        kernel = runtime.build(func, runtime.gpu_arch(), norms.STRICT)[runtime.entry_name(func)]
        out.append((f"copy {name}", func, copy_stream.checked_launch(kernel, a, name)))
    x = torch.randn(N_ROWS, D, device="cuda").to(torch.bfloat16)
    w = (1 + 0.1 * torch.randn(D, device="cuda")).to(torch.bfloat16)
    ref = norms.rmsnorm_reference(torch, x, w)
    for name, func in (
        ("rmsnorm (registers)", norms.example("rmsnorm").rmsnorm_kernel(N_ROWS, 1, 1)),
        ("rmsnorm staged in shared", staged_rmsnorm_kernel(N_ROWS)),
    ):
        launch, y = norms.ours_launch(torch, func, [x, w], x)
        norms.require(norms.max_error(torch, y, ref, norms.BF16_REL, 1e-6), 1.0, name)
        out.append((name, func, launch))
    xs = (3 * torch.randn(N_ROWS, D, device="cuda")).to(torch.float16)
    ref = torch.softmax(xs.double(), dim=-1)
    for name, func in (
        ("softmax (registers)", norms.example("softmax").softmax_kernel(N_ROWS, 1, 1)),
        ("softmax staged in shared", staged_softmax_kernel(N_ROWS)),
    ):
        launch, y = norms.ours_launch(torch, func, [xs], xs)
        norms.require(norms.max_error(torch, y, ref, norms.FP16_REL, norms.FP16_ABS), 1.0, name)
        out.append((name, func, launch))
    m, n, k = GEMM_SHAPE
    a = torch.randn(m, k, device="cuda").to(torch.float16)
    b = torch.randn(k, n, device="cuda").to(torch.float16)
    bias = torch.randn(n, device="cuda").to(torch.float16)
    want = a.double() @ b.double()
    for config in ("128x256x64 s3", "hopper 128x256x64 s4"):
        example = norms.example(gemm.GEMM_EXAMPLE.get(config, "gemm"))
        func = example.gemm_kernel(m, n, k, epilogue="plain", **gemm.GEMM_CONFIGS[config])
        fn = runtime.build(func, runtime.gpu_arch(), norms.STRICT)[runtime.entry_name(func)]
        launch, c = gemm._gemm_run(torch, fn, a, b, bias)
        err = gemm.rel_error(torch, c, want)
        if not err <= gemm.GEMM_TOL:
            raise RuntimeError(f"gemm {config}: relative error {err:.3g}")
        out.append((f"gemm {config} {m}^3", func, launch))
    import gemm_ws

    ws = norms.example("gemm_hopper_ws").gemm_kernel(
        m, n, k, epilogue="plain", grid=torch.cuda.get_device_properties(0).multi_processor_count,
        **gemm_ws.WS_CONFIG,
    )  # fmt: skip
    fn = runtime.build(ws, runtime.gpu_arch(), norms.STRICT)[runtime.entry_name(ws)]
    launch, c = gemm._gemm_run(torch, fn, a, b, bias)
    err = gemm.rel_error(torch, c, want)
    if not err <= gemm.GEMM_TOL:
        raise RuntimeError(f"gemm_hopper_ws: relative error {err:.3g}")
    out.append((f"gemm ws {m}^3", ws, launch))
    for d, causal in ((128, False), (64, False), (128, True)):
        out.append(_attention(torch, d, causal))
    return out


def _attention(torch, d: int, causal: bool):
    """examples/attention.py's warp-specialized kernel at B*H 64 x 4096, checked against
    torch's SDPA in float32 first."""
    import attention as bench_attention

    return bench_attention.cost_contender(torch, 4096, d, causal)


def part_cost(gpu, args) -> list[dict]:
    torch = gpu.torch
    import norms

    contenders = _contenders(torch)
    fns = {name: launch for name, _, launch in contenders}
    ms = norms.time_queued(torch, fns, batch=10, reps=args.reps * 2)
    rows = []
    for name, func, _ in contenders:
        view = predicted(func)
        measured = ms[name] * 1e3
        ratio = view.predicted_us / measured
        rows.append(
            {
                "kernel": name,
                "predicted us": round(view.predicted_us, 1),
                "measured us": round(measured, 1),
                "predicted / measured": round(ratio, 3),
                "within 0.75-1.33": "yes" if WITHIN[0] <= ratio <= WITHIN[1] else "NO",
                "bound": view.bound,
                "CTAs/SM": f"{view.occupancy.ctas} ({view.occupancy.limiter})",
                "regs": view.shape.registers,
                "bounds us (dram, l2, shared, tensor, sfu, issue, latency)": ", ".join(
                    f"{v:.1f}" for v in [*view.resource_us.values(), view.latency_us]
                ),
            }
        )
    return rows


# issue 32's GEMM shapes (M, N, K): what the model says bounds each (no GPU needed)
WS_SHAPES = [(4096, 4096, 4096), (6144, 6144, 6144), (8192, 8192, 8192), (4000, 4000, 4000),
             (8192, 8192, 1024), (16384, 1024, 4096), (1024, 16384, 4096)]  # fmt: skip


def ws_bounds(machine: str = "H100", sms: int = 132) -> list[dict]:
    """examples/gemm_hopper_ws.py (float16, C = A B, part 8g's configuration) at each of
    :data:`WS_SHAPES`: the predicted time and TFLOP/s on ``machine`` and every bound."""
    import gemm_ws
    import norms

    rows = []
    for m, n, k in WS_SHAPES:
        func = norms.example("gemm_hopper_ws").gemm_kernel(
            m, n, k, epilogue="plain", grid=sms, **gemm_ws.WS_CONFIG
        )
        view = predicted(func, machine)
        rows.append(
            {
                "shape": f"{m}x{n}x{k}",
                "predicted us": round(view.predicted_us, 1),
                "predicted TFLOP/s": round(2 * m * n * k / view.predicted_us / 1e6, 1),
                "bound": view.bound,
                **{f"{r} us": round(v, 1) for r, v in view.resource_us.items() if v},
                "latency us": round(view.latency_us, 1),
            }
        )
    return rows


def main() -> int:
    import argparse

    import run

    parser = argparse.ArgumentParser(description="the cost model's bounds, no GPU needed")
    parser.add_argument("--machine", default="H100", help="H100 or H200")
    args = parser.parse_args()
    print(run.markdown_table(ws_bounds(args.machine)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
