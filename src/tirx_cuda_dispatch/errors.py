"""The two failure channels: an expected refusal (:class:`Decline`) and everything else.

A :class:`Decline` is a variant saying "not for this call, because ...". Only declines are
caught by the dispatcher. Any other exception raised by one of our predicates, planners
or emitters is a bug: it surfaces as :class:`VariantError` naming the variant and the call.
"""

from __future__ import annotations

import tvm_ffi


class Decline(Exception):
    """Raised by a planner (or emitter) that cannot handle the call; the message is the reason."""

    @property
    def reason(self) -> str:
        return str(self.args[0]) if self.args else "declined"


# Registered with TVM's FFI so that raised inside a pass (called back from C++) they reach
# the user as themselves, not as a generic RuntimeError.
@tvm_ffi.register_error
class DispatchError(RuntimeError):
    """A call could not be lowered the way the user asked (strict mode, or a forced variant)."""


@tvm_ffi.register_error
class VariantError(RuntimeError):
    """One of our variants raised something other than a decline: a bug, reported with the call."""


def check(cond: bool, reason: str) -> None:
    """Decline with ``reason`` unless ``cond`` holds."""
    if not cond:
        raise Decline(reason)
