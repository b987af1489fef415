"""mha_interview end to end, through the real `grade` CLI and real kernels:
the solution earns full marks, the scaffold earns nothing, every single-bug mutant loses
points at the level a person would expect, and tampering earns no credit."""

from __future__ import annotations

import pytest

from tests.helpers import (
    SCAFFOLDS,
    SOLUTIONS,
    Mutant,
    assert_first_fails_at,
    assert_full_marks,
    assert_nothing_implemented,
    grade,
    grade_many,
    notebook_with,
    write_mutants,
)

pytestmark = pytest.mark.kernel

SOLUTION = SOLUTIONS / "mha_interview.ipynb"

MUTANTS = [
    Mutant(
        "scale_by_sqrt_embed_dim",
        "math.sqrt(self.head_dim)",
        "math.sqrt(self.cfg.embed_dim)",
        "parity",
    ),
    Mutant("no_scaling", " / math.sqrt(self.head_dim)", "", "parity"),
    Mutant(
        "softmax_over_queries",
        "masked_fill(blocked, 0.0), dim=-1)",
        "masked_fill(blocked, 0.0), dim=-2)",
        "normalization",
    ),
    Mutant(
        "split_without_transpose",
        "x.reshape(B, T, self.cfg.num_heads, self.head_dim).transpose(1, 2)",
        "x.reshape(B, self.cfg.num_heads, T, self.head_dim)",
        "padding",
    ),
    Mutant(
        "merge_without_transpose",
        "xh.transpose(1, 2).reshape(B, T, H * Dh)",
        "xh.reshape(B, T, H * Dh)",
        "causal",
    ),
    Mutant(
        "strided_head_split",
        "x.reshape(B, T, self.cfg.num_heads, self.head_dim).transpose(1, 2)",
        "x.reshape(B, T, self.head_dim, self.cfg.num_heads).transpose(2, 3).transpose(1, 2)",
        "parity",
    ),
    Mutant(
        "inverted_bool_mask",
        "logits.masked_fill(~attn_mask,",
        "logits.masked_fill(attn_mask,",
        "causal",
    ),
    Mutant(
        "inverted_key_padding",
        "masked_fill(~key_padding_mask[",
        "masked_fill(key_padding_mask[",
        "padding",
    ),
    Mutant("ignored_key_padding", "if key_padding_mask is not None:", "if False:", "padding"),
    Mutant(
        "padding_not_broadcast_over_heads",
        "key_padding_mask[:, None, None, :]",
        "key_padding_mask[None, :, None, :]",
        "padding",
    ),
    Mutant(
        "no_out_proj", "y = self.out_proj(self._merge_heads(", "y = (self._merge_heads(", "parity"
    ),
    Mutant(
        "dropout_active_in_eval",
        "self.dropout(weights) @ v",
        "F.dropout(weights, self.cfg.dropout_p) @ v",
        "training",
    ),
    Mutant("dropout_never_applied", "self.dropout(weights) @ v", "weights @ v", "training"),
    Mutant(
        "nan_in_train_mode",  # NaN is no evidence that dropout acted
        "self.dropout(weights) @ v",
        '(self.dropout(weights) * (float("nan") if self.training and self.dropout.p else 1.0)) @ v',
        "training",
    ),
    Mutant("per_head_weights_returned", "(weights.mean(dim=1) if", "(weights if", "shapes"),
    Mutant(
        "weights_summed_over_heads",
        "(weights.mean(dim=1) if",
        "(weights.sum(dim=1) if",
        "normalization",
    ),
    Mutant(
        "weights_taken_before_softmax",
        "(weights.mean(dim=1) if",
        "(logits.mean(dim=1) if",
        "normalization",
    ),
    Mutant("values_from_x_in_cross_attention", "self.v_proj(source)", "self.v_proj(x)", "shapes"),
    Mutant("keys_from_x_in_cross_attention", "self.k_proj(source)", "self.k_proj(x)", "shapes"),
    Mutant(
        "float_mask_treated_as_bool",
        "            if attn_mask.dtype == torch.bool:",
        "            attn_mask = attn_mask.bool()\n            if attn_mask.dtype == torch.bool:",
        "causal",
    ),
    Mutant(
        "float_mask_ignored",
        "logits = logits + attn_mask.to(logits.dtype)",
        "logits = logits",
        "causal",
    ),
    Mutant(
        "no_per_sample_mask_support",
        "attn_mask = attn_mask[None, None]",
        "pass\n            attn_mask = attn_mask.reshape(1, 1, *attn_mask.shape[-2:])",
        "causal",
    ),
    Mutant(
        "softmax_that_overflows",
        "torch.softmax(logits.masked_fill(blocked, 0.0), dim=-1)",
        "(logits.masked_fill(blocked, 0.0).exp() / logits.masked_fill(blocked, 0.0).exp().sum(-1, keepdim=True))",
        "normalization",
    ),
    Mutant(
        "dropped_query_bias",
        "q = self._split_heads(self.q_proj(x))",
        "q = self._split_heads(F.linear(x, self.q_proj.weight))",
        "parity",
    ),
    Mutant(
        "detached_queries",
        "q = self._split_heads(self.q_proj(x))",
        "q = self._split_heads(self.q_proj(x)).detach()",
        "training",
    ),
    Mutant(
        "nan_for_fully_blocked_rows",
        "blocked = torch.isneginf(logits).all(dim=-1, keepdim=True)",
        "blocked = torch.zeros_like(logits[..., :1], dtype=torch.bool)",
        "finite",
    ),
]


@pytest.fixture(scope="module")
def graded_mutants(tmp_path_factory):
    folder = tmp_path_factory.mktemp("mha_interview_mutants")
    return grade_many(write_mutants(SOLUTION, MUTANTS, folder))


def test_solution_earns_full_marks():
    graded = grade(SOLUTION)
    assert_full_marks(graded)


def test_scaffold_earns_nothing_and_every_test_is_not_implemented():
    graded = grade(SCAFFOLDS / "mha_interview.ipynb")
    report = assert_nothing_implemented(graded)
    assert all(
        t["message"].startswith("not implemented: MultiHeadAttention.") for t in report["tests"]
    )


def test_corpus_is_big_enough():
    assert len(MUTANTS) >= 20
    assert len({m.name for m in MUTANTS}) == len(MUTANTS)


@pytest.mark.slow
@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: m.name)
def test_mutant_loses_points_at_the_expected_level(graded_mutants, mutant):
    graded = graded_mutants[mutant.name]
    report = assert_first_fails_at(graded, mutant)
    assert report["cell_errors"] == [] or mutant.level in (
        "shapes",
        "normalization",
        "padding",
        "causal",
        "finite",
    )


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


def _tampered(tmp_path, extra_cells):
    nb = notebook_with(*extra_cells, exercise="mha_interview")
    solution = __import__("nbformat").read(SOLUTION, as_version=4)
    for cell in solution.cells:
        if cell.cell_type == "code" and WRONG_FORWARD[0] in cell.source:
            cell.source = cell.source.replace(*WRONG_FORWARD)
    nb.cells = [c for c in solution.cells if c.cell_type == "code"][:-1] + nb.cells
    path = tmp_path / "tampered.ipynb"
    __import__("nbformat").write(nb, path)
    return path


def test_overriding_comparisons_and_assertions_earns_no_extra_credit(tmp_path):
    baseline = grade(_tampered(tmp_path, ["pass"])).report
    tampered = grade(_tampered(tmp_path, [TAMPERING])).report
    # No extra credit; rebinding builtins is also machinery, which costs the source scan.
    assert tampered["score"] <= baseline["score"] < baseline["max_score"] / 2
    statuses = {t["id"]: t["status"] for t in tampered["tests"]}
    assert statuses["weights_are_probabilities"] == "failed"
    assert statuses["parity_without_mask"] == "failed"


def test_printing_a_fake_result_changes_nothing(tmp_path):
    fake = 'print(\'{"score": 53, "max_score": 53}\')\nprint("All hidden tests passed: 53/53")'
    graded = grade(_tampered(tmp_path, [fake]))
    assert graded.returncode == 1
    assert graded.report["score"] < graded.report["max_score"] / 2
