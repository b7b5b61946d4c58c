"""A library stays silent unless its host asks: loguru is disabled for our namespace as soon as loguru is
imported (by the host or by the library, whichever comes first), and no handler is added to any logger
the library does not own.

The library logs through ``logger`` here, loguru's own logger imported where a record is first made: a
start makes none, so ``run-supervisor serve`` reaches its ready line without loading loguru. Until then a
hook on ``sys.meta_path`` waits for loguru's import, to disable our namespace the moment loguru's module
has run; a host's ``enable`` afterwards wins, as it did when the library imported loguru itself.

A host turns logging on in one of two ways:

- ``loguru.logger.enable("run_supervisor")``: the records go to the host's loguru sinks;
- ``log_to_stdlib()``: one call that routes them to the standard ``logging`` module, each record to
  the stdlib logger of its module's name (``run_supervisor.actors._supervisor``...), so a host's
  ``logging`` configuration (levels, handlers, ``logging.getLogger("run_supervisor")``) governs them.

pykka logs through the standard ``logging`` module itself (its ``pykka`` logger, which has pykka's
own ``NullHandler``): a host routes it as any other library's. ``bridge_pykka_logging()`` is there
for a host on loguru that wants pykka's records in its sinks too, under ``run_supervisor.pykka``.
"""

from __future__ import annotations

import sys
from types import ModuleType
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from importlib.machinery import ModuleSpec

    from loguru import Logger, Message

__all__ = ["bridge_pykka_logging", "log_to_stdlib", "logger"]

_NAMESPACE = "run_supervisor"


class _Loguru:
    """loguru's logger, imported on first use; each member is looked up once, then kept."""

    def __getattr__(self, name: str) -> Any:
        from loguru import logger as loguru_logger

        value = getattr(loguru_logger, name)
        setattr(self, name, value)
        return value


logger = cast("Logger", _Loguru())
"""The library's logger (``from run_supervisor.actors._logging import logger``): loguru's, loaded lazily."""


class _SilenceOnImport:
    """A finder that finds nothing itself: it hands loguru's own spec on, with a loader that disables
    the library's namespace once loguru's module has run; then it leaves ``sys.meta_path``."""

    def find_spec(self, name: str, path: object = None, target: object = None) -> ModuleSpec | None:
        if name != "loguru":
            return None
        import importlib.util

        if self in sys.meta_path:
            sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.loader is not None:
            spec.loader = _ThenSilence(spec.loader)  # type: ignore[assignment]
        return spec


class _ThenSilence:
    def __init__(self, loader: Any) -> None:
        self._loader = loader

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        return cast("ModuleType | None", self._loader.create_module(spec))

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        module.logger.disable(_NAMESPACE)

    def __getattr__(self, name: str) -> Any:  # get_source, get_resource_reader...: loguru's loader's
        return getattr(self._loader, name)


def bridge_pykka_logging() -> None:
    """Opt in: pykka's standard-library records also reach loguru (under ``run_supervisor.pykka``).
    Adds one handler to the ``pykka`` logger, once; never called by the library itself."""
    import logging

    class ToLoguru(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            level: str | int
            try:
                level = logger.level(record.levelname).name
            except ValueError:
                level = record.levelno
            logger.patch(lambda r: r.update({"name": "run_supervisor.pykka"})).opt(
                exception=record.exc_info
            ).log(level, record.getMessage())

    pykka_logger = logging.getLogger("pykka")
    if not any(getattr(h, "run_supervisor_bridge", False) for h in pykka_logger.handlers):
        bridge = ToLoguru()
        bridge.run_supervisor_bridge = True  # type: ignore[attr-defined]
        pykka_logger.addHandler(bridge)


def _to_stdlib(message: Message) -> None:
    import logging  # here, not at import: the library's import loads no more than it needs

    record = message.record
    name = record["name"] or _NAMESPACE
    target = logging.getLogger(name)
    level = record["level"].no
    if not target.isEnabledFor(level):
        return
    error = record["exception"]
    exc_info = (error.type, error.value, error.traceback) if error is not None and error.type else None
    std = target.makeRecord(
        name,
        level,
        str(record["file"].path),
        record["line"],
        record["message"],
        (),
        exc_info,  # type: ignore[arg-type]
        func=record["function"],
        extra={"run_supervisor": dict(record["extra"])},
    )
    target.handle(std)


def log_to_stdlib(*, level: int | str = 0, keep_default_sink: bool = False) -> int:
    """Route the library's log records to the standard ``logging`` module, and turn them on: each
    record goes to ``logging.getLogger(<its module's name>)`` at its level (loguru's ``SUCCESS``
    and ``TRACE`` at their numbers, 25 and 5), with the record's ``extra`` fields under
    ``record.run_supervisor``; the stdlib loggers' own levels and handlers decide the rest.
    ``level`` drops less severe records before they are formatted. Returns the loguru handler id:
    ``loguru.logger.remove(id)`` undoes the routing (``loguru.logger.disable("run_supervisor")``
    silences the library again).

    A host that routes to ``logging`` has not configured loguru: its default sink (stderr, handler
    id 0) would print every record a second time, so it is removed if it is still installed, unless
    ``keep_default_sink``."""
    if not keep_default_sink:
        try:
            logger.remove(0)
        except ValueError:
            pass  # removed already (a host that configures loguru itself)
    handler_id = logger.add(_to_stdlib, level=level, filter=_NAMESPACE, format="{message}", catch=True)
    logger.enable(_NAMESPACE)
    return handler_id


if "loguru" in sys.modules:  # the host imported it first: silenced now, as before the host's enable()
    sys.modules["loguru"].logger.disable(_NAMESPACE)
else:
    sys.meta_path.insert(0, _SilenceOnImport())
