"""copy_async -> ldgsts: an asynchronous copy from global into shared memory with cp.async.

Accepts: a CUDA target of sm_80 or newer (cp.async came with Ampere; PTX ISA 9.7.9.25.3.1
target notes); scope thread / warp / warpgroup / cta with its participants known (an
enclosing ``if lane < 16`` narrows them, as for copy -> gmem_smem); a valid copy (layouts
on both sides, equal dtypes, equal non-unit extents) from global to shared memory
(cp.async has no other direction and never touches registers); elements of a byte or more;
any element count. Also a call written for TVM's built-in variant, ``dispatch="ldgsts"``.

Config keys: those TVM 0.27's ldgsts reads (``predicate``, ``fill_mode``,
``prefetch_size``, ``direct``) and ``cache`` ("ca" / "cg", the cache operator); anything
else declines naming the accepted keys (:data:`CONFIG_KEYS`).

Emits: the partition of the synchronous copy (:mod:`..layout.copy_partition`, global side
driving, swizzled shared offsets through the swizzle, masked rounds ``tid < tail`` and
narrower pieces for odd tiles), restricted to the widths cp.async has: cp-size 16, 8 or 4
bytes. Each access is one ``cp.async`` (PTX ISA 9.7.9.25.3.1, TVM's PTX table entries
``cp_async_cg`` / ``cp_async_ca`` and their ``_src_size`` arity): ``.cg`` (L2 only) for
16 bytes, since the data goes to shared memory and an L1 copy of it would only evict
other lines; ``.ca`` for 4 and 8 bytes (``.cg`` takes cp-size 16 only) or where
``cache="ca"`` asks for it. ``prefetch_size`` adds ``.L2::64B/128B/256B``. ``predicate``
is one condition for every access of the thread: where it is false the access is skipped,
or, with ``fill_mode="zero"``, issued with src-size 0, which reads nothing and writes
zeros (the ``src-size`` operand: "the remaining bytes of dst are filled with zeros").

Completion is the caller's: nothing here commits, waits or syncs, so loads stay in flight
while the kernel goes on. Before reading dst the caller issues
``T.ptx.cp.async_.commit_group()``, ``T.ptx.cp.async_.wait_group(N)`` and
``T.cuda.cta_sync()`` (other threads wrote parts of dst).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import tvm
from tvm import tirx
from tvm.script import tirx as T

from ..call import Operand, TileCall
from ..codegen import round_loops
from ..errors import Decline, check
from ..irfacts import as_int, prove_multiple
from ..layout.atoms import memory_view
from ..layout.copy_partition import copy_partition
from ..layout.partition import (
    MemoryAccesses,
    OnPartition,
    PiecewisePartition,
    ScopePartition,
    round_runs,
)
from ..predicates import (
    requires_cuda,
    requires_known_participants,
    requires_scope,
    requires_valid_copy,
    sm_at_least,
)
from ..registry import variant
from ..resources import Completion

CP_ASYNC_MIN_SM = 80
CP_ASYNC_WIDTHS = (128, 64, 32)  # cp-size 16, 8, 4 bytes (PTX ISA 9.7.9.25.3.1)
PREFETCH_SIZES = (64, 128, 256)  # .L2::64B / .L2::128B / .L2::256B
FILL_MODES = ("zero",)
CACHE_OPERATORS = ("ca", "cg")
NO_PREDICATE = -1  # TVM 0.27's value for "no predicate" (its default)

# The config keys this variant reads: TVM 0.27's ldgsts reads the first four
# (backend/cuda/tile_primitive/copy_async/ldgsts.py) and ignores any other; we read
# ``cache`` too and decline the rest by name.
CONFIG_KEYS = {
    "predicate": "a condition (bool or integer expression) for every access of the thread",
    "fill_mode": "'zero': where the predicate is false, write zeros (src-size 0)",
    "prefetch_size": "64, 128 or 256 (bytes): .L2::64B / .L2::128B / .L2::256B",
    "direct": "True: the thread-scope region is one 4-, 8- or 16-byte access",
    "cache": "'ca' (L1 and L2) or 'cg' (L2 only, 16-byte accesses only)",
}


# -- the config -------------------------------------------------------------------------------
@dataclass(frozen=True)
class LdgstsConfig:
    """What the call's config keys ask for, validated."""

    predicate: Any = None  # a bool PrimExpr, or None: every access is issued
    zero_fill: bool = False  # fill_mode="zero"
    prefetch: int | None = None  # bytes of the L2 prefetch
    direct: bool = False
    cache: str = ""  # "", "ca" or "cg"

    def __str__(self) -> str:
        parts = []
        if self.predicate is not None:
            parts.append(f"predicate={self.predicate}")
        if self.zero_fill:
            parts.append("fill_mode=zero")
        if self.prefetch is not None:
            parts.append(f"prefetch_size={self.prefetch}")
        if self.direct:
            parts.append("direct=True")
        if self.cache:
            parts.append(f"cache={self.cache}")
        return ", ".join(parts) or "none"


def _accepted() -> str:
    return "; ".join(f"{k} ({v})" for k, v in CONFIG_KEYS.items())


def _predicate(value: Any) -> Any:
    """The predicate as a bool PrimExpr (None: no predicate), or Decline."""
    if value is None or as_int(value) == NO_PREDICATE:
        return None
    if isinstance(value, bool):
        return None if value else tirx.const(False, "bool")
    if isinstance(value, int):
        return tirx.const(value != 0, "bool")
    if isinstance(value, tvm.ir.expr.Expr) and hasattr(value, "ty"):
        dtype = str(value.ty)
        if dtype == "bool":
            return value
        if dtype.startswith(("int", "uint")):
            return tirx.NE(value, tirx.const(0, dtype))
        raise Decline(
            f"predicate={value} is {dtype}; needs a bool or integer condition "
            "(write a comparison, e.g. predicate=tid < 16)"
        )
    raise Decline(
        f"predicate={value!r} is a {type(value).__name__}; needs a bool or integer expression"
    )


def _prefetch(value: Any) -> int | None:
    """``prefetch_size`` in bytes (None: no prefetch), or Decline. TVM writes 128 (and -1
    for none); our copies also take the PTX spelling ``"L2::128B"``."""
    if value is None or as_int(value) == -1:
        return None
    size = as_int(value)
    if size is None and isinstance(value, str):
        text = value.removeprefix("L2::").removesuffix("B")
        size = int(text) if text.isdigit() else None
    if size not in PREFETCH_SIZES:
        raise Decline(
            f"prefetch_size={value!r} is not one cp.async has; accepted: "
            f"{list(PREFETCH_SIZES)} (bytes, .L2::64B/.L2::128B/.L2::256B) or -1 for none"
        )
    return size


def _flag(key: str, value: Any) -> bool:
    flag = as_int(value)
    if flag not in (0, 1):
        raise Decline(f"{key}={value!r} is not a flag; write True or False")
    return bool(flag)


def _choice(key: str, value: Any, allowed: tuple[str, ...]) -> str:
    text = "" if value is None else str(value)
    if text not in ("", *allowed):
        raise Decline(f"{key}={value!r} is not one of {list(allowed)}")
    return text


# Cache hints a synchronous copy takes (copy -> gmem_smem) that this variant does not.
UNSUPPORTED_HINTS = {
    "l1_evict": "cp.async has no L1 eviction priority",
    "l2_evict": (
        "cp.async's L2 eviction priority (.L2::cache_hint with a createpolicy operand) is "
        "not emitted by this variant"
    ),
}


def config_of(call: TileCall) -> LdgstsConfig:
    """The call's :class:`LdgstsConfig`; raises :class:`Decline` naming an unknown key or
    value with the accepted ones."""
    cfg = dict(call.config)
    for key, why in UNSUPPORTED_HINTS.items():
        if key in cfg:
            raise Decline(f"config {key}={cfg[key]}: {why}; drop it (accepted: {_accepted()})")
    unknown = [k for k in cfg if str(k) not in CONFIG_KEYS]
    if unknown:
        seen = ", ".join(f"{k}={cfg[k]}" for k in unknown)
        raise Decline(f"config {seen} is not a key cp.async takes; accepted: {_accepted()}")
    fill = _choice("fill_mode", cfg.get("fill_mode"), FILL_MODES)
    return LdgstsConfig(
        predicate=_predicate(cfg.get("predicate")),
        zero_fill=fill == "zero",
        prefetch=_prefetch(cfg.get("prefetch_size")),
        direct=_flag("direct", cfg.get("direct", False)),
        cache=_choice("cache", cfg.get("cache"), CACHE_OPERATORS),
    )


# -- predicates -------------------------------------------------------------------------------
def requires_cp_async_arch(call: TileCall) -> tuple[bool, str | None]:
    """cp.async exists on sm_80 and newer (PTX ISA 9.7.9.25.3.1, target notes)."""
    instead = "use a synchronous Tx.copy (copy -> gmem_smem) there"
    return sm_at_least(call, CP_ASYNC_MIN_SM, "cp.async", instead)


def requires_global_to_shared(call: TileCall) -> tuple[bool, str | None]:
    """src in global memory and dst in shared memory: the only direction cp.async has."""
    dst, src = call.operand("dst"), call.operand("src")
    for o in (src, dst):
        if o.memory == "local":
            return False, (
                f"{o.role} {o.name} is {o.scope} (registers); cp.async copies global memory "
                "into shared memory and never touches registers (a register copy is copy -> "
                "reg)"
            )
    if (src.memory, dst.memory) != ("global", "shared"):
        return False, (
            f"src {src.name} is {src.scope} and dst {dst.name} is {dst.scope}; cp.async copies "
            "global -> shared only (it has no store form: write shared -> global with a "
            "synchronous Tx.copy)"
        )
    return True, None


def requires_known_config(call: TileCall) -> tuple[bool, str | None]:
    """Every config key is one this variant reads, with a value it takes."""
    try:
        config_of(call)
    except Decline as why:
        return False, str(why)
    return True, None


# -- the plan ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class LdgstsPlan(OnPartition):
    """Who issues which cp.async: the partition (operands src, dst) and the config."""

    dtype: str
    elem_bits: int
    partition: ScopePartition | PiecewisePartition  # operands: (src global, dst shared)
    config: LdgstsConfig = LdgstsConfig()

    def __post_init__(self) -> None:
        assert all(bits in CP_ASYNC_WIDTHS for bits in self.widths), self.widths

    @property
    def widths(self) -> tuple[int, ...]:
        """The access widths in bits, in the order they are issued."""
        if self.masked:
            return tuple(p.vec_bits for p in self.partition.pieces)
        return (self.partition.vec_bits,)

    def cache_operator(self, vec_bits: int) -> str:
        """``cg`` for a 16-byte access unless ``cache="ca"``; ``ca`` for 4 and 8 bytes."""
        if vec_bits == 128 and self.config.cache != "ca":
            return "cg"
        return "ca"

    def instruction(self, vec_bits: int) -> str:
        """The PTX table spelling of one ``vec_bits``-wide access (TVM's ``T.ptx[...]``)."""
        prefetch = f".L2::{self.config.prefetch}B" if self.config.prefetch else ""
        return f"cp.async.{self.cache_operator(vec_bits)}.shared.global{prefetch}"

    def ptx(self, vec_bits: int) -> str:
        """One access as PTX writes it, operands included."""
        size = vec_bits // 8
        tail = ", src-size" if self.zero_fills else ""
        return f"{self.instruction(vec_bits)} [dst], [src], {size}{tail}"

    @property
    def zero_fills(self) -> bool:
        """Accesses carry src-size (0 where the predicate is false)."""
        return self.config.zero_fill and self.config.predicate is not None

    @property
    def cache_because(self) -> str:
        ops = {self.cache_operator(b) for b in self.widths}
        if self.config.cache == "ca":
            return "cache='ca': L1 and L2"
        if ops == {"cg"}:
            return (
                "16-byte accesses: .cg caches in L2 only (dst is shared memory, an L1 copy "
                "would only evict lines)"
            )
        return ".ca: cp.async.cg takes 16-byte accesses only" + (
            "; .cg for the 16-byte ones" if "cg" in ops else ""
        )

    def memory_accesses(self) -> MemoryAccesses:
        """The accesses to the shared destination (the operand with banks)."""
        return MemoryAccesses("dst", self.partition.accesses(1))

    def resources(self) -> tuple[Completion, ...]:
        return (
            Completion(
                "cp.async group",
                "the caller commits (cp.async.commit_group) and waits (cp.async.wait_group N) "
                "then syncs the CTA before reading dst",
            ),
        )

    def facts(self) -> dict:
        p = self.partition
        facts = {
            "vec_bits": self.vec_bits,
            "vec": self.vec,
            "outer": self.outer,
            "threads": self.threads,
            "direction": "global->shared",
            "ptx": [self.ptx(b) for b in dict.fromkeys(self.widths)],
            "cache_operator": self.cache_because,
        }
        if self.masked:
            facts["pieces"] = [str(piece) for piece in p.pieces]
        if p.swizzles[1] is not None:
            facts["swizzle"] = str(p.swizzles[1])
        if p.narrower_because:
            facts["narrower_because"] = p.narrower_because
        cfg = self.config
        if cfg.predicate is not None:
            facts["predicate"] = str(cfg.predicate)
            facts["predicated_off"] = (
                "zero-filled (src-size 0)" if cfg.zero_fill else "skipped (dst keeps its value)"
            )
        elif cfg.zero_fill:
            facts["fill_mode"] = "zero, but no predicate: every access copies"
        if cfg.direct:
            facts["direct"] = True
        return facts

    def __str__(self) -> str:
        pred = "" if self.config.predicate is None else f" if {self.config.predicate}"
        return self.describe(f"ldgsts global->shared {self.dtype}{pred}", self.ptx(self.vec_bits))


def _byte_alignment(o: Operand) -> str:
    """The widest power-of-two alignment (16 bytes at most) provable for the address the
    operand's region starts at, as a clause of a decline reason."""
    try:
        view = memory_view(o)
    except Decline as why:
        return str(why)
    size = o.elem_bits // 8
    for align in (16, 8, 4, 2, 1):
        if align % size == 0 and prove_multiple(view.base, align // size):
            return f"{o.role} {o.name} starts at a {align}-byte aligned address"
        if align < size:
            break
    return f"{o.role} {o.name} starts at an offset not known to be {size}-byte aligned"


def plan(call: TileCall) -> LdgstsPlan:
    dst, src = call.operand("dst"), call.operand("src")
    config = config_of(call)
    check(
        src.elem_bits >= 8,
        f"src {src.name} holds {src.dtype}, narrower than a byte; cp.async moves whole bytes",
    )
    threads = call.participation.participants.count  # the threads that run the call
    try:
        split = copy_partition(src, dst, threads, CP_ASYNC_WIDTHS)
    except Decline as why:
        aligned = "; ".join(_byte_alignment(o) for o in (src, dst))
        raise Decline(
            f"no cp.async access fits {src.describe} -> {dst.describe}: cp.async moves 4, 8 or "
            f"16 bytes at addresses aligned to that size and has no 1- or 2-byte form "
            f"({aligned}): {why}; copy such a region with a synchronous Tx.copy"
        ) from None
    result = LdgstsPlan(src.dtype, src.elem_bits, split.partition, config)
    if config.cache == "cg":
        narrow = sorted({b for b in result.widths if b != 128})
        check(
            not narrow,
            f"cache='cg' but the region also needs {'/'.join(str(b // 8) for b in narrow)}-byte "
            "accesses, and cp.async.cg has cp-size 16 only; drop cache= or align the region "
            "to 16 bytes",
        )
    if config.direct:
        check(
            call.scope == "thread",
            f"direct=True is TVM's thread-scope form (one access from the region's start); "
            f"scope is {call.scope}",
        )
        one = not result.masked and result.outer == 1 and result.threads == 1
        check(
            one,
            f"direct=True: {src.describe} is not one 4-, 8- or 16-byte access "
            f"(it takes {result}); drop direct=True or select one aligned slice",
        )
    return result


# -- emission ---------------------------------------------------------------------------------
def _cp_async(plan: LdgstsPlan, dst_vecs, src_vecs, dst_slot, src_slot, vec_bits: int) -> Any:
    """One cp.async of ``vec_bits`` from ``src_vecs[src_slot]`` to ``dst_vecs[dst_slot]``;
    with zero fill its src-size is the cp-size where the predicate holds, else 0."""
    size = vec_bits // 8
    dst_ptr, src_ptr = T.address_of(dst_vecs[dst_slot]), T.address_of(src_vecs[src_slot])
    form = T.ptx[plan.instruction(vec_bits)]
    if plan.zero_fills:
        # A select of two constants: no side effect to guard, so no branch is needed.
        full, none = tirx.const(size, "uint32"), tirx.const(0, "uint32")
        return form(dst_ptr, src_ptr, size, tirx.Select(plan.config.predicate, full, none))
    return form(dst_ptr, src_ptr, size)


@variant(
    "copy_async",
    "ldgsts",
    priority=10,
    predicates=[
        requires_cuda,
        requires_cp_async_arch,
        requires_scope("thread", "warp", "warpgroup", "cta"),
        requires_known_participants,
        requires_valid_copy,
        requires_global_to_shared,
        requires_known_config,
    ],
    plan=plan,
)
def emit(plan: LdgstsPlan, call: TileCall, given: Mapping[str, Any]):
    """A round loop of cp.async (masked: one loop per piece, its last round under
    ``tid < tail``); no commit, wait or sync: the caller's."""
    pred = plan.config.predicate
    guard = pred if pred is not None and not plan.zero_fills else None  # off: skipped

    def move(dst_vecs, dst_slot, src_vecs, src_slot, vec_bits):
        T.evaluate(_cp_async(plan, dst_vecs, src_vecs, dst_slot, src_slot, vec_bits))

    return round_loops(
        call,
        round_runs(plan.partition),
        (call.operand("dst").buffer, call.operand("src").buffer),
        (1, 0),  # global (src) drives the partition: operand 0
        plan.elem_bits,
        move,
        guard,
    )
