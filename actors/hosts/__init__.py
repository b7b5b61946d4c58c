"""Hosts that reach the supervisor from outside Python: HTTP + SSE (``run-supervisor serve``), stdio
JSON lines (``run-supervisor stdio``), runs owned by the client, and the timeline page.

See docs/wire.md for the routes, statuses, the SSE format, the stdio framing and the external-run
protocol. The HTTP host needs the ``server`` extra (Starlette, uvicorn); importing this package does
not, so the names are loaded on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from run_supervisor.actors.hosts._external import ExternalRuns as ExternalRuns
    from run_supervisor.actors.hosts._external import decode_report as decode_report
    from run_supervisor.actors.hosts._http import HttpSettings as HttpSettings
    from run_supervisor.actors.hosts._http import ServerThread as ServerThread
    from run_supervisor.actors.hosts._http import create_app as create_app
    from run_supervisor.actors.hosts._hub import EventHub as EventHub
    from run_supervisor.actors.hosts._remote_caches import RemoteCaches as RemoteCaches
    from run_supervisor.actors.hosts._wire import STATUS_BY_CODE as STATUS_BY_CODE
    from run_supervisor.actors.hosts._wire import HostError as HostError
    from run_supervisor.actors.hosts._wire import WireHost as WireHost

_WHERE = {
    "ExternalRuns": "_external",
    "decode_report": "_external",
    "HttpSettings": "_http",
    "ServerThread": "_http",
    "create_app": "_http",
    "EventHub": "_hub",
    "RemoteCaches": "_remote_caches",
    "STATUS_BY_CODE": "_wire",
    "HostError": "_wire",
    "WireHost": "_wire",
}

__all__ = [
    "STATUS_BY_CODE",
    "EventHub",
    "ExternalRuns",
    "HostError",
    "HttpSettings",
    "RemoteCaches",
    "ServerThread",
    "WireHost",
    "create_app",
    "decode_report",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
