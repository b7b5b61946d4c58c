"""The pytest plugin that hosts get with the package, tried the way a host uses it: test files run
by pytester in their own folder, with nothing but the installed plugin."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from run_supervisor.actors import Gate, RunContext, Supervisor, SupervisorTimeout
from run_supervisor.actors.testing import EventLog
from run_supervisor.protocol import StepKind, StepStarted

pytest_plugins = ["pytester"]


@pytest.mark.timeout(300)  # two fresh interpreters: a few seconds idle, many more on a loaded machine
def test_the_plugin_is_registered_through_its_entry_point(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.run_supervisor(leak_timeout_s=60, request_timeout_s=60)  # however loaded the machine
        def test_fixtures(run_supervisor_leak_check, run_supervisor, async_run_supervisor,
                          run_supervisor_events, run_supervisor_defaults):
            assert async_run_supervisor.sync is run_supervisor and run_supervisor_defaults == {}
        """
    )
    result = pytester.runpytest_subprocess("--markers", timeout=240)
    result.stdout.fnmatch_lines(["@pytest.mark.run_supervisor(directories=(), hooks=None, grace_ms=1000*"])
    ran = pytester.runpytest_subprocess(timeout=240)  # a fresh process: only the entry point
    ran.assert_outcomes(passed=1)


def test_a_host_test_gets_a_supervisor_configured_by_the_marker_and_torn_down_with_test_teardown(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(
        """
        import pytest
        from run_supervisor import Gate
        from run_supervisor.actors.testing import EventLog

        logs = []

        class Caches:
            def __init__(self):
                self.disposed = []
            def load(self, directory, generation):
                return {"dir": directory}
            def dispose(self, directory, generation, cache):
                self.disposed.append(directory)

        caches = Caches()

        @pytest.mark.run_supervisor(directories=["/h/a"], hooks=caches, grace_ms=500, dispose_budget_ms=200)
        def test_a_run_held_until_teardown(run_supervisor, run_supervisor_events):
            assert run_supervisor.config.dispose_budget_ms == 200
            log = EventLog(run_supervisor)  # stays open across the teardown
            logs.append(log)
            run = run_supervisor.start_run(lambda ctx: ctx.wait(Gate("never")), session="s", directory="/h/a")
            event = run_supervisor_events.wait_for("run.started", run_id=run.run_id, timeout=5)
            assert event.generation == 1

        def test_the_teardown_interrupted_it_with_test_teardown_and_disposed_the_instance():
            finished = logs[0].of("run.finished")
            assert [e.reason.value for e in finished] == ["test_teardown"]
            assert caches.disposed == ["/h/a"]
        """
    )
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=2)


def test_the_async_fixture_drives_the_same_supervisor_from_a_coroutine(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import asyncio
        import pytest

        @pytest.mark.run_supervisor(directories=["/h/a"])
        def test_async(async_run_supervisor, run_supervisor, run_supervisor_events):
            assert async_run_supervisor.sync is run_supervisor

            async def host():
                run = await async_run_supervisor.start_run(lambda ctx: None, session="s", directory="/h/a")
                await run_supervisor_events.wait_for_async("run.finished", run_id=run.run_id, timeout=5)
                return (await run.wait(timeout=5)).outcome.value

            assert asyncio.run(host()) == "completed"
        """
    )
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=1)


def test_a_conftest_overrides_the_defaults_and_a_marker_overrides_the_conftest(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeconftest(
        """
        import pytest

        @pytest.fixture
        def run_supervisor_defaults():
            return {"directories": ["/h/default"], "request_timeout_s": 3.0}
        """
    )
    pytester.makepyfile(
        """
        import pytest

        pytestmark = pytest.mark.run_supervisor(request_timeout_s=2.0)

        def test_module_marker(run_supervisor):
            assert run_supervisor.config.request_timeout_s == 2.0
            assert run_supervisor.statistics().instances_open == 1

        @pytest.mark.run_supervisor(request_timeout_s=1.0, directories=[])
        def test_closest_marker_wins(run_supervisor):
            assert run_supervisor.config.request_timeout_s == 1.0
            assert run_supervisor.statistics().instances_open == 0
        """
    )
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=2)


def test_a_misspelt_marker_setting_errors_naming_it(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.run_supervisor(request_timeout=5)
        def test_it(run_supervisor):
            pass
        """
    )
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        ["*InvalidRequest: @pytest.mark.run_supervisor: unknown setting 'request_timeout'*"]
    )


def test_the_leak_check_fails_a_test_that_leaves_a_thread_running_and_names_it(
    pytester: pytest.Pytester,
) -> None:
    release = threading.Event()

    class Release:  # hands the inner test an event this test sets, so its thread ends
        @pytest.fixture
        def release(self) -> threading.Event:
            return release

    pytester.makepyfile(
        """
        import threading
        import pytest

        @pytest.mark.run_supervisor(leak_timeout_s=0.1)
        def test_leaves_a_worker(run_supervisor_leak_check, run_supervisor, release):
            threading.Thread(target=release.wait, args=(30,), name="host-worker", daemon=True).start()
        """
    )
    try:
        result = pytester.runpytest("-p", "no:cacheprovider", plugins=[Release()])
    finally:
        release.set()
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(["*LeakError: left running*host-worker*"])


# --- the event log ----------------------------------------------------------------------------


def test_the_event_log_filters_on_a_field_named_kind(supervisor: Supervisor, events: EventLog) -> None:
    def body(ctx: RunContext) -> None:
        with ctx.step("model"):
            pass
        with ctx.step("tool_exec"):
            pass

    supervisor.start_run(body, session="s", directory="/w/a", run_id="r1")
    event = events.wait_for("run.step.started", kind="tool_exec", timeout=5)
    assert isinstance(event, StepStarted) and event.kind is StepKind.TOOL_EXEC
    assert [e.kind for e in events.of("run.step.started", kind="model")] == [StepKind.MODEL]  # type: ignore[union-attr]


def test_every_wait_of_the_event_log_is_bounded(supervisor: Supervisor, events: EventLog, gate: Gate) -> None:
    supervisor.start_run(lambda ctx: ctx.wait(gate), session="s", directory="/w/a", run_id="r1")
    with pytest.raises(SupervisorTimeout, match=r"no run\.finished event"):
        events.wait_for("run.finished", run_id="r1", timeout=0.05)
    gate.open()
    assert events.wait_for("run.finished", run_id="r1", timeout=5).outcome.value == "completed"  # type: ignore[union-attr]


def test_the_worked_example_in_docs_testing_md_passes_as_a_host_test(pytester: pytest.Pytester) -> None:
    text = (Path(__file__).resolve().parents[1] / "docs" / "testing.md").read_text()
    example = text.split("## A worked example", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    host_import = "from myhost.settings import connect_provider"
    assert host_import in example
    example = example.replace(
        host_import,
        "def connect_provider(sup):\n"
        "    return sup.close('dispose_all', mode='maintenance', origin='settings.provider.connect')\n",
    )
    pytester.makepyfile(test_provider_connect=example)
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=3)
