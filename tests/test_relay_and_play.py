"""The relay that completes a host's futures survives a thread that would not start, and the scenario
player keeps the dead supervisor's last events and answers on its side of a crash."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from concurrent.futures import Future
from io import BytesIO
from pathlib import Path
from typing import Any

import pytest
from layers import pick
from scenario_support import INPUT, MODEL, action, run, run_cli, story

from run_supervisor import Supervisor, SupervisorConfig
from run_supervisor.actors.hosts._stdio import serve_stdio
from run_supervisor.actors.scenarios import load_scenario, play
from run_supervisor.protocol import CancelRun, RejectCode, RequestOutcome

# --- the relay ----------------------------------------------------------------------------------


@pytest.fixture
def one_failed_relay_start(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The first start of a relay thread fails as a process out of threads fails it; later starts work.
    Returns the names of the threads whose start failed."""
    start = threading.Thread.start
    failed: list[str] = []

    def flaky_start(thread: threading.Thread) -> None:
        if thread.name == "run-supervisor-relay" and not failed:
            failed.append(thread.name)
            raise RuntimeError("can't start new thread")
        start(thread)

    monkeypatch.setattr(threading.Thread, "start", flaky_start)
    return failed


@pytest.fixture
def bare_supervisor() -> Iterator[Supervisor]:
    supervisor = Supervisor.start(SupervisorConfig(shutdown_at_exit=False))
    try:
        yield supervisor
    finally:
        supervisor.shutdown(grace_ms=500)


def _ghost_cancel(supervisor: Supervisor, seen: list[str]) -> Future[Any]:
    future = supervisor.submit(CancelRun(run_id="ghost", origin="user"))
    future.add_done_callback(lambda _: seen.append(threading.current_thread().name))
    return future


def test_a_relay_thread_that_would_not_start_still_answers_its_request_and_the_next_one_starts_it(
    one_failed_relay_start: list[str], bare_supervisor: Supervisor
) -> None:
    seen: list[str] = []
    first = _ghost_cancel(bare_supervisor, seen).result(timeout=5)  # the old relay never answered it
    assert one_failed_relay_start == ["run-supervisor-relay"]
    assert isinstance(first, RequestOutcome) and first.code is RejectCode.UNKNOWN_RUN
    later = [_ghost_cancel(bare_supervisor, seen) for _ in range(3)]
    assert [f.result(timeout=5).code for f in later] == [RejectCode.UNKNOWN_RUN] * 3
    # The later answers are relayed again: completed on the relay's own thread, not the supervisor's.
    assert seen[1:] == ["run-supervisor-relay"] * 3


def test_after_a_failed_relay_start_the_wire_hosts_answer_requests_instead_of_504_for_good(
    one_failed_relay_start: list[str],
) -> None:
    data = b"".join(b'{"id": %d, "type": "cancel", "run_id": "ghost"}\n' % n for n in range(1, 4))
    out = BytesIO()
    assert serve_stdio(BytesIO(data), out, events=False, grace_ms=100) == 0
    replies = sorted((json.loads(text) for text in out.getvalue().splitlines()), key=lambda r: r["id"])
    assert one_failed_relay_start
    assert [(r["id"], r["status"], r["answer"]["code"]) for r in replies] == [
        (1, 404, "unknown_run"),
        (2, 404, "unknown_run"),
        (3, 404, "unknown_run"),
    ]


# --- the scenario player across a crash ---------------------------------------------------------

_CRASH_AFTER_A_CANCEL = story(
    "a crash fired on a run's end, with the session's idle event and the cancel's answer right behind",
    run("r1", MODEL, INPUT, '{ kind = "tool_exec", id = "exec", tool = "bash", gate = "never" }'),
    run("r2", start="manual"),
    action(id="stop", when="r1.exec.started", do="cancel", run="r1", origin="user"),
    action(id="kill", when="r1.finished", do="crash"),
    action(id="follow-up", when="kill.ok", do="start_run", run="r2"),
    """[expect]
r1 = { outcome = "interrupted", reason = "user_cancel", origin = "user" }
r2 = { outcome = "completed" }
s1 = { status = "idle" }
stop = { result = "ok" }
kill = { result = "ok" }
follow-up = { result = "ok" }
""",
)


@pytest.fixture
def crash_scenario(tmp_path: Path) -> Path:
    path = tmp_path / "crash-on-an-event-others-follow.toml"
    path.write_text(_CRASH_AFTER_A_CANCEL)
    return path


@pytest.mark.deep
def test_a_crash_fired_on_an_event_others_follow_at_once_keeps_the_invariants_and_the_cancels_answer(
    crash_scenario: Path,
) -> None:
    scenario = load_scenario(crash_scenario)
    for attempt in range(pick(smoke=3, deep=12)):
        report = play(scenario)
        assert report.passed, (attempt, report.failures)
        # The dead supervisor's last events stay before the crash, its run.finished among them, and the
        # new one's events start after: r1 finished once, before r2 (which the new supervisor ran).
        kinds = [(row["type"], row.get("run")) for row in report.events]
        assert kinds.count(("run.finished", "r1")) == 1
        assert kinds.index(("run.finished", "r1")) < kinds.index(("run.started", "r2"))


@pytest.mark.deep
def test_the_scenario_command_plays_a_crash_fired_on_an_event_others_follow_and_exits_0(
    crash_scenario: Path,
) -> None:
    for _ in range(pick(smoke=1, deep=3)):
        done = run_cli("scenario", str(crash_scenario), "--json")
        assert done.returncode == 0, done.stdout + done.stderr
        assert json.loads(done.stdout)["failures"] == []
