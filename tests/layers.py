"""The suite's two layers. The README's test command runs every test, the generative and repeated ones
as a shallow smoke; CI also runs the tests marked ``deep`` at full depth::

    RUN_SUPERVISOR_DEEP=1 .venv/bin/python -m pytest -m deep

Both layers make the same assertions: only how far a search goes, how many sequences a state machine
tries and how often a race is repeated differ.
"""

from __future__ import annotations

import os
from typing import TypeVar

T = TypeVar("T")

DEEP = os.environ.get("RUN_SUPERVISOR_DEEP", "") not in ("", "0")


def pick(smoke: T, deep: T) -> T:
    """``deep`` in the deep layer, ``smoke`` otherwise."""
    return deep if DEEP else smoke
