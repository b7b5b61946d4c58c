"""An API fuzzer: Hypothesis calls the public facade with arbitrary Python values.

Each example starts a supervisor, makes a sequence of calls whose arguments are drawn from None, bools,
ints (huge ones too), floats (NaN, infinities), odd strings (empty, lone surrogates, control
characters), bytes, paths, lists and plain objects, mixed with valid values so that calls also get
past validation. It checks what a host relies on:

- every call either succeeds or raises one of the documented ``SupervisorError`` subclasses (never
  the bare base class, which would be an internal failure, and never anything else);
- the raw ``submit`` never raises: its future answers with a value;
- afterwards ``shutdown`` completes within its grace (plus the stop margin) and leaves no thread.

The deep layer runs 600 examples (about 10 s, 20 s on a loaded machine), the README's command 150
(tests/layers.py; ``RUN_SUPERVISOR_API_FUZZ_EXAMPLES`` sets another count); the counts of a run are
printed with ``-s``.
"""

from __future__ import annotations

import math
import os
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from layers import pick

from run_supervisor import (
    CloseAction,
    CloseMode,
    CloseOutcome,
    InterruptReason,
    QueuePolicy,
    ReloadPolicy,
    RequestOutcome,
    RunContext,
    RunHandle,
    Supervisor,
    SupervisorConfig,
    actors,
)
from run_supervisor.protocol import (
    AnswerForm,
    CancelRun,
    CloseRequest,
    DismissForm,
    ReplyPermission,
    SetQueuePolicy,
    Shutdown,
    StartRun,
)

pytestmark = pytest.mark.deep  # generative: fewer examples by default (tests/layers.py)

EXAMPLES = int(os.environ.get("RUN_SUPERVISOR_API_FUZZ_EXAMPLES", pick(smoke="150", deep="600")))
DOCUMENTED = tuple(
    getattr(actors, name)
    for name in (
        "ActionAlreadyCompleted",
        "AlreadyInterrupting",
        "AskAlreadyAnswered",
        "AskWithdrawn",
        "InvalidRequest",
        "LoadFailed",
        "NotConfirmable",
        "NothingPending",
        "RunAlreadyExists",
        "RunAlreadyFinished",
        "SessionBusy",
        "SupervisorClosed",
        "SupervisorTimeout",
        "UnknownAction",
        "UnknownAsk",
        "UnknownDirectory",
        "UnknownRun",
    )
)
"""The errors the facade documents: every call raises one of these or nothing."""
GRACE_MS = 200
COUNTS: Counter[str] = Counter()
INPUTS: set[str] = set()

DIRS = st.sampled_from(["/w/a", "/w/b", "/w/new", Path("/w/a"), PurePosixPath("/w/b"), "/w/a/"])
SESSIONS = st.sampled_from(["s1", "s2", "s3"])
IDS = st.sampled_from(["r1", "r2", "r3", "run-1", "run-999999"])
ORIGINS = st.sampled_from(["user", "config.update", "settings.provider.connect"])
DOS = st.sampled_from(["dispose", "dispose_all", "reload", "invalidate_config", CloseAction.DISPOSE_ALL])
MODES = st.sampled_from(["maintenance", "user_confirmed_interrupt", CloseMode.MAINTENANCE])
REASONS = st.sampled_from(["shutdown", "test_teardown", "timeout", InterruptReason.TEST_TEARDOWN])
TIMEOUTS = st.sampled_from([None, 5, 2.0, 0.5])
TEXTS = st.sampled_from([None, "", "t", "because"])
FLAGS = st.booleans()
GRACES = st.sampled_from([None, 0, 50, 200])
SIZES = st.sampled_from([0, 1, 16])
ACTION_IDS = st.sampled_from(["lc-1", "lc-2", "lc-3", "lc-99", "close-1", ""])
POLICIES = st.sampled_from([None, "queue", "coalesce", "reject_if_busy", QueuePolicy.COALESCE, "fifo", 1])
RELOAD_POLICIES = st.sampled_from([None, None, "lazy", "eager", ReloadPolicy.EAGER, "later"])
ODD = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(2**80), max_value=2**80),
    st.sampled_from([10**13, 2**63, -1, 10**400, 1e10, 1e300, -0.0, math.nan, math.inf]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(["", " ", "\x00", "\ud800", "a\udfffb", "é", "\n", "r1\x00", "maintenence", "shutdwn"]),
    st.binary(max_size=6),
    st.sampled_from([b"/w/a", Path("/w/a"), PurePosixPath("/w/c")]),
    st.lists(st.integers(), max_size=2),
    st.builds(object),
)


def ignore(event: object) -> None:
    return None


def quick(ctx: RunContext) -> None:
    with ctx.step("model"):
        pass


def sleepy(ctx: RunContext) -> None:
    with ctx.step("model"):
        ctx.sleep(0.1)


def asking(ctx: RunContext) -> None:
    call = ctx.tool("bash")
    call.prepared()
    with ctx.step("tool_exec"):
        ctx.ask_permission(timeout=0.5)
    call.completed()


def form(ctx: RunContext) -> None:
    with ctx.step("form"):
        ctx.ask_form(timeout=0.5)


BODIES = st.sampled_from([quick, sleepy, asking, form, None, 42])


# Each call that takes its arguments as drawn: the pools they are drawn from, in order, and the call.
PLAIN_CALLS: dict[str, tuple[tuple[st.SearchStrategy[Any], ...], Callable[..., Any]]] = {
    "set_queue_policy": (
        (SESSIONS, POLICIES, TIMEOUTS),
        lambda s, session, policy, timeout: s.set_queue_policy(session, policy, timeout=timeout),
    ),
    "await_idle": (
        (st.sampled_from(["s1", "s2", "nobody", ""]), st.sampled_from([0, 0.05, -1])),
        lambda s, session, timeout: s.await_idle(session, timeout=timeout),
    ),
    # stalls: any action id, known or not
    "confirm_close": (
        (ACTION_IDS, st.one_of(st.none(), ORIGINS), TEXTS, TIMEOUTS),
        lambda s, action, origin, tag, timeout: s.confirm_close(
            action, origin=origin, tag=tag, timeout=timeout
        ),
    ),
    "cancel": (
        (IDS, ORIGINS, TIMEOUTS),
        lambda s, run, origin, timeout: s.cancel(run, origin=origin, timeout=timeout),
    ),
    "close": (
        (DOS, MODES, ORIGINS, st.one_of(st.none(), DIRS), TEXTS, TIMEOUTS, RELOAD_POLICIES),
        lambda s, do, mode, origin, directory, tag, timeout, reload_policy: s.close(
            do,
            mode=mode,
            origin=origin,
            directory=directory,
            tag=tag,
            timeout=timeout,
            reload_policy=reload_policy,
        ),
    ),
    "load": ((DIRS, DIRS, TIMEOUTS), lambda s, one, two, timeout: s.load(one, two, timeout=timeout)),
    "declare": ((DIRS, DIRS, TIMEOUTS), lambda s, one, two, timeout: s.declare(one, two, timeout=timeout)),
    "ask": (
        (st.sampled_from(["ask-1", "ask-2", "r1"]), TIMEOUTS),
        lambda s, ask, timeout: s.ask(ask, timeout=timeout),
    ),
    "pending_asks": (
        (st.one_of(st.none(), IDS), TIMEOUTS),
        lambda s, run, timeout: s.pending_asks(run_id=run, timeout=timeout),
    ),
    "run": ((IDS, TIMEOUTS), lambda s, run, timeout: s.run(run, timeout=timeout)),
    "session": ((SESSIONS, TIMEOUTS), lambda s, session, timeout: s.session(session, timeout=timeout)),
    "statistics": ((TIMEOUTS,), lambda s, timeout: s.statistics(timeout=timeout)),
    "pending_actions": ((TIMEOUTS,), lambda s, timeout: s.pending_actions(timeout=timeout)),
    "subscribe": (
        (SIZES, st.sampled_from([None, ignore])),
        lambda s, maxsize, callback: s.subscribe(maxsize=maxsize, callback=callback).close(),
    ),
    "wait": ((IDS, TIMEOUTS), lambda s, run, timeout: RunHandle(s, run).wait(timeout=timeout)),
    "shutdown": (
        (GRACES, REASONS, st.one_of(st.none(), ORIGINS)),
        lambda s, grace_ms, reason, origin: s.shutdown(grace_ms=grace_ms, reason=reason, origin=origin),
    ),
}


def _call(draw: st.DrawFn) -> tuple[str, Callable[[Supervisor], Any], tuple[Any, ...]]:
    def arg(pool: st.SearchStrategy[Any]) -> Any:
        """Mostly a value of the argument's own kind, sometimes anything at all."""
        return draw(ODD) if draw(st.integers(min_value=0, max_value=9)) == 0 else draw(pool)

    name = draw(
        st.sampled_from(
            [
                "start_run",
                "start_run",
                "start_run",
                "cancel",
                "close",
                "reply_permission",
                "answer_form",
                "dismiss_form",
                "load",
                "declare",
                "run",
                "session",
                "statistics",
                "pending_actions",
                "ask",
                "pending_asks",
                "subscribe",
                "wait",
                "submit",
                "set_queue_policy",
                "await_idle",
                "confirm_close",
                "shutdown",
            ]
        )
    )
    if name == "start_run":
        a = (
            draw(BODIES),
            arg(SESSIONS),
            arg(DIRS),
            arg(st.one_of(st.none(), IDS)),
            arg(TIMEOUTS),
            arg(POLICIES),
        )
        return (
            name,
            lambda s: s.start_run(
                a[0], session=a[1], directory=a[2], run_id=a[3], timeout=a[4], queue_policy=a[5]
            ),
            a,
        )
    if name in PLAIN_CALLS:
        pools, make = PLAIN_CALLS[name]
        a = tuple(arg(pool) for pool in pools)
        return name, lambda s: make(s, *a), a
    if name in ("reply_permission", "answer_form", "dismiss_form"):
        # A reply names an ask id, or (the convenience) a run id; both, or neither, is refused.
        to = draw(st.sampled_from(["ask", "run", "both", "neither"]))
        ids = (arg(IDS), arg(IDS))
        at = {
            "ask": {"ask_id": ids[0]},
            "run": {"run_id": ids[1]},
            "both": {"ask_id": ids[0], "run_id": ids[1]},
            "neither": {},
        }[to]
        if name == "reply_permission":
            a = (at, arg(FLAGS), arg(TEXTS), arg(TIMEOUTS))
            return name, lambda s: s.reply_permission(**a[0], approve=a[1], message=a[2], timeout=a[3]), a
        if name == "answer_form":
            a = (at, arg(st.sampled_from(["yes", ""])), arg(TIMEOUTS))
            return name, lambda s: s.answer_form(**a[0], answer=a[1], timeout=a[2]), a
        a = (at, arg(TEXTS), arg(TIMEOUTS))
        return name, lambda s: s.dismiss_form(**a[0], message=a[1], timeout=a[2]), a
    if name == "submit":
        v = (arg(IDS), arg(SESSIONS), arg(DIRS), arg(DOS), arg(MODES), arg(ORIGINS), arg(FLAGS), arg(GRACES))
        build: dict[type[Any], Callable[[], Any]] = {
            StartRun: lambda: StartRun(run_id=v[0], session=v[1], directory=v[2]),
            CancelRun: lambda: CancelRun(run_id=v[0], origin=v[5]),
            CloseRequest: lambda: CloseRequest(do=v[3], mode=v[4], origin=v[5], directories=(v[2],)),
            Shutdown: lambda: Shutdown(reason=v[3], origin=v[5], grace_ms=v[7]),
            ReplyPermission: lambda: ReplyPermission(run_id=v[0], approve=v[6], message=v[5]),
            AnswerForm: lambda: AnswerForm(run_id=v[0], answer=v[1]),
            DismissForm: lambda: DismissForm(run_id=v[0]),
            SetQueuePolicy: lambda: SetQueuePolicy(session=v[1], queue_policy=v[4]),
        }
        kind = draw(st.sampled_from(list(build)))

        def raw(s: Supervisor) -> None:
            try:
                request = build[kind]()
            except TypeError:  # msgspec refuses some on construction (not our boundary)
                return
            outcome = s.submit(request, body=quick).result(timeout=10)  # never raises: a value
            assert isinstance(outcome, CloseOutcome | RequestOutcome), outcome

        return f"submit {kind.__name__}", raw, v
    raise AssertionError(name)


@st.composite
def calls(draw: st.DrawFn) -> list[tuple[str, Callable[[Supervisor], Any], tuple[Any, ...]]]:
    return [_call(draw) for _ in range(draw(st.integers(min_value=1, max_value=10)))]


@pytest.fixture(scope="module", autouse=True)
def _report_the_counts() -> Iterator[None]:
    """Prints what the fuzzer did (seen with ``-s``): calls, distinct inputs, how each ended."""
    yield
    rejected = {k: n for k, n in COUNTS.items() if k not in ("calls", "succeeded", "config values")}
    print(
        f"\napi fuzz: {COUNTS['calls']} calls, {len(INPUTS)} distinct inputs, "
        f"{COUNTS['succeeded']} succeeded, "
        f"rejected with documented errors: {dict(sorted(rejected.items()))}; "
        f"{COUNTS['config values']} config values"
    )


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)
@given(calls())
def test_every_call_succeeds_or_raises_a_documented_error_and_shutdown_still_completes(
    sequence: list[tuple[str, Callable[[Supervisor], Any], tuple[Any, ...]]],
) -> None:
    sup = Supervisor.start(
        SupervisorConfig(shutdown_at_exit=False, request_timeout_s=5), directories=["/w/a", "/w/b"]
    )
    try:
        for name, call, args in sequence:
            COUNTS["calls"] += 1
            INPUTS.add(f"{name}{args!r}")
            try:
                call(sup)
                COUNTS["succeeded"] += 1
            except DOCUMENTED as exc:
                COUNTS[type(exc).__name__] += 1
    finally:
        outcome = sup.shutdown(grace_ms=GRACE_MS)
    # How long shutdown takes is a benchmark figure (shutdown_1000_ratio, uncooperative_overrun_1000_ms);
    # here: it completes, and with quick bodies it names nothing as left behind.
    assert outcome.completed, outcome
    if not any(name == "shutdown" for name, _, _ in sequence):  # an earlier one may have had no grace
        assert outcome.overran == ()  # nothing here hangs: nothing may be named as left behind
    deadline = time.monotonic() + 10.0  # generous: a loaded machine; a working shutdown needs none of it
    for thread in sup.threads.alive():
        thread.join(max(0.0, deadline - time.monotonic()))
    assert not sup.threads.alive(), sup.threads.alive()


@settings(max_examples=min(EXAMPLES, 200), deadline=None, derandomize=True, database=None)
@given(st.sampled_from(sorted(SupervisorConfig.__struct_fields__)), ODD)
def test_a_config_value_is_accepted_only_when_it_is_of_its_type_and_finite_and_bounded(
    field: str, value: Any
) -> None:
    COUNTS["config values"] += 1
    try:
        config = SupervisorConfig(**{field: value})
    except actors.InvalidConfig as exc:
        assert field in str(exc)
        return
    setting = getattr(config, field)
    if isinstance(setting, float):
        assert math.isfinite(setting) and 0 < setting <= 7 * 24 * 3600
    elif isinstance(setting, int) and not isinstance(setting, bool):
        assert 0 <= setting <= 10**9
