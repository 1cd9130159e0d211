"""copy_async -> tma_auto: global <-> shared memory with the Tensor Memory Accelerator.

Accepts: a CUDA target of sm_90 or newer (``cp.async.bulk.tensor``, PTX ISA 9.7.9.25.5.1,
target notes); scope thread (the calling thread issues: write the call under ``if tid ==
0``) or warp / warpgroup / cta (the scope's first participating thread issues; the
others skip it); a valid copy between global and shared memory:

- a *load* (global -> shared) with an ``mbar=`` config: the mbarrier whose phase the
  copy's bytes complete (``mbar=bar.ptr_to([0])``), as TVM 0.27's ``tma_auto`` takes it.
  A load without ``mbar`` is copy -> ldgsts's (cp.async): cp.async has no transaction
  count;
- a *store* (shared -> global), without ``mbar``: it completes through the issuing
  thread's bulk async-group. ``use_tma_reduce="add"`` (or ``"min"``, ``"max"``) makes it
  a reduction into global memory (``cp.reduce.async.bulk.tensor``) for the element types
  the PTX ISA lists for that operation.

Plans the box from the shared layout, as the variant name says, the same way in both
directions: the tensor map's dimensions are the global buffer's (dimension 0 the
contiguous one, the others by growing stride, so a transposed global operand maps as
well; byte strides multiples of 16), and its box takes, from the
innermost shared element outwards, each dimension's innermost run of the region while the
shared offsets stay dense (a box lies in shared memory row after row, dimension 0
fastest), at most 256 elements a dimension. What the box leaves of the region (the
column blocks of a 64-column-blocked tile, a second stage) becomes issues, one
instruction each, their coordinates and shared offsets stepped. A swizzled shared layout
(``ComposeLayout``) must be one TMA applies itself: 16-byte units whose index bits 4-6
take bits 7-9 of the address (``Swizzle<B, 4, 3>`` on bytes: 32, 64 or 128 bytes), with
the inner box no wider than the swizzle; the TMA unit computes it from the shared
address, so the allocation must be aligned to the swizzle's 256, 512 or 1024 bytes
(``T.alloc_buffer(..., align=1024)``) and every issue's offset a multiple of it; without
a swizzle every issue starts 128-byte aligned.

The global region may reach past the tensor's edge (an edge tile of a GEMM whose sizes
are not multiples of the tile): a load reads zeros there and a store writes nothing
there, as the hardware does with the box's out-of-range elements, so the bounds check
accepts such a global region for this variant and only for it (explain() says which
elements are filled or clipped).

A load may multicast (TVM's ``cta_mask=``, a 16-bit mask of the cluster's CTA ranks): the
box lands at dst's offset in the shared memory of every CTA of the mask and completes its
bytes on the mbarrier at mbar's offset in each (PTX ISA ``.multicast::cluster``; a mask of
one bit names that CTA, which need not be the issuer; 0 is no multicast). On Blackwell,
TVM's ``cta_group=2`` makes it ``.cta_group::2``: mbar may name the barrier of either CTA
of a pair (a shared::cluster address, mapa'd into the pair's first CTA).

Emits, per issue, ``cp.async.bulk.tensor.<r>d.shared::cluster.global.mbarrier::
complete_tx::bytes{.multicast::cluster} [dst], [tensorMap, {c0, ..}], [mbar]{, ctaMask}``
(load) or
``cp{.reduce}.async.bulk.tensor.<r>d.global.shared::cta{.op}.tile.bulk_group [tensorMap,
{c0, ..}], [src]`` (store) from the issuing thread; the host encodes the tensor map
before the launch (a :class:`..resources.TensorMap`, one per kernel for equal
descriptors).

Completion is the caller's. A load does not arrive on its mbarrier, it only completes its
bytes as transactions (complete-tx): before reading dst the caller has one thread
announce them (``T.ptx.mbarrier.arrive.expect_tx(bar, bytes)``; explain() says how many)
and every reader wait for the phase (``T.cuda.mbarrier_wait(bar, phase)``). A store joins
the issuing thread's bulk async-group: the threads that wrote src run
``fence.proxy.async`` and a barrier before it, and the issuing thread commits the group
(``cp.async.bulk.commit_group``) and waits for it (``cp.async.bulk.wait_group.read N``
before src is written again, ``wait_group N`` before dst is read).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tvm import sym, tirx
from tvm.script import tirx as T

from ..call import Operand, TileCall
from ..codegen import impl_prim_func, participant_index
from ..errors import Decline, check
from ..irfacts import as_flag, as_int, prove_multiple
from ..isa.bulk import COORD_ALIGN, CTA_MASK_BITS, REDUCE_TYPES, shared_align
from ..layout.atoms import memory_view, refine_tagged
from ..layout.swizzle import Swizzle, byte_swizzle
from ..predicates import (
    allocation_alignment,
    issuer_text,
    requires_cuda,
    requires_known_participants,
    requires_memory_pair,
    requires_scope,
    requires_valid_copy,
    sm_at_least,
    tensor_map_order,
    tma_coordinates,
    unknown_config,
)
from ..registry import variant
from ..resources import Alignment, Completion, TensorMap

TMA_MIN_SM = 90
MAX_RANK = 5  # tensor-map dimensions (cuTensorMapEncodeTiled: tensorRank 1..5)
MAX_BOX = 256  # elements of one box dimension
MAX_STRIDE = 1 << 40  # globalStrides < 2^40 bytes
STRIDE_ALIGN = 16  # globalStrides and the global address: multiples of 16 bytes
INNER_BOX_ALIGN = 16  # boxDim[0] * element size: a multiple of 16 bytes
L2_PROMOTION = 256  # bytes: the L2 sector promotion of every descriptor
MAX_UNROLLED = 64  # issues of one call written out; more run in a loop

CONFIG_KEYS = {
    "mbar": "a load's mbarrier (a pointer, bar.ptr_to([0])) whose phase the copy's bytes complete",
    "use_tma_reduce": "a store's reduction into global memory: add, min or max",
    "tensormap_l2_promotion": "the descriptor's L2 sector promotion, TVM's forms: 0-3, 'none', "
    "'L2::64B', 'L2::128B' or 'L2::256B' (default 256 bytes)",
    "cta_mask": "a load's multicast: the CTAs of the cluster (bit r: the CTA of rank r) that "
    "receive the box, each at dst's offset in its own shared memory and completing the bytes "
    "on its own mbarrier at mbar's offset (0, the default: this CTA only)",
    "cta_group": "a load's CTA group on Blackwell: 2 lets mbar name the barrier of either CTA "
    "of the pair (.cta_group::2, sm_100+); 1, the default, this CTA's",
    "tma_dtype": "a float32 load's descriptor type: 'tf32' (or 'tfloat32') makes the TMA "
    "round every element to tf32 (to nearest, ties to even) as it lands, for a tf32 MMA",
    "prefetch_tensormap": "whether the threads of threadIdx.x 0 prefetch the descriptor at the "
    "kernel's start (prefetch.tensormap; True, the default: the first copy does not wait for "
    "the descriptor's fetch)",
}
TMA_DTYPES = ("tf32", "tfloat32")  # TVM 0.27's names for CU_TENSOR_MAP_DATA_TYPE_TFLOAT32
CTA_GROUP_MIN_SM = 100  # .cta_group::2 on a tensor copy
# tensormap_l2_promotion as TVM 0.27 writes it -> bytes (CU_TENSOR_MAP_L2_PROMOTION_*)
L2_PROMOTIONS = {"0": 0, "1": 64, "2": 128, "3": 256, "none": 0, "L2::64B": 64,
                 "L2::128B": 128, "L2::256B": 256}  # fmt: skip


# -- predicates ------------------------------------------------------------------------------
def requires_tma_arch(call: TileCall) -> tuple[bool, str | None]:
    """The Tensor Memory Accelerator came with Hopper (sm_90)."""
    instead = "use cp.async (copy_async without mbar=, copy -> ldgsts) there"
    return sm_at_least(call, TMA_MIN_SM, "cp.async.bulk.tensor (TMA)", instead)


def requires_tma_dtype(call: TileCall) -> tuple[bool, str | None]:
    """``tma_dtype=`` (TVM 0.27's) is absent, or 'tf32' / 'tfloat32' over a float32 global
    operand (CU_TENSOR_MAP_DATA_TYPE_TFLOAT32 has float32's four bytes)."""
    value = call.config.get("tma_dtype")
    if value is None:
        return True, None
    text = str(getattr(value, "value", value))
    if text not in TMA_DTYPES:
        return False, (
            f"tma_dtype={value!r} is not a descriptor type this copy takes: write "
            f"{' or '.join(repr(t) for t in TMA_DTYPES)} (a float32 buffer loaded as tf32), or "
            "drop it (the descriptor takes the buffer's own type)"
        )
    glob = call.operand("src")
    if str(glob.dtype) != "float32":
        return False, (
            f"tma_dtype={text!r} needs a float32 global buffer; src {glob.name} holds "
            f"{glob.dtype} (drop tma_dtype=)"
        )
    return True, None


def prefetch_of(call: TileCall) -> bool | None:
    """``prefetch_tensormap=`` (TVM 0.27's key) as a bool, True where absent; None where it
    is not a constant."""
    value = call.config.get("prefetch_tensormap")
    return True if value is None else as_flag(value)


def requires_prefetch_flag(call: TileCall) -> tuple[bool, str | None]:
    """``prefetch_tensormap=`` is absent or a constant: whether the kernel prefetches the
    descriptor is decided when it is lowered."""
    if prefetch_of(call) is None:
        value = call.config.get("prefetch_tensormap")
        return False, (
            f"prefetch_tensormap={value!r} ({type(value).__name__}) is not a constant: write "
            "True (the kernel prefetches the descriptor at its start) or False"
        )
    return True, None


def global_base_offset(glob: Operand) -> Any:
    """Elements from the global buffer's data to its element 0: the view's ``elem_offset``
    and its layout's offset on memory axes."""
    offset = glob.buffer.elem_offset
    for axis, value in getattr(glob.layout, "offset", {}).items():
        if axis.is_memory():
            offset = offset + value
    return sym.Analyzer().simplify(offset)


def requires_global_at_its_data(call: TileCall) -> tuple[bool, str | None]:
    """The global buffer's element 0 is its data's first element: the host encodes the
    tensor map from the data's address, and the boxes' coordinates count from there."""
    glob = call.operand("dst" if direction_of(call) == "store" else "src")
    offset = global_base_offset(glob)
    if as_int(offset) == 0:
        return True, None
    return False, (
        f"{glob.role} {glob.name} is a view {offset} elements into its data (elem_offset or "
        "its layout's offset); a tensor map starts at the data's own address, so the boxes "
        "would land at the data's first elements: copy from the buffer the data was "
        "declared as, at the view's region"
    )


def direction_of(call: TileCall) -> str:
    """``load`` (global -> shared) or ``store`` (shared -> global)."""
    return "store" if call.operand("dst").memory == "global" else "load"


def requires_completion(call: TileCall) -> tuple[bool, str | None]:
    """The config names how the copy completes, and no key it does not take: a load's
    ``mbar=``, a store's bulk async-group (no ``mbar``; ``use_tma_reduce=`` optional)."""
    cfg = call.config
    unknown = unknown_config(call, CONFIG_KEYS, "this TMA copy")
    if unknown:
        return False, unknown
    if direction_of(call) == "load":
        if cfg.get("mbar") is None:
            return False, (
                "no mbar= config: a TMA load completes its bytes on an mbarrier; pass "
                "mbar=bar.ptr_to([0]) (without it, copy_async is cp.async: copy -> ldgsts)"
            )
        if cfg.get("use_tma_reduce") is not None:
            return False, "use_tma_reduce= is a store's (shared -> global); this copy loads"
        ok, why = requires_tma_dtype(call)
        if not ok:
            return ok, why
        ok, why = requires_cta_group(call)
        return (ok, why) if not ok else requires_cta_mask(call)
    if cta_group_of(call) != 1:
        return False, (
            f"cta_group={cfg.get('cta_group')} on a store (shared -> global): a CTA group "
            "names where a load's mbarrier lies; drop cta_group="
        )
    if cta_mask_of(call) != 0:
        return False, (
            f"cta_mask={cfg.get('cta_mask')} on a store (shared -> global): a TMA store "
            "writes global memory once, multicast is a load's; drop cta_mask="
        )
    if cfg.get("tma_dtype") is not None:
        return False, (
            f"tma_dtype={cfg.get('tma_dtype')} on a store (shared -> global): the tf32 "
            "descriptor rounds what a load lands for a tf32 MMA; store the float32 as it is "
            "(drop tma_dtype=)"
        )
    if cfg.get("mbar") is not None:
        return False, (
            "mbar= on a store (shared -> global): a TMA store completes through the issuing "
            "thread's bulk async-group (cp.async.bulk.commit_group / wait_group), not an "
            "mbarrier; drop mbar="
        )
    op = cfg.get("use_tma_reduce")
    if op is None:
        return True, None
    op, dtype = str(op), call.operand("dst").dtype
    if op not in REDUCE_TYPES:
        return False, (
            f"use_tma_reduce={op!r}: this variant reduces with {', '.join(REDUCE_TYPES)}"
        )
    if dtype not in REDUCE_TYPES[op]:
        return False, (
            f"use_tma_reduce={op!r} on {dtype}: cp.reduce.async.bulk.tensor .{op} takes "
            f"{', '.join(REDUCE_TYPES[op])} (PTX ISA)"
        )
    return True, None


def cta_mask_of(call: TileCall) -> Any:
    """The load's multicast mask: an int (0: no multicast) or the expression the author
    wrote."""
    value = call.config.get("cta_mask")
    if value is None:
        return 0
    number = as_int(value)
    return value if number is None else number


def cta_group_of(call: TileCall) -> int | None:
    """The load's CTA group (1 where the config has none; None where it is not a
    constant)."""
    value = call.config.get("cta_group")
    return 1 if value is None else as_int(value)


def requires_cta_group(call: TileCall) -> tuple[bool, str | None]:
    """``cta_group=`` 1 or 2 (PTX ISA 9.7.9.25.5.1: ``.cta_group::2``, sm_100+, lets the
    mbarrier be the peer CTA's of a CTA pair)."""
    group = cta_group_of(call)
    if group not in (1, 2):
        return False, (
            f"cta_group={call.config.get('cta_group')}: a tensor copy's CTA group is 1 or 2 "
            "(a constant)"
        )
    if group == 2:
        return sm_at_least(
            call, CTA_GROUP_MIN_SM, "cp.async.bulk.tensor .cta_group::2",
            "a cluster's CTAs each complete their own barrier there (cta_group=1)",
        )  # fmt: skip
    return True, None


def requires_cta_mask(call: TileCall) -> tuple[bool, str | None]:
    """``cta_mask=`` is a ``.u16`` operand (PTX ISA 9.7.9.25.5.1): a constant fits 16 bits,
    an expression is an integer."""
    mask = cta_mask_of(call)
    if isinstance(mask, int):
        if not 0 <= mask < 1 << CTA_MASK_BITS:
            return False, (
                f"cta_mask={mask} does not fit the 16-bit ctaMask operand (one bit per CTA "
                "of the cluster, at most 16); write a mask of the cluster's ranks"
            )
        return True, None
    dtype = str(getattr(mask, "dtype", ""))
    if not dtype.startswith(("int", "uint")):
        return False, f"cta_mask={mask} is not an integer expression ({dtype or type(mask)})"
    return True, None


# -- the plan --------------------------------------------------------------------------------
@dataclass(frozen=True)
class TmaDim:
    """One tensor-map dimension (driver order): the global buffer's dimension ``axis``."""

    axis: int
    extent: Any  # globalDim (int, or the buffer's symbolic extent)
    stride: int  # bytes (dimension 0: the element size)
    box: int


@dataclass(frozen=True)
class IssueAxis:
    """What the box leaves of the region: ``count`` instructions that step the coordinate
    of buffer dimension ``axis`` by ``step`` and the shared offset by ``shared_stride``
    elements."""

    count: int
    axis: int
    step: int
    shared_stride: int


@dataclass(frozen=True)
class TmaPlan:
    """The tensor map, the issues that cover the region, and how the copy completes."""

    dtype: str
    elem_bits: int
    dims: tuple[TmaDim, ...]  # driver order, dimension 0 innermost
    issues: tuple[IssueAxis, ...]  # outer -> inner
    swizzle: int  # bytes: 0, 32, 64, 128
    shared_align: int  # bytes every issue's shared address is a multiple of
    issuer: str
    direction: str = "load"  # "load": global -> shared; "store": shared -> global
    reduce: str | None = None  # a store's cp.reduce operation
    l2_promotion: int = L2_PROMOTION  # bytes
    alignment: Alignment | None = None  # the shared allocation's alignment, raised by the bridge
    cta_mask: Any = 0  # a load's multicast: the cluster's CTAs receiving the box (0: none)
    cta_group: int = 1  # 2: mbar may be the peer CTA's barrier (sm_100+)
    tf32: bool = False  # a load through a TFLOAT32 descriptor: elements rounded to tf32
    prefetch: bool = True  # the kernel prefetches the descriptor at its start

    @property
    def multicast(self) -> bool:
        return not (isinstance(self.cta_mask, int) and self.cta_mask == 0)

    @property
    def landings(self) -> int:
        """The CTAs one issue's box lands in: the mask's bits (1 without multicast, or
        where the mask is not a constant)."""
        if not self.multicast or not isinstance(self.cta_mask, int):
            return 1
        return bin(self.cta_mask).count("1")

    @property
    def rank(self) -> int:
        return len(self.dims)

    @property
    def global_role(self) -> str:
        return "src" if self.direction == "load" else "dst"

    @property
    def box_elements(self) -> int:
        return math.prod(d.box for d in self.dims)

    @property
    def count(self) -> int:
        return math.prod(a.count for a in self.issues)

    @property
    def box_bytes(self) -> int:
        return self.box_elements * self.elem_bits // 8

    @property
    def total_bytes(self) -> int:
        """The bytes one call moves (a load's: what expect_tx gets)."""
        return self.box_bytes * self.count

    @property
    def instruction(self) -> str:
        if self.direction == "load":
            return (
                f"cp.async.bulk.tensor.{self.rank}d.shared::cluster.global.mbarrier::"
                "complete_tx::bytes"
                + (".multicast::cluster" if self.multicast else "")
                + (f".cta_group::{self.cta_group}" if self.cta_group != 1 else "")
            )
        if self.reduce is not None:
            return (
                f"cp.reduce.async.bulk.tensor.{self.rank}d.global.shared::cta.{self.reduce}"
                ".tile.bulk_group"
            )
        return f"cp.async.bulk.tensor.{self.rank}d.global.shared::cta.tile.bulk_group"

    def tensor_map(self) -> TensorMap:
        return TensorMap(
            "tensor_map",
            self.global_role,
            self.dtype,
            tuple(d.extent for d in self.dims),
            tuple(d.stride for d in self.dims[1:]),
            tuple(d.box for d in self.dims),
            self.swizzle,
            self.l2_promotion,
            f"the box of every {self.instruction.split('.global')[0]}",
            self.tf32,
            self.prefetch,
        )

    def completion(self) -> Completion:
        if self.direction == "load" and self.multicast:
            return Completion(
                "mbarrier complete-tx",
                f"the copy lands in every CTA of cta_mask {self.cta_mask} at dst's offset and "
                f"completes {self.total_bytes} bytes on the mbarrier at mbar's offset in each "
                "of them, and does not arrive: in every receiving CTA one thread announces "
                "all the bytes that land there, from every CTA that multicasts to it (T.ptx."
                "mbarrier.arrive.expect_tx), its readers wait for the phase, and a CTA issues "
                "into a stage only after every receiving CTA has freed it (the cluster's "
                "consumers arrive on each issuer's empty barrier, remote arrivals through "
                "mapa)",
            )
        if self.direction == "load" and self.cta_group == 2:
            return Completion(
                "mbarrier complete-tx",
                f"the copy completes {self.total_bytes} bytes on the current phase of the "
                "mbarrier mbar names, this CTA's or its pair's (.cta_group::2: mbar is a "
                "shared::cluster address, e.g. mapa'd into the pair's first CTA) and does "
                "not arrive: one thread of that CTA announces every byte that completes "
                "there (T.ptx.mbarrier.arrive.expect_tx) and its readers wait for the phase",
            )
        if self.direction == "load":
            return Completion(
                "mbarrier complete-tx",
                f"the copy completes {self.total_bytes} bytes on mbar's current phase and "
                f"does not arrive: one thread announces them (T.ptx.mbarrier.arrive."
                f"expect_tx(mbar, {self.total_bytes})) and every reader waits for the phase "
                "(T.cuda.mbarrier_wait) before reading dst",
            )
        return Completion(
            "bulk async-group",
            f"the copy joins {self.issuer}'s bulk async-group: the threads that wrote src run "
            "fence.proxy.async and a barrier before the call, and the issuing thread commits "
            "(T.ptx.cp.async.bulk.commit_group()) and waits (T.ptx.cp.async.bulk.wait_group."
            "read(n) before src is written again, wait_group(n) before dst is read; the "
            "CTA may not exit before the reads completed)",
        )

    def edge(self) -> str:
        """What happens to the box's elements outside the tensor."""
        if self.direction == "load":
            return "elements outside src read as zeros (TMA fills them)"
        return "elements outside dst are not written (TMA clips the box)"

    def edges(self) -> dict[str, str]:
        """The operand whose region may reach past its buffer, and what happens there."""
        return {self.global_role: self.edge()}

    def resources(self) -> tuple[TensorMap | Completion | Alignment, ...]:
        raised = () if self.alignment is None else (self.alignment,)
        return (self.tensor_map(), self.completion(), *raised)

    def facts(self) -> dict:
        if self.direction == "load":
            ptx = f"{self.instruction} [dst], [tensor_map, {{coords}}], [mbar]"
        else:
            ptx = f"{self.instruction} [tensor_map, {{coords}}], [src]"
        facts = {
            "ptx": ptx,
            "direction": self.direction,
            "issues": self.count,
            "issue_axes": [
                f"{a.count} x (dim {a.axis} +{a.step}, shared +{a.shared_stride})"
                for a in self.issues
            ],
            "box": "x".join(str(d.box) for d in self.dims),
            "box_bytes": self.box_bytes,
            "swizzle": f"{self.swizzle}B" if self.swizzle else "none",
            "shared_align": self.shared_align,
            "issuer": self.issuer,
            "edge": self.edge(),
        }
        if self.direction == "load":
            facts["expect_tx_bytes"] = self.total_bytes
        facts["prefetch"] = (
            "threadIdx.x 0 prefetches the descriptor at the kernel's start (prefetch.tensormap)"
            if self.prefetch
            else "none (prefetch_tensormap=False)"
        )
        if self.cta_group != 1:
            facts["cta_group"] = self.cta_group
        if self.tf32:
            facts["tma_dtype"] = (
                "tf32: the descriptor is CU_TENSOR_MAP_DATA_TYPE_TFLOAT32; every float32 "
                "lands rounded to tf32 (10 mantissa bits, to nearest, ties to even)"
            )
        if self.multicast:
            facts["cta_mask"] = str(self.cta_mask)
            facts["ptx"] = facts["ptx"].replace("[mbar]", "[mbar], ctaMask")
        if self.reduce is not None:
            facts["reduce"] = self.reduce
        if self.count > MAX_UNROLLED:
            facts["issue_loop"] = (
                f"a loop of {self.count} issues of {self.box_bytes} bytes (more than "
                f"{MAX_UNROLLED}: not unrolled); a shared layout that keeps global rows "
                "together takes fewer, larger boxes"
            )
        return facts

    def __str__(self) -> str:
        box = "x".join(str(d.box) for d in self.dims)
        swz = f", {self.swizzle}B swizzle" if self.swizzle else ""
        if self.direction == "load":
            cast = f", multicast to cta_mask {self.cta_mask}" if self.multicast else ""
            cast += ", rounded to tf32" if self.tf32 else ""
            return (
                f"tma_auto global->shared {self.dtype}: {self.count} x box {box}{swz}{cast} "
                f"({self.total_bytes} bytes on mbar; {self.issuer} issues)"
            )
        what = f"reduce-{self.reduce}" if self.reduce else "store"
        return (
            f"tma_auto shared->global {what} {self.dtype}: {self.count} x box {box}{swz} "
            f"({self.total_bytes} bytes in a bulk async-group; {self.issuer} issues)"
        )


def _global_axes(glob: Operand) -> list[tuple[Any, int]]:
    """(extent, element stride) of every dimension of the global buffer, or Decline."""
    layout = glob.layout
    shard = getattr(layout, "shard", None)
    if shard is None or len(shard) != len(glob.shape):
        raise Decline(
            f"{glob.role} {glob.name}'s layout {layout} does not give one stride per dimension "
            f"of its shape {list(glob.shape)}; a tensor map needs a strided global buffer"
        )
    axes = []
    for axis, (it, extent) in enumerate(zip(shard, glob.shape, strict=True)):
        stride = as_int(it.stride)
        if str(it.axis.name) != "m" or stride is None or stride < 0:
            raise Decline(
                f"{glob.role} {glob.name}'s dimension {axis} has stride {it.stride}; a tensor "
                "map needs constant non-negative strides"
            )
        axes.append((extent, stride))
    return axes


def _swizzle_bytes(view_swizzle: Swizzle | None, elem_bytes: int, shared: Operand) -> int:
    """The TMA swizzle mode (bytes) the shared layout's swizzle is, or Decline."""
    mode = byte_swizzle(view_swizzle, elem_bytes)
    if mode is not None:
        return mode
    unit_bytes = view_swizzle.unit * elem_bytes
    raise Decline(
        f"{shared.role} {shared.name}'s swizzle {view_swizzle} ({unit_bytes}-byte units) is not "
        "one TMA applies: TMA swizzles 16-byte units by 32, 64 or 128 bytes (Swizzle<B,4,3> "
        f"on bytes; for {shared.dtype} per_element={int(math.log2(16 // elem_bytes))}, "
        "atom_len=3)"
    )


def _box(
    glob: Operand, shared: Operand, order: list[int]
) -> tuple[dict[int, int], list[IssueAxis]]:
    """Each global buffer dimension's box extent and the issue axes that cover the rest,
    from where the shared layout puts the region's elements (both directions alike), the
    dimensions taken in the tensor map's ``order`` (dimension 0 first)."""
    src = glob
    view = memory_view(shared)
    axes = [d for d, ext in enumerate(src.extents) if ext != 1]
    strides, run = {}, 1
    for d in reversed(axes):
        strides[d] = run
        run *= src.extents[d]
    region = tuple((src.extents[d], strides[d], d) for d in axes)
    shared = tuple((ext, stride, None) for ext, stride in view.atoms)
    rows = [
        (ext, cells[0][1], cells[0][0] // strides[cells[0][1]], cells[1][0])
        for ext, cells in refine_tagged(region, shared)
    ]  # (extent, buffer dimension, coordinate step, shared stride), outer -> inner
    box = {d: 1 for d in range(len(src.shape))}
    dense = 1
    for d in order:
        if src.extents[d] == 1:
            continue
        # the row that holds dimension d's innermost run where the box has reached in
        # shared memory (any position of the region's order: a blocked tile interleaves)
        at = next((i for i, r in enumerate(rows) if r[1:] == (d, 1, dense)), None)
        if at is None:
            break
        ext, _, _, stride = rows.pop(at)
        take = max(b for b in range(1, min(ext, MAX_BOX) + 1) if ext % b == 0)
        box[d], dense = take, dense * take
        if take < ext:
            rows.insert(at, (ext // take, d, take, stride * take))
            break
    return box, [IssueAxis(ext, axis, step, stride) for ext, axis, step, stride in rows]


def plan(call: TileCall) -> TmaPlan:
    direction = direction_of(call)
    glob, shared = (
        (call.operand("src"), call.operand("dst"))
        if direction == "load"
        else (call.operand("dst"), call.operand("src"))
    )
    g = f"{glob.role} {glob.name}"
    elem_bytes = glob.elem_bits // 8
    check(
        glob.elem_bits % 8 == 0 and glob.elem_bits <= 64,
        f"{g} holds {glob.dtype}; a tensor map holds elements of 1 to 8 bytes",
    )
    axes = _global_axes(glob)
    check(
        len(axes) <= MAX_RANK,
        f"{g} has {len(axes)} dimensions; a tensor map has at most {MAX_RANK}",
    )
    order = tensor_map_order(glob)
    inner = order[0]
    check(
        axes[inner][1] == 1,
        f"{g} has no dimension of stride 1 (strides {[a[1] for a in axes]}); a tensor "
        "map's dimension 0 is contiguous",
    )
    view = memory_view(shared)
    swizzle = _swizzle_bytes(view.swizzle, elem_bytes, shared)
    box, issues = _box(glob, shared, order)
    inner_bytes = box[inner] * elem_bytes
    check(
        inner_bytes % INNER_BOX_ALIGN == 0,
        f"the box's inner dimension is {box[inner]} elements ({inner_bytes} bytes) of "
        f"{glob.name}'s dimension {inner}; TMA moves rows of a multiple of 16 bytes: the "
        f"shared layout of {shared.name} must keep {16 // elem_bytes}k elements of a global "
        "row contiguous",
    )
    if swizzle:
        check(
            inner_bytes <= swizzle,
            f"the box's inner dimension is {inner_bytes} bytes, wider than the {swizzle}-byte "
            f"swizzle of {shared.name}; block the tile into {swizzle}-byte columns",
        )
    dims = []
    for d in order:
        extent, stride = axes[d]
        bytes_ = stride * elem_bytes
        if d != inner:
            check(
                bytes_ % STRIDE_ALIGN == 0 and 0 < bytes_ < MAX_STRIDE,
                f"{g}'s dimension {d} has a stride of {bytes_} bytes; a tensor map needs "
                f"strides that are multiples of {STRIDE_ALIGN} bytes below 2^40 (pad the rows)",
            )
        dims.append(TmaDim(d, extent if as_int(extent) is None else as_int(extent), bytes_, box[d]))
    _check_coordinates(call, glob, inner, issues, direction)
    align = shared_align(swizzle)
    raised = _check_shared_alignment(call, shared, view.base, issues, align, elem_bytes)
    reduce = call.config.get("use_tma_reduce") if direction == "store" else None
    return TmaPlan(
        glob.dtype, glob.elem_bits, tuple(dims), tuple(issues), swizzle, align, issuer_text(call),
        direction, None if reduce is None else str(reduce), _l2_promotion(call), raised,
        cta_mask_of(call) if direction == "load" else 0,
        cta_group_of(call) if direction == "load" else 1,
        call.config.get("tma_dtype") is not None, bool(prefetch_of(call)),
    )  # fmt: skip


def _l2_promotion(call: TileCall) -> int:
    """The descriptor's L2 promotion in bytes from ``tensormap_l2_promotion=`` (TVM's
    forms), 256 where the config has none."""
    value = call.config.get("tensormap_l2_promotion")
    if value is None:
        return L2_PROMOTION
    number = as_int(value)
    text = str(number) if number is not None else str(getattr(value, "value", value))
    check(
        text in L2_PROMOTIONS,
        f"tensormap_l2_promotion={value} is not an L2 promotion; write one of "
        f"{', '.join(repr(k) for k in L2_PROMOTIONS)}",
    )
    return L2_PROMOTIONS[text]


def _check_coordinates(
    call: TileCall, glob: Operand, inner: int, issues: list[IssueAxis], direction: str
) -> None:
    """Every issue's coordinates are ones the hardware takes (:mod:`..isa.bulk`): the
    region's start (:func:`..predicates.tma_coordinates`), stepped by whole 16-byte units."""
    check(*tma_coordinates(call, glob, store=direction == "store"))
    for a in issues:
        check(
            a.axis != inner or (a.step * glob.elem_bits // 8) % COORD_ALIGN == 0,
            f"the boxes step {a.step} elements along {glob.name}'s innermost dimension, not "
            f"a multiple of {COORD_ALIGN} bytes",
        )


def _check_shared_alignment(
    call: TileCall, shared: Operand, base: Any, issues: list[IssueAxis], align: int, size: int
) -> Alignment | None:
    """Every issue's shared address is a multiple of ``align`` bytes: the allocation is
    so aligned (declared, or raised by the bridge: the :class:`Alignment` returned), the
    region starts at a multiple and the issues step by one."""
    raised = allocation_alignment(
        call, shared, align, f"a TMA box lies at a {align}-byte aligned address"
    )
    check(
        prove_multiple(base, align // size),
        f"{shared.role} {shared.describe} starts at element {base}, not provably a multiple of "
        f"{align} bytes ({align // size} elements); TMA needs every box at a {align}-byte "
        "aligned address",
    )
    for a in issues:
        check(
            (a.shared_stride * size) % align == 0,
            f"the boxes of {shared.role} {shared.name} are {a.shared_stride * size} bytes "
            f"apart, not a multiple of the {align} bytes TMA needs",
        )
    return raised


# -- emission --------------------------------------------------------------------------------
def _issue_offsets(plan: TmaPlan, index: Any) -> tuple[dict[int, Any], Any]:
    """Coordinate steps per buffer dimension and the shared element offset of issue
    ``index`` (the issue axes' mixed radix, outer -> inner)."""
    steps: dict[int, Any] = {}
    shared: Any = 0
    rest = index
    for a in reversed(plan.issues):
        digit = tirx.floormod(rest, a.count) if a is not plan.issues[0] else rest
        rest = tirx.floordiv(rest, a.count)
        steps[a.axis] = steps.get(a.axis, 0) + digit * a.step
        shared = shared + digit * a.shared_stride
    return steps, shared


@variant(
    "copy_async",
    "tma_auto",
    priority=10,
    predicates=[
        requires_cuda,
        requires_tma_arch,
        requires_scope("thread", "warp", "warpgroup", "cta"),
        requires_known_participants,
        requires_valid_copy,
        requires_memory_pair([("global", "shared"), ("shared", "global")]),
        requires_completion,
        requires_prefetch_flag,
        requires_global_at_its_data,
    ],
    plan=plan,
)
def emit(plan: TmaPlan, call: TileCall, given: Mapping[str, Any]):
    """One thread issues every box: an unrolled loop over the issue axes."""
    glob, shared = (
        (call.operand("src"), call.operand("dst"))
        if plan.direction == "load"
        else (call.operand("dst"), call.operand("src"))
    )
    tensor_map = given["tensor_map"]
    mbar = call.config.get("mbar")
    view = memory_view(shared)
    starts = {d: lo for d, (lo, _) in enumerate(glob.region)}
    issuing = call.scope == "thread"
    first = participant_index(call) if not issuing else None
    instruction = T.ptx[plan.instruction]

    def issue(index):
        steps, offset = _issue_offsets(plan, index)
        coords = []
        for d in plan.dims:
            c = starts[d.axis] + steps[d.axis] if d.axis in steps else starts[d.axis]
            coords.append(T.cast(c, "int32"))
        flat = T.decl_buffer((1,), shared.dtype, data=shared.buffer.data, scope=shared.scope)
        ptr = flat.ptr_to([view.base + offset])
        if plan.direction == "load" and plan.multicast:
            mask = T.cast(plan.cta_mask, "uint16")
            T.evaluate(instruction(ptr, T.address_of(tensor_map), *coords, mbar, mask))
        elif plan.direction == "load":
            T.evaluate(instruction(ptr, T.address_of(tensor_map), *coords, mbar))
        else:
            T.evaluate(instruction(T.address_of(tensor_map), *coords, ptr))

    count = plan.count
    loop = T.unroll if count <= MAX_UNROLLED else T.serial
    if issuing:

        @impl_prim_func
        def by_caller():
            for i in loop(count):
                issue(i)

        return by_caller

    @impl_prim_func
    def by_first():
        if first == 0:
            for i in loop(count):
                issue(i)

    return by_first
