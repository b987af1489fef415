"""Single-bug mutants of solutions/norms.ipynb, each with the level where it must first lose
points (EXERCISES_NEXT.md section 3.6's table, and more classic bugs), and correct variants
that keep full marks."""

from __future__ import annotations

from grader.suite.corpus import Mutant, Variant

MIN_MUTANTS = 28

COMPUTE = "compute = torch.float32 if x.dtype in (torch.float16, torch.bfloat16) else x.dtype"
MS = "ms = h.pow(2).mean(dim=-1, keepdim=True)"
SCALE = "y = h * torch.rsqrt(ms + eps)"
RETURN = "return (y * weight.to(compute)).to(x.dtype)"
RMS_INIT = "self.eps = eps\n        self.weight = nn.Parameter(torch.ones(dim))"
RMS_FORWARD = "return rms_norm(x, self.weight, self.eps)"
VAR = "var = centered.pow(2).mean(dim=-1, keepdim=True)"
AFFINE = """    out = centered * torch.rsqrt(var + eps) * weight.to(xf.dtype)
    if bias is not None:
        out = out + bias.to(xf.dtype)
    return out.to(x.dtype)"""

MUTANTS = [
    Mutant(
        "module_uses_torch_layer_norm",
        "        return layer_norm(x, self.weight, self.bias, self.eps)",
        "        return torch.nn.functional.layer_norm(x, x.shape[-1:], self.weight, self.bias, self.eps)",
        "from scratch",
        hint="LayerNorm.forward calls torch's F.layer_norm instead of the notebook's layer_norm?",
    ),
    # shapes
    Mutant(
        "rms_mean_without_keepdim",
        MS,
        "ms = h.pow(2).mean(dim=-1)",
        "shapes",
        hint="mean of x**2 taken without keepdim=True, so it does not broadcast back over d?",
        values=True,
    ),
    Mutant(
        "rms_weight_random_init",
        RMS_INIT,
        "self.eps = eps\n        self.weight = nn.Parameter(torch.randn(dim))",
        "shapes",
        hint="RMSNorm's weight initialised at random instead of to ones?",
    ),
    Mutant(
        "rms_with_a_bias",
        RMS_INIT,
        RMS_INIT + "\n        self.bias = nn.Parameter(torch.zeros(dim))",
        "shapes",
        hint="RMSNorm given a bias parameter (it has a weight only)?",
    ),
    Mutant(
        "layer_norm_bias_false_ignored",
        "self.bias = nn.Parameter(torch.zeros(dim)) if bias else None",
        "self.bias = nn.Parameter(torch.zeros(dim))",
        "shapes",
        hint="LayerNorm(bias=False) still creates a bias parameter?",
    ),
    # values
    Mutant(
        "rms_mean_centered",
        "h = x.to(compute)",
        "h = x.to(compute)\n    h = h - h.mean(dim=-1, keepdim=True)",
        "values",
        hint="RMSNorm subtracts the row mean (that is LayerNorm)?",
        values=True,
    ),
    Mutant(
        "rms_sum_not_mean",
        MS,
        "ms = h.pow(2).sum(dim=-1, keepdim=True)",
        "values",
        hint="sum of x**2 instead of its mean over the d features?",
        values=True,
    ),
    Mutant(
        "rms_mean_over_first_axis",
        MS,
        "ms = h.pow(2).mean(dim=0, keepdim=True)",
        "values",
        hint="mean of x**2 taken over the first axis instead of the last (features)?",
        values=True,
    ),
    Mutant(
        "rms_weight_not_applied",
        RETURN,
        "return y.to(x.dtype)",
        "values",
        hint="rms_norm never multiplies by the weight?",
        values=True,
    ),
    Mutant(
        "rms_one_plus_weight",
        RETURN,
        "return (y * (1 + weight.to(compute))).to(x.dtype)",
        "values",
        hint="output scaled by (1 + weight), Gemma style, instead of by weight?",
        values=True,
    ),
    Mutant(
        "rms_missing_sqrt",
        SCALE,
        "y = h / (ms + eps)",
        "values",
        hint="x divided by mean(x**2) + eps, without the square root?",
        values=True,
    ),
    Mutant(
        "rms_in_place",
        SCALE,
        "y = h.mul_(torch.rsqrt(ms + eps))",
        "values",
        hint="x modified in place (mul_ on the input, which .to() returns unchanged)?",
    ),
    # eps placement
    Mutant(
        "rms_zero_eps_means_default",
        RMS_INIT,
        "self.eps = eps or 1e-6\n        self.weight = nn.Parameter(torch.ones(dim))",
        "eps placement",
        hint="RMSNorm(eps=0.0) takes the default eps instead (a falsy `or`)?",
    ),
    Mutant(
        "rms_eps_outside_sqrt",
        SCALE,
        "y = h / (ms.sqrt() + eps)",
        "eps placement",
        hint="eps added after the square root, sqrt(mean) + eps, instead of inside it?",
    ),
    Mutant(
        "rms_no_eps",
        SCALE,
        "y = h * torch.rsqrt(ms)",
        "eps placement",
        hint="eps never added: rsqrt(mean(x**2)) alone?",
    ),
    Mutant(
        "rms_module_ignores_its_eps",
        RMS_FORWARD,
        "return rms_norm(x, self.weight, 1e-6)",
        "eps placement",
        hint="RMSNorm.forward passes a fixed 1e-6 instead of self.eps?",
    ),
    Mutant(
        "rms_default_eps_1e-5",
        "def __init__(self, dim: int, eps: float = 1e-6):",
        "def __init__(self, dim: int, eps: float = 1e-5):",
        "eps placement",
        hint="RMSNorm's default eps is 1e-5 instead of 1e-6?",
    ),
    # dtypes
    Mutant(
        "rms_no_float32_upcast",
        COMPUTE,
        "compute = x.dtype",
        "dtypes",
        hint="float16 input computed in float16 (x**2 overflows) instead of float32?",
    ),
    Mutant(
        "rms_not_cast_back",
        RETURN,
        "return y * weight.to(compute)",
        "dtypes",
        hint="result left in float32 instead of cast back to x's dtype?",
    ),
    Mutant(
        "rms_float64_through_float32",
        COMPUTE,
        "compute = torch.float32",
        "dtypes",
        hint="float64 input computed in float32 (always .float()) instead of float64?",
    ),
    Mutant(
        "rms_mean_in_float32",
        MS,
        "ms = h.pow(2).mean(dim=-1, keepdim=True, dtype=torch.float32)",
        "dtypes",
        hint="mean of x**2 accumulated in float32, even for float64 x?",
    ),
    # gradients
    Mutant(
        "rms_scale_detached",
        SCALE,
        "y = h * torch.rsqrt(ms + eps).detach()",
        "gradients",
        hint="1/rms detached from the graph, so gradients miss its dependence on x?",
    ),
    Mutant(
        "rms_weight_data",
        RMS_FORWARD,
        "return rms_norm(x, self.weight.data, self.eps)",
        "gradients",
        hint="RMSNorm.forward uses self.weight.data, so no gradient reaches the weight?",
    ),
    # layer norm
    Mutant(
        "layer_norm_unbiased_variance",
        VAR,
        "var = xf.var(dim=-1, keepdim=True)",
        "layer norm",
        hint="unbiased variance (torch.var divides by d - 1) instead of the biased one?",
    ),
    Mutant(
        "layer_norm_not_centered",
        "centered = xf - xf.mean(dim=-1, keepdim=True)",
        "centered = xf",
        "layer norm",
        hint="LayerNorm never subtracts the row mean?",
    ),
    Mutant(
        "layer_norm_bias_not_added",
        "out = out + bias.to(xf.dtype)",
        "out = out",
        "layer norm",
        hint="layer_norm never adds the bias?",
    ),
    Mutant(
        "layer_norm_eps_outside_sqrt",
        "out = centered * torch.rsqrt(var + eps)",
        "out = centered / (var.sqrt() + eps)",
        "layer norm",
        hint="LayerNorm's eps added after the square root instead of inside it?",
    ),
    Mutant(
        "layer_norm_affine_after_cast",
        AFFINE,
        """    out = (centered * torch.rsqrt(var + eps)).to(x.dtype) * weight
    if bias is not None:
        out = out + bias
    return out.to(x.dtype)""",
        "layer norm",
        hint="LayerNorm cast back to bfloat16/float16 before the weight and bias are applied?",
    ),
    Mutant(
        "layer_norm_no_float32_upcast",
        "xf = x.float() if low else x",
        "xf = x",
        "layer norm",
        hint="LayerNorm computes float16 input in float16 instead of float32?",
    ),
    Mutant(
        "layer_norm_centers_in_place",
        "centered = xf - xf.mean(dim=-1, keepdim=True)",
        "centered = xf.sub_(xf.mean(dim=-1, keepdim=True))",
        "layer norm",
        hint="layer_norm subtracts the mean from x in place (sub_ on the input)?",
    ),
    Mutant(
        "layer_norm_variance_detached",
        VAR,
        VAR + ".detach()",
        "layer norm",
        hint="LayerNorm's variance detached, so gradients miss its dependence on x?",
    ),
    # edge cases
    Mutant(
        "rms_view_needs_contiguous",
        "h = x.to(compute)",
        "h = x.to(compute).view(-1, x.shape[-1]).view(x.shape)",
        "edge cases",
        hint=".view on x, which fails for a non-contiguous input (use reshape)?",
    ),
    Mutant(
        "rms_weight_as_a_row",
        RETURN,
        "return (y * weight.to(compute)[None, :]).to(x.dtype)",
        "edge cases",
        hint="weight broadcast as a [1, d] row, which adds an axis to a single vector [d]?",
    ),
    Mutant(
        "layer_norm_mean_in_float32",
        "centered = xf - xf.mean(dim=-1, keepdim=True)",
        "centered = xf - xf.mean(dim=-1, keepdim=True, dtype=torch.float32)",
        "edge cases",
        hint="LayerNorm's row mean accumulated in float32, even for float64 x (rows far from "
        "zero lose their digits)?",
    ),
    Mutant(
        "rms_weight_cast_in_place",
        RMS_FORWARD,
        "self.weight.data = self.weight.data.to(x.dtype)\n        " + RMS_FORWARD,
        "edge cases",
        hint="RMSNorm.forward casts its own weight to x's dtype (self.weight.data = ...), so "
        "later calls use the rounded weight?",
    ),
    Mutant(
        "layer_norm_one_pass_variance",
        VAR,
        "var = xf.pow(2).mean(dim=-1, keepdim=True) - xf.mean(dim=-1, keepdim=True).pow(2)",
        "edge cases",
        hint="variance as E[x^2] - E[x]^2, which cancels for rows far from zero?",
    ),
]

VARIANTS = [
    # the scaffold filled in by someone who had read only the scaffold (not this solution)
    Variant("independent", notebook="variants/independent.ipynb"),
    # LayerNorm as RMSNorm of the centred row, through the notebook's own rms_norm: a name
    # torch also has, called at run time, must not count as the built-in
    Variant(
        "layer_norm_through_own_rms_norm",
        AFFINE,
        """    out = rms_norm(centered, weight.to(xf.dtype), eps)
    if bias is not None:
        out = out + bias.to(xf.dtype)
    return out.to(x.dtype)""",
    ),
    Variant(
        "var_mean_and_divide_by_sqrt",
        "    centered = xf - xf.mean(dim=-1, keepdim=True)\n    " + VAR,
        "    var, mean = torch.var_mean(xf, dim=-1, correction=0, keepdim=True)\n"
        "    centered = xf - mean",
    ),
    Variant("divide_by_sqrt", SCALE, "y = h / torch.sqrt(ms + eps)"),
    Variant(
        "einops_reduce",
        MS,
        "import einops\n\n    ms = einops.reduce(h * h, '... d -> ... 1', 'mean')",
    ),
]
