"""``run-supervisor serve`` reaches its ready line having imported what its first request needs and not the
rest: the asyncio facade, the shards, the scenario tooling, the test tools, the stdio host, the OpenAPI
document, the journals and SQLite (without ``--journal``), loguru and pydantic (the scenario format's; the
config is a msgspec struct) are each imported where they are first used.
How long the start takes is a benchmark figure (scripts/bench.py, ``cold_start_ratio``), not a test."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

NOT_NEEDED_AT_START = (
    "run_supervisor.actors._async_api",
    "run_supervisor.actors._shards",
    "run_supervisor.actors.scenarios",
    "run_supervisor.actors.testing",
    "run_supervisor.actors.pytest_plugin",
    "run_supervisor.actors.hosts._stdio",
    "run_supervisor.actors.hosts._openapi",
    "run_supervisor.actors._pg_journal",
    "loguru",
    "pydantic",
)
"""What no request needs before a first one arrives: loaded by the call that uses it (loguru by the first
record the library makes; it stays silent all the same, actors/_logging.py)."""

JOURNAL = ("run_supervisor.actors._journal", "sqlite3")
"""What only a start with ``--journal`` needs."""


def _imported_by_the_ready_line(tmp_path: Path, *args: str) -> set[str]:
    """Every module ``serve`` imported by the time its ready line was read (``python -X importtime``)."""
    timings = tmp_path / "importtime.txt"
    command = [sys.executable, "-X", "importtime", "-m", "run_supervisor.actors._cli", "serve", "--port", "0"]
    with timings.open("w", encoding="utf-8") as stderr:
        proc = subprocess.Popen([*command, *args], stdout=subprocess.PIPE, stderr=stderr, text=True)
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            assert line.startswith('{"ready"'), line
        finally:
            proc.kill()  # no shutdown: what it would import to stop is not part of the start
            proc.wait(timeout=30)
    return {
        row.rsplit("|", 1)[1].strip()
        for row in timings.read_text(encoding="utf-8").splitlines()
        if row.startswith("import time:") and "|" in row
    }


@pytest.mark.timeout(120)
def test_serve_is_ready_without_the_tools_its_first_request_does_not_need(tmp_path: Path) -> None:
    imported = _imported_by_the_ready_line(tmp_path)
    assert "run_supervisor.actors.hosts._http" in imported  # what the first request needs is there
    assert sorted(imported & set(NOT_NEEDED_AT_START)) == []


@pytest.mark.timeout(120)
def test_serve_without_a_journal_is_ready_without_loading_sqlite(tmp_path: Path) -> None:
    assert sorted(_imported_by_the_ready_line(tmp_path) & set(JOURNAL)) == []


@pytest.mark.timeout(120)
def test_serve_with_a_journal_loads_it_before_its_ready_line(tmp_path: Path) -> None:
    imported = _imported_by_the_ready_line(tmp_path, "--journal", str(tmp_path / "runs.db"))
    assert set(JOURNAL) <= imported
    assert sorted(imported & set(NOT_NEEDED_AT_START)) == []
