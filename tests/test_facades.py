"""The two facades stay one API: every public call of the sync facade has an asyncio twin taking the
same parameters (names, kinds, defaults), save a short list of intended differences, and both go
through the same connection to the supervisor, so they answer and refuse alike."""

from __future__ import annotations

import ast
import inspect
import threading
from pathlib import Path
from typing import Any

import pytest
from async_support import run_async

from run_supervisor import (
    AsyncRunContext,
    AsyncRunHandle,
    AsyncSupervisor,
    AsyncToolCall,
    Gate,
    InvalidRequest,
    JournalFailed,
    Outcome,
    RunContext,
    RunHandle,
    Supervisor,
    SupervisorConfig,
    ToolCall,
)
from run_supervisor.actors import _async_api as async_api
from run_supervisor.actors import _calls as calls
from run_supervisor.actors._async_body import AsyncAsk
from run_supervisor.actors._context import Ask
from run_supervisor.actors._journal import JournaledPublisher
from run_supervisor.protocol import RunStarted

CONFIG = SupervisorConfig(shutdown_at_exit=False, default_grace_ms=500)

# What the sync facade has and its twin does not, and why. There is no third style: the sync facade
# blocks, the async one awaits (the raw submit alone hands back a future, on either).
ONLY_SYNC: dict[type, dict[str, str]] = {
    Supervisor: {
        "subscribe": "a callback subscription for threads; the loop's is events()",
    },
    RunHandle: {},
    RunContext: {},
    ToolCall: {},
    Ask: {},
}
# What the async facade has and the sync one does not, and why.
ONLY_ASYNC: dict[type, dict[str, str]] = {
    AsyncSupervisor: {
        "events": "the loop's subscription (async for); the sync facade's is subscribe()",
        "config": "the sync facade's is an attribute, not a property",
        "threads": "the sync facade's is an attribute, not a property",
        "abandoned_tasks": "the abandoned async bodies' tasks, the host loop's to settle; a thread "
        "body's thread is not a host's to hold",
    },
    AsyncRunHandle: {"sync": "the same run's thread-side handle"},
    AsyncRunContext: {},
    AsyncToolCall: {},
    AsyncAsk: {},
}
# Same name, other parameters, on purpose.
OTHER_PARAMETERS: dict[tuple[type, str], str] = {
    (Supervisor, "submit"): "the sync submit returns a future (no wait to bound); the async one awaits "
    "the outcome within timeout=",
}

PAIRS = [
    (Supervisor, AsyncSupervisor),
    (RunHandle, AsyncRunHandle),
    (RunContext, AsyncRunContext),
    (ToolCall, AsyncToolCall),
    (Ask, AsyncAsk),
]


def public(cls: type) -> set[str]:
    return {name for name in dir(cls) if not name.startswith("_")}


def parameters(cls: type, name: str) -> list[tuple[str, Any, Any]]:
    member = inspect.getattr_static(cls, name)
    if isinstance(member, classmethod):
        member = member.__func__
    return [(p.name, p.kind, p.default) for p in inspect.signature(member).parameters.values()]


@pytest.mark.parametrize(("sync", "twin"), PAIRS, ids=[s.__name__ for s, _ in PAIRS])
def test_every_public_call_of_the_sync_facade_has_an_async_twin_save_the_listed_ones(
    sync: type, twin: type
) -> None:
    assert public(sync) - public(twin) == set(ONLY_SYNC[sync])
    assert public(twin) - public(sync) == set(ONLY_ASYNC[twin])


@pytest.mark.parametrize(("sync", "twin"), PAIRS, ids=[s.__name__ for s, _ in PAIRS])
def test_each_twin_takes_the_same_parameters_names_kinds_and_defaults(sync: type, twin: type) -> None:
    differ = []
    for name in sorted(public(sync) & public(twin)):
        ours, theirs = inspect.getattr_static(sync, name), inspect.getattr_static(twin, name)
        assert isinstance(ours, property) == isinstance(theirs, property), (
            f"{name}: property on one side only"
        )
        if isinstance(ours, property) or not callable(ours) or (sync, name) in OTHER_PARAMETERS:
            continue
        if parameters(sync, name) != parameters(twin, name):
            differ.append(f"{name}: {inspect.signature(ours)} vs {inspect.signature(theirs)}")
    assert differ == []


def test_an_async_start_run_resumes_a_finished_run_as_the_sync_one_does() -> None:
    async def host() -> tuple[str | None, Outcome | None]:
        async with AsyncSupervisor.start(CONFIG, directories=["/w/a"]) as sup:
            events = sup.events()
            first = await sup.start_run(lambda ctx: None, session="s1", directory="/w/a", run_id="r1")
            await first.wait(5)
            follow_up = await sup.start_run(
                lambda ctx: None, session="s1", directory="/w/a", run_id="r2", resume_of="r1"
            )
            done = await follow_up.wait(5)
            async for event in events:
                if isinstance(event, RunStarted) and event.run_id == "r2":
                    return event.resume_of, done.outcome
        raise AssertionError("no run.started for r2")

    assert run_async(host) == ("r1", Outcome.COMPLETED)


def fill_the_disk(sup: Supervisor) -> None:
    """From now on the journal cannot grow (SQLITE_FULL), set on its writer between two batches."""
    publisher = sup._publisher
    assert isinstance(publisher, JournaledPublisher)
    done = threading.Event()

    def clamp() -> None:
        publisher.journal._db.execute("PRAGMA max_page_count = 1")
        done.set()

    publisher.after(clamp)
    assert done.wait(5)


def test_after_a_journal_failure_the_async_facade_raises_journal_failed_as_the_sync_one_does(
    tmp_path: Path,
) -> None:
    journal = tmp_path / "runs.journal"

    async def host() -> tuple[JournalFailed, type[BaseException], type[BaseException]]:
        sup = await AsyncSupervisor.start(CONFIG, journal=journal, directories=["/w/a"])
        try:
            events = sup.events()
            await (await sup.start_run(lambda ctx: None, session="s1", directory="/w/a", run_id="r1")).wait(5)
            fill_the_disk(sup.sync)

            go = Gate("go")

            def big_form(ctx: RunContext) -> None:
                ctx.wait(go)  # its start is answered (and journaled) before the disk is found full
                ctx.open_form(title="Pick one", questions=["Which?"], data={"blob": "x" * 200_000})
                ctx.wait(Gate("never"))

            await sup.start_run(big_form, session="s2", directory="/w/a", run_id="r2")
            go.open()
            async for _ in events:  # the stream ends once the journal stops recording
                pass
            failure = sup.journal_failure
            assert failure is not None
            raised = []
            for call in (
                lambda: sup.start_run(lambda ctx: None, session="s3", directory="/w/a"),
                lambda: sup.cancel("r2"),
            ):
                try:
                    await call()
                except Exception as exc:
                    raised.append(type(exc))
            return failure, raised[0], raised[1]
        finally:
            await sup.shutdown(grace_ms=0)

    failure, start_error, cancel_error = run_async(host)
    assert isinstance(failure, JournalFailed) and "SQLITE_FULL" in failure.error
    assert (start_error, cancel_error) == (JournalFailed, JournalFailed)


def test_the_async_facade_reaches_into_no_private_name_of_the_sync_one() -> None:
    """Both facades drive the supervisor through its link (actors/_link.py): the async one takes only
    public names from the sync one, and no private attribute of a sync facade or handle."""
    tree = ast.parse(inspect.getsource(async_api))
    imported = {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == "run_supervisor.actors._api"
        for alias in node.names
    }
    reached = sorted(
        ast.unparse(node)
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and node.attr.startswith("_")
        and not node.attr.startswith("__")
        and isinstance(node.value, ast.Attribute)
        and node.value.attr in ("sync", "_handle")
    )
    assert imported == {"RunHandle", "Supervisor", "SupervisorConfig"}
    assert reached == []


def test_an_async_body_context_shares_the_sync_one_s_reports_and_defines_only_its_waits() -> None:
    """The non-blocking calls of a body's context and tool part are written once (in the shared
    base ``RunContext`` and ``ToolCall`` take them from); the async twins define only what waits."""
    for sync, twin in ((RunContext, AsyncRunContext), (ToolCall, AsyncToolCall)):
        own = {name for name in vars(twin) if not name.startswith("_")}
        waits = {name for name in own if inspect.iscoroutinefunction(vars(twin)[name])}
        assert own - waits <= {"step"}, f"{twin.__name__} restates {sorted(own - waits - {'step'})}"
        shared = public(sync) & public(twin)
        assert all(getattr(sync, name) is getattr(twin, name) for name in shared - own), twin.__name__


def test_an_async_facade_is_made_over_a_supervisor_only() -> None:
    """``AsyncSupervisor(sup)`` drives ``sup``'s own link; anything else is refused at once, naming it."""
    with pytest.raises(InvalidRequest, match="must be a Supervisor, not object"):
        AsyncSupervisor(object())  # type: ignore[arg-type]
    sup = Supervisor.start(CONFIG)
    try:
        assert AsyncSupervisor(sup).sync is sup
    finally:
        sup.shutdown(grace_ms=0)


def test_an_async_handle_made_from_a_sync_one_waits_on_its_run_even_once_it_is_forgotten() -> None:
    config = SupervisorConfig(shutdown_at_exit=False, retain_finished_runs=0)
    sup = Supervisor.start(config, directories=["/w/a"])
    try:
        run = sup.start_run(lambda ctx: None, session="s1", directory="/w/a")
        assert run.wait(timeout=5).outcome is Outcome.COMPLETED  # finished, and forgotten at once
        handle = AsyncRunHandle(AsyncSupervisor(sup), run)
        assert run_async(lambda: handle.wait(timeout=5)).outcome is Outcome.COMPLETED
    finally:
        sup.shutdown(grace_ms=0)


SHARED_CALLS = (
    "start_run",
    "cancel",
    "cancel_session",
    "delete_session",
    "set_queue_policy",
    "close",
    "confirm_close",
    "reply_permission",
    "answer_form",
    "dismiss_form",
    "shutdown",
)


@pytest.mark.parametrize("name", SHARED_CALLS)
def test_a_call_both_facades_make_is_written_once_and_each_facade_only_waits_on_it(name: str) -> None:
    """The parameters, checks and docstring of such a call are one function (actors/_calls.py); the
    sync facade's method blocks on what it builds, the async one's is a coroutine awaiting it."""
    ours, theirs = inspect.getattr_static(Supervisor, name), inspect.getattr_static(AsyncSupervisor, name)
    spec = getattr(calls, name)
    assert ours.__wrapped__ is spec and theirs.__wrapped__ is spec
    assert ours.__doc__ == theirs.__doc__ == spec.__doc__
    assert not inspect.iscoroutinefunction(ours) and inspect.iscoroutinefunction(theirs)


def test_a_shared_call_checks_its_arguments_before_anything_is_sent_on_either_facade() -> None:
    sup = Supervisor.start(CONFIG)
    try:
        with pytest.raises(InvalidRequest, match="timeout"):
            sup.cancel("r1", timeout=-1)

        async def host() -> None:
            with pytest.raises(InvalidRequest, match="timeout"):
                await AsyncSupervisor(sup).cancel("r1", timeout=-1)

        run_async(host)
        assert sup.statistics().runs_finished == 0
    finally:
        sup.shutdown(grace_ms=0)


def test_an_async_body_s_ask_opens_when_it_is_awaited_not_when_it_is_called() -> None:
    """``ctx.ask_permission(...)`` and ``call.ask_form(...)`` are written once for both contexts; in an
    async body they still behave as an ``async def`` would: nothing is asked until the body awaits."""

    async def host() -> tuple[int, int, Outcome | None]:
        async with AsyncSupervisor.start(CONFIG, directories=["/w/a"]) as sup:
            seen: list[int] = []

            async def body(ctx: AsyncRunContext) -> None:
                asking = ctx.ask_permission(5, command="ls")
                form = ctx.tool("question").ask_form(5, questions=["Which?"])
                seen.append(len(await sup.pending_asks()))  # behind the asks, had they been raised
                for unawaited in (asking, form):
                    assert inspect.iscoroutine(unawaited)
                    unawaited.close()
                seen.append(len(await sup.pending_asks()))

            run = await sup.start_run(body, session="s1", directory="/w/a")
            done = await run.wait(5)
            return seen[0], seen[1], done.outcome

    assert run_async(host) == (0, 0, Outcome.COMPLETED)
