"""Make the timeline pictures the docs link: one PNG per library scenario (docs/scenarios/timelines/)
and one of the live page during a deferred close (docs/images/timeline-live.png).

Needs Debian's `chromium` (headless). Usage: .venv/bin/python scripts/timeline_pictures.py [PREFIX...]
(with prefixes, only the library scenarios whose name starts with one, e.g. `43 44`; no live page).
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx

from run_supervisor.actors import RunHandle, Supervisor, SupervisorConfig
from run_supervisor.actors._cli import main as cli
from run_supervisor.actors.hosts import ServerThread, WireHost
from run_supervisor.actors.hosts._timeline import CHROMIUM_FLAGS

ROOT = Path(__file__).resolve().parent.parent


def shoot(url: str, target: Path, size: str) -> None:
    binary = shutil.which("chromium")
    if binary is None:
        sys.exit("chromium is not installed (apt-get install -y chromium)")
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run(
            [
                binary,
                *CHROMIUM_FLAGS,
                "--hide-scrollbars",
                f"--user-data-dir={profile}",
                f"--window-size={size}",
                f"--screenshot={target}",
                url,
            ],
            check=True,
            capture_output=True,
            timeout=120,
        )
    print(f"{target.relative_to(ROOT)}  {target.stat().st_size // 1024} KiB")


def scenarios(out: Path, only: tuple[str, ...] = ()) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as pages:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            cli(["scenario", "docs/scenarios", "--html", pages])  # from ROOT: relative names on the pages
        for page in sorted(Path(pages).glob("*.html")):
            if only and not page.stem.startswith(only):
                continue
            shoot(page.as_uri(), out / f"{page.stem}.png", "960,520")


def live(target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    sup = Supervisor.start(SupervisorConfig(shutdown_at_exit=False))
    host = WireHost(sup)
    sup.load("/proj/a", "/proj/b")
    server = ServerThread(host).start()
    try:
        with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {server.token}"}) as client:
            client.post("/runs", json={"run_id": "r1", "session": "s1", "directory": "/proj/b"})
            for state in ("pending", "prepared", "running", "completed"):
                client.post("/runs/r1/reports", json={"type": "part", "tool": "read", "state": state})
            client.post("/runs/r1/reports", json={"type": "end"})
            RunHandle(sup, "r1").wait(timeout=10)
            client.post("/runs", json={"run_id": "r2", "session": "s2", "directory": "/proj/a"})
            client.post("/runs/r2/reports", json={"type": "step", "kind": "model"})
            client.post("/runs/r2/reports", json={"type": "part", "tool": "bash", "state": "pending"})
            client.post(
                "/global/dispose", headers={"x-opencode-client-action-kind": "settings.provider.connect"}
            )
            shoot(f"{server.url}/#token={server.token}", target, "1000,560")
    finally:
        sup.shutdown(grace_ms=200)
        host.hub.join(5.0)
        server.stop()


if __name__ == "__main__":
    os.chdir(ROOT)
    prefixes = tuple(sys.argv[1:])
    if not prefixes:
        live(ROOT / "docs/images/timeline-live.png")
    scenarios(ROOT / "docs/scenarios/timelines", prefixes)
