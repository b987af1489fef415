"""Hidden suite for `sampling`: `filter_logits` (temperature, then top-k with ties kept, then
top-p: the shortest most-probable prefix with mass >= p, ties with its last token kept,
`min_tokens_to_keep` as a floor) and `sample` (Gumbel-max with noise the grader draws, so
every draw is exact; temperature 0 is greedy).

Which tokens are kept and which ids are drawn are compared exactly against a float64
reference computed here. Inputs that are not exact (random rows) are checked to sit away
from every rounding boundary first (`Ref.margin`, `draw`), so a correct float32 candidate
cannot land on the other side; the boundary tests use dyadic probabilities (0.5, 0.25, ...),
whose float32 softmax is exact.
"""

from __future__ import annotations

import torch

from grader.suite import checks
from grader.suite import library as lib
from grader.suite.exercise import Exercise, Watch

F16, F32, F64 = torch.float16, torch.float32, torch.float64
INF = float("inf")
FILTER, SAMPLE = "filter_logits", "sample"

# torch's samplers, and its random number generators: `sample` must use the noise it is given
SAMPLERS = ("multinomial", "Categorical", "OneHotCategorical", "RelaxedOneHotCategorical",
            "gumbel_softmax")  # fmt: skip
RNG_FUNCTIONS = ("rand", "rand_like", "randn", "randn_like", "randint", "randint_like",
                 "randperm", "bernoulli", "normal", "poisson", "uniform_", "exponential_",
                 "normal_", "random_", "bernoulli_", "geometric_", "cauchy_", "log_normal_")  # fmt: skip
RNG_OPS = ("multinomial", "uniform", "exponential", "normal", "bernoulli", "rand", "random_",
           "poisson", "geometric", "cauchy")  # fmt: skip

exercise = Exercise(
    id="sampling",
    title="Sampling: temperature, top-k, top-p and a Gumbel-max sampler",
    seed="-",
    levels=[
        "temperature",
        "top-k",
        "top-p",
        "composition",
        "batched",
        "sampler",
        "edge cases",
        "from scratch",
    ],  # fmt: skip
    defines=(FILTER, SAMPLE),
    forbidden=SAMPLERS,
    watch=Watch(
        what="sampler or random number generator",
        functions=("multinomial", "gumbel_softmax", *RNG_FUNCTIONS),
        ops=RNG_OPS,
        instrument=(
            # Categorical.__init__ cannot be instrumented (its super() closure): what it
            # runs to sample or to give probabilities can
            "torch.distributions.categorical:Categorical.sample",
            "torch.distributions.utils:logits_to_probs",
            "torch.nn.functional:gumbel_softmax",
        ),
    ),
)

# Probabilities exact in float32, in a shuffled order: sorted, they are .5 .25 .125 .0625
# .0625, with prefix masses .5 .75 .875 .9375 1.
DYADIC = torch.tensor([0.125, 0.0625, 0.5, 0.0625, 0.25])
DYADIC_RANK = [2, 4, 0, 3, 1]  # the position of each token in the sorted order


def dyadic_logits() -> torch.Tensor:
    return DYADIC.log()


def kept_dyadic(count: int) -> torch.Tensor:
    """The mask keeping the `count` most probable tokens of DYADIC."""
    return torch.tensor([r < count for r in DYADIC_RANK])


class Ref:
    """The reference filter in float64: `keep` (bool), `scores` (logits / temperature) and
    `margin`, the smallest |prefix mass - top_p| (how far the row is from a rounding
    boundary; inf without top-p)."""

    def __init__(
        self, logits, temperature=1.0, top_k=None, top_p=None, min_tokens_to_keep=1, dtype=F64
    ):
        x = logits.to(dtype) / temperature
        vocab, floor = x.shape[-1], min_tokens_to_keep
        keep = x > -INF
        if top_k is not None:
            k = min(max(top_k, floor), vocab)
            keep &= x >= x.topk(k, dim=-1).values[..., -1:]
        self.margin = INF
        if top_p is not None and top_p < 1.0:
            probs = torch.softmax(x.masked_fill(~keep, -INF), dim=-1)
            ranked = probs.sort(dim=-1, descending=True).values
            mass = ranked.cumsum(dim=-1)
            size = ((mass < top_p).sum(dim=-1, keepdim=True) + 1).clamp(min=floor, max=vocab)
            keep &= probs >= ranked.gather(-1, size - 1)
            self.margin = float((mass - top_p).abs().min())
        self.keep, self.scores = keep, x


def options(temperature=1.0, top_k=None, top_p=None, min_tokens_to_keep=1) -> dict:
    """The keyword arguments of a call (only those that differ from the defaults)."""
    given = {"temperature": temperature, "top_k": top_k, "top_p": top_p,
             "min_tokens_to_keep": min_tokens_to_keep}  # fmt: skip
    defaults = {"temperature": 1.0, "top_k": None, "top_p": None, "min_tokens_to_keep": 1}
    return {k: v for k, v in given.items() if v != defaults[k]}


def describe(kwargs: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in kwargs.items()) or "no options"


def filtered(got, logits, kwargs, what, keep=None) -> None:
    """`got` is filter_logits(logits, **kwargs): the input's shape and dtype, exactly the
    reference's kept tokens (or `keep`), -inf elsewhere, logits / temperature where kept."""
    ref = Ref(logits, **kwargs)
    if keep is None:
        # a random row must sit away from every rounding boundary: far from p, and the
        # same kept set when the reference runs in the row's own dtype
        native = Ref(logits, **kwargs, dtype=logits.dtype).keep
        need = 1e-2 if logits.dtype == F16 else 1e-4  # float16 sums carry ~1e-3 of error
        assert ref.margin > need and torch.equal(native, ref.keep), f"suite: {what} is near a tie"
        keep = ref.keep
    got = checks.tensor(got, what, logits.shape)
    if got.dtype != logits.dtype:
        raise checks.Failed(f"{what} has dtype {got.dtype}, want {logits.dtype} (the input's)")
    bad = int((got.isnan() | (got == INF)).sum())
    if bad:
        raise checks.Failed(f"{what}: {bad} NaN or +inf entries out of {got.numel()}")
    checks.equal(got > -INF, keep, f"{what}: which tokens are kept (True) or set to -inf (False)")
    checks.close(got[keep], ref.scores[keep], f"{what}: kept values vs logits / temperature")


def filter_many(kernel, cases, what) -> None:
    """Each case is (logits, kwargs) or (logits, kwargs, keep): one round trip for all."""
    f = kernel.get(FILTER)
    answers = kernel.many(f, [((c[0],), c[1]) for c in cases])
    for case, got in zip(cases, answers, strict=True):
        keep = case[2] if len(case) > 2 else None
        label = f"{what}: filter_logits(x, {describe(case[1])})"
        filtered(got, case[0], case[1], label, keep)


def distinct(*shape, seed, scale=1.0, dtype=F32) -> torch.Tensor:
    """Random logits (no ties, no rounding boundaries at the sizes used here)."""
    return lib.randn(*shape, seed=seed, scale=scale, dtype=dtype)


def gumbel(*shape, seed, dtype=F32) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    u = torch.rand(*shape, generator=g, dtype=F64).clamp(1e-6, 1 - 1e-6)
    return (-torch.log(-torch.log(u))).to(dtype)


def draw(logits, noise, kwargs) -> torch.Tensor:
    """The reference ids, after asserting that the best and second-best noisy scores of every
    row are far apart (so float32 rounding cannot flip a draw)."""
    if kwargs.get("temperature", 1.0) == 0:
        return logits.argmax(dim=-1)
    ref = Ref(logits, **kwargs)
    assert ref.margin > 1e-4, "suite: a sampler row sits on a top-p boundary"
    noisy = ref.scores.masked_fill(~ref.keep, -INF) + noise.to(F64)
    top2 = noisy.topk(2, dim=-1).values
    gap = top2[..., 0] - top2[..., 1]
    assert bool((gap > 1e-3).all()), f"suite: a sampler row is nearly tied ({float(gap.min())})"
    return noisy.argmax(dim=-1)


def ids(got, want, what) -> None:
    """int64 ids of `want`'s shape, exactly `want`."""
    got = checks.integers(got, what, want.shape)
    if got.dtype != torch.int64:
        raise checks.Failed(f"{what} has dtype {got.dtype}, want int64")
    checks.equal(got, want, what)


def sample_many(kernel, cases, what) -> None:
    """Each case is (logits, noise, kwargs): one round trip for all. A drawn token the
    filter removes is named as such before the ids are compared."""
    f = kernel.get(SAMPLE)
    answers = kernel.many(f, [((c[0], c[1]), c[2]) for c in cases])
    for (x, noise, kwargs), got in zip(cases, answers, strict=True):
        want, label = draw(x, noise, kwargs), f"{what}: sample(x, gumbel, {describe(kwargs)})"
        got = checks.integers(got, label, want.shape)
        if kwargs.get("temperature", 1.0) != 0 and bool(((got >= 0) & (got < x.shape[-1])).all()):
            keep = Ref(x, **kwargs).keep
            drawn = keep.gather(-1, got.long().unsqueeze(-1)).squeeze(-1)
            if not bool(drawn.all()):
                row = tuple(int(i) for i in torch.nonzero(~drawn)[0]) if got.dim() else ()
                raise checks.Failed(f"{label}: drew token {int(got[row])} in row {list(row)}, "
                                    "which the filter removes")  # fmt: skip
        ids(got, want, label)


# ---------------------------------------------------------------- temperature


@exercise.check("temperature", hidden=False)
def keeps_shape_and_dtype(kernel):
    """With no options the output is the input: same shape (2, 3, 7), dtype and values."""
    x = distinct(2, 3, 7, seed=1)
    got = kernel.get(FILTER)(x)
    got = checks.tensor(got, "filter_logits(x)", x.shape)
    if got.dtype != x.dtype:
        raise checks.Failed(f"filter_logits(x) has dtype {got.dtype}, want float32")
    checks.equal(got, x, "filter_logits(x) with no options vs x")


@exercise.check("temperature", points=2, hidden=False)
def divides_by_temperature(kernel):
    """Temperatures 0.5, 2 and 0.1 give logits / temperature, nothing removed."""
    x = distinct(8, seed=2, scale=2.0)
    cases = [(x, options(temperature=t)) for t in (0.5, 2.0, 0.1)]
    filter_many(kernel, cases, "temperature")


@exercise.check("temperature")
def rejects_non_positive_temperature(kernel):
    """filter_logits raises ValueError for temperature 0 and -0.5."""
    x, f = distinct(6, seed=3), kernel.get(FILTER)
    for t in (0.0, -0.5):
        lib.raises(
            lambda t=t: f(x, temperature=t), (), "ValueError", f"filter_logits(x, temperature={t})"
        )


@exercise.check("temperature")
def leaves_its_input_unchanged(kernel):
    """filter_logits(x, temperature=0.5) does not modify x in place."""
    x = distinct(2, 6, seed=4)
    held = kernel.hold(x.clone(), "x")
    kernel.get(FILTER)(held, temperature=0.5)
    after = kernel.attribute(held, "data")
    checks.equal(after, x, "x after filter_logits(x, temperature=0.5)")


# ---------------------------------------------------------------- top-k


@exercise.check("top-k", points=2, hidden=False)
def keeps_the_k_largest(kernel):
    """top_k = 1, 3, 7 on a row of 10 distinct logits keeps the k largest."""
    x = distinct(10, seed=5)
    filter_many(kernel, [(x, options(top_k=k)) for k in (1, 3, 7)], "top-k")


@exercise.check("top-k")
def k_at_least_the_vocabulary_keeps_all(kernel):
    """top_k = V and top_k = V + 3 keep every token."""
    x = distinct(6, seed=6)
    filter_many(kernel, [(x, options(top_k=k)) for k in (6, 9)], "top-k with k >= V")


@exercise.check("top-k")
def ties_with_the_kth_are_kept(kernel):
    """Ties with the k-th score are kept: [1, 3, 3, 2, 3, 0] with top_k = 2 keeps three.

    Four equal logits with top_k = 1 keep all four."""
    x = torch.tensor([1.0, 3.0, 3.0, 2.0, 3.0, 0.0])
    threes = torch.tensor([False, True, True, False, True, False])
    flat, every = torch.zeros(4), torch.ones(4, dtype=torch.bool)
    cases = [(x, options(top_k=2), threes), (flat, options(top_k=1), every)]
    filter_many(kernel, cases, "top-k ties")


@exercise.check("top-k")
def top_k_with_temperature(kernel):
    """temperature = 0.5 with top_k = 3: the 3 largest, each logit / 0.5."""
    x = distinct(9, seed=7)
    filter_many(kernel, [(x, options(temperature=0.5, top_k=3))], "top-k")


# ---------------------------------------------------------------- top-p


@exercise.check("top-p", points=2, hidden=False)
def nucleus_includes_the_crossing_token(kernel):
    """The token whose mass takes the prefix past p is kept (dyadic probabilities).

    Probabilities .5 .25 .125 .0625 .0625 (shuffled): top_p = 0.3, 0.6, 0.8 keep the 1, 2,
    3 most probable tokens."""
    x = dyadic_logits()
    cases = [(x, options(top_p=p), kept_dyadic(n)) for p, n in ((0.3, 1), (0.6, 2), (0.8, 3))]
    filter_many(kernel, cases, "top-p")


@exercise.check("top-p")
def nucleus_mass_equal_to_p_is_enough(kernel):
    """A prefix whose mass is exactly p is enough: top_p = 0.5, 0.75, 0.875 keep 1, 2, 3.

    The same dyadic row, whose float32 prefix masses are exactly .5, .75, .875."""
    x = dyadic_logits()
    cases = [(x, options(top_p=p), kept_dyadic(n)) for p, n in ((0.5, 1), (0.75, 2),
                                                                (0.875, 3))]  # fmt: skip
    filter_many(kernel, cases, "top-p on a boundary")


@exercise.check("top-p")
def tiny_p_keeps_only_the_most_probable(kernel):
    """top_p = 1e-4 keeps only the most probable token."""
    x = distinct(12, seed=8)
    filter_many(kernel, [(x, options(top_p=1e-4))], "top-p")


@exercise.check("top-p")
def p_one_removes_nothing(kernel):
    """top_p = 1.0 is off: [0, -21, -21, -21, -21] keeps all five tokens.

    In float32 that row's mass reaches 1 at its first token."""
    x = torch.tensor([0.0, -21.0, -21.0, -21.0, -21.0])
    every = torch.ones(5, dtype=torch.bool)
    filter_many(kernel, [(x, options(top_p=1.0), every)], "top-p = 1")


@exercise.check("top-p", points=2)
def nucleus_matches_the_reference(kernel):
    """Random rows of 40 logits with top_p = 0.5, 0.8, 0.95, against the float64 reference."""
    cases = [(distinct(40, seed=10 + i, scale=1.5), options(top_p=p))
             for i, p in enumerate((0.5, 0.8, 0.95))]  # fmt: skip
    filter_many(kernel, cases, "top-p")


@exercise.check("top-p")
def ties_with_the_last_token_are_kept(kernel):
    """Tokens tied with the prefix's last token are kept.

    Probabilities .5 .125 .125 .125 .125 with top_p = 0.6 keep all five; so do .5 .25
    .125 .0625 .0625 with top_p = 0.9 (the last two tie); four equal logits with
    top_p = 0.5 keep all four."""
    x = torch.tensor([0.5, 0.125, 0.125, 0.125, 0.125]).log()
    every = torch.ones(5, dtype=torch.bool)
    cases = [(x, options(top_p=0.6), every), (dyadic_logits(), options(top_p=0.9), every),
             (torch.zeros(4), options(top_p=0.5), torch.ones(4, dtype=torch.bool))]  # fmt: skip
    filter_many(kernel, cases, "top-p ties")


# ---------------------------------------------------------------- composition


def differs_in_order(x, kwargs: dict, without: str) -> None:
    """Suite guard: the pinned order keeps another set than top-p computed without the
    step named `without` ("temperature" or "top_k") and intersected with the rest."""
    unscaled = {k: v for k, v in kwargs.items() if k != without}
    others = {k: v for k, v in kwargs.items() if k != "top_p"}
    wrong = Ref(x, **unscaled).keep & Ref(x, **others).keep
    assert not torch.equal(Ref(x, **kwargs).keep, wrong), "suite: no contrast"


@exercise.check("composition", points=2)
def temperature_before_top_p(kernel):
    """Top-p sees the temperature-scaled probabilities: temperature 0.5 and 2 with top_p."""
    x = distinct(12, seed=20, scale=1.5)
    cases = [(x, options(temperature=0.5, top_p=0.7)), (x, options(temperature=2.0, top_p=0.5))]
    for _, kwargs in cases:
        differs_in_order(x, kwargs, "temperature")
    filter_many(kernel, cases, "temperature then top-p")


@exercise.check("composition", points=2)
def top_k_before_top_p(kernel):
    """Top-p sees the distribution renormalised over the tokens top-k kept.

    Probabilities .4 .3 .2 .1 with top_k = 3, top_p = 0.42 keep only the first token; and
    a random row of 20 with top_k = 6, top_p = 0.6."""
    x = torch.tensor([0.4, 0.3, 0.2, 0.1]).log()
    first = torch.tensor([True, False, False, False])
    y = distinct(20, seed=21)
    differs_in_order(y, options(top_k=6, top_p=0.6), "top_k")
    cases = [(x, options(top_k=3, top_p=0.42), first), (y, options(top_k=6, top_p=0.6))]
    filter_many(kernel, cases, "top-k then top-p")


@exercise.check("composition")
def all_three_together(kernel):
    """temperature = 0.7, top_k = 12, top_p = 0.85 on a row of 30, against the reference."""
    x = distinct(30, seed=22, scale=2.0)
    filter_many(kernel, [(x, options(temperature=0.7, top_k=12, top_p=0.85))], "all three")


# ---------------------------------------------------------------- batched

SCALES = torch.tensor([[1.0], [4.0], [0.3], [2.0]])
OFFSETS = torch.tensor([[0.0], [-5.0], [3.0], [1.0]])


def rows(seed: int) -> torch.Tensor:
    """(4, 12) logits whose rows have different scales and offsets."""
    return distinct(4, 12, seed=seed) * SCALES + OFFSETS


@exercise.check("batched", points=2)
def top_k_per_row(kernel):
    """(4, 12) logits, rows at different scales: top_k = 3 keeps 3 tokens in every row."""
    filter_many(kernel, [(rows(30), options(top_k=3))], "top-k, batched")


@exercise.check("batched", points=2)
def top_p_per_row(kernel):
    """(4, 12) logits, rows at different scales: top_p = 0.7 row by row."""
    filter_many(kernel, [(rows(31), options(top_p=0.7))], "top-p, batched")


@exercise.check("batched")
def leading_axes_and_layouts(kernel):
    """All three options on (2, 3, 16) logits, a non-contiguous (4, 12) view and (1, 12)."""
    kwargs = options(temperature=0.8, top_k=5, top_p=0.75)
    cases = [(distinct(2, 3, 16, seed=32, scale=2.0), kwargs),
             (lib.noncontiguous(rows(33)), kwargs), (rows(34)[:1].clone(), kwargs)]  # fmt: skip
    filter_many(kernel, cases, "batched")


# ---------------------------------------------------------------- sampler


@exercise.check("sampler", points=2, hidden=False)
def draws_follow_the_noise(kernel):
    """(6, 10) logits, temperature 1: the ids are argmax(logits + gumbel), int64, shape (6,)."""
    x = distinct(6, 10, seed=40, scale=2.0)
    sample_many(kernel, [(x, gumbel(6, 10, seed=41), {})], "sample")


@exercise.check("sampler")
def one_row_gives_a_0_dim_id(kernel):
    """A 1-D row of 10 logits gives a 0-dim int64 id."""
    x = distinct(10, seed=42, scale=2.0)
    sample_many(kernel, [(x, gumbel(10, seed=43), {})], "sample on one row")


@exercise.check("sampler", points=2)
def draws_with_filters(kernel):
    """Exact ids with filters: (8, 16) logits, noise given, two sets of options.

    (temperature 0.7, top_k 4, top_p 0.9) and (temperature 1.5, top_p 0.6)."""
    x = distinct(8, 16, seed=44, scale=2.0)
    cases = [(x, gumbel(8, 16, seed=45), options(temperature=0.7, top_k=4, top_p=0.9)),
             (x, gumbel(8, 16, seed=46), options(temperature=1.5, top_p=0.6))]  # fmt: skip
    sample_many(kernel, cases, "sample")


@exercise.check("sampler", points=2)
def never_draws_a_removed_token(kernel):
    """Noise of +50 on every token the filter removes: still a kept token is drawn."""
    x = distinct(8, 16, seed=47, scale=2.0)
    kwargs = options(temperature=0.8, top_k=6, top_p=0.8)
    noise = gumbel(8, 16, seed=48).masked_fill(~Ref(x, **kwargs).keep, 50.0)
    sample_many(kernel, [(x, noise, kwargs)], "sample with large noise on removed tokens")


@exercise.check("sampler")
def zero_temperature_is_greedy(kernel):
    """temperature = 0 returns argmax(logits), whatever the noise and the other options."""
    x = distinct(5, 9, seed=49)
    noise = gumbel(5, 9, seed=50) * 10
    cases = [(x, noise, options(temperature=0.0)),
             (x, noise, options(temperature=0.0, top_k=3, top_p=0.5))]  # fmt: skip
    sample_many(kernel, cases, "greedy")


@exercise.check("sampler")
def sample_rejects_negative_temperature(kernel):
    """sample raises ValueError for temperature -1."""
    x, f = distinct(6, seed=51), kernel.get(SAMPLE)
    noise = gumbel(6, seed=52)
    call = lambda: f(x, noise, temperature=-1.0)  # noqa: E731
    lib.raises(call, (), "ValueError", "sample(x, gumbel, temperature=-1.0)")


# ---------------------------------------------------------------- edge cases


@exercise.check("edge cases")
def existing_minus_inf_logits(kernel):
    """Logits already -inf stay removed: 5 finite of 10, with top_k = 7 or top_p = 0.9.

    And sample never draws one, even with noise +50 on them."""
    x = distinct(10, seed=60)
    x[[1, 4, 5, 7, 8]] = -INF
    filter_many(kernel, [(x, options(top_k=7)), (x, options(top_p=0.9))], "with -inf logits")
    noise = gumbel(10, seed=61).masked_fill(x == -INF, 50.0)
    sample_many(kernel, [(x, noise, options(top_p=0.9))], "with -inf logits")


@exercise.check("edge cases")
def equal_logits(kernel):
    """Eight equal logits: top_k = 2 and top_p = 0.3 keep all eight."""
    flat, every = torch.full((8,), 1.5), torch.ones(8, dtype=torch.bool)
    cases = [(flat, options(top_k=2), every), (flat, options(top_p=0.3), every)]
    filter_many(kernel, cases, "equal logits")


@exercise.check("edge cases")
def min_tokens_to_keep_with_top_k(kernel):
    """top_k = 1 with min_tokens_to_keep = 3 keeps 3 tokens."""
    x = distinct(10, seed=62)
    filter_many(kernel, [(x, options(top_k=1, min_tokens_to_keep=3))], "min_tokens_to_keep")


@exercise.check("edge cases")
def min_tokens_to_keep_with_top_p(kernel):
    """top_p = 0.3 with min_tokens_to_keep = 2 and 3 keeps 2 and 3 tokens (dyadic row)."""
    x = dyadic_logits()
    cases = [(x, options(top_p=0.3, min_tokens_to_keep=m), kept_dyadic(m)) for m in (2, 3)]
    filter_many(kernel, cases, "min_tokens_to_keep")


@exercise.check("edge cases")
def float16_and_float64(kernel):
    """All three options on float16 and float64 rows: the input's dtype comes back."""
    kwargs = options(temperature=0.7, top_k=8, top_p=0.8)
    cases = [(distinct(3, 16, seed=66, scale=2.0, dtype=dtype), kwargs) for dtype in (F16, F64)]
    filter_many(kernel, cases, "float16 / float64")


@exercise.check("edge cases")
def large_logits(kernel):
    """Logits near 1e4 (spread about 3): top-p and the sampler stay finite and exact."""
    x = distinct(4, 12, seed=64, scale=3.0) + 1e4
    kwargs = options(top_p=0.9)
    filter_many(kernel, [(x, kwargs)], "logits near 1e4")
    sample_many(kernel, [(x, gumbel(4, 12, seed=65), kwargs)], "logits near 1e4")


# ---------------------------------------------------------------- from scratch


@exercise.check("from scratch", points=2)
def no_builtin_sampler(kernel):
    """No torch sampler in the source; no sampler or random number generator runs."""
    x = distinct(3, 10, seed=70)
    noise = gumbel(3, 10, seed=71)

    def run():
        kernel.get(FILTER)(x, temperature=0.9, top_k=5, top_p=0.8)
        kernel.get(SAMPLE)(x, noise, temperature=0.9, top_k=5, top_p=0.8)
        kernel.get(SAMPLE)(x, noise, temperature=0.0)

    lib.no_builtin(kernel, exercise, run)
