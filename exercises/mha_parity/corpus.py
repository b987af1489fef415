"""Single-bug mutants of solutions/mha_parity.ipynb, each with the level where a person would
expect it to lose points first. `values=True`: a bug in what every test compares (the scale,
the softmax, the head layout, which weights and inputs feed which projection)."""

from __future__ import annotations

from grader.suite.corpus import Mutant

MIN_MUTANTS = 18

MASK_FILL = 'scores = scores.masked_fill(blocked, float("-inf"))'
GUARD = """        scores = scores.masked_fill(blocked, float("-inf"))

    # softmax over a row of -inf is NaN: give fully masked rows zero weights instead.
    empty = torch.isneginf(scores).all(dim=-1, keepdim=True)
    weights = torch.softmax(scores.masked_fill(empty, 0.0), dim=-1).masked_fill(empty, 0.0)
"""
ATTENTION = """    scores = Q @ K.transpose(-2, -1) / math.sqrt(head_dim)
    if mask is not None:
        blocked = mask.bool()  # bool, or 0/1 integers or floats: nonzero = masked
        blocked = blocked[None, None] if blocked.dim() == 2 else blocked[:, None]
        scores = scores.masked_fill(blocked, float("-inf"))

    # softmax over a row of -inf is NaN: give fully masked rows zero weights instead.
    empty = torch.isneginf(scores).all(dim=-1, keepdim=True)
    weights = torch.softmax(scores.masked_fill(empty, 0.0), dim=-1).masked_fill(empty, 0.0)

    heads = weights @ V  # [N, H, L, Dh]
"""
CHUNKS = "w_q, w_k, w_v = in_proj_weight.chunk(3, dim=0)"

MUTANTS = [
    # scaling: any scale is absorbed into W_q, so only parity sees it
    Mutant(
        "scale_by_sqrt_d_model",
        "math.sqrt(head_dim)",
        "math.sqrt(d_model)",
        "parity",
        hint="scores scaled by 1/sqrt(d_model), not 1/sqrt(head_dim)?",
        values=True,
    ),
    Mutant(
        "no_scaling",
        " / math.sqrt(head_dim)",
        "",
        "parity",
        hint="scores not scaled by 1/sqrt(head_dim)?",
        values=True,
    ),
    # The seed's torch.sqrt(torch.tensor(d_k, dtype=torch.float32)) is no bug: it stays within
    # assert_close's float64 tolerance (tests/test_tolerances.py grades the seed's code).
    # softmax
    Mutant(
        "softmax_over_queries",
        "masked_fill(empty, 0.0), dim=-1)",
        "masked_fill(empty, 0.0), dim=-2)",
        "normalization",
        hint="softmax over the query axis (dim=-2) instead of the keys?",
        values=True,
    ),
    Mutant(
        "weights_before_softmax",
        "heads = weights @ V",
        "heads = scores @ V",
        "normalization",
        hint="heads computed from the raw scores, with no softmax?",
        values=True,
    ),
    Mutant(
        "softmax_that_overflows",
        "torch.softmax(scores.masked_fill(empty, 0.0), dim=-1)",
        "(scores.masked_fill(empty, 0.0).exp()"
        " / scores.masked_fill(empty, 0.0).exp().sum(-1, keepdim=True))",
        "normalization",
        hint="softmax as exp() / sum() without subtracting the max, so large scores overflow?",
    ),
    # head layout
    Mutant(
        "split_without_transpose",
        "x.reshape(N, length, num_heads, head_dim).transpose(1, 2)",
        "x.reshape(N, num_heads, length, head_dim)",
        "padding",
        hint="heads split by reshaping straight to [N, H, L, Dh], without the transpose?",
        values=True,
    ),
    Mutant(
        "merge_without_transpose",
        "heads.transpose(1, 2).reshape(N, L, d_model)",
        "heads.reshape(N, L, d_model)",
        "padding",
        hint="heads merged to [N, L, E] without transposing back from [N, H, L, Dh]?",
        values=True,
    ),
    Mutant(
        "strided_head_split",
        "x.reshape(N, length, num_heads, head_dim).transpose(1, 2)",
        "x.reshape(N, length, head_dim, num_heads).transpose(2, 3).transpose(1, 2)",
        "parity",
        hint="heads take strided channels (h, h+H, ...), not contiguous head_dim blocks?",
        values=True,
    ),
    # masks
    Mutant(
        "inverted_mask",
        "blocked = mask.bool()",
        "blocked = mask == 0",
        "padding",
        hint="mask read as nonzero = keep instead of nonzero = masked?",
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
        "else blocked[:, None]",
        "else blocked",
        "padding",
        hint="[N, L, S] mask given no heads axis, so N broadcasts against heads?",
    ),
    Mutant(
        "mask_repeated_not_interleaved",  # nn.MultiheadAttention's fold done with .repeat
        "else blocked[:, None]",
        "else blocked.repeat(num_heads, 1, 1).reshape(N, num_heads, L, S)",
        "padding",
        hint="per-sample mask tiled with .repeat(num_heads), mixing samples and heads?",
    ),
    Mutant(
        "integer_mask_not_converted",
        "blocked = mask.bool()",
        "blocked = mask",
        "padding",
        hint="0/1 integer or float mask passed to masked_fill without .bool()?",
    ),
    Mutant(
        "mask_applied_after_softmax",
        GUARD,
        "        pass\n"
        "    weights = torch.softmax(scores, dim=-1)\n"
        "    if mask is not None:\n"
        "        weights = weights.masked_fill(blocked, 0.0)\n",
        "padding",
        hint="mask zeroes the weights after softmax instead of -inf before it?",
    ),
    Mutant(
        "two_d_mask_treated_as_per_sample",
        "blocked[None, None] if blocked.dim() == 2 else blocked[:, None]",
        "blocked[:, None]",
        "causal",
        hint="[L, S] mask indexed as a per-sample [N, L, S] mask?",
    ),
    Mutant(
        "float_mask_added_to_scores",  # nn.MultiheadAttention's meaning of a float mask
        MASK_FILL,
        "scores = (\n"
        "            scores + (mask[None, None] if mask.dim() == 2 else mask[:, None])\n"
        "            if mask.is_floating_point()\n"
        '            else scores.masked_fill(blocked, float("-inf"))\n'
        "        )",
        "causal",
        hint="float 0/1 mask added to the scores (nn.MultiheadAttention style)?",
    ),
    # fully masked rows
    Mutant(
        "nan_for_fully_masked_rows",
        "empty = torch.isneginf(scores).all(dim=-1, keepdim=True)",
        "empty = torch.zeros_like(scores[..., :1], dtype=torch.bool)",
        "finite",
        hint="fully masked query rows give NaN weights instead of zeros?",
    ),
    Mutant(
        "nan_gradient_for_fully_masked_rows",  # finite forward, NaN backward
        GUARD,
        '        scores = scores + torch.zeros_like(scores).masked_fill(blocked, float("-inf"))\n'
        "    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)\n",
        "gradients",
        hint="fully masked rows' NaN patched by nan_to_num, leaving NaN gradients?",
    ),
    # inputs and projections
    Mutant(
        "values_from_query",
        "F.linear(v, w_v, b_v)",
        "F.linear(q, w_v, b_v)",
        "shapes",
        hint="values projected from q instead of v?",
        values=True,
    ),
    Mutant(
        "keys_from_query",
        "F.linear(k, w_k, b_k)",
        "F.linear(q, w_k, b_k)",
        "shapes",
        hint="keys projected from q instead of k?",
        values=True,
    ),
    Mutant(
        "keys_reshaped_by_query_length",  # the seed's K.view(batch_size, seq_len, ...)
        "K = split_heads(F.linear(k, w_k, b_k), S)",
        "K = split_heads(F.linear(k, w_k, b_k), L)",
        "shapes",
        hint="K split with the query length L instead of the key length S?",
        values=True,
    ),
    Mutant(
        "fresh_projections_instead_of_given",  # the seed's nn.Linear created inside
        CHUNKS,
        "w_q, w_k, w_v = nn.Linear(d_model, 3 * d_model).weight.to(q.dtype).chunk(3, dim=0)",
        "shapes",
        hint="weights from a new nn.Linear instead of the given in_proj_weight?",
        values=True,
    ),
    Mutant(
        "q_and_k_chunks_swapped",
        CHUNKS,
        "w_k, w_q, w_v = " + CHUNKS.split(" = ")[1],
        "parity",
        hint="in_proj_weight chunks unpacked as w_k, w_q (query and key swapped)?",
        values=True,
    ),
    Mutant(
        "in_proj_not_transposed",
        "Q = split_heads(F.linear(q, w_q, b_q), L)",
        "Q = split_heads(q @ w_q + (0 if b_q is None else b_q), L)",
        "parity",
        hint="query projection as q @ w_q, without transposing the weight?",
        values=True,
    ),
    Mutant(
        "out_proj_not_transposed",
        "F.linear(merged, out_proj_weight, out_proj_bias)",
        "merged @ out_proj_weight + (0 if out_proj_bias is None else out_proj_bias)",
        "parity",
        hint="output projection as merged @ out_proj_weight, without the transpose?",
        values=True,
    ),
    Mutant(
        "no_out_proj",
        "return F.linear(merged, out_proj_weight, out_proj_bias)",
        "return merged",
        "parity",
        hint="out_proj_weight never applied to the merged heads?",
        values=True,
    ),
    Mutant(
        "dropped_in_proj_bias",
        "b_q, b_k, b_v = in_proj_bias.chunk(3, dim=0)",
        "pass",
        "parity",
        hint="in_proj_bias ignored in the q, k, v projections?",
    ),
    Mutant(
        "dropped_out_proj_bias",
        "F.linear(merged, out_proj_weight, out_proj_bias)",
        "F.linear(merged, out_proj_weight)",
        "parity",
        hint="out_proj_bias ignored in the output projection?",
    ),
    Mutant(
        "detached_queries",
        "Q = split_heads(F.linear(q, w_q, b_q), L)",
        "Q = split_heads(F.linear(q, w_q, b_q), L).detach()",
        "gradients",
        hint="queries detached from the graph, so no gradient flows through Q?",
    ),
    # built-ins
    Mutant(
        "builtin_scaled_dot_product_attention",
        ATTENTION,
        "    allow = None if mask is None else ~mask.bool()\n"
        "    if allow is not None:\n"
        "        allow = allow[None, None] if allow.dim() == 2 else allow[:, None]\n"
        "    heads = F.scaled_dot_product_attention(Q, K, V, attn_mask=allow)\n",
        "from scratch",
        hint="attention done with F.scaled_dot_product_attention, not from scratch?",
    ),
    # one feature each: a mask changed in place, a non-contiguous input
    Mutant(
        "mask_unsqueezed_in_place",
        "else blocked[:, None]",
        "else blocked.unsqueeze_(1)",
        "padding",
        hint="the caller's [N, L, S] bool mask unsqueezed in place (unsqueeze_), changing its shape?",
    ),
    Mutant(
        "projection_flattens_with_view",
        "Q = split_heads(F.linear(q, w_q, b_q), L)",
        "Q = split_heads(F.linear(q.view(N * L, -1), w_q, b_q), L)",
        "shapes",
        hint="q flattened with .view(N * L, -1), which fails on a non-contiguous q (use reshape)?",
    ),
]
