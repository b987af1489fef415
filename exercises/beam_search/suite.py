"""Hidden suite for `beam_search`: beam search over a given step function, with EOS, a length
penalty (`sum / L ** length_penalty`, L counting the EOS) and n-best output, pinned to the rule
the statement spells out (expand every live hypothesis by every token, order by raw sum with
ties to the earlier parent then the lower id, walk: EOS candidates finish, others live until
`beam_width` are live; the live ones are finished as they are after `max_new_tokens` steps).

The step function is the notebook's given `TableLM` (log-probabilities looked up by prefix,
uniform for a prefix its table lacks), built in the kernel from a table the suite sends; the
reference (`search`) runs the same rule here on the same table, in Python floats, adding the
log-probabilities in the order a candidate does, so sums and ties are exact.

One bug, one place. The levels before "length penalty" compare token lists only, on models
whose best hypothesis is the same under every length penalty a candidate might write (HF's,
GNMT's, a product, L without the EOS, the raw sum: `Model.robust`), so a penalty bug loses
points at the penalty level and not at greedy, search or EOS. Random models keep every
decision away from a tie (`Model.clear`); the tie tests use dyadic rows, whose sums are exact.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable

import torch

from grader.exercises import _randomness as rnd
from grader.suite import checks
from grader.suite import library as lib
from grader.suite.exercise import Exercise
from grader.suite.handle import Remote

FUNCTION, MODEL = "beam_search", "TableLM"
F64 = torch.float64


exercise = Exercise(
    id="beam_search",
    tags=("decoding", "inference"),
    minutes=35,
    title="Beam search with EOS, a length penalty and n-best output",
    seed="-",
    levels=[
        "api",
        "greedy",
        "search",
        "eos",
        "length penalty",
        "n-best",
        "edge cases",
        "from scratch",
    ],
    defines=(FUNCTION,),
    forbidden=rnd.SAMPLERS,
    watch=rnd.watch(instrument=("torch.distributions.categorical:Categorical.sample",)),
)

Tokens = tuple[int, ...]
Answer = list[tuple[list[int], float]]


# ---------------------------------------------------------------- models and the reference


class Model:
    """A table model on the suite's side: `table` maps a prefix to V log-probabilities; a
    prefix it lacks gets the uniform row (as the notebook's TableLM does)."""

    def __init__(self, table: dict[Tokens, list[float]], eos: int) -> None:
        self.table = {tuple(k): [float(x) for x in v] for k, v in table.items()}
        self.vocab = len(next(iter(self.table.values())))
        self.eos = eos
        self.uniform = [-math.log(self.vocab)] * self.vocab

    def row(self, prefix: Tokens) -> list[float]:
        return self.table.get(tuple(prefix), self.uniform)

    def remote(self, kernel, noncontiguous: bool = False) -> Remote:
        """The model as the notebook's TableLM, in the kernel."""
        if noncontiguous:
            return kernel.new(MODEL, self.table, noncontiguous=True)
        return kernel.new(MODEL, self.table)


def random_model(vocab: int, depth: int, eos: int, seed: int, scale: float = 1.5,
                 eos_shift: float = -12.0, boosts: dict[Tokens, float] | None = None) -> Model:  # fmt: skip
    """Random log-probabilities for every prefix without EOS shorter than `depth`: logits
    N(0, scale) with `eos_shift` added to EOS's (-12: EOS never competes) and `boosts`
    added to EOS's after the prefixes named there."""
    g = torch.Generator().manual_seed(seed)
    table = {}
    for length in range(depth):
        for prefix in itertools.product([t for t in range(vocab) if t != eos], repeat=length):
            logits = torch.randn(vocab, generator=g, dtype=F64) * scale
            logits[eos] += eos_shift + (boosts or {}).get(prefix, 0.0)
            table[prefix] = torch.log_softmax(logits, dim=0).tolist()
    return Model(table, eos)


def hf(tokens: Tokens, total: float, alpha: float, eos: int) -> float:
    """The pinned score: sum / L ** alpha, L counting the EOS."""
    return total / len(tokens) ** alpha


# Penalties a candidate might write instead of the pinned one, each at length_penalty 1: the
# early levels' models give the same best hypothesis under each of them (`robust`)
OTHER_PENALTIES: dict[str, Callable[[Tokens, float, float, int], float]] = {
    "gnmt": lambda t, s, a, eos: s / ((5 + len(t)) / 6) ** a,
    "product": lambda t, s, a, eos: s * len(t) ** a,
    "without eos": lambda t, s, a, eos: s / max(len(t) - (t[-1] == eos), 1) ** a,
    "raw sum": lambda t, s, a, eos: s,
}


class Search:
    """The pinned rule on a Model: `pool` (every finished (tokens, sum), in the order they
    finished), `prefixes` (every prefix extended) and `risky`: the smallest gap between two
    neighbours in a walked part of the order that rounding could reorder (two sums within
    1e-9, or tied exactly across two parents: a candidate adding in another order may
    break such a tie).
    """

    def __init__(self, model: Model, width: int, steps: int) -> None:
        alive: list[tuple[Tokens, float]] = [((), 0.0)]
        self.pool: list[tuple[Tokens, float]] = []
        self.prefixes: list[Tokens] = []
        self.risky = math.inf
        for _ in range(steps):
            if not alive:
                break
            candidates = []
            for beam, (tokens, total) in enumerate(alive):
                self.prefixes.append(tokens)
                for token, lp in enumerate(model.row(tokens)):
                    candidates.append((total + lp, beam, token))
            candidates.sort(key=lambda c: (-c[0], c[1], c[2]))
            kept = []
            for rank, (total, beam, token) in enumerate(candidates):
                if rank + 1 < len(candidates):
                    gap, other = total - candidates[rank + 1][0], candidates[rank + 1][1]
                    if 0 < gap <= 1e-9 or (gap == 0 and other != beam):
                        self.risky = min(self.risky, gap)
                hypothesis = (alive[beam][0] + (token,), total)
                if token == model.eos:
                    self.pool.append(hypothesis)
                else:
                    kept.append(hypothesis)
                    if len(kept) == width:
                        break
            alive = kept
        self.pool += alive
        self.eos = model.eos

    def ranked(self, alpha: float = 1.0, penalty=hf) -> list[tuple[Tokens, float]]:
        """The pool as (tokens, score), best first (ties: shorter, then lexicographic)."""
        scored = [(t, penalty(t, s, alpha, self.eos)) for t, s in self.pool]
        return sorted(scored, key=lambda h: (-h[1], len(h[0]), h[0]))

    def answer(self, alpha: float = 1.0, n_best: int = 1) -> Answer:
        return [(list(t), s) for t, s in self.ranked(alpha)[:n_best]]


def enumerate_all(model: Model, steps: int, alpha: float) -> list[tuple[Tokens, float]]:
    """Every hypothesis (EOS-ended, or `steps` long without EOS) by score, best first."""
    found: list[tuple[Tokens, float]] = []
    frontier: list[tuple[Tokens, float]] = [((), 0.0)]
    for step in range(steps):
        nxt: list[tuple[Tokens, float]] = []
        for tokens, total in frontier:
            for token, lp in enumerate(model.row(tokens)):
                item = (tokens + (token,), total + lp)
                (found if token == model.eos or step == steps - 1 else nxt).append(item)
        frontier = nxt
    scored = [(t, hf(t, s, alpha, model.eos)) for t, s in found]
    return sorted(scored, key=lambda h: (-h[1], len(h[0]), h[0]))


def clear(search: Search, alpha: float = 1.0, n_best: int = 1) -> None:
    """Suite guard: no two walked candidates (`Search.risky`), and none of the n_best + 1
    best finished hypotheses, are near-tied (rounding cannot reorder them)."""
    assert search.risky == math.inf, f"suite: two candidates' sums {search.risky:.1e} apart"
    scores = [s for _, s in search.ranked(alpha)[: n_best + 1]]
    assert not any(0 < a - b <= 1e-9 for a, b in itertools.pairwise(scores)), "suite: near-ties"


def robust(search: Search) -> None:
    """Suite guard: the best hypothesis is the same under every other penalty at
    length_penalty 1, so a test of another feature does not fail a penalty bug."""
    best = search.ranked()[0][0]
    for name, penalty in OTHER_PENALTIES.items():
        other = search.ranked(1.0, penalty)[0][0]
        assert other == best, f"suite: the {name} penalty picks {other}, not {best}"


# ---------------------------------------------------------------- the candidate's answers


def token_list(value, what: str) -> list[int]:
    """A list of ints from a list or tuple of ints or a 1-D integer tensor."""
    if isinstance(value, torch.Tensor) and value.dim() == 1 and not value.is_floating_point():
        return [int(t) for t in value.tolist()]
    if isinstance(value, (list, tuple)) and all(
        isinstance(t, int) and not isinstance(t, bool) for t in value
    ):
        return list(value)
    raise checks.Interface(f"{what}: got {checks.describe(value)}, want a list of token ids")


def number(value, what: str) -> float:
    """A float from a Python number or a one-element floating tensor."""
    if isinstance(value, float) or (isinstance(value, int) and not isinstance(value, bool)):
        try:
            return float(value)
        except OverflowError:
            raise checks.Interface(f"{what}: got an int too large for a float") from None
    if isinstance(value, torch.Tensor) and value.numel() == 1 and value.is_floating_point():
        return float(value.item())
    raise checks.Interface(f"{what}: got {checks.describe(value)}, want a float")


def hypotheses(value, what: str) -> Answer:
    """beam_search's answer as a list of (tokens, score)."""
    if not isinstance(value, (list, tuple)):
        raise checks.Interface(f"{what}: got {checks.describe(value)}, want a list of pairs")
    found = []
    for i, item in enumerate(value):
        tokens, score = checks.pair(item, f"{what}[{i}]", ("tokens", "score"))
        found.append((token_list(tokens, f"{what}[{i}][0]"), number(score, f"{what}[{i}][1]")))
    return found


def describe(kwargs: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in kwargs.items())


def run(kernel, model: Model, what: str, noncontiguous: bool = False, **kwargs) -> Answer:
    """beam_search(TableLM(model), **kwargs) in the kernel, parsed."""
    lm = model.remote(kernel, noncontiguous)
    got = kernel.get(FUNCTION)(lm, **kwargs)
    return hypotheses(got, f"{what}: beam_search(lm, {describe(kwargs)})")


def options(eos: int, width: int, steps: int, alpha: float | None = None,
            n_best: int | None = None) -> dict:  # fmt: skip
    kwargs: dict[str, float] = {"eos_id": eos, "beam_width": width, "max_new_tokens": steps}
    if alpha is not None:
        kwargs["length_penalty"] = alpha
    if n_best is not None:
        kwargs["n_best"] = n_best
    return kwargs


def same_tokens(got: Answer, want: Answer, what: str) -> None:
    checks.data([t for t, _ in got], [t for t, _ in want], f"{what}: token lists")


def same_answer(got: Answer, want: Answer, what: str) -> None:
    """The same token lists, in order, and the same scores (float64 tolerance)."""
    same_tokens(got, want, what)
    checks.close(torch.tensor([s for _, s in got], dtype=F64),
                 torch.tensor([s for _, s in want], dtype=F64), f"{what}: scores")  # fmt: skip


def best_tokens(kernel, model: Model, what: str, **kwargs) -> None:
    """The best hypothesis's tokens (n_best = 1) are the pinned rule's, on a model whose best
    does not depend on the penalty."""
    search = Search(model, kwargs["beam_width"], kwargs["max_new_tokens"])
    clear(search)
    robust(search)
    got = run(kernel, model, what, **kwargs)
    same_tokens(got, search.answer(), what)


def full_answer(kernel, model: Model, what: str, **kwargs) -> None:
    """Tokens and scores of every hypothesis returned, against the pinned rule (on a model
    with no near-ties)."""
    search = Search(model, kwargs["beam_width"], kwargs["max_new_tokens"])
    alpha, n_best = kwargs.get("length_penalty", 1.0), kwargs.get("n_best", 1)
    clear(search, alpha, n_best)
    same_answer(run(kernel, model, what, **kwargs), search.answer(alpha, n_best), what)


def finished_pool(kernel, model: Model, what: str, **kwargs) -> None:
    """With n_best above the pool's size, the answer holds exactly the pinned rule's
    finished hypotheses (compared in sorted order: which finished, not how they rank)."""
    search = Search(model, kwargs["beam_width"], kwargs["max_new_tokens"])
    assert kwargs["n_best"] > len(search.pool), "suite: n_best within the pool"
    got = run(kernel, model, what, **kwargs)
    checks.data(sorted(t for t, _ in got), sorted(list(t) for t, _ in search.pool),
                f"{what}: the finished hypotheses' token lists, sorted")  # fmt: skip


def recorded(value, what: str) -> list[list[list[int]]]:
    """TableLM's record of its calls: a list (per call) of lists of prefixes."""
    if not isinstance(value, list) or not all(
        isinstance(call, list) and all(isinstance(p, list) for p in call) for call in value
    ):
        raise checks.Interface(f"{what}: got {checks.describe(value)}, want a list of calls")
    return [[token_list(p, what) for p in call] for call in value]


def greedy_path(model: Model, steps: int) -> list[int]:
    tokens: Tokens = ()
    for _ in range(steps):
        row = model.row(tokens)
        tokens += (max(range(model.vocab), key=lambda t: (row[t], -t)),)
        if tokens[-1] == model.eos:
            break
    return list(tokens)


def log(probs: dict[Tokens, list[float]]) -> dict[Tokens, list[float]]:
    return {k: [math.log(p) for p in v] for k, v in probs.items()}


# The garden path (after EXERCISES_CANON.md, section 6): EOS is token 0; greedy takes a (1)
# and ends [a, EOS] (0.5 * 0.68); two beams find [b, EOS] (0.39 * 0.9). Uniform after every
# other prefix.
GARDEN = Model(log({(): [0.01, 0.5, 0.39, 0.10], (1,): [0.68, 0.14, 0.10, 0.08],
                    (2,): [0.9, 0.04, 0.03, 0.03]}), eos=0)  # fmt: skip


# ---------------------------------------------------------------- api


@exercise.check("api", hidden=False)
def returns_a_list_of_pairs(kernel):
    """The garden-path model, beam_width 2: a list of one (list of ints, float) pair."""
    kwargs = options(0, 2, 3)
    got = kernel.get(FUNCTION)(GARDEN.remote(kernel), **kwargs)
    what = f"beam_search(lm, {describe(kwargs)})"
    if not isinstance(got, list) or len(got) != 1:
        raise checks.Failed(f"{what}: got {checks.describe(got)}, want a list of 1 pair")
    tokens, score = checks.pair(got[0], f"{what}[0]", ("tokens", "score"))
    if not isinstance(tokens, list) or not all(type(t) is int for t in tokens):
        raise checks.Failed(f"{what}[0][0]: got {checks.describe(tokens)}, want a list of ints")
    if type(score) is not float:
        raise checks.Failed(f"{what}[0][1]: got {checks.describe(score)}, want a float")


@exercise.check("api")
def runs_max_new_tokens_steps(kernel):
    """Without a likely EOS the answer has max_new_tokens = 1, 3, 5 tokens, all in [0, V)."""
    model = random_model(5, 5, eos=4, seed=1)
    for steps in (1, 3, 5):
        kwargs = options(4, 2, steps)
        got = run(kernel, model, "no likely EOS", **kwargs)
        what = f"beam_search(lm, {describe(kwargs)})"
        assert got, f"{what}: an empty list, want 1 pair"
        tokens = got[0][0]
        what += f"[0] tokens {tokens}"
        assert len(tokens) == steps, f"{what}: {len(tokens)} tokens, want {steps}"
        assert all(0 <= t < 5 for t in tokens), f"{what}: a token outside [0, 5)"


@exercise.check("api")
def prefixes_left_unchanged(kernel):
    """The lists passed to step_fn are not modified afterwards (beam_width 1 and 3)."""
    model = random_model(5, 4, eos=0, seed=2)
    for width in (1, 3):
        lm = model.remote(kernel)
        kernel.get(FUNCTION)(lm, **options(0, width, 4))
        then = recorded(kernel.attribute(lm, "calls"), "TableLM.calls")
        now = recorded(lm.prefixes_now(), "TableLM.prefixes_now()")
        checks.data(now, then, f"beam_width={width}: the prefixes passed to step_fn, after the "
                               "search (calls[i][j]: call i, prefix j)")  # fmt: skip


# ---------------------------------------------------------------- greedy


@exercise.check("greedy", points=2, hidden=False)
def width_one_is_greedy(kernel):
    """beam_width = 1 follows the most probable token at each step (three random models)."""
    for seed, eos in ((3, 0), (4, 4), (5, 2)):
        model = random_model(5, 4, eos=eos, seed=seed)
        kwargs = options(eos, 1, 4)
        got = run(kernel, model, "greedy", **kwargs)
        checks.data([t for t, _ in got], [greedy_path(model, 4)], "greedy: token lists")


@exercise.check("greedy")
def greedy_ends_at_eos(kernel):
    """beam_width = 1 on the garden path ends [a, EOS] = [1, 0]; on a random model whose most
    probable third token is EOS, the greedy path ends there."""
    best_tokens(kernel, GARDEN, "garden path", **options(0, 1, 3))
    boosts = {prefix: 20.0 for prefix in itertools.product([0, 1, 2, 4], repeat=2)}
    model = random_model(5, 5, eos=3, seed=6, boosts=boosts)
    assert len(greedy_path(model, 5)) == 3
    best_tokens(kernel, model, "greedy to EOS", **options(3, 1, 5))


# ---------------------------------------------------------------- search


@exercise.check("search", points=2, hidden=False)
def garden_path_needs_two_beams(kernel):
    """beam_width = 2 on the garden path finds [b, EOS] = [2, 0], which greedy misses."""
    best_tokens(kernel, GARDEN, "garden path", **options(0, 2, 3))


@exercise.check("search", points=2)
def three_beams_on_a_random_model(kernel):
    """beam_width = 3, V = 6, 4 steps, EOS unlikely: the pinned rule's best, which is neither
    greedy's nor the exhaustive search's."""
    model = random_model(6, 4, eos=5, seed=52)
    search = Search(model, 3, 4)
    best = search.answer()[0][0]
    assert best != greedy_path(model, 4) and best != list(enumerate_all(model, 4, 1.0)[0][0])
    assert best != Search(model, 2, 4).answer()[0][0]
    best_tokens(kernel, model, "three beams", **options(5, 3, 4))


@exercise.check("search")
def exhaustive_width_finds_the_best(kernel):
    """A beam as wide as every prefix (V = 4, 3 steps, width 27) finds the best sequence."""
    model = random_model(4, 3, eos=0, seed=8)
    search = Search(model, 27, 3)
    assert search.answer()[0][0] == list(enumerate_all(model, 3, 1.0)[0][0])
    best_tokens(kernel, model, "exhaustive", **options(0, 27, 3))


# ---------------------------------------------------------------- eos
# EOS models: EOS likely after some prefixes (boosts), never at the first step (a
# one-token [EOS] would divide by zero under a penalty that leaves the EOS out of L).


def eos_model(seed: int, eos: int = 1) -> Model:
    boosts = {prefix: 10.0 for prefix in itertools.product(range(5), repeat=2) if eos not in prefix}
    return random_model(5, 5, eos=eos, seed=seed, eos_shift=-3.0, boosts=boosts)


@exercise.check("eos", points=2)
def finished_hypotheses_are_not_extended(kernel):
    """With EOS likely from the third step (beam_width 3), step_fn never sees a prefix
    holding eos_id."""
    model = eos_model(9)
    lm = model.remote(kernel)
    kernel.get(FUNCTION)(lm, **options(1, 3, 5))
    calls = recorded(kernel.attribute(lm, "calls"), "TableLM.calls")
    for i, call in enumerate(calls):
        for j, prefix in enumerate(call):
            assert 1 not in prefix, f"step_fn call {i} got prefix {j} = {prefix}, holding EOS (1)"


@exercise.check("eos", points=2)
def eos_ends_the_best_hypothesis(kernel):
    """beam_width 3, EOS likely from the third step: the best hypothesis ends at its EOS."""
    model = eos_model(10)
    search = Search(model, 3, 5)
    assert search.answer()[0][0][-1] == 1
    best_tokens(kernel, model, "EOS", **options(1, 3, 5))


@exercise.check("eos")
def beams_go_on_after_an_eos(kernel):
    """An EOS ranked second at step 2 finishes [1, EOS]; the beams go on, and the best,
    [0, 1, 0, EOS], finishes at step 4 (beam_width 2, EOS = 2)."""
    model = Model(log({(): [0.55, 0.3, 0.02, 0.08, 0.05], (0,): [0.03, 0.9, 0.01, 0.03, 0.03],
                       (1,): [0.1, 0.1, 0.6, 0.1, 0.1], (0, 1): [0.95, 0.02, 0.01, 0.01, 0.01],
                       (0, 1, 0): [0.005, 0.005, 0.98, 0.005, 0.005]}), eos=2)  # fmt: skip
    search = Search(model, 2, 4)
    assert search.pool[0][0] == (1, 2) and search.answer()[0][0] == [0, 1, 0, 2]
    best_tokens(kernel, model, "after an EOS", **options(2, 2, 4))


# ---------------------------------------------------------------- length penalty


def penalty_model(seed: int) -> Model:
    """EOS likely enough that hypotheses of every length compete."""
    return random_model(5, 5, eos=0, seed=seed, eos_shift=-1.0)


@exercise.check("length penalty", points=2, hidden=False)
def scores_are_mean_log_probs(kernel):
    """The default length_penalty 1: the score is sum / L (three random models, n_best 1)."""
    for seed in (12, 13, 14):
        full_answer(kernel, penalty_model(seed), "length_penalty 1", **options(0, 3, 5))


@exercise.check("length penalty", points=2)
def zero_penalty_ranks_raw_sums(kernel):
    """length_penalty = 0.0 ranks by the raw sums, and the score is the sum."""
    model = penalty_model(1)
    search = Search(model, 3, 5)
    assert search.answer(0.0)[0][0] != search.answer(1.0)[0][0]
    full_answer(kernel, model, "length_penalty 0", **options(0, 3, 5, alpha=0.0))


@exercise.check("length penalty")
def penalty_two_favours_longer_hypotheses(kernel):
    """length_penalty = 2: sum / L ** 2, which picks a longer hypothesis than 1 does."""
    model = penalty_model(7)
    search = Search(model, 3, 5)
    assert len(search.answer(2.0)[0][0]) > len(search.answer(1.0)[0][0])
    full_answer(kernel, model, "length_penalty 2", **options(0, 3, 5, alpha=2.0))


@exercise.check("length penalty")
def fractional_penalty(kernel):
    """length_penalty = 0.6: sum / L ** 0.6 (not GNMT's ((5 + L) / 6) ** 0.6)."""
    model = penalty_model(5)
    search = Search(model, 3, 5)
    assert search.ranked(0.6, OTHER_PENALTIES["gnmt"])[0][0] != search.ranked(0.6)[0][0]
    full_answer(kernel, model, "length_penalty 0.6", **options(0, 3, 5, alpha=0.6))


@exercise.check("length penalty")
def eos_counts_in_the_length(kernel):
    """L counts the EOS token: a model where leaving it out picks another best hypothesis."""
    model = penalty_model(31)
    search = Search(model, 3, 5)
    other = search.ranked(1.0, OTHER_PENALTIES["without eos"])[0][0]
    assert other != search.ranked()[0][0]
    full_answer(kernel, model, "L with the EOS", **options(0, 3, 5))


@exercise.check("length penalty")
def unfinished_hypotheses_are_penalised_too(kernel):
    """A hypothesis still live after max_new_tokens (no EOS) scores sum / L as well: it is
    the best here (length_penalty 1 and 2)."""
    model = random_model(5, 4, eos=0, seed=19, eos_shift=-2.0)
    search = Search(model, 2, 4)
    for alpha in (1.0, 2.0):
        assert 0 not in search.answer(alpha)[0][0]
        full_answer(kernel, model, f"unfinished, length_penalty {alpha}",
                    **options(0, 2, 4, alpha=alpha))  # fmt: skip


# ---------------------------------------------------------------- n-best


@exercise.check("n-best", points=2)
def n_best_matches_enumeration(kernel):
    """An exhaustive beam (V = 4, 3 steps, width 27) returns the 5 best of every possible
    hypothesis, at length_penalty 0.6, 1 and 2."""
    model = random_model(4, 3, eos=0, seed=20, eos_shift=-0.5)
    for alpha in (0.6, 1.0, 2.0):
        want = [(list(t), s) for t, s in enumerate_all(model, 3, alpha)[:5]]
        search = Search(model, 27, 3)
        assert search.answer(alpha, 5) == want
        kwargs = options(0, 27, 3, alpha=alpha, n_best=5)
        same_answer(run(kernel, model, "n-best", **kwargs), want, f"n-best, alpha {alpha}")


@exercise.check("n-best", points=2)
def n_best_beyond_beam_width(kernel):
    """n_best = 6 with beam_width 2: the finished pool holds more than the beam."""
    full_answer(kernel, penalty_model(21), "n_best 6", **options(0, 2, 5, n_best=6))


@exercise.check("n-best")
def n_best_beyond_the_pool(kernel):
    """n_best = 50 returns every finished hypothesis (beam_width 2, 4 steps), best first."""
    model = penalty_model(22)
    search = Search(model, 2, 4)
    assert len(search.pool) < 50
    full_answer(kernel, model, "n_best 50", **options(0, 2, 4, n_best=50))


@exercise.check("n-best")
def eos_joins_until_the_beam_is_full(kernel):
    """An EOS candidate ranked third (after an EOS and a live one) still finishes with
    beam_width 2: the walk stops only when 2 are live (n_best 10: every finished one)."""
    # step 2 ranks: [2, EOS], [1, 1] (live), [1, EOS], [1, 2] (live)
    table = {(): [-3.0, -1.0, -1.5, -3.0], (1,): [-1.25, -0.875, -1.5, -5.0],
             (2,): [-0.125, -5.0, -5.0, -5.0]}  # fmt: skip
    model = Model(table, eos=0)
    search = Search(model, 2, 2)
    assert [t for t, _ in search.pool] == [(2, 0), (1, 0), (1, 1), (1, 2)]
    finished_pool(kernel, model, "EOS ranked past the beam", **options(0, 2, 2, n_best=10))


@exercise.check("n-best")
def final_ties_go_to_the_shorter(kernel):
    """Equal scores in the answer: the shorter hypothesis first, also where it is the
    lexicographically larger one.

    [EOS] scores -1 and [1, EOS] sums to -2, so scores -1 too (dyadic rows, beam_width 1);
    then with EOS = 2, [2] and [0, 2] tie at -1 (beam_width 2), [2] first though [0, 2] is
    the smaller token list."""
    table = {(): [-1.0, -1.5, -9.0], (1,): [-0.5, -4.0, -4.0]}
    model = Model(table, eos=0)
    want = [([0], -1.0), ([1, 0], -1.0), ([1, 1], -2.75)]
    assert Search(model, 1, 2).answer(1.0, 3) == want
    same_answer(run(kernel, model, "equal scores", **options(0, 1, 2, n_best=3)), want,
                "equal scores, lengths 1 and 2")  # fmt: skip
    model = Model({(): [-0.5, -9.0, -1.0], (0,): [-9.0, -9.0, -1.5]}, eos=2)
    want = [([2], -1.0), ([0, 2], -1.0)]
    assert Search(model, 2, 2).answer(1.0, 2) == want
    same_answer(run(kernel, model, "equal scores", **options(2, 2, 2, n_best=2)), want,
                "equal scores, the shorter list the larger one")  # fmt: skip


@exercise.check("n-best")
def final_ties_of_one_length_go_lexicographic(kernel):
    """Equal scores and lengths: the smaller token list first, whatever order they finished in.

    [2, EOS] finishes before [1, EOS] (its parent ranks first) and both sum to -2."""
    table = {(): [-9.0, -1.0, -0.5], (1,): [-1.0, -3.0, -3.0], (2,): [-1.5, -4.0, -4.0]}
    model = Model(table, eos=0)
    search = Search(model, 2, 2)
    assert [t for t, _ in search.pool[:2]] == [(2, 0), (1, 0)]
    want = [([1, 0], -1.0), ([2, 0], -1.0)]
    assert search.answer(1.0, 2) == want
    same_answer(run(kernel, model, "equal scores", **options(0, 2, 2, n_best=2)), want,
                "equal scores, equal lengths")  # fmt: skip


# ---------------------------------------------------------------- edge cases


@exercise.check("edge cases")
def one_new_token(kernel):
    """max_new_tokens = 1 (beam_width 2, n_best 5): one-token hypotheses, EOS among them."""
    table = log({(): [0.3, 0.4, 0.2, 0.1]})
    full_answer(kernel, Model(table, eos=0), "one token", **options(0, 2, 1, n_best=5))


@exercise.check("edge cases")
def eos_at_the_first_step(kernel):
    """EOS is the most probable first token and [EOS] is the best hypothesis (beam_width 2)."""
    table = log({(): [0.15, 0.2, 0.6, 0.05]})
    best_tokens(kernel, Model(table, eos=2), "EOS first", **options(2, 2, 3))


@exercise.check("edge cases")
def small_vocabulary_wide_beam(kernel):
    """V = 2 with beam_width 5 > V (fewer candidates than the beam), 4 steps: n_best 10
    returns every finished hypothesis."""
    model = random_model(2, 4, eos=1, seed=23, eos_shift=0.0)
    finished_pool(kernel, model, "V = 2", **options(1, 5, 4, n_best=10))


@exercise.check("edge cases")
def pruning_ties_go_to_the_first_parent_then_the_lower_id(kernel):
    """Equal sums: the candidate of the parent kept first wins, then the lower token id.

    Rows of 0.4, 0.4, 0.15, 0.05 after every prefix, EOS 3, 3 steps: beam_width 2 finishes
    [0, 0, 0] and [0, 0, 1] (n_best 10: every finished hypothesis); beam_width 3 adds
    [0, 1, 0]."""
    table = log({prefix: [0.4, 0.4, 0.15, 0.05] for prefix in
                 [(), (0,), (1,), (0, 0), (0, 1), (1, 0), (1, 1)]})  # fmt: skip
    model = Model(table, eos=3)
    for width in (2, 3):
        finished_pool(kernel, model, f"ties, beam_width {width}", **options(3, width, 3, n_best=10))


@exercise.check("edge cases")
def float64_log_probs_keep_their_precision(kernel):
    """Log-probabilities 1e-12 apart (float32 cannot tell them apart) still rank in order,
    and sums near -1e4 keep float64's precision."""
    table = {(): [-30.0, -0.5 - 1e-12, -0.5, -0.7], (2,): [-30.0, -0.25, -0.25 + 1e-12, -9.0]}
    model = Model(table, eos=0)
    got = run(kernel, model, "float64", **options(0, 1, 2))
    checks.data([t for t, _ in got], [[2, 2]], "log-probs 1e-12 apart: token lists")
    # float32 rounds both to -1e4 (its spacing there is ~1e-3): token 2 must still come first
    big = Model({(): [-1e4 - 3e-3, -1e4 - 2e-4, -1e4 - 1e-4]}, eos=0)
    full_answer(kernel, big, "sums near -1e4", **options(0, 2, 1, n_best=3))


@exercise.check("edge cases")
def non_contiguous_log_probs(kernel):
    """A step_fn answering a column-major (non-contiguous) tensor gives the same answer as
    the contiguous one (beam_width 3, n_best 4)."""
    model = penalty_model(24)
    kwargs = options(0, 3, 5, n_best=4)
    plain = run(kernel, model, "contiguous", **kwargs)
    got = run(kernel, model, "column-major", noncontiguous=True, **kwargs)
    same_answer(got, plain, "column-major log-probs vs contiguous ones")


@exercise.check("edge cases")
def no_state_between_calls(kernel):
    """Two models searched in turns (A, B, A; beam_width 1) each give their own greedy path:
    nothing is cached from one call to the next."""
    a = random_model(5, 4, eos=0, seed=25)
    b = random_model(5, 4, eos=0, seed=26)
    assert greedy_path(a, 4) != greedy_path(b, 4)
    kwargs = options(0, 1, 4)
    for model, name in ((a, "A"), (b, "B"), (a, "A again")):
        got = run(kernel, model, f"model {name}", **kwargs)
        checks.data([t for t, _ in got], [greedy_path(model, 4)], f"model {name}: token lists")


# ---------------------------------------------------------------- from scratch


@exercise.check("from scratch")
def no_sampler_or_random_numbers(kernel):
    """No torch sampler in the source; no sampler or random number generator runs."""

    def call():  # the simplest call: the hidden tests' calls were all watched already
        kernel.get(FUNCTION)(GARDEN.remote(kernel), **options(0, 2, 3))

    lib.no_builtin(kernel, exercise, call)
