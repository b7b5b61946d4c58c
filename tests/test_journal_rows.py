"""The journals' rows, written once for both databases (actors/_journal.py ``Journal`` runs each
database's ``Statements``): an id used again replaces its row in both, as if it had never been, and
comes last in the recovery's order. Events are applied to the journal directly, as its writer would."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pg_support import BACKENDS, make_journal

from run_supervisor.actors._journal import Journal
from run_supervisor.protocol import AskState, WithdrawReason


@pytest.fixture(params=BACKENDS)
def journal(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Journal]:
    """An open journal (an SQLite file, or a shard of the session's PostgreSQL database), its boot begun."""
    opened = Journal.open(make_journal(request.param, tmp_path))
    opened.begin_boot()
    yield opened
    opened.abandon()


def queued(run_id: str, **more: Any) -> dict[str, Any]:
    return {"type": "run.queued", "run_id": run_id, "session": "s1", **more}


def asked(ask_id: str, run_id: str, title: str) -> dict[str, Any]:
    return {
        "type": "ask.requested",
        "ask_id": ask_id,
        "run_id": run_id,
        "session": "s1",
        "kind": "permission",
        "tool": "bash",
        "call_id": "c1",
        "payload": {"title": title},
    }


def test_a_run_id_queued_again_after_its_run_finished_is_a_new_row_last_in_order(journal: Journal) -> None:
    journal.apply(
        [
            queued("r1", resume_of="r0", resume_count=1),
            {
                "type": "run.started",
                "run_id": "r1",
                "session": "s1",
                "directory": "/w/a",
                "generation": 1,
                "epoch": 7,
            },
            {"type": "run.finished", "run_id": "r1", "session": "s1", "outcome": "completed"},
            queued("r2"),
            queued("r1"),
        ]
    )
    plan = journal.read_recovery()
    assert [(run.run_id, run.generation, run.epoch, run.resume_count) for run in plan.runs] == [
        ("r2", None, None, 0),
        ("r1", None, None, 0),
    ]


def test_an_ask_id_raised_again_is_open_again_with_what_it_carries_now(journal: Journal) -> None:
    journal.apply(
        [
            queued("r1"),
            asked("a1", "r1", "first"),
            {"type": "ask.withdrawn", "ask_id": "a1", "run_id": "r1", "session": "s1", "reason": "timeout"},
            asked("a1", "r1", "second"),
        ]
    )
    (run,) = journal.read_recovery().runs
    assert run.withdrawn_asks == ("a1",)  # open at the crash: the crash withdraws it
    (ask,) = run.asks
    assert (ask.state, ask.withdraw_reason, ask.payload.title) == (
        AskState.WITHDRAWN,
        WithdrawReason.INTERRUPTED,
        "second",
    )
