"""The layout the architecture doc describes holds: a few top-level modules, packages that
say what they own, imports that only go down the layers (no cycle, counting imports inside
functions), and the curated API at the top."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT

PACKAGE = ROOT / "grader"
# Lowest first: a package may import only from those before it (and itself).
LAYERS = ["core", "kernel", "suite", "verdict", "run", "report", "tools", "cli"]


def _modules() -> dict[str, Path]:
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        if "exercises" in path.relative_to(PACKAGE).parts:
            continue
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        modules[name.removesuffix(".__init__")] = path
    return modules


def _imports(path: Path, modules: dict[str, Path], typing: bool = False) -> set[str]:
    """The grader's modules `path` imports anywhere in it (functions too), except under
    `if TYPE_CHECKING:` (unless `typing`)."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            typed = isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test)
            if typed and not typing:
                continue
            if isinstance(child, ast.ImportFrom) and (child.module or "").startswith("grader"):
                module = child.module or ""
                subs = {f"{module}.{a.name}" for a in child.names} & modules.keys()
                found.update(subs)
                if len(subs) < len(child.names):
                    found.add(module)
            elif isinstance(child, ast.Import):
                found.update(a.name for a in child.names if a.name.startswith("grader"))
            visit(child)

    visit(ast.parse(path.read_text()))
    return {m for m in found if m in modules}


def _graph(typing: bool = False) -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(path, modules, typing) - {name} for name, path in modules.items()}


def _layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and parts[1] in LAYERS) else ""


def test_at_most_six_top_level_modules_and_every_package_says_what_it_owns():
    top = [p.name for p in PACKAGE.glob("*.py")]
    assert len(top) <= 6, top
    packages = sorted(p.parent.name for p in PACKAGE.glob("*/__init__.py"))
    assert set(LAYERS) <= set(packages), packages
    for name in LAYERS:
        tree = ast.parse((PACKAGE / name / "__init__.py").read_text())
        assert len(ast.get_docstring(tree) or "") > 80, f"grader/{name}/__init__.py: no docstring"


@pytest.mark.parametrize("typing", [False, True], ids=["run time", "siblings, type-only too"])
def test_no_import_cycle_in_the_grader(typing):
    """No cycle at run time; and no two modules of one package that import each other,
    even only for type checking (a package's __init__, which names its API for the
    checker, aside)."""
    graph = _graph(typing)
    if typing:
        packages = {p.parent for p in _modules().values() if p.name == "__init__.py"}
        graph = {
            m: {d for d in deps if d.rpartition(".")[0] == m.rpartition(".")[0]}
            for m, deps in graph.items()
            if _modules()[m].name != "__init__.py" and _modules()[m].parent in packages
        }
        graph = {m: deps & graph.keys() for m, deps in graph.items()}
    state: dict[str, int] = {}  # 1: on the path, 2: done
    path: list[str] = []

    def walk(module: str) -> None:
        state[module] = 1
        path.append(module)
        for dep in sorted(graph[module]):
            if state.get(dep) == 1:
                cycle = path[path.index(dep) :] + [dep]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if dep not in state:
                walk(dep)
        path.pop()
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            walk(module)


def test_packages_import_only_from_lower_layers():
    wrong = []
    for module, deps in _graph().items():
        mine = _layer(module)
        if not mine:
            continue
        for dep in deps:
            theirs = _layer(dep)
            if theirs and LAYERS.index(theirs) > LAYERS.index(mine):
                wrong.append(f"{module} -> {dep}")
    assert not wrong, wrong


def test_the_curated_api_imports_without_torch_until_used():
    code = (
        "import sys\n"
        "import grader\n"
        "assert 'torch' not in sys.modules\n"
        "from grader import grade_notebook, grade_all, GradeReport, Limits, Outcome, Status\n"
        "from grader import GraderError, UsageError, grade, GradingContext\n"
        "assert sorted(grader.__all__) == sorted(grader._EXPORTS)\n"
        "print(grade_notebook.__module__, grade_all.__module__, GradeReport.__module__)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["grader.run.pipeline", "grader.run.batch", "grader.core.results"]
