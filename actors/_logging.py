"""A library stays silent unless its host asks: loguru is disabled for our namespace at import, and
no handler is added to any logger the library does not own.

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

import logging
from typing import TYPE_CHECKING

from loguru import logger

if TYPE_CHECKING:
    from loguru import Message

__all__ = ["bridge_pykka_logging", "log_to_stdlib"]

_NAMESPACE = "run_supervisor"


class _ToLoguru(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        level: str | int
        try:
            level = logger.level(record.levelname).name
        except ValueError:
            level = record.levelno
        logger.patch(lambda r: r.update({"name": "run_supervisor.pykka"})).opt(exception=record.exc_info).log(
            level, record.getMessage()
        )


def bridge_pykka_logging() -> None:
    """Opt in: pykka's standard-library records also reach loguru (under ``run_supervisor.pykka``).
    Adds one handler to the ``pykka`` logger, once; never called by the library itself."""
    pykka_logger = logging.getLogger("pykka")
    if not any(isinstance(h, _ToLoguru) for h in pykka_logger.handlers):
        pykka_logger.addHandler(_ToLoguru())


def _to_stdlib(message: Message) -> None:
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


logger.disable(_NAMESPACE)
