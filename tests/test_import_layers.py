"""The house reads in the order of the flow: every import inside the package goes down or sideways, never up.

The folders map to the package as pyproject.toml says (``actors/`` is ``run_supervisor.actors``, ``protocol/``
is ``run_supervisor.protocol``); this reads each tracked module's imports with ``ast`` (nothing is run) and
places each module on its floor:

0. ``protocol``: the pure core (no actor, no thread);
1. the actor shell (every other ``actors`` module);
2. the facades (``_api``, ``_async_api`` and ``run_supervisor.actors`` itself);
3. the wire hosts (``actors/hosts/``);
4. the scenario tooling (``actors/scenarios/``);
5. the test tools and the command line (``testing``, ``pytest_plugin``, ``_cli``).

No module inside imports the top package ``run_supervisor`` (which only hands the names on).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = {"actors": "run_supervisor.actors", "protocol": "run_supervisor.protocol"}
FACADES = {"_api", "_async_api", "_link"}
TOOLS = {"testing", "pytest_plugin", "_cli"}
FLOORS = (
    "the pure core",
    "the actor shell",
    "the facades",
    "the wire hosts",
    "the scenario tooling",
    "the test tools",
)


def _floor(module: str) -> int:
    parts = module.split(".")
    if parts[1] == "protocol":
        return 0
    rest = parts[2:]
    if not rest or rest[0] in FACADES:
        return 2
    if rest[0] == "hosts":
        return 3
    if rest[0] == "scenarios":
        return 4
    if rest[0] in TOOLS:
        return 5
    return 1


def _modules() -> dict[str, tuple[Path, bool]]:
    found: dict[str, tuple[Path, bool]] = {}
    for folder, package in FOLDERS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
            is_package = parts[-1] == "__init__"
            if is_package:
                parts = parts[:-1]
            found[".".join([package, *parts])] = (path, is_package)
    return found


MODULES = _modules()


def _imports(module: str) -> list[tuple[int, str]]:
    path, is_package = MODULES[module]
    here = module if is_package else module.rsplit(".", 1)[0]
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here.split(".")[: len(here.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            # ``from package import submodule`` imports the submodule
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                found.append((node.lineno, sub if sub in MODULES else target))
    return [(line, name) for line, name in found if name == "run_supervisor" or name in MODULES]


def test_the_floors_cover_every_module_and_the_package_reads_from_its_folders() -> None:
    assert "run_supervisor.actors._api" in MODULES and "run_supervisor.protocol._core" in MODULES
    assert {_floor(module) for module in MODULES} == set(range(len(FLOORS)))


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_import_runs_back_up(module: str) -> None:
    upward = [
        f"{MODULES[module][0].relative_to(ROOT)}:{line} imports {target}"
        + ("" if target == "run_supervisor" else f" ({FLOORS[_floor(target)]})")
        for line, target in _imports(module)
        if target == "run_supervisor" or _floor(target) > _floor(module)
    ]
    assert upward == [], f"{module} is on the floor of {FLOORS[_floor(module)]}"
