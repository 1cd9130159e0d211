"""Test tiers: CPU tests run everywhere (CI); ``gpu`` tests need a CUDA GPU and
``sm100`` tests a Blackwell one; both skip themselves elsewhere."""

from __future__ import annotations

import pytest

import tirx_cuda_dispatch  # noqa: F401  (registers the pipeline and variants)
from tirx_cuda_dispatch.runtime import gpu_arch

_ARCH = gpu_arch()


def pytest_collection_modifyitems(config, items):
    no_gpu = pytest.mark.skip(reason="needs a CUDA GPU")
    no_sm100 = pytest.mark.skip(reason="needs a Blackwell (sm_100) GPU")
    for item in items:
        if "gpu" in item.keywords and _ARCH is None:
            item.add_marker(no_gpu)
        if "sm100" in item.keywords and (_ARCH is None or not _ARCH.startswith("sm_10")):
            item.add_marker(no_sm100)


@pytest.fixture
def rng():
    import numpy as np

    return np.random.default_rng(20261122)


@pytest.fixture(scope="session")
def gpu():
    """The local GPU's arch (``sm_90a`` on the H200)."""
    return _ARCH


def pytest_configure(config):
    _explain_every_compiled_program()


def _explain_every_compiled_program():
    """explain() must never crash on a program: every program a test compiles or simulates
    is explained first, with the same target (an exception there fails that test)."""
    import tvm

    from tirx_cuda_dispatch import explain, toolchain

    real_compile, real_lowered_tir = tvm.compile, toolchain.lowered_tir

    def explained(func_or_mod, target):
        if isinstance(func_or_mod, tvm.tirx.PrimFunc | tvm.IRModule) and target is not None:
            explain(func_or_mod, target)

    def compile_(mod, target=None, *args, **kwargs):
        explained(mod, target)
        return real_compile(mod, target, *args, **kwargs)

    def lowered_tir(func_or_mod, arch="sm_90a", *args, **kwargs):
        explained(func_or_mod, arch)
        return real_lowered_tir(func_or_mod, arch, *args, **kwargs)

    tvm.compile = compile_
    toolchain.lowered_tir = lowered_tir
