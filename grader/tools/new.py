"""`grade new EXERCISE`: a working exercise to start from, in the files an author writes.

The skeleton is a whole exercise (a row-wise softmax, named after the new id): its suite,
its corpus of single-bug mutants and its solution notebook (a markdown statement, the
reference with the candidate's part marked, and a public self-check cell). `grade new`
writes them and builds them (scaffold, catalog index, hints), so the tree is green at once;
the author then replaces the example with their own and runs `grade build` again. Every
convention an author would otherwise have to guess is said in a comment where it is used.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat

from grader.core.errors import UsageError

EXAMPLE = "softmax_rows"  # the id the templates are written with; `grade new` renames it
_ID = re.compile(r"[a-z][a-z0-9_]*\Z")

SUITE = '''\
"""The hidden suite of softmax_rows.

Written by `grade new`: a row-wise softmax to start from. Replace the function, the
checks and the corpus with your exercise's, then run `grade build`.

A check is a function of a `Kernel`, registered on a level with `@exercise.check`:
it passes when it returns and fails with its message when it raises. To fail it, use
the assertions in `grader.suite.checks` (their messages say what is wrong with a tensor) or
a plain `assert` with a message; any other exception is a bug in the suite, not in the
notebook.

One bug, one place: each check tests one thing and calls with every other option at its
default, so a bug loses points at its own check (docs/authoring.md, "Checklist").
"""

import torch

from grader.suite import checks
from grader.suite import library as lib
from grader.suite.exercise import Exercise, Watch
from grader.suite.integrity import require_clean_source, require_nothing_seen

FUNCTION = "softmax_rows"  # what the candidate writes

exercise = Exercise(
    # the folder's name; a notebook names it in its metadata
    id="softmax_rows",
    title="Row-wise softmax, from scratch",
    # the source document the exercise was written from; "-" for none
    seed="-",
    # climbed in this order; each check names its level
    levels=["shapes", "values", "edge cases", "from scratch"],
    # the top-level names that identify a notebook as this exercise
    defines=(FUNCTION,),
    # torch names the source scan flags where the notebook binds them
    forbidden=("softmax", "log_softmax"),
    # while the hidden tests run, torch functions (`functions`) and aten ops (`ops`,
    # fragments of their names) seen in the kernel are the built-in, named `what`
    watch=Watch(what="softmax", functions=("softmax",), ops=("_softmax",)),
)


def x(*shape, seed=0, scale=1.0):
    """Reproducible float64 noise (inputs never depend on the candidate)."""
    return lib.randn(*shape, seed=seed, scale=scale, dtype=torch.float64)


# hidden=False: the candidate's card shows this check with its inputs (see --reveal)
@exercise.check("shapes", hidden=False)
def keeps_the_shape(kernel):
    """The output has the input's shape."""
    # checks.tensor(value, what, shape=None): a floating-point tensor (of that shape)
    checks.tensor(kernel.get(FUNCTION)(x(3, 5)), f"{FUNCTION}(x)", (3, 5))


@exercise.check("values", points=2)
def matches_torch(kernel):
    """Same values as torch.softmax over the last axis (float64)."""
    data = x(4, 7, seed=1)
    got = kernel.get(FUNCTION)(data)
    # checks.close(actual, expected, what, *, rtol=None, atol=None, where=None): at
    # least torch.testing.assert_close's default tolerances for the dtypes compared
    # (only where the bool tensor `where` is True, when given)
    checks.close(got, torch.softmax(data, dim=-1), f"{FUNCTION}(x) vs torch.softmax")


@exercise.check("edge cases")
def large_inputs_stay_probabilities(kernel):
    """Inputs near 1e4 still give rows of probabilities."""
    got = kernel.get(FUNCTION)(x(2, 6, seed=2, scale=1e4))
    checks.finite(got, "the output for large inputs")
    assert got.min() >= 0, "the output for large inputs has negative entries"
    checks.rows_sum_to_one(got, "the output for large inputs")


@exercise.check("edge cases")
def non_contiguous_input(kernel):
    """A non-contiguous x (`.view` that merges its axes fails) gives the same values."""
    data = x(3, 4, 5, seed=3)
    got = kernel.get(FUNCTION)(lib.noncontiguous(data))
    want = torch.softmax(data, dim=-1)
    checks.close(got, want, f"{FUNCTION}(x) for a non-contiguous x")


@exercise.check("edge cases")
def input_left_unchanged(kernel):
    """x is left unchanged (the statement says so): not modified in place."""
    data = x(3, 5, seed=4)
    # a tensor kept in the kernel: the call gets it, and it is read back after
    held = kernel.hold(data, "x")
    kernel.get(FUNCTION)(held)
    checks.equal(kernel.attribute(held, "data"), data, "x after the call")


@exercise.check("from scratch")
def no_builtin_softmax(kernel):
    """Neither the source nor the run uses torch's softmax."""
    # the watch saw every call the other checks made: this one, with the simplest input,
    # is there so that a stub answers first
    kernel.get(FUNCTION)(x(2, 3))
    require_clean_source(kernel.sources, exercise.forbidden, exercise.watch)
    require_nothing_seen(kernel.seen)
'''

CORPUS = '''\
"""The corpus of softmax_rows.

Single-bug copies of the solution (each must first lose points on its level, and
the card asks its hint when a notebook fails the same way) and correct variants
(each must keep full marks).

Mutant(name, old, new, level, hint=..., values=False): `old` is found exactly once
in the solution's code and replaced by `new`. `values=True` marks a bug in the values
every check compares (a wrong axis, a wrong formula): it may lose points everywhere.
Any other mutant is about one feature and should lose points at its own level only
(`grade hints` measures how far each spreads).
"""

from grader.suite.corpus import Mutant, Variant

MIN_MUTANTS = 4  # the corpus test fails if it ever shrinks below this

MUTANTS = [
    Mutant(
        "sum_over_the_first_axis",
        "e.sum(dim=-1, keepdim=True)",
        "e.sum(dim=0, keepdim=True)",
        "values",
        hint="normalised over the first axis (dim=0) instead of the last?",
        values=True,
    ),
    Mutant(
        "no_shift",
        "shifted = x - x.max(dim=-1, keepdim=True).values",
        "shifted = x",
        "edge cases",
        hint="exp of the raw inputs, without subtracting the row maximum?",
    ),
    Mutant(
        "row_maxima_through_view",
        "x.max(dim=-1, keepdim=True).values",
        "x.view(-1, x.shape[-1]).max(dim=-1).values.view(*x.shape[:-1], 1)",
        "edge cases",
        hint="x flattened with .view, which fails on a non-contiguous x (use reshape)?",
    ),
    Mutant(
        "shifted_in_place",
        "shifted = x - x.max(dim=-1, keepdim=True).values",
        "shifted = x.sub_(x.max(dim=-1, keepdim=True).values)",
        "edge cases",
        hint="x shifted in place by its row maximum, changing the caller's tensor?",
    ),
]
VARIANTS = [Variant("torch_exp", "e = shifted.exp()", "e = torch.exp(shifted)")]
'''

STATEMENT = """\
# Row-wise softmax, from scratch

Implement `softmax_rows(x)`: the softmax of a tensor over its last axis, stable for inputs
as large as 1e4. Fill in every stub that raises `NotImplementedError`; keep the names and
signatures.

- Input: a floating-point tensor of any shape, contiguous or not; output: the same shape
  and dtype. The input is left unchanged (never modified in place).
- The hidden tests use float64 and compare at `torch.testing.assert_close`'s default
  tolerances.
- From scratch: do not use `torch.softmax`, `F.softmax` or `log_softmax` (torch's other
  functions, the standard library, numpy and einops are allowed).
"""

REFERENCE = '''\
import torch


def softmax_rows(x: torch.Tensor) -> torch.Tensor:
    """Softmax over the last axis, stable for large inputs."""
    # BEGIN SOLUTION implement softmax_rows
    shifted = x - x.max(dim=-1, keepdim=True).values
    e = shifted.exp()
    return e / e.sum(dim=-1, keepdim=True)
    # END SOLUTION
'''

SELF_CHECK_INTRO = """\
## Self-check

Run the next cell: it checks the shape and that rows sum to one on a small input. The
hidden suite checks much more.
"""

SELF_CHECK = """\
x = torch.randn(3, 5, dtype=torch.float64)
y = softmax_rows(x)
assert y.shape == x.shape, y.shape
assert torch.allclose(y.sum(dim=-1), torch.ones(3, dtype=torch.float64))
print("self-check passed")
"""


def solution_notebook(exercise: str) -> nbformat.NotebookNode:
    """The solution notebook of the skeleton, for `exercise`: statement, reference (the
    candidate's part between BEGIN and END SOLUTION), self-check."""
    cells = [
        nbformat.v4.new_markdown_cell(STATEMENT),
        nbformat.v4.new_code_cell(REFERENCE),
        nbformat.v4.new_markdown_cell(SELF_CHECK_INTRO),
        nbformat.v4.new_code_cell(SELF_CHECK),
    ]
    nb = nbformat.v4.new_notebook(cells=cells)
    for cell in nb.cells:
        cell.source = _named(cell.source.rstrip("\n"), exercise)
    nb.metadata["grader"] = {"exercise": exercise}
    nb.metadata["kernelspec"] = {
        "display_name": "Python 3",
        "language": "python",
        "name": "python3",
    }
    nb.metadata["language_info"] = {"name": "python"}
    return nb


def skeleton(exercise: str) -> dict[str, str]:
    """Every file of the skeleton, by path relative to the project root."""
    folder = f"exercises/{exercise}"
    return {
        f"{folder}/__init__.py": "",
        f"{folder}/suite.py": _named(SUITE, exercise),
        f"{folder}/corpus.py": _named(CORPUS, exercise),
        f"solutions/{exercise}.ipynb": nbformat.writes(solution_notebook(exercise)) + "\n",
    }


def write_skeleton(root: Path, exercise: str) -> list[Path]:
    """Write the skeleton of `exercise` under `root` and return the files written.

    Raises:
        UsageError: the id is not a lowercase Python name, a file it would write exists, or
            one cannot be written.
    """
    if not _ID.match(exercise):
        raise UsageError(
            f"{exercise!r}: an exercise id is a lowercase Python name (letters, digits, _)"
        )
    files = {root / path: text for path, text in skeleton(exercise).items()}
    taken = [str(path) for path in files if path.exists()]
    if taken:
        raise UsageError(f"{taken[0]}: exists already; grade new writes only new files")
    for path, text in files.items():
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        except OSError as e:
            raise UsageError(f"{path}: cannot write: {e.strerror or e}") from None
    return list(files)


def _named(text: str, exercise: str) -> str:
    return text.replace(EXAMPLE, exercise)
