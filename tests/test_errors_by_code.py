"""Each rejection code raises one error class, and that class carries the code: the table in
actors/_errors.py is the one place that pairs them."""

from __future__ import annotations

import pytest

from run_supervisor import SupervisorClosed, SupervisorError
from run_supervisor.actors._errors import _BY_CODE, JournalFailed, raise_for_rejection
from run_supervisor.protocol import RejectCode, RequestOutcome, RequestResult


@pytest.mark.parametrize("code", sorted(_BY_CODE, key=lambda code: code.value))
def test_a_rejection_raises_the_error_of_its_code_and_the_error_carries_it(code: RejectCode) -> None:
    with pytest.raises(SupervisorError) as raised:
        raise_for_rejection(RequestOutcome(result=RequestResult.REJECTED, error="no", code=code))
    assert type(raised.value) is _BY_CODE[code] and raised.value.code is code


def test_each_error_stands_for_one_code_and_a_journal_failure_is_a_closed_supervisor() -> None:
    assert len(set(_BY_CODE.values())) == len(_BY_CODE)
    assert JournalFailed.code is SupervisorClosed.code is RejectCode.SUPERVISOR_CLOSED
    assert SupervisorError.code is None
