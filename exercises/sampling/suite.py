"""Hidden suite for `sampling`: `filter_logits` (temperature, then top-k with ties kept, then
top-p: the shortest most-probable prefix with mass >= p, ties with its last token kept,
`min_tokens_to_keep` as a floor) and `sample` (Gumbel-max with noise the grader draws, so
every draw is exact; temperature 0 is greedy).

Which tokens are kept and which ids are drawn are compared exactly against a float64
reference computed here. Inputs that are not exact (random rows) are checked to sit away
from every rounding boundary first (`Ref.margin`, `draw`), so a correct float32 candidate
cannot land on the other side; the boundary tests use dyadic probabilities (0.5, 0.25, ...),
whose float32 softmax is exact.

One bug, one place: each feature's tests set the other options to their defaults, and the
tests of the rows' layouts, dtypes, existing -inf logits and large logits, and the sampler,
compare the candidate with itself where they can (a batch with its rows filtered alone,
float16 with float32, the ids with the candidate's own filter_logits): a wrong top-k loses
points at top-k (and at composition, whose tests combine the steps on purpose), not there.
"""

from __future__ import annotations

import torch

from grader.core.outcomes import CandidateRaised
from grader.exercises import _randomness as rnd
from grader.suite import checks
from grader.suite import library as lib
from grader.suite.exercise import Exercise

F16, F32, F64 = torch.float16, torch.float32, torch.float64
INF = float("inf")
FILTER, SAMPLE = "filter_logits", "sample"


exercise = Exercise(
    id="sampling",
    tags=("decoding", "sampling"),
    minutes=35,
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
    forbidden=rnd.SAMPLERS,
    watch=rnd.watch(),
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


def answer(got, logits, what) -> torch.Tensor:
    """filter_logits' answer for `logits`: a tensor of its shape and dtype, without NaN or
    +inf (a removed token is -inf)."""
    got = checks.tensor(got, what, logits.shape)
    if got.dtype != logits.dtype:
        raise checks.Failed(f"{what} has dtype {got.dtype}, want {logits.dtype} (the input's)")
    bad = int((got.isnan() | (got == INF)).sum())
    if bad:
        raise checks.Failed(f"{what}: {bad} NaN or +inf entries out of {got.numel()}")
    return got


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
    got = answer(got, logits, what)
    checks.equal(got > -INF, keep, f"{what}: which tokens are kept (True) or set to -inf (False)")
    checks.close(got, ref.scores, f"{what}: kept values vs logits / temperature", where=keep)


def agrees(got, like, logits, what, against: str) -> None:
    """`got`, filter_logits' answer for `logits`, keeps exactly the tokens `like` keeps (the
    candidate's own answer for the same rows in a plainer form, named by `against`), with
    the same values: what the feature's own tests check is not checked twice here."""
    got = answer(got, logits, what)
    like = checks.tensor(like, f"{what}: {against}", logits.shape).detach()
    keep = like > -INF
    checks.equal(got > -INF, keep, f"{what}: kept tokens (True) vs {against}")
    checks.close(got, like, f"{what}: kept values vs {against}", where=keep)


def filter_many(kernel, cases, what) -> None:
    """Each case is (logits, kwargs) or (logits, kwargs, keep): one round trip for all."""
    f = kernel.get(FILTER)
    answers = kernel.many(f, [((c[0],), c[1]) for c in cases])
    for case, got in zip(cases, answers, strict=True):
        keep = case[2] if len(case) > 2 else None
        label = f"{what}: filter_logits(x, {describe(case[1])})"
        filtered(got, case[0], case[1], label, keep)


def rows_alone(kernel, x, kwargs) -> torch.Tensor:
    """The candidate's filter_logits of each row of `x` called alone (1-D, contiguous, in
    `x`'s dtype unless told), put back in `x`'s shape."""
    flat = x.reshape(-1, x.shape[-1])
    answers = kernel.many(kernel.get(FILTER), [((row.clone(),), kwargs) for row in flat])
    what = f"filter_logits(one row, {describe(kwargs)})"
    rows = [checks.tensor(a, what, (x.shape[-1],)).detach() for a in answers]
    return torch.stack(rows).reshape(x.shape)


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


def own_filter(kernel, cases) -> list:
    """The candidate's filter_logits for each (logits, noise, kwargs) that samples (None
    for greedy ones, and for all when filter_logits raises): the sampler is compared with
    it, so a wrong filter loses points at the filter's levels, not at the sampler's."""
    sampled = [(x, kw) for x, _, kw in cases if kw.get("temperature", 1.0) != 0]
    try:
        answers = kernel.many(kernel.get(FILTER), [((x,), kw) for x, kw in sampled])
    except CandidateRaised:
        return [None] * len(cases)
    found = iter(answers)
    own: list[torch.Tensor | None] = []
    for x, _, kwargs in cases:
        if kwargs.get("temperature", 1.0) == 0:
            own.append(None)
            continue
        got = next(found)
        usable = (isinstance(got, torch.Tensor) and got.shape == x.shape
                  and got.dtype == x.dtype and not bool((got.isnan() | (got == INF)).any()))  # fmt: skip
        own.append(got.detach() if usable else None)
    return own


def sample_many(kernel, cases, what) -> None:
    """Each case is (logits, noise, kwargs): one round trip for all. The ids must be
    argmax(filter_logits(x, **kwargs) + noise) with the candidate's own filter_logits (the
    reference's where that is not usable); a drawn token the filter removes is named as such
    before the ids are compared."""
    f = kernel.get(SAMPLE)
    answers = kernel.many(f, [((c[0], c[1]), c[2]) for c in cases])
    for (x, noise, kwargs), own, got in zip(cases, own_filter(kernel, cases), answers, strict=True):
        label = f"{what}: sample(x, gumbel, {describe(kwargs)})"
        if own is None:
            want = draw(x, noise, kwargs)
            keep = Ref(x, **kwargs).keep if kwargs.get("temperature", 1.0) != 0 else None
        else:
            ref = Ref(x, **kwargs)
            tol = checks.tolerance(x.dtype)
            same = torch.equal(own > -INF, ref.keep) and bool(
                (checks.tolerance_ratio(own, ref.scores, tol).masked_fill(~ref.keep, 0) <= 1).all()
            )
            want = draw(x, noise, kwargs) if same else (own + noise.to(x.dtype)).argmax(dim=-1)
            keep = own > -INF
            label += "" if same else " (with your filter_logits' answer)"
        got = checks.integers(got, label, want.shape)
        if keep is not None and bool(((got >= 0) & (got < x.shape[-1])).all()):
            # a row the filter empties is the filter's bug: any draw is the sampler's right
            keep = keep | ~keep.any(dim=-1, keepdim=True)
            drawn = keep.gather(-1, got.long().unsqueeze(-1)).squeeze(-1)
            if not bool(drawn.all()):
                row = tuple(int(i) for i in torch.nonzero(~drawn)[0]) if got.dim() else ()
                where = f" in row {list(row)}" if row else ""
                raise checks.Failed(f"{label}: drew token {int(got[row])}{where}, which the "
                                    "filter removes")  # fmt: skip
        ids(got, want, label)


def unchanged(kernel, function, tensors, kwargs, what) -> None:
    """function(*tensors, **kwargs) on copies held in the kernel leaves each as it was."""
    held = [kernel.hold(t.clone(), name) for name, t in tensors]
    kernel.get(function)(*held, **kwargs)
    call = f"{function}({', '.join(name for name, _ in tensors)}, {describe(kwargs)})"
    for (name, original), remote in zip(tensors, held, strict=True):
        checks.equal(kernel.attribute(remote, "data"), original, f"{name} after {call}")


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
    unchanged(kernel, FILTER, [("x", distinct(2, 6, seed=4))], options(temperature=0.5), "")


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
def top_k_leaves_its_input_unchanged(kernel):
    """filter_logits(x, top_k=3) does not modify x in place."""
    unchanged(kernel, FILTER, [("x", distinct(6, seed=8))], options(top_k=3), "")


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


@exercise.check("top-p")
def top_p_leaves_its_input_unchanged(kernel):
    """filter_logits(x, top_p=0.7) does not modify x in place."""
    unchanged(kernel, FILTER, [("x", distinct(6, seed=9))], options(top_p=0.7), "")


# ---------------------------------------------------------------- composition
# Integration: these tests combine the steps on purpose (their order is the point).


def differs_in_order(x, kwargs: dict, without: str) -> None:
    """Suite guard: the pinned order keeps another set than top-p computed without the
    step named `without` ("temperature" or "top_k") and intersected with the rest."""
    unscaled = {k: v for k, v in kwargs.items() if k != without}
    others = {k: v for k, v in kwargs.items() if k != "top_p"}
    wrong = Ref(x, **unscaled).keep & Ref(x, **others).keep
    assert not torch.equal(Ref(x, **kwargs).keep, wrong), "suite: no contrast"


@exercise.check("composition")
def top_k_with_temperature(kernel):
    """Integration: temperature = 0.5 with top_k = 3: the 3 largest, each logit / 0.5."""
    x = distinct(9, seed=7)
    filter_many(kernel, [(x, options(temperature=0.5, top_k=3))], "temperature and top-k")


@exercise.check("composition", points=2)
def temperature_before_top_p(kernel):
    """Integration: top-p sees the temperature-scaled probabilities (temperature 0.5 and 2)."""
    x = distinct(12, seed=20, scale=1.5)
    cases = [(x, options(temperature=0.5, top_p=0.7)), (x, options(temperature=2.0, top_p=0.5))]
    for _, kwargs in cases:
        differs_in_order(x, kwargs, "temperature")
    filter_many(kernel, cases, "temperature then top-p")


@exercise.check("composition", points=2)
def top_k_before_top_p(kernel):
    """Integration: top-p sees the distribution renormalised over the tokens top-k kept.

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
    """Integration: temperature = 0.7, top_k = 12, top_p = 0.85 on a row of 30."""
    x = distinct(30, seed=22, scale=2.0)
    filter_many(kernel, [(x, options(temperature=0.7, top_k=12, top_p=0.85))], "all three")


# ---------------------------------------------------------------- batched
# A batch is compared with its rows filtered alone (the candidate's own answers), one
# option at a time: the options' values are their own levels' business.

SCALES = torch.tensor([[1.0], [4.0], [0.3], [2.0]])
OFFSETS = torch.tensor([[0.0], [-5.0], [3.0], [1.0]])
EACH = (options(temperature=0.8), options(top_k=5), options(top_p=0.75))


def rows(seed: int) -> torch.Tensor:
    """(4, 12) logits whose rows have different scales and offsets."""
    return distinct(4, 12, seed=seed) * SCALES + OFFSETS


def batch_agrees(kernel, cases, what) -> None:
    """Each (logits, kwargs): filter_logits of the batch keeps, row by row, what it keeps of
    each row alone."""
    answers = kernel.many(kernel.get(FILTER), [((x,), kwargs) for x, kwargs in cases])
    for (x, kwargs), got in zip(cases, answers, strict=True):
        # suite guard: rows away from a top-p boundary, so that no rounding of the batch's
        # sums against a row's own can change what is kept
        assert Ref(x, **kwargs).margin > 1e-4, f"suite: {what} is near a top-p boundary"
        label = f"{what}: filter_logits(x {tuple(x.shape)}, {describe(kwargs)})"
        agrees(got, rows_alone(kernel, x, kwargs), x, label, "each row filtered alone")


@exercise.check("batched", points=2)
def top_k_per_row(kernel):
    """(4, 12) logits, rows at different scales: top_k = 3 row by row."""
    batch_agrees(kernel, [(rows(30), options(top_k=3))], "top-k, batched")


@exercise.check("batched", points=2)
def top_p_per_row(kernel):
    """(4, 12) logits, rows at different scales: top_p = 0.7 row by row."""
    batch_agrees(kernel, [(rows(31), options(top_p=0.7))], "top-p, batched")


@exercise.check("batched")
def leading_axes_and_layouts(kernel):
    """(2, 3, 16) logits, a non-contiguous (2, 3, 16) layout and (1, 12), with temperature
    0.8, top_k 5 and top_p 0.75 each alone: each row as it is filtered alone."""
    cases = []
    for kwargs in EACH:
        cases += [(distinct(2, 3, 16, seed=32, scale=2.0), kwargs),
                  (lib.noncontiguous(distinct(2, 3, 16, seed=33, scale=2.0)), kwargs),
                  (rows(34)[:1].clone(), kwargs)]  # fmt: skip
    batch_agrees(kernel, cases, "batched")


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
def draws_with_each_option(kernel):
    """Four rows of 16 logits, noise given: temperature 0.7, top_k 4 and top_p 0.6, each
    alone: the ids are argmax(filter_logits(x, option) + gumbel)."""
    x, noise = distinct(4, 16, seed=44, scale=2.0), gumbel(4, 16, seed=45)
    kwargs = (options(temperature=0.7), options(top_k=4), options(top_p=0.6))
    sample_many(kernel, [(x[r], noise[r], kw) for kw in kwargs for r in range(4)], "sample")


@exercise.check("sampler", points=2)
def never_draws_a_removed_token(kernel):
    """Noise of +50 on every token the filter removes (top_k 6, then top_p 0.8, each alone,
    four rows of 16): still a kept token is drawn."""
    x = distinct(4, 16, seed=47, scale=2.0)
    cases = []
    for kwargs in (options(top_k=6), options(top_p=0.8)):
        noise = gumbel(4, 16, seed=48).masked_fill(~Ref(x, **kwargs).keep, 50.0)
        cases += [(x[r], noise[r], kwargs) for r in range(4)]
    sample_many(kernel, cases, "sample with large noise on removed tokens")


@exercise.check("sampler")
def never_draws_a_minus_inf_logit(kernel):
    """Logits already -inf (5 of 10) are never drawn, even with noise +50 on them."""
    x = distinct(10, seed=60)
    x[[1, 4, 5, 7, 8]] = -INF
    noise = gumbel(10, seed=61).masked_fill(x == -INF, 50.0)
    sample_many(kernel, [(x, noise, {})], "with -inf logits")


@exercise.check("sampler")
def zero_temperature_is_greedy(kernel):
    """temperature = 0 returns argmax(logits), whatever the noise."""
    x = distinct(5, 9, seed=49)
    noise = gumbel(5, 9, seed=50) * 10
    sample_many(kernel, [(x, noise, options(temperature=0.0))], "greedy")


@exercise.check("sampler")
def greedy_with_filters_given(kernel):
    """temperature = 0 with top_k = 1 and top_p = 0.5 given: still argmax(logits), the
    noise ignored (the filters keep the most probable token anyway)."""
    x = distinct(5, 9, seed=55)
    noise = gumbel(5, 9, seed=56) * 10
    sample_many(kernel, [(x, noise, options(temperature=0.0, top_k=1, top_p=0.5))], "greedy")


@exercise.check("sampler")
def sample_rejects_negative_temperature(kernel):
    """sample raises ValueError for temperature -1."""
    x, f = distinct(6, seed=51), kernel.get(SAMPLE)
    noise = gumbel(6, seed=52)
    call = lambda: f(x, noise, temperature=-1.0)  # noqa: E731
    lib.raises(call, (), "ValueError", "sample(x, gumbel, temperature=-1.0)")


@exercise.check("sampler")
def sample_leaves_its_inputs_unchanged(kernel):
    """sample(x, gumbel) and sample(x, gumbel, temperature=0) modify neither x nor gumbel."""
    x, noise = distinct(3, 8, seed=53), gumbel(3, 8, seed=54)
    for kwargs in ({}, options(temperature=0.0)):
        unchanged(kernel, SAMPLE, [("x", x), ("gumbel", noise)], kwargs, "")


# ---------------------------------------------------------------- edge cases
# One option at a time, and compared with the candidate's own answers where the option's
# values are not the point (dtypes, large logits, -inf logits).


@exercise.check("edge cases")
def existing_minus_inf_logits(kernel):
    """Logits already -inf stay removed: 5 finite of 10, with top_k = 7 or top_p = 0.9.

    top_k = 7 keeps the 5 finite ones; top_p keeps what it keeps of the 5 finite logits
    alone."""
    x = distinct(10, seed=60)
    gone = torch.zeros(10, dtype=torch.bool)
    gone[[1, 4, 5, 7, 8]] = True
    x[gone] = -INF
    filter_many(kernel, [(x, options(top_k=7), ~gone)], "with -inf logits")
    kwargs = options(top_p=0.9)
    got = kernel.get(FILTER)(x, **kwargs)
    alone = checks.tensor(kernel.get(FILTER)(x[~gone].clone(), **kwargs), "", (5,)).detach()
    like = torch.full_like(x, -INF).masked_scatter(~gone, alone)
    agrees(got, like, x, "with -inf logits: filter_logits(x, top_p=0.9)",
           "the 5 finite logits filtered alone")  # fmt: skip


@exercise.check("edge cases")
def min_tokens_to_keep_with_top_k(kernel):
    """top_k = 1 with min_tokens_to_keep = 3 keeps what top_k = 3 keeps (k = max of the two)."""
    x = distinct(10, seed=62)
    f = kernel.get(FILTER)
    got, like = kernel.many(f, [((x,), options(top_k=1, min_tokens_to_keep=3)),
                                ((x,), options(top_k=3))])  # fmt: skip
    agrees(got, like, x, "filter_logits(x, top_k=1, min_tokens_to_keep=3)",
           "filter_logits(x, top_k=3)")  # fmt: skip


@exercise.check("edge cases")
def min_tokens_to_keep_with_top_p(kernel):
    """top_p = 0.3 with min_tokens_to_keep = 2 and 3 keeps 2 and 3 tokens (dyadic row)."""
    x = dyadic_logits()
    cases = [(x, options(top_p=0.3, min_tokens_to_keep=m), kept_dyadic(m)) for m in (2, 3)]
    filter_many(kernel, cases, "min_tokens_to_keep")


@exercise.check("edge cases")
def float16_and_float64(kernel):
    """A float16 and a float64 row, temperature 0.7, top_k 8 and top_p 0.8 each alone: the
    input's dtype comes back, keeping what the same row in float32 keeps."""
    cases = []
    for dtype in (F16, F64):
        for kwargs in (options(temperature=0.7), options(top_k=8), options(top_p=0.8)):
            x = distinct(16, seed=68, scale=2.0, dtype=dtype)
            native = Ref(x, **kwargs, dtype=dtype)  # away from a float16 boundary
            assert native.margin > 1e-2 and torch.equal(native.keep, Ref(x, **kwargs).keep)
            cases.append((x, kwargs))
    f = kernel.get(FILTER)
    answers = kernel.many(f, [((x,), kw) for x, kw in cases])
    plain = kernel.many(f, [((x.float(),), kw) for x, kw in cases])
    for (x, kwargs), got, like in zip(cases, answers, plain, strict=True):
        like = checks.tensor(like, "filter_logits(x float32)", x.shape).detach()
        what = f"filter_logits(x {str(x.dtype).replace('torch.', '')}, {describe(kwargs)})"
        agrees(got, like, x, what, "the same row in float32")  # at the less precise dtype


@exercise.check("edge cases")
def float64_logits_keep_their_precision(kernel):
    """float64 logits near 1e4 that differ by 1e-5 (float32 cannot tell them apart): top_k = 3
    keeps the 3 largest alone, with their values."""
    order = torch.tensor([5.0, 2.0, 7.0, 0.0, 3.0, 6.0, 1.0, 4.0], dtype=F64)
    x = 1e4 + order * 1e-5
    keep = order >= 5
    what = "float64 logits 1e4 + [0..7] * 1e-5: filter_logits(x, top_k=3)"
    got = answer(kernel.get(FILTER)(x, top_k=3), x, what)
    checks.equal(got > -INF, keep, f"{what}: which tokens are kept (True) or set to -inf (False)")
    checks.close(got, x, f"{what}: kept values vs the logits", where=keep)


@exercise.check("edge cases")
def large_logits(kernel):
    """Logits near 1e4 (spread about 3), top_p = 0.9: the same tokens as the logits less 1e4
    (a stable softmax), finite."""
    base = distinct(4, 12, seed=64, scale=3.0)
    x = base + 1e4
    kwargs = options(top_p=0.9)
    got, like = kernel.many(kernel.get(FILTER), [((x,), kwargs), ((base,), kwargs)])
    like = checks.tensor(like, "filter_logits(x - 1e4, top_p=0.9)", x.shape).detach()
    what = "logits near 1e4: filter_logits(x, top_p=0.9)"
    got = answer(got, x, what)
    keep = like > -INF
    checks.equal(got > -INF, keep, f"{what}: kept tokens (True) vs the logits less 1e4")
    checks.close(got, x, f"{what}: kept values vs the logits", where=keep)


# ---------------------------------------------------------------- from scratch


@exercise.check("from scratch", points=2)
def no_builtin_sampler(kernel):
    """No torch sampler in the source; no sampler or random number generator runs."""
    x = distinct(3, 10, seed=70)
    noise = gumbel(3, 10, seed=71)

    def run():  # the simplest calls: the hidden tests' calls were all watched already
        kernel.get(FILTER)(x)
        kernel.get(SAMPLE)(x, noise)

    lib.no_builtin(kernel, exercise, run)
