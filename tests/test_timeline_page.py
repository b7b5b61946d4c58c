"""The timeline page: static for a scenario, live at / of the HTTP host, checked in real headless
Chromium (Debian's package; the browser tests are skipped where it is not installed)."""

from __future__ import annotations

import html
import json
import re
import shutil
from pathlib import Path

import httpx
import pytest
from wire_support import chromium, served

from run_supervisor.actors import RunHandle
from run_supervisor.actors._cli import main
from run_supervisor.actors.hosts._timeline import live_page, scenario_page

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = ROOT / "docs" / "scenarios"
needs_chromium = pytest.mark.skipif(shutil.which("chromium") is None, reason="chromium is not installed")


def timeline_dom(scenario: str, folder: Path) -> str:
    """The DOM headless Chromium draws of library scenario ``scenario``'s static timeline page, written
    to ``folder``."""
    assert main(["scenario", str(SCENARIOS / f"{scenario}.toml"), "--html", str(folder)]) == 0
    return chromium((folder / f"{scenario}.html").as_uri(), str(folder / "profile"), "--dump-dom")


def test_scenario_html_writes_one_self_contained_page_per_scenario(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = "04-dispose-all-with-runs-in-two-directories"
    assert main(["scenario", str(SCENARIOS / f"{scenario}.toml"), "--html", str(tmp_path / "out")]) == 0
    page = (tmp_path / "out" / f"{scenario}.html").read_text()
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page)  # no CDN, no network
    assert '"type":"lifecycle.deferred"' in page
    assert "wrote" in capsys.readouterr().err


def test_embedded_data_cannot_close_its_script_element() -> None:
    page = scenario_page(
        {"scenario": "x", "events": [{"seq": 1, "type": "run.queued", "run": "</script><b>"}]}
    )
    assert "</script><b>" not in page
    assert "<\\/script><b>" in page
    assert "__DATA__" not in live_page() and "null" in live_page()


@needs_chromium
def test_a_static_scenario_timeline_renders_a_deferred_close_and_tool_cards_in_chromium(
    tmp_path: Path,
) -> None:
    dom = timeline_dom("04-dispose-all-with-runs-in-two-directories", tmp_path)
    assert re.search(
        r'class="lane action" data-action="a1" data-do="dispose_all" data-state="deferred, then completed"',
        dom,
    )
    assert 'data-blocking-run="r1"' in dom and 'data-blocking-run="r2"' in dom
    assert (
        '<div class="card" data-tool="bash" data-state="completed"><b>bash</b> · completed — bash ran</div>'
        in dom
    )


@needs_chromium
def test_a_crash_scenario_draws_the_lost_generation_and_the_restarted_one_on_their_own_lanes(
    tmp_path: Path,
) -> None:
    dom = timeline_dom("40-crash-while-a-bash-call-is-prepared", tmp_path)
    lanes = re.findall(r'class="lane instance" data-directory="/proj/a" data-generation="1"', dom)
    assert len(lanes) == 2  # before the crash and after the restart, each with its own bar
    assert "lost with the crashed supervisor" in dom
    assert 'data-state="live"' in dom  # the restarted generation serves the follow-up


@needs_chromium
def test_each_life_s_generation_is_named_by_its_epoch_and_every_crashed_life_s_instance_is_lost(
    tmp_path: Path,
) -> None:
    dom = timeline_dom("56-a-crashed-turn-is-resumed-once-then-its-budget-ends-it", tmp_path)
    assert "gen 1 · life 1" in dom and "gen 1 · life 2" in dom  # two lives' generation 1 told apart
    assert dom.count('title="closed: lost with the crashed supervisor"') == 2  # the second crash too
    assert 'data-state="live"' not in dom  # the third life loads nothing


@needs_chromium
def test_a_run_that_ended_while_queued_says_how_on_its_queued_bar(tmp_path: Path) -> None:
    dom = timeline_dom("35-follow-up-coalesces-into-the-queued-one", tmp_path)
    assert "interrupted while queued (coalesced, r3)" in dom  # replaced by the newer follow-up
    assert "interrupted while queued (dropped, r3)" in dom  # its run was stopped


@needs_chromium
def test_the_live_page_shows_a_waiting_deferred_close_and_a_tool_card_from_the_event_stream(
    tmp_path: Path,
) -> None:
    with served() as srv, httpx.Client(base_url=srv.url, headers=srv.auth, timeout=10) as client:
        client.post("/runs", json={"run_id": "r1", "session": "s1", "directory": "/w/b"})
        for state in ("pending", "prepared", "running", "completed"):
            client.post("/runs/r1/reports", json={"type": "part", "tool": "bash", "state": state})
        client.post("/runs/r1/reports", json={"type": "end"})
        assert RunHandle(srv.supervisor, "r1").wait(timeout=10).outcome == "completed"
        client.post("/runs", json={"run_id": "r2", "session": "s2", "directory": "/w/a"})
        client.post("/runs/r2/reports", json={"type": "step", "kind": "model"})
        deferred = client.post(
            "/global/dispose", headers={"x-opencode-client-action-kind": "settings.provider.connect"}
        )
        assert deferred.json()["status"] == "deferred"
        url = f"{srv.url}/#token={srv.server.token}"
        # The browser renders the stream as it arrives, on its own clock: a bounded retry until the
        # deferred close (the last event sent) is drawn, not a sleep.
        for attempt in range(6):
            dom = chromium(url, str(tmp_path / f"profile{attempt}"), "--dump-dom")
            if 'data-last-seq="' in dom and 'data-action="lc-1"' in dom and 'data-blocking-run="r2"' in dom:
                break
        shot = tmp_path / "timeline-live.png"
        chromium(url, str(tmp_path / "profile-shot"), f"--screenshot={shot}", "--window-size=1100,620")
        client.post("/runs/r2/reports", json={"type": "end"})
    assert '<span id="status" class="live">live</span>' in dom
    assert re.search(
        r'class="lane action waiting" data-action="lc-1" data-do="dispose_all" data-state="deferred"', dom
    )
    assert re.search(r'Deferred: waits for <span data-blocking-run="r2">r2</span> in /w/a', dom)
    assert (
        '<div class="card" data-tool="bash" data-state="completed"><b>bash</b> · completed — bash ran</div>'
        in dom
    )
    assert re.search(r'class="lane run" data-run="r2" data-outcome="active"', dom)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@needs_chromium
def test_the_live_page_without_a_token_says_how_to_open_it(tmp_path: Path) -> None:
    with served() as srv:
        dom = chromium(f"{srv.url}/", str(tmp_path / "profile"), "--dump-dom")
    assert "unauthorized: open this page as /#token=" in dom


@needs_chromium
def test_a_stalled_run_is_drawn_stalled_until_the_confirm_that_interrupts_it(tmp_path: Path) -> None:
    dom = timeline_dom("39-stalled-run-holding-a-reload-is-interrupted-on-confirm", tmp_path)
    stalls = re.findall(r'<div class="stall" data-stalled-from="\d+" title="stalled: no progress"', dom)
    assert len(stalls) == 1
    assert 'data-confirmed="true"' in dom  # the refresh's lane marks the confirm
    assert re.search(r'class="lane run" data-run="r1" data-outcome="interrupted"', dom)


def test_the_page_words_no_card_sentence_of_its_own() -> None:
    # One source for card sentences: part_label, sent in every part; the page draws what it gets.
    page = live_page()
    for sentence in ("Did not run", "Stopped:", " failed", " ran`", "call being generated", "waiting for"):
        assert sentence not in page


@needs_chromium
@pytest.mark.parametrize(
    "scenario",
    [
        "01-provider-connect-during-tool-input-generation",
        "17-permission-rejected-without-message",
        "21-tool-fails",
    ],
)
def test_every_card_on_a_scenario_timeline_shows_the_label_the_events_carry(
    tmp_path: Path, scenario: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["scenario", str(SCENARIOS / f"{scenario}.toml"), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    labels = {part["label"] for run in report["runs"].values() for part in run["tool_parts"]}
    assert labels, "the scenario reaches a tool part"
    dom = timeline_dom(scenario, tmp_path)
    cards = re.findall(r'<div class="card"[^>]*><b>[^<]*</b> · [a-z]+ — ([^<]*)</div>', dom)
    assert labels <= {html.unescape(card) for card in cards}
