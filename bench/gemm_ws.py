"""Part 8g of bench/run.py: the warp-specialized persistent GEMM (examples/gemm_hopper_ws.py)
against torch (cuBLAS) at the shapes of issue 32, float16 and bfloat16.

For each shape and dtype: C = A B (plain) against ``torch.matmul`` and C = relu(A B + bias)
against ``torch.relu(torch.addmm(bias, A, B))``, each of ours checked first against a
float64 product (C NaN-poisoned; max |C - ref| / max |ref| at most ``GEMM_TOL``), then
all contenders of the shape timed in one interleaved run (``norms.time_queued``). Ratios
are speeds (torch's time over ours): above 1, ours is faster. The examples/gemm_hopper.py
row (tiles only, float16) is the non-specialized design on the same tiles. Where the
example pairs its CTAs by default (``default_cluster``: clusters of two, B multicast), the
"ws c1" row (float16, plain) is the same kernel unpaired. Float8 (e4m3,
per-tensor scales, bfloat16 out; B K-major) against ``torch._scaled_mm`` at
``FP8_SHAPES``: its default (cuBLAS adds partial sums into float32 outside the tensor
core, the ratio's twin) and ``use_fast_accum=True`` (the whole K in the wgmma
accumulator, as ours: an sm_90 float8 wgmma keeps 14 bits of its sum, docs/simulator.md
"wgmma numerics"; a row without a ratio, for the comparison of like with like).
"""

from __future__ import annotations

import traceback

import norms

from gemm import GEMM_TOL, STRICT, _log, cell, first_line, rel_error, sci
from tirx_cuda_dispatch import runtime

# issue 32's shapes (M, N, K)
SHAPES = [
    (4096, 4096, 4096),
    (6144, 6144, 6144),
    (8192, 8192, 8192),
    (4000, 4000, 4000),
    (8192, 8192, 1024),
    (16384, 1024, 4096),
    (1024, 16384, 4096),
]
DTYPES = ("float16", "bfloat16")
EPILOGUES = ("plain", "bias_relu")
WS_CONFIG = {"stages": 4}  # the grid is the GPU's SM count
TORCH = {"plain": "torch matmul", "bias_relu": "torch addmm+relu", "scaled": "torch _scaled_mm"}
FAST_ACCUM = "torch _scaled_mm fast_accum"  # float8 only: no ratio against it
FP8_SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192)]


def contender(design: str, epilogue: str) -> str:
    return f"ours {design} {epilogue}"


def build(design: str, shape, dtype: str, epilogue: str, sms: int):
    """The example's kernel for ``shape`` (``design``: "ws", "ws c1" (no cluster) or
    "hopper"), built strict."""
    if design.startswith("ws"):
        cluster = {"cluster": 1} if design == "ws c1" else {}
        func = norms.example("gemm_hopper_ws").gemm_kernel(
            *shape, dtype=dtype, epilogue=epilogue, grid=sms, **WS_CONFIG, **cluster
        )
    else:
        func = norms.example("gemm_hopper").gemm_kernel(*shape, stages=4, epilogue=epilogue)
    return runtime.build(func, runtime.gpu_arch(), STRICT)[runtime.entry_name(func)]


def designs_for(shape, dtype: str, epilogue: str) -> list[str]:
    """examples/gemm_hopper.py takes float16 tiles only; "ws c1" where the example pairs
    CTAs (float16, plain)."""
    m, n, k = shape
    hopper = dtype == "float16" and not (m % 128 or n % 256 or k % 64)
    paired = norms.example("gemm_hopper_ws").default_cluster(m, n) == 2
    unpaired = paired and dtype == "float16" and epilogue == "plain"
    return ["ws"] + (["ws c1"] if unpaired else []) + (["hopper"] if hopper else [])


def measure(gpu, shape, dtype: str, args) -> list[dict]:
    torch = gpu.torch
    kind = {"float16": torch.float16, "bfloat16": torch.bfloat16}[dtype]
    m, n, k = shape
    gen = torch.Generator(device="cuda").manual_seed(17 + m + n)
    a = (2 * torch.rand(m, k, device="cuda", generator=gen) - 1).to(kind)
    b = (2 * torch.rand(k, n, device="cuda", generator=gen) - 1).to(kind)
    bias = (2 * torch.rand(n, device="cuda", generator=gen) - 1).to(kind)
    product = a.double() @ b.double()
    refs = {"plain": product, "bias_relu": torch.relu(product + bias.double())}
    fns, errors, notes = {}, {}, {}
    import tvm

    for epilogue in EPILOGUES:
        for design in designs_for(shape, dtype, epilogue):
            name = contender(design, epilogue)
            _log(f"build gemm_ws {m}x{n}x{k} {dtype} {name}")
            try:
                fn = build(design, shape, dtype, epilogue, gpu.sms)
                c = torch.full((m, n), float("nan"), dtype=kind, device="cuda")
                tensors = [tvm.runtime.from_dlpack(t) for t in (a, b, bias, c)]
                fn(*tensors)
                torch.cuda.synchronize()
            except Exception as exc:  # noqa: BLE001  # a kernel that cannot be had is a row
                notes[name] = f"cannot run: {first_line(exc)}"
                continue
            errors[name] = rel_error(torch, c, refs[epilogue])
            if not errors[name] <= GEMM_TOL:
                notes[name] = f"wrong result: max err / max ref {errors[name]:.3g}"
                continue
            fns[name] = lambda fn=fn, tensors=tensors: fn(*tensors)
    fns[TORCH["plain"]] = lambda: torch.matmul(a, b)
    fns[TORCH["bias_relu"]] = lambda: torch.relu(torch.addmm(bias, a, b))
    errors[TORCH["plain"]] = rel_error(torch, torch.matmul(a, b), product)
    errors[TORCH["bias_relu"]] = rel_error(
        torch, torch.relu(torch.addmm(bias, a, b)), refs["bias_relu"]
    )
    del product, refs
    ms = norms.time_queued(torch, fns, batch=10, reps=args.reps)
    return rows_of(shape, dtype, ms, errors, notes)


def measure_fp8(gpu, shape, args) -> list[dict]:
    """Float8 e4m3 with per-tensor scales into bfloat16: ours against torch._scaled_mm."""
    torch = gpu.torch
    m, n, k = shape
    gen = torch.Generator(device="cuda").manual_seed(23 + m)
    a = (4 * torch.rand(m, k, device="cuda", generator=gen) - 2).to(torch.float8_e4m3fn)
    bt = (4 * torch.rand(n, k, device="cuda", generator=gen) - 2).to(torch.float8_e4m3fn)
    sa = torch.tensor(0.5, device="cuda")
    sb = torch.tensor(0.75, device="cuda")
    scale = (sa * sb).reshape(1).float()
    ref = (a.double() @ bt.double().T) * float(scale)
    fns, errors, notes = {}, {}, {}
    name = contender("ws", "scaled")
    import tvm

    try:
        fn = build("ws", shape, "float8_e4m3fn", "scaled", gpu.sms)
        c = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
        tensors = [tvm.runtime.from_dlpack(t) for t in (a, bt, scale, c)]
        fn(*tensors)
        torch.cuda.synchronize()
        errors[name] = rel_error(torch, c, ref)
        if errors[name] <= GEMM_TOL:
            fns[name] = lambda: fn(*tensors)
        else:
            notes[name] = f"wrong result: max err / max ref {errors[name]:.3g}"
    except Exception as exc:  # noqa: BLE001  # a kernel that cannot be had is a row
        notes[name] = f"cannot run: {first_line(exc)}"
    twin = TORCH["scaled"]

    def scaled_mm():
        return torch._scaled_mm(a, bt.t(), sa, sb, out_dtype=torch.bfloat16)

    def scaled_mm_fast():
        return torch._scaled_mm(a, bt.t(), sa, sb, out_dtype=torch.bfloat16, use_fast_accum=True)

    errors[twin] = rel_error(torch, scaled_mm(), ref)
    fns[twin] = scaled_mm
    errors[FAST_ACCUM] = rel_error(torch, scaled_mm_fast(), ref)
    fns[FAST_ACCUM] = scaled_mm_fast
    del ref
    ms = norms.time_queued(torch, fns, batch=10, reps=args.reps)
    return rows_of(shape, "float8_e4m3fn", ms, errors, notes)


def rows_of(shape, dtype: str, ms: dict, errors: dict, notes: dict) -> list[dict]:
    """One row per contender: TFLOP/s, and ours over torch's twin (a speed)."""
    m, n, k = shape
    flops = 2 * m * n * k
    rows = []
    names = [contender(d, e) for e in (*EPILOGUES, "scaled") for d in ("ws", "ws c1", "hopper")]
    names += [*TORCH.values(), FAST_ACCUM]
    for name in names:
        t = ms.get(name)
        if t is None and name not in notes:
            continue
        row = {"shape": f"{m}x{n}x{k}", "dtype": dtype, "contender": name}
        if t is not None:
            row["TFLOP/s"] = flops / (t * 1e-3) / 1e12
            twin = TORCH.get(name.rsplit(" ", 1)[-1])
            row["speed / torch"] = ms[twin] / t if twin in ms and name.startswith("ours") else ""
        row["max err / max ref"] = sci(errors[name]) if name in errors else ""
        row["note"] = cell(notes.get(name, ""))
        rows.append(row)
    return rows


def part_gemm_ws(gpu, args) -> list[dict]:
    rows = []
    for shape in SHAPES:
        for dtype in DTYPES:
            try:
                rows += measure(gpu, shape, dtype, args)
            except Exception as exc:  # noqa: BLE001  # the other shapes still run
                traceback.print_exc()
                rows.append({"shape": "x".join(map(str, shape)), "dtype": dtype,
                             "note": cell(first_line(exc))})  # fmt: skip
    for shape in FP8_SHAPES:
        try:
            rows += measure_fp8(gpu, shape, args)
        except Exception as exc:  # noqa: BLE001
            traceback.print_exc()
            rows.append({"shape": "x".join(map(str, shape)), "dtype": "float8_e4m3fn",
                         "note": cell(first_line(exc))})  # fmt: skip
    return rows
