"""The corpus of speculative_decoding.

Single-bug copies of the solution (each must first lose points on its level, and the card
asks its hint when a notebook fails the same way) and correct variants (each must keep full
marks).

Mutant(name, old, new, level, hint=..., values=False): `old` is found exactly once in the
solution's code and replaced by `new`.
"""

from grader.suite.corpus import Mutant, Variant

MIN_MUTANTS = 20

ACCEPT = "if uniforms[i] < p[i, x] / q[i, x]:"
RESIDUAL = "residual = (p[i] - q[i]).clamp(min=0)"
RESAMPLE = "tokens.append(int((residual.log() + gumbel[i]).argmax()))"
STOP = "return torch.tensor(tokens, dtype=torch.int64), i"
BONUS = "tokens.append(int((p[k].log() + gumbel[k]).argmax()))"

MUTANTS = [
    # api
    Mutant(
        "no_bonus_token",
        f"    {BONUS}\n",
        "",
        "api",
        hint="no bonus token when every draft is accepted (n tokens instead of n + 1)?",
    ),
    # accept rule
    Mutant(
        "ratio_inverted",
        ACCEPT,
        "if uniforms[i] < q[i, x] / p[i, x]:",
        "accept rule",
        hint="acceptance ratio q(x) / p(x) instead of p(x) / q(x)?",
        values=True,
    ),
    Mutant(
        "accept_where_the_target_gives_more",
        ACCEPT,
        "if p[i, x] >= q[i, x]:",
        "accept rule",
        hint="a draft accepted only where p(x) >= q(x), ignoring u (no probabilistic acceptance)?",
    ),
    Mutant(
        "accept_the_target_argmax",
        ACCEPT,
        "if x == int(p[i].argmax()):",
        "accept rule",
        hint="a draft accepted only when it is the target's most probable token (greedy "
        "verification)?",
        values=True,
    ),
    # first rejection
    Mutant(
        "count_includes_the_sampled_token",
        STOP,
        "return torch.tensor(tokens, dtype=torch.int64), i + 1",
        "first rejection",
        hint="n counts the token drawn after the rejection (n + 1 instead of the accepted drafts)?",
    ),
    Mutant(
        "walk_goes_on_after_a_rejection",
        f"        {STOP}\n",
        "",
        "first rejection",
        hint="the drafts after a rejection still checked (the walk does not stop at the first "
        "rejection)?",
    ),
    Mutant(
        "bonus_after_a_rejection",
        STOP,
        "tokens.append(int((p[-1].log() + gumbel[-1]).argmax()))\n"
        "        return torch.tensor(tokens, dtype=torch.int64), i",
        "first rejection",
        hint="a bonus token from p[K] appended after the replacement token too?",
    ),
    Mutant(
        "first_uniform_for_every_draft",
        ACCEPT,
        "if uniforms[0] < p[i, x] / q[i, x]:",
        "first rejection",
        hint="the first uniform used for every draft instead of uniforms[i]?",
    ),
    Mutant(
        "ratio_from_the_first_row",
        ACCEPT,
        "if uniforms[i] < p[0, x] / q[0, x]:",
        "first rejection",
        hint="every draft's ratio read from row 0 of p and q instead of row i?",
    ),
    # residual
    Mutant(
        "resample_from_the_target",
        RESIDUAL,
        "residual = p[i]",
        "residual",
        hint="the replacement drawn from p instead of the residual max(0, p - q)?",
    ),
    Mutant(
        "residual_absolute_difference",
        RESIDUAL,
        "residual = (p[i] - q[i]).abs()",
        "residual",
        hint="residual |p - q| instead of max(0, p - q)?",
    ),
    Mutant(
        "residual_q_minus_p",
        RESIDUAL,
        "residual = (q[i] - p[i]).clamp(min=0)",
        "residual",
        hint="residual max(0, q - p) instead of max(0, p - q)?",
    ),
    Mutant(
        "residual_from_the_next_target_row",
        RESIDUAL,
        "residual = (p[i + 1] - q[i]).clamp(min=0)",
        "residual",
        hint="residual from the next row of p (p[i + 1] - q[i])?",
    ),
    Mutant(
        "residual_from_the_first_row",
        RESIDUAL,
        "residual = (p[0] - q[0]).clamp(min=0)",
        "residual",
        hint="residual from row 0 of p and q instead of the rejected draft's row?",
    ),
    Mutant(
        "noise_row_off_by_one",
        RESAMPLE,
        "tokens.append(int((residual.log() + gumbel[i + 1]).argmax()))",
        "residual",
        hint="the replacement drawn with gumbel[i + 1] instead of gumbel[i]?",
    ),
    Mutant(
        "gumbel_added_to_probabilities",
        RESAMPLE,
        "tokens.append(int((residual + gumbel[i]).argmax()))",
        "residual",
        hint="Gumbel noise added to the residual probabilities instead of their log?",
    ),
    # bonus
    Mutant(
        "bonus_from_the_last_draft_row",
        BONUS,
        "tokens.append(int((p[k - 1].log() + gumbel[k]).argmax()))",
        "bonus",
        hint="bonus token drawn from p[K - 1] (the last draft's row) instead of p[K]?",
    ),
    Mutant(
        "bonus_noise_from_the_first_row",
        BONUS,
        "tokens.append(int((p[k].log() + gumbel[0]).argmax()))",
        "bonus",
        hint="bonus token drawn with gumbel[0] instead of gumbel[K]?",
    ),
    Mutant(
        "bonus_without_noise",
        BONUS,
        "tokens.append(int(p[k].argmax()))",
        "bonus",
        hint="bonus token taken greedily (argmax p[K]) instead of sampled with gumbel[K]?",
    ),
    Mutant(
        "no_drafts_returns_nothing",
        "    tokens = []\n",
        "    tokens = []\n"
        "    if len(draft_tokens) == 0:\n"
        "        return torch.zeros(0, dtype=torch.int64), 0\n",
        "bonus",
        hint="K = 0 taken as nothing to verify, instead of returning the bonus token?",
    ),
    # edge values
    Mutant(
        "accept_when_u_equals_the_ratio",
        ACCEPT,
        "if uniforms[i] <= p[i, x] / q[i, x]:",
        "edge values",
        hint="a draft accepted when u equals p(x) / q(x) (<= instead of <), so u = 0 accepts "
        "a token the target gives probability 0?",
    ),
    Mutant(
        "ratio_in_float32",
        ACCEPT,
        "if uniforms[i].float() < (p[i, x] / q[i, x]).float():",
        "edge values",
        hint="the acceptance test rounded to float32, so float64 inputs lose their precision?",
    ),
    Mutant(
        "residual_in_place",
        RESIDUAL,
        "residual = p[i].sub_(q[i]).clamp_(min=0)",
        "edge values",
        hint="the residual computed in place in p (sub_, clamp_), changing the caller's tensor?",
    ),
    Mutant(
        "noise_added_in_place",
        RESAMPLE,
        "tokens.append(int(gumbel[i].add_(residual.log()).argmax()))",
        "edge values",
        hint="log-residual added into the caller's gumbel in place (add_)?",
    ),
    Mutant(
        "flat_index_through_view",
        ACCEPT,
        "if uniforms[i] < p.view(-1)[i * p.shape[-1] + x] / q.view(-1)[i * q.shape[-1] + x]:",
        "edge values",
        hint="p and q flattened with .view(-1), which fails on non-contiguous inputs "
        "(reshape works)?",
    ),
    # from scratch
    Mutant(
        "bonus_through_multinomial",
        BONUS,
        "best = (p[k].log() + gumbel[k]).argmax()\n"
        "    one_hot = torch.nn.functional.one_hot(best, p.shape[-1]).double()\n"
        "    tokens.append(int(torch.multinomial(one_hot, 1)))",
        "from scratch",
        hint="torch.multinomial used (here on a one-hot distribution)?",
    ),
]

VECTORISED = """    k = draft_tokens.shape[0]
    index = draft_tokens.unsqueeze(-1)
    ratio = p[:k].gather(-1, index).squeeze(-1) / q.gather(-1, index).squeeze(-1)
    rejected = (uniforms >= ratio).nonzero()
    n = int(rejected[0, 0]) if rejected.numel() else k
    if n < k:
        scores = torch.clamp(p[n] - q[n], min=0).log() + gumbel[n]
    else:
        scores = p[n].log() + gumbel[n]
    return torch.cat([draft_tokens[:n], scores.argmax().reshape(1)]), n
"""
BODY = (
    "    tokens = []\n"
    "    for i, x in enumerate(draft_tokens.tolist()):\n"
    "        if uniforms[i] < p[i, x] / q[i, x]:\n"
    "            tokens.append(x)\n"
    "            continue\n"
    "        residual = (p[i] - q[i]).clamp(min=0)\n"
    "        tokens.append(int((residual.log() + gumbel[i]).argmax()))\n"
    "        return torch.tensor(tokens, dtype=torch.int64), i\n"
    "    k = len(tokens)\n"
    "    tokens.append(int((p[k].log() + gumbel[k]).argmax()))\n"
    "    return torch.tensor(tokens, dtype=torch.int64), k\n"
)

VARIANTS = [
    Variant("vectorised", BODY, VECTORISED),
    Variant("multiplied_instead_of_divided", ACCEPT, "if uniforms[i] * q[i, x] < p[i, x]:"),
    Variant(
        "log_space_acceptance",
        ACCEPT,
        "if torch.log(uniforms[i]) < torch.log(p[i, x]) - torch.log(q[i, x]):",
    ),
    Variant(
        "normalised_residual",
        RESAMPLE,
        "residual = residual / residual.sum()\n        " + RESAMPLE,
    ),
    Variant(
        "masked_log",
        RESAMPLE,
        'scores = torch.where(residual > 0, residual.log(), float("-inf")) + gumbel[i]\n'
        "        tokens.append(int(scores.argmax()))",
    ),
    # written by someone who had read only the scaffold
    Variant("independent", notebook="variants/independent.ipynb"),
]
