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

from typing import TYPE_CHECKING

from run_supervisor.actors import (
    _logging,  # noqa: F401 -- silences the library before anything logs
    _names,
)

# The public names, each imported once, from its home: type checkers read these imports. At run time they
# are read from this file's source and not run, and each name is imported on first use (actors/_names.py).
_HOMES = _names.homes(__file__)
_BEFORE = set(globals())

if TYPE_CHECKING or not _HOMES:  # pragma: no cover (at run time, only where the source cannot be read)
    from run_supervisor.actors._api import RunHandle as RunHandle
    from run_supervisor.actors._api import Supervisor as Supervisor
    from run_supervisor.actors._api import simulate_crash as simulate_crash
    from run_supervisor.actors._async_api import AsyncInstanceHooks as AsyncInstanceHooks
    from run_supervisor.actors._async_api import AsyncRunHandle as AsyncRunHandle
    from run_supervisor.actors._async_api import AsyncSubscription as AsyncSubscription
    from run_supervisor.actors._async_api import AsyncSupervisor as AsyncSupervisor
    from run_supervisor.actors._async_body import AsyncAsk as AsyncAsk
    from run_supervisor.actors._async_body import AsyncRunBody as AsyncRunBody
    from run_supervisor.actors._async_body import AsyncRunContext as AsyncRunContext
    from run_supervisor.actors._async_body import AsyncToolCall as AsyncToolCall
    from run_supervisor.actors._async_body import RunBody as RunBody
    from run_supervisor.actors._config import SupervisorConfig as SupervisorConfig
    from run_supervisor.actors._context import Ask as Ask
    from run_supervisor.actors._context import CancelToken as CancelToken
    from run_supervisor.actors._context import FormReply as FormReply
    from run_supervisor.actors._context import Gate as Gate
    from run_supervisor.actors._context import PermissionReply as PermissionReply
    from run_supervisor.actors._context import RunContext as RunContext
    from run_supervisor.actors._context import ToolCall as ToolCall
    from run_supervisor.actors._errors import ActionAlreadyCompleted as ActionAlreadyCompleted
    from run_supervisor.actors._errors import AlreadyInterrupting as AlreadyInterrupting
    from run_supervisor.actors._errors import AskAlreadyAnswered as AskAlreadyAnswered
    from run_supervisor.actors._errors import AskWithdrawn as AskWithdrawn
    from run_supervisor.actors._errors import InvalidConfig as InvalidConfig
    from run_supervisor.actors._errors import InvalidRequest as InvalidRequest
    from run_supervisor.actors._errors import JournalError as JournalError
    from run_supervisor.actors._errors import JournalFailed as JournalFailed
    from run_supervisor.actors._errors import JournalLocked as JournalLocked
    from run_supervisor.actors._errors import JournalUnreadable as JournalUnreadable
    from run_supervisor.actors._errors import LoadFailed as LoadFailed
    from run_supervisor.actors._errors import NotConfirmable as NotConfirmable
    from run_supervisor.actors._errors import NothingPending as NothingPending
    from run_supervisor.actors._errors import RunAlreadyExists as RunAlreadyExists
    from run_supervisor.actors._errors import RunAlreadyFinished as RunAlreadyFinished
    from run_supervisor.actors._errors import RunInterrupted as RunInterrupted
    from run_supervisor.actors._errors import SessionBusy as SessionBusy
    from run_supervisor.actors._errors import SupervisorClosed as SupervisorClosed
    from run_supervisor.actors._errors import SupervisorError as SupervisorError
    from run_supervisor.actors._errors import SupervisorTimeout as SupervisorTimeout
    from run_supervisor.actors._errors import UnknownAction as UnknownAction
    from run_supervisor.actors._errors import UnknownAsk as UnknownAsk
    from run_supervisor.actors._errors import UnknownDirectory as UnknownDirectory
    from run_supervisor.actors._errors import UnknownRun as UnknownRun
    from run_supervisor.actors._instance_actor import InstanceHooks as InstanceHooks
    from run_supervisor.actors._instance_actor import NoInstanceHooks as NoInstanceHooks
    from run_supervisor.actors._logging import log_to_stdlib as log_to_stdlib
    from run_supervisor.actors._resume import AsyncResumeCallback as AsyncResumeCallback
    from run_supervisor.actors._resume import Continuation as Continuation
    from run_supervisor.actors._resume import ResumeCallback as ResumeCallback
    from run_supervisor.actors._resume import ResumeOffer as ResumeOffer
    from run_supervisor.actors._shards import Coordinator as Coordinator
    from run_supervisor.actors._shards import GlobalClose as GlobalClose
    from run_supervisor.actors._shards import LeaseLost as LeaseLost
    from run_supervisor.actors._shards import OwnerDirectory as OwnerDirectory
    from run_supervisor.actors._shards import ShardOutcome as ShardOutcome
    from run_supervisor.actors._subscription import Subscription as Subscription
    from run_supervisor.actors._validate import CloseActionName as CloseActionName
    from run_supervisor.actors._validate import CloseModeName as CloseModeName
    from run_supervisor.actors._validate import QueuePolicyName as QueuePolicyName
    from run_supervisor.actors._validate import ReloadPolicyName as ReloadPolicyName
    from run_supervisor.actors._validate import ShutdownReasonName as ShutdownReasonName

if not TYPE_CHECKING:  # hidden from type checkers, which would otherwise take any unknown name for Any
    __all__, __getattr__, __dir__ = _names.lazy(__name__, _HOMES, globals(), _BEFORE)
