"""The pure half of run-supervisor: messages, events, codecs and the decision core.

Nothing here starts a thread or reads a clock; everything is importable and testable on its own.
"""

from run_supervisor.protocol._codec import *  # noqa: F403
from run_supervisor.protocol._commands import *  # noqa: F403
from run_supervisor.protocol._core import CoreStatistics as CoreStatistics
from run_supervisor.protocol._core import Report as Report
from run_supervisor.protocol._core import SupervisorCore as SupervisorCore
from run_supervisor.protocol._core import resume_verdict as resume_verdict
from run_supervisor.protocol._enums import *  # noqa: F403
from run_supervisor.protocol._events import *  # noqa: F403
from run_supervisor.protocol._lifecycle import ActionSnapshot as ActionSnapshot
from run_supervisor.protocol._parts import PartSnapshot as PartSnapshot
from run_supervisor.protocol._parts import part_label as part_label
from run_supervisor.protocol._parts import part_note as part_note
from run_supervisor.protocol._payloads import AskPayload as AskPayload
from run_supervisor.protocol._payloads import AskSnapshot as AskSnapshot
from run_supervisor.protocol._payloads import FormAnswer as FormAnswer
from run_supervisor.protocol._payloads import Question as Question
from run_supervisor.protocol._requests import *  # noqa: F403
from run_supervisor.protocol._requests import SessionSnapshot as SessionSnapshot
from run_supervisor.protocol._rules import ACTION_TRANSITIONS as ACTION_TRANSITIONS
from run_supervisor.protocol._rules import ASK_TRANSITIONS as ASK_TRANSITIONS
from run_supervisor.protocol._rules import CLOSE_RULES as CLOSE_RULES
from run_supervisor.protocol._rules import CONFIRM_RULES as CONFIRM_RULES
from run_supervisor.protocol._rules import DEADLINE_EXPIRY as DEADLINE_EXPIRY
from run_supervisor.protocol._rules import DEADLINE_ORIGIN as DEADLINE_ORIGIN
from run_supervisor.protocol._rules import GRACE_EXPIRY as GRACE_EXPIRY
from run_supervisor.protocol._rules import INSTANCE_TRANSITIONS as INSTANCE_TRANSITIONS
from run_supervisor.protocol._rules import INTERRUPT_GRACE as INTERRUPT_GRACE
from run_supervisor.protocol._rules import PART_PHASE as PART_PHASE
from run_supervisor.protocol._rules import PART_TRANSITIONS as PART_TRANSITIONS
from run_supervisor.protocol._rules import QUEUE_RULES as QUEUE_RULES
from run_supervisor.protocol._rules import RELOAD_RULES as RELOAD_RULES
from run_supervisor.protocol._rules import RETRY_BUDGET_ORIGIN as RETRY_BUDGET_ORIGIN
from run_supervisor.protocol._rules import RUN_TRANSITIONS as RUN_TRANSITIONS
from run_supervisor.protocol._rules import SESSION_TRANSITIONS as SESSION_TRANSITIONS
from run_supervisor.protocol._rules import STALL_TRANSITIONS as STALL_TRANSITIONS
from run_supervisor.protocol._rules import ActionTrigger as ActionTrigger
from run_supervisor.protocol._rules import AskTrigger as AskTrigger
from run_supervisor.protocol._rules import ClosePolicy as ClosePolicy
from run_supervisor.protocol._rules import GraceClock as GraceClock
from run_supervisor.protocol._rules import IllegalTransitionError as IllegalTransitionError
from run_supervisor.protocol._rules import InstanceTrigger as InstanceTrigger
from run_supervisor.protocol._rules import QueuedFate as QueuedFate
from run_supervisor.protocol._rules import QueueRule as QueueRule
from run_supervisor.protocol._rules import ReloadLoad as ReloadLoad
from run_supervisor.protocol._rules import RunTrigger as RunTrigger
from run_supervisor.protocol._rules import SessionTrigger as SessionTrigger
from run_supervisor.protocol._rules import StallTrigger as StallTrigger
from run_supervisor.protocol._rules import WhenBusy as WhenBusy
from run_supervisor.protocol._schema import wire_schema as wire_schema

# The names are the imports above, written once: the modules imported whole export exactly what their own
# __all__ says; from the others, each public name is imported as itself (type checkers read these as the
# package's exports). Not an identifier: what an assertion rewriter (pytest's) adds to the module.
__all__ = [name for name in globals() if name.isidentifier() and not name.startswith("_")]
