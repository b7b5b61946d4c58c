"""Scenario files for the tests, written from parts: a story's head, its ``[[runs]]`` and ``[[actions]]``
tables, and the two ways a test reads one (played against real actors, or refused naming its key)."""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from run_supervisor.actors.scenarios import (
    ScenarioFileError,
    ScenarioReport,
    load_scenario,
    parse_scenario,
    play,
    scenario_files,
)

LIBRARY = Path(__file__).resolve().parents[1] / "docs" / "scenarios"
LIBRARY_FILES = scenario_files(LIBRARY)
"""The scenario library (docs/scenarios), in its order."""

# Steps, as TOML inline tables.
MODEL = '{ kind = "model" }'
INPUT = '{ kind = "tool_input", tool = "bash" }'
EXEC = '{ kind = "tool_exec", tool = "bash" }'


def _keys(keys: dict[str, Any]) -> str:
    """TOML ``key = value`` lines (JSON scalars and lists of scalars are TOML too)."""
    return "".join(f"{name} = {json.dumps(value)}\n" for name, value in keys.items())


def story(name: str, *tables: str, directories: tuple[str, ...] = ("/proj/a",)) -> str:
    """A scenario named ``name`` over ``directories`` (none: nothing is loaded first), then ``tables``."""
    head = f'\nname = "{name}"\n'
    if directories:
        head += f"directories = {json.dumps(list(directories))}\n"
    return head + "".join("\n" + table for table in tables)


def run(id: str, *steps: str, session: str = "s1", directory: str = "/proj/a", **keys: Any) -> str:
    """A ``[[runs]]`` table: its place, ``keys``, then ``steps`` (inline tables; one model step when none)."""
    head = f'[[runs]]\nid = "{id}"\nsession = "{session}"\ndirectory = "{directory}"\n'
    return f"{head}{_keys(keys)}steps = [{', '.join(steps or (MODEL,))}]\n"


def action(**keys: Any) -> str:
    """An ``[[actions]]`` table."""
    return "[[actions]]\n" + _keys(keys)


def swap(text: str, old: str, new: str, count: int = -1) -> str:
    """``text`` with ``old`` replaced by ``new``: ``old`` must be there (else the change tests nothing)."""
    assert old in text, f"{old!r} is not in the scenario"
    return text.replace(old, new, count)


def played(text: str) -> ScenarioReport:
    return play(parse_scenario(text, file="story.toml", fmt="toml"), timeout=10)


def refused(text: str) -> ScenarioFileError:
    with pytest.raises(ScenarioFileError) as caught:
        parse_scenario(text, file="story.toml", fmt="toml")
    assert caught.value.file == "story.toml"
    return caught.value


def assert_refused(text: str, key: str, says: str) -> None:
    """``text`` is refused naming ``key``, with a message that says ``says``."""
    error = refused(text)
    assert error.key == key
    assert says in error.message


@functools.cache
def library_report(path: Path) -> ScenarioReport:
    """The report of one play of a library scenario, played once in a process for every test that reads
    it (each reads what must hold on every play; none changes the report)."""
    return play(load_scenario(path), timeout=10)


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """``run-supervisor ARGS`` as a real process (bounded: 60 s)."""
    return subprocess.run(
        [sys.executable, "-m", "run_supervisor.actors._cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
