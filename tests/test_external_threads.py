"""An external run (its body in another process) costs no OS thread: it is driven by the
supervisor's own messages, as a task on the supervisor's one loop thread, not by a parked driver
thread per run."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import httpx
from wire_support import served

from run_supervisor.actors import Supervisor, SupervisorConfig
from run_supervisor.actors.hosts import ExternalRuns
from run_supervisor.actors.hosts._external import EndReport, StepUpdate
from run_supervisor.protocol import Outcome, RequestResult, RunState, StartRun, StepKind

CONFIG = SupervisorConfig(shutdown_at_exit=False)


def _start(runs: ExternalRuns, run_id: str) -> None:
    outcome = runs.start(StartRun(run_id=run_id, session=f"s-{run_id}", directory="/w/a")).result(10)
    assert outcome.result is RequestResult.OK, outcome


def _report(runs: ExternalRuns, run_id: str, report: Any) -> None:
    outcome = runs.report(run_id, report).result(10)
    assert outcome.result is RequestResult.OK and not outcome.queued, outcome


def _finished(sup: Supervisor, session: str, run_id: str) -> Outcome | None:
    sup.await_idle(session, timeout=10)
    snapshot = sup.run(run_id)
    return None if snapshot is None else snapshot.outcome


def test_a_hundred_open_external_runs_add_no_os_thread() -> None:
    notices: list[dict[str, Any]] = []
    with Supervisor.start(CONFIG, directories=["/w/a"]) as sup:
        runs = ExternalRuns(sup, notices.append)
        # One run first: what the supervisor starts once (its loop thread, its relay) is counted in
        # the baseline, not in the 100.
        _start(runs, "warm")
        _report(runs, "warm", StepUpdate(kind=StepKind.MODEL))
        before = threading.active_count()
        ids = [f"r{i}" for i in range(100)]
        for run_id in ids:
            _start(runs, run_id)
            # A step applied (answered once the core took it) means its driver has begun.
            _report(runs, run_id, StepUpdate(kind=StepKind.MODEL))
        during = threading.active_count()
        assert all(sup.run(run_id).state is RunState.ACTIVE for run_id in ids)  # type: ignore[union-attr]
        for run_id in ["warm", *ids]:
            _report(runs, run_id, EndReport())
        outcomes = [_finished(sup, f"s-{run_id}", run_id) for run_id in ["warm", *ids]]
    assert outcomes == [Outcome.COMPLETED] * 101
    assert during - before <= 0, f"100 open external runs added {during - before} OS threads"


def test_a_hundred_open_external_runs_behind_the_http_server_add_no_os_thread() -> None:
    async def scenario(url: str, auth: dict[str, str]) -> tuple[int, int]:
        async with httpx.AsyncClient(base_url=url, headers=auth, timeout=httpx.Timeout(10.0)) as client:

            async def open_run(run_id: str) -> None:
                answer = await client.post(
                    "/runs", json={"run_id": run_id, "session": run_id, "directory": "/w/a"}
                )
                assert answer.status_code == 201, answer.text
                step = await client.post(f"/runs/{run_id}/reports", json={"type": "step", "kind": "model"})
                assert step.status_code == 200 and not step.json().get("queued"), step.text

            await open_run("warm")  # the server's own threads (a request worker, say) start here
            before = threading.active_count()
            ids = [f"r{i}" for i in range(100)]
            for run_id in ids:
                await open_run(run_id)
            during = threading.active_count()
            for run_id in ["warm", *ids]:
                end = await client.post(f"/runs/{run_id}/reports", json={"type": "end"})
                assert end.status_code == 200, end.text
            return before, during

    with served(("/w/a",)) as srv:
        before, during = asyncio.run(asyncio.wait_for(scenario(srv.url, srv.auth), 60))
        for run_id in ["warm", *(f"r{i}" for i in range(100))]:
            assert _finished(srv.supervisor, run_id, run_id) is Outcome.COMPLETED
    assert during - before <= 0, f"100 open external runs over HTTP added {during - before} OS threads"
