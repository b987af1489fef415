"""Running a hidden suite against a live kernel, turning every outcome into a CheckResult."""

from __future__ import annotations

import time

from grader.checks import Failed
from grader.exercise import Check, Exercise
from grader.kernel import CallTimeout, KernelCrashed, Limits, NoAnswer
from grader.remote import CandidateRaised, Kernel
from grader.results import CheckResult, Status


def run_checks(
    exercise: Exercise, kernel: Kernel, limits: Limits, deadline: float
) -> list[CheckResult]:
    """Run every check in level order; candidate trouble is recorded, never raised.

    After `limits.max_timeouts` tests in a row time out or kill the kernel, or once
    `deadline` (monotonic) has passed, the remaining checks are skipped, saying why.
    """
    results = []
    trouble_in_a_row = 0
    for check in exercise.checks:
        reason = ""
        if trouble_in_a_row >= limits.max_timeouts:
            reason = f"not run: the last {trouble_in_a_row} tests timed out or killed the kernel"
        elif time.monotonic() > deadline:
            reason = f"not run: grading passed its {limits.total_timeout:g} s limit"
        if reason:
            results.append(_result(exercise, check, "skipped", reason))
            continue
        status, message = run_check(check, kernel, limits)
        trouble_in_a_row = trouble_in_a_row + 1 if status in ("timeout", "crashed") else 0
        results.append(_result(exercise, check, status, message))
    return results


def run_check(check: Check, kernel: Kernel, limits: Limits) -> tuple[Status, str]:
    """Run one check and classify what happened."""
    try:
        check.run(kernel)
    except Failed as failure:
        return "failed", _one_line(str(failure))
    except CandidateRaised as raised:
        if raised.not_implemented:
            return "not_implemented", raised.summary()
        return ("failed" if raised.memory else "error"), raised.summary()
    except CallTimeout:
        return (
            "timeout",
            f"a call into the candidate's code ran past the {limits.call_timeout:g} s limit",
        )
    except KernelCrashed:
        return "crashed", "the kernel died during this test (a fresh one was started for the rest)"
    except NoAnswer as e:
        return "error", f"the kernel gave no answer ({e}): the notebook interferes with the grader"
    except Exception as e:  # a check tripping over an unexpected answer is still a verdict
        return "error", _one_line(f"unexpected answer: {type(e).__name__}: {e}")
    return "passed", ""


def _result(exercise: Exercise, check: Check, status: Status, message: str) -> CheckResult:
    return CheckResult(
        id=check.id,
        level=check.level,
        level_name=exercise.levels[check.level - 1],
        status=status,
        score=check.points if status == "passed" else 0,
        max_score=check.points,
        message=message,
        hidden=check.hidden,
    )


def _one_line(text: str, limit: int = 400) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
