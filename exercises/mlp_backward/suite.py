"""Hidden suite for `mlp_backward`: the forward pass and the hand-written backward pass of a
two-layer MLP (Linear -> ReLU or exact GELU -> Linear) with the mean softmax cross-entropy
(EXERCISES_CANON.md section 1), with no autograd.

The candidate writes `mlp_forward(x, W1, b1, W2, b2, y, activation="relu") -> (loss, cache)`
and `mlp_backward(cache, dloss=1.0) -> {"x", "W1", "b1", "W2", "b2"}`. The cache crosses to
the grader and back as data (tensors are copied); the suite hands `mlp_backward` exactly
what `mlp_forward` returned. The reference is the same network run here, in the grader's
process, through torch's autograd in float64 (`F.relu`, `F.gelu`, `F.cross_entropy`).

What makes the bugs show: N = 7 examples, D = 5 inputs, H = 11 hidden units and C = 3
classes all differ (a missing transpose misshapes or raises), random non-square weights,
pre-activations exactly 0 for ReLU'(0) (a zero row of x and zero entries of b1), GELU
pre-activations up to |h| ~ 8 (where the h * phi(h) term and the tanh approximation
show), logits near 1e3 in float64 (an unstable softmax overflows), x of shape (B, T, D)
and non-contiguous x and y (a `.view` fails).

One bug, one place: the output-layer checks compare the gradients of W2 and b2 only, the
hidden-layer checks those of W1, b1 and x; `dloss` is left at its default except in its own
checks; the dtypes are compared in "shapes" and the float32 check alone; every check that
is not about GELU uses ReLU.
"""

import torch
from torch.nn import functional as F

from grader.core.outcomes import CandidateRaised
from grader.exercises import _autograd as autograd
from grader.suite import checks
from grader.suite import library as lib
from grader.suite.exercise import Exercise, Watch
from grader.suite.integrity import require_clean_source, require_nothing_seen

FORWARD, BACKWARD = "mlp_forward", "mlp_backward"
KEYS = ("x", "W1", "b1", "W2", "b2")  # the gradients, in the order of the arguments
NAMES = (*KEYS, "y")
F32, F64 = lib.F32, lib.F64
N, D, H, C = 7, 5, 11, 3

# torch's functions that compute a part of the answer (the loss, the softmax, the GELU)
BUILTINS = ("softmax", "log_softmax", "cross_entropy", "nll_loss", "gelu")
WATCH = Watch(
    what="autograd, softmax, cross-entropy or GELU",
    functions=(*autograd.FUNCTIONS, *BUILTINS, "special_softmax", "special_log_softmax"),
    # fragments of aten op names: the loss, softmax and GELU kernels, and every backward one
    ops=("softmax", "nll_loss", "cross_entropy", "gelu", *autograd.OPS),
    dispatch_pattern=r"softmax|nll_loss|cross_entropy|gelu",
    instrument=(
        *autograd.INSTRUMENT,
        *(f"torch.nn.functional:{name}" for name in BUILTINS if name != "gelu"),
    ),
    private=f"softmax|nll_loss|cross_entropy|gelu|{autograd.PRIVATE}",
)

exercise = Exercise(
    id="mlp_backward",
    tags=("backward", "losses"),
    minutes=55,
    title="Backprop by hand: a two-layer MLP with softmax cross-entropy, no autograd",
    seed="-",
    levels=[
        "shapes",
        "forward",
        "output layer",
        "hidden layer",
        "gelu",
        "edge cases",
        "robustness",
        "from scratch",
    ],
    defines=(FORWARD, BACKWARD),
    # names the source scan flags where the graded code binds them to torch's
    forbidden=(
        *BUILTINS,
        "special_softmax",
        "special_log_softmax",
        "Softmax",
        "LogSoftmax",
        "CrossEntropyLoss",
        "NLLLoss",
        "GELU",
        *autograd.FORBIDDEN,
    ),
    watch=WATCH,
)


# -- inputs and the reference (the grader's torch, float64 autograd) -----------------------


def inputs(*, seed, n=N, d=D, hidden=H, c=C, lead=None, dtype=F64, w1=1.0, w2=1.0, b2=1.0):
    """Seeded (x, W1, b1, W2, b2, y): x of shape `lead` + (d,) (default (n, d)), y of shape
    `lead`, class ids in [0, c); weights in nn.Linear's layout; `w1`, `w2` and `b2` scale
    W1, W2 and b2."""
    lead = lead or (n,)
    return (
        lib.randn(*lead, d, seed=seed, dtype=dtype),
        lib.randn(hidden, d, seed=seed + 1, scale=w1, dtype=dtype),
        lib.randn(hidden, seed=seed + 2, dtype=dtype),
        lib.randn(c, hidden, seed=seed + 3, scale=w2, dtype=dtype),
        lib.randn(c, seed=seed + 4, scale=b2, dtype=dtype),
        lib.randint(0, c, *lead, seed=seed + 5),
    )


def reference(args, activation="relu", dloss=1.0):
    """(loss, {name: gradient of dloss * loss}) of the network, by autograd in float64."""
    *tensors, y = args
    leaves = [t.detach().double().requires_grad_(True) for t in tensors]
    x, w1, b1, w2, b2 = leaves
    h = x @ w1.T + b1
    a = F.relu(h) if activation == "relu" else F.gelu(h)
    z = a @ w2.T + b2
    loss = F.cross_entropy(z.reshape(-1, z.shape[-1]), y.reshape(-1))
    grads = torch.autograd.grad(loss * dloss, leaves)
    return loss.detach(), dict(zip(KEYS, grads, strict=True))


# -- calling the notebook ------------------------------------------------------------------


def forward_label(activation=None, where=""):
    """How messages name a forward call."""
    shown = "" if activation is None else f", activation={activation!r}"
    return f"{FORWARD}(x, W1, b1, W2, b2, y{shown}){where}"


def forward(kernel, args, activation=None, where=""):
    """(loss, cache) from mlp_forward(*args), the loss checked to be a 0-dim tensor."""
    kwargs = {} if activation is None else {"activation": activation}
    what = forward_label(activation, where)
    loss, cache = checks.pair(kernel.get(FORWARD)(*args, **kwargs), what, ("loss", "cache"))
    checks.tensor(loss, f"the loss of {what}", ())
    return loss, cache


def gradients(value, args, what):
    """`value` is a dict holding exactly the five gradients, each of its tensor's shape."""
    if not isinstance(value, dict):
        raise checks.Interface(f"{what}: got {checks.describe(value)}, want a dict of gradients")
    if set(value) != set(KEYS):
        got = ", ".join(sorted(map(repr, value))) or "no keys"
        raise checks.Failed(f"{what} has the keys {got}, want exactly {', '.join(map(repr, KEYS))}")
    for key, t in zip(KEYS, args, strict=False):
        checks.tensor(value[key], f"{what}[{key!r}]", t.shape)
    return value


def backward(kernel, cache, args, dloss=None, what=""):
    """mlp_backward(cache[, dloss]), checked to be the dict of gradients."""
    kwargs = {} if dloss is None else {"dloss": dloss}
    label = what or f"{BACKWARD}(cache{'' if dloss is None else f', dloss={dloss}'})"
    return gradients(kernel.get(BACKWARD)(cache, **kwargs), args, label)


def run(kernel, args, activation=None, dloss=None, where=""):
    """(loss, gradients) of the notebook: mlp_forward, then mlp_backward on its cache."""
    loss, cache = forward(kernel, args, activation, where)
    return loss, backward(kernel, cache, args, dloss)


def compare(grads, want, what, keys=KEYS):
    """The gradients named in `keys` match the reference's."""
    for key in keys:
        checks.close(grads[key], want[key], f"gradient w.r.t. {key} {what} vs autograd")


def matches(kernel, args, what, activation=None, keys=KEYS, loss=True):
    """The loss (when `loss`) and the gradients in `keys` match the reference's."""
    got_loss, grads = run(kernel, args, activation, where=f" {what}")
    want_loss, want = reference(args, activation or "relu")
    if loss:
        checks.close(got_loss, want_loss, f"the loss {what} vs F.cross_entropy")
    compare(grads, want, what, keys)


def dtype_is(value, dtype, what):
    """`value` (a tensor) has `dtype`."""
    if value.dtype != dtype:
        have, want = str(value.dtype).removeprefix("torch."), str(dtype).removeprefix("torch.")
        raise checks.Failed(f"{what} has dtype {have}, want {want} (x's dtype)")


# -- shapes ---------------------------------------------------------------------------------


@exercise.check("shapes", hidden=False)
def forward_returns_a_scalar_loss(kernel):
    """mlp_forward returns (loss, cache): the loss a 0-dim tensor in x's dtype (float64)."""
    loss, _ = forward(kernel, inputs(seed=1))
    dtype_is(loss, F64, f"the loss of {forward_label()}")


@exercise.check("shapes", hidden=False)
def gradients_have_the_inputs_shapes(kernel):
    """mlp_backward returns a dict with exactly the keys x, W1, b1, W2, b2, each gradient of
    its tensor's shape and dtype (N=7, D=5, H=11, C=3: a missing transpose shows)."""
    args = inputs(seed=2)
    _, grads = run(kernel, args)
    for key in KEYS:
        dtype_is(grads[key], F64, f"{BACKWARD}(cache)[{key!r}]")


# -- forward --------------------------------------------------------------------------------


@exercise.check("forward", points=2, hidden=False)
def loss_matches_torch(kernel):
    """The loss (ReLU) is F.cross_entropy's: the mean over the examples of -log softmax."""
    args = inputs(seed=3)
    loss, _ = forward(kernel, args)
    checks.close(loss, reference(args)[0], f"the loss of {forward_label()} vs F.cross_entropy")


@exercise.check("forward")
def loss_with_more_classes_than_examples(kernel):
    """N = 4 examples, C = 9 classes (C > N), H = 6, D = 13: the loss still matches."""
    args = inputs(seed=4, n=4, d=13, hidden=6, c=9)
    loss, _ = forward(kernel, args, where=" with N=4, C=9")
    checks.close(loss, reference(args)[0], "the loss with N=4, C=9 vs F.cross_entropy")


# -- output layer ---------------------------------------------------------------------------


@exercise.check("output layer", points=2, hidden=False)
def output_layer_gradients(kernel):
    """The gradients w.r.t. W2 and b2 match autograd's: dz = (softmax(z) - onehot(y)) / N."""
    matches(kernel, inputs(seed=5), "(ReLU)", keys=("W2", "b2"), loss=False)


@exercise.check("output layer")
def two_classes(kernel):
    """C = 2 classes: the gradients w.r.t. W2 and b2 match."""
    matches(kernel, inputs(seed=6, c=2), "with C=2", keys=("W2", "b2"), loss=False)


@exercise.check("output layer")
def every_label_is_class_0(kernel):
    """Every label is class 0 (a falsy id, one class for the whole batch): W2 and b2 match."""
    x, w1, b1, w2, b2, y = inputs(seed=7)
    args = (x, w1, b1, w2, b2, torch.zeros_like(y))
    matches(kernel, args, "with every label 0", keys=("W2", "b2"), loss=False)


@exercise.check("output layer")
def upstream_gradient_scales(kernel):
    """dloss=2.5: the gradients w.r.t. W2 and b2 are those of 2.5 * loss."""
    args = inputs(seed=8)
    _, grads = run(kernel, args, dloss=2.5)
    compare(grads, reference(args, dloss=2.5)[1], "with dloss=2.5", keys=("W2", "b2"))


@exercise.check("output layer")
def zero_upstream_gradient(kernel):
    """dloss=0.0 (falsy) is honoured, not taken for the default 1.0: every gradient is 0."""
    _, grads = run(kernel, inputs(seed=9), dloss=0.0)
    for key in KEYS:
        lib.exactly_zero(grads[key], f"{BACKWARD}(cache, dloss=0.0)[{key!r}]")


# -- hidden layer ---------------------------------------------------------------------------


@exercise.check("hidden layer", points=2, hidden=False)
def hidden_layer_gradients(kernel):
    """The gradients w.r.t. W1, b1 and x (ReLU) match autograd's."""
    matches(kernel, inputs(seed=10), "(ReLU)", keys=("x", "W1", "b1"), loss=False)


@exercise.check("hidden layer")
def relu_derivative_at_zero(kernel):
    """Pre-activations exactly 0 (a zero row of x, zero entries of b1): ReLU'(0) = 0, as
    torch's, so no gradient passes there (W1, b1 and x compared)."""
    x, w1, b1, w2, b2, y = inputs(seed=11)
    x[2] = 0.0
    b1[::2] = 0.0  # h[2, j] = 0 exactly for these six units
    args = (x, w1, b1, w2, b2, y)
    matches(kernel, args, "with pre-activations exactly 0", keys=("x", "W1", "b1"), loss=False)


# -- gelu -----------------------------------------------------------------------------------


@exercise.check("gelu", points=2, hidden=False)
def gelu_loss(kernel):
    """activation="gelu": the loss matches F.gelu's exact (erf) form (|h| up to ~8)."""
    args = inputs(seed=12)
    loss, _ = forward(kernel, args, "gelu")
    want = reference(args, "gelu")[0]
    checks.close(loss, want, f"the loss of {forward_label('gelu')} vs F.gelu's (exact erf)")


@exercise.check("gelu", points=2)
def gelu_gradients(kernel):
    """activation="gelu": every gradient matches autograd's (GELU' = Phi(h) + h * phi(h))."""
    args = inputs(seed=13)
    _, grads = run(kernel, args, "gelu")
    compare(grads, reference(args, "gelu")[1], "(GELU)")


# -- edge cases -----------------------------------------------------------------------------


@exercise.check("edge cases")
def one_example(kernel):
    """N = 1: the loss and every gradient match."""
    matches(kernel, inputs(seed=14, n=1), "with N=1")


@exercise.check("edge cases")
def one_class(kernel):
    """C = 1: the loss is 0 and every gradient is 0 (softmax of one logit is 1)."""
    args = inputs(seed=15, c=1)
    loss, grads = run(kernel, args, where=" with C=1")
    checks.close(loss, torch.zeros((), dtype=F64), "the loss with C=1")
    for key, t in zip(KEYS, args, strict=False):
        checks.close(grads[key], torch.zeros_like(t), f"gradient w.r.t. {key} with C=1")


@exercise.check("edge cases", points=2)
def float32_inputs(kernel):
    """float32 inputs: a float32 loss and float32 gradients, within float32's tolerance of
    the float64 computation on the same inputs."""
    args = inputs(seed=16, dtype=F32)
    loss, grads = run(kernel, args, where=" in float32")
    dtype_is(loss, F32, "the loss of float32 inputs")
    for key in KEYS:
        dtype_is(grads[key], F32, f"the gradient w.r.t. {key} of float32 inputs")
    want_loss, want = reference(args)
    checks.close(loss, want_loss, "the loss of float32 inputs vs F.cross_entropy")
    compare(grads, want, "of float32 inputs")


@exercise.check("edge cases", points=2)
def positions_in_a_sequence(kernel):
    """x of shape (B, T, D) = (2, 4, 5), y (2, 4): the loss is the mean over the 8 positions
    and the gradient w.r.t. x has x's shape."""
    matches(kernel, inputs(seed=17, lead=(2, 4)), "for x of shape (2, 4, 5)")


@exercise.check("edge cases")
def unknown_activation_raises(kernel):
    """activation="tanh" (neither "relu" nor "gelu"): mlp_forward raises ValueError."""
    lib.raises(kernel.get(FORWARD), (*inputs(seed=18), "tanh"), "ValueError",
               forward_label("tanh"))  # fmt: skip


# -- robustness -----------------------------------------------------------------------------


@exercise.check("robustness", points=2)
def large_logits_loss(kernel):
    """Logits of magnitude ~1e3 (float64): the loss is finite and matches (stable softmax)."""
    args = inputs(seed=19, w2=300.0, b2=1e3)
    loss, _ = forward(kernel, args, where=" with logits ~1e3")
    checks.finite(loss, "the loss with logits ~1e3")
    checks.close(loss, reference(args)[0], "the loss with logits ~1e3 vs F.cross_entropy")


@exercise.check("robustness", points=2)
def large_logits_gradients(kernel):
    """Logits of magnitude ~1e3 (float64): every gradient is finite and matches (the
    softmax of the backward pass is stable too)."""
    args = inputs(seed=20, w2=300.0, b2=1e3)
    _, grads = run(kernel, args, where=" with logits ~1e3")
    for key in KEYS:
        checks.finite(grads[key], f"the gradient w.r.t. {key} with logits ~1e3")
    compare(grads, reference(args)[1], "with logits ~1e3")


@exercise.check("robustness")
def logits_with_a_common_offset(kernel):
    """Every logit near 800 (b2 + 800, float64): exp overflows without a shift, while a
    shift by the batch's maximum would do; the loss and every gradient match."""
    x, w1, b1, w2, b2, y = inputs(seed=26)
    args = (x, w1, b1, w2, b2 + 800.0, y)
    matches(kernel, args, "with logits near 800")


@exercise.check("robustness")
def non_contiguous_x(kernel):
    """x (2, 4, 5) in a non-contiguous layout (no `.view(-1, D)` possible) and W1 a
    transposed view: the same loss and gradients."""
    x, w1, b1, w2, b2, y = inputs(seed=21, lead=(2, 4))
    args = (lib.noncontiguous(x), w1.T.contiguous().T, b1, w2, b2, y)
    matches(kernel, args, "for a non-contiguous x")


@exercise.check("robustness")
def non_contiguous_labels(kernel):
    """y (2, 4) in a non-contiguous layout (no `.view(-1)` possible): the same loss and
    gradients."""
    x, w1, b1, w2, b2, y = inputs(seed=22, lead=(2, 4))
    matches(kernel, (x, w1, b1, w2, b2, lib.noncontiguous(y)), "for a non-contiguous y")


@exercise.check("robustness")
def inputs_left_unchanged(kernel):
    """Neither function modifies x, W1, b1, W2, b2 or y in place (values or shapes), with
    ReLU and with GELU, forward then backward (dloss=2.0)."""
    args = inputs(seed=23, lead=(2, 4))
    for activation in ("relu", "gelu"):
        held = [kernel.hold(t.clone(), name) for name, t in zip(NAMES, args, strict=True)]
        _, cache = forward(kernel, held, activation)
        backward(kernel, cache, args, 2.0)
        for name, t, h in zip(NAMES, args, held, strict=True):
            after = f"{name} after {forward_label(activation)} and {BACKWARD}(cache, dloss=2.0)"
            checks.equal(kernel.attribute(h, "data"), t, after)


@exercise.check("robustness")
def backward_twice_on_one_cache(kernel):
    """mlp_backward called twice on the same cache (kept in the kernel) gives the same
    gradients: the cache is not changed in place."""
    args = inputs(seed=24)
    _, cache = forward(kernel, args)
    held = kernel.hold(cache, "cache")
    first = backward(kernel, held, args, what=f"the first {BACKWARD}(cache)")
    second = backward(kernel, held, args, what=f"the second {BACKWARD}(cache) on the same cache")
    want = reference(args)[1]
    compare(first, want, "from the first call")
    compare(second, want, "from a second call on the same cache")


# -- from scratch ---------------------------------------------------------------------------


def run_once(kernel):
    """One forward and one backward with default arguments, so a stub answers first (the
    watch saw every call the other tests made). Their answers are not judged here, nor an
    error the code raises: other levels do that."""
    try:
        answer = kernel.get(FORWARD)(*inputs(seed=25))
        if isinstance(answer, (tuple, list)) and len(answer) == 2:
            kernel.get(BACKWARD)(answer[1])
    except CandidateRaised as error:
        if error.not_implemented or error.interface:
            raise


@exercise.check("from scratch", points=2)
def no_builtin_in_source(kernel):
    """The code names no autograd entry point and none of torch's softmax, log_softmax,
    cross_entropy, nll_loss or gelu (functions of its own with these names are fine)."""
    run_once(kernel)
    require_clean_source(kernel.sources, exercise.forbidden, exercise.watch, kernel.cell_numbers)


@exercise.check("from scratch", points=2)
def no_autograd_or_builtin_at_run_time(kernel):
    """Neither autograd nor any of those built-ins (nor a backward kernel) ran while the
    hidden tests called the notebook's functions."""
    run_once(kernel)
    require_nothing_seen(kernel.seen)
