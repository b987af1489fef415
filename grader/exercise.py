"""Exercises: a hidden suite of checks in levels, plus what identifies the exercise.

An exercise is a folder under ``exercises/`` (installed as ``grader.exercises``) with a ``suite.py`` that defines
``exercise = Exercise(...)`` and registers checks with ``@exercise.check(level=...)``.
The catalog is found by scanning that folder, so adding an exercise never touches grader
code. Checks run in the grader's process; they reach candidate code only through the
`Kernel` they are given.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from grader.errors import ExerciseError
from grader.notebook import Notebook, defined_names

CheckFunction = Callable[[Any], None]

# Attention built-ins the shim watches for, by torch function name and by aten op name.
ATTENTION_FUNCTIONS = ("scaled_dot_product_attention", "multi_head_attention_forward")
ATTENTION_OPS = ("scaled_dot_product", "_native_multi_head_attention")


@dataclass(frozen=True)
class Check:
    """One hidden test: a function of the kernel handle, worth `points`."""

    id: str
    level: int
    points: float
    hidden: bool
    run: CheckFunction
    doc: str = ""


@dataclass
class Exercise:
    """A gradable exercise: its identity, its levels, and its checks in order."""

    id: str
    title: str
    seed: str
    levels: list[str]
    defines: tuple[str, ...]
    forbidden: tuple[str, ...] = ()
    watch_functions: tuple[str, ...] = ATTENTION_FUNCTIONS
    watch_ops: tuple[str, ...] = ATTENTION_OPS
    checks: list[Check] = field(default_factory=list)

    def check(
        self, level: str, points: float = 1, hidden: bool = True
    ) -> Callable[[CheckFunction], CheckFunction]:
        """Register a check on `level` (by name); its id is the function's name."""
        if level not in self.levels:
            raise ValueError(f"{self.id}: unknown level {level!r}")

        def register(function: CheckFunction) -> CheckFunction:
            doc = (function.__doc__ or "").strip().splitlines()
            self.checks.append(
                Check(
                    function.__name__, self.levels.index(level) + 1, points, hidden,
                    function, doc[0] if doc else "",
                )
            )  # fmt: skip
            self.checks.sort(key=lambda c: c.level)
            return function

        return register

    @property
    def max_score(self) -> float:
        """Points available."""
        return sum(c.points for c in self.checks)


def load_catalog(package: str = "grader.exercises") -> dict[str, Exercise]:
    """Every exercise under the package, by id."""
    root = importlib.import_module(package)
    catalog: dict[str, Exercise] = {}
    for info in sorted(pkgutil.iter_modules(root.__path__), key=lambda i: i.name):
        if not info.ispkg or info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{package}.{info.name}.suite")
        exercise = getattr(module, "exercise", None)
        if isinstance(exercise, Exercise):
            catalog[exercise.id] = exercise
    return catalog


def find_exercise(
    notebook: Notebook, catalog: dict[str, Exercise], name: str | None = None
) -> Exercise:
    """The exercise to grade against: `name`, else the notebook's metadata, else its names.

    Raises:
        ExerciseError: unknown name, or no exercise (or several) matches the notebook.
    """
    known = ", ".join(sorted(catalog)) or "none"
    wanted = name or notebook.exercise_id
    if wanted:
        if wanted not in catalog:
            source = "--exercise" if name else f"{notebook.path}: metadata"
            raise ExerciseError(f"{source} names unknown exercise {wanted!r} (known: {known})")
        return catalog[wanted]
    names = defined_names([source for _, source in notebook.code_cells])
    fits = [e for e in catalog.values() if e.defines and set(e.defines) <= names]
    if len(fits) == 1:
        return fits[0]
    if not fits:
        raise ExerciseError(
            f"{notebook.path}: names no exercise in its metadata and defines none's names; "
            f"pass --exercise (known: {known})"
        )
    ids = ", ".join(e.id for e in fits)
    raise ExerciseError(f"{notebook.path}: could be any of {ids}; pass --exercise NAME")
