"""Hidden suite for `mha_parity` (seed 001): a function `multi_head_attention` that takes
nn.MultiheadAttention's weights (in_proj [3E, E], out_proj [E, E], optional biases) and must
reproduce the module's output, with a bool or 0/1 mask (True / 1 = masked) of shape [L, S]
or [N, L, S], shared by all heads.

The function returns only y, so the weight-level checks read attention weights through
the output: with identity value and output projections and every value equal to a scalar
(1 on the keys of interest, 0 elsewhere) in all channels, each channel of y is the weight one
head puts on those keys, whatever the head layout (see `weight_on`).

Sizes are chosen so that bugs show: N, H, L, S and head_dim all differ, H >= 2, and one
masked test has N == H so a mask that is not broadcast over heads goes wrong.
"""

from __future__ import annotations

import torch

from grader import checks
from grader.checks import Failed
from grader.exercise import Exercise
from grader.exercises._builtins import ATTENTION
from grader.exercises import _attention as att
from grader.integrity import require_clean_source, require_nothing_seen

exercise = Exercise(
    id="mha_parity",
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
    watch=ATTENTION,
    forbidden=(
        "scaled_dot_product_attention",
        "MultiheadAttention",
        "multi_head_attention_forward",
        "_native_multi_head_attention",
    ),
)

E, H, N, L, S = 24, 3, 2, 5, 7
FUNCTION = "multi_head_attention"


def projections(
    seed: int, e: int = E, bias: bool = True, dtype: torch.dtype = torch.float32
) -> dict[str, torch.Tensor | None]:
    """Random weights in nn.MultiheadAttention's layout; biases random too (zero ones hide bugs)."""
    scale = e**-0.5
    return {
        "in_proj_weight": att.randn(3 * e, e, seed=seed, scale=scale, dtype=dtype),
        "out_proj_weight": att.randn(e, e, seed=seed + 1, scale=scale, dtype=dtype),
        "in_proj_bias": att.randn(3 * e, seed=seed + 2, scale=0.5, dtype=dtype) if bias else None,
        "out_proj_bias": att.randn(e, seed=seed + 3, scale=0.5, dtype=dtype) if bias else None,
    }


def attend(kernel, q, k, v, mask=None, weights=None, heads: int = H) -> torch.Tensor:
    """The candidate's output, checked to be [N, L, E]."""
    e = q.shape[-1]
    weights = projections(seed=100, e=e, dtype=q.dtype) if weights is None else weights
    y = kernel.get(FUNCTION)(q, k, v, heads, e, mask, **weights)
    return checks.tensor(y, "output y", (q.shape[0], q.shape[1], e))


def weight_on(kernel, q, k, keys, mask=None, heads: int = H) -> torch.Tensor:
    """[N, L, E]: the attention weight each query puts on the keys marked in `keys` ([N, S]
    bool), read through the output. Every value is the scalar keys[n, j] in all channels and
    the value and output projections are identities (no biases), so channel c of y is the
    weight head c // Dh puts on the marked keys."""
    n, s, e = k.shape
    v = keys.to(q.dtype)[..., None].expand(n, s, e).contiguous()
    weights = {
        "in_proj_weight": torch.cat(
            [
                att.randn(2 * e, e, seed=31, scale=e**-0.5, dtype=q.dtype),
                torch.eye(e, dtype=q.dtype),
            ]
        ),
        "out_proj_weight": torch.eye(e, dtype=q.dtype),
        "in_proj_bias": None,
        "out_proj_bias": None,
    }
    return attend(kernel, q, k, v, mask, weights, heads)


def total_weight(kernel, q, k, mask=None, heads: int = H) -> torch.Tensor:
    """[N, L, E]: each query's attention weights summed over all keys, per head (want 1)."""
    keys = torch.ones(k.shape[0], k.shape[1], dtype=torch.bool)
    return weight_on(kernel, q, k, keys, mask, heads)


def weight_on_masked(kernel, q, k, mask, heads: int = H) -> torch.Tensor:
    """[N, L, E]: the weight each query puts on the keys its mask row hides (want 0); one
    call per query, since the marked keys differ from query to query."""
    hidden = (mask != 0).expand(k.shape[0], q.shape[1], k.shape[1])
    rows = [weight_on(kernel, q, k, hidden[:, i], mask, heads)[:, i] for i in range(q.shape[1])]
    return torch.stack(rows, dim=1)


def sums_to_one(total: torch.Tensor, what: str) -> None:
    """Every entry of `total_weight`'s answer is 1 (non-negative weights summing to 1)."""
    checks.rows_sum_to_one(total[..., None], what)


def oracle(weights: dict, heads: int = H) -> torch.nn.MultiheadAttention:
    """nn.MultiheadAttention (float64, batch first, eval) holding `weights`."""
    w = {name: None if t is None else t.double() for name, t in weights.items()}
    wq, wk, wv = w["in_proj_weight"].chunk(3)
    bq, bk, bv = (None,) * 3 if w["in_proj_bias"] is None else w["in_proj_bias"].chunk(3)
    out = (w["out_proj_weight"], w["out_proj_bias"])
    return att.oracle(wq.shape[1], heads, (wq, bq), (wk, bk), (wv, bv), out)


def reference(q, k, v, mask, weights, heads: int = H) -> torch.Tensor:
    """nn.MultiheadAttention's y in float64, the mask folded per head (row n*H + h)."""
    y, _ = att.run_oracle(
        oracle(weights, heads), q.double(), k.double(), v.double(), blocked(mask, heads)
    )
    return y


def blocked(mask: torch.Tensor | None, heads: int = H) -> torch.Tensor | None:
    """The exercise's mask (bool or 0/1, [L, S] or [N, L, S]) in nn.MultiheadAttention's form."""
    if mask is None:
        return None
    mask = mask != 0
    return att.fold_heads(mask, heads) if mask.dim() == 3 else mask


def inputs(n=N, length=L, s=S, e=E, seed=11, scale=1.0, dtype=torch.float32):
    """q [n, length, e] and k, v [n, s, e] from three seeds."""
    return (
        att.randn(n, length, e, seed=seed, scale=scale, dtype=dtype),
        att.randn(n, s, e, seed=seed + 1, scale=scale, dtype=dtype),
        att.randn(n, s, e, seed=seed + 2, scale=scale, dtype=dtype),
    )


def padding(lengths: list[int], length: int = L, s: int = S) -> torch.Tensor:
    """[N, L, S] bool, True = masked: keys at or after each sample's length."""
    return (~att.padding_keep(lengths, s))[:, None, :].expand(len(lengths), length, s).clone()


def causal(length: int = L, s: int | None = None) -> torch.Tensor:
    """[L, S] bool, True = masked: keys after the query."""
    return ~att.causal_allow(length, s)


def random_mask(*shape: int, seed: int) -> torch.Tensor:
    """A bool mask, True = masked, that leaves key 0 open in every row (no fully masked rows:
    nn.MultiheadAttention is no oracle for those)."""
    mask = torch.rand(*shape, generator=torch.Generator().manual_seed(seed)) < 0.4
    mask[..., 0] = False
    return mask


# -- 1. shapes -------------------------------------------------------------------------


@exercise.check("shapes", hidden=False)
def self_attention_shape(kernel):
    """q = k = v = x [N, L, E] gives y [N, L, E]."""
    x = att.randn(N, L, E, seed=1)
    attend(kernel, x, x, x)


@exercise.check("shapes", hidden=False)
def cross_attention_shape(kernel):
    """Keys and values of another length S != L, no biases: y is [N, L, E]."""
    q, k, v = inputs()
    attend(kernel, q, k, v, weights=projections(seed=100, bias=False))


@exercise.check("shapes")
def single_query_batch_of_one(kernel):
    """N = 1, L = 1 attending to S = 3 keys."""
    q, k, v = inputs(n=1, length=1, s=3)
    attend(kernel, q, k, v)


@exercise.check("shapes")
def float64_in_float64_out(kernel):
    """float64 inputs and weights give a float64 output."""
    q, k, v = inputs(dtype=torch.float64)
    y = attend(kernel, q, k, v, weights=projections(seed=100, dtype=torch.float64))
    if y.dtype != torch.float64:
        raise Failed(f"output dtype {y.dtype} for float64 inputs, want torch.float64")


# -- 2. normalization -------------------------------------------------------------------


@exercise.check("normalization")
def weights_are_probabilities(kernel):
    """Self-attention weights (read through identity value/output projections) sum to 1
    over the keys, for every query and head."""
    x = att.randn(N, L, E, seed=1)
    sums_to_one(total_weight(kernel, x, x), "weights summed over keys (self-attention)")


@exercise.check("normalization")
def cross_weights_are_probabilities(kernel):
    """Cross-attention weights sum to 1 over the S != L keys, in every head."""
    q, k, _ = inputs()
    sums_to_one(total_weight(kernel, q, k), "weights summed over keys (cross-attention)")


@exercise.check("normalization")
def large_inputs_stay_normalised(kernel):
    """Queries and keys of magnitude ~1e3 (scores ~1e3) still give probabilities: a stable
    softmax."""
    q, k, _ = inputs(scale=1e3)
    sums_to_one(total_weight(kernel, q, k), "weights summed over keys, inputs ~1e3")


# -- 3. padding: [N, L, S] masks, one per sample ---------------------------------------------


def obeys(kernel, q, k, mask, what: str) -> None:
    """Keys hidden by `mask` get ~0 weight in every head, and the rest still sum to 1."""
    checks.small(weight_on_masked(kernel, q, k, mask), f"weight on {what}", 1e-6)
    sums_to_one(total_weight(kernel, q, k, mask), f"weights summed over keys, {what} masked")


@exercise.check("padding", points=2)
def padded_keys_get_no_weight(kernel):
    """A bool [N, L, S] padding mask (True = masked): padded keys get ~0 weight in every head."""
    q, k, _ = inputs()
    obeys(kernel, q, k, padding([S - 2, S - 4]), "padded keys")


@exercise.check("padding", points=2)
def padded_key_values_do_not_matter(kernel):
    """Changing the keys and values at padded positions leaves y unchanged."""
    q, k, v = inputs()
    mask = padding([S - 1, S - 3])
    noise = att.randn(N, S, E, seed=9, scale=10.0) * mask[:, 0, :, None]
    y1 = attend(kernel, q, k, v, mask)
    y2 = attend(kernel, q, k + noise, v - noise, mask)
    checks.same(y2, y1, "y after changing padded keys and values")


@exercise.check("padding", points=2)
def per_sample_mask_broadcasts_over_heads(kernel):
    """A different [N, L, S] padding mask per sample, with N == H: every head obeys its
    sample's mask."""
    q, k, _ = inputs(n=H)
    mask = torch.zeros(H, L, S, dtype=torch.bool)
    mask[0, :, -1:] = True
    mask[1, :, -3:] = True
    mask[2, :, :2] = True
    obeys(kernel, q, k, mask, "keys masked per sample (N == H)")


@exercise.check("padding", points=2)
def integer_mask_works_like_bool(kernel):
    """An int64 0/1 [N, L, S] mask (1 = masked) blocks the same keys as the bool mask."""
    q, k, v = inputs()
    mask = padding([S - 3, S - 1]).long()
    obeys(kernel, q, k, mask, "keys masked by an int 0/1 mask")
    checks.same(
        attend(kernel, q, k, v, mask),
        attend(kernel, q, k, v, mask.bool()),
        "y with an int 0/1 mask vs the bool mask",
    )


# -- 4. causal: [L, S] masks, shared by every sample ---------------------------------------


@exercise.check("causal", points=2)
def future_keys_get_no_weight(kernel):
    """A bool [L, L] causal mask (True = masked): keys after the query get ~0 weight."""
    x = att.randn(N, L, E, seed=1)
    obeys(kernel, x, x, causal(L), "future keys")


@exercise.check("causal", points=2)
def future_tokens_do_not_change_the_past(kernel):
    """With a causal mask, y[:, t] does not change when tokens after t change."""
    t = 2
    x = att.randn(N, L, E, seed=1)
    later = x.clone()
    later[:, t + 1 :] += att.randn(N, L - t - 1, E, seed=9, scale=3.0)
    y1 = attend(kernel, x, x, x, causal(L))
    y2 = attend(kernel, later, later, later, causal(L))
    checks.same(y2[:, : t + 1], y1[:, : t + 1], f"y[:, :{t + 1}] after changing tokens after t={t}")
    checks.differ(y2[:, t + 1 :], y1[:, t + 1 :], "y after t (must react to its own tokens)")


@exercise.check("causal", points=2)
def float_01_mask_blocks(kernel):
    """The original float causal mask, triu(ones) with 1 = masked, blocks future keys (it is
    not added to the scores)."""
    x = att.randn(N, L, E, seed=1)
    obeys(kernel, x, x, torch.triu(torch.ones(L, L), diagonal=1), "keys masked by a float 0/1 mask")


@exercise.check("causal", points=2)
def rectangular_mask_in_cross_attention(kernel):
    """An [L, S] bool mask with S != L: the masked keys get ~0 weight for every sample."""
    q, k, _ = inputs()
    obeys(kernel, q, k, random_mask(L, S, seed=3), "keys masked by an [L, S] mask")


# -- 5. finite --------------------------------------------------------------------------


@exercise.check("finite")
def zero_inputs_are_finite(kernel):
    """All-zero q, k and v give finite y."""
    zeros = torch.zeros(N, L, E)
    checks.finite(attend(kernel, zeros, zeros, zeros), "y for zero inputs")


@exercise.check("finite")
def huge_inputs_are_finite(kernel):
    """Inputs of magnitude ~1e4 give finite y."""
    checks.finite(attend(kernel, *inputs(scale=1e4)), "y for inputs ~1e4")


@exercise.check("finite", points=2)
def fully_masked_query_is_finite_and_isolated(kernel):
    """A query whose keys are all masked ([N, L, S] mask) gives finite y, and the other
    queries' outputs are the same as when it is not masked."""
    q, k, v = inputs()
    open_mask = random_mask(N, L, S, seed=4)
    mask = open_mask.clone()
    mask[0, 1] = True
    y = attend(kernel, q, k, v, mask)
    checks.finite(y, "y with a fully masked query (sample 0, query 1)")
    want = attend(kernel, q, k, v, open_mask).clone()
    want[0, 1] = y[0, 1]  # only the masked query may change
    checks.same(y, want, "the other queries' y when query 1 of sample 0 is fully masked")


@exercise.check("finite")
def fully_masked_rows_in_a_2d_mask_are_finite(kernel):
    """An [L, S] mask whose first row masks every key gives finite y for every sample."""
    mask = random_mask(L, S, seed=5)
    mask[0] = True
    checks.finite(attend(kernel, *inputs(), mask), "y with a fully masked row in an [L, S] mask")


@exercise.check("finite")
def fully_masked_sample_is_finite(kernel):
    """A sample whose every key is masked ([N, L, S] mask) gives finite y."""
    mask = padding([S, S - 2])
    mask[1] = True
    checks.finite(attend(kernel, *inputs(), mask), "y with a fully masked sample")


# -- 6. parity with torch.nn.MultiheadAttention -------------------------------------------


def parity(kernel, q, k, v, mask=None, weights=None, heads=H, what="y"):
    """The candidate's y vs nn.MultiheadAttention's (float64) with the same weights, at
    torch.testing.assert_close's default tolerance for the inputs' dtype."""
    e = q.shape[-1]
    weights = projections(seed=50, e=e, dtype=q.dtype) if weights is None else weights
    y = attend(kernel, q, k, v, mask, weights, heads)
    checks.close(y, reference(q, k, v, mask, weights, heads), f"{what} vs nn.MultiheadAttention")


def seed_case() -> tuple[torch.Tensor, ...]:
    """The original inputs and the self-check's weights: torch.rand with seed 42."""
    g = torch.Generator().manual_seed(42)
    n, length, e = 3, 4, 8
    q, k, v = (torch.rand(n, length, e, generator=g) for _ in range(3))
    weights = {
        "in_proj_weight": torch.randn(3 * e, e, generator=g) * 0.3,
        "in_proj_bias": torch.randn(3 * e, generator=g) * 0.5,
        "out_proj_weight": torch.randn(e, e, generator=g) * 0.3,
        "out_proj_bias": torch.randn(e, generator=g) * 0.5,
    }
    return q, k, v, weights


def seed_parity(kernel, mask: torch.Tensor | None, case: str) -> None:
    """The original case in float64 and in float32, each at assert_close's default tolerance
    (the seed's atol 1e-8, rtol 1e-5 in float32 fails correct code)."""
    q, k, v, weights = seed_case()
    w64 = {name: t.double() for name, t in weights.items()}
    parity(kernel, q.double(), k.double(), v.double(), mask, w64, 2, f"y ({case}, float64)")
    parity(kernel, q, k, v, mask, weights, 2, f"y ({case}, float32)")


@exercise.check("parity", points=2, hidden=False)
def seed_case_without_mask(kernel):
    """The original case (N=3, L=4, d_model=8, 2 heads, rand inputs, seed 42), no mask."""
    seed_parity(kernel, None, "no mask")


@exercise.check("parity", points=2, hidden=False)
def seed_case_with_causal_mask(kernel):
    """The original causal case: a float 0/1 [N, L, L] mask, triu(ones) expanded."""
    seed_parity(kernel, torch.triu(torch.ones(4, 4), diagonal=1).expand(3, 4, 4), "causal")


@exercise.check("parity", points=2, hidden=False)
def seed_case_with_padding_mask(kernel):
    """The original padding case: a bool [N, L, L] mask, different per sample."""
    mask = torch.zeros(3, 4, 4, dtype=torch.bool)
    mask[0, :, 3:] = True
    mask[2, :, 2:] = True
    seed_parity(kernel, mask, "padding")


@exercise.check("parity", points=2)
def parity_in_cross_attention(kernel):
    """Cross-attention with S != L, random biases, float64."""
    parity(kernel, *inputs(dtype=torch.float64))


@exercise.check("parity", points=2)
def parity_with_2d_mask(kernel):
    """An [L, S] bool mask in cross-attention."""
    parity(kernel, *inputs(dtype=torch.float64), random_mask(L, S, seed=6))


@exercise.check("parity", points=2)
def parity_with_per_sample_mask(kernel):
    """An [N, L, S] bool mask, different per sample, with N == H."""
    parity(kernel, *inputs(n=H, dtype=torch.float64), random_mask(H, L, S, seed=7))


@exercise.check("parity")
def parity_with_integer_mask(kernel):
    """An int64 0/1 [N, L, S] mask."""
    parity(kernel, *inputs(dtype=torch.float64), random_mask(N, L, S, seed=8).long())


@exercise.check("parity")
def parity_with_float_mask(kernel):
    """A float 0/1 [L, S] mask (1 = masked, not added to the scores)."""
    parity(kernel, *inputs(dtype=torch.float64), random_mask(L, S, seed=9).double())


@exercise.check("parity")
def parity_without_biases(kernel):
    """in_proj_bias and out_proj_bias None (the default)."""
    q, k, v = inputs(dtype=torch.float64)
    parity(kernel, q, k, v, weights=projections(seed=60, bias=False, dtype=torch.float64))


@exercise.check("parity", points=2)
def parity_at_larger_sizes(kernel):
    """N=4, L=9, S=11, E=64, 4 heads, with an [N, L, S] mask."""
    q, k, v = inputs(n=4, length=9, s=11, e=64, dtype=torch.float64)
    parity(kernel, q, k, v, random_mask(4, 9, 11, seed=10), heads=4)


@exercise.check("parity")
def parity_with_large_inputs(kernel):
    """Inputs of magnitude ~30 (sharp attention) in float64."""
    parity(kernel, *inputs(scale=30.0, dtype=torch.float64), causal(L, S))


@exercise.check("parity")
def parity_with_non_contiguous_inputs(kernel):
    """q, k and v that are transposed views (not contiguous)."""
    q, k, v = (t.transpose(0, 1).contiguous().transpose(0, 1) for t in inputs(dtype=torch.float64))
    parity(kernel, q, k, v, random_mask(L, S, seed=12))


@exercise.check("parity")
def parity_in_float32(kernel):
    """float32 at assert_close's default tolerance (rtol 1.3e-6, atol 1e-5), with an [N, L, S]
    mask."""
    parity(kernel, *inputs(), random_mask(N, L, S, seed=13))


# -- 7. gradients -----------------------------------------------------------------------


def input_gradients(kernel, q, k, v, mask, weights, cotangent) -> list[torch.Tensor]:
    """d(sum(y * cotangent)) / d(q, k, v) from the candidate's function."""
    fn = kernel.get(FUNCTION)
    grads = kernel.grad(
        fn, (q, k, v, H, E, mask), weights, wrt=[0, 1, 2], cotangent=cotangent, params=False
    )
    return [
        checks.tensor(g, f"gradient of {name}", t.shape)
        for g, name, t in zip(grads["inputs"], "qkv", (q, k, v), strict=True)
    ]


@exercise.check("gradients", points=2)
def gradients_reach_q_k_and_v(kernel):
    """Backprop from y gives finite, non-zero gradients for q, k and v."""
    q, k, v = inputs()
    r = att.randn(N, L, E, seed=2)
    grads = input_gradients(kernel, q, k, v, causal(L, S), projections(seed=50), r)
    for g, name in zip(grads, "qkv", strict=True):
        checks.finite(g, f"gradient of {name}")
        if float(g.abs().max()) == 0:
            raise Failed(f"gradient of {name} is zero everywhere")


@exercise.check("gradients", points=2)
def input_gradients_match_oracle(kernel):
    """d(sum(y * r))/d(q, k, v) match nn.MultiheadAttention's in float64 ([N, L, S] mask)."""
    q, k, v = inputs(dtype=torch.float64)
    r = att.randn(N, L, E, seed=2, dtype=torch.float64)
    mask = random_mask(N, L, S, seed=14)
    weights = projections(seed=50, dtype=torch.float64)
    grads = input_gradients(kernel, q, k, v, mask, weights, r)
    leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
    y_ref, _ = oracle(weights)(*leaves, attn_mask=blocked(mask), need_weights=False)
    (y_ref * r).sum().backward()
    for g, leaf, name in zip(grads, leaves, "qkv", strict=True):
        checks.close(g, leaf.grad, f"gradient of {name} vs nn.MultiheadAttention")


@exercise.check("gradients")
def gradients_finite_with_fully_masked_query(kernel):
    """With one query fully masked, the gradients of q, k and v stay finite."""
    q, k, v = inputs()
    mask = random_mask(N, L, S, seed=15)
    mask[1, 2] = True
    r = att.randn(N, L, E, seed=2)
    for g, name in zip(
        input_gradients(kernel, q, k, v, mask, projections(seed=50), r), "qkv", strict=True
    ):
        checks.finite(g, f"gradient of {name} with a fully masked query")


# -- 8. from scratch --------------------------------------------------------------------


@exercise.check("from scratch", points=2)
def no_builtin_attention_in_source(kernel):
    """The notebook's code does not name torch's attention built-ins."""
    attend(kernel, *inputs())
    require_clean_source(kernel.sources, exercise.forbidden, exercise.watch)


@exercise.check("from scratch", points=2)
def no_builtin_attention_at_run_time(kernel):
    """No attention built-in is called while the suite runs."""
    attend(kernel, *inputs(), random_mask(N, L, S, seed=16))
    require_nothing_seen(kernel.seen)
