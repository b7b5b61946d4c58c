"""When a run last made progress: what the shell measures stalls by (the core reads no clock).

Every report a body makes (a step, a tool-part change, an ask) and every ``ctx.heartbeat()`` records
the time here -- one clock read and one store, no message, no timer to reschedule -- so a body may
heartbeat on every streamed chunk. The supervisor's stall check (one entry on the shared timer per
active run) reads it when it comes due: idle for the run's stall setting, the run is flagged and
the core told (``NoProgress``); otherwise the check is put off until the setting has passed since
the last progress. While the run is flagged, or after the body said it retries, the next heartbeat
also tells the core (``Heartbeat``) so it clears the flag and the retry status; a report clears
both by itself.

Lock-free by design (the GIL orders the stores): ``beat`` stores the time *before* it reads the
flag, and ``flag_if_idle`` sets the flag *before* it reads the time again, so a beat racing a flag
is never lost -- either the check sees the new time and takes the flag back, or the beat sees the
flag and tells the core.
"""

from __future__ import annotations

import time

__all__ = ["Progress"]


class Progress:
    """The last progress time of one run (``time.monotonic()``) and whether it is flagged stalled."""

    __slots__ = ("last", "retrying", "stalled")

    def __init__(self) -> None:
        self.last = time.monotonic()
        self.stalled = False
        """The shell flagged the run (it reported ``NoProgress`` and the core said ``run.stalled``)."""
        self.retrying = False
        """The body said it retries (``ctx.retrying``) and has reported nothing since: its session
        shows ``retry`` until the attempt goes on, and a heartbeat is the attempt going on."""

    def beat(self) -> bool:
        """Record progress now. True if the run was flagged stalled, or its session shows a retry
        the body announced: the caller tells the core (once; a report tells it by itself)."""
        self.last = time.monotonic()
        if not self.stalled and not self.retrying:
            return False
        self.stalled = False
        self.retrying = False
        return True

    def restart(self) -> None:
        """The body starts (or got an answer it waited for): count from now, unflagged."""
        self.last = time.monotonic()
        self.stalled = False

    def flag_if_idle(self, limit_s: float) -> tuple[bool, float]:
        """``(True, idle_s)``: no progress for ``limit_s`` and the run is flagged now; ``(False,
        wait_s)``: not idle long enough, look again in ``wait_s`` seconds."""
        last = self.last
        idle = time.monotonic() - last
        if idle < limit_s:
            return False, limit_s - idle
        self.stalled = True
        if self.last != last:  # a beat came meanwhile: it may have missed the flag, so take it back
            self.stalled = False
            return False, limit_s
        return True, idle
