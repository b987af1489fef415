"""`grade list`: the catalog of exercises, broken folders included (with the reason)."""

from __future__ import annotations

import json

from rich.console import Console
from rich.table import Table

from grader.exercise import Catalog, load_catalog


def catalog_rows(catalog: Catalog | None = None) -> list[dict[str, object]]:
    """One row per exercise: id, title, seed, levels, tests, points, packages, and `broken`
    (None, or why the folder could not be loaded; such a row is named after its folder)."""
    catalog = load_catalog() if catalog is None else catalog
    rows: list[dict[str, object]] = [
        {
            "id": e.id,
            "title": e.title,
            "seed": e.seed,
            "levels": e.levels,
            "tests": len(e.checks),
            "points": e.max_score,
            "packages": list(e.packages),
            "broken": None,
        }
        for e in catalog.values()
    ]
    rows += [
        {
            "id": folder,
            "title": "",
            "seed": "",
            "levels": [],
            "tests": 0,
            "points": 0,
            "packages": [],
            "broken": problem,
        }
        for folder, problem in sorted(catalog.broken.items())
    ]
    return rows


def render_catalog(console: Console, as_json: bool = False, catalog: Catalog | None = None) -> None:
    """Print the catalog as a table (or JSON)."""
    rows = catalog_rows(catalog)
    if as_json:
        console.print_json(json.dumps(rows))
        return
    table = Table(title="Exercises", expand=True)
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
        if row["broken"]:
            broken.add_row(str(row["id"]), str(row["broken"]))
            continue
        table.add_row(
            str(row["id"]),
            str(row["title"]),
            str(row["seed"]),
            ", ".join(row["levels"]),  # type: ignore[arg-type]
            ", ".join(row["packages"]),  # type: ignore[arg-type]
            str(row["tests"]),
            f"{row['points']:g}",
        )
    console.print(table)
    if broken.row_count:
        console.print(broken)
