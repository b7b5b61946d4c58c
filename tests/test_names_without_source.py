"""The lazy packages still import where only their bytecode ships (a .pyc-only install, a frozen app)."""

from __future__ import annotations

import compileall
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_package_imports_from_bytecode_alone_with_every_public_name(tmp_path: Path) -> None:
    site = tmp_path / "site" / "run_supervisor"
    shutil.copytree(ROOT / "src" / "run_supervisor", site)
    shutil.copytree(ROOT / "actors", site / "actors", ignore=shutil.ignore_patterns("client", "__pycache__"))
    shutil.copytree(ROOT / "protocol", site / "protocol", ignore=shutil.ignore_patterns("__pycache__"))
    assert compileall.compile_dir(site, quiet=1, legacy=True)  # legacy: foo.pyc beside where foo.py was
    for source in site.rglob("*.py"):
        source.unlink()
    probe = (
        "import run_supervisor, run_supervisor.actors as a;"
        "names = set(run_supervisor.__all__);"
        "assert {'Supervisor', 'AsyncSupervisor', 'SupervisorConfig'} <= names, names;"
        "assert run_supervisor.Supervisor is a.Supervisor;"
        "print(len(names))"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {str(tmp_path / 'site')!r}); {probe}"],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) > 50
