"""One batch for the ordinary gradings of a test run.

Most kernel tests only read the JSON report of a notebook graded with the default flags:
the solutions and scaffolds, the corpora, the card's cases, the evasions, tampering and
tolerance cases. Graded one `grade` process each, they pay the grader's start (Python,
torch, the suites) every time and never overlap a kernel's boot with another notebook's
tests. Instead a test module says what it needs:

    COHORT = Cohort("card")

    @COHORT.notebooks
    def _notebooks(folder: Path) -> dict[str, Path]:
        ...  # write the notebooks into `folder`, return them by name

    def test_something(cohort):
        report = cohort["card"]["import_fails"].report

and the session fixture `cohort` (tests/conftest.py) grades every notebook of every
module the run collected in one `grade PATH... --json -j N` batch, the first time a test
asks for it. Each entry is a `Graded`, as if that notebook had been graded alone: what is
tested is the grading, not the process around it. Tests that need a process of their own
(flags, signals, leftovers) keep `tests.helpers.grade`, or start it in the background
(`start_in_background`, see tests/conftest.py) when they only read what it produced.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

Builder = Callable[[Path], dict[str, Path]]

MEMBERS: dict[str, Cohort] = {}


class Cohort:
    """A test module's share of the batch, under `key`."""

    def __init__(self, key: str) -> None:
        if key in MEMBERS:
            raise ValueError(f"cohort key {key!r} is taken")
        self.key = key
        self.builders: list[Builder] = []
        MEMBERS[key] = self

    def notebooks(self, builder: Builder) -> Builder:
        """Register a function that writes notebooks into a folder and returns them."""
        self.builders.append(builder)
        return builder

    def build(self, folder: Path) -> dict[str, Path]:
        made: dict[str, Path] = {}
        for builder in self.builders:
            made.update(builder(folder))
        return made
