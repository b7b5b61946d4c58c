#!/usr/bin/env python
"""Scale-out simulation: N supervisor processes on this machine, one per shard (tenant/workspace).

Each shard is a separate Python process owning one ``Supervisor`` (its own GIL, its own actors),
driven over a ``multiprocessing`` pipe -- IPC only, no network. The coordinator (this process)
sends every shard the same batch of work at the same moment and measures, as N grows:

- **cost per run**: wall time for every shard to run ``--runs`` short runs (``--sessions`` sessions in
  parallel inside each shard), divided by the total number of runs; and the aggregate runs/s;
- **cost per close**: wall time for a maintenance ``dispose_all`` in every shard at once (each shard
  has ``--live`` gated runs holding its directories, so each close is deferred, then completes when
  the gate opens), per shard; and the coordinator's fan-out cost of asking every shard to close
  (the part a cross-shard close adds).

Bounded: at most ``--max-shards`` processes (default 4 on 2 cores), every wait has a timeout, and
every shard shuts down and exits before the script does.

    python scripts/scale_sim.py            # N = 1, 2, 4 shards
    python scripts/scale_sim.py --json     # the figures as one JSON object
    python scripts/scale_sim.py --quick    # fewer runs (seconds)
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import sys
import threading
import time
from multiprocessing.connection import Connection
from typing import Any

TIMEOUT_S = 120.0


def _shard(conn: Connection, shard: int, directories: int) -> None:
    """One shard: a supervisor in its own process, doing what the coordinator asks."""
    from run_supervisor.actors import Gate, RunContext, Supervisor, SupervisorConfig

    dirs = [f"/tenant-{shard}/w{d}" for d in range(directories)]
    sup = Supervisor.start(
        SupervisorConfig(shutdown_at_exit=False, request_timeout_s=TIMEOUT_S), directories=dirs
    )

    def short(ctx: RunContext) -> None:
        with ctx.step("model"):
            pass

    try:
        while True:
            order, arg = conn.recv()
            if order == "runs":
                runs, sessions = arg
                errors: list[BaseException] = []

                def worker(
                    i: int, runs: int = runs, sessions: int = sessions, errors: list[BaseException] = errors
                ) -> None:
                    try:
                        for _ in range(runs // sessions):
                            sup.start_run(short, session=f"s{i}", directory=dirs[i % len(dirs)]).wait(
                                TIMEOUT_S
                            )
                    except BaseException as exc:
                        errors.append(exc)

                t0 = time.perf_counter()
                threads = [threading.Thread(target=worker, args=(i,)) for i in range(sessions)]
                for thread in threads:
                    thread.start()
                for thread in threads:
                    thread.join(TIMEOUT_S)
                conn.send(("ok" if not errors else repr(errors[0]), time.perf_counter() - t0))
            elif order == "close":
                live = arg
                gate = Gate("hold")
                handles = [
                    sup.start_run(
                        lambda ctx, g=gate: ctx.wait(g), session=f"c{i}", directory=dirs[i % len(dirs)]
                    )
                    for i in range(live)
                ]
                conn.send(("ready", 0.0))
                conn.recv()  # go
                t0 = time.perf_counter()
                outcome = sup.close("dispose_all", mode="maintenance", origin="scale-sim")
                decided = time.perf_counter() - t0
                gate.open()
                for handle in handles:
                    handle.wait(TIMEOUT_S)
                conn.send((outcome.result.value, decided))
            else:
                break
    finally:
        sup.shutdown(grace_ms=2000)
        conn.close()


def _spawn(n: int, directories: int) -> list[tuple[Any, Connection]]:
    ctx = mp.get_context("spawn")  # a clean interpreter per shard: no inherited threads or actors
    shards = []
    for i in range(n):
        parent, child = ctx.Pipe()
        process = ctx.Process(target=_shard, args=(child, i, directories), name=f"shard-{i}", daemon=True)
        process.start()
        shards.append((process, parent))
    return shards


def _recv(conn: Connection) -> Any:
    if not conn.poll(TIMEOUT_S):
        raise TimeoutError("a shard did not answer in time")
    return conn.recv()


def measure(n: int, *, runs: int, sessions: int, live: int, directories: int, reps: int) -> dict[str, float]:
    shards = _spawn(n, directories)
    per_run: list[float] = []
    rates: list[float] = []
    close_decide: list[float] = []
    close_wall: list[float] = []
    fanout: list[float] = []
    try:
        for _, conn in shards:  # warm up (and wait until every shard has started)
            conn.send(("runs", (sessions, sessions)))
        for _, conn in shards:
            _recv(conn)
        for _ in range(reps):
            t0 = time.perf_counter()
            for _, conn in shards:
                conn.send(("runs", (runs, sessions)))
            answers = [_recv(conn) for _, conn in shards]
            wall = time.perf_counter() - t0
            if any(status != "ok" for status, _ in answers):
                raise RuntimeError(f"a shard failed: {answers}")
            total = runs // sessions * sessions * n
            per_run.append(wall / total * 1e6)
            rates.append(total / wall)
            for _, conn in shards:
                conn.send(("close", live))
            for _, conn in shards:
                _recv(conn)  # ready: its runs hold its directories
            t0 = time.perf_counter()
            for _, conn in shards:
                conn.send(("go", None))
            sent = time.perf_counter()
            answers = [_recv(conn) for _, conn in shards]
            close_wall.append((time.perf_counter() - t0) * 1e3)
            fanout.append((sent - t0) * 1e6)
            close_decide.append(statistics.median(decided for _, decided in answers) * 1e6)
            if any(result != "deferred" for result, _ in answers):
                raise RuntimeError(f"expected deferred closes: {answers}")
    finally:
        for _process, conn in shards:
            try:
                conn.send(("quit", None))
            except (BrokenPipeError, OSError):
                pass
        for process, _ in shards:
            process.join(TIMEOUT_S)
            if process.is_alive():
                process.kill()
    return {
        "shards": n,
        "us_per_run": statistics.median(per_run),
        "runs_per_s": statistics.median(rates),
        "close_decision_us": statistics.median(close_decide),
        "close_all_shards_ms": statistics.median(close_wall),
        "close_fanout_us": statistics.median(fanout),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--max-shards", type=int, default=4)
    args = parser.parse_args(argv)
    runs, reps = (240, 2) if args.quick else (960, 5)
    counts = [n for n in (1, 2, 4, 8) if n <= max(1, min(args.max_shards, 8))]
    load = os.getloadavg()[0]
    rows = []
    for n in counts:
        print(f"[scale-sim] {n} shard(s) ...", file=sys.stderr, flush=True)
        rows.append(measure(n, runs=runs, sessions=8, live=50, directories=10, reps=reps))
    load_after = os.getloadavg()[0]
    if args.json:
        print(json.dumps({"load": [load, load_after], "rows": rows}))
        return 0
    print(f"{os.cpu_count()} CPU(s); load average {load:.2f} before, {load_after:.2f} after")
    print()
    print(
        "| shards | us per run (all shards) | runs/s (all shards) | close decision in a shard (us) "
        "| dispose_all in every shard, to completion (ms) | coordinator fan-out (us) |"
    )
    print("|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        print(
            f"| {row['shards']} | {row['us_per_run']:.0f} | {row['runs_per_s']:,.0f} "
            f"| {row['close_decision_us']:.0f} "
            f"| {row['close_all_shards_ms']:.1f} | {row['close_fanout_us']:.0f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
