"""A real PostgreSQL server for the tests: initdb + postgres in a temporary directory, listening on a
unix socket only (``listen_addresses=''``: no TCP at all), started once per test session on first use
and stopped when the session ends.

The server binaries are looked for on PATH, then under ``/usr/lib/postgresql/*/bin`` (Debian's
``postgresql`` package; ``.ci/run`` installs it when neither has them). Tests that need the server
call :func:`postgres_url` (or use the ``pg_url`` fixture); when no server can be had they skip, saying
why. PostgreSQL refuses to run as root: under root the server runs as the ``postgres`` user (or
``nobody``), which owns the temporary directory.
"""

from __future__ import annotations

import atexit
import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from run_supervisor import Supervisor, SupervisorConfig
from run_supervisor.actors.testing import EventLog, simulate_crash

_STARTED = threading.Lock()
_server: _Server | None = None
_unavailable: str | None = None


def find_binaries() -> Path | None:
    """The directory holding ``initdb`` and ``postgres``: PATH first, then Debian's layout."""
    initdb, postgres = shutil.which("initdb"), shutil.which("postgres")
    if initdb and postgres:
        return Path(os.path.realpath(postgres)).parent
    for candidate in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if os.access(os.path.join(candidate, "initdb"), os.X_OK) and os.access(
            os.path.join(candidate, "postgres"), os.X_OK
        ):
            return Path(candidate)
    return None


@dataclass
class _Server:
    root: Path
    process: subprocess.Popen[bytes]
    url: str
    binaries: Path
    user: str | None

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()  # SIGTERM: a smart shutdown; SIGINT would be a fast one
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        shutil.rmtree(self.root, ignore_errors=True)


def _run_as() -> tuple[str | None, int | None, int | None]:
    if os.geteuid() != 0:
        return None, None, None
    for name in ("postgres", "nobody"):
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            continue
        return name, entry.pw_uid, entry.pw_gid
    return None, None, None


def _start() -> _Server:
    binaries = find_binaries()
    if binaries is None:
        raise RuntimeError(
            "no PostgreSQL server binaries (initdb, postgres) on PATH nor under /usr/lib/postgresql/*/bin;"
            " install Debian's postgresql package (.ci/run does)"
        )
    try:
        import psycopg
    except ImportError:
        raise RuntimeError("psycopg is not installed (pip install 'psycopg[binary]>=3.2')") from None
    user, uid, gid = _run_as()
    root = Path(tempfile.mkdtemp(prefix="rs-pg-"))
    data, sockets = root / "data", root / "sock"
    sockets.mkdir()
    if uid is not None and gid is not None:
        os.chmod(root, 0o755)
        os.chown(root, uid, gid)
        os.chown(sockets, uid, gid)
    extra: dict[str, Any] = {} if user is None else {"user": uid, "group": gid, "extra_groups": []}
    env = {**os.environ, "LC_ALL": "C", "TZ": "UTC"}
    subprocess.run(
        [
            str(binaries / "initdb"),
            "-D",
            str(data),
            "-U",
            "postgres",
            "--auth=trust",
            "-E",
            "UTF8",
            "--no-sync",
            "--no-instructions",
        ],
        check=True,
        capture_output=True,
        timeout=120,
        env=env,
        cwd=root,
        **extra,
    )
    process = subprocess.Popen(
        [
            str(binaries / "postgres"),
            "-D",
            str(data),
            "-k",
            str(sockets),
            "-c",
            "listen_addresses=",
            "-c",
            "fsync=off",
            "-c",
            "max_connections=200",
            "-c",
            "log_min_messages=fatal",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
        cwd=root,
        **extra,
    )
    url = f"postgresql://postgres@/postgres?host={sockets}"
    server = _Server(root, process, url, binaries, user)
    deadline = time.monotonic() + 60
    import psycopg

    while True:  # bounded: the server accepts connections within seconds, or we give up
        if process.poll() is not None:
            server.stop()
            raise RuntimeError(f"postgres exited at start (status {process.returncode})")
        try:
            with psycopg.connect(url, connect_timeout=2) as db:
                db.execute("SELECT 1")
            break
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                server.stop()
                raise RuntimeError("postgres did not accept connections within 60 s") from None
            threading.Event().wait(0.05)
    return server


def postgres_server_url() -> str:
    """The session's server (started at the first call), or a skip saying why there is none."""
    global _server, _unavailable  # noqa: PLW0603 - one server per test session
    with _STARTED:
        if _server is None and _unavailable is None:
            try:
                _server = _start()
                atexit.register(_server.stop)
            except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
                _unavailable = str(exc)
        if _server is None:
            pytest.skip(f"no PostgreSQL server for the tests: {_unavailable}")
        return _server.url


def fresh_database() -> str:
    """A new, empty database on the session's server: its URL."""
    import psycopg

    base = postgres_server_url()
    name = "t_" + uuid.uuid4().hex[:16]
    with psycopg.connect(base, autocommit=True) as db:
        db.execute(f'CREATE DATABASE "{name}"')
    return base.replace("/postgres?", f"/{name}?", 1)


def with_shard(url: str, shard: str, **params: object) -> str:
    """``url`` naming ``shard`` (and any other journal parameter, such as ``lease_ttl``)."""
    extra = "".join(f"&{key}={value}" for key, value in params.items())
    return f"{url}&shard={shard}{extra}"


@pytest.fixture(scope="session")
def pg_database() -> str:
    """One database for the session's journal tests (each test uses a shard of its own)."""
    return fresh_database()


@pytest.fixture
def pg_journal(pg_database: str) -> str:
    """A journal URL on a shard no other test uses."""
    return with_shard(pg_database, "t-" + uuid.uuid4().hex[:12])


# --- the journal tests on both backends ------------------------------------------------------------

BACKENDS = ("sqlite", "postgresql")
_shared_database: str | None = None


def shared_database() -> str:
    """One database for every journal test of the session (each test has a shard of its own)."""
    global _shared_database  # noqa: PLW0603 - one database per test session
    if _shared_database is None:
        _shared_database = fresh_database()
    return _shared_database


def make_journal(backend: str, tmp_path: Path, **params: object) -> Path | str:
    """A journal for one test: an SQLite file in ``tmp_path``, or a fresh shard's URL. The shard's
    lease lasts 3 s and a start waits up to 10 s for one a crash left behind (an in-process crash
    lets it go at once; a lease a failed write could not let go expires)."""
    if backend == "sqlite":
        return tmp_path / "runs.journal"
    settings: dict[str, object] = {"lease_ttl": 3, "lease_wait": 10, **params}
    return with_shard(shared_database(), "t-" + uuid.uuid4().hex[:12], **settings)


def without_wait(journal: Path | str) -> Path | str:
    """The same journal, a start on it refused at once if another holds it (as a file is)."""
    if isinstance(journal, Path):
        return journal
    return journal.replace("lease_wait=10", "lease_wait=0")


class JournalReader:
    """Reads a journal's tables whichever the backend: ``scalar("COUNT(*)", "runs", "state = ?")``
    is run on the SQLite file, or on the shard's rows of ``rs_runs``."""

    def __init__(self, journal: Path | str) -> None:
        self.journal = journal
        if isinstance(journal, Path):
            import sqlite3

            self._sqlite: Any = sqlite3.connect(journal, check_same_thread=False)
            self._pg: Any = None
        else:
            import psycopg

            from run_supervisor.actors._shards import parse_journal_url

            target = parse_journal_url(journal)
            self.shard = target.shard
            self._sqlite = None
            self._pg = psycopg.connect(target.conninfo, autocommit=True)

    def rows(self, select: str, table: str, where: str = "1 = 1", *params: object) -> list[tuple[Any, ...]]:
        if self._sqlite is not None:
            return list(
                self._sqlite.execute(f"SELECT {select} FROM {table} WHERE {where}", params).fetchall()
            )
        sql = f"SELECT {select} FROM rs_{table} WHERE shard = %s AND ({where.replace('?', '%s')})"
        return list(self._pg.execute(sql, (self.shard, *params)).fetchall())

    def scalar(self, select: str, table: str, where: str = "1 = 1", *params: object) -> Any:
        found = self.rows(select, table, where, *params)
        return found[0][0] if found else None

    def close(self) -> None:
        (self._sqlite or self._pg).close()

    def __enter__(self) -> JournalReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


sqlite_only = pytest.mark.parametrize("journal", ["sqlite"], indirect=True)
"""A test of the ``journal`` fixture (tests/conftest.py) on the SQLite file only."""


def start_on(
    opened: list[Supervisor], config: SupervisorConfig, journal: Path | str, **kwargs: Any
) -> Supervisor:
    """A supervisor started with ``config`` on ``journal``, kept in ``opened`` (the fixture tears it down)."""
    sup = Supervisor.start(config, journal=journal, **kwargs)
    opened.append(sup)
    return sup


def crash_during(sup: Supervisor, body: Any, kind: str, run_id: str = "r1", **fields: Any) -> Any:
    """Start run ``run_id`` (session s1, /w/a) with ``body`` on ``sup``, wait for its ``kind`` event
    (with ``fields``), then let ``sup`` die as a kill would. Returns the event waited for."""
    log = EventLog(sup)
    sup.start_run(body, session="s1", directory="/w/a", run_id=run_id)
    event = log.wait_for(kind, run_id=run_id, **fields)
    log.close()
    simulate_crash(sup)
    return event
