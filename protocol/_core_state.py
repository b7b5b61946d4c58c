"""The state every part of the decision core shares, declared once.

``SupervisorCore`` is one class made of parts (the asks, the lifecycle, the stalls, the deadlines:
``protocol._asks``, ``_lifecycle``, ``_stalls``, ``_deadlines``), each deciding with the core's
tables and with a few moves of the others. :class:`CoreState` is their common base: it names those
tables and moves, with their types, for the type checker; ``SupervisorCore.__init__`` sets the
tables, and the core or the part that owns a move defines it. The few moves more than one part
makes are defined here.

Only what the records' floor and below can name is here (runs, sessions, directories, instances,
commands, events, the rules' triggers), so no module of the core stands in an import circle; a part
that uses another part's own types (the asks' book, the lifecycle's actions) declares that alone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, TypedDict

from run_supervisor.protocol._enums import RunState

if TYPE_CHECKING:
    from run_supervisor.protocol._commands import Command
    from run_supervisor.protocol._enums import (
        CloseMode,
        InterruptReason,
        LoadCause,
        RejectCode,
        ReloadPolicy,
    )
    from run_supervisor.protocol._events import Event
    from run_supervisor.protocol._records import Journal, _Directory, _Instance, _Run, _Session
    from run_supervisor.protocol._requests import CloseOutcome, RequestOutcome
    from run_supervisor.protocol._rules import InstanceTrigger, RunTrigger

__all__ = ["CoreState"]


class _RunStamp(TypedDict):
    """The fields every event about a run opens with (``CoreState._stamp``): typed, so an event
    built with ``**stamp`` is still checked field by field."""

    seq: int
    run_id: str
    session: str


class _InstanceStamp(TypedDict):
    """The fields every event about a generation opens with (``CoreState._instance_stamp``)."""

    seq: int
    directory: str
    generation: int
    epoch: int | None


class CoreState:
    """What the parts of ``SupervisorCore`` use of it (see the module's docstring)."""

    if TYPE_CHECKING:
        # --- the tables (set by ``SupervisorCore.__init__``) ---
        _out: list[Command]
        _runs: dict[str, _Run]
        _sessions: dict[str, _Session]
        _dirs: dict[str, _Directory]
        _action_count: int
        _deadline_passed: bool
        _closed: bool
        _journal: Journal
        _touch: Callable[[object], None]
        _grants: dict[tuple[str, str], None]
        _config: dict[str, str]
        _deferred_loads: dict[str, tuple[str, ReloadPolicy, CloseMode]]
        reload_policy: ReloadPolicy
        retry_budget: tuple[int | None, int | None] | None

        # --- the moves (defined by the core, or by the part named) ---
        def _next_seq(self) -> int: ...
        def _emit(self, event: Event) -> None: ...
        def _ignore(self) -> None: ...
        def _reply(self, reply_to: Any, answer: CloseOutcome | RequestOutcome) -> None: ...
        def _reject(self, reply_to: Any, code: RejectCode, error: str, *, close: bool = False) -> None: ...
        def _known_unfinished(self, run_id: str, reply_to: Any, verb: str) -> _Run | None: ...
        def _move_run(self, run: _Run, trigger: RunTrigger) -> RunState: ...
        def _move_instance(self, instance: _Instance, trigger: InstanceTrigger) -> None: ...
        def _interrupt(
            self,
            run: _Run,
            reason: InterruptReason,
            origin: str,
            action: str | None,
            grace_ms: int | None = None,
        ) -> None: ...
        def _decide_interrupt(
            self, run: _Run, reason: InterruptReason, origin: str, action: str | None
        ) -> None: ...
        def _end_unstarted(
            self, run: _Run, reason: InterruptReason, origin: str, action: str | None
        ) -> None: ...
        def _abandon(self, run: _Run) -> None: ...
        def _finish(self, run: _Run) -> None: ...
        def _load(self, name: str, cause: LoadCause) -> _Instance: ...
        def _retire(self, instance: _Instance) -> None: ...
        def _dispose(self, instance: _Instance) -> None: ...
        def _directory_closed(self, directory: _Directory) -> None: ...
        def _progressed(self, run: _Run) -> None: ...  # the deadlines'

    # --- moves more than one part makes (the lifecycle's closes, the stalls' confirm) ---

    def _stamp(self, run: _Run) -> _RunStamp:
        """The opening fields of an event about ``run``: the next ``seq``, the run and its session.
        Build the event with them, then ``_emit`` it at once (``_next_seq``)."""
        return {"seq": self._next_seq(), "run_id": run.id, "session": run.session}

    def _instance_stamp(self, instance: _Instance) -> _InstanceStamp:
        """The fields of an event about ``instance``: the next ``seq``, its directory, generation and
        the supervisor's life it was loaded in."""
        return {
            "seq": self._next_seq(),
            "directory": instance.directory,
            "generation": instance.generation,
            "epoch": instance.epoch,
        }

    def _active_runs(self, instance: _Instance) -> list[str]:
        """The instance's active runs, in order; taken before interrupting any of them, since a
        parent's interrupt also interrupts its children (pinned to the same instance)."""
        return [run_id for run_id in sorted(instance.runs) if self._runs[run_id].state is RunState.ACTIVE]

    def _interrupt_each(
        self,
        run_ids: Iterable[str],
        reason: InterruptReason,
        origin: str,
        action_id: str,
        grace_ms: int | None = None,
    ) -> None:
        """Interrupt each run still active (a parent's interrupt may have reached a child already)."""
        for run_id in run_ids:
            run = self._runs[run_id]
            if run.state is RunState.ACTIVE:
                self._interrupt(run, reason, origin, action_id, grace_ms)
