"""Logging a host can route: one call sends the library's records to the standard ``logging``
module, and importing the library adds no handler to a logger it does not own."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

ROUTED = textwrap.dedent(
    """
    import json, logging, sys
    import run_supervisor
    from run_supervisor import Supervisor, SupervisorConfig, log_to_stdlib

    class Keep(logging.Handler):
        def __init__(self):
            super().__init__()
            self.records = []
        def emit(self, record):
            self.records.append(record)

    keep = Keep()
    logging.getLogger("run_supervisor").addHandler(keep)
    logging.getLogger("run_supervisor").setLevel(logging.DEBUG)

    class Broken:
        def load(self, directory, generation):
            raise RuntimeError("no config file")
        def dispose(self, directory, generation, cache):
            pass

    def start_and_stop():
        sup = Supervisor.start(SupervisorConfig(shutdown_at_exit=False), hooks=Broken())
        try:
            sup.load("/a")
        except Exception:
            pass
        sup.shutdown(grace_ms=100)

    start_and_stop()
    silent = len(keep.records)  # before the call: nothing
    handler = log_to_stdlib()
    start_and_stop()
    import loguru
    loguru.logger.remove(handler)
    routed = [r for r in keep.records[silent:] if "failed" in r.getMessage()]
    print(json.dumps({
        "silent": silent,
        "names": sorted({r.name for r in routed}),
        "levels": sorted({r.levelname for r in routed}),
        "exc": [r.exc_info is not None and r.exc_info[0].__name__ for r in routed],
    }))
    """
)


def test_log_to_stdlib_routes_the_librarys_records_to_standard_logging_by_module_name() -> None:
    done = subprocess.run(
        [sys.executable, "-c", ROUTED], capture_output=True, text=True, timeout=60, check=True
    )
    seen = json.loads(done.stdout)
    assert seen["silent"] == 0
    assert seen["names"] == ["run_supervisor.actors._instance_actor"]
    assert seen["levels"] == ["WARNING"]
    assert seen["exc"] and all(name == "RuntimeError" for name in seen["exc"])
    assert done.stderr == ""  # routed to logging's handlers, not printed by loguru's default sink


def test_importing_the_library_adds_no_handler_to_the_pykka_logger() -> None:
    code = (
        "import logging, pykka; before = list(logging.getLogger('pykka').handlers); "
        "import run_supervisor, run_supervisor.actors; from run_supervisor import Supervisor; "
        "s = Supervisor.start(directories=['/a']); s.shutdown(grace_ms=0); "
        "assert logging.getLogger('pykka').handlers == before, logging.getLogger('pykka').handlers; "
        "assert logging.getLogger().handlers == [], logging.getLogger().handlers"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


A_RECORD = textwrap.dedent(
    """
    from run_supervisor import Supervisor, SupervisorConfig

    class Broken:
        def load(self, directory, generation):
            raise RuntimeError("no config file")
        def dispose(self, directory, generation, cache):
            pass

    sup = Supervisor.start(SupervisorConfig(shutdown_at_exit=False), hooks=Broken())
    try:
        sup.load("/a")  # the library logs the failed load (a warning)
    except Exception:
        pass
    sup.shutdown(grace_ms=100)
    """
)
"""A host's program that makes the library log one record, loguru's default sink (stderr) still installed."""


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )


@pytest.mark.parametrize("first", ["loguru", "run_supervisor"])
def test_the_library_stays_silent_whichever_of_it_and_loguru_is_imported_first(first: str) -> None:
    second = "run_supervisor" if first == "loguru" else "loguru"
    done = _run(f"import {first}, {second}\n{A_RECORD}")
    assert (done.stdout, done.stderr) == ("", "")


def test_a_host_that_enables_the_library_after_importing_both_gets_its_first_record() -> None:
    """The library imports loguru only for its first record: a host's enable() made before that wins."""
    done = _run(f"import run_supervisor\nimport loguru\nloguru.logger.enable('run_supervisor')\n{A_RECORD}")
    assert "no config file" in done.stderr
