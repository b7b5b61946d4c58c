"""The shell carries out every command the core can return: its table of carriers names each type."""

from __future__ import annotations

import typing

from run_supervisor.actors._supervisor import _CARRY_OUT, SessionSupervisor
from run_supervisor.protocol import _commands


def test_the_shell_has_a_carrier_for_every_command_type_of_the_core() -> None:
    command_types = set(typing.get_args(_commands.Command))
    assert command_types == set(_CARRY_OUT)
    assert all(callable(getattr(SessionSupervisor, name, None)) for name in _CARRY_OUT.values())
    assert _CARRY_OUT[_commands.ShutdownComplete] == "_shutdown_complete"
