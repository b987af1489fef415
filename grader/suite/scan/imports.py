"""Imports of named libraries in the candidate's cells: what an exercise that torch cannot
trivialise (a tokenizer, an RL loss) forbids instead (`integrity.require_no_library`)."""

from __future__ import annotations

import ast
from collections.abc import Collection, Sequence


def _importer(func: ast.expr) -> bool:
    """`__import__` or `import_module` (importlib's), however it is reached."""
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    return name in ("__import__", "import_module")


def _imported(node: ast.AST) -> list[str]:
    """The module names `node` imports: import statements, and `__import__` /
    `importlib.import_module` with a constant name."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom) and node.module and not node.level:
        return [node.module]
    if isinstance(node, ast.Call) and node.args and _importer(node.func):
        first = node.args[0]
        if isinstance(first, ast.Constant) and isinstance(first.value, str):
            return [first.value]
    return []


def library_imports(sources: Sequence[str], libraries: Collection[str]) -> list[str]:
    """'cell 3, line 2: imports tiktoken' for each import of one of `libraries` (top-level
    package names) in the cells, in order. A source that knows its cell's number (the
    kernel's `sources`) is named by it, a plain string by its place among them; lines of
    IPython magics and shell commands are skipped, and a cell that does not parse."""
    found = []
    for place, source in enumerate(sources, start=1):
        cell = getattr(source, "number", place)
        lines = ["" if line.lstrip()[:1] in ("%", "!") else line for line in source.split("\n")]
        try:
            tree = ast.parse("\n".join(lines))
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            names = [n for n in _imported(node) if n.partition(".")[0] in libraries]
            if names:
                found.append(f"cell {cell}, line {getattr(node, 'lineno', 0)}: imports {names[0]}")
    return found
