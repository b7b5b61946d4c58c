"""The decision core's modules import in one direction: the records (runs, parts, asks, sessions)
are a floor below the mixins that decide with them, so no module of ``protocol`` stands in an
import circle -- the type checker's imports included."""

from __future__ import annotations

from test_import_circles import _circles, _graph


def test_no_module_of_the_decision_core_stands_in_an_import_circle() -> None:
    core = "run_supervisor.protocol."
    assert [group for group in _circles(_graph()) if any(m.startswith(core) for m in group)] == []


def test_the_asks_are_decided_above_the_records_that_hold_them() -> None:
    graph = _graph()
    assert "run_supervisor.protocol._records" in graph["run_supervisor.protocol._asks"]
    assert "run_supervisor.protocol._asks" not in graph["run_supervisor.protocol._records"]
