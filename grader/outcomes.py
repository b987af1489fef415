"""What can happen to a hidden test or a notebook cell, and the signals that say so.

One vocabulary, `Status`, for tests and cells alike. A candidate's trouble reaches the
runner as one of the exceptions below, each carrying its status; none of them is ever
raised out of the grader (they become results). The grader's own trouble is in
`grader.errors`::

    CandidateOutcome           the candidate's code earned this verdict
    ├── Failed                 a wrong answer (a check's verdict)             failed
    ├── CandidateRaised        their code raised (or a stub is not implemented)
    │                                              error / not_implemented / failed (memory)
    ├── CallTimeout            a call ran past its limit (the kernel was interrupted) timeout
    ├── KernelCrashed          the kernel died during a call                  crashed
    └── NoAnswer               the kernel gave no usable answer               error
"""

from __future__ import annotations

from enum import Enum
from typing import Any


class Status(str, Enum):
    """How a test or a cell ended. A cell that ran without trouble has `PASSED`."""

    PASSED = "passed"
    FAILED = "failed"
    ERROR = "error"
    TIMEOUT = "timeout"
    NOT_IMPLEMENTED = "not_implemented"
    SKIPPED = "skipped"
    CRASHED = "crashed"

    def __str__(self) -> str:
        return self.value


# What cuts a grading short: after `Limits.max_timeouts` of these in a row, tests are skipped.
TROUBLE = frozenset({Status.TIMEOUT, Status.CRASHED})


class CandidateOutcome(Exception):
    """Base class: the candidate's code earned `status`; `message()` says why, in one line."""

    status: Status = Status.ERROR

    def message(self) -> str:
        """One line for the report."""
        return " ".join(str(self).split())


class Failed(CandidateOutcome, AssertionError):
    """A hidden test's verdict: the candidate's answer is wrong (message is one line)."""

    status = Status.FAILED


class CallTimeout(CandidateOutcome):
    """A call into candidate code ran past its limit (the kernel was interrupted)."""

    status = Status.TIMEOUT

    def message(self) -> str:
        return super().message() or "a call into the candidate's code ran past its time limit"


class KernelCrashed(CandidateOutcome):
    """The kernel died during a call; a fresh one has been started in its place."""

    status = Status.CRASHED

    def message(self) -> str:
        return "the kernel died during this test (a fresh one was started for the rest)"


class NoAnswer(CandidateOutcome):
    """The kernel finished a call without a usable answer (candidate code broke the shim)."""

    status = Status.ERROR

    def message(self) -> str:
        return f"the kernel gave no answer ({self}): the notebook interferes with the grader"


class CandidateRaised(CandidateOutcome):
    """Candidate code raised while the suite called it. `info` is the shim's account."""

    def __init__(self, label: str, info: dict[str, Any]) -> None:
        self.label = label
        self.type = str(info.get("type", "Exception"))
        self.text = str(info.get("message", ""))
        self.where = info.get("where") or label
        self.line = info.get("line") or ""
        self.not_implemented = bool(info.get("not_implemented"))
        self.memory = bool(info.get("memory"))
        self.undefined = info.get("undefined")
        self.unsendable = bool(info.get("unsendable"))
        if self.not_implemented:
            self.status = Status.NOT_IMPLEMENTED
        elif self.memory:
            self.status = Status.FAILED
        super().__init__(self.summary())

    def message(self) -> str:
        return self.summary()

    def summary(self) -> str:
        """One line for the report."""
        if self.undefined:
            return f"the notebook does not define {self.undefined} (did a cell fail?)"
        if self.unsendable:
            text = f"{self.label} returned a value the grader cannot receive ({self.type}"
            return " ".join(f"{text}: {self.text})".split()) if self.text else text + ")"
        if self.not_implemented:
            return f"not implemented: {self.where}"
        if self.memory:
            return f"memory limit exceeded in {self.where}"
        text = f"{self.where} raised {self.type}"
        if self.text:
            text += f": {self.text}"
        if self.line:
            text += f"  [at: {self.line}]"
        return " ".join(text.split())
