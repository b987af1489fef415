"""The checks several attention exercises share, written once against an `Adapter`: how one
exercise's module (or function) is built and called, and what it gives back.

A suite keeps its catalog (each check's decorator, name, points, level and docstring) and
calls these with its adapters: ``lib.parity(kernel, A, att.causal_allow(T))``. Masks reach an
adapter in `_attention`'s canonical form (`allow`: nonzero = may attend).
"""

from __future__ import annotations

from typing import Any

import torch

from grader.exercises import _attention as att
from grader.exercises._attention import F32, F64, Adapter, Inputs
from grader.suite import checks
from grader.suite.checks import Failed
from grader.suite.integrity import (
    require_clean_source,
    require_no_builtin_module,
    require_nothing_seen,
)


def shapes(kernel, A: Adapter, batch=None, t=None, s=None, cross=True, seed=1) -> None:
    """forward's output is [B, T, E] and its weights have the adapter's shape."""
    A.forward(A.build(kernel), A.inputs(batch, t, s, cross=cross, seed=seed))


def no_weights_unless_asked(kernel, A: Adapter) -> None:
    y, w = A.forward(A.build(kernel), A.inputs(), weights=False)
    checks.is_none(w, f"{A.prefix}weights when none are asked for")


def probabilities(kernel, A: Adapter, what: str, cross=True, seed=1, scale=1.0) -> None:
    """Weights are non-negative and sum to 1 over the keys."""
    w = A.weights(A.build(kernel), A.inputs(cross=cross, seed=seed, scale=scale))
    checks.rows_sum_to_one(w, f"{A.prefix}{what}")


def large_inputs_stay_normalised(kernel, A: Adapter, cross=False) -> None:
    probabilities(kernel, A, "weights for inputs ~1e3", cross=cross, seed=5, scale=1e3)


def obeys(kernel, A: Adapter, allow, what: str, cross=True, **mask) -> None:
    """Keys the mask blocks get ~0 weight, in every head, and the rows still sum to 1. `mask`:
    the mask as forward's keyword, in the exercise's own form; `allow` then says what it blocks."""
    inputs = A.inputs(A.batch(allow), cross=cross)
    w = A.weights(A.build(kernel), inputs, None if mask else allow, **mask)
    blocked = w.masked_select((allow == 0).expand(w.shape))
    checks.small(blocked, f"{A.prefix}weights on {what}", 1e-6)
    checks.rows_sum_to_one(w, f"{A.prefix}weights with {what} masked")


def per_sample_mask_broadcasts_over_heads(
    kernel, A: Adapter, last=3, causal=True, cross=True
) -> None:
    """B == H samples, each with its own mask: causal (or the last key blocked), the last
    `last` keys blocked, the first two keys blocked."""
    allow = torch.ones(A.H, 1, A.T, A.S, dtype=torch.bool)
    allow[0, 0] = att.causal_allow(A.T, A.S) if causal else torch.arange(A.S) < A.S - 1
    allow[1, 0, :, -last:] = allow[2, 0, :, :2] = False
    obeys(kernel, A, allow, "keys blocked per sample ([B, 1, T, S] mask, B == H)", cross=cross)


def padded_key_values_do_not_matter(kernel, A: Adapter, lengths: list[int], dtype=torch.bool):
    """Changing what sits at padded positions leaves the output (of real tokens) unchanged."""
    module, allow, inputs = A.build(kernel), att.padding_allow(lengths, A.S), A.inputs()
    noise = att.randn(A.B, A.S, A.E, seed=3, scale=10.0) * (allow[:, 0, 0] == 0)[..., None]
    noisy = (
        (inputs[0] + noise,) if len(inputs) == 1 else (inputs[0], *(t + noise for t in inputs[1:]))
    )
    (y1, _), (y2, _) = A.forward_all(module, [(inputs, allow.to(dtype)), (noisy, allow.to(dtype))])
    if len(inputs) == 1:  # self-attention: padded tokens are queries too
        real = allow[:, 0, 0]
        checks.same(y2[real], y1[real], f"real tokens' {A.output} after changing padded tokens")
        return
    checks.same(y2, y1, f"{A.output} after changing padded keys and values")


def masked_weights_renormalise(kernel, A: Adapter, allow, what: str, cross=True) -> None:
    """Under a mask (no fully blocked row), each query's weights are its unmasked weights on
    the allowed keys, renormalised to sum to 1, in every head: the mask changes which keys
    count and nothing else. Both calls are the candidate's, so this compares the masking
    alone, whatever the projections compute."""
    module, inputs = A.build(kernel), A.inputs(A.batch(allow), cross=cross)
    w0, w1 = A.weights(module, inputs), A.weights(module, inputs, allow)
    want = w0 * (allow != 0).expand(w0.shape)
    want = want / want.sum(dim=-1, keepdim=True)
    checks.close(w1, want, f"{A.prefix}weights with {what} vs the unmasked ones renormalised")


def inputs_left_unchanged(kernel, A: Adapter, allow=None, *, cross=True, train=False) -> None:
    """forward changes none of the tensors it is given in place (inputs, mask, weights): each
    is held in the kernel and read back after the call. `train`: in train mode, dropout 0.5."""
    module = A.build(kernel, dropout=0.5 if train else None)
    if train:
        module.train()
    target, args, kwargs = A.request(module, A.inputs(A.batch(allow), cross=cross), allow)
    given: dict[int, tuple[str, torch.Tensor, Any]] = {}  # by id: a tensor given twice, held once

    def held(value, name):
        if not torch.is_tensor(value):
            return value
        if id(value) not in given:
            given[id(value)] = (name, value.clone(), kernel.hold(value.clone(), name))
        return given[id(value)][2]

    names = [*A.args, "num_heads", "d_model", "mask"]
    args = [held(a, names[i] if i < len(names) else f"argument {i}") for i, a in enumerate(args)]
    kwargs = {k: held(v, k) for k, v in kwargs.items()}
    target(*args, **kwargs)
    mode = "train mode, dropout 0.5" if train else "eval mode"
    setting = f"{mode}, {'a mask' if allow is not None else 'no mask'}"
    for name, value, remote in given.values():
        checks.equal(kernel.attribute(remote, "data"), value, f"{name} after forward ({setting})")


def mask_dtypes_agree(kernel, A: Adapter, allow, dtypes=(torch.int64,)) -> None:
    """The same mask as bool and as 0/1 of other dtypes gives the same output and weights."""
    module, inputs = A.build(kernel), A.inputs(A.batch(allow))
    cases = [(inputs, allow)] + [(inputs, allow.to(dtype)) for dtype in dtypes]
    (y, w), *others = A.forward_all(module, cases)
    for dtype, (y2, w2) in zip(dtypes, others, strict=True):
        name = str(dtype).replace("torch.", "")
        checks.same(y2, y, f"{A.output} with a {name} 0/1 mask vs the bool mask")
        if w is not None:
            checks.same(w2, w, f"{A.prefix}weights with a {name} 0/1 mask vs the bool mask")


def later_tokens(kernel, A: Adapter, t=2, allow=None, module=None, x=None) -> None:
    """Outputs up to position t do not move when tokens after t change; later ones do. By
    default: a fresh module, the self-attention input, a [1, 1, T, T] causal mask."""
    module = A.build(kernel) if module is None else module
    x = A.inputs(cross=False)[0] if x is None else x
    allow = att.causal_allow(A.T)[None, None] if allow is None else allow
    later = x.clone()
    later[:, t + 1 :] += att.randn(x.shape[0], x.shape[1] - t - 1, x.shape[2], seed=9, scale=3.0)
    (y1, _), (y2, _) = A.forward_all(module, [((x,), allow), ((later,), allow)])
    what = f"{A.output}[:, :{t + 1}] after changing tokens after t={t}"
    checks.same(y2[:, : t + 1], y1[:, : t + 1], what)
    after = f"{A.output} after t={t} (must change with its own tokens)"
    checks.differ(y2[:, t + 1 :], y1[:, t + 1 :], after)


def zero_input_is_finite(kernel, *adapters: Adapter) -> None:
    for A in adapters:
        y, w = A.forward(A.build(kernel), tuple(0 * t for t in A.inputs(cross=False)))
        checks.finite(y, f"{A.output} for zero input")
        if w is not None:
            checks.finite(w, f"{A.prefix}weights for zero input")


def large_input_is_finite(kernel, *adapters: Adapter, cross: bool = True) -> None:
    for A in adapters:
        y, _ = A.forward(A.build(kernel), A.inputs(seed=6, scale=1e4, cross=cross))
        checks.finite(y, f"{A.output} for inputs ~1e4")


def fully_blocked_rows(kernel, A: Adapter, allow, exact=False, what="a fully blocked query row"):
    """Query rows whose keys are all blocked (`what`: a row, a padded sample) give a finite
    output and finite (`exact`: zero) weights; the other rows still sum to 1."""
    y, w = A.forward(A.build(kernel), A.inputs(A.batch(allow)), allow)
    checks.finite(y, f"{A.output} with {what}")
    if w is None:
        return
    empty = (allow == 0).all(dim=-1).expand(w.shape[:3])
    verdict = att.exactly_zero if exact else checks.finite
    verdict(w[empty], f"{A.prefix}weights of the fully blocked rows")
    checks.rows_sum_to_one(w[~empty], f"{A.prefix}weights of the rows that are not blocked")


def parity(
    kernel, A: Adapter, allow=None, *, cross=True, dtype=F64, scale=1.0, bias=True,
    inputs: Inputs | None = None, blocked=None, **extra,
) -> None:  # fmt: skip
    """Output (and weights) vs nn.MultiheadAttention with the same projections, random
    biases, at assert_close's default tolerance for `dtype`. `blocked` and `extra` carry a
    mask the canonical form cannot say (an additive float mask)."""
    module = A.build(kernel, bias=bias)
    ref = A.oracle(module, dtype, bias)
    inputs = inputs or A.inputs(A.batch(allow), cross=cross, seed=11, scale=scale, dtype=dtype)
    y, w = A.forward(module, inputs, allow, **extra)
    b, t, s = inputs[0].shape[0], inputs[0].shape[1], inputs[-1].shape[1]
    blocked = att.blocked(allow, b, t, s, A.H) if blocked is None else blocked
    y_ref, w_ref = ref(inputs, blocked)
    checks.close(y, y_ref, f"{A.output} vs nn.MultiheadAttention")
    if w is not None:
        kind = "per-head " if A.per_head else ""
        checks.close(w, w_ref, f"{A.prefix}{kind}weights vs nn.MultiheadAttention")


def twins_agree(kernel, A: Adapter, twin: Adapter, layers: dict, fixed=None, allow=None, seed=11):
    """`twin`, loaded with A's randomised float64 weights and biases (each of its `layers` the
    concatenation of A's listed ones; `fixed` tensors as given), gives A's output and weights."""
    module = A.build(kernel)
    state = A.randomise(module, F64)
    tensors = {n: t.double() for n, t in (fixed or {}).items()}
    for layer, sources in layers.items():
        for kind in ("weight", "bias"):
            tensors[f"{layer}.{kind}"] = torch.cat([state[f"{p}.{kind}"] for p in sources])
    other = twin.build(kernel, seed=1)
    att.require(other.state_dict(), list(tensors), twin.owner)
    other.to(F64)
    att.load(other, twin.owner, tensors)
    x = A.inputs(cross=False, seed=seed, dtype=F64)
    (y, w), (y2, w2) = A.forward(module, x, allow), twin.forward(other, x, allow)
    checks.close(y2, y, f"{twin.output} vs {A.owner} with the same weights")
    if w is not None:
        checks.close(w2, w, f"{twin.prefix}weights vs {A.owner} with the same weights")


def grad(kernel, A: Adapter, module, inputs: Inputs, allow, cotangent) -> dict:
    """d(sum(y * cotangent)) with respect to every input (and the module's parameters)."""
    target, args, kwargs = A.request(module, inputs, allow)
    return kernel.grad(
        target, args, kwargs, wrt=list(range(len(inputs))), cotangent=cotangent,
        output_path=[0] if A.returns_weights else [], params=not A.function,
    )  # fmt: skip


def finite_gradients(kernel, A: Adapter, allow, what: str, seed=1) -> None:
    """Backprop under a mask that blocks every key of some query (`what`) gives finite
    gradients to every input and to every parameter that gets one."""
    module, inputs = A.build(kernel), A.inputs(seed=seed)
    grads = grad(kernel, A, module, inputs, allow, att.randn(A.B, A.T, A.E, seed=2))
    for name, g in zip(A.args, grads["inputs"], strict=True):
        checks.finite(checks.tensor(g, f"gradient of {name} {what}"), f"gradient of {name} {what}")
    for name, g in grads["params"].items():
        if g is not None:
            checks.finite(g, f"gradient of {name} {what}")


def gradients_reach(kernel, A: Adapter, allow=None, exact=False, cross=True) -> None:
    """In train mode, every parameter (`exact`: exactly the layers' weights and biases) and
    every input get a gradient, every weight and input a finite, non-zero one. (Key biases
    may get exactly zero: softmax ignores a shift shared by all keys.)"""
    module, inputs = A.build(kernel), A.inputs(cross=cross)
    if not A.function:
        module.train()
    grads = grad(kernel, A, module, inputs, allow, att.randn(A.B, A.T, A.E, seed=2))
    params = grads["params"]
    expected = [f"{p}.{k}" for p in A.layers for k in ("weight", "bias")] if exact else params
    if extra := sorted(set(params) - set(expected)):
        listed = ", ".join(extra[:4])
        raise Failed(f"{A.owner} has unexpected parameters {listed} (masks are buffers)")
    if missing := [n for n in expected if params.get(n) is None]:
        raise Failed(f"no gradient reached {A.owner}.{', '.join(missing[:4])}")
    for name, g, x in zip(A.args, grads["inputs"], inputs, strict=False):
        checks.finite(checks.tensor(g, f"gradient of {name}", x.shape), f"gradient of {name}")
        if float(g.abs().max()) == 0:
            raise Failed(f"gradient of {name} is zero everywhere")
    if dead := [n for n in expected if n.endswith("weight") and float(params[n].abs().max()) == 0]:
        raise Failed(f"zero gradient for {A.owner}.{', '.join(dead)}")


def input_gradients_match_oracle(kernel, A: Adapter, allow=None, cross=False) -> None:
    """d(sum(y * r)) / d(inputs) match nn.MultiheadAttention's, in float64."""
    module = A.build(kernel)
    ref = A.oracle(module, F64)
    inputs, r = A.inputs(cross=cross, dtype=F64), att.randn(A.B, A.T, A.E, seed=2, dtype=F64)
    grads = grad(kernel, A, module, inputs, allow, r)
    leaves = tuple(t.clone().requires_grad_(True) for t in inputs)
    y_ref, _ = ref(leaves, att.blocked(allow, A.B, A.T, inputs[-1].shape[1], A.H))
    (y_ref * r).sum().backward()
    for name, g, leaf in zip(A.args, grads["inputs"], leaves, strict=False):
        got = checks.tensor(g, f"gradient of {name}")
        checks.close(got, leaf.grad, f"gradient of {name} vs nn.MultiheadAttention")


def eval_mode_ignores_dropout(kernel, *adapters: Adapter, p: float | None = 0.5) -> None:
    """In eval mode dropout `p` (None: the default) is off: calls under different RNG seeds
    agree with each other and with dropout 0."""
    for A in adapters:
        x, d = A.inputs(cross=False), A.dropout if p is None else p
        plain, _ = A.forward(A.build(kernel, dropout=0.0), x)
        noisy = A.build(kernel, dropout=p)
        (first, _), (second, _) = A.forward(noisy, x, seed=1), A.forward(noisy, x, seed=2)
        checks.same(first, plain, f"eval-mode {A.output} with dropout {d} vs dropout 0")
        checks.same(second, first, f"two eval-mode {A.output}s with dropout {d} (RNG seeds 1, 2)")


def train_mode_applies_dropout(kernel, *adapters: Adapter, p: float | None = 0.5) -> None:
    """In train mode dropout `p` (None: the default) leaves the output finite and changes it."""
    for A in adapters:
        x, d = A.inputs(cross=False), A.dropout if p is None else p
        module = A.build(kernel, dropout=p)
        y_eval, _ = A.forward(module, x)
        module.train()
        y_train, _ = A.forward(module, x, seed=3)
        checks.finite(y_train, f"train-mode {A.output} with dropout {d}")
        checks.differ(y_train, y_eval, f"train-mode {A.output} with dropout {d} vs eval mode")


def split_heads_layout(kernel, A: Adapter) -> None:
    """split: [B, T, E] -> [B, H, T, Dh], head h on channels h*Dh .. (h+1)*Dh."""
    mha, split, dh = A.build(kernel), A.heads_api[0], A.E // A.H
    for length in (A.T, A.S):
        x = torch.arange(A.B * length * A.E, dtype=F32).reshape(A.B, length, A.E)
        xh = getattr(mha, split)(x)
        checks.tensor(xh, f"{split} of [B, {length}, E]", (A.B, A.H, length, dh))
        for h, first in enumerate(range(0, A.E, dh)):
            if not torch.equal(xh[:, h], x[..., first : first + dh]):
                raise Failed(f"{split}: head {h} does not hold channels {first}..{first + dh - 1}")


def merge_heads_inverts_split(kernel, A: Adapter) -> None:
    """merge puts head h back on channels h*Dh .. (h+1)*Dh and undoes split."""
    mha, (split, merge), dh = A.build(kernel), A.heads_api, A.E // A.H
    xh = torch.arange(A.B * A.H * A.T * dh, dtype=F32).reshape(A.B, A.H, A.T, dh)
    merged = checks.tensor(getattr(mha, merge)(xh), f"{merge} of [B, H, T, Dh]", (A.B, A.T, A.E))
    if not torch.equal(merged, xh.transpose(1, 2).reshape(A.B, A.T, A.E)):
        raise Failed(f"{merge}: channel h*Dh + d of token t must be head h, token t, feature d")
    x = att.randn(A.B, A.T, A.E, seed=1)
    back = getattr(mha, merge)(checks.tensor(getattr(mha, split)(x), f"{split}(x)"))
    checks.same(checks.tensor(back, f"{merge}({split}(x))", x.shape), x, f"{merge}({split}(x))")


def call(A: Adapter, module, inputs: Inputs, allow=None, **extra):
    """Call it and return its answer unchecked (a stub's NotImplementedError still raises):
    the from-scratch verdicts call the candidate's code only so that a stub answers first."""
    target, args, kwargs = A.request(module, inputs, allow)
    return target(*args, **kwargs, **extra)


def no_builtin_attention_in_source(kernel, exercise, *adapters: Adapter) -> None:
    """After running every module once, the notebook's code names no attention built-in."""
    for A in adapters:
        call(A, A.build(kernel), A.inputs(cross=False))
    require_clean_source(kernel.sources, exercise.forbidden, exercise.watch, kernel.cell_numbers)


def no_builtin_attention_at_run_time(kernel, exercise, *adapters: Adapter) -> None:
    """Running every module (the simplest call: self-attention, no mask; every other hidden
    test's calls were watched too) calls no attention built-in, and no module holds one."""
    modules = []
    for A in adapters:
        module = A.build(kernel)
        call(A, module, A.inputs(cross=False))
        modules += [] if A.function else [(A.owner, module)]
    require_nothing_seen(kernel.seen)
    for owner, module in modules:
        require_no_builtin_module(kernel.modules(module), owner, exercise.watch)
