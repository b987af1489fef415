"""The corpus of adamw: single-bug copies of solutions/adamw.ipynb, each with the level
where it first loses points, and correct variants that keep full marks.

Mutant(name, old, new, level, hint=...): `old` is found exactly once in the solution's
code and replaced by `new`.
"""

from grader.suite.corpus import Mutant, Variant

MIN_MUTANTS = 15

IN = " " * 20  # the indentation of the per-parameter update

UPDATE = (
    f"p.mul_(1 - lr * weight_decay)\n"
    f"{IN}m.mul_(beta1).add_(g, alpha=1 - beta1)\n"
    f"{IN}v.mul_(beta2).addcmul_(g, g, value=1 - beta2)\n"
    f"{IN}bias_correction1 = 1 - beta1**t\n"
    f"{IN}bias_correction2 = 1 - beta2**t\n"
    f"{IN}denom = (v.sqrt() / math.sqrt(bias_correction2)).add_(eps)\n"
    f"{IN}p.addcdiv_(m, denom, value=-lr / bias_correction1)"
)
ADAM_ONLY = UPDATE.split("\n", 1)[1].lstrip()  # the update without the decay line
COUNT = f'state["step"] += 1\n{IN}t = state["step"]'
SKIP = f"if p.grad is None:\n{IN}    continue\n{IN}g = p.grad"
HYPER = 'lr, eps, weight_decay = group["lr"], group["eps"], group["weight_decay"]'
DENOM = "denom = (v.sqrt() / math.sqrt(bias_correction2)).add_(eps)"
SUBCLASS = '''class AdamW(torch.optim.AdamW):
    """torch's AdamW, renamed."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)

    def step(self, closure=None):
        return super().step(closure)


class Unused(torch.optim.Optimizer):'''

MUTANTS = [
    # api
    Mutant(
        "rebinds_not_in_place",
        "p.mul_(1 - lr * weight_decay)",
        "p = p * (1 - lr * weight_decay)",
        "api",
        hint="the parameter rebound (p = p * ...) instead of updated in place?",
        values=True,
    ),
    Mutant(
        "no_torch_no_grad",
        "with torch.no_grad():",
        "if True:",
        "api",
        hint="parameters updated in place without torch.no_grad()?",
        values=True,
    ),
    Mutant(
        "global_step_counter",
        COUNT,
        f'self.t = getattr(self, "t", 0) + 1\n{IN}state["step"] = t = self.t',
        "api",
        hint="one step counter shared by all parameters instead of one per parameter?",
    ),
    Mutant(
        "step_read_before_increment",
        COUNT,
        f't = state["step"]\n{IN}state["step"] += 1',
        "api",
        hint="bias correction computed with t = 0 at the first update (1 - beta^0 = 0)?",
        values=True,
    ),
    Mutant(
        "decays_parameters_without_grad",
        f"if p.grad is None:\n{IN}    continue\n",
        f"if p.grad is None:\n{IN}    p.mul_(1 - lr * weight_decay)\n{IN}    continue\n",
        "api",
        hint="weight decay applied to parameters whose grad is None?",
    ),
    Mutant(
        "missing_grad_as_zeros",
        SKIP,
        "g = p.grad if p.grad is not None else torch.zeros_like(p)",
        "api",
        hint="a missing gradient (grad None) treated as zeros instead of skipped?",
    ),
    Mutant(
        "default_weight_decay_zero",
        "eps=1e-8, weight_decay=1e-2):",
        "eps=1e-8, weight_decay=0.0):",
        "api",
        hint="weight_decay defaults to 0 (Adam's default) instead of 1e-2?",
    ),
    Mutant(
        "closure_never_called",
        "if closure is not None:",
        "if False:",
        "api",
        hint="step(closure) never calls the closure (and returns None, not its loss)?",
    ),
    Mutant(
        "closure_under_no_grad",
        "        if closure is not None:\n"
        "            with torch.enable_grad():\n"
        "                loss = closure()\n"
        "        with torch.no_grad():\n",
        "        with torch.no_grad():\n"
        "            if closure is not None:\n"
        "                loss = closure()\n",
        "api",
        hint="the closure called under torch.no_grad(), where it cannot compute gradients?",
    ),
    Mutant(
        "zeroes_the_gradient",
        "p.addcdiv_(m, denom, value=-lr / bias_correction1)",
        f"p.addcdiv_(m, denom, value=-lr / bias_correction1)\n{IN}p.grad.zero_()",
        "api",
        hint="step() zeroes p.grad (that is the caller's zero_grad)?",
    ),
    # first step
    Mutant(
        "zero_weight_decay_means_default",
        HYPER,
        'lr, eps, weight_decay = group["lr"], group["eps"], group["weight_decay"] or 1e-2',
        "first step",
        hint="weight_decay=0 taken for the default 1e-2 (a falsy `or`)?",
    ),
    Mutant(
        "no_bias_correction",
        f"bias_correction1 = 1 - beta1**t\n{IN}bias_correction2 = 1 - beta2**t",
        "bias_correction1 = bias_correction2 = 1.0",
        "first step",
        hint="no bias correction of m and v (divide by 1 - beta1^t and 1 - beta2^t)?",
        values=True,
    ),
    Mutant(
        "betas_swapped",
        'beta1, beta2 = group["betas"]',
        'beta2, beta1 = group["betas"]',
        "first step",
        hint="betas unpacked in the wrong order (beta2 for m, beta1 for v)?",
        values=True,
    ),
    Mutant(
        "betas_hard_coded",
        'beta1, beta2 = group["betas"]',
        "beta1, beta2 = 0.9, 0.999",
        "first step",
        hint="betas hard-coded as (0.9, 0.999) instead of read from the param group?",
    ),
    Mutant(
        "ema_weights_swapped",
        "m.mul_(beta1).add_(g, alpha=1 - beta1)",
        "m.mul_(1 - beta1).add_(g, alpha=beta1)",
        "first step",
        hint="first moment as (1 - beta1)*m + beta1*g: the average's weights swapped?",
        values=True,
    ),
    # bias correction
    Mutant(
        "m_forgets_the_past",
        "m.mul_(beta1).add_(g, alpha=1 - beta1)",
        "m.copy_((1 - beta1) * g)",
        "bias correction",
        hint="exp_avg set to (1 - beta1)*g each step, without beta1 * the old m?",
        values=True,
    ),
    Mutant(
        "v_uses_abs",
        "v.mul_(beta2).addcmul_(g, g, value=1 - beta2)",
        "v.mul_(beta2).add_(g.abs(), alpha=1 - beta2)",
        "bias correction",
        hint="second moment averages |g| instead of g²?",
        values=True,
    ),
    # decoupled decay
    Mutant(
        "l2_in_the_gradient",
        "p.mul_(1 - lr * weight_decay)",
        "g = g.add(p, alpha=weight_decay)",
        "decoupled decay",
        hint="weight decay added to the gradient (L2, Adam's) instead of decoupled?",
    ),
    Mutant(
        "decay_without_lr",
        "p.mul_(1 - lr * weight_decay)",
        "p.mul_(1 - weight_decay)",
        "decoupled decay",
        hint="decay by (1 - weight_decay), without lr?",
    ),
    Mutant(
        "decay_scaled_by_alpha_t",
        "p.mul_(1 - lr * weight_decay)",
        "p.mul_(1 - lr * math.sqrt(1 - beta2**t) / (1 - beta1**t) * weight_decay)",
        "decoupled decay",
        hint="decay scaled by the bias-corrected step size alpha_t instead of lr?",
    ),
    Mutant(
        "no_eps",
        DENOM,
        "denom = v.sqrt() / math.sqrt(bias_correction2)",
        "decoupled decay",
        hint="eps left out of the denominator (0/0 for a gradient of zeros)?",
    ),
    # lockstep
    Mutant(
        "decay_after_the_adam_step",
        UPDATE,
        f"{ADAM_ONLY}\n{IN}p.mul_(1 - lr * weight_decay)",
        "lockstep",
        hint="weight decay applied after the Adam step, to the updated parameter?",
    ),
    Mutant(
        "hyperparameters_from_defaults",
        HYPER,
        'lr, eps, weight_decay = (self.defaults[k] for k in ("lr", "eps", "weight_decay"))',
        "lockstep",
        hint="lr, eps and weight_decay read from self.defaults, not from each param group?",
    ),
    Mutant(
        "lr_fixed_at_first_step",
        HYPER,
        'lr, eps, weight_decay = group.setdefault("initial_lr", group["lr"]), group["eps"], '
        'group["weight_decay"]',
        "lockstep",
        hint="lr read once (at a group's first step), so a scheduler's change of "
        "param_groups[i]['lr'] between steps has no effect?",
    ),
    # eps placement
    Mutant(
        "eps_inside_the_sqrt",
        DENOM,
        "denom = (v / bias_correction2).add_(eps).sqrt()",
        "eps placement",
        hint="eps added inside the square root, sqrt(v_hat + eps)?",
    ),
    Mutant(
        "eps_before_bias_correction",
        DENOM,
        "denom = (v.sqrt() + eps) / math.sqrt(bias_correction2)",
        "eps placement",
        hint="eps added to sqrt(v) before the bias correction (Kingma-Ba's efficient form)?",
    ),
    Mutant(
        "eps_hard_coded",
        HYPER,
        'lr, eps, weight_decay = group["lr"], 1e-8, group["weight_decay"]',
        "eps placement",
        hint="eps hard-coded as 1e-8 instead of read from the param group?",
    ),
    # edge cases
    Mutant(
        "state_in_default_dtype",
        f'state["exp_avg"] = torch.zeros_like(p)\n{IN}    state["exp_avg_sq"] = torch.zeros_like(p)',
        f'state["exp_avg"] = torch.zeros(p.shape)\n{IN}    state["exp_avg_sq"] = torch.zeros(p.shape)',
        "edge cases",
        hint="exp_avg / exp_avg_sq created in the default dtype, not the parameter's?",
    ),
    Mutant(
        "zero_lr_means_default",
        HYPER,
        'lr, eps, weight_decay = group["lr"] or 1e-3, group["eps"], group["weight_decay"]',
        "edge cases",
        hint="lr = 0 replaced by a default (a falsy `or`)?",
    ),
    Mutant(
        "float32_parameter_update",
        "p.mul_(1 - lr * weight_decay)",
        "p.copy_(p.float().mul_(1 - lr * weight_decay))",
        "edge cases",
        hint="the parameter goes through float32 (p.float()) in the update, which rounds a "
        "float64 parameter?",
    ),
    Mutant(
        "decay_through_view",
        "p.mul_(1 - lr * weight_decay)",
        "p.view(-1).mul_(1 - lr * weight_decay)",
        "edge cases",
        hint="the parameter updated through p.view(-1), which fails for a non-contiguous "
        "parameter?",
    ),
    # from scratch
    Mutant(
        "subclasses_torch_adamw",
        "class AdamW(torch.optim.Optimizer):",
        SUBCLASS,
        "from scratch",
        hint="torch.optim.AdamW subclassed, its step() reached through super()?",
    ),
    Mutant(
        "functional_adamw",
        UPDATE,
        "torch.optim._functional.adamw([p], [g], [m], [v], [], [torch.tensor(float(t - 1))], "
        "amsgrad=False, beta1=beta1, beta2=beta2, lr=lr, weight_decay=weight_decay, "
        "eps=eps, maximize=False)",
        "from scratch",
        hint="the update done by torch.optim._functional.adamw, the functional AdamW?",
    ),
    Mutant(
        "fused_adamw",
        UPDATE,
        "torch._fused_adamw_([p], [g], [m], [v], [], [torch.tensor(float(t))], lr=lr, "
        "beta1=beta1, beta2=beta2, weight_decay=weight_decay, eps=eps, amsgrad=False, "
        "maximize=False)",
        "from scratch",
        hint="the update done by torch._fused_adamw_?",
    ),
]

VARIANTS = [
    # the scaffold filled in by someone who had read only the scaffold (not this solution)
    Variant("independent", notebook="variants/independent.ipynb"),
    Variant(
        "bias_corrected_moments",
        UPDATE,
        f"p.mul_(1 - lr * weight_decay)\n"
        f"{IN}m.lerp_(g, 1 - beta1)\n"
        f"{IN}v.mul_(beta2).add_((1 - beta2) * g * g)\n"
        f"{IN}m_hat = m / (1 - beta1**t)\n"
        f"{IN}v_hat = v / (1 - beta2**t)\n"
        f"{IN}p.sub_(lr * m_hat / (v_hat.sqrt() + eps))",
    ),
    Variant(
        "tensor_step_count",
        f'state["step"] = 0\n{IN}    state["exp_avg"] = torch.zeros_like(p)\n'
        f'{IN}    state["exp_avg_sq"] = torch.zeros_like(p)\n{IN}{COUNT}',
        f'state["step"] = torch.tensor(0.0)\n'
        f'{IN}    state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)\n'
        f'{IN}    state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)\n'
        f'{IN}state["step"] += 1\n{IN}t = state["step"].item()',
    ),
    Variant("foreach_helpers_named_adamw", notebook="variants/foreach_adamw.ipynb"),
]
