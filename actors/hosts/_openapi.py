"""The OpenAPI 3.1 document of ``run-supervisor serve``, generated from the code's own types.

Every schema comes from the structs the host decodes and encodes (``msgspec.json.schema_components``):
the protocol's requests, outcomes, snapshots and events, the external-run reports and notices, and the
host's own answers (``_answers``). A route's body is its request struct without the fields the route
takes from its path (and without ``type``). Objects are closed (``additionalProperties: false``; a map
of free JSON, such as an ask's ``data``, stays a map); everything the server sends has every property
present (``required`` lists them all). ``OPERATIONS`` is the one table of routes: the app's routes and
this table are kept equal by tests/test_openapi.py, and so is docs/openapi.json with ``document()``.

Conventions (stated in docs/wire.md): native routes and fields are snake_case, and an answer says
``result`` (``ok`` / ``rejected`` / a close's result) with ``code`` and ``error`` when refused; the
seed-compatible routes (``/global/dispose``, ``/instance/*``, ``GET /event``) keep upstream's camelCase and
``status`` shapes, for upstream's clients. Reject codes and statuses: one table (``STATUS_BY_CODE``).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import msgspec

from run_supervisor.actors.hosts import _answers as answers
from run_supervisor.actors.hosts import _remote_caches as caches
from run_supervisor.actors.hosts._external import (
    MAX_LEASE_MS,
    MIN_LEASE_MS,
    AnswerNotice,
    ExternalReport,
    InterruptNotice,
    RefusedNotice,
    ReportOutcome,
)
from run_supervisor.actors.hosts._hub import StreamReset
from run_supervisor.actors.hosts._wire import STATUS_BY_CODE
from run_supervisor.protocol import (
    ActionSnapshot,
    AnswerForm,
    AskSnapshot,
    CancelRun,
    CancelSession,
    CloseMode,
    CloseOutcome,
    CloseRequest,
    ConfirmClose,
    DismissForm,
    Event,
    RejectCode,
    ReplyPermission,
    Request,
    RequestOutcome,
    RunSnapshot,
    SessionSnapshot,
    SetQueuePolicy,
    Shutdown,
    StartRun,
)
from run_supervisor.protocol._schema import reachable, require_every_property

__all__ = ["OPERATIONS", "Operation", "document"]

_REF = "#/components/schemas/{name}"


def ref(name: str) -> dict[str, Any]:
    return {"$ref": _REF.format(name=name)}


# The types the document is made of, by component name (their own components come along).
_TYPES: dict[str, Any] = {
    "Request": Request,
    "CloseOutcome": CloseOutcome,
    "RequestOutcome": RequestOutcome,
    "ReportOutcome": ReportOutcome,
    "ExternalReport": ExternalReport,
    "RunSnapshot": RunSnapshot,
    "SessionSnapshot": SessionSnapshot,
    "ActionSnapshot": ActionSnapshot,
    "AskSnapshot": AskSnapshot,
    "Event": Event,
    "HostEvent": InterruptNotice | AnswerNotice | RefusedNotice | caches.HookRequest | StreamReset,
    "StreamEvent": Event | InterruptNotice | AnswerNotice | RefusedNotice | caches.HookRequest | StreamReset,
    "CompatStreamEvent": answers.CompatEvent | StreamReset,
    "Refusal": answers.Refusal,
    "Health": answers.Health,
    "StartedRun": answers.StartedRun,
    "DirectoriesBody": answers.DirectoriesBody,
    "DirectoriesAnswer": answers.DirectoriesAnswer,
    "HostStatistics": answers.HostStatistics,
    "Ticket": answers.Ticket,
    "CompatCloseAnswer": answers.CompatCloseAnswer,
    "ReadyLine": answers.ReadyLine,
    # caches over the wire (_remote_caches)
    "LoadRequested": caches.LoadRequested,
    "DisposeRequested": caches.DisposeRequested,
    "HooksRegisterBody": caches.HooksRegisterBody,
    "HookAckBody": caches.HookAckBody,
    "HooksRegistered": caches.HooksRegistered,
    "HooksUnregistered": caches.HooksUnregistered,
    "HooksRenewed": caches.HooksRenewed,
    "HooksState": caches.HooksState,
    "CacheAck": caches.CacheAck,
}

_SENT_ROOTS = (
    "CloseOutcome",
    "RequestOutcome",
    "ReportOutcome",
    "RunSnapshot",
    "SessionSnapshot",
    "ActionSnapshot",
    "AskSnapshot",
    "StreamEvent",
    "CompatStreamEvent",
    "Refusal",
    "Health",
    "StartedRun",
    "DirectoriesAnswer",
    "HostStatistics",
    "Ticket",
    "CompatCloseAnswer",
    "HooksRegistered",
    "HooksUnregistered",
    "HooksRenewed",
    "HooksState",
    "CacheAck",
)
"""What the server sends: every property of these (and of what they refer to) is always present."""

_RECEIVED_ROOTS = ("Request", "ExternalReport", "DirectoriesBody", "HooksRegisterBody", "HookAckBody")
"""What clients send (the route bodies are made from these)."""

_LEASE = {
    "type": "integer",
    "minimum": MIN_LEASE_MS,
    "maximum": MAX_LEASE_MS,
    "description": "The external run's lease: report (a heartbeat will do) within it, or the run is "
    "interrupted with reason timeout. Default: serve's --lease-ms (30000).",
}


@dataclass(frozen=True)
class Body:
    """A request body: a component made from a request struct (minus ``drop``, plus ``add``)."""

    name: str
    source: str | None = None
    """The component it is derived from; None: ``name`` is a component as it is."""
    drop: tuple[str, ...] = ()
    add: dict[str, Any] = field(default_factory=dict)
    optional: tuple[str, ...] = ()
    """Fields of the source the route fills in when absent."""
    aliases: dict[str, str] = field(default_factory=dict)
    """Old spellings the route still takes (field -> old name), deprecated: exactly one of the two
    is given."""


@dataclass(frozen=True)
class Operation:
    """One route and method of the HTTP host, as the document describes it."""

    method: str
    path: str
    operation_id: str
    summary: str
    answer: dict[str, Any] | None
    """The 2xx answer's schema (JSON); None for a route that answers another media type."""
    status: int = 200
    body: Body | None = None
    codes: tuple[str, ...] = ()
    """Reject codes the route answers (besides the guard's ``unauthorized``, ``forbidden``,
    ``too_large`` and the contained ``internal_error``)."""
    refused: dict[str, Any] | None = None
    """The schema of a refusal (default: the answer's struct or a ``Refusal``)."""
    public: bool = False
    query: tuple[tuple[str, dict[str, Any], str], ...] = ()
    headers: tuple[tuple[str, dict[str, Any], str], ...] = ()
    media: str = "application/json"
    description: str = ""
    tags: tuple[str, ...] = ("native",)


def _ids(*names: str) -> tuple[str, ...]:
    return names


_RUN = ("run_id",)
_SUBMIT = (RejectCode.INVALID_REQUEST.value, RejectCode.SUPERVISOR_CLOSED.value, "timeout")
_RUN_GONE = (RejectCode.UNKNOWN_RUN.value, RejectCode.RUN_FINISHED.value)
_ASK_GONE = (*_RUN_GONE, RejectCode.NOTHING_PENDING.value, RejectCode.UNKNOWN_ASK.value)
"""An ask's run unknown or finished, or nothing (or not this ask) pending."""
_ASK_CODES = (
    *_ASK_GONE,
    RejectCode.ASK_WITHDRAWN.value,
    RejectCode.ASK_ALREADY_ANSWERED.value,
    *_SUBMIT,
)
_START_CODES = (
    RejectCode.RUN_ALREADY_EXISTS.value,
    RejectCode.SESSION_BUSY.value,
    *_RUN_GONE,
    RejectCode.UNKNOWN_DIRECTORY.value,
    *_SUBMIT,
)
_CONFIRM_CODES = (
    RejectCode.UNKNOWN_ACTION.value,
    RejectCode.ACTION_ALREADY_COMPLETED.value,
    RejectCode.NOT_CONFIRMABLE.value,
)
_CLOSE_CODES = (RejectCode.UNKNOWN_DIRECTORY.value, *_SUBMIT)
_HOOKS_CODES = (RejectCode.NOT_FOUND.value, RejectCode.INVALID_REQUEST.value)
_EITHER = {"anyOf": [ref("CloseOutcome"), ref("RequestOutcome")]}
_CLOSE_REFUSED = {"anyOf": [ref("CloseOutcome"), ref("Refusal")]}
"""A compatible close's refusal: a close outcome (a native close's answer) or a ``Refusal``."""
_STRING = {"type": "string"}
_COMPAT_HEADERS = (
    ("x-opencode-client-action-id", _STRING, "The client's own action id: echoed as `clientActionID`."),
    (
        "x-opencode-client-action-kind",
        _STRING,
        "The close's origin (default: the route's, e.g. global.dispose).",
    ),
)
_COMPAT_QUERY = (("mode", ref("CloseMode"), f"The close's mode (default {CloseMode.MAINTENANCE.value})."),)
_DIRECTORY_QUERY = (("directory", _STRING, "The directory (or the header x-opencode-directory)."),)
_EVENTS_QUERY = (
    ("after", _STRING, "Resume after this event id (as Last-Event-ID); `0`: the whole buffer."),
    ("ticket", _STRING, "A single-use ticket from POST /events/ticket, instead of the Authorization header."),
)
_EVENTS_HEADERS = (("last-event-id", _STRING, "Resume after this event id."),)


_APPROVE = {"approved": "approve"}
"""A permission reply's decision: ``approved`` (as the events say); ``approve`` is its old spelling."""


def _request_body(name: str, source: type[Any], drop: Iterable[str] = (), **kw: Any) -> Body:
    del source  # named for the reader; the component is found by name
    return Body(name=name, source=name.removesuffix("Body"), drop=("type", *drop), **kw)


def _answer(path: str, operation_id: str, summary: str, body: Body) -> Operation:
    """A POST that answers an ask (of a run or by its id): a request outcome, or an ask's refusals."""
    return Operation("POST", path, operation_id, summary, ref("RequestOutcome"), body=body, codes=_ASK_CODES)


def _stream(path: str, operation_id: str, summary: str, **kw: Any) -> Operation:
    """A GET that answers an event stream (SSE), resumed with ``after`` or ``Last-Event-ID``."""
    return Operation(
        "GET",
        path,
        operation_id,
        summary,
        None,
        media="text/event-stream",
        query=_EVENTS_QUERY,
        headers=_EVENTS_HEADERS,
        codes=("unauthorized",),
        **kw,
    )


OPERATIONS: list[Operation] = [
    Operation("GET", "/health", "health", "Is the server up (no token needed)", ref("Health"), public=True),
    Operation(
        "GET",
        "/",
        "page",
        "The live timeline page (a static shell; its data needs the token)",
        None,
        public=True,
        media="text/html",
    ),
    Operation(
        "GET",
        "/openapi.json",
        "openapi",
        "This document (no token needed: it holds no data)",
        {"type": "object"},
        public=True,
    ),
    Operation(
        "POST",
        "/requests",
        "submit",
        "Submit any protocol request (a start_run may give lease_ms)",
        {"anyOf": [ref("CloseOutcome"), ref("RequestOutcome")]},
        body=Body(name="AnyRequest"),
        codes=tuple(
            dict.fromkeys(
                (
                    *_START_CODES,
                    *_ASK_CODES,
                    *_CLOSE_CODES,
                    RejectCode.ALREADY_INTERRUPTING.value,
                    *_CONFIRM_CODES,
                )
            )
        ),
    ),
    Operation(
        "POST",
        "/runs",
        "start_run",
        "Start an external run (created: 201)",
        ref("StartedRun"),
        status=201,
        body=_request_body("StartRunBody", StartRun, add={"lease_ms": _LEASE}, optional=("run_id",)),
        codes=_START_CODES,
        refused={"anyOf": [ref("StartedRun"), ref("Refusal")]},
    ),
    Operation(
        "GET",
        "/runs/{run_id}",
        "get_run",
        "What is known of a run",
        ref("RunSnapshot"),
        codes=(RejectCode.UNKNOWN_RUN.value, RejectCode.INVALID_REQUEST.value),
    ),
    Operation(
        "POST",
        "/runs/{run_id}/cancel",
        "cancel",
        "Cancel a run",
        ref("RequestOutcome"),
        body=_request_body("CancelRunBody", CancelRun, _RUN),
        codes=(*_RUN_GONE, RejectCode.ALREADY_INTERRUPTING.value, *_SUBMIT),
    ),
    _answer(
        "/runs/{run_id}/permission",
        "reply_permission_of_run",
        "Reply to the run's one open permission ask",
        _request_body("ReplyPermissionBody", ReplyPermission, ("run_id", "ask_id"), aliases=_APPROVE),
    ),
    _answer(
        "/runs/{run_id}/form",
        "answer_form_of_run",
        "Answer the run's one open form",
        _request_body("AnswerFormBody", AnswerForm, ("run_id", "ask_id")),
    ),
    _answer(
        "/runs/{run_id}/form/dismiss",
        "dismiss_form_of_run",
        "Dismiss the run's one open form",
        _request_body("DismissFormBody", DismissForm, ("run_id", "ask_id")),
    ),
    Operation(
        "POST",
        "/runs/{run_id}/reports",
        "report",
        "An external run's report (step, part, ask, retry, heartbeat, end)",
        ref("ReportOutcome"),
        body=Body(name="ExternalReport"),
        codes=(*_ASK_GONE, *_SUBMIT),
    ),
    Operation(
        "GET",
        "/asks",
        "get_asks",
        "Open asks (of one run with ?run_id=)",
        {"type": "array", "items": ref("AskSnapshot")},
        codes=(RejectCode.INVALID_REQUEST.value,),
        query=(("run_id", _STRING, "Only this run's asks."),),
    ),
    _answer(
        "/asks/{ask_id}/permission",
        "reply_permission",
        "Reply to a permission ask",
        Body(name="ReplyPermissionBody"),
    ),
    _answer("/asks/{ask_id}/form", "answer_form", "Answer a form", Body(name="AnswerFormBody")),
    _answer("/asks/{ask_id}/dismiss", "dismiss_form", "Dismiss a form", Body(name="DismissFormBody")),
    Operation(
        "GET",
        "/sessions/{session}",
        "get_session",
        "A session's status, active run and queue",
        ref("SessionSnapshot"),
        codes=("not_found", RejectCode.INVALID_REQUEST.value),
    ),
    Operation(
        "POST",
        "/sessions/{session}/cancel",
        "cancel_session",
        "Stop a session: its queued runs end unstarted, its active run is interrupted (one action id)",
        ref("RequestOutcome"),
        body=_request_body("CancelSessionBody", CancelSession, ("session",)),
        codes=_SUBMIT,
        description="Answered `ok` with the action's `action_id` and the runs it stopped "
        "(`interrupted_runs`, queued ones first); an idle or unknown session: `ok`, nothing stopped.",
    ),
    Operation(
        "DELETE",
        "/sessions/{session}",
        "delete_session",
        "Forget a session (its queue policy and its always grants); with confirm=true stop it first",
        ref("RequestOutcome"),
        query=(
            (
                "confirm",
                {"type": "boolean"},
                "Stop its active and queued runs first (as a session cancel); without it a busy "
                "session is refused `session_busy` (409).",
            ),
            ("origin", _STRING, "Who asked (the stopped runs carry it; default `user`)."),
            ("grace_ms", {"type": "integer", "minimum": 0}, "The stopped body's grace before abandon."),
            ("tag", _STRING, "The requester's correlation tag."),
        ),
        codes=(RejectCode.SESSION_BUSY.value, *_SUBMIT),
        description="The options are query parameters (the route takes no body). An unknown session: "
        "`ok`. A confirmed delete of a busy session is answered at once; the session is forgotten when "
        "its active run has ended.",
    ),
    *(
        Operation(
            method,
            "/sessions/{session}/queue_policy",
            f"set_queue_policy{suffix}",
            "Set a session's default queue policy",
            ref("RequestOutcome"),
            body=_request_body("SetQueuePolicyBody", SetQueuePolicy, ("session",)),
            codes=_SUBMIT,
        )
        for method, suffix in (("PUT", ""), ("POST", "_post"))
    ),
    Operation(
        "GET",
        "/actions",
        "get_actions",
        "Lifecycle actions still pending",
        {"type": "array", "items": ref("ActionSnapshot")},
    ),
    Operation(
        "POST",
        "/actions/{action_id}/confirm",
        "confirm_close",
        "Confirm a pending maintenance close",
        ref("CloseOutcome"),
        body=_request_body("ConfirmCloseBody", ConfirmClose, ("action_id",)),
        codes=(*_CONFIRM_CODES, *_SUBMIT),
    ),
    Operation(
        "GET", "/statistics", "get_statistics", "Counters of the core and the host", ref("HostStatistics")
    ),
    Operation(
        "POST",
        "/close",
        "close",
        "A lifecycle close (dispose, reload, dispose_all, invalidate_config)",
        ref("CloseOutcome"),
        body=_request_body(
            "CloseRequestBody",
            CloseRequest,
            add={"directory": {"type": "string", "description": "One directory (instead of `directories`)."}},
        ),
        codes=_CLOSE_CODES,
    ),
    Operation(
        "POST",
        "/shutdown",
        "shutdown",
        "Shut the supervisor down (then the server stops)",
        ref("CloseOutcome"),
        body=_request_body("ShutdownBody", Shutdown, optional=("grace_ms",)),
        codes=_SUBMIT,
    ),
    Operation(
        "POST",
        "/directories",
        "directories",
        "Make directories known, and load them",
        ref("DirectoriesAnswer"),
        body=Body(name="DirectoriesBody"),
        codes=(*_SUBMIT, RejectCode.INTERNAL_ERROR.value),
    ),
    Operation(
        "POST",
        "/events/ticket",
        "events_ticket",
        "A single-use ticket for one event stream (EventSource cannot send a header)",
        ref("Ticket"),
        status=201,
    ),
    _stream(
        "/events",
        "events",
        "The event stream (SSE; each `data` is a StreamEvent, tagged by type)",
        description="Each frame: `id: <epoch>:<seq>` and `data: <StreamEvent JSON>` (a `stream.reset` "
        "has no id). The stream's item schema is `x-event-schema`.",
    ),
    _stream(
        "/event",
        "compat_events",
        "Seed 002's event stream (upstream's shapes; each `data` is a CompatStreamEvent)",
        tags=("compatible",),
    ),
    Operation(
        "POST",
        "/global/dispose",
        "compat_global_dispose",
        "Seed 002: dispose every instance (upstream's shape)",
        ref("CompatCloseAnswer"),
        headers=_COMPAT_HEADERS,
        query=_COMPAT_QUERY,
        codes=_CLOSE_CODES,
        refused=_CLOSE_REFUSED,
        tags=("compatible",),
    ),
    *(
        Operation(
            "POST",
            f"/instance/{what}",
            f"compat_instance_{what}",
            f"Seed 002: {what} one directory's instance (upstream's shape)",
            ref("CompatCloseAnswer"),
            headers=(*_COMPAT_HEADERS, ("x-opencode-directory", _STRING, "The directory (or ?directory=).")),
            query=(*_COMPAT_QUERY, *_DIRECTORY_QUERY),
            codes=_CLOSE_CODES,
            refused=_CLOSE_REFUSED,
            tags=("compatible",),
        )
        for what in ("dispose", "reload")
    ),
    # caches over the wire (_remote_caches): a host that keeps its caches out of process
    Operation(
        "POST",
        "/instances/hooks",
        "register_hooks",
        "Register as the host that keeps the caches out of process (replaces any registration)",
        ref("HooksRegistered"),
        body=Body(name="HooksRegisterBody"),
        codes=(*_HOOKS_CODES, RejectCode.SUPERVISOR_CLOSED.value),
    ),
    Operation(
        "GET",
        "/instances/hooks",
        "get_hooks",
        "The registration, its outstanding requests and the generations it holds",
        ref("HooksState"),
        codes=(RejectCode.NOT_FOUND.value,),
    ),
    Operation(
        "DELETE",
        "/instances/hooks/{registration}",
        "unregister_hooks",
        "End the registration: its outstanding requests fail at once",
        ref("HooksUnregistered"),
        codes=_HOOKS_CODES,
    ),
    Operation(
        "POST",
        "/instances/hooks/{registration}/renew",
        "renew_hooks",
        "Renew the registration's lease (any acknowledgement renews it too)",
        ref("HooksRenewed"),
        codes=_HOOKS_CODES,
        description="A registration not renewed within its `lease_ms` ends as if unregistered: its "
        "outstanding requests fail naming the lease, later loads and disposes ask nothing.",
    ),
    Operation(
        "POST",
        "/instances/hooks/acks/{request_id}",
        "ack_hook",
        "Acknowledge a load or dispose request (error: it could not be done)",
        ref("CacheAck"),
        body=Body(name="HookAckBody"),
        codes=_HOOKS_CODES,
    ),
]
"""Every route of the HTTP host (``HEAD`` aside: Starlette answers it for every ``GET``)."""

EXTENSIONS: list[Callable[[dict[str, Any]], None]] = []
"""Functions that add to the document (routes, components) before it is finished: a module that
adds routes to the app appends one here (see ``document``)."""


def _close_objects(schema: Any) -> None:
    if isinstance(schema, dict):
        if schema.get("type") == "object":
            # A struct is closed; a map of free JSON (an ask's ``data``) says so, else generators
            # read a bare ``{"type": "object"}`` as an empty object (TypeScript: Record<string, never>).
            schema.setdefault("additionalProperties", "properties" not in schema)
        for value in schema.values():
            _close_objects(value)
    elif isinstance(schema, list):
        for item in schema:
            _close_objects(item)


def _components() -> dict[str, Any]:
    names = list(_TYPES)
    roots, components = msgspec.json.schema_components([_TYPES[n] for n in names], ref_template=_REF)
    schemas: dict[str, Any] = dict(components)
    for name, root in zip(names, roots, strict=True):
        if root != ref(name):
            schemas[name] = root
    # The reject codes: what the server sends is what the vocabulary says (RejectCode).
    _close_objects(schemas)
    sent = reachable(schemas, _SENT_ROOTS)
    # A struct both sent and received (a form's Question) is two components: what a client sends may
    # leave out what has a default (``QuestionInput``); what the server sends has every property.
    received = reachable(schemas, _RECEIVED_ROOTS)
    shared = {name for name in sent & received if "properties" in schemas[name]}
    for name in sorted(shared):
        schemas[f"{name}Input"] = {**copy.deepcopy(schemas[name]), "title": f"{name}Input"}
    for name in received:
        target = f"{name}Input" if name in shared else name
        schemas[target] = _rename_refs(schemas[target], shared)
    require_every_property(schemas, sent)
    return schemas


def _rename_refs(schema: Any, shared: set[str]) -> Any:
    if isinstance(schema, dict):
        target = schema.get("$ref")
        out = {k: _rename_refs(v, shared) for k, v in schema.items()}
        if isinstance(target, str) and target.rsplit("/", 1)[-1] in shared:
            out["$ref"] = f"{target}Input"
        return out
    if isinstance(schema, list):
        return [_rename_refs(item, shared) for item in schema]
    return schema


def _derive(schemas: dict[str, Any], body: Body) -> None:
    if body.source is None or body.name in schemas:
        return
    base = copy.deepcopy(schemas[body.source])
    for name in body.drop:
        base["properties"].pop(name, None)
    base["properties"].update(body.add)
    required = [n for n in base.get("required", []) if n not in body.drop and n not in body.optional]
    _alias(base, body.aliases, required)
    base["required"] = required
    if not required:
        del base["required"]
    base["title"] = body.name
    schemas[body.name] = base


def _alias(schema: dict[str, Any], aliases: dict[str, str], required: list[str]) -> None:
    """Add each field's deprecated old spelling to an object schema (exactly one of the two given)."""
    for name, old in aliases.items():
        schema["properties"][old] = {
            **schema["properties"][name],
            "deprecated": True,
            "description": f"Say `{name}`.",
        }
        if name in required:
            required.remove(name)
            schema["oneOf"] = [{"required": [name]}, {"required": [old]}]


def _any_request(schemas: dict[str, Any]) -> None:
    """``POST /requests``: any request; a ``start_run`` may carry ``lease_ms`` (an external run's), and
    a ``reply_permission`` may still say ``approve``."""
    start = copy.deepcopy(schemas["StartRun"])
    start["properties"]["lease_ms"] = _LEASE
    start["title"] = "StartRunRequest"
    schemas["StartRunRequest"] = start
    reply = copy.deepcopy(schemas["ReplyPermission"])
    required = list(reply.get("required", []))
    _alias(reply, _APPROVE, required)
    reply["required"] = required
    reply["title"] = "ReplyPermissionRequest"
    schemas["ReplyPermissionRequest"] = reply
    variants = {"StartRun": "StartRunRequest", "ReplyPermission": "ReplyPermissionRequest"}
    union = copy.deepcopy(schemas["Request"])
    names = [r["$ref"].rsplit("/", 1)[-1] for r in union["anyOf"]]
    union["anyOf"] = [ref(variants.get(name, name)) for name in names]
    mapping = union["discriminator"]["mapping"]
    for tag, target in list(mapping.items()):
        name = target.rsplit("/", 1)[-1]
        if name in variants:
            mapping[tag] = _REF.format(name=variants[name])
    schemas["AnyRequest"] = union


def _refusal_schema(codes: Iterable[str]) -> dict[str, Any]:
    return {"anyOf": [ref("Refusal")], "x-codes": sorted(set(codes))}


def _responses(op: Operation) -> dict[str, Any]:
    responses: dict[str, Any] = {}
    if op.answer is None:
        content: dict[str, Any] = {op.media: {"schema": {"type": "string"}}}
        if op.media == "text/event-stream":
            item = "CompatStreamEvent" if op.path == "/event" else "StreamEvent"
            content[op.media]["x-event-schema"] = ref(item)
        responses[str(op.status)] = {"description": op.summary, "content": content}
    else:
        responses[str(op.status)] = {
            "description": op.summary,
            "content": {"application/json": {"schema": op.answer}},
        }
    codes = list(op.codes)
    codes.append("forbidden")  # Host or Origin not this server's
    if not op.public:
        codes.append("unauthorized")
    if op.method in ("POST", "PUT", "DELETE"):  # the guard reads (and bounds) a DELETE's body too
        codes += ["too_large", RejectCode.INVALID_REQUEST.value]
    if op.operation_id != "page":
        codes.append(RejectCode.INTERNAL_ERROR.value)  # contained: one JSON answer
    by_status: dict[int, list[str]] = {}
    for code in dict.fromkeys(codes):
        by_status.setdefault(STATUS_BY_CODE[code], []).append(code)
    refused = op.refused or (
        {"anyOf": [op.answer, ref("Refusal")]}
        if op.answer is not None and op.answer.get("$ref", "").endswith("Outcome")
        else ref("Refusal")
    )
    if op.answer is not None and "anyOf" in op.answer and op.refused is None:
        refused = {"anyOf": [*op.answer["anyOf"], ref("Refusal")]}
    for status in sorted(by_status):
        names = by_status[status]
        responses[str(status)] = {
            "description": "Refused: " + ", ".join(f"`{n}`" for n in names),
            "content": {"application/json": {"schema": refused}},
            "x-codes": names,
        }
    return responses


def _parameters(op: Operation) -> list[dict[str, Any]]:
    params: list[dict[str, Any]] = []
    for part in op.path.split("/"):
        if part.startswith("{"):
            params.append(
                {
                    "name": part[1:-1],
                    "in": "path",
                    "required": True,
                    "schema": {"type": "string", "minLength": 1},
                }
            )
    for name, schema, text in op.query:
        params.append({"name": name, "in": "query", "required": False, "schema": schema, "description": text})
    for name, schema, text in op.headers:
        params.append(
            {"name": name, "in": "header", "required": False, "schema": schema, "description": text}
        )
    return params


def document() -> dict[str, Any]:
    """The OpenAPI 3.1 document of the HTTP host (``GET /openapi.json``, ``run-supervisor openapi``)."""
    schemas = _components()
    _any_request(schemas)
    for op in OPERATIONS:
        if op.body is not None:
            _derive(schemas, op.body)
    doc: dict[str, Any] = {
        "openapi": "3.1.0",
        "info": {
            "title": "run-supervisor serve",
            "version": "1",
            "description": (
                "The supervisor over HTTP and server-sent events. Native routes are snake_case and "
                "answer `result` (`ok`, `rejected`, or a close's result) with `code` and `error` when "
                "refused; the `compatible` routes keep seed 002's upstream shapes (camelCase, `status`). "
                "Every answer is JSON with every property present; every object is closed. "
                "`run-supervisor serve` prints one ReadyLine on stdout when it accepts connections."
            ),
        },
        "jsonSchemaDialect": "https://json-schema.org/draft/2020-12/schema",
        "servers": [{"url": "http://127.0.0.1:{port}", "variables": {"port": {"default": "8080"}}}],
        "security": [{"bearer": []}],
        "tags": [
            {"name": "native", "description": "snake_case; answers say `result`"},
            {"name": "compatible", "description": "seed 002's routes and shapes, for upstream's clients"},
        ],
        "paths": {},
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": schemas,
        },
        "x-ready-line": ref("ReadyLine"),
        "x-status-by-code": {str(code): status for code, status in STATUS_BY_CODE.items() if code},
    }
    for op in OPERATIONS:
        entry: dict[str, Any] = {
            "operationId": op.operation_id,
            "summary": op.summary,
            "tags": list(op.tags),
            "responses": _responses(op),
        }
        if op.description:
            entry["description"] = op.description
        params = _parameters(op)
        if params:
            entry["parameters"] = params
        if op.public:
            entry["security"] = []
        if op.body is not None:
            body_schema = schemas[op.body.name]
            entry["requestBody"] = {
                "required": bool(body_schema.get("required") or {"anyOf", "oneOf"} & set(body_schema)),
                "content": {"application/json": {"schema": ref(op.body.name)}},
            }
        doc["paths"].setdefault(op.path, {})[op.method.lower()] = entry
    for extend in EXTENSIONS:
        extend(doc)
    _close_objects(doc["components"]["schemas"])
    doc["components"]["schemas"] = dict(sorted(doc["components"]["schemas"].items()))
    return doc


def document_json() -> bytes:
    """The document as the server serves it and docs/openapi.json holds it (indented, sorted keys)."""
    import json

    return (json.dumps(document(), indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode()
