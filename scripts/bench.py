#!/usr/bin/env python
"""Benchmark run-supervisor against what a user would write instead, in one process and one run.

Not a timed test: it measures, repeats each figure over rounds, and prints a table (or, with
``--json``, one JSON object: the issue's keys as medians over the rounds, and under ``spread`` each
key's p10 and p90 over the same rounds). Every baseline is what a host would pick if it did not use
the library -- a plain thread per run, a ``ThreadPoolExecutor``, a parked bare thread, a bare thread
woken twice, a host's own run table read under its lock, its own active-run guard, a stop of parked
threads -- never one built in the library's own shape (the keys that compared with its old design,
an actor plus a thread per run, are retired). Baseline and supervisor alternate round by round,
and each side waits for the same things (its threads are done), so drift in the machine's speed
hits both alike.

    python scripts/bench.py            # full run: the table, targets, and growth with live runs
    python scripts/bench.py --json     # the figures only, as one JSON object
    python scripts/bench.py --quick    # fewer repetitions: about a minute on 2 cores (CI smoke)
    python scripts/bench.py --pin      # take the latencies with every thread pinned to one CPU
    python scripts/bench.py --pg-only  # the PostgreSQL journal's figures alone (runs/s, takeover)

Unpinned by default, as every host runs. Each section cleans up after itself (every actor stopped,
every thread joined) and checks that it did. Linux only: memory is read from ``/proc/self/status``
and ``--pin`` uses ``os.sched_setaffinity``. Results: docs/performance.md.
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import functools
import gc
import json
import os
import platform
import queue
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager, nullcontext
from dataclasses import dataclass, field, replace
from importlib import metadata
from typing import Any

import pykka

from run_supervisor.actors import Gate, RunContext, Subscription, Supervisor, SupervisorConfig
from run_supervisor.actors._journal import Journal
from run_supervisor.protocol import (
    CloseAction,
    CloseMode,
    CloseRequest,
    CloseResult,
    Event,
    LifecycleCompleted,
    RunFinished,
    StartRun,
    StepStarted,
    SupervisorCore,
)

ns = time.perf_counter_ns
TIMEOUT_S = 60.0
"""Bound on every wait of the benchmark itself; a wait that hits it is a failure, not a figure."""


# --- settings --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Reps:
    """How many times each figure is taken. Every key's median and spread are over ``rounds``. The
    defaults are the full run's; ``QUICK`` names what the CI smoke run takes fewer of."""

    rtt_rounds: int = 11  # interleaved rounds of (thread queue, pykka ask, status query, run query)
    rtt_per_round: int = 1000  # round trips per kind per round
    busy_rounds: int = 11  # rounds of (status query, pykka ask) while the supervisor is kept busy
    cancel_rounds: int = 11  # rounds of cancel latency, each alternating supervisor and bare samples
    cancel_per_round: int = 30
    deferred_rounds: int = 11
    deferred_per_round: int = 30
    close_decisions: int = 3000  # decisions per shape (pure core), in 10 chunks
    runs_rounds: int = 11  # alternating rounds of (actor cycle, thread per run, pool, supervisor)
    runs_per_session: int = 60  # runs per session (8 sessions) or per thread, per round
    live_1000: int = 9  # times 1,000 runs (and the baselines) are opened, measured and stopped
    overrun: tuple[tuple[int, int], ...] = ((10, 9), (100, 9), (1000, 9))  # (deaf bodies, shutdowns measured)
    growth: bool = True  # measure 10 and 100 live runs too (table mode only)
    journal_rounds: int = 7  # alternating rounds of short runs with the run journal on and off
    recovery_rounds: int = 5  # recoveries of a journal with 10,000 finished and 100 unfinished runs
    heartbeat_rounds: int = 11  # rounds of (HEARTBEATS ctx.heartbeat(), the same count of bare stores)
    http_rounds: int = 11  # alternating rounds of kept-alive requests: serve, then a bare Starlette app
    http_per_round: int = 200  # sequential requests on one connection per side per round
    cold_rounds: int = 7  # alternating cold starts: serve to its ready line, then a bare import
    async_rounds: int = 7  # alternating rounds of ASYNC_RUNS async runs: AsyncSupervisor, a dict of Tasks


FULL = Reps()
QUICK = Reps(
    rtt_rounds=5,
    rtt_per_round=400,
    busy_rounds=5,
    cancel_rounds=5,
    cancel_per_round=12,
    deferred_rounds=5,
    deferred_per_round=12,
    close_decisions=1000,
    runs_rounds=5,
    runs_per_session=30,
    live_1000=3,
    overrun=((10, 3), (100, 3), (1000, 3)),
    growth=False,
    journal_rounds=3,
    recovery_rounds=3,
    heartbeat_rounds=5,
    http_rounds=5,
    http_per_round=100,
)

SESSIONS = 8
"""Sessions (and baseline threads) working in parallel for the throughput figures."""
LIVE = 1000
"""Live runs (and bare actors, parked threads) for the memory and shutdown figures."""
DIRECTORIES = 100
"""Directories the live runs are spread over."""
GRACE_MS = 200
"""The shutdown grace deadline in the overrun figures."""
SHORT_RUNS_DIRECTORY = "/bench/t"
"""The directory of the throughput figures' short runs."""


def _config() -> SupervisorConfig:
    # Nothing the benchmark starts may outlive its section: never rely on the exit hook.
    return SupervisorConfig(shutdown_at_exit=False, request_timeout_s=TIMEOUT_S)


# --- tools -----------------------------------------------------------------------------------------


def median(samples: list[float]) -> float:
    if not samples:
        raise ValueError("no samples")
    return float(statistics.median(samples))


def spread(samples: list[float]) -> tuple[float, float]:
    """p10 and p90 of the samples (the whole range when there are fewer than 3)."""
    if len(samples) < 3:
        return (min(samples), max(samples))
    cuts = statistics.quantiles(samples, n=10, method="inclusive")
    return (cuts[0], cuts[-1])


def us(samples_ns: list[int]) -> float:
    return median([s / 1000.0 for s in samples_ns])


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@dataclass
class Figures:
    """Per-round values of every figure; a key's figure is their median, its spread their p10-p90."""

    rounds: dict[str, list[float]] = field(default_factory=dict)

    def add(self, key: str, value: float) -> None:
        self.rounds.setdefault(key, []).append(value)

    def extend(self, key: str, values: list[float]) -> None:
        self.rounds.setdefault(key, []).extend(values)

    def ratio(self, key: str, top: str, bottom: str) -> None:
        """Per-round ratio of two figures taken in the same (alternating) rounds."""
        for a, b in zip(self.rounds[top], self.rounds[bottom], strict=True):
            self.add(key, a / b)

    def ratio_of_medians(self, key: str, top: str, bottom: str) -> None:
        """Ratio of each round of ``top`` to the median of ``bottom`` (taken in another section)."""
        base = self.median(bottom)
        for a in self.rounds[top]:
            self.add(key, a / base)

    def median(self, key: str) -> float:
        return median(self.rounds[key])

    def spread(self, key: str) -> tuple[float, float]:
        return spread(self.rounds[key])

    def __contains__(self, key: str) -> bool:
        return key in self.rounds


class Arrivals:
    """Counts bodies (or parked threads) that reached their wait, so the bench waits on a condition
    rather than sleeping."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.count = 0

    def arrive(self) -> None:
        with self._cond:
            self.count += 1
            self._cond.notify_all()

    def wait(self, n: int, timeout: float = TIMEOUT_S) -> None:
        with self._cond:
            if not self._cond.wait_for(lambda: self.count >= n, timeout):
                raise TimeoutError(f"only {self.count} of {n} arrived within {timeout} s")


def next_event(subscription: Subscription, kind: type[Event], **fields: Any) -> Event:
    """The next event of this type whose fields match (earlier, unrelated events are dropped);
    ``SupervisorTimeout`` after TIMEOUT_S."""
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        event: Event = subscription.get(timeout=max(0.001, deadline - time.monotonic()))
        if isinstance(event, kind) and all(getattr(event, k) == v for k, v in fields.items()):
            return event


_libc: Any = None
if sys.platform.startswith("linux"):
    _name = ctypes.util.find_library("c")
    _libc = ctypes.CDLL(_name) if _name else None


def release_memory() -> None:
    """Collect garbage and hand freed heap back to the OS, so the next RSS reading starts clean."""
    gc.collect()
    if _libc is not None and hasattr(_libc, "malloc_trim"):
        _libc.malloc_trim(0)


def rss_kib() -> int:
    """Resident set size of this process, in KiB (Linux: VmRSS of /proc/self/status)."""
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS in /proc/self/status")


@contextmanager
def section(name: str) -> Iterator[None]:
    """Run one part of the benchmark and check it left no actor or thread behind."""
    threads_before = set(threading.enumerate())
    started = time.monotonic()
    _log(f"[bench] {name} ...")
    yield
    deadline = time.monotonic() + TIMEOUT_S
    for thread in set(threading.enumerate()) - threads_before:
        thread.join(timeout=max(0.0, deadline - time.monotonic()))
    actors = pykka.ActorRegistry.get_all()
    threads = [t.name for t in set(threading.enumerate()) - threads_before if t.is_alive()]
    if actors or threads:
        raise RuntimeError(f"{name} left {len(actors)} actor(s) and threads {threads[:10]} running")
    release_memory()
    _log(f"[bench] {name}: {time.monotonic() - started:.1f} s")


@contextmanager
def pinned(*native_ids: int) -> Iterator[None]:
    """Pin these threads (native ids; 0 is the calling thread, and every thread it starts inherits
    the pin) to one CPU for the block, then restore them.

    Latencies are taken pinned. On a VM, a wakeup that lands on the *other*, idle vCPU costs about
    55 us; one that lands on the same vCPU costs about 22 us. The scheduler picks between them per
    code path and per run, which makes a ratio of two round trips swing from 0.5 to 2.9 from run
    to run. On one CPU every hop is the same kind, so the ratio compares the code paths."""
    cpu = min(os.sched_getaffinity(0))
    saved = {tid: os.sched_getaffinity(tid) for tid in native_ids}
    for tid in saved:
        os.sched_setaffinity(tid, {cpu})
    try:
        yield
    finally:
        for tid, cpus in saved.items():
            try:
                os.sched_setaffinity(tid, cpus)
            except OSError:
                pass  # the thread has ended


# --- baselines -------------------------------------------------------------------------------------


WHO = object()
"""Asked of an Echo actor: answers with its thread's native id."""


class Echo(pykka.ThreadingActor):
    """An idle pykka actor that answers every ask with the message."""

    use_daemon_thread = True  # as the supervisor's own actors: a failed bench must still exit

    def on_receive(self, message: Any) -> Any:
        if message is WHO:
            return threading.get_native_id()
        return message


class HostTable:
    """What a host keeps without the library: its runs' states in a dict under a lock, with counts."""

    def __init__(self, runs: int = 8) -> None:
        self.lock = threading.Lock()
        self.runs: dict[str, str] = {f"r{i}": "completed" for i in range(runs)}
        self.active = 0
        self.queued = 0
        self.finished = runs

    def statistics(self) -> tuple[int, int, int]:
        """Its status query: the counts, read under the lock."""
        with self.lock:
            return (self.active, self.queued, self.finished)

    def start(self, run_id: str) -> None:
        with self.lock:
            self.runs[run_id] = "active"
            self.active += 1

    def end(self, run_id: str) -> None:
        with self.lock:
            self.runs[run_id] = "completed"
            self.active -= 1
            self.finished += 1


class QueueEcho:
    """A bare thread answering through two ``queue.Queue``s."""

    def __init__(self) -> None:
        self.requests: queue.Queue[int | None] = queue.Queue()
        self.replies: queue.Queue[int] = queue.Queue()
        self.thread = threading.Thread(target=self._serve, name="bench-queue-echo", daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while (message := self.requests.get()) is not None:
            self.replies.put(message)

    def close(self) -> None:
        self.requests.put(None)
        self.thread.join()


def _noop_body(ctx: RunContext) -> None:
    pass


def time_each(call: Callable[[], object], n: int) -> list[int]:
    samples = []
    for _ in range(n):
        t0 = ns()
        call()
        samples.append(ns() - t0)
    return samples


def maybe_pinned(pin: bool) -> Any:
    """``pinned(0)`` with ``--pin`` (this thread and every thread it starts), else nothing."""
    return pinned(0) if pin else nullcontext()


def _short_body(ctx: RunContext) -> None:
    with ctx.step("model"):
        pass


def _join_run_threads(supervisor: Supervisor) -> None:
    """Wait until no thread still runs a finished run's body, as a thread-per-run baseline waits for
    its joins (``run.wait()`` returns at ``run.finished``; a pooled thread is named after the run
    while it runs its body, and parks again before the body's end is reported)."""
    for thread in supervisor.threads.alive():
        if thread.name.startswith("run-supervisor-run-"):
            thread.join(timeout=TIMEOUT_S)


# --- round trips -----------------------------------------------------------------------------------


def round_trips(fig: Figures, rounds: int, per_round: int) -> None:
    """Thread queue, pykka ask, a host's own locked table read, and the supervisor's status and run
    queries, interleaved round by round, on an idle supervisor."""
    with ExitStack() as cleanup:  # every step runs, even if an earlier one raised
        echo = QueueEcho()
        cleanup.callback(echo.close)
        actor = Echo.start()
        cleanup.callback(actor.stop)
        supervisor = Supervisor.start(_config(), directories=["/bench/q"])
        cleanup.callback(supervisor.shutdown, grace_ms=1000)
        supervisor.start_run(_noop_body, session="s", directory="/bench/q", run_id="q-1").wait(TIMEOUT_S)

        def queue_rtt() -> None:
            echo.requests.put(1)
            echo.replies.get()

        table = HostTable()
        kinds: dict[str, Callable[[], object]] = {
            "thread_queue_rtt_us": queue_rtt,
            "pykka_ask_us": lambda: actor.ask(1),
            "table_read_us": table.statistics,
            "status_query_us": supervisor.statistics,
            "run_query_us": lambda: supervisor.run("q-1"),
        }
        for call in kinds.values():  # warm up
            time_each(call, 200)
        for _ in range(rounds):
            for key, call in kinds.items():
                fig.add(key, us(time_each(call, per_round)))
    fig.ratio("status_query_table_ratio", "status_query_us", "table_read_us")


def busy_queries(fig: Figures, rounds: int, per_round: int) -> None:
    """The status query and a pykka ask (to an idle actor), interleaved, while two threads keep the
    supervisor busy starting and finishing short runs."""
    supervisor = Supervisor.start(_config(), directories=["/bench/b"])
    actor = Echo.start()
    stop = threading.Event()
    errors: list[BaseException] = []

    def churn(i: int) -> None:
        try:
            while not stop.is_set():
                supervisor.start_run(_short_body, session=f"b{i}", directory="/bench/b").wait(TIMEOUT_S)
        except BaseException as exc:
            errors.append(exc)

    churners = [threading.Thread(target=churn, args=(i,), name=f"bench-churn-{i}") for i in range(2)]
    try:
        for thread in churners:
            thread.start()
        time_each(supervisor.statistics, 200)
        for _ in range(rounds):
            fig.add("status_query_busy_us", us(time_each(supervisor.statistics, per_round)))
            fig.add("pykka_ask_busy_us", us(time_each(lambda: actor.ask(1), per_round)))
    finally:
        stop.set()
        for thread in churners:
            thread.join(timeout=TIMEOUT_S)
        actor.stop()
        supervisor.shutdown(grace_ms=1000)
    if errors:
        raise errors[0]
    fig.ratio("status_query_busy_ratio", "status_query_busy_us", "pykka_ask_busy_us")


# --- cancel and deferred close latency -------------------------------------------------------------


def _bare_cancel_sample() -> int:
    """A bare thread parked on a condition; the "cancel" sets its flag and wakes it (one wakeup), it
    reports the end on a queue the caller waits on (two). Nanoseconds from the cancel to the report."""
    cond = threading.Condition()
    cancelled = [False]
    arrived = threading.Event()
    ended: queue.SimpleQueue[int] = queue.SimpleQueue()

    def body() -> None:
        with cond:
            arrived.set()
            cond.wait_for(lambda: cancelled[0], TIMEOUT_S)
        ended.put(1)

    thread = threading.Thread(target=body, name="bench-bare-cancel")
    thread.start()
    arrived.wait(TIMEOUT_S)
    time.sleep(0.002)  # let it block in its wait, as the supervised body does
    t0 = ns()
    with cond:
        cancelled[0] = True
        cond.notify_all()
    ended.get(timeout=TIMEOUT_S)
    elapsed = ns() - t0
    thread.join(timeout=TIMEOUT_S)
    return elapsed


def cancel_latency(fig: Figures, reps: Reps) -> None:
    """From ``run.cancel()`` to the run's ``run.finished`` at the caller, for a body waiting inside a
    step; alternating sample by sample with the bare two-wakeup thread (and which of the two goes
    first, sample by sample). Per round: the medians."""
    supervisor = Supervisor.start(_config(), directories=["/bench/c"])
    subscription = supervisor.subscribe()
    gate = Gate("never")  # never opened: only the cancel ends these bodies
    try:
        for i in range(reps.cancel_rounds * reps.cancel_per_round + 5):
            arrivals = Arrivals()

            def body(ctx: RunContext, arrivals: Arrivals = arrivals) -> None:
                with ctx.step("model"):
                    arrivals.arrive()
                    ctx.wait(gate)

            bare = _bare_cancel_sample() if i % 2 else 0  # who goes first alternates
            run = supervisor.start_run(body, session="s", directory="/bench/c", run_id=f"c{i}")
            next_event(subscription, StepStarted, run_id=run.run_id)
            arrivals.wait(1)
            time.sleep(0.002)  # let the body block in its wait (the slow path we mean to measure)
            t0 = ns()
            run.cancel()
            next_event(subscription, RunFinished, run_id=run.run_id)
            ours = ns() - t0
            if not i % 2:
                bare = _bare_cancel_sample()
            if i < 5:  # the first few warm up
                continue
            fig.extend("_cancel_ns", [ours])
            fig.extend("_bare_cancel_ns", [bare])
    finally:
        supervisor.shutdown(grace_ms=1000)
    per = reps.cancel_per_round
    ours_all, bare_all = fig.rounds.pop("_cancel_ns"), fig.rounds.pop("_bare_cancel_ns")
    for r in range(reps.cancel_rounds):
        fig.add("cancel_latency_us", median(ours_all[r * per : (r + 1) * per]) / 1000)
        fig.add("cancel_bare_us", median(bare_all[r * per : (r + 1) * per]) / 1000)
    fig.ratio("cancel_latency_bare_ratio", "cancel_latency_us", "cancel_bare_us")


def _bare_deferred_sample() -> int:
    """A host's own active-run guard: a body thread runs, counted active under a condition; the
    host's dispose waits on the condition until no run is active, disposes (a no-op) and returns to
    its caller. Nanoseconds from the body's last act to the caller holding the dispose's result."""
    guard = threading.Condition()
    active = [1]
    release = threading.Event()
    arrived = threading.Event()
    ended: list[int] = []

    def body() -> None:
        arrived.set()
        release.wait(TIMEOUT_S)
        ended.append(ns())  # the body's last act: the run's end
        with guard:
            active[0] -= 1
            guard.notify_all()

    thread = threading.Thread(target=body, name="bench-bare-deferred")
    thread.start()
    arrived.wait(TIMEOUT_S)
    disposed: queue.SimpleQueue[int] = queue.SimpleQueue()

    def dispose() -> None:  # the host's close: deferred until the directory's run has ended
        with guard:
            guard.wait_for(lambda: active[0] == 0, TIMEOUT_S)
        disposed.put(1)  # the instance disposed: the caller learns it

    closer = threading.Thread(target=dispose, name="bench-bare-dispose")
    closer.start()
    release.set()
    disposed.get(timeout=TIMEOUT_S)
    done = ns()
    thread.join(timeout=TIMEOUT_S)
    closer.join(timeout=TIMEOUT_S)
    return done - ended[0]


def deferred_close_latency(fig: Figures, reps: Reps) -> None:
    """From the end of the run that blocks a maintenance dispose to the action's
    ``lifecycle.completed`` at the caller, alternating sample by sample (and who goes first) with a
    host's own active-run guard; per round: the medians, in microseconds."""
    supervisor = Supervisor.start(_config(), directories=["/bench/d"])
    subscription = supervisor.subscribe()
    samples: list[float] = []
    guarded: list[float] = []
    try:
        for i in range(reps.deferred_rounds * reps.deferred_per_round + 5):
            bare = _bare_deferred_sample() if i % 2 else 0
            gate = Gate(f"g{i}")
            arrivals = Arrivals()
            ended: list[int] = []

            def body(
                ctx: RunContext, gate: Gate = gate, arrivals: Arrivals = arrivals, ended: list[int] = ended
            ) -> None:
                with ctx.step("model"):
                    arrivals.arrive()
                    ctx.wait(gate)
                ended.append(ns())  # the body's last act: the run's end

            # Each dispose retires the directory's instance; the next run loads a fresh one.
            supervisor.start_run(body, session="s", directory="/bench/d", run_id=f"d{i}")
            arrivals.wait(1)
            outcome = supervisor.close("dispose", mode="maintenance", origin="bench", directory="/bench/d")
            if outcome.result is not CloseResult.DEFERRED:
                raise RuntimeError(f"expected a deferred close, got {outcome.result}")
            gate.open()
            next_event(subscription, LifecycleCompleted, action_id=outcome.action_id)
            done = ns()
            if not i % 2:
                bare = _bare_deferred_sample()
            if i >= 5:
                samples.append((done - ended[0]) / 1000)
                guarded.append(bare / 1000)
    finally:
        supervisor.shutdown(grace_ms=1000)
    per = reps.deferred_per_round
    for r in range(reps.deferred_rounds):
        fig.add("deferred_close_latency_us", median(samples[r * per : (r + 1) * per]))
        fig.add("deferred_close_guard_us", median(guarded[r * per : (r + 1) * per]))
    fig.ratio("deferred_close_guard_ratio", "deferred_close_latency_us", "deferred_close_guard_us")


# --- close decisions on the pure core --------------------------------------------------------------


def _dir(i: int) -> str:
    return f"/bench/dir-{i:03d}"


def _core_with(live_runs: int, directories: int) -> SupervisorCore:
    """A core with ``directories`` loaded and ``live_runs`` active runs spread over them round-robin
    (one session each, so every run is active, none queued)."""
    core = SupervisorCore()
    for d in range(directories):
        core.preload(_dir(d))
    for i in range(live_runs):
        core.request(StartRun(run_id=f"r{i}", session=f"s{i}", directory=_dir(i % directories)), None)
    return core


def close_decisions(shapes: list[tuple[int, int]], per_shape: int) -> dict[tuple[int, int], list[float]]:
    """Time to decide a maintenance dispose of one directory that holds live runs, for each shape
    (live runs, directories); microseconds, as the medians of 10 chunks taken in order. Each
    decision is fresh: a state is built, each of its directories that hold runs is closed once,
    then the state is rebuilt. Shapes are interleaved build by build."""
    samples: dict[tuple[int, int], list[int]] = {shape: [] for shape in shapes}
    while any(len(samples[shape]) < per_shape for shape in shapes):
        for shape in shapes:
            if len(samples[shape]) >= per_shape:
                continue
            runs, directories = shape
            core = _core_with(runs, directories)
            closes = [
                CloseRequest(
                    do=CloseAction.DISPOSE, mode=CloseMode.MAINTENANCE, origin="bench", directories=(_dir(d),)
                )
                for d in range(min(runs, directories))
            ]
            gc.collect()
            for close in closes:
                t0 = ns()
                commands = core.request(close, None)
                samples[shape].append(ns() - t0)
                if not commands:
                    raise RuntimeError("a close decided nothing")
    chunks: dict[tuple[int, int], list[float]] = {}
    for shape, values in samples.items():
        size = len(values) // 10
        chunks[shape] = [us(values[c * size : (c + 1) * size]) for c in range(10)]
    return chunks


# --- throughput ------------------------------------------------------------------------------------


def _parallel(work: Callable[[int], None], n: int, then: Callable[[], None] = lambda: None) -> float:
    """Run ``work(i)`` on n threads at once, then ``then()``; seconds from the common start to the
    end of ``then``."""
    barrier = threading.Barrier(n + 1)
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        barrier.wait()
        try:
            work(i)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,), name=f"bench-worker-{i}") for i in range(n)]
    for thread in threads:
        thread.start()
    barrier.wait()
    t0 = ns()
    for thread in threads:
        thread.join()
    then()
    elapsed = (ns() - t0) / 1e9
    if errors:
        raise errors[0]
    return elapsed


def _noop() -> None:
    pass


Work = tuple[Callable[[int], None], Callable[[], None]]
"""One side of a throughput figure: what each of the SESSIONS threads does in a round, and what the
round waits for once they are done (the baselines: nothing; a supervisor: its run threads)."""


def _short_runs(supervisor: Supervisor, runs: int) -> Work:
    """``runs`` short runs one after another in each session, each waited for; then the run threads."""

    def work(i: int) -> None:
        for _ in range(runs):
            supervisor.start_run(_short_body, session=f"s{i}", directory=SHORT_RUNS_DIRECTORY).wait(TIMEOUT_S)

    return work, functools.partial(_join_run_threads, supervisor)


def _in_turn(fig: Figures, rounds: int, kinds: dict[str, Work], total: int) -> None:
    """Each kind once to warm up, then ``rounds`` rounds of every kind in turn (the order reversed
    every other round, so neither side always goes first); each round adds ``total`` over its
    seconds (per second) under its kind's key."""
    for work, then in kinds.values():
        _parallel(work, SESSIONS, then)
    for r in range(rounds):
        order = list(kinds.items())
        if r % 2:
            order.reverse()
        for key, (work, then) in order:
            fig.add(key, total / _parallel(work, SESSIONS, then))


def throughput(fig: Figures, reps: Reps) -> None:
    """Short runs, start to end, in SESSIONS sessions at once, against what a host would do
    without the library, round by round in turn: a plain thread per run (start, join); a
    ``ThreadPoolExecutor(SESSIONS)`` host with its own run table (a run is marked active under a
    lock at submit and completed at its end; submit, wait). A supervisor round ends when every run
    has finished and its body's thread is back in the pool or has exited."""

    def thread_per_run(_: int) -> None:
        for _ in range(reps.runs_per_session):
            thread = threading.Thread(target=_noop)
            thread.start()
            thread.join()

    pool = ThreadPoolExecutor(max_workers=SESSIONS, thread_name_prefix="bench-pool")
    table = HostTable()

    def pooled(i: int) -> None:
        for n in range(reps.runs_per_session):
            run_id = f"p{i}-{n}"
            table.start(run_id)
            pool.submit(table.end, run_id).result(timeout=TIMEOUT_S)

    supervisor = Supervisor.start(_config(), directories=[SHORT_RUNS_DIRECTORY])
    kinds: dict[str, Work] = {
        "thread_runs_per_s": (thread_per_run, _noop),
        "pool_runs_per_s": (pooled, _noop),
        "runs_per_s": _short_runs(supervisor, reps.runs_per_session),
    }
    try:
        _in_turn(fig, reps.runs_rounds, kinds, SESSIONS * reps.runs_per_session)
    finally:
        supervisor.shutdown(grace_ms=1000)
        pool.shutdown(wait=True)
    fig.ratio("runs_per_s_thread_ratio", "runs_per_s", "thread_runs_per_s")
    fig.ratio("runs_per_s_pool_ratio", "runs_per_s", "pool_runs_per_s")


# --- asyncio: async runs as tasks against a host's own dict of Tasks --------------------------------

ASYNC_RUNS = 200
"""Async runs started at once per round (each its own session), streaming ASYNC_CHUNKS chunks."""
ASYNC_CHUNKS = 20
ASYNC_TICK_S = 0.002
"""The loop-lateness probe's period: a task that sleeps this long and notes how late it woke."""


async def _async_round(supervised: bool) -> tuple[float, float, int]:
    """One round on a fresh loop: ASYNC_RUNS runs started together, each streaming ASYNC_CHUNKS
    chunks (a heartbeat and a loop turn each), then all awaited. Returns (the loop's worst lateness
    in ms, runs per second from the first start to the last end, OS threads added at the peak)."""
    import asyncio

    from run_supervisor import AsyncSupervisor

    worst = 0.0
    stop = asyncio.Event()

    async def probe() -> None:
        nonlocal worst
        loop = asyncio.get_running_loop()
        while not stop.is_set():
            before = loop.time()
            await asyncio.sleep(ASYNC_TICK_S)
            worst = max(worst, loop.time() - before - ASYNC_TICK_S)

    peak = 0

    def note_threads() -> None:
        nonlocal peak
        peak = max(peak, threading.active_count())

    if supervised:
        async with AsyncSupervisor.start(_config(), directories=["/bench/async"]) as sup:

            async def turn(ctx: Any) -> None:
                for _ in range(ASYNC_CHUNKS):
                    ctx.heartbeat()
                    await asyncio.sleep(0)
                note_threads()

            await (await sup.start_run(turn, session="warm", directory="/bench/async")).wait(TIMEOUT_S)
            before_threads = threading.active_count()
            ticker = asyncio.create_task(probe())
            await asyncio.sleep(ASYNC_TICK_S)
            began = time.perf_counter()
            runs = await asyncio.gather(
                *(sup.start_run(turn, session=f"s{i}", directory="/bench/async") for i in range(ASYNC_RUNS))
            )
            for run in runs:
                await run.wait(TIMEOUT_S)
            took = time.perf_counter() - began
            stop.set()
            await ticker
    else:
        table: dict[str, asyncio.Task[None]] = {}  # the host's own: a task per run, by run id
        last: dict[str, float] = {}

        async def bare(run_id: str) -> None:
            for _ in range(ASYNC_CHUNKS):
                last[run_id] = time.monotonic()  # what a host keeps to notice a hung stream
                await asyncio.sleep(0)
            note_threads()

        before_threads = threading.active_count()
        ticker = asyncio.create_task(probe())
        await asyncio.sleep(ASYNC_TICK_S)
        began = time.perf_counter()
        for i in range(ASYNC_RUNS):
            table[f"r{i}"] = asyncio.create_task(bare(f"r{i}"))
        for task in list(table.values()):
            await task
        took = time.perf_counter() - began
        stop.set()
        await ticker
    return worst * 1000.0, ASYNC_RUNS / took, max(0, peak - before_threads)


def async_runs(fig: Figures, reps: Reps) -> None:
    """ASYNC_RUNS async runs started at once and streaming, through ``AsyncSupervisor`` and through
    a host's own dict of Tasks, round by round in turn (each on a fresh loop): the loop's worst
    lateness while they start and stream (``async_loop_lag_ratio``: ours against the dict's), runs
    per second (``async_runs_per_s_ratio``) and OS threads added per open async run
    (``async_threads_per_run``: 0 when an async run is only a task)."""
    import asyncio

    for supervised in (True, False):  # warm up
        asyncio.run(_async_round(supervised))
    for r in range(reps.async_rounds):
        order = [True, False] if r % 2 == 0 else [False, True]  # alternate who goes first
        for supervised in order:
            lag_ms, per_s, threads = asyncio.run(_async_round(supervised))
            suffix = "" if supervised else "_bare"
            fig.add(f"async_loop_lag{suffix}_ms", lag_ms)
            fig.add(f"async_runs_per_s{suffix}", per_s)
            if supervised:
                fig.add("async_threads_per_run", threads / ASYNC_RUNS)
    # A floor of 1 ms under the bare lateness: a quiet round's few hundred microseconds would
    # otherwise make the ratio a measure of timer noise.
    for ours, bare in zip(fig.rounds["async_loop_lag_ms"], fig.rounds["async_loop_lag_bare_ms"], strict=True):
        fig.add("async_loop_lag_ratio", ours / max(bare, 1.0))
    fig.ratio("async_runs_per_s_ratio", "async_runs_per_s", "async_runs_per_s_bare")


# --- stalls: the cost of a heartbeat ---------------------------------------------------------------

HEARTBEATS = 20_000
"""Heartbeats (and bare stores) per round."""


class _LastProgress:
    """What a host would keep itself to notice a hung stream: the last progress time."""

    last = 0.0


def heartbeat_cost(fig: Figures, reps: Reps) -> None:
    """``ctx.heartbeat()`` in a body whose stalls are measured (``stall_after_ms`` set, not flagged),
    against the least a host would do itself: store a clock read in an attribute. Both loops run on the
    body's thread, alternating round by round. The supervisor's timer holds one stall check for the run
    throughout: a heartbeat never reschedules it."""
    config = SupervisorConfig(shutdown_at_exit=False, stall_after_ms=3_600_000)
    supervisor = Supervisor.start(config)
    pending: list[int] = []
    host = _LastProgress()

    def body(ctx: RunContext) -> None:
        for _ in range(reps.heartbeat_rounds):
            start = ns()
            for _ in range(HEARTBEATS):
                ctx.heartbeat()
            fig.add("heartbeat_ns", (ns() - start) / HEARTBEATS)
            start = ns()
            for _ in range(HEARTBEATS):
                host.last = time.monotonic()
            fig.add("heartbeat_bare_ns", (ns() - start) / HEARTBEATS)
            pending.append(supervisor.timers.pending())

    try:
        supervisor.start_run(body, session="hb", directory="/bench/hb").wait(TIMEOUT_S)
    finally:
        supervisor.shutdown(grace_ms=1000)
    if set(pending) != {1}:
        raise AssertionError(f"the stall check was rescheduled by heartbeats: pending timers {pending}")
    fig.ratio("heartbeat_ratio", "heartbeat_ns", "heartbeat_bare_ns")


# --- the run journal: its cost on short runs, and recovery ------------------------------------------


def _short_runs_in_turn(
    fig: Figures, reps: Reps, ratio: str, ours: tuple[str, Supervisor], baseline: tuple[str, Supervisor]
) -> None:
    """Short runs on two supervisors in alternating rounds (``<name>_runs_per_s`` each), then ``ratio``:
    ours over the baseline. Both supervisors are shut down, whatever happens."""
    kinds = {
        f"{name}_runs_per_s": _short_runs(supervisor, reps.runs_per_session)
        for name, supervisor in (ours, baseline)
    }
    try:
        _in_turn(fig, reps.journal_rounds, kinds, SESSIONS * reps.runs_per_session)
    finally:
        for _, supervisor in (baseline, ours):
            supervisor.shutdown(grace_ms=1000)
    fig.ratio(ratio, f"{ours[0]}_runs_per_s", f"{baseline[0]}_runs_per_s")


def journal_throughput(fig: Figures, reps: Reps) -> None:
    """Short runs (as in ``throughput``) on a supervisor with a run journal, over one without, in
    alternating rounds. What a host pays for crash safety: every event committed (one transaction per
    batch) before a subscriber or an answer sees it."""
    with tempfile.TemporaryDirectory(prefix="bench-journal-") as folder:
        plain = Supervisor.start(_config(), directories=[SHORT_RUNS_DIRECTORY])
        journaled = Supervisor.start(
            _config(), directories=[SHORT_RUNS_DIRECTORY], journal=os.path.join(folder, "runs.journal")
        )
        _short_runs_in_turn(
            fig, reps, "journal_runs_per_s_ratio", ("journal_on", journaled), ("journal_off", plain)
        )


def _journal_left_by_a_crash(path: str, finished: int, unfinished: int) -> None:
    """A journal as a dead process leaves it: ``finished`` runs done, ``unfinished`` mid tool call."""
    journal = Journal.open(path)
    events: list[dict[str, Any]] = []
    for i in range(finished + unfinished):
        run_id = f"r{i}"
        events.append(
            {
                "type": "run.started",
                "run_id": run_id,
                "session": f"s{i}",
                "directory": "/bench/r",
                "generation": 1,
            }
        )
        if i < finished:
            events.append({"type": "run.finished", "run_id": run_id, "outcome": "completed"})
        else:
            events.append(
                {
                    "type": "run.part.updated",
                    "run_id": run_id,
                    "call_id": "c1",
                    "tool": "bash",
                    "state": "running",
                    "tool_started": True,
                }
            )
    for start in range(0, len(events), 1000):
        journal.apply(events[start : start + 1000])
    journal.abandon()


def journal_recovery(fig: Figures, reps: Reps) -> None:
    """``Supervisor.start(journal=...)`` on a journal with 10,000 finished and 100 unfinished runs:
    open, check, read what is unfinished, settle it, start. Each round recovers a fresh copy."""
    with tempfile.TemporaryDirectory(prefix="bench-recovery-") as folder:
        template = os.path.join(folder, "template.journal")
        _journal_left_by_a_crash(template, 10_000, 100)
        for r in range(reps.recovery_rounds):
            path = os.path.join(folder, f"round-{r}.journal")
            shutil.copyfile(template, path)
            for suffix in ("-wal", "-shm"):
                if os.path.exists(template + suffix):
                    shutil.copyfile(template + suffix, path + suffix)
            began = time.perf_counter()
            supervisor = Supervisor.start(_config(), journal=path)
            fig.add("journal_recovery_ms_10k", (time.perf_counter() - began) * 1000)
            recovered = len(supervisor.recovered())
            supervisor.shutdown(grace_ms=1000)
            if recovered != 100:
                raise AssertionError(f"recovered {recovered} runs, not 100")


# --- the PostgreSQL journal: runs/s against SQLite's, and takeover after a kill against the TTL ------

TAKEOVER_TTL_S = 1.0
"""The lease TTL in the takeover figure."""
PG_KEYS = ("pg_journal_runs_per_s_ratio", "takeover_ttl_ratio")
"""Measured when a PostgreSQL server can be had (RUN_SUPERVISOR_BENCH_PG names one, or the server
binaries are there for tests/pg_support.py to start one on a unix socket); left out otherwise."""


def _pg_database() -> tuple[str | None, Callable[[], None]]:
    """A database URL for the PostgreSQL figures and how to let it go, or None (and a log line)."""
    given = os.environ.get("RUN_SUPERVISOR_BENCH_PG")
    if given:
        return given, lambda: None
    try:
        import psycopg

        sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))
        import pg_support  # type: ignore[import-not-found]
    except ImportError as exc:
        _log(f"[bench] no PostgreSQL figures: {exc}")
        return None, lambda: None
    try:
        server = pg_support._start()
    except (RuntimeError, OSError) as exc:
        _log(f"[bench] no PostgreSQL figures: {exc}")
        return None, lambda: None
    with psycopg.connect(server.url, autocommit=True) as db:
        db.execute("CREATE DATABASE bench")
    return str(server.url).replace("/postgres?", "/bench?", 1), server.stop


def pg_journal_throughput(fig: Figures, reps: Reps, database: str) -> None:
    """Short runs (as in ``journal_throughput``) on a PostgreSQL journal's shard over the same on an
    SQLite journal, in alternating rounds: one transaction per batch on each, the PostgreSQL one
    renewing the lease at its epoch first (the fencing check) and reached over a unix socket."""
    with tempfile.TemporaryDirectory(prefix="bench-pg-") as folder:
        sqlite = Supervisor.start(
            _config(), directories=[SHORT_RUNS_DIRECTORY], journal=os.path.join(folder, "runs.journal")
        )
        pg = Supervisor.start(
            _config(),
            directories=[SHORT_RUNS_DIRECTORY],
            journal=f"{database}&shard=bench-runs&lease_ttl=10&lease_wait=30",
        )
        _short_runs_in_turn(
            fig, reps, "pg_journal_runs_per_s_ratio", ("pg_journal", pg), ("sqlite_journal", sqlite)
        )


def _owner_process(url: str, *args: str) -> Any:
    import subprocess

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    script = os.path.join(root, "tests", "shard_owner.py")
    return subprocess.Popen(
        [sys.executable, script, url, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )


def _line_with(proc: Any, key: str) -> dict[str, Any]:
    """The first JSON line of ``proc`` that has ``key`` (bounded by the process: it prints one, or
    ends, within TIMEOUT_S; the lease wait in its URL bounds the standby)."""
    for raw in proc.stdout:
        line: dict[str, Any] = json.loads(raw)
        if key in line:
            return line
    raise AssertionError(f"the shard owner ended without a {key!r} line (status {proc.wait(TIMEOUT_S)})")


def takeover(fig: Figures, reps: Reps, database: str) -> None:
    """Two processes on one shard (tests/shard_owner.py), the owner running a tool, the standby
    waiting for the lease: the owner is SIGKILLed and the figure is the time from the kill until the
    standby has taken the lease and recovered (its ``started`` line), against the lease TTL. A kill
    lands anywhere in a renewal period (a third of the TTL), so it is between 2/3 and 1 TTL plus what
    the takeover and the recovery take."""
    import psycopg

    for r in range(reps.recovery_rounds):
        url = f"{database}&shard=bench-takeover-{r}&lease_ttl={TAKEOVER_TTL_S}&lease_wait=60"
        owner = _owner_process(url, "--work", "r1")
        standby = None
        try:
            _line_with(owner, "started")
            standby = _owner_process(url)
            waiting = "run-supervisor waiting bench-takeover-" + str(r)
            base = url.split("&shard=", 1)[0]
            with psycopg.connect(base, autocommit=True) as db:  # until the standby waits for the lease
                pause = threading.Event()
                deadline = time.monotonic() + TIMEOUT_S
                while not db.execute(
                    "SELECT 1 FROM pg_stat_activity WHERE application_name = %s", (waiting,)
                ).fetchone():
                    if time.monotonic() > deadline:
                        raise AssertionError("the standby never waited for the lease")
                    pause.wait(0.01)
            killed = time.time()
            owner.kill()
            line = _line_with(standby, "started")
            if line["started"] != 2 or [run["run_id"] for run in line["recovered"]] != ["r1"]:
                raise AssertionError(f"the standby did not take over truthfully: {line}")
            fig.add("takeover_s", float(line["t"]) - killed)
        finally:
            for proc in (owner, standby):
                if proc is not None:
                    if proc.poll() is None and proc.stdin is not None:
                        proc.stdin.close()
                    try:
                        proc.wait(TIMEOUT_S)
                    except Exception:
                        proc.kill()
                        proc.wait(TIMEOUT_S)
                    if proc.stdout is not None:
                        proc.stdout.close()
    for value in fig.rounds["takeover_s"]:
        fig.add("takeover_ttl_ratio", value / TAKEOVER_TTL_S)


def pg_figures(fig: Figures, reps: Reps) -> None:
    database, let_go = _pg_database()
    if database is None:
        return
    try:
        with section("PostgreSQL journal: short runs against the SQLite journal's"):
            pg_journal_throughput(fig, reps, database)
        with section(f"PostgreSQL journal: takeover after a SIGKILL, lease TTL {TAKEOVER_TTL_S:g} s"):
            takeover(fig, reps, database)
    finally:
        let_go()


# --- many live runs: memory, queries, shutdown -----------------------------------------------------


def live_runs(n: int, *, query_samples: int) -> dict[str, float]:
    """Open ``n`` gated runs over DIRECTORIES directories (each in its own session), then measure
    resident memory per run, the status queries (and, as a control, a pykka ask among as many
    threads), and a full shutdown of them all (until every thread it started has exited)."""
    directories = [_dir(d) for d in range(DIRECTORIES)]
    supervisor = Supervisor.start(_config(), directories=directories)
    control = Echo.start()
    gate = Gate("held")
    arrivals = Arrivals()

    def held(ctx: RunContext) -> None:
        arrivals.arrive()
        ctx.wait(gate)

    try:
        # Warm every code path once, then take the floor.
        supervisor.start_run(_noop_body, session="warm", directory=directories[0]).wait(TIMEOUT_S)
        _join_run_threads(supervisor)
        release_memory()
        before = rss_kib()
        for i in range(n):
            supervisor.start_run(
                held, session=f"s{i}", directory=directories[i % DIRECTORIES], run_id=f"live-{i}"
            )
        arrivals.wait(n)
        release_memory()
        after = rss_kib()
        queries: dict[str, Callable[[], object]] = {
            "status_query_us": supervisor.statistics,
            "run_query_us": lambda: supervisor.run(f"live-{n // 2}"),
            "pykka_ask_us": lambda: control.ask(1),
        }
        samples: dict[str, list[int]] = {key: [] for key in queries}
        for _ in range(5):  # interleaved rounds
            for key, call in queries.items():
                samples[key] += time_each(call, query_samples // 5)
        t0 = ns()
        outcome = supervisor.shutdown(grace_ms=int(TIMEOUT_S * 1000))
        shutdown_ms = (ns() - t0) / 1e6
        if outcome.abandoned_runs:
            raise RuntimeError(f"cooperative bodies were abandoned: {outcome.abandoned_runs[:5]}")
    finally:
        gate.open()
        control.stop()
        if not supervisor.closed:
            supervisor.shutdown(grace_ms=1000)
    return {
        "rss_kib_per_run": (after - before) / n,
        **{key: us(values) for key, values in samples.items()},
        "shutdown_ms": shutdown_ms,
    }


def bare_thread_memory(n: int) -> float:
    """Resident memory per plain thread parked on an event (what a host's thread per run costs
    while its run waits), in KiB."""
    release = threading.Event()
    arrivals = Arrivals()

    def park() -> None:
        arrivals.arrive()
        release.wait(TIMEOUT_S * 10)

    threads = [threading.Thread(target=park, name="bench-parked")]
    threads[0].start()  # warms the paths
    try:
        arrivals.wait(1)
        release_memory()
        before = rss_kib()
        more = [threading.Thread(target=park, name="bench-parked") for _ in range(n)]
        threads += more
        for thread in more:
            thread.start()
        arrivals.wait(n + 1)
        release_memory()
        after = rss_kib()
    finally:
        release.set()
        for thread in threads:
            thread.join(timeout=TIMEOUT_S)
    return (after - before) / n


def bare_thread_stop(n: int) -> float:
    """What a host's shutdown of ``n`` parked runs costs without the library: each thread waits on
    its own cancel event; set every one, then join every thread; milliseconds."""
    arrivals = Arrivals()
    cancels = [threading.Event() for _ in range(n)]

    def park(cancel: threading.Event) -> None:
        arrivals.arrive()
        cancel.wait(TIMEOUT_S)

    threads = [threading.Thread(target=park, args=(c,), name="bench-parked") for c in cancels]
    for thread in threads:
        thread.start()
    arrivals.wait(n)
    t0 = ns()
    for cancel in cancels:
        cancel.set()
    for thread in threads:
        thread.join(timeout=TIMEOUT_S)
    return (ns() - t0) / 1e6


def many_live(fig: Figures, reps: Reps) -> None:
    """LIVE runs against LIVE parked bare threads (memory), and against a host's own stop of LIVE
    parked threads (shutdown), rep by rep, after one unmeasured pass (whichever is measured first
    otherwise pays for the heap's growth). The order alternates rep by rep: whichever is measured
    second may reuse heap the first freed."""
    for rep in range(reps.live_1000 + 1):
        got: dict[str, float] = {}
        order = ["stop", "thread", "runs"] if rep % 2 == 0 else ["runs", "thread", "stop"]
        for which in order:
            if which == "stop":
                got["thread_stop_1000_ms"] = bare_thread_stop(LIVE)
            elif which == "thread":
                got["rss_kib_per_bare_thread"] = bare_thread_memory(LIVE)
            else:
                live = live_runs(LIVE, query_samples=2000)
                got.update(
                    rss_kib_per_run=live["rss_kib_per_run"],
                    shutdown_1000_ms=live["shutdown_ms"],
                    status_query_1000_us=live["status_query_us"],
                    run_query_1000_us=live["run_query_us"],
                    pykka_ask_1000_us=live["pykka_ask_us"],
                )
            release_memory()
        if rep == 0:
            continue  # the first pass grows the heap and the thread-stack cache: not a figure
        for key, value in got.items():
            fig.add(key, value)
    fig.ratio("rss_per_run_thread_ratio", "rss_kib_per_run", "rss_kib_per_bare_thread")
    fig.ratio("shutdown_1000_ratio", "shutdown_1000_ms", "thread_stop_1000_ms")


# --- uncooperative bodies --------------------------------------------------------------------------


def _overrun_key(n: int) -> str:
    return "uncooperative_overrun_ms" if n == 10 else f"uncooperative_overrun_{n}_ms"


def uncooperative_overrun(fig: Figures, deaf_bodies: int, shutdowns: int) -> None:
    """How far past its grace deadline ``shutdown(grace_ms=GRACE_MS)`` returns when ``deaf_bodies``
    bodies ignore cancellation (they wait on a plain event nobody sets); milliseconds per shutdown.
    After each, the bodies are released and their threads joined before the next."""
    key = _overrun_key(deaf_bodies)
    for _ in range(shutdowns):
        supervisor = Supervisor.start(_config(), directories=["/bench/u"])
        release = threading.Event()
        arrivals = Arrivals()

        def deaf(ctx: RunContext, release: threading.Event = release, arrivals: Arrivals = arrivals) -> None:
            arrivals.arrive()
            release.wait(TIMEOUT_S)  # ignores the run's cancellation

        try:
            for i in range(deaf_bodies):
                supervisor.start_run(deaf, session=f"s{i}", directory="/bench/u")
            arrivals.wait(deaf_bodies)
            t0 = ns()
            outcome = supervisor.shutdown(grace_ms=GRACE_MS)
            fig.add(key, (ns() - t0) / 1e6 - GRACE_MS)
            if len(outcome.abandoned_runs) != deaf_bodies:
                raise RuntimeError(
                    f"expected {deaf_bodies} abandoned runs, got {len(outcome.abandoned_runs)}"
                )
        finally:
            release.set()  # let the abandoned threads end, so the process can exit
            if not supervisor.closed:
                supervisor.shutdown(grace_ms=1000)
            for thread in supervisor.threads.alive():
                thread.join(timeout=TIMEOUT_S)
        release_memory()


# --- HTTP: a kept-alive request -------------------------------------------------------------------

BARE_APP = """
import sys
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route


async def report(request: Request) -> JSONResponse:
    body = await request.json()
    return JSONResponse({"result": "ok", "error": None, "code": None, "type": body["type"]})


app = Starlette(routes=[Route("/runs/{run_id}/reports", report, methods=["POST"])])
port = int(sys.argv[1])
uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False, lifespan="off")
"""
"""What a host would write instead of ``serve``: the same route shape (a POST of a small JSON report,
answered with a small JSON outcome) on a bare Starlette app that ``uvicorn.run`` serves."""


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _wait_listening(port: int, proc: Any) -> None:
    import socket

    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the bare app exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("the bare app did not listen")


def _keepalive_samples(conn: Any, path: str, headers: dict[str, str], n: int) -> list[int]:
    """``n`` sequential POSTs of a heartbeat report on one kept-alive connection (http.client, as a
    plain client would), each timed from the request to the whole answer read."""
    body = b'{"type": "heartbeat"}'
    samples = []
    for _ in range(n):
        t0 = ns()
        conn.request("POST", path, body=body, headers=headers)
        answer = conn.getresponse()
        data = answer.read()
        samples.append(ns() - t0)
        if answer.status != 200 or b'"ok"' not in data:
            raise RuntimeError(f"{path}: {answer.status} {data[:200]!r}")
        if answer.will_close:
            raise RuntimeError(f"{path}: the server closed the kept-alive connection")
    return samples


def http_keepalive(fig: Figures, reps: Reps) -> None:
    """A kept-alive request to ``run-supervisor serve`` (a heartbeat report of an external run, through
    the guard, the route and the run's driver) against a bare Starlette + uvicorn app's route of the same
    shape, each in its own process, one connection each; rounds alternate between the two. A request
    after the first on a connection is what an agent turn makes about 20 times in a row."""
    import http.client
    import subprocess

    serve = subprocess.Popen(
        [sys.executable, "-m", "run_supervisor.actors._cli", "serve", "--directory", "/w/a"],
        stdout=subprocess.PIPE,
        text=True,
    )
    bare_port = _free_port()
    bare = subprocess.Popen([sys.executable, "-c", BARE_APP, str(bare_port)])
    try:
        assert serve.stdout is not None
        ready = json.loads(serve.stdout.readline())
        auth = {"Authorization": f"Bearer {ready['token']}", "Content-Type": "application/json"}
        _wait_listening(bare_port, bare)
        ours = http.client.HTTPConnection("127.0.0.1", ready["port"], timeout=TIMEOUT_S)
        theirs = http.client.HTTPConnection("127.0.0.1", bare_port, timeout=TIMEOUT_S)
        start = json.dumps({"run_id": "hb", "session": "hb", "directory": "/w/a", "lease_ms": 3_600_000})
        ours.request("POST", "/runs", body=start, headers=auth)
        started = ours.getresponse()
        if started.status not in (200, 201):  # 201: created (200 before)
            raise RuntimeError(f"POST /runs: {started.status} {started.read()[:200]!r}")
        started.read()
        plain = {"Content-Type": "application/json"}
        _keepalive_samples(ours, "/runs/hb/reports", auth, 20)  # warm both up: the first request is
        _keepalive_samples(theirs, "/runs/hb/reports", plain, 20)  # the connection's, not a kept-alive one
        for _ in range(reps.http_rounds):
            fig.add(
                "http_keepalive_us",
                us(_keepalive_samples(ours, "/runs/hb/reports", auth, reps.http_per_round)),
            )
            fig.add(
                "http_bare_keepalive_us",
                us(_keepalive_samples(theirs, "/runs/hb/reports", plain, reps.http_per_round)),
            )
        fig.ratio("http_keepalive_ratio", "http_keepalive_us", "http_bare_keepalive_us")
        ours.request("POST", "/shutdown", body=b'{"grace_ms": 200}', headers=auth)
        ours.getresponse().read()
        ours.close()
        theirs.close()
        serve.wait(timeout=TIMEOUT_S)
    finally:
        for proc in (serve, bare):
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=TIMEOUT_S)


COLD_BARE = "import uvicorn, starlette"
"""What a host's own HTTP sidecar would import before it could listen: the floor of serve's cold start."""


def _cold_env(pycache: str) -> dict[str, str]:
    """A cold start's environment, what a user's interpreter has: bytecode written and read (this shell's
    ``PYTHONDONTWRITEBYTECODE`` dropped, the bytecode kept under ``pycache``, a fresh folder, so that no
    source tree is written to), no token."""
    drop = {"RUN_SUPERVISOR_TOKEN", "PYTHONDONTWRITEBYTECODE"}
    env = {key: value for key, value in os.environ.items() if key not in drop}
    return env | {"PYTHONPYCACHEPREFIX": pycache}


def _cold_serve_ms(command: list[str], env: dict[str, str]) -> float:
    """Spawn ``serve`` on a free port; milliseconds until its ready line is read (then it is stopped)."""
    import subprocess

    t0 = ns()
    proc = subprocess.Popen([*command, "serve", "--port", "0"], stdout=subprocess.PIPE, env=env)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        took = (ns() - t0) / 1e6
        if not line.startswith(b'{"ready"'):
            raise RuntimeError(f"serve: no ready line ({line[:200]!r})")
        return took
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=TIMEOUT_S)


def _cold_bare_ms(env: dict[str, str]) -> float:
    import subprocess

    t0 = ns()
    subprocess.run([sys.executable, "-c", COLD_BARE], check=True, timeout=TIMEOUT_S, env=env)
    return (ns() - t0) / 1e6


def cold_start(fig: Figures, reps: Reps) -> None:
    """Cold start to the ready line: ``run-supervisor serve`` (``python -m``, this interpreter) against a
    bare ``import uvicorn, starlette`` in a new interpreter, rounds alternating; with
    ``$RUN_SUPERVISOR_BIN`` (a one-file binary from scripts/build_binary.py) that binary's too. Both
    sides start as a user's interpreter does, with bytecode (``_cold_env``: even where the shell sets
    ``PYTHONDONTWRITEBYTECODE``), after one warm-up each that writes it and fills the disk cache."""
    binary = os.environ.get("RUN_SUPERVISOR_BIN")
    serve = [sys.executable, "-m", "run_supervisor.actors._cli"]
    with tempfile.TemporaryDirectory(prefix="bench-pycache-") as pycache:
        env = _cold_env(pycache)
        _cold_serve_ms(serve, env)  # the warm-ups: bytecode written, the disk cache filled
        _cold_bare_ms(env)
        for _ in range(reps.cold_rounds):
            fig.add("cold_start_ms", _cold_serve_ms(serve, env))
            fig.add("cold_start_bare_ms", _cold_bare_ms(env))
            if binary:
                fig.add("cold_start_binary_ms", _cold_serve_ms([binary], env))
    fig.ratio("cold_start_ratio", "cold_start_ms", "cold_start_bare_ms")


# --- the report ------------------------------------------------------------------------------------

TARGETS: dict[str, tuple[str, float]] = {
    "status_query_table_ratio": ("<=", 0.5),
    "cancel_latency_bare_ratio": ("<=", 2),
    "deferred_close_guard_ratio": ("<=", 2),
    "close_decision_growth": ("<=", 1.2),
    "runs_per_s_thread_ratio": (">=", 0.6),
    "runs_per_s_pool_ratio": (">=", 0.15),
    "rss_per_run_thread_ratio": ("<=", 1.5),
    "shutdown_1000_ratio": ("<=", 1.3),
    "uncooperative_overrun_ms": ("<=", 100),
    "uncooperative_overrun_1000_ms": ("<=", 30),
    "journal_runs_per_s_ratio": (">=", 0.8),
    "heartbeat_ns": ("<=", 1000),  # a stream may heartbeat per chunk: at most 1 ms per 1,000 chunks
    "http_keepalive_ratio": ("<=", 2),
    "cold_start_ratio": ("<=", 1.5),
    "async_loop_lag_ratio": ("<=", 2),
    "async_threads_per_run": ("<=", 0),
    "async_runs_per_s_ratio": (">=", 0.1),
}

KEYS = (
    "thread_queue_rtt_us",
    "pykka_ask_us",
    "status_query_us",
    "status_query_table_ratio",
    "deferred_close_guard_ratio",
    "close_decision_growth",
    "runs_per_s",
    "shutdown_1000_ratio",
    "uncooperative_overrun_ms",
    "status_query_busy_ratio",
    "cancel_latency_bare_ratio",
    "runs_per_s_thread_ratio",
    "runs_per_s_pool_ratio",
    "rss_per_run_thread_ratio",
    "uncooperative_overrun_100_ms",
    "uncooperative_overrun_1000_ms",
    "journal_runs_per_s_ratio",
    "journal_recovery_ms_10k",
    # stalls
    "heartbeat_ns",
    "heartbeat_ratio",
    # the wire hosts
    "http_keepalive_ratio",
    "cold_start_ratio",
    # asyncio hosts
    "async_loop_lag_ratio",
    "async_threads_per_run",
    "async_runs_per_s_ratio",
)

GROWTH_RUNS = (10, 100, LIVE)
"""Live runs in the growth table (over DIRECTORIES directories)."""
GROWTH_DIRECTORIES = (10, 100, 1000)
"""Directories LIVE runs are spread over in the close-decision-by-directories table."""


def passes(key: str, value: float) -> bool | None:
    if key not in TARGETS:
        return None
    op, limit = TARGETS[key]
    return value <= limit if op == "<=" else value >= limit


@dataclass
class Results:
    fig: Figures
    """Every figure, round by round."""
    growth: list[dict[str, float]]
    """One row per live-run count: close decision, queries, memory, shutdown."""
    by_directories: dict[int, float]
    """Close decision (us) with LIVE runs over this many directories."""
    load: tuple[float, float]
    """The 1-minute load average before and after."""


SECTIONS = (
    "rtt",
    "busy",
    "cancel",
    "deferred",
    "decisions",
    "throughput",
    "async",
    "heartbeat",
    "http",
    "cold",
    "journal",
    "recovery",
    "pg",
    "live",
    "overrun",
)
"""The benchmark's sections, in the order they run (``--only`` takes a comma-separated list of them)."""


def measure(reps: Reps, *, pin: bool, only: frozenset[str] | None = None) -> Results:
    """Everything (or the sections in ``only``), in order, each section cleaned up before the next."""
    load_before = os.getloadavg()[0]
    fig = Figures()
    where = "one CPU" if pin else "unpinned"

    def wanted(name: str) -> bool:
        return only is None or name in only

    if wanted("rtt"):
        with section(f"round trips, {where}"), maybe_pinned(pin):
            round_trips(fig, reps.rtt_rounds, reps.rtt_per_round)
    if wanted("busy"):
        with section("queries on a busy supervisor"):
            busy_queries(fig, reps.busy_rounds, reps.rtt_per_round)
    if wanted("cancel"):
        with section(f"cancel latency, {where}"), maybe_pinned(pin):
            cancel_latency(fig, reps)
    if wanted("deferred"):
        with section(f"deferred close latency, {where}"), maybe_pinned(pin):
            deferred_close_latency(fig, reps)
    shapes = [(10, DIRECTORIES), (LIVE, DIRECTORIES)]
    if reps.growth:
        shapes += [(100, DIRECTORIES)]
        shapes += [(LIVE, d) for d in GROWTH_DIRECTORIES if d != DIRECTORIES]
    decisions: dict[tuple[int, int], list[float]] = {}
    if wanted("decisions"):
        with section("close decisions (pure core)"):
            decisions = close_decisions(shapes, reps.close_decisions)
        for (runs, directories), chunks in decisions.items():
            if directories == DIRECTORIES:
                fig.extend(f"close_decision_{runs}_us", chunks)
        fig.ratio("close_decision_growth", f"close_decision_{LIVE}_us", "close_decision_10_us")
    # The sections measured the same way, in the order they run: (name, title, what measures it).
    plain: tuple[tuple[str, str | None, Callable[[Figures, Reps], None]], ...] = (
        ("throughput", "throughput", throughput),
        ("async", f"asyncio: {ASYNC_RUNS} async runs against a dict of Tasks", async_runs),
        ("heartbeat", "stalls: ctx.heartbeat() against a bare store", heartbeat_cost),
        ("http", "HTTP: a kept-alive request, serve against a bare Starlette + uvicorn app", http_keepalive),
        ("cold", "cold start: serve to its ready line, against a bare import of uvicorn and starlette",
         cold_start),
        ("journal", "run journal: short runs on and off", journal_throughput),
        ("recovery", "run journal: recovery of 10,000 finished and 100 unfinished runs", journal_recovery),
        ("pg", None, pg_figures),  # titles its own sections
        ("live", f"{LIVE:,} live runs", many_live),
    )
    for name, title, take in plain:
        if wanted(name):
            with nullcontext() if title is None else section(title):
                take(fig, reps)
    if wanted("overrun"):
        for deaf_bodies, shutdowns in reps.overrun:
            with section(f"{deaf_bodies:,} uncooperative bodies"):
                uncooperative_overrun(fig, deaf_bodies, shutdowns)
    growth: list[dict[str, float]] = []
    by_directories: dict[int, float] = {}
    if reps.growth and only is None:
        with section("growth"):
            for n in GROWTH_RUNS:
                if n == LIVE:
                    row = {
                        "rss_kib_per_run": fig.median("rss_kib_per_run"),
                        "status_query_us": fig.median("status_query_1000_us"),
                        "run_query_us": fig.median("run_query_1000_us"),
                        "pykka_ask_us": fig.median("pykka_ask_1000_us"),
                        "shutdown_ms": fig.median("shutdown_1000_ms"),
                    }
                else:
                    rows = [live_runs(n, query_samples=3000) for _ in range(3)]
                    row = {key: median([r[key] for r in rows]) for key in rows[0]}
                    release_memory()
                growth.append({"runs": n, "close_decision_us": median(decisions[(n, DIRECTORIES)]), **row})
        by_directories = {d: median(decisions[(LIVE, d)]) for d in GROWTH_DIRECTORIES}
    missing = [key for key in KEYS if key not in fig]
    if missing and only is None:
        raise AssertionError(f"keys not measured: {missing}")
    return Results(fig, growth, by_directories, (load_before, os.getloadavg()[0]))


WHAT = {
    "thread_queue_rtt_us": ("us", "bare thread, two queue.Queue: round trip"),
    "pykka_ask_us": ("us", "ActorRef.ask, small message, idle pykka actor"),
    "status_query_us": ("us", "Supervisor.statistics(), idle supervisor"),
    "status_query_table_ratio": ("x", "status query / a host's own run table read under its lock"),
    "deferred_close_guard_ratio": (
        "x",
        "blocking run's end -> lifecycle.completed / a host's own active-run guard's dispose",
    ),
    "close_decision_growth": ("x", f"decide a dispose (core): {LIVE:,} live runs / 10"),
    "runs_per_s": ("1/s", f"short runs, {SESSIONS} sessions in parallel, each run's thread released"),
    "shutdown_1000_ratio": ("x", f"shutdown of {LIVE:,} runs / a host's stop of {LIVE:,} parked threads"),
    "uncooperative_overrun_ms": ("ms", f"past a {GRACE_MS} ms grace, 10 deaf bodies"),
    "status_query_busy_ratio": ("x", "status query / pykka ask, supervisor kept busy"),
    "cancel_latency_bare_ratio": ("x", "cancel -> run.finished / bare thread woken twice"),
    "runs_per_s_thread_ratio": ("x", "runs per s / plain thread per run (start, join)"),
    "runs_per_s_pool_ratio": (
        "x",
        f"runs per s / a ThreadPoolExecutor({SESSIONS}) host with its own run table (submit, wait)",
    ),
    "rss_per_run_thread_ratio": ("x", "RSS per gated run / per parked bare thread"),
    "uncooperative_overrun_100_ms": ("ms", f"past a {GRACE_MS} ms grace, 100 deaf bodies"),
    "uncooperative_overrun_1000_ms": ("ms", f"past a {GRACE_MS} ms grace, 1,000 deaf bodies"),
    "journal_runs_per_s_ratio": ("x", "short runs per s with the run journal on / off"),
    "journal_recovery_ms_10k": ("ms", "start on a journal of 10,000 finished + 100 unfinished runs"),
    "heartbeat_ns": ("ns", "ctx.heartbeat() in a body whose stalls are measured"),
    "heartbeat_ratio": ("x", "ctx.heartbeat() / a host's own clock read stored in an attribute"),
    "http_keepalive_ratio": ("x", "kept-alive POST of a report: serve / a bare Starlette + uvicorn route"),
    "cold_start_ratio": ("x", "spawn to ready line: serve / a bare python -c 'import uvicorn, starlette'"),
    "async_loop_lag_ratio": ("x", "worst loop lateness, 200 async runs at once: ours / a dict of Tasks"),
    "async_threads_per_run": ("threads", "OS threads added per open async run"),
    "async_runs_per_s_ratio": ("x", "async runs per s: ours / asyncio.create_task with its own run table"),
    "pg_journal_runs_per_s_ratio": ("x", "short runs per s, PostgreSQL journal / SQLite journal"),
    "takeover_ttl_ratio": (
        "x",
        f"SIGKILLed owner -> standby took the lease and recovered, / TTL {TAKEOVER_TTL_S:g} s",
    ),
}

RAW_WHAT = {
    "run_query_us": "Supervisor.run(id), idle supervisor",
    "status_query_busy_us": "Supervisor.statistics(), supervisor kept busy by 2 threads of runs",
    "pykka_ask_busy_us": "pykka ask to an idle actor, at the same time",
    "table_read_us": "a host's own run table: its counts read under its lock",
    "cancel_latency_us": "cancel call -> run.finished",
    "cancel_bare_us": "bare thread: set flag + notify -> its report on a queue",
    "deferred_close_latency_us": "blocking run's end -> lifecycle.completed",
    "deferred_close_guard_us": "host's active-run guard: body's end -> its deferred dispose returned",
    "close_decision_10_us": f"decide a dispose, 10 live runs / {DIRECTORIES} dirs (core)",
    "close_decision_100_us": f"decide a dispose, 100 live runs / {DIRECTORIES} dirs (core)",
    f"close_decision_{LIVE}_us": f"decide a dispose, {LIVE:,} live runs / {DIRECTORIES} dirs (core)",
    "thread_runs_per_s": f"thread start+join; {SESSIONS} threads",
    "pool_runs_per_s": f"ThreadPoolExecutor({SESSIONS}) + its locked run table: submit+result",
    "rss_kib_per_run": f"KiB per gated run ({LIVE:,} open)",
    "rss_kib_per_bare_thread": f"KiB per parked plain thread ({LIVE:,})",
    "shutdown_1000_ms": f"Supervisor.shutdown(), {LIVE:,} gated runs, threads exited",
    "thread_stop_1000_ms": f"set {LIVE:,} parked threads' cancel events, join them (a host's shutdown)",
    "status_query_1000_us": f"Supervisor.statistics(), {LIVE:,} live runs",
    "run_query_1000_us": f"Supervisor.run(id), {LIVE:,} live runs",
    "pykka_ask_1000_us": f"control: pykka ask with the {LIVE:,} runs' threads parked",
    "journal_on_runs_per_s": f"short runs per s, run journal on; {SESSIONS} sessions",
    "journal_off_runs_per_s": f"short runs per s, no journal; {SESSIONS} sessions",
    "heartbeat_bare_ns": "a clock read stored in an attribute (what a host would do itself)",
    "http_keepalive_us": "serve: POST /runs/{id}/reports heartbeat, kept-alive connection (http.client)",
    "http_bare_keepalive_us": "bare Starlette + uvicorn: the same POST on its kept-alive connection",
    "cold_start_ms": "run-supervisor serve (python -m): spawn -> its ready line read",
    "cold_start_bare_ms": "python -c 'import uvicorn, starlette': spawn -> exit",
    "cold_start_binary_ms": "the one-file binary ($RUN_SUPERVISOR_BIN) serve: spawn -> its ready line read",
    "pg_journal_runs_per_s": f"short runs per s, PostgreSQL journal (unix socket); {SESSIONS} sessions",
    "sqlite_journal_runs_per_s": f"short runs per s, SQLite journal, the same rounds; {SESSIONS} sessions",
    "takeover_s": "seconds from the owner's SIGKILL to the standby's recovered start",
}


def _fmt(value: float) -> str:
    if value >= 1000:
        return f"{value:,.0f}"
    if value >= 100:
        return f"{value:.1f}"
    if value >= 0.1 or value == 0:
        return f"{value:.2f}"
    return f"{value:.3f}"


def machine() -> str:
    return (
        f"Python {platform.python_version()}, pykka {metadata.version('pykka')}, "
        f"{os.cpu_count()} CPU(s), {platform.system()} {platform.machine()}"
    )


def render(results: Results, mode: str) -> str:
    fig = results.fig
    lines = [
        f"run-supervisor benchmark ({mode}): {machine()}; load average "
        f"{results.load[0]:.2f} before, {results.load[1]:.2f} after",
        "",
        "| key | median | p10-p90 | unit | target | | what |",
        "|---|---:|---:|---|---|---|---|",
    ]
    for key in tuple(k for k in KEYS + PG_KEYS if k in fig):
        unit, what = WHAT[key]
        value = fig.median(key)
        low, high = fig.spread(key)
        verdict = passes(key, value)
        target = f"{TARGETS[key][0]} {TARGETS[key][1]:g}" if key in TARGETS else ""
        mark = "" if verdict is None else ("ok" if verdict else "MISS")
        lines.append(
            f"| `{key}` | {_fmt(value)} | {_fmt(low)}-{_fmt(high)} | {unit} | {target} | {mark} | {what} |"
        )
    lines += ["", "| figure behind the ratios | median | p10-p90 | what |", "|---|---:|---:|---|"]
    for key, what in RAW_WHAT.items():
        if key in fig:
            low, high = fig.spread(key)
            lines.append(f"| `{key}` | {_fmt(fig.median(key))} | {_fmt(low)}-{_fmt(high)} | {what} |")
    if results.growth:
        lines += [
            "",
            f"Growth with live runs ({DIRECTORIES} directories, one session per run):",
            "",
            "| live runs | close decision, core (us) | statistics() (us) | run(id) (us) "
            "| control: pykka ask (us) | RSS per run (KiB) | shutdown (ms) |",
            "|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for row in results.growth:
            lines.append(
                f"| {row['runs']:,.0f} | {_fmt(row['close_decision_us'])} | {_fmt(row['status_query_us'])} "
                f"| {_fmt(row['run_query_us'])} | {_fmt(row['pykka_ask_us'])} "
                f"| {_fmt(row['rss_kib_per_run'])} | {_fmt(row['shutdown_ms'])} |"
            )
        lines += [
            "",
            f"Shutdown past a {GRACE_MS} ms grace with deaf bodies (ms):",
            "",
            "| deaf bodies | median | p10-p90 | worst |",
            "|---:|---:|---:|---:|",
        ]
        for n in (10, 100, 1000):
            key = _overrun_key(n)
            low, high = fig.spread(key)
            worst = max(fig.rounds[key])
            lines.append(f"| {n:,} | {_fmt(fig.median(key))} | {_fmt(low)}-{_fmt(high)} | {_fmt(worst)} |")
    if results.by_directories:
        lines += [
            "",
            f"Close decision (core) with {LIVE:,} live runs over more or fewer directories:",
            "",
            "| directories | live runs in the closed directory | close decision (us) |",
            "|---:|---:|---:|",
        ]
        for directories, value in results.by_directories.items():
            lines.append(f"| {directories:,} | {LIVE // directories:,} | {_fmt(value)} |")
    return "\n".join(lines)


def as_json(results: Results) -> dict[str, Any]:
    """The issue's keys (medians over the rounds), and under ``spread`` each key's [p10, p90]."""
    fig = results.fig
    keys = tuple(k for k in KEYS + PG_KEYS if k in fig)
    out: dict[str, Any] = {key: round(fig.median(key), 4) for key in keys}
    out["spread"] = {key: [round(v, 4) for v in fig.spread(key)] for key in keys}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object: medians and spreads")
    parser.add_argument("--quick", action="store_true", help="fewer repetitions (about a minute)")
    parser.add_argument("--pin", action="store_true", help="take the latencies pinned to one CPU")
    parser.add_argument("--pg-only", action="store_true", help="only the PostgreSQL journal's figures")
    parser.add_argument(
        "--only",
        metavar="SECTIONS",
        help=f"only these sections, comma-separated ({', '.join(SECTIONS)}): their keys alone are reported",
    )
    args = parser.parse_args(argv)
    only = (
        None
        if args.only is None
        else frozenset(name.strip() for name in args.only.split(",") if name.strip())
    )
    if only is not None and (not only or only - set(SECTIONS)):
        parser.error(f"--only takes sections of {', '.join(SECTIONS)}; got {args.only!r}")
    if not sys.platform.startswith("linux"):
        print("bench.py reads /proc/self/status for memory: Linux only", file=sys.stderr)
        return 2
    reps = QUICK if args.quick else FULL
    if args.json:
        reps = replace(reps, growth=False)
    started = time.monotonic()
    if args.pg_only:
        fig = Figures()
        pg_figures(fig, reps)
        raw = ("pg_journal_runs_per_s", "sqlite_journal_runs_per_s", "takeover_s")
        keys = [k for k in (*PG_KEYS, *raw) if k in fig]
        out: dict[str, Any] = {key: round(fig.median(key), 4) for key in keys}
        out["spread"] = {key: [round(v, 4) for v in fig.spread(key)] for key in keys}
        print(json.dumps(out))
        return 0 if keys else 1
    results = measure(reps, pin=args.pin, only=only)
    _log(
        f"[bench] total: {time.monotonic() - started:.1f} s ({machine()}; load average "
        f"{results.load[0]:.2f} -> {results.load[1]:.2f})"
    )
    if args.json:
        print(json.dumps(as_json(results)))
    else:
        print(render(results, ("quick" if args.quick else "full") + (", pinned" if args.pin else "")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
