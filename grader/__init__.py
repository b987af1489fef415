"""Grade ML coding-interview notebooks with hidden, progressive test suites.

The library's surface (the rest is reached through its packages, each of which says in its
docstring what it owns):

    from grader import grade_notebook, grade_all, GradeReport, Limits

    report = grade_notebook("candidate.ipynb")              # one notebook, a fresh kernel
    outcomes = grade_all(["a.ipynb", "b.ipynb"], jobs=2)    # many, N at a time

Packages, lowest layer first (each imports only from those above it in this list):

    core     errors, limits, statuses and outcomes, results as data, the notebook as read
    kernel   the candidate's kernel: launch, sandbox, the call channel, recovery
    suite    what an exercise is written against: Exercise, Check, the check library, scan
    verdict  from check results to a verdict: voiding, root cause, known-bug hints
    run      the pipeline that owns a grading, the runner, the batch, the profile
    report   the card and every output format
    tools    maintainer tools off the grading path: build, hints, new, gradescope
    cli      `grade` and its subcommands
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

# torch warns on import when NumPy is absent; the grader never needs NumPy.
warnings.filterwarnings("ignore", message="Failed to initialize NumPy")

__version__ = "0.1.0"

if TYPE_CHECKING:
    from grader.core.errors import (
        ExerciseError,
        ExitCode,
        GraderBug,
        GraderError,
        KernelStartError,
        NotebookError,
        UsageError,
    )
    from grader.core.limits import Limits
    from grader.core.outcomes import Status
    from grader.core.results import CheckResult, GradeReport, Outcome
    from grader.run.batch import grade_all
    from grader.run.pipeline import GradingContext, grade, grade_notebook

_EXPORTS = {
    "grade": "grader.run.pipeline",
    "grade_notebook": "grader.run.pipeline",
    "GradingContext": "grader.run.pipeline",
    "grade_all": "grader.run.batch",
    "GradeReport": "grader.core.results",
    "CheckResult": "grader.core.results",
    "Outcome": "grader.core.results",
    "Limits": "grader.core.limits",
    "Status": "grader.core.outcomes",
    "ExitCode": "grader.core.errors",
    "GraderError": "grader.core.errors",
    "GraderBug": "grader.core.errors",
    "UsageError": "grader.core.errors",
    "NotebookError": "grader.core.errors",
    "ExerciseError": "grader.core.errors",
    "KernelStartError": "grader.core.errors",
}
__all__ = [
    "CheckResult",
    "ExerciseError",
    "ExitCode",
    "GradeReport",
    "GradingContext",
    "GraderBug",
    "GraderError",
    "KernelStartError",
    "Limits",
    "NotebookError",
    "Outcome",
    "Status",
    "UsageError",
    "grade",
    "grade_all",
    "grade_notebook",
]


def __getattr__(name: str) -> Any:
    """The exports, imported when first used: `import grader` (and `grade --help`) stays
    free of torch and Jupyter."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'grader' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
