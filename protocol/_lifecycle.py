"""The close-action half of the decision core: closes and shutdowns, from request to completion.

A lifecycle action moves through ``protocol._rules.ACTION_TRANSITIONS``: it is ``requested`` while
its instances are retired (and its runs interrupted, if its mode says so); ``announcing`` while
instances it covers dispose at once (the requester is answered when they have closed); ``pending``
once answered while instances still wait for their runs; ``completed`` when the last one closed.
A second shutdown *joins* the first; a shutdown *supersedes* every pending close.

``LifecycleMixin`` is one part of ``SupervisorCore`` (it shares the core's tables); it decides the
actions, and the core calls ``_closed_instance`` whenever an instance closes.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypedDict

import msgspec

from run_supervisor.protocol._commands import DisposeInstance, StartGraceTimer
from run_supervisor.protocol._core_state import CoreState
from run_supervisor.protocol._enums import (
    ActionState,
    CloseAction,
    CloseMode,
    CloseResult,
    InstanceState,
    InterruptReason,
    LoadCause,
    RejectCode,
    ReloadPolicy,
    RunState,
    ShutdownReason,
)
from run_supervisor.protocol._events import (
    ActionResult,
    InstanceClosed,
    LifecycleCompleted,
    LifecycleDeferred,
    LifecycleRequested,
)
from run_supervisor.protocol._records import _Directory, _Instance, _Run
from run_supervisor.protocol._requests import CloseOutcome, CloseRequest, GraceExpired, Shutdown
from run_supervisor.protocol._rules import (
    ANSWERED_ACTION_STATES,
    BODY_RULES,
    CLOSE_ACTION_SCOPE,
    CLOSE_REQUEST_ACTIONS,
    CLOSE_REQUEST_MODES,
    CLOSE_RULES,
    SHUTDOWN_RULES,
    ActionTrigger,
    CloseScope,
    InstanceTrigger,
    ReloadLoad,
    fingerprint_unchanged,
    next_action_state,
    reload_loads,
)

__all__ = ["ActionSnapshot", "LifecycleMixin"]


class ActionSnapshot(msgspec.Struct, frozen=True, kw_only=True):
    """A lifecycle action that has not completed yet."""

    action_id: str
    do: CloseAction
    mode: CloseMode
    origin: str
    result: CloseResult
    pending_directories: tuple[str, ...]
    blocking_runs: tuple[str, ...]
    """The runs it still waits for, now."""
    tag: str | None = None
    stalled_runs: tuple[str, ...] = ()
    """Those of ``blocking_runs`` flagged stalled (``run.stalled``): no progress for their stall
    setting. A host may offer to ``confirm_close`` this action, interrupting them."""
    confirmed_by: str | None = None
    """The origin of the ``confirm_close`` that turned this maintenance close into a confirmed one."""


class _ActionStamp(TypedDict):
    """The fields every event about a lifecycle action opens with (``_action_stamp``)."""

    seq: int
    action_id: str


@dataclass(slots=True)
class _Action:
    id: str
    do: CloseAction
    mode: CloseMode
    origin: str
    directories: tuple[str, ...]
    tag: str | None
    reply_to: Any
    state: ActionState = ActionState.REQUESTED
    result: CloseResult = CloseResult.COMPLETED
    completed_directories: tuple[str, ...] = ()
    pending_directories: tuple[str, ...] = ()
    blocking_runs: tuple[str, ...] = ()
    interrupted_runs: tuple[str, ...] = ()
    awaiting: set[tuple[str, int]] = field(default_factory=set)  # instances that must close first
    at_once: set[tuple[str, int]] = field(default_factory=set)  # disposing at once: answer after them
    superseded_by: str | None = None
    errors: list[str] = field(default_factory=list)
    abandoned_runs: list[str] = field(default_factory=list)
    joiners: list[str | None] = field(default_factory=list)  # tags of later shutdowns that joined
    joiner_answers: list[tuple[str | None, Any]] = field(default_factory=list)  # answered after ours
    confirmed_by: str | None = None  # the origin of a confirm_close (``protocol._stalls``)

    @property
    def answered(self) -> bool:
        return self.state in ANSWERED_ACTION_STATES

    @property
    def completed(self) -> bool:
        return self.state is ActionState.COMPLETED


class LifecycleMixin(CoreState):
    """Closes and shutdowns: cover, answer, join, complete. Mixed into ``SupervisorCore``."""

    if TYPE_CHECKING:  # what this part holds of its own (the rest it uses is ``CoreState``'s)
        _actions: dict[str, _Action]
        _shutdown: _Action | None

    # --- requests ----------------------------------------------------------------------------

    def _close(self, req: CloseRequest, reply_to: Any) -> None:
        if req.do not in CLOSE_REQUEST_ACTIONS or req.mode not in CLOSE_REQUEST_MODES:
            self._reject(
                reply_to,
                RejectCode.INVALID_REQUEST,
                f"a close is {', '.join(sorted(CLOSE_REQUEST_ACTIONS))} in mode "
                f"{' or '.join(CLOSE_REQUEST_MODES)} (got {req.do.value} / {req.mode.value}); "
                "shut down with Shutdown",
                close=True,
            )
            return
        if req.reload_policy is not None and req.do is not CloseAction.RELOAD:
            self._reject(
                reply_to,
                RejectCode.INVALID_REQUEST,
                f"reload_policy applies to a reload only, not to {req.do.value}",
                close=True,
            )
            return
        if CLOSE_ACTION_SCOPE[req.do] is CloseScope.ONE_DIRECTORY:
            if len(req.directories) != 1:
                self._reject(
                    reply_to,
                    RejectCode.INVALID_REQUEST,
                    f"{req.do.value} names exactly one directory",
                    close=True,
                )
                return
            if req.directories[0] not in self._dirs:
                self._reject(
                    reply_to,
                    RejectCode.UNKNOWN_DIRECTORY,
                    f"directory {req.directories[0]!r} is unknown: "
                    "no instance was ever loaded or declared for it",
                    close=True,
                )
                return
            names: list[str] = list(req.directories)
        else:
            names = sorted(d.name for d in self._dirs.values() if d.open)
        policy = None
        if req.do is CloseAction.RELOAD:
            policy = self.reload_policy if req.reload_policy is None else ReloadPolicy(req.reload_policy)
        action = self._new_action(
            do=req.do,
            mode=req.mode,
            origin=req.origin,
            directories=names,
            tag=req.tag,
            reply_to=reply_to,
            fingerprint=req.fingerprint,
            reload_policy=policy,
        )
        if req.fingerprint is not None:
            if fingerprint_unchanged(req.fingerprint, self._loaded_with(names)):
                self._noop(action)
                return
            # It goes ahead: what loads from now on in its directories is loaded with the new one.
            covered = (
                self._dirs.values()
                if req.do is CloseAction.INVALIDATE_CONFIG
                else (self._dirs[name] for name in names)
            )
            for directory in covered:
                self._touch(directory)
                directory.fingerprint = req.fingerprint
            if req.do is CloseAction.INVALIDATE_CONFIG:
                self._journal.put(self._config, "fingerprint", req.fingerprint)
        self._cover(action, names, CLOSE_RULES[req.mode].interrupts_with, req.grace_ms)
        if policy is not None:
            self._reload(action, names[0], policy)
        if action.interrupted_runs:
            action.result = CloseResult.INTERRUPTED
        elif action.pending_directories:
            action.result = CloseResult.DEFERRED
        self._answer_or_hold(action)

    def _loaded_with(self, names: Iterable[str]) -> list[str | None]:
        """What the live generations of these directories were loaded with (the no-op gate). A
        generation a lazy reload deferred counts as live, loaded with what it will load with: the
        gate answers as it would have with the generation loaded at once."""
        found: list[str | None] = []
        for name in names:
            directory = self._dirs[name]
            if directory.current is not None:
                found.append(directory.current.fingerprint)
            elif name in self._deferred_loads:
                found.append(directory.fingerprint)
        return found

    def _reload(self, action: _Action, name: str, policy: ReloadPolicy) -> None:
        """After ``_cover`` retired the directory's generations: load the next one now, or defer it
        until a run needs it or the old ones have closed (``RELOAD_RULES``)."""
        directory = self._dirs[name]
        if reload_loads(policy, action.mode, ReloadLoad.AT_REQUEST, open_generations=len(directory.open)):
            self._load(name, LoadCause.RELOAD)
        else:
            self._journal.put(self._deferred_loads, name, (action.id, policy, action.mode))

    def _load_deferred(self, directory: _Directory) -> None:
        """An old generation of ``directory`` closed: load the next one if a lazy reload deferred it
        until now (never once shutdown began: it cancelled every deferred load)."""
        deferred = self._deferred_loads.get(directory.name)
        if deferred is None or self._shutdown is not None or directory.current is not None:
            return
        _, policy, mode = deferred
        if reload_loads(policy, mode, ReloadLoad.PREVIOUS_CLOSED, open_generations=len(directory.open)):
            self._load(directory.name, LoadCause.PREVIOUS_CLOSED)

    def _shutdown_request(self, req: Shutdown, reply_to: Any) -> None:
        if req.reason not in SHUTDOWN_RULES:  # the type forbids it; an untyped caller may not know
            self._reject(
                reply_to,
                RejectCode.INVALID_REQUEST,
                f"a shutdown's reason is {', '.join(SHUTDOWN_RULES)}, not {req.reason.value}",
                close=True,
            )
            return
        if req.grace_ms < 0:
            self._reject(reply_to, RejectCode.INVALID_REQUEST, "grace_ms cannot be negative", close=True)
            return
        rule = SHUTDOWN_RULES[req.reason]
        do, mode = rule.do, rule.mode
        reason = ShutdownReason(req.reason).interrupt_reason
        origin = req.origin or reason.value
        first = self._shutdown
        if first is not None:
            self._join(first, do=do, mode=mode, origin=origin, tag=req.tag, reply_to=reply_to)
            return
        names = sorted(d.name for d in self._dirs.values() if d.open)
        action = self._new_action(
            do=do, mode=mode, origin=origin, directories=names, tag=req.tag, reply_to=reply_to
        )
        for other in self._actions.values():
            if other is not action:
                self._move_action(other, ActionTrigger.SUPERSEDE)
                other.superseded_by = action.id
        self._shutdown = action
        action.result = CloseResult.FORCED
        # Queued runs end without starting; then every active run is interrupted. Every queue is
        # emptied first, and queued children end last: a child that ends may finish its parent
        # (whose body had ended), whose session then goes idle -- it must neither start its next
        # queued run in the middle of the shutdown nor say idle before that run is reported ended.
        queued = []
        for session in self._sessions.values():
            while session.queue:
                queued.append(self._runs[self._journal.popleft(session.queue)])
        queued.sort(key=lambda run: run.parent is not None)  # stable: otherwise in queue order
        for run in queued:
            self._end_unstarted(run, reason, origin, action.id)
        self._out.append(StartGraceTimer(action_id=action.id, grace_ms=req.grace_ms))
        self._cover(action, names, reason)
        self._answer_or_hold(action)

    def _join(
        self,
        first: _Action,
        *,
        do: CloseAction,
        mode: CloseMode,
        origin: str,
        tag: str | None,
        reply_to: Any,
    ) -> None:
        """A second shutdown is never rejected: it joins the first, and is answered and completed
        with it (never answered before the first)."""
        self._move_action(first, ActionTrigger.JOIN)
        self._emit_requested(first, do=do, mode=mode, origin=origin, tag=tag)
        if first.completed:
            self._emit_completed(first, tag)
        else:
            first.joiners.append(tag)
        if first.answered:
            self._answer_one(first, tag, reply_to)
        else:
            first.joiner_answers.append((tag, reply_to))

    def _grace_expired(self, report: GraceExpired) -> None:
        action = self._shutdown
        if action is None or action.id != report.action_id or action.completed:
            self._ignore()
            return
        self._deadline_passed = True
        # Children before their parents (a parent is reported finished after them); a parent whose
        # body already ended is not abandoned: it finishes with its last child.
        stuck = sorted(
            (
                run
                for run in self._runs.values()
                if run.state is RunState.INTERRUPTING and BODY_RULES[run.body].abandoned_at_grace
            ),
            key=lambda r: (-self._depth(r), r.id),
        )
        # Who held each instance still retiring: blame them, not its dispose hook (which never ran).
        holders = {
            instance.key: sorted(instance.runs)
            for directory in self._dirs.values()
            for instance in directory.open.values()
            if instance.state is InstanceState.RETIRING
        }
        for run in stuck:
            if run.state is not RunState.INTERRUPTING:
                continue
            self._touch(action)
            action.abandoned_runs.append(run.id)
            self._abandon(run)
        for directory in sorted(self._dirs.values(), key=lambda d: d.name):
            for instance in sorted(directory.open.values(), key=lambda i: i.generation):
                if instance.state is InstanceState.RETIRING:
                    # Its runs were abandoned just now: its hook never ran. Run it, unwatched.
                    self._move_instance(instance, InstanceTrigger.DISPOSE)
                    self._out.append(
                        DisposeInstance(
                            directory=instance.directory,
                            generation=instance.generation,
                            budget_ms=0,
                            report=False,
                        )
                    )
                    runs = ", ".join(holders.get(instance.key, ())) or "its runs"
                    error = (
                        f"{runs} still held it at the shutdown deadline (abandoned); "
                        "its dispose hook then ran unwatched"
                    )
                else:
                    error = "the dispose hook did not finish before the shutdown deadline"
                self._closed_instance(instance, error)

    def _depth(self, run: _Run) -> int:
        """How many ancestors ``run`` has."""
        depth = 0
        while run.parent is not None and (parent := self._runs.get(run.parent)) is not None:
            depth, run = depth + 1, parent
        return depth

    # --- the action's life -------------------------------------------------------------------

    def _new_action(
        self,
        *,
        do: CloseAction,
        mode: CloseMode,
        origin: str,
        directories: Iterable[str],
        tag: str | None,
        reply_to: Any,
        fingerprint: str | None = None,
        reload_policy: ReloadPolicy | None = None,
    ) -> _Action:
        self._action_count += 1
        action = _Action(
            id=f"lc-{self._action_count}",
            do=do,
            mode=mode,
            origin=origin,
            directories=tuple(sorted(directories)),
            tag=tag,
            reply_to=reply_to,
        )
        self._journal.fresh(action)
        self._journal.put(self._actions, action.id, action)
        self._emit_requested(
            action,
            do=do,
            mode=mode,
            origin=origin,
            tag=tag,
            fingerprint=fingerprint,
            reload_policy=reload_policy,
        )
        return action

    def _noop(self, action: _Action) -> None:
        """The no-op gate held: answered ``noop`` and completed now; no instance or run touched."""
        self._move_action(action, ActionTrigger.NOOP)  # touches it
        action.result = CloseResult.NOOP
        self._journal.drop(self._actions, action.id)
        self._emit_completed(action, action.tag)
        self._answer_one(action, action.tag, action.reply_to)

    def _move_action(self, action: _Action, trigger: ActionTrigger) -> None:
        self._touch(action)
        action.state = next_action_state(action.state, trigger)

    def _cover(
        self,
        action: _Action,
        names: Iterable[str],
        interrupt: InterruptReason | None,
        grace_ms: int | None = None,
    ) -> None:
        """Retire every open instance of these directories for ``action``; interrupt their active
        runs when the mode says so; dispose at once the instances no run holds."""
        done: list[str] = []
        pending: list[str] = []
        blocking: set[str] = set()
        interrupted: set[str] = set()
        for name in names:
            directory = self._dirs[name]
            # What this close asks replaces a load an earlier lazy reload deferred (a reload
            # defers or loads anew right after).
            self._journal.drop(self._deferred_loads, name)
            instances = sorted(directory.open.values(), key=lambda i: i.generation)
            if interrupt is not None:
                for instance in instances:
                    active = self._active_runs(instance)
                    self._interrupt_each(active, interrupt, action.origin, action.id, grace_ms)
                    interrupted.update(active)
            waits = False
            for instance in instances:
                if instance.state is InstanceState.LIVE:
                    self._retire(instance)
                if instance.state is InstanceState.RETIRING:
                    if instance.runs:
                        waits = True
                        blocking.update(instance.runs)
                    else:
                        self._dispose(instance)
                if instance.state is InstanceState.DISPOSING:
                    self._journal.add(action.at_once, instance.key)
                self._touch(instance)
                instance.closers.append(action.id)
                self._journal.add(action.awaiting, instance.key)
            (pending if waits else done).append(name)
        action.completed_directories = tuple(sorted(done))
        action.pending_directories = tuple(sorted(pending))
        action.blocking_runs = tuple(sorted(blocking))
        action.interrupted_runs = tuple(sorted(interrupted))

    def _answer_or_hold(self, action: _Action) -> None:
        if action.at_once:
            self._move_action(action, ActionTrigger.HOLD_ANSWER)
        else:
            self._answer(action)

    def _answer(self, action: _Action) -> None:
        """Everything closing at once has closed: tell the requester (and any shutdown that joined)."""
        if action.result is CloseResult.DEFERRED:
            self._emit(
                LifecycleDeferred(
                    **self._action_stamp(action),
                    pending_directories=action.pending_directories,
                    blocking_runs=action.blocking_runs,
                    tag=action.tag,
                )
            )
        if action.awaiting:
            self._move_action(action, ActionTrigger.ANSWER)
        else:
            self._complete(action)
        self._answer_one(action, action.tag, action.reply_to)
        for tag, reply_to in action.joiner_answers:  # later shutdowns: never answered before the first
            self._answer_one(action, tag, reply_to)
        action.joiner_answers.clear()

    def _complete(self, action: _Action) -> None:
        self._move_action(action, ActionTrigger.COMPLETE)
        self._journal.drop(self._actions, action.id)
        for tag in (action.tag, *action.joiners):
            self._emit_completed(action, tag)
        if action is self._shutdown:
            self._closed = True  # ShutdownComplete goes out last in this batch (see _flush)

    def _closed_instance(self, instance: _Instance, error: str | None) -> None:
        """The instance has closed (its hook returned, raised or overran, or shutdown's deadline
        passed): tell, and move every action that waited for it."""
        self._move_instance(instance, InstanceTrigger.DISPOSED)
        directory = self._dirs[instance.directory]
        self._touch(directory)
        del directory.open[instance.generation]
        self._emit(InstanceClosed(**self._instance_stamp(instance), error=error))
        self._load_deferred(directory)  # before the actions move: a reload is answered after it
        for action_id in instance.closers:
            action = self._actions.get(action_id)
            if action is None:
                continue
            self._touch(action)
            self._journal.discard(action.awaiting, instance.key)
            self._journal.discard(action.at_once, instance.key)
            if error is not None:
                action.errors.append(f"{instance.directory} (generation {instance.generation}): {error}")
            if action.state is ActionState.ANNOUNCING and not action.at_once:
                self._answer(action)
            elif action.state is ActionState.PENDING and not action.awaiting:
                self._complete(action)
            else:
                self._move_action(action, ActionTrigger.INSTANCE_CLOSED)
        self._directory_closed(directory)

    # --- what it says ------------------------------------------------------------------------

    def _emit_requested(
        self,
        action: _Action,
        *,
        do: CloseAction,
        mode: CloseMode,
        origin: str,
        tag: str | None,
        fingerprint: str | None = None,
        reload_policy: ReloadPolicy | None = None,
    ) -> None:
        """``do``, ``mode``, ``origin`` and ``tag`` are the request's own: a second shutdown joining
        the first names itself, with the first one's action id."""
        self._emit(
            LifecycleRequested(
                **self._action_stamp(action),
                do=do,
                mode=mode,
                origin=origin,
                directories=action.directories,
                tag=tag,
                fingerprint=fingerprint,
                reload_policy=reload_policy,
            )
        )

    def _action_stamp(self, action: _Action) -> _ActionStamp:
        """The opening fields of an event about ``action``: the next ``seq`` and its id."""
        return {"seq": self._next_seq(), "action_id": action.id}

    def _answer_one(self, action: _Action, tag: str | None, reply_to: Any) -> None:
        """Answer one requester of ``action`` -- its own, or a shutdown that joined it (by its
        ``tag``): ``action.result``, then the reply."""
        self._emit(ActionResult(**self._action_stamp(action), result=action.result, tag=tag))
        self._reply(reply_to, self._close_outcome(action))

    def _emit_completed(self, action: _Action, tag: str | None) -> None:
        self._emit(
            LifecycleCompleted(
                **self._action_stamp(action),
                superseded_by=action.superseded_by,
                error="; ".join(action.errors) or None,
                abandoned_runs=tuple(sorted(action.abandoned_runs)),
                tag=tag,
            )
        )

    @staticmethod
    def _close_outcome(action: _Action) -> CloseOutcome:
        return CloseOutcome(
            result=action.result,
            action_id=action.id,
            completed=action.completed,
            completed_directories=action.completed_directories,
            pending_directories=action.pending_directories,
            blocking_runs=action.blocking_runs,
            interrupted_runs=action.interrupted_runs,
            abandoned_runs=tuple(sorted(action.abandoned_runs)),
        )

    def _action_snapshot(self, action: _Action) -> ActionSnapshot:
        blocking = sorted(
            run_id
            for directory, generation in action.awaiting
            if (instance := self._dirs[directory].open.get(generation)) is not None
            for run_id in instance.runs
        )
        return ActionSnapshot(
            action_id=action.id,
            do=action.do,
            mode=action.mode,
            origin=action.origin,
            result=action.result,
            pending_directories=tuple(sorted({directory for directory, _ in action.awaiting})),
            blocking_runs=tuple(blocking),
            tag=action.tag,
            stalled_runs=tuple(r for r in blocking if self._runs[r].stalled),
            confirmed_by=action.confirmed_by,
        )
