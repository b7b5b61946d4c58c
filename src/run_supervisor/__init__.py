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

from typing import TYPE_CHECKING

from run_supervisor.actors import _names

# The public names: every name of run_supervisor.actors, and the protocol's names a host meets at the
# facade (its answers, snapshots, events and vocabularies). Type checkers read these imports. At run
# time they are read from this file's source and not run, and each name is imported on first use
# (actors/_names.py), so that ``import run_supervisor.protocol`` stays pure: it must not start pykka,
# or anything else of the actor shell, through this package's __init__.
_HOMES = _names.homes(__file__)
_BEFORE = set(globals())

if TYPE_CHECKING or not _HOMES:  # pragma: no cover (at run time, only where the source cannot be read)
    from run_supervisor.actors import *  # noqa: F403 -- every name of the actors package
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
    from run_supervisor.protocol import ResumeResult as ResumeResult
    from run_supervisor.protocol import ResumeVerdict as ResumeVerdict
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
    __all__, __getattr__, __dir__ = _names.lazy(__name__, _HOMES, globals(), _BEFORE)
