"""The candidate's own code: the lines of a notebook's code cells that its exercise's
scaffold did not give (signatures, docstrings, the self-check are everyone's), which the
cohort's copy check compares (`grader.report.similarity`). What the scaffold gave, and the
reference solution's own code, are in each exercise's `reference.json`, written by `grade
build` (`grader.tools.build.reference_text`)."""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from grader.core.results import CodeLine


@dataclass(frozen=True)
class Reference:
    """An exercise's `reference.json` (written by `grade build`): the lines of its
    scaffold's code cells, and its solution's own code."""

    scaffold: tuple[str, ...]
    solution: tuple[CodeLine, ...]


@functools.lru_cache(maxsize=64)
def read_reference(folder: Path) -> Reference | None:
    """The `reference.json` in an exercise's folder; None where there is none (or it
    cannot be read: the copy check then leaves the exercise out, and says so)."""
    try:
        data = json.loads((folder / "reference.json").read_text(encoding="utf-8"))
        return Reference(
            tuple(str(line) for line in data["scaffold"]),
            tuple(CodeLine(int(c), int(n), str(t)) for c, n, t in data["solution"]),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def own_code(cells: Iterable[tuple[int, str]], scaffold: Iterable[str]) -> list[CodeLine]:
    """The lines of `cells` ((index from 0, source)) that are the candidate's own: not
    blank, not a comment alone, and not (stripped) a line of the scaffold's code cells."""
    given = {line.strip() for line in scaffold}
    lines = []
    for index, source in cells:
        for number, text in enumerate(source.splitlines(), start=1):
            stripped = text.strip()
            if stripped and not stripped.startswith("#") and stripped not in given:
                lines.append(CodeLine(index + 1, number, text.rstrip()))
    return lines
