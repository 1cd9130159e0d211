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
