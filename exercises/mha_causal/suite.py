"""Hidden suite for `mha_causal` (seed 004): GPT-style causal self-attention written three
ways: one head (`CausalAttention`), stacked heads (`MultiHeadAttentionWrapper`) and split
weights with an output projection (`MultiHeadAttention`). The causal mask is a registered
buffer, 1 = blocked; there is no mask argument and no row is ever fully blocked.

Most tests use d_in != d_out (5 -> 12), H = 3 heads of width 4, B = 2, T = 7 and
context_length = 10, so head layout, scaling and mask-slicing bugs show; one test has B == H.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from grader import checks
from grader.checks import Failed
from grader.exercise import Exercise
from grader.exercises._builtins import ATTENTION
from grader.exercises import _attention as att
from grader.exercises.mha_causal import support as s
from grader.exercises.mha_causal.support import CTX, D_IN, D_OUT, HD, QKV, SPLIT, B, H, T
from grader.integrity import require_clean_source, require_no_builtin_module, require_nothing_seen

exercise = Exercise(
    id="mha_causal",
    title="Causal multi-head attention: one head, stacked heads, split weights",
    seed="004_0190f833cb27afa1",
    levels=[
        "shapes",
        "normalization",
        "causal",
        "finite",
        "parity",
        "training",
        "gpt-2 size",
        "from scratch",
    ],
    defines=("CausalAttention", "MultiHeadAttentionWrapper", "MultiHeadAttention"),
    watch=ATTENTION,
    forbidden=(
        "scaled_dot_product_attention",
        "MultiheadAttention",
        "multi_head_attention_forward",
        "_native_multi_head_attention",
    ),
)

# The seed's walkthrough: torch.manual_seed(123), then the module, on these six tokens.
SEED_INPUTS = torch.tensor(
    [
        [0.43, 0.15, 0.89],
        [0.55, 0.87, 0.66],
        [0.57, 0.85, 0.64],
        [0.22, 0.58, 0.33],
        [0.77, 0.25, 0.10],
        [0.05, 0.80, 0.55],
    ]
)
SEED_WRAPPER = torch.tensor(
    [
        [-0.4519, 0.2216, 0.4772, 0.1063],
        [-0.5874, 0.0058, 0.5891, 0.3257],
        [-0.6300, -0.0632, 0.6202, 0.3860],
        [-0.5675, -0.0843, 0.5478, 0.3589],
        [-0.5526, -0.0981, 0.5321, 0.3428],
        [-0.5299, -0.1081, 0.5077, 0.3493],
    ]
)
SEED_SPLIT = torch.tensor(
    [
        [0.3190, 0.4858],
        [0.2943, 0.3897],
        [0.2856, 0.3593],
        [0.2693, 0.3873],
        [0.2639, 0.3928],
        [0.2575, 0.4028],
    ]
)
GPT2 = {"d_in": 768, "d_out": 768, "heads": 12, "dropout": 0.1, "bias": True, "ctx": 1024}
GPT2_PARAMETERS = 4 * (768 * 768 + 768)  # W_query, W_key, W_value, out_proj: 2,362,368


# -- 1. shapes -------------------------------------------------------------------------


@exercise.check("shapes", hidden=False)
def causal_attention_shapes(kernel):
    """CausalAttention(5, 12): [2, 7, 5] -> [2, 7, 12] with context_length 10 > T."""
    s.output(
        s.causal_attention(kernel),
        att.randn(B, T, D_IN, seed=1),
        "CausalAttention output",
        (B, T, D_OUT),
    )


@exercise.check("shapes", hidden=False)
def wrapper_shapes(kernel):
    """MultiHeadAttentionWrapper(5, 4, heads=3): [2, 7, 5] -> [2, 7, 3 * 4]."""
    s.output(s.wrapper(kernel), att.randn(B, T, D_IN, seed=1), "wrapper output", (B, T, H * HD))


@exercise.check("shapes", hidden=False)
def split_shapes(kernel):
    """MultiHeadAttention(5, 12, heads=3): [2, 7, 5] -> [2, 7, 12]."""
    s.output(
        s.split(kernel), att.randn(B, T, D_IN, seed=1), "MultiHeadAttention output", (B, T, D_OUT)
    )


@exercise.check("shapes")
def full_context_and_single_token(kernel):
    """T == context_length and T == 1 (batch of one) for all three classes."""
    modules = [
        ("CausalAttention", s.causal_attention(kernel), D_OUT),
        ("wrapper", s.wrapper(kernel), H * HD),
        ("MultiHeadAttention", s.split(kernel), D_OUT),
    ]
    for name, module, width in modules:
        for batch, length in ((B, CTX), (1, 1)):
            x = att.randn(batch, length, D_IN, seed=length)
            s.output(module, x, f"{name} output for T={length}", (batch, length, width))


@exercise.check("shapes")
def causal_attention_layout(kernel):
    """CausalAttention's state_dict: W_query/W_key/W_value [d_out, d_in] (biases only with
    qkv_bias) and the mask buffer [context_length, context_length]."""
    for bias in (True, False):
        module = s.causal_attention(kernel, bias=bias)
        s.output(module, att.randn(B, T, D_IN, seed=1), "CausalAttention output")
        expected = {**s.projections(QKV, D_IN, D_OUT, bias), "mask": (CTX, CTX)}
        s.layout(module.state_dict(), expected, f"CausalAttention(qkv_bias={bias})")


@exercise.check("shapes")
def wrapper_layout(kernel):
    """The wrapper holds num_heads distinct CausalAttention modules in `heads`, with biases
    when qkv_bias=True."""
    module = s.wrapper(kernel)
    s.output(module, att.randn(B, T, D_IN, seed=1), "wrapper output")
    expected = s.projections(s.head_layers(), D_IN, HD, True)
    expected.update({f"heads.{h}.mask": (CTX, CTX) for h in range(H)})
    s.layout(module.state_dict(), expected, "MultiHeadAttentionWrapper(qkv_bias=True)")
    heads = [
        name for name, kind in kernel.modules(module) if kind.split(".")[-1] == "CausalAttention"
    ]
    if heads != [f"heads.{h}" for h in range(H)]:
        raise Failed(
            f"MultiHeadAttentionWrapper holds {len(heads)} distinct CausalAttention module(s) "
            f"({', '.join(heads) or 'none'}), want {H}: heads.0 .. heads.{H - 1}, each with its own weights"
        )


@exercise.check("shapes")
def split_layout(kernel):
    """MultiHeadAttention's state_dict: W_query/W_key/W_value (no bias with qkv_bias=False),
    out_proj with a bias, and the mask buffer."""
    module = s.split(kernel, bias=False)
    s.output(module, att.randn(B, T, D_IN, seed=1), "MultiHeadAttention output")
    expected = {**s.projections(QKV, D_IN, D_OUT, False, out="out_proj"), "mask": (CTX, CTX)}
    s.layout(module.state_dict(), expected, "MultiHeadAttention(qkv_bias=False)")


# -- 2. normalization -------------------------------------------------------------------

VALUE = 0.7  # every value vector is VALUE * ones: weights that sum to 1 reproduce it


@exercise.check("normalization")
def causal_attention_weights_sum_to_one(kernel):
    """With every value vector equal to c (W_value = 0, bias c), CausalAttention gives c."""
    module = s.causal_attention(kernel)
    s.load(module, "CausalAttention", s.constant_values("W_value", D_IN, D_OUT, VALUE))
    y = s.output(module, att.randn(B, T, D_IN, seed=1), "CausalAttention output", (B, T, D_OUT))
    checks.same(
        y,
        torch.full_like(y, VALUE),
        f"CausalAttention y when every value is {VALUE} (weights must sum to 1)",
    )


@exercise.check("normalization")
def wrapper_weights_sum_to_one(kernel):
    """With every head's values equal to c, the wrapper gives c everywhere."""
    module = s.wrapper(kernel)
    tensors = {}
    for h in range(H):
        tensors.update(s.constant_values(f"heads.{h}.W_value", D_IN, HD, VALUE))
    s.load(module, "MultiHeadAttentionWrapper", tensors)
    y = s.output(module, att.randn(B, T, D_IN, seed=1), "wrapper output", (B, T, H * HD))
    checks.same(
        y,
        torch.full_like(y, VALUE),
        f"wrapper y when every value is {VALUE} (weights must sum to 1)",
    )


def split_with_constant_values(kernel):
    module = s.split(kernel)
    tensors = {**s.constant_values("W_value", D_IN, D_OUT, VALUE), **s.identity("out_proj", D_OUT)}
    s.load(module, "MultiHeadAttention", tensors)
    return module


@exercise.check("normalization")
def split_weights_sum_to_one(kernel):
    """With every value equal to c and out_proj the identity, MultiHeadAttention gives c."""
    module = split_with_constant_values(kernel)
    y = s.output(module, att.randn(B, T, D_IN, seed=1), "MultiHeadAttention output", (B, T, D_OUT))
    checks.same(
        y,
        torch.full_like(y, VALUE),
        f"MultiHeadAttention y when every value is {VALUE} (weights must sum to 1)",
    )


@exercise.check("normalization")
def large_inputs_stay_normalised(kernel):
    """Inputs of magnitude ~1e3 (scores ~1e5) still give weights that sum to 1: a stable softmax."""
    x = att.randn(B, T, D_IN, seed=5, scale=1e3)
    module = split_with_constant_values(kernel)
    y = s.output(module, x, "MultiHeadAttention output", (B, T, D_OUT))
    checks.same(
        y,
        torch.full_like(y, VALUE),
        "MultiHeadAttention y for large inputs, every value 0.7",
    )
    module = s.causal_attention(kernel)
    s.load(module, "CausalAttention", s.constant_values("W_value", D_IN, D_OUT, VALUE))
    y = s.output(module, x, "CausalAttention output", (B, T, D_OUT))
    checks.same(
        y,
        torch.full_like(y, VALUE),
        "CausalAttention y for large inputs, every value 0.7",
    )


# -- 3. causal --------------------------------------------------------------------------


@exercise.check("causal", points=2, hidden=False)
def split_future_tokens_do_not_change_the_past(kernel):
    """MultiHeadAttention: y[:, t] does not change when tokens after t change (T = 7 and
    T = context_length)."""
    module = s.split(kernel)
    s.after_changing_later_tokens(module, att.randn(B, T, D_IN, seed=1), 3, "MultiHeadAttention")
    s.after_changing_later_tokens(module, att.randn(B, CTX, D_IN, seed=2), 6, "MultiHeadAttention")


@exercise.check("causal", points=2)
def causal_attention_future_tokens_do_not_change_the_past(kernel):
    """CausalAttention: y[:, t] does not change when tokens after t change."""
    module = s.causal_attention(kernel)
    s.after_changing_later_tokens(module, att.randn(B, T, D_IN, seed=1), 3, "CausalAttention")
    s.after_changing_later_tokens(module, att.randn(B, T, D_IN, seed=3), 0, "CausalAttention")


@exercise.check("causal", points=2)
def wrapper_future_tokens_do_not_change_the_past(kernel):
    """MultiHeadAttentionWrapper: y[:, t] does not change when tokens after t change."""
    module = s.wrapper(kernel)
    s.after_changing_later_tokens(module, att.randn(B, T, D_IN, seed=1), 3, "wrapper")


@exercise.check("causal", points=2)
def first_token_sees_only_itself(kernel):
    """The first query sees only the first key: CausalAttention's y[:, 0] is exactly the first
    value vector, and the multi-head modules give the first token what they give it alone."""
    x = att.randn(B, T, D_IN, seed=1)
    module = s.causal_attention(kernel)
    layers = s.with_random_biases(module, "CausalAttention", QKV, dtype=torch.float32)
    y = s.output(module, x, "CausalAttention output", (B, T, D_OUT))
    v0 = F.linear(x[:, 0], *layers["W_value"])
    checks.close(y[:, 0], v0, "CausalAttention y[:, 0] vs the first value vector")
    for name, module in (("wrapper", s.wrapper(kernel)), ("MultiHeadAttention", s.split(kernel))):
        y = s.output(module, x, f"{name} output", (B, T, D_OUT))
        alone = s.output(module, x[:, :1], f"{name} output", (B, 1, D_OUT))
        checks.same(y[:, :1], alone, f"{name} y[:, 0] vs its output for the first token alone")


@exercise.check("causal", points=2)
def samples_do_not_mix_when_batch_equals_heads(kernel):
    """With B == H == 3, each sample's output is what it gets alone."""
    module = s.split(kernel)
    x = att.randn(H, T, D_IN, seed=4)
    together = s.output(module, x, "MultiHeadAttention output", (H, T, D_OUT))
    for b in range(H):
        alone = s.output(module, x[b : b + 1], "MultiHeadAttention output", (1, T, D_OUT))
        checks.same(together[b : b + 1], alone, f"sample {b} in a batch of {H} vs alone")


# -- 4. finite --------------------------------------------------------------------------


def all_three(kernel):
    return [
        ("CausalAttention", s.causal_attention(kernel)),
        ("wrapper", s.wrapper(kernel)),
        ("MultiHeadAttention", s.split(kernel)),
    ]


@exercise.check("finite", hidden=False)
def zero_input_is_finite(kernel):
    """An all-zero input gives finite outputs in all three classes."""
    for name, module in all_three(kernel):
        checks.finite(
            s.output(module, torch.zeros(B, T, D_IN), f"{name} output"), f"{name} y for zero input"
        )


@exercise.check("finite")
def large_input_is_finite(kernel):
    """Inputs of magnitude ~1e4 give finite outputs in all three classes."""
    x = att.randn(B, T, D_IN, seed=6, scale=1e4)
    for name, module in all_three(kernel):
        checks.finite(s.output(module, x, f"{name} output"), f"{name} y for large inputs")


# -- 5. parity (float64, random biases) -------------------------------------------------


@exercise.check("parity", points=2)
def causal_attention_matches_reference(kernel):
    """CausalAttention equals an independent float64 reference (scale 1 / sqrt(d_out))."""
    module = s.causal_attention(kernel)
    layers = s.with_random_biases(module, "CausalAttention", QKV)
    x = att.randn(B, T, D_IN, seed=11, dtype=torch.float64)
    y = s.output(module, x, "CausalAttention output", (B, T, D_OUT))
    checks.close(y, s.reference(x, *(layers[n] for n in QKV)), "CausalAttention vs reference")


@exercise.check("parity", points=2)
def wrapper_matches_reference(kernel):
    """Each wrapper head equals the float64 reference with that head's weights."""
    module = s.wrapper(kernel)
    layers = s.with_random_biases(module, "MultiHeadAttentionWrapper", s.head_layers())
    x = att.randn(B, T, D_IN, seed=11, dtype=torch.float64)
    y = s.output(module, x, "wrapper output", (B, T, H * HD))
    want = torch.cat(
        [s.reference(x, *(layers[f"heads.{h}.{n}"] for n in QKV)) for h in range(H)], dim=-1
    )
    checks.close(y, want, "wrapper vs reference (heads concatenated in order)")


def split_parity(kernel, dtype=torch.float64, d_in=D_IN) -> None:
    """MultiHeadAttention vs the reference in `dtype`, at assert_close's default tolerance."""
    module = s.split(kernel, d_in=d_in)
    layers = s.with_random_biases(module, "MultiHeadAttention", SPLIT, dtype=dtype)
    x = att.randn(B, T, d_in, seed=12, dtype=dtype)
    y = s.output(module, x, "MultiHeadAttention output", (B, T, D_OUT))
    want = s.reference(x, *(layers[n] for n in QKV), heads=H, out=layers["out_proj"])
    checks.close(y, want, f"MultiHeadAttention vs reference ({str(dtype)[6:]})")


@exercise.check("parity", points=2)
def split_matches_reference(kernel):
    """MultiHeadAttention (d_in=5, d_out=12, 3 heads) equals the float64 reference."""
    split_parity(kernel)


@exercise.check("parity", points=2)
def split_matches_nn_multihead_attention(kernel):
    """With d_in == d_out, MultiHeadAttention equals nn.MultiheadAttention under a causal mask."""
    module = s.split(kernel, d_in=D_OUT)
    layers = s.with_random_biases(module, "MultiHeadAttention", SPLIT)
    x = att.randn(B, T, D_OUT, seed=13, dtype=torch.float64)
    y = s.output(module, x, "MultiHeadAttention output", (B, T, D_OUT))
    oracle = att.oracle(D_OUT, H, *(layers[n] for n in SPLIT))
    want, _ = att.run_oracle(oracle, x, x, x, blocked=~att.causal_allow(T))
    checks.close(y, want, "MultiHeadAttention vs nn.MultiheadAttention (causal)")


@exercise.check("parity", points=2)
def wrapper_equals_split_weights(kernel):
    """The split version with the wrapper's weights stacked head by head (and out_proj the
    identity) gives the wrapper's output."""
    stacked = s.wrapper(kernel)
    heads = s.with_random_biases(stacked, "MultiHeadAttentionWrapper", s.head_layers())
    tensors = {n: t.double() for n, t in s.identity("out_proj", D_OUT).items()}
    for n in QKV:
        tensors[f"{n}.weight"] = torch.cat([heads[f"heads.{h}.{n}"][0] for h in range(H)])
        tensors[f"{n}.bias"] = torch.cat([heads[f"heads.{h}.{n}"][1] for h in range(H)])
    module = s.split(kernel)
    module.to(torch.float64)
    s.load(module, "MultiHeadAttention", tensors)
    x = att.randn(B, T, D_IN, seed=14, dtype=torch.float64)
    want = s.output(stacked, x, "wrapper output", (B, T, D_OUT))
    y = s.output(module, x, "MultiHeadAttention output", (B, T, D_OUT))
    checks.close(
        y,
        want,
        "MultiHeadAttention (out_proj = identity) vs the wrapper with the same weights",
    )


@exercise.check("parity")
def split_parity_in_float32(kernel):
    """MultiHeadAttention in float32 against the reference at assert_close's default
    tolerance (rtol 1.3e-6, atol 1e-5)."""
    split_parity(kernel, dtype=torch.float32)


def walkthrough(kernel, class_name: str, want: torch.Tensor) -> None:
    batch = torch.stack((SEED_INPUTS, SEED_INPUTS))
    module = kernel.new(class_name, 3, 2, 6, 0.0, num_heads=2, seed=123)
    y = s.output(module, batch, f"{class_name} output", (2, 6, want.shape[1]))
    checks.close(
        y,
        want.expand(2, -1, -1),
        f"{class_name}(3, 2, 6, 0.0, num_heads=2) after torch.manual_seed(123) vs the "
        "walkthrough's printed output (layer creation order and init decide it)",
        atol=1e-4,  # the walkthrough prints 4 decimals
    )


@exercise.check("parity", hidden=False)
def walkthrough_numbers_wrapper(kernel):
    """torch.manual_seed(123), MultiHeadAttentionWrapper(3, 2, 6, 0.0, 2) on the six tokens
    of the walkthrough prints its numbers."""
    walkthrough(kernel, "MultiHeadAttentionWrapper", SEED_WRAPPER)


@exercise.check("parity", hidden=False)
def walkthrough_numbers_split(kernel):
    """torch.manual_seed(123), MultiHeadAttention(3, 2, 6, 0.0, 2) prints [0.3190, 0.4858]
    first and [0.2575, 0.4028] last."""
    walkthrough(kernel, "MultiHeadAttention", SEED_SPLIT)


# -- 6. training ------------------------------------------------------------------------


@exercise.check("training", points=2)
def gradients_reach_every_parameter_and_the_input(kernel):
    """Backprop reaches every projection of MultiHeadAttention and of each wrapper head, and
    the input; the mask is a buffer, not a parameter."""
    x, r = att.randn(B, T, D_IN, seed=1), att.randn(B, T, D_OUT, seed=2)
    for owner, module, layers in (
        ("MultiHeadAttention", s.split(kernel), SPLIT),
        ("MultiHeadAttentionWrapper", s.wrapper(kernel), s.head_layers()),
    ):
        module.train()
        grads = kernel.grad(module, (x,), {}, wrt=[0], cotangent=r)
        names = [f"{layer}.{kind}" for layer in layers for kind in ("weight", "bias")]
        s.grads_reach(grads, names, owner, (B, T, D_IN))


@exercise.check("training", points=2)
def input_gradient_matches_reference(kernel):
    """d(sum(y * r))/dx of MultiHeadAttention matches the float64 reference's."""
    module = s.split(kernel)
    layers = s.with_random_biases(module, "MultiHeadAttention", SPLIT)
    x = att.randn(B, T, D_IN, seed=1, dtype=torch.float64)
    r = att.randn(B, T, D_OUT, seed=2, dtype=torch.float64)
    grads = kernel.grad(module, (x,), {}, wrt=[0], cotangent=r)
    xr = x.clone().requires_grad_(True)
    (
        s.reference(xr, *(layers[n] for n in QKV), heads=H, out=layers["out_proj"]) * r
    ).sum().backward()
    got = checks.tensor(grads["inputs"][0], "input gradient", (B, T, D_IN))
    checks.close(got, xr.grad, "MultiHeadAttention input gradient vs reference")


@exercise.check("training", points=2)
def eval_mode_ignores_dropout(kernel):
    """With dropout 0.5 in eval mode, outputs are deterministic and equal dropout 0's."""
    x = att.randn(B, T, D_IN, seed=1)
    for name, build in (("MultiHeadAttention", s.split), ("CausalAttention", s.causal_attention)):
        plain = s.output(build(kernel), x, f"{name} output")
        noisy = build(kernel, dropout=0.5)
        first = s.seeded(noisy, x, f"{name}.forward", seed=1)
        second = s.seeded(noisy, x, f"{name}.forward", seed=2)
        checks.same(first, plain, f"{name} eval-mode y with dropout 0.5 vs dropout 0")
        checks.same(second, first, f"two eval-mode {name} calls with dropout 0.5")


@exercise.check("training")
def train_mode_applies_dropout(kernel):
    """With dropout 0.5 in train mode, the output is finite and differs from eval mode."""
    x = att.randn(B, T, D_IN, seed=1)
    for name, build in (("MultiHeadAttention", s.split), ("CausalAttention", s.causal_attention)):
        module = build(kernel, dropout=0.5)
        y_eval = s.output(module, x, f"{name} output")
        module.train()
        y_train = s.seeded(module, x, f"{name}.forward", seed=3)
        checks.finite(y_train, f"{name} train-mode y with dropout 0.5")
        checks.differ(y_train, y_eval, f"{name} train-mode y with dropout 0.5 vs eval mode")


@exercise.check("training", points=2)
def dropout_acts_on_attention_weights(kernel):
    """In train mode the first query (one key, weight 1) outputs 0 or v[0] / (1 - p), whole
    heads at a time: dropout drops attention weights, not output entries."""
    x = att.randn(8, T, D_IN, seed=3)
    module = s.causal_attention(kernel, dropout=0.5)
    layers = s.with_random_biases(module, "CausalAttention", QKV, dtype=torch.float32)
    module.train()
    y = s.seeded(module, x, "CausalAttention.forward", seed=4)
    checks.tensor(y, "CausalAttention output", (8, T, D_OUT))
    checks.finite(y, "CausalAttention train-mode y with dropout 0.5")
    v0 = F.linear(x[:, 0], *layers["W_value"])
    s.all_or_nothing(y[:, 0], v0, 0.5, "CausalAttention y[:, 0] in train mode, dropout 0.5")
    module = s.split(kernel, dropout=0.5)
    layers = s.with_random_biases(module, "MultiHeadAttention", QKV, dtype=torch.float32)
    s.load(module, "MultiHeadAttention", s.identity("out_proj", D_OUT))
    module.train()
    y = s.seeded(module, x, "MultiHeadAttention.forward", seed=4)
    checks.tensor(y, "MultiHeadAttention output", (8, T, D_OUT))
    checks.finite(y, "MultiHeadAttention train-mode y with dropout 0.5")
    v0 = F.linear(x[:, 0], *layers["W_value"])
    s.all_or_nothing(
        y[:, 0].reshape(8 * H, HD), v0.reshape(8 * H, HD), 0.5,
        "MultiHeadAttention y[:, 0] per head (out_proj = identity) in train mode, dropout 0.5",
    )  # fmt: skip


# -- 7. gpt-2 size ----------------------------------------------------------------------


@exercise.check("gpt-2 size", points=2, hidden=False)
def gpt2_parameter_count(kernel):
    """MultiHeadAttention(768, 768, 1024, 0.1, 12, qkv_bias=True) runs on [1, 16, 768] and
    holds 2,362,368 parameters plus a [1024, 1024] mask."""
    module = s.split(kernel, **GPT2)
    s.output(module, att.randn(1, 16, 768, seed=1), "GPT-2-size output", (1, 16, 768))
    expected = {**s.projections(QKV, 768, 768, True, out="out_proj"), "mask": (1024, 1024)}
    state = s.layout(module.state_dict(), expected, "GPT-2-size MultiHeadAttention")
    count = sum(t.numel() for name, t in state.items() if name != "mask")
    if count != GPT2_PARAMETERS:
        raise Failed(f"GPT-2-size attention has {count} parameters, want {GPT2_PARAMETERS}")


@exercise.check("gpt-2 size", points=2)
def gpt2_is_causal_and_ignores_dropout_in_eval(kernel):
    """The GPT-2-size module in eval mode on 16 tokens: causal, finite, deterministic."""
    module = s.split(kernel, **GPT2)
    x = att.randn(1, 16, 768, seed=2)
    y1 = s.output(module, x, "GPT-2-size output", (1, 16, 768))
    checks.finite(y1, "GPT-2-size y")
    again = s.seeded(module, x, "MultiHeadAttention.forward", seed=5)
    checks.same(again, y1, "two eval-mode GPT-2-size calls (dropout 0.1 must be off)")
    s.after_changing_later_tokens(module, x, 7, "GPT-2-size MultiHeadAttention")


# -- 8. from scratch --------------------------------------------------------------------


@exercise.check("from scratch", points=2)
def no_builtin_attention_in_source(kernel):
    """The notebook's code does not name torch's attention built-ins."""
    for _, module in all_three(kernel):
        s.output(module, att.randn(B, T, D_IN, seed=1), "output")
    require_clean_source(kernel.sources, exercise.forbidden, exercise.watch)


@exercise.check("from scratch", points=2)
def no_builtin_attention_at_run_time(kernel):
    """No attention built-in is called while the suite runs, and no nn.MultiheadAttention
    sits inside any of the three modules."""
    for name, module in all_three(kernel):
        s.output(module, att.randn(B, T, D_IN, seed=1), f"{name} output")
        require_no_builtin_module(kernel.modules(module), name, exercise.watch)
    require_nothing_seen(kernel.seen)
