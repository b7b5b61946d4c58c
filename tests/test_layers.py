"""The suite's layers (tests/layers.py): which runs spread over one worker a core."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from layers import spread_over_workers

WHOLE = pytest.Config.ArgsSource.TESTPATHS


def config(
    source: Any = WHOLE, *, xdist: bool = True, n: int | None = None, pdb: bool = False, worker: bool = False
) -> Any:
    made = SimpleNamespace(
        args_source=source,
        pluginmanager=SimpleNamespace(has_plugin=lambda name: xdist and name == "xdist"),
        option=SimpleNamespace(numprocesses=n, usepdb=pdb),
    )
    if worker:
        made.workerinput = {}
    return made


def test_the_whole_suite_spreads_over_the_workers() -> None:
    assert spread_over_workers(config()) is True


@pytest.mark.parametrize(
    "run",
    [
        pytest.param(config(pytest.Config.ArgsSource.ARGS), id="chosen-files"),
        pytest.param(config(xdist=False), id="without-xdist"),
        pytest.param(config(n=0), id="given-n-0"),
        pytest.param(config(n=3), id="given-n-3"),
        pytest.param(config(pdb=True), id="pdb"),
        pytest.param(config(worker=True), id="in-a-worker"),
    ],
)
def test_chosen_files_a_given_n_pdb_and_a_worker_stay_in_one_process(run: Any) -> None:
    assert spread_over_workers(run) is False
