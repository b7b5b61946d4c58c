"""Shared fixtures. Every test is time-bounded (pytest-timeout, see pyproject) and fails if it
leaves a thread or a pykka actor running."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, settings

from run_supervisor.actors import Gate, Supervisor, SupervisorConfig
from run_supervisor.actors.testing import EventLog, no_leaks

# Hypothesis profiles: "ci" (the default, 1,000 derandomized sequences of the state machine) and
# "soak" for a long local run: `python -m pytest tests/test_stateful.py --hypothesis-profile soak`.
_QUIET = [HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large]
settings.register_profile(
    "ci",
    max_examples=1000,
    stateful_step_count=15,
    deadline=None,
    derandomize=True,
    database=None,
    print_blob=False,
    suppress_health_check=_QUIET,
)
settings.register_profile(
    "soak",
    max_examples=20_000,
    stateful_step_count=40,
    deadline=None,
    derandomize=False,
    database=None,
    print_blob=True,
    suppress_health_check=_QUIET,
)
settings.load_profile(os.environ.get("RUN_SUPERVISOR_HYPOTHESIS_PROFILE", "ci"))  # --hypothesis-profile wins


@pytest.fixture(autouse=True)
def _no_leaked_actors_or_threads() -> Iterator[None]:
    with no_leaks(timeout=5.0):
        yield


@pytest.fixture
def supervisor() -> Iterator[Supervisor]:
    """A supervisor with /w/a and /w/b loaded (generation 1); torn down after the test."""
    sup = Supervisor.start(SupervisorConfig(shutdown_at_exit=False), directories=["/w/a", "/w/b"])
    try:
        yield sup
    finally:
        if not sup.closed:
            sup.shutdown(grace_ms=1000, reason="test_teardown")


@pytest.fixture
def events(supervisor: Supervisor) -> Iterator[EventLog]:
    log = EventLog(supervisor)
    yield log
    log.close()


@pytest.fixture
def gate() -> Gate:
    return Gate("g")
