"""Single-bug mutants of solutions/mha_module.ipynb, each with the level where a person would
expect it to lose points first."""

from __future__ import annotations

from grader.corpus import Mutant

MIN_MUTANTS = 18

MUTANTS = [
    # scaled dot-product attention (shared by both modules)
    Mutant(
        "scale_by_sqrt_d_model",
        "math.sqrt(Q.size(-1))",
        "math.sqrt(Q.size(-1) * Q.size(1))",
        "parity",
    ),
    Mutant("no_scaling", " / math.sqrt(Q.size(-1))", "", "parity"),
    Mutant(
        "softmax_over_queries",
        "torch.softmax(scores, dim=-1)",
        "torch.softmax(scores, dim=-2)",
        "normalization",
    ),
    Mutant(
        "softmax_that_overflows",
        "weights = torch.softmax(scores, dim=-1)",
        "weights = scores.exp() / scores.exp().sum(dim=-1, keepdim=True)",
        "normalization",
    ),
    Mutant(
        "weights_returned_before_softmax",
        "return weights @ V, weights",
        "return weights @ V, scores",
        "normalization",
    ),
    Mutant("inverted_mask_convention", "allowed = mask != 0", "allowed = mask == 0", "masking"),
    Mutant("mask_ignored", "if mask is not None:", "if False:", "masking"),
    Mutant(
        "mask_not_broadcast_over_heads",
        "allowed = mask != 0",
        "allowed = (mask != 0).transpose(0, 1)",
        "masking",
    ),
    Mutant("float_mask_used_as_bool", "allowed = mask != 0", "allowed = mask", "masking"),
    Mutant(
        "nan_for_fully_masked_rows",
        "empty = ~allowed.any(dim=-1, keepdim=True)",
        "empty = torch.zeros_like(allowed[..., :1])",
        "finite",
    ),
    Mutant(
        "minus_1e9_fill_gives_uniform_rows",
        'scores = scores.masked_fill(~allowed, float("-inf"))\n'
        "        # A row of -inf would give NaN: give it finite logits here, zero weights below.\n"
        "        empty = ~allowed.any(dim=-1, keepdim=True)",
        "scores = scores.masked_fill(~allowed, -1e9)\n"
        "        empty = torch.zeros_like(allowed[..., :1])",
        "finite",
    ),
    Mutant(
        "dropout_active_in_eval",
        "weights = dropout(weights)",
        "weights = F.dropout(weights, dropout.p)",
        "training",
    ),
    Mutant(
        "returned_weights_not_dropped",
        "weights = dropout(weights)\n    return weights @ V, weights",
        "weights = weights\n    return dropout(weights) @ V, weights",
        "training",
    ),
    # initialization
    Mutant(
        "default_linear_init", "nn.init.xavier_uniform_(layer.weight)", "pass", "initialization"
    ),
    Mutant(
        "xavier_normal_init",
        "nn.init.xavier_uniform_(layer.weight)",
        "nn.init.xavier_normal_(layer.weight)",
        "initialization",
    ),
    Mutant("biases_not_zeroed", "nn.init.zeros_(layer.bias)", "pass", "initialization"),
    Mutant("bias_guard_missing", "if layer.bias is not None:", "if True:", "initialization"),
    # head layout
    Mutant(
        "split_without_transpose",
        "x.view(B, L, self.num_heads, self.d_k).transpose(1, 2)",
        "x.view(B, self.num_heads, L, self.d_k)",
        "masking",
    ),
    Mutant(
        "strided_head_split",
        "x.view(B, L, self.num_heads, self.d_k).transpose(1, 2)",
        "x.view(B, L, self.d_k, self.num_heads).transpose(2, 3).transpose(1, 2)",
        "parity",
    ),
    Mutant(
        "combine_without_transpose",
        "x.transpose(1, 2).contiguous().view(B, L, self.d_model)",
        "x.contiguous().view(B, L, self.d_model)",
        "masking",
    ),
    # MultiHeadAttention.forward
    Mutant("keys_from_the_query_input", "self.W_K(key)", "self.W_K(query)", "shapes"),
    Mutant("values_from_the_key_input", "self.W_V(value)", "self.W_V(key)", "parity"),
    Mutant(
        "dropped_query_bias",
        "Q = self._split_heads(self.W_Q(query))",
        "Q = self._split_heads(F.linear(query, self.W_Q.weight))",
        "parity",
    ),
    Mutant(
        "detached_keys",
        "K = self._split_heads(self.W_K(key))",
        "K = self._split_heads(self.W_K(key)).detach()",
        "training",
    ),
    Mutant(
        "no_output_projection",
        "self.dropout(self.W_O(self._combine_heads(heads)))",
        "self.dropout(self._combine_heads(heads))",
        "parity",
    ),
    Mutant(
        "no_output_dropout",
        "output = self.dropout(self.W_O(self._combine_heads(heads)))",
        "output = self.W_O(self._combine_heads(heads))",
        "training",
    ),
    Mutant(
        "weights_averaged_over_heads",
        "(weights if return_attention else None)",
        "(weights.mean(dim=1) if return_attention else None)",
        "shapes",
    ),
    Mutant(
        "return_attention_ignored",
        "(weights if return_attention else None)",
        "weights",
        "shapes",
    ),
    # EfficientMultiHeadAttention.forward
    Mutant(
        "fused_interleaved_qkv_layout",
        ".view(B, L, 3, self.num_heads, self.d_k).permute(2, 0, 3, 1, 4)",
        ".view(B, L, self.num_heads, 3, self.d_k).permute(3, 0, 2, 1, 4)",
        "fused",
    ),
    Mutant(
        "fused_query_and_key_swapped",
        "attend(qkv[0], qkv[1], qkv[2]",
        "attend(qkv[1], qkv[0], qkv[2]",
        "fused",
    ),
    Mutant(
        "fused_no_output_projection",
        "self.dropout(self.out_proj(merged))",
        "self.dropout(merged)",
        "fused",
    ),
    Mutant(
        "fused_merge_without_transpose",
        "heads.transpose(1, 2).reshape(B, L, self.d_model)",
        "heads.reshape(B, L, self.d_model)",
        "masking",
    ),
    Mutant(
        "fused_mask_ignored",
        "qkv[2], mask, self.dropout)",
        "qkv[2], None, self.dropout)",
        "masking",
    ),
    Mutant(
        "fused_no_output_dropout",
        "return self.dropout(self.out_proj(merged)), weights",
        "return self.out_proj(merged), weights",
        "training",
    ),
    Mutant(
        "fused_uses_builtin_attention",
        "merged = heads.transpose(1, 2)",
        "heads = F.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2],"
        " attn_mask=None if mask is None else mask != 0)\n"
        "        merged = heads.transpose(1, 2)",
        "from scratch",
    ),
]
