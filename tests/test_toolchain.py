"""The offline NVRTC compile: TVM's sources take the precompiled-header path and give the
same bytes as without it; one compile answers a kernel's PTX, cubin and log."""

from __future__ import annotations

import functools

import pytest

import tirx_cuda_dispatch as tcd
from kernels import warp_g2s
from test_ptxas import one_loop
from tirx_cuda_dispatch import toolchain

HAND_WRITTEN = 'extern "C" __global__ void k(float* a) { a[threadIdx.x] = 1.0f; }\n'


@functools.cache
def _sources():
    return {
        "copy sm_90a": (toolchain.cuda_source(warp_g2s(16, 32), "sm_90a"), "sm_90a"),
        "copy sm_80": (toolchain.cuda_source(warp_g2s(16, 32, "float16"), "sm_80"), "sm_80"),
        "wgmma sm_90a": (
            toolchain.cuda_source(one_loop(), "sm_90a", tcd.STRICT_PIPELINE),
            "sm_90a",
        ),
    }


def test_tvm_sources_take_the_precompiled_headers_and_hand_written_ones_do_not():
    for name, (source, _) in _sources().items():
        assert toolchain.pch_options(source) == toolchain._PCH_OPTIONS, name
    # Control: a kernel that includes neither header would only pay for parsing them.
    assert toolchain.pch_options(HAND_WRITTEN) == ()
    assert toolchain.pch_options("#include <cuda/std/cstdint>\n" + HAND_WRITTEN) == ()


def test_precompiled_headers_change_no_byte_of_ptx_cubin_or_ptxas_verdicts(monkeypatch):
    """The first compile of each (architecture, options) builds the header, the next uses
    it: both are compared with a compile without it."""
    sources = _sources()

    def outputs():
        out = {}
        for name in ("copy sm_80", "wgmma sm_90a"):
            source, arch = sources[name]
            toolchain._nvrtc_all.cache_clear()
            out[name] = (toolchain.nvrtc_ptx(source, arch), toolchain.nvrtc_compile(source, arch))
        source, arch = sources["wgmma sm_90a"]
        out["verdicts"] = (toolchain.ptxas_usage(source, arch), toolchain.ptxas_notes(source, arch))
        return out

    try:
        built, used = outputs(), outputs()
        source, arch = sources["wgmma sm_90a"]
        assert b"using precompiled header" in toolchain._nvrtc(
            source, arch, "kernel.cu", "log", extra=[b"--pch-messages=true"]
        )
        monkeypatch.setattr(toolchain, "pch_options", lambda source: ())
        toolchain._nvrtc_all.cache_clear()
        without = outputs()
        # Control: without the options NVRTC says nothing of a precompiled header.
        assert b"precompiled header" not in toolchain._nvrtc(
            source, arch, "kernel.cu", "log", extra=[b"--pch-messages=true"]
        )
    finally:
        toolchain._nvrtc_all.cache_clear()
    assert built == used == without
    # Controls: the comparison tells kernels apart, and one_loop has verdicts to compare
    # (C7508, C7517).
    assert without["copy sm_80"][1] != without["wgmma sm_90a"][1]
    assert without["verdicts"][1]


def test_one_compile_answers_ptx_cubin_and_log(monkeypatch):
    from cuda.bindings import nvrtc

    source, arch = _sources()["copy sm_90a"]
    compiles = []
    real = nvrtc.nvrtcCompileProgram

    def counted(prog, n, opts):
        compiles.append(list(opts))
        return real(prog, n, opts)

    monkeypatch.setattr(nvrtc, "nvrtcCompileProgram", counted)
    toolchain._nvrtc_all.cache_clear()
    ptx = toolchain.nvrtc_ptx(source, arch)
    cubin = toolchain.nvrtc_compile(source, arch)
    assert ".entry" in ptx and cubin[:4] == b"\x7fELF"
    assert len(compiles) == 1
    assert b"-pch" in compiles[0]
    # Control: other options (ptxas -v) are another compile, and so is another source.
    toolchain.ptxas_usage(source, arch)
    toolchain.nvrtc_compile(source.replace("kernel", "kernel2"), arch)
    assert len(compiles) == 3
    toolchain._nvrtc_all.cache_clear()


def test_a_failed_compile_names_the_architecture_is_not_kept_and_frees_its_program(monkeypatch):
    from cuda.bindings import nvrtc

    calls = {"create": 0, "compile": 0, "destroy": 0}
    for name, fn in (("create", "nvrtcCreateProgram"), ("compile", "nvrtcCompileProgram"),
                     ("destroy", "nvrtcDestroyProgram")):  # fmt: skip
        real = getattr(nvrtc, fn)

        def counted(*args, _real=real, _name=name):
            calls[_name] += 1
            return _real(*args)

        monkeypatch.setattr(nvrtc, fn, counted)
    source, _ = _sources()["copy sm_90a"]
    bad = source + "\nint broken = ;\n"
    for _ in range(2):
        with pytest.raises(toolchain.ToolchainError, match="NVRTC could not compile for sm_90a"):
            toolchain.nvrtc_compile(bad)
    assert calls == {"create": 2, "compile": 2, "destroy": 2}


def test_an_empty_log_leaves_python_s_bytes_alone():
    """NVRTC writes each output into a buffer of ours: an empty log (one NUL byte) once
    went into Python's shared one-byte ``b" "``, after which ``" ".encode()`` was NUL."""
    toolchain._nvrtc_all.cache_clear()
    assert toolchain._nvrtc(HAND_WRITTEN, "sm_90a", "k.cu", "log") == b""
    assert b" " == bytes([32]) and b"a b".split(b" ") == [b"a", b"b"]


def test_sass_without_dataflow_analysis_is_the_same_text(monkeypatch):
    source, arch = _sources()["wgmma sm_90a"]
    cubin = toolchain.nvrtc_compile(source, arch)
    fast = toolchain.sass(cubin)
    assert "WGMMA" in fast or "HGMMA" in fast
    monkeypatch.setattr(toolchain, "SASS_OPTIONS", ())
    assert toolchain.sass(cubin) == fast
    # Control: the comparison sees another kernel's text.
    other, arch = _sources()["copy sm_90a"]
    assert toolchain.sass(toolchain.nvrtc_compile(other, arch)) != fast
