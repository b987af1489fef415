"""Grader failures: things that stop a notebook from being graded at all.

Candidate failures (wrong answers, exceptions, timeouts, dead kernels) are never raised
out of the grader; they become outcomes in the report. Everything here is the grader's
own trouble, and each class carries the process exit code the CLI maps it to::

    GraderError (2)
    ├── NotebookError       the file is missing, unreadable, or not a notebook
    ├── ExerciseError       unknown exercise, or none / several match the notebook
    ├── KernelStartError    the kernel (or its sandbox) could not be started
    └── UsageError          a flag's value makes no sense
"""

from __future__ import annotations


class GraderError(Exception):
    """Base class: grading could not happen. `str(error)` is one line for the user."""

    exit_code = 2


class NotebookError(GraderError):
    """The notebook file cannot be read as an nbformat 4 notebook."""

    def __init__(self, path: object, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


class ExerciseError(GraderError):
    """No exercise, or more than one, fits the notebook."""


class KernelStartError(GraderError):
    """The candidate's kernel could not be started."""


class UsageError(GraderError):
    """A command-line value is out of range or inconsistent."""
