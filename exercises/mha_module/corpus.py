"""Single-bug mutants of solutions/mha_module.ipynb, each with the level where a person would
expect it to lose points first. `values=True`: a bug in what every test compares (the scale,
the softmax, the head layout, which input feeds which projection, the weights' shape)."""

from __future__ import annotations

from grader.suite.corpus import Mutant

MIN_MUTANTS = 18

MUTANTS = [
    # scaled dot-product attention (shared by both modules)
    Mutant(
        "scale_by_sqrt_d_model",
        "math.sqrt(Q.size(-1))",
        "math.sqrt(Q.size(-1) * Q.size(1))",
        "parity",
        hint="scores scaled by 1/sqrt(d_model), not 1/sqrt(d_k)?",
        values=True,
    ),
    Mutant(
        "no_scaling",
        " / math.sqrt(Q.size(-1))",
        "",
        "parity",
        hint="scores not scaled by 1/sqrt(d_k)?",
        values=True,
    ),
    Mutant(
        "softmax_over_queries",
        "torch.softmax(scores, dim=-1)",
        "torch.softmax(scores, dim=-2)",
        "normalization",
        hint="softmax over the query axis (dim=-2) instead of the keys?",
        values=True,
    ),
    Mutant(
        "softmax_that_overflows",
        "weights = torch.softmax(scores, dim=-1)",
        "weights = scores.exp() / scores.exp().sum(dim=-1, keepdim=True)",
        "normalization",
        hint="softmax as exp() / sum() without subtracting the max, so large scores overflow?",
    ),
    Mutant(
        "weights_returned_before_softmax",
        "return weights @ V, weights",
        "return weights @ V, scores",
        "normalization",
        hint="attend returns the raw scores as the weights, not the softmax?",
        values=True,
    ),
    Mutant(
        "inverted_mask_convention",
        "allowed = mask != 0",
        "allowed = mask == 0",
        "masking",
        hint="mask read as nonzero = masked instead of nonzero = attend?",
    ),
    Mutant(
        "mask_ignored",
        "if mask is not None:",
        "if False:",
        "masking",
        hint="mask never applied to the scores?",
    ),
    Mutant(
        "mask_not_broadcast_over_heads",
        "allowed = mask != 0",
        "allowed = (mask != 0).transpose(0, 1)",
        "masking",
        hint="mask's batch axis moved onto the heads axis (transpose(0, 1))?",
    ),
    Mutant(
        "float_mask_used_as_bool",
        "allowed = mask != 0",
        "allowed = mask",
        "masking",
        hint="0/1 float or int mask used as a bool directly, not compared with 0?",
    ),
    Mutant(
        "nan_for_fully_masked_rows",
        "empty = ~allowed.any(dim=-1, keepdim=True)",
        "empty = torch.zeros_like(allowed[..., :1])",
        "finite",
        hint="fully masked query rows give NaN weights instead of zeros?",
    ),
    Mutant(
        "minus_1e9_fill_gives_uniform_rows",
        'scores = scores.masked_fill(~allowed, float("-inf"))\n'
        "        # A row of -inf would give NaN: give it finite logits here, zero weights below.\n"
        "        empty = ~allowed.any(dim=-1, keepdim=True)",
        "scores = scores.masked_fill(~allowed, -1e9)\n"
        "        empty = torch.zeros_like(allowed[..., :1])",
        "finite",
        hint="masked with -1e9: fully masked rows get uniform weights, not zeros?",
    ),
    Mutant(
        "dropout_active_in_eval",
        "weights = dropout(weights)",
        "weights = F.dropout(weights, dropout.p)",
        "training",
        hint="dropout on the attention weights still active in eval mode?",
    ),
    Mutant(
        "returned_weights_not_dropped",
        "weights = dropout(weights)\n    return weights @ V, weights",
        "weights = weights\n    return dropout(weights) @ V, weights",
        "training",
        hint="returned weights taken before dropout, not the ones applied to V?",
    ),
    # initialization
    Mutant(
        "default_linear_init",
        "nn.init.xavier_uniform_(layer.weight)",
        "pass",
        "initialization",
        hint="projections keep nn.Linear's default init, not Xavier-uniform?",
    ),
    Mutant(
        "xavier_normal_init",
        "nn.init.xavier_uniform_(layer.weight)",
        "nn.init.xavier_normal_(layer.weight)",
        "initialization",
        hint="weights initialised with xavier_normal_ instead of xavier_uniform_?",
    ),
    Mutant(
        "biases_not_zeroed",
        "nn.init.zeros_(layer.bias)",
        "pass",
        "initialization",
        hint="biases not zeroed in _reset_parameters?",
    ),
    Mutant(
        "bias_guard_missing",
        "if layer.bias is not None:",
        "if True:",
        "initialization",
        hint="bias zeroed without checking for None, so bias=False crashes?",
    ),
    # head layout
    Mutant(
        "split_without_transpose",
        "x.view(B, L, self.num_heads, self.d_k).transpose(1, 2)",
        "x.view(B, self.num_heads, L, self.d_k)",
        "masking",
        hint="_split_heads views straight to [B, H, L, d_k], without the transpose?",
        values=True,
    ),
    Mutant(
        "strided_head_split",
        "x.view(B, L, self.num_heads, self.d_k).transpose(1, 2)",
        "x.view(B, L, self.d_k, self.num_heads).transpose(2, 3).transpose(1, 2)",
        "parity",
        hint="_split_heads gives heads strided channels, not contiguous d_k blocks?",
        values=True,
    ),
    Mutant(
        "combine_without_transpose",
        "x.transpose(1, 2).contiguous().view(B, L, self.d_model)",
        "x.contiguous().view(B, L, self.d_model)",
        "masking",
        hint="_combine_heads views [B, H, L, d_k] as [B, L, E] without transposing back?",
        values=True,
    ),
    # MultiHeadAttention.forward
    Mutant(
        "keys_from_the_query_input",
        "self.W_K(key)",
        "self.W_K(query)",
        "shapes",
        hint="keys projected from query instead of key (W_K(query))?",
        values=True,
    ),
    Mutant(
        "values_from_the_key_input",
        "self.W_V(value)",
        "self.W_V(key)",
        "parity",
        hint="values projected from key instead of value (W_V(key))?",
        values=True,
    ),
    Mutant(
        "dropped_query_bias",
        "Q = self._split_heads(self.W_Q(query))",
        "Q = self._split_heads(F.linear(query, self.W_Q.weight))",
        "parity",
        hint="W_Q applied without its bias?",
    ),
    Mutant(
        "detached_keys",
        "K = self._split_heads(self.W_K(key))",
        "K = self._split_heads(self.W_K(key)).detach()",
        "training",
        hint="keys detached from the graph, so W_K gets no gradient?",
    ),
    Mutant(
        "no_output_projection",
        "self.dropout(self.W_O(self._combine_heads(heads)))",
        "self.dropout(self._combine_heads(heads))",
        "parity",
        hint="W_O never applied to the combined heads?",
        values=True,
    ),
    Mutant(
        "no_output_dropout",
        "output = self.dropout(self.W_O(self._combine_heads(heads)))",
        "output = self.W_O(self._combine_heads(heads))",
        "training",
        hint="no dropout on the output after W_O?",
    ),
    Mutant(
        "weights_averaged_over_heads",
        "(weights if return_attention else None)",
        "(weights.mean(dim=1) if return_attention else None)",
        "shapes",
        hint="returned weights averaged over heads, not per head [B, H, Lq, Lk]?",
        values=True,
    ),
    Mutant(
        "return_attention_ignored",
        "(weights if return_attention else None)",
        "weights",
        "shapes",
        hint="weights returned even when return_attention=False?",
    ),
    # EfficientMultiHeadAttention.forward
    Mutant(
        "fused_interleaved_qkv_layout",
        ".view(B, L, 3, self.num_heads, self.d_k).permute(2, 0, 3, 1, 4)",
        ".view(B, L, self.num_heads, 3, self.d_k).permute(3, 0, 2, 1, 4)",
        "fused",
        hint="fused qkv viewed as [B, L, H, 3, d_k] instead of [B, L, 3, H, d_k]?",
    ),
    Mutant(
        "fused_query_and_key_swapped",
        "attend(qkv[0], qkv[1], qkv[2]",
        "attend(qkv[1], qkv[0], qkv[2]",
        "fused",
        hint="fused module passes qkv[1] as the queries and qkv[0] as the keys?",
    ),
    Mutant(
        "fused_no_output_projection",
        "self.dropout(self.out_proj(merged))",
        "self.dropout(merged)",
        "fused",
        hint="fused module never applies out_proj?",
    ),
    Mutant(
        "fused_merge_without_transpose",
        "heads.transpose(1, 2).reshape(B, L, self.d_model)",
        "heads.reshape(B, L, self.d_model)",
        "masking",
        hint="fused module merges heads without transposing back to [B, L, H, d_k]?",
        values=True,
    ),
    Mutant(
        "fused_mask_ignored",
        "qkv[2], mask, self.dropout)",
        "qkv[2], None, self.dropout)",
        "masking",
        hint="fused module never passes the mask to attention?",
    ),
    Mutant(
        "fused_no_output_dropout",
        "return self.dropout(self.out_proj(merged)), weights",
        "return self.out_proj(merged), weights",
        "training",
        hint="fused module has no dropout after out_proj?",
    ),
    Mutant(
        "fused_uses_builtin_attention",
        "merged = heads.transpose(1, 2)",
        "heads = F.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2],"
        " attn_mask=None if mask is None else mask != 0)\n"
        "        merged = heads.transpose(1, 2)",
        "from scratch",
        hint="fused module uses F.scaled_dot_product_attention, not attention from scratch?",
    ),
    # one feature each: dropout 0.0, a non-contiguous input
    Mutant(
        "dropout_zero_taken_for_the_default",
        "self.W_O = nn.Linear(d_model, d_model, bias=bias)\n        self.dropout = nn.Dropout(dropout)",
        "self.W_O = nn.Linear(d_model, d_model, bias=bias)\n        self.dropout = nn.Dropout(dropout or 0.1)",
        "training",
        hint="dropout=0.0 replaced by a default (dropout or 0.1), so train mode still drops?",
    ),
    Mutant(
        "query_flattened_with_view",
        "Q = self._split_heads(self.W_Q(query))",
        "Q = self._split_heads(self.W_Q(query.view(-1, self.d_model)).view(query.shape))",
        "shapes",
        hint="query flattened with .view(-1, d_model), which fails on a non-contiguous query (use reshape)?",
    ),
]
