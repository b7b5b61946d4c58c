"""Shared fixtures. Every test is time-bounded (pytest-timeout, see pyproject) and fails if it
leaves a thread or a pykka actor running."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from actors import Gate, Supervisor, SupervisorConfig
from actors.testing import EventLog, no_leaks


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
