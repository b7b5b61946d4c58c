"""Caches over the wire: the load and dispose hooks of a host that keeps its caches in another process.

A host that reaches the supervisor over HTTP or stdio (a TypeScript backend, say) owns caches of its
own -- providers, config, file watchers, language servers -- one set per instance (directory,
generation). ``RemoteCaches`` is the ``InstanceHooks`` such a host's supervisor is started with: once
the host has registered (``POST /instances/hooks``, stdio ``register_hooks``), each load and each
dispose of an instance is a request published on the event stream (``instance.load_requested``,
``instance.dispose_requested``, with a ``request_id``, the directory, the generation and the
``budget_ms`` it has) that the hook then waits for the host to acknowledge (``POST
/instances/hooks/acks/{request_id}``, stdio ``ack_hook``), optionally with an ``error``.

The hook runs on the instance's hook thread like any in-process hook, so everything the supervisor
does with hooks holds unchanged: generations, lazy reload (a reload's next generation is asked for
only once the old one's dispose was acknowledged, or a run needs it), deferred closes, and the
budgets. A load not acknowledged within ``load_budget_ms`` counts as failed (the runs that need it
fail naming it); a dispose not acknowledged within ``dispose_budget_ms`` is reported as an in-process
hook that overran is: ``instance.closed`` carries ``the dispose hook overran its N ms budget``, the
next generation may load, and while the acknowledgement is still missing a shutdown names the hook in
``overran`` (``the dispose hook of /w/a (generation 1)``). A late acknowledgement is still taken
(``on_time: false``): it ends the hook, as a late return ends an in-process one.

With nobody registered, a load keeps nothing and a dispose has nothing to ask: the supervisor behaves
as with ``NoInstanceHooks``. A dispose is asked only of generations whose load was asked (and
acknowledged without an error) of a registered host. One host is registered at a time: a second
registration replaces the first (a host that restarted takes over its predecessor's outstanding
requests: the registration's answer lists them, ``pending``). Unregistering fails the outstanding
requests at once (a load fails, a dispose closes with that error); so does the end of a stdio session
(stdin or stdout closed), since nothing can acknowledge them any more.

A registration has a lease, as an external run has (``lease_ms`` in the registration; over HTTP by
default ``serve --lease-ms``, 30 s; over stdio none unless given, the session's end being the host's
end): each renewal (``POST /instances/hooks/{registration}/renew``, stdio ``renew_hooks``) and each
acknowledgement renews it. A host that crashed without unregistering is unregistered when its lease
runs out, so later loads and disposes ask nothing instead of each waiting out its budget; its
outstanding requests fail then, naming the lease.
"""

from __future__ import annotations

import collections
import itertools
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import msgspec

from run_supervisor.actors._api import SupervisorConfig
from run_supervisor.actors._instance_actor import hook_deadline
from run_supervisor.actors.hosts._external import MAX_LEASE_MS, MIN_LEASE_MS
from run_supervisor.actors.hosts._wire import HostError
from run_supervisor.protocol import RejectCode

__all__ = [
    "CacheAck",
    "DisposeRequested",
    "HookAckBody",
    "HookRequest",
    "HooksRegisterBody",
    "HooksRegistered",
    "HooksRenewed",
    "HooksState",
    "HooksUnregistered",
    "LoadRequested",
    "LoadedInstance",
    "RemoteCacheError",
    "RemoteCaches",
    "RemoteInstance",
    "ack_fields",
    "register_fields",
]

_INVALID = RejectCode.INVALID_REQUEST.value
_REMEMBER_ACKED = 1000
"""Acknowledged request ids kept, so a retried acknowledgement (its answer was lost) is answered
``repeated: true`` instead of ``not_found``."""
MAX_NAME = 200
MAX_ERROR = 4000


class RemoteCacheError(Exception):
    """What a remote load or dispose raises: the host acknowledged it with an error, or went away."""


@dataclass(frozen=True, slots=True)
class RemoteInstance:
    """What ``RunContext.instance()`` returns for an instance a registered host loaded."""

    directory: str
    generation: int
    registration: str


# --- what goes over the wire ------------------------------------------------------------------------


class _Request(msgspec.Struct, frozen=True, tag_field="type", kw_only=True, forbid_unknown_fields=True):
    request_id: str
    """Acknowledge with this id (``POST /instances/hooks/acks/{request_id}``, stdio ``ack_hook``)."""
    registration: str
    """The registration it was asked of."""
    directory: str
    generation: int
    budget_ms: int
    """How long the acknowledgement may take (``load_budget_ms`` / ``dispose_budget_ms``)."""
    seq: int = 0
    """Set by the event hub when it publishes the request (the supervisor event it follows)."""


class LoadRequested(_Request, frozen=True, tag="instance.load_requested"):
    """Build this instance's caches, then acknowledge (with ``error`` if they could not be built)."""


class DisposeRequested(_Request, frozen=True, tag="instance.dispose_requested"):
    """Tear this instance's caches down, then acknowledge."""


HookRequest = LoadRequested | DisposeRequested


class HooksRegisterBody(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A registration's body (``POST /instances/hooks``; stdio ``register_hooks``); it may be empty."""

    name: str | None = None
    """What the host calls itself (shown by ``GET /instances/hooks``), 1 to 200 characters."""
    lease_ms: int | None = None
    """The registration's lease (50 ms to 1 h): renew it (``renew``, or any acknowledgement) within
    it, or the registration ends as if unregistered. Null: the host's default (HTTP: ``serve
    --lease-ms``; stdio: none, the session's end is the host's)."""


class HookAckBody(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """An acknowledgement's body (``POST /instances/hooks/acks/{request_id}``; stdio ``ack_hook``
    with ``request_id``); it may be empty."""

    error: str | None = None
    """Null: loaded (or disposed). Else why not, 1 to 4000 characters: a load fails with it (the
    runs that need the instance fail naming it), a dispose closes the instance with it."""


class HooksRegistered(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The answer to a registration."""

    result: Literal["ok"] = "ok"
    registration: str
    name: str | None
    load_budget_ms: int
    dispose_budget_ms: int
    replaced: str | None
    """The registration this one replaced, if any (its outstanding requests are now this one's)."""
    pending: tuple[HookRequest, ...]
    """Requests already waiting for an acknowledgement (a predecessor's), oldest first."""
    lease_ms: int | None
    """Its lease (null: none): renew within it."""


class HooksRenewed(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The answer to a renewal: the registration holds for another ``lease_ms``."""

    result: Literal["ok"] = "ok"
    registration: str
    lease_ms: int | None


class HooksUnregistered(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    result: Literal["ok"] = "ok"
    registration: str
    failed: tuple[str, ...]
    """The outstanding requests that failed with it (their loads failed, their disposes closed with
    that error)."""


class CacheAck(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The answer to an acknowledgement."""

    result: Literal["ok"] = "ok"
    request_id: str
    on_time: bool
    """False: it came after the request's budget (a load counted failed already; a dispose was
    reported as overran), but it still ended the hook."""
    repeated: bool = False
    """The request had been acknowledged already (a retry whose first answer was lost)."""


class LoadedInstance(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    directory: str
    generation: int


class HooksState(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``GET /instances/hooks`` (stdio ``query`` ``hooks``)."""

    registration: str | None
    name: str | None
    load_budget_ms: int
    dispose_budget_ms: int
    pending: tuple[HookRequest, ...]
    loaded: tuple[LoadedInstance, ...]
    """Generations whose load the host acknowledged and whose dispose it has not (yet)."""
    lease_ms: int | None
    """The registration's lease (null: none, or nobody registered)."""


# --- the hooks --------------------------------------------------------------------------------------


class _Pending:
    __slots__ = ("deadline", "done", "error", "request")

    def __init__(self, request: HookRequest, deadline: float | None) -> None:
        self.request = request
        self.deadline = deadline if deadline is not None else time.monotonic() + request.budget_ms / 1000.0
        self.done = threading.Event()
        self.error: str | None = None


class RemoteCaches:
    """``InstanceHooks`` whose load and dispose are asked of a registered out-of-process host (see
    the module's docstring). Give it to ``Supervisor.start(hooks=...)`` and to ``WireHost(caches=...)``
    (which publishes its requests on the event stream and sets the budgets from the supervisor's
    config); ``close()`` once the supervisor has shut down releases any hook still waiting for an
    acknowledgement."""

    def __init__(
        self,
        *,
        load_budget_ms: int = 5000,
        dispose_budget_ms: int = 1000,
        default_lease_ms: int | None = None,
    ) -> None:
        self.load_budget_ms = load_budget_ms
        self.dispose_budget_ms = dispose_budget_ms
        self.default_lease_ms = default_lease_ms
        """A registration's lease when it names none (None: no lease); ``serve`` gives its
        ``--lease-ms``."""
        self._lease_ms: int | None = None
        self._lease_until: float | None = None  # monotonic; None: no lease
        self._lock = threading.Lock()
        self._publish: Callable[[dict[str, Any]], object] | None = None
        self._registration: str | None = None
        self._name: str | None = None
        self._pending: dict[str, _Pending] = {}
        self._acked: collections.OrderedDict[str, bool] = collections.OrderedDict()
        self._loaded: dict[tuple[str, int], str] = {}  # acknowledged loads not yet disposed
        self._closed = False
        self._prefix = secrets.token_hex(3)
        self._ids = itertools.count(1)

    def attach(self, publish: Callable[[dict[str, Any]], object], config: SupervisorConfig) -> None:
        """Where requests are published (the wire host's event hub), and the budgets they get (those
        of the supervisor these hooks were given to, which enforces them)."""
        with self._lock:
            self._publish = publish
            self.load_budget_ms = config.load_budget_ms
            self.dispose_budget_ms = config.dispose_budget_ms

    # --- InstanceHooks (on the instance's hook thread) ------------------------------------------

    def load(self, directory: str, generation: int) -> RemoteInstance | None:
        """Ask the registered host to load (nothing to ask: keep nothing) and wait for its
        acknowledgement; raises ``RemoteCacheError`` when it answered with an error or went away."""
        # Late or not by the supervisor's own deadline: an ack that comes after it counted the load
        # failed (and answered so) is never told it was on time.
        pending = self._ask(LoadRequested, directory, generation, self.load_budget_ms, hook_deadline())
        if pending is None:
            return None
        self._wait(pending)
        if pending.error is not None:
            raise RemoteCacheError(pending.error)
        with self._lock:
            self._loaded[(directory, generation)] = pending.request.registration
        return RemoteInstance(directory, generation, pending.request.registration)

    def dispose(self, directory: str, generation: int, cache: Any) -> None:
        """Ask the registered host to dispose a generation it loaded, and wait for its
        acknowledgement (a generation loaded while nobody was registered has nothing to ask)."""
        if not isinstance(cache, RemoteInstance):
            return
        pending = self._ask(DisposeRequested, directory, generation, self.dispose_budget_ms, hook_deadline())
        if pending is None:  # the host went away: nobody to ask
            with self._lock:
                self._loaded.pop((directory, generation), None)
            return
        self._wait(pending)
        with self._lock:
            self._loaded.pop((directory, generation), None)
        if pending.error is not None:
            raise RemoteCacheError(pending.error)

    def _ask(
        self,
        kind: type[LoadRequested] | type[DisposeRequested],
        directory: str,
        generation: int,
        budget: int,
        deadline: float | None = None,
    ) -> _Pending | None:
        with self._lock:
            self._lapse()
            if self._closed or self._registration is None:
                return None
            request = kind(
                request_id=f"{self._prefix}-{next(self._ids)}",
                registration=self._registration,
                directory=directory,
                generation=generation,
                budget_ms=budget,
            )
            pending = _Pending(request, deadline)
            self._pending[request.request_id] = pending
            publish = self._publish
        if publish is not None:
            payload: dict[str, Any] = msgspec.to_builtins(request)
            del payload["seq"]  # the hub sets it: the supervisor event this request follows
            publish(payload)
        return pending

    def _wait(self, pending: _Pending) -> None:
        # Until acknowledged, unregistered, closed or the registration's lease ran out. Past the budget
        # the supervisor has moved on already (a load counted failed, a dispose reported as overran);
        # this thread is then the host code still running that a shutdown names in ``overran``, as an
        # in-process hook would be.
        while not pending.done.wait(self._until_lapse()):
            with self._lock:
                self._lapse()

    def _until_lapse(self) -> float | None:
        until = self._lease_until
        return None if until is None else max(0.0, until - time.monotonic()) + 0.001

    def _lapse(self) -> None:  # under the lock
        """End a registration whose lease ran out (as ``unregister`` would)."""
        if self._lease_until is not None and time.monotonic() > self._lease_until:
            self._drop(
                f"the cache host's lease ran out ({self._lease_ms} ms without a renewal or an "
                "acknowledgement)"
            )

    def _renew(self) -> None:  # under the lock
        if self._lease_ms is not None:
            self._lease_until = time.monotonic() + self._lease_ms / 1000.0

    # --- for the hosts (any thread; never blocks) -----------------------------------------------

    def register(self, name: str | None = None, *, lease_ms: int | None = None) -> HooksRegistered:
        """Register the host (replacing any registration): from now on loads and disposes are asked
        of it, starting with the requests still outstanding, which the answer lists. ``lease_ms``:
        renew (``renew``, or any acknowledgement) within it, or the registration ends (None: the
        ``default_lease_ms``)."""
        with self._lock:
            if self._closed:
                raise HostError(RejectCode.SUPERVISOR_CLOSED.value, "the supervisor has shut down")
            self._lapse()
            replaced = self._registration
            self._registration = f"hooks-{secrets.token_hex(6)}"
            self._name = name
            self._lease_ms = self.default_lease_ms if lease_ms is None else lease_ms
            self._lease_until = None
            self._renew()
            pending = tuple(p.request for p in self._pending.values())
            return HooksRegistered(
                registration=self._registration,
                name=name,
                load_budget_ms=self.load_budget_ms,
                dispose_budget_ms=self.dispose_budget_ms,
                replaced=replaced,
                pending=pending,
                lease_ms=self._lease_ms,
            )

    def renew(self, registration: str) -> HooksRenewed:
        """The host is alive: its registration holds for another lease."""
        with self._lock:
            self._lapse()
            self._current(registration)
            self._renew()
            return HooksRenewed(registration=registration, lease_ms=self._lease_ms)

    def _current(self, registration: str) -> None:  # under the lock
        if registration != self._registration:
            current = "none is" if self._registration is None else f"{self._registration!r} is"
            raise HostError("not_found", f"no registration {registration!r} ({current} current)")

    def unregister(self, registration: str, *, why: str = "unregistered") -> HooksUnregistered:
        """End the registration: its outstanding requests fail at once, and nothing more is asked
        (loads keep nothing, disposes have nobody to ask)."""
        with self._lock:
            self._lapse()
            self._current(registration)
            failed = self._drop(f"the cache host {why} before acknowledging")
        return HooksUnregistered(registration=registration, failed=failed)

    def leave(self, why: str) -> None:
        """The host can acknowledge nothing more (a stdio session whose stdin or stdout closed):
        end any registration as ``unregister`` does."""
        with self._lock:
            if self._registration is not None:
                self._drop(f"the cache host could not acknowledge ({why})")

    def _drop(self, error: str) -> tuple[str, ...]:  # under the lock
        self._registration = None
        self._name = None
        self._lease_ms = self._lease_until = None
        failed = tuple(self._pending)
        for pending in self._pending.values():
            pending.error = f"{error} (request {pending.request.request_id})"
            pending.done.set()
        self._pending.clear()
        return failed

    def ack(self, request_id: str, error: str | None = None) -> CacheAck:
        """The host has loaded or disposed (``error``: it could not)."""
        with self._lock:
            pending = self._pending.pop(request_id, None)
            if pending is None:
                if request_id in self._acked:
                    return CacheAck(request_id=request_id, on_time=self._acked[request_id], repeated=True)
                raise HostError(
                    "not_found", f"no hook request {request_id!r} is waiting for an acknowledgement"
                )
            on_time = time.monotonic() <= pending.deadline
            if pending.request.registration == self._registration:
                self._renew()  # an acknowledgement says the host is alive
            self._acked[request_id] = on_time
            while len(self._acked) > _REMEMBER_ACKED:
                self._acked.popitem(last=False)
        pending.error = error
        pending.done.set()
        return CacheAck(request_id=request_id, on_time=on_time)

    def state(self) -> HooksState:
        with self._lock:
            self._lapse()
            return HooksState(
                registration=self._registration,
                name=self._name,
                load_budget_ms=self.load_budget_ms,
                dispose_budget_ms=self.dispose_budget_ms,
                pending=tuple(p.request for p in self._pending.values()),
                loaded=tuple(LoadedInstance(directory=d, generation=g) for d, g in sorted(self._loaded)),
                lease_ms=self._lease_ms,
            )

    def close(self) -> None:
        """After the supervisor's shutdown: release every hook still waiting (each fails), and
        ask nothing more."""
        with self._lock:
            self._closed = True
            self._drop("the host closed")


# --- the operations' fields (shared by HTTP and stdio) ----------------------------------------------


def _caches(caches: RemoteCaches | None) -> RemoteCaches:
    if caches is None:
        raise HostError(
            "not_found", "this host keeps no remote caches (its supervisor was not started with RemoteCaches)"
        )
    return caches


def _text(fields: dict[str, Any], key: str, limit: int) -> str | None:
    value = fields.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value or len(value) > limit:
        raise HostError(_INVALID, f"{key} must be null or a string of 1 to {limit} characters")
    return value


def _only(fields: dict[str, Any], allowed: tuple[str, ...], where: str) -> None:
    unknown = sorted(set(fields) - set(allowed))
    if unknown:
        raise HostError(_INVALID, f"{where} takes no field {', '.join(f'`{name}`' for name in unknown)}")


def register_fields(caches: RemoteCaches | None, fields: dict[str, Any], where: str) -> HooksRegistered:
    """A registration's body: ``{"name": str | null, "lease_ms": int | null}`` (both optional)."""
    _only(fields, ("name", "lease_ms"), where)
    lease = fields.get("lease_ms")
    if lease is not None and (
        not isinstance(lease, int) or isinstance(lease, bool) or not MIN_LEASE_MS <= lease <= MAX_LEASE_MS
    ):
        raise HostError(
            _INVALID, f"lease_ms must be null or an integer from {MIN_LEASE_MS} to {MAX_LEASE_MS}"
        )
    return _caches(caches).register(_text(fields, "name", MAX_NAME), lease_ms=lease)


def renew_fields(caches: RemoteCaches | None, registration: Any) -> HooksRenewed:
    if not isinstance(registration, str) or not registration:
        raise HostError(_INVALID, "registration must be a non-empty string")
    return _caches(caches).renew(registration)


def unregister_fields(caches: RemoteCaches | None, registration: Any) -> HooksUnregistered:
    if not isinstance(registration, str) or not registration:
        raise HostError(_INVALID, "registration must be a non-empty string")
    return _caches(caches).unregister(registration)


def ack_fields(caches: RemoteCaches | None, request_id: Any, fields: dict[str, Any], where: str) -> CacheAck:
    """An acknowledgement's body: ``{"error": str | null}`` (optional; null: done)."""
    _only(fields, ("error",), where)
    if not isinstance(request_id, str) or not request_id:
        raise HostError(_INVALID, "request_id must be a non-empty string")
    return _caches(caches).ack(request_id, _text(fields, "error", MAX_ERROR))


def state_of(caches: RemoteCaches | None) -> HooksState:
    return _caches(caches).state()


# --- the HTTP routes (Starlette is imported here only: stdio needs no server extra) -----------------


def http_routes(
    caches: RemoteCaches | None,
    handler: Callable[[Callable[[Any], Any]], Any],
    body: Callable[[Any], Any],
) -> list[Any]:
    """``POST /instances/hooks`` (register), ``GET /instances/hooks`` (state), ``DELETE
    /instances/hooks/{registration}`` (unregister) and ``POST /instances/hooks/acks/{request_id}``
    (acknowledge); ``handler`` wraps a route as the app's others are, ``body`` reads a JSON object."""
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    def _answer(value: msgspec.Struct) -> Response:
        return Response(msgspec.json.encode(value), media_type="application/json")

    async def register(request: Request) -> Response:
        return _answer(register_fields(caches, await body(request), "POST /instances/hooks"))

    async def state(request: Request) -> Response:
        return _answer(state_of(caches))

    async def unregister(request: Request) -> Response:
        return _answer(unregister_fields(caches, request.path_params["registration"]))

    async def renew(request: Request) -> Response:
        _only(await body(request), (), f"POST {request.url.path}")
        return _answer(renew_fields(caches, request.path_params["registration"]))

    async def ack(request: Request) -> Response:
        where = f"POST {request.url.path}"
        return _answer(ack_fields(caches, request.path_params["request_id"], await body(request), where))

    return [
        Route("/instances/hooks", handler(register), methods=["POST"]),
        Route("/instances/hooks", handler(state), methods=["GET"]),
        Route("/instances/hooks/{registration}", handler(unregister), methods=["DELETE"]),
        Route("/instances/hooks/{registration}/renew", handler(renew), methods=["POST"]),
        Route("/instances/hooks/acks/{request_id}", handler(ack), methods=["POST"]),
    ]


# --- the stdio operations ---------------------------------------------------------------------------

STDIO_OPS = ("register_hooks", "unregister_hooks", "renew_hooks", "ack_hook")
"""The stdio operations of this module (``query`` ``what: hooks`` reads the state)."""


def stdio_op(caches: RemoteCaches | None, kind: str, fields: dict[str, Any]) -> msgspec.Struct:
    """``{"type": "register_hooks", "name"?}``, ``{"type": "unregister_hooks", "registration"}``,
    ``{"type": "renew_hooks", "registration"}``, ``{"type": "ack_hook", "request_id", "error"?}``
    (``fields`` without ``type`` and ``id``)."""
    fields = {k: v for k, v in fields.items() if k != "type"}
    if kind == "register_hooks":
        return register_fields(caches, fields, "register_hooks")
    if kind == "unregister_hooks":
        _only(fields, ("registration",), "unregister_hooks")
        return unregister_fields(caches, fields.get("registration"))
    if kind == "renew_hooks":
        _only(fields, ("registration",), "renew_hooks")
        return renew_fields(caches, fields.get("registration"))
    request_id = fields.pop("request_id", None)
    return ack_fields(caches, request_id, fields, "ack_hook")
