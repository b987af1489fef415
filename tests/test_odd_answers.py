"""Any value from the candidate is the candidate's. Whatever a graded callable gives back
(None, a number, a string, lists, tuples and dicts of any length, a tensor of another
dtype or shape, an object of its own), every check of every exercise fails that test
saying what came back, and grading never stops with the grader's own error (a `GraderBug`,
exit 3) or the runner's last resort ("unexpected answer: AttributeError: ...").

The fuzz grades each exercise's solution in a Python process (`InProcessSession`, as
tests/test_exercises.py grades mutants; processes of its own, one per core, started when
collection ends, so they run while the other tests do), once per graded callable and odd
answer: the suite's calls run the solution, and the callable's answers are replaced by the
odd one on their way back, as the kernel's shim would have sent it. The graded callables are
found by grading the solution first: the functions and classes the suite calls, the
methods (forward included) and attributes it reaches on the candidate's objects, the
suite's own tensors it reads back after the candidate's code ran, each with the checks
that reach it (only those run). Values only a kernel makes (a tensor subclass, objects
whose `__eq__`, `__len__` or `__iter__` lie or raise, a NumPy array) and the issue's case
(cross_entropy answering a Python float at label_smoothing=1.0) are graded in real kernels.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nbformat
import pytest
import torch

from grader.core.errors import GraderBug
from grader.core.limits import Limits
from grader.core.notebook import read_notebook
from grader.kernel.channel import Request
from grader.run.inprocess import InProcessSession
from grader.run.pipeline import one_torch_thread
from grader.run.runner import Relay, run_checks
from grader.suite.exercise import Exercise, load_catalog
from grader.suite.handle import Kernel
from tests.cohort import Cohort
from tests.helpers import SOLUTIONS, Graded, InProcesses

CATALOG = load_catalog()
EXERCISES = sorted(CATALOG)

# A graded callable: ("function", name), ("new", class), ("method", class, name), with
# "__call__" for forward; ("attribute", class, name); ("held", name): an attribute of a
# tensor of the suite's, held in the kernel, read back after the candidate's code ran
# (a parameter an optimizer stepped).
Key = tuple[str, ...]
# Calls whose answers no suite reads as data: a module's eval(), train() and to() give the
# module itself, and `library.load_state` takes whatever load_state_dict answers.
UNREAD = frozenset({"eval", "train", "to", "load_state_dict"})

# An object of the candidate's that stays in the kernel, and lies or raises at every turn.
OBJECT_CELL = """
class Liar:
    def __eq__(self, other):
        raise RuntimeError("no comparing")
    __hash__ = object.__hash__
    def __len__(self):
        raise RuntimeError("no length")
    def __iter__(self):
        raise RuntimeError("no iterating")
    def __bool__(self):
        raise RuntimeError("no truth")

def _odd_object():
    return Liar()
"""
OBJECT = object()  # stands for a Liar, made in the namespace when an answer needs one

# Answers given instead of the callable's, whatever it would have answered (as the wire
# delivers them: a NumPy array arrives as a `Foreign`, an object as a reference).
CONSTANTS: dict[str, Any] = {
    "None": None,
    "a float": 0.69,
    "NaN": math.nan,
    "an int": 3,
    "an int too large for a float": 10**400,
    "a string": "tensor",
    "an empty list": [],
    "a ragged nested list": [[1.0, 2.0], [3.0]],
    "a dict": {"output": 1.0},
    "a tuple of 3": (1.0, 2.0, 3.0),
    "a pair of None": (None, None),
    "an object that lies": OBJECT,
    "a NumPy array": {"__foreign__": "numpy.ndarray", "repr": "array([1.])"},
    "an int64 tensor": torch.ones(2, 3, dtype=torch.int64),
    "a 0-dim tensor": torch.tensor(0.5, dtype=torch.float64),
}


def _other_dtype(t: torch.Tensor) -> torch.Tensor:
    return t.to(torch.int64) if t.is_floating_point() else t.to(torch.float32)


# Every tensor in the callable's own answer, changed.
TENSORS: dict[str, Callable[[torch.Tensor], Any]] = {
    "int64 for float (float32 for int)": _other_dtype,
    "bool": lambda t: t != 0,
    "complex": lambda t: t.to(torch.complex128),
    "float16 (int8 for int)": lambda t: t.to(
        torch.float16 if t.is_floating_point() else torch.int8
    ),
    "with an extra axis": lambda t: t[..., None],
    "summed to 0-dim": lambda t: t.sum(),
    "as a Python number": lambda t: t.sum().item(),
    "as nested lists": lambda t: t.tolist(),
    "all NaN": lambda t: torch.full(t.shape, math.nan),
    "empty": lambda t: t.reshape(-1)[:0],
}


# Those also given for every other answer only, where an odd tensor meets a good one.
MIXED = ("int64 for float (float32 for int)", "float16 (int8 for int)", "with an extra axis",
         "as a Python number")  # fmt: skip


def _shorter(value: Any) -> Any:
    if isinstance(value, (list, tuple, str, bytes)):
        return value[:-1]
    if isinstance(value, dict) and not _wire_object(value):
        return dict(list(value.items())[:-1])
    return value


def _leaves(value: Any, change: Callable[[Any], Any]) -> Any:
    if isinstance(value, (list, tuple)):
        items = [_leaves(v, change) for v in value]
        return items if isinstance(value, list) else tuple(items)
    if isinstance(value, dict) and not _wire_object(value):
        return {k: _leaves(v, change) for k, v in value.items()}
    return change(value)


# The callable's own answer, its structure changed.
DATA: dict[str, Callable[[Any], Any]] = {
    "one item short": _shorter,
    "ints as floats": lambda v: _leaves(v, lambda x: float(x) if type(x) is int else x),
    "wrapped in a list": lambda v: [v],
}


@dataclasses.dataclass(frozen=True)
class Odd:
    """One odd answer: `make(answer)` is given instead of every `every`-th answer (2: the
    second, the fourth...; the others stay the callable's own, so an odd one meets a
    good one in a comparison). `constant`: `make` ignores the answer, so the call is not
    made at all (outside a batch)."""

    name: str
    make: Callable[[Any], Any]
    every: int = 1
    constant: bool = False


def odd_answers(key: Key, tensors: bool) -> list[Odd]:
    """The odd answers tried for `key`; `tensors`: its answers held tensors."""
    constants = [Odd(n, lambda _, v=v: v, constant=True) for n, v in CONSTANTS.items()]
    if key[0] == "held":  # always a tensor: its dtype or shape is what the candidate changes
        found = []
    elif key[0] == "new":  # anything but an object fails alike: where `kernel.new` asks
        found = constants[:10]
    else:
        found = constants + [Odd(n, change) for n, change in DATA.items()]
    if tensors:
        for name, change in TENSORS.items():
            found.append(Odd(f"tensors {name}", lambda v, c=change: _tensors(v, c)))
            if name in MIXED:
                found.append(Odd(f"every other answer's tensors {name}",
                                 lambda v, c=change: _tensors(v, c), every=2))  # fmt: skip
    return found


def _tensors(value: Any, change: Callable[[torch.Tensor], Any]) -> Any:
    return _leaves(value, lambda x: change(x) if isinstance(x, torch.Tensor) else x)


def _wire_object(value: dict) -> bool:
    """A reference to an object in the kernel, or a value that does not cross (Foreign)."""
    return "__ref__" in value or "__foreign__" in value


class OddSession(Relay):
    """The solution's session, with the answers of one graded callable replaced by an odd
    answer; with no odd answer, it notes which callables answered (and whether a tensor
    was in the answer)."""

    def __init__(self, session: InProcessSession, key: Key | None = None, odd: Odd | None = None):
        super().__init__(session)
        self.key, self.odd = key, odd
        self.types: dict[Any, str] = {}  # reference -> the type the shim named
        self.reached: dict[Key, bool] = {}
        self.answered = 0

    def call(self, request: Request, timeout: float | None = None) -> dict[str, Any]:
        if request.get("op") == "batch":
            answer = self.session.call(request, timeout)
            pairs = zip(request.get("requests", []), answer.get("answers", []), strict=False)
            return {**answer, "answers": [self._answer(r, a) for r, a in pairs]}
        if self.odd is not None and self.odd.constant and self._key(request) == self.key:
            return {"value": self._odd(None)}
        return self._answer(request, self.session.call(request, timeout))

    def _answer(self, request: Request, answer: dict[str, Any]) -> dict[str, Any]:
        value = answer.get("value")
        if isinstance(value, dict) and "__ref__" in value:
            self.types[value["__ref__"]] = str(value.get("type", ""))
        key = self._key(request)
        if key is None or "raised" in answer:
            return answer
        if self.odd is None:
            self.reached[key] = self.reached.get(key, False) or _holds_tensor(value)
            return answer
        if key != self.key:
            return answer
        self.answered += 1
        return (
            {**answer, "value": self._odd(value)} if self.answered % self.odd.every == 0 else answer
        )

    def _odd(self, value: Any) -> Any:
        assert self.odd is not None
        odd = self.odd.make(value)
        if odd is OBJECT:
            request: Request = {"op": "call", "target": {"__global__": "_odd_object"},
                                "method": None, "args": [], "kwargs": {}, "seed": None}  # fmt: skip
            return self.session.call(request)["value"]
        return odd

    def _key(self, request: Request) -> Key | None:
        op, target = request.get("op"), request.get("target") or {}
        if op == "call" and "__global__" in target:
            return ("new" if request.get("construct") else "function", target["__global__"])
        kind = self.types.get(target.get("__ref__"), "")
        if kind.startswith("__main__."):
            owner, method = kind.removeprefix("__main__."), request.get("method")
            if op == "call" and method not in UNREAD:
                return ("method", owner, method or "__call__")
            if op == "attribute":
                return ("attribute", owner, str(request.get("name")))
        if kind.startswith("torch.") and op == "attribute":
            return ("held", str(request.get("name")))
        return None


def _holds_tensor(value: Any) -> bool:
    if isinstance(value, (list, tuple)):
        return any(_holds_tensor(v) for v in value)
    if isinstance(value, dict):
        return any(_holds_tensor(v) for v in value.values())
    return isinstance(value, torch.Tensor)


def solution_session(exercise: Exercise) -> InProcessSession:
    """The solution's cells run here, with the lying object's class beside them."""
    cells = read_notebook(SOLUTIONS / f"{exercise.id}.ipynb").code_cells
    session = InProcessSession([*cells, (cells[-1][0] + 1, OBJECT_CELL)])
    session.prepare(exercise.watch.kernel_config())
    return session


def run(exercise: Exercise, session: OddSession, checks: set[str]) -> list:
    """The named checks against the session; every object they made let go after."""
    only = dataclasses.replace(exercise, checks=[c for c in exercise.checks if c.id in checks])
    try:
        return run_checks(only, Kernel(session), Limits(), math.inf)
    finally:
        session.session.forget_objects()


def graded_callables(exercise: Exercise, session: InProcessSession) -> dict[Key, tuple]:
    """Each callable the suite reaches in the solution: (the checks that reach it,
    whether its answers held tensors)."""
    checks: dict[Key, set[str]] = defaultdict(set)
    tensors: dict[Key, bool] = defaultdict(bool)
    for check in exercise.checks:
        recorder = OddSession(session)
        run(exercise, recorder, {check.id})
        for key, tensor in recorder.reached.items():
            checks[key].add(check.id)
            tensors[key] |= tensor
    return {key: (checks[key], tensors[key]) for key in checks}


def grade_odd_answers(folder: Path | str, shard: int = 0, shards: int = 1) -> None:
    """Every `shards`-th exercise's `odd_gradings` from `shard`, written to
    folder/result.json as {exercise: [what went wrong, how many gradings]}."""
    with one_torch_thread():  # as a grading computes its verdicts
        found = {e: odd_gradings(CATALOG[e]) for e in EXERCISES[shard::shards]}
    (Path(folder) / "result.json").write_text(json.dumps(found))


def start_in_background(folder: Path) -> InProcesses:
    """The fuzz, run by processes of its own (one per core) while the other tests run."""
    return InProcesses(folder, "tests.test_odd_answers:grade_odd_answers")


@pytest.mark.parametrize("exercise", EXERCISES)
def test_no_odd_answer_is_the_graders_own_error(background, exercise):
    wrong, tried = background[exercise]
    assert not wrong, f"{len(wrong)} of {tried} gradings:\n" + "\n".join(wrong[:20])


def odd_gradings(suite: Exercise) -> tuple[list[str], int]:
    """Grade the solution once per graded callable and odd answer: what went wrong (a
    GraderBug, or the runner's last resort), and how many gradings there were."""
    session = solution_session(suite)
    callables = graded_callables(suite, session)
    assert any(key[0] in ("function", "method") for key in callables), callables
    wrong, tried = [], 0
    for key, (checks, tensors) in sorted(callables.items()):
        odds = odd_answers(key, tensors)
        assert len(odds) >= 10 or key[0] == "held", key
        for odd in odds:
            tried += 1
            try:
                results = run(suite, OddSession(session, key, odd), checks)
            except GraderBug as bug:
                wrong.append(f"{key} answering {odd.name}: {bug}")
                continue
            wrong += [f"{key} answering {odd.name}: {r.id}: {r.message}" for r in results
                      if r.message.startswith("unexpected answer")]  # fmt: skip
    return wrong, tried


# --- in real kernels ----------------------------------------------------------------------

# The issue: cross_entropy answers a Python float at label_smoothing=1.0.
FLOAT_AT_FULL_SMOOTHING = """
_cross_entropy = cross_entropy

def cross_entropy(logits, target, **options):
    loss = _cross_entropy(logits, target, **options)
    return float(loss.sum()) if options.get("label_smoothing") == 1.0 else loss
"""
# What only a kernel makes: a tensor subclass, objects whose __eq__, __len__ or __iter__
# lie or raise, a NumPy array, an int subclass.
KERNEL_OBJECTS = (
    OBJECT_CELL
    + """
_log_softmax, _cross_entropy = log_softmax, cross_entropy

class Shifty(torch.Tensor):  # lies about equality and length
    def __eq__(self, other):
        return True
    __hash__ = torch.Tensor.__hash__
    def __len__(self):
        return 0

class Longer(list):  # says it is longer than it is
    def __len__(self):
        return 99

class Unlistable(list):
    def __iter__(self):
        raise RuntimeError("no iterating")

class Count(int):
    def __eq__(self, other):
        raise RuntimeError("no comparing")
    __hash__ = int.__hash__

def log_softmax(x, dim=-1):
    y = _log_softmax(x, dim=dim)
    if dim == 0:
        return Liar()
    if dim == 1:
        return y.numpy()
    if x.shape[-1] == 1:
        return Unlistable([y])
    return y.as_subclass(Shifty) if x.dtype == torch.float32 else y

def cross_entropy(logits, target, **options):
    loss = _cross_entropy(logits, target, **options)
    if options.get("reduction") == "sum":
        return Longer([loss])
    return Count(3) if options.get("ignore_index") == 2 else loss
"""
)
COHORT = Cohort("odd_answers")


@COHORT.notebooks
def _odd_notebooks(folder: Path) -> dict[str, Path]:
    """cross_entropy's solution with a last cell that rebinds its functions."""
    paths = {}
    for name, cell in (("float", FLOAT_AT_FULL_SMOOTHING), ("objects", KERNEL_OBJECTS)):
        notebook = nbformat.read(SOLUTIONS / "cross_entropy.ipynb", as_version=4)
        notebook.cells.append(nbformat.v4.new_code_cell(cell))
        paths[name] = folder / f"cross_entropy__{name}.ipynb"
        nbformat.write(notebook, paths[name])
    return paths


def not_passed(entry: Graded) -> dict[str, tuple[str, str]]:
    """{test: (status, message)} of the tests that did not pass."""
    return {t["id"]: (t["status"], t["message"]) for t in entry.report["tests"]
            if t["status"] != "passed"}  # fmt: skip


@pytest.mark.kernel
@pytest.mark.slow
def test_a_float_from_cross_entropy_fails_its_test_saying_so(cohort):
    entry = cohort["odd_answers"]["float"]
    assert entry.returncode == 1, entry.stderr
    failing = not_passed(entry)
    status, message = failing.pop("full_smoothing_ignores_the_target")
    assert status == "failed" and "got a float (" in message, message
    assert failing == {}


@pytest.mark.kernel
@pytest.mark.slow
def test_objects_only_a_kernel_makes_fail_their_tests_saying_what_came_back(cohort):
    entry = cohort["odd_answers"]["objects"]
    assert entry.returncode == 1, entry.stderr
    failing = not_passed(entry)
    expected = {
        "log_softmax_values": "got a Liar object",  # dim=0
        "log_softmax_keeps_shape_and_dtype": "got a numpy.ndarray",  # dim=1
        "single_class": "returned a value the grader cannot receive",  # C = 1
        "mean_and_sum": "got a list of 1",  # reduction="sum"
        "custom_ignore_index": "got a Count object",  # ignore_index=2
    }
    for test, said in expected.items():
        assert said in failing.get(test, ("", ""))[1], (test, failing.get(test))
    # a tensor subclass arrives as a plain tensor: float32 logits pass with right values
    assert "log_softmax_of_large_logits" not in failing
    # the one test that calls cross_entropy alone with C = 1: it calls the notebook's own
    # (rebound) log_softmax, whose Unlistable answer it cannot use, and raises
    status, message = failing.pop("smoothing_with_one_class")
    assert status == "error" and "'Unlistable' object has no attribute" in message, message
    for test, (status, message) in failing.items():
        assert status in ("failed", "error") and ("got " in message or "receive" in message), (
            test,
            message,
        )
