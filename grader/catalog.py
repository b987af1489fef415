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
    table = Table(title="Exercises", expand=True)
    table.add_column("id", no_wrap=True)
    table.add_column("title", overflow="fold", ratio=3)
    table.add_column("seed", overflow="fold", ratio=1)
    table.add_column("levels", overflow="fold", ratio=3)
    table.add_column("tests", justify="right")
    table.add_column("points", justify="right")
    for row in rows:
        levels = ", ".join(row["levels"])  # type: ignore[arg-type]
        table.add_row(
            str(row["id"]),
            str(row["title"]),
            str(row["seed"]),
            levels,
            str(row["tests"]),
            f"{row['points']:g}",
        )
    console.print(table)
