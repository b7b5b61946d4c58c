"""Scenario tooling: read a scenario file, play it against a real supervisor, report what happened.

This subpackage is a *user* of the library: it reaches the supervisor only through the public API
(``run_supervisor`` and ``run_supervisor.protocol``), as any host would; a test forbids it any private
import from the rest of the package. The format is ``docs/scenario-format.md``; the command line is
``run-supervisor scenario`` (``actors/_cli.py``).

- ``_format``: the file format: read, validate (errors name the file and the key), frozen specs typed
  with the protocol's enums.
- ``_bodies``: what a scenario's runs and instances stand for (run bodies, instance hooks with faults).
- ``_play``: the play loop and its timeline (library events merged with the runner's own records).
- ``_report``: the report, msgspec Structs in the contract's JSON shape, and the ``[expect]`` checks.
"""

from run_supervisor.actors.scenarios._bodies import ScenarioFault, ScenarioHooks, make_body
from run_supervisor.actors.scenarios._format import (
    CLOSES,
    EVENT_FIELDS,
    MAX_MS,
    NONE,
    SHUTDOWNS,
    ActionDo,
    ActionSpec,
    Decision,
    EventExpectation,
    Expectation,
    ExpectationTarget,
    InstanceFaultSpec,
    PartExpectation,
    RetrySpec,
    RunSpec,
    RunStart,
    Scenario,
    ScenarioFileError,
    ScenarioResult,
    StepSpec,
    UserAction,
    When,
    WhenKind,
    action_do,
    load_scenario,
    parse_scenario,
    scenario_files,
    shutdown_reason,
)
from run_supervisor.actors.scenarios._play import play
from run_supervisor.actors.scenarios._report import (
    ActionReport,
    FolderReport,
    InvalidScenario,
    PartReport,
    RunReport,
    ScenarioReport,
    check_event_expectations,
    check_expectations,
    to_builtins,
)

__all__ = [
    "CLOSES",
    "EVENT_FIELDS",
    "MAX_MS",
    "NONE",
    "SHUTDOWNS",
    "ActionDo",
    "ActionReport",
    "ActionSpec",
    "Decision",
    "EventExpectation",
    "Expectation",
    "ExpectationTarget",
    "FolderReport",
    "InstanceFaultSpec",
    "InvalidScenario",
    "PartExpectation",
    "PartReport",
    "RetrySpec",
    "RunReport",
    "RunSpec",
    "RunStart",
    "Scenario",
    "ScenarioFault",
    "ScenarioFileError",
    "ScenarioHooks",
    "ScenarioReport",
    "ScenarioResult",
    "StepSpec",
    "UserAction",
    "When",
    "WhenKind",
    "action_do",
    "check_event_expectations",
    "check_expectations",
    "load_scenario",
    "make_body",
    "parse_scenario",
    "play",
    "scenario_files",
    "shutdown_reason",
    "to_builtins",
]
