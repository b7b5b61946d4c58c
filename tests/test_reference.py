"""docs/reference.md is generated from the docstrings: every public name has one, and the page is current."""

from __future__ import annotations

from pathlib import Path

from script_support import load_script

ROOT = Path(__file__).resolve().parents[1]


def test_every_public_name_and_member_has_a_docstring() -> None:
    _, missing = load_script("gen_reference").render()
    assert missing == [], f"public names without a docstring: {missing}"


def test_the_reference_page_is_what_the_docstrings_generate() -> None:
    text, _ = load_script("gen_reference").render()
    page = (ROOT / "docs" / "reference.md").read_text(encoding="utf-8")
    assert page == text, "docs/reference.md is stale: run python scripts/gen_reference.py"


def test_the_reference_names_every_public_name() -> None:
    import run_supervisor

    page = (ROOT / "docs" / "reference.md").read_text(encoding="utf-8")
    absent = [name for name in run_supervisor.__all__ if f"### `{name}`" not in page]
    assert absent == []
