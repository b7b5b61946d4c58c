"""Scenario tooling: read a scenario file, play it against a real supervisor, report what happened.

This subpackage is a *user* of the library: it reaches the supervisor only through the public API
(``run_supervisor`` and ``run_supervisor.protocol``), as any host would. The format is
``docs/scenario-format.md``; the command line is ``run-supervisor scenario`` (``actors/_cli.py``).
"""

from run_supervisor.actors.scenarios._format import (
    ActionSpec,
    Expectation,
    InstanceFaultSpec,
    PartExpectation,
    RunSpec,
    Scenario,
    ScenarioFileError,
    StepSpec,
    When,
    load_scenario,
    parse_scenario,
    scenario_files,
)
from run_supervisor.actors.scenarios._play import ScenarioFault, make_body, play

__all__ = [
    "ActionSpec",
    "Expectation",
    "InstanceFaultSpec",
    "PartExpectation",
    "RunSpec",
    "Scenario",
    "ScenarioFault",
    "ScenarioFileError",
    "StepSpec",
    "When",
    "load_scenario",
    "make_body",
    "parse_scenario",
    "play",
    "scenario_files",
]
