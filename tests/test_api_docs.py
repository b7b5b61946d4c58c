"""docs/api.md documents every public name: a name added to the package without a line there fails here."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import run_supervisor

API_DOC = (Path(__file__).resolve().parents[1] / "docs" / "api.md").read_text()
# What the page shows as code: fenced blocks and `inline` spans.
CODE = "\n".join(re.findall(r"```.*?```", API_DOC, flags=re.S) + re.findall(r"`([^`\n]+)`", API_DOC))

CLASSES = [
    "Supervisor",
    "AsyncSupervisor",
    "RunHandle",
    "AsyncRunHandle",
    "Subscription",
    "AsyncSubscription",
    "RunContext",
    "ToolCall",
    "Gate",
    "CancelToken",
    "PermissionReply",
    "AsyncRunContext",
    "AsyncToolCall",
    "AsyncAsk",
    "Ask",
]


def _mentioned(name: str) -> bool:
    return re.search(rf"(?<![A-Za-z0-9_]){re.escape(name)}(?![A-Za-z0-9_])", CODE) is not None


@pytest.mark.parametrize("name", run_supervisor.__all__)
def test_every_public_name_of_the_package_is_documented_in_api_md(name: str) -> None:
    assert _mentioned(name), f"docs/api.md never shows `{name}`"


def _members(owner: str) -> list[str]:
    return sorted(m for m in dir(getattr(run_supervisor, owner)) if not m.startswith("_"))


MEMBERS = [(owner, member) for owner in CLASSES for member in _members(owner)]
MEMBERS += [("SupervisorConfig", field) for field in run_supervisor.SupervisorConfig.model_fields]


@pytest.mark.parametrize(("owner", "member"), MEMBERS)
def test_every_public_method_and_setting_is_documented_in_api_md(owner: str, member: str) -> None:
    assert _mentioned(member), f"docs/api.md never shows {owner}.{member}"


EXAMPLES = Path(__file__).resolve().parents[1] / "docs" / "examples"
MYPY_STRICT_NO_CONFIG = [sys.executable, "-m", "mypy", "--strict", "--config-file", ""]  # no plugins


def test_the_host_examples_pass_mypy_strict_against_the_installed_package_without_plugins(
    tmp_path: Path,
) -> None:
    pytest.importorskip("mypy")
    done = subprocess.run(
        [*MYPY_STRICT_NO_CONFIG, "--cache-dir", str(tmp_path)]
        + [str(EXAMPLES / name) for name in ("typed_host.py", "asyncio_host.py")],
        cwd=tmp_path,  # nothing local to find: the package comes from the environment, as in a host
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_typed_host_example_runs() -> None:
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "typed_host.py")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == [
        "bash ran",
        "mode must be one of maintenance, user_confirmed_interrupt; got 'maintenace'",
    ]


def test_the_asyncio_host_example_runs_async_bodies_closes_and_an_event_stream() -> None:
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "asyncio_host.py")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    for expected in ("close: deferred, waiting for run-1", "tool card: bash ran", "second run: user_cancel"):
        assert expected in lines
    assert lines[-1] == "shut down"  # after the stream ended, with the shutdown's last events
    assert any(line.endswith("lifecycle.completed") for line in lines)
    assert done.stderr == ""
