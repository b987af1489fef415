"""Hidden suite for `mha_module` (seed 002): MultiHeadAttention with W_Q/W_K/W_V/W_O,
Xavier-uniform initialization and per-head weights, and its twin EfficientMultiHeadAttention
with a fused qkv_proj. Masks are 1/True = attend, [B, 1, 1, Lk] or [B, 1, Lq, Lk]; a fully
masked query row gets zero weights.

Sizes are chosen so that bugs show: B, H, Lq, Lk and d_k all differ, and the masked tests
that must broadcast over heads use B == H.
"""

import math

import torch

from grader import checks
from grader.checks import Failed
from grader.exercise import Exercise
from grader.exercises import _attention as att
from grader.exercises import _shared as lib
from grader.exercises._attention import F32, F64
from grader.exercises._builtins import ATTENTION, FORBIDDEN

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
    forbidden=FORBIDDEN,
)

# B, H, Lq, Lk and d_k all differ, and H >= 2, so layout and broadcasting bugs show.
E, H, B, LQ, LK = 12, 3, 2, 5, 7
UNFUSED = ("W_Q", "W_K", "W_V", "W_O")


class Module(att.Adapter):
    """Either module: built as Module(d_model, num_heads, dropout=...[, bias=...]), in eval
    mode; forward(query, key, value, mask=...) or fused forward(x, mask=...) -> (output,
    per-head weights), or (output, None) with return_attention=False."""

    def build(self, kernel, dropout=None, bias=True, seed=0):
        dropout = self.dropout if dropout is None else dropout
        options = {"bias": bias} if self.owner == "MultiHeadAttention" else {}
        module = kernel.new(self.owner, self.E, self.H, dropout=dropout, seed=seed, **options)
        module.eval()
        return module

    def request(self, module, inputs, allow=None, weights=True):
        args = att.qkv(inputs) if len(self.args) == 3 else inputs
        return module, args, {"mask": allow, **({} if weights else {"return_attention": False})}


A = Module(E, H, B, LQ, LK, args=("query", "key", "value"), layers=UNFUSED)
A = A.replace(heads_api=("_split_heads", "_combine_heads"))
FUSED = Module(
    E, H, B, LQ, LQ, owner="EfficientMultiHeadAttention", layers=("qkv_proj", "out_proj")
)
FUSED = FUSED.replace(output="fused output", prefix="fused ")


def numel(state: dict) -> int:
    """How many numbers a state_dict holds."""
    return sum(t.numel() for t in state.values() if isinstance(t, torch.Tensor))


def zero_fraction(t: torch.Tensor, what: str, low: float = 0.25, high: float = 0.75) -> None:
    """`t` is finite and the fraction of its entries that are exactly 0 lies in [low, high]."""
    checks.finite(t, what)
    frac = float((t == 0).double().mean())
    if not low <= frac <= high:
        raise Failed(f"{what}: {frac:.0%} of entries are exactly 0, want {low:.0%} to {high:.0%}")


def dropped(kernel, A: Module, seed: int, parts: tuple[str, ...]) -> None:
    """With dropout 0.5 in train mode: finite, and about half the entries of each of `parts`
    (output, weights) exactly 0."""
    module = A.build(kernel, dropout=0.5)
    module.train()
    y, w = A.forward(module, A.inputs(), seed=seed)
    for name, t in (("output", y), ("weights", w)):
        what = f"train-mode {A.prefix}{name} with dropout=0.5"
        if name in parts:
            zero_fraction(t, what)
        else:
            checks.finite(t, what)


@exercise.check("shapes", hidden=False)
def self_attention_shapes(kernel):
    """Self-attention: output [B, L, E], per-head weights [B, H, L, L]."""
    lib.shapes(kernel, A, cross=False)


@exercise.check("shapes", hidden=False)
def cross_attention_shapes(kernel):
    """Cross-attention with Lk != Lq: output [B, Lq, E], weights [B, H, Lq, Lk]."""
    lib.shapes(kernel, A)


@exercise.check("shapes")
def no_weights_unless_asked(kernel):
    """return_attention=False returns (output, None)."""
    lib.no_weights_unless_asked(kernel, A)


@exercise.check("shapes")
def single_query_batch_of_one(kernel):
    """B = 1 and Lq = 1 attending to 3 keys."""
    lib.shapes(kernel, A, batch=1, t=1, s=3, seed=3)


@exercise.check("shapes", hidden=False)
def fused_shapes(kernel):
    """EfficientMultiHeadAttention(x): output [B, L, E], weights [B, H, L, L]."""
    lib.shapes(kernel, FUSED)


@exercise.check("initialization", hidden=False)
def parameter_count(kernel):
    """4E^2 + 4E numbers with bias, 4E^2 without; the fused module also has 4E^2 + 4E."""
    for M, bias, want in (
        (A, True, 4 * E * E + 4 * E),
        (A, False, 4 * E * E),
        (FUSED, True, 4 * E * E + 4 * E),
    ):
        got = numel(M.build(kernel, bias=bias).state_dict())
        if got != want:
            raise Failed(f"{M.owner}(bias={bias}) holds {got} numbers, want {want}")


@exercise.check("initialization")
def projections_are_linear_layers(kernel):
    """W_Q, W_K, W_V, W_O are nn.Linear(E, E); qkv_proj is E -> 3E and out_proj E -> E."""
    for M, rows in ((A, (E,) * 4), (FUSED, (3 * E, E))):
        module = M.build(kernel)
        kinds = dict(kernel.modules(module))
        names = [f"{p}.{kind}" for p in M.layers for kind in ("weight", "bias")]
        state = att.require(module.state_dict(), names, M.owner)
        for layer, n in zip(M.layers, rows, strict=True):
            if not kinds.get(layer, "").endswith("Linear"):
                raise Failed(f"{M.owner}.{layer} is {kinds.get(layer, 'missing')}, want nn.Linear")
            checks.tensor(state[f"{layer}.weight"], f"{M.owner}.{layer}.weight", (n, E))
            checks.tensor(state[f"{layer}.bias"], f"{M.owner}.{layer}.bias", (n,))


@exercise.check("initialization", points=2)
def xavier_uniform_weights(kernel):
    """With E = 64, each projection is Xavier-uniform (bound, std) and differs from the others."""
    d_model = 64
    bound = math.sqrt(6 / (d_model + d_model))
    mha = A.replace(E=d_model, H=4).build(kernel)
    names = [f"{p}.weight" for p in UNFUSED]
    state = att.require(mha.state_dict(), names, "MultiHeadAttention")
    for name in names:
        w = checks.tensor(state[name], name, (d_model, d_model)).double()
        top, std, want = float(w.abs().max()), float(w.std()), bound / math.sqrt(3)
        if not 0.9 * bound <= top <= bound * (1 + 1e-6):
            raise Failed(
                f"{name}: max |w| {top:.4g}, want 0.9 to 1 times the Xavier-uniform bound "
                f"sqrt(6/(fan_in+fan_out)) = {bound:.4g}"
            )
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
    state = att.require(A.build(kernel).state_dict(), names, "MultiHeadAttention")
    for name in names:
        att.exactly_zero(checks.tensor(state[name], name, (E,)), f"fresh {name}")


@exercise.check("normalization", hidden=False)
def weights_are_probabilities(kernel):
    """Self-attention weights are non-negative and sum to 1 over the keys, in every head."""
    lib.weights_are_probabilities(kernel, A)


@exercise.check("normalization")
def cross_weights_are_probabilities(kernel):
    """Cross-attention weights sum to 1 over the Lk keys."""
    lib.cross_weights_are_probabilities(kernel, A)


@exercise.check("normalization")
def large_inputs_stay_normalised(kernel):
    """Inputs of magnitude ~1e3 (logits ~1e5) still give probabilities: a stable softmax."""
    lib.large_inputs_stay_normalised(kernel, A, cross=True)


@exercise.check("normalization")
def fused_weights_are_probabilities(kernel):
    """The fused module's weights sum to 1, for ordinary and for large (~1e3) inputs."""
    lib.probabilities(kernel, FUSED, "weights")
    lib.large_inputs_stay_normalised(kernel, FUSED)


@exercise.check("masking", points=2)
def padded_keys_get_no_weight(kernel):
    """A [B, 1, 1, Lk] bool padding mask: padded keys get ~0 weight in every head."""
    lib.padded_keys_get_no_weight(kernel, A, [LK - 2, LK - 3])


@exercise.check("masking", points=2)
def padded_key_values_do_not_matter(kernel):
    """With a float 0/1 padding mask, changing the padded keys and values leaves the output."""
    lib.padded_key_values_do_not_matter(kernel, A, [LK - 2, LK - 4], F32)


@exercise.check("masking", points=2, hidden=False)
def causal_mask_blocks_future_keys(kernel):
    """A float causal mask tril(ones) of shape [1, 1, L, L]: future keys get ~0 weight."""
    lib.future_keys_get_no_weight(kernel, A, att.causal_allow(LQ).float()[None, None])


@exercise.check("masking", points=2)
def future_tokens_do_not_change_the_past(kernel):
    """With a [B, 1, L, L] bool causal mask, output[:, t] ignores tokens after t."""
    lib.future_tokens_do_not_change_the_past(
        kernel, A, allow=att.causal_allow(LQ).expand(B, 1, LQ, LQ)
    )


@exercise.check("masking", points=2)
def per_sample_masks_broadcast_over_heads(kernel):
    """[B, 1, Lq, Lk] and [B, 1, 1, Lk] masks, different per sample, with B == H."""
    allow = att.random_allow(H, 1, LQ, LK, seed=5, open=5)
    lib.obeys(kernel, A, allow, "masked keys ([B, 1, Lq, Lk] mask)")
    lib.obeys(
        kernel, A, att.padding_allow([LK, LK - 2, LK - 4], LK), "padded keys ([B, 1, 1, Lk] mask)"
    )


@exercise.check("masking", points=2)
def mask_dtypes_agree(kernel):
    """The same mask as bool, float 0/1 and int64 0/1 gives the same output and weights."""
    allow = att.random_allow(B, 1, LQ, LK, seed=6, open=6)
    lib.mask_dtypes_agree(kernel, A, allow, (F32, torch.int64))


@exercise.check("masking", points=2)
def fused_masked_keys_get_no_weight(kernel):
    """The fused module under a per-sample [B, 1, L, L] mask with B == H."""
    lib.obeys(kernel, FUSED, att.random_allow(H, 1, LQ, LQ, seed=7, open=2), "masked keys")


@exercise.check("masking", points=2)
def fused_future_tokens_do_not_change_the_past(kernel):
    """The fused module with a [1, 1, L, L] causal mask: output[:, t] ignores tokens after t."""
    lib.future_tokens_do_not_change_the_past(kernel, FUSED, t=1)


@exercise.check("finite")
def zero_input_is_finite(kernel):
    """An all-zero input gives finite output and weights."""
    lib.zero_input_is_finite(kernel, A)


@exercise.check("finite")
def large_input_is_finite(kernel):
    """Inputs of magnitude ~1e4 give a finite output."""
    lib.large_input_is_finite(kernel, A)


@exercise.check("finite", points=2, hidden=False)
def fully_masked_row_gets_zero_weights(kernel):
    """A fully masked query gets exactly zero weights; the output stays finite."""
    allow = att.random_allow(B, 1, LQ, LK, seed=8, open=1)
    allow[1, 0, 2] = False
    allow[0, 0, 4] = False
    lib.fully_blocked_rows(kernel, A, allow, exact=True)


@exercise.check("finite", points=2)
def fully_padded_sample_gets_zero_weights(kernel):
    """A float [B, 1, 1, Lk] mask of all zeros for one sample: that sample's weights are all 0."""
    lib.fully_padded_sample(kernel, A, att.padding_allow([LK - 2, 0], LK).float(), exact=True)


@exercise.check("finite", points=2)
def fused_fully_masked_row_gets_zero_weights(kernel):
    """The fused module gives a fully masked query row zero weights and a finite output."""
    allow = att.causal_allow(LQ).expand(B, 1, LQ, LQ).clone()
    allow[0, 0, 3] = False
    lib.fully_blocked_rows(kernel, FUSED, allow, exact=True)


@exercise.check("parity", points=2)
def parity_in_self_attention(kernel):
    """Same output and per-head weights as nn.MultiheadAttention with the same (biased) weights."""
    lib.parity(kernel, A, cross=False)


@exercise.check("parity", points=2)
def parity_in_cross_attention(kernel):
    """Parity with three different inputs for query, key and value."""
    lib.parity(kernel, A)


@exercise.check("parity", points=2)
def parity_with_padding_mask(kernel):
    """Parity under a [B, 1, 1, Lk] bool padding mask."""
    lib.parity(kernel, A, att.padding_allow([LK - 1, LK - 4], LK))


@exercise.check("parity", points=2)
def parity_with_causal_mask(kernel):
    """Parity in self-attention under a float [1, 1, L, L] causal mask."""
    lib.parity(kernel, A, att.causal_allow(LQ).double()[None, None], cross=False)


@exercise.check("parity", points=2)
def parity_with_per_sample_mask(kernel):
    """Parity under an int64 [B, 1, Lq, Lk] mask, different per sample, with B == H."""
    lib.parity(kernel, A, att.random_allow(H, 1, LQ, LK, seed=9, open=2).long())


@exercise.check("parity")
def parity_without_bias(kernel):
    """Parity for MultiHeadAttention(bias=False)."""
    lib.parity(kernel, A, att.padding_allow([LK, LK - 3], LK), bias=False)


@exercise.check("parity")
def parity_in_float32(kernel):
    """Parity in float32 at assert_close's default tolerance (rtol 1.3e-6, atol 1e-5)."""
    lib.parity(kernel, A, att.padding_allow([LK - 2, LK], LK), dtype=F32)


@exercise.check("fused", points=2)
def fused_matches_unfused(kernel):
    """With qkv_proj = cat(W_Q, W_K, W_V) and out_proj = W_O, the fused module matches."""
    mha = A.build(kernel)
    state = A.randomise(mha, F64)
    mapped = {f"out_proj.{kind}": state[f"W_O.{kind}"] for kind in ("weight", "bias")}
    for kind in ("weight", "bias"):
        mapped[f"qkv_proj.{kind}"] = torch.cat([state[f"{p}.{kind}"] for p in UNFUSED[:3]])
    module = FUSED.build(kernel, seed=1)
    att.require(module.state_dict(), list(mapped), FUSED.owner)
    module.to(F64)
    att.load(module, FUSED.owner, mapped)
    x, keep = A.inputs(cross=False, seed=11, dtype=F64), att.padding_allow([LQ - 1, LQ - 3], LQ)
    y_f, w_f = FUSED.forward(module, x, keep.double())
    y_u, w_u = A.forward(mha, x, keep.double())
    checks.close(y_f, y_u, "fused output vs MultiHeadAttention with the same weights")
    checks.close(w_f, w_u, "fused weights vs MultiHeadAttention with the same weights")


@exercise.check("fused", points=2)
def fused_parity_without_mask(kernel):
    """The fused module matches nn.MultiheadAttention whose in_proj is its qkv_proj."""
    lib.parity(kernel, FUSED)


@exercise.check("fused", points=2)
def fused_parity_with_causal_mask(kernel):
    """Fused parity under a bool [1, 1, L, L] causal mask."""
    lib.parity(kernel, FUSED, att.causal_allow(LQ)[None, None])


@exercise.check("fused", points=2)
def fused_parity_with_per_sample_mask(kernel):
    """Fused parity under a float [B, 1, L, L] mask, different per sample, with B == H."""
    lib.parity(kernel, FUSED, att.random_allow(H, 1, LQ, LQ, seed=10).double())


@exercise.check("fused")
def fused_parity_in_float32(kernel):
    """Fused parity in float32 at assert_close's default tolerance."""
    lib.parity(kernel, FUSED, att.padding_allow([LQ, LQ - 2], LQ), dtype=F32)


@exercise.check("training", points=2, hidden=False)
def gradients_reach_every_parameter_and_the_input(kernel):
    """Backprop from the output reaches every parameter and query, key and value."""
    lib.gradients_reach(kernel, A)


@exercise.check("training", points=2)
def input_gradients_match_oracle(kernel):
    """d(sum(output * r)) / d(query, key, value) match nn.MultiheadAttention's in float64."""
    lib.input_gradients_match_oracle(kernel, A, att.padding_allow([LK - 1, LK - 3], LK), True)


@exercise.check("training", points=2)
def fused_gradients_reach_every_parameter_and_the_input(kernel):
    """Backprop through the fused module reaches qkv_proj, out_proj and the input."""
    lib.gradients_reach(kernel, FUSED)


@exercise.check("training")
def fully_masked_row_has_finite_gradients(kernel):
    """With a fully masked query row, every gradient is finite."""
    keep = att.padding_allow([LK - 2, 0], LK)
    grads = lib.grad(kernel, A, A.build(kernel), A.inputs(), keep, att.randn(B, LQ, E, seed=2))
    for name, g in zip(A.args, grads["inputs"], strict=True):
        what = f"gradient of {name} with a fully masked sample"
        checks.finite(checks.tensor(g, what), what)
    for name, g in grads["params"].items():
        if g is not None:
            checks.finite(g, f"gradient of {name} with a fully masked sample")


@exercise.check("training", points=2)
def eval_mode_ignores_dropout(kernel):
    """With dropout = 0.5 in eval mode both modules are deterministic and dropout-free."""
    lib.eval_mode_ignores_dropout(kernel, A, FUSED)


@exercise.check("training")
def train_mode_drops_attention_weights(kernel):
    """dropout = 0.5 in train mode: finite, and about half the returned weights are exactly 0."""
    dropped(kernel, A, 3, ("weights",))


@exercise.check("training")
def train_mode_drops_the_output(kernel):
    """dropout = 0.5 in train mode: finite, and about half the output entries are exactly 0."""
    dropped(kernel, A, 4, ("output",))


@exercise.check("training")
def fused_train_mode_applies_dropout(kernel):
    """The fused module in train mode (dropout = 0.5) drops weights and output alike."""
    dropped(kernel, FUSED, 5, ("weights", "output"))


@exercise.check("training", points=2)
def split_heads_layout(kernel):
    """_split_heads: [B, L, E] -> [B, H, L, d_k], head h on channels h*d_k .. (h+1)*d_k."""
    lib.split_heads_layout(kernel, A)


@exercise.check("training", points=2)
def combine_heads_inverts_split(kernel):
    """_combine_heads puts head h back on channels h*d_k .. (h+1)*d_k and undoes _split_heads."""
    lib.merge_heads_inverts_split(kernel, A)


@exercise.check("from scratch", points=2)
def no_builtin_attention_in_source(kernel):
    """The notebook's code does not name torch's attention built-ins."""
    lib.no_builtin_attention_in_source(kernel, exercise, A, FUSED)


@exercise.check("from scratch", points=2)
def no_builtin_attention_at_run_time(kernel):
    """No attention built-in runs during the suite, and neither module holds one."""
    lib.no_builtin_attention_at_run_time(kernel, exercise, A, FUSED)
