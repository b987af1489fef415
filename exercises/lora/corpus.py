"""The corpus of lora: single-bug copies of solutions/lora.ipynb (EXERCISES_CANON.md §3's
classic bugs and more), each with the level where it first loses points, and correct variants
that keep full marks.

Mutant(name, old, new, level, hint=..., values=False): `old` is found exactly once in the
solution's code and replaced by `new`.
"""

from grader.suite.corpus import Mutant, Variant

MIN_MUTANTS = 38

IN8 = " " * 8  # the indentation inside a method
SCALING = "self.scaling = alpha / math.sqrt(r) if use_rslora else alpha / r"
INIT = (
    "self.lora_A = nn.Parameter(torch.empty(r, base.in_features, **like))\n"
    f"{IN8}self.lora_B = nn.Parameter(torch.zeros(base.out_features, r, **like))\n"
    f"{IN8}nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))"
)
KAIMING = "nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))"
DROPOUT = "h = F.dropout(x, self.dropout, self.training)"
LORA = "return y + (h @ self.lora_A.T) @ self.lora_B.T * self.scaling"
MERGE = f"with torch.no_grad():\n{IN8}    self.base.weight.add_(self.delta_weight())"
TRAIN_MERGES = """def train(self, mode: bool = True):
        super().train(mode)
        if mode:
            self.unmerge()
        else:
            self.merge()
        return self

    def delta_weight(self) -> torch.Tensor:"""

MUTANTS = [
    # parameters
    Mutant(
        "lora_A_transposed",
        "torch.empty(r, base.in_features, **like)",
        "torch.empty(base.in_features, r, **like)",
        "parameters",
        hint="lora_A of shape (in_features, r) instead of (r, in_features)?",
        values=True,
    ),
    Mutant(
        "base_not_frozen",
        f"for p in self.base.parameters():\n{IN8}    p.requires_grad_(False)",
        "pass",
        "parameters",
        hint="the base layer left trainable (set requires_grad=False on its weight and bias)?",
    ),
    Mutant(
        "fresh_base_layer",
        "self.base = base",
        "self.base = nn.Linear(base.in_features, base.out_features)",
        "parameters",
        hint="a new nn.Linear created instead of wrapping the given layer?",
        values=True,
    ),
    Mutant(
        "rank_zero_allowed",
        "if r < 1:",
        "if r < 0:",
        "parameters",
        hint="r = 0 accepted instead of raising ValueError?",
    ),
    Mutant(
        "rank_checked_by_truth",
        "if r < 1:",
        "if not r:",
        "parameters",
        hint="r checked with `if not r`, so a negative r does not raise ValueError?",
    ),
    # init
    Mutant(
        "init_swapped",
        INIT,
        "self.lora_A = nn.Parameter(torch.zeros(r, base.in_features, **like))\n"
        f"{IN8}self.lora_B = nn.Parameter(torch.empty(base.out_features, r, **like))\n"
        f"{IN8}nn.init.kaiming_uniform_(self.lora_B, a=math.sqrt(5))",
        "init",
        hint="A initialised to zeros and B at random (it is the other way round)?",
    ),
    Mutant(
        "A_kaiming_default_gain",
        KAIMING,
        "nn.init.kaiming_uniform_(self.lora_A)",
        "init",
        hint="kaiming_uniform_ without a=sqrt(5) (bound sqrt(6/in) instead of 1/sqrt(in))?",
    ),
    Mutant(
        "A_standard_normal",
        KAIMING,
        "nn.init.normal_(self.lora_A)",
        "init",
        hint="lora_A drawn from a standard normal instead of kaiming_uniform_(a=sqrt(5))?",
    ),
    Mutant(
        "B_small_random",
        "torch.zeros(base.out_features, r, **like)",
        "0.01 * torch.randn(base.out_features, r, **like)",
        "init",
        hint="lora_B initialised with small random values instead of zeros?",
    ),
    # values
    Mutant(
        "scaling_alpha_only",
        SCALING,
        "self.scaling = alpha / math.sqrt(r) if use_rslora else alpha",
        "values",
        hint="scaling = alpha instead of alpha / r?",
        values=True,
    ),
    Mutant(
        "scaling_r_over_alpha",
        SCALING,
        "self.scaling = alpha / math.sqrt(r) if use_rslora else r / alpha",
        "values",
        hint="scaling = r / alpha instead of alpha / r?",
        values=True,
    ),
    Mutant(
        "rslora_always",
        SCALING,
        "self.scaling = alpha / math.sqrt(r)",
        "values",
        hint="scaling alpha / sqrt(r) (rsLoRA) even without use_rslora?",
        values=True,
    ),
    Mutant(
        "rslora_ignored",
        SCALING,
        "self.scaling = alpha / r",
        "values",
        hint="use_rslora=True ignored (scaling alpha / sqrt(r))?",
    ),
    Mutant(
        "zero_alpha_means_default",
        "alpha = r if alpha is None else alpha",
        "alpha = alpha or r",
        "values",
        hint="alpha = 0.0 taken for the default (a falsy `alpha or r`)?",
    ),
    Mutant(
        "alpha_defaults_to_one",
        "alpha = r if alpha is None else alpha",
        "alpha = 1.0 if alpha is None else alpha",
        "values",
        hint="alpha=None taken as 1 instead of r (scaling 1)?",
    ),
    Mutant(
        "delta_weight_transposed",
        "return self.scaling * (self.lora_B @ self.lora_A)",
        "return self.scaling * (self.lora_A.T @ self.lora_B.T)",
        "values",
        hint="delta_weight() of shape (in, out): (B @ A) transposed?",
    ),
    Mutant(
        "delta_weight_without_scaling",
        "return self.scaling * (self.lora_B @ self.lora_A)",
        "return self.lora_B @ self.lora_A",
        "values",
        hint="delta_weight() without the scaling (B @ A alone)?",
    ),
    Mutant(
        "bias_added_by_hand",
        "y = self.base(x)",
        "y = x @ self.base.weight.T + self.base.bias",
        "values",
        hint="the base layer computed by hand, adding a bias that may be None?",
    ),
    # dropout
    Mutant(
        "dropout_on_the_base_path",
        "y = self.base(x)",
        "y = self.base(F.dropout(x, self.dropout, self.training))",
        "dropout",
        hint="dropout applied to the base layer's input too (it is for the LoRA path only)?",
    ),
    Mutant(
        "dropout_on_the_output",
        f"{DROPOUT}\n{IN8}{LORA}",
        f"lora = (x @ self.lora_A.T) @ self.lora_B.T * self.scaling\n"
        f"{IN8}return y + F.dropout(lora, self.dropout, self.training)",
        "dropout",
        hint="dropout applied to the LoRA path's output instead of its input x?",
    ),
    Mutant(
        "dropout_not_rescaled",
        DROPOUT,
        f"{DROPOUT}\n{IN8}h = h * (1 - self.dropout) if self.training else h",
        "dropout",
        hint="kept entries not divided by 1 - dropout (inverted dropout)?",
    ),
    Mutant(
        "dropout_in_eval_mode",
        DROPOUT,
        "h = F.dropout(x, self.dropout)",
        "dropout",
        hint="F.dropout without training=self.training, so it drops in eval mode too?",
    ),
    Mutant(
        "zero_dropout_means_default",
        "self.dropout = dropout",
        "self.dropout = dropout or 0.1",
        "values",
        hint="dropout = 0.0 (the default) taken for another value (a falsy `dropout or ...`)?",
        values=True,
    ),
    # gradients
    Mutant(
        "lora_A_detached",
        LORA,
        "return y + (h @ self.lora_A.detach().T) @ self.lora_B.T * self.scaling",
        "gradients",
        hint="lora_A detached in forward, so it gets no gradient?",
    ),
    Mutant(
        "x_detached_on_the_lora_path",
        DROPOUT,
        "h = F.dropout(x.detach(), self.dropout, self.training)",
        "gradients",
        hint="x detached on the LoRA path, so x's gradient misses the update?",
    ),
    # merge
    Mutant(
        "merge_without_scaling",
        "self.base.weight.add_(self.delta_weight())",
        "self.base.weight.add_(self.lora_B @ self.lora_A)",
        "merge",
        hint="merge() adds B @ A without the scaling?",
    ),
    Mutant(
        "merge_transposed",
        "self.base.weight.add_(self.delta_weight())",
        "self.base.weight.add_(self.delta_weight().T)",
        "merge",
        hint="merge() adds the update transposed ((in, out) instead of (out, in))?",
    ),
    Mutant(
        "merged_forward_adds_the_path",
        f"if self.merged:\n{IN8}    return y\n{IN8}",
        "",
        "merge",
        hint="forward adds the LoRA path even when merged (the update counted twice)?",
    ),
    Mutant(
        "merge_not_idempotent",
        f"if self.merged:\n{IN8}    return\n{IN8}with",
        "with",
        "merge",
        hint="merge() on a merged layer adds the update again?",
    ),
    Mutant(
        "merge_forgets_the_flag",
        f"add_(self.delta_weight())\n{IN8}self.merged = True",
        "add_(self.delta_weight())",
        "merge",
        hint="merge() does not set merged = True, so forward still adds the LoRA path?",
    ),
    Mutant(
        "unmerge_adds",
        "self.base.weight.sub_(self.delta_weight())",
        "self.base.weight.add_(self.delta_weight())",
        "merge",
        hint="unmerge() adds delta_weight() instead of subtracting it?",
    ),
    Mutant(
        "unmerge_unguarded",
        f"if not self.merged:\n{IN8}    return\n{IN8}",
        "",
        "merge",
        hint="unmerge() subtracts the update even when the layer is not merged?",
    ),
    Mutant(
        "unmerge_keeps_the_flag",
        f"sub_(self.delta_weight())\n{IN8}self.merged = False",
        "sub_(self.delta_weight())",
        "merge",
        hint="unmerge() leaves merged = True, so forward skips the LoRA path?",
    ),
    Mutant(
        "merge_without_no_grad",
        MERGE,
        "self.base.weight.add_(self.delta_weight())",
        "merge",
        hint="merge() outside torch.no_grad(), so the merged weight keeps A's and B's graph?",
    ),
    Mutant(
        "base_copied",
        "self.base = base",
        "self.base = nn.Linear(base.in_features, base.out_features, bias=base.bias is not None,"
        " dtype=base.weight.dtype)\n"
        f"{IN8}self.base.load_state_dict(base.state_dict())",
        "merge",
        hint="self.base a copy of the given layer, so merge() does not write into it?",
    ),
    # robustness
    Mutant(
        "eval_merges",
        "def delta_weight(self) -> torch.Tensor:",
        TRAIN_MERGES,
        "robustness",
        hint="eval() merges and train() unmerges (loralib's merge_weights), changing base.weight?",
    ),
    Mutant(
        "flattened_with_view",
        "(h @ self.lora_A.T)",
        "(h.view(-1, h.shape[-1]) @ self.lora_A.T).view(*h.shape[:-1], -1)",
        "robustness",
        hint="x flattened with .view, which fails on a non-contiguous x (use reshape)?",
    ),
    Mutant(
        "lora_path_in_float32",
        LORA,
        "return y + ((h.float() @ self.lora_A.float().T) @ self.lora_B.float().T"
        " * self.scaling).to(x.dtype)",
        "robustness",
        hint="the LoRA path computed in float32, losing float64 precision?",
    ),
    Mutant(
        "dropout_in_place",
        DROPOUT,
        "h = F.dropout(x, self.dropout, self.training, inplace=True)",
        "robustness",
        hint="dropout applied in place (inplace=True), changing the caller's x?",
    ),
    Mutant(
        "adapters_in_the_default_dtype",
        'like = {"dtype": base.weight.dtype, "device": base.weight.device}',
        'like = {"device": base.weight.device}',
        "parameters",
        hint="lora_A and lora_B made in the default dtype (float32), not base.weight's?",
    ),
]

VARIANTS = [
    Variant(
        "linear_calls",
        LORA,
        "return y + self.scaling * F.linear(F.linear(h, self.lora_A), self.lora_B)",
    ),
    Variant(
        "einsum",
        LORA,
        'return y + torch.einsum("...i,ri,or->...o", h, self.lora_A, self.lora_B) * self.scaling',
    ),
    Variant("product_first", LORA, "return y + h @ (self.scaling * self.lora_B @ self.lora_A).T"),
    Variant(
        "dropout_module",
        DROPOUT,
        "h = nn.Dropout(self.dropout).train(self.training)(x)",
    ),
    Variant(
        "hand_made_dropout",
        DROPOUT,
        "h = x\n"
        f"{IN8}if self.training and self.dropout > 0:\n"
        f"{IN8}    keep = torch.rand_like(x) >= self.dropout\n"
        f"{IN8}    h = x * keep / (1 - self.dropout)",
    ),
    Variant(
        "uniform_init",
        KAIMING,
        f"bound = 1 / math.sqrt(base.in_features)\n{IN8}nn.init.uniform_(self.lora_A, -bound, bound)",
    ),
    Variant("merge_through_data", MERGE, "self.base.weight.data += self.delta_weight().detach()"),
    # written by someone who had read only the scaffold
    Variant("independent", notebook="variants/independent.ipynb"),
]
