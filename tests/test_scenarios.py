"""Every scenario of the library in docs/scenarios, played by the suite against real actors."""

from __future__ import annotations

import ast
import importlib
import importlib.util
from pathlib import Path
from types import ModuleType

import pytest
from scenario_support import LIBRARY_FILES, action, library_report, run, story

from run_supervisor.actors.scenarios import load_scenario, play, scenario_files, to_builtins

ROOT = Path(__file__).resolve().parents[1]
LIBRARY = ROOT / "docs" / "scenarios"
SHARED_CHECKER = ROOT.parent / "shared" / "contracts" / "check-report.py"
VENDORED_CHECKER = Path(__file__).with_name("contract_check_report.py")


def _load_checker(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location("check_report", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


CHECKER = _load_checker(VENDORED_CHECKER)


@pytest.mark.parametrize("path", LIBRARY_FILES, ids=lambda p: p.stem)
def test_every_library_scenario_passes_and_its_report_has_the_promised_shape(path: Path) -> None:
    report = library_report(path)
    assert report.failures == []
    assert report.passed is True
    assert CHECKER.problems(to_builtins(report)) == []


def test_the_library_reproduces_both_seed_incidents_and_shows_every_mode_and_reason() -> None:
    scenarios = [load_scenario(p) for p in scenario_files(LIBRARY)]
    modes = {a.mode for s in scenarios for a in s.actions if a.mode} | {
        a.do for s in scenarios for a in s.actions if a.do in ("shutdown", "test_teardown")
    }
    assert modes == {"maintenance", "user_confirmed_interrupt", "shutdown", "test_teardown"}
    reasons = {
        str(e.fields["reason"]) for s in scenarios for e in s.expect if e.fields.get("reason") is not None
    }
    assert reasons >= {
        "user_cancel",
        "permission_rejected",
        "form_dismissed",
        "lifecycle_interrupt",
        "shutdown",
        "test_teardown",
    }
    origins = {a.origin for s in scenarios for a in s.actions}
    assert "settings.provider.connect" in origins  # calm-river: provider connect -> dispose_all
    reloads = [a for s in scenarios for a in s.actions if a.do == "reload" and a.mode == "maintenance"]
    assert reloads  # silent-eagle: an instance reload


@pytest.mark.skipif(not SHARED_CHECKER.exists(), reason="no shared contract folder beside this checkout")
def test_the_vendored_report_checker_is_the_contract_s_own() -> None:
    assert VENDORED_CHECKER.read_text() == SHARED_CHECKER.read_text()


# ----------------------------------------------------------------------------------------------------
# The scenario tooling is a user of the library: public API only

SCENARIOS_PACKAGE = "run_supervisor.actors.scenarios"


def private_imports(source: str) -> list[str]:
    """Imports in ``source`` that reach past the public API of the rest of run_supervisor: a module with
    a ``_``-prefixed part, or a name its module does not export (``__all__``)."""
    offences: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            imported = [(alias.name, None) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                offences.append(f"relative import from {'.' * node.level}{node.module or ''}")
                continue
            imported = [(node.module or "", alias.name) for alias in node.names]
        else:
            continue
        for module, name in imported:
            if not module.startswith("run_supervisor") or module.startswith(SCENARIOS_PACKAGE):
                continue
            if any(part.startswith("_") for part in module.split(".")):
                offences.append(f"import of the private module {module}")
            elif name is not None and name not in importlib.import_module(module).__all__:
                offences.append(f"{name} from {module} (not in its __all__)")
    return offences


def test_the_import_check_catches_private_modules_private_names_and_unexported_names() -> None:
    source = (
        "from run_supervisor.actors._api import Supervisor\n"
        "from run_supervisor.protocol import _core\n"
        "from run_supervisor import Supervisor, _HOME\n"
        "import run_supervisor.actors._subscription\n"
        "from run_supervisor.actors.scenarios._format import _key\n"
        "from run_supervisor.protocol import CloseMode\n"
        "from run_supervisor.protocol.testing import InvariantChecker\n"
    )
    assert private_imports(source) == [
        "import of the private module run_supervisor.actors._api",
        "_core from run_supervisor.protocol (not in its __all__)",
        "_HOME from run_supervisor (not in its __all__)",
        "import of the private module run_supervisor.actors._subscription",
    ]


def _scenario_tooling() -> list[Path]:
    """The scenario tooling's modules. A tree without them (an unpacked sdist, say) fails here, at
    collection, rather than passing the check below by collecting no case."""
    folder = ROOT / "actors" / "scenarios"
    found = sorted(folder.rglob("*.py"))
    if not found:
        pytest.fail(f"no scenario tooling under {folder}: not the repository's tree", pytrace=False)
    return found


@pytest.mark.parametrize("path", _scenario_tooling(), ids=lambda p: p.name)
def test_the_scenario_tooling_uses_only_the_public_api_of_the_rest_of_the_package(path: Path) -> None:
    assert private_imports(path.read_text()) == []


SHARED_FORMAT = ROOT.parent / "shared" / "contracts" / "scenario-format.md"


@pytest.mark.skipif(not SHARED_FORMAT.exists(), reason="no shared contract folder beside this checkout")
def test_the_project_s_scenario_format_holds_the_whole_contract_in_order() -> None:
    ours = (ROOT / "docs" / "scenario-format.md").read_text().splitlines()
    position = 0
    for line in SHARED_FORMAT.read_text().splitlines()[1:]:  # the title differs
        if not line.strip():
            continue
        assert line in ours[position:], (
            f"docs/scenario-format.md lacks, or reorders, the contract's line: {line}"
        )
        position = ours.index(line, position) + 1


# Strings in the scenario code that equal a protocol enum value but are not its vocabulary: key names of the
# format (`error`, `answer`, `completed` of an [expect] entry; the `.completed` of a `when`; an action's
# `run`, also LoadCause.RUN; a model step's `retry` list) and the WhenKind `run_finished`, and the format's
# own Decision `reject` (a reply; the protocol's WhenBusy.REJECT is a queue rule's value, which the format
# never spells), and `none`, the format's word for null in [expect] (GraceClock.NONE is a grace rule's).
NOT_VOCABULARY = {"error", "answer", "completed", "run_finished", "reject", "run", "retry", "none"}


def test_the_scenario_code_spells_none_of_the_protocol_s_vocabulary_it_uses_the_enums() -> None:
    from enum import StrEnum

    from run_supervisor import protocol

    values = {
        member.value: f"{name}.{member.name}"
        for name in protocol.__all__
        if isinstance(enum := getattr(protocol, name), type) and issubclass(enum, StrEnum)
        for member in enum
    }
    spelled = []
    for path in sorted((ROOT / "actors" / "scenarios").glob("*.py")):
        tree = ast.parse(path.read_text())
        docstrings = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef)
            and node.body
            and isinstance(node.body[0], ast.Expr)
        }
        spelled += [
            f"{path.name}:{node.lineno}: {node.value!r} is {values[node.value]}"
            for node in ast.walk(tree)
            if isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and node.value in values
            and node.value not in NOT_VOCABULARY
            and id(node) not in docstrings
        ]
    assert spelled == []


def test_an_answer_never_comes_before_the_events_its_request_caused(tmp_path: Path) -> None:
    # go starts r2 behind r1 (queued); stop cancels r1: each one's action.result follows what it caused.
    text = story(
        "answers after their events",
        run("r1", '{ kind = "model", gate = "g" }', directory="/p"),
        run("r2", directory="/p", start="manual"),
        action(id="go", when="r1.model.started", do="start_run", run="r2"),
        action(id="stop", when="go.ok", do="cancel", run="r1"),
        '[expect]\nr1 = { outcome = "interrupted", reason = "user_cancel", action = "stop" }\n'
        'r2 = { outcome = "completed" }\n',
        directories=(),
    )
    path = tmp_path / "answers.toml"
    path.write_text(text)
    report = play(load_scenario(path), timeout=10)
    assert report.failures == []
    rows = [(e["type"], e.get("run"), e.get("action")) for e in report.events]
    assert rows.index(("run.queued", "r2", None)) < rows.index(("action.result", None, "go"))
    assert rows.index(("action.result", None, "go")) < rows.index(("action.result", None, "stop"))
