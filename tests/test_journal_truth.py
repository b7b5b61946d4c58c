"""The journal tells the truth: a full disk stops the supervisor instead of delivering what the
journal does not hold, a restart says why it cannot open, a late reply after a crash is told what
became of its ask, a crash lets go of the file before it returns, and the lock needs no fcntl."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest
from pg_support import crash_during, sqlite_only, start_on

from run_supervisor import (
    AskAlreadyAnswered,
    AskWithdrawn,
    Gate,
    JournalFailed,
    JournalLocked,
    JournalUnreadable,
    NoInstanceHooks,
    Outcome,
    RunContext,
    Supervisor,
    SupervisorClosed,
    SupervisorConfig,
)
from run_supervisor.actors._journal import Journal, JournaledPublisher
from run_supervisor.actors._pg_journal import PgJournal
from run_supervisor.actors.testing import EventLog, simulate_crash
from run_supervisor.protocol import AskRequested, CancelRun, Event, RunFinished, RunStarted
from run_supervisor.protocol import AskWithdrawn as AskWithdrawnEvent

ROOT = Path(__file__).resolve().parents[1]
CONFIG = SupervisorConfig(shutdown_at_exit=False, default_grace_ms=500)


def start(opened: list[Supervisor], journal: Path | str, **kwargs: Any) -> Supervisor:
    return start_on(opened, CONFIG, journal, **kwargs)


def on_the_writer(sup: Supervisor, sql: str) -> None:
    """Run ``sql`` on the journal's own connection, on its writer thread between two batches (the
    fault seam: nothing else uses the connection then)."""
    publisher = sup._publisher
    assert isinstance(publisher, JournaledPublisher)
    done = threading.Event()

    def run() -> None:
        journal = publisher.journal
        if isinstance(journal, PgJournal):
            journal._pg.execute(sql)
        else:
            journal._db.execute(sql)
        done.set()

    publisher.after(run)
    assert done.wait(5)


def fill_the_disk(sup: Supervisor) -> None:
    """From now on the journal file cannot grow: SQLite answers a write that needs a new page with
    SQLITE_FULL, the code a full disk gives (max_page_count clamps to the current size). On
    PostgreSQL a check on the shard's asks refuses a big one: the write that needs room fails, as
    on a server whose disk is full (SQLSTATE 23514 where a full disk says 53100)."""
    journal = journal_of(sup)
    if isinstance(journal, PgJournal):
        import psycopg

        with psycopg.connect(journal.target.conninfo, autocommit=True) as db:
            db.execute(
                f'ALTER TABLE rs_asks ADD CONSTRAINT "full_{journal.shard}"'
                f" CHECK (shard <> '{journal.shard}' OR length(payload) < 100000) NOT VALID"
            )
    else:
        on_the_writer(sup, "PRAGMA max_page_count = 1")


def journal_of(sup: Supervisor) -> Journal:
    publisher = sup._publisher
    assert isinstance(publisher, JournaledPublisher)
    return publisher.journal


WRITE_FAILED = {"sqlite": "SQLITE_FULL", "postgresql": "SQLSTATE 23514"}


def backend(journal: Path | str) -> str:
    return "sqlite" if isinstance(journal, Path) else "postgresql"


def name_in_messages(journal: Path | str) -> str:
    """What of the journal's name its messages carry: the file's name, or the shard's."""
    return journal.name if isinstance(journal, Path) else journal.split("shard=", 1)[1].split("&")[0]


def read_to_the_end(subscription: Any, timeout: float = 10.0) -> tuple[list[Event], bool]:
    """Every event until the subscription ends (True) or ``timeout`` passes without one (False)."""
    events: list[Event] = []
    while True:
        try:
            events.append(subscription.get(timeout=timeout))
        except EOFError:
            return events, True
        except TimeoutError:
            return events, False


def ask_id_of(event: Event) -> str:
    assert isinstance(event, AskRequested | AskWithdrawnEvent), event
    return event.ask_id


def held_in_a_big_form(gate: Gate, go: Gate | None = None) -> Any:
    """A body that raises a form too big for a full disk (once ``go`` opens, if given), then waits."""

    def body(ctx: RunContext) -> None:
        if go is not None:  # its start is answered (and journaled) before the disk is found full
            ctx.wait(go)
        with ctx.step("tool_input"):
            ctx.tool("question")
            ctx.open_form(title="Pick one", questions=["Which?"], data={"blob": "x" * 200_000})
            ctx.wait(gate)

    return body


# --- a full disk ---------------------------------------------------------------------------------------


def test_a_full_disk_stops_the_supervisor_and_no_subscriber_sees_an_event_the_journal_does_not_hold(
    journal: Path | str, opened: list[Supervisor]
) -> None:
    sup = start(opened, journal, directories=["/w/a"])
    subscription = sup.subscribe()
    assert sup.start_run(lambda ctx: None, session="s1", directory="/w/a", run_id="r1").wait(5).outcome is (
        Outcome.COMPLETED
    )
    fill_the_disk(sup)

    go = Gate("go")
    sup.start_run(held_in_a_big_form(Gate("never"), go), session="s2", directory="/w/a", run_id="r2")
    go.open()
    seen, ended = read_to_the_end(subscription)

    assert ended, "the subscriptions must end at once when the journal stops recording"
    assert "ask.requested" not in [type(e).__struct_config__.tag for e in seen]
    failure = sup.journal_failure
    assert isinstance(failure, JournalFailed) and isinstance(failure, SupervisorClosed)
    assert failure.path == str(journal) and WRITE_FAILED[backend(journal)] in failure.error
    with pytest.raises(JournalFailed, match="could not record"):
        sup.start_run(lambda ctx: None, session="s3", directory="/w/a")
    refused = sup.submit(CancelRun(run_id="r2", origin="user")).result(timeout=5)  # as the wire hosts see it
    assert (
        refused.code == "supervisor_closed"
        and refused.error is not None
        and "could not record" in refused.error
    )
    final = sup.shutdown(grace_ms=0)  # a shutdown is answered with the one the failure began
    assert sup.closed and final.result is not None

    after = start(opened, journal)
    started = {e.run_id for e in seen if isinstance(e, RunStarted)}
    finished = {e.run_id for e in seen if isinstance(e, RunFinished)}
    recovered = {r.run_id for r in after.recovered()}
    assert "r1" in finished and "r1" not in recovered  # seen completed: still completed after the restart
    assert recovered == started - finished  # nothing a client saw finish comes back as a crash


def test_every_answer_waiting_behind_a_batch_that_did_not_commit_fails_with_the_journal_s_error(
    journal: Path | str, opened: list[Supervisor]
) -> None:
    sup = start(opened, journal, directories=["/w/a"])
    fill_the_disk(sup)
    go = Gate("go")
    handle = sup.start_run(held_in_a_big_form(Gate("never"), go), session="s1", directory="/w/a")
    go.open()
    with pytest.raises(JournalFailed, match=name_in_messages(journal)):
        handle.wait(5)  # its end was never journaled: no snapshot says how it ended
    assert sup.wait_closed(timeout=5).result is not None


def test_a_restart_that_cannot_write_the_journal_raises_journal_failed_and_lets_the_file_go(
    journal: Path | str, opened: list[Supervisor]
) -> None:
    crash_during(
        start(opened, journal, directories=["/w/a"]), held_in_a_big_form(Gate("never")), "ask.requested"
    )

    unwritable = Journal.open(journal)
    if isinstance(unwritable, PgJournal):  # the settle's first write fails, as on a full disk
        unwritable._pg.execute("SET default_transaction_read_only = on")
    else:
        unwritable._db.execute("PRAGMA query_only = 1")
    with pytest.raises(JournalFailed, match="cannot be written") as failed:
        Supervisor(CONFIG, NoInstanceHooks(), unwritable)
    assert failed.value.path == str(journal) and failed.value.at_start
    (recovered,) = start(opened, journal).recovered()  # let go: the next start opens it and recovers
    assert recovered.run_id == "r1"


@pytest.mark.skipif(sys.platform == "win32", reason="RLIMIT_FSIZE is POSIX")
@pytest.mark.parametrize("command", ["stdio", "serve"])
@sqlite_only  # a file that cannot grow; the server's disk is not ours to fill
def test_a_wire_host_on_a_journal_it_cannot_write_exits_2_with_one_line_naming_it_and_the_error(
    journal: Path, opened: list[Supervisor], command: str
) -> None:
    import resource
    import signal

    crash_during(
        start(opened, journal, directories=["/w/a"]), held_in_a_big_form(Gate("never")), "ask.requested"
    )

    def no_file_may_grow() -> None:  # what a full disk does to every write, without root
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (0, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))

    extra = ["--port", "0"] if command == "serve" else []
    done = subprocess.run(
        [sys.executable, "-m", "run_supervisor.actors._cli", command, *extra, "--journal", str(journal)],
        input=b"",
        capture_output=True,
        timeout=60,
        check=False,
        preexec_fn=no_file_may_grow,
    )
    lines = done.stderr.decode().strip().splitlines()
    assert done.returncode == 2, lines
    (line,) = lines
    assert line.startswith(f"run-supervisor {command}: journal {str(journal)!r} cannot be written (")
    assert "SQLITE_" in line and line.endswith("the supervisor did not start")
    (recovered,) = start(opened, journal).recovered()  # nothing was lost: a writable start recovers it
    assert recovered.run_id == "r1"


# --- late replies after a crash ------------------------------------------------------------------------


def test_after_a_crash_a_late_answer_to_an_ask_the_crash_withdrew_is_rejected_ask_withdrawn(
    journal: Path | str, opened: list[Supervisor]
) -> None:
    sup = start(opened, journal, directories=["/w/a"])
    ask_id = ask_id_of(crash_during(sup, held_in_a_big_form(Gate("never")), "ask.requested"))

    after = start(opened, journal)
    (recovered,) = after.recovered()
    assert recovered.withdrawn_asks == (ask_id,)
    with pytest.raises(AskWithdrawn, match="crash"):
        after.answer_form(ask_id, answer="late")
    snapshot = after.ask(ask_id)
    assert (
        snapshot is not None and snapshot.state == "withdrawn" and snapshot.withdraw_reason == "interrupted"
    )
    assert after.pending_asks() == ()


def test_after_a_crash_asks_closed_before_it_keep_what_became_of_them(
    journal: Path | str, opened: list[Supervisor]
) -> None:
    gate = Gate("never")
    answered = Gate("answered")

    def body(ctx: RunContext) -> None:
        ctx.open_permission(title="Run it?").withdraw()
        form = ctx.open_form(title="Which?", questions=["Which?"])
        form.wait()
        answered.open()
        ctx.wait(gate)

    sup = start(opened, journal, directories=["/w/a"])
    log = EventLog(sup)
    sup.start_run(body, session="s1", directory="/w/a", run_id="r1")
    permission = ask_id_of(log.wait_for("ask.withdrawn", run_id="r1"))
    form = ask_id_of(log.wait_for("ask.requested", run_id="r1", kind="form"))
    sup.answer_form(form, answer="this one")
    log.wait_for("ask.replied", ask_id=form)
    log.close()
    simulate_crash(sup)

    after = start(opened, journal)
    (recovered,) = after.recovered()
    assert recovered.withdrawn_asks == ()  # none was open at the crash
    with pytest.raises(AskWithdrawn, match="body"):
        after.reply_permission(permission, approve=True)
    with pytest.raises(AskAlreadyAnswered):
        after.answer_form(form, answer="again")


@sqlite_only  # the first journals were files
def test_a_journal_written_before_asks_were_kept_gains_their_columns_and_recovers(
    journal: Path, opened: list[Supervisor]
) -> None:
    sup = start(opened, journal, directories=["/w/a"])
    ask_id = ask_id_of(crash_during(sup, held_in_a_big_form(Gate("never")), "ask.requested"))
    with sqlite3.connect(journal) as db:  # the layout of the first journals
        for column in ("kind", "tool", "call_id", "withdraw_reason"):
            db.execute(f"ALTER TABLE asks DROP COLUMN {column}")

    (recovered,) = start(opened, journal).recovered()
    assert recovered.withdrawn_asks == (ask_id,)
    with sqlite3.connect(journal) as db:
        columns = {row[1] for row in db.execute("PRAGMA table_info(asks)")}
    assert {"kind", "tool", "call_id", "withdraw_reason"} <= columns


# --- a crash lets go of the file before it returns -----------------------------------------------------


def test_fifty_crash_and_restart_cycles_never_find_the_journal_locked(
    journal: Path | str, opened: list[Supervisor]
) -> None:
    gate = Gate("never")

    def body(ctx: RunContext) -> None:
        ctx.tool("bash").running()
        ctx.wait(gate)

    for cycle in range(50):
        sup = start(opened, journal, directories=["/w/a"])  # JournalLocked here is the failure
        crash_during(sup, body, "run.part.updated", run_id=f"r{cycle}")
        opened.remove(sup)
    assert [r.run_id for r in start(opened, journal).recovered()] == ["r49"]


@pytest.mark.parametrize("ending", ["crash", "shutdown"])
@sqlite_only  # the file's close and abandon are slowed (tests/test_shards.py has the lease's)
def test_a_crash_or_a_shutdown_returns_only_once_the_journal_is_let_go(
    journal: Path, opened: list[Supervisor], monkeypatch: pytest.MonkeyPatch, ending: str
) -> None:
    letting_go = threading.Event()
    slow_disk = threading.Event()  # never set: letting go takes half a second, a slow disk's time
    close, abandon = Journal.close, Journal.abandon

    def slow_close(self: Journal, *, clean: bool) -> None:
        letting_go.set()
        slow_disk.wait(0.5)
        close(self, clean=clean)

    def slow_abandon(self: Journal) -> None:
        letting_go.set()
        slow_disk.wait(0.5)
        abandon(self)

    monkeypatch.setattr(Journal, "close", slow_close)
    monkeypatch.setattr(Journal, "abandon", slow_abandon)
    sup = start(opened, journal, directories=["/w/a"])
    if ending == "crash":
        simulate_crash(sup)
    else:
        sup.shutdown(grace_ms=0)
    assert letting_go.is_set()
    monkeypatch.undo()
    start(opened, journal)  # no JournalLocked: the file was let go before the call returned


# --- the lock needs no fcntl ----------------------------------------------------------------------------

_HOLD_WITHOUT_FCNTL = textwrap.dedent(
    """
    import sys
    if "--with-fcntl" not in sys.argv:
        sys.modules["fcntl"] = None  # a platform without it: importing it raises ImportError
    from run_supervisor import JournalLocked
    from run_supervisor.actors._journal import Journal

    path = sys.argv[1]
    if sys.argv[2] == "hold":
        held = Journal.open(path)
        try:
            Journal.open(path)
            print("second opener in the same process: opened", flush=True)
        except JournalLocked:
            print("second opener in the same process: locked", flush=True)
        print("held", flush=True)
        sys.stdin.readline()  # hold it until the test says
        held.close(clean=True)
        print("released", flush=True)
    else:
        try:
            Journal.open(path).close(clean=True)
            print("opened", flush=True)
        except JournalLocked:
            print("locked", flush=True)
    """
)


@sqlite_only
def test_the_journal_locks_without_fcntl_and_a_second_opener_anywhere_is_refused(journal: Path) -> None:
    def other(mode: str) -> str:
        done = subprocess.run(
            [sys.executable, "-c", _HOLD_WITHOUT_FCNTL, str(journal), mode],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD_WITHOUT_FCNTL, str(journal), "hold"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdin is not None
        assert holder.stdout.readline().strip() == "second opener in the same process: locked"
        assert holder.stdout.readline().strip() == "held"
        assert other("open") == "locked"  # another process without fcntl
        with pytest.raises(JournalLocked, match="held by a live supervisor"):  # this one, with it
            Journal.open(journal)
        holder.stdin.write("\n")
        holder.stdin.flush()
        assert holder.stdout.readline().strip() == "released"
    finally:
        _, errors = holder.communicate(timeout=30)
    assert holder.returncode == 0, errors
    assert other("open") == "opened"


@sqlite_only
def test_a_second_opener_in_the_process_that_holds_the_journal_does_not_loosen_its_lock(
    journal: Path, opened: list[Supervisor]
) -> None:
    start(opened, journal)
    for _ in range(3):  # on POSIX, closing any descriptor of a file drops the process's locks on it
        with pytest.raises(JournalLocked):
            Journal.open(journal)
    done = subprocess.run(
        [sys.executable, "-c", _HOLD_WITHOUT_FCNTL, str(journal), "open", "--with-fcntl"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.stdout.strip() == "locked", done.stderr


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_named_as_the_journal_is_refused_at_once_and_left_untouched(tmp_path: Path) -> None:
    fifo = tmp_path / "runs.journal"
    os.mkfifo(fifo)
    code = "import sys\nfrom run_supervisor.actors._journal import Journal\nJournal.open(sys.argv[1])"
    done = subprocess.run(  # in a child: the old code blocked forever on the FIFO
        [sys.executable, "-c", code, str(fifo)], capture_output=True, text=True, timeout=30, check=False
    )
    assert "JournalUnreadable" in done.stderr and "is a FIFO" in done.stderr, done.stderr
    with pytest.raises(JournalUnreadable, match="is a FIFO, not a journal file"):
        Journal.open(fifo)
    assert not (tmp_path / "runs.journal-lock").exists()


@sqlite_only
def test_the_lock_file_sits_beside_the_journal_and_holds_nothing_but_the_lock(
    journal: Path, opened: list[Supervisor]
) -> None:
    sup = start(opened, journal)
    lock = journal.with_name(journal.name + "-lock")
    assert lock.exists()
    sup.shutdown(grace_ms=0)
    assert sorted(p.name for p in journal.parent.iterdir()) == sorted([journal.name, lock.name])
