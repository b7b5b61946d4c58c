"""Hosts that reach the supervisor from outside Python: HTTP + SSE (``run-supervisor serve``), stdio
JSON lines (``run-supervisor stdio``), runs owned by the client, and the timeline page.

See docs/wire.md for the routes, statuses, the SSE format, the stdio framing and the external-run
protocol. The HTTP host needs the ``server`` extra (Starlette, uvicorn); importing this package does
not, so the names are loaded on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from run_supervisor.actors import _names

# The names, each imported once, from its home: type checkers read these imports; at run time each is
# imported on first use (actors/_names.py), so that importing this package needs no Starlette.
_HOMES = _names.homes(__file__)
_BEFORE = set(globals())

if TYPE_CHECKING or not _HOMES:  # pragma: no cover (at run time, only where the source cannot be read)
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

if not TYPE_CHECKING:  # hidden from type checkers, which would otherwise take any unknown name for Any
    __all__, __getattr__, __dir__ = _names.lazy(__name__, _HOMES, globals(), _BEFORE)
