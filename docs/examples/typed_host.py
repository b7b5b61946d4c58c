"""A host's view of the public API under a strict type checker (CI runs ``mypy --strict`` on this
file against the installed package, with no plugin).

Run it: python docs/examples/typed_host.py
"""

from __future__ import annotations

import asyncio
from typing import assert_type

from run_supervisor import (
    AsyncSupervisor,
    CloseMode,
    CloseModeName,
    CloseOutcome,
    CloseResult,
    Event,
    Gate,
    InterruptReason,
    InvalidRequest,
    Outcome,
    RunContext,
    RunSnapshot,
    Supervisor,
    SupervisorConfig,
    part_label,
)
from run_supervisor.protocol import RunFinished


def assistant_turn(ctx: RunContext) -> None:
    bash = ctx.tool("bash")
    bash.prepared()
    with ctx.step("tool_exec"):
        bash.running()
    bash.completed()


def describe(event: Event) -> str:
    if isinstance(event, RunFinished):  # the Event union narrows like any other
        reason = event.reason.value if event.reason is not None else "-"
        return f"{event.run_id}: {event.outcome.value} ({reason})"
    return type(event).__name__


def sync_host(mode: CloseModeName) -> CloseOutcome:
    config = SupervisorConfig(request_timeout_s=2.0)  # keyword defaults: no plugin needed
    config = config.replace(queue_policy="coalesce")  # a changed copy, checked (and typed) as a new one
    with Supervisor.start(config, directories=["/proj/a"]) as sup:
        events = sup.subscribe()
        run = sup.start_run(assistant_turn, session="s1", directory="/proj/a")
        snapshot: RunSnapshot = run.wait(timeout=5)
        assert snapshot.outcome is Outcome.COMPLETED
        print(part_label(snapshot.parts[0]))
        result = sup.close("dispose_all", mode=mode, origin="settings.provider.connect")
        # A misspelt mode is a type error (were it not, this ignore would be unused: an error too),
        # and at run time an InvalidRequest naming the argument.
        try:
            sup.close("dispose_all", mode="maintenace", origin="typo")  # type: ignore[arg-type]
        except InvalidRequest as error:
            print(error)
        for event in events.drain():
            describe(event)
        return result


async def async_host() -> InterruptReason | None:
    async with AsyncSupervisor.start(SupervisorConfig(), directories=["/proj/a"]) as sup:
        gate = Gate("never")
        run = await sup.start_run(lambda ctx: ctx.wait(gate), session="s1", directory="/proj/a")
        await run.cancel()
        finished = await run.wait(timeout=5)
        assert_type(finished, RunSnapshot)
        outcome = await sup.close("reload", mode=CloseMode.MAINTENANCE, origin="t", directory="/proj/a")
        assert outcome.result in (CloseResult.COMPLETED, CloseResult.DEFERRED)
        return finished.reason


if __name__ == "__main__":
    print(sync_host("maintenance").result.value)
    print(asyncio.run(async_host()))
