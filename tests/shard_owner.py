"""One contender for a shard, as a real process (tests/test_shards_processes.py and scripts/bench.py
run it): it starts a supervisor on a PostgreSQL journal URL (waiting for the lease as the URL says),
prints what it is told as JSON lines on stdout, and runs until its stdin closes.

    python tests/shard_owner.py URL [--work RUN_ID]

Lines: ``{"started": epoch, "recovered": [...], "pid": ...}`` once it holds the lease and recovered;
``{"event": type, "run_id", "part", "state", "seq"}`` for each event its subscriber sees (only
committed events reach it); ``{"stopped": class name, "error": message}`` when it stops because its
journal (its lease) was lost; ``{"closed": true}`` after a shutdown at the end of stdin. With
``--work``, a run holds a running tool and opens a new tool card every 50 ms, so the journal is
written all the time (the writes a frozen owner would try when it wakes).
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from typing import Any

from run_supervisor import Gate, RunContext, Supervisor, SupervisorConfig
from run_supervisor.protocol import RunPartUpdated


def say(line: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps({**line, "t": time.time()}) + "\n")
    sys.stdout.flush()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("--work", default=None)
    args = parser.parse_args()
    config = SupervisorConfig(shutdown_at_exit=False, default_grace_ms=200)
    began = time.monotonic()
    sup = Supervisor.start(config, journal=args.url, directories=["/w/a"])
    say(
        {
            "started": sup.epoch,
            "waited_s": time.monotonic() - began,
            "recovered": [
                {
                    "run_id": r.run_id,
                    "reason": None if r.reason is None else r.reason.value,
                    "parts": [(p.call_id, p.state.value, p.tool_started) for p in r.parts],
                }
                for r in sup.recovered()
            ],
        }
    )

    def seen(event: Any) -> None:
        line = {"event": type(event).__struct_config__.tag, "seq": event.seq}
        if hasattr(event, "run_id"):
            line["run_id"] = event.run_id
        if isinstance(event, RunPartUpdated):
            line["part"], line["state"] = event.call_id, event.state.value
        say(line)

    sup.subscribe(callback=seen)
    never = Gate("never")

    def work(ctx: RunContext) -> None:
        for i in range(100_000):
            call = ctx.tool("bash", call_id=f"call-{i}")
            call.prepared()
            call.running()
            if ctx.wait(never, timeout=0.05):
                return

    if args.work:
        sup.start_run(work, session="s1", directory="/w/a", run_id=args.work)

    stopped = threading.Event()

    def watch() -> None:
        closed = sup.wait_closed(timeout=None)
        failure = sup.journal_failure
        if failure is not None:
            name = type(failure).__name__
            say({"stopped": name, "error": str(failure), "closed": closed.result is not None})
        stopped.set()

    threading.Thread(target=watch, daemon=True).start()
    for _ in sys.stdin:  # until the test closes our stdin (or kills us)
        pass
    if sup.journal_failure is None:
        sup.shutdown(grace_ms=200)
        say({"closed": True})
    stopped.wait(10)
    return 3 if sup.journal_failure is not None else 0


if __name__ == "__main__":
    sys.exit(main())
