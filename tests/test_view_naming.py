"""What a publication of the view rebuilds is what its items name, read from each type's own fields once
(``actors/_view.py``'s plans) exactly as reading every name off every item would say."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest

from run_supervisor.actors import Gate, RunContext, Supervisor, SupervisorConfig, _view
from run_supervisor.actors.testing import EventLog
from run_supervisor.protocol import (
    Emit,
    InstanceClosed,
    ReleaseRun,
    RunFinished,
    RunQueued,
    RunRecovered,
    RunStalled,
    RunStarted,
    RunUnstalled,
)


def _read_by_name(items: list[Any]) -> tuple[Any, ...]:
    """The names every item carries, each looked up by name on every item (the plain reading): every
    name collected in order, the runs, sessions and actions then deduplicated."""
    found: defaultdict[str, list[str]] = defaultdict(list)
    for given in items:
        item = given.event if isinstance(given, Emit) else given
        for name in ("run_id", "session"):
            value = getattr(item, name, None)
            if isinstance(value, str):
                found[name].append(value)
        parent = getattr(item, "parent_run_id", None)
        if isinstance(parent, str) and isinstance(item, RunQueued | RunStarted):
            found["run_id"].append(parent)
        action = getattr(item, "action_id", None)
        if isinstance(action, str) and not isinstance(item, RunFinished):
            found["action_id"].append(action)
        if isinstance(item, RunStarted | InstanceClosed):
            found["directory"].append(item.directory)
        elif isinstance(item, RunFinished) and item.generation is not None:
            found["unpinned"].append(item.run_id)
        elif isinstance(item, ReleaseRun | RunRecovered):
            found["released"].append(item.run_id)
        elif isinstance(item, RunStalled | RunUnstalled):
            found["stalls"].append(item.run_id)
    ordered = [list(dict.fromkeys(found[name])) for name in ("run_id", "session", "action_id")]
    return (*ordered, set(found["directory"]), found["unpinned"], found["released"], found["stalls"])


def test_a_publication_names_what_reading_every_field_by_name_names(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[int] = [0]
    differences: list[str] = []
    named = _view._named

    def checked(given_items: Any) -> Any:
        items = list(given_items)
        got = named(items)
        ours = (list(got[0]), list(got[1]), list(got[2]), *got[3:])
        seen[0] += 1
        if ours != _read_by_name(items):  # collected: an assertion on the supervisor's thread is contained
            differences.append(f"{[type(i).__name__ for i in items]}: {ours} != {_read_by_name(items)}")
        return got

    monkeypatch.setattr(_view, "_named", checked)
    gate = Gate("g")

    def child(ctx: RunContext) -> None:
        ctx.wait(gate)

    def parent(ctx: RunContext) -> None:
        with ctx.step("model"):
            call = ctx.tool("bash")
            call.prepared()
            call.running()
            call.completed()
        ctx.wait(gate)

    sup = Supervisor.start(
        SupervisorConfig(shutdown_at_exit=False, retain_finished_runs=2), directories=["/w/a", "/w/b"]
    )
    events = EventLog(sup)
    try:
        first = sup.start_run(parent, session="s1", directory="/w/a", run_id="p")
        events.wait_for("run.part.updated", run_id="p", state="completed")
        sup.start_run(child, session="c1", directory="/w/a", run_id="c", parent_run_id="p")
        sup.start_run(child, session="s1", directory="/w/a", run_id="queued")  # behind p
        sup.cancel("queued")
        deferred = sup.close("dispose", mode="maintenance", origin="test", directory="/w/a")
        sup.close("reload", mode="user_confirmed_interrupt", origin="test", directory="/w/b")
        gate.open()
        first.wait(10)
        events.wait_for("lifecycle.completed", action_id=deferred.action_id)
        for i in range(3):  # past retain_finished_runs: the oldest finished runs are forgotten
            sup.start_run(lambda ctx: None, session="s2", directory="/w/b", run_id=f"f{i}").wait(10)
    finally:
        sup.shutdown(grace_ms=1000)
    assert seen[0] > 10 and differences == []
