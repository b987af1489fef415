"""Static integrity scan: what the candidate's cells bind to torch's attention built-ins, and
the machinery an evasion would need.

The scan reads the source IPython runs: every code cell goes through IPython's own
``TransformerManager`` (``%magic`` and ``!cmd`` become ``get_ipython()`` calls), and a
one-line cell whose first word is a line magic the notebook does not shadow runs as that
magic, as IPython's automagic does. Cells share one namespace and are read in notebook
order; a cell that still does not parse runs nothing and is skipped.

Rules
-----
Bindings. A name is bound to what its binding resolves to: imports (``import torch.nn as
tnn``, ``from torch.nn.functional import scaled_dot_product_attention as sdpa``),
assignments and ``for``/``with``/``:=`` targets (``f = F.softmax``, tuples and containers
carry everything in them), ``globals()["f"] = ...``, ``getattr(m, "name")``,
``vars(m)[...]``/``m.__dict__[...]``/``sys.modules[...]``, ``importlib.import_module``/
``__import__`` with a constant, and calls (``m = nn.MultiheadAttention(8, 2)``: an instance
of what was called). Python's scopes are followed: parameters and locals shadow module
names, class bodies are not seen from their methods. A module-level name is *torch-bound*
when any binding anywhere in the notebook binds it to torch (flow-insensitive, so
conservative); the notebook's own ``def``/``class`` of a name binds it to nothing from
torch, so a from-scratch ``def scaled_dot_product_attention`` is not the built-in.
``torch``, ``nn``, ``F`` and ``functional`` that the notebook never binds are read as the
usual modules. Strings, comments and docstrings are never read, except a constant that is
the name in one of the look-ups above.

Built-in references are references that resolve to torch and name one of the exercise's
``forbidden`` built-ins, or a private torch name for attention or a part of it
(``torch._scaled_dot_product_flash_attention_for_cpu``, ``F._in_projection_packed``).
``scan_cells`` reports every one in ``ScanResult.references`` with where it sits. It is a
*finding* only when it is inside a function or class the notebook defines (what the graded
objects run; decorators, defaults and bases included, annotations not), or when it sits at
top level in the binding of a name such a function or class uses (reported at the use and
at the binding). Top-level code that only checks the candidate's work against
``nn.MultiheadAttention`` is not a finding. Check functions count as top-level code: a
top-level function or class named like a check (``test*``, ``check*``, ``compare*``,
``verify*``, ``validate*``, ``sanity*``, ``demo*``, ``run_*``, ``*test(s)``, ``main``;
leading underscores ignored) that the notebook only calls as a bare statement (at top
level or from another check function), that writes no notebook-level state (no
``global``/``nonlocal``, ``setattr``/``delattr``, ``globals()``, assignment to an attribute
or item of a module-level name, attribute of the notebook's own functions and classes) and
that reads no assigned module-level name the implementation also reads. No graded name in
the catalog looks like a check (a test keeps it so).

Machinery is a finding wherever it appears, check code included (``_MACHINERY``,
``_INTERNALS``): threads and processes, native code, heap and frame walking, tracers and
hooks, ``sys.modules``, ``builtins``, torch's operator, mode and compiler internals,
string execution (``eval``/``exec``/``compile``/``__import__``/``importlib``,
``timeit``/``doctest``/``runpy``/...), look-ups by computed name on torch objects
(``getattr``/``setattr``/``delattr``/``hasattr`` and their dunders, ``vars``,
``__dict__``), look-ups by string (``operator.attrgetter``, ``pydoc.locate``),
deserialisation, the grader's own package, shell commands and ``get_ipython()`` used by
hand.

Magics. Cell magics ``time``, ``timeit``, ``capture`` and ``prun`` run their body (and
``timeit`` its setup line) as Python: it is scanned as if it stood in the cell.
``%%writefile`` to a Python file is a finding and its body is scanned; any other cell magic
is a finding (its body runs outside the scanned cells). Line magics ``time``, ``timeit``,
``prun`` have their statement scanned; ``_HARMLESS_LINE`` are not findings; every other
line magic is (``_SHELL_LINE``, ``_CODE_LINE``, ``_SETTINGS_LINE``, unknown ones). ``!cmd``
is a finding.

The scan is conservative but not complete (code can still mutate a shared object, or
build a callable at run time); the run-time watch sees what the graded objects call.
Line numbers are the cell's own, except after a magic continued with ``\\`` over several
lines, which IPython joins into one.
"""

from __future__ import annotations

import ast
import builtins
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from functools import cache, lru_cache

_CONVENTIONAL = {  # names read as these modules when the notebook never binds them
    "torch": "torch",
    "nn": "torch.nn",
    "F": "torch.nn.functional",
    "functional": "torch.nn.functional",
    "get_ipython": "IPython.get_ipython",
    "__builtins__": "builtins",
}
_BUILTIN_NAMES = frozenset(dir(builtins))


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


def _group(names: str, why: str) -> dict[str, str]:
    return dict.fromkeys(names.split(), why)


_MACHINERY = {  # dotted prefix ('*': any continuation) -> why it is a finding anywhere
    **_group(
        "threading _thread concurrent.futures multiprocessing torch.multiprocessing "
        "asyncio.to_thread",
        "can run code the grader does not watch",
    ),
    **_group("ctypes cffi", "calls native code directly"),
    "torch.utils.cpp_extension": "compiles native code",
    **_group("gc.get_objects gc.get_referrers gc.get_referents", "walks the heap to reach objects"),
    **_group(
        "inspect.currentframe inspect.stack inspect.trace inspect.getouterframes "
        "inspect.getinnerframes inspect.getclosurevars inspect.getgeneratorlocals "
        "inspect.getcoroutinelocals inspect.unwrap sys._getframe sys._current_frames",
        "reads frames or closures",
    ),
    **_group("sys.settrace sys.setprofile sys.monitoring sys.addaudithook", "installs a hook"),
    **_group("sys.modules __main__ builtins", "reaches modules or builtins by name"),
    **_group("sys.meta_path sys.path_hooks", "changes how imports work"),
    **_group("importlib builtin:__import__", "imports by computed name"),
    **_group("torch.library torch.ops", "calls or overrides torch operators directly"),
    **_group("torch.overrides torch.utils._python_dispatch", "manipulates torch's modes"),
    **_group("torch._C torch._dynamo", "reaches into torch's internals"),
    **_group(
        "torch.jit.load torch.package torch.hub pickle marshal dill cloudpickle",
        "loads code the scan does not see",
    ),
    **_group(
        "builtin:eval builtin:exec builtin:compile code codeop runpy doctest timeit.timeit "
        "timeit.repeat timeit.Timer cProfile.run cProfile.runctx profile.run profile.runctx "
        "pdb.run pdb.runeval pdb.runctx",
        "runs code from a string",
    ),
    **_group(
        "operator.attrgetter operator.methodcaller pydoc.locate pkgutil.resolve_name",
        "looks up objects by string",
    ),
    **_group(
        "builtin:globals().update builtin:globals().setdefault builtin:globals().__setitem__ "
        "builtin:vars().update builtin:locals().update",
        "writes the notebook's namespace by computed name",
    ),
    **_group("grader exercises", "reaches the grader's own code"),
    **_group("subprocess os.system os.popen", "runs a shell command"),
    **_group("os.fork* os.exec* os.spawn* os.posix_spawn* posix pty", "starts a process"),
    **_group(
        "IPython.get_ipython IPython.core ipykernel", "can run code outside the scanned cells"
    ),
}
_INTERNALS = _words(
    "__code__ __closure__ __globals__ __wrapped__ __subclasses__ __builtins__ co_consts co_code "
    "co_names f_back f_locals f_globals f_builtins f_code tb_frame gi_frame cr_frame ag_frame"
)
_NAMESPACES = frozenset({"builtin:globals", "builtin:vars", "builtin:locals"})
_LOOKUPS = frozenset({"builtin:getattr", "builtin:setattr", "builtin:delattr", "builtin:hasattr"})
_DUNDER_LOOKUPS = {"__getattribute__": 1, "__getattr__": 1, "__delattr__": 1, "__setattr__": 2}

# IPython 9 with ipykernel: every line magic and alias, for automagic one-line cells
_LINE_MAGICS = _words(
    """alias alias_magic autoawait autocall automagic autosave bookmark cat cd clear code_wrap
    colors conda config connect_info cp debug dhist dirs doctest_mode ed edit env gui hist
    history killbgscripts ldir less lf lk ll load load_ext loadpy logoff logon logstart
    logstate logstop ls lsmagic lx macro magic mamba man matplotlib micromamba mkdir more mv
    notebook page pastebin pdb pdef pdoc pfile pinfo pinfo2 pip popd pprint precision prun
    psearch psource pushd pwd pycat pylab qtconsole quickref recall rehashx reload_ext rep
    rerun reset reset_selective rm rmdir run save sc set_env subshell sx system tb time timeit
    unalias unload_ext uv who who_ls whos xdel xmode autoreload aimport store"""
)
_PYTHON_LINE = {"time": "", "timeit": "nrp", "prun": "DlsT"}  # name -> options taking a value
_PYTHON_CELL = frozenset({"time", "timeit", "capture", "prun"})
_HARMLESS_LINE = _words(
    """matplotlib pylab who who_ls whos pwd precision pinfo pinfo2 pdef pdoc psource pfile
    psearch pycat lsmagic magic quickref history hist xmode colors pprint tb dirs dhist page
    less more man clear automagic doctest_mode pdb logstart logon logoff logstate logstop
    reset reset_selective xdel gui notebook autosave connect_info killbgscripts
    pastebin"""
)
_SHELL_LINE = _words(
    """pip conda mamba micromamba uv sx system sc alias unalias rehashx cat cp ls ll lf lk
    ldir lx mkdir mv rm rmdir"""
)
_CODE_LINE = _words(
    """run load loadpy load_ext reload_ext unload_ext autoreload aimport macro recall rep
    rerun edit ed store save debug code_wrap alias_magic autocall qtconsole"""
)
# Installing a package brings no code into the notebook: the kernel imports only the
# declared grading environment, and pip writes to the scratch space.
_INSTALL = re.compile(
    r"\s*(pip3?|python3? -m pip|conda|mamba|micromamba|uv pip)\s+install\b[^;&|`$<>()\n]*$"
)
_SETTINGS_LINE = _words("config env set_env cd pushd popd bookmark autoawait subshell")
_PYTHON_FILE = re.compile(r".*\.(py|pyw|pyc|pyd|pth|so)$", re.IGNORECASE)
_CHECK_NAME = re.compile(
    r"_*(test|check|compare|verify|validate|sanity|demo|run_)|.*tests?$|main$", re.IGNORECASE
)
_PRIVATE_ATTENTION = re.compile(  # private torch names that compute attention, or part of it
    r"attention|attn|sdp|multi_head|in_projection|transformer|masked_softmax", re.IGNORECASE
)
_MAX_DEPTH = 5  # magic bodies nested deeper than this are a finding, not scanned

_SCOPES = (
    ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda,
    ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp,
)  # fmt: skip


@dataclass(frozen=True)
class Finding:
    """One thing the scan saw, located by code cell (counted from 1) and line."""

    cell: int
    line: int
    message: str
    inside: str | None = None  # the notebook function/class it is in; None: top-level code

    def __str__(self) -> str:
        return f"code cell {self.cell}, line {self.line}: {self.message}"


@dataclass(frozen=True)
class ScanResult:
    """Every torch built-in reference with where it sits, and the findings among them."""

    references: tuple[Finding, ...]
    findings: tuple[Finding, ...]


def scan(sources: list[str], forbidden: tuple[str, ...]) -> list[str]:
    """Findings like 'code cell 3, line 7: uses scaled_dot_product_attention' (cells count
    from 1 among code cells), in cell and line order."""
    return [str(finding) for finding in scan_cells(sources, forbidden).findings]


def scan_cells(sources: list[str], forbidden: tuple[str, ...]) -> ScanResult:
    """Scan the code cells' source (in notebook order) against the module docstring's rules."""
    cells = _read_cells(sources)
    reader = _Reader(frozenset(forbidden), cells)
    for _ in range(4):  # bindings to a fixpoint: a later cell can bind a name used earlier
        if not reader.read(emit=False):
            break
    reader.read(emit=True)
    return reader.result()


# -- reading cells ---------------------------------------------------------------------------


@cache
def _transformer():
    from IPython.core.inputtransformer2 import TransformerManager  # lazy: IPython is heavy

    return TransformerManager()


_PROMPT = re.compile(r"^(>>>|In \[\d+\]: |\s*\.\.\.+: )", re.MULTILINE)


@lru_cache(maxsize=4096)
def _parse(source: str) -> tuple[ast.Module | None, int, str]:
    """(tree, leading blank lines IPython dropped, text) of source as IPython runs it.

    Source that already parses as Python, with no prompt for IPython to strip, is what
    IPython runs: its transforms only rewrite what is not Python (tests check this)."""
    if not _PROMPT.search(source):
        try:
            return ast.parse(source), 0, source
        except (SyntaxError, ValueError, RecursionError):
            pass
    try:
        text = _transformer().transform_cell(source)
        lines = source.splitlines()
        lead = next((i for i, line in enumerate(lines) if line.strip()), 0)
    except Exception:  # IPython's transformer can fail on odd input; read it as it is
        text, lead = source, 0
    try:
        return ast.parse(text), lead, text
    except (SyntaxError, ValueError, RecursionError):
        return None, lead, text


@dataclass(frozen=True)
class _Cell:
    number: int
    tree: ast.Module
    offset: int  # added to the tree's line numbers to give the cell's
    local: bool  # its functions and classes cannot bind module-level names


def _read_cells(sources: list[str]) -> list[_Cell]:
    cells = []
    shadowing = set(_BUILTIN_NAMES)  # names bound so far, which hide a magic's name
    for number, source in enumerate(sources, start=1):
        tree, lead, text = _parse(source)
        magic = _automagic(text)
        if magic and magic[0] not in shadowing:
            tree = ast.parse(f"get_ipython().run_line_magic({magic[0]!r}, {magic[1]!r})")
        if tree is not None:
            shadowing |= _bound(_own_nodes(tree.body))
            local = "global" not in text and "get_ipython" not in text  # globals() too
            cells.append(_Cell(number, tree, lead, local))
    return cells


def _automagic(text: str) -> tuple[str, str] | None:
    """(magic, argument) when IPython would run this one-line cell as a line magic."""
    lines = text.splitlines()
    while lines and not lines[0].strip():
        lines.pop(0)  # as IPython drops leading blank lines; a trailing one makes two lines
    if len(lines) != 1:
        return None
    name, rest = re.match(r"\s*([\w.*]*)(.*)", lines[0]).groups()
    if name not in _LINE_MAGICS or rest.lstrip()[:1] in ("=", ","):
        return None
    return name, rest.strip()


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


_STARRED = tuple((key[:-1], why) for key, why in _MACHINERY.items() if key.endswith("*"))
_ROOTS = frozenset(key.split(".")[0].rstrip("*") for key in _MACHINERY)


@lru_cache(maxsize=8192)
def _machinery(path: str) -> str | None:
    """'uses X, which ...' when the path is machinery."""
    parts = path.split(".")
    if parts[0] not in _ROOTS:
        return None
    for i in range(1, len(parts) + 1):
        key = ".".join(parts[:i])
        if key in _MACHINERY:
            return f"uses {_shown(key)}, which {_MACHINERY[key]}"
    for prefix, why in _STARRED:
        if path.startswith(prefix):
            return f"uses {path.split('(')[0]}, which {why}"
    return None


def _shown(key: str) -> str:
    return f"{key[8:]}()" if key.startswith("builtin:") else key


# -- the reader ------------------------------------------------------------------------------

_Env = dict[str, dict[str, tuple[int, int]]]  # name -> {path: (cell, line) of the binding}


@dataclass
class _Scope:
    kind: str  # module, function, class, comprehension
    names: set[str] = field(default_factory=set)
    glob: set[str] = field(default_factory=set)
    env: _Env = field(default_factory=dict)


class _Reader:
    """Walks every cell with Python's scopes; `read(emit=False)` collects module-level
    bindings, `read(emit=True)` records references, uses and machinery."""

    def __init__(self, forbidden: frozenset[str], cells: list[_Cell]) -> None:
        self.forbidden = forbidden
        self.cells = cells
        self.module: _Env = {}
        self.names: set[str] = set()  # every module-level name the notebook binds
        self.defs: set[str] = set()  # module-level def/class names
        self.assigned: set[str] = set()  # module-level names bound by assignment
        self._builtins: dict[str, str | None] = {}
        for cell in cells:
            for node in _own_nodes(cell.tree.body):
                self.names |= _bound([node])
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    self.defs.add(node.name)

    # - passes -

    def read(self, emit: bool) -> bool:
        """One pass over all cells; returns whether module bindings grew."""
        before = sum(len(paths) for paths in self.module.values())
        self.emit = emit
        self.refs: list[tuple[Finding, str | None]] = []  # (reference, top-level owner)
        self.flags: list[Finding] = []  # machinery and magics
        self.uses: list[tuple[str, str, str]] = []  # (module name, top owner, qualname)
        self.loads: dict[str | None, set[str]] = {}  # module names each top owner reads
        self.calls: dict[str, list[tuple[bool, str | None]]] = {}  # def -> (bare call?, owner)
        self.writes: set[str] = set()  # top owners that write notebook-level state
        self.reads_all: dict[str, str] = {}  # top owner -> qualname, for globals()
        self.owners: list[str] = []
        self._placed: set[tuple[int, int, str]] = set()
        self.depth = 0
        self.bare: int | None = None
        for cell in self.cells:
            self.cell, self.offset, self.local = cell.number, cell.offset, cell.local
            self.scopes = [_Scope("module")]
            self._resolved: dict[int, set[str]] = {}
            self.body(cell.tree.body)
        return sum(len(paths) for paths in self.module.values()) != before

    def result(self) -> ScanResult:
        check = self._check_code()
        refs, findings = [], list(self.flags)
        for ref, owner in self.refs:
            if owner is None or owner in check:
                ref = Finding(ref.cell, ref.line, ref.message)
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
                    findings.append(Finding(cell, line, message))
        return ScanResult(_ordered(refs), _ordered(findings))

    def _check_code(self) -> set[str]:
        """Top-level functions/classes that are check code (see the module docstring)."""
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

    def visit_Expr(self, node: ast.Expr) -> None:
        if isinstance(node.value, ast.Call):
            self.bare = id(node.value)
        self.visit(node.value)

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
        self.visit(node.value)
        paths = self.carried(node.value)
        for target in node.targets:
            self.bind(target, paths)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self.visit(node.value)
            self.bind(node.target, self.carried(node.value))
        elif not isinstance(node.target, ast.Name):
            self.visit(node.target)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self.visit(node.value)
        if isinstance(node.target, ast.Name):
            self.visit(ast.copy_location(ast.Name(node.target.id, ast.Load()), node.target))
        self.bind(node.target, self.carried(node.value))

    def visit_NamedExpr(self, node: ast.NamedExpr) -> None:
        self.visit(node.value)
        self.bind(node.target, self.carried(node.value))

    def visit_For(self, node: ast.For | ast.AsyncFor) -> None:
        self.visit(node.iter)
        self.bind(node.target, self.carried(node.iter))
        self.body(node.body)
        self.body(node.orelse)

    visit_AsyncFor = visit_For

    def visit_With(self, node: ast.With | ast.AsyncWith) -> None:
        for item in node.items:
            self.visit(item.context_expr)
            if item.optional_vars is not None:
                self.bind(item.optional_vars, self.carried(item.context_expr))
        self.body(node.body)

    visit_AsyncWith = visit_With

    def visit_Global(self, node: ast.Global | ast.Nonlocal) -> None:
        if self.owners:
            self.writes.add(self.owners[0])

    visit_Nonlocal = visit_Global

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.owners.append(self._qualname(node.name))
        for expr in [*node.decorator_list, *node.args.defaults, *node.args.kw_defaults]:
            if expr is not None:
                self.visit(expr)
        if self.emit or not self.local and _reaches_module(node):
            names, glob = _function_scope(node)
            self.scopes.append(_Scope("function", set(names), glob))
            self.body(node.body)
            self.scopes.pop()
        self.owners.pop()
        self.bind_name(node.name, set(), node)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.owners.append(self._qualname(node.name))
        for expr in [*node.decorator_list, *node.bases, *(k.value for k in node.keywords)]:
            self.visit(expr)
        if self.emit or not self.local and _reaches_module(node):
            names, glob = _class_scope(node)
            self.scopes.append(_Scope("class", set(names), glob))
            self.body(node.body)
            self.scopes.pop()
        self.owners.pop()
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

    def visit_Name(self, node: ast.Name, callee: bool = False, bare: bool = False) -> None:
        if not isinstance(node.ctx, ast.Load):
            return
        kind, paths = self.lookup(node.id)
        owner = self.owners[0] if self.owners else None
        if kind == "module":
            self.loads.setdefault(owner, set()).add(node.id)
            if node.id in self.defs:
                self.calls.setdefault(node.id, []).append((callee and bare, owner))
        if kind == "local":
            return  # what a local holds was reported where the function bound it
        if not callee and paths & _LOOKUPS:
            self.flag(node, f"uses {node.id} as a value, a look-up by computed name")
        for path in paths:
            self.check(path, node, alias=node.id)
            if kind == "module" and self.owners and self._builtin(path):
                self.uses.append((node.id, owner, self.owners[-1]))

    def visit_Attribute(self, node: ast.Attribute) -> None:
        self.visit(node.value)
        if not isinstance(node.ctx, ast.Load):
            root = node.value
            while isinstance(root, (ast.Attribute, ast.Subscript)):
                root = root.value
            if isinstance(root, ast.Name) and self.lookup(root.id)[0] == "module" and self.owners:
                self.writes.add(self.owners[0])
            return
        if node.attr in _INTERNALS:
            self.flag(node, f"reaches {node.attr}, a function or frame internal")
        if node.attr == "run_in_executor":
            self.flag(node, f"uses run_in_executor, which {_MACHINERY['threading']}")
        if isinstance(node.value, ast.Name) and node.value.id in self.defs and self.owners:
            self.writes.add(self.owners[0])  # can reach into a notebook class's state
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
        if base & {f"{p}()" for p in _NAMESPACES} and _const(node.slice) is None:
            self.flag(node, "writes the notebook's namespace by computed name")
        root = node.value
        while isinstance(root, (ast.Attribute, ast.Subscript)):
            root = root.value
        if isinstance(root, ast.Name) and self.lookup(root.id)[0] == "module" and self.owners:
            self.writes.add(self.owners[0])

    def visit_Call(self, node: ast.Call) -> None:
        bare, self.bare = self.bare == id(node), None
        magic = _magic_call(node)
        if magic is not None:
            self.magic(node, *magic)
            return
        if isinstance(node.func, ast.Name):
            self.visit_Name(node.func, callee=True, bare=bare)
        else:
            self.visit(node.func)
        for arg in [*node.args, *(k.value for k in node.keywords)]:
            self.visit(arg)
        called = self.resolve(node.func)
        looked_up = self._looked_up(node, called)
        if looked_up:
            target, name = looked_up[0], _const(looked_up[1])
            if name in _INTERNALS:
                self.flag(node, f"reaches {name}, a function or frame internal")
            elif name is None and self._torch_namespace(target):
                self.flag(node, "looks up a torch attribute by a computed name")
            if not called & {"builtin:getattr", "builtin:hasattr"} and self.owners:
                self.writes.add(self.owners[0])  # setattr, delattr or a dunder form
        if "builtin:vars" in called and node.args and self._torch_namespace(node.args[0]):
            self.flag(node, "reads a torch namespace with vars(), a look-up by string")
        if called & _NAMESPACES and not node.args and self.owners:
            self.writes.add(self.owners[0])
            if "builtin:globals" in called:
                self.reads_all[self.owners[0]] = self.owners[-1]
        for path in self._reached(node):
            self.check(path, node)

    def visit_Constant(self, node: ast.Constant) -> None:
        """Strings are not references."""

    # - magics -

    def magic(self, node: ast.Call, method: str, args: list[str]) -> None:
        if method in ("system", "getoutput"):
            if not _INSTALL.match(args[0] if args else ""):
                self.flag(node, "runs a shell command (!)")
        elif method == "run_line_magic":
            self._line_magic(node, args[0], args[1])
        else:
            self._cell_magic(node, *args)

    def _line_magic(self, node: ast.Call, name: str, line: str) -> None:
        if name in _PYTHON_LINE:
            self.code(_statement(line, _PYTHON_LINE[name]), node, self._line(node) - 1)
        elif name in _SHELL_LINE:
            if not _INSTALL.match(f"{name} {line}"):
                self.flag(node, f"runs a shell command (%{name})")
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

    # - bindings and look-ups -

    def bind(self, target: ast.AST, paths: set[str]) -> None:
        if isinstance(target, ast.Name):
            self.bind_name(target.id, paths, target, assigned=True)
        elif isinstance(target, (ast.Tuple, ast.List)):
            for element in target.elts:
                self.bind(element, paths)
        elif isinstance(target, ast.Starred):
            self.bind(target.value, paths)
        else:
            self.visit(target)
            key = _const(target.slice) if isinstance(target, ast.Subscript) else None
            if key is not None and "builtin:globals()" in self.resolve(target.value):
                self.bind_name(key, paths, target, module=True)

    def bind_name(
        self,
        name: str,
        paths: set[str],
        node: ast.AST,
        assigned: bool = False,
        module: bool = False,
    ) -> None:
        scope = self.scopes[-1]
        if scope.kind == "comprehension" and name not in scope.names:
            scope = next(s for s in reversed(self.scopes) if s.kind != "comprehension")
        if module or scope.kind == "module" or name in scope.glob:
            if self.emit:
                return
            self.names.add(name)
            if assigned:
                self.assigned.add(name)
            env = self.module
        else:
            scope.names.add(name)  # a magic's body can bind names its cell did not show
            env = scope.env
        bound = env.setdefault(name, {})
        for path in paths:
            if len(bound) < 64:
                bound.setdefault(path, (self.cell, self._line(node)))

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
        if looked_up and _const(looked_up[1]) and not called & {"builtin:hasattr"}:
            found |= _paths(_join(p, _const(looked_up[1])) for p in self.resolve(looked_up[0]))
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
        """Paths to check at this node: none through a local (checked where it was bound)."""
        root = node
        while isinstance(root, (ast.Attribute, ast.Subscript, ast.Call)):
            root = root.func if isinstance(root, ast.Call) else root.value
        if isinstance(root, ast.Name) and self.lookup(root.id)[0] == "local":
            return set()
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

    # - verdicts -

    def check(self, path: str, node: ast.AST, alias: str | None = None) -> None:
        """Record a path the code reaches: machinery, or a built-in reference."""
        why = _machinery(path)
        if why:
            self.flag(node, why)
        builtin = self._builtin(path)
        place = (self.cell, self._line(node), builtin)
        if builtin and self.emit and place not in self._placed:  # one per built-in and line
            self._placed.add(place)
            named = f" (as {alias})" if alias and alias != builtin else ""
            private = ", a private torch name" if builtin.startswith("torch.") else ""
            owner = self.owners[0] if self.owners else None
            inside = self.owners[-1] if self.owners else None
            message = f"uses {builtin}{named}{private}"
            self.refs.append((Finding(*place[:2], message, inside), owner))

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
            if part.startswith("_") and _PRIVATE_ATTENTION.search(part):
                return ".".join(parts[:i])
        return None

    def _torch_namespace(self, node: ast.AST) -> bool:
        return any(p.split(".")[0] == "torch" and "(" not in p for p in self.resolve(node))

    def flag(self, node: ast.AST, message: str) -> None:
        if self.emit:
            inside = self.owners[-1] if self.owners else None
            self.flags.append(Finding(self.cell, self._line(node), message, inside))

    def _line(self, node: ast.AST) -> int:
        return getattr(node, "lineno", 1) + self.offset


_HANDLERS = {
    getattr(ast, name[6:]): method
    for name, method in vars(_Reader).items()
    if name.startswith("visit_") and hasattr(ast, name[6:])
}


def _paths(paths: Iterable[str | None]) -> set[str]:
    return {p for p in paths if p is not None}


def _magic_call(node: ast.Call) -> tuple[str, list[str]] | None:
    """(method, constant arguments) of IPython's get_ipython().run_*_magic/system/getoutput."""
    func = node.func
    arity = {"run_line_magic": 2, "run_cell_magic": 3, "system": 1, "getoutput": 1}
    if not (
        isinstance(func, ast.Attribute)
        and func.attr in arity
        and isinstance(func.value, ast.Call)
        and isinstance(func.value.func, ast.Name)
        and func.value.func.id == "get_ipython"
        and not func.value.args
        and not func.value.keywords
        and not node.keywords
        and len(node.args) == arity[func.attr]
    ):
        return None
    args = [_const(a) for a in node.args]
    if any(a is None for a in args):
        return None
    return func.attr, args


def _statement(line: str, takes_value: str) -> str:
    """The Python statement after a %time/%timeit/%prun line's options."""
    rest = line.lstrip()
    while rest.startswith("-"):
        token, _, rest = rest.partition(" ")
        rest = rest.lstrip()
        letters = "" if token.startswith("--") else token[1:]
        for i, letter in enumerate(letters):
            if letter in takes_value:
                if i == len(letters) - 1:
                    _, _, rest = rest.partition(" ")
                    rest = rest.lstrip()
                break
    return rest


def _ordered(findings: list[Finding]) -> tuple[Finding, ...]:
    unique = {str(f): f for f in reversed(findings)}  # keeps the first of each message
    return tuple(sorted(unique.values(), key=lambda f: (f.cell, f.line)))
