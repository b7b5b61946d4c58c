"""A body's waiting ``ask_permission`` declares what an "always" grant covers (``key=``), as
``open_permission`` does: on the sync and the async context and on a tool part; the host's
``reply_permission(always=True)`` then answers it (an ask without a key refuses an always grant)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from async_support import CONFIG, run_async

from run_supervisor import AsyncSupervisor, Outcome
from run_supervisor.actors import RunContext, Supervisor
from run_supervisor.actors._async_body import AsyncRunContext
from run_supervisor.actors.testing import EventLog
from run_supervisor.protocol import AskRequested


def _asked(events: EventLog, run_id: str) -> AskRequested:
    ask = events.wait_for("ask.requested", run_id=run_id, timeout=20)
    assert isinstance(ask, AskRequested)
    return ask


def _on_context(ctx: RunContext) -> bool:
    return ctx.ask_permission(timeout=20, command="ls", key="bash:ls").approved


def _on_part(ctx: RunContext) -> bool:
    call = ctx.tool("bash")
    call.prepared()
    call.running()
    approved = call.ask_permission(timeout=20, command="ls", key="bash:ls").approved
    call.completed()
    return approved


@pytest.mark.parametrize("ask", [_on_context, _on_part], ids=["context", "tool_part"])
def test_a_sync_body_s_ask_permission_with_a_key_is_answered_by_an_always_grant(
    supervisor: Supervisor, events: EventLog, ask: Callable[[RunContext], bool]
) -> None:
    approved: list[bool] = []
    run = supervisor.start_run(
        lambda ctx: approved.append(ask(ctx)), session="s1", directory="/w/a", run_id="r1"
    )
    ask_event = _asked(events, "r1")
    assert ask_event.payload.key == "bash:ls"
    supervisor.reply_permission(ask_event.ask_id, approve=True, always=True)
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

    assert run_async(host, bound=60) == [Outcome.COMPLETED, Outcome.COMPLETED]
    assert approved == [True, True]
