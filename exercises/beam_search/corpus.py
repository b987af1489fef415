"""The corpus of beam_search.

Single-bug copies of the solution (each must first lose points on its level, and the card
asks its hint when a notebook fails the same way) and correct variants (each must keep full
marks).

Mutant(name, old, new, level, hint=..., values=False): `old` is found exactly once in the
solution's code and replaced by `new`.
"""

from grader.suite.corpus import Mutant, Variant

MIN_MUTANTS = 20

CALL = "log_probs = step_fn([tokens for tokens, _ in alive])"
TOTALS = "totals = (sums[:, None] + log_probs).reshape(-1)"
ORDER = "order = torch.sort(totals, descending=True, stable=True).indices"
CHILD = "hypothesis = (alive[beam][0] + [token], totals[index].item())"
WALK = """            if token == eos_id:
                ended.append(hypothesis)
            else:
                kept.append(hypothesis)
                if len(kept) == beam_width:
                    break"""
SCORE = "return total / len(tokens) ** length_penalty"
RANK = "ranked = sorted(finished, key=lambda h: (-score(*h), len(h[0]), h[0]))"
ANSWER = "return [(tokens, score(tokens, total)) for tokens, total in ranked[:n_best]]"

MUTANTS = [
    # api
    Mutant(
        "one_step_too_many",
        "for _ in range(max_new_tokens):",
        "for _ in range(max_new_tokens + 1):",
        "api",
        hint="one step more than max_new_tokens (range(max_new_tokens + 1))?",
        values=True,
    ),
    Mutant(
        "prefix_extended_in_place",
        CHILD,
        "prefix = alive[beam][0]\n"
        "            prefix.append(token)\n"
        "            hypothesis = (prefix, totals[index].item())",
        "api",
        hint="a prefix extended in place (append) after it was passed to step_fn, instead of "
        "built as a new list?",
        values=True,
    ),
    # greedy
    Mutant(
        "sorted_ascending",
        "descending=True",
        "descending=False",
        "greedy",
        hint="candidates sorted smallest sum first (ascending) instead of largest first?",
        values=True,
    ),
    Mutant(
        "live_hypotheses_never_finished",
        "    finished += alive\n",
        "",
        "api",
        hint="hypotheses still live after max_new_tokens steps dropped instead of finished "
        "as they are?",
        values=True,
    ),
    # search
    Mutant(
        "score_is_the_last_log_prob",
        TOTALS,
        "totals = (sums[:, None] * 0 + log_probs).reshape(-1)",
        "search",
        hint="candidates ranked by the last token's log-probability instead of the sum over "
        "the hypothesis?",
        values=True,
    ),
    Mutant(
        "only_the_best_beam_kept",
        "        alive = kept\n",
        "        alive = kept[:1]\n",
        "search",
        hint="only the best live hypothesis carried to the next step (a greedy search)?",
        values=True,
    ),
    Mutant(
        "first_step_from_width_copies",
        "alive = [([], 0.0)]",
        "alive = [([], 0.0)] * beam_width",
        "search",
        hint="the search started from beam_width copies of the empty prefix (duplicate "
        "hypotheses)?",
        values=True,
    ),
    # eos
    Mutant(
        "eos_hypotheses_extended",
        WALK,
        """            if token == eos_id:
                ended.append(hypothesis)
            kept.append(hypothesis)
            if len(kept) == beam_width:
                break""",
        "eos",
        hint="a hypothesis ending in EOS kept live and extended instead of finished?",
    ),
    Mutant(
        "eos_candidates_dropped",
        "        finished += ended\n",
        "",
        "greedy",
        hint="hypotheses that end in EOS dropped (only the live ones returned)?",
        values=True,
    ),
    Mutant(
        "eos_hard_coded_as_zero",
        "if token == eos_id:",
        "if token == 0:",
        "api",
        hint="EOS taken to be token 0 instead of eos_id?",
        values=True,
    ),
    Mutant(
        "walk_counts_eos_in_the_beam",
        "if len(kept) == beam_width:",
        "if len(kept) + len(ended) >= beam_width:",
        "n-best",
        hint="EOS candidates counted against beam_width, so fewer hypotheses stay live?",
    ),
    # length penalty
    Mutant(
        "gnmt_penalty",
        SCORE,
        "return total / ((5 + len(tokens)) / 6) ** length_penalty",
        "length penalty",
        hint="GNMT's ((5 + L) / 6) ** length_penalty instead of L ** length_penalty?",
    ),
    Mutant(
        "penalty_multiplies",
        SCORE,
        "return total * len(tokens) ** length_penalty",
        "length penalty",
        hint="the sum multiplied by L ** length_penalty instead of divided?",
    ),
    Mutant(
        "eos_not_counted_in_the_length",
        SCORE,
        "return total / max(len(tokens) - (tokens[-1] == eos_id), 1) ** length_penalty",
        "length penalty",
        hint="L counted without the EOS token?",
    ),
    Mutant(
        "zero_penalty_taken_for_the_default",
        "    def score(tokens, total):\n",
        "    length_penalty = length_penalty or 1.0\n\n    def score(tokens, total):\n",
        "length penalty",
        hint="length_penalty = 0.0 taken for 'not given' (length_penalty or 1.0)?",
    ),
    Mutant(
        "raw_sums_returned",
        ANSWER,
        "return [(tokens, total) for tokens, total in ranked[:n_best]]",
        "length penalty",
        hint="the raw sum returned as the score instead of sum / L ** length_penalty?",
    ),
    Mutant(
        "ranked_by_raw_sums",
        RANK,
        "ranked = sorted(finished, key=lambda h: (-h[1], len(h[0]), h[0]))",
        "length penalty",
        hint="the answer ranked by the raw sums, the length penalty applied to the scores only?",
    ),
    # n-best
    Mutant(
        "n_best_ignored",
        "ranked[:n_best]",
        "ranked[:1]",
        "n-best",
        hint="only the best hypothesis returned, whatever n_best?",
    ),
    Mutant(
        "n_best_capped_at_beam_width",
        "ranked[:n_best]",
        "ranked[: min(n_best, beam_width)]",
        "n-best",
        hint="at most beam_width hypotheses returned when n_best is larger?",
    ),
    Mutant(
        "eos_limited_to_the_top_of_the_order",
        "                ended.append(hypothesis)\n",
        "                if len(kept) + len(ended) < beam_width:\n"
        "                    ended.append(hypothesis)\n",
        "n-best",
        hint="an EOS candidate finished only when ranked among the first beam_width "
        "(Hugging Face's rule), not whenever fewer than beam_width are live?",
    ),
    # edge cases
    Mutant(
        "ties_in_topk_order",
        ORDER,
        "order = torch.topk(totals, totals.numel()).indices",
        "edge cases",
        hint="candidates ordered by torch.topk, whose order among equal sums is not the "
        "earlier parent, then the lower token id?",
    ),
    Mutant(
        "final_ties_longer_first",
        RANK,
        "ranked = sorted(finished, key=lambda h: (-score(*h), -len(h[0]), h[0]))",
        "n-best",
        hint="equal scores ranked longer hypothesis first instead of shorter?",
    ),
    Mutant(
        "final_ties_by_tokens_alone",
        RANK,
        "ranked = sorted(finished, key=lambda h: (-score(*h), h[0]))",
        "n-best",
        hint="equal scores ranked by the token lists alone, not the shorter hypothesis first?",
    ),
    Mutant(
        "final_ties_in_finishing_order",
        RANK,
        "ranked = sorted(finished, key=lambda h: (-score(*h), len(h[0])))",
        "n-best",
        hint="equal scores of equal length left in the order they finished instead of "
        "lexicographic order?",
    ),
    Mutant(
        "log_probs_in_float32",
        CALL,
        CALL + ".float()",
        "edge cases",
        hint="log-probabilities rounded to float32 (.float()), so sums 1e-12 apart tie?",
    ),
    Mutant(
        "flattened_with_view",
        TOTALS,
        "totals = (sums[:, None] + log_probs).view(-1)",
        "edge cases",
        hint="candidates flattened with .view(-1), which fails on a non-contiguous "
        "step_fn answer (reshape works)?",
    ),
    Mutant(
        "step_fn_answers_cached",
        CALL,
        'cache = beam_search.__dict__.setdefault("cache", {})\n'
        "        for tokens, _ in alive:\n"
        "            if tuple(tokens) not in cache:\n"
        "                cache[tuple(tokens)] = step_fn([tokens])[0]\n"
        "        log_probs = torch.stack([cache[tuple(tokens)] for tokens, _ in alive])",
        "api",
        hint="step_fn's answers cached by prefix across calls, so a second model gets the "
        "first one's log-probabilities?",
        values=True,
    ),
    # from scratch
    Mutant(
        "ties_jittered_with_random_numbers",
        TOTALS,
        TOTALS + "\n        totals = totals + 1e-300 * torch.rand_like(totals)",
        "from scratch",
        hint="random numbers drawn (torch.rand_like) to jitter ties in a deterministic search?",
    ),
]

# the whole solution, for a variant that rewrites it
BODY = (
    "    alive = [([], 0.0)]  # (tokens, sum of log-probs), in the order they were kept\n"
    "    finished = []\n"
    "    for _ in range(max_new_tokens):\n"
    "        if not alive:\n"
    "            break\n"
    "        log_probs = step_fn([tokens for tokens, _ in alive])\n"
    "        vocab = log_probs.shape[-1]\n"
    "        sums = torch.tensor([total for _, total in alive], dtype=torch.float64)\n"
    "        totals = (sums[:, None] + log_probs).reshape(-1)\n"
    "        # largest first; the stable sort keeps ties in (parent, token) order\n"
    "        order = torch.sort(totals, descending=True, stable=True).indices\n"
    "        kept, ended = [], []\n"
    "        for index in order.tolist():\n"
    "            beam, token = divmod(index, vocab)\n"
    "            hypothesis = (alive[beam][0] + [token], totals[index].item())\n"
    "            if token == eos_id:\n"
    "                ended.append(hypothesis)\n"
    "            else:\n"
    "                kept.append(hypothesis)\n"
    "                if len(kept) == beam_width:\n"
    "                    break\n"
    "        finished += ended\n"
    "        alive = kept\n"
    "    finished += alive\n"
    "\n"
    "    def score(tokens, total):\n"
    "        return total / len(tokens) ** length_penalty\n"
    "\n"
    "    ranked = sorted(finished, key=lambda h: (-score(*h), len(h[0]), h[0]))\n"
    "    return [(tokens, score(tokens, total)) for tokens, total in ranked[:n_best]]\n"
)
PURE_PYTHON = """    beams = [((), 0.0)]
    pool = []
    for _step in range(max_new_tokens):
        if not beams:
            break
        rows = step_fn([list(seq) for seq, _ in beams]).tolist()
        candidates = sorted(
            (
                (total + lp, b, tok)
                for b, ((_, total), row) in enumerate(zip(beams, rows))
                for tok, lp in enumerate(row)
            ),
            key=lambda c: (-c[0], c[1], c[2]),
        )
        survivors = []
        for total, b, tok in candidates:
            seq = beams[b][0] + (tok,)
            if tok == eos_id:
                pool.append((seq, total))
                continue
            survivors.append((seq, total))
            if len(survivors) == beam_width:
                break
        beams = survivors
    pool.extend(beams)
    scored = [(list(seq), total / len(seq) ** length_penalty) for seq, total in pool]
    scored.sort(key=lambda h: (-h[1], len(h[0]), h[0]))
    return scored[:n_best]
"""


VARIANTS = [
    Variant("pure_python_tuples", BODY, PURE_PYTHON),
    Variant(
        "candidates_sorted_in_python",
        ORDER,
        "order = torch.tensor(sorted(range(totals.numel()), key=lambda i: (-totals[i].item(), i)))",
    ),
    Variant(
        "flattened_with_flatten",
        TOTALS,
        "totals = (log_probs + sums.unsqueeze(1)).flatten()",
    ),
    Variant(
        "ranked_by_three_stable_sorts",
        RANK,
        "ranked = sorted(finished, key=lambda h: h[0])\n"
        "    ranked = sorted(ranked, key=lambda h: len(h[0]))\n"
        "    ranked = sorted(ranked, key=lambda h: score(*h), reverse=True)",
    ),
    Variant(
        "penalty_with_math_pow",
        SCORE,
        "return total / math.pow(len(tokens), length_penalty)",
    ),
    # written by someone who had read only the scaffold
    Variant("independent", notebook="variants/independent.ipynb"),
]
