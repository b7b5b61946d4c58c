"""How the package is made and installed: one namespace from three tracked folders, and no links.

pyproject.toml maps ``run_supervisor`` to ``src/run_supervisor/``, ``run_supervisor.actors`` to ``actors/``
and ``run_supervisor.protocol`` to ``protocol/``. What that must give: git tracks no link (a clone without
symlink support has the whole package); the package list names every package folder; this checkout's own
install imports the tracked files, so tracebacks and coverage name them; the sdist carries what builds the
wheel and no tests; the wheel built from it holds every tracked file of the three folders, as copies; and a
host program with its own ``protocol.py`` and ``actors/``, next to a NON-editable install of that wheel,
uses the supervisor and type-checks against it.
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest
from layers import deep_only

import run_supervisor
from run_supervisor.protocol import ProtocolDecodeError, decode_request

ROOT = Path(__file__).resolve().parents[1]
SETUPTOOLS = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
FOLDERS: dict[str, str] = SETUPTOOLS["package-dir"]  # package -> the folder git keeps it in
EXAMPLES = ROOT / "docs" / "examples"

HOST_PROTOCOL = '''"""The host's own protocol module: nothing to do with run_supervisor's."""

CloseOutcome = "the host's own CloseOutcome"


def handshake() -> str:
    return "host protocol"
'''

HOST_ACTORS = '''"""The host's own actors package."""

ROLE = "the host's own actors"
'''

HOST_APP = """
import importlib
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


def _tracked() -> list[str]:
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=False, timeout=30)
    if listed.returncode != 0:
        pytest.skip("not a git checkout: cannot tell the project's files from build output")
    return [name for name in listed.stdout.decode().split("\0") if name]


def _shipped(tracked: list[str]) -> dict[str, str]:
    """Each tracked file of the three folders, by its path inside the installed package."""
    shipped = {}
    for package, folder in FOLDERS.items():
        for name in tracked:
            if name.startswith(folder + "/"):
                shipped[package.replace(".", "/") + name.removeprefix(folder)] = name
    return shipped


def test_git_tracks_no_symbolic_link() -> None:
    listed = subprocess.run(
        ["git", "ls-files", "-s"], cwd=ROOT, capture_output=True, text=True, check=False, timeout=30
    )
    if listed.returncode != 0:
        pytest.skip("not a git checkout")
    links = [line.split("\t")[1] for line in listed.stdout.splitlines() if line.startswith("120000 ")]
    assert links == []


def test_the_package_list_names_every_package_folder_of_the_three_folders() -> None:
    found = {
        ".".join((package, *init.parent.relative_to(ROOT / folder).parts))
        for package, folder in FOLDERS.items()
        for init in (ROOT / folder).rglob("__init__.py")
    }
    assert sorted(found) == sorted(SETUPTOOLS["packages"])


def test_this_checkout_s_install_imports_the_files_git_tracks_and_tracebacks_name_them() -> None:
    if Path(run_supervisor.__file__).resolve() != ROOT / "src" / "run_supervisor" / "__init__.py":
        pytest.skip(f"run_supervisor is not this checkout's editable install: {run_supervisor.__file__}")
    for module in ("actors.hosts", "actors.scenarios", "protocol.testing"):
        importlib.import_module(f"run_supervisor.{module}")
    tracked = set(_tracked())
    files = {
        module: Path(value.__file__).relative_to(ROOT).as_posix()
        for module, value in sorted(sys.modules.items())
        if (module == "run_supervisor" or module.startswith("run_supervisor.")) and value.__file__
    }
    assert {module: name for module, name in files.items() if name not in tracked} == {}
    assert files["run_supervisor.actors._api"] == "actors/_api.py"
    with pytest.raises(ProtocolDecodeError) as raised:
        decode_request(b"{")
    assert Path(raised.traceback[-1].path).relative_to(ROOT).as_posix() in tracked


def _copy_project(to: Path) -> None:
    """The tracked files only: no virtualenv, no build output, no caches."""
    for name in _tracked():
        source, target = ROOT / name, to / name
        if source.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)


def of_the_build(test: Callable[..., None]) -> Callable[..., None]:
    """A test of the built sdist or wheel: deep_only (tests/layers.py; `python -m build` takes a minute on
    a loaded machine, so the README's command skips it and CI's deep layer runs it), on the one worker
    of its xdist_group (which builds once), within 300 s."""
    for mark in (pytest.mark.timeout(300), pytest.mark.xdist_group("built"), pytest.mark.deep, deep_only):
        test = mark(test)
    return test


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The sdist, and the wheel ``python -m build`` builds from that sdist (not from the tree)."""
    project, out = tmp_path_factory.mktemp("project"), tmp_path_factory.mktemp("dist")
    _copy_project(project)
    done = subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(out), str(project)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (sdist,), (wheel,) = sorted(out.glob("*.tar.gz")), sorted(out.glob("*.whl"))
    return sdist, wheel


@pytest.fixture(scope="module")
def site(built: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel installed, not editable, without dependencies (the test's interpreter has them)."""
    target = tmp_path_factory.mktemp("site")
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target)]
    done = subprocess.run([*pip, str(built[1])], capture_output=True, text=True, timeout=180, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return target


@of_the_build
def test_the_sdist_carries_the_three_folders_and_no_tests(built: tuple[Path, Path]) -> None:
    with tarfile.open(built[0]) as sdist:
        names = {member.name.split("/", 1)[1] for member in sdist.getmembers() if "/" in member.name}
    tracked = _tracked()
    assert set(_shipped(tracked).values()) <= names
    assert {"pyproject.toml", "README.md"} <= names
    assert sorted({name.split("/")[0] for name in names} & {"tests", "docs", "scripts"}) == []


@of_the_build
def test_the_wheel_built_from_the_sdist_holds_every_tracked_file_of_the_three_folders_as_copies(
    built: tuple[Path, Path], site: Path
) -> None:
    with zipfile.ZipFile(built[1]) as wheel:
        packaged = {name for name in wheel.namelist() if not name.split("/")[0].endswith(".dist-info")}
    assert sorted(packaged) == sorted(_shipped(_tracked()))
    installed = site / "run_supervisor"
    assert [path for path in installed.rglob("*") if path.is_symlink()] == []


@of_the_build
def test_a_host_with_its_own_protocol_and_actors_uses_a_non_editable_install(
    site: Path, tmp_path: Path
) -> None:
    host = tmp_path / "host"
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


@of_the_build
def test_the_host_examples_pass_mypy_strict_against_a_non_editable_install_without_plugins(
    site: Path, tmp_path: Path
) -> None:
    """A type checker reads folders, not import hooks: a host type-checks against an installed copy (an
    editable install is a finder that mypy cannot see)."""
    pytest.importorskip("mypy")
    env = {**os.environ, "PYTHONPATH": str(site)}  # the copy comes before the test interpreter's packages
    mypy = [sys.executable, "-m", "mypy", "--strict", "--config-file", ""]  # no plugins
    done = subprocess.run(
        [*mypy, "--cache-dir", str(tmp_path / "cache")]
        + [str(EXAMPLES / name) for name in ("typed_host.py", "asyncio_host.py")],
        cwd=tmp_path,  # nothing local to find: the package comes from the install, as in a host
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
