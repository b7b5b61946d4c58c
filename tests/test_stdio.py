"""The stdio sidecar: JSON lines in, answers and events out, a real subprocess on pipes."""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from wire_support import CLI, read_until, reaped_async, run_node

from run_supervisor.actors._cli import main
from run_supervisor.actors.hosts._schema import with_hosts
from run_supervisor.protocol import wire_schema


class Sidecar:
    """``run-supervisor stdio`` in a subprocess; every read is bounded."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.lines: list[dict[str, Any]] = []

    async def send(self, line: dict[str, Any] | bytes) -> None:
        assert self.proc.stdin is not None
        data = line if isinstance(line, bytes) else json.dumps(line).encode()
        self.proc.stdin.write(data + b"\n")
        await self.proc.stdin.drain()

    async def read(self, timeout: float = 10.0) -> dict[str, Any] | None:
        assert self.proc.stdout is not None
        raw = await asyncio.wait_for(self.proc.stdout.readline(), timeout)
        if not raw:
            return None
        message: dict[str, Any] = json.loads(raw)
        self.lines.append(message)
        return message

    async def until(self, match: Callable[[dict[str, Any]], bool], timeout: float = 10.0) -> dict[str, Any]:
        for message in self.lines:
            if match(message):
                return message
        return await read_until(self.read, match, timeout, lambda: self.lines)

    async def answer(self, corr: Any) -> dict[str, Any]:
        return await self.until(lambda m: m["type"] in ("answer", "error") and m.get("id") == corr)

    async def event(self, kind: str, **fields: Any) -> dict[str, Any]:
        def match(m: dict[str, Any]) -> bool:
            event = m.get("event") or {}
            return (
                m["type"] == "event"
                and event.get("type") == kind
                and all(event.get(k) == v for k, v in fields.items())
            )

        return (await self.until(match))["event"]  # type: ignore[no-any-return]


def session(scenario: Callable[[Sidecar], Awaitable[None]], *args: str) -> int:
    async def go() -> int:
        stdio = await asyncio.create_subprocess_exec(
            *CLI, "stdio", *args, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE
        )
        async with reaped_async(stdio) as proc:
            await scenario(Sidecar(proc))
            return await asyncio.wait_for(proc.wait(), 20)

    return asyncio.run(asyncio.wait_for(go(), 50))


def test_a_sidecar_session_drives_an_external_run_through_a_deferred_close_and_stdin_eof_shuts_down() -> None:
    async def scenario(car: Sidecar) -> None:
        await car.event("instance.started", directory="/p/a")
        await car.send({"id": 1, "type": "start_run", "run_id": "r1", "session": "s1", "directory": "/p/a"})
        assert (await car.answer(1))["answer"]["result"] == "ok"
        await car.send(
            {"id": 2, "type": "report", "run_id": "r1", "report": {"type": "step", "kind": "model"}}
        )
        assert (await car.answer(2))["status"] == 200
        await car.send(
            {"id": "c", "type": "close", "do": "dispose_all", "mode": "maintenance", "origin": "settings"}
        )
        close = await car.answer("c")
        assert close["answer"]["result"] == "deferred" and close["answer"]["blocking_runs"] == ["r1"]
        await car.send({"id": 3, "type": "query", "what": "actions"})
        assert [a["action_id"] for a in (await car.answer(3))["answer"]] == [close["answer"]["action_id"]]
        await car.send({"id": 4, "type": "report", "run_id": "r1", "report": {"type": "end"}})
        await car.event("lifecycle.completed", action_id=close["answer"]["action_id"])
        assert car.proc.stdin is not None
        car.proc.stdin.close()  # EOF: a shutdown
        done = await car.event("lifecycle.requested", do="shutdown")
        assert done["origin"] == "stdin.closed"
        await car.event("action.result", action_id=done["action_id"])
        while await car.read() is not None:
            pass
        schema = with_hosts(wire_schema())
        lines = jsonschema.Draft202012Validator({"$defs": schema["$defs"], "$ref": "#/$defs/StdioOutput"})
        events = jsonschema.Draft202012Validator({"$defs": schema["$defs"], "$ref": "#/$defs/Event"})
        for line in car.lines:  # every line out matches run-supervisor schema --hosts
            lines.validate(line)
            if line["type"] == "event":
                events.validate(line["event"])

    assert session(scenario, "--directory", "/p/a") == 0


def test_malformed_lines_get_an_error_line_naming_the_problem_and_the_host_keeps_reading() -> None:
    async def scenario(car: Sidecar) -> None:
        await car.send(b"{not json")
        bad = await car.until(lambda m: m["type"] == "error")
        assert bad["id"] is None and bad["code"] == "invalid_request"
        assert bad["error"].startswith("line 1: not valid JSON")
        await car.send(b"[1, 2]")
        await car.send({"id": 7, "type": "close", "do": "dispose_all", "mode": "gently", "origin": "x"})
        wrong = await car.answer(7)
        assert wrong["type"] == "error" and wrong["status"] == 422 and "gently" in wrong["error"]
        await car.send({"id": 8, "type": "report", "run_id": "r", "report": {"type": "teleport"}})
        assert "teleport" in (await car.answer(8))["error"]
        await car.send({"id": 9, "type": "query", "what": "weather"})
        assert "what must be one of" in (await car.answer(9))["error"]
        await car.send({"id": 10, "type": "cancel", "run_id": "ghost"})
        unknown = await car.answer(10)
        assert unknown["type"] == "answer" and unknown["status"] == 404
        assert unknown["answer"]["code"] == "unknown_run"
        errors = [m for m in car.lines if m["type"] == "error" and m["id"] is None]
        assert [e["error"].split(":")[0] for e in errors] == ["line 1", "line 2"]
        await car.send({"id": 11, "type": "shutdown", "grace_ms": 100})
        assert (await car.answer(11))["answer"]["result"] == "forced"
        while await car.read() is not None:  # a shutdown by a line ends the session too
            pass

    assert session(scenario) == 0


def test_stdio_refuses_a_non_positive_grace(capsys: Any) -> None:
    assert main(["stdio", "--grace-ms", "0"]) == 2
    assert "--grace-ms must be positive" in capsys.readouterr().err


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_the_node_sidecar_example_keeps_its_run_through_a_deferred_reload_and_shuts_down_on_eof() -> None:
    root = Path(__file__).resolve().parent.parent
    command = Path(sys.executable).with_name("run-supervisor")
    summary = run_node(str(root / "docs/examples/stdio-sidecar.mjs"), str(command))
    assert (summary["close"], summary["blocking_runs"], summary["outcome"]) == (
        "deferred",
        ["r1"],
        "completed",
    )
    assert summary["error_line"].startswith("line 5: not valid JSON")
    assert (summary["shutdown_origin"], summary["exit"]) == ("stdin.closed", 0)


def test_a_line_over_the_limit_is_refused_as_it_arrives_and_the_next_line_is_read() -> None:
    async def scenario(car: Sidecar) -> None:
        await car.send(b'{"id": 1, "pad": "' + b"x" * (1 << 20) + b'"}')
        too_large = await car.until(lambda m: m["type"] == "error")
        assert too_large["status"] == 413 and too_large["code"] == "too_large"
        assert too_large["error"] == "line 1: lines are limited to 1048576 bytes"
        await car.send({"id": 2, "type": "query", "what": "statistics"})
        assert (await car.answer(2))["answer"]["runs_finished"] == 0
        assert car.proc.stdin is not None
        car.proc.stdin.close()
        while await car.read() is not None:
            pass

    assert session(scenario, "--no-events") == 0


def test_a_stdio_start_takes_a_deadline_and_a_report_takes_a_retry() -> None:
    async def scenario(car: Sidecar) -> None:
        await car.event("instance.started", directory="/p/a")
        start = {"id": 1, "type": "start_run", "run_id": "r1", "session": "s1", "directory": "/p/a"}
        await car.send({**start, "deadline_ms": 1500})  # long enough for the retry to come first
        assert (await car.answer(1))["answer"]["result"] == "ok"
        retry = {"type": "retry", "attempt": 1, "message": "529 overloaded"}
        await car.send({"id": 2, "type": "report", "run_id": "r1", "report": retry})
        assert (await car.answer(2))["status"] == 200
        shown = await car.event("session.status", session="s1", status="retry")
        assert (shown["attempt"], shown["message"], shown["next_at_ms"]) == (1, "529 overloaded", None)
        notice = await car.until(lambda m: m.get("event", {}).get("type") == "external.interrupt")
        assert (notice["event"]["reason"], notice["event"]["origin"]) == ("timeout", "deadline")
        await car.send({"id": 3, "type": "report", "run_id": "r1", "report": {"type": "end"}})
        finished = await car.event("run.finished", run_id="r1")
        assert (finished["reason"], finished["origin"]) == ("timeout", "deadline")
        assert car.proc.stdin is not None
        car.proc.stdin.close()
        while await car.read() is not None:
            pass

    assert session(scenario, "--directory", "/p/a") == 0


def test_a_stdio_statistics_answer_says_which_reload_queue_and_stall_settings_are_in_force() -> None:
    async def scenario(car: Sidecar) -> None:
        await car.send({"id": 1, "type": "query", "what": "statistics"})
        stats = (await car.answer(1))["answer"]
        assert (stats["reload_policy"], stats["queue_policy"], stats["stall_after_ms"]) == (
            "eager",
            "queue",
            250,
        )
        assert car.proc.stdin is not None
        car.proc.stdin.close()
        while await car.read() is not None:
            pass

    assert session(scenario, "--no-events", "--reload-policy", "eager", "--stall-after-ms", "250") == 0
