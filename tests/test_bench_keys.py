"""scripts/bench.py can print what it measured: every key it reports says its unit and what it is."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench", ROOT / "scripts" / "bench.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("bench", module)
    spec.loader.exec_module(module)
    return module


def test_every_reported_key_has_its_unit_and_its_sentence_and_every_target_is_a_reported_key() -> None:
    bench = _bench()
    reported = tuple(bench.KEYS) + tuple(bench.PG_KEYS)
    assert [key for key in reported if key not in bench.WHAT] == []
    assert [key for key in bench.TARGETS if key not in reported] == []
