"""The whole performance suite in one run: ours vs TVM's built-in vs the hardware reference.

    source .devkit/setup.sh && python3 bench/run.py            # on the GPU machine
    python3 bench/run.py --only compile,sass                    # the parts that need no GPU

Every program is built with our pipeline (``"tirx_cuda_dispatch"``) and TVM's built-in one
(``"tirx"``), both results are checked against numpy (random data, poisoned outputs), then
the contenders are timed interleaved (CUDA events after warm-up, median of repetitions).
Parts:

1. ``stream``: global -> shared -> global streaming copy vs a device-to-device copy
   (``copy_stream.py``); ``masked``: odd tiles; ``paths``: global -> global and
   shared -> shared copies, where the built-in has only its scalar copy.
2. ``reg``: copy -> reg, shared -> registers -> shared in a loop (barriers between copies),
   shared bytes per clock per SM against the 128 B/clk/SM peak; hand-written kernels for the
   plain order, the address-only rotation and the two ways of paying for a rotation.
3. ``ldst``: copy -> ldstmatrix on the m16n8k16 A fragment, row-major and swizzled, vs our
   copy -> reg on the same fragment, the built-in, and a hand-written ldmatrix/stmatrix loop.
4. ``eltwise``: elementwise -> reg, time per element on a register-resident tile.
5. ``sass`` and ``compile``: SASS instructions per element against hand-written CUDA
   (nvdisasm), and our LowerTIRx and NVRTC times against the built-in pipeline's.
6. ``rmsnorm`` and ``softmax`` (``norms.py``): examples/rmsnorm.py and examples/softmax.py
   in a few (rows, steps) shapes vs PyTorch eager, a plain Triton kernel and a device copy
   of the same bytes (checked against a torch reference in higher precision first).
7. ``cta_sum``, ``warp_sum`` and ``warp_sum_sass`` (``norms.py``): ``Tx.cta.sum`` over a
   resident shared tile in a loop against 128 B/clk/SM, beside hand-written CUDA of the
   same schedule and of the loads alone; ``Tx.warp.sum`` of 8 float32 per
   lane against hand-written CUDA, timed in a loop and (no GPU needed) its SASS.
8. ``mma_limit`` and ``gemm`` (``gemm.py``): the mma.sync m16n8k16 rate of this GPU from a
   hand-written loop of mma in registers; examples/gemm.py (C = relu(A B + bias), float16,
   2-4 cp.async stages) with the strict pipeline and the built-in one vs torch (cuBLAS)
   and that rate, every result checked against a float64 product first. ``gemm_bounds``
   (``gemm_bounds.py``): the L2 -> shared fill rate of this GPU from a hand-written cp.async
   loop, and examples/gemm.py with only its loads or only its math, to say which bounds it.
   ``gemm_sustained``: the same kernels, torch.matmul and the limit loop each run for
   seconds, with the SM clock and power nvidia-smi reads meanwhile (the power limit).
   ``gemm_hand`` (``gemm_hand.py``): examples/gemm.py against its design written by hand
   in CUDA. ``gemm_designs`` (``gemm_designs.py``): hand-written kernels of the same tiles
   with TMA loads and/or wgmma math, to say which design reaches the goal. ``gemm_ws``
   (``gemm_ws.py``): the warp-specialized persistent GEMM against cuBLAS. ``attention``
   (``attention.py``): examples/attention.py against torch's SDPA (cuDNN and flash).
9. ``cp_async_stream`` (``gemm.py``): global -> shared -> global through
   ``copy_async(dispatch="ldgsts")``, ours vs the built-in vs our synchronous copy, vs a
   device copy, on even and odd tiles.
10. ``cost`` (``cost_model.py``): the cost model of ``explain --cost`` against the GPU:
   predicted over measured time for the copies, RMSNorm, softmax and both GEMMs, and for
   an RMSNorm and a softmax written the plain way (rows staged in shared memory).

The table is printed last and written into docs/performance.md between the
``bench/run.py`` markers, with the date, GPU, driver and clocks (with ``--only``, only the
sections of the parts run are replaced there; ``--only`` names unknown parts an error).
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench"))

import attention  # noqa: E402
import cost_model  # noqa: E402
import gemm_bounds  # noqa: E402
import gemm_designs  # noqa: E402
import gemm_hand  # noqa: E402
import gemm_ws  # noqa: E402
import loops  # noqa: E402
import norms  # noqa: E402
import numpy as np  # noqa: E402
import tvm  # noqa: E402
from tvm.tirx.layout import Axis, S, TileLayout  # noqa: E402

import gemm  # noqa: E402
import tirx_cuda_dispatch as tcd  # noqa: E402
from tirx_cuda_dispatch import runtime, toolchain  # noqa: E402
from tirx_cuda_dispatch.lowering import LowerTIRx  # noqa: E402

OURS, BUILTIN = "tirx_cuda_dispatch", "tirx"
PEAK_SHARED = 128.0  # bytes per clock per SM
MARK_BEGIN = "<!-- bench/run.py: begin -->"
MARK_END = "<!-- bench/run.py: end -->"
A_FRAGMENT = TileLayout(S[(2, 8, 2, 4, 2) : (2, 4 @ Axis.laneid, 4, 1 @ Axis.laneid, 1)])


# -- GPU helpers ------------------------------------------------------------------------------
class Gpu:
    """The device, its SM count and its measured SM clock; timing of launches."""

    def __init__(self) -> None:
        import cupy
        import torch

        self.cupy, self.torch = cupy, torch
        props = torch.cuda.get_device_properties(0)
        self.sms = props.multi_processor_count
        self.name = props.name
        self.clock_hz = self.measure_clock()

    def measure_clock(self) -> float:
        """SM clock from a kernel that spins ``cycles`` clocks, timed with events."""
        cp = self.cupy
        spin = cp.RawKernel(loops.CLOCK_KERNEL, "spin")
        out = cp.zeros(1, dtype=cp.int64)
        rates = []
        for _ in range(5):
            cycles = 200_000_000
            start, end = cp.cuda.Event(), cp.cuda.Event()
            start.record()
            spin((1,), (1,), (np.int64(cycles), out))
            end.record()
            end.synchronize()
            rates.append(int(out.get()[0]) / (cp.cuda.get_elapsed_time(start, end) * 1e-3))
        return statistics.median(rates)

    def time(self, fns: dict, batch: int = 5, reps: int = 15) -> dict[str, float]:
        """Median milliseconds per call of each function, interleaved repetition by
        repetition (copy_stream's timer: CUDA events after warm-up)."""
        import copy_stream

        times = copy_stream.time_interleaved(fns, batch, reps)
        return {k: statistics.median(v) for k, v in times.items()}

    def per_clock_per_sm(self, nbytes: float, ms: float) -> float:
        return nbytes / (ms * 1e-3) / self.clock_hz / self.sms


def _launcher(
    func, pipeline: str, arrays: list[np.ndarray], expected: np.ndarray, what: str, iters: int
):
    print(f"  build {what} ({pipeline})", file=sys.stderr, flush=True)
    """Build ``func`` with ``pipeline``, run it once on ``arrays`` (the last is poisoned
    output), require the output to equal ``expected`` bit for bit, return a timed launch."""
    exe = runtime.build(func, runtime.gpu_arch(), pipeline)
    kernel = exe[runtime.entry_name(func)]
    dev = tvm.cuda(0)
    tensors = [tvm.runtime.tensor(a, device=dev) for a in arrays]
    kernel(*tensors, iters)
    dev.sync()
    got = tensors[-1].numpy()
    if not np.array_equal(runtime.bits(got), runtime.bits(expected)):
        raise RuntimeError(f"{what} ({pipeline}) computed a wrong result")
    return lambda: kernel(*tensors, iters)


def _cupy_launcher(
    gpu: Gpu,
    source: str,
    name: str,
    a: np.ndarray,
    expected: np.ndarray,
    grid: int,
    iters: int,
    what: str,
):
    print(f"  hand-written {what}", file=sys.stderr, flush=True)
    cp = gpu.cupy
    kernel = cp.RawKernel(source, name, options=("-std=c++17",))
    a_dev = cp.asarray(a)
    b_dev = cp.asarray(runtime.poison_like(a))
    args = (a_dev, b_dev, np.int32(iters))
    kernel((grid,), (128,), args)
    cp.cuda.Device().synchronize()
    if not np.array_equal(runtime.bits(b_dev.get()), runtime.bits(expected)):
        raise RuntimeError(f"{what}: hand-written kernel computed a wrong result")
    return lambda: kernel((grid,), (128,), args)


def _sass_counts(func, pipeline: str = OURS) -> dict[str, int]:
    return dict(toolchain.opcodes(toolchain.kernel_sass(func, "sm_90a", pipeline)))


def _count(ops: dict[str, int], *prefixes: str) -> int:
    return sum(v for k, v in ops.items() if k.startswith(prefixes))


# -- 1. streaming copy ------------------------------------------------------------------------
def part_stream(gpu: Gpu, args) -> list[dict]:
    import copy_stream

    rows = []
    for cfg in copy_stream.CONFIGS:
        r = copy_stream.bench_config(
            *cfg, total_bytes=args.stream_mib * 2**20, batch=10, reps=args.reps * 2
        )
        rows.append(
            {
                "config": r["config"],
                "ours GB/s": r["ours_GBps"],
                "built-in GB/s": r["builtin_GBps"],
                "D2D GB/s": r["device_copy_GBps"],
                "ours/D2D": r["ours_vs_copy"],
                "built-in/D2D": r["builtin_vs_copy"],
                "ours/built-in": r["ours_vs_builtin"],
            }
        )
    return rows


# -- 1b. masked copies of odd tiles ------------------------------------------------------------
# (name, dtype, tile rows, tile cols, scope, threads per CTA, the nearest even tile)
MASKED = [
    ("f32 4x6 warp", "float32", 4, 6, "warp", 32, (4, 8)),
    ("f16 48x40 cta256", "float16", 48, 40, "cta", 256, (48, 48)),
    ("f32 30x100 cta128", "float32", 30, 100, "cta", 128, (32, 100)),
    ("bf16 5x70 warp", "bfloat16", 5, 70, "warp", 32, (8, 64)),
]


def part_masked(gpu: Gpu, args) -> list[dict]:
    """Odd tiles streamed global -> shared -> global: ours (masked vector copies) against
    the built-in (its scalar single-thread copy) and a device copy, and against our own
    nearest even tile (what the mask costs)."""
    import copy_stream

    rows = []
    for name, dtype, tm, tn, scope, threads, even in MASKED:
        total = args.stream_mib * 2**20 // 4
        odd = copy_stream.bench_config(
            name, dtype, tm, tn, scope, threads, total_bytes=total, batch=5, reps=args.reps
        )
        ev = copy_stream.bench_config(
            name, dtype, *even, scope, threads, total_bytes=total, batch=5, reps=args.reps
        )
        rows.append(
            {
                "config": name,
                "ours GB/s": odd["ours_GBps"],
                "built-in GB/s": odd["builtin_GBps"],
                "ours/built-in": odd["ours_vs_builtin"],
                "ours/D2D": odd["ours_vs_copy"],
                "even tile": f"{even[0]}x{even[1]}",
                "even ours GB/s": ev["ours_GBps"],
                "odd/even": odd["ours_GBps"] / ev["ours_GBps"],
            }
        )
    return rows


# -- 1c. global -> global and shared -> shared ----------------------------------------------
# (name, dtype, tile rows, tile cols, scope, threads per CTA, path)
PATHS = [
    ("f32 32x256 cta256 g->g", "float32", 32, 256, "cta", 256, "global"),
    ("f16 64x128 wg g->g", "float16", 64, 128, "warpgroup", 128, "global"),
    ("f32 32x256 cta256 g->s->s->g", "float32", 32, 256, "cta", 256, "shared_shared"),
    ("f16 64x128 wg g->s->s->g", "float16", 64, 128, "warpgroup", 128, "shared_shared"),
]


def part_paths(gpu: Gpu, args) -> list[dict]:
    """A tile copied global -> global in one call, and global -> shared -> shared -> global:
    ours against the built-in (its scalar single-thread copy for the global -> global and
    shared -> shared calls) and a device copy, and against our own global -> shared ->
    global program of the same tile."""
    import copy_stream

    rows, through_shared = [], {}
    for name, dtype, tm, tn, scope, threads, path in PATHS:
        total = args.stream_mib * 2**20 // 4
        run = copy_stream.bench_config(
            name, dtype, tm, tn, scope, threads, total, batch=5, reps=args.reps, path=path
        )
        key = (dtype, tm, tn, scope, threads)
        if key not in through_shared:
            through_shared[key] = copy_stream.bench_config(
                name, dtype, tm, tn, scope, threads, total, batch=5, reps=args.reps
            )
        via = through_shared[key]
        rows.append(
            {
                "config": name,
                "ours GB/s": run["ours_GBps"],
                "built-in GB/s": run["builtin_GBps"],
                "ours/built-in": run["ours_vs_builtin"],
                "ours/D2D": run["ours_vs_copy"],
                "ours g->s->g GB/s": via["ours_GBps"],
                "this/g->s->g": run["ours_GBps"] / via["ours_GBps"],
            }
        )
    return rows


# -- 2. copy -> reg loop ------------------------------------------------------------------------
REG_LAYOUTS = {
    # name: (register layout, tile shape)
    **{f"row per lane, K={k}": (loops.row_per_lane(k), (32, k)) for k in (4, 8, 16, 32)},
    "column per lane (8x32)": (TileLayout(S[(8, 32) : (1, 1 @ Axis.laneid)]), (8, 32)),
    "two rows per lane (64x8)": (TileLayout(S[(2, 32, 8) : (8, 1 @ Axis.laneid, 1)]), (64, 8)),
    "two rows per lane (64x16)": (TileLayout(S[(2, 32, 16) : (16, 1 @ Axis.laneid, 1)]), (64, 16)),
}


def _reg_plan_facts(func) -> dict:
    for r in tcd.explain(func, "sm_90a"):
        if r.variant == "reg" and r.plan.get("direction") == "shared->local":
            return r.plan
    return {}


def part_reg(gpu: Gpu, args) -> list[dict]:
    rng = np.random.default_rng(7)
    ctas = gpu.sms * 16  # 4 warps each: up to 64 warps per SM
    rows = []
    for name, (layout, shape) in REG_LAYOUTS.items():
        for add_one in (False, True):
            iters = args.iters
            func = loops.shared_loop(layout, shape, "float32", ctas, add_one=add_one)
            a = runtime.random_array((ctas * loops.WARPS * shape[0], shape[1]), "float32", rng)
            expected = a.copy()
            if add_one:
                for _ in range(iters):
                    expected = expected + np.float32(1)
            arrays = [a, runtime.poison_like(a)]
            fns = {p: _launcher(func, p, arrays, expected, name, iters) for p in (OURS, BUILTIN)}
            ms = gpu.time(fns)
            nbytes = 2 * ctas * loops.WARPS * iters * a.itemsize * shape[0] * shape[1]
            ours, builtin = (gpu.per_clock_per_sm(nbytes, ms[p]) for p in (OURS, BUILTIN))
            facts = _reg_plan_facts(func)
            ops = _sass_counts(func)
            rows.append(
                {
                    "program": name + (" (+1 between)" if add_one else ""),
                    "order": facts.get("round_order", "?"),
                    "ways": "/".join(str(w) for w in facts.get("conflict_ways", [])[:1])
                    + f" (plain {max(facts.get('plain_conflict_ways', facts.get('conflict_ways', [0])))})",
                    "SEL": _count(ops, "SEL"),
                    "LDL/STL": _count(ops, "LDL", "STL"),
                    "ours B/clk/SM": ours,
                    "built-in B/clk/SM": builtin,
                    "ours/peak": ours / PEAK_SHARED,
                    "ours/built-in": ours / builtin,
                }
            )
    return rows


def part_reg_handwritten(gpu: Gpu, args) -> list[dict]:
    """The hand-written references: which way of paying for the rotation wins per K."""
    rng = np.random.default_rng(8)
    ctas = gpu.sms * 16  # 4 warps each: up to 64 warps per SM
    rows = []
    for k in (8, 16, 32):
        chunks = k // 4
        group = max(1, 128 // (4 * k))
        period = min(chunks, 32 // group, 8)
        a = runtime.random_array((ctas * loops.WARPS * 32, k), "float32", rng)
        fns = {}
        for mode in ("plain", "rotate_address", "rotate_select", "rotate_branch"):
            src = loops.reg_loop_source(k, mode, group, period)
            fns[mode] = _cupy_launcher(
                gpu, src, "reg_loop", a, a, ctas, args.iters, f"K={k} {mode}"
            )
        ms = gpu.time(fns)
        nbytes = 2 * ctas * loops.WARPS * args.iters * a.itemsize * 32 * k
        row = {"K (float32)": k, "chunks": chunks}
        for mode in fns:
            row[f"{mode} B/clk/SM"] = gpu.per_clock_per_sm(nbytes, ms[mode])
        rows.append(row)
    return rows


# -- 3. ldstmatrix ----------------------------------------------------------------------------
def _swizzle_32b():
    from tvm.backend.cuda.tile_primitive.tma_utils import SwizzleMode, mma_shared_layout

    return mma_shared_layout("float16", SwizzleMode.SWIZZLE_32B_ATOM, (loops.WARPS * 16, 16))


def part_ldst(gpu: Gpu, args) -> list[dict]:
    rng = np.random.default_rng(9)
    ctas = gpu.sms * 16  # 4 warps each: up to 64 warps per SM
    iters = args.iters * 4
    rows = []
    a = runtime.random_array((ctas * loops.WARPS * 16, 16), "float16", rng)
    nbytes = 2 * ctas * loops.WARPS * iters * 512
    for sname, s_layout in (("row-major", None), ("32B swizzle", _swizzle_32b())):
        auto = loops.shared_loop(A_FRAGMENT, (16, 16), "float16", ctas, s_layout)
        as_reg = loops.shared_loop(A_FRAGMENT, (16, 16), "float16", ctas, s_layout, dispatch="reg")
        arrays = [a, runtime.poison_like(a)]
        fns = {
            "ours": _launcher(auto, OURS, arrays, a, sname, iters),
            "ours reg": _launcher(as_reg, OURS, arrays, a, sname + " reg", iters),
            "built-in": _launcher(auto, BUILTIN, arrays, a, sname, iters),
        }
        ms = gpu.time(fns)
        chosen = [
            r
            for r in tcd.explain(auto, "sm_90a")
            if r.plan.get("direction") in ("ld", "shared->local")
        ]
        per = {k: gpu.per_clock_per_sm(nbytes, v) for k, v in ms.items()}
        rows.append(
            {
                "shared layout": sname,
                "ours chooses": chosen[0].variant if chosen else "?",
                "conflict": chosen[0].plan.get("bank_conflict", chosen[0].plan.get("conflict_ways"))
                if chosen
                else "?",
                "ours B/clk/SM": per["ours"],
                "ours as copy->reg": per["ours reg"],
                "built-in": per["built-in"],
                "ours/peak": per["ours"] / PEAK_SHARED,
                "ours/built-in": per["ours"] / per["built-in"],
            }
        )
    a32 = a.view(np.uint32).reshape(ctas * loops.WARPS * 128)
    hand = _cupy_launcher(gpu, loops.LDSTMATRIX_SOURCE, "ldst_loop", a32, a32, ctas, iters, "ldst")
    rows.append(
        {
            "shared layout": "hand-written x4, conflict-free",
            "ours B/clk/SM": gpu.per_clock_per_sm(nbytes, gpu.time({"h": hand})["h"]),
        }
    )
    return rows


# -- 4. elementwise ----------------------------------------------------------------------------
ELTWISE = [
    ("add", "float32"),
    ("add", "float16"),
    ("mul", "bfloat16"),
    ("fma", "float32"),
    ("fma", "float16"),
    ("maximum", "float16"),
]


def _numpy_op(op: str, x: np.ndarray) -> np.ndarray:
    if op == "add":
        return x + x
    if op == "mul":
        return x * x
    if op == "maximum":
        return np.maximum(x, x)
    raise KeyError(op)


def part_eltwise(gpu: Gpu, args) -> list[dict]:
    """Time per element of ``R = op(R, Q)`` applied in a loop to a register-resident tile.
    Both builds must agree bit for bit (after thousands of applications the values are
    mostly inf/0, so numpy is the reference for one application, in the tests)."""
    rng = np.random.default_rng(10)
    ctas = gpu.sms * 32  # one warp each
    rows = []
    k = 32
    iters = args.iters * 4
    for op, dtype in ELTWISE:
        func = loops.elementwise_loop(op, loops.row_per_lane(k), (32, k), dtype, ctas)
        a = runtime.random_array((ctas * 32, k), dtype, rng)
        q = runtime.random_array((ctas * 32, k), dtype, rng)
        exe = runtime.build(func, None, OURS)
        dev = tvm.cuda(0)
        tensors = [tvm.runtime.tensor(x, device=dev) for x in (a, q)]
        exe[runtime.entry_name(func)](*tensors, iters)
        ours_out = tensors[-1].numpy()
        fns = {
            p: _launcher(func, p, [a, q], ours_out, f"{op} {dtype}", iters) for p in (OURS, BUILTIN)
        }
        ms = gpu.time(fns)
        elems = ctas * 32 * k * iters
        rows.append(
            {
                "op": f"{op} {dtype}",
                "ours ps/element": ms[OURS] * 1e9 / elems,
                "built-in ps/element": ms[BUILTIN] * 1e9 / elems,
                "ours/built-in time": ms[OURS] / ms[BUILTIN],
            }
        )
    return rows


# -- 4b. elementwise on shared memory ---------------------------------------------------------
SMEM_ELTWISE = [("add", "float32"), ("add", "float16"), ("mul", "bfloat16"), ("maximum", "float16")]


def part_smem_eltwise(gpu: Gpu, args) -> list[dict]:
    """``S = op(S, Q)`` on a 64x64 shared tile per warpgroup, in a loop with a barrier
    between applications: ours (elementwise -> smem) against TVM's built-in 'smem' variant,
    time per element and SASS instructions per element of one application."""
    rng = np.random.default_rng(11)
    ctas = gpu.sms * 4
    shape = (64, 64)
    iters = args.iters
    rows = []
    for op, dtype in SMEM_ELTWISE:
        func = loops.smem_elementwise_loop(op, shape, dtype, ctas)
        a = runtime.random_array((ctas * 64, 64), dtype, rng)
        q = runtime.random_array((ctas * 64, 64), dtype, rng)
        exe = runtime.build(func, None, OURS)
        dev = tvm.cuda(0)
        tensors = [tvm.runtime.tensor(x, device=dev) for x in (a, q)]
        exe[runtime.entry_name(func)](*tensors, iters)
        ours_out = tensors[-1].numpy()
        fns = {
            p: _launcher(func, p, [a, q], ours_out, f"smem {op} {dtype}", iters)
            for p in (OURS, BUILTIN)
        }
        ms = gpu.time(fns)
        elems = ctas * 64 * 64 * iters
        per_thread = 64 * 64 / 128
        one = loops.smem_elementwise_loop(op, shape, dtype, ctas, once=True)
        sass = {p: _sass_counts(one, p) for p in (OURS, BUILTIN)}
        rows.append(
            {
                "op": f"{op} {dtype}",
                "ours ps/element": ms[OURS] * 1e9 / elems,
                "built-in ps/element": ms[BUILTIN] * 1e9 / elems,
                "ours/built-in time": ms[OURS] / ms[BUILTIN],
                "ours SASS/elem": sum(sass[OURS].values()) / per_thread,
                "built-in SASS/elem": sum(sass[BUILTIN].values()) / per_thread,
            }
        )
    return rows


# -- 5a. SASS per element against hand-written CUDA ----------------------------------------
HAND_ELTWISE = {
    ("add", "float32"): ("float", "r[i] + q[i]"),
    ("add", "float16"): ("__half", "__hadd(r[i], q[i])"),
    ("mul", "bfloat16"): ("__nv_bfloat16", "__hmul(r[i], q[i])"),
    ("fma", "float32"): ("float", "fmaf(r[i], q[i], q[i])"),
    ("fma", "float16"): ("__half", "__hfma(r[i], q[i], q[i])"),
    ("maximum", "float16"): ("__half", "__hmax(r[i], q[i])"),
}
HAND_PAIRED = {
    ("add", "float16"): ("__half2", "__hadd2(r[i], q[i])"),
    ("mul", "bfloat16"): ("__nv_bfloat162", "__hmul2(r[i], q[i])"),
    ("fma", "float16"): ("__half2", "__hfma2(r[i], q[i], q[i])"),
    ("maximum", "float16"): ("__half2", "__hmax2(r[i], q[i])"),
}


def hand_eltwise_source(op: str, dtype: str, k: int, iters: int, paired: bool) -> str:
    ctype, expr = (HAND_PAIRED if paired else HAND_ELTWISE)[(op, dtype)]
    n = k // 2 if paired else k
    return f"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>
extern "C" __global__ void __launch_bounds__(32) loop({ctype}* A, {ctype}* B) {{
  {ctype} r[{n}], q[{n}];
  const uint4* a = (const uint4*)(A + (blockIdx.x * 32 + threadIdx.x) * {n});
  const uint4* b0 = (const uint4*)(B + (blockIdx.x * 32 + threadIdx.x) * {n});
#pragma unroll
  for (int v = 0; v < (int)sizeof(r) / 16; ++v) {{ ((uint4*)r)[v] = a[v]; ((uint4*)q)[v] = b0[v]; }}
  for (int it = 0; it < {iters}; ++it) {{
#pragma unroll
    for (int i = 0; i < {n}; ++i) r[i] = {expr};
  }}
  uint4* b = (uint4*)(B + (blockIdx.x * 32 + threadIdx.x) * {n});
#pragma unroll
  for (int v = 0; v < (int)sizeof(r) / 16; ++v) b[v] = ((uint4*)r)[v];
}}
"""


ARITH = (
    "FADD",
    "FMUL",
    "FFMA",
    "HADD2",
    "HMUL2",
    "HFMA2",
    "FMNMX",
    "HMNMX2",
    "MUFU",
    "F2F",
    "F2FP",
    "PRMT",
    "FSEL",
    "FSETP",
    "HSETP2",
)


def part_sass(args) -> list[dict]:
    """Static SASS of one application of ``R = op(R, Q)`` to a 32 x 32 register tile per
    warp: the op's arithmetic instructions per element, ours, built-in and hand-written
    CUDA (the same loads and stores around it)."""
    rows = []
    k = 32
    for op, dtype in ELTWISE:
        func = loops.elementwise_loop(op, loops.row_per_lane(k), (32, k), dtype, 1, once=True)
        ours = _sass_counts(func, OURS)
        builtin = _sass_counts(func, BUILTIN)
        paired = (op, dtype) in HAND_PAIRED
        hand = dict(
            toolchain.opcodes(
                toolchain.sass(
                    toolchain.nvrtc_compile(hand_eltwise_source(op, dtype, k, 1, paired))
                )
            )
        )
        per = lambda ops: _count(ops, *ARITH) / k  # noqa: E731
        rows.append(
            {
                "op": f"{op} {dtype}",
                "ours arith/elem": per(ours),
                "built-in arith/elem": per(builtin),
                "hand-written arith/elem": per(hand),
                "ours total": sum(ours.values()),
                "built-in total": sum(builtin.values()),
                "hand-written total": sum(hand.values()),
                "ours arith": " ".join(
                    f"{o}x{n}" for o, n in sorted(ours.items()) if o.startswith(ARITH)
                ),
            }
        )
    return rows


# -- 5b. compile cost -------------------------------------------------------------------------
def _compile_programs():
    from tirx_cuda_dispatch import demos

    yield "seed copy->reg (5 calls)", demos.reg_roundtrip(loops.row_per_lane(8), (32, 8)), 5
    yield (
        "copy->reg loop K=32 (4 calls)",
        loops.shared_loop(loops.row_per_lane(32), (32, 32), "float32", 132),
        4,
    )
    yield "ldstmatrix loop (4 calls)", loops.shared_loop(A_FRAGMENT, (16, 16), "float16", 132), 4
    yield (
        "streaming copy cta256 (2 calls)",
        demos.gmem_smem_roundtrip("float32", (32, 256), "cta", 16, 256),
        2,
    )
    yield (
        "elementwise fma f16 (6 calls)",
        demos.elementwise_roundtrip("fma", loops.row_per_lane(16), (32, 16), "float16"),
        6,
    )


def _best_of(fn, reps: int) -> float:
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def part_compile(args) -> list[dict]:
    rows = []
    target = tvm.target.Target({"kind": "cuda", "arch": "sm_90a"})
    for name, func, calls in _compile_programs():
        with target:
            mod = tvm.tirx.transform.BindTarget(target.with_host("c"))(tvm.IRModule({"main": func}))
            ours_pass, builtin_pass = LowerTIRx(), tvm.tirx.transform.LowerTIRx()
            ours_pass(mod)  # warm: imports, first-use caches
            builtin_pass(mod)
            t_ours = _best_of(lambda p=ours_pass, m=mod: p(m), args.compile_reps)
            t_builtin = _best_of(lambda p=builtin_pass, m=mod: p(m), args.compile_reps)
        sources = {p: toolchain.cuda_source(func, "sm_90a", p) for p in (OURS, BUILTIN)}
        nvrtc = {p: float("inf") for p in sources}
        for _ in range(args.compile_reps):  # interleaved, best of N: NVRTC times wander
            for p, src in sources.items():
                one = _best_of(lambda s=src: toolchain.nvrtc_compile(s, "sm_90a"), 1)
                nvrtc[p] = min(nvrtc[p], one)
        rows.append(
            {
                "program": name,
                "ours LowerTIRx ms/call": t_ours * 1e3 / calls,
                "built-in ms/call": t_builtin * 1e3 / calls,
                "LowerTIRx ratio": t_ours / t_builtin,
                "ours NVRTC ms": nvrtc[OURS] * 1e3,
                "built-in NVRTC ms": nvrtc[BUILTIN] * 1e3,
                "NVRTC ratio": nvrtc[OURS] / nvrtc[BUILTIN],
            }
        )
    return rows


# -- report ----------------------------------------------------------------------------------
def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.3f}" if abs(v) < 10 else f"{v:.1f}"
    return str(v)


def markdown_table(rows: list[dict]) -> str:
    if not rows:
        return "(no rows)"
    keys = list(dict.fromkeys(k for r in rows for k in r))
    lines = ["| " + " | ".join(keys) + " |", "| " + " | ".join("---" for _ in keys) + " |"]
    for r in rows:
        lines.append("| " + " | ".join(_fmt(r.get(k, "")) for k in keys) + " |")
    return "\n".join(lines)


TITLES = {
    "stream": "1. Streaming copy global -> shared -> global (GB/s, bytes read + written)",
    "masked": "1b. Odd tiles streamed global -> shared -> global: masked vector copies (ours) vs the built-in's scalar copy, and vs our nearest even tile",
    "paths": "1c. Global -> global and shared -> shared copies (ours) vs the built-in's scalar copy, and vs our global -> shared -> global program",
    "reg": "2. copy -> reg loop, shared -> registers -> shared (float32; 4 warps per CTA, each its own tile; warp barriers between copies)",
    "reg_hand": "2b. Hand-written references for the copy -> reg loop (B/clk/SM)",
    "ldst": "3. copy -> ldstmatrix loop, m16n8k16 A fragment, 16x16 float16 per warp (B/clk/SM)",
    "eltwise": "4. elementwise -> reg, 32x32 register tile per warp, op applied in a loop",
    "smem_eltwise": "4b. elementwise -> smem, 64x64 shared tile per warpgroup, op applied in a loop (SASS: the whole kernel applying the op once, over the 32 elements a thread handles)",
    "sass": "5a. SASS arithmetic instructions per element (nvdisasm, sm_90a)",
    "compile": "5b. Compile cost, ours vs built-in on the same program (best of N, this machine)",
    "rmsnorm": "6a. RMSNorm, bfloat16 [8192, 4096], float32 statistics: ours (tile primitives, rows x steps per CTA) vs torch eager, Triton and a device copy (GB/s: x read + y written)",
    "softmax": "6b. Row softmax, float16 [8192, 4096], float32 compute: ours (tile primitives, rows x steps per CTA) vs torch eager, Triton and a device copy (GB/s: x read + y written)",
    "cta_sum": "7a. Tx.cta.sum over a resident float32 shared tile, in a loop with a barrier between (shared bytes read per clock per SM, peak 128)",
    "warp_sum": "7b. Tx.warp.sum of 8 float32 per lane into a total in every lane, in a loop: ours vs hand-written CUDA (SASS of one reduction)",
    "warp_sum_sass": "7c. Tx.warp.sum of 8 float32 per lane, SASS of one reduction: ours vs hand-written CUDA (nvdisasm, sm_90a)",
    "mma_limit": "8a. mma.sync.aligned.m16n8k16 (float32 accumulators) rate of this GPU: hand-written loop of independent mma per warp in registers, no memory traffic; the best row of each dtype is the limit 8b divides by",
    "gemm": '8b. GEMM C = relu(A B + bias), float16, float32 accumulation: examples/gemm.py (cp.async + mma.sync) and examples/gemm_hopper.py (TMA + wgmma, rows "hopper") with the strict pipeline (every call ours) vs the same TVMScript under the built-in pipeline, torch (cuBLAS) and the mma.sync limit (speeds: above 1, this row is faster)',
    "gemm_bounds": "8c. What bounds the GEMM: the L2 -> shared fill rate (hand-written cp.async loop over an L2-resident buffer, checked) and examples/gemm.py (plain, 4096^3, strict) whole, with only its loads into shared memory, and with only its fragment loads and mma",
    "gemm_sustained": "8d. The GEMM run for seconds: examples/gemm.py (plain, 4096^3, strict, 128x256x64 s3) whole and its two halves, torch.matmul, the mma.sync limit loop, and examples/gemm_hopper_ws.py (plain, float16 and bfloat16) with torch.matmul in bfloat16, each launched back to back for 4 s (twice), with the SM clock, power and the reasons the clock is held down (nvidia-smi, every 50 ms)",
    "gemm_hand": "8e. examples/gemm.py (128x256x64 s3, plain, 4096^3, strict) against the same design written by hand in CUDA (cp.async ring, swizzle, ldmatrix, mma.sync), in two orders of its main loop",
    "gemm_designs": "8f. Which design reaches 0.85 of the mma.sync limit: examples/gemm.py (cp.async + mma.sync) against hand-written CUDA kernels of its tiles and shared layouts with the loads (cp.async or TMA) and the math (mma.sync or wgmma) changed, and torch (4096^3, float16, plain)",
    "gemm_ws": "8g. The warp-specialized persistent GEMM (examples/gemm_hopper_ws.py: a TMA producer warpgroup, two wgmma consumer warpgroups, setmaxnreg, chunked TMA-store epilogue, clusters of two with B multicast where C is 16+ tiles each way (ws c1: the same unpaired); strict) at issue 32's shapes, float16 and bfloat16, C = A B and C = relu(A B + bias), against torch (cuBLAS) and examples/gemm_hopper.py (speeds: above 1, ours is faster)",
    "attention": "8h. FlashAttention forward (examples/attention.py, strict: ws = a TMA producer warpgroup and two wgmma consumer warpgroups (three at head dim 64) in ping-pong with the intra-warpgroup overlap, 128-row key tiles, O out by TMA (through a buffer of its own on the persistent grids), a persistent grid to 4096 rows (causal: query blocks paired; at 1024 x 64 balanced: two CTAs a head, blocks of 192 and 128 rows), causal grids of one CTA a block launched in sections of heads whose K and V fit 16 MiB, their blocks heaviest first, each consumer computing only the key tiles its rows need, the row sums of P kept per lane to the end of a block, the lagged reference max (a tile's exponentials against the rows' last reference; where a lane's sum of P passes 2^8, each warp rebases its own rows, or at head dim 128 causal and 256 a warpgroup vote has the tile computed again), programmatic dependent launch, four ring stages at head dim 64, a ring each for K and V at 1024 x 64, each tensor map prefetched at the kernel's start; at every ablation shape also without the lagged max (no lag: the default before, every tile's row max first); at 1024 x 64 also unbalanced (five 192-row blocks and one of 64 over six CTAs a head); causal at 4096 x 64 and 8192 x 64 also with every consumer computing every key tile of its CTA's (all tiles) and launched head after head (section 1); at 1024 x 128 and 16384 x 64 also with the sums added each key tile; at 4096 x 128 also with one piece taken away or added, and wg = one warpgroup per 64 rows; at 4096 x 64 also with two consumers; at 1024 also with one CTA a block and with O's buffer taken away; at 1024 x 64 and causal 1024 x 128 also without programmatic dependent launch (no pdl); at 4096 x 64 and 16384 x 64 also with three stages; non-causal at 1024 x 64, 4096 x 64, 4096 x 128, 16384 x 64 and causal at 4096 x 64 also with a warpgroup vote each key tile (vote) and, but at 16384 x 64, a check once a block (block check); causal at 1024 x 128 also with each warp's rebase (warp check); causal at 4096 x 64 also two consumers, their blocks paired; head dim 256 float16: ws with 80-row key tiles, two stages, a ring each for K and V (also with 64-row tiles and with one ring), and sm80 with 64 x 64 blocks) and sm80 = examples/attention_sm80.py (cp.async + mma.sync, FlashAttention-2's structure, the row sums of P kept per lane; at 4096 x 64 and 16384 x 64 non-causal also with the sums added each key tile), against torch's scaled_dot_product_attention with the cuDNN and flash (FlashAttention-2) backends, B*H 64, TFLOP/s = 4 B H S^2 D (halved for causal; speeds: above 1, ours is faster)",
    "cp_async_stream": '9. cp.async streaming copy global -> shared -> global, one tile per CTA per step: copy_async(dispatch="ldgsts") ours vs built-in, and our synchronous copy, vs a device copy (GB/s: bytes read + written)',
    "cost": "10. The cost model (explain --cost) against the GPU: predicted over measured time for part 1's copies, part 6's RMSNorm and softmax, part 8b's GEMMs (4096^3, plain), the same RMSNorm and softmax written the plain way (a row staged in shared memory, CTA-scope ops one after another, a barrier between), and beyond issue 34's list the warp-specialized GEMM (part 8g's, 4096^3) and attention (part 8h's ws, 64 x 4096); the model is right within 0.75-1.33",
}
DEFAULT_PARTS = (
    "stream,masked,paths,reg,reg_hand,ldst,eltwise,sass,compile,"
    "rmsnorm,softmax,cta_sum,warp_sum,warp_sum_sass,mma_limit,gemm,gemm_bounds,gemm_sustained,"
    "gemm_hand,gemm_designs,gemm_ws,attention,cp_async_stream,cost"
)
GPU_PARTS = {
    "stream", "masked", "paths", "reg", "reg_hand", "ldst", "eltwise", "smem_eltwise",
    "rmsnorm", "softmax", "cta_sum", "warp_sum", "mma_limit", "gemm", "gemm_bounds",
    "gemm_sustained", "gemm_hand", "gemm_designs", "gemm_ws", "attention", "cp_async_stream",
    "cost",
}  # fmt: skip


def section(key: str, rows: list[dict], note: str | None = None) -> str:
    return "\n\n".join([f"### {TITLES[key]}", *([note] if note else []), markdown_table(rows)])


def report(results: dict, header: str) -> str:
    return "\n\n".join([header, *(section(k, rows) for k, rows in results.items())])


def split_block(block: str) -> tuple[str, dict[str, str]]:
    """The header of a docs block and its sections, by part: its title, or its number
    where the title has changed since (by heading where no part has either)."""
    by_title = {f"### {t}": k for k, t in TITLES.items()}
    by_number = {f"### {t.split(' ')[0]} ": k for k, t in TITLES.items()}  # "### 8h. "
    header: list[str] = []
    sections: dict[str, list[str]] = {}
    key = None
    for line in block.strip("\n").split("\n"):
        if line.startswith("### "):  # a part's section, also under an older title
            number = next((k for n, k in by_number.items() if line.startswith(n)), None)
            key = by_title.get(line.strip(), number or line.strip())
            sections[key] = []
        (header if key is None else sections[key]).append(line)
    return "\n".join(header).strip(), {k: "\n".join(v).strip() for k, v in sections.items()}


def docs_block(results: dict, header: str, old_block: str = "") -> str:
    """The text between the markers. A run of every part the block has replaces it; a run
    of some parts (``--only``) replaces only their sections, each marked with this run's
    line, and keeps the others under the header of the run that measured them."""
    old_header, old = split_block(old_block) if old_block.strip() else ("", {})
    if set(old) <= set(results):
        return report(results, header)
    note = f"Measured separately from the run above. {header}"
    sections = dict(old) | {k: section(k, rows, note) for k, rows in results.items()}
    order = [k for k in TITLES if k in sections] + [k for k in sections if k not in TITLES]
    return "\n\n".join([old_header, *(sections[k] for k in order)])


def write_docs(results: dict, header: str, path: Path) -> None:
    doc = path.read_text() if path.exists() else "# Performance\n"
    if MARK_BEGIN in doc and MARK_END in doc:
        head, rest = doc.split(MARK_BEGIN, 1)
        old, tail = rest.split(MARK_END, 1)
        doc = f"{head}{MARK_BEGIN}\n{docs_block(results, header, old)}\n{MARK_END}{tail}"
    else:
        block = f"{MARK_BEGIN}\n{report(results, header)}\n{MARK_END}"
        doc = doc.rstrip() + "\n\n## Latest run of bench/run.py\n\n" + block + "\n"
    path.write_text(doc)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=DEFAULT_PARTS, help="comma-separated parts")
    parser.add_argument(
        "--iters", type=int, default=1000, help="loop iterations of the loop programs"
    )
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--stream-mib", type=int, default=512)
    parser.add_argument("--compile-reps", type=int, default=7)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--docs", type=Path, default=ROOT / "docs" / "performance.md")
    parser.add_argument("--no-docs", action="store_true")
    args = parser.parse_args()
    parts = args.only.split(",")
    gpu = None
    runners = {
        "stream": lambda: part_stream(gpu, args),
        "masked": lambda: part_masked(gpu, args),
        "paths": lambda: part_paths(gpu, args),
        "reg": lambda: part_reg(gpu, args),
        "reg_hand": lambda: part_reg_handwritten(gpu, args),
        "ldst": lambda: part_ldst(gpu, args),
        "eltwise": lambda: part_eltwise(gpu, args),
        "smem_eltwise": lambda: part_smem_eltwise(gpu, args),
        "sass": lambda: part_sass(args),
        "compile": lambda: part_compile(args),
        "rmsnorm": lambda: norms.part_rmsnorm(gpu, args),
        "softmax": lambda: norms.part_softmax(gpu, args),
        "cta_sum": lambda: norms.part_cta_sum(gpu, args),
        "warp_sum": lambda: norms.part_warp_sum(gpu, args),
        "warp_sum_sass": lambda: norms.part_warp_sum_sass(args),
        "mma_limit": lambda: gemm.part_mma_limit(gpu, args),
        "gemm": lambda: gemm.part_gemm(gpu, args),
        "gemm_bounds": lambda: gemm_bounds.part_gemm_bounds(gpu, args),
        "gemm_sustained": lambda: gemm_bounds.part_gemm_sustained(gpu, args),
        "gemm_hand": lambda: gemm_hand.part_gemm_hand(gpu, args),
        "gemm_designs": lambda: gemm_designs.part_gemm_designs(gpu, args),
        "gemm_ws": lambda: gemm_ws.part_gemm_ws(gpu, args),
        "attention": lambda: attention.part_attention(gpu, args),
        "cp_async_stream": lambda: gemm.part_cp_async_stream(gpu, args),
        "cost": lambda: cost_model.part_cost(gpu, args),
    }
    unknown = [p for p in parts if p not in runners]
    if unknown:
        parser.error(f"unknown part(s) {', '.join(unknown)}; parts: {', '.join(runners)}")
    if GPU_PARTS & set(parts):
        if runtime.gpu_arch() is None:
            print("no CUDA GPU: run with --only sass,compile,warp_sum_sass here")
            return 2
        gpu = Gpu()
    results = {}
    for part in parts:
        t = time.perf_counter()
        try:
            results[part] = runners[part]()
        except Exception:  # noqa: BLE001  # a broken part is reported, the others still run
            traceback.print_exc()
            results[part] = [{"error": traceback.format_exc().strip().splitlines()[-1]}]
        print(f"[{part}: {time.perf_counter() - t:.1f} s]", file=sys.stderr)
    today = datetime.date.today().isoformat()
    if gpu is not None:
        import copy_stream

        facts = copy_stream.gpu_facts()
        header = (
            f"Run {today} on {gpu.name} ({gpu.sms} SMs), driver {facts.get('driver_version')}, "
            f"SM clock measured {gpu.clock_hz / 1e6:.0f} MHz (nvidia-smi: {facts.get('clocks.sm')} "
            f"of max {facts.get('clocks.max.sm')}, memory {facts.get('clocks.mem')}), clocks not locked."
        )
    else:
        header = f"Run {today} without a GPU (static and compile-time parts only)."
    text = report(results, header)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2, default=str))
    if not args.no_docs:
        write_docs(results, header, args.docs)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
