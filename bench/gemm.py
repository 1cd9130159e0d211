"""GEMM and cp.async for bench/run.py (parts 8 and 9).

``mma_limit``: what ``mma.sync.aligned.m16n8k16`` (float16 and bfloat16 operands, float32
accumulators) reaches on this GPU, from a minimal hand-written CUDA kernel (CuPy): each
warp keeps ``tiles`` independent accumulator tiles in registers and issues mma in a loop
with no memory traffic, at 4, 8 and 16 warps per SM; the best is the limit. The
accumulators are stored only when a kernel argument asks for it, so the compiler cannot
remove the loop, and the run that stores them is checked: ``iters`` iterations must
accumulate ``iters`` times what one does.

``gemm``: examples/gemm.py (C = relu(A B + bias), float16, float32 accumulation) at
4096 x 4096 x 4096 and a tail shape, two tile configurations, with the bias + relu
epilogue and without it (``plain``, the program TVM's built-in variants can lower), built
with the strict pipeline (every call ours) and with TVM's built-in one on the identical
TVMScript, against ``torch.addmm`` + ``relu`` (cuBLAS), a bare ``torch.matmul``, and the mma.sync
limit measured by ``mma_limit`` in the same run. Every result is checked against a
float64 product on the GPU before it is timed.

``cp_async_stream``: a streaming copy global -> shared -> global, one tile per CTA per
step: ``Tx.cta.copy_async(..., dispatch="ldgsts")`` + commit / wait + a CTA barrier, then
``Tx.cta.copy`` back, built with our pipeline and with the built-in one, and the same
program with a synchronous ``Tx.cta.copy`` in (our gmem_smem), against a device-to-device
copy (CuPy) of the same bytes; even tiles and odd ones where the built-in's ldgsts
declines (what it does then is recorded).

A contender that cannot be built, fails its check or fails to launch is a row saying so
(``note``), never the end of the run. Nothing of torch or CuPy is imported at module level.
"""

from __future__ import annotations

import re
import sys
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench"))

import norms  # noqa: E402
import numpy as np  # noqa: E402
from tvm.script import tirx as T  # noqa: E402
from tvm.script.tirx import tile as Tx  # noqa: E402
from tvm.tirx.layout import S, TileLayout  # noqa: E402

import tirx_cuda_dispatch as tcd  # noqa: E402
from tirx_cuda_dispatch import runtime  # noqa: E402

OURS, STRICT, BUILTIN = "tirx_cuda_dispatch", "tirx_cuda_dispatch.strict", "tirx"


CELL_CHARS = 300  # the longest note a table cell keeps
_CALL_LINE = re.compile(r"^\s*call:\s*(Tx\.\w+\.\w+)")
# Our variants' reasons under "variants tried" ("    ldgsts   declined: why"), and the
# line after which the variants a forced dispatch= did not try are listed
_OUR_REASON = re.compile(r"^\s{4}(\w+)\s+(declined: .*)$")
_NOT_TRIED = "the other variants (not tried"
# A row of TVM's dispatch failure table: "| ldgsts (prio=20) | rejected: why |"
_BUILTIN_ROW = re.compile(r"^\|\s*(\w+) \(prio=-?\d+\)\s*\|\s*(.*?)\s*\|$")


def cell(text: str) -> str:
    """``text`` as one markdown table cell: one line, ``|`` escaped, at most CELL_CHARS."""
    flat = " ".join(str(text).split())
    if len(flat) > CELL_CHARS:
        flat = flat[: CELL_CHARS - 3] + "..."
    return flat.replace("|", "\\|")


def sci(value: float) -> str:
    """A small error as text (the tables print floats with 3 decimals: 3e-4 would be 0)."""
    return f"{value:.2e}"


def first_line(exc: BaseException) -> str:
    """An exception in one line: its type, the first non-empty line of its message, and
    the tile call it names (our dispatch errors name it on a ``call:`` line)."""
    lines = [ln for ln in str(exc).splitlines() if ln.strip()]
    text = f"{type(exc).__name__}: {lines[0].strip() if lines else '(no message)'}"
    calls = [m.group(1) for m in map(_CALL_LINE.match, lines) if m]
    if calls:
        text += f" ({calls[0]})"
    tried = lines[: next((i for i, ln in enumerate(lines) if _NOT_TRIED in ln), len(lines))]
    ours = [f"{m[1]}: {m[2]}" for m in map(_OUR_REASON.match, tried) if m]
    rows = [m for m in map(_BUILTIN_ROW.match, lines) if m]
    # TVM's table lists our bridge's registrations too; its own variants' reasons matter
    rejected = ours + [f"{m[1]}: {m[2]}" for m in rows if "tirx_cuda_dispatch" not in m[2]]
    if rejected:
        text += " [" + "; ".join(rejected) + "]"
    return text


def _log(text: str) -> None:
    print(f"  {text}", file=sys.stderr, flush=True)


# -- 8a. the mma.sync limit ---------------------------------------------------------------
MMA_FLOPS = 2 * 16 * 8 * 16  # one m16n8k16: 16 x 8 outputs, 16 multiply-adds each
MMA_PTX = {
    "float16": "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32",
    "bfloat16": "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",
}
MMA_SASS = {"float16": "HMMA.16816.F32", "bfloat16": "HMMA.16816.F32.BF16"}
MMA_TILES = (8, 16)  # independent accumulator tiles per warp
MMA_WARPS_PER_SM = (4, 8, 16)
MMA_CTA_THREADS = 128  # 4 warps per CTA; the grid is SMs x (warps per SM / 4)
MMA_ITERS = 8192
MMA_OPERANDS = 6  # 32-bit registers per lane: A's 4 and B's 2
# |out(iters) - iters out(1)| / (iters max |out(1)|): float32 sums of one value, iters
# times, are off by at most ~iters 2^-24 relative (under 1e-3 at 8192); a loop cut short
# by a percent, or removed, is off by far more.
MMA_SCALING_TOL = 2.0**-8

_LIMITS: dict[str, dict] = {}  # dtype -> the best row of mma_limit, measured once a run


def mma_limit_source(dtype: str, tiles: int, store: bool = True) -> str:
    """The kernel ``mma_limit(ops, out, iters, store)``: lane l of every warp loads its A
    and B fragments (``ops[6 l .. 6 l + 5]``) once, then ``iters`` times issues ``tiles``
    independent mma into ``tiles`` accumulator tiles; when ``store`` (a run-time argument)
    is nonzero every thread writes its accumulators to ``out``. ``store=False`` leaves
    that store out of the source: the negative control, whose mma the compiler removes."""
    ptx = MMA_PTX[dtype]
    epilogue = (
        f"""  if (store) {{
    float* o = out + ((unsigned long long)blockIdx.x * blockDim.x + threadIdx.x) * {4 * tiles};
#pragma unroll
    for (int t = 0; t < {tiles}; ++t)
#pragma unroll
      for (int j = 0; j < 4; ++j) o[t * 4 + j] = d[t][j];
  }}"""
        if store
        else ""
    )
    return f"""
extern "C" __global__ void __launch_bounds__({MMA_CTA_THREADS})
mma_limit(const unsigned* __restrict__ ops, float* __restrict__ out, int iters, int store) {{
  const unsigned* p = ops + (threadIdx.x % 32) * {MMA_OPERANDS};
  const unsigned a0 = p[0], a1 = p[1], a2 = p[2], a3 = p[3], b0 = p[4], b1 = p[5];
  float d[{tiles}][4];
#pragma unroll
  for (int t = 0; t < {tiles}; ++t) d[t][0] = d[t][1] = d[t][2] = d[t][3] = 0.0f;
  for (int it = 0; it < iters; ++it) {{
#pragma unroll
    for (int t = 0; t < {tiles}; ++t)
      asm volatile("{ptx} {{%0,%1,%2,%3}}, {{%4,%5,%6,%7}}, {{%8,%9}}, {{%0,%1,%2,%3}};"
                   : "+f"(d[t][0]), "+f"(d[t][1]), "+f"(d[t][2]), "+f"(d[t][3])
                   : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }}
{epilogue}
}}
"""


def mma_operands(dtype: str, rng: np.random.Generator) -> np.ndarray:
    """Every lane's A and B fragment registers: random normal values rounded to ``dtype``,
    two to a 32-bit register (the first in the low half), ``(32 * 6,)`` uint32."""
    halves = runtime.random_array((32 * MMA_OPERANDS * 2,), dtype, rng)
    bits = np.ascontiguousarray(halves).view(np.uint16).astype(np.uint32)
    return bits[0::2] | (bits[1::2] << 16)


_SASS_LINE = re.compile(r"^\s*/\*([0-9a-f]+)\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Za-z0-9_.]*)(.*)$")
_SASS_LABEL = re.compile(r"^(\.L_x_\d+):")


def sass_loops(sass_text: str, opcode: str) -> list[tuple[int, frozenset[str]]]:
    """For every backward branch of a kernel's SASS (a loop): how many ``opcode``
    instructions its body has and the set of their destination registers (one per
    independent accumulator chain)."""
    labels, body, pending = {}, [], []
    for line in sass_text.splitlines():
        label = _SASS_LABEL.match(line.strip())
        if label:
            pending.append(label.group(1))
            continue
        m = _SASS_LINE.match(line)
        if m:
            addr = int(m.group(1), 16)
            labels.update((name, addr) for name in pending)
            pending = []
            body.append((addr, m.group(2), m.group(3)))
    loops = []
    for addr, op, rest in body:
        target = re.search(r"`\((\.L_x_\d+)\)", rest)
        if op != "BRA" or target is None or labels.get(target.group(1), addr + 1) > addr:
            continue
        start = labels[target.group(1)]
        inside = [r for a, o, r in body if start <= a < addr and o == opcode]
        loops.append((len(inside), frozenset(r.split(",")[0].strip() for r in inside)))
    return loops


def mma_scaling_error(once: np.ndarray, many: np.ndarray, iters: int) -> float:
    """max |many - iters once| / (iters max |once|): ~0 when ``iters`` iterations each
    added what one adds; NaN (an unwritten, poisoned output) and a zero ``once`` fail."""
    once64, many64 = once.astype(np.float64), many.astype(np.float64)
    scale = iters * np.abs(once64).max(initial=0.0)
    if not np.isfinite(many64).all() or not np.isfinite(once64).all() or scale == 0:
        return float("nan")
    return float(np.abs(many64 - iters * once64).max() / scale)


def mma_tflops(ctas: int, tiles: int, iters: int, ms: float) -> float:
    warps = ctas * MMA_CTA_THREADS // 32
    return warps * tiles * iters * MMA_FLOPS / (ms * 1e-3) / 1e12


def _mma_config(gpu, dtype: str, tiles: int, warps_per_sm: int, rng) -> tuple:
    """Compile and check one configuration; return (row facts, launch, CTAs)."""
    cp = gpu.cupy
    ctas = gpu.sms * warps_per_sm * 32 // MMA_CTA_THREADS
    kernel = cp.RawKernel(mma_limit_source(dtype, tiles), "mma_limit", options=("-std=c++17",))
    ops = cp.asarray(mma_operands(dtype, rng))
    out = cp.full(ctas * MMA_CTA_THREADS * 4 * tiles, np.nan, dtype=cp.float32)
    outputs = {}
    for iters in (1, MMA_ITERS):
        out.fill(np.nan)
        kernel((ctas,), (MMA_CTA_THREADS,), (ops, out, np.int32(iters), np.int32(1)))
        cp.cuda.Device().synchronize()
        outputs[iters] = out.get()
    err = mma_scaling_error(outputs[1], outputs[MMA_ITERS], MMA_ITERS)
    if not err <= MMA_SCALING_TOL:  # NaN fails too
        raise RuntimeError(f"{MMA_ITERS} iterations did not add {MMA_ITERS} times one: {err:.3g}")
    args = (ops, out, np.int32(MMA_ITERS), np.int32(0))
    row = {"regs": kernel.num_regs, "scaling err": sci(err)}
    return row, (lambda: kernel((ctas,), (MMA_CTA_THREADS,), args)), ctas


def measure_mma(gpu, dtype: str, args) -> list[dict]:
    """Every (tiles, warps per SM) configuration of ``dtype``, timed interleaved, with the
    best marked."""
    rng = np.random.default_rng(21)
    facts, fns, ctas_of, notes = {}, {}, {}, {}
    configs = [(tiles, warps) for tiles in MMA_TILES for warps in MMA_WARPS_PER_SM]
    for key in configs:
        _log(f"mma.sync {dtype} tiles={key[0]} warps/SM={key[1]}")
        try:
            facts[key], fns[key], ctas_of[key] = _mma_config(gpu, dtype, *key, rng)
        except Exception as exc:  # noqa: BLE001  # a failed configuration is a row
            notes[key] = first_line(exc)
    ms = gpu.time(fns) if fns else {}
    rows = []
    for key in configs:
        tiles, warps = key
        row = {"dtype": dtype, "tiles/warp": tiles, "warps/SM": warps}
        if key in ms:
            tflops = mma_tflops(ctas_of[key], tiles, MMA_ITERS, ms[key])
            row["TFLOP/s"] = tflops
            row["FLOP/clk/SM"] = tflops * 1e12 / gpu.clock_hz / gpu.sms
        row |= facts.get(key, {})
        row["note"] = cell(notes.get(key, ""))
        rows.append(row)
    return mark_best(rows)


def mark_best(rows: list[dict]) -> list[dict]:
    """``best`` = "yes" on the row of highest TFLOP/s of each dtype (none without one)."""
    for dtype in dict.fromkeys(r["dtype"] for r in rows):
        timed = [r for r in rows if r["dtype"] == dtype and "TFLOP/s" in r]
        for r in rows:
            if r["dtype"] == dtype:
                r["best"] = ""
        if timed:
            max(timed, key=lambda r: r["TFLOP/s"])["best"] = "yes"
    return rows


def mma_limit(gpu, args, dtype: str = "float16") -> dict:
    """The best row of ``dtype`` (``TFLOP/s``), measured now unless this run already did."""
    if dtype not in _LIMITS:
        best = [r for r in measure_mma(gpu, dtype, args) if r.get("best") == "yes"]
        if not best:
            raise RuntimeError(f"no mma.sync {dtype} configuration could be timed")
        _LIMITS[dtype] = best[0]
    return _LIMITS[dtype]


def part_mma_limit(gpu, args) -> list[dict]:
    rows = []
    for dtype in MMA_PTX:
        found = measure_mma(gpu, dtype, args)
        rows += found
        best = [r for r in found if r.get("best") == "yes"]
        if best:
            _LIMITS[dtype] = best[0]
    return rows


# -- 8b. GEMM ---------------------------------------------------------------------------
GEMM_SHAPES = [(4096, 4096, 4096), (4000, 4000, 4000)]
# The configurations of examples/gemm.py timed: the default and the best of a sweep on the
# H200 (tiles 128x128 to 256x128, K 32 / 64, 3 / 4 stages, 4 / 8 warps).
GEMM_CONFIGS = {
    "128x128x32 s4": {"stages": 4},
    "128x256x64 s3": {"stages": 3, "tile": (128, 256, 64), "warp_grid": (2, 4)},
    "hopper 128x256x64 s4": {"stages": 4},
}
# Which example each configuration builds: examples/gemm.py (cp.async, ldmatrix, mma.sync)
# unless named here; examples/gemm_hopper.py is TMA + wgmma (sm_90a; tiles only).
GEMM_EXAMPLE = {"hopper 128x256x64 s4": "gemm_hopper"}
# The configurations of examples/gemm.py (what part 8c ablates).
MMA_SYNC_CONFIGS = {c: kw for c, kw in GEMM_CONFIGS.items() if c not in GEMM_EXAMPLE}
# bias_relu: the example; plain: C = A B only (the program TVM's built-in variants can
# lower: their cast declines the bias fragment).
EPILOGUES = ("bias_relu", "plain")
# max |C - ref| / max |ref| against a float64 product: one float16 rounding of the result
# is 2^-11 of it, float32 accumulation far less; a K tile lost or a race is order 0.1.
GEMM_TOL = 1e-2
TORCH_FUSED, TORCH_BARE = "torch addmm+relu", "torch matmul only"
TORCH_FOR = {"bias_relu": TORCH_FUSED, "plain": TORCH_BARE}


def gemm_contender(config: str, epilogue: str, pipeline: str) -> str:
    return f"{'ours' if pipeline == STRICT else 'built-in'} {config} {epilogue}"


def rel_error(torch, c, ref) -> float:
    """max |c - ref| / max |ref| in float64; NaN when c has a NaN (a poisoned output)."""
    diff = (c.double() - ref.double()).abs()
    if torch.isnan(diff).any():
        return float("nan")
    return float(diff.max().item() / ref.double().abs().max().item())


def _gemm_build(shape, config: str, epilogue: str, pipeline: str):
    """examples/gemm.py for ``shape``, ``config`` and ``epilogue``, built with ``pipeline``."""
    kwargs = GEMM_CONFIGS[config]
    example = norms.example(GEMM_EXAMPLE.get(config, "gemm"))
    func = example.gemm_kernel(*shape, epilogue=epilogue, **kwargs)
    return runtime.build(func, runtime.gpu_arch(), pipeline)[runtime.entry_name(func)]


def _gemm_run(torch, fn, a, b, bias):
    """Run ``fn`` once into a NaN-poisoned C; return (launch, C)."""
    import tvm

    c = torch.full((a.shape[0], b.shape[1]), float("nan"), dtype=torch.float16, device="cuda")
    tensors = [tvm.runtime.from_dlpack(t) for t in (a, b, bias, c)]
    fn(*tensors)
    torch.cuda.synchronize()
    return (lambda: fn(*tensors)), c


def gemm_order() -> list[str]:
    """The contenders of one shape, in the order of the table."""
    names = [
        gemm_contender(c, e, p) for e in EPILOGUES for c in GEMM_CONFIGS for p in (STRICT, BUILTIN)
    ]
    return [*names, TORCH_FUSED, TORCH_BARE]


def gemm_rows(shape, ms: dict, errors: dict, diffs: dict, notes: dict, limit) -> list[dict]:
    """One row per contender that was timed or has a note, in :func:`gemm_order`. Ratios
    are speeds (the other's time over this one's): above 1, this one is faster."""
    m, n, k = shape
    flops = 2 * m * n * k
    rows = []
    for name in gemm_order():
        t = ms.get(name)
        if t is None and name not in notes:
            continue
        row = {"shape": f"{m}x{n}x{k}", "contender": name}
        if t is not None:
            tflops = flops / (t * 1e-3) / 1e12
            row |= {"us": t * 1e3, "TFLOP/s": tflops}
            torch_twin = TORCH_FOR.get(name.rsplit(" ", 1)[-1], name)
            if name.startswith("ours"):
                twin = "built-in" + name[len("ours") :]
                row["speed / built-in"] = ms[twin] / t if twin in ms else ""
            row["speed / torch"] = ms[torch_twin] / t if torch_twin in ms else ""
            row["of mma.sync limit"] = tflops / limit if limit else ""
        row["max err / max ref"] = sci(errors[name]) if name in errors else ""
        row["diff / torch"] = sci(diffs[name]) if name in diffs else ""
        row["note"] = cell(notes.get(name, ""))
        rows.append(row)
    return rows


def _wrong(err: float) -> str | None:
    return None if err <= GEMM_TOL else f"wrong result: max err / max ref {err:.3g} > {GEMM_TOL}"


def gemm_shape(gpu, shape, limit, args) -> list[dict]:
    torch = gpu.torch
    m, n, k = shape
    gen = torch.Generator(device="cuda").manual_seed(31 + m)
    a = (2 * torch.rand(m, k, device="cuda", generator=gen) - 1).half()
    b = (2 * torch.rand(k, n, device="cuda", generator=gen) - 1).half()
    bias = (2 * torch.rand(n, device="cuda", generator=gen) - 1).half()
    product = a.double() @ b.double()
    refs = {"bias_relu": torch.relu(product + bias.double()), "plain": product}
    fns, outputs, notes, errors = {}, {}, {}, {}
    for epilogue in EPILOGUES:
        for config in GEMM_CONFIGS:
            for pipeline in (STRICT, BUILTIN):
                name = gemm_contender(config, epilogue, pipeline)
                _log(f"build gemm {m}x{n}x{k} {name}")
                try:
                    fn = _gemm_build(shape, config, epilogue, pipeline)
                except Exception as exc:  # noqa: BLE001  # a kernel that cannot be had is a row
                    notes[name] = f"cannot lower: {first_line(exc)}"
                    continue
                try:
                    launch, c = _gemm_run(torch, fn, a, b, bias)
                except Exception as exc:  # noqa: BLE001
                    notes[name] = f"launch failed: {first_line(exc)}"
                    continue
                errors[name] = rel_error(torch, c, refs[epilogue])
                if _wrong(errors[name]):
                    notes[name] = _wrong(errors[name])
                    continue
                fns[name], outputs[name] = launch, c
    fused = torch.relu(torch.addmm(bias, a, b))
    bare = torch.matmul(a, b)
    errors[TORCH_FUSED] = rel_error(torch, fused, refs["bias_relu"])
    errors[TORCH_BARE] = rel_error(torch, bare, product)
    for name, launch in (
        (TORCH_FUSED, lambda: torch.relu(torch.addmm(bias, a, b))),
        (TORCH_BARE, lambda: torch.matmul(a, b)),
    ):
        if _wrong(errors[name]):
            notes[name] = _wrong(errors[name])
        else:
            fns[name] = launch
    torch_out = {"bias_relu": fused, "plain": bare}
    diffs = {  # ours and the built-in against cuBLAS's result
        name: rel_error(torch, c, torch_out[name.rsplit(" ", 1)[-1]]) for name, c in outputs.items()
    }
    del product, refs
    ms = norms.time_queued(torch, fns, batch=10, reps=args.reps) if fns else {}
    return gemm_rows(shape, ms, errors, diffs, notes, limit)


def part_gemm(gpu, args) -> list[dict]:
    try:
        limit = mma_limit(gpu, args, "float16")["TFLOP/s"]
    except Exception:  # noqa: BLE001  # the GEMM still runs, without that ratio
        traceback.print_exc()
        limit = None
    rows = []
    for shape in GEMM_SHAPES:
        try:
            rows += gemm_shape(gpu, shape, limit, args)
        except Exception as exc:  # noqa: BLE001  # the other shape still runs
            traceback.print_exc()
            rows.append({"shape": "x".join(map(str, shape)), "note": cell(first_line(exc))})
    return rows


# -- 9. cp.async streaming copy -----------------------------------------------------------
# (name, dtype, tile rows, tile cols, threads per CTA, tiles per CTA one after the other)
CP_ASYNC = [
    ("f32 32x256 cta256", "float32", 32, 256, 256, 1),
    ("f32 32x256 cta256, 4 steps", "float32", 32, 256, 256, 4),
    ("f16 64x128 cta128", "float16", 64, 128, 128, 1),
    ("bf16 32x256 cta256", "bfloat16", 32, 256, 256, 1),
    ("f32 30x100 cta128 (odd)", "float32", 30, 100, 128, 1),
    ("f16 48x40 cta256 (odd)", "float16", 48, 40, 256, 1),
    ("bf16 5x70 cta32 (odd)", "bfloat16", 5, 70, 32, 1),
]
CP_OURS, CP_BUILTIN = "ours copy_async", "built-in copy_async"
CP_SYNC, CP_D2D = "ours sync copy", "D2D copy (CuPy)"
# The built-in without dispatch= (what it picks when its ldgsts declines).
CP_BUILTIN_UNFORCED = "built-in copy_async, no dispatch="
_CP_ASYNC_FORM = re.compile(
    r"cp\.async\.(c[ag])\.shared\.global[.\w:]*\s*\[%\d+\],\s*\[%\d+\],\s*(\d+)"
)


def stream_program(
    dtype: str,
    tile: tuple[int, int],
    threads: int,
    ctas: int,
    steps: int = 1,
    asynchronous: bool = True,
    dispatch: str | None = "ldgsts",
):
    """CTA ``bx`` moves tiles ``bx * steps .. bx * steps + steps - 1`` of A (each ``tile``
    rows, all columns) to B through one shared tile: in with ``Tx.cta.copy_async`` (with
    ``dispatch``) and ``cp.async.commit_group`` / ``wait_group 0``, or with ``Tx.cta.copy``
    when not ``asynchronous``; a CTA barrier; out with ``Tx.cta.copy``; a barrier before
    the next step overwrites the shared tile."""
    tm, tn = tile
    if threads % 32:
        raise ValueError(f"threads={threads}: a CTA is whole warps (a multiple of 32)")
    warps = threads // 32
    rows = ctas * steps * tm
    layout = TileLayout(S[(tm, tn)])
    between = steps > 1

    # fmt: off
    @T.prim_func
    def stream(A_ptr: T.handle, B_ptr: T.handle):
        A = T.match_buffer(A_ptr, (rows, tn), dtype)
        B = T.match_buffer(B_ptr, (rows, tn), dtype)
        T.device_entry()
        bx = T.cta_id([ctas])
        T.warp_id([warps])
        T.lane_id([32])
        T.thread_id([threads])
        A_s = T.alloc_buffer((tm, tn), dtype, scope="shared", layout=layout)
        for s in T.serial(steps):
            r0 = T.meta_var((bx * steps + s) * tm)
            if asynchronous:
                Tx.cta.copy_async(A_s[:, :], A[r0:r0 + tm, 0:tn], dispatch=dispatch)
                T.ptx.cp.async_.commit_group()
                T.ptx.cp.async_.wait_group(0)
            else:
                Tx.cta.copy(A_s[:, :], A[r0:r0 + tm, 0:tn])
            T.cuda.cta_sync()
            Tx.cta.copy(B[r0:r0 + tm, 0:tn], A_s[:, :])
            if between:
                T.cuda.cta_sync()
    # fmt: on
    return stream


def cp_async_forms(cuda_source: str) -> str:
    """The cp.async forms in a kernel's CUDA source, e.g. ``cp.async.cg 16 B x2``, or
    ``no cp.async``."""
    found = _CP_ASYNC_FORM.findall(cuda_source)
    if not found:
        return "no cp.async"
    counts: dict[str, int] = {}
    for cache, size in found:
        key = f"cp.async.{cache} {size} B"
        counts[key] = counts.get(key, 0) + 1
    return ", ".join(f"{k} x{v}" for k, v in counts.items())


def our_variants(func) -> str:
    """What our dispatch makes of each copy / copy_async call: the variant, or the
    built-in it falls back to, or the error."""
    parts = []
    for r in tcd.explain(func, "sm_90a"):
        if r.variant is not None:
            what = r.variant
        elif r.error is not None:
            what = f"error: {r.error.splitlines()[0]}"
        else:
            what = f"built-in ({r.fallback})"
        parts.append(f"{r.op} -> {what}")
    return "; ".join(parts)


def cp_async_order() -> list[str]:
    """The contenders of one configuration, in the order of the table."""
    return [CP_OURS, CP_BUILTIN, CP_BUILTIN_UNFORCED, CP_SYNC, CP_D2D]


def cp_async_rows(config: str, ms: dict, facts: dict, notes: dict, nbytes: int) -> list[dict]:
    """One row per contender that was timed or has a note, in :func:`cp_async_order`;
    ratios are bandwidths (this one's over the other's)."""
    rows = []
    for name in cp_async_order():
        t = ms.get(name)
        if t is None and name not in notes:
            continue
        row = {"config": config, "contender": name, "lowered as": cell(facts.get(name, ""))}
        if t is not None:
            row["GB/s"] = nbytes / (t * 1e-3) / 1e9
            row["/ D2D"] = ms[CP_D2D] / t if CP_D2D in ms else ""
            if name == CP_OURS:
                row["/ built-in"] = ms[CP_BUILTIN] / t if CP_BUILTIN in ms else ""
                row["/ ours sync"] = ms[CP_SYNC] / t if CP_SYNC in ms else ""
        row["note"] = cell(notes.get(name, ""))
        rows.append(row)
    return rows


def _stream_build(func, pipeline: str):
    """The built kernel and the cp.async forms of its CUDA source."""
    exe = runtime.build(func, runtime.gpu_arch(), pipeline)
    return exe[runtime.entry_name(func)], cp_async_forms(exe.mod.imports[0].inspect_source())


def _stream_run(torch, fn, a):
    """Run ``fn(a, out)`` once into a NaN-poisoned ``out``, require a bit-exact copy;
    return the launch."""
    import tvm

    out = torch.full_like(a, float("nan"))
    args = [tvm.runtime.from_dlpack(t) for t in (a, out)]
    fn(*args)
    torch.cuda.synchronize()
    if not torch.equal(_bits(torch, a), _bits(torch, out)):
        raise RuntimeError("the copy is wrong (compared bit for bit with the input)")
    return lambda: fn(*args)


def _bits(torch, x):
    return x.view(torch.int16 if x.element_size() == 2 else torch.int32)


def _d2d_launch(gpu, a):
    """CuPy's device-to-device copy of a's bytes (cudaMemcpyAsync on the null stream, the
    stream the timing events are recorded on), checked bit for bit."""
    cp, torch = gpu.cupy, gpu.torch
    out = torch.full_like(a, float("nan"))
    src, dst = cp.from_dlpack(a), cp.from_dlpack(out)
    nbytes = a.numel() * a.element_size()

    def copy():
        dst.data.copy_from_device_async(src.data, nbytes, cp.cuda.Stream.null)

    copy()
    cp.cuda.Device().synchronize()
    if not torch.equal(_bits(torch, a), _bits(torch, out)):
        raise RuntimeError("the device-to-device copy is wrong")
    return copy


def cp_async_config(gpu, config, total_bytes: int, args) -> list[dict]:
    name, dtype, tm, tn, threads, steps = config
    torch = gpu.torch
    elem = 4 if dtype == "float32" else 2
    ctas = max(1, total_bytes // (elem * tm * tn * steps))
    a = torch.randn(ctas * steps * tm, tn, device="cuda").to(getattr(torch, dtype))
    programs = {
        CP_OURS: (stream_program(dtype, (tm, tn), threads, ctas, steps), OURS),
        CP_BUILTIN: (stream_program(dtype, (tm, tn), threads, ctas, steps), BUILTIN),
        CP_SYNC: (stream_program(dtype, (tm, tn), threads, ctas, steps, False), OURS),
    }
    fns, facts, notes = {}, {}, {}

    def contender(who: str, func, pipeline: str) -> None:
        _log(f"build cp_async_stream {name}: {who}")
        try:
            if pipeline == OURS:
                facts[who] = our_variants(func) + "; "
            fn, forms = _stream_build(func, pipeline)
            facts[who] = facts.get(who, "") + forms
        except Exception as exc:  # noqa: BLE001  # a contender that cannot be had is a row
            notes[who] = f"cannot lower: {first_line(exc)}"
            return
        try:
            fns[who] = _stream_run(torch, fn, a)
        except Exception as exc:  # noqa: BLE001
            notes[who] = f"failed: {first_line(exc)}"

    for who, (func, pipeline) in programs.items():
        contender(who, func, pipeline)
    if CP_BUILTIN in notes:  # what the built-in does when nothing forces its ldgsts
        func = stream_program(dtype, (tm, tn), threads, ctas, steps, dispatch=None)
        contender(CP_BUILTIN_UNFORCED, func, BUILTIN)
    try:
        fns[CP_D2D] = _d2d_launch(gpu, a)
    except Exception as exc:  # noqa: BLE001
        notes[CP_D2D] = first_line(exc)
    ms = norms.time_queued(torch, fns, batch=10, reps=args.reps) if fns else {}
    return cp_async_rows(name, ms, facts, notes, 2 * a.numel() * elem)


def part_cp_async_stream(gpu, args) -> list[dict]:
    total = args.stream_mib * 2**20 // 2  # 256 MiB of source by default
    rows = []
    for config in CP_ASYNC:
        try:
            rows += cp_async_config(gpu, config, total, args)
        except Exception as exc:  # noqa: BLE001  # the other configurations still run
            traceback.print_exc()
            rows.append({"config": config[0], "note": cell(first_line(exc))})
    return rows
