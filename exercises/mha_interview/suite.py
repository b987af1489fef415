"""Hidden suite for `mha_interview` (seed 000): an nn.Module MultiHeadAttention with a
config dataclass, self- and cross-attention, bool-or-float attention masks (True = allow)
and a key padding mask (True = keep).
"""

import torch

from grader.exercises import _attention as att
from grader.exercises import _shared as lib
from grader.suite import checks

exercise = att.exercise(
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
    lib.no_weights_unless_asked(kernel, A)


@exercise.check("shapes")
def single_token_and_batch_of_one(kernel):
    """B = 1, T = 1 attending to S = 3 keys."""
    lib.shapes(kernel, A, batch=1, t=1, s=3, seed=3)


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
    """Cross-attention with key_padding_mask (False = pad): padded keys get ~0 weight."""
    lib.obeys(kernel, A, att.padding_allow([S - 2, S - 3], S), "padded keys")


@exercise.check("padding", points=2)
def padded_key_values_do_not_matter(kernel):
    """Changing what sits in the padded key positions leaves y unchanged."""
    lib.padded_key_values_do_not_matter(kernel, A, [S - 2, S - 4])


@exercise.check("padding", points=2)
def padding_in_self_attention(kernel):
    """Self-attention with padding: each sample ignores its own padded positions."""
    lib.obeys(kernel, A, att.padding_allow([T, T - 2], T), "padded keys (self-attention)", False)


@exercise.check("causal", points=2, hidden=False)
def future_keys_get_no_weight(kernel):
    """A [T, T] bool causal mask (True = allow): keys after the query get ~0 weight."""
    lib.obeys(kernel, A, att.causal_allow(T), "future keys", cross=False)


@exercise.check("causal", points=2)
def future_tokens_do_not_change_the_past(kernel):
    """With a causal mask, y[:, t] does not change when tokens after t change."""
    lib.later_tokens(kernel, A)


@exercise.check("causal", points=2)
def float_causal_mask(kernel):
    """A float mask (0 = allow, -inf = block) is added to the logits."""
    allow = att.causal_allow(T)
    additive = torch.zeros(T, T).masked_fill(~allow, float("-inf"))
    lib.obeys(kernel, A, allow, "future keys (float mask)", False, attn_mask=additive)


@exercise.check("causal", points=2)
def per_sample_mask_broadcasts_over_heads(kernel):
    """A [B, 1, T, S] bool mask, different per sample, with B == H."""
    lib.per_sample_mask_broadcasts_over_heads(kernel, A)


@exercise.check("finite", hidden=False)
def zero_input_is_finite(kernel):
    """An all-zero input gives finite y and weights."""
    lib.zero_input_is_finite(kernel, A)


@exercise.check("finite")
def large_input_is_finite(kernel):
    """Inputs of magnitude ~1e4 give finite y."""
    lib.large_input_is_finite(kernel, A)


@exercise.check("finite")
def float_mask_with_inf_is_finite(kernel):
    """A float mask holding -inf in some (not all) positions of each row."""
    additive = att.randn(T, S, seed=4)
    additive[:, ::2] = float("-inf")
    y, w = A.forward(A.build(kernel), A.inputs(), attn_mask=additive)
    checks.finite(y, "output y with -inf in the float mask")
    checks.finite(w, "weights with -inf in the float mask")


@exercise.check("finite")
def fully_blocked_row_is_finite(kernel):
    """A query whose keys are all blocked gives finite output (no NaN anywhere)."""
    allow, keep = att.causal_allow(T, S), torch.ones(B, S, dtype=torch.bool)
    allow[1] = False  # query 1 of every sample
    keep[1] = False  # every key of sample 1 padded
    y, w = A.forward(A.build(kernel), A.inputs(), attn_mask=allow, key_padding_mask=keep)
    checks.finite(y, "output y with fully blocked query rows")
    checks.finite(w, "weights with fully blocked query rows")


@exercise.check("parity", points=2)
def parity_without_mask(kernel):
    """Same y and weights as nn.MultiheadAttention with the same (biased) projections."""
    lib.parity(kernel, A, cross=False)


@exercise.check("parity", points=2)
def parity_with_causal_mask(kernel):
    """Parity under a [T, T] bool causal mask."""
    lib.parity(kernel, A, att.causal_allow(T), cross=False)


@exercise.check("parity", points=2)
def parity_with_float_mask(kernel):
    """Parity under an additive float mask with finite and -inf entries."""
    additive = att.randn(T, T, seed=21, scale=2.0, dtype=torch.float64)
    additive[0, 1:] = float("-inf")
    lib.parity(kernel, A, cross=False, blocked=additive, attn_mask=additive)


@exercise.check("parity", points=2)
def parity_with_per_sample_mask(kernel):
    """Parity under a [B, 1, T, S] bool mask (cross-attention)."""
    lib.parity(kernel, A, att.random_allow(B, 1, T, S, seed=5))


@exercise.check("parity", points=2)
def parity_with_key_padding(kernel):
    """Parity with a key padding mask, different lengths per sample."""
    lib.parity(kernel, A, att.padding_allow([S - 1, S - 4], S))


@exercise.check("parity", points=2)
def parity_in_cross_attention(kernel):
    """Parity in cross-attention: queries from x, keys and values from kv."""
    lib.parity(kernel, A)


@exercise.check("parity", points=1)
def parity_in_float32(kernel):
    """Parity in float32 at assert_close's default tolerance (rtol 1.3e-6, atol 1e-5)."""
    lib.parity(kernel, A, dtype=att.F32)


@exercise.check("training", points=2)
def gradients_reach_every_parameter_and_the_input(kernel):
    """Backprop from y reaches every parameter and the input."""
    lib.gradients_reach(kernel, A)


@exercise.check("training", points=2)
def input_gradient_matches_oracle(kernel):
    """d(sum(y * r))/dx matches nn.MultiheadAttention's in float64 (causal self-attention)."""
    lib.input_gradients_match_oracle(kernel, A, att.causal_allow(T))


@exercise.check("training", points=2)
def eval_mode_ignores_dropout(kernel):
    """With dropout_p = 0.5 in eval mode, outputs are deterministic and dropout-free."""
    lib.eval_mode_ignores_dropout(kernel, A)


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
