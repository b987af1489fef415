"""Single-bug mutants of solutions/mha_causal.ipynb, each with the level where a person would
expect it to lose points first."""

from __future__ import annotations

from grader.corpus import Mutant

MIN_MUTANTS = 18

SPLIT_HEADS = "t.view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)"
PROJECTIONS = "(self.W_query(x), self.W_key(x), self.W_value(x))"
SOFTMAX = "torch.softmax(attn_scores / self.head_dim**0.5, dim=-1)"
ATTEND = "(self.dropout(attn_weights) @ values).transpose(1, 2)"
CUT_MASK = "blocked = self.mask.bool()[:num_tokens, :num_tokens]"
HEADS = (
    "[CausalAttention(d_in, d_out, context_length, dropout, qkv_bias) for _ in range(num_heads)]"
)

MUTANTS = [
    # MultiHeadAttention: scaling and softmax
    Mutant("scale_by_sqrt_d_out", "/ self.head_dim**0.5, dim", "/ self.d_out**0.5, dim", "parity"),
    Mutant(
        "no_scaling", "attn_scores / self.head_dim**0.5, dim=-1", "attn_scores, dim=-1", "parity"
    ),
    Mutant(
        "softmax_over_queries",
        "self.head_dim**0.5, dim=-1)",
        "self.head_dim**0.5, dim=-2)",
        "normalization",
    ),
    Mutant(
        "weights_taken_before_softmax", SOFTMAX, "attn_scores / self.head_dim**0.5", "normalization"
    ),
    Mutant(
        "softmax_that_overflows",
        SOFTMAX,
        "(attn_scores / self.head_dim**0.5).exp()"
        " / (attn_scores / self.head_dim**0.5).exp().sum(-1, keepdim=True)",
        "normalization",
    ),
    # MultiHeadAttention: head layout
    Mutant(
        "split_without_transpose",
        SPLIT_HEADS,
        "t.view(b, self.num_heads, num_tokens, self.head_dim)",
        "causal",
    ),
    Mutant("merge_without_transpose", ATTEND, "(self.dropout(attn_weights) @ values)", "causal"),
    Mutant(
        "strided_head_split",
        SPLIT_HEADS,
        "t.view(b, num_tokens, self.head_dim, self.num_heads).transpose(2, 3).transpose(1, 2)",
        "parity",
    ),
    Mutant(
        "merge_view_without_contiguous",
        "context.contiguous().view(b, num_tokens, self.d_out)",
        "context.view(b, num_tokens, self.d_out)",
        "shapes",
    ),
    # MultiHeadAttention: the causal mask. With `~blocked` the last query has no visible key
    # at all: its weights are 0/0 = NaN, which the constant-values check (normalization) sees
    # before the causal checks run.
    Mutant(
        "inverted_mask",
        "attn_scores.masked_fill(blocked, -torch.inf)",
        "attn_scores.masked_fill(~blocked, -torch.inf)",
        "normalization",
    ),
    Mutant("mask_transposed", CUT_MASK, CUT_MASK + ".T", "causal"),
    Mutant(
        "mask_ignored",
        "attn_scores = attn_scores.masked_fill(blocked, -torch.inf)",
        "attn_scores = attn_scores",
        "causal",
    ),
    Mutant(
        "mask_lets_the_next_token_through",
        "torch.triu(torch.ones(context_length, context_length), diagonal=1),",
        "torch.triu(torch.ones(context_length, context_length), diagonal=2),",
        "causal",
    ),
    Mutant("mask_not_cut_to_the_input_length", CUT_MASK, "blocked = self.mask.bool()", "shapes"),
    # MultiHeadAttention: projections and biases
    Mutant("no_out_proj", "return self.out_proj(context)", "return context", "parity"),
    Mutant(
        "dropped_out_proj_bias",
        "return self.out_proj(context)",
        "return F.linear(context, self.out_proj.weight)",
        "parity",
    ),
    Mutant(
        "dropped_query_bias",
        PROJECTIONS,
        "(F.linear(x, self.W_query.weight), self.W_key(x), self.W_value(x))",
        "parity",
    ),
    Mutant(
        "keys_from_the_query_projection",
        PROJECTIONS,
        "(self.W_query(x), self.W_query(x), self.W_value(x))",
        "parity",
    ),
    Mutant(
        "out_proj_bias_follows_qkv_bias",
        "nn.Linear(d_out, d_out)",
        "nn.Linear(d_out, d_out, bias=qkv_bias)",
        "shapes",
    ),
    Mutant(
        "layers_created_out_of_order",
        "self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)\n        self.out_proj = nn.Linear(d_out, d_out)",
        "self.out_proj = nn.Linear(d_out, d_out)\n        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)",
        "parity",
    ),
    # MultiHeadAttention: training behaviour
    Mutant(
        "dropout_active_in_eval",
        ATTEND,
        "(F.dropout(attn_weights, self.dropout.p) @ values).transpose(1, 2)",
        "training",
    ),
    Mutant("dropout_never_applied", ATTEND, "(attn_weights @ values).transpose(1, 2)", "training"),
    Mutant(
        "nan_in_train_mode",  # NaN is no evidence that dropout acted
        ATTEND,
        "((self.dropout(attn_weights) * (float('nan') if self.training and self.dropout.p else 1.0))"
        " @ values).transpose(1, 2)",
        "training",
    ),
    Mutant(
        "dropout_on_the_context",
        ATTEND,
        "self.dropout(attn_weights @ values).transpose(1, 2)",
        "training",
    ),
    Mutant(
        "detached_values",
        "@ values).transpose(1, 2)",
        "@ values.detach()).transpose(1, 2)",
        "training",
    ),
    # CausalAttention
    Mutant(
        "single_head_scaled_by_sqrt_d_in",
        "scores / keys.shape[-1] ** 0.5",
        "scores / x.shape[-1] ** 0.5",
        "parity",
    ),
    Mutant(
        "single_head_dropout_on_the_output",
        "return self.dropout(weights) @ values",
        "return self.dropout(weights @ values)",
        "training",
    ),
    # MultiHeadAttentionWrapper
    Mutant(
        "wrapper_concatenates_over_tokens",
        "for head in self.heads], dim=-1)",
        "for head in self.heads], dim=1)",
        "shapes",
    ),
    Mutant(
        "wrapper_heads_in_a_plain_list",
        "self.heads = nn.ModuleList(",
        "self.heads = list(",
        "shapes",
    ),
    Mutant(
        "wrapper_heads_share_one_module",
        HEADS,
        "[CausalAttention(d_in, d_out, context_length, dropout, qkv_bias)] * num_heads",
        "shapes",
    ),
    Mutant(
        "wrapper_drops_qkv_bias",
        "CausalAttention(d_in, d_out, context_length, dropout, qkv_bias) for",
        "CausalAttention(d_in, d_out, context_length, dropout) for",
        "shapes",
    ),
    Mutant(
        "wrapper_heads_in_reverse_order",
        "for head in self.heads], dim=-1)",
        "for head in self.heads[::-1]], dim=-1)",
        "parity",
    ),
]
