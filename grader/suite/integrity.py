"""Integrity verdicts for the from-scratch checks: what the source binds to the exercise's
forbidden built-ins, what the guard saw at run time, and what a candidate module holds.

Run-time detection lives in the guard and the shim (they record watched torch calls); the
static scan (`grader.suite.scan`) reads the cells' AST in the grader's process, aliases and
string look-ups included. What counts as a built-in, and what messages call it, comes
from the exercise's `Watch`.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from grader.core.outcomes import Failed
from grader.suite.exercise import Watch
from grader.suite.scan import (  # the static scan lives in grader.suite.scan; re-exported for suites
    CellSource,
    scan,
    scan_cells,
)
from grader.suite.scan.imports import library_imports

__all__ = [
    "require_clean_source",
    "require_no_builtin_module",
    "require_no_library",
    "require_nothing_seen",
    "scan",
]


def require_clean_source(
    sources: list[str],
    forbidden: tuple[str, ...],
    watch: Watch | None = None,
    numbers: list[int] | None = None,
    graded: tuple[str, ...] | None = None,
) -> None:
    """A check's verdict: the graded code names none of the built-ins (`ScanResult.builtins`:
    machinery and magics are notes on the card, not a failure). The graded code is what
    the graded names reach: `graded`, else the watch's (`Watch.graded`, an exercise's
    `defines`), else every function and class the notebook defines not named like a check.
    The message names the cell as the card does when the sources know their cells
    (`kernel.sources`) or `numbers` gives each source's cell number in the notebook
    (`Kernel.cell_numbers`).

    Raises:
        Failed: naming the first finding (and how many more there are).
    """
    watch = watch or Watch()
    if numbers:
        sources = [CellSource(s, n) for s, n in zip(sources, numbers, strict=True)]
    names = graded if graded is not None else watch.graded or None
    findings = scan_cells(sources, forbidden, watch.private, names).builtins
    if findings:
        more = f" (+{len(findings) - 1} more)" if len(findings) > 1 else ""
        raise Failed(f"built-in {watch.what} in the source: {findings[0]}{more}")


def require_nothing_seen(seen: set[str]) -> None:
    """A check's verdict: the guard saw no evidence (see `Kernel.seen`): no watched built-in
    called during the hidden tests, no other process working for the graded calls, none of
    the machinery that can switch the watch off.

    Raises:
        Failed: naming everything seen.
    """
    if seen:
        raise Failed(f"the grader's watch saw: {'; '.join(sorted(seen))}")


def require_no_library(sources: Sequence[str], libraries: Collection[str], what: str) -> None:
    """A check's verdict: the cells import none of `libraries` (top-level package names),
    by an import statement or by `__import__` / `importlib.import_module` with a constant
    name: for an exercise that no torch built-in trivialises, but a library would (a
    tokenizer, an RL library).

    Raises:
        Failed: "a tokenizer library in the source: cell 3, line 2: imports tiktoken" (`what`
            is "a tokenizer library"), and how many more imports there are.
    """
    found = library_imports(sources, libraries)
    if found:
        more = f" (+{len(found) - 1} more)" if len(found) > 1 else ""
        raise Failed(f"{what} in the source: {found[0]}{more}")


def require_no_builtin_module(
    modules: list[tuple[str, str]], owner: str, watch: Watch | None = None
) -> None:
    """A check's verdict: no submodule is (or derives from) one of the watch's built-in
    module types. Judged by where the type comes from, not by its name: the notebook's
    own class called MultiheadAttention is fine.

    Raises:
        Failed: naming the submodule and the built-in type.
    """
    builtins = (watch or Watch()).modules
    for entry in modules:
        found = builtins & set(getattr(entry, "bases", (entry[1],)))
        if found:
            kind = min(found).rsplit(".", 1)[-1]
            raise Failed(f"{owner} holds torch's nn.{kind}: {entry[0] or '(the module itself)'}")
