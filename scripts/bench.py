#!/usr/bin/env python
"""Benchmark run-supervisor against bare threads and bare pykka actors, in one process and one run.

Not a timed test: it measures, repeats each figure to quote a median, and prints a table (or, with
``--json``, one JSON object with exactly the keys of issue #4). Ratios are computed from figures
taken in this same run; the baselines are measured interleaved with the supervisor where they can
be, so drift in the machine's speed hits both sides alike.

    python scripts/bench.py            # full run: the table, targets, and growth with live runs
    python scripts/bench.py --json     # the figures only, as one JSON object
    python scripts/bench.py --quick    # fewer repetitions: about a minute on 2 cores (CI smoke)

Latencies are taken with the threads involved pinned to one CPU (see ``pinned``); throughput,
memory and shutdown are taken unpinned. Each section cleans up after itself (every actor stopped,
every thread joined) before the next one starts, and checks that it did. Linux only: memory is read
from ``/proc/self/status`` and pinning uses ``os.sched_setaffinity``. Results: docs/performance.md.
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import gc
import json
import os
import platform
import queue
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from importlib import metadata
from typing import Any

import pykka

from run_supervisor.actors import Gate, RunContext, Subscription, Supervisor, SupervisorConfig
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
TIMEOUT_S = 30.0
"""Bound on every wait of the benchmark itself; a wait that hits it is a failure, not a figure."""


# --- settings --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Reps:
    """How many times each figure is taken (medians are over these samples)."""

    rtt_rounds: int  # interleaved rounds of (thread queue, pykka ask, status query)
    rtt_per_round: int  # round trips per kind per round
    cancel: int  # runs cancelled, one sample each
    deferred: int  # deferred closes, one sample each
    close_decisions: int  # decisions per shape (pure core)
    runs_rounds: int  # interleaved rounds of (bare cycles, supervisor runs)
    runs_per_session: int  # runs per session (8 sessions) or cycles per thread (8 threads), per round
    live_1000: int  # times 1,000 runs (and 1,000 bare actors) are opened, measured and stopped
    overrun: int  # shutdowns with 10 bodies that ignore cancellation
    growth: bool  # measure 10 and 100 live runs too (table mode only)


FULL = Reps(
    rtt_rounds=10,
    rtt_per_round=1000,
    cancel=300,
    deferred=300,
    close_decisions=3000,
    runs_rounds=11,
    runs_per_session=60,
    live_1000=9,
    overrun=7,
    growth=True,
)
QUICK = Reps(
    rtt_rounds=5,
    rtt_per_round=400,
    cancel=60,
    deferred=60,
    close_decisions=1000,
    runs_rounds=5,
    runs_per_session=30,
    live_1000=3,
    overrun=5,
    growth=False,
)

SESSIONS = 8
"""Sessions (and bare-cycle threads) working in parallel for the throughput figures."""
LIVE = 1000
"""Live runs (and bare actors) for the memory and shutdown figures."""
DIRECTORIES = 100
"""Directories the live runs are spread over."""
UNCOOPERATIVE = 10
"""Bodies that ignore cancellation in the overrun figure."""
GRACE_MS = 200
"""The shutdown grace deadline in the overrun figure."""


def _config() -> SupervisorConfig:
    # Nothing the benchmark starts may outlive its section: never rely on the exit hook.
    return SupervisorConfig(shutdown_at_exit=False)


# --- tools -----------------------------------------------------------------------------------------


def median(samples: list[float]) -> float:
    if not samples:
        raise ValueError("no samples")
    return float(statistics.median(samples))


def us(samples_ns: list[int]) -> float:
    return median([s / 1000.0 for s in samples_ns])


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


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


class Bare(pykka.ThreadingActor):
    """A bare actor; records its thread so a stop can be followed by a join."""

    use_daemon_thread = True

    def __init__(
        self, threads: list[threading.Thread] | None = None, arrivals: Arrivals | None = None
    ) -> None:
        super().__init__()
        self._threads = threads
        self._arrivals = arrivals

    def on_start(self) -> None:
        if self._threads is not None:
            self._threads.append(threading.current_thread())
        if self._arrivals is not None:
            self._arrivals.arrive()


class Parked(pykka.ThreadingActor):
    """A bare actor with one thread parked on an event: the memory baseline of a live run."""

    use_daemon_thread = True

    def __init__(self, release: threading.Event, arrivals: Arrivals, parked: list[threading.Thread]) -> None:
        super().__init__()
        self._release = release
        self._arrivals = arrivals
        self.thread = threading.Thread(target=self._park, daemon=True)
        parked.append(self.thread)

    def _park(self) -> None:
        self._arrivals.arrive()
        self._release.wait(TIMEOUT_S * 10)

    def on_start(self) -> None:
        self.thread.start()


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


# --- round trips -----------------------------------------------------------------------------------


def round_trips(rounds: int, per_round: int) -> dict[str, float]:
    """Thread queue, pykka ask and a supervisor status query, interleaved round by round."""
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

        kinds: dict[str, Callable[[], object]] = {
            "thread_queue_rtt_us": queue_rtt,
            "pykka_ask_us": lambda: actor.ask(1),
            "status_query_us": supervisor.statistics,
        }
        samples: dict[str, list[int]] = {key: [] for key in kinds}
        for call in kinds.values():  # warm up
            time_each(call, 200)
        for _ in range(rounds):
            for key, call in kinds.items():
                samples[key] += time_each(call, per_round)
        # The other public read: one run's snapshot.
        run_query = time_each(lambda: supervisor.run("q-1"), rounds * per_round)
    figures = {key: us(values) for key, values in samples.items()}
    figures["run_query_us"] = us(run_query)
    return figures


# --- cancel and deferred close latency -------------------------------------------------------------


def cancel_latency(reps: Reps) -> float:
    """From the cancel call to the run's ``run.finished``, for a body waiting at a step boundary;
    microseconds, median."""
    supervisor = Supervisor.start(_config(), directories=["/bench/c"])
    subscription = supervisor.subscribe()
    gate = Gate("never")  # never opened: only the cancel ends these bodies
    samples: list[int] = []
    try:
        for i in range(reps.cancel + 5):
            arrivals = Arrivals()

            def body(ctx: RunContext, arrivals: Arrivals = arrivals) -> None:
                with ctx.step("model"):
                    arrivals.arrive()
                    ctx.wait(gate)

            run = supervisor.start_run(body, session="s", directory="/bench/c", run_id=f"c{i}")
            next_event(subscription, StepStarted, run_id=run.id)
            arrivals.wait(1)
            time.sleep(0.002)  # let the body block in its wait (the slow path we mean to measure)
            t0 = ns()
            run.cancel()
            next_event(subscription, RunFinished, run_id=run.id)
            if i >= 5:  # the first few warm up
                samples.append(ns() - t0)
    finally:
        supervisor.shutdown(grace_ms=1000)
    return us(samples)


def deferred_close_latency(reps: Reps) -> float:
    """From the end of the run that blocks a maintenance dispose to the action's
    ``lifecycle.completed``; microseconds, median."""
    supervisor = Supervisor.start(_config(), directories=["/bench/d"])
    subscription = supervisor.subscribe()
    samples: list[int] = []
    try:
        for i in range(reps.deferred + 5):
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
            if i >= 5:
                samples.append(done - ended[0])
    finally:
        supervisor.shutdown(grace_ms=1000)
    return us(samples)


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


def close_decisions(shapes: list[tuple[int, int]], per_shape: int) -> dict[tuple[int, int], float]:
    """Time to decide a maintenance dispose of one directory that holds live runs, for each shape
    (live runs, directories); microseconds, median. Each decision is fresh: a state is built, each
    of its directories that hold runs is closed once (every close meets the same kind of state),
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
    return {shape: us(values) for shape, values in samples.items()}


# --- throughput ------------------------------------------------------------------------------------


def _parallel(work: Callable[[int], None], n: int) -> float:
    """Run ``work(i)`` on n threads at once; seconds from the common start to the last end."""
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
    elapsed = (ns() - t0) / 1e9
    if errors:
        raise errors[0]
    return elapsed


def _noop() -> None:
    pass


def throughput(reps: Reps) -> dict[str, float]:
    """Short runs (one model step, no work) through the supervisor, start to ``run.finished``, in
    SESSIONS sessions at once; and bare cycles (start an actor, start and join a thread, stop the
    actor) on as many threads. Rounds interleave the two; rates are medians over rounds."""

    def bare_cycles(_: int) -> None:
        for _ in range(reps.runs_per_session):
            ref = Bare.start()
            thread = threading.Thread(target=_noop)
            thread.start()
            thread.join()
            ref.stop()

    def short_body(ctx: RunContext) -> None:
        with ctx.step("model"):
            pass

    supervisor = Supervisor.start(_config(), directories=["/bench/t"])

    def supervised_runs(i: int) -> None:
        for _ in range(reps.runs_per_session):
            run = supervisor.start_run(short_body, session=f"s{i}", directory="/bench/t")
            run.wait(timeout=TIMEOUT_S)

    total = SESSIONS * reps.runs_per_session
    bare: list[float] = []
    runs: list[float] = []
    try:
        _parallel(bare_cycles, SESSIONS)  # warm up both
        _parallel(supervised_runs, SESSIONS)
        for _ in range(reps.runs_rounds):
            bare.append(total / _parallel(bare_cycles, SESSIONS))
            runs.append(total / _parallel(supervised_runs, SESSIONS))
    finally:
        supervisor.shutdown(grace_ms=1000)
    return {"runs_per_s": median(runs), "bare_cycles_per_s": median(bare)}


# --- many live runs: memory, queries, shutdown -----------------------------------------------------


def live_runs(n: int, *, query_samples: int) -> dict[str, float]:
    """Open ``n`` gated runs over DIRECTORIES directories (each in its own session), then measure
    resident memory per run, the status queries (and, as a control, a pykka ask among as many
    threads), and a full shutdown of them all."""
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
        release_memory()
        before = rss_kib()
        for i in range(n):
            supervisor.start_run(
                held, session=f"s{i}", directory=directories[i % DIRECTORIES], run_id=f"live-{i}"
            )
        arrivals.wait(n)
        release_memory()
        after = rss_kib()
        supervisor_tid = next(
            t.native_id or 0 for t in supervisor.threads.alive() if t.name.startswith("SessionSupervisor")
        )
        control_tid = int(control.ask(WHO, block=True))
        queries: dict[str, Callable[[], object]] = {
            "status_query_us": supervisor.statistics,
            "run_query_us": lambda: supervisor.run(f"live-{n // 2}"),
            "pykka_ask_us": lambda: control.ask(1),
        }
        samples: dict[str, list[int]] = {key: [] for key in queries}
        with pinned(0, supervisor_tid, control_tid):
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


def bare_actor_memory(n: int) -> float:
    """Resident memory per bare pykka actor with one parked thread, in KiB."""
    release = threading.Event()
    arrivals = Arrivals()
    parked: list[threading.Thread] = []
    refs: list[pykka.ActorRef[Parked]] = [Parked.start(release, arrivals, parked)]  # warms the paths
    try:
        arrivals.wait(1)
        release_memory()
        before = rss_kib()
        refs += [Parked.start(release, arrivals, parked) for _ in range(n)]
        arrivals.wait(n + 1)
        release_memory()
        after = rss_kib()
    finally:
        release.set()
        _stop_all(refs)
        for thread in parked:
            thread.join(timeout=TIMEOUT_S)
    return (after - before) / n


def _stop_all(refs: list[pykka.ActorRef[Any]]) -> None:
    for future in [ref.stop(block=False) for ref in refs]:
        future.get(timeout=TIMEOUT_S)


def bare_actor_stop(n: int) -> float:
    """Stop ``n`` bare pykka actors in parallel (ask all to stop, then wait for all, then join
    their threads, as a supervisor shutdown does); milliseconds."""
    threads: list[threading.Thread] = []
    arrivals = Arrivals()
    refs = [Bare.start(threads, arrivals) for _ in range(n)]
    arrivals.wait(n)
    t0 = ns()
    _stop_all(refs)
    for thread in threads:
        thread.join(timeout=TIMEOUT_S)
    return (ns() - t0) / 1e6


def many_live(reps: Reps) -> dict[str, float]:
    """LIVE runs against LIVE bare actors: memory per unit and shutdown, interleaved rep by rep,
    after one unmeasured pass (whichever is measured first otherwise pays for the heap's growth).
    The order alternates rep by rep: whichever is measured second may reuse heap the first freed."""
    run_memory: list[float] = []
    bare_memory: list[float] = []
    shutdowns: list[float] = []
    stops: list[float] = []
    statuses: list[float] = []
    run_queries: list[float] = []
    asks: list[float] = []
    for rep in range(reps.live_1000 + 1):
        live: dict[str, float] = {}
        bare_kib = 0.0
        for which in ("bare", "runs") if rep % 2 == 0 else ("runs", "bare"):
            if which == "bare":
                bare_kib = bare_actor_memory(LIVE)
            else:
                live = live_runs(LIVE, query_samples=2000)
            release_memory()
        stop_ms = bare_actor_stop(LIVE)
        release_memory()
        if rep == 0:
            continue  # the first pass grows the heap and the thread-stack cache: not a figure
        bare_memory.append(bare_kib)
        stops.append(stop_ms)
        run_memory.append(live["rss_kib_per_run"])
        shutdowns.append(live["shutdown_ms"])
        statuses.append(live["status_query_us"])
        run_queries.append(live["run_query_us"])
        asks.append(live["pykka_ask_us"])
    return {
        "rss_kib_per_run": median(run_memory),
        "rss_kib_per_bare_actor": median(bare_memory),
        "shutdown_1000_ms": median(shutdowns),
        "bare_stop_1000_ms": median(stops),
        "status_query_1000_us": median(statuses),
        "run_query_1000_us": median(run_queries),
        "pykka_ask_1000_us": median(asks),
    }


# --- uncooperative bodies --------------------------------------------------------------------------


def uncooperative_overrun(reps: Reps) -> dict[str, float]:
    """How far past its grace deadline ``shutdown(grace_ms=GRACE_MS)`` returns when UNCOOPERATIVE
    bodies ignore cancellation (they wait on a plain event nobody sets); milliseconds, median and
    worst (the worst shows an overrun that only some shutdowns suffer)."""
    overruns: list[float] = []
    for _ in range(reps.overrun):
        supervisor = Supervisor.start(_config(), directories=["/bench/u"])
        stuck: list[threading.Event] = []
        arrivals = Arrivals()

        def deaf(
            ctx: RunContext, stuck: list[threading.Event] = stuck, arrivals: Arrivals = arrivals
        ) -> None:
            event = threading.Event()
            stuck.append(event)
            arrivals.arrive()
            event.wait(TIMEOUT_S)  # ignores the run's cancellation

        try:
            for i in range(UNCOOPERATIVE):
                supervisor.start_run(deaf, session=f"s{i}", directory="/bench/u")
            arrivals.wait(UNCOOPERATIVE)
            t0 = ns()
            outcome = supervisor.shutdown(grace_ms=GRACE_MS)
            overruns.append((ns() - t0) / 1e6 - GRACE_MS)
            if len(outcome.abandoned_runs) != UNCOOPERATIVE:
                raise RuntimeError(f"expected {UNCOOPERATIVE} abandoned runs, got {outcome.abandoned_runs}")
        finally:
            for event in stuck:  # let the abandoned threads end, so the process can exit
                event.set()
            if not supervisor.closed:
                supervisor.shutdown(grace_ms=1000)
    return {
        "uncooperative_overrun_ms": median(overruns),
        "uncooperative_overrun_max_ms": max(overruns),
        "uncooperative_shutdowns": len(overruns),
        "uncooperative_shutdowns_over_100ms": sum(1 for o in overruns if o > 100),
    }


# --- the report ------------------------------------------------------------------------------------

TARGETS: dict[str, tuple[str, float]] = {
    "status_query_ratio": ("<=", 1.5),
    "cancel_latency_ratio": ("<=", 40),
    "deferred_close_latency_ratio": ("<=", 40),
    "close_decision_growth": ("<=", 2),
    "runs_per_s_ratio": (">=", 0.5),
    "rss_per_run_ratio": ("<=", 2.5),
    "shutdown_1000_ratio": ("<=", 3),
    "uncooperative_overrun_ms": ("<=", 100),
}

KEYS = (
    "thread_queue_rtt_us",
    "pykka_ask_us",
    "status_query_us",
    "status_query_ratio",
    "cancel_latency_ratio",
    "deferred_close_latency_ratio",
    "close_decision_growth",
    "runs_per_s",
    "runs_per_s_ratio",
    "rss_per_run_ratio",
    "shutdown_1000_ratio",
    "uncooperative_overrun_ms",
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
    keys: dict[str, float]
    """Exactly the issue's keys."""
    raw: dict[str, float]
    """The figures behind the ratios."""
    growth: list[dict[str, float]]
    """One row per live-run count: close decision, queries, memory, shutdown."""
    by_directories: dict[int, float]
    """Close decision (us) with LIVE runs over this many directories."""


def measure(reps: Reps) -> Results:
    """Everything, in order, each section cleaned up before the next."""
    raw: dict[str, float] = {}
    with section("round trips, one CPU"), pinned(0):
        raw.update(round_trips(reps.rtt_rounds, reps.rtt_per_round))
    with section("round trips, unpinned"):
        free = round_trips(max(2, reps.rtt_rounds // 2), reps.rtt_per_round)
        for key in ("pykka_ask_us", "status_query_us"):
            raw[key.replace("_us", "_unpinned_us")] = free[key]
    with section("cancel latency, one CPU"), pinned(0):
        raw["cancel_latency_us"] = cancel_latency(reps)
    with section("deferred close latency, one CPU"), pinned(0):
        raw["deferred_close_latency_us"] = deferred_close_latency(reps)
    shapes = [(10, DIRECTORIES), (LIVE, DIRECTORIES)]
    if reps.growth:
        shapes += [(100, DIRECTORIES)]
        shapes += [(LIVE, d) for d in GROWTH_DIRECTORIES if d != DIRECTORIES]
    with section("close decisions (pure core)"):
        decisions = close_decisions(shapes, reps.close_decisions)
    for (runs, directories), value in decisions.items():
        if directories == DIRECTORIES:
            raw[f"close_decision_{runs}_us"] = value
    with section("throughput"):
        raw.update(throughput(reps))
    with section(f"{LIVE:,} live runs"):
        raw.update(many_live(reps))
    with section("uncooperative bodies"):
        raw.update(uncooperative_overrun(reps))
    growth: list[dict[str, float]] = []
    by_directories: dict[int, float] = {}
    if reps.growth:
        with section("growth"):
            for n in GROWTH_RUNS:
                if n == LIVE:
                    row = {
                        "rss_kib_per_run": raw["rss_kib_per_run"],
                        "status_query_us": raw["status_query_1000_us"],
                        "run_query_us": raw["run_query_1000_us"],
                        "pykka_ask_us": raw["pykka_ask_1000_us"],
                        "shutdown_ms": raw["shutdown_1000_ms"],
                    }
                else:
                    row = live_runs(n, query_samples=3000)
                    release_memory()
                growth.append({"runs": n, "close_decision_us": decisions[(n, DIRECTORIES)], **row})
        by_directories = {d: decisions[(LIVE, d)] for d in GROWTH_DIRECTORIES}

    ask = raw["pykka_ask_us"]
    keys = {
        "thread_queue_rtt_us": raw["thread_queue_rtt_us"],
        "pykka_ask_us": ask,
        "status_query_us": raw["status_query_us"],
        "status_query_ratio": raw["status_query_us"] / ask,
        "cancel_latency_ratio": raw["cancel_latency_us"] / ask,
        "deferred_close_latency_ratio": raw["deferred_close_latency_us"] / ask,
        "close_decision_growth": raw[f"close_decision_{LIVE}_us"] / raw["close_decision_10_us"],
        "runs_per_s": raw["runs_per_s"],
        "runs_per_s_ratio": raw["runs_per_s"] / raw["bare_cycles_per_s"],
        "rss_per_run_ratio": raw["rss_kib_per_run"] / raw["rss_kib_per_bare_actor"],
        "shutdown_1000_ratio": raw["shutdown_1000_ms"] / raw["bare_stop_1000_ms"],
        "uncooperative_overrun_ms": raw["uncooperative_overrun_ms"],
    }
    if tuple(keys) != KEYS:
        raise AssertionError("the JSON keys drifted from the issue's list")
    return Results(keys, raw, growth, by_directories)


WHAT = {
    "thread_queue_rtt_us": ("us", "bare thread, two queue.Queue: round trip"),
    "pykka_ask_us": ("us", "ActorRef.ask, small message, idle pykka actor"),
    "status_query_us": ("us", "Supervisor.statistics(), idle supervisor"),
    "status_query_ratio": ("x", "status query / pykka ask"),
    "cancel_latency_ratio": ("x", "cancel call -> run.finished, / pykka ask"),
    "deferred_close_latency_ratio": ("x", "blocking run's end -> lifecycle.completed, / pykka ask"),
    "close_decision_growth": ("x", f"decide a dispose (core): {LIVE:,} live runs / 10"),
    "runs_per_s": ("1/s", f"short runs, {SESSIONS} sessions in parallel"),
    "runs_per_s_ratio": ("x", "runs per s / bare cycles per s"),
    "rss_per_run_ratio": ("x", "RSS per gated run / per actor with a parked thread"),
    "shutdown_1000_ratio": ("x", f"shutdown of {LIVE:,} runs / parallel stop of {LIVE:,} actors"),
    "uncooperative_overrun_ms": ("ms", f"past a {GRACE_MS} ms grace, {UNCOOPERATIVE} deaf bodies"),
}

RAW_WHAT = {
    "run_query_us": "Supervisor.run(id), idle supervisor",
    "pykka_ask_unpinned_us": "pykka ask, threads free to run on either CPU",
    "status_query_unpinned_us": "Supervisor.statistics(), threads free to run on either CPU",
    "cancel_latency_us": "cancel call -> run.finished",
    "deferred_close_latency_us": "blocking run's end -> lifecycle.completed",
    "close_decision_10_us": f"decide a dispose, 10 live runs / {DIRECTORIES} dirs (core)",
    "close_decision_100_us": f"decide a dispose, 100 live runs / {DIRECTORIES} dirs (core)",
    f"close_decision_{LIVE}_us": f"decide a dispose, {LIVE:,} live runs / {DIRECTORIES} dirs (core)",
    "bare_cycles_per_s": f"actor start, thread start+join, actor stop; {SESSIONS} threads",
    "rss_kib_per_run": f"KiB per gated run ({LIVE:,} open)",
    "rss_kib_per_bare_actor": f"KiB per actor with a parked thread ({LIVE:,})",
    "shutdown_1000_ms": f"Supervisor.shutdown(), {LIVE:,} gated runs",
    "bare_stop_1000_ms": f"stop {LIVE:,} bare actors in parallel, join threads",
    "status_query_1000_us": f"Supervisor.statistics(), {LIVE:,} live runs",
    "run_query_1000_us": f"Supervisor.run(id), {LIVE:,} live runs",
    "pykka_ask_1000_us": f"control: pykka ask with the {LIVE:,} runs' threads parked",
    "uncooperative_overrun_max_ms": "worst overrun of those shutdowns",
    "uncooperative_shutdowns": "shutdowns with deaf bodies measured",
    "uncooperative_shutdowns_over_100ms": "of which overran by more than 100 ms",
}


def _fmt(value: float) -> str:
    if value >= 1000:
        return f"{value:,.0f}"
    if value >= 100:
        return f"{value:.1f}"
    return f"{value:.2f}"


def machine() -> str:
    return (
        f"Python {platform.python_version()}, pykka {metadata.version('pykka')}, "
        f"{os.cpu_count()} CPU(s), {platform.system()} {platform.machine()}"
    )


def render(results: Results, mode: str) -> str:
    keys, raw = results.keys, results.raw
    lines = [
        f"run-supervisor benchmark ({mode}): {machine()}",
        "",
        "| key | median | unit | target | | what |",
        "|---|---:|---|---|---|---|",
    ]
    for key in KEYS:
        unit, what = WHAT[key]
        verdict = passes(key, keys[key])
        target = f"{TARGETS[key][0]} {TARGETS[key][1]:g}" if key in TARGETS else ""
        mark = "" if verdict is None else ("ok" if verdict else "MISS")
        lines.append(f"| `{key}` | {_fmt(keys[key])} | {unit} | {target} | {mark} | {what} |")
    lines += ["", "| figure behind the ratios | median | what |", "|---|---:|---|"]
    for key, what in RAW_WHAT.items():
        if key in raw:
            shown = f"{raw[key]:.0f}" if key.startswith("uncooperative_shutdowns") else _fmt(raw[key])
            lines.append(f"| `{key}` | {shown} | {what} |")
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object with the medians")
    parser.add_argument("--quick", action="store_true", help="fewer repetitions (about a minute)")
    args = parser.parse_args(argv)
    if not sys.platform.startswith("linux"):
        print("bench.py reads /proc/self/status for memory: Linux only", file=sys.stderr)
        return 2
    reps = QUICK if args.quick else FULL
    if args.json:
        reps = replace(reps, growth=False)
    started = time.monotonic()
    results = measure(reps)
    _log(f"[bench] total: {time.monotonic() - started:.1f} s ({machine()})")
    if args.json:
        print(json.dumps({key: round(value, 3) for key, value in results.keys.items()}))
    else:
        print(render(results, "quick" if args.quick else "full"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
