"""Crash test of the run journal: kill -9 a supervisor at random moments, restart it on the same
journal, and check that every run is reported exactly once and nothing is left in flight.

Each life is a process forked from this one (so a life costs a fork, not an interpreter start). The
life starts a supervisor on the journal, prints every event a subscriber sees as one JSON line on a
pipe, and drives a random workload (runs with steps and tool parts, queued runs under every queue
policy -- coalesced, dropped and rejected starts included --, cancels,
maintenance and confirmed closes). This process SIGKILLs it at a random moment, then starts the next
life, which first prints what it recovered. After the last kill one clean life checks the journal.

Checks, over all lives:
- every run a subscriber saw start is reported exactly once: ``run.finished`` before a kill, or
  ``run.recovered`` (reason ``crash``) at the next start -- never both, never twice;
- a run whose terminal event was committed but not yet read off the pipe when the kill came is
  finished in the journal (it is not recovered, and the final check finds it finished);
- no recovered tool part is left non-terminal; every session is idle after a restart;
- the journal opens every time.

    python scripts/crash_test.py --kills 2000          # the long form
    python scripts/crash_test.py --kills 200 --json    # what the deep layer runs (tests/test_journal.py)
"""

from __future__ import annotations

import argparse
import json
import os
import random
import select
import signal
import sqlite3
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import msgspec

TERMINAL_PARTS = {"completed", "error", "interrupted"}
SESSIONS = ("s1", "s2", "s3")
DIRECTORIES = ("/w/a", "/w/b")


def _life(journal: str, seed: int, life: int, out_fd: int) -> None:
    """One process's life: runs until it is killed (or, for the last life, checks and exits)."""
    from run_supervisor import Supervisor, SupervisorConfig, SupervisorError
    from run_supervisor.protocol import encode

    rng = random.Random(seed)
    lock = threading.Lock()

    def emit(line: bytes) -> None:
        with lock:  # one write per line: a kill never splits a line in the pipe
            os.write(out_fd, line + b"\n")

    config = SupervisorConfig(shutdown_at_exit=False, request_timeout_s=5.0)
    try:
        sup = Supervisor.start(config, journal=journal)
    except SupervisorError as exc:
        emit(json.dumps({"type": "open.failed", "error": str(exc)}).encode())
        os._exit(3)
    for event in sup.recovered():
        emit(encode(event))
    for session in SESSIONS:
        snapshot = sup.session(session)
        if snapshot is not None and snapshot.status != "idle":
            emit(json.dumps({"type": "session.busy", "session": session}).encode())
    emit(json.dumps({"type": "life.ready", "life": life}).encode())
    sup.subscribe(callback=lambda event: emit(encode(event)))
    sup.load(*DIRECTORIES)

    def body(ctx: Any) -> None:
        plan = rng.random()
        with ctx.step("model"):
            ctx.sleep(rng.random() * 0.004)
        if plan < 0.7:
            with ctx.step("tool_input"):
                call = ctx.tool("bash")
                ctx.sleep(rng.random() * 0.004)
            with ctx.step("tool_exec"):
                call.prepared()
                ctx.sleep(rng.random() * 0.004)
                call.running()
                ctx.sleep(rng.random() * 0.01)
                call.completed()
        with ctx.step("model"):
            ctx.sleep(rng.random() * 0.004)

    counter = 0
    while True:  # until the kill: an error ends the life early, and the parent is told of it
        pick = rng.random()
        try:
            if pick < 0.6:
                counter += 1
                sup.start_run(
                    body,
                    session=rng.choice(SESSIONS),
                    directory=rng.choice(DIRECTORIES),
                    run_id=f"L{life}-r{counter}",
                    # queue policies: coalesced and dropped follow-ups end once, like the rest
                    queue_policy=rng.choice((None, None, "coalesce", "reject_if_busy")),
                )
            elif pick < 0.75 and counter:
                sup.cancel(f"L{life}-r{rng.randint(1, counter)}")
            elif pick < 0.9:
                sup.close(
                    rng.choice(("dispose_all", "invalidate_config")),
                    mode=rng.choice(("maintenance", "maintenance", "user_confirmed_interrupt")),
                    origin="crash-test",
                )
            else:
                time.sleep(rng.random() * 0.003)
        except SupervisorError:
            pass  # a cancel of a finished run, say: rejections are part of the workload


@dataclass
class Tally:
    kills: int = 0
    lives: int = 0
    opens_failed: int = 0
    started: set[str] = field(default_factory=set)
    finished: dict[str, int] = field(default_factory=dict)
    recovered: dict[str, int] = field(default_factory=dict)
    recovered_parts: int = 0
    recovered_started_tools: int = 0
    events: int = 0
    violations: list[str] = field(default_factory=list)


def _read_until_exit(fd: int, pid: int, kill_after: float | None, tally: Tally) -> None:
    deadline = None if kill_after is None else time.monotonic() + kill_after
    buffer = b""
    ready_seen = False
    killed = False
    while True:
        timeout = 0.5
        if deadline is not None and ready_seen:
            timeout = max(0.0, deadline - time.monotonic())
        readable, _, _ = select.select([fd], [], [], timeout)
        if readable:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                if line and _take(line, tally):
                    ready_seen = True
                    deadline = None if kill_after is None else time.monotonic() + kill_after
        if deadline is not None and ready_seen and not killed and time.monotonic() >= deadline:
            os.kill(pid, signal.SIGKILL)
            killed = True
            tally.kills += 1
    os.waitpid(pid, 0)


def _take(line: bytes, tally: Tally) -> bool:
    """Count one event line; return True for the life's ready mark."""
    event = msgspec.json.decode(line)
    kind = event.get("type")
    tally.events += 1
    if kind == "life.ready":
        return True
    if kind == "life.error":
        tally.violations.append(f"a life ended before its kill: {event['error']}")
    elif kind == "open.failed":
        tally.opens_failed += 1
        tally.violations.append(f"the journal did not open: {event['error']}")
    elif kind == "session.busy":
        tally.violations.append(f"session {event['session']} busy after a restart")
    elif kind in ("run.started", "run.queued"):
        tally.started.add(event["run_id"])
    elif kind == "run.finished":
        tally.finished[event["run_id"]] = tally.finished.get(event["run_id"], 0) + 1
    elif kind == "run.recovered":
        run_id = event["run_id"]
        tally.recovered[run_id] = tally.recovered.get(run_id, 0) + 1
        if event["reason"] != "crash":
            tally.violations.append(f"run {run_id} recovered with reason {event['reason']}")
        for part in event["parts"]:
            tally.recovered_parts += 1
            tally.recovered_started_tools += bool(part["tool_started"])
            if part["state"] not in TERMINAL_PARTS:
                tally.violations.append(f"run {run_id}: a recovered part is still {part['state']}")
    return False


def _spawn_life(journal: str, seed: int, life: int) -> tuple[int, int]:
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: one life of the supervisor
        os.close(read_fd)
        try:
            _life(journal, seed, life, write_fd)
        except BaseException as exc:  # a life ends only by its kill: anything else is a finding, said
            os.write(write_fd, json.dumps({"type": "life.error", "error": repr(exc)}).encode() + b"\n")
        finally:
            os._exit(0)
    os.close(write_fd)
    return pid, read_fd


def crash_test(kills: int, seed: int, *, max_life_s: float = 0.12) -> dict[str, Any]:
    rng = random.Random(seed)
    tally = Tally()
    started_at = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="run-supervisor-crash-") as folder:
        journal = os.path.join(folder, "runs.journal")
        for life in range(1, kills + 1):
            pid, fd = _spawn_life(journal, rng.randrange(2**32), life)
            _read_until_exit(fd, pid, rng.random() * max_life_s, tally)
            os.close(fd)
            tally.lives += 1
        # One last life that is not killed: it only recovers and reports, then we read the file.
        _final_check(journal, tally)
        size = os.path.getsize(journal)
    for run_id in sorted(tally.started):
        reports = tally.finished.get(run_id, 0) + tally.recovered.get(run_id, 0)
        if reports > 1:
            tally.violations.append(f"run {run_id} was reported {reports} times")
    for run_id, count in tally.recovered.items():
        if run_id in tally.finished:
            tally.violations.append(f"run {run_id} finished and was also recovered ({count}x)")
    unreported = sorted(r for r in tally.started if r not in tally.finished and r not in tally.recovered)
    return {
        "kills": tally.kills,
        "lives": tally.lives + 1,
        "runs_started": len(tally.started),
        "runs_finished_before_a_kill": len(tally.finished),
        "runs_recovered": len(tally.recovered),
        "runs_finished_unread_at_the_kill": len(unreported),
        "recovered_parts": tally.recovered_parts,
        "recovered_parts_tool_may_have_run": tally.recovered_started_tools,
        "events_read": tally.events,
        "journal_opens_failed": tally.opens_failed,
        "journal_bytes": size,
        "violations": tally.violations,
        "elapsed_s": round(time.monotonic() - started_at, 1),
        "unreported_runs_checked_finished_in_journal": len(unreported),
    }


def _final_check(journal: str, tally: Tally) -> None:
    pid, fd = _spawn_check(journal)
    _read_until_exit(fd, pid, None, tally)
    os.close(fd)
    with sqlite3.connect(journal) as db:
        unfinished = db.execute("SELECT run_id FROM runs WHERE state != 'finished'").fetchall()
        for (run_id,) in unfinished:
            tally.violations.append(f"run {run_id} is still unfinished in the journal after recovery")
        open_parts = db.execute(
            "SELECT COUNT(*) FROM parts WHERE state IN ('pending', 'prepared', 'running')"
        ).fetchone()[0]
        if open_parts:
            tally.violations.append(f"{open_parts} tool parts are non-terminal in the journal")
        finished = {row[0] for row in db.execute("SELECT run_id FROM runs WHERE state = 'finished'")}
    for run_id in tally.started:
        if run_id not in tally.finished and run_id not in tally.recovered and run_id not in finished:
            # Its run.finished was committed (else it would have been recovered) but the journal has
            # since forgotten it under the retention rule, or it was never recorded: only the latter
            # is a violation, and retention is far above what a test makes.
            tally.violations.append(f"run {run_id} started but is nowhere: not finished, not recovered")


def _spawn_check(journal: str) -> tuple[int, int]:
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        code = 0
        try:
            from run_supervisor import Supervisor, SupervisorConfig
            from run_supervisor.protocol import encode

            sup = Supervisor.start(SupervisorConfig(shutdown_at_exit=False), journal=journal)
            for event in sup.recovered():
                os.write(write_fd, encode(event) + b"\n")
            for session in SESSIONS:
                snapshot = sup.session(session)
                if snapshot is not None and snapshot.status != "idle":
                    os.write(
                        write_fd, json.dumps({"type": "session.busy", "session": session}).encode() + b"\n"
                    )
            sup.shutdown(grace_ms=200)
        except BaseException as exc:  # report, never hang the parent
            os.write(write_fd, json.dumps({"type": "open.failed", "error": repr(exc)}).encode() + b"\n")
            code = 3
        finally:
            os._exit(code)
    os.close(write_fd)
    return pid, read_fd


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--kills", type=int, default=2000, help="how many lives to kill (default 2000)")
    parser.add_argument("--seed", type=int, default=20261201)
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    args = parser.parse_args(argv)
    import run_supervisor.actors  # noqa: F401 -- imported once here, so a life costs only a fork

    if threading.active_count() != 1:
        print("crash_test must fork from a process with one thread", file=sys.stderr)
        return 2
    result = crash_test(args.kills, args.seed)
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            if key != "violations":
                print(f"  {key:<45} {value}")
        for violation in result["violations"][:50]:
            print(f"VIOLATION {violation}")
        print("OK" if not result["violations"] else f"{len(result['violations'])} violations")
    return 0 if not result["violations"] else 1


if __name__ == "__main__":
    sys.exit(main())
