"""Regions inside their buffers: proved, refuted with a witness, or reported as undecided."""

from __future__ import annotations

import pytest
import tvm
from tvm.script import tirx as T
from tvm.script.tirx import tile as Tx
from tvm.tirx.layout import S, TileLayout, laneid

import tirx_cuda_dispatch as tcd
from tirx_cuda_dispatch import bounds
from tirx_cuda_dispatch.bounds import OutOfBoundsError

TARGET = tvm.target.Target({"kind": "cuda", "arch": "sm_90a"})


def rows_copy(src_rows: int, copy_rows: int):
    """A warp copies A[0:copy_rows, :] of a (src_rows, 32) float32 global A into shared."""

    @T.prim_func
    def kernel(A_ptr: T.handle):
        A = T.match_buffer(A_ptr, (src_rows, 32), "float32")
        T.device_entry()
        T.cta_id([1])
        T.warp_id([1])
        T.lane_id([32])
        T.thread_id([32])
        A_s = T.alloc_buffer(
            (copy_rows, 32), "float32", scope="shared", layout=TileLayout(S[(copy_rows, 32)])
        )
        Tx.warp.copy(A_s[0:copy_rows, :], A[0:copy_rows, :])

    return kernel


def cta_tiles(ctas: int, rows: int = 64):
    """CTA bx copies rows [bx*32, bx*32+32) of a (rows, 32) A: past the end once bx*32+32 > rows."""

    @T.prim_func
    def kernel(A_ptr: T.handle, B_ptr: T.handle):
        A = T.match_buffer(A_ptr, (rows, 32), "float32")
        B = T.match_buffer(B_ptr, (rows, 32), "float32")
        T.device_entry()
        bx = T.cta_id([ctas])
        T.warp_id([1])
        T.lane_id([32])
        T.thread_id([32])
        A_s = T.alloc_buffer((32, 32), "float32", scope="shared", layout=TileLayout(S[(32, 32)]))
        Tx.warp.copy(A_s[:, :], A[bx * 32 : bx * 32 + 32, :])
        Tx.warp.copy(B[bx * 32 : bx * 32 + 32, :], A_s[:, :])

    return kernel


def guarded_thread_copy(guard: bool):
    """128 threads; thread tx copies 4 elements at tx*4 of a 128-element buffer: in bounds
    only under ``if tx < 32``."""

    @T.prim_func
    def kernel(A_ptr: T.handle, B_ptr: T.handle):
        A = T.match_buffer(A_ptr, (128,), "float32")
        B = T.match_buffer(B_ptr, (128,), "float32")
        T.device_entry()
        T.cta_id([1])
        T.warp_id([4])
        T.lane_id([32])
        tx = T.thread_id([128])
        if guard:
            if tx < 32:
                Tx.thread.copy(B[tx * 4 : tx * 4 + 4], A[tx * 4 : tx * 4 + 4])
        else:
            Tx.thread.copy(B[tx * 4 : tx * 4 + 4], A[tx * 4 : tx * 4 + 4])

    return kernel


def runtime_offset():
    """The region starts at a kernel argument: nothing bounds it."""

    @T.prim_func
    def kernel(A_ptr: T.handle, B_ptr: T.handle, n: T.int32):
        A = T.match_buffer(A_ptr, (128,), "float32")
        B = T.match_buffer(B_ptr, (128,), "float32")
        T.device_entry()
        T.cta_id([1])
        T.warp_id([1])
        T.lane_id([32])
        T.thread_id([32])
        Tx.thread.copy(B[n : n + 1], A[n : n + 1])

    return kernel


@pytest.mark.parametrize("pipeline", ["tirx_cuda_dispatch", "tirx_cuda_dispatch.strict"])
def test_a_region_past_the_end_is_an_error_in_both_pipelines(pipeline):
    with pytest.raises(OutOfBoundsError) as err:
        tvm.compile(rows_copy(32, 64), target=TARGET, tir_pipeline=pipeline)
    message = str(err.value)
    assert "A[0:64, 0:32]" in message  # the buffer and the region
    assert "axis 0 runs 0:64, outside the extent 32 of A" in message  # the axis and extent
    assert "test_bounds.py:" in message and "Tx.warp.copy(A_s[0:copy_rows, :]" in message


def test_the_in_bounds_twin_compiles():
    tvm.compile(rows_copy(64, 64), target=TARGET, tir_pipeline="tirx_cuda_dispatch.strict")


def test_a_cta_id_past_the_data_is_found_with_its_value():
    with pytest.raises(OutOfBoundsError, match=r"\(= 64:96 when bx = 2\)"):
        tvm.compile(cta_tiles(3), target=TARGET, tir_pipeline="tirx_cuda_dispatch")
    tvm.compile(cta_tiles(2), target=TARGET, tir_pipeline="tirx_cuda_dispatch")  # twin: fits


def test_an_enclosing_if_bounds_the_thread_index():
    [call] = bounds.scan(guarded_thread_copy(guard=True))
    assert [o.verdict for o in call.operands] == ["in bounds", "in bounds"]
    # negative control: the same copy by all 128 threads runs past the end
    [call] = bounds.scan(guarded_thread_copy(guard=False))
    assert [o.verdict for o in call.operands] == ["out of bounds", "out of bounds"]
    assert "when tx = 127" in call.operands[0].detail


def test_explain_reports_the_error_instead_of_raising():
    [report] = tcd.explain(rows_copy(32, 64))
    assert report.error.startswith("region out of bounds")
    assert "ERROR when lowered: region out of bounds" in str(report)


def test_undecided_bounds_warn_once_per_kernel_and_are_an_error_in_strict_mode():
    """explain() lists each undecided region; the default pipeline compiles the kernel
    with one warning naming the fact that would prove it; the strict one refuses it
    with that fact. The control: a kernel whose regions are proved warns nothing."""
    [call] = bounds.scan(runtime_offset())
    assert [o.verdict for o in call.operands] == ["undecided", "undecided"]
    [report] = tcd.explain(runtime_offset())
    assert report.error is None
    assert "bounds not proved: dst B[n]: undecided (axis 0: cannot prove 0 <= n" in str(report)
    with pytest.warns(bounds.BoundsNotProvedWarning) as caught:
        tvm.compile(runtime_offset(), target=TARGET, tir_pipeline="tirx_cuda_dispatch")
    assert len(caught) == 1
    assert "region not proved in bounds at " in str(caught[0].message)
    assert "T.assume(0 <= n and n + 1 <= 128)" in str(caught[0].message)
    with pytest.raises(bounds.BoundsNotProvedError, match=r"T\.assume\(0 <= n and n \+ 1 <= 128\)"):
        tvm.compile(runtime_offset(), target=TARGET, tir_pipeline="tirx_cuda_dispatch.strict")
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", bounds.BoundsNotProvedWarning)
        tvm.compile(cta_tiles(2), target=TARGET, tir_pipeline="tirx_cuda_dispatch.strict")


def test_a_plan_that_takes_a_region_past_the_edge_takes_it_undecided_too():
    """A TMA box handles any coordinate on its outer axes, so an undecided region of the
    role the chosen plan takes past the edge is marked so (explain shows it there, not as
    unproved); the control: the other role stays undecided."""
    [call] = bounds.scan(runtime_offset())
    roles = {o.role for o in call.operands}
    taken = sorted(roles)[0]
    marked = call.tolerating({taken: "zeros (TMA fills them)"})
    verdicts = {o.role: o.verdict for o in marked.operands}
    assert verdicts[taken].startswith("past the edge: zeros (TMA fills them) where it reaches")
    assert [verdicts[r] for r in roles - {taken}] == ["undecided"]
    assert [o.role for o in marked.past_edge] == [taken]


def bound_offset(form: str, off: int):
    """Four CTAs each copy 2 rows of an (8, 32) A starting at ``bx * 2 + off`` (``off`` 1:
    CTA 3 reads row 8), the offset bound by ``form``: a plain assignment (a register
    scalar stored once), ``T.let``, ``T.meta_var``, a loop over the row blocks instead of
    the CTAs, or a kernel argument under ``T.assume``."""
    rows = 2
    # fmt: off
    if form == "assign":
        @T.prim_func
        def kernel(A_ptr: T.handle, B_ptr: T.handle):
            A = T.match_buffer(A_ptr, (8, 32), "float32")
            B = T.match_buffer(B_ptr, (8, 32), "float32")
            T.device_entry()
            bx = T.cta_id([4])
            T.warp_id([1]); T.lane_id([32]); T.thread_id([32])  # noqa: E702
            r0 = bx * rows + off
            R = T.alloc_buffer((rows, 32), "float32", scope="shared", layout=TileLayout(S[(rows, 32)]))
            Tx.warp.copy(R[:, :], A[r0 : r0 + rows, :])
            Tx.warp.copy(B[bx * rows : bx * rows + rows, :], R[:, :])
    elif form == "let":
        @T.prim_func
        def kernel(A_ptr: T.handle, B_ptr: T.handle):
            A = T.match_buffer(A_ptr, (8, 32), "float32")
            B = T.match_buffer(B_ptr, (8, 32), "float32")
            T.device_entry()
            bx = T.cta_id([4])
            T.warp_id([1]); T.lane_id([32]); T.thread_id([32])  # noqa: E702
            r0: T.let[T.int32] = bx * rows + off
            R = T.alloc_buffer((rows, 32), "float32", scope="shared", layout=TileLayout(S[(rows, 32)]))
            Tx.warp.copy(R[:, :], A[r0 : r0 + rows, :])
            Tx.warp.copy(B[bx * rows : bx * rows + rows, :], R[:, :])
    elif form == "meta_var":
        @T.prim_func
        def kernel(A_ptr: T.handle, B_ptr: T.handle):
            A = T.match_buffer(A_ptr, (8, 32), "float32")
            B = T.match_buffer(B_ptr, (8, 32), "float32")
            T.device_entry()
            bx = T.cta_id([4])
            T.warp_id([1]); T.lane_id([32]); T.thread_id([32])  # noqa: E702
            r0 = T.meta_var(bx * rows + off)
            R = T.alloc_buffer((rows, 32), "float32", scope="shared", layout=TileLayout(S[(rows, 32)]))
            Tx.warp.copy(R[:, :], A[r0 : r0 + rows, :])
            Tx.warp.copy(B[bx * rows : bx * rows + rows, :], R[:, :])
    elif form == "loop":
        @T.prim_func
        def kernel(A_ptr: T.handle, B_ptr: T.handle):
            A = T.match_buffer(A_ptr, (8, 32), "float32")
            B = T.match_buffer(B_ptr, (8, 32), "float32")
            T.device_entry()
            T.cta_id([1])
            T.warp_id([1]); T.lane_id([32]); T.thread_id([32])  # noqa: E702
            R = T.alloc_buffer((rows, 32), "float32", scope="shared", layout=TileLayout(S[(rows, 32)]))
            for i in T.serial(4):
                Tx.warp.copy(R[:, :], A[i * rows + off : i * rows + off + rows, :])
                Tx.warp.copy(B[i * rows : i * rows + rows, :], R[:, :])
                T.cuda.cta_sync()
    else:  # assume
        @T.prim_func
        def kernel(A_ptr: T.handle, B_ptr: T.handle, t: T.int32):
            A = T.match_buffer(A_ptr, (8, 32), "float32")
            B = T.match_buffer(B_ptr, (8, 32), "float32")
            T.device_entry()
            T.cta_id([1])
            T.warp_id([1]); T.lane_id([32]); T.thread_id([32])  # noqa: E702
            T.assume(0 <= t and t < 4)
            R = T.alloc_buffer((rows, 32), "float32", scope="shared", layout=TileLayout(S[(rows, 32)]))
            Tx.warp.copy(R[:, :], A[t * rows + off : t * rows + off + rows, :])
            Tx.warp.copy(B[t * rows : t * rows + rows, :], R[:, :])
    # fmt: on
    return kernel


@pytest.mark.parametrize("form", ["assign", "let", "meta_var", "loop", "assume"])
def test_offsets_bound_by_bindings_are_proved_and_refuted_alike(form):
    """The issue's program: ``r0 = bx * 2 + 1`` over an 8-row buffer and 4 CTAs reads
    row 8; the strict pipeline compiled it. Every way of binding the offset is now
    refuted with the value that breaks it, and its in-bounds twin (offset 0) proved."""
    [good, _] = bounds.scan(bound_offset(form, 0))
    assert good.operands[1].verdict == "in bounds", good.operands[1]
    [bad, _] = bounds.scan(bound_offset(form, 1))
    assert bad.operands[1].verdict == "out of bounds", bad.operands[1]
    assert "(= 7:9 when " in bad.operands[1].detail
    with pytest.raises(OutOfBoundsError, match="axis 0 runs"):
        tvm.compile(bound_offset(form, 1), target=TARGET, tir_pipeline="tirx_cuda_dispatch.strict")
    # the twin compiles strict (a T.assume is removed once read: TVM cannot lower one)
    tvm.compile(bound_offset(form, 0), target=TARGET, tir_pipeline="tirx_cuda_dispatch.strict")


def test_an_if_that_narrows_a_loop_proves_the_region_inside_it():
    """``if kt + 1 < 3`` over ``kt`` in [0, 3) (examples/gemm_hopper.py's prefetch):
    TVM's analyzer proves ``kt < 2`` there but keeps ``kt``'s bound [0, 3), so the next
    tile's region was undecided; the narrowed range proves it. The control: the same
    region without the if runs past the end when kt = 2."""

    def prefetch(guarded: bool):
        # fmt: off
        @T.prim_func
        def kernel(A_ptr: T.handle):
            A = T.match_buffer(A_ptr, (8, 96), "float32")
            T.device_entry()
            T.cta_id([1])
            T.warp_id([1]); T.lane_id([32]); T.thread_id([32])  # noqa: E702
            A_s = T.alloc_buffer((8, 32), "float32", scope="shared", layout=TileLayout(S[(8, 32)]))
            for kt in T.serial(3):
                if guarded:
                    if kt + 1 < 3:
                        Tx.warp.copy(A_s[:, :], A[:, (kt + 1) * 32 : (kt + 1) * 32 + 32])
                else:
                    Tx.warp.copy(A_s[:, :], A[:, (kt + 1) * 32 : (kt + 1) * 32 + 32])
                T.cuda.cta_sync()
        # fmt: on
        return kernel

    [call] = bounds.scan(prefetch(True))
    assert call.operands[1].verdict == "in bounds", call.operands[1]
    [call] = bounds.scan(prefetch(False))
    assert call.operands[1].verdict == "out of bounds"
    assert "when kt = 2" in call.operands[1].detail


@pytest.mark.parametrize("voted", [False, True], ids=["plain", "under-a-vote"])
@pytest.mark.parametrize("limit", [3, 4])
def test_an_if_on_a_sum_of_ids_and_loops_proves_the_region_inside_it(limit, voted):
    """``if hx + i * 2 < 3`` over ``hx`` in [0, 2) and ``i`` in [0, 2) (a persistent grid
    taking heads hx, hx + 2, ...: examples/attention.py): TVM's analyzer cannot read the
    condition on the sum as a fact about it, so ``A[hx + i * 2]`` was undecided; the
    implication proves it. Under an ``if __any_sync(...) != 0`` inside it too (a warp
    vote; examples/attention.py's redo reads Q under the grid's ``if`` and votes): the
    implication of both conditions together is too much for the analyzer, and the first
    condition alone implies it. The control: ``if hx + i * 2 < 4`` reaches row 3 of 3
    (under the vote, which the check cannot know, undecided)."""

    # fmt: off
    @T.prim_func
    def kernel(A_ptr: T.handle):
        A = T.match_buffer(A_ptr, (3, 32), "float32")
        T.device_entry()
        hx = T.cta_id([2])
        T.warp_id([1]); T.lane_id([32]); T.thread_id([32])  # noqa: E702
        A_s = T.alloc_buffer((1, 32), "float32", scope="shared", layout=TileLayout(S[(1, 32)]))
        flag = T.alloc_buffer((1,), "uint32", scope="local")
        flag[0] = T.uint32(1)
        for i in T.serial(2):
            if hx + i * 2 < limit:
                if voted:
                    if T.cuda.any_sync(T.uint32(0xFFFFFFFF), flag[0] != T.uint32(0)) != 0:
                        Tx.warp.copy(A_s[:, :], A[hx + i * 2 : hx + i * 2 + 1, :])
                else:
                    Tx.warp.copy(A_s[:, :], A[hx + i * 2 : hx + i * 2 + 1, :])
            T.cuda.cta_sync()
    # fmt: on

    [call] = bounds.scan(kernel)
    beyond = "undecided" if voted else "out of bounds"
    assert call.operands[1].verdict == ("in bounds" if limit == 3 else beyond), call.operands[1]


def test_a_simulated_access_out_of_bounds_names_the_cta_and_thread():
    import numpy as np

    from tirx_cuda_dispatch import sim

    @T.prim_func
    def kernel(A_ptr: T.handle, B_ptr: T.handle, n: T.int32):
        A = T.match_buffer(A_ptr, (8, 32), "float32")
        B = T.match_buffer(B_ptr, (8, 32), "float32")
        T.device_entry()
        bx = T.cta_id([4])
        T.warp_id([1])
        T.lane_id([32])
        T.thread_id([32])
        R = T.alloc_buffer((2, 32), "float32", scope="shared", layout=TileLayout(S[(2, 32)]))
        Tx.warp.copy(R[:, :], A[bx * 2 + n : bx * 2 + n + 2, :])
        Tx.warp.copy(B[bx * 2 : bx * 2 + 2, :], R[:, :])

    a = np.random.default_rng(0).standard_normal((8, 32)).astype(np.float32)
    with pytest.warns(bounds.BoundsNotProvedWarning):
        with pytest.raises(sim.SimError, match=r"out of bounds \(thread \d+ of CTA \(x=3\)\)"):
            sim.run(kernel, [a, np.full_like(a, np.nan), 1], target="sm_90a")
        out = sim.run(kernel, [a, np.full_like(a, np.nan), 0], target="sm_90a")  # the control
    assert np.array_equal(out[1], a)


@pytest.mark.parametrize("trips", [0, 1])
def test_a_loop_of_no_trips_holds_no_region(trips):
    """``T.serial(1, n)`` where a shape makes ``n`` 1 (examples/attention.py's loop after
    the first key tile, with one tile): the body never runs, so its regions are in
    bounds, where TVM's analyzer cannot prove anything about ``t - 1`` over the empty
    range. The control: one trip more, and the same region is out of bounds."""
    n = 1 + trips

    # fmt: off
    @T.prim_func
    def kernel(A_ptr: T.handle):
        A = T.match_buffer(A_ptr, (32, 32), "float32")
        T.device_entry()
        T.cta_id([1])
        T.warp_id([1]); T.lane_id([32]); T.thread_id([32])  # noqa: E702
        A_s = T.alloc_buffer((32, 32), "float32", scope="shared", layout=TileLayout(S[(32, 32)]))
        for t in T.serial(1, n):
            Tx.warp.copy(A_s[:, :], A[t * 32 : t * 32 + 32, :])
    # fmt: on

    [call] = bounds.scan(kernel)
    assert call.operands[1].verdict == ("in bounds" if trips == 0 else "out of bounds")


@pytest.mark.parametrize("guarded", [True, False], ids=["if", "no-if"])
def test_an_if_narrows_a_loop_of_symbolic_extent(guarded):
    """``for t in T.serial(T.min(qb + 1, 3))`` (a causal kernel's loop to the diagonal)
    prefetching tile t + 1 of 130 rows: under ``t + 1 < 3``, ``t < qb`` and the else of
    ``t + 1 >= 2`` (the full tiles; the partial last one has its own copy), t's constant
    hull [0, 3) narrows to [0, 1), which proves rows (t + 1) 64 + 64 <= 130
    (examples/attention_sm80.py's prefetch); TVM's analyzer alone does not. The control:
    without the last condition, t + 1 reaches 2 and the region is not proved."""

    # fmt: off
    @T.prim_func
    def kernel(A_ptr: T.handle):
        A = T.match_buffer(A_ptr, (130, 32), "float32")
        T.device_entry()
        qb = T.cta_id([3])
        T.warp_id([1]); T.lane_id([32]); T.thread_id([32])  # noqa: E702
        A_s = T.alloc_buffer((64, 32), "float32", scope="shared", layout=TileLayout(S[(64, 32)]))
        for t in T.serial(T.min(qb + 1, 3)):
            if t + 1 < 3:
                if t < qb:
                    if guarded:
                        if t + 1 >= 2:
                            Tx.warp.copy(A_s[0:2, :], A[128:130, :])
                        else:
                            Tx.warp.copy(A_s[:, :], A[(t + 1) * 64 : (t + 1) * 64 + 64, :])
                    else:
                        Tx.warp.copy(A_s[:, :], A[(t + 1) * 64 : (t + 1) * 64 + 64, :])
            T.cuda.cta_sync()
    # fmt: on

    call = bounds.scan(kernel)[-1]
    assert (call.operands[1].verdict == "in bounds") == guarded, call.operands[1]


def test_loop_variables_are_bounded_by_their_loops():
    @T.prim_func
    def kernel(A_ptr: T.handle):
        A = T.match_buffer(A_ptr, (128, 32), "float32")
        T.device_entry()
        T.cta_id([1])
        w = T.warp_id([4])
        T.lane_id([32])
        T.thread_id([128])
        A_s = T.alloc_buffer((32, 32), "float32", scope="shared", layout=TileLayout(S[(32, 32)]))
        for i in range(5):
            Tx.warp.copy(A_s[w * 8 : w * 8 + 8, :], A[i * 32 + w * 8 : i * 32 + w * 8 + 8, :])

    [call] = bounds.scan(kernel)
    assert call.operands[0].verdict == "in bounds"
    assert call.operands[1].verdict == "out of bounds"
    assert "(= 128:136 when i = 4, w = 0)" in call.operands[1].detail


def test_a_scalar_element_read_is_checked_too():
    @T.prim_func
    def kernel(A_ptr: T.handle):
        A = T.match_buffer(A_ptr, (32, 8), "float32")
        T.device_entry()
        T.cta_id([1])
        T.warp_id([1])
        T.lane_id([32])
        T.thread_id([32])
        s = T.alloc_buffer((1,), "float32", scope="local")
        a = T.alloc_buffer((32, 8), "float32", scope="local", layout=TileLayout(S[(32, 8)]))
        Tx.warp.copy(a[:, :], A[:, :])
        Tx.warp.mul(a[:, :], a[:, :], s[1])

    call = bounds.scan(kernel)[1]
    assert [o.verdict for o in call.operands][-1] == "out of bounds"
    assert call.operands[-1].region == "s[1:2]"
    assert "outside the extent 1 of s" in call.operands[-1].detail


def test_a_padded_shared_layout_past_its_buffer_is_out_of_bounds():
    """TVM allocates a shared buffer by its shape: a layout with padded rows addresses past
    it, whichever variant (ours or TVM's) copies it."""

    def kernel_with(row_stride):
        @T.prim_func
        def kernel(A_ptr: T.handle):
            A = T.match_buffer(A_ptr, (8, 16), "float16")
            T.device_entry()
            T.cta_id([1])
            T.warp_id([1])
            T.lane_id([32])
            T.thread_id([32])
            A_s = T.alloc_buffer(
                (8, 16), "float16", scope="shared", layout=TileLayout(S[(8, 16) : (row_stride, 1)])
            )
            Tx.warp.copy(A_s[:, :], A[:, :])

        return kernel

    with pytest.raises(OutOfBoundsError, match=r"spans 212 elements but A_s holds 128"):
        tvm.compile(kernel_with(28), target=TARGET, tir_pipeline="tirx_cuda_dispatch")
    [call] = bounds.scan(kernel_with(16))  # negative control: the unpadded tile fits
    assert [o.verdict for o in call.operands] == ["in bounds", "in bounds"]


def test_a_layout_that_does_not_cover_its_buffer_is_an_error():
    """A swizzle atom that does not tile the shape (64-byte atoms on 40 float32 columns)
    covers 512 of 640 elements: every lowering would move the wrong ones (TVM's built-in
    gives wrong results on it); ours says so before any variant is asked."""
    from tvm.backend.cuda.tile_primitive.tma_utils import SwizzleMode, mma_shared_layout

    def kernel_with(cols):
        layout = mma_shared_layout("float32", SwizzleMode.SWIZZLE_64B_ATOM, (16, cols))

        @T.prim_func
        def kernel(A_ptr: T.handle):
            A = T.match_buffer(A_ptr, (16, cols), "float32")
            T.device_entry()
            T.cta_id([1])
            T.warp_id([1])
            T.lane_id([32])
            T.thread_id([32])
            A_s = T.alloc_buffer((16, cols), "float32", scope="shared", layout=layout)
            Tx.warp.copy(A_s[:, :], A[:, :])

        return kernel

    with pytest.raises(OutOfBoundsError, match=r"covers 512 elements but A_s has 640"):
        tvm.compile(kernel_with(40), target=TARGET, tir_pipeline="tirx_cuda_dispatch")
    [call] = bounds.scan(kernel_with(32))  # negative control: the atom tiles 16x32
    assert [o.verdict for o in call.operands] == ["in bounds", "in bounds"]


def test_a_strided_global_parameter_may_span_past_its_shape():
    """A global parameter's memory is the caller's: rows 16 apart of a (4, 4) view span 52
    elements, which the caller passes (tests/copy/test_gmem_smem.py runs it). TVM allocates
    shared and local buffers by their shape, so there the same layout is out of bounds."""

    def kernel_with(global_layout, shared_layout):
        @T.prim_func
        def kernel(A_ptr: T.handle):
            A = T.match_buffer(A_ptr, (4, 4), "float32", layout=global_layout)
            T.device_entry()
            T.cta_id([1])
            T.warp_id([1])
            T.lane_id([32])
            T.thread_id([32])
            A_s = T.alloc_buffer((4, 4), "float32", scope="shared", layout=shared_layout)
            Tx.warp.copy(A_s[:, :], A[:, :])

        return kernel

    strided, compact = TileLayout(S[(4, 4) : (16, 1)]), TileLayout(S[(4, 4)])
    [call] = bounds.scan(kernel_with(strided, compact))
    assert [o.verdict for o in call.operands] == ["in bounds", "in bounds"]
    tvm.compile(kernel_with(strided, compact), target=TARGET, tir_pipeline=tcd.STRICT_PIPELINE)
    # negative control: the same layout on the shared side
    with pytest.raises(OutOfBoundsError, match=r"spans 52 elements but A_s holds 16"):
        tvm.compile(kernel_with(compact, strided), target=TARGET, tir_pipeline=tcd.PIPELINE)
    # a global layout must still cover its shape: (4, 2) elements of a (4, 4) parameter
    [call] = bounds.scan(kernel_with(TileLayout(S[(4, 2) : (16, 1)]), compact))
    assert call.operands[1].verdict == "out of bounds"
    assert "covers 8 elements but A has 16" in call.operands[1].detail


def test_a_padded_local_layout_past_its_buffer_is_out_of_bounds():
    """TVM allocates a local buffer by its shape too (``float R_ptr[16]`` for a (4, 4)
    buffer whose layout spans 28): a register layout without thread axes is checked."""

    def kernel_with(row_stride):
        @T.prim_func
        def kernel():
            T.device_entry()
            T.cta_id([1])
            T.warp_id([1])
            T.lane_id([32])
            T.thread_id([32])
            R = T.alloc_buffer(
                (4, 4), "float32", scope="local", layout=TileLayout(S[(4, 4) : (row_stride, 1)])
            )
            Q = T.alloc_buffer((4, 4), "float32", scope="local", layout=TileLayout(S[(4, 4)]))
            Tx.thread.copy(R[:, :], Q[:, :])

        return kernel

    [call] = bounds.scan(kernel_with(8))
    assert [o.verdict for o in call.operands] == ["out of bounds", "in bounds"]
    assert call.operands[0].detail == (
        "its layout TileLayout(S[(4, 4):(8, 1)]) spans 28 elements but R holds 16 (shape "
        "(4, 4); TVM allocates a local buffer by its shape): declare the buffer with a shape "
        "that covers the padding"
    )
    [call] = bounds.scan(kernel_with(4))  # negative control: unpadded
    assert [o.verdict for o in call.operands] == ["in bounds", "in bounds"]


def test_a_register_layout_with_thread_axes_is_not_span_checked():
    """A fragment layout spreads its shape over threads: its span is not a register count."""
    from kernels import warp_g2local

    [call] = bounds.scan(warp_g2local())
    assert [o.verdict for o in call.operands] == ["in bounds", "in bounds"]


def test_a_linear_layout_shorter_than_its_buffer_extends():
    """``S[512:1]`` (a 64-byte swizzle over a flat run) on a (32, 24) float32 tile: TVM
    applies a one-dimensional contiguous layout past its extent, so the tile is described
    and both pipelines copy it right (fuzz seed 441 on the H200); not an error."""
    from tvm.tirx.layout import ComposeLayout

    layout = ComposeLayout(2, 2, 3, TileLayout(S[512:1]))

    @T.prim_func
    def kernel(A_ptr: T.handle):
        A = T.match_buffer(A_ptr, (32, 24), "float32")
        T.device_entry()
        T.cta_id([1])
        T.warp_id([1])
        T.lane_id([32])
        T.thread_id([32])
        A_s = T.alloc_buffer((32, 24), "float32", scope="shared", layout=layout)
        Tx.warp.copy(A_s[:, :], A[:, :])

    [call] = bounds.scan(kernel)
    assert [o.verdict for o in call.operands] == ["in bounds", "in bounds"]


def test_a_pointer_let_before_a_call_is_not_bound_to_the_analyzer():
    """TVM's Blackwell gemm_async programs let-bind an mbarrier pointer
    (``ptr = T.reinterpret(handle, ...)``) before tile calls; the analyzer cannot bind a
    handle (TypeError), so the scan keeps integer lets only and still proves the regions."""
    from tvm import sym, tirx
    from tvm.tirx import stmt as stmts

    @T.prim_func
    def kernel(A_ptr: T.handle):
        A = T.match_buffer(A_ptr, (32, 32), "float32")
        T.device_entry()
        T.cta_id([1])
        T.warp_id([1])
        T.lane_id([32])
        T.thread_id([32])
        A_s = T.alloc_buffer((32, 32), "float32", scope="shared", layout=TileLayout(S[(32, 32)]))
        Tx.warp.copy(A_s[:, :], A[:, :])

    ptr = tirx.Var("ptr", tvm.ir.PointerType(tvm.ir.PrimType("uint64"), "shared"))
    value = tirx.call_intrin(ptr.ty, "tirx.reinterpret", tirx.const(0, "uint64"))
    with pytest.raises(TypeError):  # the negative control: why such a let must be left out
        sym.Analyzer().bind(ptr, value)

    def with_let(stmt):
        if type(stmt).__name__ == "SeqStmt":
            return stmts.SeqStmt([stmts.Bind(ptr, value), *[with_let(s) for s in stmt.seq]])
        if type(stmt).__name__ == "AttrStmt":
            return stmts.AttrStmt(stmt.node, stmt.attr_key, stmt.value, with_let(stmt.body))
        return stmt

    func = kernel.with_body(with_let(kernel.body))
    (call,) = bounds.scan(func)
    assert [o.verdict for o in call.operands] == ["in bounds", "in bounds"]


def test_a_call_repeats_unless_a_cta_barrier_runs_between_its_runs():
    """``Enclosing.repeats`` (a reduction's wait before it reuses its workspace): a loop of
    more than one trip repeats the call; a loop of one trip does not; a CTA barrier every
    iteration runs orders the runs, one inside an ``if`` or a ``while``, one a ``break``
    or ``continue`` may skip, or a warp's barrier does not."""

    @T.prim_func
    def kernel(A_ptr: T.handle, n: T.int32):
        A = T.match_buffer(A_ptr, (32, 32), "float32")
        T.device_entry()
        T.cta_id([1])
        T.warp_id([1])
        T.lane_id([32])
        tid = T.thread_id([32])
        A_s = T.alloc_buffer((32, 32), "float32", scope="shared", layout=TileLayout(S[(32, 32)]))
        Tx.warp.copy(A_s[:, :], A[:, :])  # 0: no loop
        for _ in range(1):
            Tx.warp.copy(A_s[:, :], A[:, :])  # 1: one trip
        for _ in range(3):
            Tx.warp.copy(A_s[:, :], A[:, :])  # 2: no barrier
        for _ in range(3):
            Tx.warp.copy(A_s[:, :], A[:, :])  # 3: a barrier after it
            T.cuda.cta_sync()
        for _ in range(n):
            T.cuda.cta_sync()
            for _ in range(1):
                Tx.warp.copy(A_s[:, :], A[:, :])  # 4: barrier before, in the repeating loop
        for _ in range(3):
            Tx.warp.copy(A_s[:, :], A[:, :])  # 5: the barrier only under an if
            if tid < 40:
                T.cuda.cta_sync()
        for _ in range(3):
            Tx.warp.copy(A_s[:, :], A[:, :])  # 6: the barrier in a loop that may not run
            for _ in range(n):
                T.cuda.cta_sync()

        for _ in range(3):
            Tx.warp.copy(A_s[:, :], A[:, :])  # 7: a continue may skip the barrier
            if tid == 1:
                continue
            T.cuda.cta_sync()
        for _ in range(n):
            for i in range(3):
                Tx.warp.copy(A_s[:, :], A[:, :])  # 8: a break may skip it
                if i == 0:
                    break
                T.cuda.cta_sync()
        while n > 0:
            Tx.warp.copy(A_s[:, :], A[:, :])  # 9: a while whose body always syncs
            T.tvm_storage_sync("shared")
        for _ in range(3):
            Tx.warp.copy(A_s[:, :], A[:, :])  # 10: __syncwarp is no CTA barrier
            T.tvm_storage_sync("warp")

    repeats = [c.enclosing.repeats for c in bounds.scan(kernel)]
    assert repeats == [False, False, True, False, False, True, True, True, True, False, True]


def pool_carved(raw_elements: int):
    """An (8, 128) float16 tile laid out with row stride 256 (1920 elements of span),
    carved from an SMEMPool allocation of ``raw_elements`` (test_dsmem.py's form), copied
    in from global and back out."""
    layout = TileLayout(S[(8, 128) : (256, 1)])

    # fmt: off
    @T.prim_func
    def kernel(A_ptr: T.handle, B_ptr: T.handle):
        A = T.match_buffer(A_ptr, (8, 128), "float16")
        B = T.match_buffer(B_ptr, (8, 128), "float16")
        T.device_entry()
        T.cta_id([1])
        T.warp_id([1])
        T.lane_id([32])
        T.thread_id([32])
        pool = T.SMEMPool()
        raw = pool.alloc([raw_elements], "float16", align=128)
        tile = T.decl_buffer((8, 128), "float16", raw.data, elem_offset=0, scope="shared.dyn",
                             layout=layout)
        pool.commit()
        Tx.warp.copy(tile[:, :], A[:, :])
        Tx.warp.copy(B[:, :], tile[:, :])
    # fmt: on
    return kernel


def test_a_tile_carved_from_a_pool_is_checked_against_the_allocation():
    """test_dsmem.py's buffers: the tile's shape holds 1024 elements, its layout spans 1920,
    the pool allocation it is declared over holds 1920: in bounds, and our copy takes it
    (round trip in the simulator). The control: an allocation of 1024 is too small."""
    import numpy as np

    from tirx_cuda_dispatch import sim

    calls = bounds.scan(pool_carved(1920))
    assert all(o.verdict == "in bounds" for cb in calls for o in cb.operands)
    assert [r.variant for r in tcd.explain(pool_carved(1920))] == ["gmem_smem", "gmem_smem"]
    a = np.random.default_rng(2).standard_normal((8, 128)).astype(np.float16)
    out = sim.run(pool_carved(1920), [a, np.full_like(a, np.nan)], target="sm_90a")
    assert np.array_equal(out[1], a)
    [small, _] = bounds.scan(pool_carved(1024))
    assert small.operands[0].verdict == "out of bounds"
    assert "the memory tile is declared over holds 1024 from its start" in small.operands[0].detail


def register_view_copy(stride: int, offset: int = 0, regs: int = 4):
    """A warp stores a 32 x 4 register view of R (``regs`` float32 registers a thread),
    declared ``offset`` registers into R (as ``R.sub[4:8].view(...)`` declares it), whose
    layout puts column j in register ``stride * j`` (1: registers 0-3; 2: 0-6)."""

    @T.prim_func
    def kernel(A_ptr: T.handle):
        A = T.match_buffer(A_ptr, (32, regs), "float32")
        T.device_entry()
        T.cta_id([1])
        T.warp_id([1])
        T.lane_id([32])
        tx = T.thread_id([32])
        R = T.alloc_local((regs,), "float32")
        for j in range(regs):
            R[j] = A[tx, j]
        R_frag = T.decl_buffer((32, 4), "float32", data=R.data, elem_offset=offset, scope="local",
                               layout=TileLayout(S[(32, 4) : (1 @ laneid, stride)]))  # fmt: skip
        A_s = T.alloc_buffer((32, 4), "float32", scope="shared", layout=TileLayout(S[(32, 4)]))
        Tx.warp.copy(A_s[:, :], R_frag[:, :])
        Tx.warp.copy(A[:, 0:4], A_s[:, :])

    return kernel


def test_a_register_view_past_its_registers_is_out_of_bounds():
    """A view with thread axes names registers per thread: past the registers it is
    declared over, whichever variant lowers the call would read other registers (or
    local memory). The control: the view within them is in bounds."""
    [call, _] = bounds.scan(register_view_copy(2))
    src = next(o for o in call.operands if o.role == "src")
    assert src.verdict == "out of bounds"
    assert src.detail.endswith(
        "names registers 0 to 6 (float32 elements from R_frag's first) of each thread, but R "
        "holds 4 from there: keep the view's registers inside them, or allocate R larger"
    ), src.detail
    with pytest.raises(OutOfBoundsError, match=r"names registers 0 to 6 \(float32"):
        tvm.compile(register_view_copy(2), target=TARGET, tir_pipeline="tirx_cuda_dispatch")
    assert all(o.verdict == "in bounds" for cb in bounds.scan(register_view_copy(1))
               for o in cb.operands)  # fmt: skip


def test_a_register_view_declared_into_its_registers_declines():
    """Register variants index a view's memory from its first register by its layout: a
    view declared 4 registers in (``elem_offset``) would have moved registers 0-3, not
    4-7. Each of our variants declines naming it; the view is in bounds (the offset is
    counted there). The control: the view at offset 0 is taken."""
    assert all(o.verdict == "in bounds" for cb in bounds.scan(register_view_copy(1, 4, 8))
               for o in cb.operands)  # fmt: skip
    report = tcd.explain(register_view_copy(1, 4, 8))[0]
    assert report.variant is None or report.variant not in {"reg", "ldstmatrix"}
    [reg] = [c for c in report.candidates if c.variant == "reg"]
    assert "src R_frag is declared 4 elements into the registers it lies in (elem_offset)" in (
        reg.reason
    )
    assert tcd.explain(register_view_copy(1, 0, 8))[0].variant == "reg"
