"""Shards past one machine: what a PostgreSQL journal URL names, the error of an owner whose lease
was lost, and (for hosts and clients) the owner directory and a coordinator of global closes.

A shard is any key the host names (a workspace, a tenant). Its journal lives in PostgreSQL, and it
is owned through a lease row with a monotonically increasing epoch: the owner renews it, every
journal batch commits only while its epoch is current and unexpired (checked in the same
transaction), and a successor takes the lease -- and recovers the runs it finds unfinished as
``crash`` -- only once the old one expired. See docs/scale-out.md.

Nothing here is imported unless a ``postgresql://`` journal is used; psycopg is imported only by
the functions that talk to the database.
"""

from __future__ import annotations

import json
import math
import re
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Final, Protocol
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from run_supervisor.actors._errors import InvalidRequest, JournalFailed

__all__ = [
    "GlobalClose",
    "JournalTarget",
    "LeaseLost",
    "Owner",
    "OwnerDirectory",
    "ShardOutcome",
    "global_dispose_all",
    "parse_journal_url",
]

DEFAULT_SHARD: Final = "default"
DEFAULT_LEASE_TTL_S: Final = 10.0
NOTIFY_CHANNEL: Final = "run_supervisor_owner"
"""The channel a takeover, a release and a new owner URL are told on (payload: JSON, see Owner)."""
_SHARD_NAME: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:/@-]{0,199}$")
_OURS: Final = ("shard", "lease_ttl", "lease_wait", "owner_url")


class LeaseLost(JournalFailed):
    """The shard's lease is no longer this supervisor's: it could not renew it within its TTL (the
    process was frozen, the database unreachable) or a successor holds a newer epoch. From then on
    the journal writes nothing (every batch checks the epoch in its own transaction), the
    supervisor refuses every request with this error and shuts itself down, and the successor
    recovers the runs it left unfinished as ``crash``. ``shard`` and ``epoch`` name what was lost."""

    def __init__(self, path: str, shard: str, epoch: int, why: str) -> None:
        self.shard = shard
        self.epoch = epoch
        self.why = why
        super().__init__(path, f"lease of shard {shard!r} at epoch {epoch} lost: {why}")

    def __reduce__(self) -> tuple[object, ...]:
        return (LeaseLost, (self.path, self.shard, self.epoch, self.why))


@dataclass(frozen=True, slots=True)
class JournalTarget:
    """A ``postgresql://`` journal URL taken apart: the connection string psycopg is given (our own
    query parameters removed) and the shard's parameters."""

    conninfo: str
    shard: str = DEFAULT_SHARD
    lease_ttl_s: float = DEFAULT_LEASE_TTL_S
    lease_wait_s: float = 0.0
    owner_url: str | None = None
    display: str = ""
    """The URL without its password, for messages."""


def parse_journal_url(url: str) -> JournalTarget:
    """Split ``postgresql://user@host/db?shard=w1&lease_ttl=2&lease_wait=30&owner_url=http://...``.

    ``shard`` (default ``default``) is the key this supervisor owns; ``lease_ttl`` (seconds, default
    10) how long its lease lasts unrenewed; ``lease_wait`` (seconds, default 0) how long a start
    waits for a lease another owner holds before ``JournalLocked``; ``owner_url`` where clients
    reach this owner (published in the owner directory). Every other parameter goes to libpq."""
    parts = urlsplit(url)
    ours: dict[str, str] = {}
    rest: list[tuple[str, str]] = []
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if key in _OURS:
            ours[key] = value
        else:
            rest.append((key, value))
    shard = ours.get("shard", DEFAULT_SHARD)
    if not _SHARD_NAME.match(shard):
        raise InvalidRequest(
            f"journal shard {shard!r}: 1 to 200 characters of letters, digits and _ . : / @ -"
        )
    ttl = _seconds(ours.get("lease_ttl"), DEFAULT_LEASE_TTL_S, "lease_ttl", low=0.2)
    wait = _seconds(ours.get("lease_wait"), 0.0, "lease_wait", low=0.0)
    netloc = parts.netloc
    if "@" in netloc:
        credentials, host = netloc.rsplit("@", 1)
        if ":" in credentials:
            netloc = credentials.split(":", 1)[0] + ":***@" + host
    display_query = parts.query
    return JournalTarget(
        conninfo=urlunsplit((parts.scheme, parts.netloc, parts.path, urlencode(rest), "")),
        shard=shard,
        lease_ttl_s=ttl,
        lease_wait_s=wait,
        owner_url=ours.get("owner_url") or None,
        display=urlunsplit((parts.scheme, netloc, parts.path, display_query, "")),
    )


def _seconds(raw: str | None, default: float, name: str, *, low: float) -> float:
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise InvalidRequest(f"journal {name} must be a number of seconds, not {raw!r}") from None
    if not math.isfinite(value) or value < low or value > 86_400:
        raise InvalidRequest(f"journal {name} must be between {low} and 86400 seconds, not {raw!r}")
    return value


# --- the owner directory ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Owner:
    """A shard's owner as the directory holds it: ``epoch`` counts the leases taken on the shard;
    ``holder`` and ``url`` are None once the owner let it go (a clean shutdown), ``live`` says whether
    the lease is unexpired."""

    shard: str
    epoch: int
    holder: str | None
    url: str | None
    live: bool
    expires_in_s: float


class OwnerDirectory:
    """Who owns which shard, read from the journal's database (the lease rows), and a way to learn
    of a takeover: ``wait_for_change`` returns on the NOTIFY a new owner, a release or a new URL
    sends. A client (or a wire host routing a request) re-resolves a shard's owner with ``owner``
    whenever its owner stops answering or answers from another epoch."""

    def __init__(self, url: str) -> None:
        import psycopg

        self.url = url
        self._target = parse_journal_url(url) if url.startswith(("postgresql://", "postgres://")) else None
        conninfo = self._target.conninfo if self._target is not None else url
        self._db = psycopg.connect(conninfo, autocommit=True)
        self._listening = False
        self._pending: deque[dict[str, Any]] = deque()

    def owner(self, shard: str) -> Owner | None:
        """The shard's owner as the lease table says now (None if no one ever held it)."""
        row = self._db.execute(
            "SELECT shard, epoch, holder, owner_url, expires_at > clock_timestamp(),"
            " EXTRACT(EPOCH FROM expires_at - clock_timestamp()) FROM rs_leases WHERE shard = %s",
            (shard,),
        ).fetchone()
        return None if row is None else _owner(row)

    def owners(self) -> dict[str, Owner]:
        """Every shard's owner as the lease table says now, by shard."""
        rows = self._db.execute(
            "SELECT shard, epoch, holder, owner_url, expires_at > clock_timestamp(),"
            " EXTRACT(EPOCH FROM expires_at - clock_timestamp()) FROM rs_leases ORDER BY shard"
        ).fetchall()
        return {row[0]: _owner(row) for row in rows}

    def listen(self) -> None:
        """Start listening for changes (call before reading what you then wait to see change)."""
        if not self._listening:
            self._db.execute(f"LISTEN {NOTIFY_CHANNEL}")
            self._listening = True

    def wait_for_change(self, timeout: float) -> dict[str, Any] | None:
        """The next change told (``{"shard", "epoch", "holder", "url", "what"}``: ``what`` is
        ``acquired``, ``url``, ``released`` or ``abandoned``), or None after ``timeout`` seconds."""
        self.listen()
        if not self._pending:
            # stop_after=1 may still yield more (those that came in the same packet): keep them all
            for note in self._db.notifies(timeout=timeout, stop_after=1):
                self._pending.append(json.loads(note.payload))
        return self._pending.popleft() if self._pending else None

    def close(self) -> None:
        """Close the directory's database connection."""
        self._db.close()

    def __enter__(self) -> OwnerDirectory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _owner(row: tuple[Any, ...]) -> Owner:
    shard, epoch, holder, url, live, left = row
    return Owner(
        shard=str(shard),
        epoch=int(epoch),
        holder=holder,
        url=url,
        live=bool(live),
        expires_in_s=max(0.0, float(left or 0.0)),
    )


# --- a global close: scatter to every shard's owner, gather every outcome ---------------------------------


@dataclass(frozen=True, slots=True)
class ShardOutcome:
    """One shard's part of a global close: ``result`` as its owner answered (``completed``,
    ``deferred``, ``rejected``...), ``completed`` once that shard's close has completed (a deferred
    one when its runs ended), ``error`` if the shard could not be reached or did not complete by the
    deadline. ``epoch`` is the owner's lease epoch the close was sent to."""

    shard: str
    epoch: int | None
    action_id: str | None
    result: str | None
    completed: bool
    error: str | None = None
    answered_ms: float = 0.0
    completed_ms: float | None = None


@dataclass(slots=True)
class GlobalClose:
    """The structured result of a global close: every shard's outcome, and whether all completed.
    Returned (and ``on_complete`` called) once, when every shard's close completed or the one
    absolute deadline passed."""

    action_id: str
    shards: dict[str, ShardOutcome] = field(default_factory=dict)
    completed: bool = False
    elapsed_ms: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """The result as plain JSON-ready data."""
        return {
            "action_id": self.action_id,
            "completed": self.completed,
            "elapsed_ms": round(self.elapsed_ms, 3),
            "shards": {
                name: {
                    "epoch": o.epoch,
                    "action_id": o.action_id,
                    "result": o.result,
                    "completed": o.completed,
                    "error": o.error,
                    "answered_ms": round(o.answered_ms, 3),
                    "completed_ms": None if o.completed_ms is None else round(o.completed_ms, 3),
                }
                for name, o in sorted(self.shards.items())
            },
        }


@dataclass(frozen=True, slots=True)
class ShardAnswer:
    """A shard owner's answer to the close: its own action id, its result, whether it completed."""

    action_id: str | None
    result: str
    completed: bool
    epoch: int | None = None
    error: str | None = None


class ShardCloser(Protocol):
    """How the coordinator reaches one shard's owner: send the close (``begin``), then wait until
    that close has completed (``wait_completed``, by an absolute ``time.monotonic()`` deadline)."""

    def begin(self, global_id: str) -> ShardAnswer: ...

    def wait_completed(self, answer: ShardAnswer, deadline: float) -> bool: ...


class LocalShard:
    """A shard whose owner is a supervisor of this process."""

    def __init__(self, supervisor: Any, *, origin: str = "global.dispose") -> None:
        from run_supervisor.protocol import LifecycleCompleted

        self._supervisor = supervisor
        self._origin = origin
        self._done: set[str] = set()
        self._changed = threading.Condition()
        self._kind = LifecycleCompleted
        self._subscription: Any = None

    def _seen(self, event: object) -> None:
        if isinstance(event, self._kind):
            with self._changed:
                self._done.add(event.action_id)
                self._changed.notify_all()

    def begin(self, global_id: str) -> ShardAnswer:
        self._subscription = self._supervisor.subscribe(callback=self._seen)  # before: no completion missed
        answer = self._supervisor.close("dispose_all", mode="maintenance", origin=self._origin, tag=global_id)
        return ShardAnswer(
            action_id=answer.action_id,
            result=answer.result.value,
            completed=bool(answer.completed),
            epoch=self._supervisor.epoch,
            error=answer.error,
        )

    def wait_completed(self, answer: ShardAnswer, deadline: float) -> bool:
        try:
            if answer.completed or answer.action_id is None:
                return answer.completed
            with self._changed:
                return self._changed.wait_for(
                    lambda: answer.action_id in self._done, max(0.0, deadline - time.monotonic())
                )
        finally:
            if self._subscription is not None:
                self._subscription.close()


class HttpShard:
    """A shard whose owner is a ``run-supervisor serve`` at ``url`` (from the owner directory):
    ``POST /close`` with the global action's id as its tag, then ``GET /actions`` (every 20 ms,
    bounded) until that close is no longer pending. ``headers`` carries the bearer token."""

    def __init__(self, url: str, *, headers: Mapping[str, str], epoch: int | None = None) -> None:
        self._url = url.rstrip("/")
        self._headers = {"Content-Type": "application/json", **headers}
        self._epoch = epoch

    def _call(self, method: str, path: str, body: Mapping[str, Any] | None, timeout: float) -> Any:
        import urllib.request

        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self._url + path, data=data, method=method, headers=self._headers)
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.loads(response.read())

    def begin(self, global_id: str) -> ShardAnswer:
        body = {"do": "dispose_all", "mode": "maintenance", "origin": "global.dispose", "tag": global_id}
        answer = self._call("POST", "/close", body, 10.0)
        return ShardAnswer(
            action_id=answer.get("action_id"),
            result=str(answer.get("result")),
            completed=bool(answer.get("completed")),
            epoch=self._epoch,
            error=answer.get("error"),
        )

    def wait_completed(self, answer: ShardAnswer, deadline: float) -> bool:
        if answer.completed or answer.action_id is None:
            return answer.completed
        pause = threading.Event()
        while True:
            pending = self._call("GET", "/actions", None, max(0.1, min(5.0, deadline - time.monotonic())))
            if not any(item.get("action_id") == answer.action_id for item in pending):
                return True
            if time.monotonic() >= deadline:
                return False
            pause.wait(0.02)


def global_dispose_all(
    shards: Mapping[str, ShardCloser],
    *,
    action_id: str,
    timeout: float,
    on_answer: Callable[[str, ShardAnswer], object] | None = None,
    on_complete: Callable[[GlobalClose], object] | None = None,
) -> GlobalClose:
    """Scatter ``dispose_all`` to every shard at once and gather every shard's outcome: the result
    names each shard's (its answer, whether its close completed), and is returned -- and
    ``on_complete`` called -- once, when every shard's close has completed or the one absolute
    deadline (``timeout`` from now) passed; a shard that had not completed by then, or could not
    be reached, is named with an error. ``on_answer`` is told each shard's answer as it comes
    (``deferred`` where runs are active). The coordinator holds no run state: each shard's owner
    decides, as it does for a close of its own."""
    started = time.monotonic()
    deadline = started + timeout
    result = GlobalClose(action_id=action_id)

    def one(name: str, closer: ShardCloser) -> ShardOutcome:
        t0 = time.monotonic()
        try:
            answer = closer.begin(action_id)
        except Exception as exc:  # unreachable, refused: named, the others still count
            return ShardOutcome(name, None, None, None, False, error=f"{type(exc).__name__}: {exc}")
        answered = (time.monotonic() - t0) * 1000
        if on_answer is not None:
            on_answer(name, answer)
        try:
            done = closer.wait_completed(answer, deadline)
            error = answer.error if done or answer.error else "the close did not complete by the deadline"
        except Exception as exc:
            done, error = False, f"{type(exc).__name__}: {exc}"
        return ShardOutcome(
            shard=name,
            epoch=answer.epoch,
            action_id=answer.action_id,
            result=answer.result,
            completed=done,
            error=None if done and not answer.error else error,
            answered_ms=answered,
            completed_ms=(time.monotonic() - t0) * 1000 if done else None,
        )

    workers = max(1, len(shards))
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="rs-global-close") as pool:
        futures = {name: pool.submit(one, name, closer) for name, closer in shards.items()}
        for name, future in futures.items():
            result.shards[name] = future.result()
    result.completed = bool(result.shards) and all(o.completed for o in result.shards.values())
    result.elapsed_ms = (time.monotonic() - started) * 1000
    if on_complete is not None:
        on_complete(result)
    return result


class Coordinator:
    """A global close across shards, from the owner directory: it resolves every shard's live
    owner (its URL and epoch) and scatters the close to them over HTTP. It holds no run state; a
    shard with no live owner has no instances anywhere and is named ``no_owner`` (completed)."""

    def __init__(self, directory: OwnerDirectory, *, headers: Mapping[str, str]) -> None:
        self.directory = directory
        self.headers = dict(headers)

    def dispose_all(
        self,
        *,
        timeout: float,
        shards: Iterable[str] | None = None,
        action_id: str | None = None,
        on_answer: Callable[[str, ShardAnswer], object] | None = None,
    ) -> GlobalClose:
        """``dispose_all`` on every shard (or those named) at once, through each live owner's HTTP host;
        returns once every shard's close has completed or ``timeout`` s have passed, naming each
        shard's outcome (a shard with no live owner is named as such)."""
        closers = self._closers(
            shards, lambda owner, url: HttpShard(url, headers=self.headers, epoch=owner.epoch)
        )
        return global_dispose_all(
            closers, action_id=_global_id(action_id), timeout=timeout, on_answer=on_answer
        )

    def shutdown(
        self,
        *,
        timeout: float,
        shards: Iterable[str] | None = None,
        action_id: str | None = None,
        on_answer: Callable[[str, ShardAnswer], object] | None = None,
    ) -> GlobalClose:
        """Shut every shard's owner down within one absolute deadline (``timeout`` from now): each
        is sent ``POST /shutdown`` with the grace left until that deadline when it is sent, and
        enforces it alone; a shard's shutdown has completed when its lease was let go (the owner
        directory says so). The result names every shard's outcome, once, as ``dispose_all``'s."""
        deadline = time.monotonic() + timeout
        closers = self._closers(
            shards, lambda owner, _url: _HttpShutdown(owner, self.headers, self.directory.url, deadline)
        )
        return global_dispose_all(
            closers,
            action_id=_global_id(action_id),
            timeout=max(0.0, deadline - time.monotonic()) + 5.0,  # the owners' own stop time past it
            on_answer=on_answer,
        )

    def _closers(
        self, shards: Iterable[str] | None, reach: Callable[[Owner, str], ShardCloser]
    ) -> dict[str, ShardCloser]:
        """Every shard (or those named), each with what closes it: ``reach`` of its live owner and
        that owner's URL, or a shard with no live owner named as such."""
        owners = self.directory.owners()
        closers: dict[str, ShardCloser] = {}
        for name in sorted(owners) if shards is None else list(shards):
            owner = owners.get(name)
            if owner is None or not owner.live or owner.url is None:
                closers[name] = _NoOwner(owner.epoch if owner is not None else None)
            else:
                closers[name] = reach(owner, owner.url)
        return closers


def _global_id(action_id: str | None) -> str:
    """The action id a global close goes by on every shard: the caller's, else a new one."""
    return action_id or f"g-{uuid.uuid4().hex[:12]}"


class _HttpShutdown:
    """One shard's part of a cluster shutdown: the grace left until the absolute deadline, then the
    owner directory watched until that owner's lease was let go."""

    def __init__(self, owner: Owner, headers: Mapping[str, str], directory: str, deadline: float) -> None:
        self._owner = owner
        self._http = HttpShard(str(owner.url), headers=headers, epoch=owner.epoch)
        self._directory = directory
        self._deadline = deadline

    def begin(self, global_id: str) -> ShardAnswer:
        grace_ms = max(0, int((self._deadline - time.monotonic()) * 1000))
        answer = self._http._call(
            "POST", "/shutdown", {"grace_ms": grace_ms, "origin": "global.shutdown"}, 10.0
        )
        return ShardAnswer(
            action_id=answer.get("action_id"),
            result=str(answer.get("result")),
            completed=False,  # complete once the lease is let go
            epoch=self._owner.epoch,
            error=answer.get("error"),
        )

    def wait_completed(self, answer: ShardAnswer, deadline: float) -> bool:
        pause = threading.Event()
        with OwnerDirectory(self._directory) as directory:
            while True:
                now = directory.owner(self._owner.shard)
                if now is None or now.epoch != self._owner.epoch or now.holder is None or not now.live:
                    return True
                if time.monotonic() >= deadline:
                    return False
                pause.wait(0.02)


class _NoOwner:
    def __init__(self, epoch: int | None) -> None:
        self._epoch = epoch

    def begin(self, global_id: str) -> ShardAnswer:
        return ShardAnswer(action_id=None, result="no_owner", completed=True, epoch=self._epoch)

    def wait_completed(self, answer: ShardAnswer, deadline: float) -> bool:
        return True


def publish_owner_url(supervisor: Any, url: str | None) -> None:
    """Publish where clients reach this shard's owner (a wire host's URL, known once it listens):
    the owner directory's row, in a fenced transaction, told by NOTIFY."""
    from run_supervisor.actors._journal import JournaledPublisher
    from run_supervisor.actors._pg_journal import PgJournal

    publisher = getattr(supervisor, "_publisher", None)
    journal = publisher.journal if isinstance(publisher, JournaledPublisher) else None
    if not isinstance(journal, PgJournal):
        raise InvalidRequest("only a supervisor on a postgresql:// journal has an owner to publish")
    journal.publish_owner_url(url)
