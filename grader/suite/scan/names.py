"""The binding model: what a name resolves to. Dotted paths (``torch.nn.functional.softmax``,
``builtin:getattr``; ``path()`` for an instance of a call) are what a name or expression is
bound to; ``_Scope`` follows Python's scopes (parameters and locals shadow module names, class
bodies are not seen from their methods); ``_Bindings`` binds targets, looks names up and
resolves expressions, keeping every module-level binding with where it was made.
"""

from __future__ import annotations

import ast
import builtins
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from functools import lru_cache

from grader.suite.scan.rules import _DUNDER_LOOKUPS, _LOOKUPS, _NAMESPACES


@dataclass(frozen=True)
class _Cell:
    """One code cell of the notebook as the scan reads it (here, below the modules that
    read cells, so that none of them imports another for it)."""

    number: int
    tree: ast.Module
    offset: int  # added to the tree's line numbers to give the cell's
    local: bool  # its functions and classes cannot bind module-level names


_CONVENTIONAL = {  # names read as these modules when the notebook never binds them
    "torch": "torch",
    "nn": "torch.nn",
    "F": "torch.nn.functional",
    "functional": "torch.nn.functional",
    "get_ipython": "IPython.get_ipython",
    "__builtins__": "builtins",
}
_BUILTIN_NAMES = frozenset(dir(builtins))

_SCOPES = (
    ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda,
    ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp,
)  # fmt: skip


def _own_nodes(body: Iterable[ast.AST]) -> Iterator[ast.AST]:
    """A scope's nodes, in order, yielding nested scopes without entering them."""
    stack = list(reversed(list(body)))
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, _SCOPES):
            stack.extend(reversed(list(ast.iter_child_nodes(node))))


def _bound(nodes: Iterable[ast.AST]) -> set[str]:
    """Names these nodes bind in their scope."""
    names: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            names.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update(_alias_name(a) for a in node.names if a.name != "*")
        elif isinstance(node, (ast.ExceptHandler, ast.MatchAs, ast.MatchStar)) and node.name:
            names.add(node.name)
        elif isinstance(node, ast.MatchMapping) and node.rest:
            names.add(node.rest)
    return names


def _alias_name(alias: ast.alias) -> str:
    return alias.asname or alias.name.split(".")[0]


def _scope_names(body: list[ast.stmt]) -> tuple[set[str], set[str], set[str]]:
    """(bound, global, nonlocal) names of a scope's own statements."""
    nodes = list(_own_nodes(body))
    glob = {n for node in nodes if isinstance(node, ast.Global) for n in node.names}
    nonloc = {n for node in nodes if isinstance(node, ast.Nonlocal) for n in node.names}
    return _bound(nodes), glob, nonloc


@lru_cache(maxsize=4096)
def _function_scope(node: ast.FunctionDef | ast.AsyncFunctionDef) -> tuple[frozenset, frozenset]:
    """(local names, names declared global) of a function."""
    names, glob, nonloc = _scope_names(node.body)
    return frozenset(_params(node.args) | names - glob - nonloc), frozenset(glob)


@lru_cache(maxsize=4096)
def _class_scope(node: ast.ClassDef) -> tuple[frozenset, frozenset]:
    names, glob, _ = _scope_names(node.body)
    return frozenset(names - glob), frozenset(glob)


@lru_cache(maxsize=4096)
def _reaches_module(node: ast.AST) -> bool:
    """Whether a def/class body can bind module-level names (global, globals(), a magic)."""
    return any(
        isinstance(n, ast.Global) or isinstance(n, ast.Name) and n.id in ("globals", "get_ipython")
        for n in ast.walk(node)
    )


def _params(args: ast.arguments) -> set[str]:
    every = [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]
    return {a.arg for a in every if a is not None}


def _const(node: ast.AST | None) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


def _join(path: str, attr: str) -> str | None:
    return f"{path}.{attr}" if len(path) < 300 else None


def _paths(paths: Iterable[str | None]) -> set[str]:
    return {p for p in paths if p is not None}


_Env = dict[str, dict[str, tuple[int, int]]]  # name -> {path: (cell, line) of the binding}


@dataclass
class _Scope:
    kind: str  # module, function, class, comprehension
    names: set[str] = field(default_factory=set)
    glob: set[str] = field(default_factory=set)
    env: _Env = field(default_factory=dict)


class _Bindings:
    """Module-level bindings across the notebook and the scopes of the code being read.

    The reader sets the per-pass state (``emit``, and per cell ``cell``, ``offset``,
    ``scopes``, ``_resolved``) and provides ``visit``, for the parts of a target that are read.
    """

    def visit(self, node: ast.AST) -> None:  # the reader's (an ast.NodeVisitor)
        raise NotImplementedError

    def __init__(self, cells: list[_Cell]) -> None:
        self.emit = False  # the recording pass: module-level bindings are then final
        self.cell = 0
        self.offset = 0
        self.scopes: list[_Scope] = [_Scope("module")]
        self._resolved: dict[int, set[str]] = {}
        self.cells = cells
        self.module: _Env = {}
        self.names: set[str] = set()  # every module-level name the notebook binds
        self.defs: set[str] = set()  # module-level def/class names
        for cell in cells:
            for node in _own_nodes(cell.tree.body):
                self.names |= _bound([node])
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    self.defs.add(node.name)

    def bind(self, target: ast.AST, paths: set[str]) -> None:
        if isinstance(target, ast.Name):
            self.bind_name(target.id, paths, target)
        elif isinstance(target, (ast.Tuple, ast.List)):
            for element in target.elts:
                self.bind(element, paths)
        elif isinstance(target, ast.Starred):
            self.bind(target.value, paths)
        else:
            self.visit(target)
            key = _const(target.slice) if isinstance(target, ast.Subscript) else None
            if (
                key is not None
                and isinstance(target, ast.Subscript)
                and "builtin:globals()" in self.resolve(target.value)
            ):
                self.bind_name(key, paths, target, module=True)

    def bind_name(
        self,
        name: str,
        paths: set[str],
        node: ast.AST,
        module: bool = False,
    ) -> None:
        scope = self._binding_scope(name)
        if module or scope.kind == "module" or name in scope.glob:
            if self.emit:
                return
            self.names.add(name)
            env = self.module
        else:
            scope.names.add(name)  # a magic's body can bind names its cell did not show
            env = scope.env
        bound = env.setdefault(name, {})
        for path in paths:
            if len(bound) < 64:
                bound.setdefault(path, (self.cell, self._line(node)))

    def _binding_scope(self, name: str) -> _Scope:
        """The scope a binding of `name` here binds it in (a comprehension's own targets
        only in the comprehension)."""
        scope = self.scopes[-1]
        if scope.kind == "comprehension" and name not in scope.names:
            scope = next(s for s in reversed(self.scopes) if s.kind != "comprehension")
        return scope

    def binds_module(self, name: str) -> bool:
        """Whether binding `name` here binds the module-level name."""
        scope = self._binding_scope(name)
        return scope.kind == "module" or name in scope.glob

    def lookup(self, name: str) -> tuple[str, set[str]]:
        """(where, paths): where is local, module, builtin or unbound."""
        for i, scope in enumerate(reversed(self.scopes)):
            if scope.kind == "module" or name in scope.glob:
                break
            if scope.kind == "class" and i:
                continue
            if name in scope.names:
                return "local", set(scope.env.get(name, {}))
        if name in self.module:
            return "module", set(self.module[name])
        if name in self.names:
            return "module", set()
        if name in _CONVENTIONAL:
            return "module", {_CONVENTIONAL[name]}
        if name in _BUILTIN_NAMES:
            return "builtin", {f"builtin:{name}"}
        return "unbound", set()

    def resolve(self, node: ast.AST) -> set[str]:
        """Dotted paths the expression is (an instance of a call: 'path()')."""
        if isinstance(node, ast.Name):
            return self.lookup(node.id)[1]
        if id(node) not in self._resolved:
            self._resolved[id(node)] = self._resolve(node)
        return self._resolved[id(node)]

    def _resolve(self, node: ast.AST) -> set[str]:
        if isinstance(node, ast.Attribute):
            return _paths(_join(p, node.attr) for p in self.resolve(node.value))
        if isinstance(node, ast.Subscript):
            base, key = self.resolve(node.value), _const(node.slice)
            if key is None:
                return base
            found = {p[: -len(".__dict__")] + f".{key}" for p in base if p.endswith(".__dict__")}
            found |= {key for p in base if p == "sys.modules"}
            return found or base
        if isinstance(node, ast.Call):
            return self._resolve_call(node)
        if isinstance(node, ast.NamedExpr):
            return self.resolve(node.value)
        return set()

    def _resolve_call(self, node: ast.Call) -> set[str]:
        called = self.resolve(node.func)
        found = {f"{p}()" for p in called if not p.startswith("builtin:")}
        found |= {f"{p}()" for p in called & _NAMESPACES if not node.args}
        looked_up = self._looked_up(node, called)
        attr = _const(looked_up[1]) if looked_up else None
        if looked_up and attr and not called & {"builtin:hasattr"}:
            found |= _paths(_join(p, attr) for p in self.resolve(looked_up[0]))
        if "builtin:vars" in called and len(node.args) == 1:
            found |= _paths(_join(p, "__dict__") for p in self.resolve(node.args[0]))
        module = _const(node.args[0]) if node.args else None
        if called & {"importlib.import_module", "builtin:__import__"} and module:
            found |= {module, module.split(".")[0]}
        return found

    @staticmethod
    def _looked_up(node: ast.Call, called: set[str]) -> tuple[ast.expr, ast.expr] | None:
        """(object, name) of getattr-like calls: getattr(o, n), o.__getattribute__(n),
        type(o).__getattribute__(o, n), setattr, delattr, hasattr and their dunders."""
        if called & _LOOKUPS:
            return (node.args[0], node.args[1]) if len(node.args) > 1 else None
        func = node.func
        if not isinstance(func, ast.Attribute) or func.attr not in _DUNDER_LOOKUPS:
            return None
        if len(node.args) > _DUNDER_LOOKUPS[func.attr]:  # type(o).__getattribute__(o, n)
            return node.args[0], node.args[1]
        return (func.value, node.args[0]) if node.args else None

    def _reached(self, node: ast.AST) -> set[str]:
        """Paths to check at this node. Through a local, only the attributes and items
        reached beyond what it was bound to (that was checked where it was bound): a
        function's own ``import torch.nn.functional as F`` still makes ``F.softmax``
        torch's."""
        root = node
        while isinstance(root, (ast.Attribute, ast.Subscript, ast.Call)):
            root = root.func if isinstance(root, ast.Call) else root.value
        if isinstance(root, ast.Name):
            where, bound = self.lookup(root.id)
            if where == "local":
                if not isinstance(node, (ast.Attribute, ast.Subscript)):
                    return set()
                return self.resolve(node) - bound
        return self.resolve(node)

    def carried(self, node: ast.AST) -> set[str]:
        """What a binding of this expression carries: what it is, and for calls, containers
        and operators what it is made of."""
        found = self.resolve(node)
        if isinstance(node, ast.Call):
            for arg in [*node.args, *(k.value for k in node.keywords)]:
                found |= self.carried(arg)
        elif isinstance(node, ast.Lambda):
            found |= self.carried(node.body)
        elif not isinstance(node, (ast.Name, ast.Attribute, ast.Subscript)):
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.expr):
                    found |= self.carried(child)
        return found

    def _line(self, node: ast.AST) -> int:
        return getattr(node, "lineno", 1) + self.offset
