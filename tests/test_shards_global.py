"""The owner directory (who owns which shard, told by LISTEN/NOTIFY) and a global close across shards
as a scatter-gather: each shard's owner is a real HTTP host on a PostgreSQL journal shard, found
through the directory; the coordinator holds no run state."""

from __future__ import annotations

import json
import queue
import threading
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pytest
from pg_support import shared_database, with_shard

from run_supervisor import Gate, RunContext, Supervisor, SupervisorConfig
from run_supervisor.actors._shards import (
    Coordinator,
    GlobalClose,
    LocalShard,
    OwnerDirectory,
    ShardAnswer,
    global_dispose_all,
    publish_owner_url,
)
from run_supervisor.actors.hosts import ServerThread, WireHost

CONFIG = SupervisorConfig(shutdown_at_exit=False, default_grace_ms=500)
TOKEN = "cluster-" + uuid.uuid4().hex
"""One bearer token for every owner, as a cluster would configure it."""


@dataclass
class Owner:
    shard: str
    url: str
    supervisor: Supervisor
    server: ServerThread
    host: WireHost


@pytest.fixture
def owners() -> Iterator[list[Owner]]:
    started: list[Owner] = []
    yield started
    for owner in started:
        if not owner.supervisor.closed:
            owner.supervisor.shutdown(grace_ms=500, reason="test_teardown")
        owner.host.hub.join(5.0)
        owner.server.stop()


def own(owners: list[Owner], directory: str) -> Owner:
    """A supervisor on a shard of its own, served over HTTP, its URL published in the directory."""
    shard = "g-" + uuid.uuid4().hex[:10]
    url = with_shard(shared_database(), shard, lease_ttl=5)
    sup = Supervisor.start(CONFIG, journal=url)
    host = WireHost(sup)
    sup.load(directory)
    server = ServerThread(host, token=TOKEN).start()
    owner = Owner(shard, url, sup, server, host)
    owners.append(owner)
    publish_owner_url(sup, server.url)
    return owner


def held(gate: Gate) -> Any:
    def body(ctx: RunContext) -> None:
        ctx.wait(gate)

    return body


def test_the_owner_directory_names_each_shard_s_owner_and_tells_a_takeover_a_new_url_and_a_release(
    owners: list[Owner],
) -> None:
    with OwnerDirectory(shared_database()) as directory:
        directory.listen()
        owner = own(owners, "/w/a")
        changes: list[dict[str, Any]] = []
        while len(changes) < 2:  # bounded: each wait is 10 s at most
            change = directory.wait_for_change(timeout=10)
            assert change is not None, changes
            if change["shard"] == owner.shard:
                changes.append(change)
        assert [c["what"] for c in changes] == ["acquired", "url"]
        assert changes[1]["url"] == owner.server.url and changes[1]["epoch"] == 1
        found = directory.owner(owner.shard)
        assert found is not None and found.live and found.url == owner.server.url and found.epoch == 1

        owner.supervisor.shutdown(grace_ms=200)
        while True:
            change = directory.wait_for_change(timeout=10)
            assert change is not None
            if change["shard"] == owner.shard:
                break
        assert change["what"] == "released"
        gone = directory.owner(owner.shard)
        assert gone is not None and not gone.live and gone.url is None and gone.epoch == 1


def test_a_global_dispose_all_is_deferred_where_a_run_is_active_completed_elsewhere_and_completes_once(
    owners: list[Owner],
) -> None:
    busy, idle, other = own(owners, "/w/a"), own(owners, "/w/b"), own(owners, "/w/c")
    gate = Gate("release")
    run = busy.supervisor.start_run(held(gate), session="s1", directory="/w/a", run_id="r1")
    answers: queue.Queue[tuple[str, ShardAnswer]] = queue.Queue()
    completions: list[GlobalClose] = []
    names = [busy.shard, idle.shard, other.shard]

    def scatter() -> GlobalClose:
        with OwnerDirectory(shared_database()) as directory:  # the owners' URLs and epochs, from the database
            result = Coordinator(directory, headers={"Authorization": f"Bearer {TOKEN}"}).dispose_all(
                timeout=60,
                shards=names,
                action_id="g-all",
                on_answer=lambda shard, answer: answers.put((shard, answer)),
            )
        completions.append(result)
        return result

    with ThreadPoolExecutor(max_workers=1) as pool:
        gathered = pool.submit(scatter)
        told = dict(answers.get(timeout=30) for _ in names)
        assert {name: (a.result, a.completed) for name, a in told.items()} == {
            busy.shard: ("deferred", False),
            idle.shard: ("completed", True),
            other.shard: ("completed", True),
        }
        assert not gathered.done() and completions == []  # not before the busy shard's close completes
        gate.open()
        assert run.wait(10).outcome == "completed"
        final = gathered.result(timeout=30)
    assert completions == [final]  # completed once
    assert final.completed and final.action_id == "g-all"
    outcomes = final.to_dict()["shards"]
    assert {name: (o["result"], o["completed"], o["error"]) for name, o in outcomes.items()} == {
        busy.shard: ("deferred", True, None),
        idle.shard: ("completed", True, None),
        other.shard: ("completed", True, None),
    }
    assert all(o["epoch"] == 1 for o in outcomes.values())


def test_a_global_close_over_supervisors_in_process_names_a_shard_that_did_not_complete_by_the_deadline(
    owners: list[Owner],
) -> None:
    busy, idle = own(owners, "/w/a"), own(owners, "/w/b")
    gate = Gate("never")
    busy.supervisor.start_run(held(gate), session="s1", directory="/w/a", run_id="r1")
    done = threading.Event()
    result = global_dispose_all(
        {busy.shard: LocalShard(busy.supervisor), idle.shard: LocalShard(idle.supervisor)},
        action_id="g-deadline",
        timeout=0.5,
        on_complete=lambda whole: done.set(),
    )
    assert done.is_set() and not result.completed
    assert result.shards[idle.shard].completed and result.shards[idle.shard].error is None
    stuck = result.shards[busy.shard]
    assert (stuck.result, stuck.completed) == ("deferred", False)
    assert stuck.error == "the close did not complete by the deadline"
    gate.open()


def test_a_cluster_shutdown_gives_each_shard_the_grace_left_to_one_deadline_ends_when_every_lease_is_free(
    owners: list[Owner],
) -> None:
    busy, idle = own(owners, "/w/a"), own(owners, "/w/b")
    run = busy.supervisor.start_run(held(Gate("never")), session="s1", directory="/w/a", run_id="r1")
    with OwnerDirectory(shared_database()) as directory:
        result = Coordinator(directory, headers={"Authorization": f"Bearer {TOKEN}"}).shutdown(
            timeout=5, shards=[busy.shard, idle.shard]
        )
        assert result.completed, result.to_dict()
        for owner in (busy, idle):
            let_go = directory.owner(owner.shard)
            assert let_go is not None and let_go.holder is None and not let_go.live
    assert all(o.supervisor.wait_closed(timeout=10).result is not None for o in (busy, idle))
    finished = run.wait(5)
    assert (finished.outcome, finished.reason) == ("interrupted", "shutdown")


def test_after_a_takeover_the_new_owner_s_event_ids_name_its_lease_epoch_from_the_recovery_on(
    owners: list[Owner],
) -> None:
    import httpx

    from run_supervisor.actors.testing import EventLog, simulate_crash

    shard = "ids-" + uuid.uuid4().hex[:8]
    url = with_shard(shared_database(), shard, lease_ttl=5)
    first = Supervisor.start(CONFIG, journal=url, directories=["/w/a"])
    log = EventLog(first)
    first.start_run(held(Gate("never")), session="s1", directory="/w/a", run_id="r1")
    log.wait_for("run.started", run_id="r1")
    log.close()
    simulate_crash(first)

    sup = Supervisor.start(CONFIG, journal=url)
    host = WireHost(sup)
    server = ServerThread(host, token=TOKEN).start()
    owners.append(Owner(shard, url, sup, server, host))
    assert sup.epoch == 2 and host.hub.epoch == "2"
    headers = {"Authorization": f"Bearer {TOKEN}", "Last-Event-ID": "0"}
    ids: list[str] = []
    kinds: list[str] = []
    with (
        httpx.Client(base_url=server.url, headers=headers, timeout=10) as client,
        client.stream("GET", "/events") as stream,
    ):
        for line in stream.iter_lines():  # bounded: the replay is there at once, 10 s read timeout
            if line.startswith("id:"):
                ids.append(line.split(":", 1)[1].strip())
            elif line.startswith("data:") and ids:
                kinds.append(json.loads(line.split(":", 1)[1])["type"])
            if "run.recovered" in kinds:
                break
    assert ids and all(i.startswith("2:") for i in ids), ids
    assert ids[0] == "2:1" and kinds[-1] == "run.recovered"
