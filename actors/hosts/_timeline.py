"""The timeline page: swim lanes of instances, runs (with tool cards) and close actions, on the
axis of the event sequence. Live at ``GET /`` of the HTTP host (it follows ``GET /events``), and
static for a scenario (``run-supervisor scenario PATH --html DIR``): one self-contained HTML file,
no network, the same renderer."""

from __future__ import annotations

import html
import json
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

__all__ = ["CHROMIUM_FLAGS", "live_page", "scenario_page", "write_scenario_pages"]

CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    # Run the page's timers and network until it has rendered, then dump or shoot.
    "--virtual-time-budget=4000",
)
"""How headless Chromium draws a page (the tests read its DOM; scripts/timeline_pictures.py shoots it)."""


@cache
def _template() -> str:
    return resources.files(__package__).joinpath("timeline.html").read_text(encoding="utf-8")


def _page(title: str, status: str, data: Any) -> str:
    # JSON inside a <script> element: "</" would end it early, so it is written "<\/".
    embedded = json.dumps(data, separators=(",", ":")).replace("</", "<\\/")
    return (
        _template()
        .replace("__TITLE__", html.escape(title))
        .replace("__STATUS__", html.escape(status))
        .replace("__DATA__", embedded)
    )


def live_page() -> str:
    """The live page (its data comes from the event stream; open it as ``/#token=<token>``)."""
    return _page("run-supervisor: live timeline", "connecting...", None)


def scenario_page(report: dict[str, Any]) -> str:
    """A static timeline of one scenario report (``play``'s result)."""
    verdict = "held" if report.get("passed") else "FAILED"
    data = {"events": report.get("events", []), "runs": report.get("runs", {})}
    return _page(
        f"{report.get('scenario', 'scenario')}", f"scenario {verdict}: {report.get('file', '')}", data
    )


def write_scenario_pages(reports: list[dict[str, Any]], directory: Path) -> list[Path]:
    """Write one ``<file stem>.html`` per played scenario into ``directory`` (made if missing)."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for report in reports:
        if "events" not in report:  # an invalid file: nothing was played
            continue
        target = directory / f"{Path(str(report.get('file', 'scenario'))).stem}.html"
        target.write_text(scenario_page(report), encoding="utf-8")
        written.append(target)
    return written
