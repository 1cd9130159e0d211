#!/usr/bin/env python3
"""Count which tile-primitive calls of TVM's own test programs our pipeline takes.

Measures issue 16's count. The TVM files are not part of this project: copy apache/tvm's
``tests/python/tirx/operator/tile_primitive/cuda/copy/``, ``.../copy_async/
test_tcgen05_ldst.py`` and ``.../elementwise/`` into ``--tests DIR`` (keeping those
sub-folders), and the "Demonstration program" code block of each page under
``docs/tirx/tile_primitives/`` into ``--demos DIR`` as ``<folder>__<page>.py``.

The test files run under pytest, in this process, with ``tvm.compile`` replaced by a
recorder: for every module a test compiles it calls ``tirx_cuda_dispatch.explain(mod,
arch)``, records every call's report (ours, TVM's built-in fallback, the scalar copy, or
an error) and returns a dummy executable, so neither a GPU nor nvcc is needed. Every
PrimFunc a demonstration block defines is explained the same way. Whichever
``tirx_cuda_dispatch`` is imported is measured (``PYTHONPATH=<checkout>/src`` for another).

    python3 bench/tvm_suite.py --tests DIR --demos DIR --out counts.json

Shims (TVM 0.27.0.post1 against test files of a neighbouring TVM):
  * ``tvm.tirx.cuda.operator.tile_primitive.*`` and ``tvm.backend.cuda.operator.
    tile_primitive.*`` are aliased to 0.27's ``tvm.backend.cuda.tile_primitive.*``;
  * ``tvm.tirx.layout.SwizzleLayout(p, s, a)`` (gone in 0.27) is a bare swizzle
    ``ComposeLayout(p, s, a, TileLayout(S[(2**(p+s+a),)]))`` and
    ``ComposeLayout(swizzle, tile)`` becomes ``ComposeLayout(p, s, a, tile)``;
  * ``tvm.testing.requires_cuda_compute_version`` (absent in 0.27) is a no-op marker;
  * ``env.has_cuda*`` return True so GPU-gated tests run up to their compile;
    ``tvm.testing.run_with_gpu_lock`` runs nothing; ``tvm.runtime.tensor`` on a CUDA
    device falls back to a CPU tensor;
  * ``Target("cuda")`` without an arch gets the test's arch (below) instead of sm_50;
  * ``tvm.tirx.transform.LowerTIRx()`` (TVM's own lowering, which some tests run before
    ``tvm.compile``) records the module it is given, as the compile recorder would, and
    returns it unlowered; that module's compile is then not recorded a second time.
Arch: sm_90a, except sm_100a for tests gated on compute >= 10 (skipif reason), every test
of test_tcgen05_ldst.py (tensor memory), tests that skip themselves at run time asking for
sm_100+ (re-run once at sm_100a), and modules compiled for an explicit sm_100* target.
"""

from __future__ import annotations

import argparse
import collections
import importlib
import importlib.abc
import importlib.util
import json
import os
import re
import sys
import time
import traceback
import warnings
from pathlib import Path

HERE = Path.cwd()  # set from --tests by main()
TESTS = HERE / "tvm_tests"
DEMOS = HERE / "tvm_docs_demos"

import pytest  # noqa: E402
import tvm  # noqa: E402
import tvm.backend.cuda.tile_primitive  # noqa: E402,F401  (import TVM's variants before shims)
import tvm.testing  # noqa: E402
from tvm.tirx import layout as _layout  # noqa: E402

import tirx_cuda_dispatch  # noqa: E402


# ----------------------------------------------------------------------------- state
class State:
    arch = "sm_90a"
    nodeid = None
    file = None
    compile_index = 0
    records: list = []
    compiles: list = []
    outcomes: dict = {}
    markers: dict = {}


STATE = State()


# ----------------------------------------------------------------------------- shims
class _AliasFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    PREFIXES = (
        "tvm.tirx.cuda.operator.tile_primitive",
        "tvm.backend.cuda.operator.tile_primitive",
    )
    TARGET = "tvm.backend.cuda.tile_primitive"
    PARENTS = ("tvm.tirx.cuda", "tvm.tirx.cuda.operator", "tvm.backend.cuda.operator")

    def find_spec(self, fullname, path=None, target=None):
        if fullname in self.PARENTS:
            return importlib.util.spec_from_loader(fullname, self, is_package=True)
        for p in self.PREFIXES:
            if fullname == p or fullname.startswith(p + "."):
                real = self.TARGET + fullname[len(p) :]
                if importlib.util.find_spec(real) is None:
                    return None
                return importlib.util.spec_from_loader(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        name = spec.name
        if name in self.PARENTS:
            return None  # default empty module
        for p in self.PREFIXES:
            if name == p or name.startswith(p + "."):
                return importlib.import_module(self.TARGET + name[len(p) :])
        return None

    def exec_module(self, module):
        if module.__name__ in self.PARENTS:
            module.__path__ = []


_OrigCompose = _layout.ComposeLayout


def _swizzle_layout(per_element, swizzle_len, atom_len, swizzle_inner=True):
    period = 1 << (int(per_element) + int(swizzle_len) + int(atom_len))
    return _OrigCompose(
        int(per_element),
        int(swizzle_len),
        int(atom_len),
        _layout.TileLayout(_layout.S[(period,)]),
        bool(swizzle_inner),
    )


class _ComposeMeta(type):
    def __instancecheck__(cls, obj):
        return isinstance(obj, _OrigCompose)

    def __subclasscheck__(cls, sub):
        return issubclass(sub, _OrigCompose)

    def __call__(cls, *args, **kwargs):
        if args and isinstance(args[0], _OrigCompose) and len(args) == 2 and not kwargs:
            sw, tile = args
            return _OrigCompose(
                int(sw.per_element),
                int(sw.swizzle_len),
                int(sw.atom_len),
                tile,
                bool(sw.swizzle_inner),
            )
        return _OrigCompose(*args, **kwargs)


class ComposeLayout(metaclass=_ComposeMeta):
    """0.27 ComposeLayout that also takes the older (SwizzleLayout, tile) form."""


class _Dummy:
    """What the recorder's tvm.compile returns: absorbs every use, runs nothing."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Dummy()

    def __call__(self, *a, **k):
        return _Dummy()

    def __getitem__(self, k):
        return _Dummy()

    def __iter__(self):
        return iter(())

    def __contains__(self, x):
        return False

    def __str__(self):
        return ""

    __repr__ = __str__


def _arch_of(target) -> str:
    arch = ""
    try:
        if target is None:
            target = tvm.target.Target.current(allow_none=True)
        if isinstance(target, (str, dict)):
            target = tvm.target.Target(target)
        if target is not None:
            arch = str(target.attrs.get("arch", "")) if hasattr(target, "attrs") else ""
            if not arch:
                arch = str(getattr(target, "arch", "") or "")
    except Exception:  # noqa: BLE001
        arch = ""
    return "sm_100a" if arch.startswith("sm_10") else "sm_90a"


def _plain(v):
    if isinstance(v, (bool, int, float, str)) or v is None:
        return v
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    return str(v)


def _report_dict(r) -> dict:
    d = {
        "index": r.index,
        "op": r.op,
        "scope": r.scope,
        "location": r.location,
        "operands": _plain(r.operands),
        "variant": r.variant,
        "candidates": [[c[0], bool(c[1]), c[2]] for c in (tuple(x) for x in r.candidates)],
        "fallback": getattr(r, "fallback", None),
        "scalar_fallback": bool(getattr(r, "scalar_fallback", False)),
        "error": getattr(r, "error", None),
        "bounds_undecided": _plain(getattr(r, "bounds_undecided", [])),
    }
    call = getattr(r, "call_object", None)
    forced = getattr(call, "forced_variant", None) if call is not None else None
    d["forced"] = None if forced is None else str(forced)
    return d


def explain_and_record(mod, arch, source, file, test, extra=None):
    idx = STATE.compile_index
    STATE.compile_index += 1
    entry = {"source": source, "file": file, "test": test, "compile_index": idx, "arch": arch}
    if extra:
        entry.update(extra)
    _PROBES.clear()
    _EXPLAINING.append(True)
    try:
        reports = tirx_cuda_dispatch.explain(mod, arch)
    except Exception as exc:  # noqa: BLE001
        entry["explain_exception"] = f"{type(exc).__name__}: {exc}"[:2000]
        entry["calls"] = 0
        STATE.compiles.append(entry)
        return
    finally:
        _EXPLAINING.pop()
    entry["calls"] = len(reports)
    STATE.compiles.append(entry)
    probes = list(_PROBES) if len(_PROBES) == len(reports) else [None] * len(reports)
    for r, pr in zip(reports, probes, strict=True):
        rec = {k: entry[k] for k in ("source", "file", "test", "compile_index", "arch")}
        rec.update(_report_dict(r))
        rec["builtin_any"] = pr
        STATE.records.append(rec)


_orig_compile = tvm.compile


_RECORDED: dict[int, object] = {}  # id -> module the LowerTIRx shim recorded (kept alive)


def _recording_compile(mod, target=None, *args, **kwargs):
    if isinstance(mod, tvm.tirx.PrimFunc):
        mod = tvm.IRModule({"main": mod})
    if _RECORDED.get(id(mod)) is mod:  # its calls were recorded at LowerTIRx
        return _Dummy()
    arch = _arch_of(target) if target is not None else STATE.arch
    if target is None:
        cur = tvm.target.Target.current(allow_none=True)
        if cur is not None:
            arch = _arch_of(cur)
    explain_and_record(mod, arch, "test", STATE.file, STATE.nodeid)
    return _Dummy()


_orig_lower_tirx = tvm.tirx.transform.LowerTIRx
_EXPLAINING: list[bool] = []  # non-empty while explain() runs (it lowers with TVM's pass)


def _recording_lower_tirx(*args, **kwargs):
    """What a test's ``tvm.tirx.transform.LowerTIRx()`` gets: a pass that records the
    module (the target: the current one, else the test's arch) and returns it unlowered.
    Inside explain() (our bridge and the built-in probe use the pass) it is TVM's own."""
    if _EXPLAINING:
        return _orig_lower_tirx(*args, **kwargs)

    def record(mod):
        cur = tvm.target.Target.current(allow_none=True)
        arch = _arch_of(cur) if cur is not None else STATE.arch
        explain_and_record(mod, arch, "test", STATE.file, STATE.nodeid)
        _RECORDED[id(mod)] = mod
        return mod

    return record


_orig_target_init = tvm.target.Target.__init__


def _target_init(self, target, host=None):
    if target == "cuda" or (
        isinstance(target, dict) and target.get("kind") == "cuda" and "arch" not in target
    ):
        target = {"kind": "cuda", "arch": STATE.arch}
    _orig_target_init(self, target, host)


_orig_tensor = tvm.runtime.tensor


def _tensor(arr, device=None, *a, **k):
    try:
        return _orig_tensor(arr, device, *a, **k)
    except Exception:  # noqa: BLE001  # no CUDA device here
        return _orig_tensor(arr, tvm.cpu(0), *a, **k)


def _requires_cuda_compute_version(major, minor=0):
    def deco(f):
        return pytest.mark.tvmcount_cc(major)(f)

    return deco


_PROBES: list = []


def install_probe_all():
    """(HEAD only) also record TVM's built-in verdict for calls our variants take, so
    that another version's fall-throughs can be classified (scalar copy or not)."""
    try:
        from tirx_cuda_dispatch import builtin as _builtin
        from tirx_cuda_dispatch import lowering as _lowering
    except ImportError:
        return False
    if not hasattr(_builtin, "probe") or not hasattr(_lowering, "_dispatch_in_session"):
        return False
    orig = _lowering._dispatch_in_session

    def wrapped(s, call, *rest):
        try:
            v = _builtin.probe(call) if getattr(call, "forced_variant", None) is None else None
            _PROBES.append(
                None
                if v is None
                else {
                    "variant": v.variant,
                    "scalar": bool(v.scalar),
                    "text": str(v).splitlines()[0][:200],
                }
            )
        except Exception as exc:  # noqa: BLE001
            _PROBES.append(
                {"variant": None, "scalar": False, "text": f"probe failed: {exc!r}"[:200]}
            )
        return orig(s, call, *rest)

    _lowering._dispatch_in_session = wrapped
    return True


def install_shims():
    sys.meta_path.insert(0, _AliasFinder())
    _layout.SwizzleLayout = _swizzle_layout
    _layout.ComposeLayout = ComposeLayout
    tvm.testing.env.has_cuda = lambda *a, **k: True
    tvm.testing.env.has_cuda_compute = lambda *a, **k: True
    tvm.testing.run_with_gpu_lock = lambda func, *a, **k: None
    tvm.testing.requires_cuda_compute_version = _requires_cuda_compute_version
    tvm.runtime.tensor = _tensor
    tvm.compile = _recording_compile
    tvm.tirx.transform.LowerTIRx = _recording_lower_tirx
    tvm.target.Target.__init__ = _target_init


# ----------------------------------------------------------------------------- pytest
def _initial_arch(item) -> str:
    if Path(str(item.path)).name == "test_tcgen05_ldst.py":
        return "sm_100a"
    for m in item.iter_markers("skipif"):
        if re.search(r">=\s*10", str(m.kwargs.get("reason", ""))):
            return "sm_100a"
    for m in item.iter_markers("tvmcount_cc"):
        if m.args and int(m.args[0]) >= 10:
            return "sm_100a"
    return "sm_90a"


class Plugin:
    def pytest_configure(self, config):
        config.addinivalue_line("markers", "tvmcount_cc(major): requires_cuda_compute_version")
        config.addinivalue_line("markers", "gpu: gpu test")

    def pytest_runtest_setup(self, item):
        STATE.nodeid = item.nodeid
        STATE.file = str(Path(str(item.path)).relative_to(TESTS))
        STATE.arch = _initial_arch(item)
        STATE.compile_index = 0
        STATE.markers[item.nodeid] = sorted(
            {
                m.name
                for m in item.iter_markers()
                if m.name in ("skipif", "gpu", "tvmcount_cc", "xfail")
            }
        )

    @pytest.hookimpl(tryfirst=True)
    def pytest_pyfunc_call(self, pyfuncitem):
        fn = pyfuncitem.obj
        args = {a: pyfuncitem.funcargs[a] for a in pyfuncitem._fixtureinfo.argnames}
        try:
            fn(**args)
        except pytest.skip.Exception as exc:
            if STATE.arch != "sm_100a" and re.search(r"sm_1\d\d|sm_100", str(exc)):
                STATE.arch = "sm_100a"
                STATE.outcomes.setdefault("_rerun_at_sm100a", []).append(pyfuncitem.nodeid)
                fn(**args)
            else:
                raise
        return True

    def pytest_runtest_logreport(self, report):
        if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
            msg = ""
            if report.outcome == "skipped" and isinstance(report.longrepr, tuple):
                msg = str(report.longrepr[2])
            elif report.outcome == "failed":
                msg = (report.longreprtext or "").strip().splitlines()[-1:] or [""]
                msg = msg[0][:300]
            STATE.outcomes[report.nodeid] = {"outcome": report.outcome, "msg": msg}

    def pytest_collectreport(self, report):
        if report.outcome == "failed":
            STATE.outcomes[f"COLLECT:{report.nodeid}"] = {
                "outcome": "collect-error",
                "msg": (report.longreprtext or "").strip().splitlines()[-1:][0][:500]
                if report.longreprtext
                else "",
            }


# ----------------------------------------------------------------------------- docs
DOC_PREAMBLE = """
import tvm
from tvm.script import tirx as T
from tvm.script.tirx import tile as Tx
from tvm.tirx.layout import S, R, TileLayout, TLane, TCol, laneid, tid_in_wg, tx, warpid
"""
# A value the page's prose gives but its code block leaves to the reader.
DOC_GIVENS = {"copy_async__tcgen05_ldst": {"WIDTH": 8}}


def run_docs():
    for path in sorted(DEMOS.glob("*.py")):
        name = path.stem
        text = path.read_text()
        ns: dict = {"__name__": f"tvm_suite_doc_{name}"}
        ns.update(DOC_GIVENS.get(name, {}))
        exec(compile(DOC_PREAMBLE, "<preamble>", "exec"), ns)
        before = {k: id(v) for k, v in ns.items()}
        STATE.nodeid, STATE.file, STATE.compile_index = f"doc:{name}", f"docs/{name}", 0
        # tensor memory / tcgen05 programs need sm_100a; a page may also name its target
        STATE.arch = "sm_100a" if re.search(r"tmem|tcgen05", text) else "sm_90a"
        try:
            exec(compile(text, str(path), "exec"), ns)
        except Exception as exc:  # noqa: BLE001
            STATE.outcomes[f"doc:{name}"] = {
                "outcome": "not-buildable",
                "msg": f"{type(exc).__name__}: {exc}".splitlines()[0][:300],
            }
            continue
        if isinstance(ns.get("target"), tvm.target.Target):
            STATE.arch = _arch_of(ns["target"])
        funcs = [
            (k, v)
            for k, v in ns.items()
            if isinstance(v, tvm.tirx.PrimFunc) and before.get(k) != id(v)
        ]
        for k, f in funcs:
            explain_and_record(
                tvm.IRModule({"main": f}),
                STATE.arch,
                "doc",
                f"docs/{name}",
                f"doc:{name}",
                {"func": k},
            )
        STATE.outcomes[f"doc:{name}"] = {"outcome": "built", "msg": f"{len(funcs)} prim_func(s)"}


# ----------------------------------------------------------------------------- summary
def _operand_sig(rec):
    return tuple(
        (o.get("role"), o.get("scope"), o.get("dtype"), o.get("region"), o.get("layout"))
        for o in rec["operands"]
    )


def _outcome(rec):
    if rec.get("error"):
        return "error"
    if rec["variant"] is not None:
        return "taken"
    return "fell_through"


def summarize(records):
    def tally(rs):
        c = collections.Counter(_outcome(r) for r in rs)
        return {
            "total": len(rs),
            "taken": c["taken"],
            "fell_through": c["fell_through"],
            "error": c["error"],
            "fell_through_scalar": sum(
                1 for r in rs if _outcome(r) == "fell_through" and r.get("scalar_fallback")
            ),
        }

    def dedup(key):
        seen = {}
        for r in records:
            seen.setdefault(key(r), r)
        return list(seen.values())

    out = {
        "raw (every call of every compiled program, per test parametrization)": tally(records),
        "distinct calls (file, location, op, scope, operand scopes/dtypes/regions/layouts, arch)": tally(
            dedup(
                lambda r: (
                    r["file"],
                    r["location"],
                    r["op"],
                    r["scope"],
                    _operand_sig(r),
                    r["arch"],
                )
            )
        ),
        "distinct calls ignoring regions/layouts (file, location, op, scope, scopes/dtypes)": tally(
            dedup(
                lambda r: (
                    r["file"],
                    r["location"],
                    r["op"],
                    r["scope"],
                    tuple((o.get("scope"), o.get("dtype")) for o in r["operands"]),
                )
            )
        ),
        "distinct (test function, location, outcome)": tally(
            dedup(lambda r: (r["test"].split("[")[0], r["location"], _outcome(r)))
        ),
        "distinct (location, outcome)": tally(dedup(lambda r: (r["location"], _outcome(r)))),
        "distinct source locations": tally(dedup(lambda r: r["location"])),
    }
    by_file = {}
    for f in sorted({r["file"] for r in records}):
        by_file[f] = tally([r for r in records if r["file"] == f])
    out["raw by file"] = by_file
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="JSON file to write")
    ap.add_argument("--tests", type=Path, required=True, help="the copied TVM test folders")
    ap.add_argument("--demos", type=Path, help="the docs' demonstration blocks as .py files")
    ap.add_argument("--no-tests", action="store_true")
    ap.add_argument("--no-docs", action="store_true")
    ap.add_argument("-k", default=None, help="pytest -k expression")
    ap.add_argument("paths", nargs="*", help="test files (default: all under tvm_tests)")
    args = ap.parse_args()
    global HERE, TESTS, DEMOS
    TESTS = args.tests.resolve()
    HERE = TESTS.parent
    DEMOS = args.demos.resolve() if args.demos else TESTS / "__no_demos__"
    args.out = str(Path(args.out).resolve())

    print("tirx_cuda_dispatch from", tirx_cuda_dispatch.__file__, flush=True)
    install_shims()
    print("builtin probe for every call:", install_probe_all(), flush=True)
    warnings.simplefilter("ignore")
    t0 = time.time()
    if not args.no_tests:
        paths = args.paths or [str(TESTS)]
        pargs = [
            "-q",
            "-p",
            "no:cacheprovider",
            "--import-mode=importlib",
            "--rootdir",
            str(HERE),
            "-o",
            "python_files=test_*.py",
            "--tb=no",
            "-rN",
            # a test file of another TVM version that imports what 0.27 lacks (tvm.arith,
            # tvm.tirx.stmt_functor) is reported and skipped, not the end of the run
            "--continue-on-collection-errors",
            *paths,
        ]
        if args.k:
            pargs += ["-k", args.k]
        os.chdir(HERE)
        pytest.main(pargs, plugins=[Plugin()])
    if not args.no_docs:
        run_docs()
    summary = summarize(STATE.records)
    data = {
        "package_file": tirx_cuda_dispatch.__file__,
        "tvm_version": tvm.__version__,
        "seconds": round(time.time() - t0, 1),
        "summary": summary,
        "outcomes": STATE.outcomes,
        "markers": STATE.markers,
        "compiles": STATE.compiles,
        "records": STATE.records,
    }
    Path(args.out).write_text(json.dumps(data, indent=1))
    print(json.dumps(summary, indent=1))
    print("wrote", args.out, "records:", len(STATE.records), "compiles:", len(STATE.compiles))


if __name__ == "__main__":
    try:
        main()
    except SystemExit:
        raise
    except Exception:
        traceback.print_exc()
        sys.exit(1)
