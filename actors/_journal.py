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

When a batch does not commit (a full disk, an I/O error), the rule still holds, by stopping: the
writer delivers nothing more (that batch's events and every later one are dropped, as at a kill),
fails every answer not yet given with ``JournalFailed``, closes every subscription at once and tells
the supervisor, which refuses every request from then on and shuts itself down. What the clients
saw is what the journal holds, and the next start recovers the rest as ``interrupted``/``crash``.

The journal is held by one live supervisor at a time: an exclusive SQLite lock on ``<journal>-lock``
(SQLite's own locking, so it works wherever Python's ``sqlite3`` does: Linux, macOS, Windows), let
go when the file is closed or the process dies.

Nothing here runs on the supervisor's thread but an append to a queue.
"""

from __future__ import annotations

import copy
import json
import os
import queue
import sqlite3
import stat
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Final, Literal, TypeVar

import msgspec

from run_supervisor.actors._errors import JournalFailed, JournalLocked, JournalUnreadable
from run_supervisor.actors._logging import logger
from run_supervisor.actors._subscription import Publisher
from run_supervisor.protocol import (
    AskKind,
    AskPayload,
    AskSnapshot,
    AskState,
    Emit,
    Event,
    InterruptReason,
    PartSnapshot,
    PartState,
    Phase,
    RecoveredRun,
    SupervisorCore,
    WithdrawReason,
)
from run_supervisor.protocol._parts import part_snapshot

__all__ = ["Journal", "JournalSync", "JournaledPublisher", "is_journal_url", "start_journal"]

JournalSync = Literal["normal", "full"]
_E = TypeVar("_E", bound=Exception)

SCHEMA_VERSION: Final = 1
APPLICATION_ID: Final = 0x52535631  # "RSV1": tells our journals from any other SQLite file
_SQLITE_HEADER: Final = b"SQLite format 3\x00"
_BATCH: Final = 512
_COMPACT_EVERY: Final = 256  # finished runs between two compactions

_PART_COLUMNS: Final = """
    run_id TEXT NOT NULL,
    part_key TEXT NOT NULL,
    position INTEGER NOT NULL,
    tool TEXT NOT NULL,
    state TEXT NOT NULL,
    phase TEXT,
    tool_started INTEGER NOT NULL,"""
"""A tool part's row, in both databases (PostgreSQL's names its shard first)."""

_SCHEMA: Final = f"""
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
    finished_order INTEGER,
    epoch INTEGER,                    -- the supervisor's life its generation belongs to
    resume_count INTEGER              -- continued after a crash this many times in a row
);
CREATE INDEX runs_unfinished ON runs (state) WHERE state != 'finished';
CREATE INDEX runs_finished_order ON runs (finished_order) WHERE finished_order IS NOT NULL;
CREATE TABLE parts ({_PART_COLUMNS}
    PRIMARY KEY (run_id, part_key)
);
CREATE TABLE asks (                   -- every ask of an unfinished run, until the run finishes
    ask_id TEXT PRIMARY KEY,
    run_id TEXT NOT NULL,
    state TEXT NOT NULL,              -- open | replied | dismissed | withdrawn
    payload TEXT,
    kind TEXT,
    tool TEXT,
    call_id TEXT,
    withdraw_reason TEXT
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

_ASK_STATES: Final = frozenset(state.value for state in AskState)
_UNFINISHED_PARTS = {PartState.PENDING.value, PartState.PREPARED.value, PartState.RUNNING.value}
_PHASE_OF = {
    PartState.PENDING.value: Phase.GENERATING,
    PartState.PREPARED.value: Phase.PREPARED,
    PartState.RUNNING.value: Phase.RUNNING,
}


@dataclass(frozen=True, slots=True)
class Statements:
    """A journal database's SQL, statement by statement. Where the two databases differ is here
    (SQLite's file, PostgreSQL's shard of shared tables); what runs the statements, and when, is
    :class:`Journal`'s, once for both. A statement's parameters are positional and the same in both
    databases, in the order SQLite's names them; PostgreSQL's take the journal's ``scope`` (its
    shard) after them, as the last parameter."""

    finished_order: str
    unfinished_runs: str
    run_parts: str
    run_asks: str
    pending_actions: str
    counts: Mapping[str, str]
    """``statistics()``'s figures, each one ``COUNT(*)``."""
    settle_run: str
    settle_actions: str
    compact_runs: str
    compact_actions: str
    queue_run: str
    """Replaces a row its id already has: the run comes back new, as if it had never been."""
    start_run: str
    drop_parts: str
    drop_asks: str
    put_part: str
    finish_run: str
    open_ask: str
    """Replaces a row its id already has, as ``queue_run``."""
    set_ask_state: str
    withdraw_ask: str
    request_action: str
    complete_action: str
    set_action_result: str


_RUN_UPSERT_SET: Final = (
    " session = excluded.session, directory = excluded.directory,"
    " generation = excluded.generation, parent_run_id = excluded.parent_run_id,"
    " resume_of = excluded.resume_of, state = 'active', outcome = NULL, reason = NULL,"
    " origin = NULL, action_id = NULL, finished_order = NULL, epoch = excluded.epoch,"
    " resume_count = excluded.resume_count"
)
"""What a run's ``run.started`` sets on a row its id already has (both databases' upsert)."""

_SQLITE: Final = Statements(
    finished_order="SELECT COALESCE(MAX(finished_order), 0) FROM runs",
    unfinished_runs="SELECT run_id, session, directory, generation, parent_run_id, state, epoch, resume_count"
    " FROM runs WHERE state != 'finished' ORDER BY rowid",
    run_parts="SELECT part_key, tool, state, tool_started FROM parts WHERE run_id = ? ORDER BY position",
    run_asks="SELECT ask_id, state, payload, kind, tool, call_id, withdraw_reason FROM asks"
    " WHERE run_id = ? ORDER BY rowid",
    pending_actions="SELECT boot, action_id FROM actions WHERE completed = 0 ORDER BY rowid",
    counts={
        "runs": "SELECT COUNT(*) FROM runs",
        "unfinished_runs": "SELECT COUNT(*) FROM runs WHERE state != 'finished'",
        "parts": "SELECT COUNT(*) FROM parts",
        "open_asks": "SELECT COUNT(*) FROM asks WHERE state = 'open'",
        "pending_actions": "SELECT COUNT(*) FROM actions WHERE completed = 0",
    },
    settle_run="UPDATE runs SET state = 'finished', outcome = 'interrupted', reason = 'crash',"
    " origin = 'crash', finished_order = ? WHERE run_id = ?",
    settle_actions="UPDATE actions SET completed = 1, result = COALESCE(result, 'completed')",
    compact_runs="DELETE FROM runs WHERE finished_order IS NOT NULL AND finished_order <= ?",
    compact_actions="DELETE FROM actions WHERE completed = 1 AND boot < ?",
    queue_run="INSERT OR REPLACE INTO runs (run_id, session, parent_run_id, resume_of, resume_count, state)"
    " VALUES (?, ?, ?, ?, ?, 'queued')",
    start_run="INSERT INTO runs (run_id, session, parent_run_id, resume_of, resume_count, directory,"
    " generation, epoch, state) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'active')"
    " ON CONFLICT (run_id) DO UPDATE SET" + _RUN_UPSERT_SET,
    drop_parts="DELETE FROM parts WHERE run_id = ?",
    drop_asks="DELETE FROM asks WHERE run_id = ?",
    put_part="INSERT INTO parts (run_id, part_key, position, tool, state, phase, tool_started)"
    " VALUES (?, ?, ?, ?, ?, ?, ?)"
    " ON CONFLICT (run_id, part_key) DO UPDATE SET state = excluded.state, phase = excluded.phase,"
    " tool_started = excluded.tool_started",
    finish_run="UPDATE runs SET state = 'finished', outcome = ?, reason = ?, origin = ?, action_id = ?,"
    " finished_order = ? WHERE run_id = ?",
    open_ask="INSERT OR REPLACE INTO asks (ask_id, run_id, payload, kind, tool, call_id, state,"
    " withdraw_reason) VALUES (?, ?, ?, ?, ?, ?, 'open', NULL)",
    set_ask_state="UPDATE asks SET state = ? WHERE ask_id = ?",
    withdraw_ask="UPDATE asks SET state = 'withdrawn', withdraw_reason = ? WHERE ask_id = ?",
    request_action="INSERT OR IGNORE INTO actions (boot, action_id, do, mode, origin, directories)"
    " VALUES (?, ?, ?, ?, ?, ?)",
    complete_action="UPDATE actions SET completed = 1 WHERE boot = ? AND action_id = ?",
    set_action_result="UPDATE actions SET result = ? WHERE boot = ? AND action_id = ?",
)


@dataclass(slots=True)
class RecoveryPlan:
    """What a dead process left unfinished, read at open; settled by :meth:`Journal.settle`."""

    runs: list[RecoveredRun] = field(default_factory=list)
    pending_actions: list[tuple[int, str]] = field(default_factory=list)
    clean: bool = True
    """The previous process shut down cleanly (then there is nothing to recover)."""


class Journal:
    """One journal file, held by one live supervisor at a time (see ``_JournalLock``).

    ``Journal.open`` on a ``postgresql://`` URL opens a journal in PostgreSQL instead (a shard of
    it, owned through a lease: see actors/_pg_journal.py), a subclass behind the same interface:
    it brings its own ``sql``, ``scope``, connection and transactions, and the reading of rows into
    a recovery, the settling, the writing of events and the compaction here are both journals'."""

    db_errors: tuple[type[Exception], ...] = (sqlite3.Error,)
    """What the journal's database raises: an error of these at start is told as unreadable or
    unwritable (``start_error``), never as a bug."""

    sql: ClassVar[Statements] = _SQLITE
    scope: tuple[object, ...] = ()
    """What every statement of this journal is given after its own parameters (a shard's name)."""

    def __init__(self, path: Path, connection: sqlite3.Connection, lock: _JournalLock, boot: int) -> None:
        self.path: Path | str = path
        self._db = connection
        self._lock = lock
        self.boot = boot
        self._begin_rows()

    def _begin_rows(self) -> None:
        """What this boot keeps beside the rows, so finishing a run deletes only what exists."""
        self._finished_order = self._scalar(self.sql.finished_order)
        self._since_compaction = 0
        self._parts: dict[str, dict[str, int]] = {}  # run -> part key -> position
        self._asking: dict[str, int] = {}  # run -> asks recorded
        self.retain_finished = 10_000
        self._closed = False

    # --- opening ---------------------------------------------------------------------------------

    @classmethod
    def open(cls, path: str | os.PathLike[str], *, synchronous: JournalSync = "normal") -> Journal:
        """Open (or create) the journal at ``path``.

        Raises :class:`JournalLocked` when a live supervisor (of this process or another) holds it,
        :class:`JournalUnreadable` for a path that is not a run-supervisor journal (another file, a
        directory, a FIFO...: it is never touched) or cannot be opened, and :class:`JournalFailed`
        when it cannot be written (a full disk), each naming the path and what the OS said.

        A ``postgresql://`` (or ``postgres://``) URL opens a PostgreSQL journal: see
        :func:`run_supervisor.actors._pg_journal.PgJournal.open` for its parameters (``shard``,
        ``lease_ttl``, ``lease_wait``, ``owner_url``)."""
        if isinstance(path, str) and is_journal_url(path):
            from run_supervisor.actors._pg_journal import PgJournal

            return PgJournal.open(path, synchronous=synchronous)
        target = Path(os.fspath(path))
        _refuse_special(target)
        lock = _JournalLock.take(target)
        try:
            _create(target)
            _refuse_foreign(target)
            try:
                db = sqlite3.connect(target, isolation_level=None, check_same_thread=False)
            except sqlite3.Error as exc:
                raise _open_error(target, exc) from None
            with _closed_on_failure(db, sqlite3.Error, lambda exc: _open_error(target, exc)):
                boot = _prepare(db, target, synchronous)
        except BaseException:
            lock.release()
            raise
        return cls(target, db, lock, boot)

    # --- the database: what a subclass brings ---------------------------------------------------

    def _reader(self) -> Any:
        """What reads run on (outside a writing transaction): the connection."""
        return self._db

    @contextmanager
    def _writing(self) -> Iterator[Any]:
        """One writing transaction (all of it or nothing), giving what its statements run on."""
        with _Transaction(self._db):
            yield self._db

    def _was_clean(self) -> bool:
        """The previous process shut down cleanly."""
        return self._meta("clean") != "0"

    # --- statements ----------------------------------------------------------------------------

    def _rows(self, sql: str, params: tuple[object, ...] = ()) -> list[Any]:
        return list(self._reader().execute(sql, params + self.scope).fetchall())

    def _scalar(self, sql: str) -> int:
        rows = self._rows(sql)
        return int(rows[0][0]) if rows and rows[0][0] is not None else 0

    def _write(self, cur: Any, sql: str, params: tuple[object, ...] = ()) -> None:
        cur.execute(sql, params + self.scope)

    # --- recovery --------------------------------------------------------------------------------

    def read_recovery(self) -> RecoveryPlan:
        """Everything the previous process left unfinished (nothing after a clean shutdown)."""
        plan = RecoveryPlan(clean=self._was_clean())
        for run_id, session, directory, generation, parent, state, epoch, resumes in self._rows(
            self.sql.unfinished_runs
        ):
            parts = self._settled_parts(run_id)
            open_phase = next(
                (p.phase for p in parts if p.phase is not None and p.state is PartState.INTERRUPTED), None
            )
            withdrawn, asks = self._settled_asks(run_id, session)
            plan.runs.append(
                RecoveredRun(
                    run_id=run_id,
                    session=session,
                    directory=directory,
                    generation=generation if state != "queued" else None,
                    parent_run_id=parent,
                    phase=open_phase,
                    parts=parts,
                    withdrawn_asks=withdrawn,
                    asks=asks,
                    epoch=None if epoch is None or state == "queued" else int(epoch),
                    resume_count=int(resumes or 0),
                )
            )
        plan.pending_actions = [
            (int(boot), str(action_id)) for boot, action_id in self._rows(self.sql.pending_actions)
        ]
        return plan

    def _settled_parts(self, run_id: str) -> tuple[PartSnapshot, ...]:
        """The run's tool parts as its last ``run.part.updated`` events left them, unfinished ones
        settled: ``interrupted``, ``tool_started`` as recorded (true once the tool may have run)."""
        return _settle_part_rows(self._rows(self.sql.run_parts, (run_id,)))

    def _settled_asks(self, run_id: str, session: str) -> tuple[tuple[str, ...], tuple[AskSnapshot, ...]]:
        """The run's asks: the ids of those open at the crash (the crash withdraws them), and every
        ask as it ended, so a late reply after the restart is told what became of its ask
        (``ask_withdrawn``, ``ask_already_answered``) rather than that it never existed. An ask a
        journal from before these columns recorded has only its id: it is withdrawn, not described."""
        return _settle_ask_rows(self._rows(self.sql.run_asks, (run_id,)), run_id, session)

    def settle(self, plan: RecoveryPlan) -> None:
        """Record the recovery: every unfinished run ends interrupted/crash, pending closes count as
        completed by the restart. One transaction, before anything new (in PostgreSQL a fenced one,
        so a successor that lost the lease meanwhile settles nothing). The recovered runs' asks go
        with them: the core holds them from now on, as it holds any finished run's."""
        with self._writing() as cur:
            for run in plan.runs:
                self._finished_order += 1
                self._write(cur, self.sql.settle_run, (self._finished_order, run.run_id))
                self._write(cur, self.sql.drop_parts, (run.run_id,))
                self._write(cur, self.sql.drop_asks, (run.run_id,))
            self._write(cur, self.sql.settle_actions)

    # --- writing ---------------------------------------------------------------------------------

    def apply(self, events: Iterable[Mapping[str, Any]]) -> None:
        """Apply a batch of events (as wire dicts) in one transaction."""
        with self._writing() as cur:
            for event in events:
                handler = _HANDLERS.get(event.get("type", ""))
                if handler is not None:
                    handler(self, cur, event)
            if self._since_compaction >= _COMPACT_EVERY:
                self._compact(cur)

    def _compact(self, cur: Any) -> None:
        """Finished runs beyond the retention rule are forgotten, as they are in memory."""
        self._since_compaction = 0
        floor = self._finished_order - self.retain_finished
        if floor > 0:
            self._write(cur, self.sql.compact_runs, (floor,))
        self._write(cur, self.sql.compact_actions, (self.boot,))

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
        finally:
            try:
                self._db.close()
            finally:
                self._lock.release()

    def abandon(self) -> None:
        """Let go of the file as a killed process would: no clean mark, nothing more written."""
        if self._closed:
            return
        self._closed = True
        try:
            self._db.close()
        finally:
            self._lock.release()

    def failure(self, exc: BaseException, *, at_start: bool = False) -> JournalFailed:
        """The error to raise (or to fail answers with) for a write of this journal that failed."""
        return JournalFailed(str(self.path), _describe(exc), at_start=at_start)

    def begin_boot(self) -> None:
        """Record that this boot has begun (not clean until ``close(clean=True)``)."""
        _begin_boot(self)

    def watch(self, on_lost: Callable[[JournalFailed], object]) -> None:
        """Have ``on_lost`` called (from any thread) when this journal stops being this process's
        to write without a write having failed: a lost lease. A file is never lost so: no-op."""

    def start_error(self, exc: Exception) -> Exception:
        """What a database error at start is told as: ``JournalFailed`` when the journal cannot be
        written, else ``JournalUnreadable``."""
        assert isinstance(exc, sqlite3.Error)
        if _cannot_write(exc):
            return self.failure(exc, at_start=True)
        return JournalUnreadable(f"journal {str(self.path)!r} is not a readable journal: {_describe(exc)}")

    def statistics(self) -> dict[str, int]:
        return {name: self._scalar(sql) for name, sql in self.sql.counts.items()}


# --- holding the file: one live supervisor per journal, on every platform -------------------------

_HOLDING: Final = threading.Lock()
"""Serialises taking and letting go of journal locks in this process."""
_HELD: set[tuple[int, int]] = set()
"""The lock files this process holds, by (device, inode)."""


class _JournalLock:
    """An exclusive SQLite lock on ``<journal>-lock``, held until released or the process dies.

    It is SQLite's own locking (POSIX advisory locks on Unix, ``LockFileEx`` on Windows), so it
    holds wherever Python's ``sqlite3`` runs and needs no ``fcntl``. A second opener, in another
    process or this one, gets ``SQLITE_BUSY`` at once (``timeout=0``): ``JournalLocked``. In this
    process the held files are also booked by inode and a second opener is refused before it opens
    the lock file at all: on POSIX, closing any descriptor of a file drops every lock the process
    holds on it, so nothing here opens a lock file another of our connections holds."""

    def __init__(self, path: Path, connection: sqlite3.Connection, key: tuple[int, int]) -> None:
        self.path = path
        self._db = connection
        self._key = key
        self._released = False

    @classmethod
    def take(cls, journal: Path) -> _JournalLock:
        path = journal.with_name(journal.name + "-lock")
        held = JournalLocked(
            f"journal {str(journal)!r} is held by a live supervisor; a journal is never shared"
        )
        with _HOLDING:
            if _file_key(path) in _HELD:
                raise held
            try:  # created here, so a missing directory or a permission is told as the OS says it
                os.close(os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o600))
            except OSError as exc:
                raise JournalUnreadable(
                    f"journal {str(journal)!r}: cannot open its lock file {str(path)!r} ({exc.strerror})"
                ) from None
            key = _file_key(path)
            if key is None or key in _HELD:  # replaced meanwhile by one we hold: refuse, touch nothing
                raise held
            try:
                db = sqlite3.connect(path, isolation_level=None, timeout=0, check_same_thread=False)
            except sqlite3.Error as exc:
                raise _lock_error(journal, path, exc) from None
            try:
                db.execute("PRAGMA locking_mode = EXCLUSIVE")  # kept after the transaction ends
                db.execute("PRAGMA journal_mode = OFF")  # nothing is ever written: no -journal file
                db.execute("BEGIN EXCLUSIVE")
                db.execute("COMMIT")
            except sqlite3.Error as exc:
                db.close()
                if _code(exc).startswith(("SQLITE_BUSY", "SQLITE_LOCKED")):
                    raise held from None
                raise _lock_error(journal, path, exc) from None
            _HELD.add(key)
        return cls(path, db, key)

    def release(self) -> None:
        """Let go (idempotent): the next opener may take the journal."""
        with _HOLDING:
            if self._released:
                return
            self._released = True
            try:
                self._db.close()
            finally:
                _HELD.discard(self._key)


def _file_key(path: Path) -> tuple[int, int] | None:
    try:
        info = os.stat(path)
    except OSError:
        return None
    return (info.st_dev, info.st_ino)


def _code(exc: sqlite3.Error) -> str:
    return str(getattr(exc, "sqlite_errorname", None) or "")


def _describe(exc: BaseException) -> str:
    """What SQLite (and through it the OS) said, with SQLite's code: 'database or disk is full
    (SQLITE_FULL)'."""
    text = str(exc) or type(exc).__name__
    code = _code(exc) if isinstance(exc, sqlite3.Error) else ""
    return f"{text} ({code})" if code and code not in text else text


def _cannot_write(exc: sqlite3.Error) -> bool:
    return _code(exc).startswith(("SQLITE_FULL", "SQLITE_IOERR", "SQLITE_READONLY"))


def _lock_error(journal: Path, path: Path, exc: sqlite3.Error) -> Exception:
    if _cannot_write(exc):
        return JournalFailed(str(journal), f"its lock file {str(path)!r}: {_describe(exc)}", at_start=True)
    return JournalUnreadable(
        f"journal {str(journal)!r}: cannot lock it with {str(path)!r} ({_describe(exc)})"
    )


def _open_error(target: Path, exc: sqlite3.Error) -> Exception:
    if _cannot_write(exc):
        return JournalFailed(str(target), _describe(exc), at_start=True)
    if _code(exc).startswith(("SQLITE_BUSY", "SQLITE_LOCKED")):
        return JournalLocked(f"journal {str(target)!r} is locked by another program ({_describe(exc)})")
    return JournalUnreadable(f"journal {str(target)!r} is not a readable journal: {_describe(exc)}")


@contextmanager
def _closed_on_failure(db: Any, errors: type[_E], error: Callable[[_E], Exception]) -> Iterator[None]:
    """An open that fails past its connection closes it (both journals): a database error is
    raised as ``error`` says it (unreadable, unwritable, locked), anything else as it is."""
    try:
        yield
    except errors as exc:
        db.close()
        raise error(exc) from None
    except BaseException:
        db.close()
        raise


def _may_have_run(e: Mapping[str, Any]) -> int:
    """What a part's row records as ``tool_started``: whether its tool may have run. More than the
    card says: a card shows ``tool_started`` only once nothing can gate its call any more, while a
    ``running`` call that no first permission gates (it waits for none) may have run already, and a
    crash must not call it one that did not. Both journals' writing."""
    return int(
        bool(e.get("tool_started")) or (e.get("state") == "running" and e.get("waiting_for") != "permission")
    )


def _settle_part_rows(rows: Iterable[Sequence[Any]]) -> tuple[PartSnapshot, ...]:
    """(call id, tool, state, tool_started) rows of a run's parts, in order -> its settled parts: an
    unfinished one ``interrupted`` by the crash, ``tool_started`` as recorded. Both journals' reading."""
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
                part_snapshot(tool=tool, state=PartState(state), tool_started=bool(started), call_id=call_id)
            )
    return tuple(parts)


def _settle_ask_rows(
    rows: Iterable[Sequence[Any]], run_id: str, session: str
) -> tuple[tuple[str, ...], tuple[AskSnapshot, ...]]:
    """(ask id, state, payload, kind, tool, call id, withdraw reason) rows of a run's asks, in order ->
    the ids the crash withdraws (open ones) and every described ask as it ended. Both journals' reading."""
    withdrawn: list[str] = []
    asks: list[AskSnapshot] = []
    for ask_id, recorded, payload, kind, tool, call_id, reason in rows:
        state = AskState(recorded) if recorded in _ASK_STATES else AskState.WITHDRAWN
        withdraw_reason = None if reason is None else WithdrawReason(reason)
        if state is AskState.OPEN:
            withdrawn.append(ask_id)
            state, withdraw_reason = AskState.WITHDRAWN, WithdrawReason.INTERRUPTED
        if kind is None:
            continue
        asks.append(
            AskSnapshot(
                ask_id=ask_id,
                run_id=run_id,
                session=session,
                kind=AskKind(kind),
                state=state,
                tool=tool,
                call_id=call_id,
                payload=_ask_payload(payload),
                withdraw_reason=withdraw_reason,
            )
        )
    return tuple(withdrawn), tuple(asks)


def _ask_payload(stored: str | None) -> AskPayload:
    try:
        return msgspec.json.decode(stored or "{}", type=AskPayload)
    except msgspec.DecodeError:  # written by this module from an AskPayload: only a damaged row
        return AskPayload()


class _Transaction:
    """BEGIN ... COMMIT; on any error (a failed COMMIT included: SQLITE_FULL may come there) the
    transaction is rolled back and the error raised: nothing of the batch is left half-written."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def __enter__(self) -> None:
        self._db.execute("BEGIN")

    def __exit__(self, kind: object, *rest: object) -> None:
        if kind is None:
            try:
                self._db.execute("COMMIT")
                return
            except BaseException:
                self._rollback()
                raise
        self._rollback()

    def _rollback(self) -> None:
        if self._db.in_transaction:
            try:
                self._db.execute("ROLLBACK")
            except sqlite3.Error:  # SQLite rolled back itself (it may, on SQLITE_FULL): nothing to undo
                pass


_SPECIAL: Final = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"))


def _refuse_special(target: Path) -> None:
    """A path that exists and is not a regular file (a directory, a FIFO, a device) is refused
    before anything opens it: a FIFO would block the start until some writer came."""
    try:
        mode = os.stat(target).st_mode
    except FileNotFoundError:
        return
    except OSError as exc:
        raise JournalUnreadable(f"journal {str(target)!r}: cannot read it ({exc.strerror})") from None
    if stat.S_ISREG(mode):
        return
    kind = next((name for test, name in _SPECIAL if test(mode)), "a device or other special file")
    raise JournalUnreadable(f"journal {str(target)!r} is {kind}, not a journal file; left untouched")


def _create(target: Path) -> None:
    """Create the file if it is missing, so an error says what the OS said (no such directory, no
    permission); SQLite's own would only say it was 'unable to open database file'."""
    try:
        os.close(os.open(target, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o600))
    except OSError as exc:
        raise JournalUnreadable(f"journal {str(target)!r}: cannot open it ({exc.strerror})") from None


def _refuse_foreign(target: Path) -> None:
    """A file that exists and is not an SQLite database is refused before SQLite may touch it."""
    try:
        with target.open("rb") as handle:
            head = handle.read(len(_SQLITE_HEADER))
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
    _add_columns(db)
    row = db.execute("SELECT value FROM meta WHERE key = 'boot'").fetchone()
    boot = int(row[0]) + 1 if row else 1
    return boot


_ADDED_COLUMNS: Final = (
    ("asks", "TEXT", ("kind", "tool", "call_id", "withdraw_reason")),
    ("runs", "INTEGER", ("epoch", "resume_count")),
)
"""Columns a journal written by an earlier run-supervisor may lack: the asks' descriptions (kept to
their run's end) and the runs' life and resume count."""


def _add_columns(db: sqlite3.Connection) -> None:
    """An older journal gains the columns it lacks, NULL in its old rows (no description, no epoch
    known, never resumed). Additive: a run-supervisor that does not know them reads and writes the
    file as before."""
    for table, kind, columns in _ADDED_COLUMNS:
        have = {row[1] for row in db.execute(f"PRAGMA table_info({table})")}
        missing = [column for column in columns if column not in have]
        if missing:
            with _Transaction(db):
                for column in missing:
                    db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")


def _begin_boot(journal: Journal) -> None:
    with journal._transaction():
        journal._db.execute("UPDATE meta SET value = ? WHERE key = 'boot'", (str(journal.boot),))
        journal._db.execute("UPDATE meta SET value = '0' WHERE key = 'clean'")


# --- events into rows (events arrive as wire dicts, the shape every host sees; both journals') ---------


def _run_row(e: Mapping[str, Any]) -> tuple[object, ...]:
    """What a run's row says of who it is, from its ``run.queued`` or ``run.started``."""
    return (e["run_id"], e["session"], e.get("parent_run_id"), e.get("resume_of"), e.get("resume_count", 0))


def _on_run_queued(j: Journal, cur: Any, e: Mapping[str, Any]) -> None:
    j._write(cur, j.sql.queue_run, _run_row(e))


def _on_run_started(j: Journal, cur: Any, e: Mapping[str, Any]) -> None:
    j._write(cur, j.sql.start_run, (*_run_row(e), e["directory"], e["generation"], e.get("epoch")))
    if j._parts.pop(e["run_id"], None) is not None:  # an id used again: the old run's parts go
        j._write(cur, j.sql.drop_parts, (e["run_id"],))


def _on_part(j: Journal, cur: Any, e: Mapping[str, Any]) -> None:
    key = str(e.get("call_id") or e.get("part_id") or e.get("index") or e.get("tool"))
    keys = j._parts.setdefault(e["run_id"], {})
    position = keys.setdefault(key, len(keys))
    row = (e["run_id"], key, position, e["tool"], e["state"], e.get("phase"), _may_have_run(e))
    j._write(cur, j.sql.put_part, row)


def _on_run_finished(j: Journal, cur: Any, e: Mapping[str, Any]) -> None:
    j._finished_order += 1
    j._since_compaction += 1
    end = (e["outcome"], e.get("reason"), e.get("origin"), e.get("action_id"), j._finished_order, e["run_id"])
    j._write(cur, j.sql.finish_run, end)
    if j._parts.pop(e["run_id"], None) is not None:
        j._write(cur, j.sql.drop_parts, (e["run_id"],))
    if j._asking.pop(e["run_id"], 0):
        j._write(cur, j.sql.drop_asks, (e["run_id"],))


def _on_ask_requested(j: Journal, cur: Any, e: Mapping[str, Any]) -> None:
    payload = e.get("payload")
    stored = None if payload is None else json.dumps(payload)
    row = (e["ask_id"], e["run_id"], stored, e.get("kind"), e.get("tool"), e.get("call_id"))
    j._write(cur, j.sql.open_ask, row)
    j._asking[e["run_id"]] = j._asking.get(e["run_id"], 0) + 1


def _ask_ended(state: AskState) -> Callable[[Journal, Any, Mapping[str, Any]], None]:
    def on_ask_ended(j: Journal, cur: Any, e: Mapping[str, Any]) -> None:
        j._write(cur, j.sql.set_ask_state, (state.value, e["ask_id"]))

    return on_ask_ended


def _on_ask_withdrawn(j: Journal, cur: Any, e: Mapping[str, Any]) -> None:
    j._write(cur, j.sql.withdraw_ask, (e.get("reason"), e["ask_id"]))


def _on_lifecycle_requested(j: Journal, cur: Any, e: Mapping[str, Any]) -> None:
    directories = json.dumps(e.get("directories"))
    row = (j.boot, e["action_id"], e.get("do"), e.get("mode"), e.get("origin"), directories)
    j._write(cur, j.sql.request_action, row)


def _on_lifecycle_completed(j: Journal, cur: Any, e: Mapping[str, Any]) -> None:
    j._write(cur, j.sql.complete_action, (j.boot, e["action_id"]))


def _on_action_result(j: Journal, cur: Any, e: Mapping[str, Any]) -> None:
    j._write(cur, j.sql.set_action_result, (e["result"], j.boot, e["action_id"]))


# Not recorded, on purpose: run.stalled / run.unstalled (a flag of a live run; after a crash the run is
# recovered as interrupted with reason crash, never stalled) and lifecycle.confirmed (what it decided
# reaches the journal as the runs' run.finished -- reason lifecycle_interrupt, the close's action_id --
# and the close's lifecycle.completed). Events without a handler are skipped.
_HANDLERS: Final[Mapping[str, Callable[[Journal, Any, Mapping[str, Any]], None]]] = {
    "run.queued": _on_run_queued,
    "run.started": _on_run_started,
    "run.part.updated": _on_part,
    "run.finished": _on_run_finished,
    "ask.requested": _on_ask_requested,
    "ask.replied": _ask_ended(AskState.REPLIED),
    "ask.dismissed": _ask_ended(AskState.DISMISSED),
    "ask.withdrawn": _on_ask_withdrawn,
    "lifecycle.requested": _on_lifecycle_requested,
    "lifecycle.completed": _on_lifecycle_completed,
    "action.result": _on_action_result,
}


# --- the writer: journal first, subscribers after ------------------------------------------------------

_CLOSE: Final = object()


def is_journal_url(target: str) -> bool:
    """``target`` names a PostgreSQL journal (``postgresql://`` or ``postgres://``), not a file."""
    return target.startswith(("postgresql://", "postgres://"))


@dataclass(frozen=True, slots=True)
class _Lost:
    failure: JournalFailed


@dataclass(frozen=True, slots=True)
class _Call:
    call: Callable[[], object]


def _run_call(item: _Call) -> None:
    try:
        item.call()
    except Exception:  # settling a future never raises; anything else is a bug, contained here
        logger.opt(exception=True).error("an answer could not be delivered after the journal")


def _fail_call(item: _Call, failure: JournalFailed) -> None:
    """An answer whose events did not commit: one that can fail (it has ``fail``, as the
    supervisor's answers do) fails with the journal's error; any other call goes as it is."""
    fail = getattr(item.call, "fail", None)
    if fail is None:
        _run_call(item)
        return
    try:
        fail(copy.copy(failure))  # a copy each: one exception raised in many threads gets tangled
    except Exception:
        logger.opt(exception=True).error("an answer could not be failed after the journal failed")


class JournaledPublisher(Publisher):
    """A Publisher whose events reach the subscriptions only once they are committed to the journal.

    ``publish`` (on the supervisor's thread) only appends to a queue. The writer thread takes what
    has queued up (at most a batch), applies it in one transaction, commits, then delivers it.

    The first batch that does not commit stops it for good (``failure``): that batch's events and
    every later one are dropped, the answers among them fail with ``JournalFailed``, every
    subscription is closed at once and ``on_failure`` is called (the supervisor stops taking work
    and shuts down). Nothing is delivered that the journal does not hold."""

    def __init__(
        self, journal: Journal, *, on_failure: Callable[[JournalFailed], object] | None = None
    ) -> None:
        super().__init__()
        self.journal = journal
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._abandoned = False
        self._on_failure = on_failure
        self.failure: JournalFailed | None = None
        """Why the journal stopped recording (the first batch that did not commit); None while it
        records."""
        self.thread = threading.Thread(target=self._write, name="run-supervisor-journal", daemon=True)
        self.thread.start()
        journal.watch(self._lost)

    def _lost(self, failure: JournalFailed) -> None:
        """The journal is no longer ours to write (a lost lease): stop as at a failed batch, now,
        not at the next event (which could not commit anyway)."""
        self._queue.put(_Lost(failure))

    def publish(self, event: Event) -> None:
        if not self._abandoned:
            self._queue.put(event)

    def after(self, call: Callable[[], object]) -> None:
        """Run ``call`` (an answer to a request) on the writer, after the events published before it
        were committed and delivered: with a journal as without one, a request's answer never comes
        before the events it caused, and those are durable by then (if they could not be committed,
        a ``call`` that has a ``fail(error)`` method is failed with ``JournalFailed`` instead)."""
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
            self._take(batch)
        self._take(self._leftovers())  # an answer that raced the close (a kill) still goes
        try:
            if self._abandoned:
                self.journal.abandon()
            else:
                self.journal.close(clean=self.failure is None)
        except Exception:  # the clean mark did not reach the disk: the next start only looks harder
            logger.opt(exception=True).warning("the run journal could not record its clean shutdown")
        finally:
            super().close_all()

    def _take(self, batch: list[Any]) -> None:
        if self._abandoned:  # a simulated kill: nothing written or delivered; answers still go
            for item in batch:
                if isinstance(item, _Call):
                    _run_call(item)
            return
        lost = next((item for item in batch if isinstance(item, _Lost)), None)
        if lost is not None:
            batch = [item for item in batch if not isinstance(item, _Lost)]
            if self.failure is None:
                self._failed(lost.failure)
        events = [item for item in batch if not isinstance(item, _Call)]
        if events and self.failure is None:
            try:
                self.journal.apply(msgspec.to_builtins(event) for event in events)
            except Exception as exc:  # a full disk, an I/O error: stop, as a crash at the last commit
                self._failed(exc)
        failure = self.failure
        if failure is not None:  # not committed: nothing is delivered as if it were
            for item in batch:
                if isinstance(item, _Call):
                    _fail_call(item, failure)
            return
        for item in batch:  # committed: deliver in order, each answer after the events before it
            if isinstance(item, _Call):
                _run_call(item)
            else:
                super().publish(item)

    def _failed(self, exc: Exception) -> None:
        failure = self.journal.failure(exc)
        self.failure = failure
        logger.opt(exception=exc).error(str(failure))
        if self._on_failure is not None:
            try:
                self._on_failure(failure)  # first: a subscriber woken by its end finds the failure told
            except Exception:
                logger.opt(exception=True).error("the supervisor could not be told the journal failed")
        super().close_all()  # every subscription ends now, having seen only what the journal holds

    def _leftovers(self) -> list[Any]:
        items: list[Any] = []
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return items
            if item is not _CLOSE:
                items.append(item)


def start_journal(
    journal: Journal, core: SupervisorCore, *, retain_finished: int, resume_budget: int | None = None
) -> list[Event]:
    """Recover what the previous process left unfinished and begin this process's boot: the journal
    is settled (one transaction) and the core takes the recovered runs on, before any request. Returns
    the ``run.recovered`` events, in order, for the publisher. ``resume_budget`` is the resume
    policy's (None: none): the core decides with it which runs are offered (``resume_verdict``).

    If the journal cannot be written (a full disk), it is let go and ``JournalFailed`` says why:
    the supervisor does not start."""
    try:
        journal.retain_finished = retain_finished
        plan = journal.read_recovery()
        journal.settle(plan)
        journal.begin_boot()
    except journal.db_errors as exc:
        journal.abandon()
        raise journal.start_error(exc) from None
    except BaseException:
        journal.abandon()
        raise
    core.epoch = journal.boot  # this life: its generations and runs carry it
    commands = core.recover(plan.runs, resume_budget=resume_budget)
    return [command.event for command in commands if isinstance(command, Emit)]
