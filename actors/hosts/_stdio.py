"""``run-supervisor stdio``: the supervisor as a sidecar speaking JSON lines on stdin and stdout.

In: one JSON object per line -- a protocol request (``{"type": "cancel", "run_id": "r1"}``) or a host
operation (``report``, ``query``, ``directories``), with an optional correlation ``id`` (any JSON
value) echoed on its answer. Out: one JSON object per line --

- ``{"type": "answer", "id": ..., "status": 200, "answer": {...}}`` for every line that was
  understood (``status`` from the same table as HTTP; a rejection is an answer with its code);
- ``{"type": "error", "id": ..., "status": 422, "code": "invalid_request", "error": "line 3: ..."}``
  for a line that was not (the host keeps reading);
- ``{"type": "event", "id": "17", "event": {...}}`` for every event (``id`` as on SSE).

Closing stdin is a shutdown (``shutdown``, grace ``--grace-ms``): the last events are written, then
the process exits 0. See docs/wire.md.
"""

from __future__ import annotations

import asyncio
import os
import queue
import sys
import threading
from typing import IO, Any

import msgspec

from run_supervisor.actors._api import Supervisor, SupervisorConfig
from run_supervisor.actors._errors import JournalError
from run_supervisor.actors._journal import JournalSync
from run_supervisor.actors.hosts._external import decode_report
from run_supervisor.actors.hosts._hub import WireItem
from run_supervisor.actors.hosts._wire import HostError, WireHost, http_status
from run_supervisor.protocol import (
    ProtocolDecodeError,
    RejectCode,
    ReloadPolicy,
    Shutdown,
    ShutdownReason,
    decode_request,
)

__all__ = ["serve_stdio"]

_INVALID = RejectCode.INVALID_REQUEST.value
_QUERIES = ("run", "session", "actions", "asks", "statistics")


def _needs(fields: dict[str, Any], key: str) -> str:
    value = fields.get(key)
    if not isinstance(value, str) or not value:
        raise HostError(_INVALID, f"{key} must be a non-empty string")
    return value


async def _dispatch(host: WireHost, fields: dict[str, Any]) -> tuple[int, Any]:
    """One understood line -> (status, answer)."""
    kind = fields.get("type")
    if kind == "report":
        run_id = _needs(fields, "run_id")
        try:
            report = decode_report(fields.get("report") or {})
        except ValueError as exc:
            raise HostError(_INVALID, str(exc)) from None
        outcome = await host.report(run_id, report)
        return http_status(outcome.code.value if outcome.code else None), msgspec.to_builtins(outcome)
    if kind == "query":
        what = fields.get("what")
        if what == "run":
            run_id = _needs(fields, "run_id")
            return 200, msgspec.to_builtins(host.read(lambda sup: sup.run(run_id)))
        if what == "session":
            session = _needs(fields, "session")
            return 200, msgspec.to_builtins(host.read(lambda sup: sup.session(session)))
        if what == "actions":
            return 200, msgspec.to_builtins(host.read(lambda sup: sup.pending_actions()))
        if what == "asks":
            of_run = fields.get("run_id")
            if of_run is not None and not isinstance(of_run, str):
                raise HostError(_INVALID, "run_id must be a string")
            return 200, msgspec.to_builtins(host.read(lambda sup: sup.pending_asks(run_id=of_run)))
        if what == "statistics":
            stats = msgspec.to_builtins(host.read(lambda sup: sup.statistics()))
            return 200, {**stats, "stall_after_ms": host.supervisor.config.stall_after_ms}
        raise HostError(_INVALID, f"what must be one of {', '.join(_QUERIES)}, got {what!r}")
    if kind == "directories":
        names = fields.get("directories")
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise HostError(_INVALID, "directories must be a list of strings")
        load = fields.get("load", True)
        if not isinstance(load, bool):
            raise HostError(_INVALID, f"load must be true or false, got {load!r}")
        await host.directories(tuple(names), load=load)
        return 200, {"result": "ok"}
    lease = fields.pop("lease_ms", None)
    if lease is not None and (not isinstance(lease, int) or isinstance(lease, bool)):
        raise HostError(_INVALID, f"lease_ms must be an integer, got {lease!r}")
    try:
        request = decode_request(msgspec.json.encode(fields))
    except ProtocolDecodeError as exc:
        raise HostError(_INVALID, str(exc)) from None
    answer = await host.submit(request, lease_ms=lease)
    return http_status(answer.code.value if answer.code else None), msgspec.to_builtins(answer)


class _Writer:
    """Every output line goes through one thread, so the loop never blocks on a full pipe."""

    def __init__(self, out: IO[bytes]) -> None:
        self._out = out
        self._lines: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="run-supervisor-stdio-out", daemon=True)
        self._thread.start()

    def put(self, message: dict[str, Any] | bytes) -> None:
        line = message if isinstance(message, bytes) else msgspec.json.encode(message)
        self._lines.put(line + b"\n")

    def _run(self) -> None:
        while (line := self._lines.get()) is not None:
            try:
                self._out.write(line)
                self._out.flush()
            except (BrokenPipeError, ValueError, OSError):
                return  # the reader is gone; nothing more to say

    def close(self, timeout: float = 5.0) -> None:
        self._lines.put(None)
        self._thread.join(timeout)


_OVERLONG = b"\x00overlong"


def _reader(
    source: IO[bytes], loop: asyncio.AbstractEventLoop, lines: asyncio.Queue[bytes | None], max_line: int
) -> None:
    """Split the input into lines on a thread. It reads the file descriptor directly (``os.read``),
    so a reader still blocked when the process exits holds no lock of ``sys.stdin``. A line longer
    than ``max_line`` is dropped as it arrives and reported as one overlong line."""

    def put(item: bytes | None) -> None:
        try:
            loop.call_soon_threadsafe(lines.put_nowait, item)
        except RuntimeError:
            pass  # the loop has ended already

    try:
        fd = source.fileno()
    except (OSError, ValueError, AttributeError):
        fd = -1
    partial = b""
    overlong = False
    try:
        while True:
            chunk = os.read(fd, 65536) if fd >= 0 else source.readline()
            if not chunk:
                break
            partial += chunk
            *complete, partial = partial.split(b"\n")
            for line in complete:
                if overlong:
                    overlong = False
                    put(_OVERLONG)
                else:
                    put(line)
            if len(partial) > max_line:
                overlong, partial = True, b""
    except (OSError, ValueError):
        pass
    finally:
        if partial.strip() and not overlong:
            put(partial)
        put(None)


async def _serve(
    host: WireHost, source: IO[bytes], writer: _Writer, *, events: bool, grace_ms: int, max_line: int
) -> None:
    loop = asyncio.get_running_loop()
    lines: asyncio.Queue[bytes | None] = asyncio.Queue()
    # Events from the first one the hub holds (the directories loaded at start included).
    replay, _, listener = host.hub.listen("0", loop=loop, bound=1_000_000)
    if not events:
        host.hub.unlisten(listener)
    # A shutdown requested by a line also ends the session: nothing more can be done.
    host.hub.on_close(lambda: loop.call_soon_threadsafe(lines.put_nowait, None))

    def write_event(item: WireItem) -> None:
        writer.put(b'{"type":"event","id":"' + item.id.encode() + b'","event":' + item.data + b"}")

    async def pump_events() -> None:
        if not events:
            return
        for item in replay:
            write_event(item)
        while batch := await listener.next_batch():
            for item in batch:
                write_event(item)

    events_task = asyncio.create_task(pump_events())
    threading.Thread(
        target=_reader, args=(source, loop, lines, max_line), name="run-supervisor-stdio-in", daemon=True
    ).start()
    pending: set[asyncio.Task[None]] = set()
    number = 0

    async def handle(number: int, raw: bytes) -> None:
        corr: Any = None
        try:
            if raw == _OVERLONG or len(raw) > max_line:
                raise HostError("too_large", f"line {number}: lines are limited to {max_line} bytes")
            try:
                fields = msgspec.json.decode(raw)
            except msgspec.DecodeError as exc:
                raise HostError(_INVALID, f"line {number}: not valid JSON: {exc}") from None
            if not isinstance(fields, dict):
                raise HostError(_INVALID, f"line {number}: a line must be a JSON object")
            corr = fields.pop("id", None)
            status, answer = await _dispatch(host, fields)
            writer.put({"type": "answer", "id": corr, "status": status, "answer": answer})
        except HostError as exc:
            error = exc.error if exc.error.startswith("line ") else f"line {number}: {exc.error}"
            writer.put(
                {
                    "type": "error",
                    "id": corr,
                    "status": http_status(exc.code),
                    "code": exc.code,
                    "error": error,
                }
            )

    while (raw := await lines.get()) is not None:
        number += 1
        if not raw.strip():
            continue
        task = asyncio.create_task(handle(number, raw.strip()))
        pending.add(task)
        task.add_done_callback(pending.discard)
    # stdin closed: a shutdown, then the last events.
    if pending:
        await asyncio.gather(*pending)
    if not host.hub.closed:
        await host.submit(Shutdown(reason=ShutdownReason.SHUTDOWN, origin="stdin.closed", grace_ms=grace_ms))
    await events_task


def serve_stdio(
    source: IO[bytes] | None = None,
    out: IO[bytes] | None = None,
    *,
    directories: tuple[str, ...] = (),
    events: bool = True,
    grace_ms: int = 1000,
    max_line: int = 1 << 20,
    lease_ms: int | None = None,
    journal: str | os.PathLike[str] | None = None,
    journal_sync: JournalSync = "normal",
    stall_after_ms: int | None = None,
    reload_policy: ReloadPolicy = ReloadPolicy.LAZY,
) -> int:
    """Run a supervisor on JSON lines until stdin closes; returns the exit status (0, or 2 when the
    journal cannot be used). With ``journal``, the recovery's events are the first events written.
    ``reload_policy``: when a reload loads the next generation (``--reload-policy``; lazy by default)."""
    source = source if source is not None else sys.stdin.buffer
    out = out if out is not None else sys.stdout.buffer
    try:
        supervisor = Supervisor.start(
            SupervisorConfig(
                shutdown_at_exit=False,
                default_grace_ms=grace_ms,
                stall_after_ms=stall_after_ms,
                reload_policy=reload_policy,
            ),
            journal=journal,
            journal_sync=journal_sync,
        )
    except JournalError as exc:
        sys.stderr.write(f"run-supervisor stdio: {exc}\n")
        return 2
    host = WireHost(supervisor, **({"default_lease_ms": lease_ms} if lease_ms else {}))
    writer = _Writer(out)
    try:
        if directories:
            supervisor.load(*directories)
        asyncio.run(_serve(host, source, writer, events=events, grace_ms=grace_ms, max_line=max_line))
    finally:
        if not supervisor.closed:
            supervisor.shutdown(grace_ms=grace_ms)
        host.hub.join(5.0)
        writer.close()
    return 0
