"""Hidden suite for `kv_cache`: incremental decoding with a KV cache.

The candidate writes `causal_mask(t, s)` (bottom-right aligned), a stateful `KVCache`
(update / length / reset) and `CachedSelfAttention.forward(x, cache)` (RoPE, grouped-query
attention). The central property: for any chunk schedule, prefill and decode through the
cache give the rows of the full causal forward. Every value check compares against a float64
reference computed here from the module's own weights: the given half-split RoPE, the heads
repeated with `repeat_interleave`, and SDPA with an explicit lower-triangular mask.

One bug, one place. A test about one feature leaves every other at its default: the module
and the cache in float32 (the cache's default dtype), caches a little larger than needed (an
off-by-one overflow check fails at "cache mechanics" only), a fresh module for every run of
a schedule. Each level adds one thing: one token at a time ("decode": no mask is needed, one
query sees every key), then several tokens per call ("prefill and chunks": a prompt into an
empty cache, what the cache holds after it, chunks after cached tokens, where only the
bottom-right mask is right), then one module and one cache across sequences ("reuse across
calls": compared with the notebook's own outputs on fresh objects, so a bug of an earlier
level is not counted again). Edge cases and from scratch call forward without a cache.
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
    tags=("attention", "inference", "decoding"),
    minutes=45,
    title="KV cache: incremental decoding with RoPE and grouped-query attention",
    seed="-",
    levels=[
        "cache mechanics",
        "causal mask",
        "full forward",
        "decode",
        "prefill and chunks",
        "reuse across calls",
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
SLACK = 2  # a cache holds this many tokens more than a run needs
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


def module(kernel, dtype=F32, weights: bool = True):
    """A new CachedSelfAttention(E, H, HKV) of the candidate's (the same weights every time:
    torch is seeded first) in `dtype`, and its weights (None unless asked for: a round trip
    fewer)."""
    attn = kernel.new(OWNER, E, H, HKV)
    if dtype != F32:
        attn.to(dtype)
    return attn, lib.require_state(attn.state_dict(), LAYERS, OWNER, SHAPES) if weights else None


def new_cache(kernel, batch=B, max_len=T, dtype=None):
    """A candidate KVCache; `dtype=None` leaves the constructor's default (float32)."""
    extra = {} if dtype is None else {"dtype": dtype}
    return kernel.new("KVCache", batch, HKV, D, max_len, **extra)


def chunks(x: torch.Tensor, schedule: list[int]) -> list[torch.Tensor]:
    """x [B, T, E] cut along time into consecutive chunks of the schedule's sizes."""
    assert sum(schedule) == x.shape[1], "a schedule must cover the sequence"
    return [c.contiguous() for c in torch.split(x, schedule, dim=1)]


def run(kernel, attn, x, schedule, cache=None):
    """Feed x's chunks through forward(chunk, cache) in order (one round trip; a new cache
    with room to spare unless one is given); the outputs concatenated along time."""
    if cache is None:
        cache = new_cache(kernel, x.shape[0], x.shape[1] + SLACK)
    pieces = chunks(x, schedule)
    outs = kernel.many(attn, [((p, cache), {}) for p in pieces])
    for i, (out, p) in enumerate(zip(outs, pieces, strict=True)):
        checks.tensor(out, f"forward(chunk {i} of {schedule}, cache)", (*p.shape[:2], E))
    return torch.cat(outs, dim=1)


def fresh_run(kernel, x, schedule):
    """`run` with a new module and a new cache."""
    attn, _ = module(kernel, weights=False)
    return run(kernel, attn, x, schedule)


def schedule_matches(kernel, schedule: list[int], seed: int = 1) -> None:
    """The chunks of `schedule` through one cache give the full forward's outputs."""
    attn, state = module(kernel)
    x = lib.randn(B, sum(schedule), E, seed=seed)
    got = run(kernel, attn, x, schedule)
    checks.close(got, reference(state, x), f"outputs for the chunks {schedule} vs full forward")


def full(kernel, attn, x, what="forward(x)"):
    """forward(x) with no cache, its shape checked."""
    return checks.tensor(attn(x), what, x.shape)


def length(kernel, cache, what: str, want: int) -> None:
    """cache.length is the int `want`."""
    checks.data(kernel.attribute(cache, "length"), want, f"KVCache.length {what}")


def kv(answer, what: str, shape) -> tuple[torch.Tensor, torch.Tensor]:
    """update's answer: a pair of tensors of `shape`."""
    k, v = checks.pair(answer, what, ("k", "v"))
    return checks.tensor(k, f"{what} keys", shape), checks.tensor(v, f"{what} values", shape)


def kv_rows(n: int, seed: int, dtype=F32):
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
    """update returns the cache's dtype: float32 by default; float64 for dtype=float64, also
    for float32 rows (the same values)."""
    cases = [("a default-dtype cache", None, F32, F32), ("a float64 cache", F64, F64, F64),
             ("a float64 cache given float32 rows", F64, F32, F64)]  # fmt: skip
    for i, (what, dtype, rows, want) in enumerate(cases):
        cache = new_cache(kernel, max_len=4, dtype=dtype)
        k_new, v_new = kv_rows(2, seed=30 + i, dtype=rows)
        k, v = kv(cache.update(k_new, v_new), f"update of {what}", (B, HKV, 2, D))
        for name, got, sent in (("keys", k, k_new), ("values", v, v_new)):
            if got.dtype != want:
                raise checks.Failed(f"{what} returned {got.dtype} {name}, want {want}")
            checks.equal(got, sent, f"{name} returned by {what}")


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
    attn, _ = module(kernel, weights=False)
    full(kernel, attn, lib.randn(B, T, E, seed=1))


@exercise.check("full forward", points=2)
def forward_matches_reference(kernel):
    """forward(x) equals causal RoPE + GQA attention with the module's weights."""
    attn, state = module(kernel)
    x = lib.randn(B, T, E, seed=1)
    checks.close(full(kernel, attn, x), reference(state, x), "forward(x) vs the reference")


@exercise.check("full forward")
def forward_is_causal(kernel):
    """Outputs up to t do not change when tokens after t change (t = 5)."""
    attn, _ = module(kernel, weights=False)
    lib.causal(lambda y: full(kernel, attn, y), lib.randn(B, T, E, seed=2), "forward(x)", t=5)


@exercise.check("full forward")
def query_heads_read_their_kv_group(kernel):
    """Query heads 2 and 3 read key/value head 1: with its values zeroed, their outputs are 0."""
    attn, state = module(kernel)
    v = state["v_proj.weight"].clone()
    v[D:] = 0  # key/value head 1
    lib.load_state(attn, OWNER, {"v_proj.weight": v, "o_proj.weight": torch.eye(E)})
    y = full(kernel, attn, lib.randn(B, T, E, seed=3))
    lib.exactly_zero(y[..., 2 * D :], "output of query heads 2, 3 (key/value head 1 zeroed)")
    checks.differ(y[..., : 2 * D], torch.zeros(B, T, 2 * D),
                  "output of query heads 0, 1 (key/value head 0 kept)")  # fmt: skip


@exercise.check("full forward")
def repeated_token_gives_one_output(kernel):
    """One token repeated 12 times: every position gives the same output (weights sum to 1)."""
    attn, _ = module(kernel, weights=False)
    x = lib.randn(B, 1, E, seed=4).expand(B, T, E).contiguous()
    y = full(kernel, attn, x)
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
    run(kernel, attn, lib.randn(B, 2, E, seed=1), [1] * 2, cache)
    length(kernel, cache, "after forward of 2 single tokens", 2)


@exercise.check("decode")
def decoded_token_depends_on_itself(kernel):
    """Decoding 2 tokens: changing the 2nd changes its output, not the first."""
    x = lib.randn(B, 2, E, seed=5)
    lib.causal(lambda y: fresh_run(kernel, y, [1] * 2), x, "decoded outputs", t=0)


@exercise.check("decode")
def decode_depends_on_token_order(kernel):
    """Decoding [a, b, c] and [b, a, c]: c's output differs (positions matter)."""
    x = lib.randn(B, 3, E, seed=6)
    first, second = fresh_run(kernel, x, [1] * 3), fresh_run(kernel, x[:, [1, 0, 2]], [1] * 3)
    checks.differ(second[:, 2], first[:, 2], "output of token 3 after swapping tokens 1 and 2")


# --- several tokens per call: a prompt, then chunks after cached tokens ---------------------


@exercise.check("prefill and chunks", points=2, hidden=False)
def prefill_matches_full(kernel):
    """A prompt of 6 tokens in one call through an empty cache gives the full forward's
    outputs."""
    schedule_matches(kernel, [6])


@exercise.check("prefill and chunks")
def cache_after_a_prompt(kernel):
    """After a prompt of 11 tokens, the cache holds their RoPE-rotated keys and their values
    (2 heads): the next update returns them, then its own row."""
    attn, state = module(kernel)
    x = lib.randn(B, T - 1, E, seed=8)
    cache = new_cache(kernel, max_len=T + SLACK)
    run(kernel, attn, x, [T - 1], cache)
    k_new, v_new = kv_rows(1, seed=60)
    k, v = kv(cache.update(k_new, v_new), "cache.update after the prompt", (B, HKV, T, D))
    _, want_k, want_v = projections(state, x)
    tol = checks.tolerance(F32)  # computed in float32 (what the cache returns is tested above)
    for name, got, want in (("keys", k, want_k), ("values", v, want_v)):
        what = f"cached {name} vs the prompt's {'rotated keys' if name == 'keys' else name}"
        checks.close(got[:, :, :-1], want, what, rtol=tol.rtol, atol=tol.atol)
    checks.equal(k[:, :, -1:], k_new, "the key appended after the prompt")


@exercise.check("prefill and chunks")
def cache_length_after_prefill_and_decode(kernel):
    """After a prompt of 3 tokens and a single one, the cache's length is 4."""
    attn, _ = module(kernel, weights=False)
    cache = new_cache(kernel, max_len=8)
    run(kernel, attn, lib.randn(B, 4, E, seed=1), [3, 1], cache)
    length(kernel, cache, "after a prompt of 3 tokens and a single one", 4)


@exercise.check("prefill and chunks", points=2)
def chunks_5_1_1_5_match_full(kernel):
    """Chunks of 5, 1, 1, 5 tokens give the full forward's outputs."""
    schedule_matches(kernel, [5, 1, 1, 5])


@exercise.check("prefill and chunks", points=2)
def chunks_3_4_5_match_full(kernel):
    """Chunks of 3, 4, 5 tokens give the full forward's outputs."""
    schedule_matches(kernel, [3, 4, 5])


@exercise.check("prefill and chunks")
def chunks_with_as_many_kv_heads_as_heads(kernel):
    """With n_kv_heads = n_heads (no grouping: nothing copies the cached keys), chunks of
    3, 4, 5 give what the same module gives without a cache (the notebook's own forward)."""
    attn = kernel.new(OWNER, E, H, H)
    x = lib.randn(B, T, E, seed=13)
    cache = kernel.new("KVCache", B, H, D, T + SLACK)
    pieces = chunks(x, [3, 4, 5])
    outs = kernel.many(attn, [((p, cache), {}) for p in pieces])
    for i, (out, p) in enumerate(zip(outs, pieces, strict=True)):
        checks.tensor(out, f"forward(chunk {i} of [3, 4, 5], cache)", (*p.shape[:2], E))
    what = "n_kv_heads = n_heads: outputs for the chunks [3, 4, 5] vs forward(x) with no cache"
    checks.same(torch.cat(outs, dim=1), full(kernel, attn, x), what)


@exercise.check("prefill and chunks")
def later_chunk_is_causal(kernel):
    """Chunks [4, 4]: changing the 2nd chunk's last tokens leaves its first ones unchanged."""
    x = lib.randn(B, 8, E, seed=7)
    lib.causal(lambda y: fresh_run(kernel, y, [4, 4]), x, "chunked outputs", t=5)


# --- one module, one cache, several sequences ------------------------------------------------


@exercise.check("reuse across calls", points=2)
def cache_reused_after_reset(kernel):
    """A cache filled by one sequence (chunks 4, 2), reset(), then another (chunks 3, 1, 2)
    gives what the second gives on a new cache: nothing of the first is left (compared with
    the notebook's own outputs on a new module and cache)."""
    first, second = (lib.randn(B, 6, E, seed=s) for s in (9, 10))
    attn, _ = module(kernel, weights=False)
    cache = new_cache(kernel, max_len=6 + SLACK)
    run(kernel, attn, first, [4, 2], cache)
    cache.reset()
    got = run(kernel, attn, second, [3, 1, 2], cache)
    checks.same(got, fresh_run(kernel, second, [3, 1, 2]), "outputs after reset() vs a new cache")


@exercise.check("reuse across calls", points=2)
def two_caches_in_turns(kernel):
    """One module decodes two sequences in turns, each with its own cache (chunks 3, 1, 2):
    each gives what it gives alone (compared with the notebook's own outputs on a new module
    and cache), so the position comes from the cache, not from the module."""
    xs = [lib.randn(B, 6, E, seed=s) for s in (11, 12)]
    attn, _ = module(kernel, weights=False)
    caches = [new_cache(kernel, max_len=6 + SLACK) for _ in xs]
    pieces = [chunks(x, [3, 1, 2]) for x in xs]
    calls: list[tuple[tuple, dict]] = [
        ((pieces[s][i], caches[s]), {}) for i in range(3) for s in range(2)
    ]
    outs = kernel.many(attn, calls)
    for (args, _), out in zip(calls, outs, strict=True):
        checks.tensor(out, "forward(chunk, cache)", (*args[0].shape[:2], E))
    for s, x in enumerate(xs):
        got = torch.cat(outs[s::2], dim=1)
        want = fresh_run(kernel, x, [3, 1, 2])
        checks.same(got, want, f"sequence {s + 1} decoded in turns vs alone")


# --- edge cases ---------------------------------------------------------------------------------


@exercise.check("edge cases", points=2)
def float64_keeps_its_precision(kernel):
    """A float64 module, tokens sharing a large part (100 x one vector, plus noise): forward(x)
    matches the reference at float64's tolerance (a float32 step rounds the scores by ~1e-4)."""
    attn, state = module(kernel, F64)
    x = lib.randn(B, T, E, seed=14, dtype=F64) + 100 * lib.randn(1, 1, E, seed=15, dtype=F64)
    y = full(kernel, attn, x)
    if y.dtype != F64:
        raise checks.Failed(f"a float64 forward returned {y.dtype}, want float64")
    checks.close(y, reference(state, x), "float64 forward(x) for tokens near 100")


@exercise.check("edge cases")
def noncontiguous_input(kernel):
    """x given as a non-contiguous view (column-major, strided: `.view` that merges axes
    fails on it) gives the full forward's outputs."""
    attn, state = module(kernel)
    x = lib.randn(B, T, E, seed=12)
    got = full(kernel, attn, lib.noncontiguous(x))
    checks.close(got, reference(state, x), "forward(x) for a non-contiguous x")


@exercise.check("edge cases")
def batch_of_one(kernel):
    """A batch of one sequence of 5 tokens gives the full forward's outputs."""
    attn, state = module(kernel)
    x = lib.randn(1, 5, E, seed=16)
    checks.close(full(kernel, attn, x), reference(state, x), "forward(x) for a batch of one")


@exercise.check("edge cases")
def inputs_left_unchanged(kernel):
    """x is left unchanged by forward (without a cache, a prompt and a decode step through a
    cache), and k_new, v_new by update (what each call returns is tested elsewhere)."""
    attn, _ = module(kernel, weights=False)
    cache = new_cache(kernel)
    sent = {f"x{n}": lib.randn(B, n, E, seed=17 + n) for n in (4, 3, 1)}
    sent["k_new"], sent["v_new"] = kv_rows(2, seed=70)
    held = {name: kernel.hold(t, name) for name, t in sent.items()}
    calls = {
        "forward(x)": (lambda: attn(held["x4"]), ["x4"]),
        "forward(x, cache) (a prompt)": (lambda: attn(held["x3"], cache), ["x3"]),
        "forward(x, cache) (a decode step)": (lambda: attn(held["x1"], cache), ["x1"]),
        "cache.update(k_new, v_new)": (
            lambda: cache.update(held["k_new"], held["v_new"]),
            ["k_new", "v_new"],
        ),
    }
    for what, (call, watched) in calls.items():
        raised(call)  # a bug of that call's own is tested elsewhere; here only its inputs
        for name in watched:
            after = kernel.attribute(held[name], "data")
            checks.equal(after, sent[name], f"{name.rstrip('0123456789')} after {what}")


# --- from scratch -------------------------------------------------------------------------------


@exercise.check("from scratch", points=2)
def no_builtin_attention_or_mask(kernel):
    """No attention built-in or torch.nn.attention.bias mask, in the source or at run time
    (the watch has seen every call of the other tests; this one calls forward(x) with its
    defaults so that a stub answers first)."""
    attn, _ = module(kernel, weights=False)
    x = lib.randn(B, 6, E, seed=13)
    lib.no_builtin(kernel, exercise, lambda: full(kernel, attn, x))
