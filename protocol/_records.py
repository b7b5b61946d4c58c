"""The decision core's own records: what it remembers of each run, session, instance and directory.

Mutable and private to the core (``protocol._core`` and ``protocol._lifecycle``); what leaves the
core is always a frozen snapshot or event.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from run_supervisor.protocol._enums import AskKind, InstanceState, InterruptReason, PartState, Phase, RunState
from run_supervisor.protocol._parts import PartSnapshot
from run_supervisor.protocol._rules import UNFINISHED_PART_STATES

if TYPE_CHECKING:
    from run_supervisor.protocol._asks import Ask

__all__ = ["_Directory", "_Instance", "_Interrupt", "_Part", "_Run", "_Session"]


@dataclass(slots=True)
class _Part:
    tool: str
    state: PartState
    call_id: str
    ran: bool = False  # it reached ``running``
    gated: bool = False  # running, but its first permission was not granted (yet)
    approved: bool = False  # a permission of this call was granted
    message: str | None = None
    reason: InterruptReason | None = None
    origin: str | None = None
    phase: Phase | None = None  # the phase it was interrupted in
    ask: Ask | None = None  # the open ask it waits on (the latest, if several)
    declined: AskKind | None = None  # the user declined its permission / dismissed its form
    shown: PartSnapshot | None = None  # as last announced by run.part.updated

    @property
    def tool_started(self) -> bool:
        """The tool began its work: it ran, and no permission it waits for gates it."""
        return self.ran and not self.gated


@dataclass(slots=True)
class _Interrupt:
    reason: InterruptReason
    origin: str
    action: str | None
    phase: Phase | None


@dataclass(slots=True)
class _Run:
    id: str
    session: str
    directory: str
    state: RunState = RunState.QUEUED
    generation: int | None = None
    parts: list[_Part] = field(default_factory=list)
    calls: dict[str, _Part] = field(default_factory=dict)  # its parts by call id
    interrupt: _Interrupt | None = None
    error: str | None = None
    abandoned: bool = False
    resume_of: str | None = None

    def open_part(self) -> _Part | None:
        """The latest unfinished part (parallel calls: the one begun last)."""
        for part in reversed(self.parts):
            if part.state in UNFINISHED_PART_STATES:
                return part
        return None


@dataclass(slots=True)
class _Session:
    id: str
    active: str | None = None
    """Its active run; a session is ``busy`` exactly while it has one."""
    queue: deque[str] = field(default_factory=deque)


@dataclass(slots=True)
class _Instance:
    directory: str
    generation: int
    state: InstanceState = InstanceState.LIVE
    runs: set[str] = field(default_factory=set)  # runs pinned here that have not finished
    closers: list[str] = field(default_factory=list)  # actions waiting for it to close

    @property
    def key(self) -> tuple[str, int]:
        return (self.directory, self.generation)


@dataclass(slots=True)
class _Directory:
    name: str
    current: _Instance | None = None
    last_generation: int = 0
    open: dict[int, _Instance] = field(default_factory=dict)  # not closed yet, by generation
