"""Whose fault is an exception in a hidden check? The candidate's answers explain it (a
verdict, `error`), or the suite has a bug (`GraderBug`, exit 3, no report).

The policy is tested with a fake session answering on the wire, as the shim would; one
kernel test shows the whole path through the CLI.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import nbformat
import pytest
import torch

from grader.cli import main
from grader.core.errors import GraderBug
from grader.core.limits import Limits
from grader.run.runner import run_checks
from grader.suite.checks import Failed
from grader.suite.exercise import Catalog, Exercise
from grader.suite.handle import Kernel
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

    status, message = _grade(check, torch.ones(2))
    assert status == "failed"
    assert message == "module(...) gave a float32 tensor of shape (2,), want an object"


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
        "grader.run.pipeline.load_catalog", lambda: Catalog({"doubling": _buggy_exercise()})
    )
    if debug:
        monkeypatch.setenv("GRADER_DEBUG", "1")
    else:
        monkeypatch.delenv("GRADER_DEBUG", raising=False)
    code = main([str(path), "--json"])
    out, err = capfd.readouterr()  # at the fd level: GRADER_DEBUG passes the kernel's stderr on
    error = json.loads(out)  # no report: the error object a batch lists for such a notebook
    assert code == 3 and error["exit_code"] == 3 and "tests" not in error
    assert "check doubles" in error["error"] and error["score"] == 0
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


# -- a check's own `assert` fails the check, as in pytest ---------------------------------

SUITE = """
import torch


def keeps_shape_and_dtype(kernel):
    \"\"\"Written as pytest taught: a plain assert.\"\"\"
    y = kernel.get("f")(torch.ones(2))
    assert y.shape == (3,), f"f(x) has shape {tuple(y.shape)}, want (3,)"


def multi_line(kernel):
    y = kernel.get("f")(torch.ones(2))
    assert y.dtype == torch.float64 or y.shape == (
        3,
    )


def positive(y):
    assert float(y.min()) > 0


def calls_the_candidate(kernel):
    kernel.get("f")(torch.ones(2))


def compares_with_torch_testing(kernel):
    torch.testing.assert_close(kernel.get("f")(torch.ones(2)), torch.ones(2))


def passes_a_matrix(kernel):
    kernel.get("f")(torch.ones(2, 2))
"""


def _suite(folder: Path) -> dict[str, Any]:
    """The functions of SUITE, written to `folder` as a suite file (a test module's asserts
    would be reworded by pytest's assertion rewriting)."""
    path = folder / "suite.py"
    path.write_text(SUITE)
    namespace: dict[str, Any] = {}
    exec(compile(SUITE, str(path), "exec"), namespace)
    return namespace


def test_a_checks_own_assert_fails_the_check_with_its_message(tmp_path):
    check = _suite(tmp_path)["keeps_shape_and_dtype"]
    assert _grade(check, torch.ones(2)) == ("failed", "f(x) has shape (2,), want (3,)")


def test_an_assert_without_a_message_fails_with_the_assert_statement(tmp_path):
    status, message = _grade(_suite(tmp_path)["multi_line"], torch.ones(2))
    assert status == "failed"
    assert message == "assertion failed: assert y.dtype == torch.float64 or y.shape == ( 3, )"


def test_an_assert_in_a_helper_of_the_suite_fails_the_check(tmp_path, monkeypatch):
    """A helper in a folder exercises are loaded from is the suite's code too."""
    folder = tmp_path / "exercises"
    folder.mkdir()
    positive = _suite(folder)["positive"]

    def check(kernel):  # in this test file; its helper is in the exercises folder
        positive(kernel.get("f")(torch.ones(2)))

    monkeypatch.setattr("grader.run.runner.exercises_folders", lambda: [folder])
    assert _grade(check, -torch.ones(2)) == (
        "failed",
        "assertion failed: assert float(y.min()) > 0",
    )
    monkeypatch.setattr("grader.run.runner.exercises_folders", lambda: [])
    with pytest.raises(GraderBug, match="AssertionError"):  # neither the check's file nor a suite's
        _grade(check, -torch.ones(2))


def test_torch_testings_assertion_called_by_the_check_fails_it_with_its_message(tmp_path):
    status, message = _grade(_suite(tmp_path)["compares_with_torch_testing"], torch.zeros(2))
    assert status == "failed"
    assert message.startswith("Tensor-likes are not close! Mismatched elements: 2 / 2")


def test_an_assertion_error_raised_outside_the_suite_is_still_the_graders_bug():
    import grader

    engine = str(Path(grader.__file__).parent / "kernel" / "session.py")
    namespace: dict[str, Any] = {}
    exec(compile("def call():\n    assert False\n", engine, "exec"), namespace)

    def check(kernel):
        kernel.get("f")(torch.ones(2))
        namespace["call"]()  # as if the grader's own code failed an assert

    with pytest.raises(GraderBug, match="AssertionError"):
        _grade(check, torch.ones(2))


def test_an_assertion_error_in_the_candidates_code_stays_the_candidates_error(tmp_path):
    raised = {"raised": {"type": "AssertionError", "message": "x must be 2-D", "where": "f"}}
    check = _suite(tmp_path)["calls_the_candidate"]
    assert _grade(check, raised) == ("error", "f raised AssertionError: x must be 2-D")


@pytest.mark.kernel
def test_a_checks_assert_grades_the_notebook_with_that_test_failed(tmp_path, capfd, monkeypatch):
    suite = _suite(tmp_path)
    exercise = Exercise(id="layer_norm", title="-", seed="-", levels=["one"], defines=("f",))
    for name in ("keeps_shape_and_dtype", "multi_line", "passes_a_matrix"):
        exercise.check("one")(suite[name])
    path = tmp_path / "f.ipynb"
    source = "def f(x):\n    assert x.dim() == 1, 'x must be 1-D'\n    return x"
    nbformat.write(notebook_with(source, exercise="layer_norm"), path)
    monkeypatch.setattr(
        "grader.run.pipeline.load_catalog", lambda: Catalog({"layer_norm": exercise})
    )
    code = main([str(path), "--json"])
    out, err = capfd.readouterr()
    assert code == 1, err
    tests = {t["id"]: t for t in json.loads(out)["tests"]}
    assert {t: tests[t]["status"] for t in tests} == {
        "keeps_shape_and_dtype": "failed",
        "multi_line": "failed",
        "passes_a_matrix": "error",  # the candidate's own assert, in the kernel
    }
    assert tests["keeps_shape_and_dtype"]["message"] == "f(x) has shape (2,), want (3,)"
    assert tests["multi_line"]["message"].startswith("assertion failed: assert y.dtype")
    assert "f raised AssertionError: x must be 1-D" in tests["passes_a_matrix"]["message"]
