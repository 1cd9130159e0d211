"""``tirx-dispatch`` / ``python -m tirx_cuda_dispatch``: the demo and the variant listing.

``demo`` lowers the seed program of each landed variant through our pipeline, prints its
explain() report and the emitted CUDA kernel, compiles it with NVRTC and shows the memory
instructions of its SASS, and runs its round trip when a CUDA GPU is present.
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
        k: v for k, v in sorted(counts.items()) if re.match(r"(LD|ST)(G|S|L)?\b|LDG|STG|LDS|STS", k)
    }
    return ", ".join(f"{k} x{v}" for k, v in keep.items()) or "(none)"


def demo(arch: str) -> int:
    from . import demos, explain, runtime, toolchain

    func = demos.gmem_smem_roundtrip("float32", (32, 32), scope="warp")
    print("== copy -> gmem_smem: a warp copies a 32x32 float32 tile global -> shared -> global")
    print(explain(func, arch))
    source = toolchain.cuda_source(func, arch)
    print(f"\n-- emitted CUDA kernel ({arch}) --")
    print(_kernel_text(source).strip())
    sass = toolchain.sass(toolchain.nvrtc_compile(source, arch))
    print(f"\n-- SASS memory instructions (NVRTC, {arch}) --")
    print(_memory_opcodes(toolchain.opcodes(sass)))
    gpu = runtime.gpu_arch()
    if gpu is None:
        print("\nno CUDA GPU here: round trip not run (the lowering above is the demo)")
        return EXIT_OK
    rng = np.random.default_rng(0)
    a = runtime.random_array((32, 32), "float32", rng)
    out = runtime.run(
        runtime.build(func, gpu), runtime.entry_name(func), [a, runtime.poison_like(a)]
    )
    same = np.array_equal(runtime.bits(out[1]), runtime.bits(a))
    print(f"\nround trip on the GPU ({gpu}): {'exact' if same else 'WRONG'}")
    return EXIT_OK if same else EXIT_FAILED


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
