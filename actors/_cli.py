"""``run-supervisor scenario PATH [--json] [--timeout S]``: play scenario files and report.
``run-supervisor schema``: print the JSON Schema of every request, answer and event.

Exit status: 0 when every expectation held and nothing hung; 1 otherwise; 2 when a file is
invalid (for a folder: 2 if any file is invalid, else 1 if any scenario failed, else 0).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from run_supervisor.actors.hosts._serve import (
    add_serve_arguments,
    add_stdio_arguments,
    serve_command,
    stdio_command,
)
from run_supervisor.actors.scenarios import ScenarioFileError, load_scenario, play, scenario_files
from run_supervisor.protocol import wire_schema

__all__ = ["main"]

_FIELDS_SHOWN = (
    "run",
    "session",
    "directory",
    "generation",
    "step",
    "kind",
    "status",
    "outcome",
    "reason",
    "origin",
    "action",
    "phase",
    "error",
    "do",
    "mode",
    "result",
    "directories",
    "pending_directories",
    "blocking_runs",
    "superseded_by",
    "abandoned_runs",
)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="run-supervisor", description="Keeps AI coding-agent runs alive: play and check scenarios."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    scenario = commands.add_parser(
        "scenario",
        help="play a scenario file, or every .toml/.json file of a folder, against a real supervisor",
    )
    scenario.add_argument("path", type=Path, help="a scenario file or a folder of them")
    scenario.add_argument("--json", action="store_true", help="print the JSON report on stdout")
    scenario.add_argument(
        "--timeout",
        type=float,
        default=10.0,
        help="seconds a scenario may take before it is torn down (default 10)",
    )
    serve = commands.add_parser(
        "serve", help="serve the supervisor over HTTP + server-sent events (docs/wire.md)"
    )
    add_serve_arguments(serve)
    commands.add_parser(
        "schema",
        help="print the JSON Schema of every request, answer, snapshot and event (to generate client types)",
    )
    stdio = commands.add_parser(
        "stdio", help="a sidecar speaking JSON lines on stdin and stdout (docs/wire.md)"
    )
    add_stdio_arguments(stdio)
    return parser


def _schema(args: argparse.Namespace) -> int:
    json.dump(wire_schema(), sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


def _timeline(report: dict[str, Any], out: TextIO) -> None:
    out.write(f"== {report['scenario']}  ({report['file']})\n")
    for event in report["events"]:
        details = []
        for key in _FIELDS_SHOWN:
            if key in event and event[key] not in (None, [], ()):
                value = event[key]
                if isinstance(value, list | tuple):
                    value = ",".join(str(v) for v in value)
                details.append(f"{key}={value}")
        out.write(f"  {event['seq']:>3}  {event['type']:<20} {' '.join(details)}\n")
    for run_id, run in report["runs"].items():
        for part in run["tool_parts"]:
            out.write(f"       {run_id} tool card: {part['label']}\n")
    for failure in report["failures"]:
        out.write(f"  FAIL {failure}\n")
    verdict = "PASS" if report["passed"] else "FAIL"
    out.write(f"{verdict}  {report['scenario']}\n\n")


def _play_file(path: Path, timeout: float) -> tuple[int, dict[str, Any]]:
    try:
        scenario = load_scenario(path)
    except ScenarioFileError as exc:
        return 2, {"file": str(path), "error": str(exc)}
    report = play(scenario, timeout=timeout)
    return (0 if report["passed"] else 1), report


def _scenario(args: argparse.Namespace) -> int:
    path: Path = args.path
    if args.timeout <= 0:
        return _usage_error(args, f"--timeout must be positive, got {args.timeout}")
    if path.is_dir():
        files = scenario_files(path)
        if not files:
            return _usage_error(args, f"{path}: no .toml or .json scenario files in this folder")
        status, reports = 0, []
        for file in files:
            code, report = _play_file(file, args.timeout)
            status = max(status, code)
            reports.append(report)
            _show(args, code, report)
        if args.json:
            passed = status == 0
            json.dump({"passed": passed, "scenarios": reports}, sys.stdout, indent=1)
            sys.stdout.write("\n")
        else:
            failed = sum(1 for r in reports if not r.get("passed"))
            sys.stdout.write(f"{len(reports) - failed} passed, {failed} failed\n")
        return status
    if not path.exists():
        return _usage_error(args, f"{path}: no such file or folder")
    code, report = _play_file(path, args.timeout)
    _show(args, code, report)
    if args.json:
        json.dump(report, sys.stdout, indent=1)
        sys.stdout.write("\n")
    return code


def _show(args: argparse.Namespace, code: int, report: dict[str, Any]) -> None:
    if code == 2:
        sys.stderr.write(f"run-supervisor: invalid scenario file: {report['error']}\n")
        if not args.json:
            sys.stdout.write(f"INVALID  {report['file']}\n\n")
    elif not args.json:
        _timeline(report, sys.stdout)


def _usage_error(args: argparse.Namespace, message: str) -> int:
    sys.stderr.write(f"run-supervisor: {message}\n")
    if args.json:
        json.dump({"error": message}, sys.stdout)
        sys.stdout.write("\n")
    return 2


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "serve":
        return serve_command(args)
    if args.command == "schema":
        return _schema(args)
    if args.command == "stdio":
        return stdio_command(args)
    return _scenario(args)


if __name__ == "__main__":
    sys.exit(main())
