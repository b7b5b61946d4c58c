"""What the HTTP and stdio hosts share: one way to submit, report and query, one status table.

Every request goes through ``Supervisor.submit`` (never raises; a rejection is an outcome) and is
awaited with ``asyncio.wrap_future``, so no host ever blocks its event loop on the supervisor. A run
started from outside Python has no Python body: it is an external run (see ``_external``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec

from run_supervisor.actors._api import Supervisor
from run_supervisor.actors._errors import SupervisorClosed, SupervisorError
from run_supervisor.actors.hosts._answers import CompatCloseAnswer
from run_supervisor.actors.hosts._external import (
    DEFAULT_LEASE_MS,
    ExternalReport,
    ExternalRuns,
    ReportOutcome,
)
from run_supervisor.actors.hosts._hub import EventHub
from run_supervisor.protocol import (
    CloseAction,
    CloseMode,
    CloseOutcome,
    CloseResult,
    ProtocolDecodeError,
    RejectCode,
    Request,
    RequestOutcome,
    RunFinished,
    StartRun,
    decode_request,
)

if TYPE_CHECKING:
    from run_supervisor.actors.hosts._remote_caches import RemoteCaches

__all__ = ["STATUS_BY_CODE", "HostError", "WireHost", "approved_spelling", "http_status"]

T = TypeVar("T")

COMPAT_ORIGIN = {
    CloseAction.DISPOSE_ALL: "global.dispose",
    CloseAction.DISPOSE: "instance.dispose",
    CloseAction.RELOAD: "instance.reload",
}
"""The origin of seed 002's closes when the client names none (``x-opencode-client-action-kind``)."""

STATUS_BY_CODE: dict[str | None, int] = {
    None: 200,
    RejectCode.UNKNOWN_RUN: 404,
    RejectCode.UNKNOWN_DIRECTORY: 404,
    RejectCode.RUN_FINISHED: 409,
    RejectCode.RUN_ALREADY_EXISTS: 409,
    RejectCode.ALREADY_INTERRUPTING: 409,
    RejectCode.NOTHING_PENDING: 409,
    RejectCode.UNKNOWN_ASK: 404,
    RejectCode.ASK_WITHDRAWN: 409,
    RejectCode.ASK_ALREADY_ANSWERED: 409,
    RejectCode.SESSION_BUSY: 409,
    RejectCode.UNKNOWN_ACTION: 404,
    RejectCode.ACTION_ALREADY_COMPLETED: 409,
    RejectCode.NOT_CONFIRMABLE: 409,
    RejectCode.INVALID_REQUEST: 422,
    RejectCode.SUPERVISOR_CLOSED: 503,
    RejectCode.INTERNAL_ERROR: 500,
    # What the hosts themselves refuse (same body shape: result, code, error).
    "not_found": 404,
    "unauthorized": 401,
    "forbidden": 403,
    "too_large": 413,
    "timeout": 504,
}
"""The one table from a rejection's code to an HTTP status; an accepted request is 200."""


def http_status(code: str | None) -> int:
    return STATUS_BY_CODE.get(code, 500)


def approved_spelling(fields: dict[str, Any]) -> dict[str, Any]:
    """A permission reply's fields with its decision spelt ``approved``, as the request and the events
    (``ask.replied``, ``external.answer``) spell it: ``approve``, the old name, is taken as a deprecated
    spelling on every entry (the reply routes, ``POST /requests``, stdio). Both at once: refused."""
    if "approve" not in fields:
        return fields
    if "approved" in fields:
        raise HostError(RejectCode.INVALID_REQUEST.value, "give `approved` (or the old `approve`), not both")
    renamed = {**fields, "approved": fields["approve"]}
    del renamed["approve"]
    return renamed


class HostError(Exception):
    """A request a host refuses before the supervisor sees it (malformed, unknown route...)."""

    def __init__(self, code: str, error: str) -> None:
        super().__init__(error)
        self.code = code
        self.error = error

    def body(self) -> dict[str, Any]:
        return {"result": CloseResult.REJECTED.value, "code": self.code, "error": self.error}


class WireHost:
    """A supervisor as the wire hosts see it: requests, external runs, queries and the event hub."""

    def __init__(
        self,
        supervisor: Supervisor,
        *,
        buffer: int = 10_000,
        default_lease_ms: int = DEFAULT_LEASE_MS,
        caches: RemoteCaches | None = None,
    ) -> None:
        self.supervisor = supervisor
        self.default_lease_ms = default_lease_ms
        self.hub = EventHub(supervisor, capacity=buffer)
        self.external = ExternalRuns(supervisor, self.hub.publish)
        self.caches = caches
        """The hooks the supervisor was started with when they are ``RemoteCaches`` (an
        out-of-process host's caches, see ``_remote_caches``): their requests go out on the hub."""
        if caches is not None:
            caches.attach(self.hub.publish, supervisor.config)
        self.hub.observe(self._observe)

    def _observe(self, event: object) -> None:
        if isinstance(event, RunFinished):
            self.external.finished(event.run_id)

    @property
    def _limit(self) -> float:
        config = self.supervisor.config
        return config.request_timeout_s + config.default_grace_ms / 1000.0 + config.dispose_budget_ms / 1000.0

    async def _await(self, future: Future[T]) -> T:
        try:
            return await asyncio.wait_for(asyncio.wrap_future(future), self._limit)
        except TimeoutError:
            future.cancel()
            raise HostError("timeout", f"the supervisor did not answer within {self._limit:g} s") from None

    async def submit(self, request: Request, *, lease_ms: int | None = None) -> CloseOutcome | RequestOutcome:
        """Submit any protocol request; a ``start_run`` starts an external run."""
        if isinstance(request, StartRun):  # a lease of 0 is refused by the start, never taken as "none"
            lease = self.default_lease_ms if lease_ms is None else lease_ms
            future = self.external.start(request, lease_ms=lease)
        else:
            future = self.supervisor.submit(request)
        outcome: CloseOutcome | RequestOutcome = await self._await(future)
        return outcome

    async def compat_close(
        self,
        do: CloseAction,
        *,
        mode: str | None = None,
        origin: str | None = None,
        tag: str | None = None,
        directory: str | None = None,
    ) -> CloseOutcome | CompatCloseAnswer:
        """Seed 002's ``global.dispose`` / ``instance.dispose`` / ``instance.reload`` (HTTP's compatible
        routes and stdio's operations of the same names): a close in mode ``maintenance`` unless told,
        answered in upstream's shape -- or the close's own outcome when it is rejected."""
        fields: dict[str, Any] = {
            "type": "close",
            "do": do.value,
            "mode": mode or CloseMode.MAINTENANCE.value,
            "origin": origin or COMPAT_ORIGIN[do],
        }
        if tag:
            fields["tag"] = tag
        if do is not CloseAction.DISPOSE_ALL:
            if not directory:
                raise HostError(RejectCode.INVALID_REQUEST.value, "name the directory")
            await self.directories((directory,), load=False)  # an unloaded directory closes at once
            fields["directories"] = [directory]
        try:
            request = decode_request(msgspec.json.encode(fields))
        except ProtocolDecodeError as exc:
            raise HostError(RejectCode.INVALID_REQUEST.value, str(exc)) from None
        outcome = await self.submit(request)
        assert isinstance(outcome, CloseOutcome)
        if outcome.code is not None:
            return outcome
        return CompatCloseAnswer(
            status="completed" if outcome.completed else "deferred",
            lifecycle_action_id=outcome.action_id,
            affected_directory_keys=(*outcome.completed_directories, *outcome.pending_directories),
        )

    async def report(self, run_id: str, report: ExternalReport) -> ReportOutcome:
        return await self._await(self.external.report(run_id, report))

    def read(self, read: Callable[[Supervisor], T]) -> T:
        """Read the supervisor's published view (``run``, ``session``, ``pending_actions``,
        ``statistics``): no mailbox hop, never blocks; it stays readable after shutdown."""
        try:
            return read(self.supervisor)
        except SupervisorError as exc:  # a malformed id: the facade's own check
            raise HostError(
                exc.code.value if exc.code else RejectCode.INTERNAL_ERROR.value, str(exc)
            ) from None

    async def directories(self, directories: tuple[str, ...], *, load: bool) -> None:
        """Make directories known (``load=False``) or load their instances now."""
        if any(not d for d in directories):
            raise HostError(RejectCode.INVALID_REQUEST.value, "directories must be non-empty strings")
        try:
            await self._await(self.supervisor._preload_future(directories, load=load))
        except SupervisorClosed as exc:
            raise HostError(RejectCode.SUPERVISOR_CLOSED.value, str(exc)) from None
        except SupervisorError as exc:  # a load hook failed: the directory is known, its instance is not
            raise HostError(RejectCode.INTERNAL_ERROR.value, str(exc)) from None
