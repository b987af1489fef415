"""What a pass records and the verdict: ``SourceFinding`` and ``ScanResult``, and ``_Recorder``,
which notes each path the code reaches (machinery, or a built-in reference with the
module-level names whose code it is part of), the module-level names each one's code reads,
and at the end turns all of it, for the code the graded names reach, into the ordered
findings.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from grader.suite.scan.names import _Bindings, _const
from grader.suite.scan.rules import _CHECK_NAME, _NAMESPACE_OBJECTS, _machinery

if TYPE_CHECKING:
    from grader.suite.scan.names import _Cell


@dataclass(frozen=True)
class SourceFinding:
    """One thing the scan saw, located by cell and line: `cell` is the notebook's cell number
    (all cells count, from 1, as on the card) where the sources scanned knew it
    (`CellSource`, `in_notebook`), else the place among the sources (code cells, from 1)."""

    cell: int
    line: int
    message: str
    # the notebook function/class it is in, or the module-level name whose value or object
    # it is part of; None: top-level code, or a built-in reference no graded object reaches
    inside: str | None = None
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


_NAMESPACE = "globals()"  # holds what is written into the namespace by computed name


@dataclass
class _Ref:
    """A built-in reference as recorded: `owner` is the top-level function or class it is
    in (None at top level), `holders` every module-level name whose code it is part of."""

    finding: SourceFinding
    owner: str | None
    holders: set[str]


class _Recorder(_Bindings):
    """The bindings plus what the recording pass sees; the reader walks, this records.

    Code belongs to *holders*, module-level names: a function's or class's body, decorators,
    defaults and bases to its name; a top-level binding's value to the names it binds; what
    is written into an object (``M.forward = ...``, ``setattr(M, ...)``, ``table[k] = ...``,
    ``table.update(...)``) to the name that holds the object; what is written into the
    namespace by computed name to ``_NAMESPACE``. The graded code is what the graded names
    reach through the module-level names their code reads, and through the functions they
    are handed to that write into a parameter (``install(M)`` with ``cls.forward = ...``)."""

    def __init__(
        self,
        forbidden: frozenset[str],
        cells: list[_Cell],
        private: re.Pattern[str] | None,
        graded: frozenset[str] | None,
    ) -> None:
        super().__init__(cells)
        self.forbidden = forbidden
        self.private = private
        self.graded = graded
        self._builtins: dict[str, str | None] = {}
        # what one pass records (`begin` empties it)
        self.refs: dict[tuple[int, int, str], _Ref] = {}  # by (cell, line, built-in)
        self.flags: list[SourceFinding] = []  # machinery and magics
        self.reads: dict[str, set[tuple[str, str]]] = {}  # holder -> (module name, qualname)
        self.reads_all: dict[str, str] = {}  # holder -> qualname, for globals()
        self.handed: dict[str, set[str]] = {}  # module name -> functions it is passed to
        self.mutators: set[str] = set()  # top-level functions that write into a parameter
        self.owners: list[str] = []
        self.params: list[set[str]] = []  # the parameters of the functions being read
        self.attached: list[set[str]] = []  # names the value being read is written into

    def begin(self, emit: bool) -> None:
        """Start a pass: forget what the last one recorded."""
        self.emit = emit
        self.refs = {}
        self.flags = []
        self.reads = {}
        self.reads_all = {}
        self.handed = {}
        self.mutators = set()
        self.owners = []
        self.params = []
        self.attached = []

    def holders(self) -> set[str]:
        """The module-level names the code being read belongs to."""
        return set(self.owners[:1]).union(*self.attached)

    def read_module_name(self, name: str) -> None:
        """Record that the code being read reads module-level `name`."""
        qualname = self.owners[-1] if self.owners else None
        for holder in self.holders():
            self.reads.setdefault(holder, set()).add((name, qualname or holder))

    def written(self, target: ast.AST) -> set[str]:
        """The module-level names a binding target binds or writes into: ``x`` where it is
        the module's, ``M.forward``, ``table[k]``, ``globals()["f"]``; ``globals()[name]``
        writes the namespace (`_NAMESPACE`)."""
        if isinstance(target, (ast.Tuple, ast.List)):
            return set().union(*(self.written(e) for e in target.elts))
        if isinstance(target, ast.Starred):
            return self.written(target.value)
        if isinstance(target, ast.Name):
            return {target.id} if self.binds_module(target.id) else set()
        return self.holder(target, patches=True)

    def holder(self, node: ast.AST, patches: bool = False) -> set[str]:
        """The module-level name whose object an attribute or item chain reaches into
        (`_NAMESPACE` for the namespace). `patches`: the chain is written, so a top-level
        function writing into its parameter's object is a mutator (it patches what it is
        handed)."""
        while isinstance(node, (ast.Attribute, ast.Subscript)):
            if isinstance(node, ast.Subscript) and self.resolve(node.value) & _NAMESPACE_OBJECTS:
                return {_const(node.slice) or _NAMESPACE}
            node = node.value
        if self.resolve(node) & _NAMESPACE_OBJECTS:
            return {_NAMESPACE}
        if not isinstance(node, ast.Name):
            return set()
        where = self.lookup(node.id)[0]
        top_function = len(self.owners) == len(self.params) == 1  # not a method's `self`
        if patches and where == "local" and top_function and node.id in self.params[0]:
            self.mutators.add(self.owners[0])
        return {node.id} if where == "module" else set()

    def changed(self, node: ast.Call, called: set[str]) -> set[str]:
        """The module-level names whose objects a call can change with its arguments:
        ``setattr(M, ...)`` (and delattr and the dunder forms), ``table.update(...)`` (a
        method of an object the notebook made, or of the namespace)."""
        func = node.func
        if called & {"builtin:setattr", "builtin:delattr"} and node.args:
            return self.holder(node.args[0], patches=True)
        if isinstance(func, ast.Attribute) and func.attr in ("__setattr__", "__delattr__"):
            looked_up = self._looked_up(node, called)
            return self.holder(looked_up[0], patches=True) if looked_up else set()
        if not isinstance(func, ast.Attribute):
            return set()
        return {name for name in self.holder(func.value) if self._made(name)}

    def _made(self, name: str) -> bool:
        """Whether a module-level name holds an object the notebook made or defined, not a
        module or an imported name (whose methods every self-check calls:
        ``torch.testing.assert_close(...)``)."""
        paths = self.module.get(name, {})
        return name == _NAMESPACE or name in self.names and all("(" in p for p in paths)

    def handed_to(self, node: ast.Call, arguments: list[ast.expr]) -> None:
        """Module-level names passed to a notebook function, which may patch them."""
        if isinstance(node.func, ast.Name) and self.lookup(node.func.id)[0] == "module":
            for arg in arguments:
                if isinstance(arg, ast.Name) and self.lookup(arg.id)[0] == "module":
                    self.handed.setdefault(arg.id, set()).add(node.func.id)

    def result(self) -> ScanResult:
        reached = self._reachable()
        bindings = self._bindings(reached)
        bound_at = {(f.cell, f.line) for f in bindings}
        refs, findings = [], list(bindings)
        for ref in self.refs.values():
            if not ref.holders & reached:
                refs.append(replace(ref.finding, inside=None))
                continue
            refs.append(ref.finding)
            # a binding's value is reported as the binding (the use is reported too)
            inside = ref.owner is not None and ref.owner in reached
            if inside or (ref.finding.cell, ref.finding.line) not in bound_at:
                findings.append(ref.finding)
        builtins, notes = _ordered(findings), _ordered(self.flags)
        return ScanResult(_ordered(refs), _ordered([*self.flags, *findings]), builtins, notes)

    def _roots(self) -> set[str]:
        """The graded names; without them, every def and class not named like a check."""
        if self.graded is None:
            return {n for n in self.defs if not _CHECK_NAME.match(n)} | {_NAMESPACE}
        return set(self.graded) | {_NAMESPACE}

    def _reachable(self) -> set[str]:
        """The module-level names the graded names reach (themselves included)."""
        edges = {holder: {name for name, _ in read} for holder, read in self.reads.items()}
        for name, functions in self.handed.items():  # a function that patches what it is handed
            edges.setdefault(name, set()).update(functions & self.mutators)
        reached: set[str] = set()
        todo = list(self._roots())
        while todo:
            name = todo.pop()
            if name not in reached:
                reached.add(name)
                todo += edges.get(name, set()) | (self.names if name in self.reads_all else set())
        return reached

    def _bindings(self, reached: set[str]) -> list[SourceFinding]:
        """Where a name the graded code reads, or a graded name, is bound to a built-in."""
        found, said = [], set()
        for name, user in self._users(reached):
            for path, (cell, line) in self.module.get(name, {}).items():
                builtin = self._builtin(path)
                if not builtin or user is None and (cell, line, name) in said:
                    continue
                said.add((cell, line, name))
                whose = "" if builtin.startswith("torch.") else "torch's "
                if user:
                    message = f"binds {name} to {whose}{builtin}, which {user} uses"
                else:
                    message = f"binds {name}, a graded name, to {whose}{builtin}"
                found.append(SourceFinding(cell, line, message))
        return found

    def _users(self, reached: set[str]) -> list[tuple[str, str | None]]:
        """(module-level name, the code that reads it) for every name the graded code
        reads; (graded name, None) for the graded names."""
        users: list[tuple[str, str | None]] = []
        for holder in sorted(reached):
            users += sorted(self.reads.get(holder, ()))
            if holder in self.reads_all:
                users += [(name, self.reads_all[holder]) for name in sorted(self.module)]
        return users + [(name, None) for name in sorted(self._roots() - {_NAMESPACE})]

    def check(self, path: str, node: ast.AST, alias: str | None = None) -> None:
        """Record a path the code reaches: machinery, or a built-in reference."""
        why = _machinery(path)
        if why:
            self.flag(node, why)
        builtin = self._builtin(path)
        if not builtin or not self.emit:
            return
        place = (self.cell, self._line(node), builtin)
        holders = self.holders()
        if place in self.refs:  # one per built-in and line
            self.refs[place].holders |= holders
            return
        named = f" (as {alias})" if alias and alias != builtin else ""
        private = ", a private torch name" if builtin.startswith("torch.") else ""
        owner = self.owners[0] if self.owners else None
        inside = self.owners[-1] if self.owners else min(holders, default=None)
        finding = SourceFinding(*place[:2], f"uses {builtin}{named}{private}", inside)
        self.refs[place] = _Ref(finding, owner, holders)

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
