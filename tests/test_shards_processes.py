"""Two real processes contend for one shard of a PostgreSQL journal (tests/shard_owner.py each): the
lease with its fencing epoch decides who owns it, a successor recovers only once it holds the lease,
and an owner that was frozen past its TTL writes nothing when it wakes and stops.

The lease lasts 1 s; every wait is bounded and generous (a loaded 2-core machine), and no test sleeps:
each waits for a line from a process, a process's exit, or a row of the database.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pg_support import shared_database, with_shard

from run_supervisor.actors._shards import parse_journal_url

psycopg = pytest.importorskip("psycopg", reason="the PostgreSQL journal needs psycopg 3 (the test extra)")

SCRIPT = Path(__file__).with_name("shard_owner.py")
TTL = 1.0


class Contender:
    """A shard_owner.py process and the JSON lines it printed (read by one thread until EOF)."""

    def __init__(self, url: str, *args: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(SCRIPT), url, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self.lines: list[dict[str, Any]] = []
        self._new: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for raw in self.process.stdout:
            line = json.loads(raw)
            self.lines.append(line)
            self._new.put(line)
        self._new.put(None)

    def wait_for(self, match: Callable[[dict[str, Any]], bool], timeout: float = 30.0) -> dict[str, Any]:
        for line in self.lines:
            if match(line):
                return line
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no such line within {timeout} s; saw {self.lines[-5:]}")
            try:
                line = self._new.get(timeout=left)
            except queue.Empty:
                continue
            if line is None:
                raise AssertionError(f"the process ended first ({self.process.wait(5)}): {self.stderr()}")
            if match(line):
                return line

    def stderr(self) -> str:
        if self.process.poll() is None or self.process.stderr is None:
            return ""
        return self.process.stderr.read().decode(errors="replace")[-2000:]

    def end(self, timeout: float = 30.0) -> int:
        """Close its stdin (it shuts down) and wait for it."""
        if self.process.stdin is not None and not self.process.stdin.closed:
            try:
                self.process.stdin.close()
            except BrokenPipeError:
                pass
        code = self.process.wait(timeout)
        self._reader.join(10)
        return code

    def kill(self) -> None:
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGCONT)  # a stopped process must run to die cleanly
            self.process.kill()
        self.end()


@pytest.fixture
def contenders() -> Iterator[list[Contender]]:
    started: list[Contender] = []
    yield started
    for one in started:
        one.kill()
        for stream in (one.process.stdout, one.process.stderr):
            if stream is not None:
                stream.close()


def shard() -> str:
    return with_shard(shared_database(), "proc-" + uuid.uuid4().hex[:10], lease_ttl=TTL, lease_wait=60)


def query(url: str, sql: str, *params: object) -> list[tuple[Any, ...]]:
    target = parse_journal_url(url)
    with psycopg.connect(target.conninfo, autocommit=True) as db:
        return list(db.execute(sql, (target.shard, *params)).fetchall())


def wait_for_row(url: str, sql: str, *params: object, timeout: float = 30.0) -> tuple[Any, ...]:
    """Poll the database (every 20 ms, bounded) until ``sql`` returns a row."""
    deadline = time.monotonic() + timeout
    ready = threading.Event()
    while True:
        found = query(url, sql, *params)
        if found:
            return found[0]
        if time.monotonic() > deadline:
            raise AssertionError(f"no row for {sql!r} within {timeout} s")
        ready.wait(0.02)


def batches_of(url: str, epoch: int) -> int:
    (row,) = query(url, "SELECT batches FROM rs_epochs WHERE shard = %s AND epoch = %s", epoch)
    return int(row[0])


def an_owner_at_work_and_a_standby(contenders: list[Contender]) -> tuple[str, Contender, Contender]:
    """A fresh shard, its owner (epoch 1) with run r1 at its third tool call, and a second process
    started on the same shard."""
    url = shard()
    owner = Contender(url, "--work", "r1")
    contenders.append(owner)
    assert owner.wait_for(lambda line: "started" in line)["started"] == 1
    owner.wait_for(lambda line: line.get("part") == "call-3" and line.get("state") == "running")
    standby = Contender(url)
    contenders.append(standby)
    return url, owner, standby


def test_two_processes_contend_for_a_shard_and_the_survivor_of_a_sigkill_takes_over_at_the_ttl(
    contenders: list[Contender],
) -> None:
    url, owner, standby = an_owner_at_work_and_a_standby(contenders)
    waiting = "SELECT 1 FROM pg_stat_activity WHERE application_name = 'run-supervisor waiting ' || %s"
    wait_for_row(url, waiting)
    assert not any("started" in line for line in standby.lines)  # the lease is held: it waits

    seen_parts = {line["part"] for line in owner.lines if line.get("event") == "run.part.updated"}
    owner.process.kill()  # SIGKILL: the lease stays until its TTL
    killed = time.monotonic()
    took = standby.wait_for(lambda line: "started" in line)
    takeover = time.monotonic() - killed

    assert took["started"] == 2  # a newer epoch: every event id of the successor says so
    (recovered,) = took["recovered"]
    assert recovered["run_id"] == "r1" and recovered["reason"] == "crash"
    recovered_parts = {call_id for call_id, _, _ in recovered["parts"]}
    assert seen_parts <= recovered_parts  # everything the old owner's clients saw is recovered
    assert all(state == "interrupted" and started for _, state, started in recovered["parts"][-1:])
    assert takeover < TTL + 20, takeover  # the figure is bench.py's; here only that it is bounded
    epochs = query(url, "SELECT epoch, holder IS NOT NULL FROM rs_epochs WHERE shard = %s ORDER BY epoch")
    assert [e for e, _ in epochs] == [1, 2]
    assert standby.end() == 0
    assert query(url, "SELECT epoch, holder, clean FROM rs_leases WHERE shard = %s") == [(2, None, 1)]


def test_an_owner_frozen_past_its_ttl_writes_nothing_when_it_wakes_and_stops_and_no_run_is_told_twice(
    contenders: list[Contender],
) -> None:
    url, owner, standby = an_owner_at_work_and_a_standby(contenders)

    os.kill(owner.process.pid, signal.SIGSTOP)  # frozen mid-run: its renewals stop, its run does not end
    try:
        took = standby.wait_for(lambda line: "started" in line)
        assert took["started"] == 2
        (recovered,) = took["recovered"]
        assert recovered["run_id"] == "r1" and recovered["reason"] == "crash"
        written_by_the_old_owner = batches_of(url, 1)
        told_before = len(owner.lines)
    finally:
        os.kill(owner.process.pid, signal.SIGCONT)

    stopped = owner.wait_for(lambda line: "stopped" in line)
    assert stopped["stopped"] == "LeaseLost" and "shard" in stopped["error"]
    assert owner.end() == 3  # it stopped acting: a shutdown of its own, every request refused
    assert batches_of(url, 1) == written_by_the_old_owner  # fenced: not one batch after the takeover

    # No run is both recovered as a crash and still reported by its old owner: whatever the old owner
    # told its clients after waking was committed before the takeover, so the successor recovered it.
    recovered_parts = {call_id for call_id, _, _ in recovered["parts"]}
    told = [line for line in owner.lines if line.get("event") == "run.part.updated"]
    assert {line["part"] for line in told} <= recovered_parts
    assert not [line for line in owner.lines if line.get("event") == "run.finished"]
    late = [line for line in owner.lines[told_before:] if "event" in line]
    assert all(line["part"] in recovered_parts for line in late if "part" in line), late
    row = query(url, "SELECT state, outcome, reason FROM rs_runs WHERE shard = %s AND run_id = 'r1'")
    assert row == [("finished", "interrupted", "crash")]  # the old owner's end of r1 never landed
    assert query(url, "SELECT COUNT(*) FROM rs_parts WHERE shard = %s AND run_id = 'r1'") == [(0,)]
    assert standby.end() == 0
