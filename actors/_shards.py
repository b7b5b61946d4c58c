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
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Final
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

        self._target = parse_journal_url(url) if url.startswith(("postgresql://", "postgres://")) else None
        conninfo = self._target.conninfo if self._target is not None else url
        self._db = psycopg.connect(conninfo, autocommit=True)
        self._listening = False

    def owner(self, shard: str) -> Owner | None:
        row = self._db.execute(
            "SELECT shard, epoch, holder, owner_url, expires_at > clock_timestamp(),"
            " EXTRACT(EPOCH FROM expires_at - clock_timestamp()) FROM rs_leases WHERE shard = %s",
            (shard,),
        ).fetchone()
        return None if row is None else _owner(row)

    def owners(self) -> dict[str, Owner]:
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
        """The next change told (``{"shard", "epoch", "holder", "url", "what"}``), or None after
        ``timeout`` seconds."""
        self.listen()
        for note in self._db.notifies(timeout=timeout, stop_after=1):
            payload: dict[str, Any] = json.loads(note.payload)
            return payload
        return None

    def changes(self, timeout: float) -> Iterator[dict[str, Any]]:
        """Every change told within ``timeout`` seconds."""
        self.listen()
        for note in self._db.notifies(timeout=timeout):
            yield json.loads(note.payload)

    def close(self) -> None:
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
    ``deferred``, ``already_completed``...), ``completed`` once that shard's close has completed
    (a deferred one when its runs ended), ``error`` if the shard could not be reached or did not
    complete by the deadline."""

    shard: str
    epoch: int | None
    action_id: str | None
    result: str | None
    completed: bool
    error: str | None = None
    elapsed_ms: float = 0.0


@dataclass(slots=True)
class GlobalClose:
    """The structured result of a global close: every shard's outcome, and whether all completed.
    ``completed`` is set once, when the last shard's close completed (or the deadline passed)."""

    action_id: str
    shards: dict[str, ShardOutcome] = field(default_factory=dict)
    completed: bool = False
    elapsed_ms: float = 0.0

    def to_dict(self) -> dict[str, Any]:
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
                    "elapsed_ms": round(o.elapsed_ms, 3),
                }
                for name, o in sorted(self.shards.items())
            },
        }


ShardClose = Callable[[str, str, float], ShardOutcome]
"""How the coordinator closes one shard: ``(shard, action_id, deadline) -> ShardOutcome``, the
outcome once that shard's close completed (or failed by the absolute ``deadline``, a
``time.monotonic()`` value)."""


def global_dispose_all(
    shards: Mapping[str, ShardClose],
    *,
    action_id: str,
    timeout: float,
    on_complete: Callable[[GlobalClose], object] | None = None,
) -> GlobalClose:
    """Scatter ``dispose_all`` to every shard at once, gather every shard's outcome: the result
    names each shard's, and completes once, when every shard's close has completed (one absolute
    deadline for all of them: a shard that has not completed by then is named with an error). The
    coordinator holds no run state: each shard's owner decides (defers for its active runs,
    completes when they end)."""
    started = time.monotonic()
    deadline = started + timeout
    result = GlobalClose(action_id=action_id)
    lock = threading.Lock()
    with ThreadPoolExecutor(max_workers=max(1, len(shards)), thread_name_prefix="rs-global-close") as pool:
        futures = {name: pool.submit(close, name, action_id, deadline) for name, close in shards.items()}
        for name, future in futures.items():
            try:
                outcome = future.result(timeout=max(0.0, deadline - time.monotonic()) + 1.0)
            except Exception as exc:  # a shard that failed or hung: named, the others still count
                outcome = ShardOutcome(name, None, None, None, False, error=f"{type(exc).__name__}: {exc}")
            with lock:
                result.shards[name] = outcome
    result.completed = all(o.completed for o in result.shards.values())
    result.elapsed_ms = (time.monotonic() - started) * 1000
    if on_complete is not None:
        on_complete(result)
    return result


def supervisor_close(supervisor: Any, *, epoch: int | None = None) -> ShardClose:
    """A ``ShardClose`` for a supervisor of this process (a shard whose owner is here): its
    ``dispose_all`` with the global action's id, then a bounded wait for that close to complete."""

    def close(shard: str, action_id: str, deadline: float) -> ShardOutcome:
        from run_supervisor.protocol import LifecycleCompleted

        t0 = time.monotonic()
        done = threading.Event()

        def seen(event: object) -> None:
            if isinstance(event, LifecycleCompleted) and event.action_id == action_id:
                done.set()

        subscription = supervisor.subscribe(callback=seen)
        try:
            answer = supervisor.close(
                "dispose_all", mode="maintenance", origin="global.dispose", action_id=action_id
            )
            if answer.result in ("completed", "already_completed", "noop"):
                done.set()
            finished = done.wait(max(0.0, deadline - time.monotonic()))
            return ShardOutcome(
                shard=shard,
                epoch=supervisor.epoch if epoch is None else epoch,
                action_id=answer.action_id,
                result=str(answer.result),
                completed=finished,
                error=None if finished else "the close did not complete by the deadline",
                elapsed_ms=(time.monotonic() - t0) * 1000,
            )
        finally:
            subscription.close()

    return close
