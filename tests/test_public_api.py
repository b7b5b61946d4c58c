"""The public surface is stated once: a name appearing or disappearing must be intended."""

from __future__ import annotations

import subprocess
import sys

from run_supervisor import actors, protocol

ACTORS = [
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

PROTOCOL = [
    "ACTION_TRANSITIONS",
    "ASK_TRANSITIONS",
    "AbandonRun",
    "ActionResult",
    "ActionSnapshot",
    "ActionState",
    "ActionTrigger",
    "AnswerForm",
    "ArmDeadline",
    "AskDismissed",
    "AskKind",
    "AskPayload",
    "AskRaised",
    "AskReplied",
    "AskRequested",
    "AskSnapshot",
    "AskState",
    "AskTrigger",
    "AskWithdrawn",
    "BodyEnded",
    "CLOSE_RULES",
    "CONFIRM_RULES",
    "CancelRun",
    "CancelSession",
    "CloseAction",
    "CloseMode",
    "CloseOutcome",
    "ClosePolicy",
    "CloseRequest",
    "CloseResult",
    "Command",
    "ConfirmClose",
    "CoreStatistics",
    "DEADLINE_EXPIRY",
    "DEADLINE_ORIGIN",
    "DeadlineExpired",
    "DeleteSession",
    "DeliverAnswer",
    "DisarmDeadline",
    "DismissForm",
    "DisposeDone",
    "DisposeInstance",
    "Emit",
    "Event",
    "GRACE_EXPIRY",
    "GraceClock",
    "GraceExpired",
    "Heartbeat",
    "INSTANCE_TRANSITIONS",
    "INTERRUPT_GRACE",
    "IllegalTransitionError",
    "InstanceClosed",
    "InstanceStarted",
    "InstanceState",
    "InstanceTrigger",
    "InterruptGraceExpired",
    "InterruptReason",
    "LifecycleCompleted",
    "LifecycleConfirmed",
    "LifecycleDeferred",
    "LifecycleRequested",
    "LoadCause",
    "LoadInstance",
    "NoProgress",
    "Outcome",
    "PART_PHASE",
    "PART_TRANSITIONS",
    "PartReport",
    "PartSnapshot",
    "PartState",
    "Phase",
    "ProtocolDecodeError",
    "QUEUE_RULES",
    "Question",
    "QueuePolicy",
    "QueueRule",
    "QueuedFate",
    "RELOAD_RULES",
    "RETRY_BUDGET_ORIGIN",
    "RUN_TRANSITIONS",
    "RecoveredRun",
    "RejectCode",
    "ReleaseRun",
    "ReloadLoad",
    "ReloadPolicy",
    "Reply",
    "ReplyPermission",
    "Report",
    "Request",
    "RequestOutcome",
    "RequestResult",
    "RetryBudget",
    "RetryReport",
    "RunFinished",
    "RunPartUpdated",
    "RunQueued",
    "RunRecovered",
    "RunSnapshot",
    "RunStalled",
    "RunStarted",
    "RunState",
    "RunTrigger",
    "RunUnstalled",
    "SESSION_TRANSITIONS",
    "STALL_TRANSITIONS",
    "SessionSnapshot",
    "SessionStatus",
    "SessionStatusChanged",
    "SessionTrigger",
    "SetQueuePolicy",
    "Shutdown",
    "ShutdownComplete",
    "ShutdownReason",
    "SignalInterrupt",
    "SpawnRun",
    "StallTrigger",
    "StartGraceTimer",
    "StartInterruptGrace",
    "StartRun",
    "StepFinished",
    "StepKind",
    "StepReport",
    "StepStarted",
    "StopInterruptGrace",
    "SupervisorCore",
    "WhenBusy",
    "WithdrawAsk",
    "WithdrawReason",
    "decode_event",
    "decode_request",
    "encode",
    "part_label",
    "part_note",
    "wire_schema",
]


def test_the_actors_package_exports_exactly_its_public_names() -> None:
    assert sorted(actors.__all__) == ACTORS
    assert all(hasattr(actors, name) for name in ACTORS)


def test_the_protocol_package_exports_exactly_its_public_names() -> None:
    assert sorted(protocol.__all__) == PROTOCOL
    assert all(hasattr(protocol, name) for name in PROTOCOL)


def test_the_protocol_imports_without_pykka_or_threads() -> None:
    code = (
        "import sys, threading; import run_supervisor.protocol; "
        "assert 'pykka' not in sys.modules, 'protocol pulled in pykka'; "
        "assert threading.active_count() == 1"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_the_library_logs_nothing_unless_the_host_enables_it() -> None:
    code = (
        "import loguru, run_supervisor; "
        "from run_supervisor import Supervisor, SupervisorConfig; "
        "s = Supervisor.start(SupervisorConfig(shutdown_at_exit=False), directories=['/a']); "
        "s.start_run(lambda ctx: 1 / 0, session='s', directory='/a').wait(2); "
        "s.shutdown(grace_ms=100)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stderr == "" and done.stdout == ""


def test_an_unshut_supervisor_does_not_hang_interpreter_exit() -> None:
    code = (
        "from run_supervisor import Supervisor, Gate; "
        "s = Supervisor.start(directories=['/a']); "
        "s.start_run(lambda ctx: ctx.wait(Gate('never')), session='s', directory='/a')"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=30)
