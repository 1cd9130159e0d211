"""Build and run kernels on the local GPU through TVM's runtime (for tests, demos, benches)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import tvm

from .pipeline import PIPELINE_NAME


def gpu_arch() -> str | None:
    """``sm_XYa``-style arch of CUDA device 0, or None when there is no CUDA GPU."""
    try:
        dev = tvm.cuda(0)
        if not dev.exist:
            return None
        major, minor = str(dev.compute_version).split(".")
    except Exception:  # noqa: BLE001  # no CUDA runtime at all means no GPU
        return None
    suffix = "a" if int(major) >= 9 else ""
    return f"sm_{major}{minor}{suffix}"


def build(func: Any, arch: str | None = None, pipeline: str = PIPELINE_NAME) -> Any:
    """``tvm.compile`` for CUDA ``arch`` (the local GPU's by default) through ``pipeline``."""
    arch = arch or gpu_arch()
    if arch is None:
        raise RuntimeError("no CUDA GPU found and no arch given")
    target = tvm.target.Target({"kind": "cuda", "arch": arch})
    with target:  # TVM's NVRTC callback reads the arch from Target.current()
        return tvm.compile(func, target=target, tir_pipeline=pipeline)


def entry_name(func: Any) -> str:
    symbol = func.attrs.get("global_symbol") if func.attrs is not None else None
    return str(symbol) if symbol is not None else "main"


def run(executable: Any, name: str, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Copy ``arrays`` to GPU 0, call kernel ``name`` on them, return them all as written."""
    dev = tvm.cuda(0)
    tensors = [tvm.runtime.tensor(a, device=dev) for a in arrays]
    executable[name](*tensors)
    dev.sync()
    return [t.numpy() for t in tensors]


def random_array(shape: Sequence[int], dtype: str, rng: np.random.Generator) -> np.ndarray:
    """Random, never all-zero data of ``dtype`` (bfloat16 through ml_dtypes)."""
    if dtype == "bfloat16":
        import ml_dtypes

        return rng.standard_normal(shape).astype(np.float32).astype(ml_dtypes.bfloat16)
    np_dtype = np.dtype(dtype)
    if np_dtype.kind in "ui":
        info = np.iinfo(np_dtype)
        return rng.integers(info.min, info.max, size=shape, endpoint=True, dtype=np_dtype)
    return rng.standard_normal(shape).astype(np_dtype)


def poison_like(array: np.ndarray) -> np.ndarray:
    """A buffer of the same shape and dtype filled with a bit pattern no test data has."""
    raw = np.full(array.shape, 0xA5, dtype=np.uint8) if array.dtype.itemsize == 1 else None
    if raw is not None:
        return raw.view(array.dtype)
    width = {2: np.uint16, 4: np.uint32, 8: np.uint64}[array.dtype.itemsize]
    pattern = {2: 0x7FA5, 4: 0x7FA5A5A5, 8: 0x7FA5A5A5A5A5A5A5}[array.dtype.itemsize]
    return np.full(array.shape, pattern, dtype=width).view(array.dtype)


def bits(array: np.ndarray) -> np.ndarray:
    """The raw bits of ``array`` (exact comparison of copies, NaNs included)."""
    width = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[array.dtype.itemsize]
    return np.ascontiguousarray(array).view(width)
