"""A host with its own ``protocol.py`` and ``actors/`` uses the supervisor from a NON-editable install.

The project is copied (its tracked files) to a temporary folder, built and installed with pip into a
target folder (not editable: the package's files are copied), and a host program in another temporary
folder, next to its own ``protocol`` and ``actors`` modules, imports ``run_supervisor`` from there and
uses it: a supervisor, a run, a maintenance close that waits for the run, shutdown.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

HOST_PROTOCOL = '''"""The host's own protocol module: nothing to do with run_supervisor's."""

CloseOutcome = "the host's own CloseOutcome"


def handshake() -> str:
    return "host protocol"
'''

HOST_ACTORS = '''"""The host's own actors package."""

ROLE = "the host's own actors"
'''

HOST_APP = """
import json
import sys

import actors
import protocol

import run_supervisor
import run_supervisor.protocol as rs_protocol
from run_supervisor import CloseResult, Gate, Outcome, Supervisor

gate = Gate("tool")


def body(ctx):
    ctx.wait(gate)  # the tool call the maintenance close must not interrupt


with Supervisor.start(directories=["/proj/a"]) as supervisor:
    run = supervisor.start_run(body, session="s1", directory="/proj/a")
    close = supervisor.close("dispose_all", mode="maintenance", origin="settings.provider.connect")
    gate.open()
    finished = run.wait(timeout=30)
final = supervisor.shutdown()
print(json.dumps({
    "host_protocol": protocol.handshake(),
    "host_actors": actors.ROLE,
    "host_close_outcome": protocol.CloseOutcome,
    "library_close_outcome": rs_protocol.CloseOutcome.__name__,
    "run_supervisor_file": run_supervisor.__file__,
    "close": [close.result == CloseResult.DEFERRED, list(close.blocking_runs) == [run.run_id]],
    "run": finished.outcome == Outcome.COMPLETED,
    "shutdown": final.result == CloseResult.FORCED,
    "closed": supervisor.closed,
}))
"""


def _copy_project(to: Path) -> None:
    """The tracked files only: no virtualenv, no build output, no caches."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=False, timeout=30)
    if listed.returncode != 0:
        pytest.skip("not a git checkout: cannot tell the project's files from build output")
    for name in listed.stdout.decode().split("\0"):
        if not name:
            continue
        source, target = ROOT / name, to / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():
            target.symlink_to(os.readlink(source))
        elif source.is_file():
            shutil.copy2(source, target)


def _pip_install(project: Path, target: Path) -> None:
    """Non-editable, without dependencies (the test's interpreter has them). Prefer the build tools at
    hand; fall back to pip's isolated build (which may fetch setuptools and wheel) where they fall short."""
    base = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), str(project)]
    attempts = [[*base[:4], "--no-build-isolation", *base[4:]], base]
    errors = []
    for command in attempts:
        done = subprocess.run(command, capture_output=True, text=True, timeout=180, check=False)
        if done.returncode == 0:
            return
        errors.append(done.stderr[-2000:])
        shutil.rmtree(target, ignore_errors=True)
    pytest.fail("pip could not install the project:\n" + "\n---\n".join(errors))


@pytest.mark.timeout(240)
def test_a_host_with_its_own_protocol_and_actors_uses_a_non_editable_install(tmp_path: Path) -> None:
    project, site, host = tmp_path / "project", tmp_path / "site", tmp_path / "host"
    _copy_project(project)
    _pip_install(project, site)
    installed = site / "run_supervisor"
    assert (installed / "actors" / "scenarios" / "_play.py").is_file()
    assert not (installed / "actors").is_symlink(), "a non-editable install holds copies, not links"

    (host / "actors").mkdir(parents=True)
    (host / "protocol.py").write_text(HOST_PROTOCOL)
    (host / "actors" / "__init__.py").write_text(HOST_ACTORS)
    (host / "app.py").write_text(HOST_APP)
    env = {**os.environ, "PYTHONPATH": str(site), "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("PYTHONSAFEPATH", None)  # the host's folder must come first, as in a real host
    done = subprocess.run(
        [sys.executable, "app.py"], cwd=host, env=env, capture_output=True, text=True, timeout=60, check=False
    )

    assert done.returncode == 0, done.stderr
    assert done.stderr == ""  # the library is silent by default
    seen = json.loads(done.stdout)
    assert Path(seen.pop("run_supervisor_file")).is_relative_to(site)
    assert seen == {
        "host_protocol": "host protocol",
        "host_actors": "the host's own actors",
        "host_close_outcome": "the host's own CloseOutcome",
        "library_close_outcome": "CloseOutcome",
        "close": [True, True],
        "run": True,
        "shutdown": True,
        "closed": True,
    }
