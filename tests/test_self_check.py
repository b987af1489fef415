"""mha_parity's public self-check: the notebook's own check runs the hidden suite's
original case (the seed document's), with the expected rows the suite's reference gives."""

from __future__ import annotations

import ast

import nbformat
import torch

from grader.exercises.mha_parity import suite
from tests.helpers import SOLUTIONS

SOLUTION = SOLUTIONS / "mha_parity.ipynb"


def _self_check_namespace() -> dict:
    """The solution's code cells, run here up to (not including) the call of self_check()."""
    nb = nbformat.read(SOLUTION, as_version=4)
    sources = [c.source for c in nb.cells if c.cell_type == "code"]
    sources[-1] = sources[-1].replace("\nself_check()", "")
    namespace: dict = {}
    for source in sources:
        exec(compile(ast.parse(source), str(SOLUTION), "exec"), namespace)
    return namespace


def test_public_self_check_uses_the_hidden_suites_original_case():
    namespace = _self_check_namespace()
    q, k, v, weights, masks = namespace["seed_case"]()
    hidden = suite.seed_case()
    for mine, theirs in zip((q, k, v), hidden[:3], strict=True):
        assert torch.equal(mine, theirs)
    assert all(torch.equal(weights[name], hidden[3][name]) for name in weights)
    for name, mask in masks.items():
        want = suite.reference(q, k, v, mask, weights, heads=2)
        for (n, i), row in namespace["EXPECTED"][name].items():
            assert torch.allclose(
                torch.tensor(row, dtype=torch.float64), want[n, i], rtol=0, atol=1e-15
            )
