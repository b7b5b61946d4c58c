"""docs/reference.md is generated from the docstrings: every public name has one, and the page is current."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_reference", ROOT / "scripts" / "gen_reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("gen_reference", module)
    spec.loader.exec_module(module)
    return module


def test_every_public_name_and_member_has_a_docstring() -> None:
    _, missing = _generator().render()
    assert missing == [], f"public names without a docstring: {missing}"


def test_the_reference_page_is_what_the_docstrings_generate() -> None:
    text, _ = _generator().render()
    page = (ROOT / "docs" / "reference.md").read_text(encoding="utf-8")
    assert page == text, "docs/reference.md is stale: run python scripts/gen_reference.py"


def test_the_reference_names_every_public_name() -> None:
    import run_supervisor

    page = (ROOT / "docs" / "reference.md").read_text(encoding="utf-8")
    absent = [name for name in run_supervisor.__all__ if f"### `{name}`" not in page]
    assert absent == []
