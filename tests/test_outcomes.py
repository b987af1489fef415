"""The outcome model: one status vocabulary, the candidate's signals each carrying its
status, and exit codes by name."""

from __future__ import annotations

import json
import signal

import pytest

from grader.core.errors import ExitCode, GraderBug, GraderError, UsageError
from grader.core.limits import NO_LIMIT, Limits
from grader.core.outcomes import (
    CallTimeout,
    CandidateOutcome,
    CandidateRaised,
    Failed,
    KernelCrashed,
    NoAnswer,
    Status,
)


def test_a_status_is_its_string_everywhere():
    assert Status.NOT_IMPLEMENTED == "not_implemented"
    assert f"{Status.PASSED}" == str(Status.PASSED) == "passed"
    assert json.dumps({"status": Status.TIMEOUT}) == '{"status": "timeout"}'


@pytest.mark.parametrize(
    ("signal_", "status", "text"),
    [
        (Failed("weights: max 0.3, want < 1e-6"), Status.FAILED, "weights: max 0.3"),
        (CallTimeout("ran past the 3 s limit"), Status.TIMEOUT, "3 s limit"),
        (CallTimeout(), Status.TIMEOUT, "ran past its time limit"),
        (KernelCrashed(), Status.CRASHED, "kernel died"),
        (NoAnswer("malformed answer"), Status.ERROR, "no answer (malformed answer)"),
        (CandidateRaised("m.forward", {"type": "ValueError"}), Status.ERROR, "raised ValueError"),
        (
            CandidateRaised("m.forward", {"not_implemented": True, "where": "M._split"}),
            Status.NOT_IMPLEMENTED,
            "not implemented: M._split",
        ),
        (CandidateRaised("m", {"memory": True}), Status.FAILED, "memory limit exceeded in m"),
    ],
)
def test_each_candidate_signal_carries_its_status_and_one_line(signal_, status, text):
    assert isinstance(signal_, CandidateOutcome)
    assert signal_.status == status
    assert text in signal_.message() and "\n" not in signal_.message()


def test_failed_is_still_an_assertion_error_for_suites_that_catch_it():
    assert issubclass(Failed, AssertionError)


def test_exit_codes_by_name():
    assert [int(c) for c in ExitCode] == [0, 1, 2, 3, 130]
    assert ExitCode.stopped_by(signal.SIGTERM) == 143
    assert UsageError("x").exit_code == GraderError.exit_code == ExitCode.CANNOT_GRADE
    assert GraderBug("e", "c", ValueError()).exit_code == ExitCode.INTERNAL_ERROR


def test_no_output_limit_is_a_budget_never_reached():
    assert Limits(cell_output_bytes=None, total_output_bytes=None).output_budget == (
        NO_LIMIT,
        NO_LIMIT,
    )
    assert Limits().output_budget == (64 * 1024, 1024 * 1024)
