"""The HTTP host's own answer bodies (besides the protocol's outcomes and snapshots), as types.

The routes encode these structs, and the OpenAPI document (``_openapi``) is generated from them, so
what the document says a route answers is what the route builds. Native routes are snake_case and say
``result``; the seed-compatible ones (``/global/dispose``, ``/instance/*``, ``/event``) keep upstream's
camelCase and ``status`` (they exist for upstream's clients).
"""

from __future__ import annotations

from typing import Literal

import msgspec

from run_supervisor.protocol import CoreStatistics, RejectCode, RequestResult

__all__ = [
    "CompatCloseAnswer",
    "CompatEvent",
    "DirectoriesAnswer",
    "DirectoriesBody",
    "GlobalDisposed",
    "GlobalDisposedProperties",
    "Health",
    "HostStatistics",
    "InstanceDisposed",
    "InstanceDisposedProperties",
    "ReadyLine",
    "Refusal",
    "ServerConnected",
    "ServerConnectedProperties",
    "StartedRun",
    "Ticket",
]


class Refusal(msgspec.Struct, frozen=True, kw_only=True):
    """A request the host refused before the supervisor saw it (or a contained failure): the status
    is ``code``'s (``STATUS_BY_CODE``)."""

    result: Literal["rejected"] = "rejected"
    code: RejectCode
    error: str


class Health(msgspec.Struct, frozen=True, kw_only=True):
    """``GET /health``: ``closed`` once the supervisor has shut down."""

    status: Literal["ok", "closed"]


class StartedRun(msgspec.Struct, frozen=True, kw_only=True):
    """``POST /runs``: the start's outcome, with the run's id and lease (both null when refused: no
    run exists to report to)."""

    result: RequestResult
    error: str | None = None
    code: RejectCode | None = None
    run_id: str | None = None
    lease_ms: int | None = None


class DirectoriesBody(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``POST /directories``: make directories known, and load their instances unless ``load`` is false."""

    directories: tuple[str, ...]
    load: bool = True


class DirectoriesAnswer(msgspec.Struct, frozen=True, kw_only=True):
    result: Literal["ok"] = "ok"
    directories: tuple[str, ...] = ()
    loaded: bool = True


class HostStatistics(CoreStatistics, frozen=True, kw_only=True):
    """``GET /statistics``: the core's counters, and the host's own."""

    stall_after_ms: int | None = None
    external_runs: int = 0
    sse_listeners: int = 0
    events_buffered: int = 0


class Ticket(msgspec.Struct, frozen=True, kw_only=True):
    """``POST /events/ticket``: a single-use ticket for one ``GET /events?ticket=`` (or ``/event``),
    valid ``expires_in_ms`` from now: a browser's ``EventSource`` cannot send a header."""

    result: Literal["ok"] = "ok"
    ticket: str
    expires_in_ms: int


class CompatCloseAnswer(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """Seed 002's answer to ``/global/dispose`` and ``/instance/*`` (upstream's camelCase)."""

    status: Literal["completed", "deferred"]
    lifecycle_action_id: str | None = msgspec.field(name="lifecycleActionID", default=None)
    affected_directory_keys: tuple[str, ...] = ()


class ServerConnectedProperties(msgspec.Struct, frozen=True, kw_only=True):
    pass


class ServerConnected(msgspec.Struct, frozen=True, tag="server.connected", tag_field="type", kw_only=True):
    """The first event of every ``GET /event`` stream (seed 002's)."""

    properties: ServerConnectedProperties = ServerConnectedProperties()


class GlobalDisposedProperties(msgspec.Struct, frozen=True, kw_only=True):
    lifecycle_action_id: str = msgspec.field(name="lifecycleActionID")
    client_action_id: str | None = msgspec.field(name="clientActionID", default=None)


class GlobalDisposed(msgspec.Struct, frozen=True, tag="global.disposed", tag_field="type", kw_only=True):
    """A ``dispose_all`` completed (deferred or not): its action and the client's own action id."""

    properties: GlobalDisposedProperties


class InstanceDisposedProperties(msgspec.Struct, frozen=True, kw_only=True):
    directory: str
    generation: int


class InstanceDisposed(
    msgspec.Struct, frozen=True, tag="server.instance.disposed", tag_field="type", kw_only=True
):
    """An instance closed (its directory and generation)."""

    properties: InstanceDisposedProperties


CompatEvent = ServerConnected | GlobalDisposed | InstanceDisposed
"""What ``GET /event`` (seed 002's stream) sends, besides ``stream.reset``."""


class ReadyLine(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """The one line ``run-supervisor serve`` prints on stdout once it accepts connections. ``token``
    only when the server generated it (none was given)."""

    ready: Literal[True]
    url: str
    port: int
    pid: int
    reload_policy: str
    token: str | None = None
