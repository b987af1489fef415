"""The corpus of ppo_gae.

Single-bug copies of the solution (each must first lose points on its level, and the card
asks its hint when a notebook fails the same way) and correct variants (each must keep
full marks). EXERCISES_CANON.md section 12's classic bugs, and more.

Mutant(name, old, new, level, hint=..., values=False): `old` is found exactly once in the
solution's code and replaced by `new`.
"""

from grader.suite.corpus import Mutant, Variant

MIN_MUTANTS = 30  # the corpus test fails if it ever shrinks below this

BOOTSTRAP = "bootstrap = (~terminated).to(rewards.dtype)"
CARRY = "carry = (~(terminated | truncated)).to(rewards.dtype)"
DELTAS = "deltas = rewards + gamma * bootstrap * next_values - values"
STEP = "running = deltas[t] + gamma * lam * carry[t] * running"
NORMALIZE = "adv = (adv - adv.mean()) / (adv.std() + 1e-8)"
PG = "pg = torch.max(-adv * ratio, -adv * clipped).mean()"
RATIO = "ratio = torch.exp(new_logp - old_logp)"
TOTAL = "total = pg - ent_coef * entropy_mean + vf_coef * v_loss"
KEPT = "        x = x.reshape(-1)\n        return x if keep is None else x[keep]"

MUTANTS = [
    # from scratch (first: graded both in process and in a kernel)
    Mutant(
        "imports_torchrl",
        "import torch",
        "import torch\n\ntry:\n    from torchrl.objectives.value.functional import "
        "generalized_advantage_estimate\nexcept ImportError:\n"
        "    generalized_advantage_estimate = None",
        "from scratch",
        hint="an RL library (torchrl) imported?",
    ),
    # shapes
    Mutant(
        "returns_without_values",
        "return advantages, advantages + values",
        "return advantages, advantages.clone()",
        "shapes",
        hint="returns taken as the advantages, without adding the values back?",
    ),
    Mutant(
        "advantages_in_float32",
        "advantages = torch.zeros_like(deltas)",
        "advantages = torch.zeros(deltas.shape)",
        "shapes",
        hint="the advantages stored in a float32 tensor (torch.zeros without a dtype)?",
        values=True,  # float32 storage rounds every float64 advantage
    ),
    Mutant(
        "parts_not_reduced",
        "pg = torch.max(-adv * ratio, -adv * clipped).mean()",
        "pg = torch.max(-adv * ratio, -adv * clipped)",
        "shapes",
        hint="the policy loss not averaged (a per-entry tensor instead of a 0-dim mean)?",
        values=True,
    ),
    # advantages
    Mutant(
        "no_lambda",
        STEP,
        "running = deltas[t] + gamma * carry[t] * running",
        "advantages",
        hint="the trace decays by γ only, without λ (γλ)?",
        values=True,
    ),
    Mutant(
        "no_gamma_in_trace",
        STEP,
        "running = deltas[t] + lam * carry[t] * running",
        "advantages",
        hint="the trace decays by λ only, without γ (γλ)?",
        values=True,
    ),
    Mutant(
        "forward_loop",
        "for t in reversed(range(deltas.shape[0])):",
        "for t in range(deltas.shape[0]):",
        "advantages",
        hint="the recursion runs forward in time instead of backward from the last step?",
        values=True,
    ),
    Mutant(
        "last_step_not_bootstrapped",
        DELTAS,
        "following = torch.cat([values[1:], torch.zeros_like(values[:1])])\n"
        "    deltas = rewards + gamma * bootstrap * following - values",
        "advantages",
        hint="V(s_{t+1}) read from values[t + 1], with 0 after the rollout's last step "
        "(no bootstrap from next_values[T - 1])?",
        values=True,  # every rollout ends unflagged, bootstrapped from next_values[T - 1]
    ),
    Mutant(
        "lambda_zero_means_default",
        "    bootstrap = (~terminated)",
        "    lam = lam or 0.95\n    bootstrap = (~terminated)",
        "advantages",
        hint="lam=0.0 taken for the default 0.95 (a falsy `or`)?",
    ),
    Mutant(
        "gamma_zero_means_default",
        "    bootstrap = (~terminated)",
        "    gamma = gamma or 0.99\n    bootstrap = (~terminated)",
        "advantages",
        hint="gamma=0.0 taken for the default 0.99 (a falsy `or`)?",
    ),
    # terminations
    Mutant(
        "no_reset_at_termination",
        CARRY,
        "carry = (~truncated).to(rewards.dtype)",
        "terminations",
        hint="the recursion carries A_{t+1} across a termination (into the next episode)?",
    ),
    Mutant(
        "bootstrap_after_termination",
        BOOTSTRAP,
        "bootstrap = torch.ones_like(rewards)",
        "terminations",
        hint="next_values bootstrapped after a termination (a terminal state is worth 0)?",
    ),
    Mutant(
        "cleanrl_shifted_terminations",
        BOOTSTRAP,
        "bootstrap = (~torch.cat([terminated[1:], terminated[-1:]])).to(rewards.dtype)",
        "terminations",
        hint="the termination flags read one step late (CleanRL's dones[t + 1] convention)?",
    ),
    # truncations
    Mutant(
        "truncation_as_termination",
        BOOTSTRAP,
        "bootstrap = (~(terminated | truncated)).to(rewards.dtype)",
        "truncations",
        hint="no bootstrap at a truncation (treated as a termination, as CleanRL does)?",
    ),
    Mutant(
        "truncation_continues",
        CARRY,
        "carry = (~terminated).to(rewards.dtype)",
        "truncations",
        hint="the recursion carries A_{t+1} across a truncation (into the next episode)?",
    ),
    Mutant(
        "values_shifted_not_next_values",
        DELTAS,
        "following = torch.cat([values[1:], next_values[-1:]])\n"
        "    deltas = rewards + gamma * bootstrap * following - values",
        "truncations",
        hint="V(s_{t+1}) read from values[t + 1] (the next episode's first value after a "
        "truncation) instead of next_values[t]?",
    ),
    Mutant(
        "truncation_wins_over_termination",
        BOOTSTRAP,
        "bootstrap = (~terminated | truncated).to(rewards.dtype)",
        "truncations",
        hint="a step both terminated and truncated is bootstrapped (the termination must win)?",
    ),
    # policy loss
    Mutant(
        "min_instead_of_max",
        PG,
        "pg = torch.min(-adv * ratio, -adv * clipped).mean()",
        "policy loss",
        hint="min of the two negated objectives instead of max (the optimistic bound)?",
        values=True,
    ),
    Mutant(
        "clipped_term_only",
        PG,
        "pg = (-adv * clipped).mean()",
        "policy loss",
        hint="only the clipped objective, without the max against the unclipped one?",
        values=True,
    ),
    Mutant(
        "ratio_not_exp",
        RATIO,
        "ratio = new_logp - old_logp",
        "policy loss",
        hint="the ratio taken as the log-prob difference, without exp?",
        values=True,
    ),
    Mutant(
        "ratio_inverted",
        RATIO,
        "ratio = torch.exp(old_logp - new_logp)",
        "policy loss",
        hint="the ratio inverted: exp(old_logp - new_logp)?",
        values=True,
    ),
    Mutant(
        "clip_zero_means_default",
        "clipped = torch.clamp(ratio, 1 - clip, 1 + clip)",
        "clip = clip or 0.2\n    clipped = torch.clamp(ratio, 1 - clip, 1 + clip)",
        "policy loss",
        hint="clip=0.0 taken for the default 0.2 (a falsy `or`)?",
    ),
    Mutant(
        "clip_hardcoded",
        "clipped = torch.clamp(ratio, 1 - clip, 1 + clip)",
        "clipped = torch.clamp(ratio, 0.8, 1.2)",
        "policy loss",
        hint="the ratio clamped to [0.8, 1.2], whatever clip says?",
    ),
    Mutant(
        "clipfrac_one_sided",
        "clipfrac = ((ratio - 1).abs() > clip)",
        "clipfrac = (ratio > 1 + clip)",
        "policy loss",
        hint="clipfrac counts ratios above 1 + clip only (not those below 1 - clip)?",
    ),
    Mutant(
        "biased_std",
        NORMALIZE,
        "adv = (adv - adv.mean()) / (adv.std(unbiased=False) + 1e-8)",
        "policy loss",
        hint="advantages normalised with the biased std (torch's default is unbiased)?",
    ),
    Mutant(
        "eps_inside_sqrt",
        NORMALIZE,
        "adv = (adv - adv.mean()) / torch.sqrt(adv.var() + 1e-8)",
        "policy loss",
        hint="1e-8 added to the variance under the square root, not to the std?",
    ),
    Mutant(
        "normalize_without_eps",
        NORMALIZE,
        "adv = (adv - adv.mean()) / adv.std()",
        "policy loss",
        hint="advantages divided by their std without + 1e-8 (0 / 0 when they are equal)?",
    ),
    Mutant(
        "ratio_detached",
        RATIO,
        "ratio = torch.exp(new_logp - old_logp).detach()",
        "policy loss",
        hint="the ratio detached, so no gradient reaches new_logp?",
    ),
    # value loss & total
    Mutant(
        "value_loss_without_half",
        "v_loss = 0.5 * v_loss.mean()",
        "v_loss = v_loss.mean()",
        "value loss & total",
        hint="the value loss without the factor 0.5?",
        values=True,
    ),
    Mutant(
        "value_clip_without_max",
        "v_loss = torch.max(v_loss, (v_clipped - ret) ** 2)",
        "v_loss = (v_clipped - ret) ** 2",
        "value loss & total",
        hint="only the clipped value error (Stable-Baselines3's form), without the max "
        "against the unclipped one?",
    ),
    Mutant(
        "value_clip_zero_means_none",
        "if value_clip is not None:",
        "if value_clip:",
        "value loss & total",
        hint="value_clip=0.0 taken for None (no clipping) by a truthiness test?",
    ),
    Mutant(
        "value_clipped_around_returns",
        "v_clipped = v_old + torch.clamp(v - v_old, -value_clip, value_clip)",
        "v_clipped = ret + torch.clamp(v - ret, -value_clip, value_clip)",
        "value loss & total",
        hint="the new values clipped around the returns instead of the old values?",
    ),
    Mutant(
        "entropy_summed",
        "entropy_mean = ent.mean()",
        "entropy_mean = ent.sum()",
        "value loss & total",
        hint="the entropy summed over the entries instead of averaged?",
    ),
    Mutant(
        "entropy_sign",
        TOTAL,
        "total = pg + ent_coef * entropy_mean + vf_coef * v_loss",
        "value loss & total",
        hint="the entropy bonus added to the loss instead of subtracted?",
    ),
    Mutant(
        "vf_coef_zero_means_default",
        TOTAL,
        "total = pg - ent_coef * entropy_mean + (vf_coef or 0.5) * v_loss",
        "value loss & total",
        hint="vf_coef=0.0 taken for the default 0.5 (a falsy `or`)?",
    ),
    Mutant(
        "ent_coef_zero_means_default",
        TOTAL,
        "total = pg - (ent_coef or 0.01) * entropy_mean + vf_coef * v_loss",
        "value loss & total",
        hint="ent_coef=0.0 taken for the default 0.01 (a falsy `or`)?",
    ),
    Mutant(
        "values_detached",
        "v_loss = (v - ret) ** 2",
        "v_loss = (v.detach() - ret) ** 2",
        "value loss & total",
        hint="the unclipped value error uses detached new values (no gradient through it)?",
    ),
    # masks
    Mutant(
        "mask_ignored",
        KEPT,
        "        return x.reshape(-1)",
        "masks",
        hint="the mask ignored: means over every entry, padding included?",
    ),
    Mutant(
        "normalized_over_every_entry",
        NORMALIZE,
        "every = advantages.reshape(-1)\n        adv = (adv - every.mean()) / (every.std() + 1e-8)",
        "masks",
        hint="with a mask, the advantages normalised with the mean and std of every entry, "
        "padding included?",
    ),
    # edge cases
    Mutant(
        "rewards_modified_in_place",
        DELTAS,
        "deltas = rewards.add_(gamma * bootstrap * next_values).sub_(values)",
        "edge cases",
        hint="the TD errors computed in place in the caller's rewards (add_, sub_)?",
    ),
    Mutant(
        "advantages_normalized_in_place",
        NORMALIZE,
        "adv = adv.sub_(adv.mean()).div_(adv.std() + 1e-8)",
        "edge cases",
        hint="the advantages normalised in place (sub_, div_), changing the caller's tensor?",
    ),
    Mutant(
        "flattened_with_view",
        KEPT,
        "        x = x.view(-1)\n        return x if keep is None else x[keep]",
        "edge cases",
        hint="the inputs flattened with .view, which fails on non-contiguous tensors?",
    ),
    Mutant(
        "deltas_in_float32",
        DELTAS,
        "deltas = (rewards.float() + gamma * bootstrap.float() * next_values.float() "
        "- values.float()).to(rewards.dtype)",
        "advantages",
        hint="the TD errors computed in float32, losing float64's digits?",
        values=True,  # float32 rounding shows at float64's tolerance in every rollout
    ),
    Mutant(
        "one_pass_std",
        NORMALIZE,
        "n = adv.numel()\n"
        "        std = ((adv**2).mean() - adv.mean() ** 2).mul(n / (n - 1)).sqrt()\n"
        "        adv = (adv - adv.mean()) / (std + 1e-8)",
        "edge cases",
        hint="the std from one pass, sqrt(E[A²] - E[A]²), which cancels catastrophically for "
        "advantages far from 0?",
    ),
]

VARIANTS = [
    # the closed form: each A_t a sum of discounted TD errors, as one triangular solve
    Variant(
        "triangular_solve",
        "    advantages = torch.zeros_like(deltas)\n"
        "    running = torch.zeros_like(deltas[0])\n"
        "    for t in reversed(range(deltas.shape[0])):\n"
        "        running = deltas[t] + gamma * lam * carry[t] * running\n"
        "        advantages[t] = running\n",
        "    steps = deltas.shape[0]\n"
        "    # (I - U) A = δ per env, U[t, t + 1] = γλ carry[t]: upper bidiagonal\n"
        "    system = torch.eye(steps, dtype=deltas.dtype).repeat(deltas.shape[1], 1, 1)\n"
        "    rows = torch.arange(steps - 1)\n"
        "    system[:, rows, rows + 1] = -gamma * lam * carry[:-1].T\n"
        "    solved = torch.linalg.solve_triangular(system, deltas.T.unsqueeze(-1), upper=True)\n"
        "    advantages = solved.squeeze(-1).T.contiguous()\n",
    ),
    # -min(A r, A clip(r)), and the ratio clipped through its log (both as the statement)
    Variant(
        "negated_min",
        PG,
        "pg = -torch.min(adv * ratio, adv * clipped).mean()",
    ),
    Variant(
        "clamped_log_ratio",
        "clipped = torch.clamp(ratio, 1 - clip, 1 + clip)",
        "import math\n\n"
        "    log_ratio = new_logp - old_logp\n"
        "    clipped = torch.exp(torch.clamp(log_ratio, math.log(1 - clip), math.log(1 + clip)))",
    ),
    # boolean indexing replaced by masked_select
    Variant(
        "masked_select",
        "    keep = None if mask is None else mask.reshape(-1)\n"
        "\n"
        "    def kept(x: torch.Tensor) -> torch.Tensor:\n" + KEPT + "\n",
        "    keep = None if mask is None else mask.reshape(-1)\n"
        "\n"
        "    def kept(x: torch.Tensor) -> torch.Tensor:\n"
        "        x = x.reshape(-1)\n"
        "        return x if keep is None else torch.masked_select(x, keep)\n",
    ),
    # the advantages from the returns: returns first (λ-returns), then A = G - V
    Variant(
        "lambda_returns",
        "    advantages = torch.zeros_like(deltas)\n"
        "    running = torch.zeros_like(deltas[0])\n"
        "    for t in reversed(range(deltas.shape[0])):\n"
        "        running = deltas[t] + gamma * lam * carry[t] * running\n"
        "        advantages[t] = running\n"
        "    return advantages, advantages + values\n",
        "    returns = torch.empty_like(deltas)\n"
        "    following = torch.zeros_like(values[0])  # G_{t+1} - V(s_{t+1}), 0 past the end\n"
        "    for t in reversed(range(deltas.shape[0])):\n"
        "        following = deltas[t] + gamma * lam * carry[t] * following\n"
        "        returns[t] = following + values[t]\n"
        "    return returns - values, returns\n",
    ),
    # written by someone who had read only the scaffold
    Variant("independent", notebook="variants/independent.ipynb"),
]
