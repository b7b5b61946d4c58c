"""mypy over the package as a host imports it, from the files git tracks.

The package's modules live in three folders: ``src/run_supervisor/`` (the ``__init__``), ``actors/`` and
``protocol/``, joined into one namespace by pyproject.toml's ``[tool.setuptools.package-dir]``. mypy's own
search cannot follow that mapping (it finds ``run_supervisor.actors`` only in a folder
``run_supervisor/actors/``), so this tool names each file's module for mypy from the same two tables
setuptools reads (``packages`` and ``package-dir``), and passes the rest of the command line to mypy::

    .venv/bin/python scripts/typecheck.py --strict                  # the package
    .venv/bin/python scripts/typecheck.py --strict scripts/*.py     # the package and the tools

Errors name the tracked files (``actors/_api.py:12: error: ...``); the options come from
pyproject.toml's ``[tool.mypy]``, whatever the current folder (``--config-file`` overrides). The exit
status is mypy's: 0 clean, 1 errors, 2 a blocking error.
"""

from __future__ import annotations

import sys
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path

from mypy import build, util
from mypy.errors import CompileError
from mypy.main import process_options
from mypy.modulefinder import BuildSource

ROOT = Path(__file__).resolve().parents[1]


def package_folder(package: str, package_dir: Mapping[str, str], root: Path = ROOT) -> Path:
    """The folder of ``package`` by setuptools' rule: the longest mapped prefix, then one folder a name."""
    parts = package.split(".")
    for cut in range(len(parts), -1, -1):
        prefix = ".".join(parts[:cut])
        if prefix in package_dir:
            return root.joinpath(package_dir[prefix], *parts[cut:])
    return root.joinpath(*parts)


def package_sources(root: Path = ROOT) -> list[BuildSource]:
    """Every module the wheel ships, named as it is imported, at the path git tracks."""
    setuptools = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]
    sources = []
    for package in setuptools["packages"]:
        folder = package_folder(package, setuptools.get("package-dir", {}), root)
        for path in sorted(folder.glob("*.py")):
            module = package if path.stem == "__init__" else f"{package}.{path.stem}"
            sources.append(BuildSource(str(path), module))
    return sources


def main(argv: Sequence[str]) -> int:
    if not any(arg.startswith("--config-file") for arg in argv):  # the project's settings, from any folder
        argv = ["--config-file", str(ROOT / "pyproject.toml"), *argv]
    extra, options = process_options(list(argv), require_targets=False, program="scripts/typecheck.py")
    sources = package_sources() + extra
    formatter = util.FancyFormatter(sys.stdout, sys.stderr, options.hide_error_codes)
    messages: list[str] = []

    def flush(_filename: str | None, new: list[str], serious: bool) -> None:
        messages.extend(new)
        for line in new:
            shown = formatter.colorize(line) if options.color_output else line
            print(shown, file=sys.stderr if serious else sys.stdout)

    blockers = False
    try:
        build.build(sources, options, flush_errors=flush, stdout=sys.stdout, stderr=sys.stderr)
    except CompileError:
        blockers = True
    errors, _notes, files = util.count_stats(messages)
    if errors:
        color = options.color_output
        print(formatter.format_error(errors, files, len(sources), blockers=blockers, use_color=color))
    else:
        print(formatter.format_success(len(sources), options.color_output))
    return 2 if blockers else int(errors > 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
