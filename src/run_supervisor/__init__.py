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
default; turn it on with ``loguru.logger.enable("run_supervisor")``, or route it to the standard
``logging`` module with ``log_to_stdlib()``.
"""

from __future__ import annotations

import ast as _ast
import sys as _sys
from pathlib import Path as _Path
from typing import TYPE_CHECKING, Any


def _homes(source: str) -> dict[str, str]:
    """The names the ``if TYPE_CHECKING or not _HOMES`` block of ``source`` imports, each with its module."""
    return {
        alias.asname or alias.name: statement.module
        for block in _ast.parse(source).body
        if isinstance(block, _ast.If) and _ast.unparse(block.test) == "TYPE_CHECKING or not _HOMES"
        for statement in block.body
        if isinstance(statement, _ast.ImportFrom) and statement.module
        for alias in statement.names
    }


# The public names, each imported once, from its home. Type checkers read these imports. At run time they
# are read from this file's source and not run: each name is imported on first use, so that
# ``import run_supervisor.protocol`` stays pure (it must not start pykka, or anything else of the actor
# shell, through this package's __init__). Without a readable source (a frozen app, say), they are run.
try:
    _HOMES = _homes(_Path(__file__).read_text(encoding="utf-8"))
except OSError:
    _HOMES = {}

if TYPE_CHECKING or not _HOMES:  # pragma: no cover (at run time, only where the source cannot be read)
    from run_supervisor.actors import ActionAlreadyCompleted as ActionAlreadyCompleted
    from run_supervisor.actors import AlreadyInterrupting as AlreadyInterrupting
    from run_supervisor.actors import Ask as Ask
    from run_supervisor.actors import AskAlreadyAnswered as AskAlreadyAnswered
    from run_supervisor.actors import AskWithdrawn as AskWithdrawn
    from run_supervisor.actors import AsyncAsk as AsyncAsk
    from run_supervisor.actors import AsyncInstanceHooks as AsyncInstanceHooks
    from run_supervisor.actors import AsyncRunBody as AsyncRunBody
    from run_supervisor.actors import AsyncRunContext as AsyncRunContext
    from run_supervisor.actors import AsyncRunHandle as AsyncRunHandle
    from run_supervisor.actors import AsyncSubscription as AsyncSubscription
    from run_supervisor.actors import AsyncSupervisor as AsyncSupervisor
    from run_supervisor.actors import AsyncToolCall as AsyncToolCall
    from run_supervisor.actors import CancelToken as CancelToken
    from run_supervisor.actors import CloseActionName as CloseActionName
    from run_supervisor.actors import CloseModeName as CloseModeName
    from run_supervisor.actors import Coordinator as Coordinator
    from run_supervisor.actors import FormReply as FormReply
    from run_supervisor.actors import Gate as Gate
    from run_supervisor.actors import GlobalClose as GlobalClose
    from run_supervisor.actors import InstanceHooks as InstanceHooks
    from run_supervisor.actors import InvalidRequest as InvalidRequest
    from run_supervisor.actors import JournalError as JournalError
    from run_supervisor.actors import JournalFailed as JournalFailed
    from run_supervisor.actors import JournalLocked as JournalLocked
    from run_supervisor.actors import JournalUnreadable as JournalUnreadable
    from run_supervisor.actors import LeaseLost as LeaseLost
    from run_supervisor.actors import LoadFailed as LoadFailed
    from run_supervisor.actors import NoInstanceHooks as NoInstanceHooks
    from run_supervisor.actors import NotConfirmable as NotConfirmable
    from run_supervisor.actors import NothingPending as NothingPending
    from run_supervisor.actors import OwnerDirectory as OwnerDirectory
    from run_supervisor.actors import PermissionReply as PermissionReply
    from run_supervisor.actors import QueuePolicyName as QueuePolicyName
    from run_supervisor.actors import ReloadPolicyName as ReloadPolicyName
    from run_supervisor.actors import RunAlreadyExists as RunAlreadyExists
    from run_supervisor.actors import RunAlreadyFinished as RunAlreadyFinished
    from run_supervisor.actors import RunBody as RunBody
    from run_supervisor.actors import RunContext as RunContext
    from run_supervisor.actors import RunHandle as RunHandle
    from run_supervisor.actors import RunInterrupted as RunInterrupted
    from run_supervisor.actors import SessionBusy as SessionBusy
    from run_supervisor.actors import ShardOutcome as ShardOutcome
    from run_supervisor.actors import ShutdownReasonName as ShutdownReasonName
    from run_supervisor.actors import Subscription as Subscription
    from run_supervisor.actors import Supervisor as Supervisor
    from run_supervisor.actors import SupervisorClosed as SupervisorClosed
    from run_supervisor.actors import SupervisorConfig as SupervisorConfig
    from run_supervisor.actors import SupervisorError as SupervisorError
    from run_supervisor.actors import SupervisorTimeout as SupervisorTimeout
    from run_supervisor.actors import ToolCall as ToolCall
    from run_supervisor.actors import UnknownAction as UnknownAction
    from run_supervisor.actors import UnknownAsk as UnknownAsk
    from run_supervisor.actors import UnknownDirectory as UnknownDirectory
    from run_supervisor.actors import UnknownRun as UnknownRun
    from run_supervisor.actors import log_to_stdlib as log_to_stdlib
    from run_supervisor.actors import simulate_crash as simulate_crash
    from run_supervisor.protocol import ActionSnapshot as ActionSnapshot
    from run_supervisor.protocol import AskKind as AskKind
    from run_supervisor.protocol import AskPayload as AskPayload
    from run_supervisor.protocol import AskSnapshot as AskSnapshot
    from run_supervisor.protocol import AskState as AskState
    from run_supervisor.protocol import CloseAction as CloseAction
    from run_supervisor.protocol import CloseMode as CloseMode
    from run_supervisor.protocol import CloseOutcome as CloseOutcome
    from run_supervisor.protocol import CloseResult as CloseResult
    from run_supervisor.protocol import CoreStatistics as CoreStatistics
    from run_supervisor.protocol import Event as Event
    from run_supervisor.protocol import InterruptReason as InterruptReason
    from run_supervisor.protocol import LoadCause as LoadCause
    from run_supervisor.protocol import Outcome as Outcome
    from run_supervisor.protocol import PartSnapshot as PartSnapshot
    from run_supervisor.protocol import PartState as PartState
    from run_supervisor.protocol import Phase as Phase
    from run_supervisor.protocol import Question as Question
    from run_supervisor.protocol import QueuePolicy as QueuePolicy
    from run_supervisor.protocol import RejectCode as RejectCode
    from run_supervisor.protocol import ReloadPolicy as ReloadPolicy
    from run_supervisor.protocol import RequestOutcome as RequestOutcome
    from run_supervisor.protocol import RequestResult as RequestResult
    from run_supervisor.protocol import RunSnapshot as RunSnapshot
    from run_supervisor.protocol import RunState as RunState
    from run_supervisor.protocol import SessionSnapshot as SessionSnapshot
    from run_supervisor.protocol import SessionStatus as SessionStatus
    from run_supervisor.protocol import ShutdownReason as ShutdownReason
    from run_supervisor.protocol import StepKind as StepKind
    from run_supervisor.protocol import WithdrawReason as WithdrawReason
    from run_supervisor.protocol import part_label as part_label
    from run_supervisor.protocol import part_note as part_note

if not TYPE_CHECKING:  # hidden from type checkers, which would otherwise take any unknown name for Any
    if not _HOMES:  # the imports above ran: each name's home is the package whose __all__ lists it
        _HOMES = {
            name: home
            for home in ("run_supervisor.actors", "run_supervisor.protocol")
            for name in _sys.modules[home].__all__
            if name in globals()
        }
    __all__ = list(_HOMES)

    def __getattr__(name: str) -> Any:
        try:
            home = _HOMES[name]
        except KeyError:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
        __import__(home)
        value = getattr(_sys.modules[home], name)
        globals()[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*globals(), *_HOMES})
