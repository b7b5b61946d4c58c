"""The suite's two layers. The README's test command runs every test, the generative and repeated ones
as a shallow smoke; CI also runs the tests marked ``deep`` at full depth::

    RUN_SUPERVISOR_DEEP=1 .venv/bin/python -m pytest -m deep

Both layers make the same assertions: only how far a search goes, how many sequences a state machine
tries and how often a race is repeated differ. The few tests too slow for a smoke (building the sdist
and the wheel) are ``deep_only``: the deep layer runs them, the README's command skips them, saying so.

A run of the whole suite (no path given) spreads its test files over one worker a core (pytest-xdist,
``spread_over_workers``); a run of chosen files stays in one process.
"""

from __future__ import annotations

import os
from typing import Any, TypeVar

import pytest

T = TypeVar("T")

DEEP = os.environ.get("RUN_SUPERVISOR_DEEP", "") not in ("", "0")

deep_only = pytest.mark.skipif(
    not DEEP, reason="the deep layer runs it (RUN_SUPERVISOR_DEEP=1 pytest -m deep)"
)
"""For a test with no shallow form: skipped by the README's command (mark it ``deep`` too)."""


def pick(smoke: T, deep: T) -> T:
    """``deep`` in the deep layer, ``smoke`` otherwise."""
    return deep if DEEP else smoke


def spread_over_workers(config: Any) -> bool:
    """Whether this run goes to one worker a core: the whole suite (no path given, as in the README's
    command and CI's deep layer), with pytest-xdist there, and neither ``-n`` (``-n 0``: one process)
    nor ``--pdb`` given, and not already in a worker. Most tests wait on subprocesses, servers and
    threads, so two workers take far less than one on two cores. Tests go to the worker that is free
    (``--dist loadgroup``: the long scopes of one file run side by side), except those of one
    ``xdist_group``, which share a worker so that their module fixture is built once (the sdist)."""
    option = config.option
    return bool(
        config.args_source is pytest.Config.ArgsSource.TESTPATHS
        and config.pluginmanager.has_plugin("xdist")
        and getattr(option, "numprocesses", 0) is None
        and not option.usepdb
        and not hasattr(config, "workerinput")
    )
