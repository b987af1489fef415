"""The corpus of alibi.

Single-bug copies of solutions/alibi.ipynb (each must first lose points on its level, and
the card asks its hint when a notebook fails the same way) and correct variants (each must
keep full marks). The table of EXERCISES_CANON.md section 10 is here (naive_slopes_all_n,
slopes_start_at_one, extra_slopes_first_not_even, extra_slopes_odd_indices,
slopes_reversed, bias_sign, bias_not_masked, bidirectional_bloom_form,
bidirectional_signed, bias_before_scaling, topleft_alignment,
bias_heads_on_batch_axis, bias_after_softmax), with more classic bugs.
"""

from grader.suite.corpus import Mutant, Variant

MIN_MUTANTS = 36

GEOMETRIC = "return [start ** (h + 1) for h in range(n)]"
EXTRA = "slopes += geometric(2 * closest)[0::2][: n_heads - closest]"
CLOSEST = "closest = 2 ** math.floor(math.log2(n_heads))"
SLOPES_RETURN = "return torch.tensor(slopes, dtype=torch.float64)"
QUERY_POSITIONS = "query_positions = torch.arange(q_len, dtype=torch.float64) + (k_len - q_len)"
CAUSAL = """        bias = -slopes[:, None, None] * distance
        return bias.masked_fill(distance < 0, float("-inf"))"""
BIDIRECTIONAL = "return -slopes[:, None, None] * distance.abs()"
SCALE = "scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale"
BIAS = "bias = alibi_bias(n_heads, q_len, k_len, causal=causal).to(q)"
SCORES = "scores = q @ k.transpose(-2, -1) * scale + bias"
SHIFT = "scores = scores - scores.amax(dim=-1, keepdim=True)"
NORMALISE = """    weights = scores.exp()
    weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights @ v"""

MUTANTS = [
    Mutant(
        "uses_sdpa",
        SHIFT + "\n" + NORMALISE,
        "return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=bias, "
        "scale=scale)",
        "from scratch",
        hint="attention computed by F.scaled_dot_product_attention with the bias as attn_mask?",
    ),
    # ---- shapes
    Mutant(
        "slopes_float32",
        SLOPES_RETURN,
        "return torch.tensor(slopes)",
        "shapes",
        hint="slopes made with torch.tensor(list) and no dtype, so float32 instead of float64?",
    ),
    Mutant(
        "bias_not_cast_to_q_dtype",
        BIAS,
        "bias = alibi_bias(n_heads, q_len, k_len, causal=causal)",
        "shapes",
        hint="the float64 bias added to float32 scores, so the output is float64, not q's dtype?",
    ),
    Mutant(
        "slopes_on_the_query_axis",
        CAUSAL,
        """        bias = -slopes[None, :, None] * distance
        return bias.masked_fill(distance < 0, float("-inf"))""",
        "shapes",
        hint="the slopes broadcast over the query axis (slopes[None, :, None]) instead of "
        "the head axis?",
        values=True,
    ),
    Mutant(
        "bias_heads_on_batch_axis",
        SCORES,
        "scores = q @ k.transpose(-2, -1) * scale + bias[:, None]",
        "shapes",
        hint="the (H, Tq, Tk) bias broadcast with its heads on the batch axis (bias[:, None])?",
        values=True,
    ),
    # ---- slopes for powers of two
    Mutant(
        "slopes_start_at_one",
        GEOMETRIC,
        "return [start**h for h in range(n)]",
        "slopes",
        hint="slopes 2^(-8h/n) with h from 0, so the first head's slope is 1?",
    ),
    Mutant(
        "slopes_reversed",
        SLOPES_RETURN,
        "return torch.tensor(slopes[::-1], dtype=torch.float64)",
        "slopes",
        hint="slopes smallest first (reversed) instead of largest first?",
    ),
    Mutant(
        "slopes_base_e",
        "start = 2.0 ** (-8.0 / n)",
        "start = math.exp(-8.0 / n)",
        "slopes",
        hint="slopes from e^(-8/n) instead of 2^(-8/n)?",
    ),
    # ---- other head counts
    Mutant(
        "naive_slopes_all_n",
        CLOSEST,
        "closest = n_heads",
        "other head counts",
        hint="2^(-8(h+1)/n) for every n, without the interpolation for n not a power of two?",
    ),
    Mutant(
        "even_counts_taken_as_powers",
        CLOSEST,
        "closest = n_heads if n_heads % 2 == 0 else 2 ** math.floor(math.log2(n_heads))",
        "other head counts",
        hint="every even head count treated as a power of two (n % 2 == 0)?",
    ),
    Mutant(
        "extra_slopes_first_not_even",
        EXTRA,
        "slopes += geometric(2 * closest)[: n_heads - closest]",
        "other head counts",
        hint="the extra heads take the first n - c slopes of 2c heads instead of every other "
        "one ([0::2])?",
    ),
    Mutant(
        "extra_slopes_odd_indices",
        EXTRA,
        "slopes += geometric(2 * closest)[1::2][: n_heads - closest]",
        "other head counts",
        hint="the extra heads take the odd-indexed slopes of 2c heads ([1::2]) instead of the "
        "even-indexed ones ([0::2])?",
    ),
    Mutant(
        "extra_slopes_before_closest",
        EXTRA,
        "slopes = geometric(2 * closest)[0::2][: n_heads - closest] + slopes",
        "other head counts",
        hint="the extra heads' slopes put before the closest power of two's?",
    ),
    Mutant(
        "slopes_sorted",
        SLOPES_RETURN,
        "return torch.tensor(sorted(slopes, reverse=True), dtype=torch.float64)",
        "other head counts",
        hint="the slopes sorted largest first instead of the paper's order (the closest power "
        "of two's, then the extra heads')?",
    ),
    Mutant(
        "next_power_truncated",
        "slopes = geometric(closest)\n    if closest < n_heads:\n        " + EXTRA,
        "slopes = geometric(2 * closest)[:n_heads] if closest < n_heads else geometric(closest)",
        "other head counts",
        hint="the first n slopes of the next power of two instead of the closest power's "
        "slopes followed by every other slope of twice as many heads?",
    ),
    Mutant(
        "extra_slopes_from_closest",
        EXTRA,
        "slopes += geometric(closest)[0::2][: n_heads - closest]",
        "other head counts",
        hint="the extra heads' slopes taken from c heads again instead of from 2c heads?",
    ),
    # ---- the causal bias
    Mutant(
        "bias_sign",
        CAUSAL,
        """        bias = slopes[:, None, None] * distance
        return bias.masked_fill(distance < 0, float("-inf"))""",
        "causal bias",
        hint="causal bias +m * (i - j) instead of -m * (i - j) (a reward for distance)?",
    ),
    Mutant(
        "bias_not_masked",
        CAUSAL,
        """        bias = -slopes[:, None, None] * distance
        return bias""",
        "causal bias",
        hint="causal bias without -inf for the keys after the query?",
    ),
    Mutant(
        "mask_large_negative",
        CAUSAL,
        """        bias = -slopes[:, None, None] * distance
        return bias.masked_fill(distance < 0, -1e9)""",
        "causal bias",
        hint="future keys filled with a large negative number (-1e9) instead of exactly -inf?",
    ),
    Mutant(
        "diagonal_masked",
        CAUSAL,
        """        bias = -slopes[:, None, None] * distance
        return bias.masked_fill(distance <= 0, float("-inf"))""",
        "causal bias",
        hint="the key at the query's own position masked too (distance <= 0)?",
    ),
    Mutant(
        "topleft_alignment",
        QUERY_POSITIONS,
        "query_positions = torch.arange(q_len, dtype=torch.float64)",
        "causal bias",
        hint="query i placed at position i (top-left) instead of i + k_len - q_len (bottom-right)?",
    ),
    Mutant(
        "mask_topleft",
        CAUSAL,
        """        bias = -slopes[:, None, None] * distance
        future = torch.ones(q_len, k_len, dtype=torch.bool).triu(1)
        return bias.masked_fill(future, float("-inf"))""",
        "causal bias",
        hint="causal mask triu(1) (top-left) while the distances are bottom-right: the mask "
        "needs the k_len - q_len offset too?",
    ),
    Mutant(
        "slopes_squeezed",
        "slopes = alibi_slopes(n_heads)",
        "slopes = alibi_slopes(n_heads).squeeze()",
        "causal bias",
        hint="the slopes squeezed, so a single head's (1,) slope becomes a 0-d tensor?",
    ),
    # ---- the bidirectional bias
    Mutant(
        "bidirectional_signed",
        BIDIRECTIONAL,
        "return -slopes[:, None, None] * distance",
        "bidirectional bias",
        hint="bidirectional bias -m * (i - j), signed, instead of -m * |i - j|?",
    ),
    Mutant(
        "bidirectional_still_masked",
        "    if causal:\n        bias",
        "    if True:\n        bias",
        "bidirectional bias",
        hint="causal=False ignored: the bias is masked anyway?",
    ),
    Mutant(
        "bidirectional_bloom_form",
        BIDIRECTIONAL,
        "return slopes[:, None, None] * key_positions.expand(q_len, k_len)",
        "bidirectional bias",
        hint="BLOOM's key-position bias +m * j, which equals the relative one only under a "
        "causal mask?",
    ),
    Mutant(
        "bidirectional_topleft",
        BIDIRECTIONAL,
        "return -slopes[:, None, None] * (distance - (k_len - q_len)).abs()",
        "bidirectional bias",
        hint="bidirectional bias -m * |i - j| with query i at position i (top-left), not "
        "i + k_len - q_len?",
    ),
    Mutant(
        "bidirectional_positive",
        BIDIRECTIONAL,
        "return slopes[:, None, None] * distance.abs()",
        "bidirectional bias",
        hint="bidirectional bias +m * |i - j| instead of -m * |i - j|?",
    ),
    # ---- attention
    Mutant(
        "bias_before_scaling",
        SCORES,
        "scores = (q @ k.transpose(-2, -1) + bias) * scale",
        "attention",
        hint="the bias added before the scaling, (q @ k^T + bias) * scale?",
        values=True,
    ),
    Mutant(
        "bias_after_softmax",
        SCORES + "\n    " + SHIFT + "\n" + NORMALISE,
        SCORES.replace(" + bias", "")
        + "\n    "
        + SHIFT
        + "\n"
        + NORMALISE.replace("    return weights @ v", "    return (weights + bias) @ v"),
        "attention",
        hint="the bias added to the probabilities after the softmax instead of to the scores?",
        values=True,
    ),
    Mutant(
        "no_bias",
        SCORES,
        "scores = q @ k.transpose(-2, -1) * scale",
        "attention",
        hint="alibi_attention never adds the bias?",
        values=True,
    ),
    Mutant(
        "softmax_over_queries",
        NORMALISE,
        NORMALISE.replace("dim=-1", "dim=-2"),
        "attention",
        hint="the softmax normalised over the queries (dim=-2) instead of the keys?",
        values=True,
    ),
    Mutant(
        "causal_not_passed_on",
        BIAS,
        "bias = alibi_bias(n_heads, q_len, k_len).to(q)",
        "attention",
        hint="alibi_attention does not pass causal on to alibi_bias (always causal)?",
    ),
    Mutant(
        "zero_scale_means_default",
        SCALE,
        "scale = scale or 1.0 / math.sqrt(q.shape[-1])",
        "attention",
        hint="scale=0.0 taken for the default 1/sqrt(D) (a falsy `scale or ...`)?",
    ),
    Mutant(
        "scale_from_value_width",
        SCALE,
        "scale = 1.0 / math.sqrt(v.shape[-1]) if scale is None else scale",
        "attention",
        hint="the default scale 1/sqrt(Dv), v's width, instead of 1/sqrt(D)?",
    ),
    Mutant(
        "bias_rows_from_the_top",
        BIAS,
        "bias = alibi_bias(n_heads, k_len, k_len, causal=causal)[:, :q_len].to(q)",
        "attention",
        hint="the first Tq rows of the Tk x Tk bias (top-left) instead of the last Tq?",
    ),
    Mutant(
        "scores_in_float32",
        SCORES,
        "scores = (q.float() @ k.float().transpose(-2, -1)).to(q.dtype) * scale + bias",
        "attention",
        hint="q @ k^T computed in float32 even for float64 inputs?",
    ),
    # ---- robustness
    Mutant(
        "scaled_in_place",
        SCORES,
        "scores = q.mul_(scale) @ k.transpose(-2, -1) + bias",
        "robustness",
        hint="q scaled in place (mul_), changing the caller's tensor?",
    ),
    Mutant(
        "view_needs_contiguous",
        SCORES,
        "scores = (q.view(-1, q_len, q.shape[-1]) @ k.view(-1, k_len, k.shape[-1])"
        ".transpose(-2, -1)).view(*q.shape[:-1], k_len) * scale + bias",
        "robustness",
        hint="q and k flattened with .view, which fails on non-contiguous inputs (use reshape)?",
    ),
    Mutant(
        "no_max_subtraction",
        SHIFT,
        "scores = scores",
        "robustness",
        hint="exp of the raw scores, without subtracting the row maximum (overflows)?",
    ),
    Mutant(
        "bias_rounded_to_float32",
        BIAS,
        "bias = alibi_bias(n_heads, q_len, k_len, causal=causal).float()",
        "robustness",
        hint="the bias cast to float32 (.float()) before it is added, even for float64 inputs?",
    ),
    Mutant(
        "no_error_for_more_queries",
        '    if q_len > k_len:\n        raise ValueError(f"q_len ({q_len}) must not exceed '
        'k_len ({k_len})")\n',
        "",
        "robustness",
        hint="no ValueError when q_len > k_len?",
    ),
    Mutant(
        "empty_slopes_for_zero_heads",
        '        raise ValueError(f"n_heads must be at least 1, got {n_heads}")',
        "        return torch.zeros(0, dtype=torch.float64)",
        "robustness",
        hint="alibi_slopes(0) returns an empty tensor instead of raising ValueError?",
    ),
]

VARIANTS = [
    # MPT's gen_slopes: the next power of two's slopes, odd-indexed then even-indexed, the
    # first n of them (equal to the paper's for every n)
    Variant(
        "mpt_gen_slopes",
        "closest = 2 ** math.floor(math.log2(n_heads))\n    slopes = geometric(closest)\n"
        "    if closest < n_heads:\n        " + EXTRA,
        "up = 2 ** math.ceil(math.log2(n_heads))\n    all_slopes = geometric(up)\n"
        "    slopes = (all_slopes[1::2] + all_slopes[0::2])[:n_heads] if up != n_heads "
        "else all_slopes",
    ),
    # BLOOM's closed form (build_alibi_tensor): powers of a base, odd powers of an extra base
    Variant(
        "bloom_closed_form",
        "closest = 2 ** math.floor(math.log2(n_heads))\n    slopes = geometric(closest)\n"
        "    if closest < n_heads:\n        " + EXTRA,
        "closest = 2 ** math.floor(math.log2(n_heads))\n"
        "    base = 2 ** (-(2 ** -(math.log2(closest) - 3)))\n"
        "    slopes = [base**p for p in range(1, closest + 1)]\n"
        "    if closest != n_heads:\n"
        "        extra_base = 2 ** (-(2 ** -(math.log2(2 * closest) - 3)))\n"
        "        slopes += [extra_base**p for p in range(1, 2 * (n_heads - closest), 2)]",
    ),
    # torch.softmax, and the scores by einsum
    Variant(
        "torch_softmax_and_einsum",
        SCORES + "\n    " + SHIFT + "\n" + NORMALISE,
        "scores = torch.einsum('bhqd,bhkd->bhqk', q, k) * scale + bias\n"
        "    return torch.softmax(scores, dim=-1) @ v",
    ),
    # the bias built head by head in a loop, with torch.where for the mask
    Variant(
        "bias_loop_over_heads",
        CAUSAL + "\n" + "    " + BIDIRECTIONAL,
        """        future = distance < 0
        rows = [torch.where(future, float("-inf"), -m * distance) for m in slopes.tolist()]
        return torch.stack(rows)
    return torch.stack([-m * distance.abs() for m in slopes.tolist()])""",
    ),
    # BLOOM's key-position bias inside the causal attention (softmax is shift-invariant per
    # row, so the causal attention is the same); the bidirectional one uses alibi_bias
    Variant(
        "bloom_key_positions_in_causal_attention",
        BIAS,
        """if causal:
        if q_len > k_len:
            raise ValueError("q_len must not exceed k_len")
        keys = torch.arange(k_len, dtype=torch.float64)
        bias = alibi_slopes(n_heads)[:, None, None] * keys[None, None, :]
        future = keys[None, :] > torch.arange(q_len)[:, None] + (k_len - q_len)
        bias = bias.masked_fill(future, float("-inf")).to(q)
    else:
        bias = alibi_bias(n_heads, q_len, k_len, causal=False).to(q)""",
    ),
    # written by someone who had read only the scaffold
    Variant("independent", notebook="variants/independent.ipynb"),
]
