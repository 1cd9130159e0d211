"""Offline CUDA checks without a GPU or a system toolkit: CUDA source -> cubin -> SASS.

NVRTC comes from ``cuda-bindings`` with the ``nvidia-cuda-nvrtc`` wheel, the headers from
``nvidia-cuda-runtime`` and ``nvidia-cuda-cccl``, and ``nvdisasm`` from
``nvidia-cuda-nvdisasm`` (all pinned in pyproject.toml). This is how tests read the SASS of
what our variants emit, for any architecture (sm_90a, sm_100a) on a CPU-only machine.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import tempfile
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import tvm

from .irfacts import evaluated_calls
from .isa.bulk import TFLOAT32
from .targets import as_target, describe


class ToolchainError(RuntimeError):
    """NVRTC or nvdisasm is missing, or compilation failed (the log is in the message)."""


def _candidate_roots() -> list[Path]:
    """Where CUDA headers are looked for, in order: the pinned NVIDIA wheels
    (``site-packages/nvidia/cu13``), then ``$CUDA_HOME`` / ``$CUDA_PATH``, the toolkit of
    the ``nvcc`` on PATH, and ``/usr/local/cuda`` (a machine with a system toolkit and
    without our wheels)."""
    roots: list[Path] = []
    try:
        import nvidia

        roots += [Path(base) / "cu13" for base in nvidia.__path__]
    except ImportError:
        pass
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            roots.append(Path(os.environ[var]))
    nvcc = shutil.which("nvcc")
    if nvcc:
        roots.append(Path(os.path.realpath(nvcc)).parent.parent)
    roots.append(Path("/usr/local/cuda"))
    return roots


def _include_dirs(root: Path) -> list[Path]:
    # Toolkits keep CCCL (cuda/std/...) in include/cccl or targets/<arch>/include/cccl.
    incs = [root / "include", root / "targets" / "x86_64-linux" / "include"]
    return [p for inc in incs for p in (inc, inc / "cccl") if p.is_dir()]


# What generated kernels include: the runtime headers and CCCL's libcu++.
_NEEDED_HEADERS = ("cuda_runtime.h", "cuda/std/cstdint")


@lru_cache(maxsize=1)
def cuda_include_dirs() -> tuple[Path, ...]:
    """For each header the kernels need, the first include folder (in search order) that
    has it: the runtime headers and CCCL may come from different places."""
    roots = _candidate_roots()
    dirs = [d for root in roots for d in _include_dirs(root)]
    chosen: list[Path] = []
    for header in _NEEDED_HEADERS:
        found = next((d for d in dirs if (d / header).exists()), None)
        if found is None:
            raise ToolchainError(
                f"no CUDA header {header} found; looked in "
                + ", ".join(str(r) for r in roots)
                + " (install the package's dependencies: nvidia-cuda-runtime, nvidia-cuda-cccl)"
            )
        if found not in chosen:
            chosen.append(found)
    return tuple(chosen)


def nvrtc_compile(source: str, arch: str = "sm_90a", name: str = "kernel.cu") -> bytes:
    """Compile CUDA ``source`` to a cubin for ``arch`` with NVRTC."""
    return _nvrtc(source, arch, name, "cubin")


def nvrtc_ptx(source: str, arch: str = "sm_90a", name: str = "kernel.cu") -> str:
    """The PTX NVRTC generates for CUDA ``source`` on the way to an ``arch`` cubin."""
    return _nvrtc(source, arch, name, "ptx").rstrip(b"\0").decode()


# cuda.h's CUtensorMap (64-byte aligned, 128 opaque bytes): generated code includes cuda.h
# only outside NVRTC, and a kernel takes a tensor map by value, which needs the complete type.
_TENSOR_MAP_TYPE = (
    "struct alignas(64) CUtensorMap_st { unsigned long long opaque[16]; };\n"
    "typedef struct CUtensorMap_st CUtensorMap;\n"
)


@dataclass(frozen=True)
class PtxasNote:
    """One of ptxas's messages about the kernel: its code (``C7508``), the text, and what
    it concerns (``wgmma``, ``setmaxnreg``, or ``""``): performance verdicts such as
    'setmaxnreg' ignored (C7508) or wgmma serialized / waits injected (C7515-C7520)
    that leave the kernel right and slow."""

    code: str
    text: str
    subject: str

    def __str__(self) -> str:
        return f"({self.code}) {self.text}" if self.code else self.text


_PTXAS_NOTE = re.compile(r"^ptxas (?:info|warning)\s*:\s*(?:\((C\d{4})\)\s*)?(.*)$")


def ptxas_notes(source: str, arch: str = "sm_90a", name: str = "kernel.cu") -> list[PtxasNote]:
    """ptxas's coded messages and warnings compiling ``source`` (NVRTC, ``-v``): what it
    says about the kernel beyond register counts."""
    log = _nvrtc(source, arch, name, "log", extra=[b"--ptxas-options=-v"])
    notes = []
    for line in log.decode(errors="replace").splitlines():
        m = _PTXAS_NOTE.match(line.strip())
        if m is None or (m.group(1) is None and "warning" not in line):
            continue
        text = m.group(2).strip()
        low = text.lower()
        subject = "setmaxnreg" if "setmaxnreg" in low else "wgmma" if "gmma" in low else ""
        notes.append(PtxasNote(m.group(1) or "", text, subject))
    return notes


def ptxas_usage(source: str, arch: str = "sm_90a", name: str = "kernel.cu") -> dict[str, int]:
    """Per kernel of ``source``: the registers per thread ptxas gave it (NVRTC, ``-v``).
    Kernels are named by the ``Compiling entry function`` line before their usage line."""
    log = _nvrtc(source, arch, name, "log", extra=[b"--ptxas-options=-v"])
    usage, kernel = {}, ""
    for line in log.decode(errors="replace").splitlines():
        m = re.search(r"Compiling entry function '(\w+)'", line)
        if m:
            kernel = m.group(1)
        m = re.search(r"Used (\d+) registers", line)
        if m and kernel:
            usage[kernel] = int(m.group(1))
    return usage


# The flags TVM 0.27's NVRTC build adds (tvm.support.nvcc._compile_cuda_nvrtc), so that the
# code read here is the code tvm.compile runs: half and bfloat16 operators defined, fast
# math (ex2.approx.ftz for exp2f, flush to zero, contracted multiply-adds), ptxas's
# register-usage level (TVM_CUDA_PTXAS_REG_LEVEL, default 10) and the extra flags of
# TVM_CUDA_PTXAS_EXTRA_OPTS and TVM_CUDA_NVRTC_EXTRA_OPTS (read once, at import).
TVM_NVRTC_OPTIONS = (
    *(f"-U__CUDA_NO_{what}__".encode() for what in (
        "HALF_OPERATORS", "HALF_CONVERSIONS", "BFLOAT16_OPERATORS", "BFLOAT16_CONVERSIONS",
        "BFLOAT162_OPERATORS", "BFLOAT162_CONVERSIONS",
    )),
    b"--use_fast_math",
    f"--ptxas-options=--register-usage-level={os.environ.get('TVM_CUDA_PTXAS_REG_LEVEL', '10')}"
    .encode(),
    *(f"--ptxas-options={t}".encode()
      for t in shlex.split(os.environ.get("TVM_CUDA_PTXAS_EXTRA_OPTS", ""))),
    *(t.encode() for t in shlex.split(os.environ.get("TVM_CUDA_NVRTC_EXTRA_OPTS", ""))),
)  # fmt: skip


# TVM's generated code includes libcu++'s <cuda/std/cstdint> and <cuda/std/type_traits>
# under NVRTC, and parsing type_traits is most of a compile: 3.5 of 3.7 s for a copy kernel
# with NVRTC 13.5. NVRTC's automatic precompiled header (``-pch``) keeps the parsed headers
# for later compiles of the process, but only headers that open the translation unit, and
# TVM's open it after a ``using``: so they are pre-included (their include guards make the
# source's own includes no-ops; line numbers stay the source's). The PTX, cubin and ptxas's
# verdicts are byte for byte those without (tests/test_toolchain.py); a compile after the
# first of its architecture and options takes about 0.5 s. 629/630 are NVRTC's notes that a
# kept header was built with other options (another architecture): it builds one for those.
# NVRTC keeps each in a file of about 210 MB under $TMPDIR (``__nvrtc_auto_pch_<pid>_0``),
# deleted when the process exits normally; where one would not fit its heap (256 MB by
# default), NVRTC compiles without it, slower and the same.
_PCH_HEADERS = ("cuda/std/cstdint", "cuda/std/type_traits")
_PCH_OPTIONS = (
    b"-pch",
    b"--pch-messages=false",
    b"-diag-suppress=629,630",
    *(f"--pre-include={h}".encode() for h in _PCH_HEADERS),
)


def pch_options(source: str) -> tuple[bytes, ...]:
    """The precompiled-header options for ``source``: :data:`_PCH_OPTIONS` where it
    includes the headers TVM's code does under NVRTC, none otherwise (a hand-written
    kernel without them would pay for parsing them)."""
    if all(f"#include <{h}>" in source for h in _PCH_HEADERS):
        return _PCH_OPTIONS
    return ()


@dataclass(frozen=True)
class _Compiled:
    ptx: bytes
    cubin: bytes
    log: bytes


def _nvrtc(
    source: str, arch: str, name: str, output: str, extra: list[bytes] | None = None
) -> bytes:
    """Compile with NVRTC; ``output`` "cubin", "ptx" or "log" (the compiler's messages).
    One compile gives all three, kept for the next call with the same arguments (a test
    that reads a kernel's PTX and then its SASS compiles it once)."""
    return getattr(_nvrtc_all(source, arch, name, tuple(extra or ())), output)


@lru_cache(maxsize=8)
def _nvrtc_all(source: str, arch: str, name: str, extra: tuple[bytes, ...]) -> _Compiled:
    from cuda.bindings import nvrtc

    if "CUtensorMap" in source and "CUtensorMap_st {" not in source:
        source = _TENSOR_MAP_TYPE + source
    opts = [f"--gpu-architecture={arch}".encode(), b"--std=c++17", b"-default-device"]
    opts += [*TVM_NVRTC_OPTIONS, *pch_options(source), *extra]
    opts += [b"-I" + str(p).encode() for p in cuda_include_dirs()]

    def ok(result, what: str):
        if result[0] != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise ToolchainError(f"{what} failed: {result[0]}")
        return result[1:]

    def get(size_of, get_into, what: str) -> bytes:
        (size,) = ok(size_of(prog), f"{what} size")
        out = bytearray(size)  # NVRTC writes into it: never into an (interned) bytes object
        ok(get_into(prog, out), what)
        return bytes(out)

    (prog,) = ok(nvrtc.nvrtcCreateProgram(source.encode(), name.encode(), 0, [], []), "create")
    try:
        result = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        if result[0] != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            try:
                log = get(nvrtc.nvrtcGetProgramLogSize, nvrtc.nvrtcGetProgramLog, "log")
            except ToolchainError as e:
                log = f"(no log: {e})".encode()
            raise ToolchainError(
                f"NVRTC could not compile for {arch}:\n{log.decode(errors='replace')}"
            )
        return _Compiled(
            ptx=get(nvrtc.nvrtcGetPTXSize, nvrtc.nvrtcGetPTX, "ptx"),
            cubin=get(nvrtc.nvrtcGetCUBINSize, nvrtc.nvrtcGetCUBIN, "cubin"),
            log=get(nvrtc.nvrtcGetProgramLogSize, nvrtc.nvrtcGetProgramLog, "log").rstrip(b"\0 "),
        )
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def nvdisasm_path() -> str:
    """``nvdisasm`` from the nvidia-cuda-nvdisasm wheel, else from PATH."""
    for root in _candidate_roots():
        path = root / "bin" / "nvdisasm"
        if path.exists():
            return str(path)
    found = shutil.which("nvdisasm")
    if found:
        return found
    raise ToolchainError("nvdisasm not found (install nvidia-cuda-nvdisasm)")


# nvdisasm's dataflow analysis annotates nothing ``-c`` prints (the text is the same with
# and without it; tests/test_toolchain.py) and is a quarter of its 0.7 s a call.
SASS_OPTIONS = ("--no-dataflow",)


def sass(cubin: bytes) -> str:
    """The SASS text of a cubin (``nvdisasm -c``)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "k.cubin")
        with open(path, "wb") as f:
            f.write(cubin)
        proc = subprocess.run(
            [nvdisasm_path(), "-c", *SASS_OPTIONS, path], capture_output=True, text=True
        )
    if proc.returncode != 0:
        raise ToolchainError(f"nvdisasm failed: {proc.stderr}")
    return proc.stdout


_OPCODE = re.compile(r"^\s*/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Za-z0-9_.]*)", re.MULTILINE)


def opcode_sequence(sass_text: str) -> list[str]:
    """Each SASS instruction's opcode (with its modifiers, e.g. ``LDG.E.128``), in order."""
    return _OPCODE.findall(sass_text)


def opcodes(sass_text: str) -> Counter:
    """How often each SASS opcode (with its modifiers, e.g. ``LDG.E.128``) occurs."""
    return Counter(opcode_sequence(sass_text))


def cuda_source(func_or_mod, arch: Any = "sm_90a", pipeline: str = "tirx_cuda_dispatch") -> str:
    """The CUDA source TVM generates for ``func_or_mod`` through ``pipeline``; ``arch`` is
    any target form :func:`..targets.as_target` accepts."""
    target = as_target(arch)
    # On a machine with a GPU, TVM's NVRTC callback compiles for Target.current() or else
    # the local GPU: scope the target so that sm_100a source is not built for an sm_90 GPU.
    with target:
        ex = tvm.compile(func_or_mod, target=target, tir_pipeline=pipeline)
    return ex.mod.imports[0].inspect_source()


def lowered_tir(func_or_mod, arch: Any = "sm_90a", pipeline: str = "tirx_cuda_dispatch") -> Any:
    """The device IRModule after ``pipeline`` and TVM's device finalization, right before
    CUDA codegen (the form ``tvm.compile`` hands to the code generator); ``arch`` is any
    target form :func:`..targets.as_target` accepts."""
    return lowered(func_or_mod, arch, pipeline)[1]


def lowered(func_or_mod, arch: Any = "sm_90a", pipeline: str = "tirx_cuda_dispatch") -> tuple:
    """``(host, device)``: the host IRModule after ``pipeline`` (what runs before the
    launch: tensor maps are encoded there) and the device IRModule of :func:`lowered_tir`."""
    from tvm.tirx.build import split_host_device_mods

    target = as_target(arch)
    mod = func_or_mod
    if isinstance(mod, tvm.tirx.PrimFunc):
        mod = tvm.IRModule.from_expr(mod)
    with target:
        mod = tvm.tirx.transform.BindTarget(target.with_host("c"))(mod)
        passes, _, finalize_device = tvm.tirx.get_tir_pipeline(pipeline)
        mod = passes(mod)
        host, device_mods = split_host_device_mods(mod)
        lowered_mods = [finalize_device()(m) for m in device_mods.values()]
    if len(lowered_mods) != 1:
        raise ToolchainError(f"expected one CUDA device module, got {len(lowered_mods)}")
    return host, lowered_mods[0]


ENCODE_TILED = "tirx.tensormap_encode_tiled"
SWIZZLE_BYTES = {0: 0, 1: 32, 2: 64, 3: 128}  # CUtensorMapSwizzle -> bytes


def encoded_tensor_maps(host: Any) -> dict[str, dict]:
    """The tensor maps a host module encodes before the launch (``tensormap_encode_tiled``),
    by the name of the variable the kernel receives each in: the data variable of the
    mapped buffer (its name), dtype, and the driver's arrays (dims, byte strides of
    dimensions 1 and up, box, element strides), swizzle and L2 promotion (bytes) as ints,
    and whether the descriptor is TFLOAT32 (``tf32``)."""
    found: dict[str, dict] = {}
    for func in host.functions.values():
        for call in evaluated_calls(getattr(func, "body", None)):
            if getattr(call.op, "name", None) != ENCODE_TILED:
                continue
            rank = int(call.attrs.rank)
            args = list(call.args)
            ints = [int(a.value) if hasattr(a, "value") else None for a in args[2:]]
            name = str(args[0].name)
            if name in found:  # the kernel's parameters pair with the encodings by name
                raise ValueError(
                    f"the host encodes two tensor maps named {name}: the kernel's "
                    "parameters cannot be told apart (our bridge names each descriptor of "
                    "a buffer apart, tensor_map_var; TVM's built-in TMA copy does not, so "
                    "a built-in copy and one of ours of the same buffer meet here)"
                )
            found[name] = {
                "data": args[1],
                "dtype": str(call.attrs.descriptor_dtype),
                "dims": tuple(ints[:rank]),
                "strides": tuple(ints[rank : 2 * rank - 1]),
                "box": tuple(ints[2 * rank - 1 : 3 * rank - 1]),
                "element_strides": tuple(ints[3 * rank - 1 :]),
                "swizzle": SWIZZLE_BYTES[int(call.attrs.swizzle)],
                "l2_promotion": (0, 64, 128, 256)[int(call.attrs.l2_promotion)],
                "tf32": int(call.attrs.force_cu_dtype) == TFLOAT32,
            }
    return found


def kernel_sass(func_or_mod, arch: Any = "sm_90a", pipeline: str = "tirx_cuda_dispatch") -> str:
    """Lower, generate CUDA, compile with NVRTC and disassemble: the SASS of the kernel."""
    return sass(nvrtc_compile(cuda_source(func_or_mod, arch, pipeline), describe(arch)))
