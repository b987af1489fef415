"""The corpus of dpo_loss.

Single-bug copies of the solution (each must first lose points on its level, and the card
asks its hint when a notebook fails the same way) and correct variants (each must keep
full marks). EXERCISES_CANON.md section 11's classic bugs, and more.

Mutant(name, old, new, level, hint=..., values=False): `old` is found exactly once in the
solution's code and replaced by `new`.
"""

from grader.suite.corpus import Mutant, Variant

MIN_MUTANTS = 30  # the corpus test fails if it ever shrinks below this

SIGMOID = """        losses = (
            -F.logsigmoid(beta * logits) * (1 - label_smoothing)
            - F.logsigmoid(-beta * logits) * label_smoothing
        )"""
IPO = "losses = (logits - 1 / (2 * beta)) ** 2"
Z = "logits = pi_logratios - ref_logratios"
GATHER = "per_token = logp.gather(-1, safe.unsqueeze(-1)).squeeze(-1) * keep"

MUTANTS = [
    # from scratch (first: graded both in process and in a kernel)
    Mutant(
        "bce_with_logits",
        SIGMOID,
        "        target = torch.full_like(logits, 1 - label_smoothing)\n"
        "        losses = F.binary_cross_entropy_with_logits(beta * logits, target, "
        'reduction="none")',
        "from scratch",
        hint="the cDPO loss computed by torch's F.binary_cross_entropy_with_logits?",
    ),
    Mutant(
        "nll_loss_gather",
        GATHER,
        "per_token = -F.nll_loss(logp.transpose(1, 2), targets, ignore_index=ignore_index, "
        'reduction="none")',
        "from scratch",
        hint="the token log-probabilities picked by torch's F.nll_loss?",
    ),
    Mutant(
        "cross_entropy_gather",
        GATHER,
        "per_token = -F.cross_entropy(logits[:, :-1].transpose(1, 2), safe, "
        'reduction="none") * keep',
        "from scratch",
        hint="the token log-probabilities computed by torch's F.cross_entropy?",
    ),
    # shapes
    Mutant(
        "loss_not_reduced",
        "return losses.mean(), chosen_rewards, rejected_rewards",
        "return losses, chosen_rewards, rejected_rewards",
        "shapes",
        hint="the per-pair losses returned, not their mean over the batch?",
        values=True,
    ),
    Mutant(
        "logps_keepdim",
        "total = per_token.sum(dim=-1)",
        "total = per_token.sum(dim=-1, keepdim=True)",
        "shapes",
        hint="the per-row sum kept as (B, 1) (keepdim=True) instead of (B,)?",
        values=True,
    ),
    Mutant(
        "logps_in_float32",
        "logp = logits[:, :-1].log_softmax(dim=-1)",
        "logp = logits[:, :-1].float().log_softmax(dim=-1)",
        "shapes",
        hint="the log-softmax computed in float32, so float64 logits give a float32 answer?",
    ),
    # log-probs
    Mutant(
        "logits_not_shifted",
        "logp = logits[:, :-1].log_softmax(dim=-1)",
        "logp = logits[:, 1:].log_softmax(dim=-1)",
        "log-probs",
        hint="labels[:, t + 1] scored with logits[:, t + 1] instead of logits[:, t] (no shift)?",
        values=True,  # every sequence_logps test compares the shifted log-probabilities
    ),
    Mutant(
        "mask_not_shifted",
        "keep = targets != ignore_index",
        "keep = labels[:, :-1] != ignore_index",
        "log-probs",
        hint="the mask of kept tokens taken from the unshifted labels[:, :-1]?",
    ),
    Mutant(
        "ignored_not_masked",
        GATHER,
        "per_token = logp.gather(-1, safe.unsqueeze(-1)).squeeze(-1)",
        "log-probs",
        hint="ignored labels replaced by token 0 and its log-probability counted?",
    ),
    Mutant(
        "gather_at_ignore_index",
        "logp.gather(-1, safe.unsqueeze(-1))",
        "logp.gather(-1, targets.unsqueeze(-1))",
        "log-probs",
        hint="gathers at the raw labels, so -100 is used as a vocabulary index?",
    ),
    Mutant(
        "always_average",
        "    if average:\n        return total / keep.sum(dim=-1)\n    return total",
        "    return total / keep.sum(dim=-1)",
        "log-probs",
        hint="the log-probabilities averaged over tokens even when average=False (DPO sums)?",
        values=True,  # every sequence_logps test uses the default sum
    ),
    Mutant(
        "average_ignored",
        "    if average:\n        return total / keep.sum(dim=-1)\n    return total",
        "    return total",
        "log-probs",
        hint="average=True still returns the sum over tokens?",
    ),
    Mutant(
        "average_over_all_positions",
        "return total / keep.sum(dim=-1)",
        "return total / targets.shape[1]",
        "log-probs",
        hint="average=True divides by every position (T - 1), not the row's kept tokens?",
    ),
    Mutant(
        "hardcoded_ignore_index",
        "keep = targets != ignore_index",
        "keep = targets != -100",
        "log-probs",
        hint="labels equal to -100 left out, whatever ignore_index says?",
    ),
    Mutant(
        "ignore_index_zero_means_default",
        "keep = targets != ignore_index",
        "keep = targets != (ignore_index or -100)",
        "log-probs",
        hint="ignore_index=0 taken for the default -100 (a falsy `or`)?",
    ),
    # sigmoid loss
    Mutant(
        "ref_sign_swapped",
        Z,
        "logits = pi_logratios + ref_logratios",
        "sigmoid loss",
        hint="the reference log-ratio added instead of subtracted?",
        values=True,
    ),
    Mutant(
        "chosen_rejected_swapped",
        "pi_logratios = policy_chosen_logps - policy_rejected_logps",
        "pi_logratios = policy_rejected_logps - policy_chosen_logps",
        "sigmoid loss",
        hint="the policy log-ratio taken as rejected minus chosen?",
        values=True,
    ),
    Mutant(
        "beta_outside_logsigmoid",
        SIGMOID,
        "        losses = (\n"
        "            -beta * F.logsigmoid(logits) * (1 - label_smoothing)\n"
        "            - beta * F.logsigmoid(-logits) * label_smoothing\n"
        "        )",
        "sigmoid loss",
        hint="β multiplying the log-sigmoid instead of the margin inside it?",
        values=True,
    ),
    Mutant(
        "loss_summed_over_batch",
        "return losses.mean(), chosen_rewards, rejected_rewards",
        "return losses.sum(), chosen_rewards, rejected_rewards",
        "sigmoid loss",
        hint="the per-pair losses summed over the batch instead of averaged?",
        values=True,
    ),
    Mutant(
        "rewards_without_beta",
        "chosen_rewards = beta * (policy_chosen_logps - ref_chosen_logps).detach()",
        "chosen_rewards = (policy_chosen_logps - ref_chosen_logps).detach()",
        "sigmoid loss",
        hint="chosen_rewards not scaled by β?",
    ),
    Mutant(
        "rejected_rewards_sign",
        "rejected_rewards = beta * (policy_rejected_logps - ref_rejected_logps).detach()",
        "rejected_rewards = beta * (ref_rejected_logps - policy_rejected_logps).detach()",
        "sigmoid loss",
        hint="rejected_rewards taken as reference minus policy?",
    ),
    # label smoothing
    Mutant(
        "smoothing_sign",
        "- F.logsigmoid(-beta * logits) * label_smoothing",
        "- F.logsigmoid(beta * logits) * label_smoothing",
        "label smoothing",
        hint="the smoothing term uses log σ(+β z) instead of log σ(-β z)?",
    ),
    Mutant(
        "smoothing_without_one_minus",
        "-F.logsigmoid(beta * logits) * (1 - label_smoothing)",
        "-F.logsigmoid(beta * logits)",
        "label smoothing",
        hint="the main term not weighted by (1 - label_smoothing)?",
    ),
    Mutant(
        "smoothing_term_log_one_minus_sigmoid",
        "- F.logsigmoid(-beta * logits) * label_smoothing",
        "- torch.log(1 - torch.sigmoid(beta * logits)) * label_smoothing",
        "label smoothing",
        hint="the smoothing term as log(1 - σ(β z)), which is log 0 at large margins "
        "(0 * -inf = NaN even with label_smoothing=0)?",
    ),
    # ipo
    Mutant(
        "ipo_one_over_beta",
        IPO,
        "losses = (logits - 1 / beta) ** 2",
        "ipo",
        hint="the IPO target margin 1/β instead of 1/(2β)?",
    ),
    Mutant(
        "ipo_beta_times_margin",
        IPO,
        "losses = (beta * logits - 1 / (2 * beta)) ** 2",
        "ipo",
        hint="IPO's margin multiplied by β ((β z - 1/(2β))² instead of (z - 1/(2β))²)?",
    ),
    Mutant(
        "ipo_smoothed",
        IPO,
        "losses = (1 - label_smoothing) * (logits - 1 / (2 * beta)) ** 2 "
        "+ label_smoothing * (-logits - 1 / (2 * beta)) ** 2",
        "ipo",
        hint="label smoothing applied to the IPO loss (IPO ignores it)?",
    ),
    # gradients
    Mutant(
        "rewards_not_detached",
        "chosen_rewards = beta * (policy_chosen_logps - ref_chosen_logps).detach()",
        "chosen_rewards = beta * (policy_chosen_logps - ref_chosen_logps)",
        "gradients",
        hint="chosen_rewards not detached, so a gradient flows through them?",
    ),
    Mutant(
        "smoothing_term_detached",
        "- F.logsigmoid(-beta * logits) * label_smoothing",
        "- F.logsigmoid(-beta * logits).detach() * label_smoothing",
        "gradients",
        hint="the label-smoothing term detached, so it adds no gradient?",
    ),
    Mutant(
        "log_softmax_normaliser_detached",
        "logp = logits[:, :-1].log_softmax(dim=-1)",
        "shifted = logits[:, :-1]\n"
        "    logp = shifted - shifted.logsumexp(dim=-1, keepdim=True).detach()",
        "gradients",
        hint="the log-softmax's normaliser (logsumexp) detached from the graph?",
    ),
    # robustness
    Mutant(
        "log_of_sigmoid",
        "-F.logsigmoid(beta * logits) * (1 - label_smoothing)",
        "-torch.log(torch.sigmoid(beta * logits)) * (1 - label_smoothing)",
        "robustness",
        hint="log(sigmoid(β z)), which is log 0 = -inf for large negative margins?",
    ),
    Mutant(
        "margins_in_float32",
        "pi_logratios = policy_chosen_logps - policy_rejected_logps",
        "pi_logratios = (policy_chosen_logps.float() - policy_rejected_logps.float()).to(\n"
        "        policy_chosen_logps.dtype\n    )",
        "robustness",
        hint="the margin computed in float32 inside, losing float64's digits for log-probs "
        "near -1e4?",
    ),
    Mutant(
        "log_of_softmax",
        "logp = logits[:, :-1].log_softmax(dim=-1)",
        "logp = logits[:, :-1].softmax(dim=-1).log()",
        "robustness",
        hint="log of the softmax probabilities, which underflow to 0 for large logits?",
    ),
    Mutant(
        "beta_zero_means_default",
        "    chosen_rewards = beta",
        "    beta = beta or 0.1\n    chosen_rewards = beta",
        "robustness",
        hint="beta=0.0 taken for the default 0.1 (a falsy `or`)?",
    ),
    Mutant(
        "rewards_squeezed",
        "rejected_rewards = beta * (policy_rejected_logps - ref_rejected_logps).detach()",
        "rejected_rewards = beta * (policy_rejected_logps - ref_rejected_logps).detach().squeeze()",
        "robustness",
        hint="squeeze() on the rewards, which drops the batch axis when B = 1?",
    ),
    Mutant(
        "flat_index_with_view",
        GATHER,
        "rows = torch.arange(safe.numel())\n"
        "    per_token = logp.reshape(rows.numel(), -1)[rows, safe.view(-1)].reshape(safe.shape) * keep",
        "robustness",
        hint="the labels flattened with .view, which fails on non-contiguous labels (use reshape)?",
    ),
    Mutant(
        "labels_zeroed_in_place",
        "    safe = torch.where(keep, targets, torch.zeros_like(targets))  # -100 is no valid index\n",
        "    safe = targets\n    safe[~keep] = 0\n",
        "robustness",
        hint="ignored labels overwritten with 0 in the caller's labels tensor (in place)?",
    ),
    Mutant(
        "ref_logratio_in_place",
        "ref_logratios = ref_chosen_logps - ref_rejected_logps",
        "ref_logratios = ref_chosen_logps.sub_(ref_rejected_logps)",
        "robustness",
        hint="the reference log-ratio computed in place in ref_chosen_logps (sub_)?",
    ),
    Mutant(
        "unknown_loss_type_is_ipo",
        '    elif loss_type == "ipo":\n        losses = (logits - 1 / (2 * beta)) ** 2\n'
        '    else:\n        raise ValueError(f"unknown loss_type {loss_type!r}")',
        "    else:\n        losses = (logits - 1 / (2 * beta)) ** 2",
        "robustness",
        hint="an unknown loss_type falls through to IPO instead of raising ValueError?",
    ),
]

VARIANTS = [
    # -log σ(x) = softplus(-x)
    Variant(
        "softplus_form",
        SIGMOID,
        "        losses = (1 - label_smoothing) * F.softplus(-beta * logits) "
        "+ label_smoothing * F.softplus(beta * logits)",
    ),
    # the margin regrouped as (policy - ref) of each response
    Variant(
        "margin_regrouped",
        Z,
        "logits = (policy_chosen_logps - ref_chosen_logps) - (policy_rejected_logps - ref_rejected_logps)",
    ),
    # log-softmax by hand with logsumexp, masking with where, averaging with a float count
    Variant(
        "logsumexp_and_where",
        "    logp = logits[:, :-1].log_softmax(dim=-1)\n"
        "    per_token = logp.gather(-1, safe.unsqueeze(-1)).squeeze(-1) * keep\n",
        "    shifted = logits[:, :-1]\n"
        "    logp = shifted - torch.logsumexp(shifted, dim=-1, keepdim=True)\n"
        "    picked = torch.take_along_dim(logp, safe.unsqueeze(-1), dim=-1).squeeze(-1)\n"
        "    per_token = torch.where(keep, picked, torch.zeros_like(picked))\n",
    ),
    # TRL's own lines: a clone of the shifted labels, its ignored ids zeroed in place
    Variant(
        "trl_clone_and_zero",
        "    safe = torch.where(keep, targets, torch.zeros_like(targets))  # -100 is no valid index\n",
        "    safe = targets.clone()\n    safe[~keep] = 0\n",
    ),
    # a helper of its own named like torch's BCE: no false alarm
    Variant(
        "own_bce_helper",
        SIGMOID,
        "        def binary_cross_entropy_with_logits(x, target):\n"
        "            return -target * F.logsigmoid(x) - (1 - target) * F.logsigmoid(-x)\n"
        "\n"
        "        losses = binary_cross_entropy_with_logits(beta * logits, 1 - label_smoothing)",
    ),
    # written by someone who had read only the scaffold
    Variant("independent", notebook="variants/independent.ipynb"),
]
