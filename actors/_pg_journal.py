"""The run journal in PostgreSQL: one shard of a shared database, owned through a lease.

Behind the same interface as the SQLite journal (actors/_journal.py: ``read_recovery``, ``settle``,
``apply``, ``close``, ``abandon``), with the same durability rule (the writer commits a batch and
only then delivers it) and the same recovery (reason ``crash``, settled cards, withdrawn asks, once
per run). What it adds is ownership across machines:

* ``rs_leases`` has one row per shard: ``epoch`` (counted up at every acquisition), ``holder``,
  ``expires_at`` (the database's clock, so the machines' clocks never matter). A start takes the
  lease only when it is free or expired, and only then reads what the shard left unfinished: a
  successor declares ``crash`` only once it holds the lease.
* The journal's ``boot`` is the lease epoch, so ``Supervisor.epoch`` and the event ids the hosts
  build from it (``<epoch>:<seq>``) name the lease they were written under.
* Every transaction that writes the shard (recovery, each batch, the clean mark) begins by renewing
  the lease *conditionally*: ``UPDATE rs_leases ... WHERE shard AND epoch = ours AND expires_at >
  now``. No row: the lease is lost, nothing of the batch commits, and the journal fails with
  ``LeaseLost``. The row lock that UPDATE takes orders each batch against a takeover: a batch that
  renewed commits before the successor can see the row expired, one that comes after finds a newer
  epoch.
* A renewer thread renews every third of the TTL on its own connection. When it cannot (the lease
  was taken, or the database did not answer before the lease would have expired by our own
  monotonic clock) it tells the publisher, which stops the supervisor at once: requests are refused
  with ``LeaseLost`` and it shuts down, writing nothing more.
* Takeovers, releases and owner URLs are told on ``NOTIFY run_supervisor_owner`` (the owner
  directory: actors/_shards.py).
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Final

from run_supervisor.actors._errors import JournalFailed, JournalLocked, JournalUnreadable
from run_supervisor.actors._journal import (
    _PART_COLUMNS,
    _RUN_UPSERT_SET,
    Journal,
    JournalSync,
    Statements,
    _closed_on_failure,
)
from run_supervisor.actors._logging import logger
from run_supervisor.actors._shards import NOTIFY_CHANNEL, JournalTarget, LeaseLost, parse_journal_url

try:
    import psycopg
except ImportError:  # pragma: no cover - the extra is not installed
    psycopg = None  # type: ignore[assignment]

__all__ = ["PgJournal"]

SCHEMA_VERSION: Final = 1
_SCHEMA_LOCK: Final = 0x52535631  # pg_advisory_xact_lock key while creating the tables ("RSV1")

_SCHEMA: Final = f"""
CREATE TABLE IF NOT EXISTS rs_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS rs_leases (
    shard TEXT PRIMARY KEY,
    epoch BIGINT NOT NULL,
    holder TEXT,
    owner_url TEXT,
    acquired_at TIMESTAMPTZ,
    expires_at TIMESTAMPTZ NOT NULL,
    clean INTEGER NOT NULL DEFAULT 1
);
CREATE TABLE IF NOT EXISTS rs_epochs (      -- every lease taken: who, when, how many batches it wrote
    shard TEXT NOT NULL,
    epoch BIGINT NOT NULL,
    holder TEXT NOT NULL,
    owner_url TEXT,
    acquired_at TIMESTAMPTZ NOT NULL,
    released_at TIMESTAMPTZ,
    batches BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (shard, epoch)
);
CREATE TABLE IF NOT EXISTS rs_runs (
    shard TEXT NOT NULL,
    run_id TEXT NOT NULL,
    seq BIGSERIAL,
    session TEXT NOT NULL,
    directory TEXT,
    generation INTEGER,
    parent_run_id TEXT,
    resume_of TEXT,
    state TEXT NOT NULL,
    outcome TEXT,
    reason TEXT,
    origin TEXT,
    action_id TEXT,
    finished_order BIGINT,
    PRIMARY KEY (shard, run_id)
);
ALTER TABLE rs_runs ADD COLUMN IF NOT EXISTS epoch BIGINT;  -- the life its generation belongs to
ALTER TABLE rs_runs ADD COLUMN IF NOT EXISTS resume_count INTEGER;  -- continued after a crash, in a row
CREATE INDEX IF NOT EXISTS rs_runs_unfinished ON rs_runs (shard, seq) WHERE state != 'finished';
CREATE INDEX IF NOT EXISTS rs_runs_finished_order ON rs_runs (shard, finished_order)
    WHERE finished_order IS NOT NULL;
CREATE TABLE IF NOT EXISTS rs_parts (
    shard TEXT NOT NULL,{_PART_COLUMNS}
    PRIMARY KEY (shard, run_id, part_key)
);
CREATE TABLE IF NOT EXISTS rs_asks (
    shard TEXT NOT NULL,
    ask_id TEXT NOT NULL,
    seq BIGSERIAL,
    run_id TEXT NOT NULL,
    state TEXT NOT NULL,
    payload TEXT,
    kind TEXT,
    tool TEXT,
    call_id TEXT,
    withdraw_reason TEXT,
    PRIMARY KEY (shard, ask_id)
);
CREATE INDEX IF NOT EXISTS rs_asks_run ON rs_asks (shard, run_id);
CREATE TABLE IF NOT EXISTS rs_actions (
    shard TEXT NOT NULL,
    boot BIGINT NOT NULL,
    action_id TEXT NOT NULL,
    seq BIGSERIAL,
    what TEXT,
    mode TEXT,
    origin TEXT,
    directories TEXT,
    result TEXT,
    completed INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (shard, boot, action_id)
);
"""

_RENEW: Final = (
    "UPDATE rs_leases SET expires_at = clock_timestamp() + make_interval(secs => %s)"
    " WHERE shard = %s AND epoch = %s AND holder = %s AND expires_at > clock_timestamp() RETURNING epoch"
)


_SHARD: Final = "shard = %s"
"""Every statement's last condition and last parameter: the journal's shard (``Journal.scope``)."""

_RUN_RESET: Final = (
    " seq = DEFAULT, session = excluded.session, directory = NULL, generation = NULL,"
    " parent_run_id = excluded.parent_run_id, resume_of = excluded.resume_of, state = 'queued',"
    " outcome = NULL, reason = NULL, origin = NULL, action_id = NULL, finished_order = NULL, epoch = NULL,"
    " resume_count = excluded.resume_count"
)
"""SQLite's INSERT OR REPLACE of a queued run: every column new, and last in ``seq``'s order."""

_POSTGRESQL: Final = Statements(
    finished_order=f"SELECT COALESCE(MAX(finished_order), 0) FROM rs_runs WHERE {_SHARD}",
    unfinished_runs="SELECT run_id, session, directory, generation, parent_run_id, state, epoch, resume_count"
    f" FROM rs_runs WHERE state != 'finished' AND {_SHARD} ORDER BY seq",
    run_parts=f"SELECT part_key, tool, state, tool_started FROM rs_parts WHERE run_id = %s AND {_SHARD}"
    " ORDER BY position",
    run_asks="SELECT ask_id, state, payload, kind, tool, call_id, withdraw_reason FROM rs_asks"
    f" WHERE run_id = %s AND {_SHARD} ORDER BY seq",
    pending_actions=f"SELECT boot, action_id FROM rs_actions WHERE completed = 0 AND {_SHARD} ORDER BY seq",
    counts={
        "runs": f"SELECT COUNT(*) FROM rs_runs WHERE {_SHARD}",
        "unfinished_runs": f"SELECT COUNT(*) FROM rs_runs WHERE state != 'finished' AND {_SHARD}",
        "parts": f"SELECT COUNT(*) FROM rs_parts WHERE {_SHARD}",
        "open_asks": f"SELECT COUNT(*) FROM rs_asks WHERE state = 'open' AND {_SHARD}",
        "pending_actions": f"SELECT COUNT(*) FROM rs_actions WHERE completed = 0 AND {_SHARD}",
    },
    settle_run="UPDATE rs_runs SET state = 'finished', outcome = 'interrupted', reason = 'crash',"
    f" origin = 'crash', finished_order = %s WHERE run_id = %s AND {_SHARD}",
    settle_actions="UPDATE rs_actions SET completed = 1, result = COALESCE(result, 'completed')"
    f" WHERE {_SHARD}",
    compact_runs="DELETE FROM rs_runs WHERE finished_order IS NOT NULL AND finished_order <= %s"
    f" AND {_SHARD}",
    compact_actions=f"DELETE FROM rs_actions WHERE completed = 1 AND boot < %s AND {_SHARD}",
    queue_run="INSERT INTO rs_runs (run_id, session, parent_run_id, resume_of, resume_count, state, shard)"
    " VALUES (%s, %s, %s, %s, %s, 'queued', %s) ON CONFLICT (shard, run_id) DO UPDATE SET" + _RUN_RESET,
    start_run="INSERT INTO rs_runs (run_id, session, parent_run_id, resume_of, resume_count, directory,"
    " generation, epoch, state, shard) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, 'active', %s)"
    " ON CONFLICT (shard, run_id) DO UPDATE SET" + _RUN_UPSERT_SET,
    drop_parts=f"DELETE FROM rs_parts WHERE run_id = %s AND {_SHARD}",
    drop_asks=f"DELETE FROM rs_asks WHERE run_id = %s AND {_SHARD}",
    put_part="INSERT INTO rs_parts (run_id, part_key, position, tool, state, phase, tool_started, shard)"
    " VALUES (%s, %s, %s, %s, %s, %s, %s, %s)"
    " ON CONFLICT (shard, run_id, part_key) DO UPDATE SET state = excluded.state, phase = excluded.phase,"
    " tool_started = excluded.tool_started",
    finish_run="UPDATE rs_runs SET state = 'finished', outcome = %s, reason = %s, origin = %s,"
    f" action_id = %s, finished_order = %s WHERE run_id = %s AND {_SHARD}",
    open_ask="INSERT INTO rs_asks (ask_id, run_id, payload, kind, tool, call_id, state, withdraw_reason,"
    " shard) VALUES (%s, %s, %s, %s, %s, %s, 'open', NULL, %s) ON CONFLICT (shard, ask_id) DO UPDATE SET"
    " seq = DEFAULT, run_id = excluded.run_id, payload = excluded.payload, kind = excluded.kind,"
    " tool = excluded.tool, call_id = excluded.call_id, state = 'open', withdraw_reason = NULL",
    set_ask_state=f"UPDATE rs_asks SET state = %s WHERE ask_id = %s AND {_SHARD}",
    withdraw_ask="UPDATE rs_asks SET state = 'withdrawn', withdraw_reason = %s"
    f" WHERE ask_id = %s AND {_SHARD}",
    request_action="INSERT INTO rs_actions (boot, action_id, what, mode, origin, directories, shard)"
    " VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
    complete_action=f"UPDATE rs_actions SET completed = 1 WHERE boot = %s AND action_id = %s AND {_SHARD}",
    set_action_result=f"UPDATE rs_actions SET result = %s WHERE boot = %s AND action_id = %s AND {_SHARD}",
)


def _need_psycopg() -> None:
    if psycopg is None:
        raise JournalUnreadable(
            "a postgresql:// journal needs psycopg 3: pip install 'run-supervisor[postgresql]'"
        )


class PgJournal(Journal):
    """One shard of a PostgreSQL journal, held under its lease (see the module's docstring)."""

    db_errors: tuple[type[Exception], ...] = ()  # set at import below, when psycopg is there
    sql = _POSTGRESQL

    def __init__(self, target: JournalTarget, db: Any, holder: str, epoch: int, clean: bool) -> None:
        # Not Journal.__init__: that one is the SQLite file's. The attributes Journal's callers read:
        self.path = target.display
        self.boot = epoch
        self.target = target
        self.shard = target.shard
        self.scope = (target.shard,)
        self.holder = holder
        self._pg = db
        self._clean_at_take = clean
        self._begin_rows()
        self._lost: LeaseLost | None = None
        self._on_lost: Callable[[JournalFailed], object] | None = None
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None
        self.renewals = 0
        self.batches = 0

    # --- opening: the schema, then the lease ------------------------------------------------------

    @classmethod
    def open(cls, path: Any, *, synchronous: JournalSync = "normal") -> PgJournal:
        """Open shard ``shard`` of the journal in the database ``path`` names (a ``postgresql://``
        URL; see ``actors._shards.parse_journal_url`` for ``shard``, ``lease_ttl``, ``lease_wait``
        and ``owner_url``). The tables are created if missing. The lease is taken if it is free or
        expired (waiting up to ``lease_wait`` seconds for one that is held, woken by a release's
        NOTIFY); one still held raises ``JournalLocked`` naming its holder and when it expires.
        ``synchronous="full"`` asks the server to commit synchronously whatever its default is."""
        _need_psycopg()
        target = parse_journal_url(str(path))
        try:
            db = psycopg.connect(
                target.conninfo, autocommit=True, connect_timeout=10, application_name=_app_name(target)
            )
        except psycopg.Error as exc:
            raise JournalUnreadable(f"journal {target.display!r}: cannot connect ({_pg_text(exc)})") from None
        with _closed_on_failure(db, psycopg.Error, lambda exc: _open_error(target, exc)):
            if synchronous == "full":
                db.execute("SET synchronous_commit = on")
            _prepare(db, target)
            holder = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
            epoch, clean = _take_lease(db, target, holder)
            journal = cls(target, db, holder, epoch, clean)
        journal._start_renewer()
        return journal

    # --- the database under Journal's reading and writing ---------------------------------------------

    def _reader(self) -> Any:
        return self._pg

    @contextmanager
    def _writing(self) -> Iterator[Any]:
        """A transaction that first renews the lease at our epoch (``_fence``): a successor that
        took the shard meanwhile sees nothing of it."""
        with self._pg.transaction():
            cur = self._pg.cursor()
            self._fence(cur)
            yield cur

    def _was_clean(self) -> bool:
        return self._clean_at_take

    # --- the lease ---------------------------------------------------------------------------------

    def _fence(self, cur: Any) -> None:
        """The first statement of every writing transaction: renew the lease if it is still ours
        and unexpired, else fail the transaction (nothing of it commits) with ``LeaseLost``."""
        if self._lost is not None:
            raise self._lost
        row = cur.execute(_RENEW, (self.target.lease_ttl_s, self.shard, self.boot, self.holder)).fetchone()
        if row is None:
            raise self._lose("a write found the lease expired or taken by a newer epoch")
        cur.execute(
            "UPDATE rs_epochs SET batches = batches + 1 WHERE shard = %s AND epoch = %s",
            (self.shard, self.boot),
        )

    def _lose(self, why: str) -> LeaseLost:
        if self._lost is None:
            self._lost = LeaseLost(self.target.display, self.shard, self.boot, why)
            logger.error(str(self._lost))
        return self._lost

    def watch(self, on_lost: Callable[[JournalFailed], object]) -> None:
        self._on_lost = on_lost
        if self._lost is not None:
            on_lost(self._lost)

    def _start_renewer(self) -> None:
        self._renewer = threading.Thread(
            target=self._renew_loop, name=f"run-supervisor-lease-{self.shard}", daemon=True
        )
        self._renewer.start()

    def _renew_loop(self) -> None:
        """Renew every third of the TTL; give up -- and stop the supervisor -- when the lease was
        taken, or when the database has not confirmed a renewal for a whole TTL (by our own clock:
        past that a successor may hold it)."""
        ttl = self.target.lease_ttl_s
        confirmed = time.monotonic()
        db: Any = None
        while not self._stop.wait(ttl / 3):
            try:
                if db is None:
                    db = psycopg.connect(
                        self.target.conninfo, autocommit=True, connect_timeout=max(1, int(ttl))
                    )
                    db.execute(
                        "SELECT set_config('statement_timeout', %s, false)", (str(max(100, int(ttl * 500))),)
                    )
                started = time.monotonic()
                row = db.execute(_RENEW, (ttl, self.shard, self.boot, self.holder)).fetchone()
                if row is None:
                    self._give_up("the lease expired or a successor took it (a renewal found a newer epoch)")
                    break
                confirmed = started
                self.renewals += 1
            except psycopg.Error as exc:
                if db is not None:
                    db.close()
                    db = None
                if time.monotonic() - confirmed >= ttl:
                    self._give_up(f"no renewal was confirmed for {ttl:g} s ({_pg_text(exc)})")
                    break
            if time.monotonic() - confirmed >= ttl:  # frozen, or the database too slow to tell
                self._give_up(f"no renewal was confirmed for {ttl:g} s")
                break
        if db is not None:
            db.close()

    def _give_up(self, why: str) -> None:
        lost = self._lose(why)
        callback = self._on_lost
        if callback is not None:
            try:
                callback(lost)
            except Exception:
                logger.opt(exception=True).error("the supervisor could not be told its lease was lost")

    def _stop_renewer(self) -> None:
        self._stop.set()
        renewer = self._renewer
        if renewer is not None and renewer is not threading.current_thread():
            renewer.join(timeout=self.target.lease_ttl_s + 5)

    # --- recovery and writing: Journal's, over this database's statements ---------------------------

    def begin_boot(self) -> None:
        with self._writing() as cur:
            cur.execute(
                "UPDATE rs_leases SET clean = 0 WHERE shard = %s AND epoch = %s", (self.shard, self.boot)
            )

    def apply(self, events: Iterable[Mapping[str, Any]]) -> None:
        super().apply(events)
        self.batches += 1

    def close(self, *, clean: bool) -> None:
        """Let the lease go (a successor may take it at once, told by NOTIFY); ``clean`` records a
        clean shutdown first, in the same fenced transaction. A journal whose lease was lost writes
        nothing: not even its clean mark."""
        self._let_go(
            "released",
            (
                "UPDATE rs_leases SET clean = %s, holder = NULL, owner_url = NULL,"
                " expires_at = clock_timestamp() WHERE shard = %s AND epoch = %s",
                (1 if clean else 0, self.shard, self.boot),
            ),
            (
                "UPDATE rs_epochs SET released_at = clock_timestamp() WHERE shard = %s AND epoch = %s",
                (self.shard, self.boot),
            ),
            fenced=True,
        )

    def abandon(self) -> None:
        """As a killed process, as far as the journal goes: no clean mark, nothing more written.
        The lease is let go (expired now, epoch kept) when the database can still be told, as a
        kill lets go of an SQLite file's lock; a real kill leaves it to expire at its TTL."""
        try:
            self._let_go(
                "abandoned",
                (
                    "UPDATE rs_leases SET expires_at = clock_timestamp()"
                    " WHERE shard = %s AND epoch = %s AND holder = %s",
                    (self.shard, self.boot, self.holder),
                ),
                fenced=False,
            )
        except psycopg.Error:
            pass

    def _let_go(self, what: str, *statements: tuple[str, tuple[Any, ...]], fenced: bool) -> None:
        """The journal's last transaction (once; none once the lease was lost): ``statements`` and
        the NOTIFY telling ``what`` became of the lease, fenced if asked; then the renewer stops and
        the connection closes, whatever the transaction did."""
        if self._closed:
            return
        self._closed = True
        self._stop_renewer()
        try:
            if self._lost is None:
                with self._pg.transaction():
                    cur = self._pg.cursor()
                    if fenced:
                        self._fence(cur)
                    for sql, params in statements:
                        cur.execute(sql, params)
                    _notify(cur, self.shard, self.boot, None, None, what)
        finally:
            self._pg.close()

    def failure(self, exc: BaseException, *, at_start: bool = False) -> JournalFailed:
        if isinstance(exc, JournalFailed):
            return exc
        return JournalFailed(self.target.display, _pg_text(exc), at_start=at_start)

    def start_error(self, exc: Exception) -> Exception:
        if isinstance(exc, JournalFailed):
            return exc
        return _open_error(self.target, exc)

    def statistics(self) -> dict[str, int]:
        return {
            **super().statistics(),
            "lease_epoch": self.boot,
            "lease_renewals": self.renewals,
            "lease_lost": int(self._lost is not None),
        }

    def publish_owner_url(self, url: str | None) -> None:
        """Where clients reach this owner, in the owner directory (fenced: a lost lease publishes
        nothing), told by NOTIFY. Runs on the caller's thread on a connection of its own."""
        with psycopg.connect(self.target.conninfo, autocommit=True) as db, db.transaction():
            row = db.execute(_RENEW, (self.target.lease_ttl_s, self.shard, self.boot, self.holder)).fetchone()
            if row is None:
                raise self._lose("publishing the owner URL found the lease expired or taken")
            db.execute(
                "UPDATE rs_leases SET owner_url = %s WHERE shard = %s AND epoch = %s",
                (url, self.shard, self.boot),
            )
            db.execute(
                "UPDATE rs_epochs SET owner_url = %s WHERE shard = %s AND epoch = %s",
                (url, self.shard, self.boot),
            )
            _notify(db, self.shard, self.boot, self.holder, url, "url")

    @property
    def lease_lost(self) -> LeaseLost | None:
        """Why this journal stopped being ours to write (None while we hold the lease)."""
        return self._lost


if psycopg is not None:
    PgJournal.db_errors = (psycopg.Error,)


# --- opening --------------------------------------------------------------------------------------------


def _prepare(db: Any, target: JournalTarget) -> None:
    with db.transaction():
        db.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
        db.execute(_SCHEMA)
        row = db.execute("SELECT value FROM rs_meta WHERE key = 'schema_version'").fetchone()
        if row is None:
            db.execute(
                "INSERT INTO rs_meta (key, value) VALUES ('schema_version', %s)", (str(SCHEMA_VERSION),)
            )
        elif row[0] != str(SCHEMA_VERSION):
            raise JournalUnreadable(
                f"journal {target.display!r} has schema version {row[0]}; this run-supervisor reads version "
                f"{SCHEMA_VERSION}"
            )


def _take_lease(db: Any, target: JournalTarget, holder: str) -> tuple[int, bool]:
    """Take the shard's lease (epoch + 1) once it is free or expired; wait for it up to
    ``lease_wait`` seconds, woken by a release's NOTIFY or at the holder's expiry."""
    deadline = time.monotonic() + target.lease_wait_s
    listening = False
    try:
        while True:
            taken, state = _try_lease(db, target, holder)
            if taken is not None:
                return taken
            held_by, left = state
            now = time.monotonic()
            if now >= deadline:
                raise JournalLocked(
                    f"journal {target.display!r}: shard {target.shard!r} is held by a live supervisor "
                    f"({held_by}, its lease expires in {left:.2f} s unless renewed); a shard has one owner"
                )
            if not listening:
                db.execute(f"LISTEN {NOTIFY_CHANNEL}")
                db.execute(
                    "SELECT set_config('application_name', %s, false)", (_app_name(target, "waiting"),)
                )
                listening = True
                continue  # a release between the try and the LISTEN is seen by trying again
            wait = max(0.01, min(deadline - now, left + 0.01))
            for _ in db.notifies(timeout=wait, stop_after=1):
                pass
    finally:
        if listening:
            db.execute(f"UNLISTEN {NOTIFY_CHANNEL}")
            db.execute("SELECT set_config('application_name', %s, false)", (_app_name(target),))


def _try_lease(
    db: Any, target: JournalTarget, holder: str
) -> tuple[tuple[int, bool] | None, tuple[str, float]]:
    with db.transaction():
        db.execute(
            "INSERT INTO rs_leases (shard, epoch, expires_at) VALUES (%s, 0, TIMESTAMPTZ 'epoch')"
            " ON CONFLICT (shard) DO NOTHING",
            (target.shard,),
        )
        row = db.execute(
            "SELECT holder, expires_at > clock_timestamp(),"
            " EXTRACT(EPOCH FROM expires_at - clock_timestamp()),"
            " clean FROM rs_leases WHERE shard = %s FOR UPDATE",
            (target.shard,),
        ).fetchone()
        held_by, live, left, clean = row
        if live:
            return None, (str(held_by), float(left))
        (epoch,) = db.execute(
            "UPDATE rs_leases SET epoch = epoch + 1, holder = %s, owner_url = %s,"
            " acquired_at = clock_timestamp(),"
            " expires_at = clock_timestamp() + make_interval(secs => %s) WHERE shard = %s RETURNING epoch",
            (holder, target.owner_url, target.lease_ttl_s, target.shard),
        ).fetchone()
        db.execute(
            "INSERT INTO rs_epochs (shard, epoch, holder, owner_url, acquired_at)"
            " VALUES (%s, %s, %s, %s, clock_timestamp())",
            (target.shard, epoch, holder, target.owner_url),
        )
        _notify(db, target.shard, int(epoch), holder, target.owner_url, "acquired")
        return (int(epoch), bool(clean)), ("", 0.0)


def _app_name(target: JournalTarget, what: str = "owner") -> str:
    """What ``pg_stat_activity`` shows for our connections: the shard, and whether we own or wait."""
    return f"run-supervisor {what} {target.shard}"[:63]


def _notify(cur: Any, shard: str, epoch: int, holder: str | None, url: str | None, what: str) -> None:
    payload = json.dumps({"shard": shard, "epoch": epoch, "holder": holder, "url": url, "what": what})
    cur.execute("SELECT pg_notify(%s, %s)", (NOTIFY_CHANNEL, payload))


def _pg_text(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    state = getattr(exc, "sqlstate", None)
    return f"{text} (SQLSTATE {state})" if state else text


def _open_error(target: JournalTarget, exc: BaseException) -> Exception:
    state = str(getattr(exc, "sqlstate", "") or "")
    if state.startswith(("53", "58")) or state in ("25006", "42501"):  # no space, I/O, read-only, no right
        return JournalFailed(target.display, _pg_text(exc), at_start=True)
    return JournalUnreadable(f"journal {target.display!r} is not a usable journal: {_pg_text(exc)}")
