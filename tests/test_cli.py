"""``run-supervisor scenario``: reports, exit statuses and the --timeout hang guard."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from run_supervisor.actors._cli import main

EXAMPLE = (Path(__file__).parent / "data" / "contract-example.toml").read_text()  # the contract's own

HANGS = """
name = "a run held at a gate nothing opens"
[[runs]]
id = "r1"
session = "s1"
directory = "/proj/a"
steps = [{ kind = "tool_input", tool = "bash", gate = "never" }, { kind = "tool_exec", tool = "bash" }]
"""


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_the_contract_example_passes_with_exit_0_and_a_json_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["scenario", str(write(tmp_path, "ex.toml", EXAMPLE)), "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0
    assert report["passed"] is True
    assert report["runs"]["r1"]["tool_parts"] == [
        {"tool": "bash", "state": "completed", "tool_started": True, "label": "bash ran"}
    ]
    assert report["actions"]["a1"]["completed_directories"] == ["/proj/b"]
    assert report["actions"]["action-2"] == {"do": "open_gate", "result": "ok"}
    assert [e["seq"] for e in report["events"]] == list(range(1, len(report["events"]) + 1))


def test_a_failed_expectation_exits_1_and_says_what_did_not_hold(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = EXAMPLE.replace('r1 = { outcome = "completed" }', 'r1 = { outcome = "interrupted" }')
    code = main(["scenario", str(write(tmp_path, "bad.toml", text))])
    out = capsys.readouterr().out
    assert code == 1
    assert "r1: expected outcome 'interrupted', got 'completed'" in out
    assert out.rstrip().endswith("FAIL  provider connect while a tool call is being generated")


def test_the_timeout_tears_a_hung_scenario_down_and_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["scenario", str(write(tmp_path, "hang.toml", HANGS)), "--json", "--timeout", "0.3"])
    report = json.loads(capsys.readouterr().out)
    assert code == 1
    assert report["passed"] is False
    run = report["runs"]["r1"]
    assert (run["outcome"], run["reason"], run["phase"]) == ("interrupted", "timeout", "generating")
    assert run["tool_parts"][0]["state"] == "interrupted"
    assert any("r1" in f and "timeout" in f for f in report["failures"])


def test_an_invalid_file_exits_2_naming_the_file_and_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, "typo.toml", EXAMPLE.replace('do = "dispose_all"', 'do = "dispose_everything"'))
    code = main(["scenario", str(path), "--json"])
    captured = capsys.readouterr()
    assert code == 2
    assert "typo.toml" in captured.err and "actions[0].do" in captured.err
    assert "error" in json.loads(captured.out)


def test_a_folder_plays_every_file_sorted_and_an_invalid_one_makes_it_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(tmp_path, "b.toml", EXAMPLE)
    write(tmp_path, "a.json", "{not json")
    code = main(["scenario", str(tmp_path), "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 2
    assert out["passed"] is False
    assert out["scenarios"][0]["file"].endswith("a.json") and "error" in out["scenarios"][0]
    assert out["scenarios"][1]["passed"] is True


def test_a_folder_of_passing_scenarios_exits_0_and_prints_a_verdict_per_scenario(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(tmp_path, "one.toml", EXAMPLE)
    write(tmp_path, "two.json", json.dumps(__import__("tomllib").loads(EXAMPLE)))
    code = main(["scenario", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0
    assert out.count("PASS  provider connect") == 2
    assert out.rstrip().endswith("2 passed, 0 failed")


def test_a_missing_path_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["scenario", str(tmp_path / "nope.toml")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_the_console_script_runs_as_a_real_process(tmp_path: Path) -> None:
    path = write(tmp_path, "ex.toml", EXAMPLE)
    done = subprocess.run(
        [sys.executable, "-m", "run_supervisor.actors._cli", "scenario", str(path), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["passed"] is True
    assert done.stderr == ""  # the library is silent by default
