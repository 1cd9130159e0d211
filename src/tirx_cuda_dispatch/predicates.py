"""Predicates several variants share. Each returns ``(ok, reason)``; the reason says what
was seen and what was needed, naming the operand where there is one."""

from __future__ import annotations

from collections.abc import Sequence

from tvm.tirx import EQ, floormod

from .bounds import proves
from .call import Operand, TileCall
from .errors import Decline
from .irfacts import as_int, prove_multiple
from .isa.bulk import COORD_ALIGN, STORE_MIN_COORD
from .participation import narrowing
from .registry import Predicate, predicate
from .resources import Alignment

Result = tuple[bool, "str | None"]


def requires_cuda(call: TileCall) -> Result:
    if call.target_kind != "cuda":
        return False, f"target is {call.target_kind}, needs cuda"
    return True, None


def sm_at_least(call: TileCall, need: int, what: str, instead: str | None = None) -> Result:
    """The target is sm_``need`` or newer, for ``what`` (an instruction's name); the
    reason names the target and, with ``instead``, what to use on an older one."""
    if call.sm is not None and call.sm >= need:
        return True, None
    if call.sm is None:
        seen = f"target {call.arch or '(no arch)'} names no SM version"
    else:
        seen = f"target is {call.arch}"
    return False, f"{what} needs sm_{need} or newer; {seen}" + (f"; {instead}" if instead else "")


def requires_scope(*scopes: str) -> Predicate:
    """The call's execution scope is one of ``scopes``."""

    def scope_allowed(call: TileCall) -> Result:
        if call.scope not in scopes:
            return False, f"scope is {call.scope}, needs one of {'/'.join(scopes)}"
        return True, None

    return predicate(scope_allowed, "scope")


def requires_all_threads_active(call: TileCall) -> Result:
    """Every thread of the scope takes part: no enclosing ``if`` narrowed a thread axis or
    leaves threads out (for variants whose partition a register layout fixes)."""
    verdict = call.participation
    if verdict.verdict != "uniform":
        return False, verdict.detail
    narrowed = narrowing(call, verdict.participants)
    if narrowed is not None:
        return False, (
            f"scope {call.scope} is narrowed: {narrowed} (an enclosing if); all threads of the "
            "scope must take part, since the register layout gives each of them its elements"
        )
    return True, None


def requires_whole_warps_active(call: TileCall) -> Result:
    """Every thread of the scope takes part (:func:`requires_all_threads_active`), or whole
    warps of it do, as a warp's vote decides (participation's ``warps``): for variants whose
    code stays inside a warp (each thread its own registers, shuffles between a warp's
    lanes), so that a warp that does not pass leaves its part of the tile as it was."""
    verdict = call.participation
    if verdict.verdict != "warps":
        return requires_all_threads_active(call)
    narrowed = narrowing(call, verdict.participants)
    if narrowed is not None:
        return False, (
            f"scope {call.scope} is narrowed: {narrowed} (an enclosing if); whole warps may "
            "run it under a warp's vote, but every lane of each, since the register layout "
            "gives each of them its elements"
        )
    return True, None


def requires_known_participants(call: TileCall) -> Result:
    """The threads that execute the call are known: the scope's, or a range of them an
    enclosing ``if`` narrowed TVM's thread axes to (``if lane < 16``), and no condition
    leaves others out (for variants that split the work among whoever executes)."""
    verdict = call.participation
    if verdict.verdict != "uniform":
        return False, verdict.detail
    return True, None


def requires_valid_copy(call: TileCall) -> Result:
    """dst and src are tensor regions with layouts, equal dtypes and equal non-unit extents."""
    dst, src = call.operand("dst"), call.operand("src")
    if dst is None or src is None:
        return False, "copy needs tensor regions for dst and src"
    for o in (dst, src):
        if o.layout is None:
            return False, f"{o.role} {o.name} has no layout"
        if any(e is None for e in o.extents):
            return False, f"{o.role} {o.name} region extents {list(o.extents)} are not all constant"
    if dst.dtype != src.dtype:
        return (
            False,
            f"dtype mismatch: dst {dst.name} is {dst.dtype}, src {src.name} is {src.dtype}",
        )
    d_ext = [e for e in dst.extents if e != 1]
    s_ext = [e for e in src.extents if e != 1]
    if d_ext != s_ext:
        return False, f"extent mismatch: dst {dst.name} {d_ext} vs src {src.name} {s_ext}"
    return True, None


def register_side(call: TileCall) -> tuple[Operand, Operand]:
    """A register copy's (register operand, other operand): dst when dst is ``local``."""
    dst, src = call.operand("dst"), call.operand("src")
    return (dst, src) if dst.memory == "local" else (src, dst)


def requires_memory_pair(pairs: Sequence[tuple[str, str]]) -> Predicate:
    """(src, dst) memory kinds are one of ``pairs`` (kinds: global/shared/local/tmem)."""

    def memory_pair(call: TileCall) -> Result:
        dst, src = call.operand("dst"), call.operand("src")
        pair = (src.memory, dst.memory)
        if pair not in pairs:
            allowed = ", ".join(f"{a}->{b}" for a, b in pairs)
            return False, (
                f"src {src.name} is {src.scope} and dst {dst.name} is {dst.scope}; needs {allowed}"
            )
        return True, None

    return predicate(memory_pair, "memory_pair")


def allocation_alignment(call: TileCall, opnd: Operand, align: int, needs: str) -> Alignment | None:
    """What hardware that reads a shared address's bits (``needs``: TMA's and wgmma's
    swizzles) asks of the allocation ``opnd`` lies in: nothing where it is declared
    aligned to ``align`` bytes or more (``T.alloc_buffer(..., align=N)``); an
    :class:`..resources.Alignment` the bridge provides where the allocation is in the
    kernel (it raises the allocation's alignment); otherwise :class:`..errors.Decline`
    saying what to declare. The caller still proves the region's offset in the
    allocation a multiple of ``align``."""
    env = call.enclosing
    declared = env.alignment_of(opnd.buffer) if env is not None else None
    if declared is not None and declared >= align:
        return None
    allocation = env.allocation_of(opnd.buffer) if env is not None else None
    if allocation is None or declared is None:
        raise Decline(
            f"{opnd.role} {opnd.name} lies in an allocation aligned to "
            f"{declared or 'an unknown number of'} bytes that is not allocated in this "
            f"kernel, so its alignment cannot be raised; {needs}: declare the allocation "
            f"T.alloc_buffer(..., align={align})"
        )
    return Alignment(opnd.role, str(allocation.name), declared, align, needs)


def tensor_map_order(glob: Operand) -> list[int]:
    """``glob``'s buffer dimensions in a tensor map's order, dimension 0 first: the
    contiguous one (stride 1; the last such of extent above 1), then the others by growing
    stride (equal strides: the buffer's later dimension first). Where the layout gives no
    constant stride per dimension, the buffer's own order reversed (the plan says why
    that layout cannot be mapped)."""
    shard = getattr(glob.layout, "shard", None)
    rank = len(glob.shape)
    if shard is None or len(shard) != rank:
        return list(reversed(range(rank)))
    strides = [as_int(it.stride) for it in shard]
    if any(s is None for s in strides):
        return list(reversed(range(rank)))
    unit = [d for d in range(rank) if strides[d] == 1 and as_int(glob.shape[d]) != 1]
    inner = unit[-1] if unit else rank - 1
    rest = sorted((d for d in range(rank) if d != inner), key=lambda d: (strides[d], -d))
    return [inner, *rest]


def tma_coordinates(call: TileCall, glob: Operand, store: bool) -> Result:
    """Whether a tile-mode TMA copy of ``glob``'s region starts at coordinates the hardware
    takes (:mod:`.isa.bulk`): the innermost at a multiple of 16 bytes, a store's never
    negative, provably so where the call runs."""
    g, size = f"{glob.role} {glob.name}", glob.elem_bits // 8
    unit = max(1, COORD_ALIGN // size)
    inner = tensor_map_order(glob)[0]
    lo = glob.region[inner][0]
    if not (prove_multiple(lo, unit) or proves(EQ(floormod(lo, unit), 0), call.enclosing)):
        return False, (
            f"{g}'s region starts at {lo} in its innermost dimension {inner}, not provably a "
            f"multiple of {unit} elements ({COORD_ALIGN} bytes of {glob.dtype}); a TMA "
            "coordinate there must be (any other is an illegal instruction): start the "
            f"region at a multiple of {unit}, or copy with Tx.copy / cp.async"
        )
    if not store:
        return True, None  # a load's coordinates before the tensor read zeros
    for d, (start, _) in enumerate(glob.region):
        if not proves(start >= STORE_MIN_COORD, call.enclosing):
            where = ", before the tensor" if as_int(start) is not None else ", not provably >= 0"
            return False, (
                f"{g}'s region starts at {start} in dimension {d}{where}; a TMA store's "
                "coordinates must not be negative (the hardware stops with an illegal "
                "instruction; it writes nothing before the tensor anyway): start the region "
                "at 0 or later"
            )
    return True, None


def requires_no_register_config(call: TileCall) -> Result:
    """No config keys on a register -> register copy: cache hints and the like name
    memory, which it never touches."""
    if call.config:
        keys = ", ".join(f"{k}={v}" for k, v in call.config.items())
        return False, f"config {keys} has no meaning for a register->register copy"
    return True, None


def requires_byte_elements(call: TileCall) -> Result:
    """src's elements are a byte or more: each is one load or register move of its own."""
    src = call.operand("src")
    if src.elem_bits < 8:
        return False, f"{src.dtype} elements are narrower than a byte; needs 8 bits or more"
    return True, None


def unknown_config(call: TileCall, keys: dict[str, str], what: str) -> str | None:
    """The decline reason for config keys outside ``keys`` (name -> what it means), naming
    the accepted ones; None where every key is known. ``what`` names the copy ("this TMA
    copy")."""
    cfg = call.config
    unknown = [k for k in cfg if str(k) not in keys]
    if not unknown:
        return None
    seen = ", ".join(f"{k}={cfg[k]}" for k in unknown)
    accepted = "; ".join(f"{k} ({v})" for k, v in keys.items())
    return f"config {seen} is not a key {what} takes; accepted: {accepted}"


def issuer_text(call: TileCall) -> str:
    """Which thread issues a single-thread instruction for the call, in words."""
    if call.scope == "thread":
        return "the calling thread"
    return f"the first participating thread of the {call.scope}"
