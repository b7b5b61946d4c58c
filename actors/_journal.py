"""The run journal: an embedded SQLite file that lets the next start tell the truth after a crash.

What it records is what a restart needs: runs (session, directory, generation, parent, state,
outcome, reason, provenance), their tool parts (state, phase, ``tool_started``), open asks, and
lifecycle actions with their results. It is fed from the supervisor's event stream: the supervisor
hands each event to a :class:`JournaledPublisher` without waiting; a writer thread applies a batch
of events in one transaction, commits it, and only then delivers the batch to the subscriptions.

The durability rule (documented in docs/api.md, "Crashes"):

* every event a subscriber sees is already committed to the journal, so after a process crash
  (``kill -9``, OOM) the journal knows at least everything any subscriber was told;
* answers to requests (and ``RunHandle.wait``) may run ahead of the journal by the batch in flight;
* with ``synchronous="normal"`` (the default, WAL mode) a committed batch survives a process crash
  but the last batches before a power loss may be lost; with ``synchronous="full"`` every commit is
  fsynced and survives power loss too, at a higher cost per batch.

Nothing here runs on the supervisor's thread but an append to a queue.
"""

from __future__ import annotations

import fcntl
import json
import os
import queue
import sqlite3
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

import msgspec
from loguru import logger

from run_supervisor.actors._errors import JournalLocked, JournalUnreadable
from run_supervisor.actors._subscription import Publisher
from run_supervisor.protocol import (
    Emit,
    Event,
    InterruptReason,
    PartSnapshot,
    PartState,
    Phase,
    RecoveredRun,
    SupervisorCore,
)
from run_supervisor.protocol._parts import part_snapshot

__all__ = ["Journal", "JournalSync", "JournaledPublisher", "start_journal"]

JournalSync = Literal["normal", "full"]

SCHEMA_VERSION: Final = 1
APPLICATION_ID: Final = 0x52535631  # "RSV1": tells our journals from any other SQLite file
_SQLITE_HEADER: Final = b"SQLite format 3\x00"
_BATCH: Final = 512
_COMPACT_EVERY: Final = 256  # finished runs between two compactions

_SCHEMA: Final = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE runs (
    run_id TEXT PRIMARY KEY,
    session TEXT NOT NULL,
    directory TEXT,
    generation INTEGER,
    parent_run_id TEXT,
    resume_of TEXT,
    state TEXT NOT NULL,              -- queued | active | finished
    outcome TEXT,
    reason TEXT,
    origin TEXT,
    action_id TEXT,
    finished_order INTEGER
);
CREATE INDEX runs_unfinished ON runs (state) WHERE state != 'finished';
CREATE INDEX runs_finished_order ON runs (finished_order) WHERE finished_order IS NOT NULL;
CREATE TABLE parts (
    run_id TEXT NOT NULL,
    part_key TEXT NOT NULL,
    position INTEGER NOT NULL,
    tool TEXT NOT NULL,
    state TEXT NOT NULL,
    phase TEXT,
    tool_started INTEGER NOT NULL,
    PRIMARY KEY (run_id, part_key)
);
CREATE TABLE asks (
    ask_id TEXT PRIMARY KEY,
    run_id TEXT NOT NULL,
    state TEXT NOT NULL,              -- open | closed
    payload TEXT
);
CREATE TABLE actions (
    boot INTEGER NOT NULL,
    action_id TEXT NOT NULL,
    do TEXT,
    mode TEXT,
    origin TEXT,
    directories TEXT,
    result TEXT,
    completed INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (boot, action_id)
);
"""

_UNFINISHED_PARTS = {PartState.PENDING.value, PartState.PREPARED.value, PartState.RUNNING.value}
_PHASE_OF = {
    PartState.PENDING.value: Phase.GENERATING,
    PartState.PREPARED.value: Phase.PREPARED,
    PartState.RUNNING.value: Phase.RUNNING,
}


@dataclass(slots=True)
class RecoveryPlan:
    """What a dead process left unfinished, read at open; settled by :meth:`Journal.settle`."""

    runs: list[RecoveredRun] = field(default_factory=list)
    pending_actions: list[tuple[int, str]] = field(default_factory=list)
    clean: bool = True
    """The previous process shut down cleanly (then there is nothing to recover)."""


class Journal:
    """One journal file, held by one live supervisor at a time (an advisory lock on the file)."""

    def __init__(self, path: Path, connection: sqlite3.Connection, lock_fd: int, boot: int) -> None:
        self.path = path
        self._db = connection
        self._lock_fd = lock_fd
        self.boot = boot
        self._finished_order = self._scalar("SELECT COALESCE(MAX(finished_order), 0) FROM runs")
        self._since_compaction = 0
        # What this boot has recorded per unfinished run, so finishing one deletes only what exists.
        self._parts: dict[str, dict[str, int]] = {}  # run -> part key -> position
        self._asking: dict[str, int] = {}  # run -> asks recorded
        self.retain_finished = 10_000
        self._closed = False

    # --- opening ---------------------------------------------------------------------------------

    @classmethod
    def open(cls, path: str | os.PathLike[str], *, synchronous: JournalSync = "normal") -> Journal:
        """Open (or create) the journal at ``path``.

        Raises :class:`JournalLocked` when a live process holds it and :class:`JournalUnreadable`
        for a file that is not a run-supervisor journal (it is never overwritten)."""
        target = Path(os.fspath(path))
        _refuse_foreign(target)
        flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)
        try:
            lock_fd = os.open(target, flags, 0o600)
        except OSError as exc:
            raise JournalUnreadable(f"journal {str(target)!r}: cannot open it ({exc.strerror})") from None
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(lock_fd)
            raise JournalLocked(
                f"journal {str(target)!r} is held by a live supervisor; a journal is never shared"
            ) from None
        try:
            db = sqlite3.connect(target, isolation_level=None, check_same_thread=False)
            try:
                boot = _prepare(db, target, synchronous)
            except BaseException:
                db.close()
                raise
        except sqlite3.DatabaseError as exc:
            os.close(lock_fd)
            raise JournalUnreadable(f"journal {str(target)!r} is not a readable journal: {exc}") from None
        except BaseException:
            os.close(lock_fd)
            raise
        return cls(target, db, lock_fd, boot)

    def _scalar(self, sql: str, *args: Any) -> int:
        row = self._db.execute(sql, args).fetchone()
        return int(row[0]) if row and row[0] is not None else 0

    # --- recovery --------------------------------------------------------------------------------

    def read_recovery(self) -> RecoveryPlan:
        """Everything the previous process left unfinished (nothing after a clean shutdown)."""
        plan = RecoveryPlan(clean=self._meta("clean") != "0")
        rows = self._db.execute(
            "SELECT run_id, session, directory, generation, parent_run_id, state FROM runs"
            " WHERE state != 'finished' ORDER BY rowid"
        ).fetchall()
        for run_id, session, directory, generation, parent, state in rows:
            parts = self._settled_parts(run_id)
            open_phase = next(
                (p.phase for p in parts if p.phase is not None and p.state is PartState.INTERRUPTED), None
            )
            asks = tuple(
                row[0]
                for row in self._db.execute(
                    "SELECT ask_id FROM asks WHERE run_id = ? AND state = 'open' ORDER BY rowid", (run_id,)
                )
            )
            plan.runs.append(
                RecoveredRun(
                    run_id=run_id,
                    session=session,
                    directory=directory,
                    generation=generation if state != "queued" else None,
                    parent_run_id=parent,
                    phase=open_phase,
                    parts=parts,
                    withdrawn_asks=asks,
                )
            )
        plan.pending_actions = [
            (int(boot), str(action_id))
            for boot, action_id in self._db.execute(
                "SELECT boot, action_id FROM actions WHERE completed = 0 ORDER BY rowid"
            )
        ]
        return plan

    def _settled_parts(self, run_id: str) -> tuple[PartSnapshot, ...]:
        """The run's tool parts as its last ``run.part.updated`` events left them, unfinished ones
        settled: ``interrupted``, ``tool_started`` as recorded (true once the tool may have run)."""
        rows = self._db.execute(
            "SELECT part_key, tool, state, tool_started FROM parts WHERE run_id = ? ORDER BY position",
            (run_id,),
        ).fetchall()
        parts: list[PartSnapshot] = []
        for call_id, tool, state, started in rows:
            if state in _UNFINISHED_PARTS:
                parts.append(
                    part_snapshot(
                        tool=tool,
                        state=PartState.INTERRUPTED,
                        tool_started=bool(started),
                        reason=InterruptReason.CRASH,
                        origin="crash",
                        phase=_PHASE_OF[state],
                        call_id=call_id,
                    )
                )
            else:
                parts.append(
                    part_snapshot(
                        tool=tool, state=PartState(state), tool_started=bool(started), call_id=call_id
                    )
                )
        return tuple(parts)

    def settle(self, plan: RecoveryPlan) -> None:
        """Record the recovery: every unfinished run ends interrupted/crash, open asks are withdrawn,
        pending closes count as completed by the restart. One transaction, before anything new."""
        with self._transaction():
            for run in plan.runs:
                self._finished_order += 1
                self._db.execute(
                    "UPDATE runs SET state = 'finished', outcome = 'interrupted', reason = 'crash',"
                    " origin = 'crash', finished_order = ? WHERE run_id = ?",
                    (self._finished_order, run.run_id),
                )
                self._db.execute("DELETE FROM parts WHERE run_id = ?", (run.run_id,))
            self._db.execute("UPDATE asks SET state = 'closed' WHERE state = 'open'")
            self._db.execute("DELETE FROM asks WHERE state = 'closed'")
            self._db.execute("UPDATE actions SET completed = 1, result = COALESCE(result, 'completed')")

    # --- writing ---------------------------------------------------------------------------------

    def apply(self, events: Iterable[Mapping[str, Any]]) -> None:
        """Apply a batch of events (as wire dicts) in one transaction."""
        with self._transaction():
            for event in events:
                handler = _HANDLERS.get(event.get("type", ""))
                if handler is not None:
                    handler(self, event)
            if self._since_compaction >= _COMPACT_EVERY:
                self._compact()

    def _compact(self) -> None:
        """Finished runs beyond the retention rule are forgotten, as they are in memory."""
        self._since_compaction = 0
        floor = self._finished_order - self.retain_finished
        if floor > 0:
            self._db.execute(
                "DELETE FROM runs WHERE finished_order IS NOT NULL AND finished_order <= ?", (floor,)
            )
        self._db.execute("DELETE FROM actions WHERE completed = 1 AND boot < ?", (self.boot,))

    def _transaction(self) -> _Transaction:
        return _Transaction(self._db)

    def _meta(self, key: str) -> str | None:
        row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def close(self, *, clean: bool) -> None:
        """Close the file; ``clean`` records a clean shutdown (the next start recovers nothing)."""
        if self._closed:
            return
        self._closed = True
        try:
            if clean:
                self._db.execute("UPDATE meta SET value = '1' WHERE key = 'clean'")
            self._db.close()
        finally:
            os.close(self._lock_fd)  # releases the lock

    def abandon(self) -> None:
        """Let go of the file as a killed process would: no clean mark, nothing more written."""
        if self._closed:
            return
        self._closed = True
        try:
            self._db.close()
        finally:
            os.close(self._lock_fd)

    def statistics(self) -> dict[str, int]:
        return {
            "runs": self._scalar("SELECT COUNT(*) FROM runs"),
            "unfinished_runs": self._scalar("SELECT COUNT(*) FROM runs WHERE state != 'finished'"),
            "parts": self._scalar("SELECT COUNT(*) FROM parts"),
            "open_asks": self._scalar("SELECT COUNT(*) FROM asks WHERE state = 'open'"),
            "pending_actions": self._scalar("SELECT COUNT(*) FROM actions WHERE completed = 0"),
        }


class _Transaction:
    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def __enter__(self) -> None:
        self._db.execute("BEGIN")

    def __exit__(self, kind: object, *rest: object) -> None:
        self._db.execute("COMMIT" if kind is None else "ROLLBACK")


def _refuse_foreign(target: Path) -> None:
    """A file that exists and is not an SQLite database is refused before SQLite may touch it."""
    try:
        with target.open("rb") as handle:
            head = handle.read(len(_SQLITE_HEADER))
    except FileNotFoundError:
        return
    except IsADirectoryError:
        raise JournalUnreadable(f"journal {str(target)!r} is a directory") from None
    except OSError as exc:
        raise JournalUnreadable(f"journal {str(target)!r}: cannot read it ({exc.strerror})") from None
    if head and head != _SQLITE_HEADER:
        raise JournalUnreadable(
            f"journal {str(target)!r} is not a run-supervisor journal (not SQLite); left untouched"
        )


def _prepare(db: sqlite3.Connection, target: Path, synchronous: JournalSync) -> int:
    app_id = db.execute("PRAGMA application_id").fetchone()[0]
    version = db.execute("PRAGMA user_version").fetchone()[0]
    tables = db.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()[0]
    if app_id == 0 and version == 0 and tables == 0:
        db.execute("PRAGMA journal_mode = WAL")
        db.execute("BEGIN")
        db.executescript(_SCHEMA.replace("BEGIN", ""))  # executescript commits; schema is DDL only
        db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        db.execute("INSERT INTO meta (key, value) VALUES ('clean', '1'), ('boot', '0')")
    elif app_id != APPLICATION_ID:
        raise JournalUnreadable(
            f"journal {str(target)!r} is an SQLite file of another application; left untouched"
        )
    elif version != SCHEMA_VERSION:
        raise JournalUnreadable(
            f"journal {str(target)!r} has schema version {version}; this run-supervisor reads version "
            f"{SCHEMA_VERSION}"
        )
    mode = db.execute("PRAGMA journal_mode = WAL").fetchone()[0]
    if str(mode).lower() != "wal":
        raise JournalUnreadable(f"journal {str(target)!r}: SQLite refused WAL mode ({mode})")
    db.execute(f"PRAGMA synchronous = {'FULL' if synchronous == 'full' else 'NORMAL'}")
    integrity = db.execute("PRAGMA quick_check").fetchone()[0]
    if integrity != "ok":
        raise JournalUnreadable(f"journal {str(target)!r} is corrupt ({integrity}); left untouched")
    row = db.execute("SELECT value FROM meta WHERE key = 'boot'").fetchone()
    boot = int(row[0]) + 1 if row else 1
    return boot


def _begin_boot(journal: Journal) -> None:
    with journal._transaction():
        journal._db.execute("UPDATE meta SET value = ? WHERE key = 'boot'", (str(journal.boot),))
        journal._db.execute("UPDATE meta SET value = '0' WHERE key = 'clean'")


# --- events into rows (events arrive as wire dicts, the shape every host sees) -----------------------


def _on_run_queued(j: Journal, e: Mapping[str, Any]) -> None:
    j._db.execute(
        "INSERT OR REPLACE INTO runs (run_id, session, state, parent_run_id) VALUES (?, ?, 'queued', ?)",
        (e["run_id"], e["session"], e.get("parent_run_id")),
    )


def _on_run_started(j: Journal, e: Mapping[str, Any]) -> None:
    j._db.execute(
        "INSERT INTO runs (run_id, session, directory, generation, parent_run_id, resume_of, state)"
        " VALUES (?, ?, ?, ?, ?, ?, 'active')"
        " ON CONFLICT (run_id) DO UPDATE SET session = excluded.session, directory = excluded.directory,"
        " generation = excluded.generation, parent_run_id = excluded.parent_run_id,"
        " resume_of = excluded.resume_of, state = 'active', outcome = NULL, reason = NULL,"
        " origin = NULL, action_id = NULL, finished_order = NULL",
        (
            e["run_id"],
            e["session"],
            e["directory"],
            e["generation"],
            e.get("parent_run_id"),
            e.get("resume_of"),
        ),
    )
    if j._parts.pop(e["run_id"], None) is not None:  # an id used again: the old run's parts go
        j._db.execute("DELETE FROM parts WHERE run_id = ?", (e["run_id"],))


def _on_part(j: Journal, e: Mapping[str, Any]) -> None:
    key = str(e.get("call_id") or e.get("part_id") or e.get("index") or e.get("tool"))
    keys = j._parts.setdefault(e["run_id"], {})
    position = keys.setdefault(key, len(keys))
    j._db.execute(
        "INSERT INTO parts (run_id, part_key, position, tool, state, phase, tool_started)"
        " VALUES (?, ?, ?, ?, ?, ?, ?)"
        " ON CONFLICT (run_id, part_key) DO UPDATE SET state = excluded.state, phase = excluded.phase,"
        " tool_started = excluded.tool_started",
        (e["run_id"], key, position, e["tool"], e["state"], e.get("phase"), int(bool(e.get("tool_started")))),
    )


def _on_run_finished(j: Journal, e: Mapping[str, Any]) -> None:
    j._finished_order += 1
    j._since_compaction += 1
    j._db.execute(
        "UPDATE runs SET state = 'finished', outcome = ?, reason = ?, origin = ?, action_id = ?,"
        " finished_order = ? WHERE run_id = ?",
        (e["outcome"], e.get("reason"), e.get("origin"), e.get("action_id"), j._finished_order, e["run_id"]),
    )
    if j._parts.pop(e["run_id"], None) is not None:
        j._db.execute("DELETE FROM parts WHERE run_id = ?", (e["run_id"],))
    if j._asking.pop(e["run_id"], 0):
        j._db.execute("DELETE FROM asks WHERE run_id = ?", (e["run_id"],))


def _on_ask_requested(j: Journal, e: Mapping[str, Any]) -> None:
    payload = e.get("payload")
    j._db.execute(
        "INSERT OR REPLACE INTO asks (ask_id, run_id, state, payload) VALUES (?, ?, 'open', ?)",
        (e["ask_id"], e["run_id"], None if payload is None else json.dumps(payload)),
    )
    j._asking[e["run_id"]] = j._asking.get(e["run_id"], 0) + 1


def _on_ask_closed(j: Journal, e: Mapping[str, Any]) -> None:
    j._db.execute("DELETE FROM asks WHERE ask_id = ?", (e["ask_id"],))


def _on_lifecycle_requested(j: Journal, e: Mapping[str, Any]) -> None:
    j._db.execute(
        "INSERT OR IGNORE INTO actions (boot, action_id, do, mode, origin, directories)"
        " VALUES (?, ?, ?, ?, ?, ?)",
        (
            j.boot,
            e["action_id"],
            e.get("do"),
            e.get("mode"),
            e.get("origin"),
            json.dumps(e.get("directories")),
        ),
    )


def _on_lifecycle_completed(j: Journal, e: Mapping[str, Any]) -> None:
    j._db.execute(
        "UPDATE actions SET completed = 1 WHERE boot = ? AND action_id = ?", (j.boot, e["action_id"])
    )


def _on_action_result(j: Journal, e: Mapping[str, Any]) -> None:
    j._db.execute(
        "UPDATE actions SET result = ? WHERE boot = ? AND action_id = ?",
        (e["result"], j.boot, e["action_id"]),
    )


# Not recorded, on purpose: run.stalled / run.unstalled (a flag of a live run; after a crash the run is
# recovered as interrupted with reason crash, never stalled) and lifecycle.confirmed (what it decided
# reaches the journal as the runs' run.finished -- reason lifecycle_interrupt, the close's action_id --
# and the close's lifecycle.completed). Events without a handler are skipped.
_HANDLERS = {
    "run.queued": _on_run_queued,
    "run.started": _on_run_started,
    "run.part.updated": _on_part,
    "run.finished": _on_run_finished,
    "ask.requested": _on_ask_requested,
    "ask.replied": _on_ask_closed,
    "ask.dismissed": _on_ask_closed,
    "ask.withdrawn": _on_ask_closed,
    "lifecycle.requested": _on_lifecycle_requested,
    "lifecycle.completed": _on_lifecycle_completed,
    "action.result": _on_action_result,
}


# --- the writer: journal first, subscribers after ------------------------------------------------------

_CLOSE: Final = object()


@dataclass(frozen=True, slots=True)
class _Call:
    call: Callable[[], object]


def _run_call(item: _Call) -> None:
    try:
        item.call()
    except Exception:  # settling a future never raises; anything else is a bug, contained here
        logger.opt(exception=True).error("an answer could not be delivered after the journal")


class JournaledPublisher(Publisher):
    """A Publisher whose events reach the subscriptions only once they are committed to the journal.

    ``publish`` (on the supervisor's thread) only appends to a queue. The writer thread takes what
    has queued up (at most a batch), applies it in one transaction, commits, then delivers it."""

    def __init__(self, journal: Journal) -> None:
        super().__init__()
        self.journal = journal
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._abandoned = False
        self.failed: str | None = None
        """Why the journal stopped recording (a full disk, say); events keep flowing to subscribers."""
        self.thread = threading.Thread(target=self._write, name="run-supervisor-journal", daemon=True)
        self.thread.start()

    def publish(self, event: Event) -> None:
        if not self._abandoned:
            self._queue.put(event)

    def after(self, call: Callable[[], object]) -> None:
        """Run ``call`` (an answer to a request) on the writer, after the events published before it
        were committed and delivered: with a journal as without one, a request's answer never comes
        before the events it caused, and those are durable by then."""
        if self._abandoned:
            call()
        else:
            self._queue.put(_Call(call))

    def close_all(self) -> None:
        self._queue.put(_CLOSE)

    def abandon(self) -> None:
        """As a kill would: nothing more is written or delivered (what is queued is lost, as the
        uncommitted tail is at a kill), and the file is let go without a clean mark."""
        self._abandoned = True
        self._queue.put(_CLOSE)

    def _write(self) -> None:
        closing = False
        while not closing:
            batch = [self._queue.get()]
            while len(batch) < _BATCH:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            if batch[-1] is _CLOSE or _CLOSE in batch:
                closing = True
                batch = [item for item in batch if item is not _CLOSE]
            if self._abandoned:  # a simulated kill: nothing written or delivered; answers still go
                for item in batch:
                    if isinstance(item, _Call):
                        _run_call(item)
                continue
            events = [item for item in batch if not isinstance(item, _Call)]
            if events and self.failed is None:
                try:
                    self.journal.apply(msgspec.to_builtins(event) for event in events)
                except Exception as exc:  # a failing disk must not stop the events
                    self.failed = str(exc) or type(exc).__name__
                    logger.opt(exception=True).error("the run journal stopped recording")
            for item in batch:  # committed: deliver in order, each answer after the events before it
                if isinstance(item, _Call):
                    _run_call(item)
                else:
                    super().publish(item)
        try:
            if self._abandoned:
                self.journal.abandon()
            else:
                self.journal.close(clean=self.failed is None)
        finally:
            super().close_all()


def start_journal(journal: Journal, core: SupervisorCore, *, retain_finished: int) -> list[Event]:
    """Recover what the previous process left unfinished and begin this process's boot: the journal
    is settled (one transaction) and the core takes the recovered runs on, before any request. Returns
    the ``run.recovered`` events, in order, for the publisher."""
    journal.retain_finished = retain_finished
    plan = journal.read_recovery()
    journal.settle(plan)
    _begin_boot(journal)
    return [command.event for command in core.recover(plan.runs) if isinstance(command, Emit)]
