"""How a run ended, checked in one line: ``assert_ended(finished, Outcome.INTERRUPTED, reason=...)``."""

from __future__ import annotations

from typing import Any

from run_supervisor.protocol import Outcome


def assert_ended(ended: Any, outcome: Outcome, **fields: Any) -> None:
    """``ended`` (a ``run.finished`` event or a run's snapshot) has ``outcome`` and each of ``fields``
    (``reason=``, ``origin=``, ``action_id=`` ...) as given; a mismatch shows every field side by side."""
    got = {"outcome": ended.outcome, **{name: getattr(ended, name) for name in fields}}
    assert got == {"outcome": outcome, **fields}
