"""A bounded load test of `run-supervisor serve` on loopback: requests per second by route, and SSE
fan-out to 50 subscribers. Bounded in count (every phase does a fixed amount of work) and in time
(every wait has a deadline). Figures go in docs/performance.md.

Usage: .venv/bin/python scripts/load_wire.py [--quick] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any

import httpx


@dataclass
class Server:
    url: str
    token: str


async def _rate(name: str, count: int, concurrency: int, call: Any) -> dict[str, Any]:
    """Run ``call(i)`` ``count`` times with ``concurrency`` in flight; requests/s and latencies."""
    latencies: list[float] = []
    next_index = 0

    async def worker() -> None:
        nonlocal next_index
        while next_index < count:
            i = next_index
            next_index += 1
            began = time.perf_counter()
            await call(i)
            latencies.append(time.perf_counter() - began)

    began = time.perf_counter()
    await asyncio.wait_for(asyncio.gather(*(worker() for _ in range(concurrency))), 300)
    elapsed = time.perf_counter() - began
    latencies.sort()
    return {
        "route": name,
        "requests": count,
        "concurrency": concurrency,
        "requests_per_s": round(count / elapsed),
        "p50_ms": round(statistics.median(latencies) * 1000, 2),
        "p99_ms": round(latencies[int(len(latencies) * 0.99) - 1] * 1000, 2),
    }


async def _ok(response: httpx.Response) -> None:
    if response.status_code not in (200, 201):  # 201: POST /runs created a run
        raise RuntimeError(f"{response.request.url}: {response.status_code} {response.text}")


async def _requests(server: Server, count: int) -> list[dict[str, Any]]:
    headers = {"Authorization": f"Bearer {server.token}"}
    limits = httpx.Limits(max_connections=32, max_keepalive_connections=32)
    results = []
    async with httpx.AsyncClient(base_url=server.url, headers=headers, limits=limits, timeout=30) as client:
        await _ok(await client.post("/runs", json={"run_id": "hb", "session": "hb", "directory": "/w/a"}))
        results.append(await _rate("GET /health", count, 16, lambda i: _get(client, "/health")))
        results.append(await _rate("GET /statistics", count, 16, lambda i: _get(client, "/statistics")))
        results.append(
            await _rate(
                "POST /runs/{id}/reports (heartbeat)",
                count,
                16,
                lambda i: _post(client, "/runs/hb/reports", {"type": "heartbeat"}),
            )
        )

        async def whole_run(i: int) -> None:
            run_id = f"load-{i}"
            await _post(client, "/runs", {"run_id": run_id, "session": f"s{i}", "directory": "/w/b"})
            await _post(client, f"/runs/{run_id}/reports", {"type": "step", "kind": "model"})
            await _post(client, f"/runs/{run_id}/reports", {"type": "end"})

        runs = await _rate("external run: start + step + end (runs/s)", count // 4, 16, whole_run)
        results.append(runs)
        await _post(client, "/runs/hb/reports", {"type": "end"})
    return results


async def _get(client: httpx.AsyncClient, path: str) -> None:
    await _ok(await client.get(path))


async def _post(client: httpx.AsyncClient, path: str, body: dict[str, Any]) -> None:
    await _ok(await client.post(path, json=body))


async def _fanout(server: Server, subscribers: int, runs: int) -> dict[str, Any]:
    """``subscribers`` SSE streams; ``runs`` external runs (each about 5 events); the time until every
    subscriber has every event, and the per-event delivery lag."""
    headers = {"Authorization": f"Bearer {server.token}"}
    limits = httpx.Limits(max_connections=subscribers + 32)
    async with httpx.AsyncClient(base_url=server.url, headers=headers, limits=limits, timeout=60) as client:
        sent_at: dict[str, float] = {}
        lags: list[float] = []
        received = [0] * subscribers
        done = [asyncio.Event() for _ in range(subscribers)]
        ready = [asyncio.Event() for _ in range(subscribers)]
        last_run = f"fan-{runs - 1}"

        async def subscriber(n: int) -> None:
            async with client.stream("GET", "/events") as response:
                ready[n].set()
                async for line in response.aiter_lines():
                    if not line.startswith("data:"):
                        continue
                    received[n] += 1
                    if '"run.finished"' not in line:  # parse only what is measured: keep the client light
                        continue
                    event = json.loads(line[5:])
                    if event["type"] == "run.finished":
                        began = sent_at.get(event["run_id"])
                        if began is not None:
                            lags.append(time.perf_counter() - began)
                        if event["run_id"] == last_run:
                            done[n].set()
                            return

        tasks = [asyncio.create_task(subscriber(n)) for n in range(subscribers)]
        await asyncio.wait_for(asyncio.gather(*(r.wait() for r in ready)), 60)
        began = time.perf_counter()

        async def produce(i: int) -> None:
            run_id = f"fan-{i}"
            await _post(client, "/runs", {"run_id": run_id, "session": f"f{i}", "directory": "/w/a"})
            sent_at[run_id] = time.perf_counter()  # from the end report to run.finished at a subscriber
            await _post(client, f"/runs/{run_id}/reports", {"type": "end"})

        await _rate("producers", runs - 1, 8, produce)  # 8 producers at once, then the last run alone
        await produce(runs - 1)
        await asyncio.wait_for(asyncio.gather(*(d.wait() for d in done)), 120)
        elapsed = time.perf_counter() - began
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    lags.sort()
    delivered = sum(received)
    return {
        "subscribers": subscribers,
        "runs": runs,
        "events_delivered": delivered,
        "per_subscriber_min": min(received),
        "per_subscriber_max": max(received),
        "seconds": round(elapsed, 2),
        "deliveries_per_s": round(delivered / elapsed),
        "end_to_delivery_p50_ms": round(statistics.median(lags) * 1000, 1),
        "end_to_delivery_p99_ms": round(lags[int(len(lags) * 0.99) - 1] * 1000, 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="a smoke run (a few seconds)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    count, runs = (200, 40) if args.quick else (4000, 400)
    # The server in its own process (as `run-supervisor serve` runs), the client here.
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "run_supervisor.actors._cli",
            "serve",
            "--directory",
            "/w/a",
            "--directory",
            "/w/b",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        ready = json.loads(proc.stdout.readline())
        server = Server(ready["url"], ready["token"])
        requests = asyncio.run(_requests(server, count))
        fanout = asyncio.run(_fanout(server, 50, runs))
        httpx.post(f"{server.url}/shutdown", headers={"Authorization": f"Bearer {server.token}"}, timeout=30)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    figures = {"requests": requests, "sse_fanout": fanout}
    if args.json:
        json.dump(figures, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        for row in requests:
            rate, p50, p99 = row["requests_per_s"], row["p50_ms"], row["p99_ms"]
            print(f"{row['route']:<48} {rate:>7}/s  p50 {p50} ms  p99 {p99} ms")
        print(
            f"SSE fan-out: {fanout['subscribers']} subscribers, {fanout['events_delivered']} deliveries in "
            f"{fanout['seconds']} s ({fanout['deliveries_per_s']}/s); from end report to run.finished at "
            f"subscribers p50 {fanout['end_to_delivery_p50_ms']} ms, "
            f"p99 {fanout['end_to_delivery_p99_ms']} ms"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
