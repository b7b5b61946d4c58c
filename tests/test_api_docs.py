"""The host examples of docs/ type-check and run (every public name's documentation is
tests/test_reference.py's)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[1] / "docs" / "examples"


def run_example(name: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(EXAMPLES / name)], capture_output=True, text=True, timeout=60, check=False
    )


def test_the_typed_host_example_runs() -> None:
    done = run_example("typed_host.py")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == [
        "bash ran",
        "mode must be one of maintenance, user_confirmed_interrupt; got 'maintenace'",
    ]


def test_the_asyncio_host_example_runs_async_bodies_closes_and_an_event_stream() -> None:
    done = run_example("asyncio_host.py")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    for expected in ("close: deferred, waiting for run-1", "tool card: bash ran", "second run: user_cancel"):
        assert expected in lines
    assert lines[-1] == "shut down"  # after the stream ended, with the shutdown's last events
    assert any(line.endswith("lifecycle.completed") for line in lines)
    assert done.stderr == ""
