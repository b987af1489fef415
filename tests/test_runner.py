"""Whose fault is an exception in a hidden check? The candidate's answers explain it (a
verdict, `error`), or the suite has a bug (`GraderBug`, exit 3, no report).

The policy is tested with a fake session answering on the wire, as the shim would; one
kernel test shows the whole path through the CLI.
"""

from __future__ import annotations

import math
from typing import Any

import nbformat
import pytest
import torch

from grader.checks import Failed
from grader.cli import main
from grader.errors import GraderBug
from grader.exercise import Catalog, Exercise
from grader.limits import Limits
from grader.remote import Kernel
from grader.runner import run_checks
from tests.helpers import notebook_with


class FakeSession:
    """Answers every call with the next of `answers` (wire form: tensors, plain data,
    ``{"__ref__": n, "type": name}``, ``{"__foreign__": name}``), or with what constructing
    a class gives when the request names one."""

    sources: list = []
    seen: set = set()

    def __init__(self, *answers: Any) -> None:
        self.answers = list(answers)

    def call(self, request: dict[str, Any], timeout: float | None = None) -> dict[str, Any]:
        target = request.get("target") or {}
        if target.get("__global__", "").istitle() and request.get("method") is None:
            return {"value": {"__ref__": 1, "type": f"__main__.{target['__global__']}"}}
        value = self.answers.pop(0)
        return value if isinstance(value, dict) and "raised" in value else {"value": value}


def _exercise(check, exercise_id: str = "demo") -> Exercise:
    exercise = Exercise(id=exercise_id, title="Demo", seed="-", levels=["one"], defines=("f",))
    exercise.check("one")(check)
    return exercise


def _grade(check, *answers: Any):
    """Run one check against the fake session: its (status, message), or GraderBug."""
    results = run_checks(_exercise(check), Kernel(FakeSession(*answers)), Limits(), math.inf)
    return results[0].status, results[0].message


# -- the suite's bugs ---------------------------------------------------------------------


def test_name_error_in_a_check_is_the_graders_bug_naming_exercise_and_check():
    def uses_an_undefined_helper(kernel):
        y = kernel.get("f")(torch.ones(2))
        checks_tensor(y)  # noqa: F821 - the bug under test

    with pytest.raises(GraderBug) as caught:
        _grade(uses_an_undefined_helper, torch.ones(2))
    bug = caught.value
    assert bug.exit_code == 3
    assert (bug.exercise, bug.check) == ("demo", "uses_an_undefined_helper")
    assert isinstance(bug.__cause__, NameError)
    assert "exercise demo, check uses_an_undefined_helper" in str(bug)
    assert "NameError" in str(bug) and "\n" not in str(bug)


@pytest.mark.parametrize(
    "bug",
    [
        lambda y: {"a": 1}["b"],
        lambda y: float(y.sum()) / 0,
        lambda y: [][0],  # an IndexError, but the answer was a plain tensor
        lambda y: y + "x",  # a TypeError, same
    ],
    ids=["KeyError", "ZeroDivisionError", "IndexError", "TypeError"],
)
def test_a_crash_when_every_answer_was_a_tensor_is_the_graders_bug(bug):
    def check(kernel):
        bug(kernel.get("f")(torch.ones(2)))

    with pytest.raises(GraderBug):
        _grade(check, torch.ones(2))


def test_a_bare_assert_in_a_check_is_the_graders_bug():
    def check(kernel):
        y = kernel.get("f")(torch.ones(2))
        assert y.shape == (3,)

    with pytest.raises(GraderBug, match="AssertionError"):
        _grade(check, torch.ones(2))


def test_a_crash_on_the_constructed_object_is_the_graders_bug():
    def check(kernel):
        module = kernel.new("Module")  # what was asked for: a remote object
        module.shape[0]  # the suite treats it as a tensor

    with pytest.raises(GraderBug, match="TypeError"):
        _grade(check)


def test_a_check_that_calls_no_candidate_code_cannot_blame_the_candidate():
    def check(kernel):
        "".missing_method()

    with pytest.raises(GraderBug, match="AttributeError"):
        _grade(check)


# -- the candidate's malformed answers stay verdicts --------------------------------------


def test_an_object_where_a_tensor_was_expected_is_the_candidates_error():
    def check(kernel):
        y = kernel.new("Module")(torch.ones(2))
        y.shape[0]

    status, message = _grade(check, {"__ref__": 2, "type": "__main__.Module"})
    assert status == "error" and message.startswith("unexpected answer: TypeError")


def test_a_foreign_value_where_a_tensor_was_expected_is_the_candidates_error():
    def check(kernel):
        _ = kernel.get("f")(torch.ones(2)).shape

    status, message = _grade(check, {"__foreign__": "numpy.ndarray", "repr": "[1. 1.]"})
    assert status == "error" and "AttributeError" in message


def test_a_tuple_of_the_wrong_length_is_the_candidates_error():
    def check(kernel):
        y, w = kernel.get("f")(torch.ones(2))

    status, message = _grade(check, (torch.ones(2), torch.ones(2), torch.ones(2)))
    assert status == "error" and "ValueError: too many values to unpack" in message


def test_none_where_a_tensor_was_expected_is_the_candidates_error():
    def check(kernel):
        kernel.get("f")(torch.ones(2)).sum()

    assert _grade(check, None)[0] == "error"


def test_a_class_that_builds_something_else_is_the_candidates_error():
    def check(kernel):
        kernel.new("module")(torch.ones(2))  # lower case: the fake answers with a tensor

    assert _grade(check, torch.ones(2))[0] == "error"


def test_verdicts_are_unchanged():
    def wrong(kernel):
        raise Failed("output: got 1, want 2")

    def raises(kernel):
        kernel.get("f")(torch.ones(2))

    assert _grade(wrong) == ("failed", "output: got 1, want 2")
    raised = {"raised": {"type": "RuntimeError", "message": "boom", "where": "f"}}
    assert _grade(raises, raised) == ("error", "f raised RuntimeError: boom")
    stub = {"raised": {"type": "NotImplementedError", "not_implemented": True, "where": "f"}}
    assert _grade(raises, stub) == ("not_implemented", "not implemented: f")


def test_each_test_is_judged_on_its_own_answers():
    def loose(kernel):
        kernel.get("f")(torch.ones(2))

    def buggy(kernel):
        kernel.get("f")(torch.ones(2)) + "x"

    exercise = _exercise(loose)
    exercise.check("one")(buggy)
    kernel = Kernel(FakeSession(None, torch.ones(2)))
    with pytest.raises(GraderBug, match="check buggy"):
        run_checks(exercise, kernel, Limits(), math.inf)


# -- the whole path -----------------------------------------------------------------------


def _buggy_exercise() -> Exercise:
    exercise = Exercise(
        id="doubling", title="Double a tensor", seed="-", levels=["one"], defines=("double",)
    )

    @exercise.check("one")
    def doubles(kernel):
        """The suite divides by zero: nothing the candidate can fix."""
        y = kernel.get("double")(torch.ones(3))
        if float(y.sum()) / 0:
            raise Failed("unreachable")

    return exercise


@pytest.mark.kernel
@pytest.mark.parametrize("debug", [False, True], ids=["plain", "GRADER_DEBUG"])
def test_a_bug_in_a_check_exits_3_with_one_line_and_no_report(tmp_path, capfd, monkeypatch, debug):
    path = tmp_path / "double.ipynb"
    nbformat.write(notebook_with("def double(x):\n    return 2 * x", exercise="doubling"), path)
    monkeypatch.setattr(
        "grader.grade.load_catalog", lambda: Catalog({"doubling": _buggy_exercise()})
    )
    if debug:
        monkeypatch.setenv("GRADER_DEBUG", "1")
    else:
        monkeypatch.delenv("GRADER_DEBUG", raising=False)
    code = main([str(path), "--json"])
    out, err = capfd.readouterr()  # at the fd level: GRADER_DEBUG passes the kernel's stderr on
    assert code == 3 and out == ""
    assert "exercise doubling, check doubles" in err and "ZeroDivisionError" in err
    if debug:
        assert "Traceback" in err and "float(y.sum()) / 0" in err
    else:
        assert err.count("\n") == 1 and "Traceback" not in err


# -- what the candidate may read runs before any hidden test -------------------------------


def _ordered_exercise(ran: list[str]) -> Exercise:
    exercise = Exercise(
        id="demo", title="Demo", seed="-", levels=["one", "two", "three"], defines=("f",)
    )
    for name, level, hidden in [
        ("hidden_1", "one", True), ("public_1", "one", False), ("hidden_2", "two", True),
        ("hidden_3", "three", True), ("public_3", "three", False),
    ]:  # fmt: skip

        def check(kernel, _name=name):
            ran.append(_name)

        check.__name__ = name
        exercise.check(level, hidden=hidden)(check)
    return exercise


@pytest.mark.parametrize(
    ("reveal", "first"),
    [
        (None, ["public_1", "public_3"]),
        (1, ["hidden_1", "public_1", "public_3"]),
        (2, ["hidden_1", "public_1", "hidden_2", "public_3"]),
    ],
)
def test_shown_tests_run_before_any_hidden_one_and_the_report_keeps_level_order(reveal, first):
    """A graded call that remembers every input cannot put a hidden test's input in a
    message the candidate's card shows (`--reveal N`: levels 1..N are shown too)."""
    ran: list[str] = []
    exercise = _ordered_exercise(ran)
    results = run_checks(exercise, Kernel(FakeSession()), Limits(reveal=reveal), math.inf)
    assert ran[: len(first)] == first
    assert [r.id for r in results] == [c.id for c in exercise.checks]
