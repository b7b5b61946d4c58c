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
import secrets
import socket
import threading
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, MutableMapping
from dataclasses import dataclass, field
from typing import Any

import msgspec
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request as HttpRequest
from starlette.responses import HTMLResponse, Response, StreamingResponse
from starlette.routing import Route

from run_supervisor.actors.hosts._external import ReportOutcome, decode_report
from run_supervisor.actors.hosts._hub import WireItem
from run_supervisor.actors.hosts._timeline import live_page
from run_supervisor.actors.hosts._wire import HostError, WireHost, http_status
from run_supervisor.protocol import (
    CloseAction,
    CloseMode,
    CloseOutcome,
    ProtocolDecodeError,
    RejectCode,
    Request,
    RequestOutcome,
    StartRun,
    decode_request,
    encode,
)

__all__ = ["HttpSettings", "ServerThread", "create_app", "is_loopback", "new_token"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

PUBLIC_PATHS = frozenset({"/health", "/"})
"""Routes that need no token: a health check, and the page shell (static; its data needs the token)."""


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
    allowed_hosts: set[str] = field(default_factory=set)
    extra_hosts: tuple[str, ...] = ()
    """Host names (without port) besides the loopback names that this server answers to."""

    def allow_port(self, bound_host: str, port: int) -> None:
        names = {"127.0.0.1", "localhost", "[::1]", *self.extra_hosts}
        if not is_loopback(bound_host) and bound_host not in ("0.0.0.0", "::"):
            names.add(f"[{bound_host}]" if ":" in bound_host else bound_host)
        self.allowed_hosts = {f"{name}:{port}" for name in names}

    @property
    def allowed_origins(self) -> set[str]:
        return {f"http://{host}" for host in self.allowed_hosts}


def _json(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    data = body if isinstance(body, bytes) else msgspec.json.encode(body)
    return Response(data, status_code=status, media_type="application/json", headers=headers)


def _refusal(code: str, error: str, headers: dict[str, str] | None = None) -> Response:
    return _json(HostError(code, error).body(), http_status(code), headers)


def _outcome(
    outcome: CloseOutcome | RequestOutcome | ReportOutcome, extra: dict[str, Any] | None = None
) -> Response:
    status = http_status(outcome.code.value if outcome.code else None)
    if extra:
        body = {**msgspec.to_builtins(outcome), **extra}
        return _json(body, status)
    return _json(encode(outcome), status)


class Guard:
    """Host, Origin, token and body-size checks in front of the app (a plain ASGI middleware)."""

    def __init__(self, app: ASGIApp, settings: HttpSettings) -> None:
        self.app = app
        self.settings = settings

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        refusal = self._check(scope, headers)
        if refusal is None and scope["method"] in ("POST", "PUT", "PATCH", "DELETE"):
            body, refusal = await self._read_body(receive, headers)
            if refusal is None:
                receive = _replay(body, receive)
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def _check(self, scope: Scope, headers: dict[str, str]) -> Response | None:
        host = headers.get("host", "")
        if host not in self.settings.allowed_hosts:
            return _refusal(
                "forbidden", f"Host {host!r} is not this server's address (a DNS-rebinding guard)"
            )
        origin = headers.get("origin")
        if origin is not None and origin not in self.settings.allowed_origins:
            return _refusal("forbidden", f"Origin {origin!r} may not call this server")
        if scope["path"] in PUBLIC_PATHS and scope["method"] == "GET":
            return None
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


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replayed() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed


# --- the routes -------------------------------------------------------------------------------


async def _body(request: HttpRequest) -> dict[str, Any]:
    raw = await request.body()
    if not raw.strip():
        return {}
    try:
        data = msgspec.json.decode(raw)
    except msgspec.DecodeError as exc:
        raise HostError(RejectCode.INVALID_REQUEST.value, f"the body is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise HostError(RejectCode.INVALID_REQUEST.value, "the body must be a JSON object")
    return data


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
    return value


_COMPAT_ORIGIN = {
    CloseAction.DISPOSE_ALL: "global.dispose",
    CloseAction.DISPOSE: "instance.dispose",
    CloseAction.RELOAD: "instance.reload",
}


def create_app(host: WireHost, settings: HttpSettings) -> ASGIApp:
    """The ASGI app of ``run-supervisor serve`` for this host (wrapped in its security guard)."""

    def handler(
        fn: Callable[[HttpRequest], Awaitable[Response]],
    ) -> Callable[[HttpRequest], Awaitable[Response]]:
        async def wrapped(request: HttpRequest) -> Response:
            try:
                return await fn(request)
            except HostError as exc:
                return _json(exc.body(), http_status(exc.code))

        return wrapped

    async def health(request: HttpRequest) -> Response:
        return _json({"status": "closed" if host.hub.closed else "ok"})

    async def page(request: HttpRequest) -> Response:
        return HTMLResponse(live_page())

    async def submit_any(request: HttpRequest) -> Response:
        fields = await _body(request)
        lease = _lease(fields.pop("lease_ms", None), host.default_lease_ms)
        outcome = await host.submit(_request(fields), lease_ms=lease)
        return _outcome(outcome)

    async def start_run(request: HttpRequest) -> Response:
        fields = await _body(request)
        lease = _lease(fields.pop("lease_ms", None), host.default_lease_ms)
        fields.setdefault("run_id", f"run-{uuid.uuid4().hex[:12]}")
        parsed = _request({**fields, "type": "start_run"})
        assert isinstance(parsed, StartRun)
        outcome = await host.submit(parsed, lease_ms=lease)
        if outcome.code is not None:  # no run was started: no id or lease a client could report to
            return _outcome(outcome, {"run_id": None, "lease_ms": None})
        return _outcome(outcome, {"run_id": parsed.run_id, "lease_ms": lease})

    def on_run(kind: str) -> Callable[[HttpRequest], Awaitable[Response]]:
        async def route(request: HttpRequest) -> Response:
            fields = await _body(request)
            outcome = await host.submit(
                _request({**fields, "type": kind, "run_id": request.path_params["run_id"]})
            )
            return _outcome(outcome)

        return route

    def on_ask(kind: str) -> Callable[[HttpRequest], Awaitable[Response]]:
        async def route(request: HttpRequest) -> Response:
            fields = await _body(request)
            outcome = await host.submit(
                _request({**fields, "type": kind, "ask_id": request.path_params["ask_id"]})
            )
            return _outcome(outcome)

        return route

    async def confirm_action(request: HttpRequest) -> Response:
        fields = await _body(request)
        action_id = request.path_params["action_id"]
        return _outcome(
            await host.submit(_request({**fields, "type": "confirm_close", "action_id": action_id}))
        )

    async def get_asks(request: HttpRequest) -> Response:
        run_id = request.query_params.get("run_id")
        return _json(encode(host.read(lambda sup: sup.pending_asks(run_id=run_id))))

    async def report(request: HttpRequest) -> Response:
        raw = await request.body()
        try:
            parsed = decode_report(raw)
        except ValueError as exc:
            raise HostError(RejectCode.INVALID_REQUEST.value, str(exc)) from None
        return _outcome(await host.report(request.path_params["run_id"], parsed))

    async def close(request: HttpRequest) -> Response:
        fields = await _body(request)
        directory = fields.pop("directory", None)
        if directory is not None:
            fields["directories"] = [directory]
        return _outcome(await host.submit(_request({**fields, "type": "close"})))

    async def shutdown(request: HttpRequest) -> Response:
        fields = await _body(request)
        fields.setdefault("grace_ms", host.supervisor.config.default_grace_ms)
        return _outcome(await host.submit(_request({**fields, "type": "shutdown"})))

    async def directories(request: HttpRequest) -> Response:
        fields = await _body(request)
        names = fields.get("directories")
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise HostError(RejectCode.INVALID_REQUEST.value, "directories must be a list of strings")
        load = fields.get("load", True)
        if not isinstance(load, bool):
            raise HostError(RejectCode.INVALID_REQUEST.value, f"load must be true or false, got {load!r}")
        await host.directories(tuple(names), load=load)
        return _json({"result": "ok", "directories": names, "loaded": load})

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

    async def set_queue_policy(request: HttpRequest) -> Response:
        fields = await _body(request)
        session = request.path_params["session"]
        return _outcome(
            await host.submit(_request({**fields, "type": "set_queue_policy", "session": session}))
        )

    async def get_actions(request: HttpRequest) -> Response:
        return _json(encode(host.read(lambda sup: sup.pending_actions())))

    async def get_statistics(request: HttpRequest) -> Response:
        stats = host.read(lambda sup: sup.statistics())
        body = {
            **msgspec.to_builtins(stats),
            "stall_after_ms": host.supervisor.config.stall_after_ms,
            "external_runs": host.external.live,
            "sse_listeners": host.hub.listeners,
            "events_buffered": host.hub.buffered,
        }
        return _json(body)

    # --- seed 002's backend routes --------------------------------------------------------------

    def compat(do: CloseAction) -> Callable[[HttpRequest], Awaitable[Response]]:
        async def route(request: HttpRequest) -> Response:
            query, headers = request.query_params, request.headers
            mode = query.get("mode", CloseMode.MAINTENANCE.value)
            origin = headers.get("x-opencode-client-action-kind") or _COMPAT_ORIGIN[do]
            fields: dict[str, Any] = {"type": "close", "do": do.value, "mode": mode, "origin": origin}
            tag = headers.get("x-opencode-client-action-id")
            if tag:
                fields["tag"] = tag
            if do is not CloseAction.DISPOSE_ALL:
                directory = query.get("directory") or headers.get("x-opencode-directory")
                if not directory:
                    raise HostError(
                        RejectCode.INVALID_REQUEST.value,
                        "name the directory: ?directory=... or the header x-opencode-directory",
                    )
                await host.directories((directory,), load=False)  # an unloaded directory closes at once
                fields["directories"] = [directory]
            outcome = await host.submit(_request(fields))
            assert isinstance(outcome, CloseOutcome)
            if outcome.code is not None:
                return _outcome(outcome)
            return _json(
                {
                    "status": "completed" if outcome.completed else "deferred",
                    "lifecycleActionID": outcome.action_id,
                    "affectedDirectoryKeys": [*outcome.completed_directories, *outcome.pending_directories],
                }
            )

        return route

    # --- events ---------------------------------------------------------------------------------

    def events(compat_shape: bool) -> Callable[[HttpRequest], Awaitable[Response]]:
        async def route(request: HttpRequest) -> Response:
            after = request.headers.get("last-event-id") or request.query_params.get("after")
            loop = asyncio.get_running_loop()
            replay, reset, listener = host.hub.listen(after, loop=loop, bound=settings.sse_bound)

            def frame(item: WireItem) -> bytes | None:
                data = item.compat if compat_shape else item.data
                if data is None:
                    return None
                return b"id: " + item.id.encode() + b"\ndata: " + data + b"\n\n"

            async def stream() -> AsyncIterator[bytes]:
                try:
                    # The preamble and the whole replay go out as one chunk.
                    head = [b"retry: 1000\n\n"]
                    if compat_shape:
                        head.append(b'data: {"type":"server.connected","properties":{}}\n\n')
                    if reset is not None:
                        head.append(b"data: " + msgspec.json.encode(reset) + b"\n\n")
                    head.extend(c for item in replay if (c := frame(item)) is not None)
                    yield b"".join(head)
                    while True:
                        try:
                            batch = await asyncio.wait_for(listener.next_batch(), settings.sse_heartbeat_s)
                        except TimeoutError:
                            yield b": keepalive\n\n"
                            continue
                        if not batch:
                            return
                        chunks = [c for item in batch if (c := frame(item)) is not None]
                        if chunks:
                            yield b"".join(chunks)
                finally:
                    host.hub.unlisten(listener)

            return StreamingResponse(
                stream(),
                media_type="text/event-stream",
                headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
            )

        return route

    routes = [
        Route("/health", handler(health), methods=["GET"]),
        Route("/", handler(page), methods=["GET"]),
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
        Route("/sessions/{session}/queue_policy", handler(set_queue_policy), methods=["PUT", "POST"]),
        Route("/actions", handler(get_actions), methods=["GET"]),
        Route("/actions/{action_id}/confirm", handler(confirm_action), methods=["POST"]),
        Route("/statistics", handler(get_statistics), methods=["GET"]),
        Route("/close", handler(close), methods=["POST"]),
        Route("/shutdown", handler(shutdown), methods=["POST"]),
        Route("/directories", handler(directories), methods=["POST"]),
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
    return Guard(app, settings)


# --- running it ---------------------------------------------------------------------------------


def bind(host: str, port: int) -> socket.socket:
    """A listening socket (port 0: a free one)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host.strip("[]"), port))
    sock.listen(512)
    sock.setblocking(False)
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
        self._server = uvicorn_server(create_app(host, self.settings))
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
        self._server.should_exit = True
        self._thread.join(timeout)
        self._sock.close()

    def __enter__(self) -> ServerThread:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
