"""The run journal: after a crash every run, tool card and session reaches a true terminal state.

The recovery tests run on both journals: the SQLite file and a shard of a PostgreSQL database
(tests/pg_support.py starts a real server on a unix socket); what only a file can be (foreign,
corrupt, locked beside it) is tested on the file alone."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from layers import pick
from pg_support import JournalReader, crash_during, start_on, without_wait

from run_supervisor import (
    Gate,
    InterruptReason,
    JournalLocked,
    JournalUnreadable,
    Outcome,
    PartState,
    RunContext,
    Supervisor,
    SupervisorConfig,
    UnknownRun,
)
from run_supervisor.actors.testing import EventLog, simulate_crash
from run_supervisor.protocol import RunRecovered, RunStarted

ROOT = Path(__file__).resolve().parents[1]
CONFIG = SupervisorConfig(shutdown_at_exit=False)


def start(opened: list[Supervisor], journal: Path | str, **kwargs: Any) -> Supervisor:
    return start_on(opened, CONFIG, journal, **kwargs)


def crash_while(opened: list[Supervisor], journal: Path | str, body: Any, kind: str, **fields: Any) -> None:
    """Start a supervisor on ``journal`` and crash it during run r1 (pg_support.crash_during)."""
    crash_during(start(opened, journal, directories=["/w/a"]), body, kind, **fields)


def recovered_after(
    opened: list[Supervisor], journal: Path | str, body: Any, kind: str, **fields: Any
) -> tuple[Supervisor, RunRecovered]:
    """Crash a supervisor during run r1 (``crash_while``), start the next one on ``journal``: it and
    the one run it recovered."""
    crash_while(opened, journal, body, kind, **fields)
    after = start(opened, journal)
    (recovered,) = after.recovered()
    assert isinstance(recovered, RunRecovered)
    return after, recovered


def preparing_bash(gate: Gate) -> Any:
    """A body held while the model generates a bash call: the tool has not started."""

    def body(ctx: RunContext) -> None:
        with ctx.step("tool_input"):
            ctx.tool("bash")
            ctx.wait(gate)

    return body


def running_bash(gate: Gate) -> Any:
    def body(ctx: RunContext) -> None:
        with ctx.step("tool_input"):
            call = ctx.tool("bash")
        with ctx.step("tool_exec"):
            call.prepared()
            call.running()
            ctx.wait(gate)

    return body


def test_a_run_preparing_a_bash_call_when_the_backend_dies_is_recovered_as_a_crash_whose_tool_did_not_run(
    journal: Path | str, opened: list[Supervisor]
) -> None:
    after, recovered = recovered_after(opened, journal, preparing_bash(Gate("never")), "run.part.updated")
    assert (recovered.run_id, recovered.outcome, recovered.reason) == ("r1", Outcome.INTERRUPTED, "crash")
    (part,) = recovered.parts
    assert part.state is PartState.INTERRUPTED and part.tool_started is False
    snapshot = after.run("r1")
    assert snapshot is not None and snapshot.reason is InterruptReason.CRASH
    session = after.session("s1")
    assert session is None or session.status == "idle"
    follow_up = after.start_run(lambda ctx: None, session="s1", directory="/w/a", resume_of="r1")
    assert follow_up.wait(2).outcome is Outcome.COMPLETED


def test_a_tool_that_was_running_at_the_crash_is_reported_as_one_that_may_have_run(
    journal: Path | str, opened: list[Supervisor]
) -> None:
    _, recovered = recovered_after(
        opened, journal, running_bash(Gate("never")), "run.part.updated", state="running"
    )
    (part,) = recovered.parts
    assert part.state is PartState.INTERRUPTED and part.tool_started is True


def test_queued_runs_and_pending_closes_are_settled_by_the_restart(
    journal: Path | str, opened: list[Supervisor]
) -> None:
    sup = start(opened, journal, directories=["/w/a"])
    log = EventLog(sup)
    sup.start_run(preparing_bash(Gate("never")), session="s1", directory="/w/a", run_id="r1")
    sup.start_run(lambda ctx: None, session="s1", directory="/w/a", run_id="r2")
    log.wait_for("run.queued", run_id="r2")
    deferred = sup.close("dispose_all", mode="maintenance", origin="settings.provider.connect")
    assert deferred.result == "deferred"
    log.wait_for("action.result", action_id=deferred.action_id)
    log.close()
    simulate_crash(sup)

    after = start(opened, journal)
    assert sorted(r.run_id for r in after.recovered()) == ["r1", "r2"]
    queued = next(r for r in after.recovered() if r.run_id == "r2")
    assert queued.generation is None and queued.parts == ()
    assert after.pending_actions() == ()
    with JournalReader(journal) as db:
        assert db.scalar("COUNT(*)", "actions", "completed = 0") == 0


def test_recovered_runs_are_published_first_and_a_second_start_does_not_recover_them_again(
    journal: Path | str, opened: list[Supervisor]
) -> None:
    second, recovered = recovered_after(opened, journal, preparing_bash(Gate("never")), "run.step.started")
    assert second.recovery_events()[-1] == recovered  # the recovery's events come first: seq 1..k
    assert [e.seq for e in second.recovery_events()] == list(range(1, len(second.recovery_events()) + 1))
    simulate_crash(second)  # dies again at once: r1 was settled, it is not reported twice
    assert start(opened, journal).recovered() == ()


def test_a_journal_from_a_clean_shutdown_recovers_nothing(
    journal: Path | str, opened: list[Supervisor]
) -> None:
    sup = start(opened, journal, directories=["/w/a"])
    sup.start_run(preparing_bash(Gate("never")), session="s1", directory="/w/a", run_id="r1")
    sup.shutdown(grace_ms=500)
    assert start(opened, journal).recovered() == ()


def test_every_event_a_subscriber_sees_is_already_in_the_journal(
    journal: Path | str, opened: list[Supervisor]
) -> None:
    sup = start(opened, journal, directories=["/w/a"])
    seen: list[tuple[str, str | None]] = []
    reader = JournalReader(journal)

    def check(event: Any) -> None:
        if isinstance(event, RunStarted):
            seen.append((event.run_id, reader.scalar("state", "runs", "run_id = ?", event.run_id)))

    subscription = sup.subscribe(callback=check)
    runs = [sup.start_run(lambda ctx: None, session=f"s{i}", directory="/w/a") for i in range(20)]
    for run in runs:
        run.wait(2)
    sup.shutdown(grace_ms=500)
    assert subscription.closed
    reader.close()
    assert len(seen) == 20 and all(state is not None for _, state in seen), seen


def test_a_resumed_run_names_the_run_it_continues_and_an_unknown_one_is_refused(
    journal: Path | str, opened: list[Supervisor]
) -> None:
    sup = start(opened, journal, directories=["/w/a"])
    log = EventLog(sup)
    sup.start_run(lambda ctx: None, session="s1", directory="/w/a", run_id="r1").wait(2)
    sup.start_run(lambda ctx: None, session="s1", directory="/w/a", run_id="r2", resume_of="r1").wait(2)
    assert log.wait_for("run.started", run_id="r2").resume_of == "r1"  # type: ignore[union-attr]
    log.close()
    with pytest.raises(UnknownRun, match="r9"):
        sup.start_run(lambda ctx: None, session="s1", directory="/w/a", resume_of="r9")
    sup.shutdown(grace_ms=500)
    with JournalReader(journal) as db:
        assert db.scalar("resume_of", "runs", "run_id = 'r2'") == "r1"


def test_a_journal_held_by_a_live_supervisor_is_refused(
    journal: Path | str, opened: list[Supervisor]
) -> None:
    start(opened, journal)
    with pytest.raises(JournalLocked, match="held by a live supervisor"):
        Supervisor.start(CONFIG, journal=without_wait(journal))


def test_a_foreign_file_is_refused_and_left_untouched(tmp_path: Path) -> None:
    foreign = tmp_path / "notes.txt"
    foreign.write_text("my notes\n")
    with pytest.raises(JournalUnreadable, match="not a run-supervisor journal"):
        Supervisor.start(CONFIG, journal=foreign)
    assert foreign.read_text() == "my notes\n"


def test_another_application_s_sqlite_file_and_a_newer_schema_are_refused(tmp_path: Path) -> None:
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as db:
        db.execute("CREATE TABLE things (x)")
    before = other.read_bytes()
    with pytest.raises(JournalUnreadable, match="another application"):
        Supervisor.start(CONFIG, journal=other)
    assert other.read_bytes() == before

    newer = tmp_path / "newer.journal"
    Supervisor.start(CONFIG, journal=newer).shutdown(grace_ms=200)
    with sqlite3.connect(newer) as db:
        db.execute("PRAGMA user_version = 99")
    with pytest.raises(JournalUnreadable, match="schema version 99"):
        Supervisor.start(CONFIG, journal=newer)


def test_a_corrupt_journal_is_refused(tmp_path: Path) -> None:
    corrupt = tmp_path / "corrupt.journal"
    Supervisor.start(CONFIG, journal=corrupt).shutdown(grace_ms=200)
    data = bytearray(corrupt.read_bytes())
    data[100:4096] = b"\xff" * (4096 - 100)  # past the header: the first page's b-tree is garbage
    corrupt.write_bytes(bytes(data))
    with pytest.raises(JournalUnreadable, match=r"corrupt|not a readable journal"):
        Supervisor.start(CONFIG, journal=corrupt)


def test_finished_runs_are_compacted_by_the_retention_rule_so_the_file_stays_small(
    journal: Path | str, opened: list[Supervisor]
) -> None:
    sup = Supervisor.start(
        SupervisorConfig(shutdown_at_exit=False, retain_finished_runs=50),
        journal=journal,
        directories=["/w/a"],
    )
    opened.append(sup)
    for i in range(600):
        sup.start_run(lambda ctx: None, session="s1", directory="/w/a", run_id=f"r{i}")
    sup.run("r599")  # a query after the last start: every start was handled
    log = EventLog(sup)
    sup.start_run(lambda ctx: None, session="s1", directory="/w/a", run_id="last").wait(5)
    log.wait_for("run.finished", run_id="last", timeout=5)
    log.close()
    sup.shutdown(grace_ms=500)
    with JournalReader(journal) as db:
        kept = db.scalar("COUNT(*)", "runs")
    assert kept <= 50 + 256, kept  # the retention rule, applied every 256 finished runs


@pytest.mark.deep
@pytest.mark.timeout(300)
def test_the_crash_test_kills_the_supervisor_again_and_again_and_every_run_is_reported_exactly_once() -> None:
    kills = pick(smoke=10, deep=200)
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "crash_test.py"), "--kills", str(kills), "--json"],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode in (0, 1), done.stderr
    result = json.loads(done.stdout)
    assert result["violations"] == []
    assert result["kills"] == kills and result["journal_opens_failed"] == 0
    assert result["runs_recovered"] > 0 and result["runs_finished_before_a_kill"] > 0


def test_the_stdio_host_on_a_journal_writes_the_recovery_first(
    journal: Path | str, opened: list[Supervisor]
) -> None:
    import io

    from run_supervisor.actors.hosts._stdio import serve_stdio

    crash_while(opened, journal, preparing_bash(Gate("never")), "run.part.updated")

    out = io.BytesIO()
    assert serve_stdio(io.BytesIO(b""), out, journal=journal) == 0  # stdin closed at once: a shutdown
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    events = [line["event"] for line in lines if line["type"] == "event"]
    assert [e["type"] for e in events[:2]] == ["run.part.updated", "run.recovered"]
    assert events[1]["run_id"] == "r1" and events[1]["reason"] == "crash"


def test_a_wire_host_refuses_a_journal_it_cannot_use_with_one_line(tmp_path: Path) -> None:
    foreign = tmp_path / "notes.txt"
    foreign.write_text("my notes\n")
    done = subprocess.run(
        [sys.executable, "-m", "run_supervisor.actors._cli", "stdio", "--journal", str(foreign)],
        input=b"",
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.decode().strip().splitlines() == [
        f"run-supervisor stdio: journal {str(foreign)!r} is not a run-supervisor journal (not SQLite); "
        "left untouched"
    ]
    assert foreign.read_text() == "my notes\n"
