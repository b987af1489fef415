"""Single-bug mutants of solutions/mha_selfattn.ipynb, each with the level where a person would
expect it to lose points first, and correct variants that must keep full marks. `values=True`:
a bug in what every test compares (the scale, the softmax, the head layout, which projection
feeds which role, the weights' shape)."""

from __future__ import annotations

from grader.suite.corpus import Mutant, Variant

MIN_MUTANTS = 18

MUTANTS = [
    # scaling: only parity sees it (any scale is absorbed into W_q)
    Mutant(
        "scale_by_sqrt_embed_dim",
        "/ math.sqrt(Dh)",
        "/ math.sqrt(E)",
        "parity",
        hint="scores scaled by 1/sqrt(embed_dim), not 1/sqrt(head_dim)?",
        values=True,
    ),
    Mutant(
        "no_scaling",
        " / math.sqrt(Dh)",
        "",
        "parity",
        hint="scores not scaled by 1/sqrt(head_dim)?",
        values=True,
    ),
    Mutant(
        "scale_multiplied",
        "/ math.sqrt(Dh)",
        "* math.sqrt(Dh)",
        "parity",
        hint="scores multiplied by sqrt(head_dim) instead of divided?",
        values=True,
    ),
    # softmax
    Mutant(
        "softmax_over_queries",
        "masked_fill(blocked, 0.0), dim=-1)",
        "masked_fill(blocked, 0.0), dim=-2)",
        "normalization",
        hint="softmax over the query axis (dim=-2) instead of the keys?",
        values=True,
    ),
    Mutant(
        "softmax_that_overflows",
        "torch.softmax(scores.masked_fill(blocked, 0.0), dim=-1)",
        "(scores.masked_fill(blocked, 0.0).exp()"
        " / scores.masked_fill(blocked, 0.0).exp().sum(-1, keepdim=True))",
        "normalization",
        hint="softmax as exp() / sum() without subtracting the max, so large scores overflow?",
    ),
    Mutant(
        "weights_taken_before_softmax",
        "return self.out_proj(merged), weights",
        "return self.out_proj(merged), scores",
        "normalization",
        hint="returned weights are the raw scores, taken before the softmax?",
        values=True,
    ),
    # head layout
    Mutant(
        "split_without_transpose",
        "t.view(B, T, H, Dh).transpose(1, 2)",
        "t.view(B, H, T, Dh)",
        "padding",
        hint="heads split by viewing straight to [B, H, T, Dh], without the transpose?",
        values=True,
    ),
    Mutant(
        "merge_without_transpose",
        "heads.transpose(1, 2).reshape(B, T, E)",
        "heads.reshape(B, T, E)",
        "padding",
        hint="heads merged to [B, T, E] without transposing back from [B, H, T, Dh]?",
        values=True,
    ),
    Mutant(
        "merge_across_the_batch",
        "heads.transpose(1, 2).reshape(B, T, E)",
        "heads.transpose(0, 2).reshape(B, T, E)",
        "padding",
        hint="heads merged with transpose(0, 2), mixing the batch into the tokens?",
        values=True,
    ),
    Mutant(
        "strided_head_split",
        "t.view(B, T, H, Dh).transpose(1, 2)",
        "t.view(B, T, Dh, H).transpose(2, 3).transpose(1, 2)",
        "parity",
        hint="heads take strided channels (h, h+H, ...), not contiguous head_dim blocks?",
        values=True,
    ),
    Mutant(
        "head_averaged_weights",
        "return self.out_proj(merged), weights",
        "return self.out_proj(merged), weights.mean(dim=1)",
        "shapes",
        hint="returned weights averaged over heads, not per head [B, H, T, T]?",
        values=True,
    ),
    Mutant(
        "view_on_a_non_contiguous_input",
        "B, T, E = x.shape",
        "B, T, E = x.shape\n        x = x.view(B * T, E).view(B, T, E)",
        "shapes",
        hint="x.view() on the input, which fails for a non-contiguous x?",
    ),
    # masks
    Mutant(
        "inverted_mask",
        "masked_fill(mask == 0,",
        "masked_fill(mask != 0,",
        "padding",
        hint="mask read as 1/True = masked instead of 1/True = attend?",
    ),
    Mutant(
        "mask_ignored",
        "if mask is not None:",
        "if False:",
        "padding",
        hint="mask never applied to the scores?",
    ),
    Mutant(
        "mask_not_broadcast_over_heads",
        "masked_fill(mask == 0,",
        "masked_fill(mask.squeeze(1) == 0,",
        "padding",
        hint="mask squeezed to [B, T, T], so its batch axis lines up with heads?",
    ),
    Mutant(
        "mask_assumed_bool",
        "masked_fill(mask == 0,",
        "masked_fill(~mask,",
        "padding",
        hint="mask inverted with ~mask, which breaks for 0/1 int or float masks?",
    ),
    Mutant(
        "blocked_logits_set_to_zero",
        'float("-inf"))',
        "0.0)",
        "padding",
        hint="masked scores filled with 0 instead of -inf?",
    ),
    Mutant(
        "causal_mask_upper_triangle",
        "torch.tril(",
        "torch.triu(",
        "causal",
        hint="create_causal_mask uses triu: queries see future keys, not past ones?",
    ),
    Mutant(
        "causal_mask_without_the_diagonal",
        "dtype=torch.bool))",
        "dtype=torch.bool), diagonal=-1)",
        "causal",
        hint="causal mask tril(diagonal=-1): a token cannot attend to itself?",
    ),
    Mutant(
        "causal_mask_made_additive",
        "return allow[None, None]",
        'return torch.zeros(seq_len, seq_len).masked_fill(~allow, float("-inf"))[None, None]',
        "causal",
        hint="create_causal_mask returns an additive 0/-inf float mask, not a bool one?",
    ),
    Mutant(
        "nan_for_fully_blocked_rows",
        "blocked = torch.isneginf(scores).all(dim=-1, keepdim=True)",
        "blocked = torch.zeros_like(scores[..., :1], dtype=torch.bool)",
        "finite",
        hint="fully masked query rows give NaN weights instead of zeros?",
    ),
    # projections
    Mutant(
        "no_out_proj",
        "return self.out_proj(merged), weights",
        "return merged, weights",
        "parity",
        hint="out_proj never applied to the merged heads?",
        values=True,
    ),
    Mutant(
        "dropped_out_proj_bias",
        "self.out_proj(merged)",
        "F.linear(merged, self.out_proj.weight)",
        "parity",
        hint="out_proj applied without its bias?",
    ),
    Mutant(
        "dropped_query_bias",
        "split(self.q_proj(x))",
        "split(F.linear(x, self.q_proj.weight))",
        "parity",
        hint="q_proj applied without its bias?",
    ),
    Mutant(
        "values_from_the_key_projection",
        "split(self.v_proj(x))",
        "split(self.k_proj(x))",
        "parity",
        hint="values computed with k_proj instead of v_proj?",
        values=True,
    ),
    Mutant(
        "keys_from_the_query_projection",
        "split(self.k_proj(x))",
        "split(self.q_proj(x))",
        "parity",
        hint="keys computed with q_proj instead of k_proj?",
        values=True,
    ),
    # training
    Mutant(
        "dropout_active_in_eval",
        "weights = self.dropout(weights)",
        "weights = F.dropout(weights, self.dropout.p)",
        "training",
        hint="dropout on the attention weights still active in eval mode?",
    ),
    Mutant(
        "dropout_never_applied",
        "weights = self.dropout(weights)",
        "weights = weights",
        "training",
        hint="dropout never applied to the attention weights?",
    ),
    Mutant(
        "nan_in_train_mode",  # NaN is no evidence that dropout acted
        "weights = self.dropout(weights)",
        "weights = self.dropout(weights) * (float('nan') if self.training else 1.0)",
        "training",
        hint="attention weights turn NaN in train mode when dropout p > 0?",
    ),
    Mutant(
        "detached_queries",
        "split(self.q_proj(x))",
        "split(self.q_proj(x).detach())",
        "training",
        hint="queries detached from the graph, so q_proj gets no gradient?",
    ),
    Mutant(
        "detached_input",
        "B, T, E = x.shape",
        "B, T, E = x.shape\n        x = x.detach()",
        "training",
        hint="input x detached, so no gradient reaches it?",
    ),
    # from scratch
    Mutant(
        "builtin_attention",
        "heads = weights @ v",
        "heads = F.scaled_dot_product_attention(q, k, v, attn_mask=None if mask is None"
        " else mask != 0, dropout_p=self.dropout.p if self.training else 0.0)",
        "from scratch",
        hint="heads from F.scaled_dot_product_attention, not attention from scratch?",
    ),
    # one feature each: dropout 0.0, a mask changed in place
    Mutant(
        "dropout_zero_taken_for_the_default",
        "self.dropout = nn.Dropout(dropout)",
        "self.dropout = nn.Dropout(dropout or 0.1)",
        "training",
        hint="dropout=0.0 replaced by the default (dropout or 0.1), so train mode still drops?",
    ),
    Mutant(
        "mask_unsqueezed_in_place",
        "        if mask is not None:\n            scores = scores.masked_fill(mask == 0,",
        "        if mask is not None:\n"
        "            while mask.dim() < 4:\n"
        "                mask.unsqueeze_(0)\n"
        "            scores = scores.masked_fill(mask == 0,",
        "causal",
        hint="the caller's mask unsqueezed in place (unsqueeze_) to 4 dimensions, changing its shape?",
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
