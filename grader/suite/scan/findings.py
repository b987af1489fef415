"""What a pass records and the verdict: ``SourceFinding`` and ``ScanResult``, and ``_Recorder``,
which notes each path the code reaches (machinery, or a built-in reference with the notebook
function or class it sits in), the uses, calls and writes that decide which top-level
functions are check code, and at the end turns all of it into the ordered findings.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from grader.suite.scan.names import _Bindings
from grader.suite.scan.rules import _CHECK_NAME, _machinery

if TYPE_CHECKING:
    from grader.suite.scan.cells import _Cell


@dataclass(frozen=True)
class SourceFinding:
    """One thing the scan saw, located by cell and line: `cell` is the notebook's cell number
    (all cells count, from 1, as on the card) where the sources scanned knew it
    (`CellSource`, `in_notebook`), else the place among the sources (code cells, from 1)."""

    cell: int
    line: int
    message: str
    inside: str | None = None  # the notebook function/class it is in; None: top-level code
    in_notebook: bool = False  # `cell` is the notebook's number, not the place among sources

    def __str__(self) -> str:
        where = "cell" if self.in_notebook else "code cell"
        return f"{where} {self.cell}, line {self.line}: {self.message}"


@dataclass(frozen=True)
class ScanResult:
    """Every torch built-in reference with where it sits, and the findings among them:
    `builtins`, the built-ins the graded code names (a from-scratch check fails on these),
    and `notes`, the machinery and magics (shown on the card, never a penalty: what the
    graded calls did is judged at run time)."""

    references: tuple[SourceFinding, ...]
    findings: tuple[SourceFinding, ...]
    builtins: tuple[SourceFinding, ...] = ()
    notes: tuple[SourceFinding, ...] = ()

    def numbered(self, numbers: list[int]) -> ScanResult:
        """This result with each finding's cell, a place among the sources (from 1), made
        the notebook's number of that cell (`numbers`, in the sources' order)."""

        def renumber(findings: tuple[SourceFinding, ...]) -> tuple[SourceFinding, ...]:
            return tuple(replace(f, cell=numbers[f.cell - 1], in_notebook=True) for f in findings)

        return ScanResult(
            renumber(self.references),
            renumber(self.findings),
            renumber(self.builtins),
            renumber(self.notes),
        )


class _Recorder(_Bindings):
    """The bindings plus what the recording pass sees; the reader walks, this records."""

    def __init__(
        self, forbidden: frozenset[str], cells: list[_Cell], private: re.Pattern[str] | None
    ) -> None:
        super().__init__(cells)
        self.forbidden = forbidden
        self.private = private
        self._builtins: dict[str, str | None] = {}
        # what one pass records (`begin` empties it)
        self.refs: list[tuple[SourceFinding, str | None]] = []  # (reference, top-level owner)
        self.flags: list[SourceFinding] = []  # machinery and magics
        self.uses: list[tuple[str, str, str]] = []  # (module name, top owner, qualname)
        self.loads: dict[str | None, set[str]] = {}  # module names each top owner reads
        self.calls: dict[str, list[tuple[bool, str | None]]] = {}  # def -> (bare call?, owner)
        self.writes: set[str] = set()  # top owners that write notebook-level state
        self.reads_all: dict[str, str] = {}  # top owner -> qualname, for globals()
        self.owners: list[str] = []
        self._placed: set[tuple[int, int, str]] = set()

    def begin(self, emit: bool) -> None:
        """Start a pass: forget what the last one recorded."""
        self.emit = emit
        self.refs = []
        self.flags = []
        self.uses = []
        self.loads = {}
        self.calls = {}
        self.writes = set()
        self.reads_all = {}
        self.owners = []
        self._placed = set()

    def result(self) -> ScanResult:
        check = self._check_code()
        refs, findings = [], []
        for ref, owner in self.refs:
            if owner is None or owner in check:
                ref = SourceFinding(ref.cell, ref.line, ref.message)
            refs.append(ref)
            if ref.inside is not None:
                findings.append(ref)
        users = [(name, q) for name, owner, q in self.uses if owner not in check]
        users += [(name, q) for owner, q in self.reads_all.items() if owner not in check
                  for name in self.module]  # fmt: skip
        for name, qualname in users:
            for path, (cell, line) in self.module.get(name, {}).items():
                builtin = self._builtin(path)
                if builtin:
                    whose = "" if builtin.startswith("torch.") else "torch's "
                    message = f"binds {name} to {whose}{builtin}, which {qualname} uses"
                    findings.append(SourceFinding(cell, line, message))
        builtins, notes = _ordered(findings), _ordered(self.flags)
        return ScanResult(_ordered(refs), _ordered([*self.flags, *findings]), builtins, notes)

    def _check_code(self) -> set[str]:
        """Top-level functions/classes that are check code (see the package docstring)."""
        check = {n for n in self.defs if _CHECK_NAME.match(n) and n not in self.writes}
        while True:
            impl = self.defs - check
            shared = set().union(*(self.loads.get(owner, set()) for owner in impl))
            shared &= self.assigned
            keep = {
                n
                for n in check
                if all(bare and (by is None or by in check) for bare, by in self.calls.get(n, []))
                and not self.loads.get(n, set()) & shared
            }
            if keep == check:
                return check
            check = keep

    def check(self, path: str, node: ast.AST, alias: str | None = None) -> None:
        """Record a path the code reaches: machinery, or a built-in reference."""
        why = _machinery(path)
        if why:
            self.flag(node, why)
        builtin = self._builtin(path)
        place = (self.cell, self._line(node), builtin or "")
        if builtin and self.emit and place not in self._placed:  # one per built-in and line
            self._placed.add(place)
            named = f" (as {alias})" if alias and alias != builtin else ""
            private = ", a private torch name" if builtin.startswith("torch.") else ""
            owner = self.owners[0] if self.owners else None
            inside = self.owners[-1] if self.owners else None
            message = f"uses {builtin}{named}{private}"
            self.refs.append((SourceFinding(*place[:2], message, inside), owner))

    def _builtin(self, path: str) -> str | None:
        """The forbidden built-in ('MultiheadAttention') or private torch name
        ('torch._foo') a path reaches, if any."""
        if path not in self._builtins:
            self._builtins[path] = self._find_builtin(path)
        return self._builtins[path]

    def _find_builtin(self, path: str) -> str | None:
        parts = path.split(".")
        if parts[0] != "torch":
            return None
        for part in parts[1:]:
            if part.split("(")[0] in self.forbidden:
                return part.split("(")[0]
        if _machinery(path):
            return None
        for i, part in enumerate(parts[1:], start=2):
            if "(" in part:
                break
            if part.startswith("_") and self.private and self.private.search(part):
                return ".".join(parts[:i])
        return None

    def _torch_namespace(self, node: ast.AST) -> bool:
        return any(p.split(".")[0] == "torch" and "(" not in p for p in self.resolve(node))

    def flag(self, node: ast.AST, message: str) -> None:
        if self.emit:
            inside = self.owners[-1] if self.owners else None
            self.flags.append(SourceFinding(self.cell, self._line(node), message, inside))


def _ordered(findings: list[SourceFinding]) -> tuple[SourceFinding, ...]:
    unique = {str(f): f for f in reversed(findings)}  # keeps the first of each message
    return tuple(sorted(unique.values(), key=lambda f: (f.cell, f.line)))
