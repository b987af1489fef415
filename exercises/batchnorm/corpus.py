"""Single-bug mutants of solutions/batchnorm.ipynb, each with the level where it must first
lose points (EXERCISES_CANON.md section 9's classic bugs, and more), and correct variants
that keep full marks."""

from __future__ import annotations

from grader.suite.corpus import Mutant, Variant

MIN_MUTANTS = 28

DIMS = "dims = [0, *range(2, x.dim())]  # every axis but the channels"
N = "n = x.numel() // x.shape[1]"
MEAN = "mean = x.mean(dim=dims)"
VAR = "var = (x - mean.reshape(shape)).pow(2).mean(dim=dims)  # biased: normalises"
NEW_MEAN = "new_mean = (1 - momentum) * running_mean + momentum * mean"
NEW_VAR = "new_var = (1 - momentum) * running_var + momentum * var * n / (n - 1)"
EVAL = "mean, var = running_mean, running_var"
Y = "y = (x - mean.reshape(shape)) / torch.sqrt(var.reshape(shape) + eps)"
WEIGHT = "y = y * weight.reshape(shape)"
BIAS = "y = y + bias.reshape(shape)"
INIT = "self.eps, self.momentum = eps, momentum"
COUNT = """        if self.training:
            self.num_batches_tracked += 1"""
FACTOR = "factor = 1.0 / int(self.num_batches_tracked)"
STORE = "self.running_mean, self.running_var = mean, var"

MUTANTS = [
    Mutant(
        "module_runs_torch_batch_norm",
        "y, mean, var = batch_norm(",
        "y, mean, var = (torch.nn.functional.batch_norm(x, self.running_mean, "
        "self.running_var, self.weight, self.bias, self.training, factor, self.eps), "
        "self.running_mean, self.running_var) if True else batch_norm(",
        "from scratch",
        hint="BatchNorm.forward runs torch's F.batch_norm instead of your own batch_norm?",
    ),
    # shapes and state
    Mutant(
        "running_var_starts_at_zeros",
        'self.register_buffer("running_var", torch.ones(num_features))',
        'self.register_buffer("running_var", torch.zeros(num_features))',
        "shapes and state",
        hint="running_var initialised to zeros (CS231n) instead of ones?",
    ),
    Mutant(
        "float_counter",
        "torch.tensor(0, dtype=torch.long)",
        "torch.tensor(0.0)",
        "shapes and state",
        hint="num_batches_tracked a float tensor instead of an int64 one?",
    ),
    Mutant(
        "affine_false_ignored",
        "if affine:",
        "if True:",
        "shapes and state",
        hint="BatchNorm(affine=False) still creates a weight and a bias?",
    ),
    Mutant(
        "bias_starts_at_ones",
        "self.bias = nn.Parameter(torch.zeros(num_features))",
        "self.bias = nn.Parameter(torch.ones(num_features))",
        "shapes and state",
        hint="the bias initialised to ones instead of zeros?",
    ),
    Mutant(
        "mean_not_broadcast_per_channel",
        Y,
        "y = (x - mean) / torch.sqrt(var.reshape(shape) + eps)",
        "shapes and state",
        hint="the (C,) mean subtracted without reshaping to (1, C, 1, ...), so it broadcasts "
        "along the last axis?",
        values=True,
    ),
    # training values
    Mutant(
        "unbiased_normalisation",
        VAR,
        "var = x.var(dim=dims)  # unbiased",
        "training values",
        hint="normalised with the unbiased variance (torch.var's default) instead of the biased?",
        values=True,
    ),
    Mutant(
        "statistics_over_the_batch_axis_only",
        DIMS,
        "dims = [0]",
        "shapes and state",
        hint="statistics over axis 0 only, instead of every axis but the channels?",
        values=True,
    ),
    Mutant(
        "eps_outside_the_root",
        Y,
        "y = (x - mean.reshape(shape)) / (torch.sqrt(var.reshape(shape)) + eps)",
        "training values",
        hint="eps added after the square root instead of inside it?",
    ),
    Mutant(
        "zero_eps_means_default",
        DIMS,
        "eps = eps or 1e-5\n    " + DIMS,
        "training values",
        hint="eps=0.0 replaced by the default (a falsy `or`)?",
    ),
    Mutant(
        "bias_not_added",
        BIAS,
        "y = y",
        "training values",
        hint="the bias never added?",
    ),
    Mutant(
        "weight_on_the_last_axis",
        WEIGHT,
        "y = y * weight",
        "shapes and state",
        hint="weight broadcast along the last axis instead of the channel axis?",
        values=True,
    ),
    # running stats
    Mutant(
        "biased_running_var",
        NEW_VAR,
        "new_var = (1 - momentum) * running_var + momentum * var",
        "running stats",
        hint="running_var updated with the biased variance instead of the unbiased one?",
    ),
    Mutant(
        "momentum_as_keep_factor",
        NEW_MEAN,
        "new_mean = momentum * running_mean + (1 - momentum) * mean",
        "running stats",
        hint="momentum taken as the weight of the old running mean (Keras/CS231n) instead of "
        "the new batch's?",
    ),
    Mutant(
        "running_stats_from_scratch",
        NEW_MEAN,
        "new_mean = (1 - momentum) * torch.zeros_like(running_mean) + momentum * mean",
        "running stats",
        hint="the new running mean computed from zeros instead of the running mean given?",
    ),
    Mutant(
        "counter_not_incremented",
        COUNT,
        "        if self.training:\n            pass",
        "running stats",
        hint="num_batches_tracked never incremented?",
    ),
    Mutant(
        "unbiased_count_of_n_only",
        N,
        "n = x.shape[0]",
        "running stats",
        hint="the number of values per channel taken as N, not N*H*W (the unbiased factor)?",
    ),
    # evaluation
    Mutant(
        "evaluation_uses_batch_stats",
        EVAL,
        "mean, var = x.mean(dim=dims), x.var(dim=dims, unbiased=False)",
        "evaluation",
        hint="evaluation normalises with the batch's statistics instead of the running ones?",
    ),
    Mutant(
        "module_always_training",
        "self.training, factor, self.eps,",
        "True, factor, self.eps,",
        "evaluation",
        hint="BatchNorm.forward passes training=True whatever self.training (eval() ignored)?",
    ),
    Mutant(
        "counter_incremented_in_eval",
        COUNT,
        "        self.num_batches_tracked += 1\n        if self.training:",
        "evaluation",
        hint="num_batches_tracked incremented in evaluation mode too?",
    ),
    # momentum
    Mutant(
        "module_momentum_falsy",
        INIT,
        "self.eps, self.momentum = eps, momentum or 0.1",
        "momentum",
        hint="momentum=None or 0.0 replaced by 0.1 (a falsy `or`)?",
    ),
    Mutant(
        "function_momentum_falsy",
        DIMS,
        "momentum = momentum or 0.1\n    " + DIMS,
        "momentum",
        hint="momentum=0.0 replaced by the default in batch_norm (a falsy `or`)?",
    ),
    Mutant(
        "cumulative_factor_off_by_one",
        FACTOR,
        "factor = 1.0 / (int(self.num_batches_tracked) + 1)",
        "momentum",
        hint="momentum=None's factor 1/(count + 1) instead of 1/count after counting the batch?",
    ),
    Mutant(
        "module_ignores_its_momentum",
        "factor = self.momentum",
        "factor = 0.1",
        "momentum",
        hint="BatchNorm.forward uses momentum 0.1 whatever the module was given?",
    ),
    # gradients
    Mutant(
        "mean_detached",
        MEAN,
        "mean = x.mean(dim=dims).detach()",
        "gradients",
        hint="the batch mean detached, so gradients miss its dependence on x?",
    ),
    Mutant(
        "variance_detached",
        VAR,
        "var = (x - mean.reshape(shape)).pow(2).mean(dim=dims).detach()",
        "gradients",
        hint="the batch variance detached, so gradients miss its dependence on x?",
    ),
    Mutant(
        "weight_detached",
        WEIGHT,
        "y = y * weight.detach().reshape(shape)",
        "gradients",
        hint="weight detached, so no gradient reaches it?",
    ),
    Mutant(
        "running_stats_keep_the_graph",
        "with torch.no_grad():",
        "if True:",
        "gradients",
        hint="running statistics computed with autograd on, so the buffers keep the graph of "
        "a training step (a later backward through them fails)?",
    ),
    # edge cases
    Mutant(
        "one_pass_variance",
        VAR,
        "var = x.pow(2).mean(dim=dims) - mean.pow(2)",
        "edge cases",
        hint="variance as E[x^2] - E[x]^2, which cancels for values far from zero?",
    ),
    Mutant(
        "no_single_value_check",
        "if n < 2:",
        "if n < 1:",
        "edge cases",
        hint="no ValueError when training with one value per channel?",
    ),
    Mutant(
        "single_value_check_on_batch_size",
        "if n < 2:",
        "if x.shape[0] < 2:",
        "edge cases",
        hint="ValueError for N = 1 even when each channel has several values (H*W > 1)?",
    ),
    Mutant(
        "running_mean_updated_in_place",
        NEW_MEAN,
        "new_mean = running_mean.mul_(1 - momentum).add_(momentum * mean)",
        "edge cases",
        hint="running_mean updated in place (as F.batch_norm does) instead of returned new?",
    ),
    Mutant(
        "mean_through_view",
        MEAN,
        "mean = x.view(x.shape[0], x.shape[1], -1).mean(dim=(0, 2))",
        "edge cases",
        hint="x flattened with .view, which fails on a non-contiguous x (use reshape)?",
    ),
]

VARIANTS = [
    Variant("torch_var_biased", VAR, "var = x.var(dim=dims, correction=0)"),
    Variant("rsqrt", Y, "y = (x - mean.reshape(shape)) * torch.rsqrt(var.reshape(shape) + eps)"),
    Variant(
        "lerp",
        NEW_MEAN,
        "new_mean = torch.lerp(running_mean, mean, momentum)",
    ),
    Variant(
        "buffers_copied_in_place",
        STORE,
        "with torch.no_grad():\n"
        "                self.running_mean.copy_(mean)\n"
        "                self.running_var.copy_(var)",
    ),
    Variant(
        "channel_major_reshape",
        MEAN + "\n        " + VAR,
        "flat = x.transpose(0, 1).reshape(x.shape[1], -1)  # (C, n)\n"
        "        mean = flat.mean(dim=1)\n"
        "        var = (flat - mean[:, None]).pow(2).mean(dim=1)",
    ),
    # written by someone who had read only the scaffold
    Variant("independent", notebook="variants/independent.ipynb"),
]
