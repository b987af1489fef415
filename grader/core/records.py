"""What the kernel-side guard reported: integrity findings and built-ins seen.

The guard (grader/kernel/guard.py) writes one JSON line per sighting to a pipe whose reading end
is here. This module turns those lines into `Finding`s, naming the notebook cell and line
where they happened. Pure: tested without a kernel.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from enum import Enum


class Kind(str, Enum):
    """What a finding is about (its value is what every output writes)."""

    HIDDEN = "hidden"  # the notebook reached for the grader's hidden files
    BUILTIN = "builtin"  # a watched built-in ran during a graded call
    MACHINERY = "machinery"  # what can switch the watch off was used by a graded call
    ENVIRONMENT = "environment"  # the kernel's environment was not as the grader left it
    TAMPER = "tamper"  # the record channel was tampered with during a call
    NOTE = "note"  # something unusual the notebook did: shown, no points taken

    def __str__(self) -> str:
        return self.value

    @property
    def voids(self) -> bool:
        """Findings of this kind void the grading: the candidate reached for the grader."""
        return self in VOIDING


KINDS: tuple[str, ...] = tuple(k.value for k in Kind)
# Findings that void the grading: the candidate reached for the grader itself.
VOIDING = frozenset({Kind.HIDDEN, Kind.TAMPER})
# Evidence against the from-scratch level: what the graded calls did (a watched built-in
# ran, another process worked for them) or what can switch the watch off. Everything else
# a notebook does (a shell command, a program or thread it starts, a magic) is a `note`:
# shown on the card, no points taken.
EVIDENCE = frozenset({Kind.BUILTIN, Kind.MACHINERY})
_MAX_LINE = 4096
# Findings kept of each kind: a notebook may make the guard record without end.
_MAX_PER_KIND = 50


@dataclass(frozen=True)
class Finding:
    """One thing the guard saw. `cell` counts all cells from 1 (None: not in a cell)."""

    kind: Kind
    message: str
    cell: int | None = None
    line: int | None = None

    def __post_init__(self) -> None:  # "note" as written in JSON, or Kind.NOTE
        object.__setattr__(self, "kind", Kind(self.kind))

    @property
    def voids(self) -> bool:
        """The candidate reached for the grader itself: no credit."""
        return self.kind.voids

    @property
    def is_evidence(self) -> bool:
        """It fails the from-scratch level (see EVIDENCE)."""
        return self.kind in EVIDENCE

    def to_dict(self) -> dict[str, object]:
        return {
            "kind": self.kind.value,
            "message": self.message,
            "cell": self.cell,
            "line": self.line,
        }

    def where(self) -> str:
        """'cell 3, line 7: ' or ''."""
        if self.cell is None:
            return ""
        return f"cell {self.cell}, line {self.line}: " if self.line else f"cell {self.cell}: "


_SNIPPET = re.compile(r"^\d+\.py$")  # IPython's name for code it compiled


def cell_file_names(cells: list[tuple[int, str]]) -> dict[str, int]:
    """The file name IPython's kernel gives each cell's code (a hash of its source), mapped
    to the cell's number among all cells (from 1)."""
    from ipykernel.compiler import get_tmp_hash_seed, murmur2_x86

    seed = get_tmp_hash_seed()
    return {f"{murmur2_x86(source, seed)}.py": index + 1 for index, source in cells}


class RecordReader:
    """Accumulates the guard's lines (which may arrive split) into findings."""

    def __init__(self, cells: list[tuple[int, str]]) -> None:
        self._names = cell_file_names(cells)
        self._partial = b""
        self.findings: list[Finding] = []
        self._known: set[Finding] = set()
        self._dropped: dict[str, int] = {}
        self.pids: list[int] = []
        # Whether the hidden tests are running: the session says so, from outside the
        # kernel. A built-in sighting that arrives otherwise is the notebook's own cells
        # (a self-check against the built-in): not the graded calls, not recorded.
        self.testing = False

    def feed(self, data: bytes) -> None:
        """Take bytes read from the pipe."""
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()
        if len(self._partial) > _MAX_LINE:
            self._partial = b""
            self.add(Finding(Kind.TAMPER, "unreadable data on the grader's record channel"))
        for raw in lines:
            self._line(raw)

    def _line(self, raw: bytes) -> None:
        try:
            record = json.loads(raw)
            kind, message = record["k"], str(record["m"])
        except (ValueError, KeyError, TypeError):
            self.add(Finding(Kind.TAMPER, "unreadable data on the grader's record channel"))
            return
        if kind == "pid":
            if message.isdigit():
                self.pids = [*self.pids[-9:], int(message)]
            return
        if kind not in KINDS:
            self.add(Finding(Kind.TAMPER, "unreadable data on the grader's record channel"))
            return
        if kind == Kind.BUILTIN and not self.testing:
            return
        file, line = str(record.get("f") or ""), record.get("l")
        cell = self._names.get(file.rsplit("/", 1)[-1]) if file else None
        if file and cell is None:
            name = file.rsplit("/", 1)[-1]
            # code IPython compiled that is no cell of the notebook's (its name, a hash of
            # the code, changes with every kernel: the message names no such file)
            where = "code run outside the notebook's cells" if _SNIPPET.match(name) else name
            message = f"{message} (in {where})"
        self.add(
            Finding(kind, message, cell, int(line) if cell and isinstance(line, int) else None)
        )

    def add(self, finding: Finding) -> None:
        """Record a finding once; past _MAX_PER_KIND of a kind, only count it (the last
        finding of the kind then says how many more there were)."""
        if finding in self._known:
            return
        kept = sum(f.kind == finding.kind for f in self.findings)
        if kept < _MAX_PER_KIND:
            self._known.add(finding)
            self.findings.append(finding)
            return
        dropped = self._dropped[finding.kind] = self._dropped.get(finding.kind, 0) + 1
        more = Finding(finding.kind, f"... and {dropped} more of this kind")
        last = max(i for i, f in enumerate(self.findings) if f.kind == finding.kind)
        if self.findings[last].message.startswith("... and "):
            self.findings[last] = more
        else:
            self.findings.append(more)

    @property
    def seen(self) -> set[str]:
        """Names of the built-ins the guard saw called during hidden tests."""
        return {f.message for f in self.findings if f.kind == Kind.BUILTIN}
