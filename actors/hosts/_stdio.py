"""``run-supervisor stdio``: the supervisor as a sidecar speaking JSON lines on stdin and stdout.

In: one JSON object per line -- a protocol request (``{"type": "cancel", "run_id": "r1"}``) or a host
operation (``report``, ``query``, ``directories``; seed 002's ``global.dispose``, ``instance.dispose``,
``instance.reload``; the caches' ``register_hooks``, ``renew_hooks``, ``unregister_hooks``,
``ack_hook``), with an optional correlation ``id`` (any JSON value) echoed on its answer. Out: one JSON
object per line --

- ``{"type": "answer", "id": ..., "status": 200, "answer": {...}}`` for every line that was
  understood (``status`` from the same table as HTTP; a rejection is an answer with its code);
- ``{"type": "error", "id": ..., "status": 422, "code": "invalid_request", "error": "line 3: ..."}``
  for a line that was not (not JSON, not an object, nested too deeply, a field the operation does not
  take, over the length limit...; the host keeps reading), and ``500 internal_error`` for a line the
  sidecar itself failed on;
- ``{"type": "event", "id": "3:17", "event": {...}}`` for every event (``id`` as on SSE).

Every non-blank line gets exactly one answer or error line. Closing stdin is a shutdown (``shutdown``,
grace ``--grace-ms``): the last events are written, then the process exits 0. So is closing stdout
(origin ``stdout.closed``), noticed at the first line the sidecar cannot write, and so is a parent that
keeps stdout open but stops reading it (origin ``stdout.stalled``), noticed once more than
``MAX_PENDING_OUTPUT`` bytes (16 MiB) wait for it behind the line being written: nothing more is
queued for a parent that stopped listening, one line on stderr says why, and the process exits 0
within its grace. See docs/wire.md.
"""

from __future__ import annotations

import asyncio
import os
import queue
import select
import sys
import threading
from collections.abc import Callable
from typing import IO, Any

import msgspec

from run_supervisor.actors._api import Supervisor, SupervisorConfig
from run_supervisor.actors._errors import JournalError
from run_supervisor.actors._journal import JournalSync
from run_supervisor.actors.hosts._external import decode_report
from run_supervisor.actors.hosts._hub import WireItem
from run_supervisor.actors.hosts._remote_caches import STDIO_OPS, RemoteCaches, state_of, stdio_op
from run_supervisor.actors.hosts._wire import HostError, WireHost, approved_spelling, http_status
from run_supervisor.protocol import (
    CloseAction,
    CloseOutcome,
    ProtocolDecodeError,
    RejectCode,
    ReloadPolicy,
    Shutdown,
    ShutdownReason,
    decode_request,
)

__all__ = ["MAX_PENDING_OUTPUT", "serve_stdio"]

MAX_PENDING_OUTPUT = 16 << 20
"""Bytes of output that may wait for the parent to read them, behind the line being written (16 MiB),
before the session ends as a shutdown with origin ``stdout.stalled``: a parent that keeps stdout open
but stops reading it never grows the sidecar without bound."""

_INVALID = RejectCode.INVALID_REQUEST.value

COMPAT_OPS = {
    "global.dispose": CloseAction.DISPOSE_ALL,
    "instance.dispose": CloseAction.DISPOSE,
    "instance.reload": CloseAction.RELOAD,
}
"""Seed 002's backend operations over stdio: ``{"type": "global.dispose", "mode"?, "clientActionID"?,
"clientActionKind"?}`` and ``instance.dispose`` / ``instance.reload`` with a ``directory``; answered
``{"status", "lifecycleActionID", "affectedDirectoryKeys"}`` as on HTTP."""
_MISSING = object()


def _needs(fields: dict[str, Any], key: str) -> str:
    value = fields.get(key)
    if not isinstance(value, str) or not value:
        raise HostError(_INVALID, f"{key} must be a non-empty string")
    return value


def _only(fields: dict[str, Any], what: str, allowed: tuple[str, ...]) -> None:
    """Refuse a field this operation does not take, by name (a typo must not be ignored)."""
    for key in fields:
        if key != "type" and key not in allowed:
            raise HostError(_INVALID, f"{what}: unknown field `{key}`")


def _json_kind(value: Any) -> str:
    if value is _MISSING:
        return "nothing (the field is required)"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    return "a string" if isinstance(value, str) else "an array"


_QUERY_FIELDS: dict[str, tuple[str, ...]] = {  # what -> the fields that query takes
    "run": ("what", "run_id"),
    "session": ("what", "session"),
    "actions": ("what",),
    "asks": ("what", "run_id"),
    "statistics": ("what",),
    "hooks": ("what",),
}


async def _dispatch(host: WireHost, fields: dict[str, Any]) -> tuple[int, Any]:
    """One understood line -> (status, answer)."""
    kind = fields.get("type")
    if kind == "report":
        _only(fields, "report", ("run_id", "report"))
        run_id = _needs(fields, "run_id")
        data = fields.get("report", _MISSING)
        if not isinstance(data, dict):
            raise HostError(_INVALID, f"report must be a JSON object, got {_json_kind(data)}")
        try:
            report = decode_report(data)
        except ValueError as exc:
            raise HostError(_INVALID, str(exc)) from None
        outcome = await host.report(run_id, report)
        return http_status(outcome.code.value if outcome.code else None), msgspec.to_builtins(outcome)
    if kind == "query":
        what = fields.get("what")
        if not isinstance(what, str) or what not in _QUERY_FIELDS:
            raise HostError(_INVALID, f"what must be one of {', '.join(_QUERY_FIELDS)}, got {what!r}")
        _only(fields, f"query {what}", _QUERY_FIELDS[what])
        if what == "run":  # an unknown one is a 404, as GET /runs/{run_id} answers
            run_id = _needs(fields, "run_id")
            snapshot = host.read(lambda sup: sup.run(run_id))
            if snapshot is None:
                raise HostError(
                    RejectCode.UNKNOWN_RUN.value, f"no run {run_id!r} is known (or it was forgotten)"
                )
            return 200, msgspec.to_builtins(snapshot)
        if what == "session":
            session = _needs(fields, "session")
            known = host.read(lambda sup: sup.session(session))
            if known is None:
                raise HostError(RejectCode.NOT_FOUND.value, f"no session {session!r} is known")
            return 200, msgspec.to_builtins(known)
        if what == "actions":
            return 200, msgspec.to_builtins(host.read(lambda sup: sup.pending_actions()))
        if what == "asks":
            of_run = fields.get("run_id")
            if of_run is not None and not isinstance(of_run, str):
                raise HostError(_INVALID, "run_id must be a string")
            return 200, msgspec.to_builtins(host.read(lambda sup: sup.pending_asks(run_id=of_run)))
        if what == "hooks":  # caches over the wire: _remote_caches
            return 200, msgspec.to_builtins(state_of(host.caches))
        stats = msgspec.to_builtins(host.read(lambda sup: sup.statistics()))
        return 200, {**stats, "stall_after_ms": host.supervisor.config.stall_after_ms}
    if kind in COMPAT_OPS:  # seed 002's operations, in upstream's shapes (as HTTP's compatible routes)
        do = COMPAT_OPS[kind]
        _only(
            fields,
            kind,
            (
                "mode",
                "clientActionID",
                "clientActionKind",
                *(("directory",) if do is not CloseAction.DISPOSE_ALL else ()),
            ),
        )
        for key in ("mode", "clientActionID", "clientActionKind", "directory"):
            if fields.get(key) is not None and not isinstance(fields[key], str):
                raise HostError(_INVALID, f"{kind}: {key} must be a string")
        if do is not CloseAction.DISPOSE_ALL:
            _needs(fields, "directory")
        compat = await host.compat_close(
            do,
            mode=fields.get("mode"),
            origin=fields.get("clientActionKind"),
            tag=fields.get("clientActionID"),
            directory=fields.get("directory"),
        )
        status = http_status(compat.code.value if isinstance(compat, CloseOutcome) and compat.code else None)
        return status, msgspec.to_builtins(compat)
    if kind in STDIO_OPS:  # caches over the wire: _remote_caches
        return 200, msgspec.to_builtins(stdio_op(host.caches, kind, fields))
    if kind == "directories":
        _only(fields, "directories", ("directories", "load"))
        names = fields.get("directories")
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise HostError(_INVALID, "directories must be a list of strings")
        load = fields.get("load", True)
        if not isinstance(load, bool):
            raise HostError(_INVALID, f"load must be true or false, got {load!r}")
        await host.directories(tuple(names), load=load)
        return 200, {"result": "ok"}
    lease = fields.pop("lease_ms", None) if kind == "start_run" else None  # elsewhere: an unknown field
    if lease is not None and (not isinstance(lease, int) or isinstance(lease, bool)):
        raise HostError(_INVALID, f"lease_ms must be an integer, got {lease!r}")
    if kind == "reply_permission":
        fields = approved_spelling(fields)
    try:
        request = decode_request(msgspec.json.encode(fields))
    except ProtocolDecodeError as exc:
        raise HostError(_INVALID, str(exc)) from None
    # An explicit lease is checked as given (0 is refused, not read as "the default").
    answer = await host.submit(request, lease_ms=host.default_lease_ms if lease is None else lease)
    return http_status(answer.code.value if answer.code else None), msgspec.to_builtins(answer)


def _fd_of(out: IO[bytes]) -> int | None:
    """The file descriptor to write ``out`` through (its buffer flushed first), or None."""
    try:
        fd = out.fileno()
        out.flush()
    except (OSError, ValueError, AttributeError):  # io.UnsupportedOperation among them
        return None
    return fd


class _Writer:
    """Every output line goes through one thread, so the loop never blocks on a full pipe.

    The writer ends for good -- it drops what is queued and every later line, and calls the
    ``when_ended`` callback once with why (``ended``) -- when a write fails (``stdout.closed``: the
    parent closed stdout), or when more than ``max_pending`` bytes would wait behind the line being
    written (``stdout.stalled``: the parent keeps stdout open but stopped reading it). A line is
    always taken when no other waits, so one answer longer than the bound does not end a session by
    itself: what the writer holds is the line being written and at most ``max_pending`` bytes more
    (or that one longer line).

    A stream with a file descriptor is written with ``os.write``, past its buffer: a write blocked on
    a reader that stopped reading then holds no lock of the file object, so nothing else that touches
    it waits on that write (the interpreter's last flush of ``sys.stdout`` with text pending would
    wait for ever)."""

    def __init__(self, out: IO[bytes], *, max_pending: int = MAX_PENDING_OUTPUT) -> None:
        if max_pending < 1:
            raise ValueError(f"max_pending must be at least 1 byte, got {max_pending}")
        self._out = out
        self._fd = _fd_of(out)
        self.max_pending = max_pending
        self._lines: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._pending = 0  # bytes queued behind the line being written
        self._ended: str | None = None
        self._on_ended: Callable[[str], None] | None = None
        self._thread = threading.Thread(target=self._run, name="run-supervisor-stdio-out", daemon=True)
        self._thread.start()

    @property
    def ended(self) -> str | None:
        """Why nothing more reaches the parent (``stdout.closed``, ``stdout.stalled``), or None."""
        return self._ended

    @property
    def pending(self) -> int:
        """Bytes queued behind the line being written (0 once the writer ended)."""
        return self._pending

    def when_ended(self, callback: Callable[[str], None]) -> None:
        """Call ``callback(why)`` once when the writer ends (at once if it has ended already)."""
        with self._lock:
            self._on_ended = callback
            ended = self._ended
        if ended is not None:
            callback(ended)

    def put(self, message: dict[str, Any] | bytes) -> None:
        """Queue one line (raises if ``message`` cannot be encoded); dropped once the writer ended."""
        if self._ended is not None:
            return  # the reader is gone or stalled: queueing for it would only grow
        line = (message if isinstance(message, bytes) else msgspec.json.encode(message)) + b"\n"
        with self._lock:
            if self._ended is not None:
                return
            if self._pending and self._pending + len(line) > self.max_pending:
                stalled = True
            else:
                stalled = False
                self._pending += len(line)
                self._lines.put(line)
        if stalled:
            self._end("stdout.stalled")

    def _run(self) -> None:
        while (line := self._lines.get()) is not None:
            with self._lock:
                if self._ended is not None:
                    return
                self._pending -= len(line)
            try:
                self._write(line)
            except (ValueError, OSError):  # BrokenPipeError among them
                self._end("stdout.closed")
                return  # the reader is gone; nothing more to say

    def _write(self, line: bytes) -> None:
        if self._fd is None:
            self._out.write(line)
            self._out.flush()
            return
        view = memoryview(line)
        while view:
            try:
                view = view[os.write(self._fd, view) :]
            except BlockingIOError:  # a non-blocking pipe: wait until it takes more
                select.select([], [self._fd], [])

    def _end(self, why: str) -> None:
        with self._lock:
            if self._ended is not None:
                return
            self._ended = why
            self._pending = 0
            callback = self._on_ended
        while True:  # let go of what was queued for the reader
            try:
                self._lines.get_nowait()
            except queue.Empty:
                break
        if callback is not None:
            callback(why)

    def close(self, timeout: float = 5.0) -> None:
        """End the thread after the lines queued, waiting for it up to ``timeout`` seconds."""
        self._lines.put(None)
        self._thread.join(timeout)


_OVERLONG = b"\x00overlong"
_STDOUT_GONE = b"\x00stdout-gone"  # closed or stalled: the writer says which
_SESSION_ENDED = b"\x00session-ended"


def _reader(
    source: IO[bytes],
    loop: asyncio.AbstractEventLoop,
    lines: asyncio.Queue[bytes | None],
    max_line: int,
    stop: threading.Event,
) -> None:
    """Split the input into lines on a thread. It reads the file descriptor directly (``os.read``),
    so a reader still blocked when the process exits holds no lock of ``sys.stdin``. A line longer
    than ``max_line`` is dropped as it arrives and reported as one overlong line. Once ``stop`` is
    set (the session ended) it reads no more: what a parent sends then is not taken in."""

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
            if not chunk or stop.is_set():
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
        if stop.is_set():
            pass  # the session has ended: nothing more is taken in
        elif overlong:  # the last line, over the limit and never ended, still gets its answer
            put(_OVERLONG)
        elif partial.strip():
            put(partial)
        put(None)


def _error(corr: Any, code: str, error: str) -> dict[str, Any]:
    return {"type": "error", "id": corr, "status": http_status(code), "code": code, "error": error}


async def _answer(host: WireHost, number: int, raw: bytes, max_line: int) -> dict[str, Any]:
    """The one output line for input line ``number``, whatever the line holds."""
    corr: Any = None
    try:
        if raw is _OVERLONG or len(raw) > max_line:
            raise HostError("too_large", f"lines are limited to {max_line} bytes")
        try:
            fields = msgspec.json.decode(raw)
        except msgspec.DecodeError as exc:
            raise HostError(_INVALID, f"not valid JSON: {exc}") from None
        if not isinstance(fields, dict):
            raise HostError(_INVALID, "a line must be a JSON object")
        corr = fields.pop("id", None)
        status, answer = await _dispatch(host, fields)
        return {"type": "answer", "id": corr, "status": status, "answer": answer}
    except HostError as exc:
        error = exc.error if exc.error.startswith("line ") else f"line {number}: {exc.error}"
        return _error(corr, exc.code, error)
    except RecursionError:
        return _error(corr, _INVALID, f"line {number}: nested too deeply to read")
    except Exception as exc:  # a fault of ours: the line still gets its one answer, and it says so
        return _error(corr, RejectCode.INTERNAL_ERROR.value, f"line {number}: {type(exc).__name__}: {exc}")


async def _serve(
    host: WireHost, source: IO[bytes], writer: _Writer, *, events: bool, grace_ms: int, max_line: int
) -> None:
    loop = asyncio.get_running_loop()
    lines: asyncio.Queue[bytes | None] = asyncio.Queue()

    def post(item: bytes | None) -> None:
        try:
            loop.call_soon_threadsafe(lines.put_nowait, item)
        except RuntimeError:
            pass  # the loop has ended already

    # Events from the first one the hub holds (the directories loaded at start included).
    replay, _, listener = host.hub.listen("0", loop=loop, bound=1_000_000)
    if not events:
        host.hub.unlisten(listener)
    # A shutdown requested by a line also ends the session: nothing more can be done.
    host.hub.on_close(lambda: post(_SESSION_ENDED))
    # So does a parent that closed stdout, or stopped reading it: no answer reaches it any more.
    writer.when_ended(lambda _why: post(_STDOUT_GONE))

    def write_event(item: WireItem) -> None:
        # An event seed 002's clients know (global.disposed, server.instance.disposed) carries that
        # shape too, as on HTTP's /event: {"type", "properties"}.
        compat = b',"compat":' + item.compat if item.compat is not None else b""
        writer.put(b'{"type":"event","id":"' + item.id.encode() + b'","event":' + item.data + compat + b"}")

    async def pump_events() -> None:
        if not events:
            return
        for item in replay:
            write_event(item)
        while batch := await listener.next_batch():
            for item in batch:
                write_event(item)

    events_task = asyncio.create_task(pump_events())
    stop_reading = threading.Event()
    threading.Thread(
        target=_reader,
        args=(source, loop, lines, max_line, stop_reading),
        name="run-supervisor-stdio-in",
        daemon=True,
    ).start()
    pending: set[asyncio.Task[None]] = set()
    number = 0

    async def handle(number: int, raw: bytes) -> None:
        reply = await _answer(host, number, raw, max_line)
        try:
            writer.put(reply)
        except (msgspec.EncodeError, RecursionError, TypeError, ValueError) as exc:  # its id cannot go out
            writer.put(
                _error(None, RejectCode.INTERNAL_ERROR.value, f"line {number}: answer not sent: {exc}")
            )

    def take(raw: bytes) -> None:
        nonlocal number
        number += 1
        if not raw.strip():
            return
        task = asyncio.create_task(handle(number, raw if raw is _OVERLONG else raw.strip()))
        pending.add(task)
        task.add_done_callback(pending.discard)

    while (raw := await lines.get()) is not None and raw is not _SESSION_ENDED and raw is not _STDOUT_GONE:
        take(raw)
    stop_reading.set()
    if raw is _STDOUT_GONE and writer.ended is not None:  # shut down at once: no answer reaches the parent
        await _shutdown(host, writer.ended, grace_ms)
    elif raw is _SESSION_ENDED:  # the lines read before the session ended still get their answers
        while not lines.empty():
            if (more := lines.get_nowait()) is not None and more is not _STDOUT_GONE:
                take(more)
    # stdin closed (or the session ended): a shutdown, then the last events.
    if pending:
        await asyncio.gather(*pending, return_exceptions=True)
    if not host.hub.closed:
        await _shutdown(host, "stdin.closed", grace_ms)
    await events_task


async def _shutdown(host: WireHost, origin: str, grace_ms: int) -> None:
    if host.caches is not None:  # the parent can acknowledge no hook request any more
        host.caches.leave(origin)
    try:
        await host.submit(Shutdown(reason=ShutdownReason.SHUTDOWN, origin=origin, grace_ms=grace_ms))
    except HostError:
        pass  # no answer within its limit: serve_stdio's own shutdown below ends it


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
    max_pending_output: int = MAX_PENDING_OUTPUT,
) -> int:
    """Run a supervisor on JSON lines until stdin closes; returns the exit status (0, or 2 when the
    journal cannot be used). With ``journal``, the recovery's events are the first events written.
    ``reload_policy``: when a reload loads the next generation (``--reload-policy``; lazy by default).
    ``max_pending_output``: the bytes of output that may wait for the parent to read them (behind the
    line being written) before the session ends as a shutdown with origin ``stdout.stalled``
    (``MAX_PENDING_OUTPUT``, 16 MiB)."""
    if max_pending_output < 1:
        raise ValueError(f"max_pending_output must be at least 1 byte, got {max_pending_output}")
    source = source if source is not None else sys.stdin.buffer
    own_stdout = out is None
    out = out if out is not None else sys.stdout.buffer
    caches = RemoteCaches()  # a parent may register to own the caches (register_hooks)
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
            hooks=caches,
        )
    except JournalError as exc:
        sys.stderr.write(f"run-supervisor stdio: {exc}\n")
        return 2
    host = WireHost(supervisor, caches=caches, **({"default_lease_ms": lease_ms} if lease_ms else {}))
    writer = _Writer(out, max_pending=max_pending_output)
    try:
        if directories:
            supervisor.load(*directories)
        asyncio.run(_serve(host, source, writer, events=events, grace_ms=grace_ms, max_line=max_line))
    finally:
        if not supervisor.closed:
            supervisor.shutdown(grace_ms=grace_ms)
        host.hub.join(5.0)
        caches.close()  # a hook still waiting for an acknowledgement ends now
        # A stalled writer's thread may stay blocked in a write the parent never takes: no wait.
        writer.close(0.0 if writer.ended == "stdout.stalled" else 5.0)
        if writer.ended is not None:
            _after_stdout_gone(writer, own_stdout)
    return 0


def _after_stdout_gone(writer: _Writer, own_stdout: bool) -> None:
    """Say why on stderr, and (for the process's own stdout) point fd 1 at the null device, so the
    interpreter's last flush of a dead pipe neither prints a traceback nor changes the exit status."""
    if writer.ended == "stdout.stalled":
        said = f"stdout stalled (more than {writer.max_pending} bytes unread by the parent)"
    else:
        said = "stdout was closed"
    try:
        sys.stderr.write(f"run-supervisor stdio: {said}; shut down (origin {writer.ended})\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    if own_stdout:
        try:
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, sys.stdout.fileno())
            os.close(null)
        except (OSError, ValueError):
            pass
