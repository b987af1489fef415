"""The corpus of mlp_backward: single-bug copies of solutions/mlp_backward.ipynb (the classic
bugs of EXERCISES_CANON.md section 1, and more), each with the level where it must first
lose points and the hint the card asks, and correct variants that keep full marks.

`values=True` marks a bug in what every gradient check compares (a transposed or
misshapen gradient, dz without its 1/N or its one-hot, the ReLU mask left out): it may lose
points at every level. Not in the corpus, because they compute the same function: the ReLU
mask taken from the activation (`a > 0` iff `h > 0`: a variant below), a max shift taken
with or without `keepdim` and then broadcast.
"""

from grader.suite.corpus import Mutant, Variant

MIN_MUTANTS = 36

KEYS = '("x", "W1", "b1", "W2", "b2")'
LOSS = "loss = -logp[rows, yf].mean()"
SCALE_DZ = "dz = dz * (dloss / n)"
RELU_MASK = "dh = da * (h > 0)  # ReLU'(0) = 0"
LOGP = "logp = shifted - shifted.exp().sum(dim=-1, keepdim=True).log()"
SHIFT = "shifted = z - z.amax(dim=-1, keepdim=True)"
GELU = "a = 0.5 * h * (1 + torch.erf(h / math.sqrt(2)))"
P = '"p": logp.exp(),  # softmax(z), from the stable log-probabilities'
CLONE = 'dz = cache["p"].clone()  # a copy: the cache stays as it was'
ONE_HOT = "    dz[torch.arange(n, device=y.device), y] -= 1  # softmax minus the one-hot labels\n"
FIRST_BACKWARD_LINE = 'x, W1, W2, h, a, y = (cache[k] for k in ("x", "W1", "W2", "h", "a", "y"))'
# mlp_backward recomputed through autograd: the loss of a fresh forward on leaves that
# require grad (the cache holds every input)
RERUN = f"""leaves = [cache[k].detach().clone().requires_grad_() for k in {KEYS}]
    again, _ = mlp_forward(*leaves, cache["y"], cache["activation"])"""

MUTANTS = [
    # -- shapes
    Mutant(
        "dW2_not_transposed",
        "dW2 = dz.T @ a",
        "dW2 = a.T @ dz",
        "shapes",
        hint="the gradient of W2 computed as a.T @ dz, shape (H, C) instead of W2's (C, H)?",
        values=True,
    ),
    Mutant(
        "db2_over_the_classes",
        "db2 = dz.sum(dim=0)",
        "db2 = dz.sum(dim=1)",
        "shapes",
        hint="the gradient of b2 summed over the classes (dim=1) instead of the examples?",
        values=True,
    ),
    Mutant(
        "dx_with_W1_transposed",
        "dx = (dh @ W1)",
        "dx = (dh @ W1.T)",
        "shapes",
        hint="the gradient of x computed with W1.T (dh @ W1 is right for W1 of shape (H, D))?",
        values=True,
    ),
    Mutant(
        "dW1_uses_the_activation",
        "dW1 = dh.T @ x",
        "dW1 = dh.T @ a",
        "shapes",
        hint="the gradient of W1 multiplies dh by the activation a instead of the input x?",
        values=True,
    ),
    Mutant(
        "one_hot_index_swapped",
        "dz[torch.arange(n, device=y.device), y] -= 1",
        "dz[y, torch.arange(n, device=y.device)] -= 1",
        "shapes",
        hint="the one-hot subtracted at dz[y, rows] instead of dz[rows, y]?",
        values=True,
    ),
    Mutant(
        "loss_not_reduced",
        LOSS,
        "loss = -logp[rows, yf]",
        "shapes",
        hint="the loss returned per example (shape (N,)) instead of their mean, a 0-dim tensor?",
        values=True,
    ),
    Mutant(
        "gradient_keys_named_dx",
        '{"x": dx, "W1": dW1, "b1": db1, "W2": dW2, "b2": db2}',
        '{"dx": dx, "dW1": dW1, "db1": db1, "dW2": dW2, "db2": db2}',
        "shapes",
        hint='the gradients keyed "dx", "dW1", ... instead of the inputs\' names "x", "W1", ...?',
        values=True,
    ),
    Mutant(
        "computes_in_float32",
        "    xf = x.reshape(-1, x.shape[-1])",
        "    x, W1, b1, W2, b2 = (t.float() for t in (x, W1, b1, W2, b2))\n"
        "    xf = x.reshape(-1, x.shape[-1])",
        "shapes",
        hint="the inputs cast to float32, so float64 inputs give a float32 loss and gradients?",
    ),
    # -- forward
    Mutant(
        "sum_not_mean_loss",
        LOSS,
        "loss = -logp[rows, yf].sum()",
        "forward",
        hint="the loss summed over the examples instead of averaged?",
        values=True,
    ),
    Mutant(
        "b2_left_out",
        "z = a @ W2.T + b2",
        "z = a @ W2.T",
        "forward",
        hint="the output bias b2 left out of the logits?",
        values=True,
    ),
    Mutant(
        "normalised_over_the_batch",
        LOGP,
        "logp = shifted - shifted.exp().sum(dim=0, keepdim=True).log()",
        "forward",
        hint="the softmax normalised over the examples (dim=0) instead of the classes?",
        values=True,
    ),
    # -- output layer
    Mutant(
        "missing_division_by_N",
        SCALE_DZ,
        "dz = dz * dloss",
        "output layer",
        hint="dz = softmax - onehot not divided by N (the loss is a mean over the examples)?",
        values=True,
    ),
    Mutant(
        "no_one_hot_subtraction",
        ONE_HOT,
        "",
        "output layer",
        hint="dz = softmax(z) / N without subtracting the one-hot labels?",
        values=True,
    ),
    Mutant(
        "dW2_uses_the_pre_activation",
        "dW2 = dz.T @ a",
        "dW2 = dz.T @ h",
        "output layer",
        hint="the gradient of W2 uses the pre-activation h instead of the activation a?",
        values=True,
    ),
    Mutant(
        "dloss_ignored",
        SCALE_DZ,
        "dz = dz / n",
        "output layer",
        hint="the upstream gradient dloss never multiplies the gradients?",
    ),
    Mutant(
        "dloss_zero_taken_for_the_default",
        SCALE_DZ,
        "dz = dz * ((dloss or 1.0) / n)",
        "output layer",
        hint="dloss=0.0 taken for the default 1.0 (`dloss or 1.0`), so the gradients are not 0?",
    ),
    # -- hidden layer
    Mutant(
        "relu_gradient_at_zero",
        RELU_MASK,
        "dh = da * (h >= 0)",
        "hidden layer",
        hint="the ReLU mask h >= 0 passes gradient where h is exactly 0 (ReLU'(0) = 0)?",
    ),
    Mutant(
        "relu_mask_left_out",
        RELU_MASK,
        "dh = da",
        "hidden layer",
        hint="the ReLU's backward without its mask (h > 0): gradient flows where h < 0?",
        values=True,
    ),
    Mutant(
        "db1_from_before_the_mask",
        "db1 = dh.sum(dim=0)",
        "db1 = da.sum(dim=0)",
        "hidden layer",
        hint="the gradient of b1 summed from da, before the activation's derivative?",
        values=True,
    ),
    # -- gelu
    Mutant(
        "gelu_tanh_approximation",
        GELU,
        "a = 0.5 * h * (1 + torch.tanh(math.sqrt(2 / math.pi) * (h + 0.044715 * h**3)))",
        "gelu",
        hint="GELU's tanh approximation instead of the exact erf form?",
    ),
    Mutant(
        "gelu_gradient_without_the_density_term",
        "dh = da * (cdf + h * pdf)",
        "dh = da * cdf",
        "gelu",
        hint="GELU's derivative taken as Phi(h) alone, without the h * phi(h) term?",
    ),
    # -- edge cases
    Mutant(
        "dx_not_reshaped",
        '(dh @ W1).reshape(cache["shape"])',
        "(dh @ W1)",
        "edge cases",
        hint="the gradient of a (B, T, D) x returned flat, (B*T, D), not in x's shape?",
    ),
    Mutant(
        "loss_divided_by_the_batch_size",
        LOSS,
        "loss = -logp[rows, yf].sum() / x.shape[0]",
        "edge cases",
        hint="for x of shape (B, T, D) the loss divided by B instead of the B*T positions?",
    ),
    Mutant(
        "unknown_activation_accepted",
        '    if activation not in ("relu", "gelu"):\n'
        "        raise ValueError(f\"activation must be 'relu' or 'gelu', got {activation!r}\")\n",
        "",
        "edge cases",
        hint='an unknown activation (neither "relu" nor "gelu") does not raise ValueError?',
    ),
    # -- robustness
    Mutant(
        "no_max_shift",
        SHIFT,
        "shifted = z",
        "robustness",
        hint="exp of the raw logits, without subtracting each row's maximum (overflows)?",
    ),
    Mutant(
        "shift_by_the_batch_maximum",
        SHIFT,
        "shifted = z - z.max()",
        "robustness",
        hint="the logits shifted by the batch's maximum, not each row's (rows far below it underflow)?",
    ),
    Mutant(
        "unstable_probabilities_for_the_backward",
        P,
        '"p": z.exp() / z.exp().sum(dim=-1, keepdim=True),',
        "robustness",
        hint="the softmax kept for the backward pass computed without the max shift (overflows)?",
    ),
    Mutant(
        "x_flattened_with_view",
        "xf = x.reshape(-1, x.shape[-1])",
        "xf = x.view(-1, x.shape[-1])",
        "robustness",
        hint="x flattened with .view, which fails on a non-contiguous x (use reshape)?",
    ),
    Mutant(
        "y_flattened_with_view",
        "yf = y.reshape(-1)",
        "yf = y.view(-1)",
        "robustness",
        hint="y flattened with .view, which fails on non-contiguous labels (use reshape)?",
    ),
    Mutant(
        "bias_unsqueezed_in_place",
        "h = xf @ W1.T + b1",
        "h = xf @ W1.T + b1.unsqueeze_(0)",
        "robustness",
        hint="b1 reshaped in place (unsqueeze_), changing the caller's tensor?",
    ),
    Mutant(
        "cached_softmax_changed_in_place",
        CLONE,
        'dz = cache["p"]',
        "robustness",
        hint="the one-hot subtracted from the cached softmax in place, so a second backward differs?",
    ),
    # -- from scratch
    Mutant(
        "autograd_grad",
        FIRST_BACKWARD_LINE,
        f"""{RERUN}
    grads = torch.autograd.grad(again * dloss, leaves)
    grads = dict(zip({KEYS}, grads))
    grads["x"] = grads["x"].reshape(cache["shape"])
    return grads""",
        "from scratch",
        hint="the gradients computed by torch.autograd.grad instead of by hand?",
    ),
    Mutant(
        "loss_backward",
        FIRST_BACKWARD_LINE,
        f"""{RERUN}
    (again * dloss).backward()
    grads = {{k: t.grad for k, t in zip({KEYS}, leaves)}}
    grads["x"] = grads["x"].reshape(cache["shape"])
    return grads""",
        "from scratch",
        hint="the gradients computed by autograd (.backward() on a recomputed loss)?",
    ),
    Mutant(
        "torch_log_softmax",
        LOGP,
        "logp = torch.log_softmax(z, dim=-1)",
        "from scratch",
        hint="torch.log_softmax instead of the notebook's own log-softmax?",
    ),
    Mutant(
        "torch_cross_entropy",
        LOSS,
        "loss = torch.nn.functional.cross_entropy(z, yf)",
        "from scratch",
        hint="the loss computed by F.cross_entropy instead of by hand?",
    ),
    Mutant(
        "torch_gelu",
        GELU,
        "a = torch.nn.functional.gelu(h)",
        "from scratch",
        hint="torch's F.gelu in the forward pass instead of 0.5 * h * (1 + erf(h / sqrt(2)))?",
    ),
]

VARIANTS = [
    Variant("relu_mask_from_the_activation", RELU_MASK, "dh = da * (a > 0)"),
    Variant("relu_with_clamp", "a = torch.relu(h)", "a = h.clamp(min=0)"),
    Variant(
        "einsum_gradients",
        "dW1 = dh.T @ x\n    db1 = dh.sum(dim=0)",
        'dW1 = torch.einsum("nh,nd->hd", dh, x)\n    db1 = torch.einsum("nh->h", dh)',
    ),
    Variant(
        "logsumexp_log_probabilities",
        LOGP,
        "logp = z - torch.logsumexp(z, dim=-1, keepdim=True)",
    ),
    Variant(
        "normal_cdf_with_ndtr",
        "cdf = 0.5 * (1 + torch.erf(h * math.sqrt(0.5)))",
        "cdf = torch.special.ndtr(h)",
    ),
    Variant(
        "one_hot_labels",
        CLONE + "\n" + ONE_HOT,
        'p = cache["p"]\n    dz = p - torch.nn.functional.one_hot(y, p.shape[-1]).to(p.dtype)\n',
    ),
    # a top-level helper of the notebook's own named softmax, used for the cached softmax
    Variant("own_softmax_helper", notebook="variants/own_softmax_helper.ipynb"),
    # written by someone who had read only the scaffold
    Variant("independent", notebook="variants/independent.ipynb"),
]
