"""The docs are run, not just read: the example runs, and the state tables match the rules."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_quickstart_example_runs_and_shows_the_run_surviving_a_provider_connect() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "docs" / "examples" / "quickstart.py")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "tool card: bash ran" in done.stdout
    assert "second run: user_cancel" in done.stdout


def test_the_state_tables_in_the_architecture_doc_are_generated_from_the_rules() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_state_tables.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def test_the_readme_links_only_to_files_inside_the_repository() -> None:
    import re

    readme = (ROOT / "README.md").read_text()
    targets = re.findall(r"\]\(([^)#\s]+)", readme)
    assert targets, "the README links to the docs"
    for target in targets:
        assert "://" not in target and not target.startswith(("/", "..")), target
        assert (ROOT / target).exists(), f"README links to {target}, which is not in the repository"
    assert "../shared" not in readme


def test_every_library_scenario_has_its_timeline_picture_linked_from_the_scenario_readme() -> None:
    scenarios = ROOT / "docs" / "scenarios"
    readme = (scenarios / "README.md").read_text()
    for scenario in sorted(scenarios.glob("*.toml")):
        picture = f"timelines/{scenario.stem}.png"
        assert (scenarios / picture).exists(), f"no picture of {scenario.name}: scripts/timeline_pictures.py"
        assert f"]({picture})" in readme, f"docs/scenarios/README.md does not link {picture}"
