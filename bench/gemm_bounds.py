"""What bounds examples/gemm.py, for bench/run.py (parts 8c ``gemm_bounds`` and 8d
``gemm_sustained``).

Part 8c, two measurements in one run:

- ``fill limit``: how fast the SMs can bring bytes from L2 into shared memory with
  ``cp.async.cg`` (16 bytes a thread), from a minimal hand-written CUDA kernel (CuPy): every
  CTA streams ``chunk``-byte pieces of an L2-resident buffer into a ``stages``-deep ring
  in dynamic shared memory, committing one group a piece, waiting for all but the newest
  ``stages - 2`` and passing a CTA barrier, as the GEMM's main loop does, at 1 and 2 CTAs
  per SM. The run is checked: every thread's last piece must hold the bytes it copied.
- ``ablations``: examples/gemm.py (the plain epilogue, 4096^3, strict pipeline) whole, with
  only its loads into shared memory (``ablate="math"``: no ldmatrix, no mma) and with only
  its fragment loads and mma (``ablate="loads"``: no cp.async), timed interleaved. The
  bytes a CTA brings into shared memory per second and the FLOP a byte feeds say which
  half bounds the whole: if the kernel with only its loads takes nearly the whole
  kernel's time, the fill rate is the limit, and the fill limit times the tile's FLOP per
  byte is the most this tile shape can reach.

Part 8d, ``gemm_sustained``: the timings above are medians of short interleaved batches,
during which the GPU keeps its highest clock. Run for seconds, a GPU at its power limit
lowers its clock. Each contender (examples/gemm.py plain whole and its two ablations, a
bare ``torch.matmul``, the mma.sync limit loop of part 8a's best configuration, and the
warp-specialized GEMM of part 8g (examples/gemm_hopper_ws.py, plain) with torch.matmul in
float16 and bfloat16) runs
back to back for ``SUSTAIN_S`` seconds, twice, while ``nvidia-smi`` samples the SM clock,
the power draw, the temperature and the reasons the clock is held down every 50 ms; the
table gives the sustained rate, the median clock of the window past its first fifth, and
the FLOP each SM did a clock at that clock, also as a ratio to the limit loop's.

Nothing of torch or CuPy is imported at module level.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench"))

import norms  # noqa: E402
import numpy as np  # noqa: E402

import gemm  # noqa: E402
from tirx_cuda_dispatch import runtime  # noqa: E402

FILL_THREADS = 256
FILL_BUFFER_MIB = 24  # read over and over: resident in the H100's / H200's 50 MiB L2
FILL_ITERS = 2000
# (CTAs per SM, bytes a piece, stages): the GEMM's 128x256x64 tile brings 48 KiB a K step
# into 3 stages; 128x128x32 brings 16 KiB into 4, two CTAs a SM.
FILL_CONFIGS = [(1, 48 * 1024, 3), (1, 48 * 1024, 4), (2, 16 * 1024, 4), (2, 32 * 1024, 3)]
ABLATION_SHAPE = (4096, 4096, 4096)
WHOLE, LOADS_ONLY, MATH_ONLY = "whole", "loads only (ablate=math)", "math only (ablate=loads)"


def fill_source(stages: int) -> str:
    """``l2_fill(src, pieces, piece16, iters, out)``: CTA b copies piece ``(b + i grid) %
    pieces`` of ``src`` (``piece16`` 16-byte units each) into ring slot ``i % stages`` for
    ``i < iters``; then each thread writes the first 16 bytes it copied last to ``out``."""
    return f"""
extern "C" __global__ void __launch_bounds__({FILL_THREADS})
l2_fill(const uint4* __restrict__ src, int pieces, int piece16, int iters, uint4* out) {{
  extern __shared__ uint4 ring[];
  for (int i = 0; i < iters; ++i) {{
    const uint4* from = src + (size_t)((blockIdx.x + (size_t)i * gridDim.x) % pieces) * piece16;
    uint4* to = ring + (i % {stages}) * piece16;
    for (int u = threadIdx.x; u < piece16; u += {FILL_THREADS}) {{
      unsigned s = (unsigned)__cvta_generic_to_shared(to + u);
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(s), "l"(from + u));
    }}
    asm volatile("cp.async.commit_group;");
    asm volatile("cp.async.wait_group {stages - 2};" ::: "memory");
    __syncthreads();
  }}
  asm volatile("cp.async.wait_group 0;" ::: "memory");
  __syncthreads();
  out[blockIdx.x * {FILL_THREADS} + threadIdx.x] = ring[((iters - 1) % {stages}) * piece16 + threadIdx.x];
}}
"""


def fill_expected(src: np.ndarray, grid: int, pieces: int, piece16: int, iters: int):
    """What ``out`` must hold: each CTA's last piece's first ``FILL_THREADS`` units."""
    units = src.reshape(-1, 4)
    last = [((b + (iters - 1) * grid) % pieces) * piece16 for b in range(grid)]
    return np.concatenate([units[p : p + FILL_THREADS] for p in last])


def part_gemm_bounds(gpu, args) -> list[dict]:
    rows = []
    for label, measure in (("fill limit", fill_rows), ("ablations", ablation_rows)):
        try:
            rows += measure(gpu, args)
        except Exception as exc:  # noqa: BLE001  # the other half still runs
            traceback.print_exc()
            rows.append({"what": label, "note": gemm.cell(gemm.first_line(exc))})
    return rows


def fill_rows(gpu, args) -> list[dict]:
    cp = gpu.cupy
    rng = np.random.default_rng(5)
    nbytes = FILL_BUFFER_MIB * 2**20
    host = rng.integers(0, 2**32, nbytes // 4, dtype=np.uint32)
    src = cp.asarray(host)
    fns, facts, notes = {}, {}, {}
    for per_sm, piece, stages in FILL_CONFIGS:
        name = f"cp.async.cg 16 B, {per_sm} CTA/SM, {piece // 1024} KiB x {stages} stages"
        grid, piece16 = gpu.sms * per_sm, piece // 16
        pieces = nbytes // piece
        try:
            kernel = cp.RawKernel(fill_source(stages), "l2_fill", options=("-std=c++17",))
            # CuPy shares one function among equal sources: allow the most any may ask
            kernel.max_dynamic_shared_size_bytes = cp.cuda.Device().attributes[
                "MaxSharedMemoryPerBlockOptin"
            ]
            out = cp.zeros((grid * FILL_THREADS, 4), dtype=cp.uint32)
            kargs = (src, np.int32(pieces), np.int32(piece16), np.int32(FILL_ITERS), out)
            kernel((grid,), (FILL_THREADS,), kargs, shared_mem=piece * stages)
            cp.cuda.Device().synchronize()
            want = fill_expected(host, grid, pieces, piece16, FILL_ITERS)
            if not np.array_equal(out.get(), want):
                raise RuntimeError("the last piece in shared memory is not the bytes copied")
        except Exception as exc:  # noqa: BLE001  # a configuration that fails is a row
            notes[name] = gemm.first_line(exc)
            continue
        fns[name] = lambda k=kernel, g=grid, a=kargs, s=piece * stages: k(
            (g,), (FILL_THREADS,), a, shared_mem=s
        )
        facts[name] = grid * FILL_ITERS * piece
    ms = gpu.time(fns) if fns else {}
    rows = []
    for name in [*facts, *notes]:
        row = {"what": "fill limit", "contender": name}
        if name in ms:
            tbs = facts[name] / (ms[name] * 1e-3) / 1e12
            row |= {"us": ms[name] * 1e3, "into shared TB/s": tbs}
            row["B/clk/SM"] = tbs * 1e12 / gpu.clock_hz / gpu.sms
        row["note"] = gemm.cell(notes.get(name, ""))
        rows.append(row)
    return rows


def _filled_bytes(shape, kwargs) -> tuple[int, float]:
    """(bytes the whole GEMM brings into shared memory, FLOP per such byte)."""
    m, n, k = shape
    bm, bn, bk = kwargs.get("tile", (128, 128, 32))
    tiles = -(-m // bm) * -(-n // bn) * -(-k // bk)
    nbytes = tiles * (bm * bk + bk * bn) * 2
    return nbytes, 2 * m * n * k / nbytes


def _ablation_operands(torch, seed: int) -> tuple:
    """A, B and bias of :data:`ABLATION_SHAPE` (uniform in [-1, 1), float16) and the
    float64 product."""
    m, n, k = ABLATION_SHAPE
    gen = torch.Generator(device="cuda").manual_seed(seed)
    a = (2 * torch.rand(m, k, device="cuda", generator=gen) - 1).half()
    b = (2 * torch.rand(k, n, device="cuda", generator=gen) - 1).half()
    bias = (2 * torch.rand(n, device="cuda", generator=gen) - 1).half()
    return a, b, bias, a.double() @ b.double()


def _ablations(torch, operands, kwargs: dict, name_of, fns: dict, notes: dict) -> None:
    """examples/gemm.py (plain, strict) whole and with each half ablated, for ``kwargs``:
    the launch of each into ``fns`` under ``name_of(what)``, or why not into ``notes``;
    the whole kernel's result checked against the float64 product first."""
    example = norms.example("gemm")
    a, b, bias, ref = operands
    m, n, k = ABLATION_SHAPE
    for what, ablate in ((WHOLE, None), (LOADS_ONLY, "math"), (MATH_ONLY, "loads")):
        name = name_of(what)
        try:
            func = example.gemm_kernel(m, n, k, epilogue="plain", ablate=ablate, **kwargs)
            exe = runtime.build(func, runtime.gpu_arch(), gemm.STRICT)
            launch, c = gemm._gemm_run(torch, exe[runtime.entry_name(func)], a, b, bias)
        except Exception as exc:  # noqa: BLE001  # a contender that cannot be had is a row
            notes[name] = gemm.first_line(exc)
            continue
        if ablate is None and (err := gemm.rel_error(torch, c, ref)) > gemm.GEMM_TOL:
            notes[name] = f"wrong result: max err / max ref {err:.3g}"
            continue
        fns[name] = launch


def ablation_rows(gpu, args) -> list[dict]:
    torch = gpu.torch
    m, n, k = ABLATION_SHAPE
    operands = _ablation_operands(torch, 41)
    limit = gemm.mma_limit(gpu, args, "float16")["TFLOP/s"]
    fns, notes, filled = {}, {}, {}
    for config, kwargs in gemm.MMA_SYNC_CONFIGS.items():
        filled[config] = _filled_bytes(ABLATION_SHAPE, kwargs)
        _ablations(torch, operands, kwargs, lambda what, c=config: f"{c} {what}", fns, notes)
    ms = norms.time_queued(torch, fns, batch=10, reps=args.reps) if fns else {}
    rows = []
    for config in gemm.MMA_SYNC_CONFIGS:
        nbytes, per_byte = filled[config]
        for what in (WHOLE, LOADS_ONLY, MATH_ONLY):
            name = f"{config} {what}"
            row = {"what": "ablations", "contender": name}
            if name in ms:
                t = ms[name]
                row["us"] = t * 1e3
                row["of whole's time"] = (
                    t / ms[f"{config} {WHOLE}"] if f"{config} {WHOLE}" in ms else ""
                )
                if what != MATH_ONLY:
                    row["into shared TB/s"] = nbytes / (t * 1e-3) / 1e12
                row["FLOP/B"] = per_byte
                tflops = 2 * m * n * k / (t * 1e-3) / 1e12
                row["TFLOP/s (GEMM's FLOP)"] = tflops
                row["of mma.sync limit"] = tflops / limit
            row["note"] = gemm.cell(notes.get(name, ""))
            rows.append(row)
    return rows


# -- 8d. Sustained: the clock and the power limit ---------------------------------------------
SUSTAIN_S = 4.0  # seconds each contender runs back to back
SUSTAIN_ROUNDS = 2
# power.draw is a one-second average on recent drivers (it lags a change of kernel);
# power.draw.instant, where the driver has it, is read at the sample
SMI_FIELDS = (
    "clocks.sm",
    "power.draw.instant",
    "temperature.gpu",
    "clocks_throttle_reasons.active",
)
SMI_FIELDS_OLD_DRIVER = ("clocks.sm", "power.draw", *SMI_FIELDS[2:])
SMI_PERIOD_MS = 50
# NVML's clocksThrottleReason bits (nvidia-smi -q -d PERFORMANCE names them the same way)
CLOCK_REASONS = {
    0x1: "idle",
    0x2: "applications clocks",
    0x4: "SW power cap",
    0x8: "HW slowdown",
    0x10: "sync boost",
    0x20: "SW thermal",
    0x40: "HW thermal",
    0x80: "HW power brake",
    0x100: "display clock",
}
TORCH_MATMUL, LIMIT_LOOP = "torch matmul", "mma.sync limit loop"


def clock_reasons(mask: int) -> str:
    """The names of the bits set in an nvidia-smi ``clocks_throttle_reasons.active`` mask;
    "none" for 0; unnamed bits as hex."""
    names = [name for bit, name in CLOCK_REASONS.items() if mask & bit]
    rest = mask & ~sum(CLOCK_REASONS)
    return ", ".join(names + ([hex(rest)] if rest else [])) or "none"


def parse_samples(text: str) -> list[tuple[float, float, float, int]]:
    """``nvidia-smi --query-gpu=<SMI_FIELDS> --format=csv,noheader,nounits`` lines as
    (SM MHz, W, degrees C, reasons mask); lines that do not parse (a field reading
    "[N/A]", a line cut by the sampler's end) are left out."""
    samples = []
    for line in text.strip().splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != len(SMI_FIELDS):
            continue
        try:
            samples.append((float(cells[0]), float(cells[1]), float(cells[2]), int(cells[3], 16)))
        except ValueError:
            continue
    return samples


def summarize(samples: list[tuple[float, float, float, int]]) -> dict:
    """The window past its first fifth (the clock's ramp): median and lowest SM clock,
    median power, highest temperature, every reason seen."""
    steady = samples[len(samples) // 5 :]
    if not steady:
        raise RuntimeError("nvidia-smi gave no samples while the kernel ran")
    mask = 0
    for *_, m in steady:
        mask |= m
    return {
        "SM MHz": statistics.median(s[0] for s in steady),
        "SM MHz min": min(s[0] for s in steady),
        "W": statistics.median(s[1] for s in steady),
        "deg C max": max(s[2] for s in steady),
        "clock held by": clock_reasons(mask),
    }


def smi_fields() -> tuple[str, ...]:
    """:data:`SMI_FIELDS`, or with the averaged power where the driver has no instant one;
    an error naming nvidia-smi where it cannot be run."""
    try:
        probe = subprocess.run(
            ["nvidia-smi", f"--query-gpu={','.join(SMI_FIELDS)}", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RuntimeError(f"nvidia-smi cannot be run here: {exc}") from None
    return SMI_FIELDS if probe.returncode == 0 else SMI_FIELDS_OLD_DRIVER


def sustained(torch, launch, seconds: float = SUSTAIN_S, per_sync: int = 10) -> dict:
    """Launch ``launch`` back to back for ``seconds`` while nvidia-smi samples; launches per
    second and :func:`summarize` of the samples."""
    for _ in range(per_sync):
        launch()
    torch.cuda.synchronize()
    query = ["nvidia-smi", f"--query-gpu={','.join(smi_fields())}"]
    query += ["--format=csv,noheader,nounits", "-lms", str(SMI_PERIOD_MS)]
    sampler = subprocess.Popen(query, stdout=subprocess.PIPE, text=True)
    try:
        time.sleep(0.2)
        start, launches = time.perf_counter(), 0
        while time.perf_counter() - start < seconds:
            for _ in range(per_sync):
                launch()
            torch.cuda.synchronize()
            launches += per_sync
        elapsed = time.perf_counter() - start
    finally:
        sampler.terminate()
        text = sampler.communicate()[0]
    return {"launches/s": launches / elapsed} | summarize(parse_samples(text))


def sustained_contenders(gpu, args) -> tuple[dict, dict, dict]:
    """(launch, FLOP a launch, note) of each contender; a contender that cannot be had is
    a note."""
    torch = gpu.torch
    m, n, k = ABLATION_SHAPE
    config = "128x256x64 s3"
    a, b, bias, ref = operands = _ablation_operands(torch, 43)
    fns, notes = {}, {}

    def name_of(what: str) -> str:
        return f"ours {config} plain {what}"

    _ablations(torch, operands, gemm.MMA_SYNC_CONFIGS[config], name_of, fns, notes)
    flops = dict.fromkeys(fns, 2 * m * n * k)
    if (err := gemm.rel_error(torch, torch.matmul(a, b), ref)) > gemm.GEMM_TOL:
        notes[TORCH_MATMUL] = f"wrong result: max err / max ref {err:.3g}"
    else:
        fns[TORCH_MATMUL], flops[TORCH_MATMUL] = (lambda: torch.matmul(a, b)), 2 * m * n * k
    best = gemm.mma_limit(gpu, args, "float16")
    tiles, warps = best["tiles/warp"], best["warps/SM"]
    rng = np.random.default_rng(47)
    _, fns[LIMIT_LOOP], ctas = gemm._mma_config(gpu, "float16", tiles, warps, rng)
    warps_launched = ctas * gemm.MMA_CTA_THREADS // 32
    flops[LIMIT_LOOP] = warps_launched * tiles * gemm.MMA_ITERS * gemm.MMA_FLOPS
    _ws_contenders(gpu, fns, flops, notes)
    return fns, flops, notes


def _ws_contenders(gpu, fns: dict, flops: dict, notes: dict) -> None:
    """examples/gemm_hopper_ws.py (plain, part 8g's build) at :data:`ABLATION_SHAPE` in
    float16 and bfloat16, each checked first, and torch.matmul in bfloat16."""
    import gemm_ws
    import tvm

    torch = gpu.torch
    m, n, k = ABLATION_SHAPE
    for dtype, kind in (("float16", torch.float16), ("bfloat16", torch.bfloat16)):
        gen = torch.Generator(device="cuda").manual_seed(53)
        a = (2 * torch.rand(m, k, device="cuda", generator=gen) - 1).to(kind)
        b = (2 * torch.rand(k, n, device="cuda", generator=gen) - 1).to(kind)
        bias = torch.zeros(n, dtype=kind, device="cuda")
        ref = a.double() @ b.double()
        name = f"ours ws plain {dtype}"
        try:
            fn = gemm_ws.build("ws", ABLATION_SHAPE, dtype, "plain", gpu.sms)
            c = torch.full((m, n), float("nan"), dtype=kind, device="cuda")
            tensors = [tvm.runtime.from_dlpack(t) for t in (a, b, bias, c)]
            fn(*tensors)
            torch.cuda.synchronize()
        except Exception as exc:  # noqa: BLE001  # a contender that cannot be had is a row
            notes[name] = gemm.first_line(exc)
            continue
        if (err := gemm.rel_error(torch, c, ref)) > gemm.GEMM_TOL:
            notes[name] = f"wrong result: max err / max ref {err:.3g}"
            continue
        fns[name], flops[name] = (lambda fn=fn, t=tensors: fn(*t)), 2 * m * n * k
        if dtype == "bfloat16":
            fns[f"{TORCH_MATMUL} bfloat16"] = lambda a=a, b=b: torch.matmul(a, b)
            flops[f"{TORCH_MATMUL} bfloat16"] = 2 * m * n * k


def part_gemm_sustained(gpu, args) -> list[dict]:
    fns, flops, notes = sustained_contenders(gpu, args)
    runs = {name: [] for name in fns}
    for round_ in range(SUSTAIN_ROUNDS):
        for name, launch in fns.items():
            gemm._log(f"sustained {name}, round {round_ + 1}")
            runs[name].append(sustained(gpu.torch, launch))
    limit_per_clock = (
        statistics.median(
            r["launches/s"] * flops[LIMIT_LOOP] / (r["SM MHz"] * 1e6) / gpu.sms
            for r in runs.get(LIMIT_LOOP, [])
        )
        if runs.get(LIMIT_LOOP)
        else None
    )
    rows = []
    for name in [*fns, *notes]:
        for i, r in enumerate(runs.get(name, [None])):
            row = {"contender": name, "round": i + 1 if r else ""}
            if r:
                tflops = r["launches/s"] * flops[name] / 1e12
                per_clock = tflops * 1e12 / (r["SM MHz"] * 1e6) / gpu.sms
                row |= {"TFLOP/s": tflops, **{k: v for k, v in r.items() if k != "launches/s"}}
                row["FLOP/clk/SM"] = per_clock
                row["per clock / limit loop"] = (
                    per_clock / limit_per_clock if limit_per_clock else ""
                )
            row["note"] = gemm.cell(notes.get(name, ""))
            rows.append(row)
    return rows
