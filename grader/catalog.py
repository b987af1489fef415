"""`grade list`: the catalog of exercises, broken folders included (with the reason), and
where each was loaded from."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

from rich.console import Console
from rich.table import Table

from grader.exercise import Catalog, exercises_folders, load_catalog


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


def catalog_rows(catalog: Catalog | None = None) -> list[CatalogRow]:
    """One row per exercise, then one per broken folder."""
    catalog = load_catalog() if catalog is None else catalog
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
        )  # fmt: skip
        for e in catalog.values()
    ]
    rows += [
        CatalogRow(folder, broken=problem) for folder, problem in sorted(catalog.broken.items())
    ]
    return rows


def source_line() -> str:
    """Where the exercises are loaded from, and whether edits there are graded at once."""
    parts = []
    for folder in exercises_folders():
        tree = folder.parent
        if (tree / "pyproject.toml").is_file() and (tree / "grader").is_dir():
            kind = "a checkout: edits are graded at once"
        elif "site-packages" in folder.parts or "dist-packages" in folder.parts:
            kind = "an installed copy: reinstall, or `pip install -e .`, to grade edits"
        else:
            kind = "--exercises / $GRADER_EXERCISES"
        parts.append(f"{folder} ({kind})")
    return "Exercises from " + "; then ".join(parts)


def render_catalog(console: Console, as_json: bool = False, catalog: Catalog | None = None) -> None:
    """Print the catalog as a table (or JSON), with where it was loaded from."""
    rows = catalog_rows(catalog)
    if as_json:
        console.print_json(json.dumps([asdict(row) for row in rows]))
        return
    table = Table(title="Exercises", expand=True, caption=source_line(), caption_justify="left")
    table.add_column("id", no_wrap=True)
    table.add_column("title", overflow="fold", ratio=3)
    table.add_column("seed", overflow="fold", ratio=1)
    table.add_column("levels", overflow="fold", ratio=3)
    table.add_column("packages", overflow="fold", ratio=1)
    table.add_column("tests", justify="right")
    table.add_column("points", justify="right")
    broken = Table(title="Broken (cannot be graded)", title_style="bold red", expand=True)
    broken.add_column("id", no_wrap=True)
    broken.add_column("problem", overflow="fold")
    for row in rows:
        if row.broken:
            broken.add_row(row.id, row.broken)
            continue
        table.add_row(
            row.id, row.title, row.seed, ", ".join(row.levels), ", ".join(row.packages),
            str(row.tests), f"{row.points:g}",
        )  # fmt: skip
    console.print(table)
    if broken.row_count:
        console.print(broken)
