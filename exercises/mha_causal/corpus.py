"""Single-bug mutants of solutions/mha_causal.ipynb, each with the level where a person would
expect it to lose points first. `values=True`: a bug in what every test compares (the scale,
the softmax, the head layout, the causal mask, which every output goes through: the modules
take no mask argument, so there is no call without it)."""

from __future__ import annotations

from grader.suite.corpus import Mutant

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
    Mutant(
        "scale_by_sqrt_d_out",
        "/ self.head_dim**0.5, dim",
        "/ self.d_out**0.5, dim",
        "parity",
        hint="scores scaled by 1/sqrt(d_out), not 1/sqrt(head_dim)?",
        values=True,
    ),
    Mutant(
        "no_scaling",
        "attn_scores / self.head_dim**0.5, dim=-1",
        "attn_scores, dim=-1",
        "parity",
        hint="attn_scores not scaled by 1/sqrt(head_dim) before the softmax?",
        values=True,
    ),
    Mutant(
        "softmax_over_queries",
        "self.head_dim**0.5, dim=-1)",
        "self.head_dim**0.5, dim=-2)",
        "normalization",
        hint="softmax over the query axis (dim=-2) instead of the keys?",
        values=True,
    ),
    Mutant(
        "weights_taken_before_softmax",
        SOFTMAX,
        "attn_scores / self.head_dim**0.5",
        "shapes",
        hint="attn_weights are the scaled scores, with no softmax?",
        values=True,
    ),
    Mutant(
        "softmax_that_overflows",
        SOFTMAX,
        "(attn_scores / self.head_dim**0.5).exp()"
        " / (attn_scores / self.head_dim**0.5).exp().sum(-1, keepdim=True)",
        "normalization",
        hint="softmax as exp() / sum() without subtracting the max, so large scores overflow?",
    ),
    # MultiHeadAttention: head layout
    Mutant(
        "split_without_transpose",
        SPLIT_HEADS,
        "t.view(b, self.num_heads, num_tokens, self.head_dim)",
        "causal",
        hint="heads split by viewing straight to [b, H, T, head_dim], without the transpose?",
        values=True,
    ),
    Mutant(
        "merge_without_transpose",
        ATTEND,
        "(self.dropout(attn_weights) @ values)",
        "causal",
        hint="context merged to [b, T, d_out] without transposing heads and tokens back?",
        values=True,
    ),
    Mutant(
        "strided_head_split",
        SPLIT_HEADS,
        "t.view(b, num_tokens, self.head_dim, self.num_heads).transpose(2, 3).transpose(1, 2)",
        "parity",
        hint="heads take strided channels (h, h+H, ...), not contiguous head_dim blocks?",
        values=True,
    ),
    Mutant(
        "merge_view_without_contiguous",
        "context.contiguous().view(b, num_tokens, self.d_out)",
        "context.view(b, num_tokens, self.d_out)",
        "shapes",
        hint="context.view() after the transpose, without .contiguous()?",
        values=True,
    ),
    # MultiHeadAttention: the causal mask. With `~blocked` the last query has no visible key
    # at all: its weights are 0/0 = NaN, which the constant-values check (normalization) sees
    # before the causal checks run.
    Mutant(
        "inverted_mask",
        "attn_scores.masked_fill(blocked, -torch.inf)",
        "attn_scores.masked_fill(~blocked, -torch.inf)",
        "shapes",
        hint="causal mask inverted (~blocked): past and current token hidden, future visible?",
        values=True,
    ),
    Mutant(
        "mask_transposed",
        CUT_MASK,
        CUT_MASK + ".T",
        "causal",
        hint="causal mask transposed (.T): future tokens visible, past ones hidden?",
        values=True,
    ),
    Mutant(
        "mask_ignored",
        "attn_scores = attn_scores.masked_fill(blocked, -torch.inf)",
        "attn_scores = attn_scores",
        "causal",
        hint="causal mask never applied to attn_scores?",
        values=True,
    ),
    Mutant(
        "mask_lets_the_next_token_through",
        "torch.triu(torch.ones(context_length, context_length), diagonal=1),",
        "torch.triu(torch.ones(context_length, context_length), diagonal=2),",
        "causal",
        hint="causal mask shifted (triu diagonal=2): the next token is visible?",
        values=True,
    ),
    Mutant(
        "mask_not_cut_to_the_input_length",
        CUT_MASK,
        "blocked = self.mask.bool()",
        "shapes",
        hint="mask not cut to [:num_tokens, :num_tokens] when T < context_length?",
    ),
    # MultiHeadAttention: projections and biases
    Mutant(
        "no_out_proj",
        "return self.out_proj(context)",
        "return context",
        "parity",
        hint="out_proj never applied to the context?",
        values=True,
    ),
    Mutant(
        "dropped_out_proj_bias",
        "return self.out_proj(context)",
        "return F.linear(context, self.out_proj.weight)",
        "parity",
        hint="out_proj applied without its bias?",
    ),
    Mutant(
        "dropped_query_bias",
        PROJECTIONS,
        "(F.linear(x, self.W_query.weight), self.W_key(x), self.W_value(x))",
        "parity",
        hint="queries computed without W_query's bias?",
    ),
    Mutant(
        "keys_from_the_query_projection",
        PROJECTIONS,
        "(self.W_query(x), self.W_query(x), self.W_value(x))",
        "parity",
        hint="keys computed with W_query instead of W_key?",
        values=True,
    ),
    Mutant(
        "out_proj_bias_follows_qkv_bias",
        "nn.Linear(d_out, d_out)",
        "nn.Linear(d_out, d_out, bias=qkv_bias)",
        "shapes",
        hint="out_proj's bias tied to qkv_bias instead of always present?",
    ),
    Mutant(
        "layers_created_out_of_order",
        "self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)\n        self.out_proj = nn.Linear(d_out, d_out)",
        "self.out_proj = nn.Linear(d_out, d_out)\n        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)",
        "parity",
        hint="out_proj created before W_value, so the seeded initial weights differ?",
    ),
    # MultiHeadAttention: training behaviour
    Mutant(
        "dropout_active_in_eval",
        ATTEND,
        "(F.dropout(attn_weights, self.dropout.p) @ values).transpose(1, 2)",
        "training",
        hint="dropout on the attention weights still active in eval mode?",
    ),
    Mutant(
        "dropout_never_applied",
        ATTEND,
        "(attn_weights @ values).transpose(1, 2)",
        "training",
        hint="dropout never applied to the attention weights?",
    ),
    Mutant(
        "nan_in_train_mode",  # NaN is no evidence that dropout acted
        ATTEND,
        "((self.dropout(attn_weights) * (float('nan') if self.training and self.dropout.p else 1.0))"
        " @ values).transpose(1, 2)",
        "training",
        hint="attention weights turn NaN in train mode when dropout p > 0?",
    ),
    Mutant(
        "dropout_on_the_context",
        ATTEND,
        "self.dropout(attn_weights @ values).transpose(1, 2)",
        "training",
        hint="dropout applied to the context (weights @ values), not to attn_weights?",
    ),
    Mutant(
        "detached_values",
        "@ values).transpose(1, 2)",
        "@ values.detach()).transpose(1, 2)",
        "training",
        hint="values detached from the graph, so W_value gets no gradient?",
    ),
    # CausalAttention
    Mutant(
        "single_head_scaled_by_sqrt_d_in",
        "scores / keys.shape[-1] ** 0.5",
        "scores / x.shape[-1] ** 0.5",
        "parity",
        hint="CausalAttention scales scores by 1/sqrt(d_in), not 1/sqrt(d_out)?",
        values=True,
    ),
    Mutant(
        "single_head_dropout_on_the_output",
        "return self.dropout(weights) @ values",
        "return self.dropout(weights @ values)",
        "training",
        hint="CausalAttention applies dropout to its output, not to the weights?",
    ),
    # MultiHeadAttentionWrapper
    Mutant(
        "wrapper_concatenates_over_tokens",
        "for head in self.heads], dim=-1)",
        "for head in self.heads], dim=1)",
        "shapes",
        hint="wrapper concatenates the heads on the token axis (dim=1), not dim=-1?",
        values=True,
    ),
    Mutant(
        "wrapper_heads_in_a_plain_list",
        "self.heads = nn.ModuleList(",
        "self.heads = list(",
        "shapes",
        hint="wrapper's heads in a plain list, not nn.ModuleList (unregistered)?",
    ),
    Mutant(
        "wrapper_heads_share_one_module",
        HEADS,
        "[CausalAttention(d_in, d_out, context_length, dropout, qkv_bias)] * num_heads",
        "shapes",
        hint="[CausalAttention(...)] * num_heads: every head is the same module?",
    ),
    Mutant(
        "wrapper_drops_qkv_bias",
        "CausalAttention(d_in, d_out, context_length, dropout, qkv_bias) for",
        "CausalAttention(d_in, d_out, context_length, dropout) for",
        "shapes",
        hint="wrapper builds its CausalAttention heads without passing qkv_bias?",
    ),
    Mutant(
        "wrapper_heads_in_reverse_order",
        "for head in self.heads], dim=-1)",
        "for head in self.heads[::-1]], dim=-1)",
        "parity",
        hint="wrapper concatenates the heads in reverse order?",
    ),
    # one feature each: a non-contiguous input, a second call, dropout 0.0
    Mutant(
        "queries_from_a_view_of_x",
        PROJECTIONS,
        "(self.W_query(x.view(-1, x.shape[-1])).view(b, num_tokens, -1), self.W_key(x), self.W_value(x))",
        "shapes",
        hint="x flattened with .view(-1, d_in), which fails on a non-contiguous x (use reshape)?",
    ),
    Mutant(
        "mask_cut_once_and_cached",
        CUT_MASK,
        'if not hasattr(self, "_blocked"):\n'
        "            self._blocked = self.mask.bool()[:num_tokens, :num_tokens]\n"
        "        blocked = self._blocked",
        "shapes",
        hint="the mask cut to the first call's length and kept, so a later call of another length fails?",
    ),
    Mutant(
        "dropout_zero_taken_for_the_default",
        "self.out_proj = nn.Linear(d_out, d_out)  # always with a bias\n        self.dropout = nn.Dropout(dropout)",
        "self.out_proj = nn.Linear(d_out, d_out)  # always with a bias\n        self.dropout = nn.Dropout(dropout or 0.1)",
        "training",
        hint="dropout=0.0 replaced by a default (dropout or 0.1), so train mode still drops?",
    ),
]
