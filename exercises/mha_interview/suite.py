"""Hidden suite for `mha_interview` (seed 000): an nn.Module MultiHeadAttention with a
config dataclass, self- and cross-attention, bool-or-float attention masks (True = allow)
and a key padding mask (True = keep).

Sizes are chosen so that bugs show: B, H, T, S and head_dim all differ, H >= 2, and one
masked test has B == H so a mask that is not broadcast over heads goes wrong.
"""

from __future__ import annotations

import torch

from grader import checks
from grader.checks import Failed
from grader.exercise import Exercise
from grader.exercises._builtins import ATTENTION
from grader.exercises import _attention as att
from grader.integrity import require_clean_source, require_no_builtin_module, require_nothing_seen

exercise = Exercise(
    id="mha_interview",
    title="Multi-head attention module (self- and cross-attention, masks)",
    seed="000_4f87fea8b1a32432",
    levels=[
        "shapes",
        "normalization",
        "padding",
        "causal",
        "finite",
        "parity",
        "training",
        "from scratch",
    ],
    defines=("AttentionConfig", "causal_mask", "MultiHeadAttention"),
    watch=ATTENTION,
    forbidden=(
        "scaled_dot_product_attention",
        "MultiheadAttention",
        "multi_head_attention_forward",
        "_native_multi_head_attention",
    ),
)

E, H, B, T, S = 12, 3, 2, 5, 7
DH = E // H
PROJECTIONS = ["q_proj", "k_proj", "v_proj", "out_proj"]


def build(kernel, dropout_p: float = 0.0, bias: bool = True, heads: int = H, seed: int = 0):
    """The candidate's module in eval mode."""
    cfg = kernel.new("AttentionConfig", E, heads, dropout_p=dropout_p, bias=bias)
    mha = kernel.new("MultiHeadAttention", cfg, seed=seed)
    mha.eval()
    return mha


def forward(mha, x, kv=None, **kwargs):
    """Call forward and insist on the (y, weights) pair."""
    call = "forward(x)" if kv is None else "forward(x, kv)"
    return checks.pair(mha(x, kv, **kwargs), call)


def attend(mha, x, kv=None, **kwargs):
    """forward with need_weights=True; checks both shapes."""
    y, w = forward(mha, x, kv, need_weights=True, **kwargs)
    s = x.shape[1] if kv is None else kv.shape[1]
    checks.tensor(y, "output y", (x.shape[0], x.shape[1], E))
    checks.tensor(w, "weights", (x.shape[0], x.shape[1], s))
    return y, w


def with_random_biases(kernel, mha, dtype=torch.float64, seed: int = 7):
    """Randomise every bias (fresh biases are zero and hide bias bugs), cast the module to
    `dtype`, and return it with an oracle holding the same weights."""
    state = mha.state_dict()
    names = [f"{p}.{kind}" for p in PROJECTIONS for kind in ("weight", "bias")]
    att.require(state, names, "MultiHeadAttention")
    biases = {
        f"{p}.bias": att.randn(E, seed=seed + i, scale=0.5) for i, p in enumerate(PROJECTIONS)
    }
    mha.load_state_dict(biases, strict=False)
    mha.to(dtype)
    state = att.require(mha.state_dict(), names, "MultiHeadAttention")
    parts = [(state[f"{p}.weight"].to(dtype), state[f"{p}.bias"].to(dtype)) for p in PROJECTIONS]
    return att.oracle(E, H, *parts, dtype=dtype)


# -- 1. shapes -------------------------------------------------------------------------


@exercise.check("shapes", hidden=False)
def self_attention_shapes(kernel):
    """Self-attention: y is [B, T, E] and the weights [B, T, T]."""
    attend(build(kernel), att.randn(B, T, E, seed=1))


@exercise.check("shapes", hidden=False)
def cross_attention_shapes(kernel):
    """Cross-attention with S != T: y is [B, T, E] and the weights [B, T, S]."""
    attend(build(kernel), att.randn(B, T, E, seed=1), att.randn(B, S, E, seed=2))


@exercise.check("shapes")
def no_weights_unless_asked(kernel):
    """need_weights=False (the default) returns (y, None)."""
    mha = build(kernel)
    x = att.randn(B, T, E, seed=1)
    y, w = forward(mha, x)
    checks.tensor(y, "output y", (B, T, E))
    checks.is_none(w, "weights with need_weights=False")


@exercise.check("shapes")
def single_token_and_batch_of_one(kernel):
    """B = 1, T = 1 attending to S = 3 keys."""
    attend(build(kernel), att.randn(1, 1, E, seed=3), att.randn(1, 3, E, seed=4))


# -- 2. normalization -------------------------------------------------------------------


@exercise.check("normalization", hidden=False)
def weights_are_probabilities(kernel):
    """Self-attention weights are non-negative and sum to 1 over the keys."""
    _, w = attend(build(kernel), att.randn(B, T, E, seed=1))
    checks.rows_sum_to_one(w, "self-attention weights")


@exercise.check("normalization")
def cross_weights_are_probabilities(kernel):
    """Cross-attention weights sum to 1 over the S keys."""
    _, w = attend(build(kernel), att.randn(B, T, E, seed=1), att.randn(B, S, E, seed=2))
    checks.rows_sum_to_one(w, "cross-attention weights")


@exercise.check("normalization")
def large_inputs_stay_normalised(kernel):
    """Inputs of magnitude ~1e3 (logits ~1e5) still give probabilities: a stable softmax."""
    _, w = attend(build(kernel), att.randn(B, T, E, seed=5, scale=1e3))
    checks.rows_sum_to_one(w, "weights for large inputs")


# -- 3. padding -------------------------------------------------------------------------


@exercise.check("padding", points=2, hidden=False)
def padded_keys_get_no_weight(kernel):
    """Cross-attention with key_padding_mask (False = pad): padded keys get ~0 weight."""
    keep = att.padding_keep([S - 2, S - 3], S)
    _, w = attend(
        build(kernel), att.randn(B, T, E, seed=1), att.randn(B, S, E, seed=2), key_padding_mask=keep
    )
    checks.small(w.masked_select(~keep[:, None, :]), "weights on padded keys", 1e-6)
    checks.rows_sum_to_one(w, "weights with padding")


@exercise.check("padding", points=2)
def padded_key_values_do_not_matter(kernel):
    """Changing what sits in the padded key positions leaves y unchanged."""
    mha = build(kernel)
    keep = att.padding_keep([S - 2, S - 4], S)
    x, kv = att.randn(B, T, E, seed=1), att.randn(B, S, E, seed=2)
    noise = att.randn(B, S, E, seed=3, scale=10.0) * (~keep)[..., None]
    y1, _ = attend(mha, x, kv, key_padding_mask=keep)
    y2, _ = attend(mha, x, kv + noise, key_padding_mask=keep)
    checks.same(y2, y1, "y after changing padded keys")


@exercise.check("padding", points=2)
def padding_in_self_attention(kernel):
    """Self-attention with padding: each sample ignores its own padded positions."""
    keep = att.padding_keep([T, T - 2], T)
    _, w = attend(build(kernel), att.randn(B, T, E, seed=1), key_padding_mask=keep)
    checks.small(
        w.masked_select(~keep[:, None, :]), "weights on padded keys (self-attention)", 1e-6
    )


# -- 4. causal --------------------------------------------------------------------------


@exercise.check("causal", points=2, hidden=False)
def future_keys_get_no_weight(kernel):
    """A [T, T] bool causal mask (True = allow): keys after the query get ~0 weight."""
    allow = att.causal_allow(T)
    _, w = attend(build(kernel), att.randn(B, T, E, seed=1), attn_mask=allow)
    checks.small(w.masked_select(~allow.expand(B, T, T)), "weights on future keys", 1e-6)


@exercise.check("causal", points=2)
def future_tokens_do_not_change_the_past(kernel):
    """With a causal mask, y[:, t] does not change when tokens after t change."""
    mha = build(kernel)
    t = 2
    x = att.randn(B, T, E, seed=1)
    later = x.clone()
    later[:, t + 1 :] += att.randn(B, T - t - 1, E, seed=9, scale=3.0)
    y1, _ = attend(mha, x, attn_mask=att.causal_allow(T))
    y2, _ = attend(mha, later, attn_mask=att.causal_allow(T))
    checks.same(
        y2[:, : t + 1],
        y1[:, : t + 1],
        f"y[:, :{t + 1}] after changing tokens after t={t}",
    )
    checks.differ(y2[:, t + 1 :], y1[:, t + 1 :], "y after t (must react to its own tokens)")


@exercise.check("causal", points=2)
def float_causal_mask(kernel):
    """A float mask (0 = allow, -inf = block) is added to the logits."""
    allow = att.causal_allow(T)
    additive = torch.zeros(T, T).masked_fill(~allow, float("-inf"))
    _, w = attend(build(kernel), att.randn(B, T, E, seed=1), attn_mask=additive)
    checks.small(
        w.masked_select(~allow.expand(B, T, T)), "weights on future keys (float mask)", 1e-6
    )
    checks.rows_sum_to_one(w, "weights with a float mask")


@exercise.check("causal", points=2)
def per_sample_mask_broadcasts_over_heads(kernel):
    """A [B, 1, T, S] bool mask, different per sample, with B == H."""
    batch = H
    allow = torch.ones(batch, 1, T, S, dtype=torch.bool)
    allow[0, 0] = att.causal_allow(T, S)
    allow[1, 0, :, -3:] = False
    allow[2, 0, :, :2] = False
    mha = build(kernel)
    _, w = attend(
        mha, att.randn(batch, T, E, seed=1), att.randn(batch, S, E, seed=2), attn_mask=allow
    )
    checks.small(w.masked_select(~allow[:, 0]), "weights on blocked keys ([B, 1, T, S] mask)", 1e-6)


# -- 5. finite --------------------------------------------------------------------------


@exercise.check("finite", hidden=False)
def zero_input_is_finite(kernel):
    """An all-zero input gives finite y and weights."""
    y, w = attend(build(kernel), torch.zeros(B, T, E))
    checks.finite(y, "y for zero input")
    checks.finite(w, "weights for zero input")


@exercise.check("finite")
def large_input_is_finite(kernel):
    """Inputs of magnitude ~1e4 give finite y."""
    y, _ = attend(build(kernel), att.randn(B, T, E, seed=6, scale=1e4))
    checks.finite(y, "y for large inputs")


@exercise.check("finite")
def float_mask_with_inf_is_finite(kernel):
    """A float mask holding -inf in some (not all) positions of each row."""
    additive = att.randn(T, S, seed=4)
    additive[:, ::2] = float("-inf")
    y, w = attend(
        build(kernel), att.randn(B, T, E, seed=1), att.randn(B, S, E, seed=2), attn_mask=additive
    )
    checks.finite(y, "y with -inf in the float mask")
    checks.finite(w, "weights with -inf in the float mask")


@exercise.check("finite")
def fully_blocked_row_is_finite(kernel):
    """A query whose keys are all blocked gives finite output (no NaN anywhere)."""
    allow = att.causal_allow(T, S)
    allow[1] = False
    keep = att.padding_keep([S, S], S)
    keep[1] = False  # one sample with every key padded
    y, w = attend(
        build(kernel),
        att.randn(B, T, E, seed=1),
        att.randn(B, S, E, seed=2),
        attn_mask=allow,
        key_padding_mask=keep,
    )
    checks.finite(y, "y with a fully blocked query row")
    checks.finite(w, "weights with a fully blocked query row")


# -- 6. parity with torch.nn.MultiheadAttention (float64) -------------------------------


def parity(kernel, *, cross=False, allow=None, additive=None, keep=None, dtype=torch.float64):
    """y and weights vs nn.MultiheadAttention in `dtype`, at assert_close's default tolerance."""
    mha = build(kernel)
    ref = with_random_biases(kernel, mha, dtype)
    batch = allow.shape[0] if allow is not None and allow.dim() == 4 else B
    x = att.randn(batch, T, E, seed=11, dtype=dtype)
    kv = att.randn(batch, S, E, seed=12, dtype=dtype) if cross else None
    mask, blocked = None, None
    if allow is not None:
        mask = allow
        blocked = att.fold_heads(~allow, H) if allow.dim() == 4 else ~allow
    if additive is not None:
        mask = blocked = additive.to(dtype)
    y, w = attend(mha, x, kv, attn_mask=mask, key_padding_mask=keep)
    source = x if kv is None else kv
    y_ref, w_ref = att.run_oracle(ref, x, source, source, blocked, None if keep is None else ~keep)
    checks.close(y, y_ref, "y vs nn.MultiheadAttention")
    checks.close(w, w_ref, "weights vs nn.MultiheadAttention")


@exercise.check("parity", points=2)
def parity_without_mask(kernel):
    """Same y and weights as nn.MultiheadAttention with the same (biased) projections."""
    parity(kernel)


@exercise.check("parity", points=2)
def parity_with_causal_mask(kernel):
    """Parity under a [T, T] bool causal mask."""
    parity(kernel, allow=att.causal_allow(T))


@exercise.check("parity", points=2)
def parity_with_float_mask(kernel):
    """Parity under an additive float mask with finite and -inf entries."""
    additive = att.randn(T, T, seed=21, scale=2.0)
    additive[0, 1:] = float("-inf")
    parity(kernel, additive=additive)


@exercise.check("parity", points=2)
def parity_with_per_sample_mask(kernel):
    """Parity under a [B, 1, T, S] bool mask (cross-attention)."""
    allow = torch.rand(B, 1, T, S, generator=torch.Generator().manual_seed(5)) > 0.4
    allow[..., 0] = True  # no fully blocked rows: the oracle gives NaN for those
    parity(kernel, cross=True, allow=allow)


@exercise.check("parity", points=2)
def parity_with_key_padding(kernel):
    """Parity with a key padding mask, different lengths per sample."""
    parity(kernel, cross=True, keep=att.padding_keep([S - 1, S - 4], S))


@exercise.check("parity", points=2)
def parity_in_cross_attention(kernel):
    """Parity in cross-attention: queries from x, keys and values from kv."""
    parity(kernel, cross=True)


@exercise.check("parity", points=1)
def parity_in_float32(kernel):
    """Parity in float32 at assert_close's default tolerance (rtol 1.3e-6, atol 1e-5)."""
    parity(kernel, cross=True, dtype=torch.float32)


# -- 7. training ------------------------------------------------------------------------


@exercise.check("training", points=2)
def gradients_reach_every_parameter_and_the_input(kernel):
    """Backprop from y reaches every parameter and the input."""
    mha = build(kernel)
    mha.train()
    x = att.randn(B, T, E, seed=1)
    grads = kernel.grad(
        mha, (x,), {}, wrt=[0], cotangent=att.randn(B, T, E, seed=2), output_path=[0]
    )
    att.require_gradients(grads, (B, T, E))


@exercise.check("training", points=2)
def input_gradient_matches_oracle(kernel):
    """d(sum(y * r))/dx matches nn.MultiheadAttention's in float64 (causal self-attention)."""
    mha = build(kernel)
    ref = with_random_biases(kernel, mha)
    x = att.randn(B, T, E, seed=1, dtype=torch.float64)
    r = att.randn(B, T, E, seed=2, dtype=torch.float64)
    allow = att.causal_allow(T)
    grads = kernel.grad(mha, (x,), {"attn_mask": allow}, wrt=[0], cotangent=r, output_path=[0])
    xr = x.clone().requires_grad_(True)
    y_ref, _ = ref(xr, xr, xr, attn_mask=~allow, need_weights=False)
    (y_ref * r).sum().backward()
    checks.close(
        checks.tensor(grads["inputs"][0], "input gradient"),
        xr.grad,
        "input gradient vs nn.MultiheadAttention",
    )


@exercise.check("training", points=2)
def eval_mode_ignores_dropout(kernel):
    """With dropout_p = 0.5 in eval mode, outputs are deterministic and dropout-free."""
    x = att.randn(B, T, E, seed=1)
    plain, _ = attend(build(kernel), x)
    noisy = build(kernel, dropout_p=0.5)
    first = checks.tensor(
        kernel.call(noisy.target, None, (x,), {"need_weights": True}, "forward", seed=1)[0], "y"
    )
    second = checks.tensor(
        kernel.call(noisy.target, None, (x,), {"need_weights": True}, "forward", seed=2)[0], "y"
    )
    checks.same(first, plain, "eval-mode y with dropout_p=0.5 vs dropout_p=0")
    checks.same(second, first, "two eval-mode calls with dropout_p=0.5")


@exercise.check("training", points=1)
def train_mode_applies_dropout(kernel):
    """With dropout_p = 0.5 in train mode, the output is finite and differs from eval mode."""
    x = att.randn(B, T, E, seed=1)
    mha = build(kernel, dropout_p=0.5)
    y_eval, _ = attend(mha, x)
    mha.train()
    y_train = checks.tensor(
        kernel.call(mha.target, None, (x,), {}, "forward", seed=3)[0], "y in train mode"
    )
    checks.finite(y_train, "train-mode y with dropout_p=0.5")
    checks.differ(y_train, y_eval, "train-mode y with dropout_p=0.5 vs eval mode")


@exercise.check("training", points=2)
def split_heads_layout(kernel):
    """_split_heads: [B, T, E] -> [B, H, T, Dh], head h on channels h*Dh .. (h+1)*Dh."""
    mha = build(kernel)
    for length in (T, S):
        x = torch.arange(B * length * E, dtype=torch.float32).reshape(B, length, E)
        xh = checks.tensor(
            mha._split_heads(x), f"_split_heads of [B, {length}, E]", (B, H, length, DH)
        )
        for h in range(H):
            if not torch.equal(xh[:, h], x[..., h * DH : (h + 1) * DH]):
                raise Failed(
                    f"_split_heads: head {h} does not hold channels {h * DH}..{(h + 1) * DH - 1} of each position"
                )


@exercise.check("training", points=2)
def merge_heads_inverts_split(kernel):
    """_merge_heads puts head h back on channels h*Dh .. (h+1)*Dh and undoes _split_heads."""
    mha = build(kernel)
    xh = torch.arange(B * H * T * DH, dtype=torch.float32).reshape(B, H, T, DH)
    merged = checks.tensor(mha._merge_heads(xh), "_merge_heads of [B, H, T, Dh]", (B, T, E))
    want = xh.transpose(1, 2).reshape(B, T, E)
    if not torch.equal(merged, want):
        raise Failed(
            "_merge_heads: channel h*Dh + d of position t must be head h, position t, feature d"
        )
    x = att.randn(B, T, E, seed=1)
    back = checks.tensor(
        mha._merge_heads(mha._split_heads(x)), "_merge_heads(_split_heads(x))", (B, T, E)
    )
    checks.same(back, x, "_merge_heads(_split_heads(x))")


# -- 8. from scratch --------------------------------------------------------------------


@exercise.check("from scratch", points=2)
def no_builtin_attention_in_source(kernel):
    """The notebook's code does not name torch's attention built-ins."""
    attend(build(kernel), att.randn(B, T, E, seed=1))
    require_clean_source(kernel.sources, exercise.forbidden, exercise.watch)


@exercise.check("from scratch", points=2)
def no_builtin_attention_at_run_time(kernel):
    """No attention built-in is called while the suite runs, and no nn.MultiheadAttention
    sits inside the module."""
    mha = build(kernel)
    attend(
        mha,
        att.randn(B, T, E, seed=1),
        att.randn(B, S, E, seed=2),
        attn_mask=att.causal_allow(T, S),
    )
    require_nothing_seen(kernel.seen)
    require_no_builtin_module(kernel.modules(mha), "MultiHeadAttention", exercise.watch)
