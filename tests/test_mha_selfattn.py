"""mha_selfattn end to end, through the real `grade` CLI and real kernels: the solution
earns full marks, the scaffold earns nothing, every single-bug mutant loses points at the
level a person would expect, and correct variants (another fill value for blocked keys, a
[T, T] integer causal mask, scaling the queries first) lose nothing."""

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
    write_mutants,
)

pytestmark = pytest.mark.kernel

SOLUTION = SOLUTIONS / "mha_selfattn.ipynb"

MUTANTS = [
    # scaling: only parity sees it (any scale is absorbed into W_q)
    Mutant("scale_by_sqrt_embed_dim", "/ math.sqrt(Dh)", "/ math.sqrt(E)", "parity"),
    Mutant("no_scaling", " / math.sqrt(Dh)", "", "parity"),
    Mutant("scale_multiplied", "/ math.sqrt(Dh)", "* math.sqrt(Dh)", "parity"),
    # softmax
    Mutant(
        "softmax_over_queries",
        "masked_fill(blocked, 0.0), dim=-1)",
        "masked_fill(blocked, 0.0), dim=-2)",
        "normalization",
    ),
    Mutant(
        "softmax_that_overflows",
        "torch.softmax(scores.masked_fill(blocked, 0.0), dim=-1)",
        "(scores.masked_fill(blocked, 0.0).exp()"
        " / scores.masked_fill(blocked, 0.0).exp().sum(-1, keepdim=True))",
        "normalization",
    ),
    Mutant(
        "weights_taken_before_softmax",
        "return self.out_proj(merged), weights",
        "return self.out_proj(merged), scores",
        "normalization",
    ),
    # head layout
    Mutant(
        "split_without_transpose",
        "t.view(B, T, H, Dh).transpose(1, 2)",
        "t.view(B, H, T, Dh)",
        "padding",
    ),
    Mutant(
        "merge_without_transpose",
        "heads.transpose(1, 2).reshape(B, T, E)",
        "heads.reshape(B, T, E)",
        "padding",
    ),
    Mutant(
        "merge_across_the_batch",
        "heads.transpose(1, 2).reshape(B, T, E)",
        "heads.transpose(0, 2).reshape(B, T, E)",
        "padding",
    ),
    Mutant(
        "strided_head_split",
        "t.view(B, T, H, Dh).transpose(1, 2)",
        "t.view(B, T, Dh, H).transpose(2, 3).transpose(1, 2)",
        "parity",
    ),
    Mutant(
        "head_averaged_weights",
        "return self.out_proj(merged), weights",
        "return self.out_proj(merged), weights.mean(dim=1)",
        "shapes",
    ),
    Mutant(
        "view_on_a_non_contiguous_input",
        "B, T, E = x.shape",
        "B, T, E = x.shape\n        x = x.view(B * T, E).view(B, T, E)",
        "shapes",
    ),
    # masks
    Mutant("inverted_mask", "masked_fill(mask == 0,", "masked_fill(mask != 0,", "padding"),
    Mutant("mask_ignored", "if mask is not None:", "if False:", "padding"),
    Mutant(
        "mask_not_broadcast_over_heads",
        "masked_fill(mask == 0,",
        "masked_fill(mask.squeeze(1) == 0,",
        "padding",
    ),
    Mutant("mask_assumed_bool", "masked_fill(mask == 0,", "masked_fill(~mask,", "padding"),
    Mutant("blocked_logits_set_to_zero", 'float("-inf"))', "0.0)", "padding"),
    Mutant("causal_mask_upper_triangle", "torch.tril(", "torch.triu(", "causal"),
    Mutant(
        "causal_mask_without_the_diagonal",
        "dtype=torch.bool))",
        "dtype=torch.bool), diagonal=-1)",
        "causal",
    ),
    Mutant(
        "causal_mask_made_additive",
        "return allow[None, None]",
        'return torch.zeros(seq_len, seq_len).masked_fill(~allow, float("-inf"))[None, None]',
        "causal",
    ),
    Mutant(
        "nan_for_fully_blocked_rows",
        "blocked = torch.isneginf(scores).all(dim=-1, keepdim=True)",
        "blocked = torch.zeros_like(scores[..., :1], dtype=torch.bool)",
        "finite",
    ),
    # projections
    Mutant(
        "no_out_proj", "return self.out_proj(merged), weights", "return merged, weights", "parity"
    ),
    Mutant(
        "dropped_out_proj_bias",
        "self.out_proj(merged)",
        "F.linear(merged, self.out_proj.weight)",
        "parity",
    ),
    Mutant(
        "dropped_query_bias",
        "split(self.q_proj(x))",
        "split(F.linear(x, self.q_proj.weight))",
        "parity",
    ),
    Mutant(
        "values_from_the_key_projection", "split(self.v_proj(x))", "split(self.k_proj(x))", "parity"
    ),
    Mutant(
        "keys_from_the_query_projection", "split(self.k_proj(x))", "split(self.q_proj(x))", "parity"
    ),
    # training
    Mutant(
        "dropout_active_in_eval",
        "weights = self.dropout(weights)",
        "weights = F.dropout(weights, self.dropout.p)",
        "normalization",  # the default p=0.1 is on in every eval-mode check
    ),
    Mutant(
        "dropout_never_applied", "weights = self.dropout(weights)", "weights = weights", "training"
    ),
    Mutant(
        "nan_in_train_mode",  # NaN is no evidence that dropout acted
        "weights = self.dropout(weights)",
        "weights = self.dropout(weights) * (float('nan') if self.training else 1.0)",
        "training",
    ),
    Mutant(
        "detached_queries",
        "split(self.q_proj(x))",
        "split(self.q_proj(x).detach())",
        "training",
    ),
    Mutant(
        "detached_input",
        "B, T, E = x.shape",
        "B, T, E = x.shape\n        x = x.detach()",
        "training",
    ),
    # from scratch
    Mutant(
        "builtin_attention",
        "heads = weights @ v",
        "heads = F.scaled_dot_product_attention(q, k, v, attn_mask=None if mask is None"
        " else mask != 0, dropout_p=self.dropout.p if self.training else 0.0)",
        "from scratch",
    ),
]

# Correct alternatives: each must keep full marks (the level field is unused).
VARIANTS = [
    Mutant("fill_minus_1e9", 'float("-inf"))', "-1e9)", ""),
    Mutant("causal_mask_as_int_t_by_t", "return allow[None, None]", "return allow.long()", ""),
    Mutant(
        "queries_scaled_first",
        "scores = q @ k.transpose(-2, -1) / math.sqrt(Dh)",
        "scores = (q / math.sqrt(Dh)) @ k.transpose(-2, -1)",
        "",
    ),
]


@pytest.fixture(scope="module")
def graded_mutants(tmp_path_factory):
    folder = tmp_path_factory.mktemp("mha_selfattn_mutants")
    return grade_many(write_mutants(SOLUTION, MUTANTS + VARIANTS, folder))


def test_solution_earns_full_marks():
    graded = grade(SOLUTION)
    assert_full_marks(graded)


def test_scaffold_earns_nothing_and_every_test_is_not_implemented():
    graded = grade(SCAFFOLDS / "mha_selfattn.ipynb")
    report = assert_nothing_implemented(graded)
    assert all(
        t["message"]
        in ("not implemented: MultiHeadAttention.forward", "not implemented: create_causal_mask")
        for t in report["tests"]
    )


def test_corpus_is_big_enough():
    assert len(MUTANTS) >= 18
    names = [m.name for m in MUTANTS + VARIANTS]
    assert len(set(names)) == len(names)


@pytest.mark.slow
@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: m.name)
def test_mutant_loses_points_at_the_expected_level(graded_mutants, mutant):
    graded = graded_mutants[mutant.name]
    assert_first_fails_at(graded, mutant)


@pytest.mark.slow
@pytest.mark.parametrize("variant", VARIANTS, ids=lambda m: m.name)
def test_correct_variant_earns_full_marks(graded_mutants, variant):
    graded = graded_mutants[variant.name]
    report = graded.report
    assert graded.returncode == 0, [t for t in report["tests"] if t["status"] != "passed"]
    assert report["score"] == report["max_score"]
