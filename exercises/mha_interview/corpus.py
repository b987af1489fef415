"""Single-bug mutants of solutions/mha_interview.ipynb, each with the level where a person would
expect it to lose points first."""

from __future__ import annotations

from grader.suite.corpus import Mutant

MIN_MUTANTS = 20

MUTANTS = [
    Mutant(
        "scale_by_sqrt_embed_dim",
        "math.sqrt(self.head_dim)",
        "math.sqrt(self.cfg.embed_dim)",
        "parity",
        hint="logits scaled by 1/sqrt(embed_dim), not 1/sqrt(head_dim)?",
    ),
    Mutant(
        "no_scaling",
        " / math.sqrt(self.head_dim)",
        "",
        "parity",
        hint="logits not scaled by 1/sqrt(head_dim)?",
    ),
    Mutant(
        "softmax_over_queries",
        "masked_fill(blocked, 0.0), dim=-1)",
        "masked_fill(blocked, 0.0), dim=-2)",
        "normalization",
        hint="softmax over the query axis (dim=-2) instead of the keys?",
    ),
    Mutant(
        "split_without_transpose",
        "x.reshape(B, T, self.cfg.num_heads, self.head_dim).transpose(1, 2)",
        "x.reshape(B, self.cfg.num_heads, T, self.head_dim)",
        "padding",
        hint="_split_heads reshapes straight to [B, H, T, Dh], without the transpose?",
    ),
    Mutant(
        "merge_without_transpose",
        "xh.transpose(1, 2).reshape(B, T, H * Dh)",
        "xh.reshape(B, T, H * Dh)",
        "causal",
        hint="_merge_heads reshapes [B, H, T, Dh] to [B, T, E] without transposing back?",
    ),
    Mutant(
        "strided_head_split",
        "x.reshape(B, T, self.cfg.num_heads, self.head_dim).transpose(1, 2)",
        "x.reshape(B, T, self.head_dim, self.cfg.num_heads).transpose(2, 3).transpose(1, 2)",
        "parity",
        hint="_split_heads gives heads strided channels, not contiguous head_dim blocks?",
    ),
    Mutant(
        "inverted_bool_mask",
        "logits.masked_fill(~attn_mask,",
        "logits.masked_fill(attn_mask,",
        "causal",
        hint="bool attn_mask read as True = block instead of True = allow?",
    ),
    Mutant(
        "inverted_key_padding",
        "masked_fill(~key_padding_mask[",
        "masked_fill(key_padding_mask[",
        "padding",
        hint="key_padding_mask read as True = pad instead of True = keep?",
    ),
    Mutant(
        "ignored_key_padding",
        "if key_padding_mask is not None:",
        "if False:",
        "padding",
        hint="key_padding_mask never applied to the logits?",
    ),
    Mutant(
        "padding_not_broadcast_over_heads",
        "key_padding_mask[:, None, None, :]",
        "key_padding_mask[None, :, None, :]",
        "padding",
        hint="key_padding_mask [B, S] indexed to [1, B, 1, S]: batch on the heads axis?",
    ),
    Mutant(
        "no_out_proj",
        "y = self.out_proj(self._merge_heads(",
        "y = (self._merge_heads(",
        "parity",
        hint="out_proj never applied to the merged heads?",
    ),
    Mutant(
        "dropout_active_in_eval",
        "self.dropout(weights) @ v",
        "F.dropout(weights, self.cfg.dropout_p) @ v",
        "training",
        hint="dropout on the attention weights still active in eval mode?",
    ),
    Mutant(
        "dropout_never_applied",
        "self.dropout(weights) @ v",
        "weights @ v",
        "training",
        hint="dropout never applied to the attention weights?",
    ),
    Mutant(
        "nan_in_train_mode",  # NaN is no evidence that dropout acted
        "self.dropout(weights) @ v",
        '(self.dropout(weights) * (float("nan") if self.training and self.dropout.p else 1.0)) @ v',
        "training",
        hint="attention weights turn NaN in train mode when dropout p > 0?",
    ),
    Mutant(
        "per_head_weights_returned",
        "(weights.mean(dim=1) if",
        "(weights if",
        "shapes",
        hint="per-head weights [B, H, T, S] returned instead of the head average?",
    ),
    Mutant(
        "weights_summed_over_heads",
        "(weights.mean(dim=1) if",
        "(weights.sum(dim=1) if",
        "normalization",
        hint="returned weights summed over heads instead of averaged?",
    ),
    Mutant(
        "weights_taken_before_softmax",
        "(weights.mean(dim=1) if",
        "(logits.mean(dim=1) if",
        "normalization",
        hint="returned weights are head-averaged logits, taken before the softmax?",
    ),
    Mutant(
        "values_from_x_in_cross_attention",
        "self.v_proj(source)",
        "self.v_proj(x)",
        "shapes",
        hint="values projected from x instead of kv in cross-attention?",
    ),
    Mutant(
        "keys_from_x_in_cross_attention",
        "self.k_proj(source)",
        "self.k_proj(x)",
        "shapes",
        hint="keys projected from x instead of kv in cross-attention?",
    ),
    Mutant(
        "float_mask_treated_as_bool",
        "            if attn_mask.dtype == torch.bool:",
        "            attn_mask = attn_mask.bool()\n            if attn_mask.dtype == torch.bool:",
        "causal",
        hint="float attn_mask cast to bool instead of added to the logits?",
    ),
    Mutant(
        "float_mask_ignored",
        "logits = logits + attn_mask.to(logits.dtype)",
        "logits = logits",
        "causal",
        hint="float (additive) attn_mask never added to the logits?",
    ),
    Mutant(
        "no_per_sample_mask_support",
        "attn_mask = attn_mask[None, None]",
        "pass\n            attn_mask = attn_mask.reshape(1, 1, *attn_mask.shape[-2:])",
        "causal",
        hint="attn_mask always reshaped to [1, 1, T, S]: per-sample [B, 1, T, S] fails?",
    ),
    Mutant(
        "softmax_that_overflows",
        "torch.softmax(logits.masked_fill(blocked, 0.0), dim=-1)",
        "(logits.masked_fill(blocked, 0.0).exp() / logits.masked_fill(blocked, 0.0).exp().sum(-1, keepdim=True))",
        "normalization",
        hint="softmax as exp() / sum() without subtracting the max, so large scores overflow?",
    ),
    Mutant(
        "dropped_query_bias",
        "q = self._split_heads(self.q_proj(x))",
        "q = self._split_heads(F.linear(x, self.q_proj.weight))",
        "parity",
        hint="q_proj applied without its bias?",
    ),
    Mutant(
        "detached_queries",
        "q = self._split_heads(self.q_proj(x))",
        "q = self._split_heads(self.q_proj(x)).detach()",
        "training",
        hint="queries detached from the graph, so q_proj gets no gradient?",
    ),
    Mutant(
        "nan_for_fully_blocked_rows",
        "blocked = torch.isneginf(logits).all(dim=-1, keepdim=True)",
        "blocked = torch.zeros_like(logits[..., :1], dtype=torch.bool)",
        "finite",
        hint="fully masked query rows give NaN weights instead of zeros?",
    ),
]
