"""Resume after a restart, as a policy: a host's resume callback is offered each recovered turn once,
a per-session budget (kept in the journal, across restarts) ends a turn that keeps crashing, and every
generation and run names the life of the supervisor it belongs to.

The journal tests run on both journals: the SQLite file and a shard of a PostgreSQL database
(tests/pg_support.py starts a real server)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pykka
import pytest

from run_supervisor import (
    AsyncRunContext,
    AsyncSupervisor,
    Continuation,
    Gate,
    Outcome,
    ResumeResult,
    ResumeVerdict,
    RunContext,
    RunHandle,
    Supervisor,
    SupervisorConfig,
)
from run_supervisor.actors import _api, _resume
from run_supervisor.actors._errors import SupervisorTimeout
from run_supervisor.actors.testing import EventLog, simulate_crash
from run_supervisor.protocol import (
    InstanceStarted,
    RecoveredRun,
    RunRecovered,
    RunStarted,
    StartRun,
    SupervisorCore,
    resume_verdict,
)

CONFIG = SupervisorConfig(shutdown_at_exit=False)
WAIT_S = 10.0


# The journal (each backend) and opened (torn down at the end) fixtures are conftest's.


def start(
    opened: list[Supervisor], journal: Path | str, config: SupervisorConfig = CONFIG, **kw: Any
) -> Supervisor:
    sup = Supervisor.start(config, journal=journal, **kw)
    opened.append(sup)
    return sup


def streaming(ctx: RunContext) -> None:
    """A turn whose model call streams until the process dies."""
    with ctx.step("model"):
        ctx.wait(Gate("never"))


def streaming_then(started: threading.Event) -> Any:
    """``streaming``, telling ``started`` once its model call streams."""

    def body(ctx: RunContext) -> None:
        with ctx.step("model"):
            started.set()
            ctx.wait(Gate("never"))

    return body


def finishing(ctx: RunContext) -> None:
    with ctx.step("model"):
        pass


def crash_while_streaming(opened: list[Supervisor], journal: Path | str, run_id: str = "r1") -> None:
    """A life that starts ``run_id`` in session s1, waits until its model call streams, and dies."""
    sup = start(opened, journal, directories=["/w/a"])
    log = EventLog(sup)
    sup.start_run(streaming, session="s1", directory="/w/a", run_id=run_id)
    log.wait_for("run.step.started", run_id=run_id, timeout=WAIT_S)
    log.close()
    simulate_crash(sup)


def as_r2(body: Any) -> Callable[[RunRecovered], Continuation]:
    """A resume callback that continues every recovered turn as run r2 with ``body``."""
    return lambda event: Continuation(body=body, run_id="r2")


class Offers:
    """A resume callback that records what it is offered and answers ``answer(event)``."""

    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.seen: list[RunRecovered] = []

    def __call__(self, event: RunRecovered) -> Continuation | None:
        self.seen.append(event)
        result: Continuation | None = self.answer(event)
        return result


# --- the policy ------------------------------------------------------------------------------------------


def test_a_recovered_turn_is_offered_once_and_continued_by_a_run_that_resumes_it(
    journal: Path | str, opened: list[Supervisor]
) -> None:
    crash_while_streaming(opened, journal)

    offers = Offers(lambda event: Continuation(body=finishing, run_id="r1-resumed"))
    after = start(opened, journal, resume=offers)

    assert [e.run_id for e in offers.seen] == ["r1"]  # offered once
    (offered,) = offers.seen
    assert offered.resume is ResumeVerdict.OFFERED and offered.resume_count == 0
    (offer,) = after.resumes()
    assert (offer.run_id, offer.result, offer.continued_by) == ("r1", ResumeResult.RESUMED, "r1-resumed")
    done = RunHandle(after, "r1-resumed").wait(WAIT_S)
    assert done.outcome is Outcome.COMPLETED and done.session == "s1" and done.directory == "/w/a"
    assert done.resume_count == 1
    recovered = after.run("r1")
    assert recovered is not None and recovered.reason == "crash"  # the turn it continues stays as it ended


def test_a_turn_that_crashes_again_after_its_resume_exhausts_the_budget_and_ends_saying_so(
    journal: Path | str, opened: list[Supervisor]
) -> None:
    crash_while_streaming(opened, journal)

    # Life 2: r1 is resumed by r2, which streams until this life dies too.
    streams = threading.Event()
    second = start(opened, journal, resume=as_r2(streaming_then(streams)))
    assert [(o.run_id, o.result) for o in second.resumes()] == [("r1", ResumeResult.RESUMED)]
    assert streams.wait(WAIT_S)
    simulate_crash(second)

    # Life 3: r2 is r1's turn continued once already: the budget (1) is spent, so it is not offered.
    offers = Offers(lambda event: Continuation(body=finishing))
    third = start(opened, journal, resume=offers)
    assert offers.seen == []
    (recovered,) = third.recovered()
    assert (recovered.run_id, recovered.reason, recovered.origin) == ("r2", "crash", "crash")
    assert recovered.resume is ResumeVerdict.EXHAUSTED and recovered.resume_count == 1
    (offer,) = third.resumes()
    assert (offer.run_id, offer.result, offer.resume_count) == ("r2", ResumeResult.EXHAUSTED, 1)
    assert third.statistics().runs_active == 0  # nothing was started: the turn ended there
    session = third.session("s1")
    assert session is not None and session.status == "idle"


def test_a_budget_of_two_resumes_a_turn_twice_in_a_row(journal: Path | str, opened: list[Supervisor]) -> None:
    config = CONFIG.replace(resume_budget=2)
    crash_while_streaming(opened, journal)
    for n in (2, 3):
        streams = threading.Event()
        life = start(
            opened,
            journal,
            config,
            resume=lambda event, n=n, streams=streams: Continuation(
                body=streaming_then(streams), run_id=f"r{n}"
            ),
        )
        assert [o.result for o in life.resumes()] == [ResumeResult.RESUMED]
        assert streams.wait(WAIT_S)
        simulate_crash(life)
    last = start(opened, journal, config, resume=Offers(lambda event: None))
    assert [(o.run_id, o.result, o.resume_count) for o in last.resumes()] == [
        ("r3", ResumeResult.EXHAUSTED, 2)
    ]


def test_without_a_resume_callback_nothing_is_offered_and_recovery_is_unchanged(
    journal: Path | str, opened: list[Supervisor]
) -> None:
    crash_while_streaming(opened, journal)

    after = start(opened, journal)
    (recovered,) = after.recovered()
    assert recovered.resume is None and (recovered.reason, recovered.origin) == ("crash", "crash")
    assert after.resumes() == ()
    assert after.statistics().runs_active == 0


def test_a_declined_offer_ends_the_turn_and_starts_nothing(
    journal: Path | str, opened: list[Supervisor]
) -> None:
    crash_while_streaming(opened, journal)

    offers = Offers(lambda event: None)
    after = start(opened, journal, resume=offers)
    assert [e.run_id for e in offers.seen] == ["r1"]
    assert [(o.run_id, o.result) for o in after.resumes()] == [("r1", ResumeResult.DECLINED)]
    assert after.statistics().runs_active == 0


def test_a_resume_callback_that_raises_is_reported_and_the_start_still_completes(
    journal: Path | str, opened: list[Supervisor]
) -> None:
    crash_while_streaming(opened, journal)

    def broken(event: RunRecovered) -> Continuation | None:
        raise ValueError("no model configured")

    after = start(opened, journal, resume=broken, directories=["/w/a"])
    (offer,) = after.resumes()
    assert offer.result is ResumeResult.FAILED and offer.error is not None
    assert "ValueError: no model configured" in offer.error
    assert (
        after.start_run(finishing, session="s1", directory="/w/a").wait(WAIT_S).outcome is Outcome.COMPLETED
    )


@pytest.fixture
def short_offers(monkeypatch: pytest.MonkeyPatch) -> float:
    """Bound each resume offer to 0.2 s, and only the offers (every other call of the supervisor
    keeps the default request timeout: a loaded machine may take longer than 0.2 s to answer)."""
    bound = 0.2
    offer = _api.offer_resumes

    def offered(supervisor: Any, callback: Any, *, timeout: float) -> Any:
        return offer(supervisor, callback, timeout=bound)

    monkeypatch.setattr(_api, "offer_resumes", offered)
    return bound


def test_a_resume_callback_that_hangs_is_bounded_and_its_late_answer_is_dropped(
    journal: Path | str, opened: list[Supervisor], short_offers: float
) -> None:
    crash_while_streaming(opened, journal)
    release = threading.Event()
    answered = threading.Event()

    def hanging(event: RunRecovered) -> Continuation | None:
        release.wait(WAIT_S)
        answered.set()
        return Continuation(body=finishing, run_id="late")

    after = start(opened, journal, resume=hanging)
    (offer,) = after.resumes()
    assert offer.result is ResumeResult.FAILED and offer.error is not None
    assert "did not answer within 0.2 s" in offer.error
    callback_threads = [t for t in after.threads.alive() if t.name.startswith("run-supervisor-resume-")]
    release.set()
    assert answered.wait(WAIT_S)
    for thread in callback_threads:
        thread.join(WAIT_S)
    assert after.run("late", timeout=WAIT_S) is None  # the late continuation was never started


def test_an_overrunning_resume_callback_s_thread_is_given_up_like_an_overrun_dispose_hook_s(
    journal: Path | str, opened: list[Supervisor], short_offers: float
) -> None:
    crash_while_streaming(opened, journal)
    release = threading.Event()

    def hanging(event: RunRecovered) -> None:
        release.wait(WAIT_S)

    after = start(opened, journal, resume=hanging)
    try:
        (offer,) = after.resumes()
        assert offer.result is ResumeResult.FAILED
        callback_threads = [t for t in after.threads.alive() if t.name.startswith("run-supervisor-resume-")]
        assert callback_threads
        assert all(t in after.threads.abandoned for t in callback_threads)  # shutdown waits not for it
    finally:
        release.set()
    for thread in callback_threads:
        thread.join(WAIT_S)


def test_a_continuation_whose_start_is_not_answered_in_time_is_not_reported_refused() -> None:
    start = _resume._Start(Continuation(body=finishing), {})
    with start.starting():
        raise SupervisorTimeout("the supervisor did not answer within 5 s")
    assert start.refused is not None
    assert "not answered in time (it may have started)" in start.refused
    assert "refused" not in start.refused


def test_a_resume_callback_raising_system_exit_leaves_no_supervisor_running(
    journal: Path | str, opened: list[Supervisor]
) -> None:
    crash_while_streaming(opened, journal)

    def leaving(event: RunRecovered) -> None:
        raise SystemExit(3)

    with pytest.raises(SystemExit):
        Supervisor.start(CONFIG, journal=journal, resume=leaving)
    assert pykka.ActorRegistry.get_all() == []


def test_an_async_start_whose_resume_callback_raises_system_exit_leaves_no_supervisor_running(
    journal: Path | str, opened: list[Supervisor]
) -> None:
    crash_while_streaming(opened, journal)
    before = set(threading.enumerate())

    def leaving(event: RunRecovered) -> None:
        raise SystemExit(3)

    async def main() -> None:
        async with asyncio.timeout(60):
            await AsyncSupervisor.start(CONFIG, journal=journal, resume=leaving)

    with pytest.raises(SystemExit):
        asyncio.run(main())
    for thread in set(threading.enumerate()) - before:
        if thread.name == "run-supervisor-closer":
            thread.join(WAIT_S)
    assert pykka.ActorRegistry.get_all() == []


def test_an_async_resume_callback_is_offered_on_the_loop_and_its_async_body_continues_the_turn(
    journal: Path | str, opened: list[Supervisor]
) -> None:
    crash_while_streaming(opened, journal)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        ran_on: list[asyncio.AbstractEventLoop] = []

        async def body(ctx: AsyncRunContext) -> None:
            ran_on.append(asyncio.get_running_loop())

        async def resume(event: RunRecovered) -> Continuation | None:
            await asyncio.sleep(0)
            return Continuation(body=body, run_id="r1-async")

        async with AsyncSupervisor.start(CONFIG, journal=journal, resume=resume) as sup:
            opened.append(sup.sync)
            (offer,) = sup.resumes()
            assert (offer.result, offer.continued_by) == (ResumeResult.RESUMED, "r1-async")
            done = await asyncio.to_thread(RunHandle(sup.sync, "r1-async").wait, WAIT_S)
            assert done.outcome is Outcome.COMPLETED and done.resume_count == 1
        assert ran_on == [loop]

    asyncio.run(main())


def test_a_resume_callback_must_be_callable(journal: Path | str, opened: list[Supervisor]) -> None:
    from run_supervisor import InvalidRequest

    with pytest.raises(InvalidRequest, match="resume must be callable"):
        Supervisor.start(CONFIG, journal=journal, resume="yes")  # type: ignore[arg-type]


# --- the decision, in the core --------------------------------------------------------------------------


def _recovered(run_id: str, *, count: int = 0, parent: str | None = None) -> RecoveredRun:
    return RecoveredRun(
        run_id=run_id,
        session=f"s-{run_id}",
        directory="/w/a",
        generation=1,
        parent_run_id=parent,
        resume_count=count,
    )


def test_the_core_offers_a_top_level_turn_below_its_budget_and_marks_one_at_it_exhausted() -> None:
    assert resume_verdict(_recovered("r1"), 1) is ResumeVerdict.OFFERED
    assert resume_verdict(_recovered("r1", count=1), 1) is ResumeVerdict.EXHAUSTED
    assert resume_verdict(_recovered("r1"), 0) is ResumeVerdict.EXHAUSTED
    assert resume_verdict(_recovered("c1", parent="r1"), 1) is None  # its parent's continuation decides
    assert resume_verdict(_recovered("r1"), None) is None  # no policy

    core = SupervisorCore(epoch=7)
    events = [
        c.event
        for c in core.recover([_recovered("r1"), _recovered("r2", count=3)], resume_budget=2)
        if hasattr(c, "event")
    ]
    verdicts = {e.run_id: e.resume for e in events if isinstance(e, RunRecovered)}
    assert verdicts == {"r1": ResumeVerdict.OFFERED, "r2": ResumeVerdict.EXHAUSTED}


def test_a_run_that_resumes_a_crashed_one_counts_one_more_and_any_other_resume_starts_again_at_zero() -> None:
    core = SupervisorCore(epoch=2)
    core.recover([_recovered("r1", count=1)])
    core.request(StartRun(run_id="r2", session="s-r1", directory="/w/a", resume_of="r1"), None)
    started = core.run_snapshot("r2")
    assert started is not None and started.resume_count == 2
    core.request(StartRun(run_id="r3", session="s3", directory="/w/a"), None)
    core.request(StartRun(run_id="r4", session="s4", directory="/w/a", resume_of="r2"), None)  # r2 is active
    fresh = core.run_snapshot("r3")
    assert fresh is not None and fresh.resume_count == 0


# --- generations carry the epoch ------------------------------------------------------------------------


def test_generations_of_two_lives_differ_by_their_epoch(
    journal: Path | str, opened: list[Supervisor]
) -> None:
    first = start(opened, journal)
    log = EventLog(first)
    first.load("/w/a")
    one = log.wait_for("instance.started", directory="/w/a")
    first.start_run(streaming, session="s1", directory="/w/a", run_id="r1")
    started = log.wait_for("run.started", run_id="r1")
    log.wait_for("run.step.started", run_id="r1")
    log.close()
    simulate_crash(first)

    second = start(opened, journal)
    log = EventLog(second)
    second.load("/w/a")
    two = log.wait_for("instance.started", directory="/w/a")
    log.close()
    assert isinstance(one, InstanceStarted) and isinstance(two, InstanceStarted)
    assert one.generation == two.generation == 1  # the same number...
    assert first.epoch is not None and second.epoch is not None and first.epoch != second.epoch
    assert (one.epoch, two.epoch) == (first.epoch, second.epoch)  # ...of two lives
    assert isinstance(started, RunStarted) and started.epoch == first.epoch
    (recovered,) = second.recovered()
    assert (recovered.generation, recovered.epoch) == (1, first.epoch)  # the dead life's generation 1
    snapshot = second.run("r1")
    assert snapshot is not None and snapshot.epoch == first.epoch
    handle = second.start_run(finishing, session="s2", directory="/w/a")
    done = handle.wait(WAIT_S)
    assert (done.generation, done.epoch) == (1, second.epoch)


def test_a_supervisor_without_a_journal_names_no_epoch() -> None:
    with Supervisor.start(CONFIG) as sup:
        log = EventLog(sup)
        sup.load("/w/a")
        event = log.wait_for("instance.started", directory="/w/a")
        log.close()
        assert isinstance(event, InstanceStarted) and event.epoch is None and sup.epoch is None


# --- the scenario format's resume policy ----------------------------------------------------------------

_STORY = """
name = "resume"
directories = ["/proj/a"]
{top}

[[runs]]
id = "r1"
session = "s1"
directory = "/proj/a"
steps = [{{ kind = "model", id = "stream", gate = "never" }}]

[[runs]]
id = "r2"
session = "{session}"
directory = "/proj/a"
start = "{start}"
steps = [{{ kind = "model" }}]

[[actions]]
id = "kill"
when = "r1.stream.started"
do = "crash"
"""


def _story(top: str = '[resumes]\nr1 = "r2"', *, session: str = "s1", start: str = "manual") -> str:
    return _STORY.format(top=top, session=session, start=start)


def test_a_scenario_with_resumes_has_its_recovered_run_continued_by_the_run_it_names() -> None:
    from run_supervisor.actors.scenarios import parse_scenario, play

    report = play(parse_scenario(_story(), file="resume.toml", fmt="toml"))
    assert report.passed, report.failures
    assert report.runs["r2"].outcome is Outcome.COMPLETED and report.runs["r2"].resume_of == "r1"
    recovered = [e for e in report.events if e.get("type") == "run.finished" and e.get("recovered")]
    assert [(e["run"], e["resume"], e["resume_count"]) for e in recovered] == [("r1", "offered", 0)]


@pytest.mark.parametrize(
    ("top", "session", "start", "says"),
    [
        ('[resumes]\nr1 = "r9"', "s1", "manual", "'r9' names no other run"),
        ('[resumes]\nr9 = "r2"', "s1", "manual", "'r9' names no run"),
        ('[resumes]\nr1 = "r2"', "s1", "begin", 'must be a start = "manual" run'),
        ('[resumes]\nr1 = "r2"', "s2", "manual", "not the turn's own"),
        ("resume_budget = -1", "s1", "manual", "resume_budget"),
    ],
)
def test_a_resumes_entry_must_name_a_manual_run_of_the_turns_session(
    top: str, session: str, start: str, says: str
) -> None:
    from run_supervisor.actors.scenarios import ScenarioFileError, parse_scenario

    with pytest.raises(ScenarioFileError) as refused:
        parse_scenario(_story(top, session=session, start=start), file="resume.toml", fmt="toml")
    assert says in str(refused.value)


def test_a_continuation_still_queued_at_a_crash_keeps_its_resume_count(
    journal: Path | str, opened: list[Supervisor]
) -> None:
    crash_while_streaming(opened, journal)
    blocking = threading.Event()

    def busy_first(sup: Supervisor) -> None:  # before the offers: the continuation queues behind it
        sup.start_run(streaming_then(blocking), session="s1", directory="/w/a", run_id="blocker")

    second = start(opened, journal, resume=as_r2(finishing), on_start=busy_first)
    assert [(o.run_id, o.result, o.continued_by) for o in second.resumes()] == [
        ("r1", ResumeResult.RESUMED, "r2")
    ]
    queued = second.run("r2")
    assert queued is not None and queued.state == "queued" and queued.resume_count == 1
    assert blocking.wait(WAIT_S)
    simulate_crash(second)

    third = start(opened, journal, resume=Offers(lambda event: None))
    counts = {e.run_id: (e.generation, e.resume_count, e.resume) for e in third.recovered()}
    assert counts == {"blocker": (1, 0, ResumeVerdict.OFFERED), "r2": (None, 1, ResumeVerdict.EXHAUSTED)}


def test_on_start_sees_every_event_after_the_recovery_and_one_that_raises_fails_the_start(
    journal: Path | str, opened: list[Supervisor]
) -> None:
    crash_while_streaming(opened, journal)
    logs: list[EventLog] = []
    after = start(
        opened,
        journal,
        directories=["/w/a"],
        resume=as_r2(finishing),
        on_start=lambda sup: logs.append(EventLog(sup)),
    )
    (log,) = logs
    log.wait_for("run.finished", run_id="r2", timeout=WAIT_S)
    kinds = [type(e).__name__ for e in log.events if isinstance(e, InstanceStarted | RunStarted)]
    log.close()
    assert kinds == ["InstanceStarted", "RunStarted"]  # the load's and the continuation's
    assert after.recovery_events()[-1].seq < log.events[0].seq

    def broken(sup: Supervisor) -> None:
        raise RuntimeError("no hub")

    with pytest.raises(RuntimeError, match="no hub"):
        Supervisor.start(CONFIG, on_start=broken)


def test_a_journal_from_before_epochs_were_recorded_gains_the_columns_and_names_no_epoch(
    tmp_path: Path, opened: list[Supervisor]
) -> None:
    import sqlite3

    journal = tmp_path / "old.journal"
    crash_while_streaming(opened, journal)
    with sqlite3.connect(journal) as db:  # as a journal written before the columns existed
        db.execute("ALTER TABLE runs DROP COLUMN epoch")
        db.execute("ALTER TABLE runs DROP COLUMN resume_count")

    after = start(opened, journal, resume=Offers(lambda event: None))
    (recovered,) = after.recovered()
    assert (recovered.run_id, recovered.generation, recovered.epoch, recovered.resume_count) == (
        "r1",
        1,
        None,
        0,
    )
    assert recovered.resume is ResumeVerdict.OFFERED
    with sqlite3.connect(journal) as db:
        columns = {row[1] for row in db.execute("PRAGMA table_info(runs)")}
    assert {"epoch", "resume_count"} <= columns


def test_a_continuation_of_a_run_queued_at_the_crash_must_name_its_directory(
    journal: Path | str, opened: list[Supervisor]
) -> None:
    crash_while_streaming(opened, journal)
    blocking = threading.Event()
    second = start(
        opened,
        journal,
        resume=as_r2(finishing),
        on_start=lambda sup: sup.start_run(
            streaming_then(blocking), session="s1", directory="/w/a", run_id="b"
        ),
    )
    assert [o.result for o in second.resumes()] == [ResumeResult.RESUMED]
    assert blocking.wait(WAIT_S)
    simulate_crash(second)  # r2 is still queued behind b: the journal has no directory for it

    config = CONFIG.replace(resume_budget=2)
    answers = {"b": None, "r2": Continuation(body=finishing)}
    third = start(opened, journal, config, resume=lambda event: answers[event.run_id])
    fates = {o.run_id: (o.result, o.error) for o in third.resumes()}
    assert fates["b"] == (ResumeResult.DECLINED, None)
    result, error = fates["r2"]
    assert result is ResumeResult.FAILED and error is not None and "names no directory" in error
