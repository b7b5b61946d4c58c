"""The no-op gate: a close carrying a fingerprint equal to what every live instance it
covers was loaded with is answered ``noop`` at once and touches nothing."""

from __future__ import annotations

import pytest
from scenario_support import action, run, story

from run_supervisor.actors import Gate, InvalidRequest, RunContext, Supervisor, SupervisorConfig
from run_supervisor.actors.scenarios import ScenarioFileError, parse_scenario
from run_supervisor.actors.testing import EventLog
from run_supervisor.protocol import (
    ActionResult,
    CloseAction,
    CloseMode,
    CloseOutcome,
    CloseResult,
    InstanceClosed,
    InstanceStarted,
    LifecycleCompleted,
    LifecycleRequested,
)
from run_supervisor.protocol import _lifecycle as lifecycle
from run_supervisor.protocol._rules import fingerprint_unchanged
from run_supervisor.protocol.testing import CoreShell, InvariantChecker, InvariantViolation


def _loaded(shell: CoreShell, directory: str, fingerprint: str) -> None:
    shell.carry_out(shell.core.preload(directory, fingerprint))


def test_an_unchanged_config_invalidation_is_a_noop_that_retires_nothing() -> None:
    shell = CoreShell()
    _loaded(shell, "/w/a", "cfg-1")
    _loaded(shell, "/w/b", "cfg-1")
    shell.start("r1", directory="/w/a")
    before = len(shell.events)

    answer = shell.close(CloseAction.INVALIDATE_CONFIG, fingerprint="cfg-1")

    assert isinstance(answer, CloseOutcome)
    assert answer.result is CloseResult.NOOP
    assert answer.completed
    assert answer.completed_directories == answer.pending_directories == answer.blocking_runs == ()
    new = shell.events[before:]
    assert [type(e) for e in new] == [LifecycleRequested, LifecycleCompleted, ActionResult]
    assert new[0].fingerprint == "cfg-1"  # type: ignore[union-attr]
    assert shell.core.live_instances() == (("/w/a", 1), ("/w/b", 1))
    assert shell.core.pending_actions() == ()
    # The run it did not wait for goes on; its instance is still the current one for new runs.
    shell.finish("r1")
    shell.start("r2", directory="/w/a")
    assert shell.core.run_snapshot("r2").generation == 1  # type: ignore[union-attr]


def test_a_changed_config_invalidation_closes_and_the_next_load_records_the_new_fingerprint() -> None:
    shell = CoreShell()
    _loaded(shell, "/w/a", "cfg-1")

    answer = shell.close(CloseAction.INVALIDATE_CONFIG, fingerprint="cfg-2")
    assert answer.result is CloseResult.COMPLETED
    shell.start("r1", directory="/w/a")

    started = shell.of(InstanceStarted, directory="/w/a")
    assert [(e.generation, e.fingerprint) for e in started] == [(1, "cfg-1"), (2, "cfg-2")]
    # Saving the same settings again now changes nothing.
    assert shell.close(CloseAction.INVALIDATE_CONFIG, fingerprint="cfg-2").result is CloseResult.NOOP


def test_a_directory_met_after_an_invalidation_loads_with_the_config_fingerprint() -> None:
    shell = CoreShell()
    _loaded(shell, "/w/a", "cfg-1")
    shell.close(CloseAction.INVALIDATE_CONFIG, fingerprint="cfg-2")

    shell.start("r1", directory="/w/new")

    assert shell.one(InstanceStarted, directory="/w/new").fingerprint == "cfg-2"


def test_a_close_without_a_fingerprint_closes_as_before_even_if_the_instances_have_one() -> None:
    shell = CoreShell()
    _loaded(shell, "/w/a", "cfg-1")

    assert shell.close(CloseAction.INVALIDATE_CONFIG).result is CloseResult.COMPLETED
    assert shell.of(InstanceClosed, directory="/w/a")


def test_a_fingerprint_some_live_instance_was_not_loaded_with_closes_every_covered_instance() -> None:
    shell = CoreShell()
    _loaded(shell, "/w/a", "cfg-1")
    _loaded(shell, "/w/b", "cfg-0")

    answer = shell.close(CloseAction.INVALIDATE_CONFIG, fingerprint="cfg-1")

    assert answer.result is CloseResult.COMPLETED
    assert answer.completed_directories == ("/w/a", "/w/b")


def test_a_reload_with_the_fingerprint_it_was_loaded_with_is_a_noop_and_loads_nothing() -> None:
    shell = CoreShell("/w/a")
    assert shell.close(CloseAction.RELOAD, "/w/a", fingerprint="tree-7").result is CloseResult.COMPLETED
    generations = len(shell.of(InstanceStarted, directory="/w/a"))

    again = shell.close(
        CloseAction.RELOAD, "/w/a", mode=CloseMode.USER_CONFIRMED_INTERRUPT, fingerprint="tree-7"
    )

    assert again.result is CloseResult.NOOP
    assert len(shell.of(InstanceStarted, directory="/w/a")) == generations


def test_a_noop_interrupts_no_run_even_in_user_confirmed_mode() -> None:
    shell = CoreShell()
    _loaded(shell, "/w/a", "cfg-1")
    shell.start("r1", directory="/w/a")

    answer = shell.close(
        CloseAction.INVALIDATE_CONFIG, mode=CloseMode.USER_CONFIRMED_INTERRUPT, fingerprint="cfg-1"
    )

    assert answer.result is CloseResult.NOOP
    assert answer.interrupted_runs == ()
    assert shell.core.run_snapshot("r1").state.value == "active"  # type: ignore[union-attr]


def test_with_nothing_live_a_fingerprinted_close_goes_ahead_and_joins_what_is_closing() -> None:
    shell = CoreShell()
    _loaded(shell, "/w/a", "cfg-1")
    shell.start("r1", directory="/w/a")
    first = shell.close(CloseAction.INVALIDATE_CONFIG, fingerprint="cfg-2")
    assert first.result is CloseResult.DEFERRED

    # Generation 1 is retiring and nothing is live: the same request again joins the pending close.
    second = shell.close(CloseAction.INVALIDATE_CONFIG, fingerprint="cfg-2")

    assert second.result is CloseResult.DEFERRED
    shell.finish("r1")
    assert len(shell.of(InstanceClosed, directory="/w/a")) == 1


def test_the_gate_needs_a_fingerprint_and_a_live_instance_and_every_one_equal() -> None:
    assert fingerprint_unchanged("x", ["x", "x"])
    assert not fingerprint_unchanged("x", ["x", "y"])
    assert not fingerprint_unchanged("x", ["x", None])
    assert not fingerprint_unchanged("x", [])
    assert not fingerprint_unchanged(None, [None])


def test_the_checker_catches_a_core_that_closes_an_unchanged_config(monkeypatch: pytest.MonkeyPatch) -> None:
    shell = CoreShell(checker=InvariantChecker(raise_at_once=True))
    _loaded(shell, "/w/a", "cfg-1")
    monkeypatch.setattr(lifecycle, "fingerprint_unchanged", lambda fingerprint, loaded: False)

    with pytest.raises(InvariantViolation, match=r"disposed while live|changes nothing"):
        shell.close(CloseAction.INVALIDATE_CONFIG, fingerprint="cfg-1")


# --- through the facade ----------------------------------------------------------------------


def test_a_settings_dialog_saving_an_unchanged_config_keeps_every_instance_and_run() -> None:
    disposed: list[str] = []
    gate = Gate("g")

    def body(ctx: RunContext) -> None:
        with ctx.step("model"):
            ctx.wait(gate)

    class Hooks:
        def load(self, directory: str, generation: int) -> None:
            pass

        def dispose(self, directory: str, generation: int, cache: object) -> None:
            disposed.append(f"{directory}#{generation}")

    config = SupervisorConfig(shutdown_at_exit=False)
    with Supervisor.start(config, hooks=Hooks()) as sup:
        log = EventLog(sup)
        sup.load("/w/a", "/w/b", fingerprint="cfg-1")
        handle = sup.start_run(body, session="s", directory="/w/a")

        outcome = sup.close(
            "invalidate_config", mode="maintenance", origin="settings.save", fingerprint="cfg-1"
        )

        assert outcome.result is CloseResult.NOOP
        assert outcome.completed
        assert sup.pending_actions() == ()
        log.wait_for("action.result", action_id=outcome.action_id, result="noop")
        changed = sup.close(
            "invalidate_config", mode="maintenance", origin="settings.save", fingerprint="cfg-2"
        )
        assert changed.result is CloseResult.DEFERRED
        gate.open()
        handle.wait(10)
    assert sorted(disposed) == ["/w/a#1", "/w/b#1"]


def test_a_fingerprint_must_be_text() -> None:
    with Supervisor.start(SupervisorConfig(shutdown_at_exit=False)) as sup:
        with pytest.raises(InvalidRequest, match="fingerprint"):
            sup.close("dispose_all", mode="maintenance", origin="x", fingerprint=7)  # type: ignore[arg-type]
        with pytest.raises(InvalidRequest, match="fingerprint"):
            sup.load("/w/a", fingerprint=b"x")  # type: ignore[arg-type]


# --- in the scenario format --------------------------------------------------------------------------


def _close_doc(top: str = "", fingerprint: str | None = None) -> str:
    """r1 in /p, an invalidate_config at the start (with ``fingerprint``), and a cancel on its noop."""
    keys = {} if fingerprint is None else {"fingerprint": fingerprint}
    close = action(id="a1", when="begin", do="invalidate_config", mode="maintenance", **keys)
    cancel = action(when="a1.noop", do="cancel", run="r1")
    return top + story("t", run("r1", directory="/p"), close, cancel, directories=("/p",))


def test_a_scenario_close_with_a_fingerprint_may_wait_for_its_noop() -> None:
    text = _close_doc(top='fingerprints = { "/p" = "c1" }', fingerprint="c1")

    scenario = parse_scenario(text, file="t.toml", fmt="toml")

    assert scenario.actions[0].fingerprint == "c1"
    assert scenario.actions[1].when.result is CloseResult.NOOP
    assert dict(scenario.fingerprints) == {"/p": "c1"}


def test_a_scenario_close_without_a_fingerprint_can_never_be_a_noop() -> None:
    with pytest.raises(ScenarioFileError, match="can never give 'noop'") as caught:
        parse_scenario(_close_doc(), file="t.toml", fmt="toml")
    assert caught.value.key == "actions[1].when"


def test_a_scenario_fingerprint_for_a_directory_not_loaded_first_is_refused() -> None:
    text = _close_doc(top='fingerprints = { "/q" = "c1" }', fingerprint="c1")
    with pytest.raises(ScenarioFileError, match="not in directories") as caught:
        parse_scenario(text, file="t.toml", fmt="toml")
    assert caught.value.key == 'fingerprints."/q"'
