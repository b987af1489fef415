"""Hidden suite for `flash_attention`: the FlashAttention forward on the CPU, an online
softmax over key tiles that returns the output and the log-sum-exp (EXERCISES_NEXT.md §3.8).

Pinned conventions (the notebook states them): q [B, H, T, D], k [B, H, S, D],
v [B, H, S, Dv]; scores = scale * q @ k^T with scale = 1/sqrt(D) by default; causal is
bottom-right (query i sees key j <= i + S - T); key_padding_mask [B, S], True = padded; a
query that sees no key gets out 0 and lse -inf. References are a naive float64 attention
computed here, in the grader's process.

One bug, one place: the tests after "many tiles" run at the default blocks (one tile at
these lengths) unless they are about the tiles (`causal_across_tiles`, and the running max
and sum of "memory and stability", at block sizes that divide S); the masking tests compare
out (and the exact -inf of a query that sees no key), the log-sum-exp's values being their
own level's; dtypes are compared in `returns_out_and_lse` alone.
"""

import dataclasses
import math

import torch

from grader.exercises import _attention as att
from grader.suite import checks
from grader.suite import library as lib
from grader.suite.exercise import Exercise

SOFTMAX, TILED = "online_softmax", "tiled_attention"
# torch's softmax family also counts as the built-in: it is the online softmax's answer
SOFTMAX_FAMILY = ("softmax", "log_softmax", "logsumexp")
WATCH = dataclasses.replace(
    att.ATTENTION,
    what="attention or softmax",
    functions=(*att.ATTENTION.functions, *SOFTMAX_FAMILY),
    ops=(*att.ATTENTION.ops, "_softmax", "logsumexp"),
)

exercise = Exercise(
    id="flash_attention",
    tags=("attention", "efficiency", "numerics"),
    minutes=50,
    title="Tiled attention with an online softmax (FlashAttention forward), from scratch",
    seed="-",
    levels=[
        "online softmax",
        "one tile",
        "many tiles",
        "log-sum-exp",
        "causal",
        "padding",
        "memory and stability",
        "from scratch",
    ],
    defines=(SOFTMAX, TILED),
    forbidden=(*att.FORBIDDEN, "flex_attention", *SOFTMAX_FAMILY),
    watch=WATCH,
)

B, H, T, S, D, DV = 2, 3, 40, 37, 8, 5  # T != S, D != Dv, B != H; blocks of 16 leave remainders
F64 = torch.float64
INF = float("inf")


def qkv(b=B, t=T, s=S, *, seed=1, scale=1.0, dtype=F64):
    """Seeded q [b, H, t, D], k [b, H, s, D], v [b, H, s, Dv]."""
    return (
        lib.randn(b, H, t, D, seed=seed, scale=scale, dtype=dtype),
        lib.randn(b, H, s, D, seed=seed + 1, scale=scale, dtype=dtype),
        lib.randn(b, H, s, DV, seed=seed + 2, dtype=dtype),
    )


def naive(q, k, v, *, is_causal=False, key_padding_mask=None, scale=None, **blocks):
    """The reference, in float64: (out, lse); a query that sees no key gets 0 and -inf
    (`blocks`, the tile sizes, change nothing)."""
    q, k, v = q.double(), k.double(), v.double()
    t, s = q.shape[-2], k.shape[-2]
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    allow = torch.ones(t, s, dtype=torch.bool)
    if is_causal:
        allow = allow.tril(s - t)  # bottom-right: key j <= i + (s - t)
    allow = allow[None, None]
    if key_padding_mask is not None:
        allow = allow & ~key_padding_mask[:, None, None, :]
    scores = (q @ k.transpose(-2, -1) * scale).masked_fill(~allow, -INF)
    lse = torch.logsumexp(scores, dim=-1)
    weights = torch.exp(scores - lse[..., None]).masked_fill(~allow, 0.0)
    return weights @ v, lse


def label(t=T, s=S, **options):
    """How messages name a call: tiled_attention(q, k, v, <options>) at these lengths."""
    order = [name for name in options if name != "scale"] + ["scale"] * ("scale" in options)
    shown = "".join(f", {name}={options[name]}" for name in order)
    return f"{TILED}(q, k, v{shown}) at T={t}, S={s}"


def unpack(answer, what, q, v, *, dtype=False):
    """(out, lse) from an answer, their shapes checked against q and v (and their dtype, q's,
    when `dtype`: only the dtype tests ask, so a dtype bug loses points there alone)."""
    if not isinstance(answer, (tuple, list)) or len(answer) != 2:
        raise checks.Interface(f"{what}: got {checks.describe(answer)}, want a pair (out, lse)")
    out = checks.tensor(answer[0], f"{what}: out", (*q.shape[:-1], v.shape[-1]))
    lse = checks.tensor(answer[1], f"{what}: lse", q.shape[:-1])
    for name, got in (("out", out), ("lse", lse)) if dtype else ():
        if got.dtype != q.dtype:
            raise checks.Failed(f"{what}: {name} has dtype {got.dtype}, want q's, {q.dtype}")
    return out, lse


def compare(answer, inputs, what, *, lse=True, **options):
    """The answer for `inputs` (q, k, v) called with `options` matches the reference: out
    (rows that see no key: 0), and lse where `lse` is True. With `lse` "unseen", only the
    lse of the queries that see no key is compared (exactly -inf): a masking test leaves
    the log-sum-exp's values to its own level."""
    q, _, v = inputs
    out, got_lse = unpack(answer, what, q, v)
    want_out, want_lse = naive(*inputs, **options)
    checks.close(out, want_out, f"{what}: out")
    if not lse:
        return
    seen = torch.isfinite(want_lse)
    if lse != "unseen":
        checks.close(got_lse, want_lse, f"{what}: lse", where=seen)
    if not bool(seen.all()):
        # compared by position: where a query sees some key, the reference stands in
        kept = torch.where(seen, want_lse, got_lse.detach().to(want_lse.dtype))
        checks.equal(kept, want_lse, f"{what}: lse of queries that see no key (want -inf)")


def call(kernel, inputs, **options):
    """tiled_attention(*inputs, **options) in the kernel."""
    return kernel.get(TILED)(*inputs, **options)


def sweep(kernel, cases, *, lse=True):
    """Each (inputs, options) in `cases` in one round trip, each compared with the reference."""
    answers = kernel.many(kernel.get(TILED), [(inputs, options) for inputs, options in cases])
    for answer, (inputs, options) in zip(answers, cases, strict=True):
        t, s = inputs[0].shape[-2], inputs[1].shape[-2]
        compare(answer, inputs, label(t, s, **options), lse=lse, **options)


# ---------------------------------------------------------------- online softmax


@exercise.check("online softmax", hidden=False)
def online_softmax_gives_probabilities(kernel):
    """online_softmax(x, 16) over [3, 40]: same shape and dtype, rows of probabilities."""
    x = lib.randn(3, 40, seed=1, dtype=F64)
    got = checks.tensor(kernel.get(SOFTMAX)(x, 16), f"{SOFTMAX}(x, 16)", x.shape)
    if got.dtype != x.dtype:
        raise checks.Failed(f"{SOFTMAX}(x, 16) has dtype {got.dtype}, want x's, {x.dtype}")
    checks.rows_sum_to_one(got, f"{SOFTMAX}(x, 16)")


@exercise.check("online softmax", points=2)
def online_softmax_matches_softmax_for_any_block(kernel):
    """Blocks 1, 3, 7, 16, 40 and 100 over N = 40 (and a 1-D x) equal the softmax."""
    x = lib.randn(2, 3, 40, seed=2, dtype=F64)
    cases: list[tuple[tuple, dict]] = [((x, block), {}) for block in (1, 3, 7, 16, 40, 100)]
    cases.append(((x[0, 0], 6), {}))
    answers = kernel.many(kernel.get(SOFTMAX), cases)
    for answer, ((data, block), _) in zip(answers, cases, strict=True):
        checks.close(
            answer,
            torch.softmax(data, dim=-1),
            f"{SOFTMAX}(x of shape {list(data.shape)}, {block}) vs the softmax",
        )


@exercise.check("online softmax")
def online_softmax_of_large_inputs(kernel):
    """Inputs of magnitude ~1e3 (blocks of 8) give the exact softmax: no overflow."""
    x = lib.randn(4, 40, seed=3, scale=1e3, dtype=F64)
    got = kernel.get(SOFTMAX)(x, 8)
    checks.close(got, torch.softmax(x, dim=-1), f"{SOFTMAX}(1e3 * x, 8) vs the softmax")


@exercise.check("online softmax")
def online_softmax_leaves_x_unchanged(kernel):
    """online_softmax(x, 8) does not modify x in place."""
    x = lib.randn(3, 20, seed=4, dtype=F64)
    held = kernel.hold(x.clone(), "x")
    kernel.get(SOFTMAX)(held, 8)
    checks.equal(kernel.attribute(held, "data"), x, f"x after {SOFTMAX}(x, 8)")


# ---------------------------------------------------------------- one tile
# Every test from here on runs at the default blocks (64: one tile at these lengths) unless
# it is about the tiles, and compares out's values alone: dtypes are compared in
# `returns_out_and_lse`, the log-sum-exp on its own level.


@exercise.check("one tile", hidden=False)
def returns_out_and_lse(kernel):
    """One tile (default blocks), T=9, S=11: out [B, H, T, Dv] and lse [B, H, T], q's dtype."""
    for dtype in (torch.float32, F64):
        inputs = qkv(t=9, s=11, seed=4, dtype=dtype)
        what = f"{TILED}(q, k, v) with {dtype} inputs"
        unpack(call(kernel, inputs), what, *inputs[::2], dtype=True)


@exercise.check("one tile", points=2)
def one_tile_matches_naive(kernel):
    """Blocks larger than T and S (one tile): out equals naive softmax attention."""
    inputs = qkv(t=9, s=11, seed=5)
    compare(call(kernel, inputs), inputs, label(9, 11), lse=False)


@exercise.check("one tile")
def explicit_scale(kernel):
    """scale=0.3 replaces 1/sqrt(D)."""
    inputs = qkv(t=9, s=11, seed=6)
    compare(call(kernel, inputs, scale=0.3), inputs, label(9, 11, scale=0.3), lse=False, scale=0.3)


@exercise.check("one tile")
def zero_scale_is_not_the_default(kernel):
    """scale=0.0 is a scale, not "use the default": every score is 0, out is the mean of v."""
    inputs = qkv(t=9, s=11, seed=39)
    compare(call(kernel, inputs, scale=0.0), inputs, label(9, 11, scale=0.0), lse=False, scale=0.0)


@exercise.check("one tile")
def values_as_wide_as_keys(kernel):
    """The usual case Dv = D = 8, one tile: out equals naive softmax attention."""
    q, k, _ = qkv(t=9, s=11, seed=34)
    inputs = (q, k, lib.randn(B, H, 11, D, seed=35, dtype=F64))
    compare(call(kernel, inputs), inputs, label(9, 11) + " with Dv = D", lse=False)


@exercise.check("one tile")
def one_tile_in_float32(kernel):
    """float32 inputs, one tile: out within float32's tolerance of the float64 reference."""
    inputs = qkv(t=9, s=11, seed=7, dtype=torch.float32)
    compare(call(kernel, inputs), inputs, label(9, 11) + " in float32", lse=False)


@exercise.check("one tile")
def float64_scores_keep_their_precision(kernel):
    """float64 scores of about 3e4 that differ by ~1 (a feature of q and k at 300): out at
    float64's tolerance, which scores rounded to float32 (off by ~2e-3) miss."""
    q, k, v = qkv(seed=45)
    q[..., 0], k[..., 0] = 300.0, 300.0
    what = label() + " with scores near 3e4"
    compare(call(kernel, (q, k, v)), (q, k, v), what, lse=False)


def inputs_unchanged(kernel, what, inputs, **options):
    """tiled_attention(q, k, v, **options) on tensors held in the kernel leaves q, k, v (and
    the mask, where one is given) as they were. With options, as the call without them
    leaves them: a change the plain call makes too is that test's (one bug, one place)."""
    names = ("q", "k", "v")
    held = [kernel.hold(t.clone(), name) for name, t in zip(names, inputs, strict=True)]
    given = dict(options)
    if (mask := given.get("key_padding_mask")) is not None:
        given["key_padding_mask"] = held_mask = kernel.hold(mask.clone(), "key_padding_mask")
    wants = list(inputs)
    if options:
        plain = [kernel.hold(t.clone(), name) for name, t in zip(names, inputs, strict=True)]
        call(kernel, tuple(plain))
        wants = [kernel.attribute(remote, "data") for remote in plain]
    call(kernel, tuple(held), **given)
    originals = list(zip(names, inputs, wants, held, strict=True))
    if mask is not None:
        originals.append(("key_padding_mask", mask, mask, held_mask))
    for name, original, want, remote in originals:
        want = checks.tensor(want, f"{name} after {label()}", original.shape, floating=False)
        also = "" if torch.equal(want, original) else f", vs {name} as {label()} leaves it"
        checks.equal(kernel.attribute(remote, "data"), want, f"{name} after {what}{also}")


@exercise.check("one tile")
def leaves_its_inputs_unchanged(kernel):
    """tiled_attention(q, k, v) does not modify q, k or v in place."""
    inputs_unchanged(kernel, label(), qkv(seed=42))


# ---------------------------------------------------------------- many tiles


@exercise.check("many tiles", points=2, hidden=False)
def many_tiles_match_naive(kernel):
    """T=40, S=37 in blocks of 16: three query and three key tiles, the last ones short."""
    inputs, options = qkv(seed=8), {"block_q": 16, "block_k": 16}
    compare(call(kernel, inputs, **options), inputs, label(**options), lse=False)


@exercise.check("many tiles", points=2)
def any_block_sizes(kernel):
    """T=13, S=11 with blocks (1, 1), (1, 11), (13, 1), (4, 3), (5, 16), (16, 5), (64, 64)."""
    inputs = qkv(t=13, s=11, seed=9)
    blocks = [(1, 1), (1, 11), (13, 1), (4, 3), (5, 16), (16, 5), (64, 64)]
    sweep(kernel, [(inputs, {"block_q": bq, "block_k": bk}) for bq, bk in blocks], lse=False)


@exercise.check("many tiles")
def constant_values_give_constant_output(kernel):
    """v = 1 everywhere, blocks of 16: every out entry is 1 (the weights of a row sum to 1)."""
    q, k, v = qkv(seed=36)
    inputs, options = (q, k, torch.ones_like(v)), {"block_q": 16, "block_k": 16}
    compare(call(kernel, inputs, **options), inputs, label(**options) + " with v = 1", lse=False)


# ---------------------------------------------------------------- log-sum-exp
# One tile (the default blocks): the log-sum-exp across tiles is checked with the large
# scores of "memory and stability".


@exercise.check("log-sum-exp", points=2)
def lse_matches_logsumexp(kernel):
    """lse = logsumexp of the scaled scores (default scale and blocks, T=40, S=37)."""
    inputs = qkv(seed=10)
    compare(call(kernel, inputs), inputs, label())


@exercise.check("log-sum-exp")
def lse_of_short_rows(kernel):
    """T=9, S=11, Dv = D: lse = logsumexp of the scaled scores."""
    q, k, _ = qkv(t=9, s=11, seed=11)
    inputs = (q, k, lib.randn(B, H, 11, D, seed=37, dtype=F64))
    compare(call(kernel, inputs), inputs, label(9, 11) + " with Dv = D")


@exercise.check("log-sum-exp")
def lse_of_one_zero_score_is_zero(kernel):
    """S = 1 and k = 0: the one score is 0, so lse is exactly log(exp(0)) = 0."""
    q, k, v = qkv(t=5, s=1, seed=46)
    inputs = (q, torch.zeros_like(k), v)
    compare(call(kernel, inputs), inputs, label(5, 1) + " with k = 0")


@exercise.check("log-sum-exp")
def lse_of_one_key_is_its_score(kernel):
    """S = 1: lse is the single scaled score itself (log of a sum of one exp)."""
    inputs = qkv(t=5, s=1, seed=12)
    compare(call(kernel, inputs), inputs, label(5, 1))


# ---------------------------------------------------------------- causal
# out only (and the exact -inf of a query that sees no key): lse has its own level.


def causal_case(kernel, t, s, seed, **blocks):
    inputs = qkv(t=t, s=s, seed=seed)
    options = {"is_causal": True, **blocks}
    compare(call(kernel, inputs, **options), inputs, label(t, s, **options), lse=False, **options)


@exercise.check("causal", points=2, hidden=False)
def causal_square(kernel):
    """is_causal with T = S = 40 (one tile): the lower triangle."""
    causal_case(kernel, 40, 40, seed=13)


@exercise.check("causal", points=2)
def causal_is_bottom_right(kernel):
    """T=12 < S=37 and T=1: query i sees keys j <= i + S - T (one tile)."""
    for t, seed in ((12, 16), (1, 17)):
        causal_case(kernel, t, S, seed=seed)


@exercise.check("causal", points=2)
def causal_across_tiles(kernel):
    """Integration: causal with many query and key tiles (blocks of 8), T = S = 40: row and
    key numbers are global, not within the tile."""
    causal_case(kernel, 40, 40, seed=14, block_q=8, block_k=8)


@exercise.check("causal")
def causal_across_key_tiles(kernel):
    """Integration: causal with one query tile and many key tiles (blocks of 8), T=8 < S=40:
    key numbers are global, not within the tile."""
    causal_case(kernel, 8, 40, seed=15, block_q=8, block_k=8)


@exercise.check("causal")
def future_keys_do_not_matter(kernel):
    """Causal, T = S: out[:, :, :21] does not move when keys and values after 20 change."""
    q, k, v = qkv(t=T, s=T, seed=18)
    options = {"is_causal": True}
    first = unpack(call(kernel, (q, k, v), **options), label(T, T, **options), q, v)[0]
    k2, v2 = k.clone(), v.clone()
    k2[:, :, 21:] += lib.randn(B, H, T - 21, D, seed=19, scale=3.0, dtype=F64)
    v2[:, :, 21:] += lib.randn(B, H, T - 21, DV, seed=20, scale=3.0, dtype=F64)
    what = label(T, T, **options) + " after changing keys and values after 20"
    second = unpack(call(kernel, (q, k2, v2), **options), what, q, v)[0]
    checks.same(second[:, :, :21], first[:, :, :21], f"{what}: out[:, :, :21]")
    checks.differ(second[:, :, 21:], first[:, :, 21:], f"{what}: out[:, :, 21:] (must move)")


@exercise.check("causal")
def causal_leaves_its_inputs_unchanged(kernel):
    """tiled_attention(q, k, v, is_causal=True) does not modify q, k or v in place."""
    inputs_unchanged(kernel, label(is_causal=True), qkv(seed=43), is_causal=True)


# ---------------------------------------------------------------- padding
# One tile, out only (and the exact -inf of a query that sees no key), as for causal.


P = 3  # B == H in the padding checks: a mask broadcast over heads instead of batch fails


def padding(*pads, s=S):
    """[P, s] bool, True = padded: each sample's padded key ranges, as (start, stop) pairs."""
    mask = torch.zeros(P, s, dtype=torch.bool)
    for sample, ranges in enumerate(pads):
        for start, stop in ranges:
            mask[sample, start:stop] = True
    return mask


def padded_case(kernel, mask, *, t=T, seed, lse="unseen", **options):
    s = mask.shape[-1]
    inputs = qkv(b=P, t=t, s=s, seed=seed)
    options = {"key_padding_mask": mask, **options}
    shown = {k: v for k, v in options.items() if k != "key_padding_mask"}
    what = label(t, s, **shown) + " with key_padding_mask"
    compare(call(kernel, inputs, **options), inputs, what, lse=lse, **options)


@exercise.check("padding", points=2, hidden=False)
def padded_keys_are_ignored(kernel):
    """Right padding (True = pad), lengths 37, 30, 21."""
    padded_case(kernel, padding([], [(30, S)], [(21, S)]), seed=21)


@exercise.check("padding")
def padding_shared_by_every_sample(kernel):
    """The same padding (the last 7 keys) in every sample."""
    padded_case(kernel, padding([(30, S)], [(30, S)], [(30, S)]), seed=38)


@exercise.check("padding", points=2)
def left_and_middle_padding(kernel):
    """Left padding of 20 and 16 keys, and a padded run in the middle of a sample."""
    padded_case(kernel, padding([(0, 20)], [(0, 16)], [(5, 9)]), seed=22)


@exercise.check("padding", points=2)
def queries_that_see_no_key(kernel):
    """A sample with every key padded: out 0 and lse -inf there, never NaN."""
    padded_case(kernel, padding([(0, 4)], [(0, S)], []), seed=23)


@exercise.check("padding")
def padding_and_causal_together(kernel):
    """Integration: causal (T = 40 and T = 50 > S = 37) with padding: a key is seen only if
    both allow it; the first T - S queries of T = 50 see no key (out 0, lse -inf)."""
    padded_case(kernel, padding([(0, 20)], [(0, 3)], [(30, S)]), seed=25, is_causal=True)
    padded_case(kernel, padding([], [(30, S)], []), t=50, seed=24, is_causal=True)


@exercise.check("padding")
def padded_key_values_do_not_matter(kernel):
    """Changing the keys and values at padded positions leaves out unchanged."""
    q, k, v = qkv(b=P, seed=26)
    mask = padding([(0, 5)], [(20, S)], [(3, 8), (30, S)])
    options = {"key_padding_mask": mask}
    what = label() + " with key_padding_mask"
    first = unpack(call(kernel, (q, k, v), **options), what, q, v)
    k2 = k + 5.0 * mask[:, None, :, None] * lib.randn(P, H, S, D, seed=27, dtype=F64)
    v2 = v + 5.0 * mask[:, None, :, None] * lib.randn(P, H, S, DV, seed=28, dtype=F64)
    second = unpack(call(kernel, (q, k2, v2), **options), what, q, v)
    checks.same(second[0], first[0], f"{what}: out after changing padded keys and values")


@exercise.check("padding")
def padding_leaves_its_inputs_unchanged(kernel):
    """tiled_attention(q, k, v, key_padding_mask=mask) modifies neither q, k, v nor the mask."""
    mask = padding([(0, 5)], [(20, S)], [(3, 8), (30, S)])
    what = label() + " with key_padding_mask"
    inputs_unchanged(kernel, what, qkv(b=P, seed=44), key_padding_mask=mask)


# ---------------------------------------------------------------- memory and stability

MEMORY_T, MEMORY_D, MEMORY_BLOCKS = 1024, 16, {"block_q": 256, "block_k": 64}
MEMORY_BOUND = MEMORY_T * MEMORY_T  # bytes: a quarter of the T x S float32 scores (1 MiB)
# The tests across tiles use blocks of 8 over S = 40 keys: equal sizes that divide S, so
# each is about the running max and sum, not about the tiles' bookkeeping ("many tiles").
TILES, S_TILED = {"block_q": 8, "block_k": 8}, 40


@exercise.check("memory and stability", points=3)
def scores_are_never_materialised(kernel):
    """T = S = 1024, float32, blocks (256, 64): one call's peak allocation is below 1 MiB.

    D = Dv = 16, no mask. The 1024 x 1024 float32 scores alone are 4 MiB, a 256 x 1024 strip
    of them 1 MiB; the reference solution peaks at about 0.35 MiB (its outputs included)."""
    inputs = tuple(
        lib.randn(1, 1, MEMORY_T, MEMORY_D, seed=30 + i, dtype=torch.float32) for i in range(3)
    )
    measured = kernel.profile(kernel.get(TILED), inputs, MEMORY_BLOCKS, repeat=1, warmup=0)
    peak = measured["peak_bytes"]
    if peak >= MEMORY_BOUND:
        scores = MEMORY_T * MEMORY_T * 4
        raise checks.Failed(
            f"{label(MEMORY_T, MEMORY_T, **MEMORY_BLOCKS)} in float32 allocates "
            f"{peak / 2**20:.2f} MiB at its peak, want < {MEMORY_BOUND / 2**20:.0f} MiB (the "
            f"{MEMORY_T} x {MEMORY_T} scores are {scores / 2**20:.0f} MiB): loop over key tiles"
        )


@exercise.check("memory and stability", points=2)
def large_scores_stay_exact(kernel):
    """q and k scaled by 30 (scores ~1e3), blocks of 8, float64: out and lse stay exact."""
    inputs = qkv(s=S_TILED, seed=31, scale=30.0)
    what = label(T, S_TILED, **TILES) + " at scale 30"
    compare(call(kernel, inputs, **TILES), inputs, what, **TILES)


@exercise.check("memory and stability", points=2)
def fully_padded_first_tile(kernel):
    """Integration: left padding of 20 and 16 keys over blocks of 8: whole key tiles a row
    sees nothing of, first; no NaN, and out and lse exact.

    Without a guard, exp(-inf - (-inf)) is NaN in the first key tile."""
    mask = padding([(0, 20)], [(0, 16)], [(5, 9)], s=S_TILED)
    padded_case(kernel, mask, seed=22, lse=True, **TILES)


@exercise.check("memory and stability")
def many_tiles_in_float32(kernel):
    """float32, blocks of 8: within float32's tolerance of the float64 reference."""
    inputs = qkv(s=S_TILED, seed=32, dtype=torch.float32)
    what = label(T, S_TILED, **TILES) + " in float32"
    compare(call(kernel, inputs, **TILES), inputs, what, **TILES)


@exercise.check("memory and stability")
def non_contiguous_inputs(kernel):
    """q, k, v in a non-contiguous layout (axes stored in reverse, the last strided)."""
    q, k, v = (lib.noncontiguous(t) for t in qkv(seed=33))
    compare(call(kernel, (q, k, v)), (q, k, v), label() + ", non-contiguous q, k, v")


# ---------------------------------------------------------------- from scratch


@exercise.check("from scratch", points=2)
def no_builtin_attention_or_softmax(kernel):
    """The source names none of torch's attention or softmax built-ins, and none ran."""

    def run():  # the simplest calls: the hidden tests' calls were all watched already
        kernel.get(SOFTMAX)(lib.randn(2, 9, seed=40, dtype=F64), 4)
        call(kernel, qkv(t=9, s=11, seed=41))

    lib.no_builtin(kernel, exercise, run)
