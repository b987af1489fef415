"""Hidden suite for `mha_selfattn` (seed 003): a multi-head self-attention nn.Module with
`q_proj`/`k_proj`/`v_proj`/`out_proj`, a default dropout of 0.1, one `mask` argument
(1/True = attend, 0/False = blocked, broadcastable to [B, H, T, T]) and per-head weights
[B, H, T, T]; plus `create_causal_mask(seq_len)`. Self-attention has no separate key length
(S == T). Every check puts the module in eval mode unless it tests training: the default
dropout is 0.1 and the returned weights are taken after dropout.

One feature per test: modules built with dropout 0.0, no mask, contiguous inputs, unless a
test is about that. Mask tests compare the masking (weights on blocked keys, the unmasked
weights renormalised, outputs that must not move), not the values; parity and gradient tests
compare the values, without a mask.
"""

import torch

from grader.exercises import _attention as att
from grader.exercises import _shared as lib
from grader.suite import checks
from grader.suite.library import noncontiguous

exercise = att.exercise(
    id="mha_selfattn",
    tags=("attention",),
    minutes=30,
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
    profile=att.Profile(__name__, "A"),  # `--profile`: times this suite's adapter A
)

E, H, B, T = 12, 3, 2, 5


DEFAULT_DROPOUT = 0.1


class SelfAttention(att.Adapter):
    """MultiHeadAttention(embed_dim=E, num_heads=H[, dropout=...]), forward(x[, mask=...]);
    built with dropout 0.0 unless told (the default, 0.1, is not passed: the constructor's)."""

    def new(self, kernel, dropout, bias, seed):
        options = {} if dropout == DEFAULT_DROPOUT else {"dropout": dropout}
        return kernel.new(self.owner, embed_dim=self.E, num_heads=self.H, seed=seed, **options)


A = SelfAttention(E, H, B, T, T, dropout=0.0)
SEED = A.replace(E=64, H=4, T=10, S=10)


def mask_from(value, seq_len: int) -> torch.Tensor:
    """create_causal_mask's answer as a [T, T] bool (True = attend), or Failed."""
    what, want = f"create_causal_mask({seq_len})", (seq_len, seq_len)
    if not isinstance(value, torch.Tensor):
        raise checks.Failed(f"{what}: got {checks.describe(value)}, want a torch.Tensor")
    shape = tuple(value.shape)
    if not (2 <= len(shape) <= 4 and shape[-2:] == want and set(shape[:-2]) <= {1}):
        raise checks.Failed(f"{what} shape {shape}, want {(1, 1, *want)} or {want}")
    return (value != 0).reshape(want)


@exercise.check("shapes", hidden=False)
def output_shape(kernel):
    """The seed's sizes (E=64, H=4, x [2, 10, 64]): output [2, 10, 64], weights [2, 4, 10, 10]."""
    lib.shapes(kernel, SEED)


@exercise.check("shapes")
def shapes_with_three_heads(kernel):
    """E=12, H=3, x [2, 5, 12]: output [2, 5, 12], per-head weights [2, 3, 5, 5]."""
    lib.shapes(kernel, A)


@exercise.check("shapes")
def single_token_and_batch_of_one(kernel):
    """B = 1, T = 1: output [1, 1, E], weights [1, H, 1, 1]."""
    lib.shapes(kernel, A, batch=1, t=1, seed=3)


@exercise.check("shapes")
def non_contiguous_input(kernel):
    """A non-contiguous x (column-major, strided) gives the same output as its contiguous copy."""
    mha, x = A.build(kernel), att.randn(B, T, E, seed=4)
    y1, _ = A.forward(mha, (x,))
    y2, _ = A.forward(mha, (noncontiguous(x),))
    checks.same(y2, y1, "output for a non-contiguous x vs its contiguous copy")


@exercise.check("shapes")
def input_left_unchanged(kernel):
    """forward does not modify x in place (eval mode, no mask)."""
    lib.inputs_left_unchanged(kernel, A)


@exercise.check("normalization", hidden=False)
def weights_sum_to_one(kernel):
    """The seed's sizes, eval mode: every head's weights are non-negative and sum to 1."""
    lib.probabilities(kernel, SEED, "weights (eval mode)")


@exercise.check("normalization")
def weights_sum_to_one_with_three_heads(kernel):
    """E=12, H=3: each head's weights sum to 1 over the keys."""
    lib.probabilities(kernel, A, "weights with H=3", seed=2)


@exercise.check("normalization")
def large_inputs_stay_normalised(kernel):
    """Inputs of magnitude ~1e3 (logits ~1e5) still give probabilities: a stable softmax."""
    lib.large_inputs_stay_normalised(kernel, A)


@exercise.check("padding", points=2)
def padded_keys_get_no_weight(kernel):
    """A [B, 1, 1, T] bool padding mask: padded keys get ~0 weight, rows still sum to 1."""
    lib.obeys(kernel, A, att.padding_allow([T - 1, T - 3], T), "padded keys")


@exercise.check("padding", points=2)
def padded_values_do_not_matter(kernel):
    """Changing the padded tokens leaves the real tokens' outputs unchanged."""
    lib.padded_key_values_do_not_matter(kernel, A, [T - 1, T - 3])


@exercise.check("padding", points=2)
def integer_padding_mask(kernel):
    """A 0/1 integer mask (the seed's `mask == 0` convention) acts like the bool mask."""
    lib.mask_dtypes_agree(kernel, A, att.padding_allow([T - 2, T], T))


@exercise.check("padding", points=2)
def per_sample_mask_broadcasts_over_heads(kernel):
    """A [B, 1, T, T] bool mask, different per sample, with B == H: every head obeys it."""
    lib.per_sample_mask_broadcasts_over_heads(kernel, A, last=2)


@exercise.check("padding", points=2)
def samples_are_independent(kernel):
    """Changing sample 1 leaves sample 0's output and weights (with a per-sample padding mask),
    not sample 1's."""
    mha, x = A.build(kernel), att.randn(B, T, E, seed=1)
    other = x.clone()
    other[1] = att.randn(T, E, seed=8, scale=2.0)
    allow = att.padding_allow([T - 1, T - 2], T)
    y1, w1 = A.forward(mha, (x,), allow)
    y2, w2 = A.forward(mha, (other,), allow)
    checks.same(y2[0], y1[0], "sample 0's output after changing sample 1 (a padding mask)")
    checks.same(w2[0], w1[0], "sample 0's weights after changing sample 1 (a padding mask)")
    checks.differ(y2[1], y1[1], "sample 1's output after changing sample 1 (a padding mask)")


@exercise.check("padding", points=2)
def per_head_mask(kernel):
    """A random [B, H, T, T] bool mask (a different mask per head): every head obeys its own."""
    allow = att.random_allow(B, H, T, T, seed=6, p=0.5, open=-1)
    lib.obeys(kernel, A, allow, "keys blocked per head ([B, H, T, T] mask)")


@exercise.check("padding", points=2)
def masked_weights_are_the_unmasked_ones_renormalised(kernel):
    """Under a random [B, 1, T, T] mask, each row's weights are its unmasked weights on the
    allowed keys, renormalised, in every head."""
    allow = att.random_allow(H, 1, T, T, seed=5)
    lib.masked_weights_renormalise(kernel, A, allow, "a random [B, 1, T, T] mask")


@exercise.check("causal", points=2, hidden=False)
def masked_attention(kernel):
    """The seed's test: with create_causal_mask(5) as the mask, future keys get ~0 weight."""
    mask, five = kernel.get("create_causal_mask")(5), SEED.replace(B=1, T=5, S=5)
    mask_from(mask, 5)
    lib.obeys(kernel, five, att.causal_allow(5), "future keys (create_causal_mask(5))", mask=mask)


@exercise.check("causal", points=2)
def causal_mask_is_lower_triangular(kernel):
    """create_causal_mask(T) is [1, 1, T, T] (or [T, T]), nonzero exactly where key <= query."""
    make = kernel.get("create_causal_mask")
    for length in (1, 4, 7):
        got, want = mask_from(make(length), length), att.causal_allow(length)
        if not torch.equal(got, want):
            i, j = (int(k) for k in (got != want).nonzero()[0])
            verb = "allows" if bool(got[i, j]) else "blocks"
            raise checks.Failed(
                f"create_causal_mask({length}) {verb} key {j} for query {i}: "
                "want 1/True exactly where key <= query (the diagonal included)"
            )


@exercise.check("causal", points=2)
def future_keys_get_no_weight(kernel):
    """A [T, T] bool causal mask (True = attend): keys after the query get ~0 weight."""
    lib.obeys(kernel, A, att.causal_allow(T), "future keys", cross=False)


@exercise.check("causal", points=2)
def future_tokens_do_not_change_the_past(kernel):
    """With a [1, 1, T, T] causal mask, output[:, t] ignores tokens after t."""
    lib.later_tokens(kernel, A)


@exercise.check("causal", points=2)
def causal_and_padding_together(kernel):
    """A [B, 1, T, T] mask = causal AND padding: every blocked key gets ~0 weight."""
    allow = att.causal_allow(T)[None, None] & att.padding_allow([T, T - 2], T)
    lib.obeys(kernel, A, allow, "keys blocked by causal and padding masks")


@exercise.check("causal")
def input_and_mask_left_unchanged(kernel):
    """forward with a [T, T] bool causal mask modifies neither x nor the mask."""
    lib.inputs_left_unchanged(kernel, A, att.causal_allow(T))


@exercise.check("finite")
def zero_input_is_finite(kernel):
    """An all-zero input gives finite output and weights."""
    lib.zero_input_is_finite(kernel, A)


@exercise.check("finite")
def large_input_is_finite(kernel):
    """Inputs of magnitude ~1e4 give a finite output."""
    lib.large_input_is_finite(kernel, A)


@exercise.check("finite", points=2)
def fully_blocked_row_is_finite(kernel):
    """A query with every key blocked: finite output and weights; other rows still sum to 1."""
    allow = att.causal_allow(T)[None, None].repeat(B, 1, 1, 1)
    allow[1, 0, 2] = False  # sample 1, query 2: nothing to attend to
    lib.fully_blocked_rows(kernel, A, allow)


@exercise.check("finite", points=2)
def fully_padded_sample_is_finite(kernel):
    """A sample whose every token is padding ([B, 1, 1, T] mask all 0) gives finite output."""
    allow = att.padding_allow([T - 1, 0], T)
    lib.fully_blocked_rows(kernel, A, allow, what="a fully padded sample")


@exercise.check("parity", points=2)
def parity_without_mask(kernel):
    """Same output and per-head weights as nn.MultiheadAttention (biased projections, float64)."""
    lib.parity(kernel, A)


@exercise.check("parity", points=1)
def parity_with_large_inputs(kernel):
    """Parity for inputs of magnitude ~30 (nearly one-hot weights), in float64."""
    lib.parity(kernel, A, scale=30.0)


@exercise.check("parity", points=1)
def parity_in_float32(kernel):
    """Parity in float32 at assert_close's default tolerance (rtol 1.3e-6, atol 1e-5)."""
    lib.parity(kernel, A, dtype=att.F32)


@exercise.check("training", points=2)
def gradients_reach_every_parameter_and_the_input(kernel):
    """Backprop from the output (train mode) reaches every parameter and the input."""
    lib.gradients_reach(kernel, A)


@exercise.check("training", points=2)
def input_gradient_matches_oracle(kernel):
    """d(sum(output * r))/dx matches nn.MultiheadAttention's in float64."""
    lib.input_gradients_match_oracle(kernel, A)


@exercise.check("training", points=2)
def eval_mode_ignores_default_dropout(kernel):
    """In eval mode the default dropout (0.1) is off: seeded calls agree with dropout=0.0."""
    lib.eval_mode_ignores_dropout(kernel, A, p=DEFAULT_DROPOUT)


@exercise.check("training", points=1)
def train_mode_applies_dropout(kernel):
    """In train mode, the default dropout (0.1) leaves the output finite and changes it."""
    lib.train_mode_applies_dropout(kernel, A, p=DEFAULT_DROPOUT)


@exercise.check("training", points=1)
def dropout_zero_in_train_mode(kernel):
    """dropout=0.0 is honoured: in train mode the output and weights are eval mode's."""
    module, x = A.build(kernel, dropout=0.0), A.inputs()
    y_eval, w_eval = A.forward(module, x)
    module.train()
    y_train, w_train = A.forward(module, x, seed=3)
    checks.same(y_train, y_eval, "train-mode output with dropout 0.0 vs eval mode")
    checks.same(w_train, w_eval, "train-mode weights with dropout 0.0 vs eval mode")


@exercise.check("training", points=1)
def input_left_unchanged_in_train_mode(kernel):
    """In train mode with dropout 0.5, forward does not modify x."""
    lib.inputs_left_unchanged(kernel, A, train=True)


@exercise.check("from scratch", points=2)
def no_builtin_attention_in_source(kernel):
    """The notebook's code does not name torch's attention built-ins."""
    lib.no_builtin_attention_in_source(kernel, exercise, A)


@exercise.check("from scratch", points=2)
def no_builtin_attention_at_run_time(kernel):
    """No attention built-in runs during the suite, and no nn.MultiheadAttention sits inside."""
    lib.no_builtin_attention_at_run_time(kernel, exercise, A)
