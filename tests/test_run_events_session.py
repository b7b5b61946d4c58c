"""Every event of a run names its session, so a client can route a run's steps, cards, asks and end
to the session's view without keeping a table of runs."""

from __future__ import annotations

import msgspec

from run_supervisor.protocol import (
    AskKind,
    AskPayload,
    AskRaised,
    Event,
    RunFinished,
    StepKind,
    StepReport,
    StepStarted,
    WithdrawAsk,
    WithdrawReason,
)
from run_supervisor.protocol.testing import CoreShell, InvariantChecker


def _runs_events(shell: CoreShell) -> list[Event]:
    return [e for e in shell.events if getattr(e, "run_id", None) is not None]


def test_every_event_of_a_run_names_its_session() -> None:
    shell = CoreShell("/w/a")
    shell.start("r1", session="chat-1")
    shell.report(StepReport(run_id="r1", step="model", kind=StepKind.MODEL, finished=False))
    shell.report(StepReport(run_id="r1", step="model", kind=StepKind.MODEL, finished=True))
    shell.ask("r1")  # a running bash call asks its permission: cards and ask.requested
    shell.reply("r1", approve=True)  # ask.replied
    shell.ask("r1", form=True)
    shell.dismiss_form("r1")  # ask.dismissed; the run is interrupted
    shell.finish("r1")
    shell.start("r2", session="chat-2")
    shell.report(AskRaised(run_id="r2", ask_id="r2:a", kind=AskKind.PERMISSION, payload=AskPayload()))
    shell.report(WithdrawAsk(run_id="r2", ask_id="r2:a", reason=WithdrawReason.BODY))  # ask.withdrawn
    shell.stall("r2")
    shell.heartbeat("r2")  # run.unstalled
    shell.finish("r2")

    events = _runs_events(shell)
    kinds = {type(e).__struct_config__.tag for e in events}
    assert {
        "run.step.started",
        "run.step.finished",
        "run.part.updated",
        "ask.replied",
        "ask.dismissed",
        "ask.withdrawn",
        "run.unstalled",
        "run.finished",
    } <= kinds
    sessions = {"r1": "chat-1", "r2": "chat-2"}
    assert [(e.run_id, e.session) for e in events] == [  # type: ignore[attr-defined]
        (e.run_id, sessions[e.run_id])  # type: ignore[attr-defined]
        for e in events
    ]
    assert shell.finished("r2").session == "chat-2"


def test_a_run_event_that_names_another_session_is_refused_by_the_checker() -> None:
    shell = CoreShell("/w/a")
    shell.start("r1", session="chat-1")
    shell.report(StepReport(run_id="r1", step="model", kind=StepKind.MODEL, finished=False))
    shell.finish("r1")
    checker = InvariantChecker()
    for event in shell.events:
        moved = isinstance(event, StepStarted | RunFinished)
        checker.event(msgspec.structs.replace(event, session="chat-9") if moved else event)
    assert sum("names session 'chat-9', its run is in 'chat-1'" in v for v in checker.violations) == 2
