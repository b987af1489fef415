"""The corpus of flash_attention.

Single-bug copies of solutions/flash_attention.ipynb (each must first lose points on its
level, and the card asks its hint when a notebook fails the same way) and correct variants
(each must keep full marks). The table of EXERCISES_NEXT.md §3.8 is here (no_rescale,
rescale_l_only, no_neg_inf_guard, running_max_frozen, lse_without_log, lse_is_the_max,
causal_top_left, remainder_block_dropped, materialises_full_scores), with more classic bugs.
"""

from grader.suite.corpus import Mutant, Variant

MIN_MUTANTS = 15

# the solution's tiled_attention from its allocations to its return (a variant replaces it)
SOLUTION_LOOP = """    out = q.new_empty(*q.shape[:-1], v.shape[-1])
    lse = q.new_empty(q.shape[:-1])
    for i0 in range(0, T, block_q):
        qi = q[..., i0 : i0 + block_q, :] * scale
        rows = torch.arange(i0, i0 + qi.shape[-2], device=q.device)
        m = q.new_full(qi.shape[:-1], float("-inf"))  # running max of each row's scores
        l = q.new_zeros(qi.shape[:-1])  # running sum of exp(score - m)
        acc = q.new_zeros(*qi.shape[:-1], v.shape[-1])  # running sum of exp(score - m) * v
        for j0 in range(0, S, block_k):
            kj, vj = k[..., j0 : j0 + block_k, :], v[..., j0 : j0 + block_k, :]
            s = qi @ kj.transpose(-2, -1)
            if is_causal:
                cols = torch.arange(j0, j0 + kj.shape[-2], device=q.device)
                s = s.masked_fill(cols[None, :] > rows[:, None] + (S - T), float("-inf"))
            if key_padding_mask is not None:
                pad = key_padding_mask[:, None, None, j0 : j0 + block_k]
                s = s.masked_fill(pad, float("-inf"))
            m_new = torch.maximum(m, s.amax(dim=-1))
            # a row that has seen no key yet keeps m = -inf: shift it by 0, not by -inf
            shift = m_new.masked_fill(m_new == float("-inf"), 0.0)
            p = torch.exp(s - shift[..., None])
            alpha = torch.exp(m - shift)
            l = alpha * l + p.sum(dim=-1)
            acc = alpha[..., None] * acc + p @ vj
            m = m_new
        # a row that saw no key has l = 0 and acc = 0: out 0, and lse = -inf + log(0) = -inf
        out[..., i0 : i0 + block_q, :] = acc / l.masked_fill(l == 0, 1.0)[..., None]
        lse[..., i0 : i0 + block_q] = m + torch.log(l)
    return out, lse
"""

# the same loop written around torch.logsumexp: a running log-sum-exp merged tile by tile
# and a normalised output (correct, but not from scratch: it loses that level alone)
LOGSUMEXP_LOOP = """    outs, lses = [], []
    for i0 in range(0, T, block_q):
        qi = q[..., i0 : i0 + block_q, :] * scale
        rows = torch.arange(i0, i0 + qi.shape[-2])
        run = q.new_full(qi.shape[:-1], float("-inf"))  # running log-sum-exp
        acc = q.new_zeros(*qi.shape[:-1], v.shape[-1])  # normalised output so far
        for j0 in range(0, S, block_k):
            kj, vj = k[..., j0 : j0 + block_k, :], v[..., j0 : j0 + block_k, :]
            s = qi @ kj.transpose(-2, -1)
            if is_causal:
                cols = torch.arange(j0, j0 + kj.shape[-2])
                s = s.masked_fill(cols[None, :] > rows[:, None] + (S - T), float("-inf"))
            if key_padding_mask is not None:
                s = s.masked_fill(key_padding_mask[:, None, None, j0 : j0 + block_k], float("-inf"))
            new = torch.logsumexp(torch.stack((run, torch.logsumexp(s, dim=-1))), dim=0)
            safe = new.masked_fill(new == float("-inf"), 0.0)
            acc = acc * torch.exp(run - safe)[..., None] + torch.exp(s - safe[..., None]) @ vj
            run = new
        outs.append(acc)
        lses.append(run)
    return torch.cat(outs, dim=-2), torch.cat(lses, dim=-1)
"""

MUTANTS = [
    # ---- online softmax
    Mutant(
        "online_sum_not_rescaled",
        "run_sum = run_sum * rescale + ",
        "run_sum = run_sum + ",
        "online softmax",
        hint="online softmax: running sum not rescaled by exp(m_old - m_new) when the max grows?",
    ),
    Mutant(
        "online_max_of_the_block_only",
        "new_max = torch.maximum(run_max, chunk.amax(dim=-1))",
        "new_max = chunk.amax(dim=-1)",
        "online softmax",
        hint="online softmax: the max is the current block's, not the running max (overflows)?",
    ),
    Mutant(
        "online_block_not_shifted",
        "torch.exp(chunk - new_max[..., None])",
        "torch.exp(chunk)",
        "online softmax",
        hint="online softmax: exp of the block without subtracting the running max?",
    ),
    Mutant(
        "online_last_entry_dropped",
        "range(0, x.shape[-1], block)",
        "range(0, x.shape[-1] - 1, block)",
        "online softmax",
        hint="online softmax: the loop stops one entry early, so the last block can be missed?",
    ),
    Mutant(
        "online_softmax_shifts_x_in_place",
        "return torch.exp(x - run_max[..., None]) / run_sum[..., None]",
        "return torch.exp(x.sub_(run_max[..., None])) / run_sum[..., None]",
        "online softmax",
        hint="online_softmax subtracts the max from x in place (sub_), changing the caller's x?",
    ),
    # ---- one tile
    Mutant(
        "no_default_scale",
        "scale = 1.0 / math.sqrt(D) if scale is None else scale",
        "scale = 1.0 if scale is None else scale",
        "one tile",
        hint="scores not scaled by 1/sqrt(D) when scale is None?",
        values=True,
    ),
    Mutant(
        "scaled_by_the_value_width",
        "1.0 / math.sqrt(D) if",
        "1.0 / math.sqrt(v.shape[-1]) if",
        "one tile",
        hint="scores scaled by 1/sqrt(Dv), the value width, instead of 1/sqrt(D)?",
        values=True,
    ),
    Mutant(
        "explicit_scale_ignored",
        "scale = 1.0 / math.sqrt(D) if scale is None else scale",
        "scale = 1.0 / math.sqrt(D)",
        "one tile",
        hint="the scale argument ignored: always 1/sqrt(D)?",
    ),
    Mutant(
        "output_always_float32",
        "out = q.new_empty(*q.shape[:-1], v.shape[-1])",
        "out = torch.empty(*q.shape[:-1], v.shape[-1])",
        "one tile",
        hint="out allocated in float32 (torch.empty's default) instead of q's dtype?",
    ),
    Mutant(
        "zero_scale_taken_for_the_default",
        "scale = 1.0 / math.sqrt(D) if scale is None else scale",
        "scale = scale or 1.0 / math.sqrt(D)",
        "one tile",
        hint="scale=0.0 taken for 'no scale given' (scale or 1/sqrt(D)) instead of honoured?",
    ),
    Mutant(
        "q_scaled_in_place",
        "qi = q[..., i0 : i0 + block_q, :] * scale",
        "qi = q[..., i0 : i0 + block_q, :].mul_(scale)",
        "one tile",
        hint="each query tile scaled in place (mul_), changing the caller's q?",
    ),
    Mutant(
        "scores_in_float32",
        "s = qi @ kj.transpose(-2, -1)",
        "s = (qi.float() @ kj.float().transpose(-2, -1)).to(q.dtype)",
        "one tile",
        # every float64 comparison sees it (a few elements off at magnitudes near 1)
        values=True,
        hint="scores computed in float32 (.float()) for float64 inputs, losing float64's "
        "precision?",
    ),
    # ---- many tiles
    Mutant(
        "no_rescale",
        "alpha = torch.exp(m - shift)",
        "alpha = torch.ones_like(m)",
        "many tiles",
        hint="running sum and output never rescaled by exp(m_old - m_new) (alpha = 1)?",
    ),
    Mutant(
        "rescale_l_only",
        "acc = alpha[..., None] * acc + p @ vj",
        "acc = acc + p @ vj",
        "many tiles",
        hint="the running sum is rescaled but the output accumulator is not?",
    ),
    Mutant(
        "sum_of_the_last_key_tile_only",
        "l = alpha * l + p.sum(dim=-1)",
        "l = p.sum(dim=-1)",
        "many tiles",
        hint="the running sum restarts at every key tile instead of accumulating?",
    ),
    Mutant(
        "remainder_block_dropped",
        "for j0 in range(0, S, block_k):",
        "for j0 in range(0, S - S % block_k or S, block_k):",
        "many tiles",
        hint="the last, shorter key tile is dropped when block_k does not divide S?",
    ),
    Mutant(
        "key_tile_sliced_with_block_q",
        "kj, vj = k[..., j0 : j0 + block_k, :], v[..., j0 : j0 + block_k, :]",
        "kj, vj = k[..., j0 : j0 + block_q, :], v[..., j0 : j0 + block_q, :]",
        "many tiles",
        hint="key tiles sliced block_q long while the loop steps by block_k?",
    ),
    Mutant(
        "running_max_never_stored",
        "            m = m_new\n",
        "",
        "many tiles",
        hint="the running max is never updated (m = m_new missing), so each tile restarts?",
        # m stays -inf: lse is wrong even with one tile, out across tiles
        values=True,
    ),
    # ---- log-sum-exp
    Mutant(
        "lse_without_log",
        "lse[..., i0 : i0 + block_q] = m + torch.log(l)",
        "lse[..., i0 : i0 + block_q] = m + l",
        "log-sum-exp",
        hint="lse = m + l, without the log of the running sum?",
    ),
    Mutant(
        "lse_is_the_max",
        "lse[..., i0 : i0 + block_q] = m + torch.log(l)",
        "lse[..., i0 : i0 + block_q] = m",
        "log-sum-exp",
        hint="lse is the running max alone, without + log(l)?",
    ),
    Mutant(
        "lse_of_unscaled_scores",
        "lse[..., i0 : i0 + block_q] = m + torch.log(l)",
        "lse[..., i0 : i0 + block_q] = (m + torch.log(l)) / scale",
        "log-sum-exp",
        hint="lse of the unscaled scores q @ k^T instead of the scaled ones?",
    ),
    # ---- causal
    Mutant(
        "causal_ignored",
        "if is_causal:",
        "if False:",
        "causal",
        hint="is_causal ignored: queries see future keys?",
    ),
    Mutant(
        "causal_top_left",
        "rows[:, None] + (S - T)",
        "rows[:, None]",
        "causal",
        hint="causal mask aligned top-left (j <= i) instead of bottom-right (j <= i + S - T)?",
    ),
    Mutant(
        "causal_masks_the_diagonal",
        "cols[None, :] > rows[:, None]",
        "cols[None, :] >= rows[:, None]",
        "causal",
        hint="causal mask also hides the diagonal: a query does not see its own key?",
    ),
    Mutant(
        "causal_rows_within_the_tile",
        "rows = torch.arange(i0, i0 + qi.shape[-2], device=q.device)",
        "rows = torch.arange(qi.shape[-2], device=q.device)",
        "causal",
        hint="causal mask numbers the queries within their tile, not from the sequence start?",
    ),
    Mutant(
        "causal_keys_within_the_tile",
        "cols = torch.arange(j0, j0 + kj.shape[-2], device=q.device)",
        "cols = torch.arange(kj.shape[-2], device=q.device)",
        "causal",
        hint="causal mask numbers the keys within their tile, not from the sequence start?",
    ),
    # ---- padding
    Mutant(
        "padding_polarity_inverted",
        "s = s.masked_fill(pad, ",
        "s = s.masked_fill(~pad, ",
        "padding",
        hint="key_padding_mask read as True = keep instead of True = padded?",
    ),
    Mutant(
        "padding_on_the_heads_axis",
        "key_padding_mask[:, None, None, j0 : j0 + block_k]",
        "key_padding_mask[None, :, None, j0 : j0 + block_k]",
        "padding",
        hint="key_padding_mask [B, S] broadcast over the batch axis as if it were heads?",
    ),
    Mutant(
        "padded_values_zeroed_in_place",
        '                s = s.masked_fill(pad, float("-inf"))\n',
        '                s = s.masked_fill(pad, float("-inf"))\n'
        "                vj.masked_fill_(pad.transpose(-2, -1), 0.0)\n",
        "padding",
        hint="the values at padded keys zeroed in place (masked_fill_ on a slice of v), "
        "changing the caller's v?",
    ),
    Mutant(
        "no_neg_inf_guard",
        'shift = m_new.masked_fill(m_new == float("-inf"), 0.0)',
        "shift = m_new",
        "padding",
        hint="no guard for a tile a row sees nothing of: exp(-inf - (-inf)) gives NaN?",
    ),
    Mutant(
        "nan_for_queries_that_see_no_key",
        "acc / l.masked_fill(l == 0, 1.0)[..., None]",
        "acc / l[..., None]",
        "padding",
        hint="a query that sees no key divides 0 by 0 (NaN) instead of giving out = 0?",
    ),
    # ---- memory and stability
    Mutant(
        "materialises_full_scores",
        "s = qi @ kj.transpose(-2, -1)",
        "s = (q * scale @ k.transpose(-2, -1))[..., i0 : i0 + block_q, j0 : j0 + block_k]",
        "memory and stability",
        hint="the full T x S score matrix is built, then sliced into tiles?",
    ),
    Mutant(
        "running_max_frozen",
        "m_new = torch.maximum(m, s.amax(dim=-1))",
        "m_new = torch.where(m == float('-inf'), s.amax(dim=-1), m)",
        "memory and stability",
        hint="the max is frozen at the first tile's, so later larger scores overflow exp?",
    ),
    Mutant(
        "queries_flattened_with_view",
        "qi = q[..., i0 : i0 + block_q, :] * scale",
        "qi = q.view(-1, T, D)[:, i0 : i0 + block_q].view(*q.shape[:-2], -1, D) * scale",
        "memory and stability",
        hint="q flattened with .view, which fails on non-contiguous inputs (reshape works)?",
    ),
    # ---- from scratch
    Mutant(
        "builtin_softmax",
        "return torch.exp(x - run_max[..., None]) / run_sum[..., None]",
        "return torch.softmax(x, dim=-1)",
        "from scratch",
        hint="online_softmax returns torch.softmax?",
    ),
    Mutant(
        "builtin_sdpa_for_plain_calls",
        "    return out, lse\n",
        "    if key_padding_mask is None and not is_causal:\n"
        "        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, scale=scale)\n"
        "    return out, lse\n",
        "from scratch",
        hint="out taken from F.scaled_dot_product_attention?",
    ),
    # merging the tiles with torch.logsumexp is correct but not from scratch: it must
    # lose the from-scratch points and no others
    Mutant(
        "tiles_merged_with_logsumexp",
        SOLUTION_LOOP,
        LOGSUMEXP_LOOP,
        "from scratch",
        hint="torch.logsumexp used to merge the key tiles' log-sum-exps?",
    ),
]

VARIANTS = [
    # the scaffold filled in by someone who had read only the scaffold (not this solution)
    Variant("independent", notebook="variants/independent.ipynb"),
    # FlashAttention-1's form: the output kept normalised inside the loop
    Variant(
        "normalised_accumulator",
        "            l = alpha * l + p.sum(dim=-1)\n"
        "            acc = alpha[..., None] * acc + p @ vj\n"
        "            m = m_new\n"
        "        # a row that saw no key has l = 0 and acc = 0: out 0, and lse = -inf + log(0) = -inf\n"
        "        out[..., i0 : i0 + block_q, :] = acc / l.masked_fill(l == 0, 1.0)[..., None]\n",
        "            l_new = alpha * l + p.sum(dim=-1)\n"
        "            safe = l_new.masked_fill(l_new == 0, 1.0)[..., None]\n"
        "            acc = (alpha * l)[..., None] / safe * acc + (p @ vj) / safe\n"
        "            l, m = l_new, m_new\n"
        "        out[..., i0 : i0 + block_q, :] = acc\n",
    ),
    # written apart: outputs gathered per query tile and concatenated, a boolean "allowed"
    # mask, torch.where guards, and a helper of its own named logsumexp
    Variant(
        "concatenated_tiles_own_logsumexp",
        SOLUTION_LOOP,
        """    def logsumexp(top, total):
        return top + torch.log(total)

    outs, lses = [], []
    for i0 in range(0, T, block_q):
        i1 = min(i0 + block_q, T)
        qi = q[:, :, i0:i1] * scale
        top = torch.full(qi.shape[:-1], -math.inf, dtype=q.dtype)
        total = torch.zeros_like(top)
        acc = torch.zeros(*qi.shape[:-1], v.shape[-1], dtype=q.dtype)
        for j0 in range(0, S, block_k):
            j1 = min(j0 + block_k, S)
            s = torch.einsum("bhid,bhjd->bhij", qi, k[:, :, j0:j1])
            allowed = torch.ones(i1 - i0, j1 - j0, dtype=torch.bool)[None, None]
            if is_causal:
                i = torch.arange(i0, i1)[:, None]
                j = torch.arange(j0, j1)[None, :]
                allowed = allowed & (j - i <= S - T)
            if key_padding_mask is not None:
                allowed = allowed & ~key_padding_mask[:, j0:j1][:, None, None, :]
            s = torch.where(allowed, s, torch.tensor(-math.inf, dtype=q.dtype))
            new_top = torch.maximum(top, s.max(dim=-1).values)
            finite = torch.where(torch.isinf(new_top), torch.zeros_like(new_top), new_top)
            p = torch.exp(s - finite[..., None])
            decay = torch.exp(top - finite)
            total = total * decay + p.sum(-1)
            acc = acc * decay[..., None] + torch.einsum("bhij,bhjd->bhid", p, v[:, :, j0:j1])
            top = new_top
        empty = total == 0
        outs.append(torch.where(empty[..., None], torch.zeros_like(acc), acc / torch.where(empty, torch.ones_like(total), total)[..., None]))
        lses.append(logsumexp(top, total))
    return torch.cat(outs, dim=2), torch.cat(lses, dim=2)
""",
    ),
    # a hand-written helper named softmax
    Variant(
        "own_softmax_helper",
        "    return torch.exp(x - run_max[..., None]) / run_sum[..., None]\n",
        "    def softmax(z, top, total):\n"
        "        return torch.exp(z - top[..., None]) / total[..., None]\n\n"
        "    return softmax(x, run_max, run_sum)\n",
    ),
]
