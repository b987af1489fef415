"""`grade list`: the catalog of exercises, broken folders included (with the reason), and
where each was loaded from.

Loading the suites imports torch (seconds), which listing them should not cost: `grade
build` writes the built-in folder's catalog to an index (`exercises/catalog.json`) with a
digest of every Python file in the folder, and `grade list` reads the index instead of
the suites while the digest still matches (an edited suite, or a folder given with
--exercises, is loaded as before).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from rich.console import Console
from rich.table import Table

from grader.exercise import Catalog, builtin_exercises, exercises_folders, load_catalog

INDEX = "catalog.json"


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
        )  # fmt: skip
        for e in catalog.values()
    ]
    rows += [
        CatalogRow(folder, broken=problem) for folder, problem in sorted(catalog.broken.items())
    ]
    return rows


def sources_digest(folder: Path) -> str:
    """A digest of every Python file under `folder` (names and contents)."""
    digest = hashlib.sha256()
    for path in sorted(folder.rglob("*.py")):
        if "__pycache__" not in path.parts:
            digest.update(f"{path.relative_to(folder).as_posix()}\0".encode())
            digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


def index_text(folder: Path) -> str:
    """The index of the built-in `folder` (its catalog, exercise folders by name)."""
    rows = [
        replace(row, folder=Path(row.folder).name if row.folder else "")
        for row in catalog_rows(load_catalog())
    ]
    index = {"sources": sources_digest(folder), "rows": [asdict(row) for row in rows]}
    return json.dumps(index, indent=1) + "\n"


def indexed_rows() -> list[CatalogRow] | None:
    """The catalog from the built-in folder's index; None when other folders are in use,
    or the index is missing or does not match the folder's sources."""
    folder = builtin_exercises()
    if [f.resolve() for f in exercises_folders()] != [folder]:
        return None
    try:
        index = json.loads((folder / INDEX).read_text())
        if index.get("sources") != sources_digest(folder):
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
