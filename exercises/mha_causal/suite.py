"""Hidden suite for `mha_causal` (seed 004): GPT-style causal self-attention written three
ways: one head (`CausalAttention`), stacked heads (`MultiHeadAttentionWrapper`) and split
weights with an output projection (`MultiHeadAttention`). The causal mask is a registered
buffer, 1 = blocked; there is no mask argument and no row is ever fully blocked.

One feature per test: the modules are built with context_length == T (the mask needs no
cutting) and dropout 0 unless a test is about that; the inputs are contiguous. The causal mask
is in every output (there is no mask-free call), so a mask bug is a bug in the values.
"""

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from grader.exercises import _attention as att
from grader.exercises import _shared as lib
from grader.suite import checks
from grader.suite.library import noncontiguous

exercise = att.exercise(
    id="mha_causal",
    tags=("attention", "modules"),
    minutes=35,
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
    profile=att.Profile(__name__, "SPLIT", causal=True, context="ctx"),  # `--profile`
)

# d_in != d_out (5 -> 12), 3 heads of width 4, B = 2, T = 7: head layout and scaling bugs
# show. The modules are built with context_length = T; the tests of shorter inputs use
# context_length = 10 (the mask must be cut to T x T). One test has B == H.
D_IN, D_OUT, H, B, T, CTX = 5, 12, 3, 2, 7, 10
QKV = ("W_query", "W_key", "W_value")


def table(rows: str) -> torch.Tensor:
    """A tensor from rows of numbers, the rows separated by ";"."""
    return torch.tensor([[float(v) for v in row.split()] for row in rows.split(";")])


# The seed's walkthrough: torch.manual_seed(123), then the module, on these six tokens.
SEED_INPUTS = table(
    "0.43 0.15 0.89; 0.55 0.87 0.66; 0.57 0.85 0.64; 0.22 0.58 0.33; 0.77 0.25 0.10; 0.05 0.80 0.55"
)
SEED_WRAPPER = table(
    "-0.4519 0.2216 0.4772 0.1063; -0.5874 0.0058 0.5891 0.3257; -0.6300 -0.0632 0.6202 0.3860;"
    "-0.5675 -0.0843 0.5478 0.3589; -0.5526 -0.0981 0.5321 0.3428; -0.5299 -0.1081 0.5077 0.3493"
)
SEED_SPLIT = table(
    "0.3190 0.4858; 0.2943 0.3897; 0.2856 0.3593; 0.2693 0.3873; 0.2639 0.3928; 0.2575 0.4028"
)


@dataclass(frozen=True)
class Causal(att.Adapter):
    """One of the three classes, built as the walkthrough builds it (the wrapper from heads
    of width E / H); forward(x) -> y, its causal mask a buffer, so `allow` is not passed."""

    ctx: int = T
    wrapper: bool = False  # MultiHeadAttentionWrapper: heads of width E / H, each its own module

    @property
    def width(self) -> int:
        """The width of one projection: a head's for the wrapper, else E."""
        return self.E // self.H if self.wrapper else self.E

    def new(self, kernel, dropout, bias, seed):
        heads = () if self.owner == "CausalAttention" else (self.H,)
        args = (self.d_in, self.width, self.ctx, dropout, *heads)
        return kernel.new(self.owner, *args, qkv_bias=bias, seed=seed)

    def layer_shapes(self, bias=True) -> dict[str, tuple[int, ...]]:
        """nn.Linear's shapes: W_* (biased with qkv_bias) from d_in to a head's width (the
        wrapper's) or E; out_proj (always biased) E to E."""
        shapes: dict[str, tuple[int, ...]] = {}
        for layer in self.layers:
            rows, cols = (self.E, self.E) if layer == "out_proj" else (self.width, self.d_in)
            shapes[f"{layer}.weight"] = (rows, cols)
            if bias or layer == "out_proj":
                shapes[f"{layer}.bias"] = (rows,)
        return shapes

    def oracle(self, module, dtype, bias=True):
        """Randomise the biases; nn.MultiheadAttention holding the projections (the wrapper's
        heads stacked in order; out_proj the identity where there is none), causal over T."""
        zeros = {f"{n}.bias": torch.zeros(self.width) for n in self.layers if n != "out_proj"}
        state = {**identity(self.E), **zeros, **self.randomise(module, dtype, bias)}
        heads = [f"heads.{h}." for h in range(self.H)] if self.wrapper else [""]
        groups = [[p + n for p in heads] for n in QKV] + [["out_proj"]]  # q, k, v, out
        weights = [torch.cat([state[f"{n}.weight"] for n in g]) for g in groups]
        biases = [torch.cat([state[f"{n}.bias"] for n in g]) for g in groups]
        mha = att.oracle(self.H, weights, biases)
        return lambda inputs, blocked=None: att.run_oracle(mha, inputs, ~att.causal_allow(self.T))


ONE = Causal(D_OUT, 1, B, T, T, d_in=D_IN, owner="CausalAttention", mask=None)
ONE = ONE.replace(output="CausalAttention output", layers=QKV, returns_weights=False)
HEADS = tuple(f"heads.{h}.{name}" for h in range(H) for name in QKV)
WRAPPER = ONE.replace(H=H, owner="MultiHeadAttentionWrapper", layers=HEADS, wrapper=True)
WRAPPER = WRAPPER.replace(output="wrapper output")
SPLIT = ONE.replace(H=H, owner="MultiHeadAttention", output="MultiHeadAttention output")
SPLIT = SPLIT.replace(layers=(*QKV, "out_proj"))
GPT2 = SPLIT.replace(E=768, H=12, B=1, T=16, S=16, d_in=768, ctx=1024, dropout=0.1)
GPT2 = GPT2.replace(output="GPT-2-size output")


def identity(width: int) -> dict[str, torch.Tensor]:
    """Tensors that make out_proj the identity."""
    return {"out_proj.weight": torch.eye(width), "out_proj.bias": torch.zeros(width)}


def layout(kernel, A: Causal, bias: bool = True, name: str = "") -> Any:
    """Build and run A; its state_dict must hold exactly its layers, at nn.Linear's shapes
    (W_* biased with qkv_bias, out_proj always), and a [ctx, ctx] mask per CausalAttention."""
    module, owner = A.build(kernel, bias=bias), name or f"{A.owner}(qkv_bias={bias})"
    A.forward(module, A.inputs())
    expected = A.layer_shapes(bias)
    masks = [f"heads.{h}.mask" for h in range(A.H)] if A.wrapper else ["mask"]
    expected.update({mask: (A.ctx, A.ctx) for mask in masks})
    state = module.state_dict()
    att.require(state, list(expected), owner)
    if extra := sorted(map(str, set(state) - set(expected))):
        raise checks.Failed(f"{owner}.state_dict() has unexpected entries: {', '.join(extra[:4])}")
    for n, shape in expected.items():
        if tuple(state[n].shape) != shape:
            raise checks.Failed(f"{owner}: {n} has shape {tuple(state[n].shape)}, want {shape}")
    return module


def same_weights(kernel, A: Causal, **changes) -> Any:
    """A fresh module of A with `changes` (another context_length), built after the same seed
    as `A.build`: the same layers in the same order, so the same weights (the mask buffer
    draws no random numbers)."""
    return A.replace(**changes).build(kernel)


VALUE = 0.7  # every value vector is VALUE * ones: weights that sum to 1 reproduce it


def constant_values(kernel, A: Causal, x: torch.Tensor | None = None, what: str = "") -> None:
    """With W_value = 0 and bias VALUE (out_proj the identity), the output is VALUE."""
    module, tensors = A.build(kernel), identity(A.E) if "out_proj" in A.layers else {}
    for layer in (n for n in A.layers if n.endswith("W_value")):
        tensors[f"{layer}.weight"] = torch.zeros(A.width, A.d_in)
        tensors[f"{layer}.bias"] = torch.full((A.width,), VALUE)
    att.load(module, A.owner, tensors)
    y, _ = A.forward(module, A.inputs() if x is None else (x,))
    what = what or f"when every value is {VALUE} (weights must sum to 1)"
    checks.same(y, torch.full_like(y, VALUE), f"{A.output} {what}")


def all_or_nothing(y0: torch.Tensor, v0: torch.Tensor, keep: float, what: str) -> None:
    """Row by row, the first query's output (one visible key, weight 1) is either 0 (weight
    dropped) or v0 / keep (weight kept and rescaled), at the dtype's default tolerance:
    dropout acted on the attention weight. NaN or inf anywhere fails."""
    checks.finite(y0, what)
    scaled, tol = v0 / keep, checks.tolerance(y0.dtype, v0.dtype)
    dropped = checks.tolerance_ratio(y0, torch.zeros_like(scaled), tol).amax(dim=-1)
    kept = checks.tolerance_ratio(y0, scaled, tol).amax(dim=-1)
    for row in (torch.minimum(dropped, kept) > 1).nonzero().flatten().tolist():
        off = min(float(y0[row].abs().max()), float((y0[row] - scaled[row]).abs().max()))
        raise checks.Failed(
            f"{what}: row {row} is neither 0 nor v[0] / {keep:g} (off by {off:.3g}); "
            "dropout must drop whole attention weights, not output entries"
        )


def walkthrough(kernel, class_name: str, want: torch.Tensor) -> None:
    """The module built as the walkthrough builds it prints its numbers (to its 4 decimals)."""
    module = kernel.new(class_name, 3, 2, 6, 0.0, num_heads=2, seed=123)
    module.eval()
    y = module(torch.stack((SEED_INPUTS, SEED_INPUTS)))
    y = checks.tensor(y, f"{class_name} output", (2, 6, want.shape[1]))
    built = f"{class_name}(3, 2, 6, 0.0, num_heads=2) after torch.manual_seed(123)"
    order = "the walkthrough's printed output (layer creation order and init decide it)"
    checks.close(y, want.expand(2, -1, -1), f"{built} vs {order}", atol=1e-4)


@exercise.check("shapes", hidden=False)
def causal_attention_shapes(kernel):
    """CausalAttention(5, 12): [2, 7, 5] -> [2, 7, 12] with context_length 10 > T."""
    lib.shapes(kernel, ONE)


@exercise.check("shapes", hidden=False)
def wrapper_shapes(kernel):
    """MultiHeadAttentionWrapper(5, 4, heads=3): [2, 7, 5] -> [2, 7, 3 * 4]."""
    lib.shapes(kernel, WRAPPER)


@exercise.check("shapes", hidden=False)
def split_shapes(kernel):
    """MultiHeadAttention(5, 12, heads=3): [2, 7, 5] -> [2, 7, 12]."""
    lib.shapes(kernel, SPLIT)


@exercise.check("shapes")
def single_token_and_batch_of_one(kernel):
    """context_length = T = 1 and a batch of one, for all three classes."""
    for A in (ONE, WRAPPER, SPLIT):
        A.forward(A.replace(ctx=1).build(kernel), A.inputs(1, 1, seed=1))


@exercise.check("shapes", points=2)
def inputs_shorter_than_the_context(kernel):
    """With context_length 10, T = 7 and T = 1 give what modules of context_length T give."""
    for A in (ONE, WRAPPER, SPLIT):
        long = A.replace(ctx=CTX).build(kernel)
        for length in (T, 1):
            what = f"{A.output} for T={length} < context_length {CTX} vs context_length {length}"
            like_a_fresh_module(kernel, A, long, length, length, what)


@exercise.check("shapes")
def called_again_with_another_length(kernel):
    """One module (context_length 10) called on T = 7, 4, then 7 tokens: each call gives what a
    fresh module with the same weights gives (nothing is kept from an earlier call)."""
    for A in (ONE, SPLIT):
        module = A.replace(ctx=CTX).build(kernel)
        for length in (T, 4, T):
            what = f"{A.output} for T={length} after calls at other lengths vs a fresh module"
            like_a_fresh_module(kernel, A, module, length, CTX, what)


def like_a_fresh_module(kernel, A, module, length: int, ctx: int, what: str) -> None:
    """`module` on T = `length` tokens gives what a new module with its weights and
    context_length `ctx` gives."""
    x = A.inputs(t=length, seed=length)
    y, _ = A.forward(module, x)
    want, _ = A.forward(same_weights(kernel, A, ctx=ctx), x)
    checks.same(y, want, what)


@exercise.check("shapes")
def non_contiguous_input(kernel):
    """A non-contiguous x (column-major, strided) gives the output of its contiguous copy."""
    for A in (ONE, WRAPPER, SPLIT):
        module, (x,) = A.build(kernel), A.inputs(seed=4)
        (y, _), (want, _) = A.forward(module, (noncontiguous(x),)), A.forward(module, (x,))
        checks.same(y, want, f"{A.output} for a non-contiguous x vs its contiguous copy")


@exercise.check("shapes")
def input_left_unchanged(kernel):
    """x is not modified in place, in eval mode and in train mode with dropout 0.5."""
    for A in (ONE, SPLIT):
        lib.inputs_left_unchanged(kernel, A)
        lib.inputs_left_unchanged(kernel, A, train=True)


@exercise.check("shapes")
def causal_attention_layout(kernel):
    """CausalAttention's state_dict: W_query/W_key/W_value (biased with qkv_bias) and mask."""
    for bias in (True, False):
        layout(kernel, ONE, bias)


@exercise.check("shapes")
def wrapper_layout(kernel):
    """The wrapper holds num_heads distinct CausalAttention modules in `heads`, with biases."""
    module = layout(kernel, WRAPPER)
    heads = [n for n, kind in kernel.modules(module) if kind.split(".")[-1] == "CausalAttention"]
    if heads != [f"heads.{h}" for h in range(H)]:
        raise checks.Failed(
            f"MultiHeadAttentionWrapper holds {len(heads)} distinct CausalAttention module(s) "
            f"({', '.join(heads) or 'none'}), want {H}: heads.0 .. heads.{H - 1}, each with its own weights"
        )


@exercise.check("shapes")
def split_layout(kernel):
    """MultiHeadAttention(qkv_bias=False)'s state_dict: unbiased W_*, biased out_proj, mask."""
    layout(kernel, SPLIT, bias=False)


@exercise.check("normalization")
def causal_attention_weights_sum_to_one(kernel):
    """With every value vector equal to c (W_value = 0, bias c), CausalAttention gives c."""
    constant_values(kernel, ONE)


@exercise.check("normalization")
def split_weights_sum_to_one(kernel):
    """With every value equal to c and out_proj the identity, MultiHeadAttention gives c."""
    constant_values(kernel, SPLIT)


@exercise.check("normalization")
def large_inputs_stay_normalised(kernel):
    """Inputs of magnitude ~1e3 (scores ~1e5) still give weights that sum to 1: a stable softmax."""
    x = att.randn(B, T, D_IN, seed=5, scale=1e3)
    for A in (SPLIT, ONE):
        constant_values(kernel, A, x, f"for large inputs, every value {VALUE}")


@exercise.check("causal", points=2, hidden=False)
def split_future_tokens_do_not_change_the_past(kernel):
    """MultiHeadAttention: y[:, t] ignores tokens after t (t = 3 and t = 5 of T = 7)."""
    module = SPLIT.build(kernel)
    lib.later_tokens(kernel, SPLIT, 3, module=module)
    lib.later_tokens(kernel, SPLIT, 5, module=module, x=att.randn(B, T, D_IN, seed=2))


@exercise.check("causal", points=2)
def causal_attention_future_tokens_do_not_change_the_past(kernel):
    """CausalAttention: y[:, t] does not change when tokens after t change."""
    module = ONE.build(kernel)
    lib.later_tokens(kernel, ONE, 3, module=module)
    lib.later_tokens(kernel, ONE, 0, module=module, x=att.randn(B, T, D_IN, seed=3))


@exercise.check("causal", points=2)
def wrapper_future_tokens_do_not_change_the_past(kernel):
    """MultiHeadAttentionWrapper: y[:, t] does not change when tokens after t change."""
    lib.later_tokens(kernel, WRAPPER, 3)


@exercise.check("causal", points=2)
def first_token_sees_only_itself(kernel):
    """The first query sees only the first key: it gets its value, or what it gets alone."""
    x, module = att.randn(B, T, D_IN, seed=1), ONE.build(kernel)
    state = ONE.randomise(module, att.F32)
    y, _ = ONE.forward(module, (x,))
    v0 = F.linear(x[:, 0], state["W_value.weight"], state["W_value.bias"])
    checks.close(y[:, 0], v0, "CausalAttention y[:, 0] vs the first value vector")
    for A in (WRAPPER, SPLIT):
        module = A.build(kernel)
        y, _ = A.forward(module, (x,))
        alone, _ = A.forward(same_weights(kernel, A, ctx=1), (x[:, :1],))
        checks.same(y[:, :1], alone, f"{A.output}[:, 0] vs its output for the first token alone")


@exercise.check("causal", points=2)
def samples_do_not_mix_when_batch_equals_heads(kernel):
    """With B == H == 3, each sample's output is what it gets alone."""
    module, x = SPLIT.build(kernel), att.randn(H, T, D_IN, seed=4)
    together, _ = SPLIT.forward(module, (x,))
    for b in range(H):
        alone, _ = SPLIT.forward(module, (x[b : b + 1],))
        checks.same(together[b : b + 1], alone, f"sample {b} in a batch of {H} vs alone")


@exercise.check("finite", hidden=False)
def zero_input_is_finite(kernel):
    """An all-zero input gives finite outputs in all three classes."""
    lib.zero_input_is_finite(kernel, ONE, WRAPPER, SPLIT)


@exercise.check("finite")
def large_input_is_finite(kernel):
    """Inputs of magnitude ~1e4 give finite outputs in all three classes."""
    lib.large_input_is_finite(kernel, ONE, WRAPPER, SPLIT)


@exercise.check("parity", points=2)
def causal_attention_matches_reference(kernel):
    """CausalAttention equals an independent float64 reference (scale 1 / sqrt(d_out))."""
    lib.parity(kernel, ONE)


@exercise.check("parity", points=2)
def wrapper_matches_reference(kernel):
    """Each wrapper head equals the float64 reference with that head's weights."""
    lib.parity(kernel, WRAPPER)


@exercise.check("parity", points=2)
def split_matches_reference(kernel):
    """MultiHeadAttention (d_in=5, d_out=12, 3 heads) equals the float64 reference."""
    lib.parity(kernel, SPLIT)


@exercise.check("parity", points=2)
def split_matches_nn_multihead_attention(kernel):
    """With d_in == d_out, MultiHeadAttention equals nn.MultiheadAttention under a causal mask."""
    lib.parity(kernel, SPLIT.replace(d_in=D_OUT))


@exercise.check("parity", points=2)
def wrapper_equals_split_weights(kernel):
    """The split version with the wrapper's weights stacked head by head gives its output."""
    stacked = {layer: [f"heads.{h}.{layer}" for h in range(H)] for layer in QKV}
    lib.twins_agree(kernel, WRAPPER, SPLIT, stacked, identity(D_OUT), seed=14)


@exercise.check("parity")
def split_parity_in_float32(kernel):
    """MultiHeadAttention in float32 against the reference at assert_close's tolerance."""
    lib.parity(kernel, SPLIT, dtype=att.F32)


@exercise.check("parity", hidden=False)
def walkthrough_numbers_wrapper(kernel):
    """torch.manual_seed(123), MultiHeadAttentionWrapper(3, 2, 6, 0.0, 2) prints its numbers."""
    walkthrough(kernel, "MultiHeadAttentionWrapper", SEED_WRAPPER)


@exercise.check("parity", hidden=False)
def walkthrough_numbers_split(kernel):
    """torch.manual_seed(123), MultiHeadAttention(3, 2, 6, 0.0, 2): first row [0.3190, 0.4858]."""
    walkthrough(kernel, "MultiHeadAttention", SEED_SPLIT)


@exercise.check("training", points=2)
def gradients_reach_every_parameter_and_the_input(kernel):
    """Backprop reaches every projection (the mask is a buffer) and the input."""
    for A in (SPLIT, WRAPPER):
        lib.gradients_reach(kernel, A, exact=True)


@exercise.check("training", points=2)
def input_gradient_matches_reference(kernel):
    """d(sum(y * r))/dx of MultiHeadAttention matches the float64 reference's."""
    lib.input_gradients_match_oracle(kernel, SPLIT)


@exercise.check("training", points=2)
def eval_mode_ignores_dropout(kernel):
    """With dropout 0.5 in eval mode, outputs are deterministic and equal dropout 0's."""
    lib.eval_mode_ignores_dropout(kernel, SPLIT, ONE)


@exercise.check("training")
def dropout_zero_in_train_mode(kernel):
    """dropout = 0.0 is honoured: in train mode the output is eval mode's (no dropout at all)."""
    for A in (SPLIT, ONE):
        module, x = A.build(kernel, dropout=0.0), A.inputs()
        y_eval, _ = A.forward(module, x)
        module.train()
        y_train, _ = A.forward(module, x, seed=3)
        checks.same(y_train, y_eval, f"train-mode {A.output} with dropout 0.0 vs eval mode")


@exercise.check("training")
def train_mode_applies_dropout(kernel):
    """With dropout 0.5 in train mode, the output is finite and differs from eval mode."""
    lib.train_mode_applies_dropout(kernel, SPLIT, ONE)


@exercise.check("training", points=2)
def dropout_acts_on_attention_weights(kernel):
    """In train mode dropout drops whole attention weights (first query: 0 or v[0] / (1 - p))."""
    x = att.randn(8, T, D_IN, seed=3)
    for A in (ONE, SPLIT):
        module = A.build(kernel, dropout=0.5)
        state = A.randomise(module, att.F32)
        att.load(module, A.owner, identity(D_OUT) if A is SPLIT else {})
        module.train()
        y, _ = A.forward(module, (x,), seed=4)
        checks.finite(y, f"train-mode {A.output} with dropout 0.5")
        v0 = F.linear(x[:, 0], state["W_value.weight"], state["W_value.bias"])
        what = f"{A.output}[:, 0] per head (out_proj = identity) in train mode, dropout 0.5"
        all_or_nothing(y[:, 0].reshape(8 * A.H, -1), v0.reshape(8 * A.H, -1), 0.5, what)


@exercise.check("gpt-2 size", points=2, hidden=False)
def gpt2_parameter_count(kernel):
    """GPT-2 size (768, 768, 1024, 0.1, 12): 2,362,368 parameters plus a [1024, 1024] mask."""
    layout(kernel, GPT2, name="GPT-2-size MultiHeadAttention")  # the exact shapes fix the count


@exercise.check("gpt-2 size", points=2)
def gpt2_is_causal(kernel):
    """The GPT-2-size module (dropout 0) on 16 tokens of its 1024: finite and causal."""
    module, x = GPT2.build(kernel, dropout=0.0), att.randn(1, 16, 768, seed=2)
    y1, _ = GPT2.forward(module, (x,))
    checks.finite(y1, "GPT-2-size y")
    lib.later_tokens(kernel, GPT2, 7, module=module, x=x)


@exercise.check("from scratch", points=2)
def no_builtin_attention_in_source(kernel):
    """The notebook's code does not name torch's attention built-ins."""
    lib.no_builtin_attention_in_source(kernel, exercise, ONE, WRAPPER, SPLIT)


@exercise.check("from scratch", points=2)
def no_builtin_attention_at_run_time(kernel):
    """No attention built-in runs during the suite, and none of the three holds one."""
    lib.no_builtin_attention_at_run_time(kernel, exercise, ONE, WRAPPER, SPLIT)
