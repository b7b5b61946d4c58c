"""run-supervisor: keeps AI coding-agent runs alive across instance disposes, reloads and config
changes. Run lifetime belongs to the supervisor, never to a cache.

What a host imports is this one namespace::

    from run_supervisor import Supervisor

    with Supervisor.start(directories=["/proj/a"]) as supervisor:
        run = supervisor.start_run(body, session="s1", directory="/proj/a")
        supervisor.close("dispose_all", mode="maintenance", origin="settings.provider.connect")
        run.wait(timeout=5)

``run_supervisor.protocol`` is the pure half (messages, events, codecs, the decision core; no
threads, no pykka); ``run_supervisor.actors`` is the pykka shell behind the facade. Logging is off by
default; turn it on with ``loguru.logger.enable("run_supervisor")``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from run_supervisor.actors import (
        AlreadyInterrupting as AlreadyInterrupting,
    )
    from run_supervisor.actors import (
        Ask as Ask,
    )
    from run_supervisor.actors import (
        AskAlreadyAnswered as AskAlreadyAnswered,
    )
    from run_supervisor.actors import (
        AskWithdrawn as AskWithdrawn,
    )
    from run_supervisor.actors import (
        AsyncAsk as AsyncAsk,
    )
    from run_supervisor.actors import (
        AsyncRunBody as AsyncRunBody,
    )
    from run_supervisor.actors import (
        AsyncRunContext as AsyncRunContext,
    )
    from run_supervisor.actors import (
        AsyncRunHandle as AsyncRunHandle,
    )
    from run_supervisor.actors import (
        AsyncSubscription as AsyncSubscription,
    )
    from run_supervisor.actors import (
        AsyncSupervisor as AsyncSupervisor,
    )
    from run_supervisor.actors import (
        AsyncToolCall as AsyncToolCall,
    )
    from run_supervisor.actors import (
        CancelToken as CancelToken,
    )
    from run_supervisor.actors import (
        CloseActionName as CloseActionName,
    )
    from run_supervisor.actors import (
        CloseModeName as CloseModeName,
    )
    from run_supervisor.actors import (
        FormReply as FormReply,
    )
    from run_supervisor.actors import (
        Gate as Gate,
    )
    from run_supervisor.actors import (
        InstanceHooks as InstanceHooks,
    )
    from run_supervisor.actors import (
        InvalidRequest as InvalidRequest,
    )
    from run_supervisor.actors import (
        JournalError as JournalError,
    )
    from run_supervisor.actors import (
        JournalLocked as JournalLocked,
    )
    from run_supervisor.actors import (
        JournalUnreadable as JournalUnreadable,
    )
    from run_supervisor.actors import (
        LoadFailed as LoadFailed,
    )
    from run_supervisor.actors import (
        NoInstanceHooks as NoInstanceHooks,
    )
    from run_supervisor.actors import (
        NothingPending as NothingPending,
    )
    from run_supervisor.actors import (
        PermissionReply as PermissionReply,
    )
    from run_supervisor.actors import (
        RunAlreadyExists as RunAlreadyExists,
    )
    from run_supervisor.actors import (
        RunAlreadyFinished as RunAlreadyFinished,
    )
    from run_supervisor.actors import (
        RunBody as RunBody,
    )
    from run_supervisor.actors import (
        RunContext as RunContext,
    )
    from run_supervisor.actors import (
        RunHandle as RunHandle,
    )
    from run_supervisor.actors import (
        RunInterrupted as RunInterrupted,
    )
    from run_supervisor.actors import (
        ShutdownReasonName as ShutdownReasonName,
    )
    from run_supervisor.actors import (
        Subscription as Subscription,
    )
    from run_supervisor.actors import (
        Supervisor as Supervisor,
    )
    from run_supervisor.actors import (
        SupervisorClosed as SupervisorClosed,
    )
    from run_supervisor.actors import (
        SupervisorConfig as SupervisorConfig,
    )
    from run_supervisor.actors import (
        SupervisorError as SupervisorError,
    )
    from run_supervisor.actors import (
        SupervisorTimeout as SupervisorTimeout,
    )
    from run_supervisor.actors import (
        ToolCall as ToolCall,
    )
    from run_supervisor.actors import (
        UnknownAsk as UnknownAsk,
    )
    from run_supervisor.actors import (
        UnknownDirectory as UnknownDirectory,
    )
    from run_supervisor.actors import (
        UnknownRun as UnknownRun,
    )
    from run_supervisor.protocol import (
        ActionSnapshot as ActionSnapshot,
    )
    from run_supervisor.protocol import (
        AskKind as AskKind,
    )
    from run_supervisor.protocol import (
        AskPayload as AskPayload,
    )
    from run_supervisor.protocol import (
        AskSnapshot as AskSnapshot,
    )
    from run_supervisor.protocol import (
        AskState as AskState,
    )
    from run_supervisor.protocol import (
        CloseAction as CloseAction,
    )
    from run_supervisor.protocol import (
        CloseMode as CloseMode,
    )
    from run_supervisor.protocol import (
        CloseOutcome as CloseOutcome,
    )
    from run_supervisor.protocol import (
        CloseResult as CloseResult,
    )
    from run_supervisor.protocol import (
        CoreStatistics as CoreStatistics,
    )
    from run_supervisor.protocol import (
        Event as Event,
    )
    from run_supervisor.protocol import (
        InterruptReason as InterruptReason,
    )
    from run_supervisor.protocol import (
        Outcome as Outcome,
    )
    from run_supervisor.protocol import (
        PartSnapshot as PartSnapshot,
    )
    from run_supervisor.protocol import (
        PartState as PartState,
    )
    from run_supervisor.protocol import (
        Phase as Phase,
    )
    from run_supervisor.protocol import (
        Question as Question,
    )
    from run_supervisor.protocol import (
        RejectCode as RejectCode,
    )
    from run_supervisor.protocol import (
        RequestOutcome as RequestOutcome,
    )
    from run_supervisor.protocol import (
        RequestResult as RequestResult,
    )
    from run_supervisor.protocol import (
        RunSnapshot as RunSnapshot,
    )
    from run_supervisor.protocol import (
        RunState as RunState,
    )
    from run_supervisor.protocol import (
        SessionSnapshot as SessionSnapshot,
    )
    from run_supervisor.protocol import (
        SessionStatus as SessionStatus,
    )
    from run_supervisor.protocol import (
        ShutdownReason as ShutdownReason,
    )
    from run_supervisor.protocol import (
        StepKind as StepKind,
    )
    from run_supervisor.protocol import (
        WithdrawReason as WithdrawReason,
    )
    from run_supervisor.protocol import (
        part_label as part_label,
    )
    from run_supervisor.protocol import (
        part_note as part_note,
    )


# Names are resolved on first use, so ``import run_supervisor.protocol`` stays pure: it must not
# start pykka (or anything else of the actor shell) through this package's __init__.
_HOME: dict[str, str] = {
    "Ask": "run_supervisor.actors",
    "AskAlreadyAnswered": "run_supervisor.actors",
    "AskWithdrawn": "run_supervisor.actors",
    "FormReply": "run_supervisor.actors",
    "UnknownAsk": "run_supervisor.actors",
    "AskKind": "run_supervisor.protocol",
    "AskPayload": "run_supervisor.protocol",
    "AskSnapshot": "run_supervisor.protocol",
    "AskState": "run_supervisor.protocol",
    "Question": "run_supervisor.protocol",
    "WithdrawReason": "run_supervisor.protocol",
    "part_note": "run_supervisor.protocol",
    "AlreadyInterrupting": "run_supervisor.actors",
    "AsyncAsk": "run_supervisor.actors",
    "AsyncRunBody": "run_supervisor.actors",
    "AsyncRunContext": "run_supervisor.actors",
    "AsyncRunHandle": "run_supervisor.actors",
    "AsyncSubscription": "run_supervisor.actors",
    "AsyncSupervisor": "run_supervisor.actors",
    "AsyncToolCall": "run_supervisor.actors",
    "ShutdownReasonName": "run_supervisor.actors",
    "LoadFailed": "run_supervisor.actors",
    "CloseModeName": "run_supervisor.actors",
    "CloseActionName": "run_supervisor.actors",
    "CancelToken": "run_supervisor.actors",
    "Gate": "run_supervisor.actors",
    "InstanceHooks": "run_supervisor.actors",
    "InvalidRequest": "run_supervisor.actors",
    "JournalError": "run_supervisor.actors",
    "JournalLocked": "run_supervisor.actors",
    "JournalUnreadable": "run_supervisor.actors",
    "NoInstanceHooks": "run_supervisor.actors",
    "NothingPending": "run_supervisor.actors",
    "PermissionReply": "run_supervisor.actors",
    "RunAlreadyExists": "run_supervisor.actors",
    "RunAlreadyFinished": "run_supervisor.actors",
    "RunBody": "run_supervisor.actors",
    "RunContext": "run_supervisor.actors",
    "RunHandle": "run_supervisor.actors",
    "RunInterrupted": "run_supervisor.actors",
    "Subscription": "run_supervisor.actors",
    "Supervisor": "run_supervisor.actors",
    "SupervisorClosed": "run_supervisor.actors",
    "SupervisorConfig": "run_supervisor.actors",
    "SupervisorError": "run_supervisor.actors",
    "SupervisorTimeout": "run_supervisor.actors",
    "ToolCall": "run_supervisor.actors",
    "UnknownDirectory": "run_supervisor.actors",
    "UnknownRun": "run_supervisor.actors",
    "ActionSnapshot": "run_supervisor.protocol",
    "CloseAction": "run_supervisor.protocol",
    "CloseMode": "run_supervisor.protocol",
    "CloseOutcome": "run_supervisor.protocol",
    "CloseResult": "run_supervisor.protocol",
    "CoreStatistics": "run_supervisor.protocol",
    "Event": "run_supervisor.protocol",
    "InterruptReason": "run_supervisor.protocol",
    "Outcome": "run_supervisor.protocol",
    "PartSnapshot": "run_supervisor.protocol",
    "PartState": "run_supervisor.protocol",
    "Phase": "run_supervisor.protocol",
    "RejectCode": "run_supervisor.protocol",
    "RequestOutcome": "run_supervisor.protocol",
    "RequestResult": "run_supervisor.protocol",
    "RunSnapshot": "run_supervisor.protocol",
    "RunState": "run_supervisor.protocol",
    "SessionSnapshot": "run_supervisor.protocol",
    "SessionStatus": "run_supervisor.protocol",
    "ShutdownReason": "run_supervisor.protocol",
    "StepKind": "run_supervisor.protocol",
    "part_label": "run_supervisor.protocol",
}

__all__ = [
    "ActionSnapshot",
    "AlreadyInterrupting",
    "Ask",
    "AskAlreadyAnswered",
    "AskKind",
    "AskPayload",
    "AskSnapshot",
    "AskState",
    "AskWithdrawn",
    "AsyncAsk",
    "AsyncRunBody",
    "AsyncRunContext",
    "AsyncRunHandle",
    "AsyncSubscription",
    "AsyncSupervisor",
    "AsyncToolCall",
    "CancelToken",
    "CloseAction",
    "CloseActionName",
    "CloseMode",
    "CloseModeName",
    "CloseOutcome",
    "CloseResult",
    "CoreStatistics",
    "Event",
    "FormReply",
    "Gate",
    "InstanceHooks",
    "InterruptReason",
    "InvalidRequest",
    "JournalError",
    "JournalLocked",
    "JournalUnreadable",
    "LoadFailed",
    "NoInstanceHooks",
    "NothingPending",
    "Outcome",
    "PartSnapshot",
    "PartState",
    "PermissionReply",
    "Phase",
    "Question",
    "RejectCode",
    "RequestOutcome",
    "RequestResult",
    "RunAlreadyExists",
    "RunAlreadyFinished",
    "RunBody",
    "RunContext",
    "RunHandle",
    "RunInterrupted",
    "RunSnapshot",
    "RunState",
    "SessionSnapshot",
    "SessionStatus",
    "ShutdownReason",
    "ShutdownReasonName",
    "StepKind",
    "Subscription",
    "Supervisor",
    "SupervisorClosed",
    "SupervisorConfig",
    "SupervisorError",
    "SupervisorTimeout",
    "ToolCall",
    "UnknownAsk",
    "UnknownDirectory",
    "UnknownRun",
    "WithdrawReason",
    "part_label",
    "part_note",
]


def __getattr__(name: str) -> Any:
    try:
        home = _HOME[name]
    except KeyError:
        raise AttributeError(f"module 'run_supervisor' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOME})
