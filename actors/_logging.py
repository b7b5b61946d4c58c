"""A library stays silent unless its host asks: loguru is disabled for our namespace at import.

Hosts turn logging on with ``loguru.logger.enable("run_supervisor")``. pykka logs through the standard
``logging`` module; its records are bridged into loguru under the name ``run_supervisor.pykka`` so that one
switch governs both (and nothing reaches stderr through logging's last-resort handler).
"""

from __future__ import annotations

import logging

from loguru import logger

__all__ = ["bridge_pykka_logging"]


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
    pykka_logger = logging.getLogger("pykka")
    if not any(isinstance(h, _ToLoguru) for h in pykka_logger.handlers):
        pykka_logger.addHandler(_ToLoguru())


logger.disable("run_supervisor")
bridge_pykka_logging()
