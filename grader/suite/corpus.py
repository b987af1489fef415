"""An exercise's mutation corpus: single-bug copies of its reference solution, each with the
level where a person would expect it to lose points first, and correct variants, which must
keep full marks. It proves the hidden suite catches the classic bugs (and only bugs).

An exercise keeps its corpus next to its suite, in ``corpus.py``: ``MUTANTS`` (a list of
`Mutant`), ``VARIANTS`` (a list of `Variant`, optional) and ``MIN_MUTANTS`` (the least the
corpus may shrink to, optional). The tests grade every entry; no test file names an
exercise.
"""

from __future__ import annotations

import dataclasses
import importlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import nbformat

    from grader.suite.exercise import Exercise


@dataclass(frozen=True)
class Mutant:
    """A single-bug copy of a reference: replace `old` (found exactly once) by `new`.
    `level` is where a person would expect it to first lose points; `hint` names the bug
    as the report card says it when a notebook fails the way this mutant does (a short
    question: "scores scaled by 1/sqrt(d_out), not 1/sqrt(head_dim)?"). `values` marks a
    bug in the values every test compares (a wrong scale, the softmax over the wrong axis):
    it may lose points at every level. Any other bug is about one feature (a mask, a dtype,
    an edge case, the gradients) and should lose points at its own level and few others
    (`grade hints` measures it)."""

    name: str
    old: str
    new: str
    level: str
    hint: str = ""
    values: bool = False


@dataclass(frozen=True)
class Variant:
    """A correct alternative to the reference (replace `old`, found once, by `new`): it
    must keep full marks. Or, with `notebook` (a path relative to the exercise's folder),
    a whole candidate notebook written apart from the reference, such as the scaffold
    filled in by someone who never read the solution."""

    name: str
    old: str = ""
    new: str = ""
    notebook: str = ""


@dataclass(frozen=True)
class Corpus:
    """An exercise's mutants and correct variants."""

    mutants: list[Mutant] = field(default_factory=list)
    variants: list[Variant] = field(default_factory=list)
    min_mutants: int = 0


def load_corpus(exercise: Exercise) -> Corpus:
    """The corpus in the exercise's folder (empty when it has no corpus.py)."""
    if exercise.folder is None:
        return Corpus()
    module = f"grader.exercises.{exercise.folder.name}.corpus"
    try:
        loaded = importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name and module.startswith(e.name):  # no corpus.py (or no such package)
            return Corpus()
        raise
    variants = [
        dataclasses.replace(v, notebook=str(exercise.folder / v.notebook)) if v.notebook else v
        for v in getattr(loaded, "VARIANTS", [])
    ]
    return Corpus(
        list(getattr(loaded, "MUTANTS", [])),
        variants,
        int(getattr(loaded, "MIN_MUTANTS", 0)),
    )


def apply(notebook: nbformat.NotebookNode, change: Mutant | Variant) -> nbformat.NotebookNode:
    """A copy of `notebook` with the change's one replacement made (a variant with a
    notebook of its own: that notebook, as `load_corpus` resolved its path).

    Raises:
        ValueError: `change.old` does not occur exactly once in the code cells.
    """
    import copy

    import nbformat

    if isinstance(change, Variant) and change.notebook:
        return nbformat.read(change.notebook, as_version=4)
    nb = copy.deepcopy(notebook)
    hits = [c for c in nb.cells if c.cell_type == "code" and change.old in c.source]
    total = sum(c.source.count(change.old) for c in hits)
    if total != 1:
        raise ValueError(f"{change.name}: {change.old!r} occurs {total} times, want 1")
    hits[0].source = hits[0].source.replace(change.old, change.new)
    return nb
