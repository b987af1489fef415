"""The fast layer: the runner, remote objects, the shim's answers and every exercise's checks
against its solution and scaffold, with the notebook run in this process
(`grader.run.inprocess.InProcessSession`) instead of a kernel. What only a kernel can show
(timeouts, deaths, the guard, the sandbox) is tested with real kernels elsewhere; the
corpora are graded in this process too, through the whole pipeline, by
`test_exercises.py` (which checks a sample against real kernels)."""

from __future__ import annotations

import functools
import math

import nbformat
import pytest
import torch

from grader.core.limits import Limits
from grader.core.outcomes import CandidateRaised, Status
from grader.core.results import CheckResult
from grader.run.inprocess import InProcessSession
from grader.run.runner import run_checks
from grader.suite.exercise import Exercise, load_catalog
from grader.suite.handle import (
    Foreign,
    Kernel,
    Remote,
    attribute_step,
    call_step,
    hold_step,
    set_step,
)
from tests.helpers import SCAFFOLDS, SOLUTIONS

CATALOG = load_catalog()
EXERCISES = sorted(CATALOG)


def graded(exercise: Exercise, notebook: nbformat.NotebookNode) -> list[CheckResult]:
    """Run the notebook's code cells here, then the exercise's checks against them."""
    sources = [(i, c.source) for i, c in enumerate(notebook.cells) if c.cell_type == "code"]
    session = InProcessSession(sources)
    session.prepare(exercise.watch.kernel_config())
    return run_checks(exercise, Kernel(session), Limits(), math.inf)


@functools.cache
def _read(path) -> nbformat.NotebookNode:
    return nbformat.read(path, as_version=4)


def read(path) -> nbformat.NotebookNode:
    """The notebook (read once per test run; `apply` works on a copy)."""
    return _read(path)


@pytest.mark.parametrize("exercise", EXERCISES)
def test_solution_passes_every_check(exercise):
    results = graded(CATALOG[exercise], read(SOLUTIONS / f"{exercise}.ipynb"))
    assert [(r.id, r.message) for r in results if r.status != Status.PASSED] == []


@pytest.mark.parametrize("exercise", EXERCISES)
def test_scaffold_is_not_implemented_everywhere(exercise):
    results = graded(CATALOG[exercise], read(SCAFFOLDS / f"{exercise}.ipynb"))
    assert {r.status for r in results} == {Status.NOT_IMPLEMENTED}


# -- remote objects and the shim's answers, on a small notebook ------------------------

NOTEBOOK = """
import numpy as np
import torch
from torch import nn

class Scale(nn.Module):
    def __init__(self, factor):
        super().__init__()
        self.weight = nn.Parameter(torch.full((3,), float(factor)))
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
        return self.drop(x) * self.weight

    def stub(self):
        raise NotImplementedError("write stub")

    def array(self):
        return np.zeros(2)

    def generator(self):
        return (i for i in range(3))

def double(x):
    return 2 * x

class Counter:  # stateful: a step changes held tensors in place; a count; a property

    def __init__(self, params):
        self.params, self.steps = params, 0

    @torch.no_grad()
    def step(self):
        for p in self.params:
            p.sub_(p.grad)
        self.steps += 1

    @property
    def twice(self):
        return 2 * self.steps

def tokens(data):
    return {"ids": torch.tensor(list(data)), "pairs": {(data[0], data[1]): data[:2]}}

def broken(x):
    return x.no_such_method()
"""


@pytest.fixture()
def kernel() -> Kernel:
    session = InProcessSession([(0, NOTEBOOK)])
    session.prepare()
    return Kernel(session)


def test_calls_travel_as_tensors_and_objects_stay_remote(kernel):
    module = kernel.new("Scale", 3)
    assert isinstance(module, Remote) and module.type_name == "__main__.Scale"
    x = torch.ones(2, 3)
    module.eval()
    assert torch.equal(module(x), torch.full((2, 3), 3.0))
    assert torch.equal(kernel.get("double")(x), 2 * x)


def test_many_calls_in_one_request(kernel):
    module = kernel.new("Scale", 3)
    module.eval()
    calls_before = kernel.session.calls
    ones, twos = kernel.many(module, [((torch.ones(3),), {}), ((2 * torch.ones(3),), {})])
    assert torch.equal(ones, torch.full((3,), 3.0)) and torch.equal(twos, torch.full((3,), 6.0))
    assert kernel.session.calls == calls_before + 1
    broken = kernel.get("broken")
    with pytest.raises(CandidateRaised, match="broken raised AttributeError"):
        kernel.many(broken, [((torch.ones(1),), {}), ((torch.ones(2),), {})])


def test_a_seeded_call_draws_the_same_dropout_every_time(kernel):
    module = kernel.new("Scale", 1)
    x = torch.ones(4, 3)
    first, again, other = module.seeded(1)(x), module.seeded(1)(x), module.seeded(2)(x)
    assert torch.equal(first, again) and not torch.equal(first, other)


def test_candidate_exceptions_come_back_as_outcomes(kernel):
    module = kernel.new("Scale", 1)
    with pytest.raises(CandidateRaised) as stub:
        module.stub()
    assert stub.value.status == Status.NOT_IMPLEMENTED
    assert stub.value.message() == "not implemented: Scale.stub"
    with pytest.raises(CandidateRaised) as raised:
        kernel.get("broken")(torch.ones(1))
    assert raised.value.status == Status.ERROR
    assert "broken raised AttributeError" in raised.value.message()
    assert "[at: return x.no_such_method()]" in raised.value.message()
    with pytest.raises(CandidateRaised, match="does not define Missing"):
        kernel.new("Missing")


def test_values_that_cannot_cross_the_wire(kernel):
    module = kernel.new("Scale", 1)
    assert module.array() == Foreign("numpy.ndarray", "[0. 0.]")
    assert isinstance(module.generator(), Remote)  # an object of the candidate's, by reference


def test_gradients_reach_inputs_and_parameters(kernel):
    module = kernel.new("Scale", 2)
    module.eval()
    grads = kernel.grad(module, (torch.ones(2, 3),), {}, wrt=[0], cotangent=torch.ones(2, 3))
    assert torch.equal(grads["inputs"][0], torch.full((2, 3), 2.0))
    assert torch.equal(grads["params"]["weight"], torch.full((3,), 2.0))


def test_the_watch_sees_the_exercises_builtins():
    session = InProcessSession([(0, "import torch\ndef f(x):\n    return torch.softmax(x, -1)")])
    session.prepare({"functions": ["softmax"]})
    Kernel(session).get("f")(torch.ones(2, 2))
    assert Kernel(session).seen == {"softmax"}


def test_a_cell_that_raises_is_recorded_and_the_rest_run():
    session = InProcessSession([(0, "x = 1"), (2, "1 / 0"), (3, "y = x + 1")])
    session.prepare()
    assert [c.status for c in session.cells] == [Status.PASSED, Status.ERROR, Status.PASSED]
    assert session.cells[1].message == "ZeroDivisionError: division by zero"
    assert session.namespace["y"] == 2


def test_stateful_objects_hold_set_and_attributes(kernel):
    """A value held in the kernel is the candidate's object: a call changes it in place,
    and the suite reads it back; fields and properties read like values."""
    p = kernel.hold(torch.ones(3), "p")
    assert isinstance(p, Remote) and p.label == "p"
    kernel.set_attribute(p, "grad", torch.full((3,), 0.5))
    counter = kernel.new("Counter", [p])
    counter.step()
    counter.step()
    assert torch.equal(kernel.attribute(p, "data"), torch.zeros(3))
    assert kernel.attribute(counter, "steps") == 2 and kernel.attribute(counter, "twice") == 4
    with pytest.raises(CandidateRaised, match="AttributeError"):
        kernel.attribute(counter, "missing")


def test_answers_that_are_not_float_tensors(kernel):
    answer = kernel.get("tokens")(b"ab")
    assert torch.equal(answer["ids"], torch.tensor([97, 98]))
    assert answer["pairs"] == {(97, 98): b"ab"}


def test_a_batch_mixes_holds_sets_calls_and_reads_in_one_request(kernel):
    """A stateful run in one round trip: what an optimizer's lockstep test sends."""
    (p,) = kernel.batch([hold_step(torch.ones(2), "p")])
    counter = kernel.new("Counter", [p])
    before = kernel.session.calls
    steps = []
    for g in (0.25, 0.5):
        steps += [set_step(p, "grad", torch.full((2,), g)), call_step(counter, "step")]
        steps.append(attribute_step(p, "data"))
    steps.append(attribute_step(counter, "twice"))
    answers = kernel.batch(steps)
    assert kernel.session.calls == before + 1
    assert answers[0] is None and answers[1] is None  # a set, a step
    assert torch.equal(answers[2], torch.full((2,), 0.75))
    assert torch.equal(answers[5], torch.full((2,), 0.25)) and answers[6] == 4
    with pytest.raises(CandidateRaised, match="Counter.missing"):
        kernel.batch([call_step(counter, "step"), call_step(counter, "missing")])


def test_the_librarys_train_and_eval_checks(kernel):
    """Scale holds a Dropout(0.5): eval mode is deterministic and dropout-free, train mode
    changes the output; an eval output that is not the dropout-free one fails."""
    from grader.suite import library
    from grader.suite.checks import Failed

    x = torch.ones(4, 3)
    module = kernel.new("Scale", 2)
    library.eval_mode_is_deterministic(module, lambda m: m(x), 2 * x, "output")
    library.train_mode_differs(module, lambda m: m(x), "output")
    with pytest.raises(Failed, match="eval-mode output vs no randomness"):
        library.eval_mode_is_deterministic(module, lambda m: m(x), 3 * x, "output")
    module.eval()
    with pytest.raises(Failed, match="train-mode output vs eval mode"):
        library.train_mode_differs(kernel.new("Scale", 0), lambda m: m(x), "output")
