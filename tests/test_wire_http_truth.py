"""The HTTP host tells a client nothing false and lets no client wedge it: event ids name the server's
life, a field a route does not take is refused by name, a reader that stops reading pins no copy of the
replay and is cut off, a deep body is a JSON 422, ``serve`` checks its arguments and obeys its signals,
and a kept-alive connection is not stalled by Nagle's algorithm. Real servers on 127.0.0.1."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import time
import tracemalloc
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from wire_support import CLI, Served, of_type, reaped, reaped_async, served, serving, sse, submit
from wire_support import run_served as run

from run_supervisor.actors import Supervisor, SupervisorConfig
from run_supervisor.actors._cli import main
from run_supervisor.actors.hosts import HttpSettings, ServerThread, WireHost
from run_supervisor.actors.hosts._hub import parse_event_id
from run_supervisor.protocol import ProtocolDecodeError, decode_request


@contextlib.contextmanager
def served_with(settings: HttpSettings, *, buffer: int = 10_000) -> Iterator[Served]:
    """Like ``served``, with the HTTP settings given (a small ``sse_bound``, say)."""
    sup = Supervisor.start(SupervisorConfig(shutdown_at_exit=False))
    host = WireHost(sup, buffer=buffer)
    sup.load("/w/a")
    with serving(sup, host, settings) as srv:
        yield srv


async def start(client: httpx.AsyncClient, run_id: str, **extra: Any) -> None:
    answer = await client.post(
        "/runs", json={"run_id": run_id, "session": f"s-{run_id}", "directory": "/w/a", **extra}
    )
    assert answer.status_code == 201, answer.text


def publish_bulk(srv: Served, count: int, size: int) -> None:
    """``count`` host events of about ``size`` bytes each, straight into the hub's buffer."""
    for n in range(count):
        srv.host.hub.publish({"type": "external.answer", "run_id": "bulk", "n": n, "message": "x" * size})


def stuck_reader(port: int, token: str, path: str = "/events?after=0") -> socket.socket:
    """An SSE client that asks for ``path`` and never reads (a small receive window, so the server's
    writes soon wait on it). Returns once the server has begun to answer."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.settimeout(10)
    sock.connect(("127.0.0.1", port))
    request = f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {token}\r\n\r\n"
    sock.sendall(request.encode())
    assert sock.recv(1, socket.MSG_PEEK) == b"H"  # the answer has begun
    return sock


def connection_is_gone(sock: socket.socket) -> bool:
    """Read what is left; True when the server has closed or reset the connection (bounded)."""
    sock.settimeout(10)
    try:
        while sock.recv(1 << 20):
            pass
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False
    return True


async def listeners(client: httpx.AsyncClient, expected: int, timeout: float = 10.0) -> int:
    """Poll the statistics (bounded) until ``sse_listeners`` is ``expected``; returns the last count."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        count = int((await client.get("/statistics")).json()["sse_listeners"])
        if count == expected or loop.time() > deadline:
            return count
        await asyncio.sleep(0.05)


@contextlib.asynccontextmanager
async def serve_process(*args: str) -> AsyncIterator[tuple[asyncio.subprocess.Process, dict[str, Any]]]:
    """``run-supervisor serve`` as a process of its own; yields it and its ready line; killed after."""
    proc = await asyncio.create_subprocess_exec(
        *CLI, "serve", *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    async with reaped_async(proc):
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), 20)
        assert line, (await proc.stderr.read()).decode() if proc.stderr else "no ready line"  # type: ignore[union-attr]
        yield proc, json.loads(line)


def client_of(ready: dict[str, Any]) -> httpx.AsyncClient:
    headers = {"Authorization": f"Bearer {ready['token']}"}
    return httpx.AsyncClient(base_url=ready["url"], headers=headers, timeout=10)


async def fill_the_buffer(client: httpx.AsyncClient, run_id: str, megabytes: int) -> None:
    """Events of about 60 kB each (a retry report's message), ``megabytes`` of them in all."""
    for attempt in range(1, megabytes * 17 + 1):
        answer = await client.post(
            f"/runs/{run_id}/reports", json={"type": "retry", "attempt": attempt, "message": "x" * 60_000}
        )
        assert answer.status_code == 200, answer.text


# --- event ids name the life they belong to ------------------------------------------------------


def test_a_resume_with_an_id_from_before_a_restart_gets_a_reset_and_the_recovered_run(tmp_path: Path) -> None:
    journal = str(tmp_path / "runs.journal")

    async def scenario() -> None:
        async with serve_process("--journal", journal, "--directory", "/p/a") as (first, ready):
            async with client_of(ready) as client, sse(client, "/events?after=0") as events:
                answer = await client.post(
                    "/runs", json={"run_id": "r1", "session": "s1", "directory": "/p/a"}
                )
                assert answer.status_code == 201, answer.text
                card = {"type": "part", "tool": "bash", "state": "pending"}
                assert (await client.post("/runs/r1/reports", json=card)).status_code == 200
                await events.until(of_type("run.part.updated", run_id="r1", state="pending"))
                last = events.seen[-1].id
            first.kill()  # a crash: the journal keeps r1 unfinished
            await first.wait()
        assert last is not None
        async with (
            serve_process("--journal", journal, "--directory", "/p/a") as (_, ready),
            client_of(ready) as client,
        ):
            # The new life passes the old id's number: a resume by seq alone would find it here.
            more = [f"/p/more-{n}" for n in range(int(last.rsplit(":", 1)[-1]) + 2)]
            assert (await client.post("/directories", json={"directories": more})).status_code == 200
            async with sse(client, "/events", headers={"Last-Event-ID": last}) as resumed:
                reset = await resumed.next()
                assert reset is not None and reset.type == "stream.reset", reset
                assert (reset.data["why"], reset.data["after"], reset.data["epoch"]) == (
                    "other_epoch",
                    last,
                    "2",
                )
                recovered = await resumed.until(of_type("run.recovered", run_id="r1"))
                assert recovered.id is not None and recovered.id.startswith("2:")
                settled = [e for e in resumed.seen if e.type == "run.part.updated"]
                assert [e.data["state"] for e in settled] == ["interrupted"]
                await resumed.until(of_type("instance.started", directory=more[-1]))
        assert last.startswith("1:"), last  # the journal's first boot named the first life

    asyncio.run(asyncio.wait_for(scenario(), 55))


def test_without_a_journal_each_life_has_its_own_epoch_and_an_id_of_another_life_resets() -> None:
    lives: list[str] = []

    async def first_life(srv: Served) -> None:
        async with srv.client() as client, sse(client, "/events?after=0") as events:
            await start(client, "r1")
            await events.until(of_type("run.started", run_id="r1"))
            assert events.seen[-1].id is not None
            lives.append(events.seen[-1].id)

    async def second_life(srv: Served) -> None:
        async with srv.client() as client:
            for n in range(5):  # this life passes the other's number
                await start(client, f"q{n}")
            for old in (
                lives[0],
                lives[0].rsplit(":", 1)[-1],
            ):  # and a plain number, from before ids named a life
                async with sse(client, "/events", headers={"Last-Event-ID": old}) as resumed:
                    reset = await resumed.next()
                    assert reset is not None and reset.type == "stream.reset", (old, reset)
                    assert reset.data["why"] == "other_epoch" and reset.data["epoch"] == srv.host.hub.epoch
                    first = await resumed.next()
                    assert first is not None and first.id == reset.data["oldest"]
            lives.append(srv.host.hub.epoch)

    run(first_life)
    run(second_life)
    assert lives[0].split(":")[0] != lives[1]


def test_an_event_id_parses_to_its_life_and_place_and_anything_else_is_no_id() -> None:
    assert parse_event_id("3:17") == ("3", (17, 0))  # an EventId: (epoch, (seq, suffix))
    assert parse_event_id("t9f2c4a1e:17.2") == ("t9f2c4a1e", (17, 2))
    assert parse_event_id("17") == (None, (17, 0))  # a plain number names no life: another one
    for nonsense in ("", "x", "3:", ":4", "3:-1", "3: 4", "3:17.", "3:\u00b2", "a:b:3", "9" * 5000):
        assert parse_event_id(nonsense) is None, nonsense


# --- unknown fields are refused by name ------------------------------------------------------------


def test_a_start_with_a_field_it_does_not_take_is_refused_naming_it_and_starts_nothing() -> None:
    async def scenario(srv: Served) -> None:
        async with srv.client() as client:
            for wrong, name in (({"deadline": 200}, "deadline"), ({"leaseMs": 300}, "leaseMs")):
                answer = await client.post(
                    "/runs", json={"run_id": "r1", "session": "s", "directory": "/w/a", **wrong}
                )
                assert answer.status_code == 422, answer.text
                body = answer.json()
                assert body["code"] == "invalid_request" and f"`{name}`" in body["error"], body
                assert (body["run_id"], body["lease_ms"]) == (None, None)
            assert (await client.get("/runs/r1")).status_code == 404
            generic = await submit(
                client, "start_run", run_id="r2", session="s", directory="/w/a", deadline=200
            )
            assert generic.status_code == 422 and "`deadline`" in generic.json()["error"]
            assert (await client.get("/statistics")).json()["external_runs"] == 0

    run(scenario)


def test_a_start_with_a_lease_of_0_is_refused_not_run_with_the_default_lease() -> None:
    async def scenario(srv: Served) -> None:
        async with srv.client() as client:
            answer = await client.post(
                "/runs", json={"run_id": "r1", "session": "s", "directory": "/w/a", "lease_ms": 0}
            )
            assert answer.status_code == 422, answer.text  # it said lease_ms 0 and ran with 30 s
            assert "lease_ms must be between" in answer.json()["error"]
            assert (answer.json()["run_id"], answer.json()["lease_ms"]) == (None, None)
            assert (await client.get("/runs/r1")).status_code == 404

    run(scenario)


def test_a_cancel_with_a_misspelt_reason_is_refused_and_the_run_goes_on() -> None:
    async def scenario(srv: Served) -> None:
        async with srv.client() as client:
            await start(client, "r1")
            answer = await client.post("/runs/r1/cancel", json={"reasn": "timeout"})
            assert answer.status_code == 422 and "`reasn`" in answer.json()["error"], answer.text
            assert (await client.get("/runs/r1")).json()["state"] == "active"
            cancelled = await client.post("/runs/r1/cancel", json={"reason": "timeout"})
            assert cancelled.status_code == 200, cancelled.text

    run(scenario)


def test_every_request_route_refuses_a_field_it_does_not_take_by_name() -> None:
    routes: list[tuple[str, str, dict[str, Any]]] = [
        ("POST", "/requests", {"type": "cancel", "run_id": "r1"}),
        ("POST", "/runs", {"session": "s", "directory": "/w/a"}),
        ("POST", "/runs/r1/cancel", {}),
        ("POST", "/runs/r1/permission", {"approve": True}),
        ("POST", "/runs/r1/form", {"answer": "a"}),
        ("POST", "/runs/r1/form/dismiss", {}),
        ("POST", "/asks/a1/permission", {"approve": True}),
        ("POST", "/asks/a1/form", {"answer": "a"}),
        ("POST", "/asks/a1/dismiss", {}),
        ("POST", "/close", {"do": "dispose", "mode": "maintenance", "origin": "t", "directory": "/w/a"}),
        ("POST", "/shutdown", {"grace_ms": 100}),
        ("POST", "/directories", {"directories": ["/w/c"]}),
        ("PUT", "/sessions/s1/queue_policy", {"queue_policy": "coalesce"}),
        ("POST", "/actions/lc-1/confirm", {}),
    ]

    async def scenario(srv: Served) -> None:
        async with srv.client() as client:
            await start(client, "r1")
            for method, path, fields in routes:
                answer = await client.request(method, path, json={**fields, "misspelt_field": 1})
                assert answer.status_code == 422, (path, answer.text)
                assert answer.json()["code"] == "invalid_request", (path, answer.text)
                assert "`misspelt_field`" in answer.json()["error"], (path, answer.text)
            # The route's own fields in the body would be overridden by the path: refused too.
            by_path = await client.post("/runs/r1/cancel", json={"run_id": "r2"})
            assert by_path.status_code == 422 and "`run_id`" in by_path.json()["error"], by_path.text
            # A query's misspelt filter would answer every ask as if it filtered them.
            unfiltered = await client.get("/asks", params={"runId": "r1"})
            assert unfiltered.status_code == 422 and "`runId`" in unfiltered.json()["error"], unfiltered.text
            assert (await client.get("/asks", params={"run_id": "r1"})).json() == []
            assert (await client.get("/health")).json() == {"status": "ok"}  # the shutdown was refused
            assert (await client.get("/runs/r1")).json()["state"] == "active"

    run(scenario)


def test_the_protocol_decoder_refuses_a_field_no_request_has_naming_it() -> None:
    with pytest.raises(ProtocolDecodeError, match="unknown field `reasn`"):
        decode_request(b'{"type": "cancel", "run_id": "r1", "reasn": "timeout"}')
    assert (
        decode_request(b'{"type": "cancel", "run_id": "r1", "reason": "timeout"}').reason.value == "timeout"
    )  # type: ignore[union-attr]


# --- a body nested too deeply ------------------------------------------------------------------------


def test_a_body_nested_three_thousand_deep_is_a_422_json_answer_on_every_route() -> None:
    deep = b'{"a":' * 3000 + b"1" + b"}" * 3000

    async def scenario(srv: Served) -> None:
        async with srv.client() as client:
            await start(client, "r1")
            for path in (
                "/requests",
                "/runs",
                "/runs/r1/reports",
                "/runs/r1/cancel",
                "/close",
                "/directories",
            ):
                answer = await client.post(path, content=deep, headers={"Content-Type": "application/json"})
                assert answer.status_code == 422, (path, answer.status_code, answer.text[:200])
                assert answer.headers["content-type"] == "application/json", path
                assert (
                    answer.json()["code"] == "invalid_request"
                    and "nested too deeply" in answer.json()["error"]
                )
            assert (await client.get("/runs/r1")).json()["state"] == "active"

    run(scenario)


# --- a reader that stops reading -------------------------------------------------------------------------


def test_readers_that_ask_for_the_replay_and_never_read_pin_no_copy_of_it() -> None:
    readers = 10
    with served(("/w/a",)) as srv:
        publish_bulk(srv, 4000, 1000)
        replay_bytes = sum(len(item.data) for item in srv.host.hub.items())
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            socks = [stuck_reader(srv.server.port, srv.server.token) for _ in range(readers)]
            held = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
        try:
            # Each reader holds a slice and what its connection buffers (about 0.3 MB here), not a copy
            # of the 4 MB replay (two copies each, before: the joined replay and the transport's).
            assert held < readers * replay_bytes / 4, (held, replay_bytes)
        finally:
            for sock in socks:
                sock.close()


def test_a_reader_that_stops_reading_is_cut_off_once_it_falls_its_bound_behind() -> None:
    with served_with(HttpSettings(token="t" * 20, sse_bound=50)) as srv:
        publish_bulk(srv, 4000, 1000)  # more than the kernel's buffers take: its writes wait on it

        async def scenario() -> None:
            async with srv.client() as client, sse(client, "/events?after=0") as healthy:
                stuck = await asyncio.to_thread(stuck_reader, srv.server.port, srv.server.token)
                try:
                    assert await listeners(client, 2) == 2
                    await healthy.until(lambda e: e.data.get("n") == 3999, timeout=20)  # it read the replay
                    for group in range(20):  # more than its bound, while it reads nothing
                        for n in range(group * 10, group * 10 + 10):
                            srv.host.hub.publish({"type": "external.answer", "run_id": "late", "n": n})
                        # The reader that reads keeps up (it is never 50 behind).
                        await healthy.until(
                            lambda e, n=n: e.data.get("run_id") == "late" and e.data["n"] == n
                        )
                    # Cut off without reading a byte (the reader that reads is still there: the probe).
                    assert await listeners(client, 1, timeout=5) == 1
                    srv.host.hub.publish({"type": "external.answer", "run_id": "probe"})
                    await healthy.until(lambda e: e.data.get("run_id") == "probe")
                    assert await asyncio.to_thread(connection_is_gone, stuck)
                    # The reader that reads is not cut off and had every event, in order.
                    seqs = [e.data["n"] for e in healthy.seen if e.data.get("run_id") == "bulk"]
                    late = [e.data["n"] for e in healthy.seen if e.data.get("run_id") == "late"]
                    assert seqs == list(range(4000)) and late == list(range(200))
                finally:
                    stuck.close()

        asyncio.run(asyncio.wait_for(scenario(), 45))


# --- serve's arguments --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argument", "named"),
    [
        (("--port", "70000"), "--port"),
        (("--grace-ms", "999999999"), "--grace-ms"),
        (("--lease-ms", "10"), "--lease-ms"),
        (("--lease-ms", "99999999"), "--lease-ms"),
        (("--directory", ""), "--directory"),
    ],
)
def test_serve_with_an_argument_out_of_its_range_exits_2_with_one_line_naming_it(
    argument: tuple[str, str], named: str
) -> None:
    done = subprocess.run([*CLI, "serve", *argument], capture_output=True, text=True, timeout=20, check=False)
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and named in lines[0] and argument[1] in lines[0], done.stderr


@pytest.mark.parametrize("command", ["serve", "stdio"])
def test_a_journal_that_is_a_fifo_exits_2_at_once_naming_it(tmp_path: Path, command: str) -> None:
    fifo = tmp_path / "journal.fifo"
    os.mkfifo(fifo)
    done = subprocess.run(
        [*CLI, command, "--journal", str(fifo)],
        capture_output=True,
        text=True,
        timeout=20,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        f"run-supervisor {command}: journal {str(fifo)!r} is a FIFO, not a journal file"
    ]


def test_a_journal_that_cannot_be_opened_exits_2_with_one_line_naming_the_path_and_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for path, why in (
        (tmp_path, "a directory"),
        (tmp_path / "missing" / "j.db", "No such file or directory"),
    ):
        assert main(["serve", "--journal", str(path)]) == 2
        captured = capsys.readouterr()
        lines = captured.err.splitlines()
        assert len(lines) == 1 and str(path) in lines[0] and why in lines[0], captured.err
        assert captured.out == ""


# --- signals -----------------------------------------------------------------------------------------------


def test_sigterm_with_readers_that_never_read_exits_0_after_the_grace_without_a_traceback() -> None:
    async def scenario() -> None:
        async with serve_process("--grace-ms", "300", "--directory", "/w/a") as (proc, ready):
            async with client_of(ready) as client:
                await start(client, "r1")
                await fill_the_buffer(client, "r1", 6)
                stuck = [
                    await asyncio.to_thread(stuck_reader, ready["port"], ready["token"]) for _ in range(3)
                ]
                try:
                    began = time.monotonic()
                    proc.send_signal(signal.SIGTERM)
                    assert await asyncio.wait_for(proc.wait(), 20) == 0
                    took = time.monotonic() - began
                finally:
                    for sock in stuck:
                        sock.close()
            assert proc.stderr is not None
            errors = (await proc.stderr.read()).decode()
            assert "Traceback" not in errors and "CancelledError" not in errors, errors[-3000:]
            assert errors == ""
            assert took < 15, took  # the grace and the streams' flush bound, not a wait on the readers

    asyncio.run(asyncio.wait_for(scenario(), 55))


def test_a_second_signal_stops_serve_at_once_without_waiting_for_the_grace() -> None:
    async def scenario() -> None:
        async with serve_process("--grace-ms", "60000", "--directory", "/w/a") as (proc, ready):
            async with client_of(ready) as client, sse(client, "/events?after=0") as events:
                await start(client, "r1")  # its client never reports end: the shutdown waits a minute
                await fill_the_buffer(client, "r1", 6)
                stuck = await asyncio.to_thread(stuck_reader, ready["port"], ready["token"])
                try:
                    proc.send_signal(signal.SIGTERM)
                    await events.until(of_type("external.interrupt", run_id="r1"), timeout=20)
                    proc.send_signal(signal.SIGTERM)
                    assert await asyncio.wait_for(proc.wait(), 15) == 1
                finally:
                    stuck.close()
            assert proc.stderr is not None
            errors = (await proc.stderr.read()).decode()
            assert "Traceback" not in errors, errors[-3000:]
            assert errors.splitlines() == [
                "run-supervisor serve: stopped by a second signal before the shutdown completed"
            ]

    asyncio.run(asyncio.wait_for(scenario(), 55))


# --- no Nagle stall on a kept-alive connection ----------------------------------------------------------


def _server_side_sockets(server: ServerThread) -> dict[int, socket.socket]:
    """The server's accepted sockets, by the client's port (uvicorn's own connection set)."""
    found: dict[int, socket.socket] = {}
    for connection in list(server._server.server_state.connections):
        sock = connection.transport.get_extra_info("socket")
        if sock is not None:
            found[sock.getpeername()[1]] = sock
    return found


def test_an_accepted_connection_has_tcp_nodelay_set() -> None:
    with (
        served(("/w/a",)) as srv,
        socket.create_connection(("127.0.0.1", srv.server.port), timeout=10) as client,
    ):
        request = f"GET /health HTTP/1.1\r\nHost: 127.0.0.1:{srv.server.port}\r\n\r\n".encode()
        client.sendall(request)
        assert client.recv(65536).startswith(b"HTTP/1.1 200")
        accepted = _server_side_sockets(srv.server)[client.getsockname()[1]]
        assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0


NODE_KEEP_ALIVE = r"""
const http = require("http");
const port = Number(process.argv[process.argv.length - 1]);
const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
function get() {
  return new Promise((resolve, reject) => {
    const req = http.get({ host: "127.0.0.1", port, path: "/health", agent }, (res) => {
      res.resume();
      const seen = { status: res.statusCode, port: req.socket.localPort, reused: req.reusedSocket };
      res.on("end", () => resolve(seen));
    });
    req.on("error", reject);
  });
}
(async () => {
  const first = await get();
  const second = await get();
  console.log(JSON.stringify({ first, second }));
  process.stdin.resume();
  process.stdin.on("end", () => { agent.destroy(); process.exit(0); });
})();
"""


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_a_node_client_on_a_kept_alive_connection_is_served_with_tcp_nodelay() -> None:
    with (
        served(("/w/a",)) as srv,
        reaped(
            subprocess.Popen(
                ["node", "-e", NODE_KEEP_ALIVE, str(srv.server.port)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
        ) as node,
    ):
        assert node.stdout is not None and node.stdin is not None
        seen = json.loads(node.stdout.readline())
        assert seen["first"]["status"] == seen["second"]["status"] == 200
        assert seen["second"]["reused"] is True and seen["first"]["port"] == seen["second"]["port"]
        accepted = _server_side_sockets(srv.server)[seen["second"]["port"]]
        assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
        node.stdin.close()
        assert node.wait(timeout=20) == 0
