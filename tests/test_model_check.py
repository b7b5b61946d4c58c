"""The exhaustive model check of the decision core (scripts/model_check.py), in a bounded form.

Each scope explores every interleaving of its requests and reports from the initial state,
breadth-first with state hashing, and checks the one oracle (``InvariantChecker``) after every step
and, at the deepest level, after driving each state to its end. The script goes deeper (its
figures are in docs/reliability.md); here the README's test command runs each scope shallow (a few
seconds in all) and the deep layer (``RUN_SUPERVISOR_DEEP=1 pytest -m deep``, in CI) a level or two
deeper (about two minutes on a loaded 2-core machine).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from layers import pick

from run_supervisor.protocol import Command, Emit, LifecycleCompleted, Report, Request, SupervisorCore

ROOT = Path(__file__).resolve().parents[1]


def _load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("model_check", ROOT / "scripts" / "model_check.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["model_check"] = module  # dataclasses and pickle look the module up by name
    spec.loader.exec_module(module)
    return module


mc = _load_script()

BOUNDED = pick(
    # scope, depth, at least this many distinct states (the search really ran)
    smoke=[
        ("full", 2, 200),  # the widest alphabets one level less (depth 3: 4 s of CPU for full alone)
        ("closes", 2, 150),
        ("decisions", 3, 150),
        ("queues", 2, 120),
        ("children", 3, 400),
        ("stalls", 3, 300),
        ("stalled-trees", 3, 200),
        ("reloads", 3, 800),
        ("deadlines", 3, 400),
        ("abandons", 3, 500),
    ],
    deep=[
        ("full", 4, 25_000),
        ("closes", 4, 8_000),
        ("decisions", 5, 3_500),
        ("queues", 4, 8_000),
        ("children", 5, 8_000),
        ("stalls", 4, 2_000),
        ("stalled-trees", 5, 8_000),
        ("reloads", 4, 4_000),
        ("deadlines", 5, 8_000),
        ("abandons", 4, 7_000),
    ],
)

pytestmark = [pytest.mark.timeout(600), pytest.mark.deep]


@pytest.mark.parametrize(("scope", "depth", "at_least"), BOUNDED, ids=[b[0] for b in BOUNDED])
def test_every_interleaving_of_a_scope_keeps_every_invariant(scope: str, depth: int, at_least: int) -> None:
    result = mc.explore(depth, mc.SCOPES[scope])
    assert [(v.path, v.problems) for v in result.violations] == []
    assert result.reached_depth == depth
    assert result.states >= at_least, result.as_dict()
    assert result.drains == result.frontier[-1] > 0


class ForgetfulCore(SupervisorCore):
    """A planted bug: the core never publishes ``lifecycle.completed``."""

    @staticmethod
    def _forget(commands: list[Command]) -> list[Command]:
        return [c for c in commands if not (isinstance(c, Emit) and isinstance(c.event, LifecycleCompleted))]

    def request(self, request: Request, reply_to: Any) -> list[Command]:
        return self._forget(super().request(request, reply_to))

    def report(self, report: Report) -> list[Command]:
        return self._forget(super().report(report))


def test_the_search_finds_a_planted_bug_with_the_shortest_path_to_it() -> None:
    result = mc.explore(2, mc.SCOPES["closes"], core=ForgetfulCore)
    assert result.violations, "the planted bug went unnoticed"
    shortest = result.violations[0]
    # Closing the declared, never loaded /w/b completes at once: one step shows the hole in seq.
    assert len(shortest.path) == 1, shortest
    assert any("seq" in problem for problem in shortest.problems), shortest.problems
