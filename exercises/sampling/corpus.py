"""The corpus of sampling.

Single-bug copies of the solution (each must first lose points on its level, and the card
asks its hint when a notebook fails the same way) and correct variants (each must keep full
marks).

Mutant(name, old, new, level, hint=...): `old` is found exactly once in the solution's code
and replaced by `new`.
"""

from grader.suite.corpus import Mutant, Variant

MIN_MUTANTS = 15

SCALE = "scores = logits / temperature"
K = "k = min(max(top_k, min_tokens_to_keep), vocab)"
KTH = "kth = torch.topk(scores, k, dim=-1).values[..., -1:]"
TOP_K_MASK = 'scores = scores.masked_fill(scores < kth, float("-inf"))'
PROBS = "probs = torch.softmax(scores, dim=-1)"
SIZE = "size = (mass < top_p).sum(dim=-1, keepdim=True) + 1"
TOP_P_MASK = 'scores = scores.masked_fill(probs < smallest, float("-inf"))'
GREEDY = "return logits.argmax(dim=-1)"
GREEDY_BRANCH = "if temperature == 0:\n        " + GREEDY
DRAW = "return (scores + gumbel).argmax(dim=-1)"

MUTANTS = [
    # temperature
    Mutant(
        "temperature_multiplies",
        SCALE,
        "scores = logits * temperature",
        "temperature",
        hint="logits multiplied by the temperature instead of divided?",
    ),
    Mutant(
        "zero_temperature_accepted",
        "if temperature <= 0:",
        "if temperature < 0:",
        "temperature",
        hint="temperature 0 accepted by filter_logits (a division by zero) instead of a "
        "ValueError?",
    ),
    Mutant(
        "scales_the_input_in_place",
        SCALE,
        "scores = logits.div_(temperature)",
        "temperature",
        hint="the caller's logits divided in place (div_, /=) instead of a new tensor?",
    ),
    # top-k
    Mutant(
        "top_k_drops_ties",
        TOP_K_MASK,
        "top = torch.topk(scores, k, dim=-1).indices\n"
        '        scores = torch.full_like(scores, float("-inf")).scatter(\n'
        "            -1, top, scores.gather(-1, top)\n"
        "        )",
        "top-k",
        hint="top-k keeps exactly k indices, dropping tokens tied with the k-th score?",
    ),
    Mutant(
        "top_k_removes_the_kth",
        "scores < kth",
        "scores <= kth",
        "top-k",
        hint="top-k removes scores <= the k-th largest, so the k-th itself goes?",
    ),
    Mutant(
        "top_k_keeps_one_extra",
        K,
        "k = min(max(top_k, min_tokens_to_keep) + 1, vocab)",
        "top-k",
        hint="top-k threshold taken at the (k+1)-th largest score, one token too many?",
    ),
    Mutant(
        "top_k_not_capped_at_vocab",
        K,
        "k = max(top_k, min_tokens_to_keep)",
        "top-k",
        hint="top_k larger than the vocabulary passed to topk unclamped (k > V)?",
    ),
    Mutant(
        "top_k_masks_the_input_in_place",
        f"{SCALE}\n    vocab = scores.shape[-1]\n    if top_k is not None:\n        {K}\n"
        f"        {KTH}\n        {TOP_K_MASK}",
        "scores = logits if temperature == 1.0 else logits / temperature\n"
        f"    vocab = scores.shape[-1]\n    if top_k is not None:\n        {K}\n"
        f"        {KTH}\n"
        '        scores = scores.masked_fill_(scores < kth, float("-inf"))',
        "top-k",
        hint="top-k masks in place (masked_fill_) a tensor that is the caller's logits when "
        "temperature is 1?",
    ),
    # top-p
    Mutant(
        "top_p_drops_the_crossing_token",
        SIZE,
        "size = (mass <= top_p).sum(dim=-1, keepdim=True)",
        "top-p",
        hint="top-p keeps only tokens whose cumulative mass is <= p, dropping the one that "
        "crosses p?",
    ),
    Mutant(
        "top_p_needs_mass_above_p",
        "(mass < top_p)",
        "(mass <= top_p)",
        "top-p",
        hint="top-p keeps going until the mass is > p, when a prefix with mass exactly p "
        "is enough?",
    ),
    Mutant(
        "top_p_cumsum_in_vocabulary_order",
        "mass = ranked.cumsum(dim=-1)",
        "mass = probs.cumsum(dim=-1)",
        "top-p",
        hint="cumulative mass summed in vocabulary order instead of over sorted probabilities?",
    ),
    Mutant(
        "top_p_keeps_the_tail",
        "descending=True",
        "descending=False",
        "top-p",
        hint="probabilities sorted ascending, so the nucleus is counted from the least "
        "probable tokens?",
    ),
    Mutant(
        "top_p_one_still_filters",
        "if top_p is not None and top_p < 1.0:",
        "if top_p is not None:",
        "top-p",
        hint="top_p = 1.0 still filters (a float32 mass reaching 1 early drops the tail) "
        "instead of turning top-p off?",
    ),
    Mutant(
        "top_p_drops_ties",
        TOP_P_MASK,
        "order = torch.sort(probs, dim=-1, descending=True, stable=True).indices\n"
        "        ranks = torch.empty_like(order).scatter(\n"
        "            -1, order, torch.arange(vocab).expand(order.shape).contiguous()\n"
        "        )\n"
        '        scores = scores.masked_fill(ranks >= size, float("-inf"))',
        "top-p",
        hint="top-p keeps exactly the prefix's tokens, dropping tokens tied with its last one?",
    ),
    # composition
    Mutant(
        "top_p_on_raw_logits",
        PROBS,
        "probs = torch.softmax(logits, dim=-1)",
        "composition",
        hint="top-p probabilities from the raw logits, before temperature and top-k?",
    ),
    Mutant(
        "top_p_ignores_top_k",
        PROBS,
        "probs = torch.softmax(logits / temperature, dim=-1)",
        "composition",
        hint="top-p probabilities not renormalised over the tokens top-k kept (top-p "
        "applied before top-k)?",
    ),
    # batched
    Mutant(
        "top_k_threshold_over_the_batch",
        KTH,
        "kth = torch.topk(scores.flatten(), k).values[-1]",
        "batched",
        hint="top-k threshold taken over the whole batch instead of per row?",
    ),
    Mutant(
        "top_k_threshold_without_keepdim",
        KTH,
        "kth = torch.topk(scores, k, dim=-1).values[..., -1]",
        "batched",
        hint="k-th largest score taken without keepdim, so it does not broadcast per row?",
    ),
    Mutant(
        "top_p_sorted_over_the_batch",
        "torch.sort(probs, dim=-1,",
        "torch.sort(probs, dim=0,",
        "batched",
        hint="top-p probabilities sorted along the batch axis (dim=0) instead of the vocabulary?",
    ),
    Mutant(
        "rows_flattened_with_view",
        KTH,
        "kth = torch.topk(scores.view(-1, vocab), k, dim=-1).values[:, -1:]"
        ".view(*scores.shape[:-1], 1)",
        "batched",
        hint="rows flattened with .view(-1, V), which fails on non-contiguous logits "
        "(reshape works)?",
    ),
    # sampler
    Mutant(
        "sample_ignores_temperature",
        "temperature=temperature,",
        "temperature=1.0,",
        "sampler",
        hint="sample filters at temperature 1, ignoring its temperature argument?",
    ),
    Mutant(
        "greedy_adds_noise",
        GREEDY,
        "return (logits + gumbel).argmax(dim=-1)",
        "sampler",
        hint="temperature 0 still adds the Gumbel noise instead of taking argmax(logits)?",
    ),
    Mutant(
        "gumbel_added_to_probabilities",
        DRAW,
        "return (torch.softmax(scores, dim=-1) + gumbel).argmax(dim=-1)",
        "sampler",
        hint="Gumbel noise added to probabilities instead of to the (log-space) scores?",
    ),
    Mutant(
        "ids_keep_the_last_axis",
        DRAW,
        "return (scores + gumbel).argmax(dim=-1, keepdim=True)",
        "sampler",
        hint="sampled ids keep a trailing axis of size 1 (keepdim, as multinomial returns)?",
    ),
    Mutant(
        "argmax_over_the_batch",
        DRAW,
        "return (scores + gumbel).argmax(dim=0)",
        "sampler",
        hint="sampled ids taken by argmax over the batch axis (dim=0) instead of the vocabulary?",
    ),
    Mutant(
        "zero_temperature_taken_for_the_default",
        GREEDY_BRANCH,
        "temperature = temperature or 1.0\n    " + GREEDY_BRANCH,
        "sampler",
        hint="sample's temperature=0 taken for 'no temperature given' (temperature or 1.0) "
        "instead of greedy?",
    ),
    Mutant(
        "noise_added_in_place",
        DRAW,
        "return gumbel.add_(scores).argmax(dim=-1)",
        "sampler",
        hint="the scores added into the caller's gumbel in place (add_)?",
    ),
    # edge cases
    Mutant(
        "top_k_ignores_min_tokens",
        K,
        "k = min(top_k, vocab)",
        "edge cases",
        hint="min_tokens_to_keep not applied to top-k?",
    ),
    Mutant(
        "top_p_ignores_min_tokens",
        "size.clamp(min=min_tokens_to_keep, max=vocab)",
        "size.clamp(min=1, max=vocab)",
        "edge cases",
        hint="min_tokens_to_keep not applied to top-p?",
    ),
    Mutant(
        "top_p_unstable_softmax",
        PROBS,
        "probs = scores.exp() / scores.exp().sum(dim=-1, keepdim=True)",
        "edge cases",
        hint="softmax for top-p without subtracting the row maximum (NaN for large logits)?",
    ),
    Mutant(
        "scores_always_float32",
        SCALE,
        "scores = logits.float() / temperature",
        "edge cases",
        hint="scores cast to float32, so float16 and float64 logits come back as float32?",
    ),
    # from scratch
    Mutant(
        "greedy_via_multinomial",
        GREEDY,
        "one_hot = torch.nn.functional.one_hot(logits.argmax(dim=-1), logits.shape[-1])\n"
        "        flat = one_hot.reshape(-1, logits.shape[-1]).float()\n"
        "        return torch.multinomial(flat, 1).reshape(logits.shape[:-1])",
        "from scratch",
        hint="torch.multinomial used (here on a one-hot distribution for greedy decoding)?",
    ),
    Mutant(
        "float64_scaled_in_float32",
        SCALE,
        "scores = (logits.float() / temperature).to(logits.dtype)",
        "edge cases",
        hint="float64 logits scaled in float32 (.float()), so logits closer than float32 "
        "can tell apart become ties?",
    ),
    Mutant(
        "top_p_probs_via_categorical",
        PROBS,
        "probs = torch.distributions.Categorical(logits=scores).probs",
        "from scratch",
        hint="torch.distributions.Categorical used to get the probabilities?",
    ),
]

VARIANTS = [
    # the scaffold filled in by someone who had read only the scaffold (not this solution)
    Variant("independent", notebook="variants/independent.ipynb"),
    Variant(
        "top_k_by_sorting",
        KTH,
        "kth = torch.sort(scores, dim=-1, descending=True).values[..., k - 1 : k]",
    ),
    Variant(
        "top_p_counts_the_mass_before_each_token",
        SIZE,
        "size = ((mass - ranked) < top_p).sum(dim=-1, keepdim=True)",
    ),
    Variant(
        "hand_written_softmax",
        PROBS,
        "e = (scores - scores.amax(dim=-1, keepdim=True)).exp()\n"
        "        probs = e / e.sum(dim=-1, keepdim=True)",
    ),
    # a helper of the notebook's own named like torch's sampler is not the built-in
    Variant(
        "own_helper_named_multinomial",
        DRAW,
        "def multinomial(s, g):\n"
        "        return (s + g).argmax(dim=-1)\n\n"
        "    return multinomial(scores, gumbel)",
    ),
]
