"""Single-bug mutants of solutions/gqa.ipynb, each with the level where it first loses points,
and correct variants that keep full marks.

`values=True` marks the bugs in what every test compares (the head mapping, the default
scale, the softmax axis, the output layout): they may lose points at every level. Every other
mutant is about one feature and should lose points at its own level and few others.

Left out as equivalent (no test can tell them apart): the `h % Hkv` head mapping and an
`expand` on a new leading group axis are both `.repeat` (`repeat_not_interleave` below).
"""

from __future__ import annotations

from grader.suite.corpus import Mutant, Variant

MIN_MUTANTS = 15

REPEAT = "k, v = (t.repeat_interleave(group, dim=1) for t in (k, v))"
SCORES = "scores = (q @ k.transpose(-2, -1)) * scale"
SOFTMAX = "torch.softmax(scores.masked_fill(blocked, 0.0), dim=-1)"
SPLIT = "return t.reshape(B, T, -1, self.head_dim).transpose(1, 2)"

MUTANTS = [
    Mutant(
        "module_uses_sdpa",
        "out = grouped_query_attention(q, k, v, is_causal=is_causal)",
        "out = torch.nn.functional.scaled_dot_product_attention(\n"
        "            q, k, v, is_causal=is_causal, enable_gqa=True\n        )",
        "from scratch",
        hint="the module calls torch's scaled_dot_product_attention (enable_gqa=True), not its own grouped_query_attention?",
    ),
    # --- shapes
    Mutant(
        "kv_proj_full_width",
        "kv_dim = n_kv_heads * self.head_dim",
        "kv_dim = d_model",
        "shapes",
        hint="k_proj/v_proj output d_model instead of n_kv_heads * head_dim (MHA in disguise)?",
    ),
    Mutant(
        "no_divisibility_check",
        "if Hkv == 0 or Hq % Hkv != 0 or v.shape[1] != Hkv:",
        "if False:",
        "shapes",
        hint="no ValueError when Hq is not a multiple of Hkv?",
    ),
    Mutant(
        "module_no_divisibility_check",
        "if d_model % n_heads != 0 or n_heads % n_kv_heads != 0:",
        "if d_model % n_heads != 0:",
        "shapes",
        hint="GQASelfAttention accepts n_kv_heads that does not divide n_heads?",
    ),
    Mutant(
        "kv_head_counts_not_compared",
        "if Hkv == 0 or Hq % Hkv != 0 or v.shape[1] != Hkv:",
        "if Hkv == 0 or Hq % Hkv != 0:",
        "shapes",
        hint="no ValueError when k and v have different numbers of heads?",
    ),
    Mutant(
        "module_d_model_not_checked",
        "if d_model % n_heads != 0 or n_heads % n_kv_heads != 0:",
        "if n_heads % n_kv_heads != 0:",
        "shapes",
        hint="GQASelfAttention accepts n_heads that does not divide d_model?",
    ),
    Mutant(
        "causal_and_mask_accepted",
        "if is_causal and attn_mask is not None:",
        "if False:",
        "shapes",
        hint="is_causal=True with an attn_mask accepted (the mask silently replaced)?",
    ),
    Mutant(
        "repeat_by_kv_heads",
        "group = Hq // Hkv",
        "group = Hkv",
        "shapes",
        hint="KV heads repeated Hkv times instead of Hq // Hkv?",
        values=True,
    ),
    Mutant(
        "output_heads_last",
        "return weights @ v\n",
        "return (weights @ v).transpose(1, 2)\n",
        "shapes",
        hint="output returned as [B, Tq, Hq, Dv] instead of [B, Hq, Tq, Dv]?",
        values=True,
    ),
    # --- degenerate cases
    Mutant(
        "softmax_over_queries",
        SOFTMAX,
        "torch.softmax(scores.masked_fill(blocked, 0.0), dim=-2)",
        "degenerate cases",
        hint="softmax over the query axis (dim=-2) instead of the keys?",
        values=True,
    ),
    Mutant(
        "no_scaling",
        "scale = 1 / math.sqrt(D) if scale is None else scale",
        "scale = 1.0 if scale is None else scale",
        "degenerate cases",
        hint="scores not scaled by 1/sqrt(D) by default?",
        values=True,
    ),
    Mutant(
        "scale_by_group",
        "scale = 1 / math.sqrt(D) if scale is None else scale",
        "scale = 1 / math.sqrt(D * group) if scale is None else scale",
        "degenerate cases",
        hint="scores scaled by 1/sqrt(D * group size) instead of 1/sqrt(D)?",
        values=True,
    ),
    Mutant(
        "scale_by_kv_heads",
        "scale = 1 / math.sqrt(D) if scale is None else scale",
        "scale = 1 / math.sqrt(D * Hkv) if scale is None else scale",
        "degenerate cases",
        hint="scores scaled by 1/sqrt(D * Hkv) instead of 1/sqrt(D)?",
        values=True,
    ),
    Mutant(
        "mean_over_group_queries",
        "group = Hq // Hkv\n",
        "group = Hq // Hkv\n    q = q.reshape(B, Hkv, group, Tq, D).mean(2, keepdim=True)"
        ".expand(B, Hkv, group, Tq, D).reshape(B, Hq, Tq, D)\n",
        "degenerate cases",
        hint="the query heads of a group averaged into one shared query?",
        values=True,
    ),
    # --- grouping
    Mutant(
        "repeat_not_interleave",
        REPEAT,
        "k, v = (t.repeat(1, group, 1, 1) for t in (k, v))",
        "grouping",
        hint="KV heads tiled with .repeat (query head h -> KV head h % Hkv), not repeat_interleave?",
        values=True,
    ),
    Mutant(
        "keys_repeat_not_interleave",
        REPEAT,
        "k, v = k.repeat(1, group, 1, 1), v.repeat_interleave(group, dim=1)",
        "grouping",
        hint="keys tiled with .repeat, values with repeat_interleave (mismatched head maps)?",
        values=True,
    ),
    Mutant(
        "values_repeat_not_interleave",
        REPEAT,
        "k, v = k.repeat_interleave(group, dim=1), v.repeat(1, group, 1, 1)",
        "grouping",
        hint="values tiled with .repeat, keys with repeat_interleave (mismatched head maps)?",
        values=True,
    ),
    Mutant(
        "scale_argument_ignored",
        "scale = 1 / math.sqrt(D) if scale is None else scale",
        "scale = 1 / math.sqrt(D)",
        "grouping",
        hint="the scale argument ignored (always 1/sqrt(D))?",
    ),
    Mutant(
        "scale_zero_taken_for_none",
        "scale = 1 / math.sqrt(D) if scale is None else scale",
        "scale = scale or 1 / math.sqrt(D)",
        "grouping",
        hint="scale=0.0 taken for None (`scale or 1/sqrt(D)`), so it scales by 1/sqrt(D)?",
    ),
    # --- masks
    Mutant(
        "inverted_bool_mask",
        'scores.masked_fill(~attn_mask, float("-inf"))',
        'scores.masked_fill(attn_mask, float("-inf"))',
        "masks",
        hint="bool mask read as True = blocked instead of True = may attend?",
    ),
    Mutant(
        "causal_top_left",
        "device=q.device).tril(S - Tq)",
        "device=q.device).tril()",
        "masks",
        hint="causal mask aligned top-left (tril(0)) instead of bottom-right when Tq != S?",
    ),
    Mutant(
        "causal_excludes_diagonal",
        "device=q.device).tril(S - Tq)",
        "device=q.device).tril(S - Tq - 1)",
        "masks",
        hint="causal mask also blocks the key at the query's own position (diagonal)?",
    ),
    Mutant(
        "causal_ignored",
        "    if is_causal:  # bottom-right",
        "    if False:  # bottom-right",
        "masks",
        hint="is_causal=True never applied?",
    ),
    Mutant(
        "float_mask_ignored",
        "scores = scores + attn_mask",
        "scores = scores",
        "masks",
        hint="float (additive) attn_mask never added to the scores?",
    ),
    # --- module
    Mutant(
        "module_merge_without_transpose",
        "out.transpose(1, 2).reshape(B, T, -1)",
        "out.reshape(B, T, -1)",
        "module",
        hint="heads merged [B, H, T, hd] -> [B, T, H*hd] without transposing back?",
    ),
    Mutant(
        "module_no_o_proj",
        "return self.o_proj(out.transpose(1, 2).reshape(B, T, -1))",
        "return out.transpose(1, 2).reshape(B, T, -1)",
        "module",
        hint="o_proj never applied to the merged heads?",
    ),
    Mutant(
        "module_causal_not_passed",
        "grouped_query_attention(q, k, v, is_causal=is_causal)",
        "grouped_query_attention(q, k, v)",
        "module",
        hint="the module does not pass is_causal on to the attention?",
    ),
    # --- gradients
    Mutant(
        "detached_keys",
        "for t in (k, v))",
        "for t in (k.detach(), v))",
        "gradients",
        hint="keys detached, so no gradient reaches k (or k_proj)?",
    ),
    Mutant(
        "detached_scores",
        SOFTMAX,
        "torch.softmax(scores.detach().masked_fill(blocked, 0.0), dim=-1)",
        "gradients",
        hint="scores detached before the softmax, so q and k get no gradient?",
    ),
    Mutant(
        "scales_q_in_place",
        SCORES,
        "q *= scale\n    scores = q @ k.transpose(-2, -1)",
        "gradients",
        hint="q scaled in place (q *= scale), modifying the caller's tensor?",
    ),
    # --- edge cases
    Mutant(
        "nan_for_fully_masked_rows",
        "blocked = torch.isneginf(scores).all(dim=-1, keepdim=True)",
        "blocked = torch.zeros_like(scores[..., :1], dtype=torch.bool)",
        "masks",
        hint="fully masked rows give NaN instead of zeros?",
    ),
    Mutant(
        "finite_fill_uniform_rows",
        'scores.masked_fill(~attn_mask, float("-inf"))',
        "scores.masked_fill(~attn_mask, -1e9)",
        "masks",
        hint="masked scores filled with -1e9, so fully masked rows average all values, not 0?",
    ),
    Mutant(
        "softmax_without_max_shift",
        SOFTMAX,
        "(lambda e: e / e.sum(-1, keepdim=True))(scores.masked_fill(blocked, 0.0).exp())",
        "edge cases",
        hint="softmax as exp() / sum() without subtracting the max, so large scores overflow?",
    ),
    Mutant(
        "view_needs_contiguous",
        SCORES,
        "scores = (q.view(B * Hq, Tq, D) @ k.reshape(B * Hq, S, D).transpose(-2, -1))"
        ".view(B, Hq, Tq, S) * scale",
        "module",
        hint="q flattened with .view, which fails on non-contiguous q (the module's transposed heads)?",
    ),
    Mutant(
        "scores_in_float32",
        SCORES,
        "scores = (q.float() @ k.float().transpose(-2, -1)).to(q.dtype) * scale",
        "edge cases",
        hint="scores computed in float32 (q.float() @ k.float()) for float64 inputs?",
    ),
    Mutant(
        "given_scale_applied_to_q_in_place",
        "scale = 1 / math.sqrt(D) if scale is None else scale",
        "if scale is not None:\n        q, scale = q.mul_(scale), 1.0\n"
        "    scale = 1 / math.sqrt(D) if scale is None else scale",
        "edge cases",
        hint="a given scale multiplied into q in place (q.mul_(scale)), changing the caller's q?",
    ),
]

# Correct variants replace the solution's computation (after its validation):
# a grouped formulation, no copy of K/V, the mask broadcast to [B, Hq, Tq, S], then grouped.
GROUPED = """    G = Hq // Hkv
    qg = q.reshape(B, Hkv, G, Tq, D)  # query head h = j * G + r reads KV head j
    s = qg @ k.unsqueeze(2).transpose(-2, -1) * (D**-0.5 if scale is None else scale)
    if is_causal:
        i, j = torch.arange(Tq)[:, None], torch.arange(S)[None, :]
        attn_mask = j <= i + S - Tq
    if attn_mask is not None:
        m = torch.broadcast_to(attn_mask, (B, Hq, Tq, S)).reshape(B, Hkv, G, Tq, S)
        s = s.masked_fill(~m, -torch.inf) if m.dtype == torch.bool else s + m
    empty = (s == -torch.inf).all(-1, keepdim=True)
    p = torch.exp(s - s.amax(-1, keepdim=True).masked_fill(empty, 0))
    p = p / p.sum(-1, keepdim=True).masked_fill(empty, 1.0)
    out = p @ v.unsqueeze(2)
    return out.reshape(B, Hq, Tq, v.shape[-1])
"""

# Hugging Face's repeat_kv (expand + reshape) and a hand-written helper that shares the
# forbidden built-in's name (no false alarm: the scan flags what a name is bound to).
OWN_SDPA = """    def repeat_kv(x, n_rep):
        b, h, s, d = x.shape
        return x[:, :, None].expand(b, h, n_rep, s, d).reshape(b, h * n_rep, s, d)

    def scaled_dot_product_attention(q, k, v, mask, scale):
        s = torch.einsum("bhqd,bhkd->bhqk", q, k) * scale
        s = s + mask
        dead = torch.isinf(s).all(-1, keepdim=True)
        w = torch.softmax(s.masked_fill(dead, 0), dim=-1, dtype=torch.float64).to(q.dtype)
        return torch.einsum("bhqk,bhkd->bhqd", w.masked_fill(dead, 0), v)

    bias = torch.zeros(Tq, S, dtype=q.dtype)
    if is_causal:
        bias = bias.masked_fill(~torch.ones(Tq, S, dtype=torch.bool).tril(S - Tq), -math.inf)
    elif attn_mask is not None and attn_mask.dtype == torch.bool:
        bias = torch.zeros(attn_mask.shape, dtype=q.dtype).masked_fill(~attn_mask, -math.inf)
    elif attn_mask is not None:
        bias = attn_mask.to(q.dtype)
    n_rep = Hq // Hkv
    s = 1 / math.sqrt(D) if scale is None else scale
    return scaled_dot_product_attention(q, repeat_kv(k, n_rep), repeat_kv(v, n_rep), bias, s)
"""

SOLUTION_BODY = """    group = Hq // Hkv
    # query head h reads KV head h // group: consecutive query heads share one KV head
    k, v = (t.repeat_interleave(group, dim=1) for t in (k, v))
    scale = 1 / math.sqrt(D) if scale is None else scale
    scores = (q @ k.transpose(-2, -1)) * scale
    if is_causal:  # bottom-right: the last query sees every key
        attn_mask = torch.ones(Tq, S, dtype=torch.bool, device=q.device).tril(S - Tq)
    if attn_mask is not None and attn_mask.dtype == torch.bool:
        scores = scores.masked_fill(~attn_mask, float("-inf"))
    elif attn_mask is not None:
        scores = scores + attn_mask
    # softmax over a row of -inf is NaN: fully masked rows get zero weights instead
    blocked = torch.isneginf(scores).all(dim=-1, keepdim=True)
    weights = torch.softmax(scores.masked_fill(blocked, 0.0), dim=-1).masked_fill(blocked, 0.0)
    return weights @ v
"""


VARIANTS = [
    # the scaffold filled in by someone who had read only the scaffold (not this solution)
    Variant("independent", notebook="variants/independent.ipynb"),
    Variant("grouped_without_copies", SOLUTION_BODY, GROUPED),
    Variant("hf_repeat_kv_and_own_sdpa_helper", SOLUTION_BODY, OWN_SDPA),
    Variant(
        "einops_repeat",
        REPEAT,
        "import einops\n\n"
        '    k, v = (einops.repeat(t, "b h s d -> b (h g) s d", g=group) for t in (k, v))',
    ),
    Variant(
        "split_with_view_and_permute",
        SPLIT,
        "return t.view(B, T, -1, self.head_dim).permute(0, 2, 1, 3)",
    ),
]
