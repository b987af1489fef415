"""Packages of exercise folders built in a test: a good one, and one per kind of breakage."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

GOOD_SUITE = """
from grader.suite.exercise import Exercise

exercise = Exercise(id="alpha", title="Alpha", seed="-", levels=["one"], defines=("alpha",))


@exercise.check("one")
def runs(kernel):
    '''Nothing to see.'''
"""

# folder -> (suite.py text, or None for no suite.py; what the catalog must say about it)
_BROKEN = {
    "bad_syntax": ("exercise = Exercise(\n    id='bad_syntax',,\n)\n", "line 2: SyntaxError"),
    "bad_import": (
        "import not_a_real_module_xyz\n",
        "line 1: ModuleNotFoundError: No module named 'not_a_real_module_xyz'",
    ),
    "bad_level": (
        "from grader.suite.exercise import Exercise\n"
        "exercise = Exercise(id='bad_level', title='-', seed='-', levels=['one'], defines=())\n"
        "@exercise.check('two')\n"
        "def check(kernel):\n"
        "    pass\n",
        "line 3: ValueError: bad_level: unknown level 'two'",
    ),
    "c_builtin_instrumented": (
        "from grader.suite.exercise import Watch\n"
        "WATCH = Watch(instrument=('torch.nn.functional:conv1d',))\n",
        "line 2: ValueError: Watch.instrument entry 'torch.nn.functional:conv1d': conv1d is a "
        "builtin_function_or_method, not a Python function, so it has no code to replace: "
        "name it in Watch.functions",
    ),
    "no_exercise": ("EXERCISE = None\n", "`exercise` is nothing, want exercise = Exercise(...)"),
    "no_suite": (None, "no_suite: no suite.py"),
}
BROKEN = {folder: text for folder, (text, _) in _BROKEN.items()}
BROKEN_PROBLEMS = {folder: problem for folder, (_, problem) in _BROKEN.items()}


def exercises_package(
    root: Path, monkeypatch: pytest.MonkeyPatch, suites: dict[str, str | None]
) -> str:
    """A package of exercise folders in `root`, importable for the rest of the test:
    folder -> suite.py text (None: no suite.py). Returns the package's name."""
    name = _name(root)
    package = root / name
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    for folder, text in suites.items():
        (package / folder).mkdir()
        (package / folder / "__init__.py").write_text("")
        if text is not None:
            (package / folder / "suite.py").write_text(text)
    monkeypatch.syspath_prepend(str(root))
    return name


def forget_package(root: Path) -> None:
    """Drop the package made in `root` (and its modules) from sys.modules."""
    name = _name(root)
    for module in [m for m in sys.modules if m == name or m.startswith(f"{name}.")]:
        del sys.modules[module]


def _name(root: Path) -> str:
    return "exercises_" + "".join(c if c.isalnum() else "_" for c in root.name)
