"""The shell carries out every command the core can return, and handles every message it is sent: its
tables name each type."""

from __future__ import annotations

import typing

from run_supervisor.actors._supervisor import (
    _CARRY_OUT,
    _RECEIVE,
    CheckStall,
    Preload,
    Query,
    SessionSupervisor,
    Submit,
    WaitRun,
)
from run_supervisor.protocol import Report, _commands


def test_the_shell_has_a_carrier_for_every_command_type_of_the_core() -> None:
    command_types = set(typing.get_args(_commands.Command))
    assert command_types == set(_CARRY_OUT)
    assert all(callable(getattr(SessionSupervisor, name, None)) for name in _CARRY_OUT.values())
    assert _CARRY_OUT[_commands.ShutdownComplete] == "_shutdown_complete"


def test_the_supervisor_handles_every_report_of_the_core_and_every_message_of_its_facades() -> None:
    facade_messages = {Submit, Query, WaitRun, Preload, CheckStall}
    assert set(typing.get_args(Report)) | facade_messages == set(_RECEIVE)
    assert all(callable(getattr(SessionSupervisor, name, None)) for name in _RECEIVE.values())
