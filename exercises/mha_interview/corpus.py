"""Single-bug mutants of solutions/mha_interview.ipynb, each with the level where a person would
expect it to lose points first."""

from __future__ import annotations

from grader.corpus import Mutant

MIN_MUTANTS = 20

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
