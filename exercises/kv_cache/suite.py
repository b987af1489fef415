"""Hidden suite for `kv_cache`: incremental decoding with a KV cache.

The candidate writes `causal_mask(t, s)` (bottom-right aligned), a stateful `KVCache`
(update / length / reset) and `CachedSelfAttention.forward(x, cache)` (RoPE, grouped-query
attention). The central property: for any chunk schedule, prefill and decode through the
cache give the rows of the full causal forward. Every value check compares against a float64
reference computed here from the module's own weights: the given half-split RoPE, the heads
repeated with `repeat_interleave`, and SDPA with an explicit lower-triangular mask.

Which level sees which bug: token-by-token decoding never needs a mask (one query sees
every key), a prompt chunk starts from an empty cache (the top-left and bottom-right masks
agree there), so only a chunk of several tokens after cached ones (the schedules [5, 1, 1, 5]
and [3, 4, 5]) shows a mask that is dropped or misaligned once the cache holds tokens.
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F

from grader.core.outcomes import CandidateRaised
from grader.exercises import _attention as att
from grader.suite import checks
from grader.suite import library as lib
from grader.suite.exercise import Exercise

F32, F64 = torch.float32, torch.float64
BIAS = "torch.nn.attention.bias"
exercise = Exercise(
    id="kv_cache",
    title="KV cache: incremental decoding with RoPE and grouped-query attention",
    seed="-",
    levels=[
        "cache mechanics",
        "causal mask",
        "full forward",
        "decode",
        "prefill + decode",
        "chunk schedules",
        "edge cases",
        "from scratch",
    ],
    defines=("causal_mask", "KVCache", "CachedSelfAttention"),
    forbidden=(
        *att.FORBIDDEN,
        "causal_lower_right",
        "causal_upper_left",
        "CausalBias",
        "flex_attention",
    ),  # fmt: skip
    watch=dataclasses.replace(
        att.ATTENTION,
        instrument=(
            *att.ATTENTION.instrument,
            f"{BIAS}:causal_lower_right",
            f"{BIAS}:causal_upper_left",
        ),
    ),
)

# d_model, query heads, key/value heads (two of them, groups of two: `.repeat` and
# `.repeat_interleave` differ), head width, batch, sequence length
E, H, HKV, D, B, T = 32, 4, 2, 8, 2, 12
THETA = 10000.0
OWNER = "CachedSelfAttention"
LAYERS = ["q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight"]
SHAPES = dict(zip(LAYERS, [(H * D, E), (HKV * D, E), (HKV * D, E), (E, H * D)], strict=True))


# --- the reference, in the grader's process ---------------------------------------------


def rope(x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """Half-split RoPE of x [B, H, T, D] at `positions` [T] (the notebook's apply_rope)."""
    d = x.shape[-1]
    angles = positions.to(F64)[:, None] / THETA ** (torch.arange(0, d, 2, dtype=F64) / d)
    cos, sin = torch.cat([angles.cos()] * 2, -1), torch.cat([angles.sin()] * 2, -1)
    return x * cos + torch.cat([-x[..., d // 2 :], x[..., : d // 2]], -1) * sin


def projections(state: dict, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """q [B, H, T, D] and the rotated k, and v [B, HKV, T, D], in float64."""
    b, t, _ = x.shape
    w = {n: state[n].to(F64) for n in LAYERS}
    heads = lambda y, n: y.reshape(b, t, n, D).transpose(1, 2)  # noqa: E731
    pos = torch.arange(t)
    q = rope(heads(x.to(F64) @ w["q_proj.weight"].T, H), pos)
    k = rope(heads(x.to(F64) @ w["k_proj.weight"].T, HKV), pos)
    return q, k, heads(x.to(F64) @ w["v_proj.weight"].T, HKV)


def reference(state: dict, x: torch.Tensor) -> torch.Tensor:
    """The full causal forward of x [B, T, E] in float64."""
    b, t, _ = x.shape
    q, k, v = projections(state, x)
    mask = torch.ones(t, t, dtype=torch.bool).tril()
    y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
    return y.transpose(1, 2).reshape(b, t, E) @ state["o_proj.weight"].to(F64).T


# --- reaching the candidate's objects ------------------------------------------------------


def module(kernel, dtype=F64, weights: bool = True):
    """The candidate's CachedSelfAttention(E, H, HKV) in `dtype`, and its weights (None
    unless asked for: a round trip fewer)."""
    attn = kernel.new(OWNER, E, H, HKV)
    attn.to(dtype)
    return attn, lib.require_state(attn.state_dict(), LAYERS, OWNER, SHAPES) if weights else None


def new_cache(kernel, batch=B, max_len=T, dtype=F64):
    """A candidate KVCache; `dtype=None` leaves the constructor's default."""
    extra = {} if dtype is None else {"dtype": dtype}
    return kernel.new("KVCache", batch, HKV, D, max_len, **extra)


def chunks(x: torch.Tensor, schedule: list[int]) -> list[torch.Tensor]:
    """x [B, T, E] cut along time into consecutive chunks of the schedule's sizes."""
    assert sum(schedule) == x.shape[1], "a schedule must cover the sequence"
    return [c.contiguous() for c in torch.split(x, schedule, dim=1)]


def run(kernel, attn, x, schedule, cache=None, pieces=None):
    """Feed x's chunks through forward(chunk, cache) in order (one round trip); the outputs
    concatenated along time."""
    cache = cache if cache is not None else new_cache(kernel, x.shape[0], x.shape[1], x.dtype)
    pieces = pieces if pieces is not None else chunks(x, schedule)
    outs = kernel.many(attn, [((p, cache), {}) for p in pieces])
    for i, (out, p) in enumerate(zip(outs, pieces, strict=True)):
        checks.tensor(out, f"forward(chunk {i} of {schedule}, cache)", (*p.shape[:2], E))
    return torch.cat(outs, dim=1)


def schedule_matches(kernel, schedule: list[int], dtype=F64) -> None:
    """The chunks of `schedule` through one cache give the full forward's outputs."""
    attn, state = module(kernel, dtype)
    x = lib.randn(B, sum(schedule), E, seed=1, dtype=dtype)
    got = run(kernel, attn, x, schedule)
    checks.close(got, reference(state, x), f"outputs for the chunks {schedule} vs full forward")


def length(kernel, cache, what: str, want: int) -> None:
    """cache.length is the int `want`."""
    checks.data(kernel.attribute(cache, "length"), want, f"KVCache.length {what}")


def kv(answer, what: str, shape) -> tuple[torch.Tensor, torch.Tensor]:
    """update's answer: a pair of tensors of `shape`."""
    k, v = checks.pair(answer, what, ("k", "v"))
    return checks.tensor(k, f"{what} keys", shape), checks.tensor(v, f"{what} values", shape)


def kv_rows(n: int, seed: int, dtype=F64):
    """New keys and values [B, HKV, n, D]."""
    return lib.randn(B, HKV, n, D, seed=seed, dtype=dtype), lib.randn(
        B, HKV, n, D, seed=seed + 50, dtype=dtype
    )


def raised(call) -> CandidateRaised | None:
    """What `call()` raised in the candidate's code (None if it returned); a stub's
    NotImplementedError still ends the test as not implemented."""
    try:
        call()
    except CandidateRaised as error:
        if error.not_implemented:
            raise
        return error
    return None


# --- cache mechanics ----------------------------------------------------------------------


@exercise.check("cache mechanics", points=2, hidden=False)
def update_returns_everything_cached(kernel):
    """Updates of 3, 1 and 4 tokens each return all the keys and values so far, in order."""
    cache = new_cache(kernel, max_len=10)
    ks, vs = [], []
    for i, n in enumerate([3, 1, 4]):
        k, v = kv_rows(n, seed=10 + i)
        ks.append(k)
        vs.append(v)
        what = f"update number {i + 1} ({n} tokens)"
        got_k, got_v = kv(cache.update(k, v), what, (B, HKV, sum(x.shape[2] for x in ks), D))
        checks.equal(got_k, torch.cat(ks, dim=2), f"{what}: keys vs all keys so far")
        checks.equal(got_v, torch.cat(vs, dim=2), f"{what}: values vs all values so far")


@exercise.check("cache mechanics", hidden=False)
def length_counts_tokens(kernel):
    """`length` is an int property: 0 when new, then 3, 4, 8 after updates of 3, 1, 4."""
    cache = new_cache(kernel, max_len=10)
    length(kernel, cache, "of a new cache", 0)
    for i, (n, total) in enumerate([(3, 3), (1, 4), (4, 8)]):
        cache.update(*kv_rows(n, seed=20 + i))
        length(kernel, cache, f"after updates of {[3, 1, 4][: i + 1]} tokens", total)


@exercise.check("cache mechanics")
def cache_keeps_its_dtype(kernel):
    """A cache built with dtype=float64 stores and returns float64 keys and values."""
    cache = new_cache(kernel, max_len=4)
    k, v = kv(cache.update(*kv_rows(2, seed=30)), "update of a float64 cache", (B, HKV, 2, D))
    for name, t in (("keys", k), ("values", v)):
        if t.dtype != F64:
            raise checks.Failed(f"a float64 cache returned {t.dtype} {name}, want float64")


@exercise.check("cache mechanics")
def filling_up_to_max_len_then_overflow_raises(kernel):
    """max_len 5: 3 + 2 tokens fit exactly; one more raises ValueError."""
    cache = new_cache(kernel, max_len=5)
    for i, n in enumerate([3, 2]):
        error = raised(lambda n=n, i=i: cache.update(*kv_rows(n, seed=40 + i)))
        if error is not None:
            raise checks.Failed(
                f"filling a cache of max_len 5 with 3 + 2 tokens raised {error.type}: it fits"
            )
    error = raised(lambda: cache.update(*kv_rows(1, seed=42)))
    if error is None:
        raise checks.Failed("a 6th token in a cache of max_len 5 raised nothing, want ValueError")
    if error.type != "ValueError":
        raise checks.Failed(
            f"a 6th token in a cache of max_len 5 raised {error.type}, want ValueError"
        )


@exercise.check("cache mechanics")
def reset_empties_the_cache(kernel):
    """After reset(), length is 0 and the next update returns only its own rows."""
    cache = new_cache(kernel, max_len=6)
    cache.update(*kv_rows(4, seed=50))
    cache.reset()
    length(kernel, cache, "after reset()", 0)
    k, v = kv_rows(2, seed=51)
    got_k, got_v = kv(cache.update(k, v), "update after reset()", (B, HKV, 2, D))
    checks.equal(got_k, k, "keys returned by the first update after reset()")
    checks.equal(got_v, v, "values returned by the first update after reset()")


# --- the causal mask -----------------------------------------------------------------------


def masks(kernel, sizes: list[tuple[int, int]]) -> list[torch.Tensor]:
    """causal_mask(t, s) for each size, in one round trip; each a bool [t, s]."""
    got = kernel.many(kernel.get("causal_mask"), [((t, s), {}) for t, s in sizes])
    for m, (t, s) in zip(got, sizes, strict=True):
        m = checks.tensor(m, f"causal_mask({t}, {s})", (t, s), floating=False)
        if m.dtype != torch.bool:
            raise checks.Interface(f"causal_mask({t}, {s}) has dtype {m.dtype}, want torch.bool")
    return got


def bottom_right(t: int, s: int) -> torch.Tensor:
    return torch.ones(t, s, dtype=torch.bool).tril(s - t)


@exercise.check("causal mask", hidden=False)
def square_mask_is_lower_triangle(kernel):
    """causal_mask(5, 5): bool, True on and below the diagonal."""
    (got,) = masks(kernel, [(5, 5)])
    checks.equal(got, bottom_right(5, 5), "causal_mask(5, 5)")


@exercise.check("causal mask", points=2)
def chunk_mask_is_bottom_right(kernel):
    """causal_mask(t, s) with t < s: query i sees keys j <= i + s - t (3x7, 1x6, 4x5)."""
    sizes = [(3, 7), (1, 6), (4, 5)]
    for got, (t, s) in zip(masks(kernel, sizes), sizes, strict=True):
        checks.equal(got, bottom_right(t, s), f"causal_mask({t}, {s}) vs bottom-right")


@exercise.check("causal mask")
def mask_never_allows_a_later_key(kernel):
    """No query may attend a key after its own position (5x5, 3x7)."""
    sizes = [(5, 5), (3, 7)]
    for got, (t, s) in zip(masks(kernel, sizes), sizes, strict=True):
        later = got & ~bottom_right(t, s)
        if later.any():
            i, j = (int(n) for n in torch.nonzero(later)[0])
            raise checks.Failed(
                f"causal_mask({t}, {s}) lets query {i} (position {i + s - t}) attend the later "
                f"key {j}: {int(later.sum())} such entries"
            )


# --- the full forward, without a cache ----------------------------------------------------


@exercise.check("full forward", hidden=False)
def forward_shape(kernel):
    """forward(x) with no cache: x [2, 12, 32] in float32 gives [2, 12, 32]."""
    attn = kernel.new(OWNER, E, H, HKV)
    checks.tensor(attn(lib.randn(B, T, E, seed=1)), "forward(x)", (B, T, E))


@exercise.check("full forward", points=2)
def forward_matches_reference(kernel):
    """forward(x) equals causal RoPE + GQA attention with the module's weights (float64)."""
    attn, state = module(kernel)
    x = lib.randn(B, T, E, seed=1, dtype=F64)
    got = checks.tensor(attn(x), "forward(x)", (B, T, E))
    checks.close(got, reference(state, x), "forward(x) without a cache vs the reference")


@exercise.check("full forward")
def forward_is_causal(kernel):
    """Outputs up to t do not change when tokens after t change (t = 5)."""
    attn, _ = module(kernel, weights=False)
    call = lambda y: checks.tensor(attn(y), "forward(x)", (B, T, E))  # noqa: E731
    lib.causal(call, lib.randn(B, T, E, seed=2, dtype=F64), "forward(x)", t=5)


@exercise.check("full forward")
def query_heads_read_their_kv_group(kernel):
    """Query heads 2 and 3 read key/value head 1: with its values zeroed, their outputs are 0."""
    attn, state = module(kernel)
    v = state["v_proj.weight"].clone()
    v[D:] = 0  # key/value head 1
    lib.load_state(attn, OWNER, {"v_proj.weight": v, "o_proj.weight": torch.eye(E, dtype=F64)})
    y = checks.tensor(attn(lib.randn(B, T, E, seed=3, dtype=F64)), "forward(x)", (B, T, E))
    lib.exactly_zero(y[..., 2 * D :], "output of query heads 2, 3 (key/value head 1 zeroed)")
    checks.differ(y[..., : 2 * D], torch.zeros(B, T, 2 * D, dtype=F64),
                  "output of query heads 0, 1 (key/value head 0 kept)")  # fmt: skip


@exercise.check("full forward")
def repeated_token_gives_one_output(kernel):
    """One token repeated 12 times: every position gives the same output (weights sum to 1)."""
    attn, _ = module(kernel, weights=False)
    x = lib.randn(B, 1, E, seed=4, dtype=F64).expand(B, T, E).contiguous()
    y = checks.tensor(attn(x), "forward(x)", (B, T, E))
    checks.same(y, y[:, :1].expand(B, T, E), "outputs of a repeated token vs position 0's")


# --- decode: one token at a time ------------------------------------------------------------


@exercise.check("decode", points=2, hidden=False)
def decode_token_by_token_matches_full(kernel):
    """5 calls of one token each through one cache give the full forward's outputs."""
    schedule_matches(kernel, [1] * 5)


@exercise.check("decode")
def cache_length_after_decode(kernel):
    """After decoding 2 tokens one by one, the cache's length is 2."""
    attn, _ = module(kernel, weights=False)
    cache = new_cache(kernel)
    run(kernel, attn, lib.randn(B, 2, E, seed=1, dtype=F64), [1] * 2, cache)
    length(kernel, cache, "after forward of 2 single tokens", 2)


@exercise.check("decode")
def decoded_token_depends_on_itself(kernel):
    """Decoding 2 tokens: changing the 2nd changes its output, not the first."""
    attn, _ = module(kernel, weights=False)
    x = lib.randn(B, 2, E, seed=5, dtype=F64)
    lib.causal(lambda y: run(kernel, attn, y, [1] * 2), x, "decoded outputs", t=0)


@exercise.check("decode")
def decode_depends_on_token_order(kernel):
    """Decoding [a, b, c] and [b, a, c]: c's output differs (positions matter)."""
    attn, _ = module(kernel, weights=False)
    x = lib.randn(B, 3, E, seed=6, dtype=F64)
    swapped = x[:, [1, 0, 2]]
    first, second = run(kernel, attn, x, [1] * 3), run(kernel, attn, swapped, [1] * 3)
    checks.differ(second[:, 2], first[:, 2], "output of token 3 after swapping tokens 1 and 2")


# --- prefill, then decode ----------------------------------------------------------------------


@exercise.check("prefill + decode", points=2, hidden=False)
def prefill_then_decode_matches_full(kernel):
    """A prompt of 6 tokens, then 2 single tokens, give the full forward's outputs."""
    schedule_matches(kernel, [6, 1, 1])


@exercise.check("prefill + decode")
def cache_length_after_prefill_and_decode(kernel):
    """After a prompt of 3 tokens and a single one, the cache's length is 4."""
    attn, _ = module(kernel, weights=False)
    cache = new_cache(kernel, max_len=8)
    run(kernel, attn, lib.randn(B, 4, E, seed=1, dtype=F64), [3, 1], cache)
    length(kernel, cache, "after a prompt of 3 tokens and a single one", 4)


# --- chunk schedules: several tokens after cached ones -------------------------------------


@exercise.check("chunk schedules", points=2, hidden=False)
def chunks_5_1_1_5_match_full(kernel):
    """Chunks of 5, 1, 1, 5 tokens give the full forward's outputs."""
    schedule_matches(kernel, [5, 1, 1, 5])


@exercise.check("chunk schedules", points=2)
def chunks_3_4_5_match_full(kernel):
    """Chunks of 3, 4, 5 tokens give the full forward's outputs."""
    schedule_matches(kernel, [3, 4, 5])


@exercise.check("chunk schedules")
def later_chunk_is_causal(kernel):
    """Chunks [4, 4]: changing the 2nd chunk's last tokens leaves its first ones unchanged."""
    attn, _ = module(kernel, weights=False)
    x = lib.randn(B, 8, E, seed=7, dtype=F64)
    lib.causal(lambda y: run(kernel, attn, y, [4, 4]), x, "chunked outputs", t=5)


# --- edge cases ---------------------------------------------------------------------------------


@exercise.check("edge cases")
def cache_holds_rotated_keys_and_values(kernel):
    """After a prompt of 11 tokens, the cache holds their RoPE-rotated keys and values (2 heads)."""
    attn, state = module(kernel)
    x = lib.randn(B, T - 1, E, seed=8, dtype=F64)
    cache = new_cache(kernel)
    run(kernel, attn, x, [T - 1], cache)
    k_new, v_new = kv_rows(1, seed=60)
    k, v = kv(cache.update(k_new, v_new), "cache.update after the prompt", (B, HKV, T, D))
    _, want_k, want_v = projections(state, x)
    checks.close(k[:, :, :-1], want_k, "cached keys vs the prompt's rotated keys")
    checks.close(v[:, :, :-1], want_v, "cached values vs the prompt's values")
    checks.equal(k[:, :, -1:], k_new, "the key appended after the prompt")


@exercise.check("edge cases", points=2)
def float32_chunks_match_full(kernel):
    """float32 module and a cache of the default dtype: chunks 5, 1, 1, 5 (float32 tolerance)."""
    attn, state = module(kernel, F32)
    x = lib.randn(B, T, E, seed=1, dtype=F32)
    got = run(kernel, attn, x, [5, 1, 1, 5], new_cache(kernel, dtype=None))
    if got.dtype != F32:
        raise checks.Failed(f"float32 forward with a cache returned {got.dtype}, want float32")
    checks.close(got, reference(state, x), "float32 outputs for the chunks [5, 1, 1, 5]")


@exercise.check("edge cases")
def cache_reused_after_reset(kernel):
    """A prompt of 12 tokens, reset(), then chunks 4, 8 of another sequence give its forward."""
    attn, state = module(kernel)
    first, second = (lib.randn(B, T, E, seed=s, dtype=F64) for s in (9, 10))
    cache = new_cache(kernel)
    run(kernel, attn, first, [T], cache)
    cache.reset()
    got = run(kernel, attn, second, [4, 8], cache)
    checks.close(got, reference(state, second), "outputs after reset() vs full forward")


@exercise.check("edge cases")
def batch_of_one_from_a_single_token(kernel):
    """Batch of one, a prompt of one token, then a chunk of 4."""
    attn, state = module(kernel)
    x = lib.randn(1, 5, E, seed=11, dtype=F64)
    got = run(kernel, attn, x, [1, 4])
    checks.close(got, reference(state, x), "batch-of-one outputs for the chunks [1, 4]")


@exercise.check("edge cases")
def noncontiguous_chunks(kernel):
    """Chunks 5, 7 given as non-contiguous views give the full forward's outputs."""
    attn, state = module(kernel)
    x = lib.randn(B, T, E, seed=12, dtype=F64)
    pieces = [lib.noncontiguous(p) for p in chunks(x, [5, 7])]
    got = run(kernel, attn, x, [5, 7], pieces=pieces)
    checks.close(got, reference(state, x), "outputs for non-contiguous chunks [5, 7]")


# --- from scratch -------------------------------------------------------------------------------


@exercise.check("from scratch", points=2)
def no_builtin_attention_or_mask(kernel):
    """No attention built-in or torch.nn.attention.bias mask, in the source or at run time."""
    attn, _ = module(kernel, weights=False)
    x = lib.randn(B, 6, E, seed=13, dtype=F64)
    lib.no_builtin(kernel, exercise, lambda: run(kernel, attn, x, [4, 2]))
