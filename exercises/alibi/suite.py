"""Hidden suite for `alibi`: ALiBi slopes for any head count (the paper's `get_slopes`),
the causal and the bidirectional (symmetric, MPT's) bias, and attention with the bias added
(EXERCISES_CANON.md section 10).

Pinned conventions (the notebook states them): slopes float64 (n,), largest first, the
closest power of two's slopes followed by every other slope of twice as many heads; the
bias is the relative -m * (p_i - j), float64 (H, Tq, Tk), queries aligned bottom-right
(p_i = i + Tk - Tq), exactly -inf after the query when causal, -m * |p_i - j| when not;
scores = scale * q @ k^T + bias (scale 1/sqrt(D) by default, 0.0 honoured), the softmax
over the keys, the output in q's dtype; Tq > Tk and n_heads < 1 raise ValueError.

One bug, one place: the bias tests build their reference from the notebook's own slopes,
and the attention tests compare with softmax(scale * q @ k^T + b) @ v where b is the
notebook's own alibi_bias answer, so a slope or bias bug loses points at its level alone.
Dtypes are checked by the "shapes" tests alone. Where a wrong answer is a known other
convention (the naive slopes, the bias before the scaling, BLOOM's key-position form, ...)
the message says which.
"""

import math
from collections.abc import Callable, Sequence

import torch

from grader.exercises import _attention as att
from grader.suite import checks
from grader.suite import library as lib
from grader.suite.exercise import Exercise
from grader.suite.handle import call_step

SLOPES, BIAS, ATTENTION = "alibi_slopes", "alibi_bias", "alibi_attention"
F32, F64 = torch.float32, torch.float64
INF = float("inf")

exercise = Exercise(
    id="alibi",
    tags=("attention", "positional"),
    minutes=40,
    title="ALiBi: slopes for any head count, causal and bidirectional biases, attention",
    seed="-",
    levels=[
        "shapes",
        "slopes",
        "other head counts",
        "causal bias",
        "bidirectional bias",
        "attention",
        "robustness",
        "from scratch",
    ],
    defines=(SLOPES, BIAS, ATTENTION),
    forbidden=(*att.FORBIDDEN, "flex_attention"),
    watch=att.ATTENTION,
)

B, H, T, D = 2, 6, 7, 8  # H = 6 is not a power of two; B != H so a bias on the batch axis fails


# -- the slopes (grader's process, float64) ------------------------------------------------


def geometric(n: int, first: int = 1) -> list[float]:
    """2^(-8 (h + first) / n) for h = 0 .. n - 1."""
    return [2.0 ** (-8.0 * (h + first) / n) for h in range(n)]


def closest_power(n: int) -> int:
    """The largest power of two <= n."""
    return 1 << (n.bit_length() - 1)


def extras(n: int, picked: slice = slice(0, None, 2)) -> list[float]:
    """The extra heads' slopes: those of 2c heads (c = closest_power(n)) at the `picked`
    indices (every other one, from 0), the first n - c of them."""
    c = closest_power(n)
    return geometric(2 * c)[picked][: n - c]


def joined(first: Sequence[float], then: Sequence[float] = ()) -> torch.Tensor:
    return torch.tensor([*first, *then], dtype=F64)


def paper_slopes(n: int) -> torch.Tensor:
    """The paper's get_slopes: the closest power of two's slopes, then the extra heads'."""
    return joined(geometric(closest_power(n)), extras(n))


# Other conventions a wrong answer may be, and what its message says (only where they differ
# from the paper's slopes for this n).
WRONG_SLOPES: list[tuple[str, Callable[[int], torch.Tensor]]] = [
    ("smallest first: want the largest first (head 0 gets 2^(-8/n))",
     lambda n: paper_slopes(n).flip(0)),
    ("the right slopes sorted largest first: want the closest power of two's slopes, then the "
     "extra heads' (the paper's order)",
     lambda n: paper_slopes(n).sort(descending=True).values),
    ("a geometric sequence from 1 (2^(-8 h / n), h from 0): want 2^(-8 (h + 1) / n)",
     lambda n: joined(geometric(n, first=0))),
    ("2^(-8 (h + 1) / n) for every n: for n not a power of two, want the closest power of "
     "two's slopes followed by every other slope of twice as many heads",
     lambda n: joined(geometric(n))),
    ("the extra heads' slopes first: want the closest power of two's slopes first",
     lambda n: joined(extras(n), geometric(closest_power(n)))),
    ("the extra heads given the first n - c slopes of 2c heads: want every other one "
     "(indices 0, 2, 4, ...)",
     lambda n: joined(geometric(closest_power(n)), extras(n, slice(None)))),
    ("the extra heads given the odd-indexed slopes of 2c heads (1, 3, 5, ...): want the "
     "even-indexed ones (0, 2, 4, ...)",
     lambda n: joined(geometric(closest_power(n)), extras(n, slice(1, None, 2)))),
    ("the first n slopes of the next power of two: want the closest power of two's slopes "
     "followed by every other slope of twice as many heads",
     lambda n: joined(geometric(2 * closest_power(n))[:n])),
]  # fmt: skip


def agree(got: torch.Tensor, want: torch.Tensor) -> bool:
    """`got` is within the default tolerance of `want` (shapes equal, both finite)."""
    if got.shape != want.shape or not bool(torch.isfinite(got).all()):
        return False
    tol = checks.tolerance(got.dtype, want.dtype)
    return bool((checks.tolerance_ratio(got.detach(), want, tol) <= 1).all())


def expect_slopes(answer, n: int) -> None:
    """alibi_slopes(n)'s answer equals the paper's slopes; a known wrong convention is named."""
    what = f"{SLOPES}({n})"
    want = paper_slopes(n)
    got = checks.tensor(answer, what, (n,))
    if not agree(got, want):
        for says, make in WRONG_SLOPES:
            other = make(n)
            if not agree(other, want) and agree(got, other):
                raise checks.Failed(f"{what} is {says}")
    checks.close(got, want, f"{what} vs the paper's slopes")


def slopes_for(kernel, counts: list[int]) -> None:
    answers = kernel.many(kernel.get(SLOPES), [((n,), {}) for n in counts])
    for n, answer in zip(counts, answers, strict=True):
        expect_slopes(answer, n)


def own_slopes(kernel, n: int) -> torch.Tensor:
    """The notebook's alibi_slopes(n), float64: what its bias is compared against."""
    answer = kernel.get(SLOPES)(n)
    return checks.tensor(answer, f"{SLOPES}({n}), which the bias uses,", (n,)).detach().to(F64)


# -- the bias ------------------------------------------------------------------------------


def distance(q_len: int, k_len: int, aligned: bool = True) -> torch.Tensor:
    """(q_len, k_len) float64: p_i - j, with p_i = i + k_len - q_len (bottom-right), or
    p_i = i when not `aligned` (top-left)."""
    offset = k_len - q_len if aligned else 0
    return (torch.arange(q_len)[:, None] + offset - torch.arange(k_len)[None, :]).to(F64)


def reference_bias(slopes: torch.Tensor, q_len: int, k_len: int, causal: bool = True):
    """-m * (p_i - j), -inf after the query when causal; -m * |p_i - j| when not."""
    d = distance(q_len, k_len)
    m = slopes.to(F64)[:, None, None]
    if causal:
        return (-m * d).masked_fill(d < 0, -INF)
    return -m * d.abs()


def bias_label(n: int, q_len: int, k_len: int, causal: bool = True) -> str:
    return f"{BIAS}({n}, {q_len}, {k_len}{'' if causal else ', causal=False'})"


def wrong_biases(slopes, q_len, k_len, causal):
    """(what the message says, the tensor) for known other conventions."""
    m = slopes.to(F64)[:, None, None]
    d, top_left = distance(q_len, k_len), distance(q_len, k_len, aligned=False)
    keys = torch.arange(k_len, dtype=F64)[None, None, :].expand(len(slopes), q_len, k_len)
    if causal:
        return [
            ("+m * (p_i - j): want -m * (p_i - j), a penalty that grows with the distance", m * d),
            ("-m * (i - j), query i at position i (top-left): want the queries at the last "
             "positions, p_i = i + k_len - q_len", -m * top_left),
        ]  # fmt: skip
    return [
        ("-m * (p_i - j), signed: want the symmetric -m * |p_i - j|", -m * d),
        ("+m * (p_i - j): want -m * |p_i - j|, a penalty that grows with the distance",
         m * d.abs()),
        ("BLOOM's key-position form +m * j: want the relative -m * |p_i - j|", m * keys),
        ("-m * |i - j|, query i at position i (top-left): want the queries at the last "
         "positions, p_i = i + k_len - q_len", -m * top_left.abs()),
    ]  # fmt: skip


def expect_bias_values(answer, slopes, q_len, k_len, causal=True) -> None:
    """The answer's entries for the keys a query may see equal the reference (its -inf
    entries are `expect_mask`'s when causal; when not, there must be none)."""
    n = len(slopes)
    what = bias_label(n, q_len, k_len, causal)
    got = checks.tensor(answer, what, (n, q_len, k_len))
    want = reference_bias(slopes, q_len, k_len, causal)
    if not causal and bool(torch.isneginf(got).any()):
        raise checks.Failed(f"{what} has -inf entries: causal=False masks no key, want none")
    seen = torch.isfinite(want) & ~torch.isneginf(got)
    compared = torch.where(seen, got.detach().to(F64), want)  # the entries this test reads
    if not agree(compared, want):
        for says, other in wrong_biases(slopes, q_len, k_len, causal):
            shown = torch.where(seen, other, want)
            if not agree(shown, want) and agree(compared, shown):
                raise checks.Failed(f"{what} is {says}")
    form = "-m * (p_i - j)" if causal else "-m * |p_i - j|"
    checks.close(got, want, f"{what} vs {form}", where=seen)


def expect_mask(answer, n, q_len, k_len) -> None:
    """The causal bias is exactly -inf for the keys after the query (j > p_i), nowhere else."""
    what = bias_label(n, q_len, k_len)
    got = checks.tensor(answer, what, (n, q_len, k_len)).detach()
    future = (distance(q_len, k_len) < 0).expand(n, q_len, k_len)
    masked = torch.isneginf(got)
    if bool((masked & ~future).any()):
        h, i, j = (int(x) for x in (masked & ~future).nonzero()[0])
        raise checks.Failed(
            f"{what}[{h}, {i}, {j}] is -inf, but query {i} (at position {i + k_len - q_len}) "
            f"sees key {j}: want -inf only for keys after the query's position"
        )
    if bool((future & ~masked).any()):
        h, i, j = (int(x) for x in (future & ~masked).nonzero()[0])
        value = float(got[h, i, j])
        if value <= -1e4:
            raise checks.Failed(
                f"{what}[{h}, {i}, {j}] is a large negative number ({value:.3g}), not -inf: "
                "want exactly float('-inf') for keys after the query"
            )
        raise checks.Failed(
            f"{what}[{h}, {i}, {j}] is {value:.4g}: key {j} comes after query {i} (at position "
            f"{i + k_len - q_len}), want -inf (masked)"
        )


def bias_values(kernel, n, q_len, k_len, causal=True) -> None:
    slopes = own_slopes(kernel, n)
    expect_bias_values(kernel.get(BIAS)(n, q_len, k_len, causal=causal), slopes, q_len, k_len,
                       causal)  # fmt: skip


def bias_mask(kernel, n, q_len, k_len) -> None:
    expect_mask(kernel.get(BIAS)(n, q_len, k_len), n, q_len, k_len)


# -- attention -----------------------------------------------------------------------------


def qkv(b=B, h=H, t=T, s=T, d=D, dv=D, *, seed=1, scale=1.0, dtype=F64):
    """Seeded q (b, h, t, d), k (b, h, s, d), v (b, h, s, dv)."""
    return (
        lib.randn(b, h, t, d, seed=seed, scale=scale, dtype=dtype),
        lib.randn(b, h, s, d, seed=seed + 1, scale=scale, dtype=dtype),
        lib.randn(b, h, s, dv, seed=seed + 2, dtype=dtype),
    )


def call_label(inputs, **options) -> str:
    q, k, _ = inputs
    shown = "".join(f", {name}={value}" for name, value in options.items())
    return f"{ATTENTION}(q, k, v{shown}) at H={q.shape[1]}, Tq={q.shape[-2]}, Tk={k.shape[-2]}"


def softmax_v(scores: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return torch.softmax(scores, dim=-1) @ v


def wrong_attention(q, k, v, bias, scale, causal, given_scale):
    """(what the message says, the output) for known other ways to add the bias."""
    raw = q @ k.transpose(-2, -1)
    n, q_len, k_len = q.shape[1], q.shape[-2], k.shape[-2]
    wrong = [
        ("adds no bias: want softmax(scale * q @ k^T + bias) @ v", softmax_v(raw * scale, v)),
        ("adds the bias before the scaling, (q @ k^T + bias) * scale: want scale * q @ k^T + "
         "bias (the bias is not scaled)", softmax_v((raw + bias) * scale, v)),
        ("the softmax over the queries (dim=-2): want it over the keys (the last axis)",
         torch.softmax(raw * scale + bias, dim=-2) @ v),
    ]  # fmt: skip
    other = reference_bias(paper_slopes(n), q_len, k_len, not causal)
    flag = "causal=False's bidirectional bias" if causal else "the causal bias"
    wrong.append((f"adds {flag}: the causal flag is not passed on?",
                  softmax_v(raw * scale + other, v)))  # fmt: skip
    if q.shape[-1] != v.shape[-1]:
        wrong.append(("scaled by 1/sqrt(Dv), v's width: want 1/sqrt(D), the width of q and k",
                      softmax_v(raw / math.sqrt(v.shape[-1]) + bias, v)))  # fmt: skip
    if given_scale == 0.0:
        wrong.append(("scaled by 1/sqrt(D) for scale=0.0: want 0.0 as given (the scores are "
                      "the bias alone)", softmax_v(raw / math.sqrt(q.shape[-1]) + bias, v)))  # fmt: skip
    if q_len < k_len:
        square = reference_bias(paper_slopes(n), k_len, k_len, causal)[:, :q_len]
        wrong.append(("adds the first Tq rows of the Tk x Tk bias (top-left): want its last "
                      "Tq rows (query i at position i + Tk - Tq)",
                      softmax_v(raw * scale + square, v)))  # fmt: skip
    return wrong


def expect_attention(kernel, inputs, *, extra: str = "", **options) -> None:
    """alibi_attention(*inputs, **options) equals softmax(scale * q @ k^T + b) @ v, in
    float64, where b is the notebook's own alibi_bias(H, Tq, Tk, causal=...), at the
    tolerance of the inputs' dtype (a float64 answer to float32 inputs is the dtype test's)."""
    q, k, v = inputs
    n, q_len, k_len = q.shape[1], q.shape[-2], k.shape[-2]
    causal = options.get("causal", True)
    given_scale = options.get("scale")
    what = call_label(inputs, **options) + extra
    own, answer = kernel.batch([
        call_step(kernel.get(BIAS), None, n, q_len, k_len, causal=causal),
        call_step(kernel.get(ATTENTION), None, q, k, v, **options),
    ])  # fmt: skip
    label = bias_label(n, q_len, k_len, causal)
    bias = checks.tensor(own, f"{label}, which the attention adds,", (n, q_len, k_len))
    bias = bias.detach().to(F64)
    q64, k64, v64 = (t.to(F64) for t in inputs)
    scale = 1.0 / math.sqrt(q.shape[-1]) if given_scale is None else given_scale
    want = softmax_v(q64 @ k64.transpose(-2, -1) * scale + bias, v64)
    got = checks.tensor(answer, what, want.shape)
    # a query that the notebook's bias masks from every key is the bias tests' concern
    rows = (~torch.isneginf(bias).all(dim=-1))[..., None].expand(want.shape)
    if got.dtype == F64 and bool(rows.all()) and not agree(got, want):
        for says, other in wrong_attention(q64, k64, v64, bias, scale, causal, given_scale):
            if not agree(other, want) and agree(got, other):
                raise checks.Failed(f"{what} {says}")
    tol = checks.default_tolerance(q.dtype)
    checks.close(got, want, f"{what} vs softmax(scale * q @ k^T + {label}) @ v",
                 rtol=tol.rtol, atol=tol.atol, where=rows)  # fmt: skip


def attention(kernel, inputs, **options):
    return kernel.get(ATTENTION)(*inputs, **options)


# -- shapes: the API and the dtypes -------------------------------------------------------


def has_dtype(value, what: str, shape: tuple, dtype: torch.dtype, whose: str = "") -> None:
    got = checks.tensor(value, what, shape)
    if got.dtype != dtype:
        have, want = str(got.dtype)[6:], str(dtype)[6:]
        raise checks.Failed(f"{what} has dtype {have}, want {want}{whose}")


@exercise.check("shapes", hidden=False)
def slopes_are_a_float64_vector(kernel):
    """alibi_slopes(8) and alibi_slopes(6) are float64 tensors of shape (8,) and (6,)."""
    answers = kernel.many(kernel.get(SLOPES), [((8,), {}), ((6,), {})])
    for n, answer in zip((8, 6), answers, strict=True):
        has_dtype(answer, f"{SLOPES}({n})", (n,), F64)


@exercise.check("shapes")
def bias_is_float64_heads_by_queries_by_keys(kernel):
    """alibi_bias(6, 5, 7), causal and not, is a float64 tensor of shape (6, 5, 7)."""
    f = kernel.get(BIAS)
    answers = kernel.many(f, [((6, 5, 7), {}), ((6, 5, 7), {"causal": False})])
    for causal, answer in zip((True, False), answers, strict=True):
        has_dtype(answer, bias_label(6, 5, 7, causal), (6, 5, 7), F64)


@exercise.check("shapes")
def attention_keeps_q_dtype(kernel):
    """alibi_attention's output is (B, H, Tq, Dv) in q's dtype, float32 and float64.

    q (2, 3, 5, 8), k (2, 3, 7, 8), v (2, 3, 7, 4): the output is (2, 3, 5, 4)."""
    for dtype in (F32, F64):
        inputs = qkv(h=3, t=5, s=7, dv=4, seed=3, dtype=dtype)
        what = f"{ATTENTION}(q, k, v) with {str(dtype)[6:]} q, k, v"
        has_dtype(attention(kernel, inputs), what, (2, 3, 5, 4), dtype, " (q's)")


# -- slopes for powers of two --------------------------------------------------------------


@exercise.check("slopes", points=2, hidden=False)
def slopes_for_eight_heads(kernel):
    """alibi_slopes(8) is 1/2, 1/4, ..., 1/256 (largest first)."""
    slopes_for(kernel, [8])


@exercise.check("slopes", points=2)
def slopes_for_powers_of_two(kernel):
    """alibi_slopes(n) for n = 2, 4, 16, 32, 64: 2^(-8 (h + 1) / n)."""
    slopes_for(kernel, [2, 4, 16, 32, 64])


@exercise.check("slopes")
def slopes_for_a_single_head(kernel):
    """alibi_slopes(1) is [1/256] (one head: n = 1 is a power of two)."""
    slopes_for(kernel, [1])


# -- slopes for other head counts --------------------------------------------------------


@exercise.check("other head counts", points=2, hidden=False)
def slopes_for_twelve_heads(kernel):
    """alibi_slopes(12): the 8 slopes of 8 heads, then 2^-0.5, 2^-1.5, 2^-2.5, 2^-3.5."""
    slopes_for(kernel, [12])


@exercise.check("other head counts")
def slopes_for_six_heads(kernel):
    """alibi_slopes(6): 1/4, 1/16, 1/64, 1/256, then 1/2, 1/8."""
    slopes_for(kernel, [6])


@exercise.check("other head counts")
def slopes_for_odd_head_counts(kernel):
    """alibi_slopes(n) for n = 3, 5, 7 (one, one and three extra heads)."""
    slopes_for(kernel, [3, 5, 7])


@exercise.check("other head counts")
def slopes_for_many_heads(kernel):
    """alibi_slopes(n) for n = 20, 24, 40, 96 (the extra heads from 32, 64 and 128 heads)."""
    slopes_for(kernel, [20, 24, 40, 96])


# -- the causal bias -----------------------------------------------------------------------


@exercise.check("causal bias", points=2, hidden=False)
def causal_bias_values(kernel):
    """alibi_bias(6, 7, 7): -m_h * (i - j) for the keys j <= i (0 on the diagonal)."""
    bias_values(kernel, H, T, T)


@exercise.check("causal bias", points=2)
def causal_bias_masks_future_keys(kernel):
    """alibi_bias(6, 7, 7): exactly -inf for j > i, and nowhere else."""
    bias_mask(kernel, H, T, T)


@exercise.check("causal bias")
def causal_distances_are_bottom_right(kernel):
    """alibi_bias(6, 3, 7): query i sits at position i + 4, so its bias is -m * (i + 4 - j)."""
    bias_values(kernel, H, 3, 7)


@exercise.check("causal bias")
def causal_mask_is_bottom_right(kernel):
    """alibi_bias(6, 3, 7): -inf exactly for j > i + 4 (query 2 sees every key)."""
    bias_mask(kernel, H, 3, 7)


@exercise.check("causal bias")
def causal_bias_for_one_query(kernel):
    """One query: alibi_bias(6, 1, 9) sees every key (decoding), alibi_bias(6, 1, 1) is 0.

    The one query sits at the last position, k_len - 1: nothing is masked."""
    slopes = own_slopes(kernel, H)
    answers = kernel.many(kernel.get(BIAS), [((H, 1, 9), {}), ((H, 1, 1), {})])
    for k_len, answer in zip((9, 1), answers, strict=True):
        expect_mask(answer, H, 1, k_len)
        expect_bias_values(answer, slopes, 1, k_len)


@exercise.check("causal bias")
def causal_bias_for_a_single_head(kernel):
    """alibi_bias(1, 5, 5): shape (1, 5, 5), slope 1/256."""
    bias_mask(kernel, 1, 5, 5)
    bias_values(kernel, 1, 5, 5)


# -- the bidirectional bias ----------------------------------------------------------------


@exercise.check("bidirectional bias", points=2, hidden=False)
def bidirectional_bias_values(kernel):
    """alibi_bias(6, 7, 7, causal=False): -m_h * |i - j| everywhere, no -inf."""
    bias_values(kernel, H, T, T, causal=False)


@exercise.check("bidirectional bias")
def bidirectional_bias_is_bottom_right(kernel):
    """alibi_bias(6, 3, 7, causal=False): -m * |i + 4 - j|."""
    bias_values(kernel, H, 3, 7, causal=False)


# -- attention (against the notebook's own bias) ------------------------------------------


@exercise.check("attention", points=2, hidden=False)
def causal_attention(kernel):
    """B=2, H=6, T=7, D=8, float64: softmax(q @ k^T / sqrt(D) + bias) @ v, causal."""
    expect_attention(kernel, qkv(seed=10))


@exercise.check("attention", points=2)
def bidirectional_attention(kernel):
    """causal=False: the symmetric bias, every key seen."""
    expect_attention(kernel, qkv(seed=11), causal=False)


@exercise.check("attention")
def given_scale(kernel):
    """scale=0.5 replaces 1/sqrt(D) (the bias is not scaled)."""
    expect_attention(kernel, qkv(seed=12), scale=0.5)


@exercise.check("attention")
def zero_scale_is_not_the_default(kernel):
    """scale=0.0 is a scale, not "use the default": the scores are the bias alone."""
    expect_attention(kernel, qkv(seed=13), scale=0.0)


@exercise.check("attention")
def values_narrower_than_keys(kernel):
    """Dv = 5 != D = 8: the output is (B, H, T, 5), and the scale is still 1/sqrt(D)."""
    expect_attention(kernel, qkv(dv=5, seed=14))


@exercise.check("attention", points=2)
def fewer_queries_than_keys(kernel):
    """Tq = 3 and Tq = 1 (decoding) over Tk = 9 keys, and Tq = Tk = 1: bottom-right."""
    for t, s, seed in ((3, 9, 15), (1, 9, 16), (1, 1, 17)):
        expect_attention(kernel, qkv(t=t, s=s, seed=seed))


@exercise.check("attention")
def a_single_head(kernel):
    """H = 1 (slope 1/256), B = 3."""
    expect_attention(kernel, qkv(b=3, h=1, seed=18))


@exercise.check("attention")
def float32_attention(kernel):
    """float32, H = 12, T = 64: within float32's tolerance of the float64 reference."""
    expect_attention(kernel, qkv(h=12, t=64, s=64, seed=19, dtype=F32))


# -- robustness ----------------------------------------------------------------------------


def inputs_unchanged(kernel, inputs, **options) -> None:
    """alibi_attention on q, k, v held in the kernel leaves them as they were."""
    names = ("q", "k", "v")
    held = [kernel.hold(t.clone(), name) for name, t in zip(names, inputs, strict=True)]
    kernel.get(ATTENTION)(*held, **options)
    what = call_label(inputs, **options)
    for name, original, remote in zip(names, inputs, held, strict=True):
        checks.equal(kernel.attribute(remote, "data"), original, f"{name} after {what}")


@exercise.check("robustness")
def leaves_inputs_unchanged(kernel):
    """alibi_attention(q, k, v) does not modify q, k or v in place."""
    inputs_unchanged(kernel, qkv(seed=20))


@exercise.check("robustness")
def leaves_inputs_unchanged_with_options(kernel):
    """alibi_attention(q, k, v, causal=False, scale=0.5) does not modify q, k or v."""
    inputs_unchanged(kernel, qkv(seed=21), causal=False, scale=0.5)


@exercise.check("robustness")
def non_contiguous_inputs(kernel):
    """q, k, v in a non-contiguous layout (on which .view fails): the same answer."""
    inputs = tuple(lib.noncontiguous(t) for t in qkv(seed=22))
    expect_attention(kernel, inputs, extra=", non-contiguous q, k, v")


@exercise.check("robustness", points=2)
def large_scores_stay_finite(kernel):
    """q and k scaled by 30 (scores ~1e3, exp overflows float64): the exact answer."""
    expect_attention(kernel, qkv(seed=23, scale=30.0), extra=" with scores ~1e3")


@exercise.check("robustness")
def float64_scores_keep_their_precision(kernel):
    """float64 scores near 3e4 that differ by ~1 keep float64's precision.

    A feature of q and k at 300: scores rounded to float32 (off by ~2e-3) miss the
    float64 tolerance."""
    q, k, v = qkv(seed=24)
    q[..., 0], k[..., 0] = 300.0, 300.0
    expect_attention(kernel, (q, k, v), extra=" with scores near 3e4")


@exercise.check("robustness")
def float64_bias_keeps_its_precision(kernel):
    """float64 bias keeps its precision: H = 12, T = 256, scores that cancel the bias.

    q and k are built so that scale * q @ k^T = m_h * (i - j) + noise: every key weighs
    about the same, and a bias rounded to float32 (off by ~1e-5 at distances ~250) shows.
    H = 12 has slopes that are not powers of two (float32 cannot hold them exactly)."""
    n, t = 12, 256
    q, k, v = qkv(b=1, h=n, t=t, s=t, seed=27)
    q, k = q * 0.1, k * 0.1
    m, positions, root = paper_slopes(n)[:, None], torch.arange(t, dtype=F64), math.sqrt(D)
    q[..., 0], q[..., 1] = root * m * positions, root * m
    k[..., 0], k[..., 1] = 1.0, -positions
    expect_attention(kernel, (q, k, v), extra=" with scores that cancel the bias")


@exercise.check("robustness")
def more_queries_than_keys_raise(kernel):
    """q_len > k_len raises ValueError: alibi_bias(4, 5, 3), causal or not, and attention."""
    f = kernel.get(BIAS)
    lib.raises(f, (4, 5, 3), "ValueError", "alibi_bias(4, 5, 3)")
    lib.raises(lambda *a: f(*a, causal=False), (4, 5, 3), "ValueError",
               "alibi_bias(4, 5, 3, causal=False)")  # fmt: skip
    q, k, v = qkv(h=4, t=5, s=3, seed=25)
    lib.raises(kernel.get(ATTENTION), (q, k, v), "ValueError", "alibi_attention(q, k, v) with "
               "Tq=5 > Tk=3")  # fmt: skip


@exercise.check("robustness")
def zero_heads_raise(kernel):
    """alibi_slopes(0) raises ValueError."""
    lib.raises(kernel.get(SLOPES), (0,), "ValueError", "alibi_slopes(0)")


# -- from scratch --------------------------------------------------------------------------


@exercise.check("from scratch", points=2)
def no_builtin_attention(kernel):
    """The source names none of torch's attention built-ins, and none ran."""
    lib.no_builtin(kernel, exercise, lambda: attention(kernel, qkv(seed=26)))
