"""What the simulator raises: the kernel did something the GPU would not do as intended."""

from __future__ import annotations


class SimError(RuntimeError):
    """The simulated kernel faulted, raced, or used an instruction the simulator does not
    know. The message names the buffer, the thread and the rule."""
