"""What an exercise forbids and watches when its answer must come from the noise it is
given (`sampling`, `speculative_decoding`) or from no randomness at all (`beam_search`):
torch's samplers and its random number generators."""

from grader.suite.exercise import Watch

# the samplers, by the names the source scan flags where the notebook binds them to torch's
SAMPLERS = ("multinomial", "Categorical", "OneHotCategorical", "RelaxedOneHotCategorical",
            "gumbel_softmax")  # fmt: skip
RNG_FUNCTIONS = ("rand", "rand_like", "randn", "randn_like", "randint", "randint_like",
                 "randperm", "bernoulli", "normal", "poisson", "uniform_", "exponential_",
                 "normal_", "random_", "bernoulli_", "geometric_", "cauchy_", "log_normal_")  # fmt: skip
RNG_OPS = ("multinomial", "uniform", "exponential", "normal", "bernoulli", "rand", "random_",
           "poisson", "geometric", "cauchy")  # fmt: skip
# Categorical.__init__ cannot be instrumented (its super() closure): what it runs to sample
# or to give probabilities can
SAMPLING_FUNCTIONS = (
    "torch.distributions.categorical:Categorical.sample",
    "torch.distributions.utils:logits_to_probs",
    "torch.nn.functional:gumbel_softmax",
)


def watch(instrument: tuple[str, ...] = SAMPLING_FUNCTIONS) -> Watch:
    """The samplers and random number generators, seen from the test's thread (functions
    and aten ops) and from every thread (`instrument`)."""
    return Watch(
        what="sampler or random number generator",
        functions=("multinomial", "gumbel_softmax", *RNG_FUNCTIONS),
        ops=RNG_OPS,
        instrument=instrument,
    )
