"""The corpus of kv_cache.

Single-bug copies of the solution (each must first lose points on its level, and the card
asks its hint when a notebook fails the same way) and correct variants (each must keep full
marks).

Mutant(name, old, new, level, hint=..., values=False): `old` is found exactly once in the
solution's code and replaced by `new`. `values=True` marks a bug in what every forward
computes (the scale, the softmax axis, the head mapping, the causal mask itself): it may lose
points at every level. Every other mutant is about one feature (the cache's mechanics, one
kind of call through the cache, reuse, an edge case) and should lose points at its own level
and few others (`grade hints` measures it).
"""

from grader.suite.corpus import Mutant, Variant

MIN_MUTANTS = 15

UPDATE = (
    "        if cache is not None:\n            k, v = cache.update(k, v)\n"
    "            k, v = k.to(q.dtype), v.to(q.dtype)  # the cache may hold another dtype\n"
)
ROPE_K = "        k = apply_rope(k, positions, self.theta)\n"
REPEAT = "        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)\n"
MASK = "        mask = causal_mask(Tn, S, device=x.device)\n"
MASKED = '        scores = scores.masked_fill(~mask, float("-inf"))\n'
ATTEND = (
    "        scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)\n"
    + MASK
    + MASKED
    + "        out = torch.softmax(scores, dim=-1) @ v\n"
)

# KVCache from __init__'s first line to update's return (for the concatenating variant)
CACHE_BODY = """        self.max_len = max_len
        self.k = torch.zeros(batch, n_kv_heads, max_len, head_dim, dtype=dtype)
        self.v = torch.zeros_like(self.k)
        self._length: int = 0
        # END SOLUTION

    def update(self, k_new: torch.Tensor, v_new: torch.Tensor):
        \"\"\"Append k_new, v_new [B, Hkv, Tn, D]; return (k, v) [B, Hkv, length, D]: all
        the keys and values cached so far, the new ones last.\"\"\"
        # BEGIN SOLUTION implement KVCache.update
        start, end = self._length, self._length + k_new.shape[2]
        if end > self.max_len:
            raise ValueError(f"KVCache overflow: {end} tokens, max_len {self.max_len}")
        self.k[:, :, start:end] = k_new
        self.v[:, :, start:end] = v_new
        self._length = end
        return self.k[:, :, :end], self.v[:, :, :end]"""

MUTANTS = [
    # (b) an input written in place under one setting only: with no grouping, k is a view of
    # the cache's own rows, which the in-place scale rescales at every call
    Mutant(
        "keys_scaled_in_place_in_the_cache",
        "k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)\n"
        "        scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)",
        "if group > 1:\n"
        "            k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)\n"
        "        scores = q @ k.mul_(1 / math.sqrt(self.head_dim)).transpose(-2, -1)",
        "prefill and chunks",
        hint="keys scaled in place (k.mul_), which with n_kv_heads = n_heads rescales the "
        "cache's own rows at every call?",
    ),
    # cache mechanics
    Mutant(
        "update_returns_only_new",
        "return self.k[:, :, :end], self.v[:, :, :end]",
        "return k_new, v_new",
        "cache mechanics",
        hint="update returns only the new keys and values, not everything cached?",
    ),
    Mutant(
        "length_counts_calls",
        "        self._length = end\n",
        "        self._length += 1\n",
        "cache mechanics",
        hint="length counts update calls instead of tokens?",
    ),
    Mutant(
        "reset_keeps_length",
        "        self._length = 0\n",
        "        self.k.zero_()\n        self.v.zero_()\n",
        "cache mechanics",
        hint="reset() clears the stored tensors but leaves length where it was?",
    ),
    Mutant(
        "overflow_off_by_one",
        "if end > self.max_len:",
        "if end >= self.max_len:",
        "cache mechanics",
        hint="the overflow test is off by one: filling the cache exactly to max_len raises?",
    ),
    Mutant(
        "no_overflow_check",
        "if end > self.max_len:",
        "if False:",
        "cache mechanics",
        hint="no ValueError when an update would go past max_len?",
    ),
    Mutant(
        "dtype_ignored",
        "max_len, head_dim, dtype=dtype)",
        "max_len, head_dim)",
        "cache mechanics",
        hint="the cache's buffers ignore its dtype (float64 keys stored as float32)?",
    ),
    # causal mask
    Mutant(
        "top_left_mask",
        ".tril(diagonal=s - t)",
        ".tril(diagonal=0)",
        "causal mask",
        hint="mask aligned top-left (tril(0), as SDPA's is_causal) instead of bottom-right?",
    ),
    Mutant(
        "mask_excludes_the_diagonal",
        ".tril(diagonal=s - t)",
        ".tril(diagonal=s - t - 1)",
        "causal mask",
        hint="each query is blocked from its own key (the diagonal is excluded)?",
        values=True,
    ),
    Mutant(
        "mask_means_blocked",
        "    return torch.ones(t, s, dtype=torch.bool, device=device)",
        "    return ~torch.ones(t, s, dtype=torch.bool, device=device)",
        "causal mask",
        hint="causal_mask returns True for blocked keys instead of allowed ones?",
        values=True,
    ),
    # the full forward
    Mutant(
        "scale_by_d_model",
        "math.sqrt(self.head_dim)",
        "math.sqrt(self.n_heads * self.head_dim)",
        "full forward",
        hint="scores scaled by 1/sqrt(d_model) instead of 1/sqrt(head_dim)?",
        values=True,
    ),
    Mutant(
        "kv_heads_tiled_not_interleaved",
        REPEAT,
        "        k, v = k.repeat(1, group, 1, 1), v.repeat(1, group, 1, 1)\n",
        "full forward",
        hint="key/value heads tiled with .repeat (head h reads h % Hkv) instead of "
        "repeat_interleave (h // group)?",
        values=True,
    ),
    Mutant(
        "softmax_over_queries",
        "torch.softmax(scores, dim=-1)",
        "torch.softmax(scores, dim=-2)",
        "full forward",
        hint="softmax over the query axis (dim=-2) instead of the keys?",
        values=True,
    ),
    Mutant(
        "no_mask",
        MASKED,
        "",
        "full forward",
        hint="the causal mask is never applied to the scores?",
        values=True,
    ),
    # decode, one token at a time
    Mutant(
        "positions_from_zero",
        "start = 0 if cache is None else cache.length",
        "start = 0",
        "decode",
        hint="every call puts its tokens at positions 0.. instead of after the cached ones?",
    ),
    Mutant(
        "keys_rotated_again_on_read",
        UPDATE,
        UPDATE + "            k = apply_rope(k, torch.arange(k.shape[2]), self.theta)\n",
        "decode",
        hint="the cached keys are rotated a second time when they are read back?",
    ),
    Mutant(
        "cache_never_used",
        UPDATE,
        "        if False:\n            k, v = cache.update(k, v)\n",
        "decode",
        hint="forward never reads or extends the cache: each call attends only to itself?",
    ),
    Mutant(
        "mask_first_rows_of_square",
        MASK,
        "        mask = causal_mask(S, S, device=x.device)[:Tn]\n",
        "decode",
        hint="mask = the first Tn rows of the S x S causal mask (top-left) instead of the last Tn?",
    ),
    Mutant(
        "cache_stores_repeated_heads",
        UPDATE
        + "        S = k.shape[2]\n        group = self.n_heads // self.n_kv_heads\n"
        + REPEAT,
        "        group = self.n_heads // self.n_kv_heads\n"
        + REPEAT
        + UPDATE
        + "        S = k.shape[2]\n",
        "decode",
        hint="keys and values repeated to the query heads before they go into the cache?",
    ),
    # several tokens per call: a prompt, then chunks after cached tokens
    Mutant(
        "no_mask_with_a_cache",
        MASKED,
        "        if cache is None:\n    " + MASKED,
        "prefill and chunks",
        hint="the causal mask is applied only without a cache, so a prompt sees its future?",
    ),
    Mutant(
        "prompt_not_cached",
        "        if cache is not None:\n",
        "        if cache is not None and Tn == 1:\n",
        "prefill and chunks",
        hint="a chunk of several tokens (the prompt) is never written to the cache?",
    ),
    Mutant(
        "mask_only_on_the_first_chunk",
        MASK,
        "        mask = causal_mask(Tn, S, device=x.device) if start == 0 else "
        "torch.ones(Tn, S, dtype=torch.bool)\n",
        "prefill and chunks",
        hint="the mask is dropped once the cache holds tokens, so a later chunk sees its future?",
    ),
    Mutant(
        "chunk_positions_restart",
        "start = 0 if cache is None else cache.length",
        "start = 0 if cache is None or Tn > 1 else cache.length",
        "prefill and chunks",
        hint="a chunk of several tokens is taken for the prompt: its positions restart at 0?",
    ),
    Mutant(
        "unrotated_keys_cached",
        ROPE_K + UPDATE,
        UPDATE + "        k = apply_rope(k, torch.arange(k.shape[2]), self.theta)\n",
        "prefill and chunks",
        hint="keys cached before RoPE and rotated on every read, not rotated before caching?",
    ),
    Mutant(
        "cache_always_float64",
        "max_len, head_dim, dtype=dtype)",
        "max_len, head_dim, dtype=torch.float64)",
        "cache mechanics",
        hint="the cache's buffers are always float64, whatever its dtype?",
    ),
    # reuse across calls
    Mutant(
        "module_counts_positions",
        "start = 0 if cache is None else cache.length",
        'start = 0 if cache is None else getattr(self, "_next", 0)\n'
        "        if cache is not None:\n            self._next = start + Tn",
        "reuse across calls",
        hint="the module counts positions itself instead of reading cache.length, so a reset "
        "or a second cache goes on from the old count?",
    ),
    # edge cases
    Mutant(
        "scores_in_float32",
        "scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)",
        "scores = (q.float() @ k.float().transpose(-2, -1)).to(q.dtype) / math.sqrt(self.head_dim)",
        "edge cases",
        hint="scores computed in float32 (q.float() @ k.float()) for a float64 module?",
    ),
    Mutant(
        "x_flattened_with_view",
        "q = self.q_proj(x).view(",
        "q = self.q_proj(x.view(B * Tn, -1)).view(",
        "edge cases",
        hint="x flattened with .view, which fails on a non-contiguous x (use reshape)?",
    ),
    Mutant(
        "update_clears_the_callers_rows",
        "        self.v[:, :, start:end] = v_new\n",
        "        self.v[:, :, start:end] = v_new\n        k_new.zero_()\n        v_new.zero_()\n",
        "edge cases",
        hint="update zeroes the caller's k_new and v_new in place after copying them?",
    ),
    # from scratch
    Mutant(
        "sdpa",
        ATTEND,
        MASK + "        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, "
        "attn_mask=mask)\n",
        "from scratch",
        hint="attention computed with F.scaled_dot_product_attention?",
    ),
]

VARIANTS = [
    # the scaffold filled in by someone who had read only the scaffold (not this solution)
    Variant("independent", notebook="variants/independent.ipynb"),
    Variant(
        "concatenating_cache",
        CACHE_BODY,
        "        self.max_len = max_len\n"
        "        self.empty = torch.zeros(batch, n_kv_heads, 0, head_dim, dtype=dtype)\n"
        "        self.k = self.v = self.empty\n"
        "        self._length: int = 0\n"
        "        # END SOLUTION\n\n"
        "    def update(self, k_new: torch.Tensor, v_new: torch.Tensor):\n"
        "        # BEGIN SOLUTION implement KVCache.update\n"
        "        if self._length + k_new.shape[2] > self.max_len:\n"
        "            raise ValueError('the cache is full')\n"
        "        old = slice(0, self._length)  # reset() only sets the length to 0\n"
        "        self.k = torch.cat([self.k[:, :, old], k_new.to(self.empty.dtype)], dim=2)\n"
        "        self.v = torch.cat([self.v[:, :, old], v_new.to(self.empty.dtype)], dim=2)\n"
        "        self._length = self.k.shape[2]\n"
        "        return self.k, self.v",
    ),
    Variant(
        "mask_from_positions",
        "    return torch.ones(t, s, dtype=torch.bool, device=device).tril(diagonal=s - t)",
        "    query_pos = torch.arange(s - t, s, device=device)[:, None]\n"
        "    return torch.arange(s, device=device)[None, :] <= query_pos",
    ),
    Variant(
        "own_sdpa_helper",
        ATTEND,
        "        def scaled_dot_product_attention(q, k, v, allow):\n"
        "            scores = torch.einsum('bhtd,bhsd->bhts', q, k) / math.sqrt(q.shape[-1])\n"
        "            weights = scores.masked_fill(~allow, float('-inf')).softmax(dim=-1)\n"
        "            return torch.einsum('bhts,bhsd->bhtd', weights, v)\n\n"
        + MASK
        + "        out = scaled_dot_product_attention(q, k, v, mask)\n",
    ),
    Variant(
        "llama_style_mask",
        MASK + MASKED,
        "        blocked = torch.full((Tn, Tn), float('-inf'), dtype=q.dtype).triu(1)\n"
        "        scores = scores + torch.hstack([torch.zeros(Tn, S - Tn, dtype=q.dtype), "
        "blocked])\n",
    ),
]
