"""Reading a submitted notebook: validation with one-line errors, and what its code defines."""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass
from pathlib import Path

from grader.core.errors import NotebookError
from grader.core.imports import nbformat  # first of all: see grader.core.imports

MAX_NOTEBOOK_BYTES = 20 * 1024 * 1024
_MAGIC = re.compile(r"^\s*[%!]")


@dataclass(frozen=True)
class Notebook:
    """A validated nbformat 4 notebook and where it came from."""

    path: Path
    node: nbformat.NotebookNode

    @property
    def code_cells(self) -> list[tuple[int, str]]:
        """(index, source) of every non-empty code cell, in order."""
        return [
            (i, cell.source)
            for i, cell in enumerate(self.node.cells)
            if cell.cell_type == "code" and cell.source.strip()
        ]

    @property
    def exercise_id(self) -> str | None:
        """The exercise named in the notebook's `grader` metadata, if any."""
        meta = self.node.metadata.get("grader", {})
        value = meta.get("exercise") if isinstance(meta, dict) else None
        return value if isinstance(value, str) else None


def read_notebook(path: str | Path, max_bytes: int = MAX_NOTEBOOK_BYTES) -> Notebook:
    """Read and validate a notebook file.

    Raises:
        NotebookError: with a one-line reason, for anything that is not an nbformat 4 notebook.
    """
    path = Path(path)
    if not path.exists():
        raise NotebookError(path, "no such file")
    if path.is_dir():
        raise NotebookError(path, "is a directory, not a notebook file")
    try:
        size = path.stat().st_size
        if size > max_bytes:
            raise NotebookError(path, f"file is {size:,} bytes, over the {max_bytes:,}-byte limit")
        raw = path.read_bytes()
    except OSError as e:
        raise NotebookError(path, f"cannot read: {e.strerror or e}") from None
    return Notebook(path, parse_notebook(raw, path))


def parse_notebook(raw: bytes, path: object = "<notebook>") -> nbformat.NotebookNode:
    """Parse notebook bytes, raising NotebookError for every way they can be wrong."""
    if not raw.strip():
        raise NotebookError(path, "file is empty")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise NotebookError(path, "not a text file (not UTF-8): is it a notebook?") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        if not text.lstrip("\ufeff \t\r\n").startswith("{"):  # not meant as JSON: a .py file
            raise NotebookError(
                path, "not a notebook (a notebook is JSON; this file is not)"
            ) from None
        raise NotebookError(path, f"invalid JSON at line {e.lineno}, column {e.colno}") from None
    if not isinstance(data, dict) or "cells" not in data and "worksheets" not in data:
        raise NotebookError(path, "JSON but not a notebook (no 'cells')")
    major = data.get("nbformat")
    if not isinstance(major, int):
        raise NotebookError(path, "JSON but not a notebook (no 'nbformat' version)")
    if major < 4:
        raise NotebookError(path, f"nbformat {major} is too old; save it as nbformat 4")
    try:
        node = nbformat.reads(text, as_version=4)
        nbformat.validate(node)
    except Exception as e:  # nbformat raises several unrelated types
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise NotebookError(path, f"not a valid nbformat 4 notebook: {first[:160]}") from None
    return node


def strip_magics(source: str) -> str:
    """Blank out IPython magics and shell escapes so the cell parses as Python."""
    return "\n".join("" if _MAGIC.match(line) else line for line in source.splitlines())


def parse_cell(source: str) -> ast.Module | None:
    """The cell's AST, or None when it does not parse."""
    try:
        return ast.parse(strip_magics(source))
    except (SyntaxError, ValueError):
        return None


# What a line at the top level of a cell that does not parse reads as defining.
_DEFINES = re.compile(
    r"^(?:(?:async\s+)?def\s+([A-Za-z_]\w*)|class\s+([A-Za-z_]\w*)"
    r"|([A-Za-z_]\w*)\s*(?::[^=]*)?=(?!=))"
)


def defined_names(sources: list[str]) -> set[str]:
    """Top-level names the cells define: classes, functions and assignments. A cell that
    does not parse (a syntax error) still reads as defining what its unindented lines
    start to define (`def f(`, `class C`, `x =`): those are the names it should have
    defined, which tests then miss because of it."""
    names: set[str] = set()
    for source in sources:
        tree = parse_cell(source)
        if tree is None:
            for line in strip_magics(source).splitlines():
                match = _DEFINES.match(line)
                if match:
                    names.add(next(filter(None, match.groups())))
            continue
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names.update(t.id for t in targets if isinstance(t, ast.Name))
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                names.update(a.asname or a.name.split(".")[0] for a in node.names if a.name != "*")
    return names
