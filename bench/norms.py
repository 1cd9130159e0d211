"""Normalizations and the reductions under them, for bench/run.py (parts 6 and 7).

``rmsnorm`` and ``softmax``: examples/rmsnorm.py and examples/softmax.py (tile primitives
only, ``tirx_cuda_dispatch.strict``) in a few (rows, steps) shapes, against PyTorch eager,
a plain Triton kernel (one program per row) and a device-to-device copy of the same
bytes, all timed interleaved in one run after each result is checked against a
higher-precision reference computed with torch on the GPU (poisoned outputs).

``cta_sum``: ``Tx.cta.sum`` over a shared float32 tile that stays resident, in a loop with
a barrier between iterations, in shared bytes per clock per SM against the 128 B/clk/SM
peak, beside hand-written CUDA of our plan's schedule and of the loads alone. ``warp_sum``: ``Tx.warp.sum`` of 8 float32 per lane into a total every lane holds,
against hand-written CUDA (4 accumulators, 5 ``__shfl_xor_sync``): time in a loop, and
(``warp_sum_sass``, no GPU needed) the SASS of one reduction.

Imports nothing of torch, Triton or CuPy at module level except a guarded Triton import:
the GPU-free parts run without them.
"""

from __future__ import annotations

import functools
import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import numpy as np  # noqa: E402
from tvm.script import tirx as T  # noqa: E402
from tvm.script.tirx import tile as Tx  # noqa: E402
from tvm.tirx.layout import R, S, TileLayout, laneid  # noqa: E402

import tirx_cuda_dispatch as tcd  # noqa: E402
from tirx_cuda_dispatch import runtime, toolchain  # noqa: E402

try:  # only the GPU parts need Triton; the others run without it
    import triton
    import triton.language as tl
except Exception as _exc:  # noqa: BLE001
    triton = tl = None
    TRITON_ERROR: Exception | None = _exc
else:
    TRITON_ERROR = None

STRICT = "tirx_cuda_dispatch.strict"
PEAK_SHARED = 128.0  # bytes per clock per SM
N_ROWS, D = 8192, 4096
EPS = 1e-6
BF16_REL = 2.0**-7  # one bfloat16 ulp, relative
FP16_REL, FP16_ABS = 2.0**-9, 2.0**-24  # two float16 ulps, relative; the subnormal step
SPIN_CYCLES = 4_000_000  # ~2 ms at 2 GHz: enough to queue a batch of launches behind
# (rows per step, steps, threads) per CTA
OURS_SHAPES = [(1, 1, 256), (2, 1, 256), (4, 1, 256), (2, 4, 256), (1, 1, 128), (2, 1, 128),
               (1, 1, 512), (2, 1, 512)]  # fmt: skip


@functools.cache
def example(name: str):
    """examples/<name>.py as a module (examples/ is not a package)."""
    spec = importlib.util.spec_from_file_location(
        f"example_{name}", ROOT / "examples" / f"{name}.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def sass_counts(func, pipeline: str = "tirx_cuda_dispatch") -> dict[str, int]:
    return dict(toolchain.opcodes(toolchain.kernel_sass(func, "sm_90a", pipeline)))


def count(ops: dict[str, int], *prefixes: str) -> int:
    return sum(v for k, v in ops.items() if k.startswith(prefixes))


# -- Triton references --------------------------------------------------------------------
if triton is not None:

    @triton.jit
    def triton_rmsnorm(X, W, Y, stride, eps, N: tl.constexpr, BLOCK: tl.constexpr):
        """One program per row: float32 sum of squares, y = x / rms * w."""
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        mask = cols < N
        x = tl.load(X + row * stride + cols, mask=mask, other=0.0).to(tl.float32)
        rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / N + eps)
        w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
        y = x * rstd * w
        tl.store(Y + row * stride + cols, y.to(Y.dtype.element_ty), mask=mask)

    @triton.jit
    def triton_softmax(X, Y, stride, N: tl.constexpr, BLOCK: tl.constexpr):
        """One program per row, float32: exp(x - max) / sum."""
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        mask = cols < N
        x = tl.load(X + row * stride + cols, mask=mask, other=-float("inf")).to(tl.float32)
        e = tl.exp(x - tl.max(x, axis=0))
        y = e / tl.sum(e, axis=0)
        tl.store(Y + row * stride + cols, y.to(Y.dtype.element_ty), mask=mask)


def _need_triton() -> None:
    if triton is None:
        raise RuntimeError(f"Triton is not importable here: {TRITON_ERROR!r}")


# -- checking and timing helpers ----------------------------------------------------------
def max_error(torch, y, ref, rel: float, abs_: float) -> float:
    """max |y - ref| / (rel |ref| + abs): at most 1 passes; NaN (a poisoned output left
    unwritten) never does."""
    err = (y.to(ref.dtype) - ref).abs() / (rel * ref.abs() + abs_)
    return float(err.max().item()) if not torch.isnan(err).any() else float("nan")


def require(err: float, bound: float, what: str) -> None:
    if not err <= bound:  # NaN fails too
        raise RuntimeError(f"{what}: error {err:.3g} x the tolerance (allowed {bound})")


def ours_launch(torch, kernel, inputs: list, out_like):
    """Build ``kernel`` with the strict pipeline, run it once into a NaN-poisoned output;
    return (launch, output). The torch tensors are shared with TVM through DLPack."""
    import tvm

    fn = runtime.build(kernel, runtime.gpu_arch(), STRICT)[runtime.entry_name(kernel)]
    out = torch.full_like(out_like, float("nan"))
    args = [tvm.runtime.from_dlpack(t) for t in (*inputs, out)]
    fn(*args)
    torch.cuda.synchronize()
    return (lambda: fn(*args)), out


def device_copy(torch, x):
    """A device-to-device copy of x's bytes into a fresh tensor, checked bit for bit."""
    y = torch.empty_like(x)
    y.copy_(x)
    torch.cuda.synchronize()
    if not torch.equal(x.view(torch.int16), y.view(torch.int16)):
        raise RuntimeError("device copy is wrong")
    return lambda: y.copy_(x)


def time_queued(torch, fns: dict, batch: int, reps: int) -> dict[str, float]:
    """Median milliseconds per call, interleaved as copy_stream.time_interleaved, but each
    batch queues behind a GPU spin (``torch.cuda._sleep``) before its start event runs, so
    the CPU cost of the first launch (TVM's, Triton's, torch's) is not timed: these
    kernels take tens of microseconds, near what a launch costs the CPU."""
    import statistics

    spin = getattr(torch.cuda, "_sleep", lambda cycles: None)
    for fn in fns.values():
        for _ in range(3):
            fn()
    torch.cuda.synchronize()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(reps):
        for name, fn in fns.items():
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            spin(SPIN_CYCLES)
            start.record()
            for _ in range(batch):
                fn()
            end.record()
            end.synchronize()
            times[name].append(start.elapsed_time(end) / batch)
    return {name: statistics.median(ts) for name, ts in times.items()}


def contender_rows(ms: dict[str, float], nbytes: int, errors: dict[str, float]) -> list[dict]:
    """One row per contender (the best of ours added after ours), with ratios against the
    device copy, torch and Triton timed in the same run."""
    ours = {k: v for k, v in ms.items() if k.startswith("ours")}
    best = min(ours, key=ours.get)
    order = [*ours, "best", *(k for k in ms if k not in ours)]
    rows = []
    for name in order:
        key = best if name == "best" else name
        t = ms[key]
        rows.append(
            {
                "contender": f"ours best ({best[5:]})" if name == "best" else name,
                "us": t * 1e3,
                "GB/s": nbytes / (t * 1e-3) / 1e9,
                "BW / D2D": ms["D2D copy"] / t,
                "speedup vs torch": ms["torch"] / t,
                "speedup vs Triton": ms["Triton"] / t,
                "max err / tol": errors.get(key, ""),
            }
        )
    return rows


# -- 6a. RMSNorm ----------------------------------------------------------------------------
def rmsnorm_reference(torch, x, w):
    xf = x.float()
    return xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS) * w.float()


def torch_rmsnorm(torch):
    """``F.rms_norm`` (PyTorch >= 2.4), else the eager composite it decomposes into."""
    fn = getattr(torch.nn.functional, "rms_norm", None)
    if fn is not None:
        return lambda x, w: fn(x, (D,), w, EPS)

    def composite(x, w):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS)).to(x.dtype) * w

    return composite


def part_rmsnorm(gpu, args) -> list[dict]:
    _need_triton()
    torch = gpu.torch
    x = torch.randn(N_ROWS, D, device="cuda").to(torch.bfloat16)
    w = (1 + 0.1 * torch.randn(D, device="cuda")).to(torch.bfloat16)
    ref = rmsnorm_reference(torch, x, w)
    fns, errors = {}, {}
    for rows, steps, threads in OURS_SHAPES:
        name = f"ours rows={rows} steps={steps} threads={threads}"
        print(f"  build {name}", file=sys.stderr, flush=True)
        kernel = example("rmsnorm").rmsnorm_kernel(N_ROWS, rows, steps, threads=threads)
        fns[name], y = ours_launch(torch, kernel, [x, w], x)
        errors[name] = max_error(torch, y, ref, BF16_REL, 1e-6)
        require(errors[name], 1.0, name)
    rms_norm = torch_rmsnorm(torch)
    fns["torch"] = lambda: rms_norm(x, w)
    errors["torch"] = max_error(torch, rms_norm(x, w), ref, BF16_REL, 1e-6)
    require(errors["torch"], 2.0, "torch rms_norm")  # eager may round twice
    y_tr = torch.full_like(x, float("nan"))
    fns["Triton"] = lambda: triton_rmsnorm[(N_ROWS,)](
        x, w, y_tr, x.stride(0), EPS, N=D, BLOCK=D, num_warps=8
    )
    fns["Triton"]()
    errors["Triton"] = max_error(torch, y_tr, ref, BF16_REL, 1e-6)
    require(errors["Triton"], 1.0, "Triton RMSNorm")
    fns["D2D copy"] = device_copy(torch, x)
    ms = time_queued(torch, fns, batch=10, reps=args.reps * 2)
    return contender_rows(ms, 2 * x.numel() * x.element_size(), errors)


# -- 6b. softmax ----------------------------------------------------------------------------
def part_softmax(gpu, args) -> list[dict]:
    _need_triton()
    torch = gpu.torch
    x = (3 * torch.randn(N_ROWS, D, device="cuda")).to(torch.float16)
    ref = torch.softmax(x.double(), dim=-1)
    fns, errors = {}, {}
    for rows, steps, threads in OURS_SHAPES:
        name = f"ours rows={rows} steps={steps} threads={threads}"
        print(f"  build {name}", file=sys.stderr, flush=True)
        kernel = example("softmax").softmax_kernel(N_ROWS, rows, steps, threads=threads)
        fns[name], y = ours_launch(torch, kernel, [x], x)
        errors[name] = max_error(torch, y, ref, FP16_REL, FP16_ABS)
        require(errors[name], 1.0, name)
    fns["torch"] = lambda: torch.softmax(x, dim=-1)
    errors["torch"] = max_error(torch, torch.softmax(x, dim=-1), ref, FP16_REL, FP16_ABS)
    require(errors["torch"], 2.0, "torch softmax")
    y_tr = torch.full_like(x, float("nan"))
    fns["Triton"] = lambda: triton_softmax[(N_ROWS,)](
        x, y_tr, x.stride(0), N=D, BLOCK=D, num_warps=8
    )
    fns["Triton"]()
    errors["Triton"] = max_error(torch, y_tr, ref, FP16_REL, FP16_ABS)
    require(errors["Triton"], 1.0, "Triton softmax")
    fns["D2D copy"] = device_copy(torch, x)
    ms = time_queued(torch, fns, batch=10, reps=args.reps * 2)
    return contender_rows(ms, 2 * x.numel() * x.element_size(), errors)


# -- 7a. CTA sum of a resident shared tile ------------------------------------------------
# (rows, cols, threads per CTA, CTAs per SM, dynamic): float32 tiles of 32 KiB, under the
# 48 KiB of static shared memory a kernel may declare (TVM declares shared buffers
# statically), and two in dynamic shared memory (``shared.dyn``, one allocation): the
# same 8 x 1024 tile, and 16 x 1024 (64 KiB), whose threads fold 128 elements before
# their butterfly; and the 32 KiB tile over 64 threads, whose threads fold 128 elements
# too (a butterfly of 3 steps for 2 KiB of each warp's loads, not 4 for 1 KiB). CTAs per
# SM stay resident at once (one wave): 4 x 256 threads (up to 64 registers each; NVRTC
# 13.5 gives 40), 6 x 128 (up to 85; 71), 6 x 64, 6 x 34 KiB or 3 x 66 KiB of shared
# memory of the 228 KiB an SM has.
CTA_SUM = [
    (8, 1024, 256, 4, False),
    (2, 4096, 256, 4, False),
    (32, 256, 256, 4, False),
    (8, 1024, 128, 6, False),
    (8, 1024, 128, 6, True),
    (8, 1024, 64, 6, False),
    (8, 1024, 64, 6, True),
    (16, 1024, 128, 3, True),
]


def cta_sum_loop(rows: int, cols: int, ctas: int, threads: int = 256, dynamic: bool = False):
    """Each CTA copies its rows x cols float32 tile of A into shared memory once, then
    ``iters`` times ``Tx.cta.sum`` over the rows into a shared vector, a CTA barrier after
    each (so no iteration's loads move past the previous one), then the sums to B.
    ``dynamic``: the tile in dynamic shared memory (a tile over the 48 KiB a kernel may
    declare statically)."""
    warps = threads // 32
    tile = (slice(0, rows), slice(0, cols))
    a_layout, b_layout = TileLayout(S[(rows, cols)]), TileLayout(S[rows])
    elems = rows * cols
    a_scope = "shared.dyn" if dynamic else "shared"

    # fmt: off
    @T.prim_func
    def cta_sum(A_ptr: T.handle, B_ptr: T.handle, iters: T.int32):
        A = T.match_buffer(A_ptr, (ctas * rows, cols), "float32")
        B = T.match_buffer(B_ptr, (ctas * rows,), "float32")
        T.device_entry()
        bx = T.cta_id([ctas])
        if warps >= 4:
            T.warpgroup_id([warps // 4])
            T.warp_id_in_wg([4])
        T.warp_id([warps])
        T.lane_id([32])
        T.thread_id([threads])
        pool = T.alloc_buffer((elems,), "float32", scope=a_scope, layout=TileLayout(S[elems]))
        if dynamic:
            T.attr({"tirx.dyn_smem_bytes": elems * 4})
        As = T.decl_buffer((rows, cols), "float32", pool.data, layout=a_layout)
        Bs = T.alloc_buffer((rows,), "float32", scope="shared", layout=b_layout)
        Tx.cta.copy(As[tile], A[bx * rows:(bx + 1) * rows, 0:cols])
        T.cuda.cta_sync()
        for _it in T.serial(iters):
            Tx.cta.sum(Bs[0:rows], As[tile], axes=(-1,))
            T.cuda.cta_sync()
        Tx.cta.copy(B[bx * rows:(bx + 1) * rows], Bs[0:rows])
    # fmt: on
    return cta_sum


def cta_sum_plan(func) -> tuple[dict, object]:
    """The explain() facts of the loop's reduction, and its schedule."""
    report = next(r for r in tcd.explain(func, "sm_90a") if r.op == "sum")
    if report.variant != "shared":
        raise RuntimeError(f"Tx.cta.sum went to {report.variant!r}: {report.error}")
    return report.plan, report.plan_object.schedule


def cta_sum_expected(schedule, a: np.ndarray, rows: int) -> np.ndarray:
    """Every CTA's sums as the plan's summation order computes them, bit for bit."""
    from tirx_cuda_dispatch.reduction.schedule import emulate

    tiles = a.reshape(-1, rows, a.shape[1])
    return np.concatenate([emulate(schedule, t).reshape(rows) for t in tiles])


def hand_cta_sum_source(
    rows: int, cols: int, threads: int, combine: bool, dynamic: bool = False
) -> str:
    """The 7a loop by hand, ``lanes = threads / rows`` consecutive threads per row, each
    thread's 16-byte vectors ``s * lanes + l`` of its row into 4 accumulators (a vector's
    element j into accumulator j), folded left. ``combine``: then the ``shfl.xor``
    butterfly over the row's lanes (masks 1, 2, .. lanes / 2) and lane 0 writes the row's
    sum (our plan's order, where the plan has no workspace); without it every thread
    writes its own partial, the loads' and adds' bound with nothing combined.
    ``dynamic``: the tile in dynamic shared memory, as ours puts it there."""
    lanes = threads // rows
    tile = (
        "extern __shared__ __align__(16) float As[]"
        if dynamic
        else (f"__shared__ __align__(16) float As[{rows * cols}]")
    )
    out = rows if combine else threads
    butterfly = (
        f"for (int m = 1; m < {lanes}; m <<= 1) v = v + __shfl_xor_sync(0xffffffffu, v, m);\n"
        f"    if (l == 0) Out[row] = v;"
        if combine
        else "Out[threadIdx.x] = v;"
    )
    return f"""
extern "C" __global__ void __launch_bounds__({threads}) cta_sum_hand(const float* __restrict__ A, float* __restrict__ B, int iters) {{
  {tile};
  __shared__ float Out[{out}];
  for (int i = threadIdx.x; i < {rows * cols // 4}; i += {threads})
    ((float4*)As)[i] = ((const float4*)A)[blockIdx.x * {rows * cols // 4} + i];
  __syncthreads();
  const int row = threadIdx.x / {lanes}, l = threadIdx.x % {lanes};
  float v = 0.0f;
  for (int it = 0; it < iters; ++it) {{
    float a0 = -0.0f, a1 = -0.0f, a2 = -0.0f, a3 = -0.0f;
#pragma unroll
    for (int s = 0; s < {cols // 4 // lanes}; ++s) {{
      const float4 x = ((const float4*)As)[row * {cols // 4} + s * {lanes} + l];
      a0 += x.x; a1 += x.y; a2 += x.z; a3 += x.w;
    }}
    v = ((a0 + a1) + a2) + a3;
    {butterfly}
    __syncthreads();
  }}
  for (int i = threadIdx.x; i < {out}; i += {threads}) B[blockIdx.x * {out} + i] = Out[i];
}}
"""


def _hand_cta_sum(gpu, a: np.ndarray, want: np.ndarray, shape, ctas: int, iters: int, combine):
    """The hand-written kernel, checked: with ``combine`` bit for bit against ``want`` (our
    plan's order), without it every thread's partial against numpy's float64 sum."""
    rows, cols, threads, dynamic = shape
    cp = gpu.cupy
    source = hand_cta_sum_source(rows, cols, threads, combine, dynamic)
    kernel = cp.RawKernel(source, "cta_sum_hand", options=("-std=c++17",))
    smem = rows * cols * 4 if dynamic else 0
    if dynamic:
        kernel.max_dynamic_shared_size_bytes = smem
    if not combine:  # thread t of a CTA: row t // lanes, vectors s * lanes + t % lanes
        lanes = threads // rows
        v = a.reshape(ctas, rows, cols // 4 // lanes, lanes, 4).astype(np.float64)
        want = v.sum(axis=(2, 4)).reshape(-1).astype(np.float32)
    out = cp.asarray(runtime.poison_like(want))
    args = (cp.asarray(a), out, np.int32(iters))
    kernel((ctas,), (threads,), args, shared_mem=smem)
    cp.cuda.Device().synchronize()
    got = out.get()
    ok = (
        np.array_equal(runtime.bits(got), runtime.bits(want))
        if combine
        else np.allclose(got, want, rtol=1e-5, atol=1e-4)
    )
    if not ok:
        what = "same schedule" if combine else "no combine"
        raise RuntimeError(f"cta_sum {shape}: the hand-written kernel ({what}) is wrong")
    return lambda: kernel((ctas,), (threads,), args, shared_mem=smem)


def _hand_lanes(schedule, rows: int, threads: int) -> int | None:
    """Lanes per row where our plan is the hand-written kernel's schedule (a butterfly
    over ``threads / rows`` lanes, no workspace), else None."""
    lanes = threads // rows
    same = schedule.warp_partials == 1 and 2 ** len(schedule.lane_masks) == lanes
    return lanes if same and schedule.vec == 4 and schedule.accumulators == 4 else None


def part_cta_sum(gpu, args) -> list[dict]:
    import tvm

    rng = np.random.default_rng(12)
    rows_out = []
    for rows, cols, threads, per_sm, dynamic in CTA_SUM:
        ctas = gpu.sms * per_sm
        name = f"{rows}x{cols} f32, {threads} threads, {per_sm} CTAs/SM"
        name += ", dynamic shared" if dynamic else ""
        print(f"  build cta_sum {name}", file=sys.stderr, flush=True)
        func = cta_sum_loop(rows, cols, ctas, threads, dynamic)
        plan, schedule = cta_sum_plan(func)
        a = runtime.random_array((ctas * rows, cols), "float32", rng)
        want = cta_sum_expected(schedule, a, rows)
        fn = runtime.build(func, runtime.gpu_arch(), STRICT)[runtime.entry_name(func)]
        dev = tvm.cuda(0)
        tensors = [tvm.runtime.tensor(v, device=dev) for v in (a, runtime.poison_like(want))]
        fn(*tensors, args.iters)
        dev.sync()
        if not np.array_equal(runtime.bits(tensors[1].numpy()), runtime.bits(want)):
            raise RuntimeError(f"cta_sum {name} computed a wrong result")
        shape = (rows, cols, threads, dynamic)
        fns = {"ours": lambda f=fn, t=tensors: f(*t, args.iters)}
        if _hand_lanes(schedule, rows, threads):
            fns["hand"] = _hand_cta_sum(gpu, a, want, shape, ctas, args.iters, True)
        fns["bound"] = _hand_cta_sum(gpu, a, want, shape, ctas, args.iters, False)
        ms = gpu.time(fns)
        nbytes = ctas * args.iters * rows * cols * 4
        per = {k: gpu.per_clock_per_sm(nbytes, t) / PEAK_SHARED for k, t in ms.items()}
        rows_out.append(
            {
                "tile": name,
                "schedule": plan.get("schedule", "?"),
                "wavefronts_per_load": plan.get("wavefronts_per_load", "?"),
                "est_clocks": plan.get("est_clocks", "?"),
                "ours B/clk/SM": per["ours"] * PEAK_SHARED,
                "ours/128": per["ours"],
                "hand-written/128": per.get("hand", "-"),
                "no combine/128": per["bound"],
            }
        )
    return rows_out


# -- 7b. warp sum of registers -------------------------------------------------------------
WARP_SUM_SRC = TileLayout(S[(32, 8) : (1 @ laneid, 1)])  # lane l: elements 8 l .. 8 l + 7
WARP_SUM_DST = TileLayout(S[1:1] + R[32 : 1 @ laneid])  # the total, in every lane
FEEDBACK = 2.0**-8  # register 0 <- total * 2^-8 after each iteration: exact, values bounded


def warp_sum_loop(ctas: int, once: bool = False):
    """One warp per CTA: each lane's row of A (8 float32) into registers, then ``iters``
    times ``Tx.warp.sum`` of the warp's 256 values into a total every lane holds, with
    ``total * 2^-8`` written into register 0 after each (so no iteration can be hoisted),
    then every lane's total to B. ``once``: one reduction, no loop (for counting SASS)."""

    # fmt: off
    @T.prim_func
    def warp_sum(A_ptr: T.handle, B_ptr: T.handle, iters: T.int32):
        A = T.match_buffer(A_ptr, (ctas * 32, 8), "float32")
        B = T.match_buffer(B_ptr, (ctas * 32,), "float32")
        T.device_entry()
        bx = T.cta_id([ctas])
        T.warp_id([1])
        T.lane_id([32])
        tid = T.thread_id([32])
        src = T.alloc_buffer([8], "float32", scope="local")
        dst = T.alloc_buffer([1], "float32", scope="local")
        for i in T.unroll(8):
            src[i] = A[bx * 32 + tid, i]
        src_view = src.view(256, layout=WARP_SUM_SRC)
        dst_view = dst.view(1, layout=WARP_SUM_DST)
        for _it in T.serial(1 if once else iters):
            Tx.warp.sum(dst_view, src_view)
            src[0] = dst[0] * T.float32(FEEDBACK)
        B[bx * 32 + tid] = dst[0]
    # fmt: on
    return warp_sum


def hand_warp_sum_source(once: bool = False) -> str:
    """The same program by hand: 8 values in 4 accumulators (x[j] + x[j + 4]), folded
    left, then a 5-step ``__shfl_xor_sync`` butterfly: our plan's summation order."""
    trips = "1" if once else "iters"
    return f"""
extern "C" __global__ void __launch_bounds__(32) warp_sum(const float* __restrict__ A, float* __restrict__ B, int iters) {{
  const int t = blockIdx.x * 32 + threadIdx.x;
  float r[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) r[i] = A[t * 8 + i];
  float v = 0.0f;
  for (int it = 0; it < {trips}; ++it) {{
    float a0 = r[0] + r[4], a1 = r[1] + r[5], a2 = r[2] + r[6], a3 = r[3] + r[7];
    v = ((a0 + a1) + a2) + a3;
#pragma unroll
    for (int m = 1; m < 32; m <<= 1) v = v + __shfl_xor_sync(0xffffffffu, v, m);
    r[0] = v * {FEEDBACK!r}f;
  }}
  B[t] = v;
}}
"""


def warp_sum_model(a: np.ndarray, iters: int) -> np.ndarray:
    """Every lane's total after ``iters`` iterations, in float32 and the summation order
    of both kernels (numpy rounds each add as the GPU does). The xor butterfly leaves in
    every lane the pairwise tree sum of the 32 lanes' partials, in lane order."""
    r = a.reshape(-1, 32, 8).astype(np.float32)
    a1, a2, a3 = (r[..., j] + r[..., j + 4] for j in (1, 2, 3))  # the loop leaves them
    r0, r4 = r[..., 0], r[..., 4]
    v = np.zeros(r.shape[0], np.float32)
    for _ in range(iters):
        lanes = (((r0 + r4) + a1) + a2) + a3
        for _ in range(5):
            lanes = lanes[:, 0::2] + lanes[:, 1::2]
        v = lanes[:, 0]
        r0 = np.broadcast_to((v * np.float32(FEEDBACK))[:, None], r4.shape)
    return np.repeat(v, 32)


def warp_sum_sass_counts(ctas: int = 132 * 32) -> dict[str, dict[str, int]]:
    """SASS opcodes of one reduction (no loop): ours (for ``ctas`` CTAs: the grid is a
    constant in our kernel) and the hand-written kernel."""
    hand = toolchain.sass(toolchain.nvrtc_compile(hand_warp_sum_source(once=True), "sm_90a"))
    return {
        "ours": sass_counts(warp_sum_loop(ctas, once=True), STRICT),
        "hand-written": dict(toolchain.opcodes(hand)),
    }


def _sass_columns(ops: dict[str, int]) -> dict:
    fadd, shfl, nop = count(ops, "FADD"), count(ops, "SHFL"), count(ops, "NOP")
    total = sum(ops.values()) - nop
    return {"FADD": fadd, "SHFL": shfl, "other": total - fadd - shfl, "total (no NOP)": total}


def part_warp_sum_sass(args) -> list[dict]:
    counts = warp_sum_sass_counts()
    rows = [{"kernel": name, **_sass_columns(ops)} for name, ops in counts.items()]
    same = all(rows[0][k] == rows[1][k] for k in ("FADD", "SHFL"))
    rows[0]["FADD, SHFL as hand-written"] = "yes" if same else "no"
    return rows


def _hand_warp_sum(gpu, a: np.ndarray, want: np.ndarray, ctas: int, iters: int):
    cp = gpu.cupy
    kernel = cp.RawKernel(hand_warp_sum_source(), "warp_sum", options=("-std=c++17",))
    args = (cp.asarray(a), cp.asarray(runtime.poison_like(want)), np.int32(iters))
    kernel((ctas,), (32,), args)
    cp.cuda.Device().synchronize()
    if not np.array_equal(runtime.bits(args[1].get()), runtime.bits(want)):
        raise RuntimeError("warp_sum: the hand-written kernel computed a wrong result")
    return lambda: kernel((ctas,), (32,), args)


def _ours_warp_sum(a: np.ndarray, want: np.ndarray, ctas: int, iters: int):
    import tvm

    func = warp_sum_loop(ctas)
    fn = runtime.build(func, runtime.gpu_arch(), STRICT)[runtime.entry_name(func)]
    dev = tvm.cuda(0)
    tensors = [tvm.runtime.tensor(v, device=dev) for v in (a, runtime.poison_like(want))]
    fn(*tensors, iters)
    dev.sync()
    if not np.array_equal(runtime.bits(tensors[1].numpy()), runtime.bits(want)):
        raise RuntimeError("warp_sum: ours computed a wrong result")
    return lambda: fn(*tensors, iters)


def part_warp_sum(gpu, args) -> list[dict]:
    ctas = gpu.sms * 32  # one warp each: 32 resident warps per SM
    iters = args.iters * 4
    a = runtime.random_array((ctas * 32, 8), "float32", np.random.default_rng(13))
    want = warp_sum_model(a, iters)
    fns = {
        "ours": _ours_warp_sum(a, want, ctas, iters),
        "hand-written": _hand_warp_sum(gpu, a, want, ctas, iters),
    }
    ms = gpu.time(fns)
    counts = warp_sum_sass_counts(ctas)
    rows = []
    for name, t in ms.items():
        rows.append(
            {
                "kernel": name,
                "ns/iteration": t * 1e6 / iters,
                "warp sums/clk/SM": ctas * iters / (t * 1e-3) / gpu.clock_hz / gpu.sms,
                "time / hand-written": t / ms["hand-written"],
                **_sass_columns(counts[name]),
            }
        )
    return rows
