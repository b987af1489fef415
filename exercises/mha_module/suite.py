"""Hidden suite for `mha_module` (seed 002): MultiHeadAttention with W_Q/W_K/W_V/W_O,
Xavier-uniform initialization and per-head weights, and its twin EfficientMultiHeadAttention
with a fused qkv_proj. Masks are 1/True = attend, [B, 1, 1, Lk] or [B, 1, Lq, Lk]; a fully
masked query row gets zero weights.

Sizes are chosen so that bugs show (see `support`): B, H, Lq, Lk and d_k all differ, and the
masked tests that must broadcast over heads use B == H.
"""

from __future__ import annotations

import math

import torch

from grader import checks
from grader.checks import Failed
from grader.exercise import Exercise
from grader.exercises._builtins import ATTENTION
from grader.exercises import _attention as att
from grader.exercises.mha_module.support import (
    DK,
    LK,
    LQ,
    UNFUSED,
    B,
    E,
    H,
    all_gradients,
    build,
    build_fused,
    exactly_zero,
    forward,
    forward_fused,
    fused_oracle,
    inputs,
    numel,
    padding,
    per_head_oracle,
    random_allow,
    random_biases,
    seeded_forward,
    unfused_oracle,
    zero_fraction,
)
from grader.integrity import require_clean_source, require_no_builtin_module, require_nothing_seen

exercise = Exercise(
    id="mha_module",
    title="Multi-head attention module with Xavier init, per-head weights and a fused twin",
    seed="002_8ab360f68b0dab92",
    levels=[
        "shapes",
        "initialization",
        "normalization",
        "masking",
        "finite",
        "parity",
        "fused",
        "training",
        "from scratch",
    ],
    defines=("MultiHeadAttention", "EfficientMultiHeadAttention"),
    watch=ATTENTION,
    forbidden=(
        "scaled_dot_product_attention",
        "MultiheadAttention",
        "multi_head_attention_forward",
        "_native_multi_head_attention",
    ),
)


# -- 1. shapes ---------------------------------------------------------------------------


@exercise.check("shapes", hidden=False)
def self_attention_shapes(kernel):
    """Self-attention: output [B, L, E], per-head weights [B, H, L, L]."""
    forward(build(kernel), inputs(cross=False)[0])


@exercise.check("shapes", hidden=False)
def cross_attention_shapes(kernel):
    """Cross-attention with Lk != Lq: output [B, Lq, E], weights [B, H, Lq, Lk]."""
    forward(build(kernel), *inputs())


@exercise.check("shapes")
def no_weights_unless_asked(kernel):
    """return_attention=False returns (output, None)."""
    q, k, v = inputs()
    y, w = checks.pair(build(kernel)(q, k, v, return_attention=False), "forward(...)")
    checks.tensor(y, "output", (B, LQ, E))
    checks.is_none(w, "weights with return_attention=False")


@exercise.check("shapes")
def single_query_batch_of_one(kernel):
    """B = 1 and Lq = 1 attending to 3 keys."""
    forward(build(kernel), att.randn(1, 1, E, seed=3), att.randn(1, 3, E, seed=4))


@exercise.check("shapes", hidden=False)
def fused_shapes(kernel):
    """EfficientMultiHeadAttention(x): output [B, L, E], weights [B, H, L, L]."""
    forward_fused(build_fused(kernel), inputs(cross=False)[0])


# -- 2. initialization -------------------------------------------------------------------


@exercise.check("initialization", hidden=False)
def parameter_count(kernel):
    """4E^2 + 4E numbers with bias, 4E^2 without; the fused module also has 4E^2 + 4E."""
    for bias, want in ((True, 4 * E * E + 4 * E), (False, 4 * E * E)):
        got = numel(build(kernel, bias=bias).state_dict())
        if got != want:
            raise Failed(f"MultiHeadAttention(bias={bias}) holds {got} numbers, want {want}")
    got = numel(build_fused(kernel).state_dict())
    if got != 4 * E * E + 4 * E:
        raise Failed(f"EfficientMultiHeadAttention holds {got} numbers, want {4 * E * E + 4 * E}")


@exercise.check("initialization")
def projections_are_linear_layers(kernel):
    """W_Q, W_K, W_V, W_O are nn.Linear(E, E); qkv_proj is E -> 3E and out_proj E -> E."""
    for owner, module, layers in (
        ("MultiHeadAttention", build(kernel), {p: E for p in UNFUSED}),
        ("EfficientMultiHeadAttention", build_fused(kernel), {"qkv_proj": 3 * E, "out_proj": E}),
    ):
        kinds = dict(kernel.modules(module))
        names = [f"{p}.{kind}" for p in layers for kind in ("weight", "bias")]
        state = att.require(module.state_dict(), names, owner)
        for layer, rows in layers.items():
            if not kinds.get(layer, "").endswith("Linear"):
                raise Failed(f"{owner}.{layer} is {kinds.get(layer, 'missing')}, want nn.Linear")
            checks.tensor(state[f"{layer}.weight"], f"{owner}.{layer}.weight", (rows, E))
            checks.tensor(state[f"{layer}.bias"], f"{owner}.{layer}.bias", (rows,))


@exercise.check("initialization", points=2)
def xavier_uniform_weights(kernel):
    """With E = 64, each projection's weights fill [-b, b], b = sqrt(6 / (fan_in + fan_out)),
    like a uniform draw (max |w| near b, std near b / sqrt(3)), and differ between projections."""
    d_model = 64
    bound = math.sqrt(6 / (d_model + d_model))
    mha = build(kernel, d_model=d_model, heads=4)
    names = [f"{p}.weight" for p in UNFUSED]
    state = att.require(mha.state_dict(), names, "MultiHeadAttention")
    for name in names:
        w = checks.tensor(state[name], name, (d_model, d_model)).double()
        top, std = float(w.abs().max()), float(w.std())
        if top > bound * (1 + 1e-6):
            raise Failed(
                f"{name}: max |w| {top:.4g}, want <= the Xavier-uniform bound "
                f"sqrt(6/(fan_in+fan_out)) = {bound:.4g}"
            )
        if top < 0.9 * bound:
            raise Failed(
                f"{name}: max |w| {top:.4g}, want close to the Xavier-uniform bound {bound:.4g} "
                f"(>= {0.9 * bound:.4g}): not Xavier-uniform"
            )
        want = bound / math.sqrt(3)
        if not 0.85 * want <= std <= 1.15 * want:
            raise Failed(f"{name}: std {std:.4g}, want about {want:.4g} (uniform on ±{bound:.4g})")
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            if torch.equal(state[a], state[b]):
                raise Failed(f"{a} and {b} are identical: initialise each projection on its own")


@exercise.check("initialization")
def biases_start_at_zero(kernel):
    """A fresh module's four biases are exactly zero."""
    names = [f"{p}.bias" for p in UNFUSED]
    state = att.require(build(kernel).state_dict(), names, "MultiHeadAttention")
    for name in names:
        exactly_zero(checks.tensor(state[name], name, (E,)), f"fresh {name}")


# -- 3. normalization --------------------------------------------------------------------


@exercise.check("normalization", hidden=False)
def weights_are_probabilities(kernel):
    """Self-attention weights are non-negative and sum to 1 over the keys, in every head."""
    _, w = forward(build(kernel), inputs(cross=False)[0])
    checks.rows_sum_to_one(w, "self-attention weights")


@exercise.check("normalization")
def cross_weights_are_probabilities(kernel):
    """Cross-attention weights sum to 1 over the Lk keys."""
    _, w = forward(build(kernel), *inputs())
    checks.rows_sum_to_one(w, "cross-attention weights")


@exercise.check("normalization")
def large_inputs_stay_normalised(kernel):
    """Inputs of magnitude ~1e3 (logits ~1e5) still give probabilities: a stable softmax."""
    q, k, v = (t * 1e3 for t in inputs(seed=5))
    _, w = forward(build(kernel), q, k, v)
    checks.rows_sum_to_one(w, "weights for large inputs")


@exercise.check("normalization")
def fused_weights_are_probabilities(kernel):
    """The fused module's weights sum to 1, for ordinary and for large (~1e3) inputs."""
    module = build_fused(kernel)
    x = inputs(cross=False)[0]
    checks.rows_sum_to_one(forward_fused(module, x)[1], "fused weights")
    checks.rows_sum_to_one(forward_fused(module, x * 1e3)[1], "fused weights for large inputs")


# -- 4. masking --------------------------------------------------------------------------


@exercise.check("masking", points=2)
def padded_keys_get_no_weight(kernel):
    """A [B, 1, 1, Lk] bool padding mask: padded keys get ~0 weight in every head."""
    keep = padding([LK - 2, LK - 3])
    _, w = forward(build(kernel), *inputs(), mask=keep)
    checks.small(w.masked_select(~keep.expand(B, H, LQ, LK)), "weights on padded keys", 1e-6)
    checks.rows_sum_to_one(w, "weights with padding")


@exercise.check("masking", points=2)
def padded_key_values_do_not_matter(kernel):
    """With a float 0/1 padding mask, changing the padded keys and values leaves the output."""
    mha = build(kernel)
    keep = padding([LK - 2, LK - 4])
    q, kv, _ = inputs()
    noise = att.randn(B, LK, E, seed=3, scale=10.0) * (~keep[:, 0, 0])[..., None]
    y1, _ = forward(mha, q, kv, kv, mask=keep.float())
    y2, _ = forward(mha, q, kv + noise, kv + noise, mask=keep.float())
    checks.same(y2, y1, "output after changing padded keys and values")


@exercise.check("masking", points=2, hidden=False)
def causal_mask_blocks_future_keys(kernel):
    """A float causal mask tril(ones) of shape [1, 1, L, L]: future keys get ~0 weight."""
    allow = att.causal_allow(LQ)
    _, w = forward(build(kernel), inputs(cross=False)[0], mask=allow.float()[None, None])
    checks.small(w.masked_select(~allow.expand(B, H, LQ, LQ)), "weights on future keys", 1e-6)
    checks.rows_sum_to_one(w, "weights with a causal mask")


@exercise.check("masking", points=2)
def future_tokens_do_not_change_the_past(kernel):
    """With a [B, 1, L, L] bool causal mask, output[:, t] ignores tokens after t."""
    mha = build(kernel)
    t = 2
    x = inputs(cross=False)[0]
    later = x.clone()
    later[:, t + 1 :] += att.randn(B, LQ - t - 1, E, seed=9, scale=3.0)
    causal = att.causal_allow(LQ).expand(B, 1, LQ, LQ)
    y1, _ = forward(mha, x, mask=causal)
    y2, _ = forward(mha, later, mask=causal)
    checks.same(
        y2[:, : t + 1],
        y1[:, : t + 1],
        f"output[:, :{t + 1}] after changing tokens after t={t}",
    )
    checks.differ(y2[:, t + 1 :], y1[:, t + 1 :], "output after t (must react to its own tokens)")


@exercise.check("masking", points=2)
def per_sample_masks_broadcast_over_heads(kernel):
    """[B, 1, Lq, Lk] and [B, 1, 1, Lk] masks, different per sample, with B == H."""
    batch = H
    mha = build(kernel)
    q, k, v = inputs(batch=batch)
    allow = random_allow(batch, LQ, LK, seed=5)
    _, w = forward(mha, q, k, v, mask=allow)
    checks.small(
        w.masked_select(~allow.expand(batch, H, LQ, LK)),
        "weights on masked keys ([B, 1, Lq, Lk] mask)",
        1e-6,
    )
    keep = padding([LK, LK - 2, LK - 4])
    _, w = forward(mha, q, k, v, mask=keep)
    checks.small(
        w.masked_select(~keep.expand(batch, H, LQ, LK)),
        "weights on padded keys ([B, 1, 1, Lk] mask)",
        1e-6,
    )


@exercise.check("masking", points=2)
def mask_dtypes_agree(kernel):
    """The same mask as bool, float 0/1 and int64 0/1 gives the same output and weights."""
    mha = build(kernel)
    q, k, v = inputs()
    allow = random_allow(B, LQ, LK, seed=6)
    y, w = forward(mha, q, k, v, mask=allow)
    for dtype in (torch.float32, torch.int64):
        name = str(dtype).replace("torch.", "")
        y2, w2 = forward(mha, q, k, v, mask=allow.to(dtype))
        checks.same(y2, y, f"output with a {name} 0/1 mask vs the bool mask")
        checks.same(w2, w, f"weights with a {name} 0/1 mask vs the bool mask")


@exercise.check("masking", points=2)
def fused_masked_keys_get_no_weight(kernel):
    """The fused module under a per-sample [B, 1, L, L] mask with B == H."""
    batch = H
    allow = random_allow(batch, LQ, LQ, seed=7)
    _, w = forward_fused(build_fused(kernel), inputs(batch=batch, cross=False)[0], mask=allow)
    checks.small(
        w.masked_select(~allow.expand(batch, H, LQ, LQ)), "fused weights on masked keys", 1e-6
    )
    checks.rows_sum_to_one(w, "fused weights with a mask")


@exercise.check("masking", points=2)
def fused_future_tokens_do_not_change_the_past(kernel):
    """The fused module with a [1, 1, L, L] causal mask: output[:, t] ignores tokens after t."""
    module = build_fused(kernel)
    t = 1
    x = inputs(cross=False)[0]
    later = x.clone()
    later[:, t + 1 :] += att.randn(B, LQ - t - 1, E, seed=9, scale=3.0)
    causal = att.causal_allow(LQ)[None, None]
    y1, _ = forward_fused(module, x, mask=causal)
    y2, _ = forward_fused(module, later, mask=causal)
    checks.same(
        y2[:, : t + 1],
        y1[:, : t + 1],
        f"fused output[:, :{t + 1}] after changing tokens after t={t}",
    )
    checks.differ(y2[:, t + 1 :], y1[:, t + 1 :], "fused output after t")


# -- 5. finite ---------------------------------------------------------------------------


@exercise.check("finite")
def zero_input_is_finite(kernel):
    """An all-zero input gives finite output and weights."""
    y, w = forward(build(kernel), torch.zeros(B, LQ, E))
    checks.finite(y, "output for zero input")
    checks.finite(w, "weights for zero input")


@exercise.check("finite")
def large_input_is_finite(kernel):
    """Inputs of magnitude ~1e4 give a finite output."""
    q, k, v = (t * 1e4 for t in inputs(seed=6))
    y, _ = forward(build(kernel), q, k, v)
    checks.finite(y, "output for large inputs")


@exercise.check("finite", points=2, hidden=False)
def fully_masked_row_gets_zero_weights(kernel):
    """A query whose keys are all masked gets exactly zero weights in every head; the output
    stays finite and the other rows still sum to 1."""
    allow = random_allow(B, LQ, LK, seed=8)
    allow[1, 0, 2] = False
    allow[0, 0, 4] = False
    y, w = forward(build(kernel), *inputs(), mask=allow)
    checks.finite(y, "output with fully masked rows")
    exactly_zero(w[1, :, 2], "weights of the fully masked row (sample 1, query 2)")
    exactly_zero(w[0, :, 4], "weights of the fully masked row (sample 0, query 4)")
    checks.rows_sum_to_one(w[:, :, :2], "weights of the rows that are not fully masked")


@exercise.check("finite", points=2)
def fully_padded_sample_gets_zero_weights(kernel):
    """A float [B, 1, 1, Lk] mask of all zeros for one sample: that sample's weights are all 0."""
    keep = padding([LK - 2, 0]).float()
    y, w = forward(build(kernel), *inputs(), mask=keep)
    checks.finite(y, "output with a fully padded sample")
    exactly_zero(w[1], "weights of the fully padded sample 1")
    checks.rows_sum_to_one(w[0], "weights of sample 0")


@exercise.check("finite", points=2)
def fused_fully_masked_row_gets_zero_weights(kernel):
    """The fused module gives a fully masked query row zero weights and a finite output."""
    allow = att.causal_allow(LQ).expand(B, 1, LQ, LQ).clone()
    allow[0, 0, 3] = False
    y, w = forward_fused(build_fused(kernel), inputs(cross=False)[0], mask=allow)
    checks.finite(y, "fused output with a fully masked row")
    exactly_zero(w[0, :, 3], "fused weights of the fully masked row (sample 0, query 3)")


# -- 6. parity with torch.nn.MultiheadAttention (float64, per-head weights) ---------------


def parity(kernel, *, cross=True, mask=None, batch=B, bias=True, dtype=torch.float64):
    """Output and per-head weights vs nn.MultiheadAttention in `dtype`, at assert_close's
    default tolerance."""
    mha = build(kernel, bias=bias)
    ref = unfused_oracle(mha, dtype, bias)
    q, k, v = inputs(batch=batch, cross=cross, dtype=dtype, seed=11)
    y, w = forward(mha, q, k, v, mask=mask)
    with torch.no_grad():
        y_ref, w_ref = per_head_oracle(ref, q, k, v, mask)
    checks.close(y, y_ref, "output vs nn.MultiheadAttention")
    checks.close(w, w_ref, "per-head weights vs nn.MultiheadAttention")


@exercise.check("parity", points=2)
def parity_in_self_attention(kernel):
    """Same output and per-head weights as nn.MultiheadAttention with the same (biased) weights."""
    parity(kernel, cross=False)


@exercise.check("parity", points=2)
def parity_in_cross_attention(kernel):
    """Parity with three different inputs for query, key and value."""
    parity(kernel)


@exercise.check("parity", points=2)
def parity_with_padding_mask(kernel):
    """Parity under a [B, 1, 1, Lk] bool padding mask."""
    parity(kernel, mask=padding([LK - 1, LK - 4]))


@exercise.check("parity", points=2)
def parity_with_causal_mask(kernel):
    """Parity in self-attention under a float [1, 1, L, L] causal mask."""
    parity(kernel, cross=False, mask=att.causal_allow(LQ).double()[None, None])


@exercise.check("parity", points=2)
def parity_with_per_sample_mask(kernel):
    """Parity under an int64 [B, 1, Lq, Lk] mask, different per sample, with B == H."""
    parity(kernel, batch=H, mask=random_allow(H, LQ, LK, seed=9).long())


@exercise.check("parity")
def parity_without_bias(kernel):
    """Parity for MultiHeadAttention(bias=False)."""
    parity(kernel, bias=False, mask=padding([LK, LK - 3]))


@exercise.check("parity")
def parity_in_float32(kernel):
    """Parity in float32 at assert_close's default tolerance (rtol 1.3e-6, atol 1e-5)."""
    parity(kernel, mask=padding([LK - 2, LK]), dtype=torch.float32)


# -- 7. fused ----------------------------------------------------------------------------


@exercise.check("fused", points=2)
def fused_matches_unfused(kernel):
    """qkv_proj = cat(W_Q, W_K, W_V) and out_proj = W_O (random biases) make the fused module
    compute what MultiHeadAttention(x, x, x) computes, in float64 under a padding mask."""
    mha = build(kernel)
    state = random_biases(mha, torch.float64)
    mapped = {
        f"qkv_proj.{kind}": torch.cat([state[f"{p}.{kind}"] for p in UNFUSED[:3]])
        for kind in ("weight", "bias")
    }
    mapped.update({f"out_proj.{kind}": state[f"W_O.{kind}"] for kind in ("weight", "bias")})
    module = build_fused(kernel, seed=1)
    att.require(module.state_dict(), list(mapped), "EfficientMultiHeadAttention")
    module.to(torch.float64)
    module.load_state_dict(mapped, strict=False)
    x = inputs(cross=False, dtype=torch.float64, seed=11)[0]
    keep = padding([LQ - 1, LQ - 3], LQ).double()
    y_f, w_f = forward_fused(module, x, mask=keep)
    y_u, w_u = forward(mha, x, mask=keep)
    checks.close(y_f, y_u, "fused output vs MultiHeadAttention with the same weights")
    checks.close(w_f, w_u, "fused weights vs MultiHeadAttention with the same weights")


def fused_parity(kernel, *, mask=None, batch=B, dtype=torch.float64):
    """Fused output and per-head weights vs nn.MultiheadAttention in `dtype`, at
    assert_close's default tolerance."""
    module = build_fused(kernel)
    ref = fused_oracle(module, dtype)
    x = inputs(batch=batch, cross=False, dtype=dtype, seed=13)[0]
    y, w = forward_fused(module, x, mask=mask)
    with torch.no_grad():
        y_ref, w_ref = per_head_oracle(ref, x, x, x, mask)
    checks.close(y, y_ref, "fused output vs nn.MultiheadAttention")
    checks.close(w, w_ref, "fused per-head weights vs nn.MultiheadAttention")


@exercise.check("fused", points=2)
def fused_parity_without_mask(kernel):
    """The fused module matches nn.MultiheadAttention whose in_proj is its qkv_proj."""
    fused_parity(kernel)


@exercise.check("fused", points=2)
def fused_parity_with_causal_mask(kernel):
    """Fused parity under a bool [1, 1, L, L] causal mask."""
    fused_parity(kernel, mask=att.causal_allow(LQ)[None, None])


@exercise.check("fused", points=2)
def fused_parity_with_per_sample_mask(kernel):
    """Fused parity under a float [B, 1, L, L] mask, different per sample, with B == H."""
    fused_parity(kernel, batch=H, mask=random_allow(H, LQ, LQ, seed=10).double())


@exercise.check("fused")
def fused_parity_in_float32(kernel):
    """Fused parity in float32 at assert_close's default tolerance."""
    fused_parity(kernel, mask=padding([LQ, LQ - 2], LQ), dtype=torch.float32)


# -- 8. training -------------------------------------------------------------------------


@exercise.check("training", points=2, hidden=False)
def gradients_reach_every_parameter_and_the_input(kernel):
    """Backprop from the output reaches every parameter and query, key and value."""
    mha = build(kernel)
    mha.train()
    q, k, v = inputs()
    r = att.randn(B, LQ, E, seed=2)
    grads = kernel.grad(mha, (q, k, v), {}, wrt=[0, 1, 2], cotangent=r, output_path=[0])
    all_gradients(
        grads, ("query", "key", "value"), {"query": q.shape, "key": k.shape, "value": v.shape}
    )


@exercise.check("training", points=2)
def input_gradients_match_oracle(kernel):
    """d(sum(output * r)) / d(query, key, value) match nn.MultiheadAttention's in float64."""
    mha = build(kernel)
    ref = unfused_oracle(mha, torch.float64)
    q, k, v = inputs(dtype=torch.float64)
    keep = padding([LK - 1, LK - 3])
    r = att.randn(B, LQ, E, seed=2, dtype=torch.float64)
    grads = kernel.grad(mha, (q, k, v), {"mask": keep}, wrt=[0, 1, 2], cotangent=r, output_path=[0])
    leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
    y_ref, _ = per_head_oracle(ref, *leaves, keep)
    (y_ref * r).sum().backward()
    for name, got, leaf in zip(("query", "key", "value"), grads["inputs"], leaves, strict=True):
        got = checks.tensor(got, f"gradient of {name}")
        checks.close(got, leaf.grad, f"gradient of {name} vs nn.MultiheadAttention")


@exercise.check("training", points=2)
def fused_gradients_reach_every_parameter_and_the_input(kernel):
    """Backprop through the fused module reaches qkv_proj, out_proj and the input."""
    module = build_fused(kernel)
    module.train()
    x = inputs(cross=False)[0]
    r = att.randn(B, LQ, E, seed=2)
    grads = kernel.grad(module, (x,), {}, wrt=[0], cotangent=r, output_path=[0])
    all_gradients(grads, ("x",), {"x": x.shape})


@exercise.check("training")
def fully_masked_row_has_finite_gradients(kernel):
    """With a fully masked query row, every gradient is finite."""
    mha = build(kernel)
    q, k, v = inputs()
    keep = padding([LK - 2, 0])
    r = att.randn(B, LQ, E, seed=2)
    grads = kernel.grad(mha, (q, k, v), {"mask": keep}, wrt=[0, 1, 2], cotangent=r, output_path=[0])
    for name, g in zip(("query", "key", "value"), grads["inputs"], strict=True):
        checks.finite(
            checks.tensor(g, f"gradient of {name}"),
            f"gradient of {name} with a fully masked sample",
        )
    for name, g in grads["params"].items():
        if g is not None:
            checks.finite(g, f"gradient of {name} with a fully masked sample")


@exercise.check("training", points=2)
def eval_mode_ignores_dropout(kernel):
    """With dropout = 0.5 in eval mode both modules are deterministic and dropout-free."""
    x = inputs(cross=False)[0]
    plain, _ = forward(build(kernel), x)
    noisy = build(kernel, dropout=0.5)
    first, _ = seeded_forward(kernel, noisy, (x, x, x), 1, "MultiHeadAttention.forward")
    second, _ = seeded_forward(kernel, noisy, (x, x, x), 2, "MultiHeadAttention.forward")
    checks.same(first, plain, "eval-mode output with dropout=0.5 vs dropout=0")
    checks.same(second, first, "two eval-mode calls with dropout=0.5")
    plain, _ = forward_fused(build_fused(kernel), x)
    noisy = build_fused(kernel, dropout=0.5)
    first, _ = seeded_forward(kernel, noisy, (x,), 1, "EfficientMultiHeadAttention.forward")
    checks.same(first, plain, "fused eval-mode output with dropout=0.5 vs dropout=0")


@exercise.check("training")
def train_mode_drops_attention_weights(kernel):
    """dropout = 0.5 in train mode: finite, and about half the returned weights are exactly 0."""
    mha = build(kernel, dropout=0.5)
    mha.train()
    q, k, v = inputs()
    y, w = seeded_forward(kernel, mha, (q, k, v), 3, "MultiHeadAttention.forward")
    checks.finite(y, "train-mode output with dropout=0.5")
    zero_fraction(w, "train-mode weights with dropout=0.5", 0.25, 0.75)


@exercise.check("training")
def train_mode_drops_the_output(kernel):
    """dropout = 0.5 in train mode: finite, and about half the output entries are exactly 0."""
    mha = build(kernel, dropout=0.5)
    mha.train()
    q, k, v = inputs()
    y, w = seeded_forward(kernel, mha, (q, k, v), 4, "MultiHeadAttention.forward")
    checks.finite(w, "train-mode weights with dropout=0.5")
    zero_fraction(y, "train-mode output with dropout=0.5", 0.25, 0.75)


@exercise.check("training")
def fused_train_mode_applies_dropout(kernel):
    """The fused module with dropout = 0.5 in train mode drops weights and output alike (and
    stays finite)."""
    module = build_fused(kernel, dropout=0.5)
    module.train()
    x = inputs(cross=False)[0]
    y, w = seeded_forward(kernel, module, (x,), 5, "EfficientMultiHeadAttention.forward")
    zero_fraction(w, "fused train-mode weights with dropout=0.5", 0.25, 0.75)
    zero_fraction(y, "fused train-mode output with dropout=0.5", 0.25, 0.75)


@exercise.check("training", points=2)
def split_heads_layout(kernel):
    """_split_heads: [B, L, E] -> [B, H, L, d_k], head h on channels h*d_k .. (h+1)*d_k."""
    mha = build(kernel)
    for length in (LQ, LK):
        x = torch.arange(B * length * E, dtype=torch.float32).reshape(B, length, E)
        xh = checks.tensor(
            mha._split_heads(x), f"_split_heads of [B, {length}, E]", (B, H, length, DK)
        )
        for h in range(H):
            if not torch.equal(xh[:, h], x[..., h * DK : (h + 1) * DK]):
                raise Failed(
                    f"_split_heads: head {h} does not hold channels {h * DK}..{(h + 1) * DK - 1} of each position"
                )


@exercise.check("training", points=2)
def combine_heads_inverts_split(kernel):
    """_combine_heads puts head h back on channels h*d_k .. (h+1)*d_k and undoes _split_heads."""
    mha = build(kernel)
    xh = torch.arange(B * H * LQ * DK, dtype=torch.float32).reshape(B, H, LQ, DK)
    merged = checks.tensor(mha._combine_heads(xh), "_combine_heads of [B, H, L, d_k]", (B, LQ, E))
    if not torch.equal(merged, xh.transpose(1, 2).reshape(B, LQ, E)):
        raise Failed(
            "_combine_heads: channel h*d_k + d of position t must be head h, position t, feature d"
        )
    x = att.randn(B, LK, E, seed=1)
    back = checks.tensor(
        mha._combine_heads(mha._split_heads(x)), "_combine_heads(_split_heads(x))", (B, LK, E)
    )
    checks.same(back, x, "_combine_heads(_split_heads(x))")


# -- 9. from scratch ---------------------------------------------------------------------


@exercise.check("from scratch", points=2)
def no_builtin_attention_in_source(kernel):
    """The notebook's code does not name torch's attention built-ins."""
    forward(build(kernel), inputs(cross=False)[0])
    require_clean_source(kernel.sources, exercise.forbidden, exercise.watch)


@exercise.check("from scratch", points=2)
def no_builtin_attention_at_run_time(kernel):
    """No attention built-in is called while the suite runs, and neither module holds an
    nn.MultiheadAttention."""
    mha, module = build(kernel), build_fused(kernel)
    forward(mha, *inputs(), mask=padding([LK - 1, LK - 2]))
    forward_fused(module, inputs(cross=False)[0], mask=att.causal_allow(LQ)[None, None])
    require_nothing_seen(kernel.seen)
    for owner, remote in (("MultiHeadAttention", mha), ("EfficientMultiHeadAttention", module)):
        require_no_builtin_module(kernel.modules(remote), owner, exercise.watch)
