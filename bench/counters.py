"""What the hardware counters say: examples/gemm_hopper_ws.py against cuBLAS
(``torch.matmul``) and examples/attention.py against cuDNN's and FlashAttention-2's
attention (``torch.nn.functional.scaled_dot_product_attention``), one launch of each read
by Nsight Compute (``ncu``).

The question it answers: where a kernel that is level with its rival per clock spends its
time and its traffic (docs/performance.md: "What the counters say" in part 8g's prose,
"The counters" under "Where 1,024 x 64 non-causal's time goes"). Each kernel runs twice
in a child process under ``ncu`` (no cache flush, the clocks left alone, as in the
timings), inside an NVTX range that ncu reads alone (the setup's kernels are not read);
the second launch of each is read. Columns:

- ``us``, ``MHz``: the launch's duration and its SM clock under ncu (its replays run
  slower than the timed kernels do);
- ``active``: the SMs' active cycles over the elapsed ones (launch, ramp and tail, idle
  SMs);
- ``tensor``, ``xu``, ``uniform``: the tensor pipe's busy cycles, the XU pipe's (MUFU:
  the exponentials) and the uniform datapath's instructions, each in percent of the
  peak over the SMs' active cycles;
- ``Minst``: warp instructions issued, millions;
- ``xbar GB``: bytes L2 delivered to the SMs (a TMA multicast counts for every SM it
  lands in); ``L2 read GB``: bytes the SMs read from L2 (a multicast once);
  ``fabric M``: L2 sectors that crossed between the two L2 partitions, millions;
  ``DRAM MB``: bytes read from DRAM;
- ``spills``: local-memory load and store requests (register spills).

Usage (a machine with a CUDA GPU and Nsight Compute)::

    python3 bench/counters.py [--gemm 4096] [--attention 1024x64] [--dtype float16]
"""

from __future__ import annotations

import argparse
import csv
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

# ncu's metric: what the table makes of it
METRICS = (
    "gpu__time_duration.sum",
    "sm__cycles_elapsed.avg.per_second",
    "sm__cycles_active.avg",
    "sm__cycles_elapsed.avg",
    "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active",
    "sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active",
    "sm__inst_executed_pipe_uniform.avg.pct_of_peak_sustained_active",
    "smsp__inst_executed.sum",
    "l1tex__m_xbar2l1tex_read_bytes.sum",
    "lts__t_sectors_srcunit_tex_op_read.sum",
    "lts__t_sectors_srcunit_ltcfabric.sum",
    "dram__bytes_read.sum",
    "l1tex__t_requests_pipe_lsu_mem_local_op_ld.sum",
    "l1tex__t_requests_pipe_lsu_mem_local_op_st.sum",
)
RANGE = "measured"  # the NVTX range around the launches read (the setup's are not)
LABELS = (  # a kernel name's part: its contender
    ("gemm_kernel", "ours ws"),
    ("attention_ws_kernel", "ours ws"),
    ("cudnn", "torch sdpa cudnn"),
    ("flash_fwd", "torch sdpa flash"),
)


def label(kernel: str, case: str) -> str:
    """The contender a kernel name belongs to; any other kernel of a GEMM case is
    cuBLAS's (named by its own name), of another case named as itself."""
    for part, name in LABELS:
        if part in kernel:
            return name
    short = kernel.split("(")[0].removeprefix("void ")[:48]
    return f"torch matmul ({short})" if case.startswith("gemm") else f"other ({short})"


def csv_name(case: str, dtype: str) -> str:
    """The file ncu's CSV of ``case`` in ``dtype`` is kept in."""
    return f"{case.replace(':', '_')}_{dtype}.csv"


def _number(kernel: str, metric: str, text: str) -> float:
    """A CSV value (thousands separated by commas); anything else is an error naming it."""
    try:
        return float(text.replace(",", ""))
    except ValueError:
        raise ValueError(f"ncu gave kernel {kernel!r} {metric} = {text!r}, not a number") from None


def parse(text: str) -> dict[str, dict[str, float]]:
    """ncu's ``--csv`` output (``--print-units base``: ns, bytes, Hz): each kernel's
    metrics at its last launch, by kernel name. A metric of METRICS that no row carries,
    or a value that is not a number, is an error naming it (a renamed counter must not
    print as a blank)."""
    rows = list(csv.reader(line for line in text.splitlines() if line.startswith('"')))
    if not rows:
        raise ValueError("ncu printed no CSV rows (was the kernel launched?)")
    head = rows[0]
    at = {k: head.index(k) for k in ("ID", "Kernel Name", "Metric Name", "Metric Value")}
    last: dict[str, int] = {}
    for row in rows[1:]:
        name, launch = row[at["Kernel Name"]], int(row[at["ID"]])
        last[name] = max(launch, last.get(name, launch))
    found: dict[str, dict[str, float]] = {name: {} for name in last}
    for row in rows[1:]:
        name = row[at["Kernel Name"]]
        if int(row[at["ID"]]) == last[name]:
            metric = row[at["Metric Name"]]
            found[name][metric] = _number(name, metric, row[at["Metric Value"]])
    for name, metrics in found.items():
        missing = [m for m in METRICS if m not in metrics]
        if missing:
            raise ValueError(f"ncu gave kernel {name!r} no value for {', '.join(missing)}")
    return found


def table_rows(found: dict[str, dict[str, float]], case: str) -> list[dict]:
    """One row a kernel: the columns of the module's docstring."""
    rows = []
    for name, m in found.items():
        rows.append({
            "case": case,
            "contender": label(name, case),
            "us": m["gpu__time_duration.sum"] / 1e3,
            "MHz": m["sm__cycles_elapsed.avg.per_second"] / 1e6,
            "active": m["sm__cycles_active.avg"] / m["sm__cycles_elapsed.avg"],
            "tensor": m["sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active"],
            "xu": m["sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active"],
            "uniform": m["sm__inst_executed_pipe_uniform.avg.pct_of_peak_sustained_active"],
            "Minst": m["smsp__inst_executed.sum"] / 1e6,
            "xbar GB": m["l1tex__m_xbar2l1tex_read_bytes.sum"] / 1e9,
            "L2 read GB": m["lts__t_sectors_srcunit_tex_op_read.sum"] * 32 / 1e9,
            "fabric M": m["lts__t_sectors_srcunit_ltcfabric.sum"] / 1e6,
            "DRAM MB": m["dram__bytes_read.sum"] / 1e6,
            "spills": m["l1tex__t_requests_pipe_lsu_mem_local_op_ld.sum"]
            + m["l1tex__t_requests_pipe_lsu_mem_local_op_st.sum"],
        })  # fmt: skip
    return sorted(rows, key=lambda r: not r["contender"].startswith("ours"))


def child(case: str, dtype: str) -> None:
    """Launch the case's kernels twice each (run under ncu by :func:`main`)."""
    import torch
    import tvm

    kind = {"float16": torch.float16, "bfloat16": torch.bfloat16}[dtype]
    what, size = case.split(":")
    if what == "gemm":
        import gemm_ws

        m = n = k = int(size)
        a, b, bias = ((2 * torch.rand(s, device="cuda") - 1).to(kind) for s in ((m, k), (k, n), n))
        c = torch.empty(m, n, dtype=kind, device="cuda")
        sms = torch.cuda.get_device_properties(0).multi_processor_count
        ours = gemm_ws.build("ws", (m, n, k), dtype, "plain", sms)  # part 8g's default build
        tensors = [tvm.runtime.from_dlpack(t) for t in (a, b, bias, c)]
        launches = [lambda: ours(*tensors), lambda: torch.matmul(a, b)]
    else:
        import attention
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel

        seq, d = map(int, size.split("x"))
        q, k_, v = (torch.randn(attention.HEADS, seq, d, device="cuda").to(kind) for _ in "qkv")
        o = torch.empty_like(q)
        lse = torch.empty(attention.HEADS, seq, dtype=torch.float32, device="cuda")
        ours = attention.build("ws", seq, d, False, dtype)
        tensors = [tvm.runtime.from_dlpack(t) for t in (q, k_, v, o, lse)]
        q4, k4, v4 = (x.view(1, attention.HEADS, seq, d) for x in (q, k_, v))

        def sdpa(backend):
            with sdpa_kernel(backend):
                F.scaled_dot_product_attention(q4, k4, v4)

        launches = [lambda: ours(*tensors)] + [
            lambda b=b: sdpa(b) for b in (SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION)
        ]
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_push(RANGE)
    for _ in range(2):
        for launch in launches:
            launch()
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_pop()


def measure(case: str, dtype: str, out: Path) -> list[dict]:
    """Run :func:`child` for ``case`` under ncu and read its counters."""
    command = [
        "ncu", "--csv", "--print-units", "base", "--cache-control", "none",
        "--clock-control", "none", "--nvtx", "--nvtx-include", f"{RANGE}/",
        "--metrics", ",".join(METRICS),
        sys.executable, __file__, "--child", case, "--dtype", dtype,
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, env=os.environ)
    (out / csv_name(case, dtype)).write_text(done.stdout)
    if done.returncode:
        raise RuntimeError(f"ncu exited {done.returncode}: {done.stderr[-2000:]}")
    return table_rows(parse(done.stdout), f"{case} {dtype}")


def main() -> int:
    import run

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gemm", default="4096", help="M = N = K of the GEMM ('' for none)")
    parser.add_argument("--attention", default="1024x64", help="S x D, B*H 64 ('' for none)")
    parser.add_argument("--dtype", default="float16")
    parser.add_argument("--out", type=Path, default=Path("."), help="ncu's CSV goes here")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.dtype)
        return 0
    sizes = (("gemm", args.gemm), ("attention", args.attention))
    cases = [f"{name}:{size}" for name, size in sizes if size]
    rows = [row for case in cases for row in measure(case, args.dtype, args.out)]
    print(run.markdown_table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
