"""Shared fixtures. Every test is time-bounded (pytest-timeout, see pyproject) and fails if it
leaves a thread or a pykka actor running."""

from __future__ import annotations

import os
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from layers import DEEP, spread_over_workers
from pg_support import BACKENDS, make_journal

from run_supervisor.actors import Gate, Supervisor
from run_supervisor.actors.testing import EventLog

# Hypothesis profiles: "smoke" (the README's test command: 100 derandomized sequences of the state
# machine), "deep" (the deep layer, RUN_SUPERVISOR_DEEP=1: 1,000; see tests/layers.py) and "soak" for a
# long local run: `python -m pytest tests/test_stateful.py --hypothesis-profile soak`.
_QUIET = [HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large]
_EVERY = settings(
    stateful_step_count=15,
    deadline=None,
    derandomize=True,
    database=None,
    print_blob=False,
    suppress_health_check=_QUIET,
)
settings.register_profile("smoke", _EVERY, max_examples=100)
settings.register_profile("deep", _EVERY, max_examples=1000)
settings.register_profile(
    "soak", _EVERY, max_examples=20_000, stateful_step_count=40, derandomize=False, print_blob=True
)
settings.load_profile(os.environ.get("RUN_SUPERVISOR_HYPOTHESIS_PROFILE", "deep" if DEEP else "smoke"))
# (--hypothesis-profile on the command line wins)


@pytest.hookimpl(wrapper=True)
def pytest_cmdline_main(config: pytest.Config) -> Generator[None, object, object]:
    """The whole suite runs on one worker a core (tests/layers.py). Every test is safe beside another:
    ports are the system's, files are in ``tmp_path``, a PostgreSQL server is a worker's own, and the
    TypeScript client's ``npm ci`` takes a file lock."""
    if spread_over_workers(config):
        config.option.numprocesses, config.option.dist = "auto", "loadgroup"
    return (yield)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "deep: generative or repeated; shallow by default, full depth with RUN_SUPERVISOR_DEEP=1"
    )
    # pytest-xdist's own (registered here too, for a run with -p no:xdist): tests that share a worker
    config.addinivalue_line("markers", "xdist_group(name): run on the one worker of the named group")


# The supervisor fixtures are the pytest plugin's (run_supervisor.actors.pytest_plugin, which hosts
# get too); here under the short names this suite uses, with /w/a and /w/b loaded by default.


@pytest.fixture
def run_supervisor_defaults() -> dict[str, Any]:
    return {"directories": ["/w/a", "/w/b"]}


@pytest.fixture(autouse=True)
def _no_leaked_actors_or_threads(run_supervisor_leak_check: None) -> None:
    """Every test fails if it leaves a thread or a pykka actor running."""


@pytest.fixture
def supervisor(run_supervisor: Supervisor) -> Supervisor:
    """A supervisor with /w/a and /w/b loaded (generation 1); torn down after the test."""
    return run_supervisor


@pytest.fixture
def events(run_supervisor_events: EventLog) -> EventLog:
    return run_supervisor_events


@pytest.fixture
def gate() -> Gate:
    return Gate("g")


@pytest.fixture(params=BACKENDS)
def journal(request: pytest.FixtureRequest, tmp_path: Path) -> Path | str:
    """A journal for one test, on each backend: an SQLite file, or a shard of the session's PostgreSQL
    database (tests/pg_support.py; ``sqlite_only`` there for the file alone)."""
    return make_journal(request.param, tmp_path)


@pytest.fixture
def opened() -> Iterator[list[Supervisor]]:
    """Supervisors a test starts; any still open at the end is torn down."""
    started: list[Supervisor] = []
    yield started
    for sup in started:
        if not sup.closed:
            sup.shutdown(grace_ms=500, reason="test_teardown")
