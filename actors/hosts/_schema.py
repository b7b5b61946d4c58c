"""The JSON Schema of what the wire hosts add to the protocol: external-run reports, the host's own
events (interrupt and answer notices, the stream reset), and the stdio lines. ``run-supervisor schema``
prints it with the protocol's."""

from __future__ import annotations

from typing import Any

import msgspec

from run_supervisor.actors.hosts._answers import CompatEvent
from run_supervisor.actors.hosts._external import (
    AnswerNotice,
    ExternalReport,
    InterruptNotice,
    RefusedNotice,
    ReportOutcome,
)
from run_supervisor.actors.hosts._hub import StreamReset
from run_supervisor.actors.hosts._remote_caches import HookRequest

__all__ = ["StreamReset", "host_schema_roots", "with_hosts"]


class StdioAnswer(msgspec.Struct, frozen=True, tag="answer", tag_field="type", kw_only=True):
    """One per understood stdin line: ``id`` is the line's, ``status`` from the HTTP table."""

    id: Any
    status: int
    answer: Any


class StdioError(msgspec.Struct, frozen=True, tag="error", tag_field="type", kw_only=True):
    """One per stdin line that was not understood; ``error`` names the line and the problem."""

    id: Any
    status: int
    code: str
    error: str


class StdioEvent(msgspec.Struct, frozen=True, tag="event", tag_field="type", kw_only=True):
    """One event; ``compat`` (present only then) is its seed 002 shape, for the events those clients
    consume (``global.disposed``, ``server.instance.disposed``), as HTTP's ``/event`` sends them."""

    id: str
    event: Any
    compat: CompatEvent | None = None


def host_schema_roots() -> dict[str, Any]:
    """The host-level roots, by name, for the schema document."""
    return {
        "ExternalReport": ExternalReport,
        "ReportOutcome": ReportOutcome,
        "HostEvent": InterruptNotice | AnswerNotice | RefusedNotice | HookRequest | StreamReset,
        "StdioOutput": StdioAnswer | StdioError | StdioEvent,
    }


def with_hosts(schema: dict[str, Any]) -> dict[str, Any]:
    """The protocol's schema document with the host-level roots added (as more ``anyOf`` entries)."""
    roots = host_schema_roots()
    names = list(roots)
    refs, components = msgspec.json.schema_components(
        [roots[name] for name in names], ref_template="#/$defs/{name}"
    )
    defs = dict(schema["$defs"])
    for name, component in components.items():
        defs.setdefault(name, component)
    for name, ref in zip(names, refs, strict=True):
        defs.setdefault(name, ref)
    # What the hosts send has every field, always (as the protocol's answers and events).
    sent = (
        "InterruptNotice",
        "AnswerNotice",
        "RefusedNotice",
        "StreamReset",
        "ReportOutcome",
        "StdioAnswer",
        "StdioError",
        "StdioEvent",
    )
    for name in sent:
        required = [key for key in defs[name]["properties"] if (name, key) != ("StdioEvent", "compat")]
        defs[name] = {**defs[name], "required": required}
    return {
        **schema,
        "title": f"{schema.get('title', 'run-supervisor')}, with the wire hosts' messages",
        "anyOf": [*schema["anyOf"], *({"$ref": f"#/$defs/{name}"} for name in names)],
        "$defs": defs,
    }
