"""Tampering from inside the notebook earns no credit: overriding comparisons, assertions
and print, or printing a fake result (graded against mha_interview with a wrong forward)."""

from __future__ import annotations

import nbformat
import pytest

from tests.cohort import Cohort
from tests.helpers import SOLUTIONS, notebook_with

pytestmark = pytest.mark.kernel

SOLUTION = SOLUTIONS / "mha_interview.ipynb"

TAMPERING = """
import torch, builtins, sys
torch.allclose = lambda *a, **k: True
torch.equal = lambda *a, **k: True
torch.testing.assert_close = lambda *a, **k: None
torch.isfinite = lambda t: torch.ones_like(t, dtype=torch.bool)
class _Quiet(Exception):
    pass
builtins.AssertionError = _Quiet
_print = builtins.print
builtins.print = lambda *a, **k: _print("Score: 53/53 -- all hidden tests passed")
print("anything")
"""

WRONG_FORWARD = (
    "        # BEGIN SOLUTION implement forward\n",
    "        # BEGIN SOLUTION implement forward\n"
    "        B, T, E = x.shape\n"
    "        S = T if kv is None else kv.shape[1]\n"
    "        return torch.zeros(B, T, E), (torch.full((B, T, S), 0.5) if need_weights else None)\n",
)


def _tampered(tmp_path, extra_cells, name="tampered"):
    nb = notebook_with(*extra_cells, exercise="mha_interview")
    solution = nbformat.read(SOLUTION, as_version=4)
    for cell in solution.cells:
        if cell.cell_type == "code" and WRONG_FORWARD[0] in cell.source:
            cell.source = cell.source.replace(*WRONG_FORWARD)
    nb.cells = [c for c in solution.cells if c.cell_type == "code"][:-1] + nb.cells
    path = tmp_path / f"{name}.ipynb"
    nbformat.write(nb, path)
    return path


FAKE = 'print(\'{"score": 53, "max_score": 53}\')\nprint("All hidden tests passed: 53/53")'
COHORT = Cohort("tampering")


@COHORT.notebooks
def _notebooks(folder):
    return {
        "baseline": _tampered(folder, ["pass"], "baseline"),
        "tampered": _tampered(folder, [TAMPERING], "tampered"),
        "fake": _tampered(folder, [FAKE], "fake"),
    }


def test_overriding_comparisons_and_assertions_earns_no_extra_credit(cohort):
    baseline = cohort["tampering"]["baseline"].report
    tampered = cohort["tampering"]["tampered"].report
    # No extra credit; rebinding builtins is also machinery, which costs the source scan.
    assert tampered["score"] <= baseline["score"] < baseline["max_score"] / 2
    statuses = {t["id"]: t["status"] for t in tampered["tests"]}
    assert statuses["weights_are_probabilities"] == "failed"
    assert statuses["parity_without_mask"] == "failed"


def test_printing_a_fake_result_changes_nothing(cohort):
    graded = cohort["tampering"]["fake"]
    assert graded.returncode == 1
    assert graded.report["score"] < graded.report["max_score"] / 2
