"""Exercises: a hidden suite of checks in levels, plus what identifies the exercise.

An exercise is a folder under ``exercises/`` (the package ``grader.exercises``) with a
``suite.py`` that defines ``exercise = Exercise(...)`` and registers checks with
``@exercise.check(level=...)``. The catalog is found by scanning that folder, so adding an
exercise never touches grader code; a folder that cannot be loaded is recorded as broken,
with the reason, and the others are still graded. Checks run in the grader's process; they
reach candidate code only through the `Kernel` they are given.

Where the exercises come from: the grader's own ``exercises/`` (the checkout's, for an
editable install or a plain one run inside a checkout, so an edit is graded at once: see
grader.core.project), with a folder
given by ``--exercises DIR`` or ``$GRADER_EXERCISES`` in front of it: its folders are
added to the built-in ones and replace those of the same name (`use_exercises`).
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import hashlib
import importlib
import importlib.util
import os
import pkgutil
import sys
import traceback
import types
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grader.core.errors import ExerciseError, UsageError
from grader.core.notebook import Notebook, defined_names

CheckFunction = Callable[[Any], None]

# What a candidate may import beyond torch and the standard library, unless an exercise
# says otherwise. Each must be installed with the grader (pyproject.toml dependencies).
DEFAULT_PACKAGES = ("numpy", "einops")


@dataclass(frozen=True)
class Check:
    """One hidden test: a function of the kernel handle, worth `points`."""

    id: str
    level: int
    points: float
    hidden: bool
    run: CheckFunction
    doc: str = ""


@dataclass(frozen=True)
class Watch:
    """The torch built-ins an exercise asks candidates not to use, as the grader watches
    for them in the kernel while hidden tests run, and how its messages name them. The
    grader knows no topic: each exercise brings its own (see exercises/_attention.py).

    - `what`: the topic, for messages ("built-in attention in the source").
    - `functions`: torch function names a TorchFunctionMode records on the test's thread.
    - `ops`: fragments of aten op names a TorchDispatchMode records on the test's thread.
    - `dispatch`: aten ops for which the guard registers a recording kernel (any thread).
    - `dispatch_pattern`: a regular expression; every registered aten op whose name
      matches it is watched like `dispatch` (the private and composite ops behind a
      public one, derived from what torch registered rather than from names candidates
      type).
    - `instrument`: Python functions, as ``module:qualified.name``, whose code the guard
      replaces in place so every reference to them records its calls (any thread).
    - `modules`: qualified names of module types a candidate's module must not hold.
    - `private`: a regular expression for private torch names that count as the built-in.
    - `setup`: trusted code run in the kernel after the guard, before the first cell.
    - `graded`: the names the hidden tests grade; the source scan counts a built-in only
      in the code they reach. An `Exercise` gives its watch its `defines` when this is
      empty.
    """

    what: str = "built-in"
    functions: tuple[str, ...] = ()
    ops: tuple[str, ...] = ()
    dispatch: tuple[str, ...] = ()
    dispatch_pattern: str = ""
    instrument: tuple[str, ...] = ()
    modules: frozenset[str] = frozenset()
    private: str = ""
    setup: str = ""
    graded: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for entry in self.instrument:
            problem = not_instrumentable(entry)
            if problem:
                raise ValueError(f"Watch.instrument entry {entry!r}: {problem}")

    def kernel_config(self) -> dict[str, object]:
        """What the kernel-side guard and shim are told (plain data)."""
        return {
            "functions": list(self.functions),
            "ops": list(self.ops),
            "dispatch": list(self.dispatch),
            "dispatch_pattern": self.dispatch_pattern,
            "instrument": list(self.instrument),
            "setup": self.setup,
        }


def not_instrumentable(entry: str, load: bool = False) -> str:
    """Why `Watch.instrument` cannot take `entry` ("module:qualified.name"), or "": the
    guard replaces a Python function's code in place, which a C built-in has none of.

    A module not imported yet is only looked for, unless `load`: importing some of torch's
    (`torch.nn.attention.bias` imports torch._dynamo) costs a second at every start and
    writes a cache folder under $TMPDIR, so `grade build` imports them and checks the rest
    (`grader.tools.build`)."""
    module, colon, rest = entry.partition(":")
    if not colon or not rest:
        return "want 'module:qualified.name', such as 'torch.nn.functional:softmax'"
    try:
        if module not in sys.modules and not load:
            if importlib.util.find_spec(module) is None:
                raise ImportError(f"No module named {module!r}")
            return ""
        owner: Any = importlib.import_module(module)
        for part in rest.split("."):
            owner = getattr(owner, part)
    except (ImportError, AttributeError, ValueError) as error:
        return f"cannot be found ({type(error).__name__}: {error})"
    if isinstance(getattr(owner, "__code__", None), types.CodeType):
        return ""
    return (
        f"{rest} is a {type(owner).__name__}, not a Python function, so it has no code to "
        "replace: name it in Watch.functions (every call to it on the test's thread is "
        "seen), or its aten op in Watch.dispatch (seen on any thread)"
    )


@dataclass
class Exercise:
    """A gradable exercise: its identity, its levels, and its checks in order."""

    id: str
    title: str
    seed: str
    levels: list[str]
    defines: tuple[str, ...]
    forbidden: tuple[str, ...] = ()  # names the source scan flags when bound to torch's
    watch: Watch = Watch()
    # import names (top level) the candidate may use besides torch and the standard library
    packages: tuple[str, ...] = DEFAULT_PACKAGES
    # what an interviewer picks by: topics (`grade list --tag backward`), and the minutes a
    # candidate needs (how long its independent solution took to write, rounded); 0: unknown
    tags: tuple[str, ...] = ()
    minutes: int = 0
    checks: list[Check] = field(default_factory=list)
    folder: Path | None = None  # where the catalog found it
    # what `--profile` times and measures against torch (see grader.run.profile.Profiled);
    # None: the exercise has no profile
    profile: Any = None

    def __post_init__(self) -> None:
        if not self.watch.graded:  # the source scan reads the code the graded names reach
            self.watch = dataclasses.replace(self.watch, graded=self.defines)

    def check(
        self, level: str, points: float = 1, hidden: bool = True
    ) -> Callable[[CheckFunction], CheckFunction]:
        """Register a check on `level` (by name); its id is the function's name."""
        if level not in self.levels:
            raise ValueError(f"{self.id}: unknown level {level!r}")

        def register(function: CheckFunction) -> CheckFunction:
            doc = (function.__doc__ or "").strip().splitlines()
            self.checks.append(
                Check(
                    function.__name__, self.levels.index(level) + 1, points, hidden,
                    function, doc[0] if doc else "",
                )
            )  # fmt: skip
            self.checks.sort(key=lambda c: c.level)
            return function

        return register

    @property
    def max_score(self) -> float:
        """Points available."""
        return sum(c.points for c in self.checks)


def allowed_packages(exercise: Exercise) -> tuple[str, ...]:
    """Top-level import names the candidate's kernel may import besides the standard
    library: torch, then the exercise's `packages`."""
    return tuple(dict.fromkeys(("torch", *exercise.packages)))


class Catalog(dict[str, Exercise]):
    """Exercises by id, and `broken`: the folders that could not be loaded, by folder name,
    each with one line saying why."""

    def __init__(
        self, exercises: dict[str, Exercise] | None = None, broken: dict[str, str] | None = None
    ) -> None:
        super().__init__(exercises or {})
        self.broken: dict[str, str] = dict(broken or {})


EXERCISES_VARIABLE = "GRADER_EXERCISES"


def builtin_exercises() -> Path:
    """The grader's own exercises folder: the checkout's (an editable install, or a plain one
    run inside a checkout, see grader.core.project), else the installed copy."""
    from grader.core.project import checkout

    tree = checkout()
    return (tree / "exercises" if tree else Path(__file__).parent.parent / "exercises").resolve()


def _with_builtin() -> None:
    """Load from the built-in folder where nothing chose the folders yet (a plain install
    imports the installed copy's package, whose folder may not be the built-in one)."""
    import grader.exercises as package

    if str(builtin_exercises()) not in package.__path__:
        use_exercises()


def use_exercises(folder: str | Path | None = None) -> list[Path]:
    """Load exercises from `folder` (else $GRADER_EXERCISES, else none) in front of the
    built-in ones, and return the folders searched, first one first. Suites already
    loaded from other folders are forgotten.

    Raises:
        UsageError: the folder does not exist.
    """
    import grader.exercises as package

    chosen = folder or os.environ.get(EXERCISES_VARIABLE) or None
    folders = [builtin_exercises()]
    if chosen:
        extra = Path(chosen).expanduser().resolve()
        if not extra.is_dir():
            source = "--exercises" if folder else f"${EXERCISES_VARIABLE}"
            raise UsageError(f"{chosen}: no such folder ({source})")
        folders = list(dict.fromkeys([extra, *folders]))
    path = [str(f) for f in folders]
    if list(package.__path__) != path:
        for name in [m for m in sys.modules if m.startswith(f"{package.__name__}.")]:
            del sys.modules[name]
        package.__path__[:] = path
        importlib.invalidate_caches()
    return folders


def exercises_folders() -> list[Path]:
    """The folders `grader.exercises` loads from now, first one first."""
    import grader.exercises as package

    _with_builtin()
    return [Path(p) for p in package.__path__]


class _Broken(Exception):
    """An exercise folder that cannot be loaded (message: one line, naming the file)."""


def load_catalog(package: str = "grader.exercises") -> Catalog:
    """Every exercise under the package, by id; folders that fail to load go in `broken`."""
    if package == "grader.exercises":
        _with_builtin()
    root = importlib.import_module(package)
    catalog = Catalog()
    for info in sorted(pkgutil.iter_modules(root.__path__), key=lambda i: i.name):
        if not info.ispkg or info.name.startswith("_"):
            continue
        folder = Path(getattr(info.module_finder, "path", root.__path__[0])) / info.name
        try:
            exercise = _load_exercise(f"{package}.{info.name}", folder)
            if exercise.id in catalog:
                raise _Broken(f"{folder / 'suite.py'}: exercise id {exercise.id!r} is taken")
        except _Broken as e:
            catalog.broken[info.name] = str(e)
            continue
        if exercise.folder is None:  # a suite that re-exports another's keeps that one's
            exercise.folder = folder
        catalog[exercise.id] = exercise
    return catalog


def _load_exercise(module: str, folder: Path) -> Exercise:
    """Import `module`.suite and return its `exercise`, or raise _Broken saying why."""
    suite = folder / "suite.py"
    try:
        loaded = importlib.import_module(f"{module}.suite")
    except ModuleNotFoundError as e:
        if e.name == f"{module}.suite":
            raise _Broken(f"{folder}: no suite.py") from None
        raise _Broken(f"{_where(e, suite)}: {_problem(e)}") from None
    except SyntaxError as e:
        place = f"{e.filename or suite}, line {e.lineno}" if e.lineno else str(e.filename or suite)
        raise _Broken(f"{place}: SyntaxError: {e.msg}") from None
    except Exception as e:  # any failure of the suite's own code at import
        raise _Broken(f"{_where(e, suite)}: {_problem(e)}") from None
    exercise = getattr(loaded, "exercise", None)
    if not isinstance(exercise, Exercise):
        found = "nothing" if exercise is None else f"a {type(exercise).__name__}"
        raise _Broken(f"{suite}: `exercise` is {found}, want exercise = Exercise(...)")
    return exercise


def _where(error: BaseException, suite: Path) -> str:
    """Where `error` was raised in the exercises' own files (file, line), else suite.py."""
    root = suite.parent.parent
    for frame in reversed(traceback.extract_tb(error.__traceback__)):
        if root in Path(frame.filename).parents:
            return f"{frame.filename}, line {frame.lineno}"
    return str(suite)


def _problem(error: BaseException) -> str:
    return " ".join(f"{type(error).__name__}: {error}".split())[:300]


def find_exercise(
    notebook: Notebook, catalog: Mapping[str, Exercise], name: str | None = None
) -> Exercise:
    """The exercise to grade against: `name`, else the notebook's metadata, else its names.

    Raises:
        ExerciseError: unknown or broken exercise, or no exercise (or several) matches.
    """
    known = ", ".join(sorted(catalog)) or "none"
    broken: dict[str, str] = getattr(catalog, "broken", {})
    wanted = name or notebook.exercise_id
    if wanted:
        source = "--exercise" if name else f"{notebook.path}: metadata"
        if wanted in broken:
            raise ExerciseError(
                f"{source} names exercise {wanted!r}, which cannot be loaded: {broken[wanted]}"
            )
        if wanted not in catalog:
            raise ExerciseError(f"{source} names unknown exercise {wanted!r} (known: {known})")
        return catalog[wanted]
    names = defined_names([source for _, source in notebook.code_cells])
    fits = [e for e in catalog.values() if e.defines and set(e.defines) <= names]
    if len(fits) == 1:
        return fits[0]
    if not fits:
        unloaded = f"; broken, so not considered: {', '.join(sorted(broken))}" if broken else ""
        raise ExerciseError(
            f"{notebook.path}: names no exercise in its metadata and defines none's names; "
            f"pass --exercise (known: {known}{unloaded})"
        )
    ids = ", ".join(e.id for e in fits)
    raise ExerciseError(f"{notebook.path}: could be any of {ids}; pass --exercise NAME")


def suite_hash(exercise: Exercise) -> str:
    """sha256 of what decides an exercise's verdicts: the Python files of its folder and
    the shared modules beside it (`_*.py`); "" for an exercise built in memory."""
    if exercise.folder is None:
        return ""
    return folder_hash(exercise.folder)


@functools.cache
def folder_hash(folder: Path) -> str:
    """`suite_hash` of the exercise in `folder`."""
    digest = hashlib.sha256(sources_digest(folder, exact=True).encode())
    for path in sorted(folder.parent.glob("_*.py")):
        digest.update(f"{path.name}\0".encode() + path.read_bytes() + b"\0")
    return digest.hexdigest()


# Keyword arguments that describe an exercise to whoever picks one, and decide no verdict:
# `verdicts_digest` leaves them out, so retagging a suite leaves its hints current.
ABOUT_FIELDS = frozenset({"tags", "minutes"})


def sources_digest(folder: Path, exact: bool = False, verdicts: bool = False) -> str:
    """A digest of the Python files under `folder` that make its catalog (names and code):
    formatting and comments do not change it, nor does a corpus (its mutants are not in
    the catalog), so formatting a suite or adding a corpus after `grade build` leaves the
    index current. `exact`: of every Python file's bytes instead (the same on every
    Python version: a report's suite_hash). `verdicts`: without `ABOUT_FIELDS`."""
    digest = hashlib.sha256()
    for path in sorted(folder.rglob("*.py")):
        if "__pycache__" in path.parts or (path.name == "corpus.py" and not exact):
            continue
        digest.update(f"{path.relative_to(folder).as_posix()}\0".encode())
        code = path.read_bytes() if exact else _code(path, ABOUT_FIELDS if verdicts else ())
        digest.update(code + b"\0")
    return digest.hexdigest()


def code_digest(path: Path) -> bytes:
    """What `sources_digest` reads of one Python file: its syntax tree without positions."""
    return _code(path)


def _code(path: Path, leave_out: Iterable[str] = ()) -> bytes:
    """The file's syntax tree without positions, and without the keyword arguments named
    in `leave_out` wherever they are passed (its bytes, if it does not parse)."""
    text = path.read_bytes()
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return text
    names = set(leave_out)
    if names:
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                node.keywords = [k for k in node.keywords if k.arg not in names]
    return ast.dump(tree).encode()
