"""Tool parts as reported, the short human line a UI shows for each, and what the model is told.

Labels and notes tell the truth: a tool that never started says it did not run; a part stopped by
a lifecycle action names what asked (e.g. ``settings.provider.connect``); nothing says "aborted".
"""

from __future__ import annotations

from typing import Protocol

import msgspec

from run_supervisor.protocol._enums import AskKind, InterruptReason, PartState, Phase
from run_supervisor.protocol._rules import DEADLINE_ORIGIN

__all__ = [
    "RUN_ENDED_ORIGIN",
    "RUN_FAILED_ORIGIN",
    "PartSnapshot",
    "part_label",
    "part_note",
    "part_snapshot",
]

RUN_FAILED_ORIGIN = "run_failed"
"""The origin of a call its run's own failure cut off before the tool started (a dropped provider
stream): ``interrupted`` (not ``error``: the tool did not fail), no reason (no interrupt ended the
run), ``tool_started`` false, the body's raw error in ``message``."""
RUN_ENDED_ORIGIN = "run_ended"
"""The same for a run whose body returned leaving the call unstarted."""


class PartSnapshot(msgspec.Struct, frozen=True, kw_only=True):
    """One tool part (one tool call) of a run, as a tool card draws it."""

    tool: str
    state: PartState
    tool_started: bool
    """The tool began its work. A permission ask gates it: until the first permission of the call
    is granted, the tool has not started (a declined call never ran). It only ever goes from false
    to true: a ``running`` call is shown started once nothing can gate it any more (its first
    permission granted, or the call ended), so a body that reports ``running`` and then asks its
    first permission never draws "started" then "not started". (A crash journal counts a ``running``
    call that no ask gates as one that may have run.)"""
    message: str | None = None
    """``error``: the tool's failure, or the user's feedback on a declined permission or dismissed
    form."""
    reason: InterruptReason | None = None
    origin: str | None = None
    phase: Phase | None = None
    """Unfinished: its phase now. Interrupted: the phase it was in. Otherwise null."""
    call_id: str | None = None
    ask_id: str | None = None
    """The open ask this call waits on."""
    waiting_for: AskKind | None = None
    declined: AskKind | None = None
    """``permission``: the user declined this call; ``form``: the user dismissed its form."""
    label: str = ""
    """The card's one line (``part_label``)."""
    note: str | None = None
    """Model-visible text for an interrupted or declined part (``part_note``)."""


class _PartFacts(Protocol):
    @property
    def tool(self) -> str: ...
    @property
    def state(self) -> PartState: ...
    @property
    def tool_started(self) -> bool: ...
    @property
    def message(self) -> str | None: ...
    @property
    def reason(self) -> InterruptReason | None: ...
    @property
    def origin(self) -> str | None: ...
    @property
    def phase(self) -> Phase | None: ...
    @property
    def waiting_for(self) -> AskKind | None: ...
    @property
    def declined(self) -> AskKind | None: ...


def part_snapshot(
    *,
    tool: str,
    state: PartState,
    tool_started: bool,
    message: str | None = None,
    reason: InterruptReason | None = None,
    origin: str | None = None,
    phase: Phase | None = None,
    call_id: str | None = None,
    ask_id: str | None = None,
    waiting_for: AskKind | None = None,
    declined: AskKind | None = None,
) -> PartSnapshot:
    """A snapshot with its ``label`` and ``note`` filled in."""
    bare = PartSnapshot(
        tool=tool,
        state=state,
        tool_started=tool_started,
        message=message,
        reason=reason,
        origin=origin,
        phase=phase,
        call_id=call_id,
        ask_id=ask_id,
        waiting_for=waiting_for,
        declined=declined,
    )
    return msgspec.structs.replace(bare, label=part_label(bare), note=part_note(bare))


_CAUSES = {
    InterruptReason.USER_CANCEL: "the user's cancel",
    InterruptReason.PERMISSION_REJECTED: "a rejected permission",
    InterruptReason.FORM_DISMISSED: "a dismissed form",
    InterruptReason.TIMEOUT: "a timeout",
    InterruptReason.CRASH: "a crash of the backend",
}


_LOST = {RUN_FAILED_ORIGIN: "failed", RUN_ENDED_ORIGIN: "ended"}


def _cause(part: _PartFacts) -> str:
    if part.reason is InterruptReason.TIMEOUT and part.origin == DEADLINE_ORIGIN:
        return "the run's deadline"
    if part.reason in _CAUSES:
        return _CAUSES[part.reason]
    # lifecycle_interrupt, shutdown, test_teardown: name what asked, e.g. settings.provider.connect
    return part.origin or (part.reason.value if part.reason else "an interruption")


def _with(text: str, message: str | None) -> str:
    return f"{text}: {message}" if message else text


def _sentence(text: str) -> str:
    return text if text.endswith((".", "!", "?")) else text + "."


def part_label(part: _PartFacts) -> str:
    """A short line for a tool card, saying what really happened -- never "Tool execution aborted"
    for a tool that did not fail."""
    tool = part.tool
    feedback = part.message if part.state is PartState.ERROR else None
    if part.declined is AskKind.PERMISSION:
        if part.tool_started:
            return _with(f"Stopped: the user declined a permission {tool} asked for while it ran", feedback)
        return _with(f"Did not run: the user declined {tool}", feedback)
    if part.declined is AskKind.FORM:
        return _with(f"{tool}: the user dismissed the form", feedback)
    if part.state is PartState.COMPLETED:
        return f"{tool} ran"
    if part.state is PartState.ERROR:
        if not part.tool_started:  # it ended before the tool did anything: it did not fail, it never ran
            return _with(f"Did not run: {tool}", part.message)
        return _with(f"{tool} failed", part.message)
    if part.state is PartState.INTERRUPTED and part.reason is None and part.origin in _LOST:
        how = _LOST[part.origin]
        if part.phase is Phase.GENERATING:
            return f"Did not run: the run {how} while the {tool} call was being generated"
        if part.phase is Phase.RUNNING:
            return f"Did not run: the run {how} while {tool} waited for permission"
        return f"Did not run: the run {how} before {tool} started"
    if part.state is PartState.INTERRUPTED:
        if part.tool_started:
            return f"Stopped: {tool} was interrupted by {_cause(part)} while it ran"
        if part.phase is Phase.GENERATING:
            return f"Did not run: interrupted by {_cause(part)} while the call was being generated"
        if part.phase is Phase.RUNNING:
            return f"Did not run: interrupted by {_cause(part)} while {tool} waited for permission"
        return f"Did not run: interrupted by {_cause(part)} before the tool started"
    if part.waiting_for is AskKind.PERMISSION:
        return f"{tool} waiting for permission"
    if part.waiting_for is AskKind.FORM:
        return f"{tool} waiting for an answer"
    if part.state is PartState.PENDING:
        return f"{tool} call being generated"
    if part.state is PartState.PREPARED:
        return f"{tool} call prepared, not started"
    return f"{tool} running"


def part_note(part: _PartFacts) -> str | None:
    """What the model should be told about an interrupted or declined tool call (None otherwise).

    For a call that may have started: it may have run, so do not repeat it blindly. For a declined
    one: the user declined this call (with their feedback, when they gave some).
    """
    tool = part.tool
    feedback = part.message if part.state is PartState.ERROR else None
    if part.declined is AskKind.PERMISSION:
        text = _sentence(_with(f"The user declined this {tool} call", feedback))
        if part.tool_started:
            text += " It had started before: it may have run in part, so check before repeating it."
        return text
    if part.declined is AskKind.FORM:
        return _sentence(_with(f"The user dismissed the {tool} form without answering", feedback))
    if part.state is PartState.INTERRUPTED and part.reason is None and part.origin in _LOST:
        return f"The {tool} call did not run: its run {_LOST[part.origin]} before the tool started."
    if part.state is not PartState.INTERRUPTED:
        return None
    if part.tool_started:
        return (
            f"The {tool} call was interrupted by {_cause(part)} while it ran. It may have run, in part "
            "or in full: check its effects before repeating it; do not repeat it blindly."
        )
    return f"The {tool} call was interrupted by {_cause(part)} before the tool ran: it did not run."
