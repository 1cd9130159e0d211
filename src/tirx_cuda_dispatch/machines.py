"""The GPUs the cost model knows: each rate and limit once, with where it comes from.

A :class:`Machine` is data: the SM count and clock, what one SM can move or compute per
clock (shared memory, the tensor pipes, instruction issue), the attainable DRAM and L2
bandwidth of the whole chip, the latencies a CTA waits through when it cannot overlap,
and the limits that decide how many CTAs an SM holds at once. The figures measured here
(bench/run.py, docs/performance.md) are the attainable ones, not the datasheet's: the
model divides by what a kernel can reach, so that "bound by DRAM at 0.97" means 0.97 of
what a device-to-device copy gets on the same GPU.

Nothing here imports TVM: the model (:mod:`.cost`) and its tests run without it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace


class UnknownMachine(ValueError):
    """A machine the cost model has no facts for; the message names the known ones."""


@dataclass(frozen=True)
class Machine:
    """One GPU model. Rates are per SM per SM clock unless named otherwise."""

    name: str
    arch: str  # the compute capability its code is built for ("sm_90a")
    sms: int
    clock_hz: float  # the SM clock the per-clock rates are turned into time with
    dram_bytes_per_s: float  # attainable, read + written, whole chip
    l2_bytes_per_clk: float  # attainable L2 -> SM fill rate, per SM
    shared_bytes_per_clk: int  # one 128-byte wavefront a clock
    issue_per_clk: int  # warp instructions a clock (one per scheduler)
    sfu_per_clk: int  # special-function results a clock (MUFU: ex2, lg2, rcp, rsq, sin, cos)
    # attainable FLOP per clock per SM of each tensor-core path, by input type
    tensor_flop_per_clk: dict[str, dict[str, float]]
    # latencies in SM clocks
    dram_latency_clk: int  # a load that misses L2, issue to use
    shared_latency_clk: int  # a shared-memory load, issue to use
    barrier_clk: int  # a CTA barrier once every warp has arrived
    # what an SM holds at once
    registers_per_sm: int = 65536
    shared_per_sm: int = 233472  # 228 KiB
    shared_reserved_per_cta: int = 1024  # the driver's per-CTA reserve
    threads_per_sm: int = 2048
    ctas_per_sm: int = 32
    register_granule: int = 256  # registers are given to a warp in units of 256
    # where each figure comes from, by field name
    sources: dict[str, str] = field(default_factory=dict)

    def tensor_rate(self, path: str, dtype: str) -> float | None:
        """FLOP per clock per SM of ``path`` ("mma.sync", "wgmma") for ``dtype`` inputs."""
        return self.tensor_flop_per_clk.get(path, {}).get(dtype)

    @property
    def dram_bytes_per_clk(self) -> float:
        """An SM's even share of the chip's DRAM bandwidth, per SM clock."""
        return self.dram_bytes_per_s / self.sms / self.clock_hz


_HOPPER_TENSOR = {
    # mma.sync m16n8k16 with float32 accumulators: part 8a's loop of independent mma
    # (2474 float16, 2490 bfloat16 FLOP/clk/SM on the H200, 2026-11-25)
    "mma.sync": {"float16": 2474.0, "bfloat16": 2490.0},
    # wgmma dense: the H100 whitepaper's 1024 FMA/clk/SM for 16-bit inputs (4096 FLOP),
    # 8192 for 8-bit; the attainable figure is cuBLAS's per clock under the 700 W cap
    # (part 8d: 3276 FLOP/clk/SM, 0.80 of 4096), the same fraction taken for float8
    "wgmma": {
        "float16": 3276.0,
        "bfloat16": 3276.0,
        "float8_e4m3fn": 6552.0,
        "float8_e5m2": 6552.0,
    },  # fmt: skip
}

H200 = Machine(
    name="H200",
    arch="sm_90a",
    sms=132,
    clock_hz=1.98e9,
    dram_bytes_per_s=4.17e12,
    l2_bytes_per_clk=35.0,
    shared_bytes_per_clk=128,
    issue_per_clk=4,
    sfu_per_clk=16,
    tensor_flop_per_clk=_HOPPER_TENSOR,
    dram_latency_clk=1000,
    shared_latency_clk=30,
    barrier_clk=20,
    sources={
        "clock_hz": "nvidia-smi's max SM clock, 1980 MHz; measured 1978-1979 MHz by a clock64 "
        "spin (bench/run.py); a kernel that keeps the tensor pipe busy is held lower by the "
        "700 W cap (part 8d: 1470-1755 MHz)",
        "dram_bytes_per_s": "a device-to-device copy, part 1 (4161-4187 GB/s; datasheet 4.8 TB/s)",
        "l2_bytes_per_clk": "part 8c's fill limit: cp.async.cg 16 B from an L2-resident "
        "buffer, 34.2-35.9 B/clk/SM",
        "shared_bytes_per_clk": "one 128-byte wavefront per clock (32 banks x 4 bytes)",
        "issue_per_clk": "four warp schedulers, one instruction each a clock",
        "sfu_per_clk": "the CUDA C++ Programming Guide's throughput table, compute capability "
        "9.0: 16 results a clock per SM for exp2, log2, reciprocal, rsqrt, sine and cosine",
        "tensor_flop_per_clk": "mma.sync: part 8a; wgmma: 0.80 of the whitepaper's rate, "
        "cuBLAS per clock under the power cap (part 8d)",
        "dram_latency_clk": "about 500 ns from issue to use for a load that misses L2, in "
        "clocks at 1.98 GHz (microbenchmarks of Hopper report 480-580 ns)",
        "shared_latency_clk": "about 30 clocks from a shared load's issue to its use",
        "barrier_clk": "a bar.sync once the last warp arrives, about 20 clocks",
    },
)

# The H100 SXM: the H200's SM at a lower DRAM bandwidth (3.35 TB/s datasheet; the copy's
# fraction of it taken as on the H200, 0.87).
H100 = replace(
    H200,
    name="H100",
    dram_bytes_per_s=2.91e12,
    sources={
        **H200.sources,
        "dram_bytes_per_s": "0.87 of the 3.35 TB/s datasheet figure, the fraction a copy "
        "reaches on the H200 (not measured on an H100 here)",
    },
)

MACHINES = {m.name: m for m in (H200, H100)}


def machine(name: str) -> Machine:
    """The machine named ``name`` (case-insensitive); a clear error naming the known ones."""
    found = {k.lower(): m for k, m in MACHINES.items()}.get(name.lower())
    if found is None:
        raise UnknownMachine(f"no machine facts for {name!r}; known: {', '.join(MACHINES)}")
    return found


def machine_for(arch: str) -> Machine | None:
    """The default machine for a CUDA arch (sm_90 / sm_90a: the H200, the GPU
    docs/performance.md's figures come from); None where the model has no facts."""
    return H200 if arch.removesuffix("a") == "sm_90" else None
