"""The packages' public names are written once, as the imports type checkers read, and resolved on first
use at run time (actors/_names.py): the same names, the same objects, and no pykka before a facade name is
used."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import run_supervisor
from run_supervisor import actors, protocol

ROOT = Path(__file__).resolve().parents[1]


def _python(code: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-c", code]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)


def test_the_package_s_names_are_the_actors_names_and_a_part_of_the_protocol_s() -> None:
    names = set(run_supervisor.__all__)
    assert len(names) == len(run_supervisor.__all__)
    assert set(actors.__all__) <= names
    assert names - set(actors.__all__) <= set(protocol.__all__)
    assert {"Supervisor", "AsyncSupervisor", "CloseMode", "part_label"} <= names


@pytest.mark.parametrize("name", run_supervisor.__all__)
def test_each_name_of_the_package_is_its_home_s_object(name: str) -> None:
    home = actors if name in actors.__all__ else protocol
    assert getattr(run_supervisor, name) is getattr(home, name)


def test_an_unknown_name_is_an_attribute_error_naming_it() -> None:
    with pytest.raises(AttributeError, match="module 'run_supervisor' has no attribute 'Supervisr'"):
        run_supervisor.Supervisr  # noqa: B018


def test_the_package_starts_no_pykka_until_a_name_of_the_shell_is_used() -> None:
    code = (
        "import sys, run_supervisor; "
        "assert 'pykka' not in sys.modules, 'import'; "
        "assert set(run_supervisor.__all__) <= set(dir(run_supervisor)); "
        "assert 'pykka' not in sys.modules, 'dir'; "
        "run_supervisor.CloseMode; "
        "assert 'pykka' not in sys.modules, 'a protocol name'; "
        "run_supervisor.Supervisor; "
        "assert 'pykka' in sys.modules, 'a shell name'"
    )
    done = _python(code)
    assert done.returncode == 0, done.stderr


LAZY_PACKAGES = ["run_supervisor", "run_supervisor.actors", "run_supervisor.actors.hosts"]


@pytest.mark.parametrize("package", LAZY_PACKAGES)
def test_without_its_source_a_package_imports_its_names_at_once_and_exports_the_same(package: str) -> None:
    """A frozen app may ship bytecode only: the names cannot be read, so the imports run."""
    folder = package.rsplit(".", 1)[-1]
    code = f"""
import pathlib, sys
real = pathlib.Path.read_text
def read_text(self, *args, **kwargs):
    if self.name == "__init__.py" and self.parent.name == {folder!r}:
        raise OSError("no source")
    return real(self, *args, **kwargs)
pathlib.Path.read_text = read_text
import {package} as package
assert "pykka" in sys.modules
print(" ".join(package.__all__))
"""
    done = _python(code)
    assert done.returncode == 0, done.stderr
    assert sorted(done.stdout.split()) == sorted(importlib.import_module(package).__all__)


def test_the_actors_package_starts_no_pykka_until_one_of_its_names_is_used() -> None:
    code = (
        "import sys, run_supervisor.actors as actors; "
        "assert 'pykka' not in sys.modules, 'import'; "
        "assert set(actors.__all__) <= set(dir(actors)); "
        "actors.Gate; "
        "assert 'pykka' in sys.modules, 'a name'"
    )
    done = _python(code)
    assert done.returncode == 0, done.stderr


@pytest.mark.timeout(180)
def test_a_type_checker_rejects_a_name_the_package_does_not_export(tmp_path: Path) -> None:
    """The run-time lookup is hidden from type checkers, which would take any unknown name for Any."""
    pytest.importorskip("mypy")
    probe = tmp_path / "probe.py"
    probe.write_text(
        "from run_supervisor import Supervisor, Supervisr\n"
        "import run_supervisor\n"
        "supervisor: Supervisor\n"
        "run_supervisor.CloseMod\n"
    )
    typecheck = [sys.executable, str(ROOT / "scripts" / "typecheck.py"), "--strict"]
    done = subprocess.run(
        [*typecheck, "--cache-dir", str(tmp_path), str(probe)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=170,
        check=False,
    )
    errors = [line for line in done.stdout.splitlines() if line.startswith(str(probe))]
    assert len(errors) == 2, done.stdout + done.stderr
    assert 'Module "run_supervisor" has no attribute "Supervisr"' in errors[0]
    assert 'Module has no attribute "CloseMod"' in errors[1]
