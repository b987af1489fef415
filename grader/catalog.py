"""`grade list`: the catalog of exercises."""

from __future__ import annotations

import json

from rich.console import Console
from rich.table import Table

from grader.exercise import load_catalog


def catalog_rows() -> list[dict[str, object]]:
    """One row per exercise: id, title, seed, levels, points."""
    return [
        {
            "id": e.id,
            "title": e.title,
            "seed": e.seed,
            "levels": e.levels,
            "tests": len(e.checks),
            "points": e.max_score,
        }
        for e in load_catalog().values()
    ]


def render_catalog(console: Console, as_json: bool = False) -> None:
    """Print the catalog as a table (or JSON)."""
    rows = catalog_rows()
    if as_json:
        console.print_json(json.dumps(rows))
        return
    table = Table(title="Exercises")
    for column in ("id", "title", "seed", "levels", "tests", "points"):
        table.add_column(column, overflow="fold")
    for row in rows:
        levels = ", ".join(f"{i}. {name}" for i, name in enumerate(row["levels"], start=1))  # type: ignore[arg-type]
        table.add_row(
            str(row["id"]),
            str(row["title"]),
            str(row["seed"]),
            levels,
            str(row["tests"]),
            f"{row['points']:g}",
        )
    console.print(table)
