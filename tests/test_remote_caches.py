"""Caches over the wire: a host that keeps its caches out of process registers for the load and
dispose hooks (HTTP and stdio), is asked to load and to dispose each generation, and acknowledges each
within the budgets of an in-process hook. Lazy reload holds for it: the tests keep the host's own
record of the generations it holds, and no directory ever has two of them when nothing asked."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import os
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from wire_support import CLI, SseReader, reaped_async

from run_supervisor.actors import Supervisor, SupervisorConfig
from run_supervisor.actors._instance_actor import hook_deadline
from run_supervisor.actors.hosts import RemoteCaches, ServerThread, WireHost
from run_supervisor.actors.testing import EventLog

RELOAD = {"do": "reload", "mode": "maintenance", "origin": "ui.reload", "directory": "/w/a"}
DISPOSE = {"do": "dispose", "mode": "maintenance", "origin": "ui.dispose", "directory": "/w/a"}


# --- the host's side --------------------------------------------------------------------------------


class CacheHost:
    """What an out-of-process host keeps: the generations of each directory it has built and not yet
    torn down. It acknowledges every request (a load once built, a dispose once torn down) unless told
    to hold it; ``most_alive`` is the most generations of one directory it ever held at once."""

    def __init__(self, ack: Callable[[str], Awaitable[None]]) -> None:
        self._ack = ack
        self.alive: dict[str, set[int]] = collections.defaultdict(set)
        self.asked: list[tuple[str, str, int]] = []
        self.most_alive = 0
        self.hold: set[tuple[str, str, int]] = set()
        self.held: dict[tuple[str, str, int], str] = {}

    async def on_request(self, event: dict[str, Any]) -> None:
        kind = "load" if event["type"] == "instance.load_requested" else "dispose"
        what = (kind, event["directory"], event["generation"])
        self.asked.append(what)
        if kind == "load":
            self.alive[event["directory"]].add(event["generation"])
            self.most_alive = max(self.most_alive, len(self.alive[event["directory"]]))
        if what in self.hold:
            self.held[what] = event["request_id"]
            return
        if kind == "dispose":
            self.alive[event["directory"]].discard(event["generation"])
        await self._ack(event["request_id"])


class Events:
    """Every event a stream delivered, in order, with bounded waits for one to arrive."""

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []
        self._changed = asyncio.Event()

    def add(self, event: dict[str, Any]) -> None:
        self.seen.append(event)
        self._changed.set()

    async def until(self, match: Callable[[dict[str, Any]], bool], timeout: float = 15.0) -> dict[str, Any]:
        async def scan() -> dict[str, Any]:
            while True:
                for event in self.seen:
                    if match(event):
                        return event
                self._changed.clear()
                await self._changed.wait()

        return await asyncio.wait_for(scan(), timeout)

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.seen if e["type"] == kind]


def is_(kind: str, **fields: Any) -> Callable[[dict[str, Any]], bool]:
    return lambda e: e["type"] == kind and all(e.get(k) == v for k, v in fields.items())


_REQUESTS = ("instance.load_requested", "instance.dispose_requested")


# --- over HTTP --------------------------------------------------------------------------------------


@dataclass
class Remote:
    supervisor: Supervisor | None
    """None when the server is a ``serve`` process."""
    client: httpx.AsyncClient
    events: Events
    host: CacheHost


@contextlib.contextmanager
def serving(config: SupervisorConfig) -> Iterator[tuple[Supervisor, RemoteCaches, ServerThread]]:
    caches = RemoteCaches()
    sup = Supervisor.start(config, hooks=caches)
    wire = WireHost(sup, caches=caches)
    server = ServerThread(wire).start()
    try:
        yield sup, caches, server
    finally:
        if not sup.closed:
            sup.shutdown(grace_ms=200, reason="test_teardown")
        wire.hub.join(5.0)
        server.stop()
        caches.close()


@contextlib.asynccontextmanager
async def remote(url: str, token: str, sup: Supervisor | None = None) -> AsyncIterator[Remote]:
    headers = {"Authorization": f"Bearer {token}"}
    async with (
        httpx.AsyncClient(base_url=url, headers=headers, timeout=10.0) as client,
        httpx.AsyncClient(base_url=url, headers=headers, timeout=10.0) as acks,
    ):

        async def ack(request_id: str) -> None:
            answer = await acks.post(f"/instances/hooks/acks/{request_id}", json={})
            assert answer.status_code == 200, answer.text

        events, host = Events(), CacheHost(ack)
        reader = await SseReader(client, "/events?after=0").open()

        async def pump() -> None:
            while (item := await reader.next(timeout=60)) is not None:
                if item.type in _REQUESTS:
                    await host.on_request(item.data)
                events.add(item.data)

        task = asyncio.create_task(pump())
        try:
            yield Remote(sup, client, events, host)
        finally:
            # The stream ends first, so the pump reads its end (a cancel can be lost when it races an
            # event that arrives at the same moment, and the pump would then wait for the next one).
            await reader.close()
            with contextlib.suppress(asyncio.CancelledError, TimeoutError):
                await asyncio.wait_for(task, 5)


def run_http(config: SupervisorConfig, scenario: Callable[[Remote], Awaitable[None]]) -> None:
    async def main(sup: Supervisor, server: ServerThread) -> None:
        async with remote(server.url, server.token, sup) as r:
            await scenario(r)

    with serving(config) as (sup, _caches, server):
        asyncio.run(asyncio.wait_for(main(sup, server), 60))


def run_serve(scenario: Callable[[Remote], Awaitable[None]]) -> None:
    """The same, against a ``run-supervisor serve`` process (its own RemoteCaches), shut down by
    ``POST /shutdown`` while the host still answers: the shutdown's disposes are acknowledged too."""

    async def main() -> None:
        env = {**os.environ, "RUN_SUPERVISOR_TOKEN": "remote-caches-token"}
        proc = await asyncio.create_subprocess_exec(
            *CLI, "serve", "--port", "0", stdout=asyncio.subprocess.PIPE, env=env
        )
        async with reaped_async(proc):
            assert proc.stdout is not None
            ready = json.loads(await asyncio.wait_for(proc.stdout.readline(), 30))
            async with remote(ready["url"], "remote-caches-token") as r:
                await scenario(r)
                await r.client.post("/shutdown", json={"grace_ms": 1000})
                closed = await r.events.until(is_("instance.closed", directory="/w/a", generation=2))
                assert closed["error"] is None  # the shutdown's dispose was asked and acknowledged
                assert r.host.asked[-1] == ("dispose", "/w/a", 2) and r.host.alive["/w/a"] == set()
                assert await asyncio.wait_for(proc.wait(), 20) == 0

    asyncio.run(asyncio.wait_for(main(), 90))


def _config(**kwargs: Any) -> SupervisorConfig:
    return SupervisorConfig(shutdown_at_exit=False, **kwargs)


@pytest.mark.parametrize("server", ["thread", "serve"])
def test_a_registered_http_host_is_asked_to_dispose_after_the_run_and_to_load_after_the_dispose(
    server: str,
) -> None:
    async def scenario(r: Remote) -> None:
        registered = (await r.client.post("/instances/hooks", json={"name": "ts-backend"})).json()
        assert registered["result"] == "ok" and registered["pending"] == []
        assert (registered["load_budget_ms"], registered["dispose_budget_ms"]) == (5000, 1000)
        loaded = await r.client.post("/directories", json={"directories": ["/w/a"]})
        assert loaded.status_code == 200, loaded.text  # answered once the host acknowledged the load
        assert r.host.asked == [("load", "/w/a", 1)]
        started = await r.client.post("/runs", json={"run_id": "r1", "session": "s1", "directory": "/w/a"})
        assert started.json()["result"] == "ok"
        await r.events.until(is_("run.started", run_id="r1"))

        deferred = (await r.client.post("/close", json=RELOAD)).json()

        assert deferred["result"] == "deferred"
        stats = (await r.client.get("/statistics")).json()
        assert (stats["loads_deferred"], stats["instances_open"]) == (1, 1)
        state = (await r.client.get("/instances/hooks")).json()
        assert state["pending"] == [] and state["loaded"] == [{"directory": "/w/a", "generation": 1}]
        assert r.host.asked == [("load", "/w/a", 1)]  # nothing asked while the run goes on

        ended = await r.client.post("/runs/r1/reports", json={"type": "end"})
        assert ended.json()["result"] == "ok"
        await r.events.until(is_("instance.load_requested", directory="/w/a", generation=2))
        started2 = await r.events.until(is_("instance.started", directory="/w/a", generation=2))

        assert started2["cause"] == "previous_closed"
        assert r.host.asked == [("load", "/w/a", 1), ("dispose", "/w/a", 1), ("load", "/w/a", 2)]
        assert r.host.most_alive == 1  # never two generations of /w/a at once, tracked by the host
        closed = await r.events.until(is_("instance.closed", directory="/w/a", generation=1))
        assert closed["error"] is None
        requests = [e for e in r.events.seen if e["type"] in _REQUESTS]
        assert [(e["type"], e["generation"], e["registration"]) for e in requests] == [
            ("instance.load_requested", 1, registered["registration"]),
            ("instance.dispose_requested", 1, registered["registration"]),
            ("instance.load_requested", 2, registered["registration"]),
        ]
        assert [e["budget_ms"] for e in requests] == [5000, 1000, 5000]
        # Each carries the seq of the supervisor event it follows in the stream, as the host's notices do.
        assert 0 < requests[1]["seq"] <= requests[2]["seq"]

    if server == "thread":
        run_http(_config(), scenario)
    else:
        run_serve(scenario)


def test_a_run_arriving_during_the_deferred_close_is_what_asks_the_host_for_a_second_generation() -> None:
    async def scenario(r: Remote) -> None:
        await r.client.post("/instances/hooks", json={})
        assert (await r.client.post("/directories", json={"directories": ["/w/a"]})).status_code == 200
        await r.client.post("/runs", json={"run_id": "r1", "session": "s1", "directory": "/w/a"})
        await r.events.until(is_("run.started", run_id="r1"))
        assert (await r.client.post("/close", json=RELOAD)).json()["result"] == "deferred"
        assert r.host.most_alive == 1

        await r.client.post("/runs", json={"run_id": "r2", "session": "s2", "directory": "/w/a"})

        await r.events.until(is_("instance.load_requested", directory="/w/a", generation=2))
        started2 = await r.events.until(is_("instance.started", directory="/w/a", generation=2))
        assert started2["cause"] == "run"  # r2 asked for it: two generations, next to the old run
        assert r.host.most_alive == 2 and r.host.alive["/w/a"] == {1, 2}
        await r.client.post("/runs/r1/reports", json={"type": "end"})
        await r.events.until(is_("instance.closed", directory="/w/a", generation=1))
        assert r.host.asked == [("load", "/w/a", 1), ("load", "/w/a", 2), ("dispose", "/w/a", 1)]
        assert r.host.alive["/w/a"] == {2}

    run_http(_config(), scenario)


async def _dispose_not_acknowledged(r: Remote) -> dict[str, Any]:
    """Register, load /w/a, hold the host's dispose ack and close: the ``instance.closed`` it ends with."""
    await r.client.post("/instances/hooks", json={})
    assert (await r.client.post("/directories", json={"directories": ["/w/a"]})).status_code == 200
    r.host.hold.add(("dispose", "/w/a", 1))
    await r.client.post("/close", json=DISPOSE)
    return await r.events.until(is_("instance.closed", directory="/w/a", generation=1))


def test_a_dispose_not_acknowledged_in_time_is_reported_as_overran_by_name_as_an_in_process_hook_is() -> None:
    # The in-process reference: a dispose hook that does not return within its budget.
    class Stuck:
        def __init__(self) -> None:
            self.gate = threading.Event()

        def load(self, directory: str, generation: int) -> None:
            return None

        def dispose(self, directory: str, generation: int, cache: Any) -> None:
            self.gate.wait(30)  # a bounded wait: opened once the shutdown has named it

    stuck = Stuck()
    with Supervisor.start(_config(dispose_budget_ms=200), hooks=stuck, directories=["/w/a"]) as sup:
        log = EventLog(sup)
        sup.close("dispose", mode="maintenance", origin="t", directory="/w/a")
        in_process = log.wait_for("instance.closed", directory="/w/a", generation=1)
        in_process_outcome = sup.shutdown(grace_ms=100)
        stuck.gate.set()
        log.close()

    async def scenario(r: Remote) -> None:
        closed = await _dispose_not_acknowledged(r)

        assert closed["error"] == in_process.error == "the dispose hook overran its 200 ms budget"  # type: ignore[union-attr]
        assert r.supervisor is not None
        outcome = await asyncio.to_thread(r.supervisor.shutdown, grace_ms=100)
        assert outcome.overran == in_process_outcome.overran == ("the dispose hook of /w/a (generation 1)",)
        late = await r.client.post(f"/instances/hooks/acks/{r.host.held[('dispose', '/w/a', 1)]}", json={})
        assert late.json() == {
            "result": "ok",
            "request_id": r.host.held[("dispose", "/w/a", 1)],
            "on_time": False,
            "repeated": False,
        }

    run_http(_config(dispose_budget_ms=200), scenario)


def test_a_dispose_ack_sent_once_the_close_was_reported_overran_is_never_told_it_was_on_time() -> None:
    # The registry judges the ack by the deadline the instance actor reported the overrun by, not by
    # a clock of its own started when the hook thread woke (later, on a loaded machine).
    async def scenario(r: Remote) -> None:
        closed = await _dispose_not_acknowledged(r)
        request_id = r.host.held[("dispose", "/w/a", 1)]
        late = (await r.client.post(f"/instances/hooks/acks/{request_id}", json={})).json()

        assert closed["error"] == "the dispose hook overran its 200 ms budget"
        assert (late["on_time"], late["repeated"]) == (False, False)

    run_http(_config(dispose_budget_ms=200), scenario)


def test_a_sync_dispose_hook_is_told_the_deadline_it_is_judged_by() -> None:
    told: list[float | None] = []
    outside = hook_deadline()

    class TimesItself:
        def load(self, directory: str, generation: int) -> None:
            told.append(hook_deadline())

        def dispose(self, directory: str, generation: int, cache: Any) -> None:
            deadline = hook_deadline()
            told.append(deadline)
            if generation == 2 and deadline is not None:  # the second one returns only once it is late
                threading.Event().wait(max(0.0, deadline - time.monotonic()) + 0.05)

    with Supervisor.start(_config(dispose_budget_ms=300), hooks=TimesItself(), directories=["/w/a"]) as sup:
        log = EventLog(sup)
        sup.close("reload", mode="maintenance", origin="t", directory="/w/a")
        on_time = log.wait_for("instance.closed", directory="/w/a", generation=1)
        sup.close("dispose", mode="maintenance", origin="t", directory="/w/a")
        late = log.wait_for("instance.closed", directory="/w/a", generation=2, timeout=10)
        sup.shutdown(grace_ms=100)
        log.close()

    assert outside is None and len(told) == 4 and all(isinstance(d, float) for d in told)
    assert on_time.error is None  # type: ignore[union-attr]
    assert late.error == "the dispose hook overran its 300 ms budget"  # type: ignore[union-attr]


def test_a_load_not_acknowledged_in_time_fails_naming_its_budget_and_a_late_ack_is_taken() -> None:
    async def scenario(r: Remote) -> None:
        await r.client.post("/instances/hooks", json={})
        r.host.hold.add(("load", "/w/a", 1))

        loaded = await r.client.post("/directories", json={"directories": ["/w/a"]})

        assert (
            loaded.status_code == 500 and "the load hook overran its 200 ms budget" in loaded.json()["error"]
        )
        request_id = r.host.held[("load", "/w/a", 1)]
        late = (await r.client.post(f"/instances/hooks/acks/{request_id}", json={})).json()
        assert (late["on_time"], late["repeated"]) == (False, False)
        again = (await r.client.post(f"/instances/hooks/acks/{request_id}", json={})).json()
        assert (again["on_time"], again["repeated"]) == (False, True)

    run_http(_config(load_budget_ms=200), scenario)


def test_a_load_acknowledged_with_an_error_fails_the_load_with_the_hosts_words() -> None:
    async def scenario(r: Remote) -> None:
        await r.client.post("/instances/hooks", json={})
        r.host.hold.add(("load", "/w/a", 1))
        loading = asyncio.create_task(r.client.post("/directories", json={"directories": ["/w/a"]}))
        await r.events.until(is_("instance.load_requested", directory="/w/a"))
        request_id = r.host.held[("load", "/w/a", 1)]

        acked = await r.client.post(f"/instances/hooks/acks/{request_id}", json={"error": "no tsserver"})

        assert acked.json()["on_time"] is True
        loaded = await loading
        assert loaded.status_code == 500 and "no tsserver" in loaded.json()["error"]

    run_http(_config(), scenario)


def test_with_nobody_registered_loads_and_disposes_ask_nothing_as_before() -> None:
    async def scenario(r: Remote) -> None:
        assert (await r.client.get("/instances/hooks")).json()["registration"] is None
        assert (await r.client.post("/directories", json={"directories": ["/w/a"]})).status_code == 200
        await r.client.post("/close", json=DISPOSE)
        await r.events.until(is_("instance.closed", directory="/w/a", generation=1))
        assert (await r.client.post("/directories", json={"directories": ["/w/a"]})).status_code == 200
        await r.events.until(is_("instance.started", directory="/w/a", generation=2))

        assert r.host.asked == [] and not any(e["type"] in _REQUESTS for e in r.events.seen)
        assert r.events.of("instance.closed")[0]["error"] is None

    run_http(_config(), scenario)


def test_unregistering_fails_the_outstanding_requests_and_later_loads_ask_nothing() -> None:
    async def scenario(r: Remote) -> None:
        registration = (await r.client.post("/instances/hooks", json={})).json()["registration"]
        r.host.hold.add(("load", "/w/a", 1))
        loading = asyncio.create_task(r.client.post("/directories", json={"directories": ["/w/a"]}))
        await r.events.until(is_("instance.load_requested", directory="/w/a"))

        gone = (await r.client.delete(f"/instances/hooks/{registration}")).json()

        assert gone["failed"] == [r.host.held[("load", "/w/a", 1)]]
        loaded = await loading
        assert loaded.status_code == 500 and "unregistered before acknowledging" in loaded.json()["error"]
        assert (await r.client.post("/directories", json={"directories": ["/w/b"]})).status_code == 200
        assert r.host.asked == [("load", "/w/a", 1)]
        again = await r.client.delete(f"/instances/hooks/{registration}")
        assert again.status_code == 404 and again.json()["code"] == "not_found"

    run_http(_config(), scenario)


def test_a_registration_whose_host_stops_renewing_lapses_and_later_loads_ask_nothing() -> None:
    lease_ms = 2000  # the host renews well within it until it is asked, however loaded the machine

    async def scenario(r: Remote) -> None:
        answer = (await r.client.post("/instances/hooks", json={"name": "ts", "lease_ms": lease_ms})).json()
        assert answer["lease_ms"] == lease_ms
        renewed = await r.client.post(f"/instances/hooks/{answer['registration']}/renew")
        assert renewed.status_code == 200 and renewed.json()["lease_ms"] == lease_ms
        renewals: list[int] = []

        async def renewing() -> None:
            while True:
                await asyncio.sleep(lease_ms / 8000)
                renewals.append(
                    (await r.client.post(f"/instances/hooks/{answer['registration']}/renew")).status_code
                )

        renewer = asyncio.create_task(renewing())
        r.host.hold.add(("load", "/w/a", 1))  # asked to load, the host "crashes": no ack, no renewal
        loading = asyncio.create_task(r.client.post("/directories", json={"directories": ["/w/a"]}))
        await r.events.until(is_("instance.load_requested", directory="/w/a"))
        renewer.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await renewer
        assert set(renewals) <= {200}
        # The load's budget is a minute: it ends at the lease instead, naming it.
        finished = await loading
        assert finished.status_code == 500 and f"lease ran out ({lease_ms} ms" in finished.json()["error"]
        state = (await r.client.get("/instances/hooks")).json()
        assert (state["registration"], state["lease_ms"], state["pending"]) == (None, None, [])
        assert (await r.client.post("/directories", json={"directories": ["/w/b"]})).status_code == 200
        assert r.host.asked == [("load", "/w/a", 1)]  # /w/b asked nobody: no budget waited out
        gone = await r.client.post(f"/instances/hooks/{answer['registration']}/renew")
        assert gone.status_code == 404 and gone.json()["code"] == "not_found"
        bad = await r.client.post("/instances/hooks", json={"lease_ms": 10})
        assert bad.status_code == 422 and "lease_ms" in bad.json()["error"]

    run_http(_config(load_budget_ms=60_000), scenario)


def test_a_second_registration_takes_over_the_outstanding_requests() -> None:
    async def scenario(r: Remote) -> None:
        first = (await r.client.post("/instances/hooks", json={"name": "old"})).json()
        r.host.hold.add(("load", "/w/a", 1))
        loading = asyncio.create_task(r.client.post("/directories", json={"directories": ["/w/a"]}))
        await r.events.until(is_("instance.load_requested", directory="/w/a"))

        second = (await r.client.post("/instances/hooks", json={"name": "new"})).json()

        assert second["replaced"] == first["registration"]
        assert [(p["type"], p["directory"]) for p in second["pending"]] == [
            ("instance.load_requested", "/w/a")
        ]
        await r.client.post(f"/instances/hooks/acks/{second['pending'][0]['request_id']}", json={})
        assert (await loading).status_code == 200
        assert (await r.client.get("/instances/hooks")).json()["name"] == "new"

    run_http(_config(), scenario)


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "words"),
    [
        ("POST", "/instances/hooks/acks/nope", {}, 404, "no hook request 'nope'"),
        ("POST", "/instances/hooks", {"nmae": "x"}, 422, "takes no field `nmae`"),
        ("POST", "/instances/hooks", {"name": 3}, 422, "name must be null or a string"),
        ("POST", "/instances/hooks/acks/x", {"eror": "x"}, 422, "takes no field `eror`"),
        ("DELETE", "/instances/hooks/nope", None, 404, "no registration 'nope'"),
    ],
)
def test_a_malformed_hooks_request_is_refused_naming_what(
    method: str, path: str, body: Any, status: int, words: str
) -> None:
    async def scenario(r: Remote) -> None:
        answer = await r.client.request(method, path, json=body)
        assert answer.status_code == status and words in answer.json()["error"], answer.text

    run_http(_config(), scenario)


# --- over stdio -------------------------------------------------------------------------------------


class Sidecar:
    """``run-supervisor stdio`` in a subprocess: lines in, answers by id, events to a CacheHost."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.events = Events()
        self.answers: dict[Any, asyncio.Future[dict[str, Any]]] = {}
        self.host = CacheHost(self._ack)
        self._ids = 0
        self._task = asyncio.create_task(self._pump())

    async def _ack(self, request_id: str) -> None:
        self.send({"type": "ack_hook", "request_id": request_id})

    def send(self, line: dict[str, Any]) -> asyncio.Future[dict[str, Any]]:
        self._ids += 1
        answer: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.answers[self._ids] = answer
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps({**line, "id": self._ids}) + "\n").encode())
        return answer

    async def ask(self, line: dict[str, Any]) -> dict[str, Any]:
        return await asyncio.wait_for(self.send(line), 15)

    async def _pump(self) -> None:
        assert self.proc.stdout is not None
        while line := await self.proc.stdout.readline():
            message = json.loads(line)
            if message["type"] == "event":
                event = message["event"]
                if event["type"] in _REQUESTS:
                    await self.host.on_request(event)
                self.events.add(event)
            elif (waiting := self.answers.pop(message.get("id"), None)) is not None:
                waiting.set_result(message)

    async def close(self) -> int:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        code = await asyncio.wait_for(self.proc.wait(), 20)
        await asyncio.wait_for(self._task, 5)
        return code


def run_stdio(scenario: Callable[[Sidecar], Awaitable[None]], *args: str) -> None:
    async def main() -> None:
        proc = await asyncio.create_subprocess_exec(
            *CLI, "stdio", *args, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE
        )
        async with reaped_async(proc):
            sidecar = Sidecar(proc)
            await scenario(sidecar)
            if proc.returncode is None:
                assert await sidecar.close() == 0

    asyncio.run(asyncio.wait_for(main(), 60))


def test_a_registered_stdio_parent_is_asked_to_dispose_after_the_run_and_to_load_after_the_dispose() -> None:
    async def scenario(s: Sidecar) -> None:
        registered = (await s.ask({"type": "register_hooks", "name": "ts-backend"}))["answer"]
        assert registered["result"] == "ok"
        assert (await s.ask({"type": "directories", "directories": ["/w/a"]}))["status"] == 200
        start = {"type": "start_run", "run_id": "r1", "session": "s1", "directory": "/w/a"}
        assert (await s.ask(start))["answer"]["result"] == "ok"
        await s.events.until(is_("run.started", run_id="r1"))

        close = {
            "type": "close",
            **{k: v for k, v in RELOAD.items() if k != "directory"},
            "directories": ["/w/a"],
        }
        assert (await s.ask(close))["answer"]["result"] == "deferred"

        state = (await s.ask({"type": "query", "what": "hooks"}))["answer"]
        assert state["pending"] == [] and state["loaded"] == [{"directory": "/w/a", "generation": 1}]
        assert s.host.asked == [("load", "/w/a", 1)]
        report = {"type": "report", "run_id": "r1", "report": {"type": "end"}}
        assert (await s.ask(report))["answer"]["result"] == "ok"
        await s.events.until(is_("instance.load_requested", directory="/w/a", generation=2))
        started2 = await s.events.until(is_("instance.started", directory="/w/a", generation=2))

        assert started2["cause"] == "previous_closed"
        assert s.host.asked == [("load", "/w/a", 1), ("dispose", "/w/a", 1), ("load", "/w/a", 2)]
        assert s.host.most_alive == 1

    run_stdio(scenario)


def test_a_dispose_a_stdio_parent_does_not_acknowledge_in_time_is_reported_as_overran() -> None:
    async def scenario(s: Sidecar) -> None:
        await s.ask({"type": "register_hooks"})
        assert (await s.ask({"type": "directories", "directories": ["/w/a"]}))["status"] == 200
        s.host.hold.add(("dispose", "/w/a", 1))
        close = {
            "type": "close",
            "do": "dispose",
            "mode": "maintenance",
            "origin": "t",
            "directories": ["/w/a"],
        }

        await s.ask(close)

        closed = await s.events.until(is_("instance.closed", directory="/w/a", generation=1))
        assert closed["error"] == "the dispose hook overran its 1000 ms budget"
        late = await s.ask({"type": "ack_hook", "request_id": s.host.held[("dispose", "/w/a", 1)]})
        assert late["answer"]["on_time"] is False

    run_stdio(scenario)


def test_a_stdio_session_whose_stdin_closed_asks_its_parent_nothing_more() -> None:
    async def scenario(s: Sidecar) -> None:
        await s.ask({"type": "register_hooks"})
        assert (await s.ask({"type": "directories", "directories": ["/w/a"]}))["status"] == 200

        assert await s.close() == 0  # stdin closed: the shutdown that follows asks nothing of it

        assert s.host.asked == [("load", "/w/a", 1)]
        assert s.events.of("instance.closed")[0]["error"] is None

    run_stdio(scenario, "--grace-ms", "5000")


def test_a_stdio_registration_has_no_lease_unless_given_and_renews_by_its_id() -> None:
    async def scenario(s: Sidecar) -> None:
        plain = (await s.ask({"type": "register_hooks"}))["answer"]
        assert plain["lease_ms"] is None  # the session's end is the parent's end
        leased = (await s.ask({"type": "register_hooks", "lease_ms": 60_000}))["answer"]
        assert leased["lease_ms"] == 60_000 and leased["replaced"] == plain["registration"]
        renewed = await s.ask({"type": "renew_hooks", "registration": leased["registration"]})
        assert renewed["status"] == 200 and renewed["answer"]["lease_ms"] == 60_000
        stale = await s.ask({"type": "renew_hooks", "registration": plain["registration"]})
        assert (stale["type"], stale["status"], stale["code"]) == ("error", 404, "not_found")
        assert await s.close() == 0

    run_stdio(scenario)
