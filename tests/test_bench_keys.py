"""scripts/bench.py can print what it measured (every key it reports says its unit and what it is), and
docs/performance.md shows figures of the code it describes: they name the commit they were measured on,
and report the keys the benchmark reports."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from script_support import load_script

ROOT = Path(__file__).resolve().parents[1]


def test_every_reported_key_has_its_unit_and_its_sentence_and_every_target_is_a_reported_key() -> None:
    bench = load_script("bench")
    reported = tuple(bench.KEYS) + tuple(bench.PG_KEYS)
    assert [key for key in reported if key not in bench.WHAT] == []
    assert [key for key in bench.TARGETS if key not in reported] == []


PERFORMANCE = ROOT / "docs" / "performance.md"
MEASURED_ON = re.compile(r"[Mm]easured on commit `([0-9a-f]{7,40})`")


def _last_full_run() -> str:
    """docs/performance.md's section of the benchmark's last full run (up to the next ``## `` heading)."""
    text = PERFORMANCE.read_text(encoding="utf-8")
    start = text.index("\n## The last full run")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def _git(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["git", "-C", str(ROOT), *args], check=False, capture_output=True, text=True, timeout=60
    )


def test_the_performance_page_names_the_commit_its_figures_were_measured_on_in_this_history() -> None:
    section = _last_full_run()
    commits = MEASURED_ON.findall(section)
    assert commits, "the last full run names no commit ('measured on commit `<sha>`')"
    assert "load average" in section  # and how loaded the machine was
    if shutil.which("git") is None or _git("rev-parse", "--is-shallow-repository").stdout.strip() != "false":
        pytest.skip("no full git history here to look the commit up in")
    for commit in commits:
        assert _git("merge-base", "--is-ancestor", commit, "HEAD").returncode == 0, (
            f"docs/performance.md's figures were measured on {commit}, which is not in this history"
        )


def test_the_performance_page_reports_every_target_key_and_only_keys_the_benchmark_reports() -> None:
    bench = load_script("bench")
    reported = re.findall(r"^\| `([a-z0-9_]+)` \|", _last_full_run(), flags=re.MULTILINE)
    known = set(bench.WHAT) | set(bench.RAW_WHAT)
    assert [key for key in reported if key not in known] == []  # a retired or renamed key: measure again
    assert [key for key in bench.TARGETS if key not in reported] == []  # a new target: measure it
