"""Helpers for tests of hosts and of this library: an event log to wait on, and a leak check.

Waits are bounded and synchronise on events, never on sleeps::

    log = EventLog(supervisor)
    result = supervisor.close("dispose", mode="maintenance", origin="config", directory="/w/a")
    log.wait_for("lifecycle.completed", action=result.action_id, timeout=2)
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures.thread import _worker as _executor_worker
from contextlib import contextmanager
from typing import Any, Literal, overload

import msgspec
import pykka

from run_supervisor.actors._api import Supervisor, simulate_crash
from run_supervisor.actors._async_api import AsyncSubscription, AsyncSupervisor
from run_supervisor.actors._errors import SupervisorClosed, SupervisorTimeout
from run_supervisor.actors._subscription import Subscription
from run_supervisor.protocol import (
    ActionResult,
    AskDismissed,
    AskReplied,
    AskRequested,
    AskWithdrawn,
    Event,
    InstanceClosed,
    InstanceStarted,
    LifecycleCompleted,
    LifecycleConfirmed,
    LifecycleDeferred,
    LifecycleRequested,
    RunFinished,
    RunPartUpdated,
    RunQueued,
    RunRecovered,
    RunStalled,
    RunStarted,
    RunUnstalled,
    SessionStatusChanged,
    StepFinished,
    StepStarted,
)

__all__ = ["EventLog", "LeakError", "no_leaks", "simulate_crash"]


def _wire_type(event: Event) -> str:
    return type(event).__struct_config__.tag  # type: ignore[return-value]


def _matches(event: Event, kind: str, fields: dict[str, Any]) -> bool:
    if _wire_type(event) != kind:
        return False
    return all(getattr(event, key, None) == value for key, value in fields.items())


_FOREVER = 3600.0
"""A thread's wait without a deadline, in slices of this many seconds."""


def _left(deadline: float | None) -> float | None:
    """Seconds left until ``deadline`` (0 once past it; None: no deadline)."""
    return None if deadline is None else max(0.0, deadline - time.monotonic())


class EventLog:
    """Every event of a supervisor (sync or async facade) from the moment it is made, kept in
    order, waitable from a thread (``wait_for``) or from a coroutine (``wait_for_async``)."""

    def __init__(self, supervisor: Supervisor | AsyncSupervisor) -> None:
        sync = supervisor.sync if isinstance(supervisor, AsyncSupervisor) else supervisor
        if sync._closed:
            raise SupervisorClosed("the supervisor has shut down; there are no more events")
        self._subscription = AsyncSubscription()
        sync._add_subscription(self._subscription)
        self.events: list[Event] = []

    def _seen(self, kind: str, fields: dict[str, Any]) -> Event | None:
        return next((event for event in self.events if _matches(event, kind, fields)), None)

    @overload
    def wait_for(
        self, kind: Literal["instance.started"], /, *, timeout: float | None = ..., **fields: Any
    ) -> InstanceStarted: ...

    @overload
    def wait_for(
        self, kind: Literal["instance.closed"], /, *, timeout: float | None = ..., **fields: Any
    ) -> InstanceClosed: ...

    @overload
    def wait_for(
        self, kind: Literal["run.queued"], /, *, timeout: float | None = ..., **fields: Any
    ) -> RunQueued: ...

    @overload
    def wait_for(
        self, kind: Literal["run.started"], /, *, timeout: float | None = ..., **fields: Any
    ) -> RunStarted: ...

    @overload
    def wait_for(
        self, kind: Literal["run.step.started"], /, *, timeout: float | None = ..., **fields: Any
    ) -> StepStarted: ...

    @overload
    def wait_for(
        self, kind: Literal["run.step.finished"], /, *, timeout: float | None = ..., **fields: Any
    ) -> StepFinished: ...

    @overload
    def wait_for(
        self, kind: Literal["run.part.updated"], /, *, timeout: float | None = ..., **fields: Any
    ) -> RunPartUpdated: ...

    @overload
    def wait_for(
        self, kind: Literal["run.finished"], /, *, timeout: float | None = ..., **fields: Any
    ) -> RunFinished: ...

    @overload
    def wait_for(
        self, kind: Literal["run.recovered"], /, *, timeout: float | None = ..., **fields: Any
    ) -> RunRecovered: ...

    @overload
    def wait_for(
        self, kind: Literal["session.status"], /, *, timeout: float | None = ..., **fields: Any
    ) -> SessionStatusChanged: ...

    @overload
    def wait_for(
        self, kind: Literal["lifecycle.requested"], /, *, timeout: float | None = ..., **fields: Any
    ) -> LifecycleRequested: ...

    @overload
    def wait_for(
        self, kind: Literal["lifecycle.deferred"], /, *, timeout: float | None = ..., **fields: Any
    ) -> LifecycleDeferred: ...

    @overload
    def wait_for(
        self, kind: Literal["lifecycle.completed"], /, *, timeout: float | None = ..., **fields: Any
    ) -> LifecycleCompleted: ...

    @overload
    def wait_for(
        self, kind: Literal["action.result"], /, *, timeout: float | None = ..., **fields: Any
    ) -> ActionResult: ...

    @overload
    def wait_for(
        self, kind: Literal["ask.requested"], /, *, timeout: float | None = ..., **fields: Any
    ) -> AskRequested: ...

    @overload
    def wait_for(
        self, kind: Literal["ask.replied"], /, *, timeout: float | None = ..., **fields: Any
    ) -> AskReplied: ...

    @overload
    def wait_for(
        self, kind: Literal["ask.dismissed"], /, *, timeout: float | None = ..., **fields: Any
    ) -> AskDismissed: ...

    @overload
    def wait_for(
        self, kind: Literal["ask.withdrawn"], /, *, timeout: float | None = ..., **fields: Any
    ) -> AskWithdrawn: ...

    @overload
    def wait_for(
        self, kind: Literal["run.stalled"], /, *, timeout: float | None = ..., **fields: Any
    ) -> RunStalled: ...

    @overload
    def wait_for(
        self, kind: Literal["run.unstalled"], /, *, timeout: float | None = ..., **fields: Any
    ) -> RunUnstalled: ...

    @overload
    def wait_for(
        self, kind: Literal["lifecycle.confirmed"], /, *, timeout: float | None = ..., **fields: Any
    ) -> LifecycleConfirmed: ...

    @overload
    def wait_for(self, kind: str, /, *, timeout: float | None = ..., **fields: Any) -> Event: ...

    def wait_for(self, kind: str, /, *, timeout: float | None = 2.0, **fields: Any) -> Event:
        """The first event of this wire type (``"run.finished"``...) whose fields match (any field,
        ``kind`` included: ``wait_for("run.step.started", kind="tool_exec")``); waits up to
        ``timeout`` seconds for it (None: as long as it takes), then raises ``SupervisorTimeout``.
        Typed by the wire type: ``wait_for("run.finished")`` is a ``RunFinished``."""
        found = self._seen(kind, fields)
        deadline = None if timeout is None else time.monotonic() + timeout
        while found is None and (remaining := _left(deadline)) != 0:
            try:
                event = Subscription.get(
                    self._subscription, timeout=_FOREVER if remaining is None else remaining
                )
            except (SupervisorTimeout, EOFError):
                break
            found = self._keep(event, kind, fields)
        return self._found(found, kind, fields, timeout)

    @overload
    async def wait_for_async(
        self, kind: Literal["instance.started"], /, *, timeout: float | None = ..., **fields: Any
    ) -> InstanceStarted: ...

    @overload
    async def wait_for_async(
        self, kind: Literal["instance.closed"], /, *, timeout: float | None = ..., **fields: Any
    ) -> InstanceClosed: ...

    @overload
    async def wait_for_async(
        self, kind: Literal["run.queued"], /, *, timeout: float | None = ..., **fields: Any
    ) -> RunQueued: ...

    @overload
    async def wait_for_async(
        self, kind: Literal["run.started"], /, *, timeout: float | None = ..., **fields: Any
    ) -> RunStarted: ...

    @overload
    async def wait_for_async(
        self, kind: Literal["run.step.started"], /, *, timeout: float | None = ..., **fields: Any
    ) -> StepStarted: ...

    @overload
    async def wait_for_async(
        self, kind: Literal["run.step.finished"], /, *, timeout: float | None = ..., **fields: Any
    ) -> StepFinished: ...

    @overload
    async def wait_for_async(
        self, kind: Literal["run.part.updated"], /, *, timeout: float | None = ..., **fields: Any
    ) -> RunPartUpdated: ...

    @overload
    async def wait_for_async(
        self, kind: Literal["run.finished"], /, *, timeout: float | None = ..., **fields: Any
    ) -> RunFinished: ...

    @overload
    async def wait_for_async(
        self, kind: Literal["run.recovered"], /, *, timeout: float | None = ..., **fields: Any
    ) -> RunRecovered: ...

    @overload
    async def wait_for_async(
        self, kind: Literal["session.status"], /, *, timeout: float | None = ..., **fields: Any
    ) -> SessionStatusChanged: ...

    @overload
    async def wait_for_async(
        self, kind: Literal["lifecycle.requested"], /, *, timeout: float | None = ..., **fields: Any
    ) -> LifecycleRequested: ...

    @overload
    async def wait_for_async(
        self, kind: Literal["lifecycle.deferred"], /, *, timeout: float | None = ..., **fields: Any
    ) -> LifecycleDeferred: ...

    @overload
    async def wait_for_async(
        self, kind: Literal["lifecycle.completed"], /, *, timeout: float | None = ..., **fields: Any
    ) -> LifecycleCompleted: ...

    @overload
    async def wait_for_async(
        self, kind: Literal["action.result"], /, *, timeout: float | None = ..., **fields: Any
    ) -> ActionResult: ...

    @overload
    async def wait_for_async(
        self, kind: Literal["ask.requested"], /, *, timeout: float | None = ..., **fields: Any
    ) -> AskRequested: ...

    @overload
    async def wait_for_async(
        self, kind: Literal["ask.replied"], /, *, timeout: float | None = ..., **fields: Any
    ) -> AskReplied: ...

    @overload
    async def wait_for_async(
        self, kind: Literal["ask.dismissed"], /, *, timeout: float | None = ..., **fields: Any
    ) -> AskDismissed: ...

    @overload
    async def wait_for_async(
        self, kind: Literal["ask.withdrawn"], /, *, timeout: float | None = ..., **fields: Any
    ) -> AskWithdrawn: ...

    @overload
    async def wait_for_async(
        self, kind: Literal["run.stalled"], /, *, timeout: float | None = ..., **fields: Any
    ) -> RunStalled: ...

    @overload
    async def wait_for_async(
        self, kind: Literal["run.unstalled"], /, *, timeout: float | None = ..., **fields: Any
    ) -> RunUnstalled: ...

    @overload
    async def wait_for_async(
        self, kind: Literal["lifecycle.confirmed"], /, *, timeout: float | None = ..., **fields: Any
    ) -> LifecycleConfirmed: ...

    @overload
    async def wait_for_async(self, kind: str, /, *, timeout: float | None = ..., **fields: Any) -> Event: ...

    async def wait_for_async(self, kind: str, /, *, timeout: float | None = 2.0, **fields: Any) -> Event:
        """``wait_for`` for a coroutine: waits without blocking the event loop (``timeout=None``:
        as long as it takes; ``asyncio.timeout()`` composes). Typed by the wire type, as
        ``wait_for``."""
        found = self._seen(kind, fields)
        deadline = None if timeout is None else time.monotonic() + timeout
        while found is None and (remaining := _left(deadline)) != 0:
            try:
                event = await self._subscription.get(timeout=remaining)
            except (SupervisorTimeout, EOFError):
                break
            found = self._keep(event, kind, fields)
        return self._found(found, kind, fields, timeout)

    def _keep(self, event: Event, kind: str, fields: dict[str, Any]) -> Event | None:
        """Record ``event``; it, if it is the one a wait is for."""
        self.events.append(event)
        return event if _matches(event, kind, fields) else None

    @staticmethod
    def _found(found: Event | None, kind: str, fields: dict[str, Any], timeout: float | None) -> Event:
        if found is None:
            raise SupervisorTimeout(f"no {kind} event matching {fields} within {timeout} s")
        return found

    def collect(self) -> list[Event]:
        """Every event so far (without waiting)."""
        self.events.extend(self._subscription.drain())
        return self.events

    def of(self, kind: str, /, **fields: Any) -> list[Event]:
        """Every event so far of this wire type whose fields match."""
        return [e for e in self.collect() if _matches(e, kind, fields)]

    def types(self) -> list[str]:
        return [_wire_type(e) for e in self.collect()]

    def as_dicts(self) -> list[dict[str, Any]]:
        return [{"type": _wire_type(e), **msgspec.to_builtins(e)} for e in self.collect()]

    def close(self) -> None:
        self._subscription.close()


class LeakError(AssertionError):
    """A test left a thread or a pykka actor running."""


def _asyncio_worker(thread: threading.Thread) -> bool:
    """A worker of an event loop's default executor (``asyncio.to_thread``, ``run_in_executor``):
    the loop's, not the test's; it ends when its loop's executor is shut down (``asyncio.run``
    does that), and an idle one would only make the check wait."""
    target = getattr(thread, "_target", None)
    return thread.name.startswith("asyncio_") and target is _executor_worker


@contextmanager
def no_leaks(*, timeout: float = 5.0) -> Iterator[None]:
    """Fail (``LeakError``) if the block leaves a thread or an actor it started still running after
    ``timeout`` seconds of joining. Leaked actors are stopped so the next test starts clean. An
    event loop's own executor workers (``asyncio.to_thread``) are not counted."""
    threads_before = set(threading.enumerate())
    actors_before = set(pykka.ActorRegistry.get_all())
    yield
    deadline = time.monotonic() + timeout
    started = [t for t in set(threading.enumerate()) - threads_before if not _asyncio_worker(t)]
    for thread in started:
        thread.join(timeout=max(0.0, deadline - time.monotonic()))
    leaked_actors = [ref for ref in pykka.ActorRegistry.get_all() if ref not in actors_before]
    leaked_threads = [t for t in started if t.is_alive()]
    for ref in leaked_actors:
        ref.stop(block=False)
    if leaked_actors or leaked_threads:
        raise LeakError(
            f"left running: {len(leaked_actors)} actor(s) {leaked_actors[:5]}, "
            f"{len(leaked_threads)} thread(s) {[t.name for t in leaked_threads[:10]]}"
        )
