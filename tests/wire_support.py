"""Test support for the wire hosts: a real server on a loopback port, and an SSE reader.

Every wait is bounded and synchronises on what the server sends (events, answers), never on sleeps.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx

from run_supervisor.actors import Supervisor, SupervisorConfig
from run_supervisor.actors.hosts import HttpSettings, ServerThread, WireHost
from run_supervisor.actors.hosts._timeline import CHROMIUM_FLAGS

Popen = TypeVar("Popen", bound="subprocess.Popen[Any]")
Item = TypeVar("Item")
CLI = (sys.executable, "-m", "run_supervisor.actors._cli")
"""The command line of ``run-supervisor`` in this interpreter."""


@dataclass
class Served:
    supervisor: Supervisor
    host: WireHost
    server: ServerThread

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.server.token}"}

    def client(self, **kwargs: Any) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=self.url, headers=self.auth, timeout=httpx.Timeout(10.0), **kwargs)


@contextlib.contextmanager
def served(
    directories: tuple[str, ...] = ("/w/a", "/w/b"),
    *,
    config: SupervisorConfig | None = None,
    buffer: int = 10_000,
    default_lease_ms: int = 30_000,
) -> Iterator[Served]:
    """A supervisor behind a real HTTP server on 127.0.0.1 (a free port); all torn down after."""
    sup = Supervisor.start(config or SupervisorConfig(shutdown_at_exit=False))
    host = WireHost(sup, buffer=buffer, default_lease_ms=default_lease_ms)
    if directories:
        sup.load(*directories)  # after the hub subscribed: their instance.started are in the stream
    with serving(sup, host) as srv:
        yield srv


@contextlib.contextmanager
def serving(sup: Supervisor, host: WireHost, settings: HttpSettings | None = None) -> Iterator[Served]:
    """``host`` (over ``sup``) behind a real HTTP server on 127.0.0.1; the supervisor shut down,
    the hub joined and the server stopped after."""
    server = ServerThread(host, settings=settings).start()
    try:
        yield Served(sup, host, server)
    finally:
        if not sup.closed:
            sup.shutdown(grace_ms=500, reason="test_teardown")
        host.hub.join(5.0)
        server.stop()


async def read_until(
    read: Callable[[float], Awaitable[Item | None]],
    match: Callable[[Item], bool],
    timeout: float,
    seen: Callable[[], object],
) -> Item:
    """Read on until an item matches, every ``read`` bounded by what is left of ``timeout``; the
    stream's end (``read`` gives None) fails, saying what was ``seen()``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        item = await read(max(0.01, deadline - loop.time()))
        if item is None:
            raise AssertionError(f"the stream ended; seen: {seen()}")
        if match(item):
            return item


@dataclass
class SseEvent:
    id: str | None
    data: dict[str, Any]

    @property
    def type(self) -> str:
        return str(self.data.get("type"))


class SseReader:
    """Reads an SSE stream on a task into a queue; ``next()`` waits (bounded) for the next event."""

    def __init__(self, client: httpx.AsyncClient, path: str, headers: dict[str, str] | None = None) -> None:
        self.client = client
        self.path = path
        self.headers = headers or {}
        self.queue: asyncio.Queue[SseEvent | None] = asyncio.Queue()
        self.seen: list[SseEvent] = []
        self.status: int | None = None
        self._task: asyncio.Task[None] | None = None
        self._opened = asyncio.Event()
        self._getting: asyncio.Future[SseEvent | None] | None = None

    async def _read(self) -> None:
        try:
            async with self.client.stream("GET", self.path, headers=self.headers) as response:
                self.status = response.status_code
                self._opened.set()
                event_id: str | None = None
                data: list[str] = []
                async for line in response.aiter_lines():
                    if line == "":
                        if data:
                            await self.queue.put(SseEvent(event_id, json.loads("\n".join(data))))
                        event_id, data = None, []
                    elif line.startswith("id:"):
                        event_id = line[3:].strip()
                    elif line.startswith("data:"):
                        data.append(line[5:].strip())
        finally:
            self._opened.set()
            await self.queue.put(None)

    async def open(self, timeout: float = 10.0) -> SseReader:
        self._task = asyncio.create_task(self._read())
        await asyncio.wait_for(self._opened.wait(), timeout)
        return self

    async def next(self, timeout: float = 10.0) -> SseEvent | None:
        """The next event; None once the stream has ended. A wait that runs out raises TimeoutError
        and loses nothing: the pending get is kept for the next call (cancelling it, as
        ``asyncio.wait_for`` does, can drop an event that arrives in that instant on Python 3.11)."""
        if self._getting is None:
            self._getting = asyncio.ensure_future(self.queue.get())
        done, _ = await asyncio.wait({self._getting}, timeout=timeout)
        if not done:
            raise TimeoutError(f"no event within {timeout} s; seen: {[e.type for e in self.seen]}")
        event, self._getting = self._getting.result(), None
        if event is not None:
            self.seen.append(event)
        return event

    async def until(self, match: Callable[[SseEvent], bool], timeout: float = 10.0) -> SseEvent:
        """Read on until an event matches (bounded); every event read is kept in ``seen``."""
        return await read_until(self.next, match, timeout, lambda: [e.type for e in self.seen])

    async def close(self) -> None:
        if self._getting is not None:
            self._getting.cancel()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, httpx.HTTPError):
                await self._task


@contextlib.asynccontextmanager
async def sse(
    client: httpx.AsyncClient, path: str = "/events", headers: dict[str, str] | None = None
) -> AsyncIterator[SseReader]:
    reader = await SseReader(client, path, headers).open()
    try:
        yield reader
    finally:
        await reader.close()


def of_type(wire_type: str, /, **fields: Any) -> Callable[[SseEvent], bool]:
    def match(event: SseEvent) -> bool:
        props = event.data.get("properties", event.data)
        return event.type == wire_type and all(props.get(k) == v for k, v in fields.items())

    return match


# --- headless Chromium (Debian's `chromium`; .ci/run installs it) ------------------------------------


def chromium(url: str, user_data_dir: str, *extra: str, timeout: float = 90.0) -> str:
    """Run headless Chromium once on ``url`` with a fresh profile; returns its stdout."""
    import shutil
    import subprocess

    binary = shutil.which("chromium")
    assert binary is not None, "chromium is not installed"
    done = subprocess.run(
        [binary, *CHROMIUM_FLAGS, f"--user-data-dir={user_data_dir}", *extra, url],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


# External runs over HTTP: one served host per test, a scenario coroutine bounded in time.


def run_served(scenario: Callable[[Served], Awaitable[None]], *, within: float = 45.0, **kwargs: Any) -> None:
    """Play ``scenario`` against a host ``served(**kwargs)``, within ``within`` seconds."""
    with served(**kwargs) as srv:
        asyncio.run(asyncio.wait_for(scenario(srv), within))


def run_external(
    scenario: Callable[[httpx.AsyncClient, SseReader], Awaitable[None]],
    *,
    lease_ms: int | None = None,
    **kwargs: Any,
) -> None:
    """Play ``scenario`` with a client and the event stream from its start, once external run r1 is
    open in s1 over /w/a (with ``lease_ms``, when given), against a host ``served(**kwargs)``."""

    async def opened(srv: Served) -> None:
        async with srv.client() as client, sse(client, "/events?after=0") as events:
            await start_external(client, "r1", "s1", **({} if lease_ms is None else {"lease_ms": lease_ms}))
            await scenario(client, events)

    run_served(opened, **kwargs)


async def start_external(client: httpx.AsyncClient, run_id: str, session: str, **extra: Any) -> None:
    """Open external run ``run_id`` in ``session`` over /w/a (201)."""
    answer = await client.post(
        "/runs", json={"run_id": run_id, "session": session, "directory": "/w/a", **extra}
    )
    assert answer.status_code == 201, answer.text


async def start_queued(client: httpx.AsyncClient, events: SseReader) -> None:
    """Open external run r1 in s1 and r2 behind it, until r2's ``run.queued`` is seen."""
    await start_external(client, "r1", "s1")
    await start_external(client, "r2", "s1")
    await events.until(of_type("run.queued", run_id="r2"))


async def end_run(client: httpx.AsyncClient, events: SseReader, run_id: str = "r1") -> SseEvent:
    """Report external run ``run_id``'s end (answered 200) and wait for its ``run.finished``."""
    assert (await report(client, run_id, type="end")).status_code == 200
    return await events.until(of_type("run.finished", run_id=run_id))


async def report(client: httpx.AsyncClient, run_id: str, **fields: Any) -> httpx.Response:
    """One report of an external run."""
    return await client.post(f"/runs/{run_id}/reports", json=fields)


async def submit(client: httpx.AsyncClient, request_type: str, **fields: Any) -> httpx.Response:
    """One protocol request, of any ``type``, on the generic route (``POST /requests``)."""
    return await client.post("/requests", json={"type": request_type, **fields})


def run_node(*args: str) -> Any:
    """Run ``node *args`` (a docs example) to its end, within 60 s; its stdout's JSON summary."""
    done = subprocess.run(["node", *args], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


@contextlib.contextmanager
def reaped(proc: Popen) -> Iterator[Popen]:
    """``proc`` itself; killed (and waited for) after, should it still be running."""
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)


@contextlib.asynccontextmanager
async def reaped_async(proc: asyncio.subprocess.Process) -> AsyncIterator[asyncio.subprocess.Process]:
    """``proc`` itself; killed (and waited for) after, should it still be running."""
    try:
        yield proc
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
