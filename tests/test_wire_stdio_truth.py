"""The stdio sidecar tells its parent the truth whatever it is sent: every line gets exactly one answer,
a field it does not take is refused by name, and a parent that closed stdout, or stopped reading it,
ends the session."""

from __future__ import annotations

import contextlib
import io
import json
import os
import selectors
import subprocess
import sys
import tempfile
import threading
from typing import IO, Any, cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from run_supervisor.actors.hosts._stdio import _Writer, serve_stdio

_COMMAND = (sys.executable, "-m", "run_supervisor.actors._cli", "stdio")
_MAX_LINE = 4096
_TYPES = [
    "report",
    "query",
    "directories",
    "start_run",
    "cancel",
    "close",
    "confirm_close",
    "reply_permission",
    "answer_form",
    "dismiss_form",
    "set_queue_policy",
    "teleport",
]
"""Every kind of line but ``shutdown`` (which ends the session: the lines after it are not read)."""

_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)
_field_values = (
    _json
    | st.sampled_from(["r1", "s1", "/p/a", "", "run", "asks", "statistics", "dispose_all", "maintenance"])
    | st.lists(st.sampled_from(["/p/a", "/p/b", ""]), max_size=2)
)
_fields = st.sampled_from(
    [
        *("run_id", "session", "directory", "report", "what", "directories", "load", "do", "mode", "origin"),
        *("lease_ms", "grace_ms", "reason", "ask_id", "approve", "answer", "action_id", "reasn", "leaseMs"),
    ]
)


def _deep(depth: int) -> bytes:
    return b'{"id": 0, "type": "cancel", "run_id": ' + b"[" * depth + b"]" * depth + b"}"


_TEMPLATES: list[dict[str, Any]] = [
    {"type": "start_run", "run_id": "r1", "session": "s1", "directory": "/p/a"},
    {"type": "start_run", "run_id": "r2", "session": "s1", "directory": "/p/a", "lease_ms": 1000},
    {"type": "report", "run_id": "r1", "report": {"type": "step", "kind": "model"}},
    {"type": "report", "run_id": "r1", "report": {"type": "part", "tool": "bash", "state": "running"}},
    {"type": "report", "run_id": "r1", "report": {"type": "ask", "kind": "permission", "title": "rm?"}},
    {"type": "report", "run_id": "r1", "report": {"type": "end"}},
    {"type": "cancel", "run_id": "r1", "origin": "user"},
    {"type": "close", "do": "dispose_all", "mode": "maintenance", "origin": "settings"},
    {"type": "close", "do": "reload", "mode": "maintenance", "origin": "x", "directories": ["/p/a"]},
    {"type": "reply_permission", "run_id": "r1", "approve": True},
    {"type": "query", "what": "run", "run_id": "r1"},
    {"type": "query", "what": "asks"},
    {"type": "directories", "directories": ["/p/b"], "load": False},
]
"""Lines that are (or were, until a draw bent one of their fields) requests the sidecar carries out."""


@st.composite
def _line(draw: st.DrawFn, number: int) -> bytes:
    """One input line: a request-shaped object (with ``id`` = its line number), or anything else."""
    kind = draw(st.integers(0, 9))
    if kind <= 2:  # a request, maybe with one field bent, dropped or added
        fields: dict[str, Any] = {"id": number, **draw(st.sampled_from(_TEMPLATES))}
        bend = draw(st.integers(0, 3))
        key = draw(st.sampled_from(sorted(k for k in fields if k != "id")))
        if bend == 1:
            fields[key] = draw(_field_values)
        elif bend == 2 and key != "type":
            del fields[key]
        elif bend == 3:
            fields[draw(_fields)] = draw(_field_values)
        return json.dumps(fields).encode()
    if kind <= 5:
        fields = {"id": number, "type": draw(st.sampled_from(_TYPES))}
        fields.update(draw(st.dictionaries(_fields, _field_values, max_size=4)))
        if fields["type"] == "report" and draw(st.booleans()):
            fields["report"] = draw(st.sampled_from([[1], 5, True, "end", None, {"type": "end"}]))
        return json.dumps(fields).encode()
    if kind == 6:
        return json.dumps(draw(_json.filter(lambda v: not isinstance(v, dict)))).encode()  # not an object
    if kind == 7:
        return draw(st.binary(max_size=24)).replace(b"\n", b" ")  # not JSON, maybe not UTF-8
    if kind == 8:
        return _deep(draw(st.sampled_from([50, 900, 2000, 5000])))
    return b'{"id": ' + str(number).encode() + b', "pad": "' + b"x" * _MAX_LINE + b'"}'  # over the limit


@st.composite
def _session(draw: st.DrawFn) -> tuple[list[bytes], bytes]:
    """Lines, and the input they make (its last line ended by a newline or by the end of the input)."""
    count = draw(st.integers(1, 12))
    lines = [draw(_line(number)) for number in range(1, count + 1)]
    return lines, b"\n".join(lines) + draw(st.sampled_from([b"\n", b""]))


def _replies_by_line(lines: list[bytes], out: bytes) -> dict[int, int]:
    """How many answer or error lines each input line got (by its ``id`` or its ``line N:``)."""
    got = dict.fromkeys((n for n, raw in enumerate(lines, 1) if raw.strip()), 0)
    for text in out.splitlines():
        message = json.loads(text)  # every line out is JSON
        if message["type"] == "event":
            continue
        assert message["type"] in ("answer", "error"), message
        number = message["id"] if isinstance(message["id"], int) and message["id"] > 0 else None
        if message["type"] == "error":
            named = int(message["error"].split(":", 1)[0].removeprefix("line "))
            assert number in (None, named), message
            number = named
        assert number in got, (message, lines)
        got[number] += 1
    return got


@settings(max_examples=150)
@given(_session())
def test_every_stdio_line_gets_exactly_one_answer_whatever_it_holds(
    session: tuple[list[bytes], bytes],
) -> None:
    lines, data = session
    out = io.BytesIO()
    status = serve_stdio(io.BytesIO(data), out, directories=("/p/a",), grace_ms=100, max_line=_MAX_LINE)
    assert status == 0
    got = _replies_by_line(lines, out.getvalue())
    assert all(count == 1 for count in got.values()), (got, lines)


def _run_piped(lines: list[bytes], *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [*_COMMAND, *args],
        input=b"\n".join(lines) + b"\n",
        capture_output=True,
        timeout=60,
        check=False,
    )


def test_a_report_that_is_a_list_a_number_or_true_and_a_2000_deep_line_are_answered_and_it_exits_0() -> None:
    lines = [
        b'{"id": 1, "type": "report", "run_id": "r1", "report": [1]}',
        b'{"id": 2, "type": "report", "run_id": "r1", "report": 5}',
        b'{"id": 3, "type": "report", "run_id": "r1", "report": true}',
        _deep(2000),
        b"[" * 2000 + b"]" * 2000,
        b'{"id": 6, "type": "query", "what": "statistics"}',
    ]
    done = _run_piped(lines, "--no-events")
    assert (done.returncode, done.stderr) == (0, b"")
    replies = [json.loads(text) for text in done.stdout.splitlines()]
    by_id = {reply["id"]: reply for reply in replies if reply["id"] is not None}
    for corr in (1, 2, 3):
        assert (by_id[corr]["status"], by_id[corr]["code"]) == (422, "invalid_request")
        assert f"line {corr}: report must be a JSON object" in by_id[corr]["error"]
    deep = sorted(reply["error"] for reply in replies if reply["id"] is None)
    assert deep == ["line 4: nested too deeply to read", "line 5: nested too deeply to read"]
    assert by_id[6]["status"] == 200 and len(replies) == 6


def _replies(lines: list[bytes]) -> dict[int, dict[str, Any]]:
    """Serve ``lines`` over stdio (no events) to the end of the input; its replies by id."""
    out = io.BytesIO()
    assert serve_stdio(io.BytesIO(b"\n".join(lines) + b"\n"), out, events=False, grace_ms=100) == 0
    return {reply["id"]: reply for reply in map(json.loads, out.getvalue().splitlines())}


def test_stdio_refuses_a_field_its_own_operations_do_not_take_naming_it() -> None:
    lines = [
        b'{"id": 1, "type": "report", "run_id": "r1", "report": {"type": "end"}, "runId": "r1"}',
        b'{"id": 2, "type": "query", "what": "statistics", "run_id": "r1"}',
        b'{"id": 3, "type": "query", "what": "run", "run_id": "r1", "session": "s1"}',
        b'{"id": 4, "type": "directories", "directories": ["/p/a"], "lod": false}',
    ]
    replies = _replies(lines)
    expected = {1: "runId", 2: "run_id", 3: "session", 4: "lod"}
    for corr, field in expected.items():
        assert (replies[corr]["type"], replies[corr]["status"]) == ("error", 422), replies[corr]
        assert f"unknown field `{field}`" in replies[corr]["error"], replies[corr]
    assert replies[4]["error"] == "line 4: directories: unknown field `lod`"


def _start(corr: int, run_id: str, **extra: Any) -> bytes:
    line = {"id": corr, "type": "start_run", "run_id": run_id, "session": run_id, "directory": "/p/a"}
    return json.dumps({**line, **extra}).encode()


def test_stdio_refuses_an_unknown_field_of_a_request_naming_it_and_starts_or_cancels_nothing() -> None:
    lines = [
        _start(1, "r1", deadline=200),
        _start(2, "r2", leaseMs=300),
        b'{"id": 3, "type": "cancel", "run_id": "r1", "reasn": "timeout"}',
        b'{"id": 4, "type": "cancel", "run_id": "r1", "lease_ms": 300}',
        b'{"id": 5, "type": "close", "do": "dispose_all", "mode": "maintenance", "origin": "x", "grace": 1}',
        b'{"id": 6, "type": "query", "what": "statistics"}',
    ]
    replies = _replies(lines)
    for corr, field in {1: "deadline", 2: "leaseMs", 3: "reasn", 4: "lease_ms", 5: "grace"}.items():
        assert (replies[corr]["type"], replies[corr]["status"]) == ("error", 422), replies[corr]
        assert field in replies[corr]["error"], replies[corr]
    stats = replies[6]["answer"]
    assert (stats["runs_known"], stats["actions_pending"]) == (0, 0)


def test_a_start_with_a_lease_of_0_is_refused_not_given_the_default_lease() -> None:
    line = _start(1, "r1", lease_ms=0)
    out = io.BytesIO()
    assert serve_stdio(io.BytesIO(line + b"\n"), out, events=False, grace_ms=100) == 0
    (reply,) = map(json.loads, out.getvalue().splitlines())
    assert (reply["status"], reply["answer"]["code"]) == (422, "invalid_request"), reply
    assert "lease_ms must be between" in reply["answer"]["error"]


def _read_line(selector: selectors.BaseSelector, stream: int, timeout: float = 20.0) -> bytes:
    """One line from a raw pipe, or fail after ``timeout`` seconds."""
    data = b""
    while not data.endswith(b"\n"):
        if not selector.select(timeout):
            raise AssertionError(f"no line within {timeout} s; read {data!r}")
        chunk = os.read(stream, 1)
        if not chunk:
            raise AssertionError(f"stdout ended; read {data!r}")
        data += chunk
    return data


def test_the_sidecar_shuts_down_within_its_grace_once_the_parent_closes_stdout() -> None:
    read_end, write_end = os.pipe()
    with tempfile.TemporaryFile() as errors:
        proc = subprocess.Popen(
            [*_COMMAND, "--directory", "/p/a", "--no-events", "--grace-ms", "200"],
            stdin=subprocess.PIPE,
            stdout=write_end,
            stderr=errors,
        )
        os.close(write_end)
        try:
            assert proc.stdin is not None
            with selectors.DefaultSelector() as selector:
                selector.register(read_end, selectors.EVENT_READ)
                start = {"id": 1, "type": "start_run", "run_id": "r1", "session": "s1", "directory": "/p/a"}
                proc.stdin.write(json.dumps(start).encode() + b"\n")
                proc.stdin.flush()
                assert json.loads(_read_line(selector, read_end))["answer"]["result"] == "ok"
            os.close(read_end)  # the parent stops listening; stdin stays open
            read_end = -1
            proc.stdin.write(b'{"id": 2, "type": "query", "what": "statistics"}\n')  # an answer nobody reads
            proc.stdin.flush()
            assert proc.wait(timeout=30) == 0  # the old sidecar ran on until stdin closed
        finally:
            if read_end >= 0:
                os.close(read_end)
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            if proc.stdin is not None:
                proc.stdin.close()
        errors.seek(0)
        said = errors.read().decode()
    assert said == "run-supervisor stdio: stdout was closed; shut down (origin stdout.closed)\n"


def test_stdio_event_ids_say_which_life_of_the_journal_they_belong_to(tmp_path: Any) -> None:
    journal = tmp_path / "runs.journal"
    lives: list[list[str]] = []
    for _ in range(2):  # two lives on one journal: the second one's ids must not repeat the first one's
        out = io.BytesIO()
        line = json.dumps({"id": 1, "type": "directories", "directories": ["/p/a"]}).encode()
        assert serve_stdio(io.BytesIO(line + b"\n"), out, journal=journal, grace_ms=100) == 0
        lives.append([m["id"] for m in map(json.loads, out.getvalue().splitlines()) if m["type"] == "event"])
    first, second = lives
    assert first and second
    epochs = [{event_id.split(":")[0] for event_id in life} for life in lives]
    assert all(len(epoch) == 1 for epoch in epochs) and epochs[0] != epochs[1], lives
    assert not set(first) & set(second), lives


class _StuckStream:
    """A stdout whose parent stopped reading it: every write waits until ``reading`` is set."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.reading = threading.Event()
        self.written: list[bytes] = []

    def write(self, data: bytes) -> int:
        self.entered.set()
        self.reading.wait(timeout=30)  # bounded: the test sets it in its finally
        self.written.append(bytes(data))
        return len(data)

    def flush(self) -> None:
        pass


def test_the_stdio_writer_ends_as_stalled_once_more_than_its_bound_waits_and_queues_nothing_more() -> None:
    stream = _StuckStream()
    writer = _Writer(cast(IO[bytes], stream), max_pending=100)
    why: list[str] = []
    writer.when_ended(why.append)
    try:
        writer.put(b"a" * 9)  # 10 bytes with its newline: the thread takes it, and its write blocks
        assert stream.entered.wait(timeout=10)
        writer.put(b"b" * 39)
        writer.put(b"c" * 39)  # 80 bytes wait behind it: within the bound
        assert (writer.pending, writer.ended, why) == (80, None, [])
        writer.put(b"d" * 39)  # 120 would wait: the parent stopped reading
        assert (writer.ended, why, writer.pending) == ("stdout.stalled", ["stdout.stalled"], 0)
        for _ in range(1000):  # 1 MB more: none of it is kept
            writer.put(b"e" * 1000)
        assert writer.pending == 0
    finally:
        stream.reading.set()
        writer.close(timeout=10)
    assert stream.written == [b"a" * 9 + b"\n"]  # what waited behind the stuck write was let go
    assert why == ["stdout.stalled"]


def test_the_stdio_writer_keeps_what_waits_within_its_bound_and_takes_a_longer_line_when_none_waits() -> None:
    stream = _StuckStream()
    writer = _Writer(cast(IO[bytes], stream), max_pending=100)
    try:
        writer.put(b"a" * 9)
        assert stream.entered.wait(timeout=10)
        writer.put(b"l" * 299)  # 300 bytes, more than the bound, but no other line waits: taken
        assert (writer.pending, writer.ended) == (300, None)
    finally:
        stream.reading.set()  # the parent reads again
        writer.close(timeout=10)
    assert stream.written == [b"a" * 9 + b"\n", b"l" * 299 + b"\n"]
    assert writer.ended is None
    within = _StuckStream()
    writer = _Writer(cast(IO[bytes], within), max_pending=100)
    try:
        writer.put(b"a" * 9)
        assert within.entered.wait(timeout=10)
        for letter in b"bcd":
            writer.put(bytes([letter]) * 32)  # 99 bytes wait: within the bound
        assert (writer.pending, writer.ended) == (99, None)
    finally:
        within.reading.set()
        writer.close(timeout=10)
    assert within.written == [b"a" * 9 + b"\n", *(bytes([c]) * 32 + b"\n" for c in b"bcd")]
    assert writer.ended is None


def _rss_mib(pid: int) -> float | None:
    """The process's resident set (VmRSS), or None once it has gone."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except (FileNotFoundError, ProcessLookupError):
        pass
    return None


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads VmRSS from /proc")
def test_a_parent_that_stops_reading_stdout_ends_the_session_as_stalled_with_its_memory_bounded() -> None:
    read_end, write_end = os.pipe()
    # Each query names a 512 KiB correlation id, which its answer echoes: 600 of them are 300 MiB of
    # answers for a parent that never reads them (the old sidecar kept them all: +300 MiB and running).
    query = json.dumps({"id": "x" * (512 << 10), "type": "query", "what": "statistics"}).encode() + b"\n"
    fed: list[int] = []
    with tempfile.TemporaryFile() as errors:
        proc = subprocess.Popen(
            [*_COMMAND, "--no-events", "--grace-ms", "200"],
            stdin=subprocess.PIPE,
            stdout=write_end,
            stderr=errors,
        )
        os.close(write_end)
        assert proc.stdin is not None
        stdin = proc.stdin

        def feed() -> None:
            try:
                for count in range(1, 601):
                    stdin.write(query)
                    fed.append(count)
                stdin.flush()
            except (BrokenPipeError, OSError, ValueError):
                pass  # the sidecar ended and stopped reading: what it is sent now goes nowhere

        feeder = threading.Thread(target=feed, name="test-stdio-feeder")
        peak = 0.0
        try:
            with selectors.DefaultSelector() as selector:
                selector.register(read_end, selectors.EVENT_READ)
                stdin.write(b'{"id": 1, "type": "query", "what": "statistics"}\n')
                stdin.flush()
                assert json.loads(_read_line(selector, read_end))["status"] == 200  # it is up
            idle = _rss_mib(proc.pid)
            assert idle is not None
            feeder.start()  # from now on nobody reads stdout, and stdout stays open
            for _ in range(400):  # at most 40 s: poll the process, sampling its memory meanwhile
                try:
                    proc.wait(timeout=0.1)
                    break
                except subprocess.TimeoutExpired:
                    peak = max(peak, (_rss_mib(proc.pid) or idle) - idle)
                    if peak > 128:
                        break  # it grows with what nobody reads: fail now, not at the wait's end
            assert peak <= 128, f"the sidecar grew by {peak:.0f} MiB for a parent that stopped reading"
            assert proc.poll() == 0, "the sidecar ran on for a parent that stopped reading stdout"
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)
            if feeder.ident is not None:
                feeder.join(timeout=30)
            with contextlib.suppress(OSError):
                stdin.close()
            os.close(read_end)
        errors.seek(0)
        said = errors.read().decode()
    assert said == (
        "run-supervisor stdio: stdout stalled (more than 16777216 bytes unread by the parent); "
        "shut down (origin stdout.stalled)\n"
    )
    assert len(fed) < 600, "it was still reading when all 300 MiB had been sent"
