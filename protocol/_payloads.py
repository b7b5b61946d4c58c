"""What an ask carries: the payload a UI renders, and the snapshot ``pending_asks()`` lists.

Every value is JSON, so an ask travels as is in ``ask.requested`` and over any wire.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import msgspec

from run_supervisor.protocol._enums import AskKind, AskState, WithdrawReason

__all__ = ["AskPayload", "AskSnapshot", "FormAnswer", "Question", "form_answer_problem", "make_payload"]

FormAnswer = str | tuple[str | tuple[str, ...], ...]
"""A form's answer: one entry per question, in order (a list of the picks for a ``multiple``
question, a string for any other); or one string for the whole form (a form of one question, or an
answer given as one text, as before answers were per question)."""


class Question(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One question of a form."""

    question: str
    """The question itself, as the user reads it."""
    header: str | None = None
    """A short heading (a tab or chip label)."""
    options: tuple[str, ...] = ()
    """Answers to pick from; empty: a free answer."""
    multiple: bool = False
    """Several options may be picked."""


class AskPayload(msgspec.Struct, frozen=True, kw_only=True):
    """What the body passes with an ask, for the UI to show; every value is JSON.

    ``tool`` and ``call_id`` are not here: they are on the ask itself (they tie it to a tool part).
    """

    title: str | None = None
    """One line: what is being asked ("Run this command?", "Which database?")."""
    command: str | None = None
    """Permission: what the tool will do if allowed (a shell command, a path, a URL pattern)."""
    options: tuple[str, ...] = ()
    """Permission: the choices the UI offers (e.g. ``once``, ``always``, ``reject``); display only."""
    questions: tuple[Question, ...] = ()
    """Form: its questions, in order."""
    data: dict[str, Any] = {}
    """Anything else the host passes (a diff, the matched patterns...): a JSON object."""
    key: str | None = None
    """Permission: what an "always" grant of this ask covers (``ReplyPermission(always=True)``), e.g.
    ``bash:git status`` or an edit's path pattern: the session's other open permission asks with the
    same key are approved at once, and so are its later ones, until the session is deleted. None:
    this ask cannot be granted for always."""


class AskSnapshot(msgspec.Struct, frozen=True, kw_only=True):
    """An ask as the supervisor knows it (``Supervisor.pending_asks()`` lists the open ones)."""

    ask_id: str
    run_id: str
    session: str
    kind: AskKind
    state: AskState
    tool: str | None
    call_id: str | None
    payload: AskPayload
    withdraw_reason: WithdrawReason | None = None


def make_payload(
    verb: str,
    *,
    title: str | None = None,
    command: str | None = None,
    options: Iterable[str] = (),
    questions: Iterable[Question | Mapping[str, Any] | str] = (),
    data: Mapping[str, Any] | None = None,
    key: str | None = None,
) -> AskPayload:
    """Build and validate a payload; ``ValueError`` names the offending argument of ``verb``.

    A question may be a ``Question``, a mapping of its fields, or plain text. ``data`` must be a
    JSON object: it is stored as its JSON round trip, so what the events carry is exactly JSON.
    """
    items: list[Any] = []
    for index, given in enumerate(questions):
        if isinstance(given, str):
            items.append({"question": given})
        elif isinstance(given, Question):
            items.append(msgspec.structs.asdict(given))
        elif isinstance(given, Mapping):
            items.append(given)
        else:
            raise ValueError(
                f"{verb}: questions[{index}] must be a Question, a mapping or a string, "
                f"not {type(given).__name__}"
            )
    raw: dict[str, Any] = {
        "title": title,
        "command": command,
        "options": list(options) if not isinstance(options, str) else options,
        "questions": items,
        "data": {},
        "key": key,
    }
    try:
        payload = msgspec.convert(raw, AskPayload)
    except msgspec.ValidationError as exc:
        raise ValueError(f"{verb}: {exc}") from None
    for index, question in enumerate(payload.questions):
        if not question.question:
            raise ValueError(f"{verb}: questions[{index}].question must not be empty")
    if data is not None:
        if not isinstance(data, Mapping) or not all(isinstance(k, str) for k in data):
            raise ValueError(f"{verb}: data must be a mapping with string keys (a JSON object)")
        try:
            plain = msgspec.json.decode(msgspec.json.encode(dict(data)))
        except (TypeError, msgspec.EncodeError) as exc:
            raise ValueError(f"{verb}: data is not JSON-serialisable: {exc}") from None
        payload = msgspec.structs.replace(payload, data=plain)
    return payload


def form_answer_problem(
    questions: tuple[Question, ...], answer: FormAnswer, name: str = "answer"
) -> str | None:
    """Why ``answer`` does not answer a form of these ``questions`` (None: it does), naming the field
    and the index: one entry per question, a list only for a ``multiple`` question. A plain string
    answers any form (as one text)."""
    if isinstance(answer, str):
        return None
    if len(answer) != len(questions):
        asked = f"{len(questions)} question{'' if len(questions) == 1 else 's'}"
        return f"{name} has {len(answer)} entries but the form asks {asked}: give one entry per question"
    for index, (entry, question) in enumerate(zip(answer, questions, strict=True)):
        if not isinstance(entry, str) and not question.multiple:
            return (
                f"{name}[{index}] is a list, but question {index} ({question.question!r}) is not multiple "
                "choice: give one string"
            )
    return None
