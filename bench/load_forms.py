"""Which global load form streams best: the study behind gmem_smem's ``ld.global.cg``.

Builds the streaming-copy programs of ``copy_stream.py`` with our pipeline, rewrites the
global load in the generated CUDA source (TVM's ``tvm_callback_cuda_postproc`` hook) into
each candidate form, checks every variant's result, and times them all interleaved with
TVM's built-in and a device copy. Prints GB/s per form and program.

    source .devkit/setup.sh && PYTHONPATH=src:$PYTHONPATH python3 bench/load_forms.py
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
import torch  # noqa: E402
import tvm_ffi  # noqa: E402
from copy_stream import CONFIGS, TORCH_DTYPE, checked_launch, time_interleaved  # noqa: E402

from tirx_cuda_dispatch import demos, runtime  # noqa: E402

_REWRITE = {"fn": None}


@tvm_ffi.register_global_func("tvm_callback_cuda_postproc", override=True)
def _postproc(code, *_):
    return _REWRITE["fn"](code) if _REWRITE["fn"] else code


def _load_with(intrinsic: str):
    return lambda code: code.replace("= __ldcg((const", f"= {intrinsic}((const")


def _store_streaming(code: str) -> str:
    pattern = re.compile(r"^(\s*)(\(\(uint4\*\)B_ptr\)\[.*?\]) = (.*);$")
    out = []
    for line in code.split("\n"):
        m = pattern.match(line)
        out.append(f"{m.group(1)}__stcs(&({m.group(2)}), {m.group(3)});" if m else line)
    return "\n".join(out)


FORMS = {
    "ld.global.cg (ours)": ("tirx_cuda_dispatch", None),
    "ld.global.ca": ("tirx_cuda_dispatch", _load_with("__ldca")),
    "plain load": ("tirx_cuda_dispatch", _load_with("*")),
    "ld.global.cs": ("tirx_cuda_dispatch", _load_with("__ldcs")),
    "ld.global.lu": ("tirx_cuda_dispatch", _load_with("__ldlu")),
    "cg + st.global.cs": ("tirx_cuda_dispatch", _store_streaming),
    "TVM built-in": ("tirx", None),
}


def main() -> int:
    if runtime.gpu_arch() is None:
        print("no CUDA GPU: this study needs one")
        return 2
    table: dict[str, list[float]] = {name: [] for name in [*FORMS, "device copy"]}
    for cfg_name, dtype, tm, tn, scope, threads in CONFIGS:
        elem = torch.tensor([], dtype=TORCH_DTYPE[dtype]).element_size()
        ctas = 512 * 2**20 // (elem * tn) // tm
        func = demos.gmem_smem_roundtrip(dtype, (tm, tn), scope, ctas=ctas, cta_threads=threads)
        a = torch.randn(ctas * tm, tn, device="cuda").to(TORCH_DTYPE[dtype])
        ref = torch.empty_like(a)
        fns = {}
        for name, (pipeline, rewrite) in FORMS.items():
            _REWRITE["fn"] = rewrite
            try:
                kernel = runtime.build(func, runtime.gpu_arch(), pipeline)[runtime.entry_name(func)]
            finally:
                _REWRITE["fn"] = None
            fns[name] = checked_launch(kernel, a, f"{cfg_name}: {name}")
        fns["device copy"] = lambda r=ref, x=a: r.copy_(x)
        times = time_interleaved(fns, batch=10, reps=30)
        moved = 2 * a.numel() * elem
        for name, ts in times.items():
            table[name].append(moved / (float(np.median(ts)) * 1e-3) / 1e9)
    print(f"{'global load form':<22}" + "".join(f"{c[0]:>20}" for c in CONFIGS))
    for name, row in table.items():
        print(f"{name:<22}" + "".join(f"{v:>20.0f}" for v in row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
