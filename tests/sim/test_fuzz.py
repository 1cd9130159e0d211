"""Property-based fuzzing of every variant through the simulator.

Random tile shapes, dtypes, scopes, register and shared layouts (swizzled ones too) and
regions go through the strict pipeline: each case either declines with a reason
(:class:`DispatchError` naming the rule) or lowers to a kernel whose simulated output
equals numpy. Any other exception fails the test: zero wrong results, zero unexplained
exceptions.

CI runs a fast profile. The long one (10,000 cases or more)::

    TIRX_FUZZ_EXAMPLES=10000 python3 -m pytest -q tests/sim/test_fuzz.py
"""

from __future__ import annotations

import os

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tvm.tirx.layout import Axis, S, TileLayout

import tirx_cuda_dispatch as tcd
from tirx_cuda_dispatch import demos, runtime, sim

EXAMPLES = int(os.environ.get("TIRX_FUZZ_EXAMPLES", "12"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize="TIRX_FUZZ_EXAMPLES" not in os.environ,  # CI: the same cases every run
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
lane = Axis.laneid
DTYPES = ["float32", "float16", "bfloat16", "uint8", "int16"]
SCOPE_THREADS = {"warp": 32, "warpgroup": 128, "cta": 128}


def _simulate_or_decline(func, args, target="sm_90a"):
    """The simulated arrays, or None when the strict pipeline declined with a reason."""
    try:
        return sim.run(func, args, target=target, pipeline=tcd.STRICT_PIPELINE).arrays
    except tcd.DispatchError as why:
        assert str(why).strip(), "a decline must say why"
        return None


def _swizzled(dtype, shape, mode):
    from tvm.backend.cuda.tile_primitive.tma_utils import SwizzleMode, mma_shared_layout

    modes = {
        32: SwizzleMode.SWIZZLE_32B_ATOM,
        64: SwizzleMode.SWIZZLE_64B_ATOM,
        128: SwizzleMode.SWIZZLE_128B_ATOM,
    }
    return mma_shared_layout(dtype, modes[mode], shape)


@st.composite
def gmem_smem_cases(draw):
    dtype = draw(st.sampled_from(DTYPES))
    scope = draw(st.sampled_from(["warp", "warpgroup", "cta"]))
    rows = draw(st.sampled_from([1, 4, 8, 16, 32]))
    cols = draw(st.sampled_from([8, 16, 24, 32, 64, 128]))
    extra = draw(st.sampled_from([0, 0, 8, 16, 3]))
    offset = draw(st.integers(0, extra)) if extra else 0
    ctas = draw(st.integers(1, 3))
    threads = SCOPE_THREADS[scope] * (draw(st.sampled_from([1, 2])) if scope == "cta" else 1)
    swizzle = draw(st.sampled_from([None, None, 32, 64, 128]))
    layout = None
    if swizzle is not None:
        try:
            layout = _swizzled(
                dtype if dtype in ("float16", "float32") else "float16", (rows, cols), swizzle
            )
        except Exception:  # the atom does not tile this shape: not a case
            layout = None
    return dict(
        dtype=dtype,
        tile=(rows, cols),
        scope=scope,
        ctas=ctas,
        cta_threads=threads,
        shared_layout=layout if layout is not None and dtype in ("float16", "float32") else None,
        cols=cols + extra,
        col_offset=offset,
    )


@given(gmem_smem_cases(), st.integers(0, 2**32 - 1))
@FUZZ
def test_gmem_smem(case, seed):
    rng = np.random.default_rng(seed)
    tm, tn = case["tile"]
    full = (case["ctas"] * tm, case["cols"])
    a = runtime.random_array(full, case["dtype"], rng)
    out = _simulate_or_decline(demos.gmem_smem_roundtrip(**case), [a, runtime.poison_like(a)])
    if out is None:
        return
    expected = runtime.bits(runtime.poison_like(a)).copy()
    c0 = case["col_offset"]
    expected[:, c0 : c0 + tn] = runtime.bits(a)[:, c0 : c0 + tn]
    np.testing.assert_array_equal(runtime.bits(out[1]), expected)


@st.composite
def register_layouts(draw):
    """Register layouts of a warp (or 4 warps): lane owns a row, a column, several rows,
    or an mma-accumulator-like fragment; some do not fit (the variant must decline)."""
    kind = draw(st.sampled_from(["row", "column", "rows", "fragment", "wide"]))
    k = draw(st.sampled_from([1, 2, 4, 6, 8, 16, 32]))
    if kind == "row":
        return TileLayout(S[(32, k) : (1 @ lane, 1)]), (32, k), "warp"
    if kind == "column":
        return TileLayout(S[(k, 32) : (1, 1 @ lane)]), (k, 32), "warp"
    if kind == "rows":
        m = draw(st.sampled_from([2, 3, 4]))
        return TileLayout(S[(m, 32, k) : (k, 1 @ lane, 1)]), (m * 32, k), "warp"
    if kind == "fragment":
        num = draw(st.sampled_from([1, 2, 4]))
        layout = TileLayout(S[(8, num, 4, 2) : (4 @ lane, 2, 1 @ lane, 1)])
        return layout, (8, num * 8), "warp"
    layout = TileLayout(S[(4, 32, k) : (1 @ Axis.wid_in_wg, 1 @ lane, 1)])
    return layout, (128, k), "warpgroup"


@given(
    register_layouts(),
    st.sampled_from(DTYPES),
    st.sampled_from(["shared", "global"]),
    st.integers(0, 2**32 - 1),
)
@FUZZ
def test_copy_reg(layout_case, dtype, memory, seed):
    layout, shape, scope = layout_case
    a = runtime.random_array(shape, dtype, np.random.default_rng(seed))
    func = demos.reg_roundtrip(layout, shape, dtype, scope, memory)
    out = _simulate_or_decline(func, [a, runtime.poison_like(a)])
    if out is not None:
        np.testing.assert_array_equal(runtime.bits(out[1]), runtime.bits(a))


@st.composite
def fragment_cases(draw):
    """m8n8 fragments (x1/x2/x4, stacked row blocks) against row-major, column-major,
    padded and swizzled shared tiles."""
    num = draw(st.sampled_from([1, 2, 4]))
    blocks = draw(st.sampled_from([1, 2]))
    extents, strides = (blocks, 8, num, 4, 2), (num * 2, 4 @ lane, 2, 1 @ lane, 1)
    shape = (blocks * 8, num * 8)
    layout = TileLayout(S[extents:strides])
    shared = draw(st.sampled_from(["row", "column", "padded", "swizzle"]))
    if shared == "row":
        s_layout = TileLayout(S[shape])
    elif shared == "column":
        s_layout = TileLayout(S[shape : (1, shape[0])])
    elif shared == "padded":
        pad = draw(st.sampled_from([4, 8, 12]))
        s_layout = TileLayout(S[shape : (shape[1] + pad, 1)])
    else:
        try:
            s_layout = _swizzled("float16", shape, draw(st.sampled_from([32, 64, 128])))
        except Exception:
            s_layout = TileLayout(S[shape])
    regs = blocks * num * 2
    return layout, s_layout, shape, regs


@given(
    fragment_cases(), st.sampled_from(["float16", "bfloat16", "float32"]), st.integers(0, 2**32 - 1)
)
@FUZZ
def test_ldstmatrix_or_reg(case, dtype, seed):
    layout, s_layout, shape, regs = case
    a = runtime.random_array(shape, dtype, np.random.default_rng(seed))
    func = demos.ldstmatrix_roundtrip(layout, s_layout, shape, regs, dtype)
    f = runtime.poison_like(np.zeros((32, regs), a.dtype))
    out = _simulate_or_decline(func, [a, runtime.poison_like(a), f])
    if out is not None:
        np.testing.assert_array_equal(runtime.bits(out[1]), runtime.bits(a))


EXACT_OPS = {
    "add": lambda x, y: x + y,
    "sub": lambda x, y: x - y,
    "mul": lambda x, y: x * y,
    "maximum": np.maximum,
}


@given(
    st.sampled_from(sorted(EXACT_OPS)),
    st.sampled_from(["float32", "float16", "bfloat16"]),
    register_layouts(),
    st.integers(0, 2**32 - 1),
)
@FUZZ
def test_elementwise(op, dtype, layout_case, seed):
    layout, shape, scope = layout_case
    rng = np.random.default_rng(seed)
    a, c, d = (runtime.random_array(shape, dtype, rng) for _ in range(3))
    func = demos.elementwise_roundtrip(op, layout, shape, dtype, scope)
    out = _simulate_or_decline(func, [a, c, d, runtime.poison_like(a)])
    if out is not None:
        expected = EXACT_OPS[op](a, c).astype(a.dtype)
        np.testing.assert_array_equal(runtime.bits(out[3]), runtime.bits(expected))
