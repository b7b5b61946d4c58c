"""The ``serve`` subcommand: a supervisor behind the HTTP host, until a shutdown request or a signal.

Like every subcommand, it never ends in a traceback: an argument out of its range, a port that cannot
be bound, a journal that cannot be used (held, foreign, a FIFO, a directory, unwritable) is exit status 2
with one line on stderr naming what and why, before anything listens.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import stat
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

from run_supervisor.actors._api import Supervisor, SupervisorConfig
from run_supervisor.actors._errors import JournalError, SupervisorError
from run_supervisor.actors._instance_actor import InstanceHooks
from run_supervisor.actors._validate import MAX_MS
from run_supervisor.actors.hosts._external import DEFAULT_LEASE_MS, MAX_LEASE_MS, MIN_LEASE_MS
from run_supervisor.protocol import ReloadPolicy, Shutdown

__all__ = ["TOKEN_ENV", "add_serve_arguments", "add_stdio_arguments", "serve_command", "stdio_command"]

TOKEN_ENV = "RUN_SUPERVISOR_TOKEN"

RANGES: dict[str, tuple[int, int | None]] = {
    "port": (0, 65535),
    "buffer": (1, None),
    "lease_ms": (MIN_LEASE_MS, MAX_LEASE_MS),
    "max_body": (1, None),
    "grace_ms": (1, MAX_MS),
}
"""The range of each integer option (None: no upper end), checked before anything starts."""

FORCED_EXIT = 1
"""``serve``'s exit status when a second signal stopped it before its shutdown completed."""


_ORIGIN = re.compile(r"https?://[A-Za-z0-9.\-\[\]:]+")
"""What ``--allow-origin`` takes: a browser origin (scheme, host, port), exactly as the page sends it."""


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1, loopback)")
    parser.add_argument(
        "--port", type=int, default=0, help="port, 0 to 65535 (default 0: a free one, printed when ready)"
    )
    parser.add_argument(
        "--token-file",
        type=Path,
        metavar="PATH",
        help=f"read the bearer token from this file (else ${TOKEN_ENV}, else generated)",
    )
    _add_directory_argument(parser)
    parser.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="NAME",
        help="another Host name this server answers to (repeatable)",
    )
    parser.add_argument(
        "--allow-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="a browser origin (http://localhost:5173) that may call this server: CORS (repeatable)",
    )
    parser.add_argument("--buffer", type=int, default=10_000, help="events kept for Last-Event-ID replay")
    parser.add_argument(
        "--lease-ms",
        type=int,
        default=DEFAULT_LEASE_MS,
        help=f"default lease of an external run, {MIN_LEASE_MS} to {MAX_LEASE_MS} ms",
    )
    parser.add_argument("--max-body", type=int, default=1 << 20, help="largest request body in bytes")
    parser.add_argument(
        "--grace-ms",
        type=int,
        default=1000,
        help=f"shutdown grace on a signal, 1 to {MAX_MS} ms; a second signal stops at once",
    )
    _add_stall_argument(parser)
    _add_reload_policy(parser)
    _add_journal_arguments(parser)


def _add_journal_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--journal",
        type=_journal_target,
        metavar="PATH",
        help="keep a run journal in this SQLite file (or a postgresql:// URL: a shard of a PostgreSQL"
        " journal); what a dead process left unfinished is recovered",
    )
    parser.add_argument(
        "--journal-sync",
        choices=("normal", "full"),
        default="normal",
        help="normal: a commit survives a process crash; full: a power loss too (default normal)",
    )


def _add_reload_policy(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--reload-policy",
        choices=("lazy", "eager"),
        default="lazy",
        help="when a reload loads the next generation: lazy (default: when a run needs it or the old one "
        "has closed) or eager (at once); a close request may override it",
    )


def _token(args: argparse.Namespace, new_token: Callable[[], str]) -> tuple[str | None, bool, str | None]:
    """(token, generated, error)."""
    if args.token_file is not None:
        try:
            token = args.token_file.read_text(encoding="utf-8").strip()
        except OSError as exc:
            return None, False, f"--token-file {args.token_file}: {exc.strerror}"
        if not token:
            return None, False, f"--token-file {args.token_file}: the file is empty"
        return token, False, None
    token = os.environ.get(TOKEN_ENV, "").strip()
    if token:
        return token, False, None
    return new_token(), True, None


def serve_command(args: argparse.Namespace) -> int:
    try:
        import msgspec

        from run_supervisor.actors.hosts._answers import ReadyLine
        from run_supervisor.actors.hosts._http import (
            HttpSettings,
            bind,
            create_app,
            is_loopback,
            new_token,
            uvicorn_server,
        )
        from run_supervisor.actors.hosts._remote_caches import RemoteCaches
        from run_supervisor.actors.hosts._wire import WireHost
    except ImportError as exc:
        sys.stderr.write(
            f"run-supervisor serve: {exc.name} is missing: pip install 'run-supervisor[server]'\n"
        )
        return 2
    token, generated, error = _token(args, new_token)
    if error is not None or token is None:
        sys.stderr.write(f"run-supervisor serve: {error}\n")
        return 2
    if generated and not is_loopback(args.host):
        sys.stderr.write(
            f"run-supervisor serve: refusing to listen on {args.host} (not loopback) with a generated "
            f"token; give one explicitly with --token-file or ${TOKEN_ENV}\n"
        )
        return 2
    if not _in_range("serve", args, ("port", "buffer", "lease_ms", "max_body", "grace_ms")):
        return 2
    if not _stall_setting_ok("serve", args) or not _journal_path_ok("serve", args.journal):
        return 2
    for origin in args.allow_origin:
        if not _ORIGIN.fullmatch(origin):
            sys.stderr.write(
                f"run-supervisor serve: --allow-origin takes an origin such as http://localhost:5173 "
                f"(scheme, host and port, no path or *), got {origin!r}\n"
            )
            return 2
    try:
        sock = bind(args.host, args.port)
    except OSError as exc:
        sys.stderr.write(
            f"run-supervisor serve: cannot listen on {args.host}:{args.port}: {exc.strerror or exc}\n"
        )
        return 2
    port = sock.getsockname()[1]
    settings = HttpSettings(
        token=token,
        max_body=args.max_body,
        extra_hosts=tuple(args.allow_host),
        cors_origins=tuple(args.allow_origin),
    )
    settings.allow_port(args.host, port)
    caches = RemoteCaches(default_lease_ms=args.lease_ms)  # a host may keep the caches out of process
    supervisor = _start_supervisor("serve", args, hooks=caches)
    if supervisor is None:
        sock.close()
        return 2
    host = WireHost(supervisor, buffer=args.buffer, default_lease_ms=args.lease_ms, caches=caches)
    try:
        if args.directory:
            supervisor.load(*args.directory)  # after the hub subscribed: their events are in the stream
    except SupervisorError as exc:  # an empty or malformed --directory
        sys.stderr.write(f"run-supervisor serve: --directory: {exc}\n")
        supervisor.shutdown(grace_ms=0)
        host.hub.join(5.0)
        sock.close()
        return 2
    app = create_app(host, settings)
    server = uvicorn_server(app)
    shown = f"[{args.host}]" if ":" in args.host else args.host
    url = f"http://{shown}:{port}"

    forced = False

    async def main() -> None:
        loop = asyncio.get_running_loop()

        def stop() -> None:
            app.streams.end_all()  # each stream writes its last events (bounded), then ends
            server.should_exit = True

        host.hub.on_close(lambda: loop.call_soon_threadsafe(stop))
        signals = 0

        def on_signal() -> None:
            # The first signal shuts the supervisor down (its runs are interrupted with reason
            # shutdown, the streams get the last events, then the server stops); a second one stops
            # at once: the streams are dropped, the server waits for no connection, and the process
            # does not wait for the shutdown's grace.
            nonlocal signals, forced
            signals += 1
            if signals == 1 and not host.hub.closed:
                supervisor.submit(Shutdown(origin="signal", grace_ms=args.grace_ms))
            elif signals == 1:
                stop()
            else:
                forced = True
                app.streams.drop_all()
                server.should_exit = True
                server.force_exit = True

        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, on_signal)
        task = asyncio.create_task(server.serve(sockets=[sock]))
        while not server.started and not task.done():
            await asyncio.sleep(0.001)  # uvicorn offers no started event; bounded by the task
        if server.started:
            ready = ReadyLine(  # the document's ReadyLine (docs/openapi.json, x-ready-line)
                ready=True,
                url=url,
                port=port,
                pid=os.getpid(),
                reload_policy=supervisor.config.reload_policy.value,
                token=token if generated else None,
            )
            sys.stdout.write(json.dumps(msgspec.to_builtins(ready)) + "\n")
            sys.stdout.flush()
        await task

    try:
        asyncio.run(main())
    finally:
        if not forced:
            if not supervisor.closed:
                supervisor.shutdown(grace_ms=args.grace_ms)
            host.hub.join(5.0)
        caches.close()  # a hook still waiting for an acknowledgement ends now
        sock.close()
    if forced and not supervisor.closed:
        sys.stderr.write("run-supervisor serve: stopped by a second signal before the shutdown completed\n")
        return FORCED_EXIT
    return 0


def _in_range(command: str, args: argparse.Namespace, names: Iterable[str]) -> bool:
    for name in names:
        least, most = RANGES[name]
        value = getattr(args, name)
        if least <= value and (most is None or value <= most):
            continue
        flag = "--" + name.replace("_", "-")
        if least == 1:
            span = "positive" if most is None else f"positive and at most {most}"
        else:
            span = f"between {least} and {most}" if most is not None else f"at least {least}"
        sys.stderr.write(f"run-supervisor {command}: {flag} must be {span}, got {value}\n")
        return False
    return True


def _journal_target(value: str) -> Path | str:
    """A ``postgresql://`` URL stays a string (a Path would fold its ``//``); anything else is a file."""
    return value if value.startswith(("postgresql://", "postgres://")) else Path(value)


def _journal_path_ok(command: str, path: Path | str | None) -> bool:
    """A journal path that names something other than a file (a FIFO would block the start until a
    writer came; a directory or a device is no journal) is refused before anything starts."""
    if path is None or isinstance(path, str):  # a URL: Journal.open tells what is wrong with it
        return True
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return True  # created at start (Journal.open says so if its folder is missing)
    except OSError as exc:
        sys.stderr.write(f"run-supervisor {command}: journal {str(path)!r}: cannot use it ({exc.strerror})\n")
        return False
    if stat.S_ISREG(mode):
        return True
    kind = (
        "a directory"
        if stat.S_ISDIR(mode)
        else "a FIFO"
        if stat.S_ISFIFO(mode)
        else "a socket"
        if stat.S_ISSOCK(mode)
        else "a device"
    )
    sys.stderr.write(f"run-supervisor {command}: journal {str(path)!r} is {kind}, not a journal file\n")
    return False


def _start_supervisor(
    command: str, args: argparse.Namespace, *, hooks: InstanceHooks | None = None
) -> Supervisor | None:
    """The supervisor of ``serve``, or None (and one line on stderr) when its journal cannot be used."""
    try:
        return Supervisor.start(
            SupervisorConfig(
                shutdown_at_exit=False,
                default_grace_ms=args.grace_ms,
                stall_after_ms=args.stall_after_ms,
                reload_policy=args.reload_policy,
            ),
            journal=args.journal,
            journal_sync=args.journal_sync,
            hooks=hooks,
        )
    except JournalError as exc:
        sys.stderr.write(f"run-supervisor {command}: {exc}\n")
    except Exception as exc:  # what the journal did not name itself: an OSError, or SQLite's own error
        import sqlite3  # loaded already where a journal was given: a start without one never loads SQLite

        if not isinstance(exc, OSError | sqlite3.Error):
            raise
        detail = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        sys.stderr.write(
            f"run-supervisor {command}: journal {str(args.journal)!r}: cannot use it ({detail})\n"
        )
    return None


def add_stdio_arguments(parser: argparse.ArgumentParser) -> None:
    _add_directory_argument(parser)
    parser.add_argument("--no-events", action="store_true", help="write answers and errors only, no events")
    parser.add_argument(
        "--grace-ms", type=int, default=1000, help=f"shutdown grace when stdin closes, 1 to {MAX_MS} ms"
    )
    _add_stall_argument(parser)
    _add_reload_policy(parser)
    parser.add_argument(
        "--lease-ms",
        type=int,
        default=DEFAULT_LEASE_MS,
        help=f"default lease of an external run, {MIN_LEASE_MS} to {MAX_LEASE_MS} ms",
    )
    _add_journal_arguments(parser)


def stdio_command(args: argparse.Namespace) -> int:
    from run_supervisor.actors.hosts._stdio import serve_stdio

    if not _in_range("stdio", args, ("grace_ms", "lease_ms")):
        return 2
    if not _stall_setting_ok("stdio", args) or not _journal_path_ok("stdio", args.journal):
        return 2
    return serve_stdio(
        directories=tuple(args.directory),
        events=not args.no_events,
        grace_ms=args.grace_ms,
        lease_ms=args.lease_ms,
        journal=args.journal,
        journal_sync=args.journal_sync,
        stall_after_ms=args.stall_after_ms,
        reload_policy=ReloadPolicy(args.reload_policy),
    )


def _add_directory_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--directory",
        action="append",
        default=[],
        metavar="DIR",
        help="load this directory's instance at start (repeatable)",
    )


def _add_stall_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--stall-after-ms",
        type=int,
        default=None,
        metavar="MS",
        help="flag a run stalled (run.stalled) after this long without progress (default: not measured)",
    )


def _stall_setting_ok(command: str, args: argparse.Namespace) -> bool:
    if args.stall_after_ms is not None and not 1 <= args.stall_after_ms <= MAX_MS:
        sys.stderr.write(f"run-supervisor {command}: --stall-after-ms must be between 1 and {MAX_MS}\n")
        return False
    return True
