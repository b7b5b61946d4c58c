"""The ask half of the decision core: what a run body asks the user, from raise to decision.

An ask is registered here and announced (``ask.requested``) in the same step, so a reply fired from
that event always finds it. Each ask has its own id; a run may have any number open at once (one
per parallel tool call). Its moves are ``protocol._rules.ASK_TRANSITIONS``: ``open`` until it is
``replied`` (a permission approved or rejected, a form answered), ``dismissed`` (a form), or
``withdrawn`` (the body stopped waiting, or its run was interrupted or ended). A reply to a
withdrawn ask is rejected ``ask_withdrawn`` and never reaches another ask.

Decisions keep their meanings (``protocol._rules.DECLINE_RULES``): a permission rejected without a
message interrupts the run (``permission_rejected``), with one it is model-visible feedback on that
call and the run goes on; a form dismissed without a message interrupts the run (``form_dismissed``),
with one it is feedback. **Several open asks:** an interrupt withdraws every other open ask of the
run (reason ``interrupted``); a rejection *with* a message concerns its own call only, the others
stay open.

A permission gates its tool call: while the first permission of a running call is not granted,
the call counts as not started (``tool_started`` false), so a declined call says it did not run.
A card's ``tool_started`` only ever goes from false to true: a running call is shown started once
nothing can gate it any more (its first permission granted, or the call ended), since a body may
report ``running`` and ask its first permission only then (``card_started``). Until then the core
still counts it as one that may have run (a journal records it so), unless an ask gates it.

``AsksMixin`` is one part of ``SupervisorCore`` (it shares the core's tables); ``AskBook`` is its
register of asks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from run_supervisor.protocol._commands import DeliverAnswer
from run_supervisor.protocol._core_state import CoreState, _RunStamp
from run_supervisor.protocol._enums import (
    AskKind,
    AskState,
    InterruptReason,
    PartState,
    RejectCode,
    RequestResult,
    RunState,
    WithdrawReason,
)
from run_supervisor.protocol._events import (
    AskDismissed,
    AskReplied,
    AskRequested,
    AskWithdrawn,
    RunPartUpdated,
)
from run_supervisor.protocol._parts import PartSnapshot, part_snapshot
from run_supervisor.protocol._payloads import AskSnapshot, FormAnswer, form_answer_problem
from run_supervisor.protocol._records import Ask, Journal, _Part, _Run
from run_supervisor.protocol._requests import (
    AnswerForm,
    AskRaised,
    DismissForm,
    ReplyPermission,
    RequestOutcome,
    WithdrawAsk,
)
from run_supervisor.protocol._rules import (
    PART_PHASE,
    UNFINISHED_PART_STATES,
    AskTrigger,
    DeclineEffect,
    decline_rule,
    next_ask_state,
)

__all__ = ["AskBook", "AsksMixin", "part_view"]

_OK = RequestOutcome(result=RequestResult.OK)


class _AskStamp(_RunStamp):
    """The fields every event about an ask opens with (``AsksMixin._ask_stamp``)."""

    ask_id: str


class AskBook:
    """Every ask of the runs the core still remembers, by id; the open ones in the order raised.

    An ask is forgotten with its run (``forget_run``), so a late reply to it is told precisely why
    it reaches nothing for as long as its run is remembered.
    """

    def __init__(self, journal: Journal) -> None:
        self._journal = journal  # every change is journaled: the core's inputs are atomic
        self._asks: dict[str, Ask] = {}
        self._open: dict[str, Ask] = {}
        self._by_run: dict[str, list[str]] = {}

    def __len__(self) -> int:
        return len(self._open)

    def get(self, ask_id: str) -> Ask | None:
        return self._asks.get(ask_id)

    def add(self, ask: Ask) -> None:
        self.restore(ask)
        self._journal.put(self._open, ask.ask_id, ask)

    def restore(self, ask: Ask) -> None:
        """Take on an ask that ended in a past life of the supervisor (recovered from its journal
        with its run): known, never open. (``add`` takes on a new one, open, the same way.)"""
        journal = self._journal
        journal.fresh(ask)
        journal.put(self._asks, ask.ask_id, ask)
        ids = self._by_run.get(ask.run_id)
        if ids is None:
            journal.put(self._by_run, ask.run_id, [ask.ask_id])
        else:
            journal.append(ids, ask.ask_id)

    def close(self, ask: Ask, trigger: AskTrigger) -> None:
        """Move an open ask to its final state."""
        self._journal.touch(ask)
        ask.state = next_ask_state(ask.state, trigger)
        self._journal.drop(self._open, ask.ask_id)

    def open_of(self, run_id: str, kind: AskKind | None = None) -> list[Ask]:
        """The open asks of one run, in the order they were raised."""
        return [
            ask
            for ask_id in self._by_run.get(run_id, ())
            if (ask := self._asks[ask_id]).state is AskState.OPEN and (kind is None or ask.kind is kind)
        ]

    def forget_run(self, run_id: str) -> None:
        for ask_id in self._journal.drop(self._by_run, run_id) or ():
            self._journal.drop(self._asks, ask_id)
            self._journal.drop(self._open, ask_id)

    def open_in_session(self, session: str, kind: AskKind) -> list[Ask]:
        """The open asks of ``kind`` of the runs of ``session``, in the order they were raised."""
        return [a for a in self._open.values() if a.session == session and a.kind is kind]

    def pending(self) -> tuple[AskSnapshot, ...]:
        return tuple(ask.snapshot() for ask in self._open.values())


def card_started(part: _Part) -> bool:
    """Whether the card says the tool started: it ran and no permission gates it, and nothing can
    gate it any more -- its first permission was granted, it asked a form while nothing gated it
    (it is at work), or it is no longer ``running`` (a first permission is asked of a running call
    only). So the card's ``tool_started`` never goes from true
    back to false when a body reports ``running`` and then asks (``part.tool_started`` is the core's
    own "may have run", true from ``running`` until an ask gates it)."""
    return part.tool_started and (part.approved or part.confirmed or part.state is not PartState.RUNNING)


def part_view(part: _Part) -> PartSnapshot:
    """A tool part as its card shows it: state, phase, whether the tool started, label and note."""
    ask = part.ask if part.ask is not None and part.ask.state is AskState.OPEN else None
    phase = PART_PHASE.get(part.state) if part.state in UNFINISHED_PART_STATES else part.phase
    return part_snapshot(
        tool=part.tool,
        state=part.state,
        tool_started=card_started(part),
        message=part.message,
        reason=part.reason,
        origin=part.origin,
        phase=phase,
        call_id=part.call_id,
        ask_id=ask.ask_id if ask else None,
        waiting_for=ask.kind if ask else None,
        declined=part.declined,
    )


def part_updated(seq: int, run: _Run, call_id: str, shown: PartSnapshot) -> RunPartUpdated:
    """``run.part.updated`` drawing ``shown`` as the card of ``run``'s tool part ``call_id``: a
    part's every change, and a card the crash settled (``SupervisorCore.recover``)."""
    return RunPartUpdated(
        seq=seq,
        run_id=run.id,
        session=run.session,
        call_id=call_id,
        tool=shown.tool,
        state=shown.state,
        phase=shown.phase,
        tool_started=shown.tool_started,
        label=shown.label,
        note=shown.note,
        message=shown.message,
        reason=shown.reason,
        origin=shown.origin,
        ask_id=shown.ask_id,
        waiting_for=shown.waiting_for,
        declined=shown.declined,
    )


class AsksMixin(CoreState):
    """Asks and tool-part announcements. Mixed into ``SupervisorCore``."""

    if TYPE_CHECKING:  # what this part holds of its own (the rest it uses is ``CoreState``'s)
        _asks: AskBook

    # --- queries -------------------------------------------------------------------------------

    def pending_asks(self) -> tuple[AskSnapshot, ...]:
        """Every open ask, in the order raised: what waits for the user."""
        return self._asks.pending()

    def ask_snapshot(self, ask_id: str) -> AskSnapshot | None:
        ask = self._asks.get(ask_id)
        return None if ask is None else ask.snapshot()

    # --- the body raises and withdraws -----------------------------------------------------------

    def _ask_raised(self, report: AskRaised) -> None:
        run = self._runs.get(report.run_id)
        if run is None or run.state is not RunState.ACTIVE or self._asks.get(report.ask_id) is not None:
            # Interrupting: its body's wait wakes on the interrupt. A reused id: a body bug.
            self._ignore()
            return
        self._progressed(run)  # an ask is progress: a retry status is over
        part = run.calls.get(report.call_id) if report.call_id is not None else run.open_part()
        ask = Ask(
            ask_id=report.ask_id,
            run_id=run.id,
            session=run.session,
            kind=report.kind,
            tool=report.tool or (part.tool if part else None),
            call_id=report.call_id or (part.call_id if part else None),
            payload=report.payload,
            part=part.call_id if part else None,
        )
        self._asks.add(ask)  # registered before it is announced: a reply to the event finds it
        self._emit(
            AskRequested(
                **self._ask_stamp(ask),
                kind=ask.kind,
                tool=ask.tool,
                call_id=ask.call_id,
                payload=ask.payload,
            )
        )
        if part is not None and part.state in UNFINISHED_PART_STATES:
            self._touch(run)
            part.ask = ask
            if part.state is PartState.RUNNING and not (part.approved or part.confirmed):
                if ask.kind is AskKind.PERMISSION:
                    part.gated = True  # the tool waits for this permission before it does its work
                elif not part.gated:
                    part.confirmed = True  # at work, asking: shown started, and no later ask gates it
            self._part_changed(run, part)
        key = ask.payload.key
        if ask.kind is AskKind.PERMISSION and key is not None and (run.session, key) in self._grants:
            self._grant(ask, key)

    def _grant(self, ask: Ask, key: str) -> None:
        """Approve ``ask`` by its session's "always" grant for ``key``: no reply of its own."""
        run, part = self._replied(ask, approved=True, message=None, answer=None, tag=None, granted=key)
        if part is not None:
            part.approved, part.gated = True, False
            self._part_changed(run, part)
        self._out.append(DeliverAnswer(run_id=run.id, ask_id=ask.ask_id, approved=True))

    def _withdraw_request(self, report: WithdrawAsk) -> None:
        ask = self._asks.get(report.ask_id)
        if ask is None or ask.run_id != report.run_id or ask.state is not AskState.OPEN:
            # Replied first: that reply stands and is on its way to the body.
            self._ignore()
            return
        self._withdraw(ask, report.reason)
        self._out.append(DeliverAnswer(run_id=ask.run_id, ask_id=ask.ask_id, withdrawn=True))

    def _withdraw_open_asks(
        self, run: _Run, reason: WithdrawReason, interrupt: InterruptReason | None = None
    ) -> None:
        """Nobody will answer them now (the run is interrupted, or ended): withdraw them."""
        for ask in self._asks.open_of(run.id):
            self._withdraw(ask, reason, interrupt)

    def _withdraw(self, ask: Ask, reason: WithdrawReason, interrupt: InterruptReason | None = None) -> None:
        run, part = self._end_ask(ask, AskTrigger.WITHDRAW)
        ask.withdraw_reason, ask.interrupt_reason = reason, interrupt
        self._emit(
            AskWithdrawn(
                **self._ask_stamp(ask),
                kind=ask.kind,
                reason=reason,
                interrupt_reason=interrupt,
            )
        )
        if part is not None:
            if interrupt is not None and part.gated and part.state is PartState.RUNNING:
                # Decided: nobody will grant its first permission now, so the call will not run.
                # Its card says so at once, as the run's end would (never "running" meanwhile).
                assert run.interrupt is not None
                part.phase, part.state = PART_PHASE[part.state], PartState.INTERRUPTED
                part.reason, part.origin = run.interrupt.reason, run.interrupt.origin
            self._part_changed(run, part)

    # --- the user decides -----------------------------------------------------------------------

    def _reply_permission(self, req: ReplyPermission, reply_to: Any) -> None:
        ask = self._addressed_ask(req.ask_id, req.run_id, AskKind.PERMISSION, "reply_permission", reply_to)
        if ask is None:
            return
        key = ask.payload.key
        if req.always and (not req.approve or key is None):
            why = "approves" if key is not None else "answers an ask that declares a key (payload.key)"
            self._reject(reply_to, RejectCode.INVALID_REQUEST, f"an always grant only {why}")
            return
        message = None if req.approve else req.message
        run, part = self._replied(
            ask, approved=req.approve, message=message, answer=None, tag=req.tag, always=req.always
        )
        if req.approve:
            if part is not None:
                part.approved, part.gated = True, False
            self._out.append(DeliverAnswer(run_id=run.id, ask_id=ask.ask_id, approved=True))
        else:
            self._decline(run, ask, part, req.message, req.tag)
        if part is not None:
            self._part_changed(run, part)
        if req.always and key is not None:  # the session's matching asks, now and later
            self._journal.put(self._grants, (ask.session, key), None)
            for other in self._asks.open_in_session(ask.session, AskKind.PERMISSION):
                if other.payload.key == key:
                    self._grant(other, key)
        self._reply(reply_to, _OK)

    def _answer_form(self, req: AnswerForm, reply_to: Any) -> None:
        ask = self._addressed_ask(req.ask_id, req.run_id, AskKind.FORM, "answer_form", reply_to)
        if ask is None:
            return
        problem = form_answer_problem(ask.payload.questions, req.answer)  # one entry per question
        if problem is not None:
            self._reject(reply_to, RejectCode.INVALID_REQUEST, f"answer_form: {problem}")
            return
        run, part = self._replied(ask, approved=True, message=None, answer=req.answer, tag=req.tag)
        self._out.append(DeliverAnswer(run_id=run.id, ask_id=ask.ask_id, approved=True, answer=req.answer))
        if part is not None:
            self._part_changed(run, part)
        self._reply(reply_to, _OK)

    def _replied(
        self,
        ask: Ask,
        *,
        approved: bool,
        message: str | None,
        answer: FormAnswer | None,
        tag: str | None,
        always: bool = False,
        granted: str | None = None,
    ) -> tuple[_Run, _Part | None]:
        """Close ``ask`` as replied and announce it (``ask.replied``): a permission reply and a form
        answer alike. Returns its run and the tool part it gated, for the caller's own effects."""
        run, part = self._end_ask(ask, AskTrigger.REPLY)
        self._emit(
            AskReplied(
                **self._ask_stamp(ask),
                kind=ask.kind,
                approved=approved,
                message=message,
                answer=answer,
                tag=tag,
                always=always,
                granted=granted,
            )
        )
        return run, part

    def _dismiss_form(self, req: DismissForm, reply_to: Any) -> None:
        ask = self._addressed_ask(req.ask_id, req.run_id, AskKind.FORM, "dismiss_form", reply_to)
        if ask is None:
            return
        run, part = self._end_ask(ask, AskTrigger.DISMISS)
        self._emit(
            AskDismissed(
                **self._ask_stamp(ask),
                message=req.message,
                tag=req.tag,
            )
        )
        self._decline(run, ask, part, req.message, req.tag)
        if part is not None:
            self._part_changed(run, part)
        self._reply(reply_to, _OK)

    def _decline(self, run: _Run, ask: Ask, part: _Part | None, message: str | None, tag: str | None) -> None:
        """The user said no to ``ask`` (closed already): ``DECLINE_RULES`` says whether that stops
        the run (the interrupt withdraws its other open asks) or is ``message`` on that call only."""
        rule = decline_rule(ask.kind, message)
        if part is not None:
            part.declined = ask.kind
        if rule.effect is DeclineEffect.FEEDBACK:
            assert message  # the rule with a message
            self._feedback(part, message)
            dismissed = ask.kind is AskKind.FORM
            self._out.append(
                DeliverAnswer(run_id=run.id, ask_id=ask.ask_id, dismissed=dismissed, message=message)
            )
        else:
            assert rule.interrupts_with is not None and rule.origin is not None
            opened = run.open_part()
            phase = PART_PHASE[opened.state] if opened is not None else None  # the run's, as it was
            if part is not None and part.state in UNFINISHED_PART_STATES:
                # Decided: this call will not run. Its card says so now (before the interrupt
                # redraws anything), not "running" until the body stops.
                part.phase = PART_PHASE[part.state]
                part.state = PartState.INTERRUPTED
                part.reason, part.origin = rule.interrupts_with, rule.origin
            self._interrupt(run, rule.interrupts_with, rule.origin, tag)
            if run.interrupt is not None and run.interrupt.phase is not phase:
                run.interrupt.phase = phase  # decided now: the declined call was still open

    @staticmethod
    def _feedback(part: _Part | None, message: str) -> None:
        """The user's message on a declined call: the call ends ``error`` with it (model-visible)."""
        if part is None:
            return
        if part.state in UNFINISHED_PART_STATES:
            part.state = PartState.ERROR
        part.message = message

    def _addressed_ask(
        self, ask_id: str | None, run_id: str | None, kind: AskKind, verb: str, reply_to: Any
    ) -> Ask | None:
        """The open ask a reply addresses, or None once the reply is rejected with its reason."""
        if (ask_id is None) == (run_id is None):
            self._reject(
                reply_to, RejectCode.INVALID_REQUEST, f"{verb} names exactly one of ask_id and run_id"
            )
            return None
        if run_id is not None:  # the convenience: the run's one open ask of this kind
            run = self._known_unfinished(run_id, reply_to, f"answer to a {kind.value}")
            if run is None:
                return None
            candidates = self._asks.open_of(run.id, kind)
            if not candidates:
                self._reject(
                    reply_to,
                    RejectCode.NOTHING_PENDING,
                    f"run {run_id!r} has no {kind.value} waiting for an answer",
                )
                return None
            if len(candidates) > 1:
                ids = ", ".join(repr(a.ask_id) for a in candidates)
                self._reject(
                    reply_to,
                    RejectCode.INVALID_REQUEST,
                    f"run {run_id!r} has {len(candidates)} open {kind.value} asks ({ids}); "
                    "address the reply by ask_id",
                )
                return None
            return candidates[0]
        assert ask_id is not None
        ask = self._asks.get(ask_id)
        if ask is None:
            self._reject(
                reply_to,
                RejectCode.UNKNOWN_ASK,
                f"no ask {ask_id!r} was raised (or its run finished long ago and was forgotten)",
            )
            return None
        if ask.kind is not kind:
            other = "reply_permission" if ask.kind is AskKind.PERMISSION else "answer_form or dismiss_form"
            self._reject(
                reply_to,
                RejectCode.INVALID_REQUEST,
                f"ask {ask_id!r} is a {ask.kind.value} ask, not a {kind.value}: answer it with {other}",
            )
            return None
        if ask.state is AskState.WITHDRAWN:
            assert ask.withdraw_reason is not None
            why = ask.withdraw_reason.value
            if ask.interrupt_reason is not None:
                why += f": its run was interrupted ({ask.interrupt_reason.value})"
            self._reject(
                reply_to,
                RejectCode.ASK_WITHDRAWN,
                f"ask {ask_id!r} was withdrawn ({why}); the {verb} reaches nothing",
            )
            return None
        if ask.state is not AskState.OPEN:
            self._reject(
                reply_to,
                RejectCode.ASK_ALREADY_ANSWERED,
                f"ask {ask_id!r} was {ask.state.value} already; the first decision stands",
            )
            return None
        return ask

    def _end_ask(self, ask: Ask, trigger: AskTrigger) -> tuple[_Run, _Part | None]:
        """Close ``ask`` in the book by ``trigger`` (a reply, a dismissal, a withdrawal). Returns its
        run and the tool part it belongs to, which no longer waits on it. (The run is saved in the
        journal: its parts change from here on.)"""
        run = self._runs[ask.run_id]
        self._touch(run)
        part = run.calls.get(ask.part) if ask.part is not None else None
        if part is not None and part.ask is ask:
            part.ask = None
        self._asks.close(ask, trigger)
        return run, part

    def _ask_stamp(self, ask: Ask) -> _AskStamp:
        """The opening fields of an event about ``ask``: the next ``seq``, the ask, its run and session."""
        return {"seq": self._next_seq(), "ask_id": ask.ask_id, "run_id": ask.run_id, "session": ask.session}

    # --- tool parts as events -----------------------------------------------------------------

    def _part_changed(self, run: _Run, part: _Part) -> None:
        """Announce a tool part's new content (``run.part.updated``), once per change."""
        shown = part_view(part)
        if shown == part.shown:
            return
        self._touch(run)
        part.shown = shown
        self._emit(part_updated(self._next_seq(), run, part.call_id, shown))
