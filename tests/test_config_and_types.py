"""SupervisorConfig takes the names the docs use and refuses what it would have coerced (or a field it
does not have), naming the field, also in a changed copy; EventLog's waits are typed by the event asked
for; a host type-checks them."""

from __future__ import annotations

import ast
import inspect
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import msgspec
import pytest

from run_supervisor import InvalidConfig, InvalidRequest, QueuePolicy, ReloadPolicy, SupervisorConfig
from run_supervisor.actors import _config

ROOT = Path(__file__).resolve().parents[1]


def test_the_config_takes_the_policies_by_the_names_the_docs_use_and_holds_the_enums() -> None:
    config = SupervisorConfig(reload_policy="eager", queue_policy="coalesce")
    assert config.reload_policy is ReloadPolicy.EAGER and config.queue_policy is QueuePolicy.COALESCE
    assert SupervisorConfig(reload_policy=ReloadPolicy.LAZY).reload_policy is ReloadPolicy.LAZY


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("request_timeout_s", True),
        ("shutdown_at_exit", "yes"),
        ("request_timeout_s", "5"),
        ("stop_timeout_s", "0.1"),
        ("default_grace_ms", 1.5),
        ("default_grace_ms", "1000"),
        ("dispose_budget_ms", False),
        ("stall_after_ms", 2.0),
        ("reload_policy", "sometimes"),
        ("queue_policy", 3),
        ("not_a_setting", 1),
    ],
)
def test_a_config_value_of_the_wrong_type_is_refused_naming_its_field(field: str, value: Any) -> None:
    with pytest.raises(InvalidConfig) as refused:
        SupervisorConfig(**{field: value})
    assert refused.value.field == field and str(refused.value).startswith(f"{field}: ")
    assert isinstance(refused.value, InvalidRequest) and isinstance(refused.value, ValueError)
    with pytest.raises(InvalidConfig) as in_a_copy:
        SupervisorConfig().model_copy(update={field: value})
    assert in_a_copy.value.field == field


def test_the_refusal_says_which_constraint_the_value_broke() -> None:
    with pytest.raises(InvalidConfig, match=r"^request_timeout_s: Expected `float`, got `bool`$"):
        SupervisorConfig(request_timeout_s=True)
    with pytest.raises(InvalidConfig, match=r"^stop_timeout_s: Expected `float` <= 60.0$"):
        SupervisorConfig(stop_timeout_s=float("inf"))


def test_an_int_still_passes_for_a_float_field_and_is_held_as_a_float() -> None:
    assert type(SupervisorConfig(request_timeout_s=2).request_timeout_s) is float
    assert type(msgspec.structs.replace(SupervisorConfig(), stop_timeout_s=1).stop_timeout_s) is float


def test_a_config_is_frozen_and_keyword_only() -> None:
    config = SupervisorConfig()
    with pytest.raises(AttributeError):
        config.request_timeout_s = 1.0  # type: ignore[misc]
    with pytest.raises(TypeError):
        SupervisorConfig(1.0)  # type: ignore[misc]


def test_the_configs_typed_signature_names_every_field_with_its_default_kind() -> None:
    """The ``__init__`` a type checker reads (under ``TYPE_CHECKING``) lists every field."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(_config.SupervisorConfig)))
    stub = next(
        node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef) and node.name == "__init__"
    )
    assert [arg.arg for arg in stub.args.kwonlyargs] == list(SupervisorConfig.__struct_fields__)
    assert list(SupervisorConfig.model_fields) == list(SupervisorConfig.__struct_fields__)


HOST = """
from __future__ import annotations

import asyncio
from typing import assert_type

from run_supervisor import Supervisor, SupervisorConfig
from run_supervisor.actors.testing import EventLog
from run_supervisor.protocol import AskRequested, Event, RunFinished, RunPartUpdated

config = SupervisorConfig(reload_policy="lazy", queue_policy="coalesce", request_timeout_s=2)


def typed(sup: Supervisor) -> None:
    log = EventLog(sup)
    finished = log.wait_for("run.finished", run_id="r1", timeout=None)
    assert_type(finished, RunFinished)
    print(finished.outcome, finished.abandoned)
    assert_type(log.wait_for("run.part.updated"), RunPartUpdated)
    assert_type(log.wait_for("some.host.type"), Event)


async def typed_async(sup: Supervisor) -> None:
    log = EventLog(sup)
    asked = await log.wait_for_async("ask.requested", timeout=None)
    assert_type(asked, AskRequested)
    print(asked.ask_id)
"""


@pytest.mark.timeout(300)
def test_a_host_type_checks_policies_by_name_and_event_waits_narrowed_to_the_event(tmp_path: Path) -> None:
    host = tmp_path / "typed_host_h.py"
    host.write_text(HOST)
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "typecheck.py"), "--strict", str(host)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )
    # The package's own errors (a file mid-edit) are the package's tests' business: the host's
    # lines are this test's.
    assert done.returncode in (0, 1), done.stdout + done.stderr
    assert [line for line in done.stdout.splitlines() if host.name in line] == [], done.stdout
