"""What the simulator raises: the kernel did something the GPU would not do as intended."""

from __future__ import annotations


class SimError(RuntimeError):
    """The simulated kernel faulted, raced, or used an instruction the simulator does not
    know. The message names the buffer, the thread and the rule."""


class NotModeled(SimError):
    """The kernel uses something the simulator does not model (a statement, a call, an
    instruction form, a dtype): a gap of the simulator, not a fault of the kernel."""
