"""The resume offering's outcomes that both facades decide the same way (actors/_resume.py writes the
decision once): a continuation whose start is refused, and an answer that is no continuation, are
each reported ``failed`` with the reason, and the start goes on. On an SQLite journal (the policy's
own tests, tests/test_resume_policy.py, run both journals)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from run_supervisor import (
    AsyncSupervisor,
    Continuation,
    Gate,
    ResumeResult,
    RunContext,
    Supervisor,
    SupervisorConfig,
)
from run_supervisor.actors.testing import EventLog, simulate_crash
from run_supervisor.protocol import RunRecovered

CONFIG = SupervisorConfig(shutdown_at_exit=False)
REFUSED = "the continuation's start was refused: run 'r1' already exists; run ids are unique"


def streaming(ctx: RunContext) -> None:
    with ctx.step("model"):
        ctx.wait(Gate("never"))


@pytest.fixture
def crashed(tmp_path: Path) -> Iterator[Path]:
    """A journal whose last life died while run r1 (session s1) streamed."""
    journal = tmp_path / "journal.db"
    sup = Supervisor.start(CONFIG, journal=journal, directories=["/w/a"])
    log = EventLog(sup)
    sup.start_run(streaming, session="s1", directory="/w/a", run_id="r1")
    log.wait_for("run.step.started", run_id="r1")
    log.close()
    simulate_crash(sup)
    yield journal


def _after(journal: Path, resume: Any) -> tuple[tuple[ResumeResult, str | None], ...]:
    sup = Supervisor.start(CONFIG, journal=journal, resume=resume, directories=["/w/a"])
    try:
        return tuple((offer.result, offer.error) for offer in sup.resumes())
    finally:
        sup.shutdown(grace_ms=500, reason="test_teardown")


def test_a_continuation_whose_start_is_refused_is_reported_failed_with_the_refusal(crashed: Path) -> None:
    offers = _after(crashed, lambda event: Continuation(body=streaming, run_id="r1"))
    assert offers == (
        (
            ResumeResult.FAILED,
            "the continuation's start was refused: run 'r1' already exists; run ids are unique",
        ),
    )


def test_an_answer_that_is_no_continuation_is_reported_failed_naming_its_type(crashed: Path) -> None:
    offers = _after(crashed, lambda event: 42)
    assert offers == ((ResumeResult.FAILED, "the resume callback answered int, not a Continuation or None"),)


def test_a_sync_supervisor_refuses_an_awaitable_answer_and_closes_it_unawaited(crashed: Path) -> None:
    async def later() -> Continuation | None:
        return None

    made: list[Any] = []

    def resume(event: RunRecovered) -> Any:
        made.append(later())
        return made[-1]

    offers = _after(crashed, resume)
    says = "the resume callback returned an awaitable: a sync supervisor takes a plain answer"
    assert offers == ((ResumeResult.FAILED, says),)
    assert made[0].cr_frame is None  # closed, so Python never warns that it was not awaited


def test_the_asyncio_facade_reports_a_refused_continuation_as_the_sync_one_does(crashed: Path) -> None:
    async def resume(event: RunRecovered) -> Continuation | None:
        return Continuation(body=streaming, run_id="r1")

    async def main() -> tuple[tuple[ResumeResult, str | None], ...]:
        async with AsyncSupervisor.start(CONFIG, journal=crashed, resume=resume) as sup:
            return tuple((offer.result, offer.error) for offer in sup.resumes())

    assert asyncio.run(main()) == (
        (
            ResumeResult.FAILED,
            "the continuation's start was refused: run 'r1' already exists; run ids are unique",
        ),
    )
