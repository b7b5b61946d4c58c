"""Past one machine: a shard's journal in PostgreSQL, owned through a lease with a fencing epoch.

In-process tests here; the contention between real processes (SIGKILL, SIGSTOP) is in
tests/test_shards_processes.py. The server is a real PostgreSQL on a unix socket (tests/pg_support.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import uuid
from typing import Any

import pytest
from pg_support import JournalReader, shared_database, with_shard

from run_supervisor import Gate, JournalFailed, JournalLocked, Supervisor, SupervisorConfig
from run_supervisor.actors._journal import Journal
from run_supervisor.actors._pg_journal import PgJournal
from run_supervisor.actors._shards import LeaseLost, parse_journal_url

psycopg = pytest.importorskip("psycopg", reason="the PostgreSQL journal needs psycopg 3 (the test extra)")

CONFIG = SupervisorConfig(shutdown_at_exit=False, default_grace_ms=500)


def shard_url(name: str, **params: object) -> str:
    return with_shard(shared_database(), name, **params)


def lease_row(url: str) -> tuple[Any, ...] | None:
    target = parse_journal_url(url)
    with psycopg.connect(target.conninfo, autocommit=True) as db:
        return db.execute(
            "SELECT epoch, holder, expires_at > clock_timestamp(), clean FROM rs_leases WHERE shard = %s",
            (target.shard,),
        ).fetchone()


def test_the_stdio_host_takes_a_postgresql_url_as_its_journal_and_lets_the_lease_go_at_its_end() -> None:
    url = shard_url("stdio-" + uuid.uuid4().hex[:8])
    for epoch in (1, 2):
        done = subprocess.run(
            [sys.executable, "-m", "run_supervisor.actors._cli", "stdio", "--journal", url],
            input=b"",
            capture_output=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr.decode()
        assert lease_row(url) == (epoch, None, False, 1)  # released cleanly: the next start at once


def test_a_shard_has_one_owner_and_the_next_start_takes_the_lease_with_a_newer_epoch(
    opened: list[Supervisor],
) -> None:
    url = shard_url("one-owner")
    first = Supervisor.start(CONFIG, journal=url)
    opened.append(first)
    assert first.epoch == 1
    with pytest.raises(JournalLocked, match="held by a live supervisor"):
        Supervisor.start(CONFIG, journal=url)
    other = Supervisor.start(CONFIG, journal=shard_url("one-owner-other"))  # another shard: its own lease
    opened.append(other)
    assert other.epoch == 1
    first.shutdown(grace_ms=200)
    second = Supervisor.start(CONFIG, journal=url)
    opened.append(second)
    assert second.epoch == 2 and second.recovered() == ()


def test_a_journal_url_names_its_shard_and_lease_and_hides_the_password() -> None:
    target = parse_journal_url(
        "postgresql://me:secret@db.example/runs?sslmode=require&shard=w-1&lease_ttl=2&lease_wait=5"
        "&owner_url=http://10.0.0.7:8080"
    )
    assert (target.shard, target.lease_ttl_s, target.lease_wait_s) == ("w-1", 2.0, 5.0)
    assert target.owner_url == "http://10.0.0.7:8080"
    assert target.conninfo == "postgresql://me:secret@db.example/runs?sslmode=require"
    assert "secret" not in target.display and "***" in target.display
    assert json.dumps(target.display)


def expire(url: str) -> None:
    """As if the owner had been frozen past its TTL: its lease row says expired."""
    target = parse_journal_url(url)
    with psycopg.connect(target.conninfo, autocommit=True) as db:
        db.execute(
            "UPDATE rs_leases SET expires_at = clock_timestamp() - interval '1 second' WHERE shard = %s",
            (target.shard,),
        )


def test_a_batch_after_a_takeover_commits_nothing_and_fails_with_lease_lost() -> None:
    url = shard_url("fenced-" + uuid.uuid4().hex[:8], lease_ttl=30)
    old = Journal.open(url)
    assert isinstance(old, PgJournal)
    old._stop_renewer()  # frozen: it renews no more
    expire(url)
    new = Journal.open(url)
    assert isinstance(new, PgJournal) and new.boot == old.boot + 1
    new.begin_boot()
    started = {"type": "run.started", "run_id": "r1", "session": "s1", "directory": "/w/a", "generation": 1}
    with pytest.raises(LeaseLost, match="lease of shard") as lost:
        old.apply([started])
    assert lost.value.epoch == 1 and lost.value.shard == old.shard
    with JournalReader(url) as rows:
        assert rows.scalar("COUNT(*)", "runs") == 0  # nothing of the fenced batch committed
    new.apply([started])  # the successor writes at its epoch
    with JournalReader(url) as rows:
        assert rows.scalar("state", "runs", "run_id = 'r1'") == "active"
    old.close(clean=True)  # lost: not even its clean mark is written, and the successor's lease stays
    assert lease_row(url) == (2, new.holder, True, 0)
    new.close(clean=True)


def test_an_owner_that_cannot_renew_stops_acting_refuses_new_work_and_says_why(
    opened: list[Supervisor],
) -> None:
    url = shard_url("lost-" + uuid.uuid4().hex[:8], lease_ttl=1)
    sup = Supervisor.start(CONFIG, journal=url, directories=["/w/a"])
    opened.append(sup)
    subscription = sup.subscribe()
    run = sup.start_run(lambda ctx: ctx.wait(Gate("never")), session="s1", directory="/w/a", run_id="r1")
    target = parse_journal_url(url)
    with psycopg.connect(target.conninfo, autocommit=True) as db:  # a successor took the shard
        db.execute(
            "UPDATE rs_leases SET epoch = epoch + 1, holder = 'elsewhere' WHERE shard = %s", (target.shard,)
        )
    assert sup.wait_closed(timeout=30).result is not None  # it shut itself down
    failure = sup.journal_failure
    assert isinstance(failure, LeaseLost) and failure.shard == target.shard and failure.epoch == 1
    with pytest.raises(LeaseLost, match="lease of shard") as refused:  # the named exception, a JournalFailed
        sup.start_run(lambda ctx: None, session="s2", directory="/w/a")
    assert isinstance(refused.value, JournalFailed) and refused.value.epoch == 1
    with pytest.raises(JournalFailed):
        run.wait(5)  # its end was never journaled: what the successor recovers is the truth
    while True:  # the subscription ends; nothing after the takeover is delivered
        try:
            event = subscription.get(timeout=10)
        except EOFError:
            break
        assert type(event).__struct_config__.tag != "run.finished", event
    assert lease_row(url) == (2, "elsewhere", True, 0)  # the successor's lease is untouched


def test_a_standby_waiting_for_the_lease_takes_it_at_once_when_the_owner_shuts_down_cleanly(
    opened: list[Supervisor],
) -> None:
    from concurrent.futures import ThreadPoolExecutor

    name = "handover-" + uuid.uuid4().hex[:8]
    owner = Supervisor.start(CONFIG, journal=shard_url(name, lease_ttl=60))
    opened.append(owner)
    target = parse_journal_url(shard_url(name))
    with ThreadPoolExecutor(max_workers=1) as pool:
        standby_url = shard_url(name, lease_ttl=60, lease_wait=30)
        waiting = pool.submit(Supervisor.start, CONFIG, journal=standby_url)
        with psycopg.connect(target.conninfo, autocommit=True) as db:  # until it waits (bounded polls)
            pause = threading.Event()
            seen = "SELECT 1 FROM pg_stat_activity WHERE application_name = %s"
            for _ in range(1500):
                if db.execute(seen, (f"run-supervisor waiting {name}",)).fetchone():
                    break
                pause.wait(0.02)
            else:
                raise AssertionError("the standby never waited for the lease")
        assert not waiting.done()
        began = time.monotonic()
        owner.shutdown(grace_ms=200)
        standby = waiting.result(timeout=20)  # woken by the release's NOTIFY, not at the TTL (60 s)
        handover = time.monotonic() - began
    opened.append(standby)
    assert standby.epoch == 2 and standby.recovered() == ()
    assert handover < 20, handover
