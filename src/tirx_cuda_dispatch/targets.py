"""Targets as users write them: one parser for explain(), the simulator, the toolchain and
the command line.

Accepted forms: a ``tvm.target.Target``; a JSON-dict target (``{"kind": "cuda", "arch":
"sm_90a"}``, as a dict or as its JSON text); a CUDA arch string (``"sm_90a"``); a bare
target kind (``"llvm"``, ``"cuda"``). A CUDA target must name an architecture NVIDIA ships
(``sm_75`` ... ``sm_121a``), so a typo such as ``sm_9O`` or ``90a`` is an error that says
what to write, not a target TVM accepts and then lowers for nothing.
"""

from __future__ import annotations

import json
import re
from typing import Any

import tvm

# Compute capabilities NVIDIA has shipped since Maxwell (NVRTC of our pinned CUDA 13 wheels
# compiles for sm_75 and newer; older ones still explain), and the architecture-specific
# ("a") and family ("f") variants where NVIDIA defines them.
SM_VERSIONS = (50, 52, 53, 60, 61, 62, 70, 72, 75, 80, 86, 87, 89, 90, 100, 101, 103, 110, 120, 121)
_ARCH_SPECIFIC_FROM = 90  # sm_90a is the first "a" target
_FAMILY_FROM = 100  # sm_100f is the first "f" target
_ARCH = re.compile(r"sm_(\d+)([af]?)")


class TargetError(ValueError):
    """A target the library cannot use; the message says what was given and what to write."""


def known_arches() -> list[str]:
    """Every CUDA arch string :func:`as_target` accepts, in order."""
    out = []
    for sm in SM_VERSIONS:
        out.append(f"sm_{sm}")
        if sm >= _ARCH_SPECIFIC_FROM:
            out.append(f"sm_{sm}a")
        if sm >= _FAMILY_FROM:
            out.append(f"sm_{sm}f")
    return out


def check_arch(arch: str) -> str:
    """``arch`` when it is a known CUDA architecture, else :class:`TargetError`."""
    m = _ARCH.fullmatch(arch)
    if m is None or arch not in known_arches():
        hint = ""
        if m is None and re.fullmatch(r"\d+[af]?", arch):
            hint = f" (write sm_{arch})"
        elif m is None and re.fullmatch(r"sm_\w+", arch):
            hint = " (the number after sm_ has a character that is not a digit)"
        raise TargetError(f"unknown CUDA arch {arch!r}{hint}; known: {', '.join(known_arches())}")
    return arch


def as_target(target: Any) -> tvm.target.Target:
    """The :class:`tvm.target.Target` for any accepted form (module docstring); a CUDA
    target's arch is checked."""
    if isinstance(target, tvm.target.Target):
        tgt = target
    elif isinstance(target, dict):
        tgt = _from_dict(target)
    elif isinstance(target, str):
        text = target.strip()
        if text.startswith("{"):
            try:
                spec = json.loads(text)
            except json.JSONDecodeError as exc:
                raise TargetError(f"target {target!r} is not valid JSON: {exc}") from None
            tgt = _from_dict(spec)
        elif _ARCH.fullmatch(text) or re.fullmatch(r"(sm_)?\w*\d\w*", text):
            tgt = tvm.target.Target({"kind": "cuda", "arch": check_arch(text)})
        elif text in tvm.target.Target.list_kinds():
            tgt = _from_dict({"kind": text})
        else:
            raise TargetError(
                f"target {target!r} is neither a CUDA arch (e.g. sm_90a) nor a target kind "
                f"({', '.join(sorted(tvm.target.Target.list_kinds()))})"
            )
    else:
        raise TypeError(
            "target must be a tvm Target, a target dict, its JSON text or an arch like "
            f"'sm_90a', got {type(target).__name__} {target!r}"
        )
    if tgt.kind.name == "cuda":
        check_arch(str(tgt.attrs.get("arch", "")))
    return tgt


def _from_dict(spec: Any) -> tvm.target.Target:
    if not isinstance(spec, dict) or "kind" not in spec:
        raise TargetError(f"a target dict needs a 'kind', got {spec!r}")
    kind = spec["kind"]
    if kind not in tvm.target.Target.list_kinds():
        raise TargetError(
            f"unknown target kind {kind!r}; known: {', '.join(sorted(tvm.target.Target.list_kinds()))}"
        )
    if kind == "cuda":
        if "arch" not in spec:
            raise TargetError(
                f"the CUDA target {spec!r} names no arch (TVM would assume sm_50); add one, "
                'e.g. {"kind": "cuda", "arch": "sm_90a"}'
            )
        check_arch(str(spec["arch"]))
    try:
        return tvm.target.Target(spec)
    except Exception as exc:  # TVM's own validation of the other attributes
        raise TargetError(f"TVM rejects the target {spec!r}: {str(exc).splitlines()[0]}") from None


def describe(target: Any) -> str:
    """``sm_90a`` for a CUDA target, the kind otherwise: for reports and messages."""
    tgt = as_target(target)
    if tgt.kind.name == "cuda":
        return str(tgt.attrs.get("arch"))
    return str(tgt.kind.name)
