"""Every decision is in ``protocol/_rules.py``: the core, the lifecycle code and the oracle keep no
table of their own, a declined ask does what ``DECLINE_RULES`` says, and every list of close modes
(the validator's, the scenario format's, the model check's) is the rules' one."""

from __future__ import annotations

import ast
import importlib.util
import sys
from enum import StrEnum
from pathlib import Path
from types import ModuleType
from typing import get_args

import pytest

from run_supervisor.actors import _validate
from run_supervisor.actors.scenarios import _format
from run_supervisor.protocol import (
    AskKind,
    AskPayload,
    AskRaised,
    CloseMode,
    DismissForm,
    ReplyPermission,
    RunState,
    _enums,
    _rules,
)
from run_supervisor.protocol._commands import DeliverAnswer
from run_supervisor.protocol._events import AskWithdrawn
from run_supervisor.protocol._rules import (
    CLOSE_ANSWERS,
    CLOSE_REQUEST_ACTIONS,
    CLOSE_REQUEST_MODES,
    CLOSE_RULES,
    DECLINE_RULES,
    QUEUE_RULES,
    RELOAD_RULES,
    SHUTDOWN_RULES,
    DeclineEffect,
)
from run_supervisor.protocol.testing import CoreShell

ROOT = Path(__file__).resolve().parents[1]
DECIDING_MODULES = ("_core.py", "_lifecycle.py", "_asks.py", "_stalls.py", "_deadlines.py", "testing.py")
"""The modules that decide when (the core's parts) and the oracle that checks them."""
ENUMS = {
    name
    for name, value in vars(_rules).items()
    if isinstance(value, type) and issubclass(value, StrEnum) and value.__module__ == _enums.__name__
}
"""The vocabularies the rules are written in (each enum ``protocol/_rules.py`` takes from ``_enums``):
a literal that names their members is a decision table."""


def _names_an_enum_member(node: ast.AST) -> bool:
    return any(
        isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name) and sub.value.id in ENUMS
        for sub in ast.walk(node)
    )


def _tables(path: Path) -> list[str]:
    """The module-level names bound to a dict, set or tuple literal of enum members (a table)."""
    found = []
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign | ast.AnnAssign):
            value = node.value
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if value is None:
                continue
            if isinstance(value, ast.Call) and value.args:  # frozenset({...}), MappingProxyType({...})
                value = value.args[0]
            if isinstance(value, ast.Dict | ast.Set | ast.Tuple) and _names_an_enum_member(value):
                found += [ast.unparse(target) for target in targets]
    return found


@pytest.mark.parametrize("module", DECIDING_MODULES)
def test_the_core_and_the_oracle_keep_no_decision_table_of_their_own(module: str) -> None:
    assert _tables(ROOT / "protocol" / module) == []


def test_every_close_mode_has_a_rule_and_an_answer_list() -> None:
    assert set(CLOSE_RULES) == set(CLOSE_ANSWERS) == set(CloseMode)
    for by_mode in RELOAD_RULES.values():
        assert set(by_mode) == set(CLOSE_REQUEST_MODES)


def _model_check() -> ModuleType:
    spec = importlib.util.spec_from_file_location("h9_model_check", ROOT / "scripts" / "model_check.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    return module


def test_every_list_of_close_modes_is_the_rules_one() -> None:
    modes = tuple(mode.value for mode in CLOSE_REQUEST_MODES)
    assert CloseMode.MAINTENANCE in CLOSE_REQUEST_MODES and CloseMode.SHUTDOWN not in CLOSE_REQUEST_MODES
    # The validator, the scenario format and the model check read the list; the type spells it.
    assert modes == _validate._CLOSE_MODES
    assert set(get_args(_validate.CloseModeName)) == set(modes)
    assert _format._CLOSE_MODES == CLOSE_REQUEST_MODES
    assert _model_check().MODES == CLOSE_REQUEST_MODES


def test_the_close_actions_shutdown_reasons_and_queue_policies_a_facade_accepts_are_the_rules_ones() -> None:
    assert tuple(do.value for do in CLOSE_REQUEST_ACTIONS) == _validate._CLOSE_ACTIONS
    assert set(get_args(_validate.CloseActionName)) == set(_validate._CLOSE_ACTIONS)
    assert tuple(reason.value for reason in SHUTDOWN_RULES) == _validate._SHUTDOWN_REASONS
    assert set(get_args(_validate.ShutdownReasonName)) == set(_validate._SHUTDOWN_REASONS)
    assert tuple(policy.value for policy in QUEUE_RULES) == _validate._QUEUE_POLICIES
    assert set(get_args(_validate.QueuePolicyName)) == set(_validate._QUEUE_POLICIES)


def _decline(kind: AskKind, ask_id: str, message: str | None) -> ReplyPermission | DismissForm:
    if kind is AskKind.PERMISSION:
        return ReplyPermission(ask_id=ask_id, approve=False, message=message)
    return DismissForm(ask_id=ask_id, message=message)


DECLINES = [(kind, flag) for kind, by_message in DECLINE_RULES.items() for flag in by_message]


@pytest.mark.parametrize(("kind", "with_message"), DECLINES)
def test_a_declined_ask_does_to_its_run_and_its_other_open_asks_what_its_decline_rule_says(
    kind: AskKind, with_message: bool
) -> None:
    shell = CoreShell("/w/a")
    shell.start("r1")
    first = shell.ask("r1", form=kind is AskKind.FORM)
    shell.report(AskRaised(run_id="r1", ask_id="r1:other", kind=kind, payload=AskPayload()))
    shell.request(_decline(kind, first, "not that one" if with_message else None))
    rule = DECLINE_RULES[kind][with_message]
    run = shell.core.run_snapshot("r1")
    assert run is not None
    open_asks = [ask.ask_id for ask in shell.core.pending_asks()]
    answers = [c for c in shell.last if isinstance(c, DeliverAnswer) and c.ask_id == first]
    if rule.effect is DeclineEffect.INTERRUPT_RUN:
        assert run.state is RunState.INTERRUPTING
        assert (run.reason, run.origin) == (rule.interrupts_with, rule.origin)
        assert [e.ask_id for e in shell.of(AskWithdrawn)] == ["r1:other"]
        assert open_asks == []
        assert answers == []
    else:
        assert run.state is RunState.ACTIVE
        assert shell.of(AskWithdrawn) == []
        assert open_asks == ["r1:other"]
        assert [a.message for a in answers] == ["not that one"]
