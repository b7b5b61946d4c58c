"""``run-supervisor scenario``: reports, exit statuses and the --timeout hang guard."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest
from scenario_support import run, run_cli, story

from run_supervisor.actors._cli import main
from run_supervisor.actors.scenarios._format import MAX_FILE_BYTES

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
        {"tool": "bash", "state": "completed", "tool_started": True, "label": "bash ran", "call_id": "call-1"}
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
    done = run_cli("scenario", str(path), "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["passed"] is True
    assert done.stderr == ""  # the library is silent by default


# ----------------------------------------------------------------------------------------------------
# Whatever the input, never a traceback: exit 2 with one line naming the file and the key

BASE = story("one run", run("r1"), directories=())


def refused(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """Run the CLI, expect exit 2; return its one line on stderr."""
    code = main(["scenario", *argv])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.endswith("\n") and err.count("\n") == 1, err
    assert "Traceback" not in err
    return err


@pytest.mark.parametrize("value", ["inf", "-inf", "1e10", "1e300", "nan", "0", "-1", "ten"])
def test_a_timeout_that_is_not_a_sane_number_of_seconds_exits_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str
) -> None:
    path = write(tmp_path, "ok.toml", BASE)
    code = main(["scenario", str(path), "--json", f"--timeout={value}"])
    captured = capsys.readouterr()
    assert code == 2
    assert captured.err.startswith("run-supervisor: --timeout must be") and captured.err.count("\n") == 1
    assert "--timeout" in json.loads(captured.out)["error"]


def test_the_largest_timeout_is_one_day(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["scenario", str(write(tmp_path, "ok.toml", BASE)), "--timeout", "86400"]) == 0
    assert "at most 86400" in refused(capsys, str(tmp_path / "ok.toml"), "--timeout", "86400.5")


def test_an_integer_too_long_to_convert_is_refused_naming_the_key_in_toml(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    huge = "9_" * 4400 + "9"  # 4401 nines, with the underscores TOML allows
    text = BASE.replace('"model" }', '"model", ms = -' + huge + " }").replace(
        '"one run"', '"' + "9" * 5000 + '"'
    )
    err = refused(capsys, str(write(tmp_path, "big.toml", text)))
    assert "big.toml: runs[0].steps[0].ms: an integer of 4401 digits" in err


def test_an_integer_too_long_to_convert_is_refused_naming_the_key_in_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    document = json.dumps(tomllib.loads(BASE)).replace('"model"}', '"model", "ms": ' + "9" * 5000 + "}")
    err = refused(capsys, str(write(tmp_path, "big.json", document)))
    assert "big.json: runs[0].steps[0].ms: an integer of 5000 digits" in err


@pytest.mark.parametrize("key", ["ms", "grace_ms", "dispose_ms"])
def test_a_duration_at_int64_max_is_refused_at_validation_not_at_run_time(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], key: str
) -> None:
    huge = 2**63 - 1
    text = {
        "ms": BASE.replace('"model" }', f'"model", ms = {huge} }}'),
        "grace_ms": BASE + f'[[actions]]\nwhen = "begin"\ndo = "shutdown"\ngrace_ms = {huge}\n',
        "dispose_ms": BASE + f'[instance_faults."/proj/a"]\ndispose_ms = {huge}\n',
    }[key]
    err = refused(capsys, str(write(tmp_path, "huge.toml", text)))
    assert "huge.toml" in err and f"{key}: must be at most 86400000" in err


def test_an_empty_directory_is_refused_naming_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    err = refused(capsys, str(write(tmp_path, "empty.toml", BASE.replace('"/proj/a"', '""'))))
    assert "empty.toml: runs[0].directory: must not be empty" in err


def test_an_action_whose_when_names_itself_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = BASE + '[[actions]]\nid = "a1"\nwhen = "a1.deferred"\ndo = "dispose_all"\nmode = "maintenance"\n'
    err = refused(capsys, str(write(tmp_path, "self.toml", text)))
    assert (
        "self.toml: actions[0].when: 'a1.deferred' can never come: an action cannot wait for its own" in err
    )


def test_actions_that_wait_for_each_other_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = BASE + (
        '[[actions]]\nid = "a1"\nwhen = "a2.ok"\ndo = "cancel"\nrun = "r1"\n'
        '[[actions]]\nid = "a2"\nwhen = "a1.ok"\ndo = "cancel"\nrun = "r1"\n'
    )
    err = refused(capsys, str(write(tmp_path, "loop.toml", text)))
    assert "loop.toml: actions[0].when: 'a2.ok' can never come: it waits for 'a2' which waits for 'a1'" in err


def test_a_lone_surrogate_in_a_name_is_refused_naming_the_key_without_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    document = json.dumps(tomllib.loads(BASE)).replace('"one run"', '"one \\ud800 run"')
    err = refused(capsys, str(write(tmp_path, "surrogate.json", document)))
    assert "surrogate.json: name: holds a lone surrogate ('\\ud800')" in err


def test_a_file_name_that_is_not_utf8_is_printed_escaped_not_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    raw = os.path.join(os.fsencode(tmp_path), b"caf\xe9.toml")
    with open(raw, "w") as file:
        file.write(BASE)
    assert main(["scenario", os.fsdecode(raw)]) == 0
    assert "caf\\udce9.toml" in capsys.readouterr().out


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this system")
def test_a_fifo_as_path_is_refused_at_once_instead_of_waiting_for_a_writer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fifo = tmp_path / "pipe.toml"
    os.mkfifo(fifo)
    assert "pipe.toml: not a regular file (a FIFO)" in refused(capsys, str(fifo))
    code = main(["scenario", str(tmp_path)])  # listed in a folder too, and refused the same way
    assert code == 2
    assert "pipe.toml: not a regular file (a FIFO)" in capsys.readouterr().err


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="no /dev/zero on this system")
def test_a_symlink_to_dev_zero_is_refused_instead_of_read_forever(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    link = tmp_path / "zero.toml"
    link.symlink_to("/dev/zero")
    assert "zero.toml: not a regular file (a character device)" in refused(capsys, str(link))


def test_a_file_longer_than_the_bound_is_refused_without_reading_it_all(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, "long.toml", BASE + "#" * MAX_FILE_BYTES + "\n")
    assert f"long.toml: the file is longer than {MAX_FILE_BYTES} bytes" in refused(capsys, str(path))


def test_a_path_through_a_file_exits_2_naming_the_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(tmp_path, "ok.toml", BASE)
    assert "ok.toml/x.toml: cannot read it: Not a directory" in refused(
        capsys, str(tmp_path / "ok.toml" / "x.toml")
    )


# Root reads every file: to meet a real PermissionError, the CLI runs in a child that gives up the two
# capabilities that let root ignore permission bits (dropped from its bounding set, then exec).
_WITHOUT_FILE_PRIVILEGES = """
import ctypes, os, sys
if os.geteuid() == 0:
    libc = ctypes.CDLL(None, use_errno=True)
    for capability in (1, 2):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH
        if libc.prctl(24, capability, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
            sys.exit(77)
os.execv(sys.executable, [sys.executable, "-m", "run_supervisor.actors._cli", *sys.argv[1:]])
"""


def cli_without_file_privileges(*argv: str) -> subprocess.CompletedProcess[str]:
    if sys.platform != "linux":
        pytest.skip("drops Linux capabilities to meet permission bits as root")
    done = subprocess.run(
        [sys.executable, "-c", _WITHOUT_FILE_PRIVILEGES, *argv],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if done.returncode == 77:
        pytest.skip("this process may not drop CAP_DAC_OVERRIDE, so it reads files whatever their mode")
    return done


@pytest.fixture
def locked(tmp_path: Path) -> Iterator[Path]:
    """A folder holding one scenario, then made unreadable (mode 000); restored afterwards."""
    folder = tmp_path / "locked"
    folder.mkdir()
    write(folder, "ok.toml", BASE)
    folder.chmod(0)
    yield folder
    folder.chmod(0o755)


def test_an_unreadable_folder_exits_2_with_one_line_naming_it(locked: Path) -> None:
    done = cli_without_file_privileges("scenario", str(locked), "--json")
    assert done.returncode == 2, done.stderr
    assert done.stderr == f"run-supervisor: {locked}: cannot read the folder: Permission denied\n"
    assert json.loads(done.stdout)["error"].endswith("cannot read the folder: Permission denied")


def test_a_file_in_an_unreadable_folder_exits_2_with_one_line_naming_it(locked: Path) -> None:
    done = cli_without_file_privileges("scenario", str(locked / "ok.toml"))
    assert done.returncode == 2, done.stderr
    assert done.stderr == f"run-supervisor: {locked / 'ok.toml'}: cannot read it: Permission denied\n"


def test_an_unreadable_file_exits_2_with_one_line_naming_it(tmp_path: Path) -> None:
    path = write(tmp_path, "secret.toml", BASE)
    path.chmod(0)
    done = cli_without_file_privileges("scenario", str(path))
    assert done.returncode == 2, done.stderr
    assert done.stderr == (
        f"run-supervisor: invalid scenario file: {path}: cannot read the file: Permission denied\n"
    )
