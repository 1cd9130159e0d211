"""What each piece of the attention kernel's online softmax costs: examples/attention.py's
``attention_ws_kernel`` (its defaults, but every tile's softmax whole: ``lagged_max=False``,
the kernel this study led to replace) timed whole and with one piece of
``softmax_rows`` left out, against torch's cuDNN and flash backends in the same
interleaved run (``norms.time_queued``).

The pieces: the tile's row max (``max -> local``: folds and two shuffles over the quad;
left out, the running max stands in for the new one), the row sums of P (``sum ->
local`` and ``l = l alpha + rowsum``, or the lanes' parts with ``lane_sums``), the
exponentials of P (``exp2`` with scale and bias: an FFMA and a MUFU.EX2 an element).
A kernel without a piece computes a wrong O (or NaN): these kernels are timed only,
never checked, and a row's speed against the whole kernel is what the piece costs on
the kernel's critical path (an upper bound on what a cheaper form of it could give).
The torch rows' speed column is theirs against the whole kernel (below 1: ours is
faster). ``softmax_rows`` here is the example's with the pieces taken out; a test checks
the whole one lowers to the same calls as the example's own.

``python3 bench/softmax_costs.py --shapes 4096x64,8192x64c,1024x128,4096x128``
(``c``: causal), float16, B*H 64.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench"))

import norms  # noqa: E402

from gemm import STRICT  # noqa: E402
from tirx_cuda_dispatch import runtime  # noqa: E402

HEADS = 64
SHAPES = "4096x64,8192x64c,1024x128,4096x128"
LEFT_OUT = {  # name: the pieces of softmax_rows left out
    "whole": (),
    "no row max": ("max",),
    "no row sum": ("sum",),
    "no exp2": ("exp",),
    "no max, no sum": ("max", "sum"),
}


def example_without(left_out: tuple[str, ...]):
    """examples/attention.py with ``softmax_rows`` lacking the ``left_out`` pieces (a
    module of its own: the kernel parses the patched function)."""
    module = norms.example.__wrapped__("attention")  # not the cached module: patched here
    whole = module.softmax_rows
    if not left_out:
        return module
    T, wg = module.T, module.Tx.wg

    def softmax_rows(S_r, m_old, m_new, alpha, l_sum, l_tile, scale, tx=wg, ex2_emulation=0):
        if "max" in left_out:
            tx.copy(m_new[:, :], m_old[:, :])
        else:
            tx.max(m_new[:, :], S_r[:, :], axes=[-1])
        tx.maximum(m_new[:, :], m_new[:, :], m_old[:, :])
        tx.sub(alpha[:, :], m_old[:, :], m_new[:, :])
        tx.exp2(alpha[:, :], alpha[:, :], scale=T.float32(scale))
        tx.mul(l_tile[:, :], m_new[:, :], T.float32(-scale))
        if "exp" not in left_out:
            emulate = {"ex2_emulation": ex2_emulation} if ex2_emulation else {}
            tx.exp2(S_r[:, :], S_r[:, :], bias=l_tile[:, :], scale=T.float32(scale), **emulate)
        if "sum" not in left_out:
            if int(l_sum.shape[1]) == 1:
                tx.sum(l_tile[:, :], S_r[:, :], axes=[-1])
                tx.fma(l_sum[:, :], l_sum[:, :], alpha[:, :], l_tile[:, :])
            else:
                tx.mul(l_sum[:, :], l_sum[:, :], alpha[:, :])
                tx.sum(l_sum[:, :], S_r[:, :], axes=[-1], accum=True)

    softmax_rows.__doc__ = whole.__doc__
    module.softmax_rows = softmax_rows
    return module


def measure(gpu, seq: int, d: int, causal: bool, reps: int) -> list[str]:
    import torch.nn.functional as F
    import tvm
    from torch.nn.attention import SDPBackend, sdpa_kernel

    torch = gpu.torch
    gen = torch.Generator(device="cuda").manual_seed(31 + seq + d)
    q, k, v = (
        torch.randn(HEADS, seq, d, device="cuda", generator=gen).to(torch.float16) for _ in range(3)
    )
    fns = {}
    for name, left_out in LEFT_OUT.items():
        func = example_without(left_out).attention_ws_kernel(
            HEADS, seq, d, causal=causal, lagged_max=False
        )
        fn = runtime.build(func, runtime.gpu_arch(), STRICT)[runtime.entry_name(func)]
        o = torch.empty((HEADS, seq, d), dtype=torch.float16, device="cuda")
        lse = torch.empty((HEADS, seq), dtype=torch.float32, device="cuda")
        tensors = [tvm.runtime.from_dlpack(t) for t in (q, k, v, o, lse)]
        fns[name] = lambda fn=fn, tensors=tensors: fn(*tensors)
    q4, k4, v4 = (x.view(1, HEADS, seq, d) for x in (q, k, v))
    for name, backend in (
        ("cudnn", SDPBackend.CUDNN_ATTENTION),
        ("flash", SDPBackend.FLASH_ATTENTION),
    ):

        def sdpa(backend=backend):
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(q4, k4, v4, is_causal=causal)

        fns[name] = sdpa
    batch = max(1, min(10, int(4e8 // (seq * seq * d))))
    ms = norms.time_queued(torch, fns, batch=batch, reps=reps)
    flops = 4 * HEADS * seq * seq * d / (2 if causal else 1)
    shape = f"{HEADS}x{seq}x{d}{' causal' if causal else ''}"
    return [
        f"| {shape} | {name} | {ms[name] * 1e3:.1f} | {flops / (ms[name] * 1e-3) / 1e12:.1f} "
        f"| {ms['whole'] / ms[name]:.3f} |"
        for name in ms
    ]


def main() -> int:
    import run

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default=SHAPES, help="SxD[c], comma-separated")
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    gpu = run.Gpu()
    print("| B*H x S x D | kernel | us | TFLOP/s | speed / whole |")
    print("| --- | --- | ---: | ---: | ---: |")
    for shape in args.shapes.split(","):
        causal = shape.endswith("c")
        seq, d = (int(x) for x in shape.rstrip("c").split("x"))
        for line in measure(gpu, seq, d, causal, args.reps):
            print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
