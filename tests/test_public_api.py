"""The public surface is what it is documented to be, so a name appearing or disappearing is a change a
reviewer sees: the package's names are the names docs/reference.md documents (every actors name is one of
them, tests/test_package_names.py), and the protocol's are pinned in tests/protocol_names.txt."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import run_supervisor
from run_supervisor import actors, protocol

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "docs" / "reference.md"
PROTOCOL_NAMES = Path(__file__).with_name("protocol_names.txt")
PACKAGES = {
    "run_supervisor": run_supervisor,
    "run_supervisor.actors": actors,
    "run_supervisor.protocol": protocol,
}


def _python(code: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout, check=False
    )


def test_the_package_offers_exactly_the_names_its_reference_documents() -> None:
    documented = set(re.findall(r"^### `(\w+)`$", REFERENCE.read_text(encoding="utf-8"), re.MULTILINE))
    offered = set(run_supervisor.__all__)
    assert offered - documented == set(), "exported, not in docs/reference.md (scripts/gen_reference.py)"
    assert documented - offered == set(), "in docs/reference.md, no longer exported"


def test_the_protocol_exports_the_names_pinned_for_it() -> None:
    pinned = PROTOCOL_NAMES.read_text(encoding="utf-8").split()
    write = "import run_supervisor.protocol as p; print(*sorted(p.__all__), sep='\\n')"
    assert sorted(protocol.__all__) == pinned, f'if intended: python -c "{write}" > tests/protocol_names.txt'


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_each_name_a_package_exports_is_listed_once_and_resolves(package: str) -> None:
    module = PACKAGES[package]
    assert len(set(module.__all__)) == len(module.__all__)
    assert [name for name in module.__all__ if not hasattr(module, name)] == []


def test_the_protocol_exports_only_what_it_defines() -> None:
    """A module imported whole exports its own __all__: no helper it imported leaks out through it."""
    foreign = {
        name: value.__module__
        for name in protocol.__all__
        if isinstance(value := getattr(protocol, name), type) or callable(value)
        if not getattr(value, "__module__", "run_supervisor.protocol").startswith("run_supervisor.protocol")
    }
    assert foreign == {}


def test_the_protocol_imports_without_pykka_loguru_or_threads() -> None:
    done = _python(
        "import sys, threading; import run_supervisor.protocol; "
        "assert 'pykka' not in sys.modules, 'protocol pulled in pykka'; "
        "assert 'loguru' not in sys.modules, 'protocol pulled in loguru'; "
        "assert threading.active_count() == 1"
    )
    assert done.returncode == 0, done.stderr


def test_the_library_logs_nothing_unless_the_host_enables_it() -> None:
    done = _python(
        "import loguru, run_supervisor; "
        "from run_supervisor import Supervisor, SupervisorConfig; "
        "s = Supervisor.start(SupervisorConfig(shutdown_at_exit=False), directories=['/a']); "
        "s.start_run(lambda ctx: 1 / 0, session='s', directory='/a').wait(2); "
        "s.shutdown(grace_ms=100)"
    )
    assert (done.returncode, done.stderr, done.stdout) == (0, "", "")


def test_an_unshut_supervisor_does_not_hang_interpreter_exit() -> None:
    done = _python(
        "from run_supervisor import Supervisor, Gate; "
        "s = Supervisor.start(directories=['/a']); "
        "s.start_run(lambda ctx: ctx.wait(Gate('never')), session='s', directory='/a')",
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
