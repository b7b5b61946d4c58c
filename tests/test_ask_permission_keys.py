"""A body's waiting ``ask_permission`` declares what an "always" grant covers (``key=``), as
``open_permission`` does: on the sync and the async context and on a tool part; the host's
``reply_permission(always=True)`` then answers it (an ask without a key refuses an always grant)."""

from __future__ import annotations

import asyncio

from run_supervisor import AsyncSupervisor, Outcome, SupervisorConfig
from run_supervisor.actors import RunContext, Supervisor
from run_supervisor.actors._async_body import AsyncRunContext
from run_supervisor.actors.testing import EventLog
from run_supervisor.protocol import AskRequested

CONFIG = SupervisorConfig(shutdown_at_exit=False)


def _asked(events: EventLog, run_id: str) -> AskRequested:
    ask = events.wait_for("ask.requested", run_id=run_id, timeout=20)
    assert isinstance(ask, AskRequested)
    return ask


def test_a_sync_body_s_ask_permission_with_a_key_is_answered_by_an_always_grant(
    supervisor: Supervisor, events: EventLog
) -> None:
    approved: list[bool] = []

    def body(ctx: RunContext) -> None:
        approved.append(ctx.ask_permission(timeout=20, command="ls", key="bash:ls").approved)

    run = supervisor.start_run(body, session="s1", directory="/w/a", run_id="r1")
    ask = _asked(events, "r1")
    assert ask.payload.key == "bash:ls"
    supervisor.reply_permission(ask.ask_id, approve=True, always=True)
    assert run.wait(timeout=20).outcome is Outcome.COMPLETED
    assert approved == [True]


def test_a_tool_part_s_ask_permission_with_a_key_is_answered_by_an_always_grant(
    supervisor: Supervisor, events: EventLog
) -> None:
    approved: list[bool] = []

    def body(ctx: RunContext) -> None:
        call = ctx.tool("bash")
        call.prepared()
        call.running()
        approved.append(call.ask_permission(timeout=20, command="ls", key="bash:ls").approved)
        call.completed()

    run = supervisor.start_run(body, session="s1", directory="/w/a", run_id="r1")
    ask = _asked(events, "r1")
    assert ask.payload.key == "bash:ls"
    supervisor.reply_permission(ask.ask_id, approve=True, always=True)
    assert run.wait(timeout=20).outcome is Outcome.COMPLETED
    assert approved == [True]


def test_an_async_body_s_ask_permission_with_a_key_is_answered_by_an_always_grant() -> None:
    approved: list[bool] = []

    async def on_part(ctx: AsyncRunContext) -> None:
        call = ctx.tool("bash")
        call.prepared()
        call.running()
        approved.append((await call.ask_permission(timeout=20, command="ls", key="bash:ls")).approved)
        call.completed()

    async def on_context(ctx: AsyncRunContext) -> None:
        approved.append((await ctx.ask_permission(timeout=20, command="ls", key="bash:ls")).approved)

    async def host() -> list[object]:
        results: list[object] = []
        async with AsyncSupervisor.start(CONFIG, directories=["/w/a"]) as sup:
            events = EventLog(sup)
            try:
                for n, body in enumerate([on_part, on_context]):
                    run = await sup.start_run(body, session=f"s{n}", directory="/w/a", run_id=f"r{n}")
                    ask = await events.wait_for_async("ask.requested", run_id=f"r{n}", timeout=20)
                    assert ask.payload.key == "bash:ls"
                    await sup.reply_permission(ask.ask_id, approve=True, always=True)
                    results.append((await run.wait(timeout=20)).outcome)
            finally:
                events.close()
        return results

    async def bounded() -> list[object]:
        async with asyncio.timeout(60):
            return await host()

    assert asyncio.run(bounded()) == [Outcome.COMPLETED, Outcome.COMPLETED]
    assert approved == [True, True]
