"""Single-bug mutants of solutions/mha_selfattn.ipynb, each with the level where a person would
expect it to lose points first, and correct variants that must keep full marks."""

from __future__ import annotations

from grader.corpus import Mutant, Variant

MIN_MUTANTS = 18

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

# Correct alternatives: each must keep full marks.
VARIANTS = [
    Variant("fill_minus_1e9", 'float("-inf"))', "-1e9)"),
    Variant("causal_mask_as_int_t_by_t", "return allow[None, None]", "return allow.long()"),
    Variant(
        "queries_scaled_first",
        "scores = q @ k.transpose(-2, -1) / math.sqrt(Dh)",
        "scores = (q / math.sqrt(Dh)) @ k.transpose(-2, -1)",
    ),
]
