"""A pytest plugin for a host's own timeout-guarded concurrency tests (installed with the package,
registered through the ``pytest11`` entry point; nothing to import).

Fixtures (each torn down with a ``test_teardown`` shutdown; every wait bounded):

- ``run_supervisor``: a started ``Supervisor``; its teardown also fails the test, naming each run,
  if an async run ended because the test's event loop ended under it (a forgotten ``await``);
- ``async_run_supervisor``: the same supervisor's ``AsyncSupervisor`` (for ``async def`` tests under
  any runner: pytest-asyncio, anyio, or ``asyncio.run`` in the test);
- ``async_run_supervisor_in_loop``: an ``AsyncSupervisor`` started and shut down on the test's own
  loop (an async fixture, for ``async def`` tests under a runner that drives async fixtures, such as
  anyio's ``@pytest.mark.anyio``): its async bodies and async hooks run on that loop, and its
  teardown awaits the shutdown there, before the loop ends;
- ``run_supervisor_events``: an ``EventLog`` of it, to ``wait_for`` events;
- ``run_supervisor_leak_check``: fails the test, naming them, if it leaves threads or pykka
  actors running (request it first, so it wraps the other fixtures); an event loop's own executor
  workers (``asyncio.to_thread``) are not counted;
- ``run_supervisor_defaults``: override it in a ``conftest.py`` to change the defaults below.

The marker configures the supervisor of one test (or of a module, with ``pytestmark``)::

    @pytest.mark.run_supervisor(directories=["/w/a"], hooks=MyCaches(), grace_ms=500,
                                dispose_budget_ms=200)

``directories`` are loaded before the test starts; ``hooks`` are the ``InstanceHooks``;
``grace_ms`` bounds the teardown's shutdown; ``leak_timeout_s`` (5 s) is how long the leak check
joins what the test started; any other keyword is a ``SupervisorConfig`` field.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from run_supervisor.actors._api import Supervisor, SupervisorConfig
from run_supervisor.actors._async_api import AsyncSupervisor
from run_supervisor.actors._async_body import CANCELLED_OUTSIDE
from run_supervisor.actors._errors import InvalidRequest
from run_supervisor.actors.testing import EventLog, LeakError, no_leaks
from run_supervisor.protocol import RunFinished

__all__ = [
    "async_run_supervisor",
    "async_run_supervisor_in_loop",
    "run_supervisor",
    "run_supervisor_defaults",
    "run_supervisor_events",
    "run_supervisor_leak_check",
]

_MARKER = "run_supervisor"
_OWN_KEYS = ("directories", "hooks", "grace_ms", "leak_timeout_s")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{_MARKER}(directories=(), hooks=None, grace_ms=1000, leak_timeout_s=5.0, **config): configure "
        "the run_supervisor fixtures (directories loaded first; any SupervisorConfig field)",
    )


@pytest.fixture
def run_supervisor_defaults() -> dict[str, Any]:
    """The supervisor fixtures' settings when a test's marker does not give them. Override this
    fixture in a ``conftest.py`` to change them for a folder of tests."""
    return {}


def _settings(request: pytest.FixtureRequest, defaults: dict[str, Any]) -> dict[str, Any]:
    settings = {
        "directories": (),
        "hooks": None,
        "grace_ms": 1000,
        "leak_timeout_s": 5.0,
        "shutdown_at_exit": False,
    }
    settings.update(defaults)
    for marker in reversed(list(request.node.iter_markers(_MARKER))):  # the closest one wins
        if marker.args:
            raise InvalidRequest(f"@pytest.mark.{_MARKER} takes keyword arguments only, got {marker.args!r}")
        settings.update(marker.kwargs)
    known = {*_OWN_KEYS, *SupervisorConfig.__struct_fields__}
    for key in settings:
        if key not in known:
            raise InvalidRequest(
                f"@pytest.mark.{_MARKER}: unknown setting {key!r}; use one of {', '.join(sorted(known))}"
            )
    return settings


def _config(settings: dict[str, Any]) -> SupervisorConfig:
    return SupervisorConfig(**{k: v for k, v in settings.items() if k not in _OWN_KEYS})


def _after_shutdown(supervisor: Supervisor, finished: EventLog) -> None:
    """The teardown's checks, once the supervisor has shut down: its threads ended, and no async
    run ended because its event loop ended under it."""
    stragglers = supervisor.threads.join(time.monotonic())
    cut = [
        e.run_id for e in finished.collect() if isinstance(e, RunFinished) and e.error == CANCELLED_OUTSIDE
    ]
    finished.close()
    if stragglers:
        raise LeakError(
            f"the supervisor's threads still run after its shutdown: {[t.name for t in stragglers]}"
        )
    if cut:
        raise LeakError(
            f"async run(s) {', '.join(map(repr, cut))} ended failed because their event loop ended "
            "first (the test returned without awaiting them or the supervisor's shutdown): await "
            "run.wait() or async_run_supervisor.shutdown() before the test returns"
        )


@pytest.fixture
def run_supervisor(
    request: pytest.FixtureRequest, run_supervisor_defaults: dict[str, Any]
) -> Iterator[Supervisor]:
    """A started ``Supervisor`` configured by the ``run_supervisor`` marker; after the test it is
    shut down with reason ``test_teardown`` within ``grace_ms``, and the test fails (``LeakError``)
    if a thread it started, other than an abandoned body's, is still running."""
    settings = _settings(request, run_supervisor_defaults)
    supervisor = Supervisor.start(
        _config(settings), hooks=settings["hooks"], directories=settings["directories"]
    )
    finished = EventLog(supervisor)  # to tell a body its test's loop ended under from a real failure
    try:
        yield supervisor
    finally:
        if not supervisor.closed:
            supervisor.shutdown(grace_ms=settings["grace_ms"], reason="test_teardown")
        _after_shutdown(supervisor, finished)


@pytest.fixture
async def async_run_supervisor_in_loop(
    request: pytest.FixtureRequest, run_supervisor_defaults: dict[str, Any]
) -> AsyncIterator[AsyncSupervisor]:
    """An ``AsyncSupervisor`` configured by the ``run_supervisor`` marker, started on the test's
    own loop (async ``hooks`` load there) and shut down there after the test, with reason
    ``test_teardown`` within ``grace_ms``: its async bodies end on that loop before it closes. The
    same checks as ``run_supervisor``'s teardown follow. An async fixture: the test's runner must
    drive it (anyio's ``@pytest.mark.anyio``, on the asyncio backend)."""
    settings = _settings(request, run_supervisor_defaults)
    supervisor = await AsyncSupervisor.start(
        _config(settings), hooks=settings["hooks"], directories=settings["directories"]
    )
    finished = EventLog(supervisor)
    try:
        yield supervisor
    finally:
        if not supervisor.closed:
            await supervisor.shutdown(grace_ms=settings["grace_ms"], reason="test_teardown")
        _after_shutdown(supervisor.sync, finished)


@pytest.fixture
def async_run_supervisor(run_supervisor: Supervisor) -> AsyncSupervisor:
    """The ``run_supervisor`` fixture's supervisor, through the asyncio facade (same supervisor,
    same teardown). Its calls are awaited on whichever loop runs the test."""
    return AsyncSupervisor(run_supervisor)


@pytest.fixture
def run_supervisor_events(run_supervisor: Supervisor) -> Iterator[EventLog]:
    """Every event of the test's supervisor, from before the test starts: ``wait_for(kind,
    timeout=..., **fields)`` from a thread, ``await wait_for_async(...)`` from a coroutine."""
    log = EventLog(run_supervisor)
    try:
        yield log
    finally:
        log.close()


@pytest.fixture
def run_supervisor_leak_check(
    request: pytest.FixtureRequest, run_supervisor_defaults: dict[str, Any]
) -> Iterator[None]:
    """Fail the test (``LeakError``, naming each one) if it leaves a thread or a pykka actor it
    started running after ``leak_timeout_s`` (marker; 5 s by default) of joining. Request it before
    the supervisor fixtures (or make it autouse in a conftest) so it is checked after their
    teardown."""
    with no_leaks(timeout=_settings(request, run_supervisor_defaults)["leak_timeout_s"]):
        yield
