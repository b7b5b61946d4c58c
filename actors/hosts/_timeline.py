"""The timeline page: live at ``GET /`` of the HTTP host, static for a scenario (``--html``)."""

from __future__ import annotations

__all__ = ["live_page"]


def live_page() -> str:
    return "<!doctype html><title>run-supervisor</title><p>timeline</p>"
