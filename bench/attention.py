"""Part 8h of bench/run.py: the FlashAttention forward of examples/attention.py against
``torch.nn.functional.scaled_dot_product_attention`` with the cuDNN backend and the flash
backend (FlashAttention-2), at issue 33's shapes.

For each (sequence, head dim, causal, dtype) at ``HEADS`` query heads (B*H): Q, K, V
standard normal; each of ours built strict and run once with O and LSE poisoned (NaN),
then it and both torch backends are checked on ``CHECK_HEADS`` heads against a float32
torch reference (max |O - ref| within ``4 u max |V|`` as examples/attention.py's bound,
``u`` the unit roundoff of O's type), then all contenders of the configuration are timed
in one interleaved run (``norms.time_queued``). TFLOP/s counts ``4 B H S^2 D`` (halved
for causal); speeds are torch's time over ours (above 1, ours is faster). Ours, at every
shape: "ws", examples/attention.py's ``attention_ws_kernel`` (a TMA producer warpgroup,
two consumers (three at head dim 64) in ping-pong with the intra-warpgroup overlap,
128-row key tiles (80 at head dim 256), the lagged reference max, O out by TMA), and "sm80", examples/attention_sm80.py (FlashAttention-2's
structure: cp.async, ldmatrix, mma.sync; issue 33 asks it to reach the flash backend);
at ``ABLATIONS`` also the kernel with a piece taken away or changed ("direct store": O
from registers; "two rings": a ring each for K and V, head dim 256's default, and "one
ring", K and V on one ring, at head dim 256; "no lag": every tile's softmax whole (its row
max before the exponentials, O rescaled each tile: the default before ``lagged_max``);
"two consumers": two at causal head dim 64's 4,096 rows (the default there without the
lagged max); "all tiles": every consumer computes every key tile of its CTA's (causal: to
the last consumer's diagonal; a ragged last block's rows past the end too), the default
before ``own_tiles``; "section 1": causal kernels of one CTA a block launched head after
head (each head's blocks heaviest first), the order before ``section``; "unbalanced": at
1,024 rows of head dim 64, five 192-row blocks and one of 64 a head over six CTAs, the
grid before ``balanced``; "no pdl": launched without programmatic dependent launch,
the default before ``pdl``; "three stages": head dim 64's ring of three stages, the
default there before four; "vote", "warp check" and "block check": the lagged max's bound
checked by a warpgroup vote each key tile (``lag_check="tile"``), by each warp, rebasing its
own rows (``"warp"``), or once a block with a redo (``"block"``), against the default
there; "sm80 no lag": examples/attention_sm80.py without its lagged max; "no
overlap"; "n64": 64-row key tiles (at
head dim 256 against its default, FA3's 80); "c2": two consumers at head dim 64; "per
block": one CTA a query block ("per block c3": with three consumers, causal head dim 64's
default before its blocks paired); "no obuf" / "obuf": O out through Q's rows or a buffer
of its own, against the default there; "row sums" / "lane sums": the rows' sums of P
added over the quad once a key tile or once a block, against the default there; "n176",
FA3's 176-key tiles at head dim 128, is no ablation: it measured level or slower,
docs/performance.md) and "wg",
``attention_kernel`` (one warpgroup per 64 rows, no TMA); at ``WIDE`` head dim 256. Ours
also writes the row log-sum-exp; the torch calls (inference, no grad) do not.

``python3 bench/attention.py --seqs 4096 --dims 128`` runs a subset without run.py.
"""

from __future__ import annotations

import argparse
import json
import sys
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench"))

import norms  # noqa: E402

from gemm import STRICT, _log, cell, first_line, sci  # noqa: E402
from tirx_cuda_dispatch import runtime  # noqa: E402

HEADS = 64  # B*H query heads (issue 33: 64 to 128)
SEQS = (1024, 4096, 8192, 16384)
DIMS = (64, 128)
CAUSAL = (False, True)
DTYPES = ("float16", "bfloat16")
DESIGNS = {  # name: (the example, its function, its keywords)
    "ws": ("attention", "attention_ws_kernel", {}),
    # (O from registers: no O buffer either)
    "ws direct store": ("attention", "attention_ws_kernel", {"tma_store": False}),
    # the next three: O through Q's rows, as the kernel they are measured against ("ws no
    # obuf" at 4096 x 128; the O buffer forces two stages of two rings at head dim 128)
    "ws no overlap": ("attention", "attention_ws_kernel", {"overlap": False, "o_buffer": False}),
    "ws n64 no overlap": (
        "attention",
        "attention_ws_kernel",
        {"overlap": False, "block_n": 64, "o_buffer": False},
    ),
    "wg": ("attention", "attention_kernel", {}),
    "ws c2": ("attention", "attention_ws_kernel", {"consumers": 2, "o_buffer": False}),
    # one CTA a query block (the default for non-causal kernels is a persistent grid): O
    # through Q's rows, the default stages, the row sums per lane
    "ws per block": ("attention", "attention_ws_kernel", {"persistent": False, "lane_sums": True}),
    "ws one ring": ("attention", "attention_ws_kernel", {"split_kv": False}),
    "ws two rings": ("attention", "attention_ws_kernel", {"split_kv": True, "o_buffer": False}),
    "ws n64": ("attention", "attention_ws_kernel", {"block_n": 64}),  # head dim 256's before
    "sm80": ("attention_sm80", "attention_sm80_kernel", {}),  # cp.async + mma.sync
    # the row sums of P added over the quad every tile (sm80's default before lane sums)
    "sm80 row sums": ("attention_sm80", "attention_sm80_kernel", {"lane_sums": False}),
    "sm80 no lag": ("attention_sm80", "attention_sm80_kernel", {"lagged_max": False}),
    # one exponential of P in k on the FMA pipe (FlashAttention-4's emulation)
    **{f"ws e{k}": ("attention", "attention_ws_kernel", {"ex2_emulation": k}) for k in (3, 4, 6)},
    # causal on a persistent grid: a CTA takes query blocks p and blocks - 1 - p of a head
    "ws persistent": ("attention", "attention_ws_kernel", {"persistent": True}),
    "ws persistent c2": ("attention", "attention_ws_kernel", {"persistent": True, "consumers": 2}),
    # the persistent grid's Q behind one full and one empty mbarrier (before q_split)
    "ws q whole": ("attention", "attention_ws_kernel", {"q_split": False}),
    # FA3's key tile at head dim 128 non-causal: 176 keys, two stages of two rings (O out
    # through Q's rows: with an O buffer too they need more shared memory than a CTA has)
    "ws n176": (
        "attention",
        "attention_ws_kernel",
        {"block_n": 176, "stages": 2, "split_kv": True, "o_buffer": False},
    ),
    # O out through Q's rows (Q freed after the store) or a buffer of its own (Q freed
    # after the last Q K^T), against the default there
    "ws no obuf": ("attention", "attention_ws_kernel", {"o_buffer": False}),
    "ws obuf": ("attention", "attention_ws_kernel", {"o_buffer": True}),
    # causal head dim 64 before the blocks paired there: three consumers, one CTA a block
    "ws per block c3": ("attention", "attention_ws_kernel", {"persistent": False, "consumers": 3}),
    # the rows' sums of P added over the quad once a block (lane_sums) or once a key tile
    "ws lane sums": ("attention", "attention_ws_kernel", {"lane_sums": True}),
    "ws row sums": ("attention", "attention_ws_kernel", {"lane_sums": False}),
    # every tile's softmax whole (the default before the lagged reference max)
    "ws no lag": ("attention", "attention_ws_kernel", {"lagged_max": False}),
    "ws two consumers": ("attention", "attention_ws_kernel", {"consumers": 2}),
    # every consumer computes every key tile of the CTA's (the default before own_tiles)
    "ws all tiles": ("attention", "attention_ws_kernel", {"own_tiles": False}),
    # (causal, one CTA a block) each head's blocks heaviest first, head after head
    "ws section 1": ("attention", "attention_ws_kernel", {"section": 1}),
    # (1,024 rows, head dim 64) five 192-row blocks and one of 64 over six CTAs a head
    "ws unbalanced": ("attention", "attention_ws_kernel", {"balanced": False}),
    # launched without programmatic dependent launch (the default before pdl)
    "ws no pdl": ("attention", "attention_ws_kernel", {"pdl": False}),
    # three stages of the ring at head dim 64 (the default there before four)
    "ws three stages": ("attention", "attention_ws_kernel", {"stages": 3}),
    # the lagged max's bound checked once a block (a flag per thread, a warp recomputes its
    # rows with mma.sync where it tripped) instead of a warpgroup vote every key tile
    "ws block check": ("attention", "attention_ws_kernel", {"lag_check": "block"}),
    # the lagged max's bound checked by a warpgroup vote every key tile and the lagged tile
    # computed again where it passed (the default causal at head dim 128 and at 256), or
    # each warp rebasing its own rows where its vote passed (the default elsewhere)
    "ws vote": ("attention", "attention_ws_kernel", {"lag_check": "tile"}),
    "ws warp check": ("attention", "attention_ws_kernel", {"lag_check": "warp"}),
}
MAIN = ("ws", "sm80")  # at every shape; the others (ablations) at their ABLATIONS shape only
ABLATIONS = {  # (seq, head dim, causal, dtype): the designs timed together there
    (4096, 128, False, "float16"): ("ws", "ws no lag", "ws per block", "ws direct store",
                                    "ws two rings", "ws no overlap", "ws n64 no overlap", "wg",
                                    "ws no obuf", "ws block check", "ws vote"),
    (4096, 256, False, "float16"): ("ws", "ws no lag", "ws one ring", "ws n64"),
    (8192, 256, True, "float16"): ("ws", "ws no lag", "ws n64"),
    (1024, 128, False, "float16"): ("ws", "ws no lag", "ws per block", "ws no obuf", "ws row sums"),
    (8192, 128, False, "float16"): ("ws", "ws no lag"),
    (1024, 64, False, "float16"): ("ws", "ws no lag", "ws per block", "ws no obuf",
                                   "ws unbalanced", "ws no pdl", "ws block check", "ws vote"),
    (4096, 64, False, "float16"): ("ws", "ws no lag", "ws c2", "sm80", "sm80 row sums",
                                   "ws three stages", "ws block check", "ws vote"),
    (1024, 128, True, "float16"): ("ws", "ws no lag", "ws no obuf", "ws no pdl", "ws warp check"),
    (4096, 64, True, "float16"): ("ws", "ws no lag", "ws two consumers", "ws section 1",
                                  "ws all tiles", "ws block check", "ws vote"),
    (8192, 64, True, "float16"): ("ws", "ws section 1", "ws all tiles"),
    (16384, 64, False, "float16"): ("ws", "ws no lag", "ws row sums", "sm80", "sm80 row sums",
                                    "ws three stages", "ws vote"),
}  # fmt: skip
# head dim 256: float16 only
WIDE = {(seq, 256, causal, "float16"): ("ws", "sm80") for causal in CAUSAL for seq in SEQS}
CHECK_HEADS = (0, HEADS - 1)
CUDNN, FLASH = "torch sdpa cudnn", "torch sdpa flash"


def contender(design: str) -> str:
    return f"ours {design}"


def build(design: str, seq: int, d: int, causal: bool, dtype: str):
    """The design's example kernel, built strict for the local GPU."""
    example, name, keywords = DESIGNS[design]
    make = getattr(norms.example(example), name)
    func = make(HEADS, seq, d, causal=causal, dtype=dtype, **keywords)
    return runtime.build(func, runtime.gpu_arch(), STRICT)[runtime.entry_name(func)]


def cost_contender(torch, seq: int, d: int, causal: bool, dtype: str = "float16"):
    """(name, the kernel, its launch) of the ``ws`` design for bench part 10 (the cost
    model), run once into a poisoned O and checked against a float32 reference."""
    import tvm

    example, name, keywords = DESIGNS["ws"]
    func = getattr(norms.example(example), name)(HEADS, seq, d, causal=causal, dtype=dtype,
                                                 **keywords)  # fmt: skip
    fn = runtime.build(func, runtime.gpu_arch(), STRICT)[runtime.entry_name(func)]
    kind = {"float16": torch.float16, "bfloat16": torch.bfloat16}[dtype]
    gen = torch.Generator(device="cuda").manual_seed(29 + seq + d)
    q, k, v = (torch.randn(HEADS, seq, d, device="cuda", generator=gen).to(kind) for _ in range(3))
    o = torch.full((HEADS, seq, d), float("nan"), dtype=kind, device="cuda")
    lse = torch.full((HEADS, seq), float("nan"), dtype=torch.float32, device="cuda")
    tensors = [tvm.runtime.from_dlpack(t) for t in (q, k, v, o, lse)]
    fn(*tensors)
    torch.cuda.synchronize()
    err = o_error(torch, o, q, k, v, causal)
    if not err <= 1:
        raise RuntimeError(f"attention {seq} x {d}: max err / bound {err:.3g}")
    mask = "causal" if causal else "full"
    return f"attention ws {HEADS}x{seq}x{d} {mask}", func, lambda: fn(*tensors)


def o_error(torch, o, q, k, v, causal: bool) -> float:
    """max |O - ref| / (4 u max |V|) over ``CHECK_HEADS`` (a float32 reference): at most 1
    is within examples/attention.py's bound; NaN where O has a NaN."""
    unit = 2.0**-11 if o.dtype == torch.float16 else 2.0**-8
    worst = 0.0
    for h in CHECK_HEADS:
        qh, kh, vh = (x[h].float() for x in (q, k, v))
        s = (qh @ kh.T) / qh.shape[-1] ** 0.5
        if causal:
            n = s.shape[-1]
            s = s.masked_fill(
                torch.ones(n, n, device=s.device, dtype=torch.bool).triu(1), -float("inf")
            )
        ref = torch.softmax(s, dim=-1) @ vh
        diff = (o[h].float() - ref).abs()
        if torch.isnan(diff).any():
            return float("nan")
        worst = max(worst, float(diff.max()) / (4 * unit * float(vh.abs().max())))
    return worst


def measure(gpu, seq: int, d: int, causal: bool, dtype: str, args, designs=MAIN) -> list[dict]:
    torch = gpu.torch
    import torch.nn.functional as F
    import tvm
    from torch.nn.attention import SDPBackend, sdpa_kernel

    kind = {"float16": torch.float16, "bfloat16": torch.bfloat16}[dtype]
    gen = torch.Generator(device="cuda").manual_seed(29 + seq + d)
    q, k, v = (torch.randn(HEADS, seq, d, device="cuda", generator=gen).to(kind) for _ in range(3))
    fns, errors, notes = {}, {}, {}
    for design in designs:
        name = contender(design)
        _log(f"build attention s{seq} d{d} {'causal' if causal else 'full'} {dtype} {name}")
        try:
            fn = build(design, seq, d, causal, dtype)
            o = torch.full((HEADS, seq, d), float("nan"), dtype=kind, device="cuda")
            lse = torch.full((HEADS, seq), float("nan"), dtype=torch.float32, device="cuda")
            tensors = [tvm.runtime.from_dlpack(t) for t in (q, k, v, o, lse)]
            fn(*tensors)
            torch.cuda.synchronize()
        except Exception as exc:  # noqa: BLE001  # a kernel that cannot be had is a row
            notes[name] = f"cannot run: {first_line(exc)}"
            continue
        errors[name] = o_error(torch, o, q, k, v, causal)
        if not errors[name] <= 1:
            notes[name] = f"wrong result: max err / bound {errors[name]:.3g}"
            continue
        fns[name] = lambda fn=fn, tensors=tensors: fn(*tensors)
    q4, k4, v4 = (x.view(1, HEADS, seq, d) for x in (q, k, v))
    for name, backend in ((CUDNN, SDPBackend.CUDNN_ATTENTION), (FLASH, SDPBackend.FLASH_ATTENTION)):

        def sdpa(backend=backend):
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(q4, k4, v4, is_causal=causal)

        try:
            errors[name] = o_error(torch, sdpa()[0], q, k, v, causal)
            fns[name] = sdpa
        except Exception as exc:  # noqa: BLE001  # a backend this torch lacks is a row
            notes[name] = f"cannot run: {first_line(exc)}"
    torch.cuda.synchronize()
    batch = max(1, min(10, int(4e8 // (seq * seq * d))))  # about 10 ms a batch
    ms = norms.time_queued(torch, fns, batch=batch, reps=args.reps)
    return rows_of(seq, d, causal, dtype, ms, errors, notes, designs)


def rows_of(seq, d, causal, dtype, ms, errors, notes, designs) -> list[dict]:
    flops = 4 * HEADS * seq * seq * d / (2 if causal else 1)
    rows = []
    for name in [*map(contender, designs), CUDNN, FLASH]:
        t = ms.get(name)
        if t is None and name not in notes:
            continue
        row = {"B*H x S x D": f"{HEADS}x{seq}x{d}", "mask": "causal" if causal else "none",
               "dtype": dtype, "contender": name}  # fmt: skip
        if t is not None:
            row["TFLOP/s"] = flops / (t * 1e-3) / 1e12
            ours = name.startswith("ours")
            for twin, col in ((CUDNN, "speed / cudnn"), (FLASH, "speed / flash")):
                row[col] = ms[twin] / t if ours and twin in ms else ""
        row["max err / bound"] = sci(errors[name]) if name in errors else ""
        row["note"] = cell(notes.get(name, ""))
        rows.append(row)
    return rows


def part_attention(gpu, args, seqs=SEQS, dims=DIMS, causals=CAUSAL, dtypes=DTYPES,
                   designs=MAIN, ablations=ABLATIONS, wide=WIDE, main=True) -> list[dict]:  # fmt: skip
    """Every shape with ``designs`` (unless not ``main``), then each shape of ``wide``
    (head dim 256) and of ``ablations`` with its designs: what each piece of the kernel
    buys."""
    configs = [(seq, d, causal, dtype, designs) for dtype in dtypes for d in dims
               for causal in causals for seq in seqs if main]  # fmt: skip
    configs += [(*shape, names) for shape, names in (wide or {}).items()]
    configs += [(*shape, names) for shape, names in (ablations or {}).items()]
    rows = []
    for seq, d, causal, dtype, names in configs:
        try:
            rows += measure(gpu, seq, d, causal, dtype, args, names)
        except Exception as exc:  # noqa: BLE001  # the other shapes still run
            traceback.print_exc()
            rows.append({"B*H x S x D": f"{HEADS}x{seq}x{d}", "dtype": dtype,
                         "note": cell(first_line(exc))})  # fmt: skip
    return rows


def main() -> int:
    import run

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seqs", default=",".join(map(str, SEQS)))
    parser.add_argument("--dims", default=",".join(map(str, DIMS)))
    parser.add_argument("--causal", default="0,1")
    parser.add_argument("--dtypes", default=",".join(DTYPES))
    parser.add_argument("--designs", default=",".join(MAIN), help="comma-separated")
    parser.add_argument("--ablations", action="store_true", help="and the ABLATIONS shapes")
    parser.add_argument("--wide", action="store_true", help="and head dim 256 (WIDE)")
    parser.add_argument("--no-main", action="store_true", help="only --ablations / --wide")
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--json", type=Path, help="the rows, for bench/run.py's docs")
    args = parser.parse_args()
    rows = part_attention(
        run.Gpu(), args,
        seqs=[int(s) for s in args.seqs.split(",")],
        dims=[int(s) for s in args.dims.split(",")],
        causals=[bool(int(c)) for c in args.causal.split(",")],
        dtypes=args.dtypes.split(","),
        designs=args.designs.split(","),
        ablations=ABLATIONS if args.ablations else None,
        wide=WIDE if args.wide else None,
        main=not args.no_main,
    )  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2, default=str))
    print(run.markdown_table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
