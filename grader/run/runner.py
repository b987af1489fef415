"""Running a hidden suite against a live kernel, turning every outcome into a CheckResult.

Whose fault is an exception? The candidate's outcomes (`grader.core.outcomes.CandidateOutcome`:
a wrong answer, code that raised or is not implemented, a timeout, a dead kernel, no
answer) carry their own status. Any other exception was raised by the suite's own code,
and is the candidate's `error` only when the candidate's answers explain it:

- it is a TypeError, AttributeError, IndexError or ValueError (what using a value of
  the wrong kind or length raises), and
- during this test the candidate's code answered with a value whose kind it chose:
  anything but a tensor or a number (a `Remote` object or a `Foreign` value where a
  tensor was expected, None, a string, a tuple, list or dict of any length). The instance
  `kernel.new` asks a class for does not count (anything else the class gives does).

A check's own `assert` fails the check, as in pytest: an AssertionError raised in the
suite's code (the check's file, or a file in a folder exercises are loaded from) is a
`failed` test, with the assert's message, or without one the assert statement itself
(`assertion failed: assert y.shape == (3,)`); so does one raised by torch.testing's
assertions (`torch.testing.assert_close`) called from the suite's code, with their message.
An AssertionError from candidate code comes back from the kernel as the candidate's `error`
like any other exception; one raised elsewhere in the grader or a library is a bug.

Everything else is a `GraderBug`: NameError, KeyError, ZeroDivisionError, a RuntimeError
from torch, or any exception in a test whose answers were all tensors and numbers (a
`GraderError`, such as a replacement kernel that would not start, stays itself). A check
that needs the candidate's value to be a tensor of some shape says so with `checks.tensor`
(a `Failed`), so a crash on a well-formed answer is the suite's bug: grading stops (exit 3)
rather than charge it to the candidate.
"""

from __future__ import annotations

import ast
import linecache
import os
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from grader.core.errors import GraderBug, GraderError
from grader.core.limits import Limits
from grader.core.outcomes import TROUBLE, CandidateOutcome, Status
from grader.core.records import Finding
from grader.core.results import CheckResult, Problem
from grader.kernel.channel import Request
from grader.suite.exercise import Check, Exercise, exercises_folders
from grader.suite.handle import Calls, Kernel

_SEP = os.sep

# What using a value of the wrong kind or length raises.
SHAPE_ERRORS = (TypeError, AttributeError, IndexError, ValueError)


class Relay:
    """A session that stands in for another: what it ran, saw and found are the other's;
    a subclass changes how calls go through."""

    def __init__(self, session: Calls) -> None:
        self.session = session

    @property
    def sources(self) -> list[tuple[int, str]]:
        return self.session.sources

    @property
    def seen(self) -> set[str]:
        return self.session.seen

    @property
    def findings(self) -> list[Finding]:
        return self.session.findings

    def call(self, request: Request, timeout: float | None = None) -> dict[str, Any]:
        return self.session.call(request, timeout)


class AnswerLog(Relay):
    """Stands in for the kernel's session and notes, test by test, whether the candidate's
    code answered with a value whose kind it chose (see the module docstring)."""

    def __init__(self, session: Calls) -> None:
        super().__init__(session)
        self.loose = False

    def call(self, request: Request, timeout: float | None = None) -> dict[str, Any]:
        """Forward the request; note the kind of the answer."""
        answer = self.session.call(request, timeout)
        pairs = [(request, answer)]
        if request.get("op") == "batch" and isinstance(answer.get("answers"), list):
            pairs = list(zip(request.get("requests", []), answer["answers"], strict=False))
        for asked, given in pairs:
            if isinstance(given, dict) and "raised" not in given and not self.loose:
                self.loose = _chosen_by_candidate(asked, given.get("value"))
        return answer


def _chosen_by_candidate(request: Request, value: Any) -> bool:
    """False for a tensor, a number, or the object a class was called to build; True for
    anything else `value` (on the wire) may be."""
    target = request.get("target") or {}
    called = target.get("__global__") if request.get("method") is None else None
    if called and isinstance(value, dict) and "__ref__" in value:
        return str(value.get("type", "")).rsplit(".", 1)[-1] != called
    if called and request.get("seed") is not None:  # kernel.new (it seeds torch): not an object
        return True
    return not (isinstance(value, torch.Tensor) or type(value) in (int, float, bool))


def run_checks(
    exercise: Exercise, kernel: Kernel, limits: Limits, deadline: float
) -> list[CheckResult]:
    """Run every check in level order; candidate trouble is recorded, never raised.

    After `limits.max_timeouts` tests in a row time out or kill the kernel, or once
    `deadline` (monotonic) has passed, the remaining checks are skipped, saying why.

    Raises:
        GraderBug: a check raised an exception the candidate's answers do not explain.
    """
    answers = AnswerLog(kernel.session)
    kernel.session = answers
    results = []
    trouble_in_a_row = 0
    for check in shown_first(exercise.checks, limits.reveal):
        reason = ""
        if trouble_in_a_row >= limits.max_timeouts:
            reason = f"not run: the last {trouble_in_a_row} tests timed out or killed the kernel"
        elif time.monotonic() > deadline:
            reason = f"not run: grading passed its {limits.total_timeout:g} s limit"
        if reason:
            results.append(_result(exercise, check, Verdict(Status.SKIPPED, reason)))
            continue
        answers.loose = False
        info = capture(check, kernel)
        verdict = classify(info, check, exercise.id)
        trouble_in_a_row = trouble_in_a_row + 1 if verdict.status in TROUBLE else 0
        results.append(_result(exercise, check, verdict, info.duration))
    order = {check.id: n for n, check in enumerate(exercise.checks)}
    return sorted(results, key=lambda r: order[r.id])


def shown_first(checks: list[Check], reveal: int | None) -> list[Check]:
    """The checks in the order they run: first every one the candidate's report may show
    (the public ones, and with `--reveal N` those of levels 1..N), in level order, then the
    hidden rest. A candidate's code that remembers what each call sent then has seen no
    hidden input by the time it answers a test whose message the candidate reads."""
    shown = [c for c in checks if not c.hidden or reveal is not None and c.level <= reveal]
    return shown + [c for c in checks if c not in shown]


@dataclass(frozen=True)
class CallInfo:
    """What running one check did, before anyone judged it (pytest's `CallInfo`): the
    exception it raised (None: it returned), how long it took, and whether the
    candidate's code answered with a value whose kind it chose (see the module docstring)."""

    error: BaseException | None
    duration: float
    loose: bool


@dataclass(frozen=True)
class Verdict:
    """A check's outcome as classified (pytest's `makereport`)."""

    status: Status
    message: str = ""
    problem: Problem = Problem.NONE


def capture(check: Check, kernel: Kernel) -> CallInfo:
    """Run one check and keep what happened; only a stop (KeyboardInterrupt, a stopping
    signal) goes through."""
    started = time.monotonic()
    error: Exception | None = None
    try:
        check.run(kernel)
    except Exception as e:
        error = e
    loose = bool(getattr(kernel.session, "loose", True))
    return CallInfo(error, time.monotonic() - started, loose)


def classify(info: CallInfo, check: Check, exercise: str = "") -> Verdict:
    """Whose fault is what the check did (the rule in this module's docstring).

    Raises:
        GraderBug: the suite's fault.
        GraderError: as raised (e.g. a replacement kernel that would not start).
    """
    e = info.error
    if e is None:
        return Verdict(Status.PASSED)
    if isinstance(e, CandidateOutcome):
        problem = Problem.INTERFACE if e.interface else Problem.NONE
        return Verdict(e.status, _one_line(e.message()), problem)
    if isinstance(e, GraderError):
        raise e
    if isinstance(e, AssertionError):  # the check's own `assert` fails it, as in pytest
        message = _suite_assertion(e, check)
        if message is None:
            raise GraderBug(exercise or "?", check.id, e) from e
        return Verdict(Status.FAILED, _one_line(message))
    if isinstance(e, SHAPE_ERRORS) and info.loose:
        # a value of a kind the suite did not ask for: the interface's return type
        message = _one_line(f"unexpected answer: {type(e).__name__}: {e}")
        return Verdict(Status.ERROR, message, Problem.INTERFACE)
    raise GraderBug(exercise or "?", check.id, e) from e


def _suite_assertion(error: AssertionError, check: Check) -> str | None:
    """What a failed `assert` in the suite's own code says: its message, else the assert
    statement ("assertion failed: assert y.shape == (3,)"); None when `error` was raised
    elsewhere (the grader's own code, a library): a bug."""
    frames = traceback.extract_tb(error.__traceback__)
    text = " ".join(str(error).split())
    if frames and _in_suite(frames[-1].filename, check):
        return text or f"assertion failed: {_statement(frames[-1])}"
    # torch.testing's assertions (assert_close), called by the suite: pytest's idiom too
    testing = [i for i, f in enumerate(frames) if f"torch{_SEP}testing{_SEP}" in f.filename]
    if testing and testing[0] > 0 and _in_suite(frames[testing[0] - 1].filename, check):
        return text or "torch.testing assertion failed"
    return None


def _in_suite(filename: str, check: Check) -> bool:
    """Whether `filename` is the suite's code: the check function's own file, or a file in
    a folder exercises are loaded from."""
    code = getattr(check.run, "__code__", None)
    if code is not None and filename == code.co_filename:
        return True
    path = Path(filename).resolve()
    return any(folder.resolve() in path.parents for folder in exercises_folders())


def _statement(frame: traceback.FrameSummary) -> str:
    """The source of the assert statement that raised at `frame` (all its lines), else the
    frame's line."""
    for start, end, text in _asserts(frame.filename):
        if frame.lineno is not None and start <= frame.lineno <= end:
            return " ".join(text.split())
    return (frame.line or "").strip() or f"{Path(frame.filename).name}, line {frame.lineno}"


def _asserts(filename: str) -> tuple[tuple[int, int, str], ...]:
    """(first line, last line, source) of every assert statement in the file."""
    source = "".join(linecache.getlines(filename))
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return ()
    return tuple(
        (node.lineno, node.end_lineno or node.lineno, ast.get_source_segment(source, node) or "")
        for node in ast.walk(tree)
        if isinstance(node, ast.Assert)
    )


def _result(
    exercise: Exercise, check: Check, verdict: Verdict, duration: float = 0.0
) -> CheckResult:
    return CheckResult(
        id=check.id,
        level=check.level,
        level_name=exercise.levels[check.level - 1],
        status=verdict.status,
        score=check.points if verdict.status == Status.PASSED else 0,
        max_score=check.points,
        message=verdict.message,
        hidden=check.hidden,
        description=check.doc,
        problem=verdict.problem,
        duration_s=round(duration, 4),
    )


def _one_line(text: str, limit: int = 400) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
