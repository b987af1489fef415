"""The visitor: ``_Reader`` walks every cell's statements and expressions in Python's
scopes, binding names as it goes, recording what each reference reaches, and reading the
Python inside magics (``%time``, ``%%timeit``, ...) in place. ``read(emit=False)`` collects
module-level bindings; ``read(emit=True)`` records references, uses and machinery.
"""

from __future__ import annotations

import ast
import re

from grader.suite.scan.cells import _magic_call, _parse, _statement
from grader.suite.scan.findings import _Recorder
from grader.suite.scan.names import (
    _alias_name,
    _Cell,
    _class_scope,
    _const,
    _function_scope,
    _params,
    _reaches_module,
    _Scope,
)
from grader.suite.scan.rules import (
    _CODE_LINE,
    _HARMLESS_LINE,
    _INSTALL,
    _INTERNALS,
    _LOOKUPS,
    _MACHINERY,
    _MAX_DEPTH,
    _NAMESPACE_OBJECTS,
    _PYTHON_CELL,
    _PYTHON_FILE,
    _PYTHON_LINE,
    _SETTINGS_LINE,
    _SHELL_LINE,
)


class _Reader(_Recorder):
    """Walks every cell with Python's scopes; `read(emit=False)` collects module-level
    bindings, `read(emit=True)` records references, uses and machinery."""

    def __init__(
        self,
        forbidden: frozenset[str],
        cells: list[_Cell],
        private: re.Pattern[str] | None,
        graded: frozenset[str] | None = None,
    ) -> None:
        super().__init__(forbidden, cells, private, graded)
        self.depth = 0  # magic bodies read inside magic bodies
        self.local = False  # the cell's functions and classes cannot bind module names

    # - passes -

    def read(self, emit: bool) -> bool:
        """One pass over all cells; returns whether module bindings grew."""
        before = sum(len(paths) for paths in self.module.values())
        self.begin(emit)
        self.depth = 0
        for cell in self.cells:
            self.cell, self.offset, self.local = cell.number, cell.offset, cell.local
            self.scopes = [_Scope("module")]
            self._resolved = {}
            self.body(cell.tree.body)
        return sum(len(paths) for paths in self.module.values()) != before

    # - statements -

    def body(self, statements: list[ast.stmt]) -> None:
        for statement in statements:
            self.visit(statement)

    def visit(self, node: ast.AST) -> None:
        handler = _HANDLERS.get(type(node))
        if handler is not None:
            handler(self, node)
        else:
            for child in ast.iter_child_nodes(node):
                self.visit(child)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self.check(alias.name, node)
            bound = alias.name if alias.asname else alias.name.split(".")[0]
            self.bind_name(_alias_name(alias), {bound}, node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = "." * node.level + (node.module or "")
        for alias in node.names:
            if alias.name == "*":
                self.check(module, node)
                self._star(module, node)
                continue
            path = f"{module}.{alias.name}"
            self.check(path, node)
            self.bind_name(_alias_name(alias), {path}, node)

    def _star(self, module: str, node: ast.AST) -> None:
        if module.split(".")[0] == "torch":
            for name in self.forbidden - self.defs:
                self.bind_name(name, {f"{module}.{name}"}, node)
        for key in _MACHINERY:
            rest = key[len(module) + 1 :].rstrip("*")
            if key.startswith(f"{module}.") and rest and "." not in rest:
                self.bind_name(rest, {key.rstrip("*")}, node)

    def visit_Assign(self, node: ast.Assign) -> None:
        self.value(set().union(*(self.written(t) for t in node.targets)), node.value)
        paths = self.carried(node.value)
        for target in node.targets:
            self.bind(target, paths)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self.value(self.written(node.target), node.value)
            self.bind(node.target, self.carried(node.value))
        elif not isinstance(node.target, ast.Name):
            self.visit(node.target)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self.value(self.written(node.target), node.value)
        if isinstance(node.target, ast.Name):
            self.visit(ast.copy_location(ast.Name(node.target.id, ast.Load()), node.target))
        self.bind(node.target, self.carried(node.value))

    def visit_NamedExpr(self, node: ast.NamedExpr) -> None:
        self.value(self.written(node.target), node.value)
        self.bind(node.target, self.carried(node.value))

    def visit_For(self, node: ast.For | ast.AsyncFor) -> None:
        self.value(self.written(node.target), node.iter)
        self.bind(node.target, self.carried(node.iter))
        self.body(node.body)
        self.body(node.orelse)

    visit_AsyncFor = visit_For

    def visit_With(self, node: ast.With | ast.AsyncWith) -> None:
        for item in node.items:
            into = set() if item.optional_vars is None else self.written(item.optional_vars)
            self.value(into, item.context_expr)
            if item.optional_vars is not None:
                self.bind(item.optional_vars, self.carried(item.context_expr))
        self.body(node.body)

    visit_AsyncWith = visit_With

    def value(self, into: set[str], *nodes: ast.AST) -> None:
        """Read a value that is bound to or written into these module-level names: it is
        part of their code."""
        self.attached.append(into)
        for node in nodes:
            self.visit(node)
        self.attached.pop()

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.owners.append(self._qualname(node.name))
        for expr in [*node.decorator_list, *node.args.defaults, *node.args.kw_defaults]:
            if expr is not None:
                self.visit(expr)
        if self.emit or not self.local and _reaches_module(node):
            names, glob = _function_scope(node)
            self.scopes.append(_Scope("function", set(names), set(glob)))
            self.params.append(_params(node.args))
            self.body(node.body)
            self.params.pop()
            self.scopes.pop()
        self.owners.pop()
        self.bind_def(node)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.owners.append(self._qualname(node.name))
        for expr in [*node.decorator_list, *node.bases, *(k.value for k in node.keywords)]:
            self.visit(expr)
        if self.emit or not self.local and _reaches_module(node):
            names, glob = _class_scope(node)
            self.scopes.append(_Scope("class", set(names), set(glob)))
            self.body(node.body)
            self.scopes.pop()
        self.owners.pop()
        self.bind_def(node)

    def bind_def(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> None:
        if self.binds_module(node.name):
            self.defs.add(node.name)  # a magic's body can define what its cell did not show
        self.bind_name(node.name, set(), node)

    def _qualname(self, name: str) -> str:
        return f"{self.owners[-1]}.{name}" if self.owners else name

    def visit_Lambda(self, node: ast.Lambda) -> None:
        for expr in [*node.args.defaults, *node.args.kw_defaults]:
            if expr is not None:
                self.visit(expr)
        self.scopes.append(_Scope("function", _params(node.args)))
        self.visit(node.body)
        self.scopes.pop()

    def visit_ListComp(self, node: ast.ListComp | ast.SetComp | ast.GeneratorExp) -> None:
        first, *others = node.generators
        self.visit(first.iter)
        targets = {n.id for g in node.generators for n in ast.walk(g.target)
                   if isinstance(n, ast.Name)}  # fmt: skip
        self.scopes.append(_Scope("comprehension", targets))
        for i, generator in enumerate(node.generators):
            if i:
                self.visit(generator.iter)
            self.bind(generator.target, self.carried(generator.iter))
            for condition in generator.ifs:
                self.visit(condition)
        for part in (node.key, node.value) if isinstance(node, ast.DictComp) else (node.elt,):
            self.visit(part)
        self.scopes.pop()

    visit_SetComp = visit_GeneratorExp = visit_DictComp = visit_ListComp

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> None:
        if node.type is not None:
            self.visit(node.type)
        if node.name:
            self.bind_name(node.name, set(), node)
        self.body(node.body)

    # - expressions -

    def visit_Name(self, node: ast.Name, callee: bool = False) -> None:
        if not isinstance(node.ctx, ast.Load):
            return
        kind, paths = self.lookup(node.id)
        if kind == "module":
            self.read_module_name(node.id)
        if kind == "local":
            return  # what a local holds was reported where the function bound it
        if not callee and paths & _LOOKUPS:
            self.flag(node, f"uses {node.id} as a value, a look-up by computed name")
        for path in paths:
            self.check(path, node, alias=node.id)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        self.visit(node.value)
        if not isinstance(node.ctx, ast.Load):
            return
        if node.attr in _INTERNALS:
            self.flag(node, f"reaches {node.attr}, a function or frame internal")
        if node.attr == "run_in_executor":
            self.flag(node, f"uses run_in_executor, which {_MACHINERY['threading']}")
        if node.attr == "__dict__" and self._torch_namespace(node.value):
            self.flag(node, "reads a torch namespace's __dict__, a look-up by string")
        for path in self._reached(node):
            self.check(path, node)

    def visit_Subscript(self, node: ast.Subscript) -> None:
        self.visit(node.value)
        self.visit(node.slice)
        if isinstance(node.ctx, ast.Load):
            for path in self._reached(node):
                self.check(path, node)
            return
        base = self.resolve(node.value)
        if base & _NAMESPACE_OBJECTS and _const(node.slice) is None:
            self.flag(node, "writes the notebook's namespace by computed name")

    def visit_Call(self, node: ast.Call) -> None:
        magic = _magic_call(node)
        if magic is not None:
            self.magic(node, *magic)
            return
        if isinstance(node.func, ast.Name):
            self.visit_Name(node.func, callee=True)
        else:
            self.visit(node.func)
        called = self.resolve(node.func)
        looked_up = self._looked_up(node, called)
        arguments = [*node.args, *(k.value for k in node.keywords)]
        self.value(self.changed(node, called), *arguments)
        self.handed_to(node, arguments)
        if looked_up:
            target, name = looked_up[0], _const(looked_up[1])
            if name in _INTERNALS:
                self.flag(node, f"reaches {name}, a function or frame internal")
            elif name is None and self._torch_namespace(target):
                self.flag(node, "looks up a torch attribute by a computed name")
        if "builtin:vars" in called and node.args and self._torch_namespace(node.args[0]):
            self.flag(node, "reads a torch namespace with vars(), a look-up by string")
        if "builtin:globals" in called and not node.args:
            for holder in self.holders():
                self.reads_all[holder] = self.owners[-1] if self.owners else holder
        for path in self._reached(node):
            self.check(path, node)

    def visit_Constant(self, node: ast.Constant) -> None:
        """Strings are not references."""

    # - magics -

    def magic(self, node: ast.Call, method: str, args: list[str]) -> None:
        if method in ("system", "getoutput"):
            command = args[0] if args else ""
            if not _INSTALL.match(command):
                self.flag(node, f"ran a shell command: {_shortened(command)}")
        elif method == "run_line_magic":
            self._line_magic(node, args[0], args[1])
        else:
            self._cell_magic(node, *args)

    def _line_magic(self, node: ast.Call, name: str, line: str) -> None:
        if name in _PYTHON_LINE:
            self.code(_statement(line, _PYTHON_LINE[name]), node, self._line(node) - 1)
        elif name in _SHELL_LINE:
            if not _INSTALL.match(f"{name} {line}"):
                self.flag(node, f"ran a shell command: %{name} {_shortened(line)}".rstrip())
        elif name in _CODE_LINE:
            self.flag(node, f"runs %{name}, which brings in code the scan does not see")
        elif name in _SETTINGS_LINE:
            self.flag(node, f"uses %{name}, which changes how the kernel runs")
        elif name not in _HARMLESS_LINE:
            self.flag(node, f"uses %{name}, a magic the scan does not know")

    def _cell_magic(self, node: ast.Call, name: str, line: str, body: str) -> None:
        if name == "timeit":
            self.code(_statement(line, _PYTHON_LINE["timeit"]), node, self._line(node) - 1)
        if name == "writefile":
            target = re.sub(r"(^|\s)(-a|--append)(?=\s|$)", " ", line).strip().strip("'\"")
            if not _PYTHON_FILE.match(target) and not re.search(r"[{$]", target):
                return
            self.flag(node, f"writes a Python file that is then outside the cells ({target})")
        elif name not in _PYTHON_CELL:
            self.flag(node, f"runs its body outside the scanned cells (%%{name})")
            return
        self.code(body, node, self._line(node))

    def code(self, source: str, node: ast.AST, offset: int) -> None:
        """Read a magic's Python (a statement or body) in place, in the current scope."""
        if self.depth >= _MAX_DEPTH:
            self.flag(node, "nests magics too deep to scan")
            return
        tree, lead, _ = _parse(source)
        if tree is None:
            return
        self._resolved.clear()  # the same text can come back in another scope
        saved, self.offset = self.offset, offset + lead
        self.depth += 1
        self.body(tree.body)
        self.depth -= 1
        self.offset = saved


_HANDLERS = {
    getattr(ast, name[6:]): method
    for name, method in vars(_Reader).items()
    if name.startswith("visit_") and hasattr(ast, name[6:])
}


def _shortened(text: str, limit: int = 80) -> str:
    """A command as the card shows it: one line, at most `limit` characters."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
