"""`grade list`: the catalog of exercises, broken folders included (with the reason), and
where each was loaded from.

Loading the suites imports torch (seconds), which listing them should not cost: `grade
build` writes the built-in folder's catalog to an index (`exercises/catalog.json`) with a
digest of the code of its Python files (corpora, formatting and comments aside) and the
Python version that made it, and `grade list` reads the index instead of the suites while
both still match (an edited suite, or a folder given with --exercises, is loaded as before).
`grade build --check` fails while the index's rows differ from the suites'.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from grader.core.errors import UsageError
from grader.core.project import installed_tree, is_checkout
from grader.suite.exercise import (
    Catalog,
    builtin_exercises,
    exercises_folders,
    load_catalog,
    sources_digest,
)

INDEX = "catalog.json"
_PYTHON = "{}.{}".format(*sys.version_info[:2])


@dataclass(frozen=True)
class CatalogRow:
    """One exercise, or one folder that could not be loaded (`broken` says why; such a
    row is named after its folder)."""

    id: str
    title: str = ""
    seed: str = ""
    levels: list[str] = field(default_factory=list)
    tests: int = 0
    points: float = 0
    packages: list[str] = field(default_factory=list)
    folder: str = ""
    broken: str | None = None
    profile: bool = False  # whether `--profile` measures it (time and memory against T)
    tags: list[str] = field(default_factory=list)  # topics, to pick by (`grade list --tag`)
    minutes: int = 0  # how long its independent solution took to write; 0: not measured


def catalog_rows(catalog: Catalog | None = None) -> list[CatalogRow]:
    """One row per exercise, then one per broken folder (from the index, when there is
    one and it matches the suites, see the module docstring)."""
    if catalog is None:
        indexed = indexed_rows()
        if indexed is not None:
            return indexed
        catalog = load_catalog()
    rows = [
        CatalogRow(
            e.id,
            e.title,
            e.seed,
            list(e.levels),
            len(e.checks),
            e.max_score,
            list(e.packages),
            str(e.folder or ""),
            profile=e.profile is not None,
            tags=list(e.tags),
            minutes=e.minutes,
        )  # fmt: skip
        for e in catalog.values()
    ]
    rows += [
        CatalogRow(folder, broken=problem) for folder, problem in sorted(catalog.broken.items())
    ]
    return rows


def index_text(folder: Path) -> str:
    """The index of the built-in `folder` (its catalog, exercise folders by name; exercises
    loaded from other folders are left out)."""
    rows = [
        replace(row, folder=Path(row.folder).name if row.folder else "")
        for row in catalog_rows(load_catalog())
        if (Path(row.folder).parent == folder if row.folder else (folder / row.id).is_dir())
    ]
    index = {
        "python": _PYTHON,
        "sources": sources_digest(folder),
        "rows": [asdict(r) for r in rows],
    }
    return json.dumps(index, indent=1) + "\n"


def stale_index(folder: Path) -> bool:
    """Whether the index of the built-in `folder` is missing or says other than its suites:
    other rows, or another digest (compared only where it was written by the same Python
    version as this one: syntax trees differ between versions)."""
    try:
        index = json.loads((folder / INDEX).read_text())
        fresh = json.loads(index_text(folder))
        if index.get("python") == _PYTHON and index.get("sources") != fresh["sources"]:
            return True
        return bool(index["rows"] != fresh["rows"])
    except (OSError, ValueError, TypeError, KeyError):
        return True


def indexed_rows() -> list[CatalogRow] | None:
    """The catalog from the built-in folder's index; None when other folders are in use,
    or the index is missing or does not match the folder's sources."""
    folder = builtin_exercises()
    if [f.resolve() for f in exercises_folders()] != [folder]:
        return None
    try:
        index = json.loads((folder / INDEX).read_text())
        if index.get("python") != _PYTHON or index.get("sources") != sources_digest(folder):
            return None
        rows = [CatalogRow(**row) for row in index["rows"]]
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None
    return [replace(row, folder=str(folder / row.folder) if row.folder else "") for row in rows]


def source_line() -> str:
    """Where the exercises are loaded from, and whether edits there are graded at once."""
    parts = []
    for folder in exercises_folders():
        tree = folder.parent
        if is_checkout(tree):
            kind = "a checkout: edits are graded at once"
            if tree != installed_tree():
                kind += f"; the grader's own code is the installed copy in {installed_tree()}"
        elif "site-packages" in folder.parts or "dist-packages" in folder.parts:
            kind = "an installed copy: reinstall, or `pip install -e .`, to grade edits"
        else:
            kind = "--exercises / $GRADER_EXERCISES"
        parts.append(f"{folder} ({kind})")
    return "Exercises from " + "; then ".join(parts)


def pick(rows: list[CatalogRow], tags: list[str], max_minutes: int | None) -> list[CatalogRow]:
    """The exercises tagged with every one of `tags` whose measured time is at most
    `max_minutes` (when given; an exercise not measured is left out); all rows, broken
    ones included, when neither is given.

    Raises:
        UsageError: a tag no exercise has (naming the tags there are).
    """
    known = sorted({tag for row in rows for tag in row.tags})
    unknown = [tag for tag in tags if tag not in known]
    if unknown:
        raise UsageError(
            f"no exercise is tagged {', '.join(map(repr, unknown))}; tags: {', '.join(known)}"
        )
    if not tags and max_minutes is None:
        return rows
    return [
        row
        for row in rows
        if not row.broken
        and set(tags) <= set(row.tags)
        and (max_minutes is None or 0 < row.minutes <= max_minutes)
    ]


def render_catalog(
    console: Console,
    as_json: bool = False,
    catalog: Catalog | None = None,
    tags: list[str] | None = None,
    max_minutes: int | None = None,
) -> None:
    """Print the catalog as a table (or JSON), with where it was loaded from: every
    exercise, or those `pick` keeps for `tags` and `max_minutes`."""
    rows = pick(catalog_rows(catalog), tags or [], max_minutes)
    if as_json:
        console.print_json(json.dumps([asdict(row) for row in rows]))
        return
    table = Table(title="Exercises", expand=True, caption=source_line(), caption_justify="left")
    table.add_column("id", no_wrap=True)
    table.add_column("title, levels, packages, seed", overflow="fold", ratio=1)
    table.add_column("tests", justify="right", no_wrap=True)
    table.add_column("points", justify="right", no_wrap=True)
    table.add_column("min", justify="right", no_wrap=True)
    broken = Table(title="Broken (cannot be graded)", title_style="bold red", expand=True)
    broken.add_column("id", no_wrap=True)
    broken.add_column("problem", overflow="fold")
    for row in rows:
        if row.broken:
            broken.add_row(row.id, row.broken)
            continue
        minutes = str(row.minutes) if row.minutes else "-"
        table.add_row(row.id, _about(row), str(row.tests), f"{row.points:g}", minutes)
    console.print(table)
    if broken.row_count:
        console.print(broken)


def _about(row: CatalogRow) -> Group:
    """The title, then the levels, packages and seed, each under a label: one column that
    fits a narrow terminal, every value wrapped under itself."""
    details = Table.grid(padding=(0, 1))
    details.add_column(style="dim", no_wrap=True)
    details.add_column(overflow="fold")
    details.add_row("tags", ", ".join(row.tags) or "none")
    details.add_row("levels", ", ".join(row.levels))
    details.add_row("packages", ", ".join(row.packages) or "none")
    details.add_row("seed", row.seed)
    details.add_row("profile", "yes (--profile)" if row.profile else "none")
    return Group(Text(row.title), details)
