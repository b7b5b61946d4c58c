"""Build a one-file executable of ``run-supervisor`` with PyInstaller: the sidecar a desktop app ships.

    python scripts/build_binary.py [--out dist] [--work build/binary]

Makes a virtual environment of its own under ``--work`` (PyInstaller and a non-editable install of this
checkout with the ``server`` extra: what the binary holds is what ``pip install .`` installs), then runs
PyInstaller on a two-line entry point. Prints one JSON line: the binary's path and size. The binary is
for the platform it is built on (PyInstaller does not cross-compile): build it on each platform the app
ships for (Linux, macOS, Windows), e.g. one CI job each. ``run-supervisor serve`` and ``stdio`` work as
from the installed script. A one-file binary unpacks itself to a temporary folder at every start;
``--onedir`` makes a folder instead (``dist/run-supervisor/run-supervisor`` beside its libraries), which
starts without unpacking: what an app bundle that ships a folder anyway wants.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYINSTALLER = "pyinstaller>=6.10,<7"
ENTRY = "from run_supervisor.actors._cli import main\n\nraise SystemExit(main())\n"
# What PyInstaller cannot see by reading imports: uvicorn picks its loop and protocols by name at run
# time, and the package's modules are imported lazily (the top package's lazy map, the CLI's commands).
COLLECT = ("run_supervisor", "uvicorn")


def _bin(env: Path, name: str) -> Path:
    return env / ("Scripts" if os.name == "nt" else "bin") / (name + (".exe" if os.name == "nt" else ""))


def build(out: Path, work: Path, *, onedir: bool = False) -> Path:
    env = work / "venv"
    if not _bin(env, "python").exists():
        venv.create(env, with_pip=True)
    python = str(_bin(env, "python"))
    pip = [python, "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    subprocess.run([*pip, PYINSTALLER, f"{ROOT}[server]"], check=True, timeout=600)
    entry = work / "run_supervisor_entry.py"
    entry.write_text(ENTRY)
    collect = [arg for name in COLLECT for arg in ("--collect-submodules", name)]
    subprocess.run(
        [
            python, "-m", "PyInstaller", "--onedir" if onedir else "--onefile",
            "--noconfirm", "--clean", "--log-level", "WARN",
            "--name", "run-supervisor", "--distpath", str(out), "--workpath", str(work / "pyinstaller"),
            "--specpath", str(work), *collect, "--collect-data", "run_supervisor", str(entry),
        ],
        check=True,
        timeout=900,
    )  # fmt: skip
    name = "run-supervisor.exe" if os.name == "nt" else "run-supervisor"
    binary = out / "run-supervisor" / name if onedir else out / name
    if not binary.exists():
        raise SystemExit(f"build_binary: PyInstaller made no {binary}")
    return binary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "dist", help="where the binary goes (dist/)")
    parser.add_argument("--work", type=Path, default=ROOT / "build" / "binary", help="the build's own folder")
    parser.add_argument(
        "--onedir",
        action="store_true",
        help="a folder with the executable and its libraries instead of one file: no unpacking at each start",
    )
    args = parser.parse_args(argv)
    started = time.monotonic()
    binary = build(args.out.resolve(), args.work.resolve(), onedir=args.onedir)
    size = binary.stat().st_size
    took = round(time.monotonic() - started, 1)
    figures = {"binary": str(binary), "bytes": size, "mib": round(size / 2**20, 1), "build_s": took}
    print(json.dumps({**figures, "python": sys.version.split()[0]}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
