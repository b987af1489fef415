"""Hidden suite for `mha_selfattn` (seed 003): a multi-head self-attention nn.Module with
`q_proj`/`k_proj`/`v_proj`/`out_proj`, a default dropout of 0.1, one `mask` argument
(1/True = attend, 0/False = blocked, broadcastable to [B, H, T, T]) and per-head weights
[B, H, T, T]; plus `create_causal_mask(seq_len)`.

Every check puts the module in eval mode unless it tests training: the default dropout is
0.1 and the returned weights are taken after dropout. Sizes are chosen so that bugs show:
B, H, T and head_dim all differ, H >= 2, and one masked test has B == H so a mask that is
not broadcast over heads goes wrong. Self-attention has no separate key length (S == T).
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
    id="mha_selfattn",
    title="Multi-head self-attention module with per-head weights and a causal mask helper",
    seed="003_76b4223a311d7164",
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
    defines=("MultiHeadAttention", "create_causal_mask"),
    watch=ATTENTION,
    forbidden=(
        "scaled_dot_product_attention",
        "MultiheadAttention",
        "multi_head_attention_forward",
        "_native_multi_head_attention",
    ),
)

E, H, B, T = 12, 3, 2, 5
DH = E // H
SEED_E, SEED_H = 64, 4  # the sizes of the seed's own tests
PROJECTIONS = ["q_proj", "k_proj", "v_proj", "out_proj"]


def build(kernel, seed: int = 0, **kwargs):
    """The candidate's module with E=12, H=3 (default dropout 0.1 unless given), in eval mode."""
    mha = kernel.new("MultiHeadAttention", E, H, seed=seed, **kwargs)
    mha.eval()
    return mha


def build_seed_sized(kernel):
    """The module the seed's tests build: embed_dim=64, num_heads=4, in eval mode."""
    mha = kernel.new("MultiHeadAttention", embed_dim=SEED_E, num_heads=SEED_H)
    mha.eval()
    return mha


def attend(mha, x, mask=None, heads: int = H):
    """forward(x[, mask=...]); insists on (output [B, T, E], weights [B, heads, T, T])."""
    call = "forward(x)" if mask is None else "forward(x, mask=...)"
    y, w = checks.pair(mha(x) if mask is None else mha(x, mask=mask), call)
    b, t, e = x.shape
    checks.tensor(y, "output", (b, t, e))
    checks.tensor(w, "weights", (b, heads, t, t))
    return y, w


def seeded_output(kernel, mha, x: torch.Tensor, seed: int) -> torch.Tensor:
    """forward(x)'s output, with torch seeded first (dropout draws are then reproducible)."""
    run = kernel.call(mha.target, None, (x,), {}, "forward", seed=seed)
    return checks.tensor(checks.pair(run, "forward(x)")[0], "output", tuple(x.shape))


def padding_allow(lengths: list[int], t: int = T) -> torch.Tensor:
    """[B, 1, 1, T] bool, True = real token, for per-sample lengths."""
    return att.padding_keep(lengths, t)[:, None, None, :]


def blocked_weights(w: torch.Tensor, allow: torch.Tensor) -> torch.Tensor:
    """The entries of w [B, H, T, T] that `allow` (broadcastable, 1 = attend) blocks."""
    return w.masked_select((allow == 0).expand(w.shape))


def with_random_biases(kernel, mha, dtype=torch.float64, seed: int = 7):
    """Randomise every bias (fresh biases are zero and hide bias bugs), cast the module to
    `dtype`, and return it with an nn.MultiheadAttention holding the same weights."""
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


def reference(ref, x: torch.Tensor, allow: torch.Tensor | None = None):
    """The oracle's output and per-head weights; `allow` (1 = attend, broadcastable to
    [B, H, T, T]) becomes its [B*H, T, T] bool mask, True = blocked, in b*H + h order."""
    b, t, _ = x.shape
    blocked = None
    if allow is not None:
        blocked = (allow == 0).expand(b, H, t, t).reshape(b * H, t, t)
    with torch.no_grad():
        return ref(
            x, x, x, attn_mask=blocked, need_weights=True, average_attn_weights=False
        )  # fmt: skip


def mask_from(value, seq_len: int) -> torch.Tensor:
    """create_causal_mask's answer as a [T, T] bool (True = attend), or Failed."""
    what = f"create_causal_mask({seq_len})"
    if not isinstance(value, torch.Tensor):
        raise Failed(f"{what}: got {checks.describe(value)}, want a torch.Tensor")
    shape = tuple(value.shape)
    if not (2 <= len(shape) <= 4 and shape[-2:] == (seq_len, seq_len) and set(shape[:-2]) <= {1}):
        raise Failed(
            f"{what} shape {shape}, want (1, 1, {seq_len}, {seq_len}) or ({seq_len}, {seq_len})"
        )
    return (value != 0).reshape(seq_len, seq_len)


# -- 1. shapes -------------------------------------------------------------------------


@exercise.check("shapes", hidden=False)
def output_shape(kernel):
    """The seed's sizes (E=64, H=4, x [2, 10, 64]): output [2, 10, 64], weights [2, 4, 10, 10]."""
    attend(build_seed_sized(kernel), att.randn(2, 10, SEED_E, seed=1), heads=SEED_H)


@exercise.check("shapes")
def shapes_with_three_heads(kernel):
    """E=12, H=3, x [2, 5, 12]: output [2, 5, 12], per-head weights [2, 3, 5, 5]."""
    attend(build(kernel), att.randn(B, T, E, seed=1))


@exercise.check("shapes")
def single_token_and_batch_of_one(kernel):
    """B = 1, T = 1: output [1, 1, E], weights [1, H, 1, 1]."""
    attend(build(kernel), att.randn(1, 1, E, seed=3))


@exercise.check("shapes")
def non_contiguous_input(kernel):
    """A transposed (non-contiguous) x gives the same output as its contiguous copy."""
    mha = build(kernel)
    x = att.randn(B, E, T, seed=4).transpose(1, 2)
    # the same RNG seed for both calls, so that only the memory layout differs
    y1 = seeded_output(kernel, mha, x.contiguous(), seed=4)
    y2 = seeded_output(kernel, mha, x, seed=4)
    checks.same(y2, y1, "output for a non-contiguous x vs its contiguous copy")


# -- 2. normalization -------------------------------------------------------------------


@exercise.check("normalization", hidden=False)
def weights_sum_to_one(kernel):
    """The seed's sizes, eval mode: every head's weights are non-negative and sum to 1."""
    _, w = attend(build_seed_sized(kernel), att.randn(2, 10, SEED_E, seed=1), heads=SEED_H)
    checks.rows_sum_to_one(w, "weights (eval mode)")


@exercise.check("normalization")
def weights_sum_to_one_with_three_heads(kernel):
    """E=12, H=3: each head's weights sum to 1 over the keys."""
    _, w = attend(build(kernel), att.randn(B, T, E, seed=2))
    checks.rows_sum_to_one(w, "weights with H=3")


@exercise.check("normalization")
def large_inputs_stay_normalised(kernel):
    """Inputs of magnitude ~1e3 (logits ~1e5) still give probabilities: a stable softmax."""
    _, w = attend(build(kernel), att.randn(B, T, E, seed=5, scale=1e3))
    checks.rows_sum_to_one(w, "weights for large inputs")


# -- 3. padding: per-sample masks, samples independent -------------------------------------


@exercise.check("padding", points=2)
def padded_keys_get_no_weight(kernel):
    """A [B, 1, 1, T] bool padding mask: padded keys get ~0 weight, rows still sum to 1."""
    allow = padding_allow([T - 1, T - 3])
    _, w = attend(build(kernel), att.randn(B, T, E, seed=1), allow)
    checks.small(blocked_weights(w, allow), "weights on padded keys", 1e-6)
    checks.rows_sum_to_one(w, "weights with padding")


@exercise.check("padding", points=2)
def padded_values_do_not_matter(kernel):
    """Changing the padded tokens leaves the real tokens' outputs unchanged."""
    mha = build(kernel)
    lengths = [T - 1, T - 3]
    keep = att.padding_keep(lengths, T)
    x = att.randn(B, T, E, seed=1)
    noise = att.randn(B, T, E, seed=3, scale=10.0) * (~keep)[..., None]
    y1, _ = attend(mha, x, keep[:, None, None, :])
    y2, _ = attend(mha, x + noise, keep[:, None, None, :])
    checks.same(y2[keep], y1[keep], "real tokens' outputs after changing padded tokens")


@exercise.check("padding", points=2)
def integer_padding_mask(kernel):
    """A 0/1 integer mask (the seed's `mask == 0` convention) acts like the bool mask."""
    mha = build(kernel)
    allow = padding_allow([T - 2, T])
    x = att.randn(B, T, E, seed=1)
    y1, w1 = attend(mha, x, allow)
    y2, w2 = attend(mha, x, allow.long())
    checks.same(w2, w1, "weights with a 0/1 int64 mask vs the bool mask")
    checks.same(y2, y1, "output with a 0/1 int64 mask vs the bool mask")


@exercise.check("padding", points=2)
def per_sample_mask_broadcasts_over_heads(kernel):
    """A [B, 1, T, T] bool mask, different per sample, with B == H: every head obeys it."""
    batch = H
    allow = torch.ones(batch, 1, T, T, dtype=torch.bool)
    allow[0, 0] = att.causal_allow(T)
    allow[1, 0, :, -2:] = False
    allow[2, 0, :, :2] = False
    _, w = attend(build(kernel), att.randn(batch, T, E, seed=1), allow)
    checks.small(blocked_weights(w, allow), "weights on blocked keys ([B, 1, T, T] mask)", 1e-6)
    checks.rows_sum_to_one(w, "weights with a per-sample mask")


@exercise.check("padding", points=2)
def samples_are_independent(kernel):
    """Changing sample 1 leaves sample 0's output and weights unchanged (with and without a
    padding mask), and does change sample 1's."""
    mha = build(kernel)
    x = att.randn(B, T, E, seed=1)
    other = x.clone()
    other[1] = att.randn(T, E, seed=8, scale=2.0)
    for allow, name in ((None, "no mask"), (padding_allow([T - 1, T - 2]), "a padding mask")):
        y1, w1 = attend(mha, x, allow)
        y2, w2 = attend(mha, other, allow)
        checks.same(y2[0], y1[0], f"sample 0's output after changing sample 1 ({name})")
        checks.same(w2[0], w1[0], f"sample 0's weights after changing sample 1 ({name})")
        checks.differ(y2[1], y1[1], f"sample 1's output after changing sample 1 ({name})")


# -- 4. causal --------------------------------------------------------------------------


@exercise.check("causal", points=2, hidden=False)
def masked_attention(kernel):
    """The seed's test: with create_causal_mask(5) as the mask, future keys get ~0 weight."""
    mask = kernel.get("create_causal_mask")(5)
    mask_from(mask, 5)
    _, w = attend(build_seed_sized(kernel), att.randn(1, 5, SEED_E, seed=1), mask, heads=SEED_H)
    future = ~att.causal_allow(5)
    checks.small(w[0][:, future], "weights on future keys with create_causal_mask(5)", 1e-6)
    checks.rows_sum_to_one(w, "weights with create_causal_mask(5)")


@exercise.check("causal", points=2)
def causal_mask_is_lower_triangular(kernel):
    """create_causal_mask(T) is [1, 1, T, T] (or [T, T]), nonzero exactly where key <= query."""
    make = kernel.get("create_causal_mask")
    for length in (1, 4, 7):
        got = mask_from(make(length), length)
        want = att.causal_allow(length)
        if not torch.equal(got, want):
            i, j = (int(k) for k in (got != want).nonzero()[0])
            verb = "allows" if bool(got[i, j]) else "blocks"
            raise Failed(
                f"create_causal_mask({length}) {verb} key {j} for query {i}: "
                "want 1/True exactly where key <= query (the diagonal included)"
            )


@exercise.check("causal", points=2)
def future_keys_get_no_weight(kernel):
    """A [T, T] bool causal mask (True = attend): keys after the query get ~0 weight."""
    allow = att.causal_allow(T)
    _, w = attend(build(kernel), att.randn(B, T, E, seed=1), allow)
    checks.small(blocked_weights(w, allow), "weights on future keys ([T, T] mask)", 1e-6)
    checks.rows_sum_to_one(w, "weights with a causal mask")


@exercise.check("causal", points=2)
def future_tokens_do_not_change_the_past(kernel):
    """With a [1, 1, T, T] causal mask, output[:, t] ignores tokens after t."""
    mha = build(kernel)
    t = 2
    allow = att.causal_allow(T)[None, None]
    x = att.randn(B, T, E, seed=1)
    later = x.clone()
    later[:, t + 1 :] += att.randn(B, T - t - 1, E, seed=9, scale=3.0)
    y1, _ = attend(mha, x, allow)
    y2, _ = attend(mha, later, allow)
    checks.same(
        y2[:, : t + 1], y1[:, : t + 1], f"output[:, :{t + 1}] after changing tokens after t={t}"
    )
    checks.differ(y2[:, t + 1 :], y1[:, t + 1 :], "output after t (must react to its own tokens)")


@exercise.check("causal", points=2)
def causal_and_padding_together(kernel):
    """A [B, 1, T, T] mask = causal AND padding: every blocked key gets ~0 weight."""
    allow = att.causal_allow(T)[None, None] & padding_allow([T, T - 2])
    _, w = attend(build(kernel), att.randn(B, T, E, seed=1), allow)
    checks.small(blocked_weights(w, allow), "weights on blocked keys (causal and padding)", 1e-6)
    checks.rows_sum_to_one(w, "weights with causal and padding masks")


# -- 5. finite --------------------------------------------------------------------------


@exercise.check("finite")
def zero_input_is_finite(kernel):
    """An all-zero input gives finite output and weights."""
    y, w = attend(build(kernel), torch.zeros(B, T, E))
    checks.finite(y, "output for zero input")
    checks.finite(w, "weights for zero input")


@exercise.check("finite")
def large_input_is_finite(kernel):
    """Inputs of magnitude ~1e4 give a finite output."""
    y, _ = attend(build(kernel), att.randn(B, T, E, seed=6, scale=1e4))
    checks.finite(y, "output for large inputs")


@exercise.check("finite", points=2)
def fully_blocked_row_is_finite(kernel):
    """A query whose keys are all blocked gives finite output and weights; other rows still
    sum to 1."""
    allow = att.causal_allow(T)[None, None].repeat(B, 1, 1, 1)
    allow[1, 0, 2] = False  # sample 1, query 2: nothing to attend to
    y, w = attend(build(kernel), att.randn(B, T, E, seed=1), allow)
    checks.finite(y, "output with a fully blocked query row")
    checks.finite(w, "weights with a fully blocked query row")
    rows = torch.ones(B, T, dtype=torch.bool)
    rows[1, 2] = False
    checks.rows_sum_to_one(w.transpose(1, 2)[rows], "weights of the rows that are not blocked")


@exercise.check("finite", points=2)
def fully_padded_sample_is_finite(kernel):
    """A sample whose every token is padding ([B, 1, 1, T] mask all 0) gives finite output."""
    allow = padding_allow([T - 1, 0])
    y, w = attend(build(kernel), att.randn(B, T, E, seed=1), allow)
    checks.finite(y, "output with a fully padded sample")
    checks.finite(w, "weights with a fully padded sample")
    checks.rows_sum_to_one(w[0], "weights of the sample that is not fully padded")


# -- 6. parity with torch.nn.MultiheadAttention (float64, random biases) -----------------


def parity(kernel, allow=None, batch: int = B, dtype=torch.float64, scale=1.0):
    """Output and per-head weights vs nn.MultiheadAttention in `dtype`, at assert_close's
    default tolerance."""
    mha = build(kernel)
    ref = with_random_biases(kernel, mha, dtype)
    x = att.randn(batch, T, E, seed=11, dtype=dtype, scale=scale)
    y, w = attend(mha, x, allow)
    y_ref, w_ref = reference(ref, x, allow)
    checks.close(y, y_ref, "output vs nn.MultiheadAttention")
    checks.close(w, w_ref, "per-head weights vs nn.MultiheadAttention")


@exercise.check("parity", points=2)
def parity_without_mask(kernel):
    """Same output and per-head weights as nn.MultiheadAttention with the same (biased)
    projections, in float64."""
    parity(kernel)


@exercise.check("parity", points=2)
def parity_with_causal_mask(kernel):
    """Parity under a [T, T] bool causal mask."""
    parity(kernel, allow=att.causal_allow(T))


@exercise.check("parity", points=2)
def parity_with_integer_padding_mask(kernel):
    """Parity under a [B, 1, 1, T] 0/1 int64 padding mask."""
    parity(kernel, allow=padding_allow([T - 1, T - 3]).long())


@exercise.check("parity", points=2)
def parity_with_per_sample_mask(kernel):
    """Parity under a random [B, 1, T, T] bool mask with B == H."""
    allow = torch.rand(H, 1, T, T, generator=torch.Generator().manual_seed(5)) > 0.4
    allow[..., 0] = True  # no fully blocked rows: the oracle gives NaN for those
    parity(kernel, allow=allow, batch=H)


@exercise.check("parity", points=2)
def parity_with_per_head_mask(kernel):
    """Parity under a random [B, H, T, T] bool mask (a different mask per head)."""
    allow = torch.rand(B, H, T, T, generator=torch.Generator().manual_seed(6)) > 0.5
    allow[..., -1] = True
    parity(kernel, allow=allow)


@exercise.check("parity", points=1)
def parity_with_large_inputs(kernel):
    """Parity for inputs of magnitude ~30 (nearly one-hot weights), in float64."""
    parity(kernel, allow=att.causal_allow(T), scale=30.0)


@exercise.check("parity", points=1)
def parity_in_float32(kernel):
    """Parity in float32 at assert_close's default tolerance (rtol 1.3e-6, atol 1e-5)."""
    parity(kernel, allow=att.causal_allow(T), dtype=torch.float32)


# -- 7. training ------------------------------------------------------------------------


@exercise.check("training", points=2)
def gradients_reach_every_parameter_and_the_input(kernel):
    """Backprop from the output (train mode) reaches every parameter and the input."""
    mha = build(kernel)
    mha.train()
    x = att.randn(B, T, E, seed=1)
    grads = kernel.grad(
        mha, (x,), {}, wrt=[0], cotangent=att.randn(B, T, E, seed=2), output_path=[0]
    )
    att.require_gradients(grads, (B, T, E))


@exercise.check("training", points=2)
def input_gradient_matches_oracle(kernel):
    """d(sum(output * r))/dx matches nn.MultiheadAttention's in float64 (causal mask)."""
    mha = build(kernel)
    ref = with_random_biases(kernel, mha)
    x = att.randn(B, T, E, seed=1, dtype=torch.float64)
    r = att.randn(B, T, E, seed=2, dtype=torch.float64)
    allow = att.causal_allow(T)
    grads = kernel.grad(mha, (x,), {"mask": allow}, wrt=[0], cotangent=r, output_path=[0])
    xr = x.clone().requires_grad_(True)
    y_ref, _ = ref(xr, xr, xr, attn_mask=~allow, need_weights=False)
    (y_ref * r).sum().backward()
    checks.close(
        checks.tensor(grads["inputs"][0], "input gradient"),
        xr.grad,
        "input gradient vs nn.MultiheadAttention",
    )


@exercise.check("training", points=2)
def eval_mode_ignores_default_dropout(kernel):
    """In eval mode the default dropout (0.1) is off: calls under different RNG seeds agree
    with each other and with dropout=0.0."""
    x = att.randn(B, T, E, seed=1)
    plain, _ = attend(build(kernel, dropout=0.0), x)
    noisy = build(kernel)
    first = seeded_output(kernel, noisy, x, seed=1)
    second = seeded_output(kernel, noisy, x, seed=2)
    checks.same(first, plain, "eval-mode output with dropout=0.1 vs dropout=0.0")
    checks.same(second, first, "two eval-mode calls with dropout=0.1 (RNG seeds 1 and 2)")


@exercise.check("training", points=1)
def train_mode_applies_dropout(kernel):
    """In train mode, the default dropout (0.1) leaves the output finite and changes it."""
    x = att.randn(B, T, E, seed=1)
    mha = build(kernel)
    y_eval, _ = attend(mha, x)
    mha.train()
    y_train = seeded_output(kernel, mha, x, seed=3)
    checks.finite(y_train, "train-mode output with dropout=0.1")
    checks.differ(y_train, y_eval, "train-mode output with dropout=0.1 vs eval mode")


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
    attend(mha, att.randn(B, T, E, seed=1), att.causal_allow(T)[None, None])
    require_nothing_seen(kernel.seen)
    require_no_builtin_module(kernel.modules(mha), "MultiHeadAttention", exercise.watch)
