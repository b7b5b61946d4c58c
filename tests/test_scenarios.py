"""Every scenario of the library in docs/scenarios, played by the suite against real actors."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from run_supervisor.actors.scenarios import load_scenario, play, scenario_files

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


@pytest.mark.parametrize("path", scenario_files(LIBRARY), ids=lambda p: p.stem)
def test_every_library_scenario_passes_and_its_report_has_the_promised_shape(path: Path) -> None:
    report: dict[str, Any] = play(load_scenario(path), timeout=10)
    assert report["failures"] == []
    assert report["passed"] is True
    assert CHECKER.problems(report) == []


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
