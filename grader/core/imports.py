"""Imports that must not cost what grading never uses.

`nbformat` validates notebooks with jsonschema, and jsonschema's format checker imports,
when they are installed, optional packages that grading never uses. Environments that
hold jupyter-server (JupyterLab, nbgrader, ...) install them all, and one of them,
`rfc3987_syntax`, builds a parser grammar at import: over a second of CPU before the
first notebook is read. This module's `nbformat` is imported with those packages out of
sight (once it is, they import as usual): import it from here first, before anything
imports nbformat or nbclient (`grader.core.notebook` does, and the grading path reads the
notebook before it loads anything else).
"""

from __future__ import annotations

import contextlib
import importlib.abc
import sys
from collections.abc import Iterator, Sequence
from types import ModuleType
from typing import TYPE_CHECKING

# What jsonschema's format checker imports if it can (jsonschema/_format.py): formats
# nbformat's schema does not use.
FORMAT_CHECKER_EXTRAS = (
    "rfc3987_syntax", "rfc3987", "rfc3339_validator", "rfc3986_validator", "webcolors",
    "jsonpointer", "uri_template", "isoduration", "fqdn", "idna",
)  # fmt: skip


class _Hidden(importlib.abc.MetaPathFinder):
    def __init__(self, names: Sequence[str]) -> None:
        self.names = tuple(names)

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if name.partition(".")[0] in self.names:
            raise ModuleNotFoundError(f"{name} is not needed for grading", name=name)


@contextlib.contextmanager
def hidden(names: Sequence[str]) -> Iterator[None]:
    """Within the block, importing any of `names` (or their submodules) fails as if they
    were not installed (modules already imported are left alone)."""
    finder = _Hidden(names)
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)


def light_nbformat() -> ModuleType:
    """nbformat, imported without jsonschema's optional format-checker packages. Call it
    before anything imports nbformat (or nbclient, which imports it)."""
    if "nbformat" in sys.modules:
        return sys.modules["nbformat"]
    with hidden(FORMAT_CHECKER_EXTRAS):
        import nbformat
    return nbformat


if TYPE_CHECKING:
    import nbformat
else:
    nbformat = light_nbformat()
