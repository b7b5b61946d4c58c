"""``run-supervisor serve``: the supervisor over HTTP and server-sent events (Starlette + uvicorn).

Why Starlette + uvicorn: a small, well-kept ASGI stack with streaming responses (SSE) and no code
generation or framework layer we would have to explain; httpx tests it over a real socket.

Security (a local server reachable from any web page the user opens, by DNS rebinding, unless told
otherwise): every route but ``GET /health`` and the page shell ``GET /`` (static, no data) needs
``Authorization: Bearer <token>``, compared in constant time; the ``Host`` header must name this
server and an ``Origin``, when present, must be this server's; request bodies are size-limited; a
non-loopback address is refused unless a token was given explicitly. See docs/wire.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import ipaddress
import itertools
import secrets
import socket
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Iterator, MutableMapping
from dataclasses import dataclass, field
from typing import Any

import msgspec
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request as HttpRequest
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

from run_supervisor.actors._logging import logger
from run_supervisor.actors.hosts import _answers as answers
from run_supervisor.actors.hosts._external import MAX_LEASE_MS, MIN_LEASE_MS, ReportOutcome, decode_report
from run_supervisor.actors.hosts._hub import EventHub, Listener, WireItem
from run_supervisor.actors.hosts._remote_caches import http_routes as cache_routes
from run_supervisor.actors.hosts._timeline import live_page
from run_supervisor.actors.hosts._wire import HostError, WireHost, approved_spelling, http_status
from run_supervisor.protocol import (
    CloseAction,
    CloseOutcome,
    ProtocolDecodeError,
    RejectCode,
    Request,
    RequestOutcome,
    RequestResult,
    StartRun,
    decode_request,
    encode,
)

__all__ = ["EventStreams", "HttpSettings", "ServerThread", "create_app", "is_loopback", "new_token"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

PUBLIC_PATHS = frozenset({"/health", "/", "/openapi.json"})
"""Routes that need no token: a health check, the page shell (static; its data needs the token), and
the OpenAPI document (static: it describes the routes and holds no data)."""

TRANSPORT_KEY = "run_supervisor.transport"
"""Where the guard leaves the connection's transport in the scope (when the server is uvicorn), so an
event stream that cuts a reader off can drop the connection instead of waiting for it to drain."""

CHUNK = 64 * 1024
"""Bytes an event stream hands the server at once: a replay goes out in slices of this size, each
after the last was taken, so a reader that stops reading pins one slice, not a copy of the buffer."""


def new_token() -> str:
    return secrets.token_urlsafe(32)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass
class HttpSettings:
    """What the HTTP host enforces. ``allowed_hosts`` is filled in from the bound port."""

    token: str
    max_body: int = 1 << 20
    """Bytes a request body may have (413 beyond)."""
    sse_heartbeat_s: float = 15.0
    """A comment line is sent on an idle stream this often, so proxies and clients see it alive."""
    sse_bound: int = 10_000
    """Events a stream may fall behind before it is cut off (the client resumes by Last-Event-ID)."""
    sse_flush_s: float = 1.0
    """When the streams end (shutdown): how long a stream may take to write its last events before its
    connection is dropped (a reader that stopped reading never holds the shutdown up)."""
    allowed_hosts: set[str] = field(default_factory=set)
    extra_hosts: tuple[str, ...] = ()
    """Host names (without port) besides the loopback names that this server answers to."""
    cors_origins: tuple[str, ...] = ()
    """Origins (``http://localhost:5173``) a browser page may call this server from (``serve
    --allow-origin``): their preflights are answered and their answers carry
    ``Access-Control-Allow-Origin``. None by default: only this server's own origin may call it."""
    ticket_ttl_s: float = 30.0
    """How long an event-stream ticket (``POST /events/ticket``) stays valid; each is used once."""

    def allow_port(self, bound_host: str, port: int) -> None:
        names = {"127.0.0.1", "localhost", "[::1]", *self.extra_hosts}
        if not is_loopback(bound_host) and bound_host not in ("0.0.0.0", "::"):
            names.add(f"[{bound_host}]" if ":" in bound_host else bound_host)
        self.allowed_hosts = {f"{name}:{port}" for name in names}

    @property
    def allowed_origins(self) -> set[str]:
        return {f"http://{host}" for host in self.allowed_hosts} | set(self.cors_origins)


CORS_METHODS = "GET, POST, PUT, DELETE"
CORS_HEADERS = (
    "authorization, content-type, last-event-id, x-opencode-directory, x-opencode-client-action-id, "
    "x-opencode-client-action-kind"
)
EVENT_PATHS = frozenset({"/events", "/event"})
"""The event streams: a single-use ticket (``?ticket=``) may stand for the token there."""
MAX_TICKETS = 1024
"""Tickets outstanding at once; issuing one more drops the oldest."""


class Tickets:
    """Single-use, short-lived tickets for an event stream, so that a browser's ``EventSource`` (which
    cannot send a header) never puts the long-lived token in a URL. Thread-safe."""

    def __init__(self, ttl_s: float) -> None:
        self.ttl_s = ttl_s
        self._lock = threading.Lock()
        self._live: dict[str, float] = {}  # ticket -> when it expires (monotonic), oldest first

    def issue(self) -> str:
        ticket = secrets.token_urlsafe(24)
        now = time.monotonic()
        with self._lock:
            for old in [t for t, until in self._live.items() if until <= now]:
                del self._live[old]
            while len(self._live) >= MAX_TICKETS:
                del self._live[next(iter(self._live))]
            self._live[ticket] = now + self.ttl_s
        return ticket

    def redeem(self, ticket: str) -> bool:
        """True once for a ticket issued less than ``ttl_s`` ago; False ever after (or if unknown)."""
        with self._lock:
            until = self._live.pop(ticket, None)
        return until is not None and time.monotonic() < until


def _json(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    data = body if isinstance(body, bytes) else msgspec.json.encode(body)
    return Response(data, status_code=status, media_type="application/json", headers=headers)


def _refusal(code: str, error: str, headers: dict[str, str] | None = None) -> Response:
    return _json(HostError(code, error).body(), http_status(code), headers)


def _outcome(outcome: CloseOutcome | RequestOutcome | ReportOutcome) -> Response:
    status = http_status(outcome.code.value if outcome.code else None)
    return _json(encode(outcome), status)


class Guard:
    """Host, Origin, token and body-size checks in front of the app (a plain ASGI middleware)."""

    def __init__(
        self,
        app: ASGIApp,
        settings: HttpSettings,
        streams: EventStreams | None = None,
        tickets: Tickets | None = None,
    ) -> None:
        self.app = app
        self.settings = settings
        self.streams = streams if streams is not None else EventStreams()
        """The app's open event streams (see ``create_app``)."""
        self.tickets = tickets if tickets is not None else Tickets(settings.ticket_ttl_s)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        origin = headers.get("origin")
        if origin is not None and origin in self.settings.cors_origins:
            if scope["method"] == "OPTIONS" and "access-control-request-method" in headers:
                host_refusal = self._check_host(headers)  # a preflight carries no token
                await (host_refusal or _preflight(origin))(scope, receive, send)
                return
            send = _with_cors(send, origin)
        refusal = self._check(scope, headers)
        if refusal is None and scope["method"] in ("POST", "PUT", "PATCH", "DELETE"):
            body, refusal = await self._read_body(receive, headers)
            if refusal is None:
                receive = _replay(body, receive)
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        transport = getattr(getattr(send, "__self__", None), "transport", None)
        if isinstance(transport, asyncio.WriteTransport):  # uvicorn's: an event stream can drop it
            scope[TRANSPORT_KEY] = transport
        await self.app(scope, receive, send)

    def _check_host(self, headers: dict[str, str]) -> Response | None:
        host = headers.get("host", "")
        if host not in self.settings.allowed_hosts:
            return _refusal(
                "forbidden", f"Host {host!r} is not this server's address (a DNS-rebinding guard)"
            )
        return None

    def _check(self, scope: Scope, headers: dict[str, str]) -> Response | None:
        host_refusal = self._check_host(headers)
        if host_refusal is not None:
            return host_refusal
        origin = headers.get("origin")
        if origin is not None and origin not in self.settings.allowed_origins:
            return _refusal("forbidden", f"Origin {origin!r} may not call this server")
        if scope["path"] in PUBLIC_PATHS and scope["method"] == "GET":
            return None
        if scope["path"] in EVENT_PATHS and scope["method"] == "GET" and "authorization" not in headers:
            ticket = _query_value(scope, "ticket")
            if ticket is not None:
                if self.tickets.redeem(ticket):
                    return None
                return _refusal("unauthorized", "the ticket is unknown, used or expired: ask for another")
        scheme, _, given = headers.get("authorization", "").partition(" ")
        expected = self.settings.token.encode()
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), expected):
            return _refusal(
                "unauthorized",
                "this route needs the header Authorization: Bearer <token>",
                {"WWW-Authenticate": "Bearer"},
            )
        return None

    async def _read_body(self, receive: Receive, headers: dict[str, str]) -> tuple[bytes, Response | None]:
        limit = self.settings.max_body
        too_large = _refusal("too_large", f"request bodies are limited to {limit} bytes")
        declared = headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            return b"", too_large
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return b"", None  # the client left; the app will see the disconnect
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                return b"", too_large
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks), None


def _query_value(scope: Scope, name: str) -> str | None:
    from urllib.parse import parse_qs

    values = parse_qs(scope.get("query_string", b"").decode("latin-1")).get(name)
    return values[0] if values else None


def _preflight(origin: str) -> Response:
    """A CORS preflight from an allowed origin: the methods and headers it may use (no credentials:
    the token is a header the page sends itself)."""
    return Response(
        status_code=204,
        headers={
            "Access-Control-Allow-Origin": origin,
            "Access-Control-Allow-Methods": CORS_METHODS,
            "Access-Control-Allow-Headers": CORS_HEADERS,
            "Access-Control-Max-Age": "600",
            "Vary": "Origin",
        },
    )


def _with_cors(send: Send, origin: str) -> Send:
    """``send`` with the CORS answer headers added to the response's head."""
    added = [
        (b"access-control-allow-origin", origin.encode("latin-1")),
        (b"access-control-expose-headers", b"www-authenticate"),
        (b"vary", b"Origin"),
    ]

    async def cors_send(message: Message) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", []), *added]}
        await send(message)

    if hasattr(send, "__self__"):  # keep the server's transport reachable for the event streams
        cors_send.__self__ = send.__self__  # type: ignore[attr-defined]
    return cors_send


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replayed() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed


# --- event streams ------------------------------------------------------------------------------


def _slices(frames: Iterable[bytes]) -> Iterator[bytes]:
    """Frames joined into chunks of about ``CHUNK`` bytes (a larger frame goes alone)."""
    part: list[bytes] = []
    size = 0
    for frame in frames:
        part.append(frame)
        size += len(frame)
        if size >= CHUNK:
            yield b"".join(part)
            part, size = [], 0
    if part:
        yield b"".join(part)


class EventStreams:
    """The event streams an app has open, so that a host can end them together. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: set[EventStream] = set()

    def _add(self, stream: EventStream) -> None:
        with self._lock:
            self._open.add(stream)

    def _discard(self, stream: EventStream) -> None:
        with self._lock:
            self._open.discard(stream)

    def __len__(self) -> int:
        with self._lock:
            return len(self._open)

    def _each(self, action: Callable[[Listener], None]) -> None:
        with self._lock:
            listeners = [stream.listener for stream in self._open]
        for listener in listeners:
            with contextlib.suppress(RuntimeError):  # its loop has closed: the stream is gone
                listener.loop.call_soon_threadsafe(action, listener)

    def end_all(self) -> None:
        """End every stream after what it has queued (each within ``sse_flush_s``; a reader that
        does not take it by then is dropped), as the supervisor's shutdown does."""
        self._each(Listener.end)

    def drop_all(self) -> None:
        """Drop every stream's connection now, queued events and all (a host stopping at once)."""
        self._each(Listener.stop)


class EventStream(Response):
    """One SSE response: the head and the replay, then live events, written a slice at a time.

    Each write is handed to the server only once the last was taken, so a reader that stops reading
    holds one slice here (and what the transport buffers), never a copy of the replay. The stream is
    cut off -- its connection dropped -- when its listener falls ``sse_bound`` events behind while a
    write waits, when it is dropped, or when it cannot write its last events within ``sse_flush_s``
    of the end; a client then resumes by ``Last-Event-ID``."""

    def __init__(
        self,
        hub: EventHub,
        listener: Listener,
        head: list[bytes],
        replay: list[WireItem],
        settings: HttpSettings,
        streams: EventStreams,
        *,
        compat: bool,
    ) -> None:
        # A Response for Starlette's routing, but it writes its own head and body (see __call__).
        self.status_code = 200
        self.background = None
        self.hub = hub
        self.listener = listener
        self._head = head
        self._replay = replay
        self._settings = settings
        self._streams = streams
        self._compat = compat
        self._flush_until: float | None = None

    def _frames(self, items: Iterable[WireItem]) -> Iterator[bytes]:
        for item in items:
            data = item.compat if self._compat else item.data
            if data is not None:
                yield b"id: " + item.id.encode() + b"\ndata: " + data + b"\n\n"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        listener = self.listener
        self._streams._add(self)
        watcher = asyncio.ensure_future(self._watch(receive))
        completed = False
        try:
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [
                        (b"content-type", b"text/event-stream; charset=utf-8"),
                        (b"cache-control", b"no-store"),
                        (b"x-accel-buffering", b"no"),
                    ],
                }
            )
            completed = await self._pump(send)
        finally:
            self.hub.unlisten(listener)
            self._streams._discard(self)
            if not completed:
                listener.stop()
                transport = scope.get(TRANSPORT_KEY)
                if isinstance(transport, asyncio.WriteTransport):
                    transport.abort()  # what it buffered for this reader is freed now
                    # The server sees the connection lost (and our ending as no error) before we return.
                    with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                        await asyncio.wait_for(asyncio.shield(watcher), 1.0)
            watcher.cancel()

    async def _watch(self, receive: Receive) -> None:
        """The client left: stop at once."""
        while (await receive())["type"] != "http.disconnect":
            pass
        self.listener.stop()

    async def _pump(self, send: Send) -> bool:
        """Write everything until the stream ends; False when it was cut off instead."""
        listener = self.listener
        replay, self._replay = self._replay, []
        for chunk in _slices(itertools.chain(self._head, self._frames(replay))):  # lazily: no copy
            if not await self._write(send, chunk):
                return False
        del replay
        while True:
            try:
                batch = await asyncio.wait_for(listener.next_batch(), self._settings.sse_heartbeat_s)
            except TimeoutError:
                if not await self._write(send, b": keepalive\n\n"):
                    return False
                continue
            if listener.stopped or listener.overflowed:
                return False
            if not batch:
                return await self._write(send, b"", more=False)
            for chunk in _slices(self._frames(batch)):
                if not await self._write(send, chunk):
                    return False

    async def _write(self, send: Send, data: bytes, *, more: bool = True) -> bool:
        """Hand one chunk to the server; False (the write withdrawn) when the stream must stop first."""
        listener = self.listener
        if listener.stopped or listener.overflowed:
            return False
        writing = asyncio.ensure_future(send({"type": "http.response.body", "body": data, "more_body": more}))
        alarm: asyncio.Future[Any] | None = None
        try:
            while not writing.done():
                if listener.stopped or listener.overflowed:
                    return False
                if listener.ended:  # the last events: a bounded wait for the reader
                    loop = asyncio.get_running_loop()
                    if self._flush_until is None:
                        self._flush_until = loop.time() + self._settings.sse_flush_s
                    timeout = self._flush_until - loop.time()
                    if timeout <= 0:
                        return False
                    await asyncio.wait({writing}, timeout=timeout)
                    continue
                if alarm is None:
                    alarm = asyncio.ensure_future(listener.alarm.wait())
                await asyncio.wait({writing, alarm}, return_when=asyncio.FIRST_COMPLETED)
            writing.result()
            return True
        finally:
            if alarm is not None:
                alarm.cancel()
            if not writing.done():
                writing.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await writing


# --- the routes -------------------------------------------------------------------------------


async def _body(request: HttpRequest) -> dict[str, Any]:
    raw = await request.body()
    if not raw.strip():
        return {}
    try:
        data = msgspec.json.decode(raw)
    except msgspec.DecodeError as exc:
        raise HostError(RejectCode.INVALID_REQUEST.value, f"the body is not valid JSON: {exc}") from None
    except RecursionError:
        raise HostError(RejectCode.INVALID_REQUEST.value, "the body is nested too deeply") from None
    if not isinstance(data, dict):
        raise HostError(RejectCode.INVALID_REQUEST.value, "the body must be a JSON object")
    return data


def _only(fields: dict[str, Any], allowed: Iterable[str], where: str) -> None:
    """Refuse a body field the route does not take, by name (a misspelt field is never ignored)."""
    unknown = sorted(set(fields) - set(allowed))
    if unknown:
        names = ", ".join(f"`{name}`" for name in unknown)
        raise HostError(RejectCode.INVALID_REQUEST.value, f"{where} takes no field {names}")


def _from_path(fields: dict[str, Any], route: str, *names: str) -> None:
    """Refuse a body field the route takes from its path (or its own kind): it would be overridden."""
    given = [name for name in ("type", *names) if name in fields]
    if given:
        names_given = ", ".join(f"`{name}`" for name in given)
        raise HostError(
            RejectCode.INVALID_REQUEST.value, f"{route} takes no body field {names_given}: the route says it"
        )


def _query_bool(value: str, name: str) -> bool:
    if value not in ("true", "false"):
        raise HostError(RejectCode.INVALID_REQUEST.value, f"{name} must be true or false, got {value!r}")
    return value == "true"


def _query_int(value: str, name: str) -> int:
    if not value.isascii() or not value.isdigit():
        raise HostError(
            RejectCode.INVALID_REQUEST.value, f"{name} must be a whole number >= 0, got {value!r}"
        )
    return int(value)


def _request(fields: dict[str, Any]) -> Request:
    try:
        return decode_request(msgspec.json.encode(fields))
    except ProtocolDecodeError as exc:
        raise HostError(RejectCode.INVALID_REQUEST.value, str(exc)) from None


def _lease(value: Any, default: int) -> int:
    if value is None:
        return default
    if not isinstance(value, int) or isinstance(value, bool):
        raise HostError(RejectCode.INVALID_REQUEST.value, f"lease_ms must be an integer, got {value!r}")
    if not MIN_LEASE_MS <= value <= MAX_LEASE_MS:  # 0 too: never taken as "the default"
        raise HostError(
            RejectCode.INVALID_REQUEST.value,
            f"lease_ms must be between {MIN_LEASE_MS} and {MAX_LEASE_MS}, got {value}",
        )
    return value


def create_app(host: WireHost, settings: HttpSettings) -> Guard:
    """The ASGI app of ``run-supervisor serve`` for this host (wrapped in its security guard). Its
    ``streams`` are the event streams it has open: a host ends them (``end_all``) before it stops the
    server, or drops them (``drop_all``) to stop at once."""
    streams = EventStreams()
    tickets = Tickets(settings.ticket_ttl_s)

    def handler(
        fn: Callable[[HttpRequest], Awaitable[Response]],
    ) -> Callable[[HttpRequest], Awaitable[Response]]:
        async def wrapped(request: HttpRequest) -> Response:
            try:
                return await fn(request)
            except HostError as exc:
                return _json(exc.body(), http_status(exc.code))
            except Exception as exc:  # contained: one JSON answer, never a plain-text 500
                logger.opt(exception=True).error(
                    "the HTTP host failed on {} {}", request.method, request.url.path
                )
                return _refusal(RejectCode.INTERNAL_ERROR.value, f"the host failed: {type(exc).__name__}")

        return wrapped

    async def health(request: HttpRequest) -> Response:
        return _json(answers.Health(status="closed" if host.hub.closed else "ok"))

    async def openapi(request: HttpRequest) -> Response:
        from run_supervisor.actors.hosts._openapi import document_json

        return _json(document_json())

    async def page(request: HttpRequest) -> Response:
        return HTMLResponse(live_page())

    async def submit_any(request: HttpRequest) -> Response:
        fields = await _body(request)
        lease = None
        if fields.get("type") == "start_run":  # an external run's lease; any other request refuses it
            lease = _lease(fields.pop("lease_ms", None), host.default_lease_ms)
        if fields.get("type") == "reply_permission":
            fields = approved_spelling(fields)
        outcome = await host.submit(_request(fields), lease_ms=lease)
        return _outcome(outcome)

    async def start_run(request: HttpRequest) -> Response:
        try:
            fields = await _body(request)
            _from_path(fields, "POST /runs")
            lease = _lease(fields.pop("lease_ms", None), host.default_lease_ms)
            fields.setdefault("run_id", f"run-{uuid.uuid4().hex[:12]}")
            parsed = _request({**fields, "type": "start_run"})
        except HostError as exc:  # refused before the supervisor saw it: no run either
            code = RejectCode(exc.code)
            refused = answers.StartedRun(result=RequestResult.REJECTED, code=code, error=exc.error)
            return _json(refused, http_status(exc.code))
        assert isinstance(parsed, StartRun)
        outcome = await host.submit(parsed, lease_ms=lease)
        if outcome.code is not None:  # no run was started: no id or lease a client could report to
            rejected = RequestResult.REJECTED
            started = answers.StartedRun(result=rejected, code=outcome.code, error=outcome.error)
            return _json(started, http_status(outcome.code.value))
        started = answers.StartedRun(result=RequestResult.OK, run_id=parsed.run_id, lease_ms=lease)
        return _json(started, 201)  # created: the run exists now

    def on_path(kind: str, key: str, *others: str) -> Callable[[HttpRequest], Awaitable[Response]]:
        """A request of ``kind`` aimed by the path's ``key`` (a run, an ask, an action, a session);
        the body may name neither it nor ``others``."""

        async def route(request: HttpRequest) -> Response:
            fields = await _body(request)
            _from_path(fields, f"{request.method} {request.url.path}", key, *others)
            if kind == "reply_permission":
                fields = approved_spelling(fields)
            outcome = await host.submit(_request({**fields, "type": kind, key: request.path_params[key]}))
            return _outcome(outcome)

        return route

    def on_run(kind: str) -> Callable[[HttpRequest], Awaitable[Response]]:
        return on_path(kind, "run_id", "ask_id")

    def on_ask(kind: str) -> Callable[[HttpRequest], Awaitable[Response]]:
        return on_path(kind, "ask_id", "run_id")

    confirm_action = on_path("confirm_close", "action_id")

    async def get_asks(request: HttpRequest) -> Response:
        _only(dict(request.query_params), ("run_id",), "GET /asks")  # a misspelt filter is no filter
        run_id = request.query_params.get("run_id")
        return _json(encode(host.read(lambda sup: sup.pending_asks(run_id=run_id))))

    async def report(request: HttpRequest) -> Response:
        raw = await request.body()
        try:
            parsed = decode_report(raw)
        except ValueError as exc:
            raise HostError(RejectCode.INVALID_REQUEST.value, str(exc)) from None
        except RecursionError:
            raise HostError(RejectCode.INVALID_REQUEST.value, "the report is nested too deeply") from None
        return _outcome(await host.report(request.path_params["run_id"], parsed))

    async def close(request: HttpRequest) -> Response:
        fields = await _body(request)
        _from_path(fields, "POST /close")
        directory = fields.pop("directory", None)
        if directory is not None:
            if "directories" in fields:
                raise HostError(
                    RejectCode.INVALID_REQUEST.value, "give `directory` or `directories`, not both"
                )
            fields["directories"] = [directory]
        return _outcome(await host.submit(_request({**fields, "type": "close"})))

    async def shutdown(request: HttpRequest) -> Response:
        fields = await _body(request)
        _from_path(fields, "POST /shutdown")
        fields.setdefault("grace_ms", host.supervisor.config.default_grace_ms)
        return _outcome(await host.submit(_request({**fields, "type": "shutdown"})))

    async def directories(request: HttpRequest) -> Response:
        fields = await _body(request)
        _only(fields, ("directories", "load"), "POST /directories")
        names = fields.get("directories")
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise HostError(RejectCode.INVALID_REQUEST.value, "directories must be a list of strings")
        load = fields.get("load", True)
        if not isinstance(load, bool):
            raise HostError(RejectCode.INVALID_REQUEST.value, f"load must be true or false, got {load!r}")
        await host.directories(tuple(names), load=load)
        return _json(answers.DirectoriesAnswer(directories=tuple(names), loaded=load))

    async def get_run(request: HttpRequest) -> Response:
        run_id = request.path_params["run_id"]
        snapshot = host.read(lambda sup: sup.run(run_id))
        if snapshot is None:
            raise HostError(RejectCode.UNKNOWN_RUN.value, f"no run {run_id!r} is known (or it was forgotten)")
        return _json(encode(snapshot))

    async def get_session(request: HttpRequest) -> Response:
        session = request.path_params["session"]
        snapshot = host.read(lambda sup: sup.session(session))
        if snapshot is None:
            raise HostError("not_found", f"no session {session!r} is known")
        return _json(encode(snapshot))

    async def cancel_session(request: HttpRequest) -> Response:
        fields = await _body(request)
        _from_path(fields, f"POST {request.url.path}", "session")
        session = request.path_params["session"]
        return _outcome(await host.submit(_request({**fields, "type": "cancel_session", "session": session})))

    async def delete_session(request: HttpRequest) -> Response:
        where = f"DELETE {request.url.path}"
        if (await request.body()).strip():
            raise HostError(
                RejectCode.INVALID_REQUEST.value, f"{where} takes no body: its options are in the query"
            )
        query = dict(request.query_params)
        _only(query, ("confirm", "origin", "grace_ms", "tag"), where)
        fields: dict[str, Any] = {"type": "delete_session", "session": request.path_params["session"]}
        if "confirm" in query:
            fields["confirm"] = _query_bool(query["confirm"], "confirm")
        if "grace_ms" in query:
            fields["grace_ms"] = _query_int(query["grace_ms"], "grace_ms")
        for name in ("origin", "tag"):
            if name in query:
                fields[name] = query[name]
        return _outcome(await host.submit(_request(fields)))

    set_queue_policy = on_path("set_queue_policy", "session")

    async def events_ticket(request: HttpRequest) -> Response:
        _only(await _body(request), (), "POST /events/ticket")
        ticket = answers.Ticket(ticket=tickets.issue(), expires_in_ms=int(settings.ticket_ttl_s * 1000))
        return _json(ticket, 201)

    async def get_actions(request: HttpRequest) -> Response:
        return _json(encode(host.read(lambda sup: sup.pending_actions())))

    async def get_statistics(request: HttpRequest) -> Response:
        stats = host.read(lambda sup: sup.statistics())
        body = answers.HostStatistics(
            **msgspec.structs.asdict(stats),
            stall_after_ms=host.supervisor.config.stall_after_ms,
            external_runs=host.external.live,
            sse_listeners=host.hub.listeners,
            events_buffered=host.hub.buffered,
        )
        return _json(body)

    # --- seed 002's backend routes --------------------------------------------------------------

    def compat(do: CloseAction) -> Callable[[HttpRequest], Awaitable[Response]]:
        async def route(request: HttpRequest) -> Response:
            query, headers = request.query_params, request.headers
            directory = query.get("directory") or headers.get("x-opencode-directory")
            if do is not CloseAction.DISPOSE_ALL and not directory:
                raise HostError(
                    RejectCode.INVALID_REQUEST.value,
                    "name the directory: ?directory=... or the header x-opencode-directory",
                )
            answer = await host.compat_close(
                do,
                mode=query.get("mode"),
                origin=headers.get("x-opencode-client-action-kind"),
                tag=headers.get("x-opencode-client-action-id"),
                directory=directory,
            )
            if isinstance(answer, CloseOutcome):  # rejected: the close's own outcome
                return _outcome(answer)
            return _json(answer)

        return route

    # --- events ---------------------------------------------------------------------------------

    def events(compat_shape: bool) -> Callable[[HttpRequest], Awaitable[Response]]:
        async def route(request: HttpRequest) -> Response:
            if request.method == "HEAD":  # Starlette's HEAD of a GET: the head alone, no stream
                return Response(
                    status_code=200, media_type="text/event-stream", headers={"cache-control": "no-store"}
                )
            after = request.headers.get("last-event-id") or request.query_params.get("after")
            loop = asyncio.get_running_loop()
            replay, reset, listener = host.hub.listen(after, loop=loop, bound=settings.sse_bound)
            head = [b"retry: 1000\n\n"]
            if compat_shape:
                head.append(b'data: {"type":"server.connected","properties":{}}\n\n')
            if reset is not None:
                head.append(b"data: " + msgspec.json.encode(reset) + b"\n\n")
            return EventStream(host.hub, listener, head, replay, settings, streams, compat=compat_shape)

        return route

    routes = [
        Route("/health", handler(health), methods=["GET"]),
        Route("/", handler(page), methods=["GET"]),
        Route("/openapi.json", handler(openapi), methods=["GET"]),
        Route("/requests", handler(submit_any), methods=["POST"]),
        Route("/runs", handler(start_run), methods=["POST"]),
        Route("/runs/{run_id}", handler(get_run), methods=["GET"]),
        Route("/runs/{run_id}/cancel", handler(on_run("cancel")), methods=["POST"]),
        Route("/runs/{run_id}/permission", handler(on_run("reply_permission")), methods=["POST"]),
        Route("/runs/{run_id}/form", handler(on_run("answer_form")), methods=["POST"]),
        Route("/runs/{run_id}/form/dismiss", handler(on_run("dismiss_form")), methods=["POST"]),
        Route("/runs/{run_id}/reports", handler(report), methods=["POST"]),
        Route("/asks", handler(get_asks), methods=["GET"]),
        Route("/asks/{ask_id}/permission", handler(on_ask("reply_permission")), methods=["POST"]),
        Route("/asks/{ask_id}/form", handler(on_ask("answer_form")), methods=["POST"]),
        Route("/asks/{ask_id}/dismiss", handler(on_ask("dismiss_form")), methods=["POST"]),
        Route("/sessions/{session}", handler(get_session), methods=["GET"]),
        Route("/sessions/{session}", handler(delete_session), methods=["DELETE"]),
        Route("/sessions/{session}/cancel", handler(cancel_session), methods=["POST"]),
        Route("/sessions/{session}/queue_policy", handler(set_queue_policy), methods=["PUT", "POST"]),
        Route("/actions", handler(get_actions), methods=["GET"]),
        Route("/actions/{action_id}/confirm", handler(confirm_action), methods=["POST"]),
        Route("/statistics", handler(get_statistics), methods=["GET"]),
        Route("/close", handler(close), methods=["POST"]),
        Route("/shutdown", handler(shutdown), methods=["POST"]),
        Route("/directories", handler(directories), methods=["POST"]),
        *cache_routes(host.caches, handler, _body),  # caches over the wire: _remote_caches
        Route("/events/ticket", handler(events_ticket), methods=["POST"]),
        Route("/events", handler(events(False)), methods=["GET"]),
        Route("/event", handler(events(True)), methods=["GET"]),
        Route("/global/dispose", handler(compat(CloseAction.DISPOSE_ALL)), methods=["POST"]),
        Route("/instance/dispose", handler(compat(CloseAction.DISPOSE)), methods=["POST"]),
        Route("/instance/reload", handler(compat(CloseAction.RELOAD)), methods=["POST"]),
    ]

    async def not_found(request: HttpRequest, exc: Exception) -> Response:
        return _refusal("not_found", f"no route {request.method} {request.url.path}")

    async def not_allowed(request: HttpRequest, exc: Exception) -> Response:
        return _refusal("not_found", f"{request.url.path} does not take {request.method}")

    app = Starlette(routes=routes, exception_handlers={404: not_found, 405: not_allowed})
    return Guard(app, settings, streams, tickets)


# --- running it ---------------------------------------------------------------------------------


def bind(host: str, port: int) -> socket.socket:
    """A listening socket (port 0: a free one).

    Made with protocol ``IPPROTO_TCP`` (not 0): asyncio sets ``TCP_NODELAY`` only on sockets that say
    they are TCP, and the sockets it accepts inherit the protocol. Without it, every answer after the
    first on a kept-alive connection waited for the client's delayed ACK (Nagle's algorithm): about
    40 ms a request."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind((host.strip("[]"), port))
        sock.listen(512)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


def uvicorn_server(app: ASGIApp) -> uvicorn.Server:
    config = uvicorn.Config(
        app,
        lifespan="off",
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=3,
        ws="none",
    )
    return _Server(config)


class _Server(uvicorn.Server):
    """uvicorn's server without its signal capture: the host decides what a signal does (``serve``
    shuts the supervisor down, then exits 0), instead of a signal re-raised after the server stops."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class ServerThread:
    """Serve a ``WireHost`` on a loopback port from a background thread (for tests and embedding
    hosts): ``start()`` returns once it accepts connections; ``stop()`` ends it (bounded)."""

    def __init__(
        self,
        host: WireHost,
        *,
        token: str | None = None,
        bind_host: str = "127.0.0.1",
        port: int = 0,
        settings: HttpSettings | None = None,
    ) -> None:
        self.host = host
        self.settings = settings or HttpSettings(token=token or new_token())
        self._sock = bind(bind_host, port)
        self.port: int = self._sock.getsockname()[1]
        self.settings.allow_port(bind_host, self.port)
        self.url = f"http://{bind_host}:{self.port}"
        app = create_app(host, self.settings)
        self.streams = app.streams
        self._server = uvicorn_server(app)
        self._thread = threading.Thread(target=self._run, name="run-supervisor-http", daemon=True)
        self._error: BaseException | None = None

    @property
    def token(self) -> str:
        return self.settings.token

    def _run(self) -> None:
        try:
            asyncio.run(self._server.serve(sockets=[self._sock]))
        except BaseException as exc:  # reported by start()
            self._error = exc

    def start(self, timeout: float = 10.0) -> ServerThread:
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the HTTP server did not start: {self._error!r}")
            self._thread.join(0.01)  # a bounded wait on the server thread itself
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """End the event streams (each within ``sse_flush_s``), then stop the server."""
        self.streams.end_all()
        self._server.should_exit = True
        self._thread.join(timeout)
        self._sock.close()

    def __enter__(self) -> ServerThread:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
