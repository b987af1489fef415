"""Hidden suite for `mha_parity` (seed 001): a function `multi_head_attention` that takes
nn.MultiheadAttention's weights (in_proj [3E, E], out_proj [E, E], optional biases) and must
reproduce the module's output, with a bool or 0/1 mask (True / 1 = masked) of shape [L, S]
or [N, L, S], shared by all heads. It returns only y: the weight-level checks read the
attention weights through it (`Function.weights`).

One feature per test: no mask, contiguous inputs, unless a test is about that. Mask tests compare
the masking (weights on masked keys, the unmasked weights renormalised, outputs that must not
move), not the values; parity and gradient tests compare the values, without a mask (the
notebook's public self-check runs the seed's masked cases). The [L, S] and float 0/1 masks of
the causal level are compared with the per-sample bool form the padding level checks.
"""

from types import SimpleNamespace
from typing import Any

import torch

from grader.exercises import _attention as att
from grader.exercises import _shared as lib
from grader.suite import checks
from grader.suite.library import noncontiguous

exercise = att.exercise(
    id="mha_parity",
    tags=("attention", "modules"),
    minutes=35,
    title="Multi-head attention function with nn.MultiheadAttention's weights (parity, masks)",
    seed="001_cf0ed3d152ee771a",
    levels=[
        "shapes",
        "normalization",
        "padding",
        "causal",
        "finite",
        "parity",
        "gradients",
        "from scratch",
    ],
    defines=("multi_head_attention",),
    profile=att.Profile(__name__, "A"),  # `--profile`: times this suite's adapter A
)

E, H, N, L, S = 24, 3, 2, 5, 7
FUNCTION = "multi_head_attention"


def projections(seed: int, e: int = E, bias: bool = True, dtype=att.F32) -> dict[str, Any]:
    """Random weights in nn.MultiheadAttention's layout; biases random too (zero ones hide bugs)."""
    scale = e**-0.5
    return {
        "in_proj_weight": att.randn(3 * e, e, seed=seed, scale=scale, dtype=dtype),
        "out_proj_weight": att.randn(e, e, seed=seed + 1, scale=scale, dtype=dtype),
        "in_proj_bias": att.randn(3 * e, seed=seed + 2, scale=0.5, dtype=dtype) if bias else None,
        "out_proj_bias": att.randn(e, seed=seed + 3, scale=0.5, dtype=dtype) if bias else None,
    }


def oracle_of(w: dict[str, Any], heads: int) -> torch.nn.MultiheadAttention:
    """nn.MultiheadAttention (float64) holding the function's weights."""
    biases = [w["in_proj_bias"], w["out_proj_bias"]]
    return att.oracle(heads, [w["in_proj_weight"], w["out_proj_weight"]], biases)


class Function(att.Adapter):
    """multi_head_attention(q, k, v, num_heads, d_model, mask, **weights) -> y; the mask is
    the canonical one inverted (True / 1 = masked), [L, S] or [N, L, S]. What it builds is
    the function and the projections it is called with (None: random ones from seed 100, in
    the inputs' dtype)."""

    def build(self, kernel, dropout=None, bias=True, seed=0):
        weights = None if bias else projections(100, bias=False)
        return SimpleNamespace(fn=kernel.get(FUNCTION), weights=weights)

    def request(self, module, inputs, allow=None, weights=True):
        q, k, v = att.qkv(inputs)
        mask = None if allow is None else (allow == 0).to(allow.dtype)
        if mask is not None and mask.dim() == 4:
            per_sample = mask[:, 0].expand(q.shape[0], q.shape[1], k.shape[1]).clone()
            mask = mask[0, 0] if mask.shape[0] == 1 else per_sample
        e = q.shape[-1]
        w = projections(100, e, dtype=q.dtype) if module.weights is None else module.weights
        return module.fn, (q, k, v, self.H, e, mask), w

    def oracle(self, module, dtype, bias=True):
        module.weights = projections(50 if bias else 60, self.E, bias, dtype)
        mha = oracle_of(module.weights, self.H)
        return lambda inputs, blocked=None: att.run_oracle(mha, inputs, blocked)

    def weights(self, module, inputs, allow=None, **extra):
        """Per-channel weights [N, E, L, S] read through the output: with identity value and
        output projections, no biases, and every value the indicator of key j in all
        channels, channel c of y is the weight its head puts on key j."""
        q, k, _ = att.qkv(inputs)
        (n, s, e), eye = k.shape, torch.eye(k.shape[-1], dtype=q.dtype)
        qk = att.randn(2 * e, e, seed=31, scale=e**-0.5, dtype=q.dtype)
        reader = SimpleNamespace(fn=module.fn, weights={"out_proj_weight": eye})
        reader.weights["in_proj_weight"] = torch.cat([qk, eye])
        values = torch.eye(s, dtype=q.dtype)[:, None, :, None].expand(s, n, s, e).contiguous()
        ys = [self.forward(reader, (q, k, v), allow, **extra)[0] for v in values]
        return torch.stack(ys, dim=-1).transpose(1, 2)


A = Function(E, H, N, L, S, owner=FUNCTION, args=("q", "k", "v"), output="output y",
             returns_weights=False, function=True)  # fmt: skip
BIG = A.replace(E=64, H=4, B=4, T=9, S=11)


def seed_case() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
    """The original inputs and the self-check's weights: torch.rand with seed 42."""
    g = torch.Generator().manual_seed(42)
    q, k, v = (torch.rand(3, 4, 8, generator=g) for _ in range(3))
    weights = {
        "in_proj_weight": torch.randn(24, 8, generator=g) * 0.3,
        "in_proj_bias": torch.randn(24, generator=g) * 0.5,
        "out_proj_weight": torch.randn(8, 8, generator=g) * 0.3,
        "out_proj_bias": torch.randn(8, generator=g) * 0.5,
    }
    return q, k, v, weights


def reference(q, k, v, mask, weights, heads: int = H) -> torch.Tensor:
    """nn.MultiheadAttention's y in float64 for a mask [N, L, S] (True / 1 = masked) or None."""
    allow = None if mask is None else (mask == 0)[:, None]
    blocked = att.blocked(allow, q.shape[0], q.shape[1], k.shape[1], heads)
    return att.run_oracle(oracle_of(weights, heads), (q, k, v), blocked)[0]


def seed_parity(kernel, mask: torch.Tensor | None, case: str) -> None:
    """The original case ([N, L, L] mask) in float64 and in float32, each at assert_close's
    default tolerance (the seed's atol 1e-8, rtol 1e-5 in float32 fails correct code)."""
    *qkv, weights = seed_case()
    for dtype in (att.F64, att.F32):
        (q, k, v), w = (t.to(dtype) for t in qkv), {n: t.to(dtype) for n, t in weights.items()}
        y = checks.tensor(kernel.get(FUNCTION)(q, k, v, 2, 8, mask, **w), "output y", (3, 4, 8))
        what = f"output y vs nn.MultiheadAttention ({case}, {str(dtype)[6:]})"
        checks.close(y, reference(q, k, v, mask, w, heads=2), what)


@exercise.check("shapes", hidden=False)
def self_attention_shape(kernel):
    """q = k = v = x [N, L, E] gives y [N, L, E]."""
    lib.shapes(kernel, A, cross=False)


@exercise.check("shapes", hidden=False)
def cross_attention_shape(kernel):
    """Keys and values of another length S != L, no biases: y is [N, L, E]."""
    A.forward(A.build(kernel, bias=False), A.inputs(seed=11))


@exercise.check("shapes")
def single_query_batch_of_one(kernel):
    """N = 1, L = 1 attending to S = 3 keys."""
    lib.shapes(kernel, A, batch=1, t=1, s=3, seed=11)


@exercise.check("shapes")
def float64_in_float64_out(kernel):
    """float64 inputs and weights give a float64 output."""
    y, _ = A.forward(A.build(kernel), A.inputs(seed=11, dtype=att.F64))
    if y.dtype != att.F64:
        raise checks.Failed(f"output dtype {y.dtype} for float64 inputs, want torch.float64")


@exercise.check("shapes")
def non_contiguous_inputs(kernel):
    """Non-contiguous (column-major, strided) q, k and v give the output of contiguous copies."""
    call, inputs = A.build(kernel), A.inputs(seed=11)
    (y, _), (y2, _) = A.forward(call, inputs), A.forward(call, tuple(map(noncontiguous, inputs)))
    checks.same(y2, y, "output y for non-contiguous q, k, v vs contiguous copies")


@exercise.check("shapes")
def inputs_left_unchanged(kernel):
    """The function modifies none of q, k, v and the weights it is given (no mask)."""
    lib.inputs_left_unchanged(kernel, A)


@exercise.check("normalization")
def weights_are_probabilities(kernel):
    """Self-attention weights, read through the output, sum to 1 for every query and head."""
    lib.probabilities(kernel, A, "self-attention weights", cross=False)


@exercise.check("normalization")
def cross_weights_are_probabilities(kernel):
    """Cross-attention weights sum to 1 over the S != L keys, in every head."""
    lib.probabilities(kernel, A, "cross-attention weights")


@exercise.check("normalization")
def large_inputs_stay_normalised(kernel):
    """Queries and keys of magnitude ~1e3 still give probabilities: a stable softmax."""
    lib.large_inputs_stay_normalised(kernel, A, cross=True)


@exercise.check("padding", points=2)
def padded_keys_get_no_weight(kernel):
    """A bool [N, L, S] padding mask (True = masked): padded keys get ~0 weight in every head."""
    lib.obeys(kernel, A, att.padding_allow([S - 2, S - 4], S), "padded keys")


@exercise.check("padding", points=2)
def padded_key_values_do_not_matter(kernel):
    """Changing the keys and values at padded positions leaves y unchanged."""
    lib.padded_key_values_do_not_matter(kernel, A, [S - 1, S - 3])


@exercise.check("padding", points=2)
def per_sample_mask_broadcasts_over_heads(kernel):
    """A different [N, L, S] mask per sample, with N == H: every head obeys its sample's."""
    lib.per_sample_mask_broadcasts_over_heads(kernel, A, causal=True)


@exercise.check("padding", points=2)
def integer_mask_works_like_bool(kernel):
    """An int64 0/1 [N, L, S] mask (1 = masked) blocks the same keys as the bool mask."""
    allow = att.padding_allow([S - 3, S - 1], S)
    lib.obeys(kernel, A, allow.long(), "keys masked by an int 0/1 mask")
    lib.mask_dtypes_agree(kernel, A, allow)


@exercise.check("padding", points=2)
def masked_weights_are_the_unmasked_ones_renormalised(kernel):
    """Under a random [N, L, S] mask, each query's weights are its unmasked weights on the
    allowed keys, renormalised, in every head."""
    allow = att.random_allow(H, 1, L, S, seed=7)
    lib.masked_weights_renormalise(kernel, A, allow, "a random [N, L, S] mask")


@exercise.check("padding")
def inputs_and_mask_left_unchanged(kernel):
    """With a bool [N, L, S] mask, the function modifies neither its inputs nor the mask."""
    lib.inputs_left_unchanged(kernel, A, att.padding_allow([S - 2, S - 3], S))


def shared_by_every_sample(kernel, allow: torch.Tensor, what: str, cross: bool = True) -> None:
    """An [L, S] mask (canonical form) acts on each sample as that sample's own [1, L, S] mask:
    y for the batch equals y for each sample alone. Both are the function's answers, so this
    compares the [L, S] form with the [N, L, S] one, whatever the masking itself does."""
    call, inputs = A.build(kernel), A.inputs(cross=cross)
    y, _ = A.forward(call, inputs, allow)
    for n in range(N):
        alone = tuple(t[n : n + 1] for t in inputs)
        target, args, kwargs = A.request(call, alone, allow)
        want = checks.tensor(target(*args[:5], args[5][None], **kwargs), "output y", y[:1].shape)
        checks.same(y[n : n + 1], want, f"y[{n}] with {what} vs sample {n} alone, as [1, L, S]")


@exercise.check("causal", points=2)
def causal_mask_is_every_sample_s_mask(kernel):
    """A bool [L, L] causal mask (True = masked) acts on every sample as its own [1, L, L] mask."""
    shared_by_every_sample(kernel, att.causal_allow(L), "an [L, L] causal mask", cross=False)


@exercise.check("causal", points=2)
def rectangular_mask_is_every_sample_s_mask(kernel):
    """An [L, S] bool mask with S != L (cross-attention) acts as every sample's own [1, L, S] mask."""
    shared_by_every_sample(kernel, att.random_allow(L, S, seed=3), "an [L, S] mask")


@exercise.check("causal", points=2)
def float_01_mask_is_the_bool_mask(kernel):
    """The original float mask, triu(ones) with 1 = masked, gives the bool mask's y: it is not
    added to the scores."""
    allow, call, inputs = att.causal_allow(L), A.build(kernel), A.inputs(cross=False)
    (y, _), (y2, _) = A.forward(call, inputs, allow), A.forward(call, inputs, allow.float())
    checks.same(y2, y, "output y with a float 0/1 [L, L] mask vs the same bool mask")


@exercise.check("finite")
def zero_inputs_are_finite(kernel):
    """All-zero q, k and v give finite y."""
    lib.zero_input_is_finite(kernel, A)


@exercise.check("finite")
def huge_inputs_are_finite(kernel):
    """Inputs of magnitude ~1e4 give finite y."""
    lib.large_input_is_finite(kernel, A)


@exercise.check("finite", points=2)
def fully_masked_query_is_finite_and_isolated(kernel):
    """A fully masked query gives finite y and leaves the other queries' outputs unchanged."""
    call, inputs = A.build(kernel), A.inputs(seed=11)
    open_allow = att.random_allow(N, 1, L, S, seed=4)
    allow = open_allow.clone()
    allow[0, 0, 1] = False
    y, _ = A.forward(call, inputs, allow)
    checks.finite(y, "output y with a fully masked query (sample 0, query 1)")
    want = A.forward(call, inputs, open_allow)[0].clone()
    want[0, 1] = y[0, 1]  # only the masked query may change
    checks.same(y, want, "the other queries' y when query 1 of sample 0 is fully masked")


@exercise.check("finite")
def fully_masked_rows_in_a_2d_mask_are_finite(kernel):
    """An [L, S] mask whose first row masks every key gives finite y for every sample."""
    allow = att.random_allow(L, S, seed=5)
    allow[0] = False
    lib.fully_blocked_rows(kernel, A, allow)


@exercise.check("finite")
def fully_masked_sample_is_finite(kernel):
    """A sample whose every key is masked ([N, L, S] mask) gives finite y."""
    lib.fully_blocked_rows(kernel, A, att.padding_allow([S, 0], S), what="a fully masked sample")


@exercise.check("parity", points=2, hidden=False)
def seed_case_without_mask(kernel):
    """The original case (N=3, L=4, d_model=8, 2 heads, rand inputs, seed 42), no mask."""
    seed_parity(kernel, None, "no mask")


@exercise.check("parity", points=2)
def parity_in_self_attention(kernel):
    """q = k = v, random biases, float64."""
    lib.parity(kernel, A, cross=False)


@exercise.check("parity", points=2)
def parity_in_cross_attention(kernel):
    """Cross-attention with S != L, random biases, float64."""
    lib.parity(kernel, A)


@exercise.check("parity")
def parity_with_uniform_attention(kernel):
    """With w_q = 0 and b_q = 0 every query weighs the keys alike: the value and output
    projections alone decide y (whatever the scores' scale or head split)."""
    w = projections(70, dtype=att.F64)
    w["in_proj_weight"][:E] = 0
    w["in_proj_bias"][:E] = 0
    call, (q, k, v) = SimpleNamespace(fn=kernel.get(FUNCTION), weights=w), A.inputs(dtype=att.F64)
    y, _ = A.forward(call, (q, k, v))
    what = "output y vs nn.MultiheadAttention with w_q = 0 (uniform attention)"
    checks.close(y, reference(q, k, v, None, w), what)


@exercise.check("parity")
def parity_without_biases(kernel):
    """in_proj_bias and out_proj_bias None (the default)."""
    lib.parity(kernel, A, bias=False)


@exercise.check("parity", points=2)
def parity_at_larger_sizes(kernel):
    """N=4, L=9, S=11, E=64, 4 heads."""
    lib.parity(kernel, BIG)


@exercise.check("parity")
def parity_in_float32(kernel):
    """float32 at assert_close's default tolerance."""
    lib.parity(kernel, A, dtype=att.F32)


@exercise.check("gradients", points=2)
def gradients_reach_q_k_and_v(kernel):
    """Backprop from y gives finite, non-zero gradients for q, k and v."""
    lib.gradients_reach(kernel, A)


@exercise.check("gradients", points=2)
def input_gradients_match_oracle(kernel):
    """d(sum(y * r))/d(q, k, v) match nn.MultiheadAttention's in float64."""
    lib.input_gradients_match_oracle(kernel, A, cross=True)


@exercise.check("gradients")
def gradients_finite_with_fully_masked_query(kernel):
    """With one query fully masked, the gradients of q, k and v stay finite."""
    allow = att.random_allow(N, 1, L, S, seed=15)
    allow[1, 0, 2] = False
    lib.finite_gradients(kernel, A, allow, "with a fully masked query", seed=11)


@exercise.check("from scratch", points=2)
def no_builtin_attention_in_source(kernel):
    """The notebook's code does not name torch's attention built-ins."""
    lib.no_builtin_attention_in_source(kernel, exercise, A)


@exercise.check("from scratch", points=2)
def no_builtin_attention_at_run_time(kernel):
    """No attention built-in is called while the suite runs."""
    lib.no_builtin_attention_at_run_time(kernel, exercise, A)
