"""``run-supervisor``: the project's one command line, made of subcommands.

Each subcommand is one entry of :data:`SUBCOMMANDS`: its name, a one-line help, a function that adds
its arguments, and a function that runs it and returns the exit status. To add one (``schema``,
``serve``, ``stdio``…), write those two functions and add one line to the table; import heavy modules
inside the run function, so ``run-supervisor --help`` stays fast.

Whatever the input, the command never ends in a traceback: a bad argument or an unreadable path is
exit status 2 with one line on stderr (``run-supervisor: …``), and with ``--json`` also ``{"error": …}``
on stdout.

``run-supervisor scenario PATH [--json] [--timeout S]`` plays scenario files (docs/scenario-format.md).
Exit status: 0 when every expectation held and nothing hung; 1 otherwise; 2 when a file is invalid (for
a folder: 2 if any file is invalid, else 1 if any scenario failed, else 0).
"""

from __future__ import annotations

import argparse
import json
import math
import stat
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, NamedTuple, NoReturn

if TYPE_CHECKING:
    from run_supervisor.actors.scenarios import InvalidScenario, ScenarioReport

__all__ = ["SUBCOMMANDS", "Subcommand", "main", "synopsis"]


class Subcommand(NamedTuple):  # not a dataclass: making one costs the cold start a millisecond or two
    """One ``run-supervisor`` subcommand."""

    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]
    """Runs the subcommand; returns the exit status."""


class UsageError(Exception):
    """A bad argument or an unusable path: exit status 2 with this one line."""


# ----------------------------------------------------------------------------------------------------
# Output that never fails: a name from a file or a path may hold text the terminal cannot encode


def _write(stream: IO[str], text: str) -> None:
    encoding = getattr(stream, "encoding", None) or "utf-8"
    stream.write(text.encode(encoding, "backslashreplace").decode(encoding))


def _one_line(text: str) -> str:
    return text.replace("\r", "\\r").replace("\n", "\\n")


def _usage_error(args: argparse.Namespace, message: str) -> int:
    _write(sys.stderr, f"run-supervisor: {_one_line(message)}\n")
    if getattr(args, "json", False):
        _write(sys.stdout, json.dumps({"error": message}) + "\n")
    return 2


def _print_json(data: object) -> None:
    # ensure_ascii: a lone surrogate (an undecodable byte in a file name) becomes an escape, not an error
    _write(sys.stdout, json.dumps(data, indent=1, ensure_ascii=True) + "\n")


# ----------------------------------------------------------------------------------------------------
# scenario

MAX_TIMEOUT_S = 86_400.0
"""The largest ``--timeout``: one day, like the largest ``ms`` a scenario file may give."""


def _scenario_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", help="a scenario file or a folder of them")
    parser.add_argument("--json", action="store_true", help="print the JSON report on stdout")
    parser.add_argument(
        "--timeout",
        default="10",
        metavar="S",
        help=f"seconds a scenario may take before it is torn down (default 10, at most {MAX_TIMEOUT_S:g})",
    )
    parser.add_argument(
        "--html",
        metavar="DIR",
        help="also write a self-contained HTML timeline of each scenario into DIR",
    )


def _timeout(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise UsageError(f"--timeout must be a number of seconds, not {text!r}") from None
    if math.isnan(value) or value <= 0:
        raise UsageError(f"--timeout must be a positive number of seconds, got {text}")
    if value > MAX_TIMEOUT_S:
        raise UsageError(f"--timeout must be at most {MAX_TIMEOUT_S:g} seconds (one day), got {text}")
    return value


def _scenario(args: argparse.Namespace) -> int:
    from run_supervisor.actors.scenarios import ScenarioFileError, scenario_files

    try:
        timeout = _timeout(args.timeout)
        path = Path(args.path)
        try:
            mode = path.stat().st_mode
        except FileNotFoundError:
            raise UsageError(f"{path}: no such file or folder") from None
        except OSError as exc:
            raise UsageError(f"{path}: cannot read it: {exc.strerror or exc}") from None
        if not stat.S_ISDIR(mode):
            return _scenario_file(args, path, timeout)
        try:
            files = scenario_files(path)
        except ScenarioFileError as exc:
            raise UsageError(str(exc)) from None
        if not files:
            raise UsageError(f"{path}: no .toml or .json scenario files in this folder")
    except UsageError as exc:
        return _usage_error(args, str(exc))
    return _scenario_folder(args, files, timeout)


def _scenario_file(args: argparse.Namespace, path: Path, timeout: float) -> int:
    from run_supervisor.actors.scenarios import to_builtins

    code, report = _play_file(path, timeout)
    _show(args, report)
    _write_html(args, [report])
    if args.json:
        _print_json(to_builtins(report))
    return code


def _scenario_folder(args: argparse.Namespace, files: Sequence[Path], timeout: float) -> int:
    from run_supervisor.actors.scenarios import FolderReport, InvalidScenario, to_builtins

    status = 0
    reports: list[ScenarioReport | InvalidScenario] = []
    for file in files:
        code, report = _play_file(file, timeout)
        status = max(status, code)
        reports.append(report)
        _show(args, report)
    _write_html(args, reports)
    if args.json:
        _print_json(to_builtins(FolderReport(passed=status == 0, scenarios=reports)))
    else:
        failed = sum(1 for report in reports if isinstance(report, InvalidScenario) or not report.passed)
        _write(sys.stdout, f"{len(reports) - failed} passed, {failed} failed\n")
    return status


def _write_html(args: argparse.Namespace, reports: Sequence[ScenarioReport | InvalidScenario]) -> None:
    if args.html is None:
        return
    from run_supervisor.actors.hosts._timeline import write_scenario_pages
    from run_supervisor.actors.scenarios import to_builtins

    for page in write_scenario_pages([to_builtins(report) for report in reports], Path(args.html)):
        _write(sys.stderr, f"run-supervisor: wrote {page}\n")


def _play_file(path: Path, timeout: float) -> tuple[int, ScenarioReport | InvalidScenario]:
    from run_supervisor.actors.scenarios import InvalidScenario, ScenarioFileError, load_scenario, play

    try:
        scenario = load_scenario(path)
    except ScenarioFileError as exc:
        return 2, InvalidScenario(file=str(path), error=str(exc))
    report = play(scenario, timeout=timeout)
    return (0 if report.passed else 1), report


def _show(args: argparse.Namespace, report: ScenarioReport | InvalidScenario) -> None:
    from run_supervisor.actors.scenarios import InvalidScenario

    if isinstance(report, InvalidScenario):
        _write(sys.stderr, f"run-supervisor: invalid scenario file: {_one_line(report.error)}\n")
        if not args.json:
            _write(sys.stdout, f"INVALID  {report.file}\n\n")
    elif not args.json:
        _write(sys.stdout, _timeline(report))


_FIELDS_SHOWN = (
    "run",
    "session",
    "directory",
    "generation",
    "cause",
    "step",
    "kind",
    "ask_id",
    "call_id",
    "tool",
    "state",
    "status",
    "attempt",
    "outcome",
    "reason",
    "origin",
    "action",
    "phase",
    "error",
    "do",
    "mode",
    "reload_policy",
    "result",
    "directories",
    "pending_directories",
    "blocking_runs",
    "superseded_by",
    "abandoned_runs",
    "label",
)


def _timeline(report: ScenarioReport) -> str:
    """The readable report: one line per event, the tool cards, the failures, the verdict."""
    from run_supervisor.protocol import ReloadPolicy

    lines = [f"== {report.scenario}  ({report.file})"]
    if report.reload_policy is not ReloadPolicy.EAGER:  # the contract's reading needs no line
        lines.append(f"  (reloads are {report.reload_policy.value}: the next generation loads when needed)")
    for event in report.events:
        details = []
        for key in _FIELDS_SHOWN:
            value = event.get(key)
            if value in (None, [], ()):
                continue
            if isinstance(value, list | tuple):
                value = ",".join(str(v) for v in value)
            details.append(f"{key}={value}")
        lines.append(f"  {event['seq']:>3}  {event['type']:<20} {' '.join(details)}")
    for run_id, run in report.runs.items():
        lines.extend(f"       {run_id} tool card: {part.label}" for part in run.tool_parts)
    lines.extend(f"  FAIL {failure}" for failure in report.failures)
    lines.append(f"{'PASS' if report.passed else 'FAIL'}  {report.scenario}")
    return "\n".join(_one_line(line) for line in lines) + "\n\n"


# ----------------------------------------------------------------------------------------------------
# serve and stdio (actors/hosts/_serve.py)


def _serve_arguments(parser: argparse.ArgumentParser) -> None:
    from run_supervisor.actors.hosts._serve import add_serve_arguments

    add_serve_arguments(parser)


def _serve(args: argparse.Namespace) -> int:
    from run_supervisor.actors.hosts._serve import serve_command

    return serve_command(args)


def _stdio_arguments(parser: argparse.ArgumentParser) -> None:
    from run_supervisor.actors.hosts._serve import add_stdio_arguments

    add_stdio_arguments(parser)


def _stdio(args: argparse.Namespace) -> int:
    from run_supervisor.actors.hosts._serve import stdio_command

    return stdio_command(args)


# ----------------------------------------------------------------------------------------------------
# schema


def _no_arguments(parser: argparse.ArgumentParser) -> None:
    pass


def _schema_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--hosts",
        action="store_true",
        help="add what the wire hosts add: external-run reports, host events, stdio lines (docs/wire.md)",
    )


def _schema(args: argparse.Namespace) -> int:
    from run_supervisor.protocol import wire_schema

    if getattr(args, "hosts", False):
        from run_supervisor.actors.hosts._schema import with_hosts

        _print_json(with_hosts(wire_schema()))
        return 0
    _print_json(wire_schema())
    return 0


def _openapi(args: argparse.Namespace) -> int:
    try:
        from run_supervisor.actors.hosts._openapi import document_json
    except ImportError as exc:  # the document describes serve: it needs serve's packages
        missing = f"{exc.name} is missing: pip install 'run-supervisor[server]'"
        _write(sys.stderr, f"run-supervisor openapi: {missing}\n")
        return 2
    sys.stdout.write(document_json().decode())
    return 0


# ----------------------------------------------------------------------------------------------------
# The table and the entry point

SUBCOMMANDS: tuple[Subcommand, ...] = (
    Subcommand(
        "scenario",
        "play a scenario file, or every .toml/.json file of a folder, against a real supervisor",
        _scenario_arguments,
        _scenario,
    ),
    Subcommand(
        "serve",
        "serve the supervisor over HTTP + server-sent events (docs/wire.md)",
        _serve_arguments,
        _serve,
    ),
    Subcommand(
        "schema",
        "print the JSON Schema of every request, answer, snapshot and event (to generate client types)",
        _schema_arguments,
        _schema,
    ),
    Subcommand(
        "openapi",
        "print the OpenAPI 3.1 document of serve's routes (docs/openapi.json; GET /openapi.json)",
        _no_arguments,
        _openapi,
    ),
    Subcommand(
        "stdio",
        "a sidecar speaking JSON lines on stdin and stdout (docs/wire.md)",
        _stdio_arguments,
        _stdio,
    ),
)


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (and exit status 2), never the usage block."""

    def error(self, message: str) -> NoReturn:
        _write(sys.stderr, f"{self.prog}: {_one_line(message)} (see {self.prog} --help)\n")
        raise SystemExit(2)


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="run-supervisor", description="Keeps AI coding-agent runs alive: play and check scenarios."
    )
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for subcommand in SUBCOMMANDS:
        subcommand.add_arguments(commands.add_parser(subcommand.name, help=subcommand.help))
    return parser


def synopsis(name: str, width: int = 106) -> str:
    """A subcommand's synopsis, from its parser (docs/wire.md shows serve's and stdio's; a test keeps
    them equal): each option with its default, its choices, or its metavar; ``...`` when repeatable."""
    parser = _parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    items: list[str] = []
    for action in commands.choices[name]._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        option = max(action.option_strings, key=len)
        if action.nargs == 0:
            items.append(f"[{option}]")
            continue
        if action.choices is not None:
            value = "|".join(str(choice) for choice in action.choices)
        elif action.default is not None and action.default is not False and action.default != []:
            value = str(action.default)
        else:
            value = str(action.metavar or action.dest.upper())
        repeat = "..." if isinstance(action, argparse._AppendAction) else ""
        items.append(f"[{option} {value}]{repeat}")
    head = f"run-supervisor {name}"
    lines: list[str] = []
    line = head
    for item in items:
        if len(line) + 1 + len(item) > width:
            lines.append(line)
            line = " " * len(head)
        line += " " + item
    lines.append(line)
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``run-supervisor`` with ``argv`` (default: the process's arguments); return the exit status."""
    args = _parser().parse_args(argv)
    run = {subcommand.name: subcommand.run for subcommand in SUBCOMMANDS}[args.command]
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
