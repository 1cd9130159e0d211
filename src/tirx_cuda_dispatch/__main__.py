"""``tirx-dispatch`` / ``python -m tirx_cuda_dispatch``: the demo and the variant listing.

``demo`` lowers the seed program of each landed variant through our pipeline, prints its
explain() report and the emitted CUDA kernel, compiles it with NVRTC and shows the memory
instructions of its SASS, and runs its round trip when a CUDA GPU is present (float32
sqrt is correctly rounded, so even that check is exact).
"""

from __future__ import annotations

import argparse
import re
import sys

import numpy as np

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def _kernel_text(cuda_source: str) -> str:
    """The ``__global__`` kernel definitions of a TVM CUDA source, without the preamble."""
    starts = [m.start() for m in re.finditer(r'extern "C" __global__', cuda_source)]
    defs = [cuda_source[s:] for s in starts if "{" in cuda_source[s : cuda_source.find(";", s) + 1]]
    return defs[-1] if defs else cuda_source


def _memory_opcodes(counts) -> str:
    keep = {
        k: v
        for k, v in sorted(counts.items())
        if re.match(r"(LD|ST)(G|S|L)?\b|LDG|STG|LDS|STS|LDSM|STSM|LDTM|STTM", k)
    }
    return ", ".join(f"{k} x{v}" for k, v in keep.items()) or "(none)"


def _seed_programs():
    """(title, program, inputs(rng) -> arrays, expected(arrays) -> (output index, array))."""
    from tvm.tirx.layout import Axis, S, TileLayout

    from . import demos, runtime

    rows = TileLayout(S[(32, 8) : (1 @ Axis.laneid, 1)])  # lane i owns row i

    def one(shape, dtype="float32"):
        def inputs(rng):
            a = runtime.random_array(shape, dtype, rng)
            return [a, runtime.poison_like(a)]

        return inputs

    def sqrt_inputs(rng):
        a = np.abs(runtime.random_array((32, 8), "float32", rng)) + np.float32(0.25)
        c, d = (runtime.random_array((32, 8), "float32", rng) for _ in range(2))
        return [a, c, d, runtime.poison_like(a)]

    def fragment_inputs(rng):
        a = runtime.random_array((8, 4, 2, 2), "float16", rng)
        return [a, runtime.poison_like(a), runtime.poison_like(np.zeros((32, 4), "float16"))]

    # Seed 002: two 8x8 float16 matrices, the m8n8 fragment, a row-major shared tile.
    fragment = TileLayout(S[(8, 4, 2, 2) : (4 @ Axis.laneid, 1 @ Axis.laneid, 2, 1)])
    row_major = TileLayout(S[(8, 4, 2, 2) : (16, 2, 8, 1)])

    return [
        (
            "copy -> gmem_smem: a warp copies a 32x32 float32 tile global -> shared -> global",
            demos.gmem_smem_roundtrip("float32", (32, 32), scope="warp"),
            one((32, 32)),
            lambda arrays: (1, arrays[0]),
        ),
        (
            "copy -> reg: a warp round-trips a 32x8 float32 tile shared -> registers -> shared"
            " (lane i owns row i)",
            demos.reg_roundtrip(rows, (32, 8), "float32"),
            one((32, 8)),
            lambda arrays: (1, arrays[0]),
        ),
        (
            "copy -> ldstmatrix: a warp round-trips two 8x8 float16 matrices shared -> "
            "registers -> shared (ldmatrix/stmatrix .x2)",
            demos.ldstmatrix_roundtrip(fragment, row_major, (8, 4, 2, 2), 4),
            fragment_inputs,
            lambda arrays: (1, arrays[0]),
        ),
        (
            "elementwise -> reg: a warp takes sqrt of a 32x8 float32 register tile",
            demos.elementwise_roundtrip("sqrt", rows, (32, 8), "float32"),
            sqrt_inputs,
            lambda arrays: (3, np.sqrt(arrays[0])),
        ),
    ]


def demo(arch: str) -> int:
    from . import explain, runtime, toolchain

    gpu = runtime.gpu_arch()
    failed = False
    for title, func, inputs, expected in _seed_programs():
        print(f"== {title}")
        print(explain(func, arch))
        source = toolchain.cuda_source(func, arch)
        print(f"\n-- emitted CUDA kernel ({arch}) --")
        print(_kernel_text(source).strip())
        sass = toolchain.sass(toolchain.nvrtc_compile(source, arch))
        print(f"\n-- SASS memory instructions (NVRTC, {arch}) --")
        print(_memory_opcodes(toolchain.opcodes(sass)))
        if gpu is None:
            print("\nno CUDA GPU here: round trip not run (the lowering above is the demo)\n")
            continue
        arrays = inputs(np.random.default_rng(0))
        out = runtime.run(runtime.build(func, gpu), runtime.entry_name(func), arrays)
        index, want = expected(arrays)
        same = np.array_equal(runtime.bits(out[index]), runtime.bits(want.astype(out[index].dtype)))
        failed |= not same
        print(f"\nround trip on the GPU ({gpu}): {'exact' if same else 'WRONG'}\n")
    return EXIT_FAILED if failed else EXIT_OK


def variants() -> int:
    from . import list_variants

    for row in list_variants():
        preds = ", ".join(row["predicates"])
        print(
            f"{row['op']:<12} {row['variant']:<14} priority {row['priority']:<3} order {row['order']:<3} [{preds}]"
        )
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tirx-dispatch", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command")
    p_demo = sub.add_parser("demo", help="explain, lower and check the seed programs")
    p_demo.add_argument("--arch", default="sm_90a")
    sub.add_parser("variants", help="list the registered variants in trial order")
    args = parser.parse_args(argv)
    if args.command in (None, "demo"):
        return demo(getattr(args, "arch", "sm_90a"))
    if args.command == "variants":
        return variants()
    parser.print_usage(sys.stderr)
    return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
