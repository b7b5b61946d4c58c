"""The TypeScript client (actors/hosts/client): its types are those the OpenAPI document generates, it
type-checks under ``tsc --strict``, and its own tests (``node --test``) pass against a real
``run-supervisor serve`` and the stdio sidecar. Needs node and npm (skipped without them); ``npm ci``
runs once, and again only when the lock file changed (the client folder keeps its node_modules)."""

from __future__ import annotations

import fcntl
import filecmp
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CLIENT = ROOT / "actors" / "hosts" / "client"


def _node_major() -> int:
    if shutil.which("node") is None or shutil.which("npm") is None:
        return 0
    done = subprocess.run(["node", "--version"], capture_output=True, text=True, timeout=30, check=False)
    return int(done.stdout.strip().lstrip("v").split(".")[0] or 0) if done.returncode == 0 else 0


pytestmark = pytest.mark.skipif(_node_major() < 20, reason="the client needs Node 20 or later, and npm")


def _run(
    args: list[str], timeout: float, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args, cwd=CLIENT, capture_output=True, text=True, timeout=timeout, check=False, env=env
    )


@pytest.fixture(scope="module")
def installed() -> Path:
    """node_modules from the lock file (``npm ci``), kept while the lock file is unchanged."""
    stamp = CLIENT / "node_modules" / ".package-lock.json"
    lock = CLIENT / "package-lock.json"
    # One npm ci at a time: two test runs on one checkout would each empty node_modules under the other.
    with open(Path(tempfile.gettempdir()) / "run-supervisor-client-npm-ci.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        if not stamp.exists() or stamp.stat().st_mtime < lock.stat().st_mtime:
            done = _run(["npm", "ci", "--no-audit", "--no-fund"], timeout=240)
            assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return CLIENT / "node_modules" / ".bin"


@pytest.mark.timeout(300)
def test_the_client_and_the_examples_type_check_under_tsc_strict(installed: Path) -> None:
    done = _run([str(installed / "tsc"), "-p", "tsconfig.json"], timeout=240)
    assert done.returncode == 0, done.stdout[-5000:] + done.stderr[-3000:]


@pytest.mark.timeout(300)
def test_the_checked_in_types_are_what_the_openapi_document_and_the_sources_generate(
    installed: Path, tmp_path: Path
) -> None:
    if not (ROOT / "docs" / "openapi.json").exists():
        pytest.skip("no docs/openapi.json to generate the types from")
    generated = tmp_path / "openapi.d.ts"
    done = _run(
        [
            str(installed / "openapi-typescript"),
            str(ROOT / "docs" / "openapi.json"),
            "--default-non-nullable",
            "false",
            "-o",
            str(generated),
        ],
        timeout=120,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert generated.read_text() == (CLIENT / "types" / "openapi.d.ts").read_text(), (
        "types/openapi.d.ts is not what docs/openapi.json generates: npm run generate in actors/hosts/client"
    )
    out = tmp_path / "types"
    done = _run([str(installed / "tsc"), "-p", "tsconfig.build.json", "--outDir", str(out)], timeout=240)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    emitted = sorted(path.name for path in out.glob("*.d.ts"))
    checked_in = sorted(
        path.name for path in (CLIENT / "types").glob("*.d.ts") if path.name != "openapi.d.ts"
    )
    assert emitted == checked_in
    drifted = [
        name for name in emitted if not filecmp.cmp(out / name, CLIENT / "types" / name, shallow=False)
    ]
    assert drifted == [], f"{drifted}: run `npm run generate` in actors/hosts/client"


@pytest.mark.timeout(300)
def test_the_node_client_s_tests_pass_against_serve_and_the_stdio_sidecar(installed: Path) -> None:
    command = os.environ.get("RUN_SUPERVISOR_BIN") or str(Path(sys.executable).with_name("run-supervisor"))
    env = {key: value for key, value in os.environ.items() if key != "RUN_SUPERVISOR_TOKEN"}
    tests = sorted(str(path.relative_to(CLIENT)) for path in (CLIENT / "test").glob("*.test.js"))
    done = _run(["node", "--test", *tests], timeout=240, env={**env, "RUN_SUPERVISOR_BIN": command})
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    assert "# fail 0" in done.stdout
