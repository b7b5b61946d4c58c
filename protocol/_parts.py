"""Tool parts as reported, and the short human line a UI shows for each."""

from __future__ import annotations

import msgspec

from run_supervisor.protocol._enums import InterruptReason, PartState, Phase

__all__ = ["PartSnapshot", "part_label"]


class PartSnapshot(msgspec.Struct, frozen=True, kw_only=True):
    tool: str
    state: PartState
    tool_started: bool
    message: str | None = None
    reason: InterruptReason | None = None
    origin: str | None = None
    phase: Phase | None = None


_CAUSES = {
    InterruptReason.USER_CANCEL: "the user's cancel",
    InterruptReason.PERMISSION_REJECTED: "a rejected permission",
    InterruptReason.FORM_DISMISSED: "a dismissed form",
    InterruptReason.TIMEOUT: "a timeout",
    InterruptReason.CRASH: "a crash of the backend",
}


def _cause(part: PartSnapshot) -> str:
    if part.reason in _CAUSES:
        return _CAUSES[part.reason]
    # lifecycle_interrupt, shutdown, test_teardown: name what asked, e.g. settings.provider.connect
    return part.origin or (part.reason.value if part.reason else "an interruption")


def part_label(part: PartSnapshot) -> str:
    """A short line for a tool card, saying what really happened -- never "Tool execution aborted"
    for a tool that did not fail."""
    tool = part.tool
    if part.state is PartState.COMPLETED:
        return f"{tool} ran"
    if part.state is PartState.ERROR:
        return f"{tool} failed: {part.message}" if part.message else f"{tool} failed"
    if part.state is PartState.INTERRUPTED:
        if part.tool_started:
            return f"Stopped: {tool} was interrupted by {_cause(part)} while it ran"
        if part.phase is Phase.GENERATING:
            return f"Did not run: interrupted by {_cause(part)} while the call was being generated"
        return f"Did not run: interrupted by {_cause(part)} before the tool started"
    if part.state is PartState.PENDING:
        return f"{tool} call being generated"
    if part.state is PartState.PREPARED:
        return f"{tool} call prepared, not started"
    return f"{tool} running"
