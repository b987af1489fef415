"""Hidden suite for `mha_module` (seed 002): MultiHeadAttention with W_Q/W_K/W_V/W_O,
Xavier-uniform initialization and per-head weights, and its twin EfficientMultiHeadAttention
with a fused qkv_proj. Masks are 1/True = attend, [B, 1, 1, Lk] or [B, 1, Lq, Lk]; a fully
masked query row gets zero weights.

One feature per test: self-attention (query = key = value), no mask, dropout 0 and contiguous
inputs unless a test is about that. Mask tests compare the masking (weights on blocked keys,
the unmasked weights renormalised, outputs that must not move), not the values; parity tests
compare the values, without a mask.
"""

import math

import torch

from grader.exercises import _attention as att
from grader.exercises import _shared as lib
from grader.suite import checks
from grader.suite.checks import Failed
from grader.suite.library import noncontiguous

exercise = att.exercise(
    id="mha_module",
    tags=("attention", "modules"),
    minutes=40,
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
    profile=att.Profile(__name__, "A"),  # `--profile`: times this suite's adapter A
)

E, H, B, LQ, LK = 12, 3, 2, 5, 7
UNFUSED = ("W_Q", "W_K", "W_V", "W_O")


class Module(att.Adapter):
    """Either module: built as Module(d_model, num_heads, dropout=...[, bias=...]), in eval
    mode; forward(query, key, value, mask=...) or fused forward(x, mask=...) -> (output,
    per-head weights), or (output, None) with return_attention=False."""

    def new(self, kernel, dropout, bias, seed):
        options = {"bias": bias} if self.owner == "MultiHeadAttention" else {}
        return kernel.new(self.owner, self.E, self.H, dropout=dropout, seed=seed, **options)

    def request(self, module, inputs, allow=None, weights=True):
        args = att.qkv(inputs) if len(self.args) == 3 else inputs
        return module, args, {"mask": allow, **({} if weights else {"return_attention": False})}


A = Module(E, H, B, LQ, LK, args=("query", "key", "value"), layers=UNFUSED)
A = A.replace(heads_api=("_split_heads", "_combine_heads"))
FUSED = Module(E, H, B, LQ, LQ, owner="EfficientMultiHeadAttention", output="fused output")
FUSED = FUSED.replace(prefix="fused ", layers=("qkv_proj", "out_proj"))


def dropped(kernel, A: Module, seed: int, parts: tuple[str, ...]) -> None:
    """With dropout 0.5 in train mode: finite, and a quarter to three quarters of the entries
    of each of `parts` (output, weights) exactly 0."""
    module = A.build(kernel, dropout=0.5)
    module.train()
    y, w = A.forward(module, A.inputs(), seed=seed)
    for name, t in (("output", y), ("weights", w)):
        what = f"train-mode {A.prefix}{name} with dropout=0.5"
        checks.finite(t, what)
        zeros = float((t == 0).double().mean())
        if name in parts and not 0.25 <= zeros <= 0.75:
            raise Failed(f"{what}: {zeros:.0%} of entries are exactly 0, want 25% to 75%")


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


@exercise.check("shapes")
def non_contiguous_inputs(kernel):
    """Non-contiguous (column-major, strided) query, key and value give the contiguous output."""
    module, inputs = A.build(kernel), A.inputs()
    y, w = A.forward(module, inputs)
    y2, w2 = A.forward(module, tuple(map(noncontiguous, inputs)))
    checks.same(y2, y, "output for non-contiguous query, key, value vs contiguous copies")
    checks.same(w2, w, "weights for non-contiguous query, key, value vs contiguous copies")


@exercise.check("shapes")
def inputs_left_unchanged(kernel):
    """forward does not modify query, key or value in place (eval mode, no mask)."""
    lib.inputs_left_unchanged(kernel, A)


@exercise.check("initialization", hidden=False)
def parameter_count(kernel):
    """4E^2 + 4E numbers with bias, 4E^2 without; the fused module also has 4E^2 + 4E."""
    for M, bias in ((A, True), (A, False), (FUSED, True)):
        state = att.state_dict(M.build(kernel, bias=bias), M.owner)
        want = 4 * E * E + 4 * E * bias
        got = sum(t.numel() for t in state.values() if isinstance(t, torch.Tensor))
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
                found = kinds.get(layer, "missing")
                raise checks.Interface(f"{M.owner}.{layer} is {found}, want nn.Linear")
            checks.tensor(state[f"{layer}.weight"], f"{M.owner}.{layer}.weight", (n, E))
            checks.tensor(state[f"{layer}.bias"], f"{M.owner}.{layer}.bias", (n,))


@exercise.check("initialization", points=2)
def xavier_uniform_weights(kernel):
    """With E = 64, each projection is Xavier-uniform (bound, std) and differs from the others."""
    bound, names = math.sqrt(6 / (64 + 64)), [f"{p}.weight" for p in UNFUSED]
    state = att.require(A.replace(E=64, H=4).build(kernel).state_dict(), names, A.owner)
    for i, name in enumerate(names):
        w = checks.tensor(state[name], name, (64, 64)).double()
        top, std, want = float(w.abs().max()), float(w.std()), bound / math.sqrt(3)
        if not 0.9 * bound <= top <= bound * (1 + 1e-6):
            raise Failed(
                f"{name}: max |w| {top:.4g}, want 0.9 to 1 times the Xavier-uniform bound "
                f"sqrt(6/(fan_in+fan_out)) = {bound:.4g}"
            )
        if not 0.85 * want <= std <= 1.15 * want:
            raise Failed(f"{name}: std {std:.4g}, want about {want:.4g} (uniform on ±{bound:.4g})")
        for a in (n for n in names[:i] if torch.equal(state[n], state[name])):
            raise Failed(f"{a} and {name} are identical: initialise each projection on its own")


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
    lib.probabilities(kernel, A, "self-attention weights", cross=False)


@exercise.check("normalization")
def cross_weights_are_probabilities(kernel):
    """Cross-attention weights sum to 1 over the Lk keys."""
    lib.probabilities(kernel, A, "cross-attention weights")


@exercise.check("normalization")
def large_inputs_stay_normalised(kernel):
    """Inputs of magnitude ~1e3 (logits ~1e5) still give probabilities: a stable softmax."""
    lib.large_inputs_stay_normalised(kernel, A)


@exercise.check("normalization")
def fused_weights_are_probabilities(kernel):
    """The fused module's weights sum to 1, for ordinary and for large (~1e3) inputs."""
    lib.probabilities(kernel, FUSED, "weights")
    lib.large_inputs_stay_normalised(kernel, FUSED)


@exercise.check("masking", points=2)
def padded_keys_get_no_weight(kernel):
    """A [B, 1, 1, Lk] bool padding mask: padded keys get ~0 weight in every head."""
    lib.obeys(kernel, A, att.padding_allow([LK - 2, LK - 3], LK), "padded keys")


@exercise.check("masking", points=2)
def padded_key_values_do_not_matter(kernel):
    """With a float 0/1 padding mask, changing the padded keys and values leaves the output."""
    lib.padded_key_values_do_not_matter(kernel, A, [LK - 2, LK - 4], att.F32)


@exercise.check("masking", points=2, hidden=False)
def causal_mask_blocks_future_keys(kernel):
    """A float causal mask tril(ones) of shape [1, 1, L, L]: future keys get ~0 weight."""
    causal = att.causal_allow(LQ).float()[None, None]
    lib.obeys(kernel, A, causal, "future keys", cross=False)


@exercise.check("masking", points=2)
def future_tokens_do_not_change_the_past(kernel):
    """With a [B, 1, L, L] bool causal mask, output[:, t] ignores tokens after t."""
    lib.later_tokens(kernel, A, allow=att.causal_allow(LQ).expand(B, 1, LQ, LQ))


@exercise.check("masking", points=2)
def per_sample_masks_broadcast_over_heads(kernel):
    """[B, 1, Lq, Lk] and [B, 1, 1, Lk] masks, different per sample, with B == H."""
    allow = att.random_allow(H, 1, LQ, LK, seed=5, open=5)
    lib.obeys(kernel, A, allow, "masked keys ([B, 1, Lq, Lk] mask)")
    keep = att.padding_allow([LK, LK - 2, LK - 4], LK)
    lib.obeys(kernel, A, keep, "padded keys ([B, 1, 1, Lk] mask)")


@exercise.check("masking", points=2)
def mask_dtypes_agree(kernel):
    """The same mask as bool, float 0/1 and int64 0/1 gives the same output and weights."""
    allow = att.random_allow(B, 1, LQ, LK, seed=6, open=6)
    lib.mask_dtypes_agree(kernel, A, allow, (att.F32, torch.int64))


@exercise.check("masking", points=2)
def masked_weights_are_the_unmasked_ones_renormalised(kernel):
    """Under a random [B, 1, Lq, Lk] mask, each row's weights are its unmasked weights on the
    allowed keys, renormalised, in every head."""
    allow = att.random_allow(H, 1, LQ, LK, seed=9, open=2)
    lib.masked_weights_renormalise(kernel, A, allow, "a random [B, 1, Lq, Lk] mask")


@exercise.check("masking")
def inputs_and_mask_left_unchanged(kernel):
    """forward with a float [B, 1, 1, Lk] mask modifies neither the inputs nor the mask."""
    lib.inputs_left_unchanged(kernel, A, att.padding_allow([LK - 2, LK - 3], LK).float())


@exercise.check("masking", points=2)
def fused_masked_keys_get_no_weight(kernel):
    """The fused module under a per-sample [B, 1, L, L] mask with B == H."""
    lib.obeys(kernel, FUSED, att.random_allow(H, 1, LQ, LQ, seed=7, open=2), "masked keys")


@exercise.check("masking", points=2)
def fused_future_tokens_do_not_change_the_past(kernel):
    """The fused module with a [1, 1, L, L] causal mask: output[:, t] ignores tokens after t."""
    lib.later_tokens(kernel, FUSED, t=1)


@exercise.check("finite")
def zero_input_is_finite(kernel):
    """An all-zero input gives finite output and weights."""
    lib.zero_input_is_finite(kernel, A)


@exercise.check("finite")
def large_input_is_finite(kernel):
    """Inputs of magnitude ~1e4 give a finite output."""
    lib.large_input_is_finite(kernel, A, cross=False)


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
    allow = att.padding_allow([LK - 2, 0], LK).float()
    lib.fully_blocked_rows(kernel, A, allow, exact=True, what="a fully padded sample")


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
    """Parity with three different inputs for query, key and value (Lk != Lq)."""
    lib.parity(kernel, A)


@exercise.check("parity")
def parity_without_bias(kernel):
    """Parity for MultiHeadAttention(bias=False)."""
    lib.parity(kernel, A, cross=False, bias=False)


@exercise.check("parity")
def parity_in_float32(kernel):
    """Parity in float32 at assert_close's default tolerance (rtol 1.3e-6, atol 1e-5)."""
    lib.parity(kernel, A, cross=False, dtype=att.F32)


@exercise.check("fused", points=2)
def fused_parity(kernel):
    """The fused module matches nn.MultiheadAttention whose in_proj is its qkv_proj = [q | k | v]:
    the same as MultiHeadAttention holding W_Q, W_K, W_V stacked."""
    lib.parity(kernel, FUSED)


@exercise.check("fused")
def fused_parity_in_float32(kernel):
    """Fused parity in float32 at assert_close's default tolerance."""
    lib.parity(kernel, FUSED, dtype=att.F32)


@exercise.check("training", points=2, hidden=False)
def gradients_reach_every_parameter_and_the_input(kernel):
    """Backprop from the output reaches every parameter and query, key and value."""
    lib.gradients_reach(kernel, A)


@exercise.check("training", points=2)
def input_gradients_match_oracle(kernel):
    """d(sum(output * r)) / d(query, key, value) match nn.MultiheadAttention's in float64."""
    lib.input_gradients_match_oracle(kernel, A, cross=True)


@exercise.check("training", points=2)
def fused_gradients_reach_every_parameter_and_the_input(kernel):
    """Backprop through the fused module reaches qkv_proj, out_proj and the input."""
    lib.gradients_reach(kernel, FUSED)


@exercise.check("training")
def fully_masked_row_has_finite_gradients(kernel):
    """With a fully masked query row, every gradient is finite."""
    keep = att.padding_allow([LK - 2, 0], LK)
    lib.finite_gradients(kernel, A, keep, "with a fully masked sample")


@exercise.check("training", points=2)
def eval_mode_ignores_dropout(kernel):
    """With dropout = 0.5 in eval mode both modules are deterministic and dropout-free."""
    lib.eval_mode_ignores_dropout(kernel, A, FUSED)


@exercise.check("training")
def dropout_zero_in_train_mode(kernel):
    """dropout = 0.0 is honoured: in train mode both modules give eval mode's output and weights."""
    for M in (A, FUSED):
        module, x = M.build(kernel, dropout=0.0), M.inputs(cross=False)
        y_eval, w_eval = M.forward(module, x)
        module.train()
        y_train, w_train = M.forward(module, x, seed=3)
        checks.same(y_train, y_eval, f"train-mode {M.prefix}output with dropout 0.0 vs eval mode")
        checks.same(w_train, w_eval, f"train-mode {M.prefix}weights with dropout 0.0 vs eval mode")


@exercise.check("training")
def inputs_left_unchanged_in_train_mode(kernel):
    """In train mode with dropout 0.5, forward modifies none of query, key and value."""
    lib.inputs_left_unchanged(kernel, A, train=True)


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
