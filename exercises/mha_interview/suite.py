"""Hidden suite for `mha_interview` (seed 000): an nn.Module MultiHeadAttention with a
config dataclass, self- and cross-attention, bool-or-float attention masks (True = allow)
and a key padding mask (True = keep).

One feature per test: self-attention (kv=None), no masks, dropout 0 and contiguous inputs,
unless a test is about that. Mask tests compare the masking (weights on blocked keys, the
unmasked weights reweighted, outputs that must not move), not the values; parity and
gradient tests compare the values, without a mask.
"""

import torch

from grader.exercises import _attention as att
from grader.exercises import _shared as lib
from grader.suite import checks
from grader.suite.library import noncontiguous

exercise = att.exercise(
    id="mha_interview",
    tags=("attention",),
    minutes=35,
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
    profile=att.Profile(__name__, "A"),  # `--profile`: times this suite's adapter A
)

E, H, B, T, S = 12, 3, 2, 5, 7


class Interview(att.Adapter):
    """forward(x, kv=None, *, attn_mask, key_padding_mask, need_weights) -> (y, weights
    averaged over heads or None); a [B, 1, 1, S] canonical mask goes as key_padding_mask."""

    def new(self, kernel, dropout, bias, seed):
        cfg = kernel.new("AttentionConfig", self.E, self.H, dropout_p=dropout, bias=bias)
        return kernel.new("MultiHeadAttention", cfg, seed=seed)

    def request(self, module, inputs, allow=None, weights=True):
        kwargs: dict = {"need_weights": True} if weights else {}
        if allow is not None and allow.dim() == 4 and allow.shape[2] == 1:
            kwargs["key_padding_mask"] = allow[:, 0, 0]
        elif allow is not None:
            kwargs["attn_mask"] = allow[0, 0] if allow.dim() == 4 and allow.shape[0] == 1 else allow
        return module, (inputs[0], inputs[1] if len(inputs) > 1 else None), kwargs


A = Interview(E, H, B, T, S, args=("x", "kv"), output="output y", per_head=False)
# one head: its averaged weights are the head's own, so a mask's effect on them can be computed
ONE_HEAD = A.replace(H=1)


def masked_weights_reweighted(kernel, attn_mask: torch.Tensor, what: str) -> None:
    """With one head, the weights under an attention mask (bool, or float added to the logits)
    are the unmasked weights times the mask's factor (1/0, or exp(mask)), renormalised: the
    mask changes how much each key counts and nothing else. Both calls are the candidate's."""
    module, inputs = ONE_HEAD.build(kernel), ONE_HEAD.inputs(cross=False)
    w0 = ONE_HEAD.weights(module, inputs)
    w1 = ONE_HEAD.weights(module, inputs, attn_mask=attn_mask)
    factor = attn_mask.double() if attn_mask.dtype == torch.bool else attn_mask.double().exp()
    want = w0.double() * factor
    want = (want / want.sum(dim=-1, keepdim=True)).to(w0.dtype)
    checks.close(w1, want, f"weights with {what} vs the unmasked ones reweighted")


@exercise.check("shapes", hidden=False)
def self_attention_shapes(kernel):
    """Self-attention: y is [B, T, E] and the weights [B, T, T]."""
    lib.shapes(kernel, A, cross=False)


@exercise.check("shapes", hidden=False)
def cross_attention_shapes(kernel):
    """Cross-attention with S != T: y is [B, T, E] and the weights [B, T, S]."""
    lib.shapes(kernel, A)


@exercise.check("shapes")
def no_weights_unless_asked(kernel):
    """need_weights=False (the default) returns (y, None)."""
    lib.no_weights_unless_asked(kernel, A.replace(args=("x",)))


@exercise.check("shapes")
def single_token_and_batch_of_one(kernel):
    """B = 1, T = 1 (self-attention)."""
    lib.shapes(kernel, A, batch=1, t=1, cross=False, seed=3)


@exercise.check("shapes")
def non_contiguous_input(kernel):
    """A non-contiguous x (column-major, strided) gives the output of its contiguous copy."""
    module, (x,) = A.build(kernel), A.inputs(cross=False)
    (y, w), (y2, w2) = A.forward(module, (x,)), A.forward(module, (noncontiguous(x),))
    checks.same(y2, y, "output y for a non-contiguous x vs its contiguous copy")
    checks.same(w2, w, "weights for a non-contiguous x vs its contiguous copy")


@exercise.check("shapes")
def input_left_unchanged(kernel):
    """forward does not modify x in place (eval mode, no mask)."""
    lib.inputs_left_unchanged(kernel, A, cross=False)


@exercise.check("normalization", hidden=False)
def weights_are_probabilities(kernel):
    """Self-attention weights are non-negative and sum to 1 over the keys."""
    lib.probabilities(kernel, A, "self-attention weights", cross=False)


@exercise.check("normalization")
def cross_weights_are_probabilities(kernel):
    """Cross-attention weights sum to 1 over the S keys."""
    lib.probabilities(kernel, A, "cross-attention weights")


@exercise.check("normalization")
def large_inputs_stay_normalised(kernel):
    """Inputs of magnitude ~1e3 (logits ~1e5) still give probabilities: a stable softmax."""
    lib.large_inputs_stay_normalised(kernel, A)


@exercise.check("padding", points=2, hidden=False)
def padded_keys_get_no_weight(kernel):
    """key_padding_mask (False = pad), self-attention: padded keys get ~0 weight."""
    lib.obeys(kernel, A, att.padding_allow([T - 1, T - 3], T), "padded keys", False)


@exercise.check("padding", points=2)
def padded_tokens_do_not_matter(kernel):
    """Changing what sits in the padded positions leaves the real tokens' y unchanged."""
    lib.padded_key_values_do_not_matter(kernel, A.replace(args=("x",), S=T), [T - 1, T - 3])


@exercise.check("padding", points=2)
def padding_per_sample(kernel):
    """A sample with no padding beside one with two padded keys: each obeys its own."""
    lib.obeys(kernel, A, att.padding_allow([T, T - 2], T), "padded keys (per sample)", False)


@exercise.check("padding")
def inputs_and_key_padding_left_unchanged(kernel):
    """forward with a key_padding_mask modifies neither x nor the mask."""
    lib.inputs_left_unchanged(kernel, A, att.padding_allow([T - 1, T - 2], T), cross=False)


@exercise.check("causal", points=2, hidden=False)
def future_keys_get_no_weight(kernel):
    """A [T, T] bool causal mask (True = allow): keys after the query get ~0 weight."""
    lib.obeys(kernel, A, att.causal_allow(T), "future keys", cross=False)


@exercise.check("causal", points=2)
def future_tokens_do_not_change_the_past(kernel):
    """With a causal mask, y[:, t] does not change when tokens after t change."""
    lib.later_tokens(kernel, A)


@exercise.check("causal", points=2)
def float_mask_reweights_the_keys(kernel):
    """A float mask with finite entries is added to the logits: with one head, the weights
    are the unmasked ones times exp(mask), renormalised."""
    additive = att.randn(T, T, seed=21, scale=2.0)
    masked_weights_reweighted(kernel, additive, "a float [T, T] mask added to the logits")


@exercise.check("causal", points=2)
def bool_mask_renormalises_the_allowed_keys(kernel):
    """A random bool [B, 1, T, T] mask: with one head, the weights are the unmasked ones on
    the allowed keys, renormalised."""
    masked_weights_reweighted(kernel, att.random_allow(B, 1, T, T, seed=5), "a random bool mask")


@exercise.check("causal", points=2)
def float_causal_mask(kernel):
    """A float mask (0 = allow, -inf = block) is added to the logits."""
    allow = att.causal_allow(T)
    additive = torch.zeros(T, T).masked_fill(~allow, float("-inf"))
    lib.obeys(kernel, A, allow, "future keys (float mask)", False, attn_mask=additive)


@exercise.check("causal", points=2)
def per_sample_mask_broadcasts_over_heads(kernel):
    """A [B, 1, T, T] bool mask, different per sample, with B == H (self-attention)."""
    lib.per_sample_mask_broadcasts_over_heads(kernel, A.replace(S=T), cross=False)


@exercise.check("finite", hidden=False)
def zero_input_is_finite(kernel):
    """An all-zero input gives finite y and weights."""
    lib.zero_input_is_finite(kernel, A)


@exercise.check("finite")
def large_input_is_finite(kernel):
    """Inputs of magnitude ~1e4 give finite y."""
    lib.large_input_is_finite(kernel, A, cross=False)


@exercise.check("finite")
def float_mask_with_inf_is_finite(kernel):
    """A float mask holding -inf in some (not all) positions of each row."""
    additive = att.randn(T, T, seed=4)
    additive[:, 1::2] = float("-inf")
    y, w = A.forward(A.build(kernel), A.inputs(cross=False), attn_mask=additive)
    checks.finite(y, "output y with -inf in the float mask")
    checks.finite(w, "weights with -inf in the float mask")


@exercise.check("finite")
def fully_blocked_row_is_finite(kernel):
    """A query whose keys are all blocked gives finite output (no NaN anywhere)."""
    allow, keep = att.causal_allow(T), torch.ones(B, T, dtype=torch.bool)
    allow[1] = False  # query 1 of every sample
    keep[1] = False  # every key of sample 1 padded
    inputs = A.inputs(cross=False)
    y, w = A.forward(A.build(kernel), inputs, attn_mask=allow, key_padding_mask=keep)
    checks.finite(y, "output y with fully blocked query rows")
    checks.finite(w, "weights with fully blocked query rows")


@exercise.check("parity", points=2)
def parity_without_mask(kernel):
    """Same y and weights as nn.MultiheadAttention with the same (biased) projections."""
    lib.parity(kernel, A, cross=False)


@exercise.check("parity", points=2)
def parity_in_cross_attention(kernel):
    """Parity in cross-attention: queries from x, keys and values from kv (S != T)."""
    lib.parity(kernel, A)


@exercise.check("parity", points=1)
def parity_without_bias(kernel):
    """Parity with AttentionConfig(bias=False): no bias in any projection."""
    lib.parity(kernel, A, cross=False, bias=False)


@exercise.check("parity", points=1)
def parity_in_float32(kernel):
    """Parity in float32 at assert_close's default tolerance (rtol 1.3e-6, atol 1e-5)."""
    lib.parity(kernel, A, cross=False, dtype=att.F32)


@exercise.check("training", points=2)
def gradients_reach_every_parameter_and_the_input(kernel):
    """Backprop from y reaches every parameter and the input (self-attention)."""
    lib.gradients_reach(kernel, A, cross=False)


@exercise.check("training", points=2)
def input_gradient_matches_oracle(kernel):
    """d(sum(y * r))/dx matches nn.MultiheadAttention's in float64 (self-attention)."""
    lib.input_gradients_match_oracle(kernel, A)


@exercise.check("training", points=2)
def eval_mode_ignores_dropout(kernel):
    """With dropout_p = 0.5 in eval mode, outputs are deterministic and dropout-free."""
    lib.eval_mode_ignores_dropout(kernel, A)


@exercise.check("training", points=1)
def dropout_zero_in_train_mode(kernel):
    """dropout_p = 0.0 (the default) is honoured: in train mode y is eval mode's."""
    module, x = A.build(kernel, dropout=0.0), A.inputs(cross=False)
    y_eval, _ = A.forward(module, x)
    module.train()
    y_train, _ = A.forward(module, x, seed=3)
    checks.same(y_train, y_eval, "train-mode output y with dropout_p 0.0 vs eval mode")


@exercise.check("training", points=1)
def train_mode_applies_dropout(kernel):
    """With dropout_p = 0.5 in train mode, the output is finite and differs from eval mode."""
    lib.train_mode_applies_dropout(kernel, A)


@exercise.check("training", points=2)
def split_heads_layout(kernel):
    """_split_heads: [B, T, E] -> [B, H, T, Dh], head h on channels h*Dh .. (h+1)*Dh."""
    lib.split_heads_layout(kernel, A)


@exercise.check("training", points=2)
def merge_heads_inverts_split(kernel):
    """_merge_heads puts head h back on channels h*Dh .. (h+1)*Dh and undoes _split_heads."""
    lib.merge_heads_inverts_split(kernel, A)


@exercise.check("from scratch", points=2)
def no_builtin_attention_in_source(kernel):
    """The notebook's code does not name torch's attention built-ins."""
    lib.no_builtin_attention_in_source(kernel, exercise, A)


@exercise.check("from scratch", points=2)
def no_builtin_attention_at_run_time(kernel):
    """No attention built-in runs during the suite, and no nn.MultiheadAttention sits inside."""
    lib.no_builtin_attention_at_run_time(kernel, exercise, A)
