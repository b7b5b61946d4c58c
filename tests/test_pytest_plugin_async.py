"""The pytest plugin for asyncio hosts: a test whose async run outlives its event loop fails,
naming the run; the leak check leaves an event loop's own executor workers alone; the in-loop
fixture is started and torn down inside the test's loop."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]


def test_a_test_that_forgets_to_await_its_async_run_fails_naming_the_run(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import asyncio
        import pytest

        @pytest.mark.run_supervisor(directories=["/h/a"])
        def test_forgets(run_supervisor_leak_check, async_run_supervisor):
            async def turn(ctx):
                await asyncio.sleep(30)  # still streaming when the test's loop ends

            async def host():
                await async_run_supervisor.start_run(turn, session="s", directory="/h/a", run_id="forgotten")
                # ...and the test returns without awaiting the run or the shutdown

            asyncio.run(host())
        """
    )
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(
        ["*async run(s) 'forgotten' ended failed because their event loop ended first*"]
    )


def test_a_test_that_awaits_its_async_run_passes(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import asyncio
        import pytest

        @pytest.mark.run_supervisor(directories=["/h/a"])
        def test_awaits(run_supervisor_leak_check, async_run_supervisor):
            async def turn(ctx):
                await asyncio.sleep(0)

            async def host():
                run = await async_run_supervisor.start_run(turn, session="s", directory="/h/a")
                return (await run.wait()).outcome.value

            assert asyncio.run(host()) == "completed"
        """
    )
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=1)


def test_the_leak_check_leaves_an_event_loops_to_thread_workers_alone(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import asyncio
        import pytest

        loops = []

        @pytest.mark.run_supervisor(leak_timeout_s=30.0)
        def test_to_thread_on_a_loop_left_open(run_supervisor_leak_check, run_supervisor):
            loop = asyncio.new_event_loop()  # a host's long-lived loop: its executor outlives the test
            loops.append(loop)
            assert loop.run_until_complete(asyncio.to_thread(lambda: 42)) == 42

        def test_clean_up():
            loops[0].run_until_complete(loops[0].shutdown_default_executor())
            loops[0].close()
        """
    )
    result = pytester.runpytest("-p", "no:cacheprovider", "--durations=0")
    result.assert_outcomes(passed=2)
    # Not joined for the leak check's 30 s either: the worker is the loop's, not the test's.
    assert "30." not in result.stdout.str()


def test_the_in_loop_fixture_is_torn_down_inside_the_tests_loop(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import asyncio
        import pytest

        seen = {}

        class Caches:
            async def load(self, directory, generation):
                seen["load"] = asyncio.get_running_loop()
                return {"directory": directory}

            async def dispose(self, directory, generation, cache):
                seen["dispose"] = asyncio.get_running_loop()

        @pytest.mark.anyio
        @pytest.mark.run_supervisor(directories=["/h/a"], hooks=Caches(), grace_ms=2000)
        async def test_streams_until_teardown(run_supervisor_leak_check, async_run_supervisor_in_loop):
            seen["test"] = asyncio.get_running_loop()
            streaming = asyncio.Event()

            async def turn(ctx):
                seen["cache"] = await ctx.instance()
                streaming.set()
                await asyncio.sleep(30)  # still streaming when the test returns

            await async_run_supervisor_in_loop.start_run(turn, session="s", directory="/h/a", run_id="r1")
            async with asyncio.timeout(10):
                await streaming.wait()
            seen["log"] = async_run_supervisor_in_loop
            # ...and the test returns: the fixture's teardown shuts it down on this loop

        def test_the_teardown_ran_on_the_tests_loop_before_it_ended():
            assert seen["load"] is seen["test"] and seen["dispose"] is seen["test"]
            assert seen["cache"] == {"directory": "/h/a"}
            outcome = seen["log"].sync.wait_closed(timeout=5)
            assert outcome.interrupted_runs == ("r1",) and not outcome.abandoned_runs
        """
    )
    pytester.makeconftest(
        """
        import pytest

        @pytest.fixture
        def anyio_backend():
            return "asyncio"
        """
    )
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=2)
