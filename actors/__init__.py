"""run-supervisor: keeps AI coding-agent runs alive across instance disposes, reloads and config
changes. Run lifetime belongs to the supervisor, never to a cache.

The in-process API::

    from run_supervisor.actors import Supervisor
    with Supervisor.start(directories=["/proj/a"]) as supervisor:
        run = supervisor.start_run(body, session="s1", directory="/proj/a")
        supervisor.close("dispose_all", mode="maintenance", origin="settings.provider.connect")
        run.wait(timeout=5)

Logging is off by default; turn it on with ``loguru.logger.enable("run_supervisor")``, or route it
to the standard ``logging`` module with ``log_to_stdlib()``.
"""

from run_supervisor.actors import _logging  # noqa: F401 -- silences the library before anything logs
from run_supervisor.actors._api import RunHandle, Supervisor, SupervisorConfig, simulate_crash
from run_supervisor.actors._async_api import (
    AsyncInstanceHooks,
    AsyncRunHandle,
    AsyncSubscription,
    AsyncSupervisor,
)
from run_supervisor.actors._async_body import (
    AsyncAsk,
    AsyncRunBody,
    AsyncRunContext,
    AsyncToolCall,
    RunBody,
)
from run_supervisor.actors._context import (
    Ask,
    CancelToken,
    FormReply,
    Gate,
    PermissionReply,
    RunContext,
    ToolCall,
)
from run_supervisor.actors._errors import (
    ActionAlreadyCompleted,
    AlreadyInterrupting,
    AskAlreadyAnswered,
    AskWithdrawn,
    InvalidRequest,
    JournalError,
    JournalFailed,
    JournalLocked,
    JournalUnreadable,
    LoadFailed,
    NotConfirmable,
    NothingPending,
    RunAlreadyExists,
    RunAlreadyFinished,
    RunInterrupted,
    SessionBusy,
    SupervisorClosed,
    SupervisorError,
    SupervisorTimeout,
    UnknownAction,
    UnknownAsk,
    UnknownDirectory,
    UnknownRun,
)
from run_supervisor.actors._instance_actor import InstanceHooks, NoInstanceHooks
from run_supervisor.actors._logging import log_to_stdlib
from run_supervisor.actors._shards import Coordinator, GlobalClose, LeaseLost, OwnerDirectory, ShardOutcome
from run_supervisor.actors._subscription import Subscription
from run_supervisor.actors._validate import (
    CloseActionName,
    CloseModeName,
    QueuePolicyName,
    ReloadPolicyName,
    ShutdownReasonName,
)

__all__ = [
    "ActionAlreadyCompleted",
    "AlreadyInterrupting",
    "Ask",
    "AskAlreadyAnswered",
    "AskWithdrawn",
    "AsyncAsk",
    "AsyncInstanceHooks",
    "AsyncRunBody",
    "AsyncRunContext",
    "AsyncRunHandle",
    "AsyncSubscription",
    "AsyncSupervisor",
    "AsyncToolCall",
    "CancelToken",
    "CloseActionName",
    "CloseModeName",
    "Coordinator",
    "FormReply",
    "Gate",
    "GlobalClose",
    "InstanceHooks",
    "InvalidRequest",
    "JournalError",
    "JournalFailed",
    "JournalLocked",
    "JournalUnreadable",
    "LeaseLost",
    "LoadFailed",
    "NoInstanceHooks",
    "NotConfirmable",
    "NothingPending",
    "OwnerDirectory",
    "PermissionReply",
    "QueuePolicyName",
    "ReloadPolicyName",
    "RunAlreadyExists",
    "RunAlreadyFinished",
    "RunBody",
    "RunContext",
    "RunHandle",
    "RunInterrupted",
    "SessionBusy",
    "ShardOutcome",
    "ShutdownReasonName",
    "Subscription",
    "Supervisor",
    "SupervisorClosed",
    "SupervisorConfig",
    "SupervisorError",
    "SupervisorTimeout",
    "ToolCall",
    "UnknownAction",
    "UnknownAsk",
    "UnknownDirectory",
    "UnknownRun",
    "log_to_stdlib",
    "simulate_crash",
]
