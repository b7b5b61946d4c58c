"""SupervisorConfig takes the names the docs use and refuses what it would have coerced (or a field it
does not have), naming the field, also in a changed copy; EventLog's waits are typed by the event asked
for; a host type-checks them."""

from __future__ import annotations

import subprocess
import sys
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
        ("request_timeout_s", float("nan")),
        ("stop_timeout_s", float("inf")),
        ("request_timeout_s", -float("inf")),
        ("not_a_setting", 1),
    ],
)
def test_a_config_value_of_the_wrong_type_is_refused_naming_its_field(field: str, value: Any) -> None:
    with pytest.raises(InvalidConfig) as refused:
        SupervisorConfig(**{field: value})
    assert refused.value.field == field and str(refused.value).startswith(f"{field}: ")
    assert isinstance(refused.value, InvalidRequest) and isinstance(refused.value, ValueError)
    for copy in (
        lambda: SupervisorConfig().replace(**{field: value}),
        lambda: SupervisorConfig().model_copy(update={field: value}),  # the deprecated alias
    ):
        with pytest.raises(InvalidConfig) as in_a_copy:
            copy()
        assert in_a_copy.value.field == field and str(in_a_copy.value) == str(refused.value)


def test_the_refusal_says_which_constraint_the_value_broke() -> None:
    with pytest.raises(InvalidConfig, match=r"^request_timeout_s: Expected `float`, got `bool`$"):
        SupervisorConfig(request_timeout_s=True)
    with pytest.raises(InvalidConfig, match=r"^stop_timeout_s: Expected `float` <= 60.0$"):
        SupervisorConfig(stop_timeout_s=61.0)
    with pytest.raises(InvalidConfig, match=r"^request_timeout_s: Expected a finite number, got `nan`$"):
        SupervisorConfig(request_timeout_s=float("nan"))
    with pytest.raises(InvalidConfig, match=r"^stop_timeout_s: Expected a finite number, got `inf`$"):
        SupervisorConfig(stop_timeout_s=float("inf"))


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"request_timeout_s": True, "stop_timeout_s": float("nan")}, "request_timeout_s"),
        ({"request_timeout_s": float("inf"), "retain_finished_runs": "5"}, "request_timeout_s"),
        ({"dispose_budget_ms": -1, "reload_policy": "\ud800"}, "dispose_budget_ms"),
        ({"default_grace_ms": "\ud800", "stop_timeout_s": True}, "default_grace_ms"),
        ({"stop_timeout_s": float("nan"), "reload_policy": "\ud800"}, "stop_timeout_s"),
    ],
    ids=["type before nan", "inf before type", "bound before utf-8", "utf-8 before type", "nan before utf-8"],
)
def test_of_two_bad_fields_the_first_in_field_order_is_named(fields: dict[str, Any], named: str) -> None:
    with pytest.raises(InvalidConfig) as refused:
        SupervisorConfig(**fields)
    assert refused.value.field == named
    with pytest.raises(InvalidConfig) as in_a_copy:
        SupervisorConfig().replace(**fields)
    assert in_a_copy.value.field == named


class _Float64(float):
    """A float subclass, as ``numpy.float64`` is."""


@pytest.mark.parametrize("given", [2, _Float64(2.0)], ids=["int", "float subclass"])
def test_an_int_or_a_float_subclass_passes_for_a_float_field_and_is_held_as_a_float(given: float) -> None:
    config = SupervisorConfig(request_timeout_s=given)
    assert type(config.request_timeout_s) is float and config.request_timeout_s == 2.0
    copy = config.replace(stop_timeout_s=given / 2)
    assert type(copy.stop_timeout_s) is float and copy.stop_timeout_s == 1.0
    assert copy.request_timeout_s == 2.0
    structs_copy = msgspec.structs.replace(config, stop_timeout_s=given / 2)
    assert type(structs_copy.stop_timeout_s) is float and structs_copy == copy


@pytest.mark.parametrize("field", ["default_grace_ms", "request_timeout_s", "reload_policy"])
def test_text_that_is_not_valid_utf8_is_refused_naming_its_field(field: str) -> None:
    with pytest.raises(InvalidConfig) as refused:
        SupervisorConfig(**{field: "\ud800"})
    assert refused.value.field == field and "not valid UTF-8" in str(refused.value)
    with pytest.raises(InvalidConfig, match=f"^{field}: "):
        SupervisorConfig().replace(**{field: "\udfff"})


def test_a_float_subclass_is_still_refused_for_a_count() -> None:
    with pytest.raises(InvalidConfig, match=r"^default_grace_ms: Expected `int`, got `_Float64`$"):
        SupervisorConfig(default_grace_ms=_Float64(2.0))  # type: ignore[arg-type]


def test_a_config_is_frozen_and_keyword_only() -> None:
    config = SupervisorConfig()
    with pytest.raises(AttributeError):
        config.request_timeout_s = 1.0  # type: ignore[misc]
    with pytest.raises(TypeError):
        SupervisorConfig(1.0)  # type: ignore[misc]


def test_the_configs_typed_keywords_name_every_field() -> None:
    """The keyword arguments a type checker reads for the constructor and ``replace`` list every field."""
    assert list(_config._Fields.__annotations__) == list(SupervisorConfig.__struct_fields__)
    assert list(SupervisorConfig.model_fields) == list(SupervisorConfig.__struct_fields__)


HOST = """
from __future__ import annotations

import asyncio
from typing import assert_type

from run_supervisor import Supervisor, SupervisorConfig
from run_supervisor.actors.testing import EventLog
from run_supervisor.protocol import AskRequested, Event, RunFinished, RunPartUpdated

config = SupervisorConfig(reload_policy="lazy", queue_policy="coalesce", request_timeout_s=2)
assert_type(config.replace(queue_policy="queue", stop_timeout_s=1), SupervisorConfig)
config.replace(not_a_setting=1)  # type: ignore[call-arg]
config.replace(request_timeout_s="5")  # type: ignore[arg-type]


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
