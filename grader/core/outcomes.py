"""What can happen to a hidden test or a notebook cell, and the signals that say so.

One vocabulary, `Status`, for tests and cells alike. A candidate's trouble reaches the
runner as one of the exceptions below, each carrying its status; none of them is ever
raised out of the grader (they become results). The grader's own trouble is in
`grader.core.errors`::

    CandidateOutcome           the candidate's code earned this verdict
    ├── Failed                 a wrong answer (a check's verdict)             failed
    ├── CandidateRaised        their code raised (or a stub is not implemented)
    │                                              error / not_implemented / failed (memory)
    ├── CallTimeout            a call ran past its limit (the kernel was interrupted) timeout
    ├── KernelCrashed          the kernel died during a call                  crashed
    └── NoAnswer               the kernel gave no usable answer               error
"""

from __future__ import annotations

import re
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
    """Base class: the candidate's code earned `status`; `message()` says why, in one line.
    `interface` is true when the code does not fit the exercise's interface (a name or
    layer missing, a signature or a return type that is not the one asked for): the report
    labels that apart from a wrong answer."""

    status: Status = Status.ERROR
    interface: bool = False

    def message(self) -> str:
        """One line for the report."""
        return " ".join(str(self).split())


class Failed(CandidateOutcome, AssertionError):
    """A hidden test's verdict: the candidate's answer is wrong (message is one line)."""

    status = Status.FAILED


class Interface(Failed):
    """A hidden test's verdict: the answer is not of the kind the interface asks for (not a
    tensor, not a pair, a layer missing from the module)."""

    interface = True


# A name the suite asked the kernel for and the notebook does not define.
UNDEFINED = "the notebook does not define {} (did a cell fail?)"
UNDEFINED_NAME = re.compile(r"^the notebook does not define ([\w.]+) \(did a cell fail\?\)$")
# What Python's TypeError says when a call does not fit the function's signature.
_SIGNATURE = re.compile(
    r"positional arguments? but \d+ (?:was|were) given|unexpected keyword argument"
    r"|missing \d+ required (?:positional|keyword-only) argument|takes no arguments"
    r"|takes \d+ positional argument"
)
_CALLED = re.compile(r"^([\w.]+)\(\) ")  # the function a TypeError names


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
        # a name missing, or a call of the suite's that does not fit the signature of what
        # it called (not a call deeper in the candidate's code)
        called = _CALLED.match(self.text) if self.type == "TypeError" else None
        self.interface = bool(self.undefined) or bool(
            called
            and _SIGNATURE.search(self.text)
            and called[1] in (label.split(" ")[0], f"{label}.__init__")
        )
        super().__init__(self.summary())

    def message(self) -> str:
        return self.summary()

    def summary(self) -> str:
        """One line for the report."""
        if self.undefined:
            return UNDEFINED.format(self.undefined)
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
