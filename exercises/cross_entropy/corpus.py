"""The corpus of cross_entropy.

Single-bug copies of the solution (each must first lose points on its level, and the card
asks its hint when a notebook fails the same way) and correct variants (each must keep full
marks).

Mutant(name, old, new, level, hint=...): `old` is found exactly once in the solution's code
and replaced by `new`.
"""

from grader.suite.corpus import Mutant, Variant

MIN_MUTANTS = 29  # the corpus test fails if it ever shrinks below this

SMOOTH = "smooth = -logp.mean(dim=-1) * keep"
MEAN = "return loss.sum() / keep.sum()"
GATHER = "    nll = -logp.gather(-1, safe.unsqueeze(-1)).squeeze(-1) * keep\n"
# cross_entropy's cell from its signature down to the gather
CE_HEAD = """def cross_entropy(
    logits: torch.Tensor,
    target: torch.Tensor,
    *,
    ignore_index: int = -100,
    label_smoothing: float = 0.0,
    reduction: str = "mean",
) -> torch.Tensor:
    \"\"\"Cross-entropy of (N, C) or (B, T, C) logits (classes last) against class ids
    (N,) or (B, T), with ignore_index, label smoothing and "mean" | "sum" | "none".\"\"\"
    # BEGIN SOLUTION implement cross_entropy
    C = logits.shape[-1]
    logp = log_softmax(logits.reshape(-1, C), dim=-1)  # (N, C)
    flat = target.reshape(-1).long()
    keep = flat != ignore_index
    safe = torch.where(keep, flat, torch.zeros_like(flat))  # any valid class id
"""

MUTANTS = [
    # shapes & reduction
    Mutant(
        "sum_instead_of_mean",
        MEAN,
        "return loss.sum()",
        "shapes & reduction",
        hint='reduction="mean" returns the sum of the losses?',
        values=True,  # the default reduction: every test of a "mean" loss compares it
    ),
    Mutant(
        "none_not_reshaped",
        "return loss.reshape(target.shape)",
        "return loss",
        "shapes & reduction",
        hint='reduction="none" returns the flat (B*T,) losses, not the target\'s shape (B, T)?',
    ),
    Mutant(
        "computes_in_float32",
        "C = logits.shape[-1]\n",
        "C = logits.shape[-1]\n    logits = logits.float()\n",
        "shapes & reduction",
        hint="the logits cast to float32, so float64 inputs give a float32 loss?",
    ),
    Mutant(
        "max_without_keepdim",
        "m = x.amax(dim=dim, keepdim=True)",
        "m = x.amax(dim=dim)",
        "shapes & reduction",
        hint="the row maximum taken without keepdim=True, so it does not broadcast over dim?",
        values=True,  # log_softmax raises for every input
    ),
    # values
    Mutant(
        "lse_missing_max",
        "return shifted - lse",
        "return x - lse",
        "values",
        hint="log-sum-exp of the shifted logits, without adding the maximum back?",
        values=True,
    ),
    Mutant(
        "softmax_over_batch_dim",
        "logp = log_softmax(logits.reshape(-1, C), dim=-1)",
        "logp = log_softmax(logits.reshape(-1, C), dim=0)",
        "values",
        hint="log-softmax over the batch axis (dim=0) instead of the classes?",
        values=True,
    ),
    Mutant(
        "log_softmax_ignores_dim",
        "    m = x.amax(dim=dim, keepdim=True)\n",
        "    dim = -1\n    m = x.amax(dim=dim, keepdim=True)\n",
        "values",
        hint="log_softmax always works on the last axis, whatever dim it is given?",
    ),
    Mutant(
        "sign_flipped",
        "nll = -logp.gather(",
        "nll = logp.gather(",
        "values",
        hint="the loss is +log p[target], without the minus sign?",
        values=True,
    ),
    # stability
    Mutant(
        "log_of_softmax",
        "return shifted - lse",
        "return (shifted.exp() / shifted.exp().sum(dim=dim, keepdim=True)).log()",
        "stability",
        hint="log of the softmax probabilities, which underflow to 0 (log 0 = -inf)?",
    ),
    Mutant(
        "no_max_subtraction",
        "shifted = x - m",
        "shifted = x",
        "stability",
        hint="exp of the raw logits, without subtracting the row maximum (overflow)?",
    ),
    Mutant(
        "global_max_shift",
        "m = x.amax(dim=dim, keepdim=True)",
        "m = x.max()",
        "stability",
        hint="one maximum over the whole tensor subtracted, not each row's own?",
    ),
    Mutant(
        "float32_inside",
        "logp = log_softmax(logits.reshape(-1, C), dim=-1)",
        "logp = log_softmax(logits.reshape(-1, C).float(), dim=-1).to(logits.dtype)",
        "stability",
        hint="float64 logits computed in float32 inside (cast back at the end), which loses "
        "the digits of logits far from zero?",
    ),
    Mutant(
        "loss_from_probabilities",
        "nll = -logp.gather(-1, safe.unsqueeze(-1)).squeeze(-1) * keep",
        "nll = -logp.exp().gather(-1, safe.unsqueeze(-1)).squeeze(-1).log() * keep",
        "stability",
        hint="the loss is -log of the target's probability, which underflows to 0?",
    ),
    # ignore_index
    Mutant(
        "mean_includes_ignored",
        MEAN,
        "return loss.sum() / flat.numel()",
        "ignore_index",
        hint='"mean" divides by every position, ignored ones included?',
    ),
    Mutant(
        "ignored_as_class0",
        "squeeze(-1) * keep",
        "squeeze(-1)",
        "ignore_index",
        hint="ignored targets replaced by class 0 and counted in the loss?",
    ),
    Mutant(
        "smoothing_counts_ignored_rows",
        SMOOTH,
        "smooth = -logp.mean(dim=-1)",
        "label smoothing",
        hint="the label-smoothing term is added on ignored rows too?",
    ),
    Mutant(
        "hardcoded_ignore_index",
        "keep = flat != ignore_index",
        "keep = flat != -100",
        "ignore_index",
        hint="ignores targets equal to -100, whatever ignore_index says?",
    ),
    Mutant(
        "all_ignored_gives_zero",
        MEAN,
        "return loss.sum() / keep.sum().clamp(min=1)",
        "ignore_index",
        hint='"mean" with every target ignored returns 0 instead of NaN (0 / 0)?',
    ),
    Mutant(
        "ignore_index_zero_means_default",
        "keep = flat != ignore_index",
        "keep = flat != (ignore_index or -100)",
        "ignore_index",
        hint="ignore_index=0 taken for the default -100 (a falsy `or`)?",
    ),
    Mutant(
        "gather_before_masking",
        "logp.gather(-1, safe.unsqueeze(-1))",
        "logp.gather(-1, flat.unsqueeze(-1))",
        "ignore_index",
        hint="gathers at the raw targets, so ignore_index=-100 is used as a class index?",
    ),
    # label smoothing
    Mutant(
        "smoothing_eps_over_c_minus_1",
        SMOOTH,
        "smooth = -(logp.sum(dim=-1) + nll) / (C - 1) * keep",
        "label smoothing",
        hint="smoothing spreads ε/(C-1) over the other classes instead of ε/C over all C?",
    ),
    Mutant(
        "smoothing_excludes_target",
        SMOOTH,
        "smooth = -(logp.sum(dim=-1) + nll) / C * keep",
        "label smoothing",
        hint="smoothing gives ε/C to the non-target classes only (the target gets none)?",
    ),
    Mutant(
        "smoothing_summed_over_classes",
        SMOOTH,
        "smooth = -logp.sum(dim=-1) * keep",
        "label smoothing",
        hint="the smoothing term sums -log p over the classes instead of averaging (ε, not ε/C)?",
    ),
    # gradients
    Mutant(
        "lse_detached",
        "lse = shifted.exp()",
        "lse = shifted.detach().exp()",
        "gradients",
        hint="the log-sum-exp is detached, so no gradient flows through the normaliser?",
    ),
    Mutant(
        "smoothing_term_detached",
        SMOOTH,
        "smooth = -logp.detach().mean(dim=-1) * keep",
        "gradients",
        hint="the label-smoothing term is computed from detached log-probabilities?",
    ),
    Mutant(
        "logits_shifted_in_place",
        "shifted = x - m",
        "shifted = x.sub_(m)",
        "gradients",
        hint="the row maximum is subtracted from the logits in place (x.sub_), which autograd refuses?",
    ),
    # edge cases
    Mutant(
        "target_modified_in_place",
        "safe = torch.where(keep, flat, torch.zeros_like(flat))",
        "safe = flat\n    safe[~keep] = 0",
        "ignore_index",
        hint="ignored targets overwritten with 0 in the caller's target tensor (in place)?",
    ),
    Mutant(
        "returns_float64",
        "C = logits.shape[-1]\n",
        "C = logits.shape[-1]\n    logits = logits.double()\n",
        "edge cases",
        hint="the logits upcast to float64 and the loss not cast back to float32?",
    ),
    Mutant(
        "view_instead_of_reshape",
        "logits.reshape(-1, C)",
        "logits.view(-1, C)",
        "edge cases",
        hint="logits flattened with .view, which fails on non-contiguous logits?",
    ),
    Mutant(
        "target_view_instead_of_reshape",
        "flat = target.reshape(-1).long()",
        "flat = target.view(-1).long()",
        "edge cases",
        hint="target flattened with .view, which fails on a non-contiguous target?",
    ),
    # from scratch
    Mutant(
        "builtin_logsumexp",
        "lse = shifted.exp().sum(dim=dim, keepdim=True).log()",
        "lse = torch.logsumexp(shifted, dim=dim, keepdim=True)",
        "from scratch",
        hint="torch.logsumexp used for the normaliser?",
    ),
    Mutant(
        "builtin_nll_loss",
        "nll = -logp.gather(-1, safe.unsqueeze(-1)).squeeze(-1) * keep",
        'nll = torch.nn.functional.nll_loss(logp, safe, reduction="none") * keep',
        "from scratch",
        hint="torch's F.nll_loss picks the target log-probabilities?",
    ),
    Mutant(
        "builtin_log_softmax_method",
        "logp = log_softmax(logits.reshape(-1, C), dim=-1)",
        "logp = logits.reshape(-1, C).log_softmax(dim=-1)",
        "from scratch",
        hint="Tensor.log_softmax (torch's) called instead of the notebook's log_softmax?",
    ),
]

VARIANTS = [
    # the scaffold filled in by someone who had read only the scaffold (not this solution)
    Variant("independent", notebook="variants/independent.ipynb"),
    # the loss as the cross-entropy against the explicit smoothed target distribution q
    Variant(
        "explicit_smoothed_target",
        "    nll = -logp.gather(-1, safe.unsqueeze(-1)).squeeze(-1) * keep\n"
        "    smooth = -logp.mean(dim=-1) * keep  # the uniform part: every class, the target included\n"
        "    loss = (1 - label_smoothing) * nll + label_smoothing * smooth\n",
        "    onehot = torch.zeros_like(logp).scatter(-1, safe.unsqueeze(-1), 1.0)\n"
        "    q = (1 - label_smoothing) * onehot + label_smoothing / C\n"
        "    loss = torch.where(keep, -(q * logp).sum(dim=-1), torch.zeros((), dtype=logp.dtype))\n",
    ),
    # top-level helpers of its own named like torch's built-ins: no false alarm
    Variant(
        "own_logsumexp",
        "def log_softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:\n",
        "def logsumexp(z: torch.Tensor, dim: int = -1) -> torch.Tensor:\n"
        "    top = z.amax(dim=dim, keepdim=True)\n"
        "    return top + (z - top).exp().sum(dim=dim, keepdim=True).log()\n"
        "\n"
        "\n"
        "def log_softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:\n"
        "    return x - logsumexp(x, dim)\n"
        "\n"
        "\n"
        "def unused(x: torch.Tensor, dim: int = -1) -> torch.Tensor:\n",
    ),
    Variant(
        "own_nll_loss",
        CE_HEAD + GATHER,
        "def nll_loss(logp: torch.Tensor, target: torch.Tensor) -> torch.Tensor:\n"
        "    return -logp[torch.arange(len(target)), target]\n"
        "\n"
        "\n" + CE_HEAD + "    nll = nll_loss(logp, safe) * keep\n",
    ),
    Variant("masked_mean", MEAN, "return loss[keep].mean()"),
]
