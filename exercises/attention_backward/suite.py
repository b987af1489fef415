"""Hidden suite for `attention_backward`: dq, dk and dv of scaled dot-product attention by
hand, causal (bottom-right aligned) or not, with the softmax's vector-Jacobian product on
its own (EXERCISES_CANON.md section 2), with no autograd.

The candidate writes `softmax_backward(p, dp)`, `attention_forward(q, k, v, causal=False,
scale=None) -> (out, cache)` and `attention_backward(dout, cache) -> (dq, dk, dv)`. The
cache crosses to the grader and back as data (tensors are copied); the suite hands
`attention_backward` exactly what `attention_forward` returned. The reference is the same
attention run here, in the grader's process, through torch's autograd in float64
(`torch.softmax` of the masked scores; F.scaled_dot_product_attention with an explicit
bottom-right mask computes the same). A causal mask here is bottom-right aligned: query i
sees key j <= i + Tk - Tq (SDPA's `is_causal=True` is top-left when Tq != Tk).

What makes the bugs show: B=2, H=3, Tq=5, Tk=7, D=4, Dv=6 all differ (a missing transpose
raises, Tq/Tk or D/Dv confused shows), a given scale of 0.3 and a zero scale, Tq < Tk for
the causal alignment, scores of magnitude 1e3 in float64 (an unstable softmax overflows in
either pass), non-contiguous inputs (a `.view` fails).

One bug, one place: the checks before "causal" are not causal; dv is compared alone at
its level and dq, dk at theirs; the dtypes are compared in "shapes" and the float32 check
alone; the scale is left at its default except in its own checks.
"""

import math

import torch

from grader.core.outcomes import CandidateRaised
from grader.exercises import _attention as att
from grader.exercises import _autograd as autograd
from grader.suite import checks
from grader.suite import library as lib
from grader.suite.exercise import Exercise, Watch
from grader.suite.integrity import require_clean_source, require_nothing_seen

SOFTMAX_BACKWARD, FORWARD, BACKWARD = "softmax_backward", "attention_forward", "attention_backward"
F32, F64 = lib.F32, lib.F64
B, H, TQ, TK, D, DV = 2, 3, 5, 7, 4, 6
GRADS = ("dq", "dk", "dv")

# torch's attention built-ins (the catalog's, exercises/_attention.py), autograd, and the
# softmax backward kernels (`_softmax_backward_data`, `_log_softmax_backward_data`);
# torch.softmax itself is allowed (the forward's softmax is not the exercise)
WATCH = Watch(
    what="autograd, attention or softmax backward",
    functions=(*att.ATTENTION.functions, *autograd.FUNCTIONS),
    ops=(*att.ATTENTION.ops, *autograd.OPS),
    dispatch=att.ATTENTION.dispatch,
    dispatch_pattern=f"{att.ATTENTION.dispatch_pattern}|softmax_backward",
    instrument=(*att.ATTENTION.instrument, *autograd.INSTRUMENT),
    modules=att.ATTENTION.modules,
    private=f"{att.ATTENTION.private}|{autograd.PRIVATE}",
    setup=att.ATTENTION.setup,
)

exercise = Exercise(
    id="attention_backward",
    tags=("attention", "backward"),
    minutes=50,
    title="Backprop by hand: dq, dk, dv of scaled dot-product attention, no autograd",
    seed="-",
    levels=[
        "shapes",
        "softmax backward",
        "forward and dv",
        "dq and dk",
        "causal",
        "edge cases",
        "robustness",
        "from scratch",
    ],
    defines=(SOFTMAX_BACKWARD, FORWARD, BACKWARD),
    forbidden=(
        *att.FORBIDDEN,
        "flex_attention",
        *autograd.FORBIDDEN,
    ),
    watch=WATCH,
)


# -- inputs and the reference (the grader's torch, float64 autograd) -----------------------


def qkv(*, seed, tq=TQ, tk=TK, d=D, dv=DV, scale=1.0, dtype=F64):
    """Seeded (q, k, v, dout): q (B, H, tq, d), k (B, H, tk, d), v (B, H, tk, dv) and the
    output's gradient dout (B, H, tq, dv); `scale` multiplies q and k."""
    return (
        lib.randn(B, H, tq, d, seed=seed, scale=scale, dtype=dtype),
        lib.randn(B, H, tk, d, seed=seed + 1, scale=scale, dtype=dtype),
        lib.randn(B, H, tk, dv, seed=seed + 2, dtype=dtype),
        lib.randn(B, H, tq, dv, seed=seed + 3, dtype=dtype),
    )


def allow(tq, tk):
    """The bottom-right causal mask, True = may attend: key j <= i + (tk - tq)."""
    return torch.ones(tq, tk, dtype=torch.bool).tril(tk - tq)


def reference(q, k, v, dout, causal=False, scale=None):
    """(out, (dq, dk, dv)) by autograd in float64."""
    leaves = [t.detach().double().requires_grad_(True) for t in (q, k, v)]
    qq, kk, vv = leaves
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = qq @ kk.transpose(-2, -1) * scale
    if causal:
        s = s.masked_fill(~allow(q.shape[-2], k.shape[-2]), -math.inf)
    out = torch.softmax(s, dim=-1) @ vv
    grads = torch.autograd.grad(out, leaves, dout.double())
    return out.detach(), grads


# -- calling the notebook ------------------------------------------------------------------


def label(options, where=""):
    """How messages name a forward call: attention_forward(q, k, v, <options>)<where>."""
    shown = "".join(f", {name}={value!r}" for name, value in options.items())
    return f"{FORWARD}(q, k, v{shown}){where}"


def forward(kernel, inputs, where="", held=None, **options):
    """(out, cache) from attention_forward(q, k, v, **options), out of its shape checked;
    `held`: the same q, k, v kept in the kernel, passed in their place."""
    q, _, v = inputs[:3]
    what = label(options, where)
    args = held or inputs[:3]
    out, cache = checks.pair(kernel.get(FORWARD)(*args, **options), what, ("out", "cache"))
    checks.tensor(out, f"the output of {what}", (*q.shape[:-1], v.shape[-1]))
    return out, cache


def backward(kernel, dout, cache, inputs, what=""):
    """(dq, dk, dv) from attention_backward(dout, cache), each of its tensor's shape."""
    what = what or f"{BACKWARD}(dout, cache)"
    answer = kernel.get(BACKWARD)(dout, cache)
    if not isinstance(answer, (tuple, list)) or len(answer) != 3:
        raise checks.Interface(f"{what}: got {checks.describe(answer)}, want (dq, dk, dv)")
    for name, got, t in zip(GRADS, answer, inputs[:3], strict=True):
        checks.tensor(got, f"{name} of {what}", t.shape)
    return tuple(answer)


def run(kernel, inputs, where="", **options):
    """(out, (dq, dk, dv)) of the notebook: forward, then backward on its cache."""
    out, cache = forward(kernel, inputs, where, **options)
    return out, backward(kernel, inputs[3], cache, inputs)


def matches(kernel, inputs, where="", grads=GRADS, out=True, **options):
    """The output (when `out`) and the gradients named in `grads` match the reference's."""
    got_out, got = run(kernel, inputs, where, **options)
    want_out, want = reference(*inputs, **options)
    what = label(options, where)
    if out:
        checks.close(got_out, want_out, f"the output of {what} vs torch")
    for name, g, w in zip(GRADS, got, want, strict=True):
        if name in grads:
            checks.close(g, w, f"{name} of {what} vs autograd")


def dtype_is(value, dtype, what):
    """`value` (a tensor) has `dtype`."""
    if value.dtype != dtype:
        have, want = str(value.dtype).removeprefix("torch."), str(dtype).removeprefix("torch.")
        raise checks.Failed(f"{what} has dtype {have}, want {want} (q's dtype)")


def probabilities(*shape, seed):
    """(p, dp, s): p = softmax(s) of seeded scores s (last axis), a seeded dp."""
    s = lib.randn(*shape, seed=seed, scale=2.0, dtype=F64)
    return torch.softmax(s, dim=-1), lib.randn(*shape, seed=seed + 1, dtype=F64), s


# -- shapes ---------------------------------------------------------------------------------


@exercise.check("shapes", hidden=False)
def forward_shapes(kernel):
    """attention_forward returns (out, cache): out (B, H, Tq, Dv) in q's dtype (float64),
    with Tq=5 != Tk=7 and D=4 != Dv=6."""
    out, _ = forward(kernel, qkv(seed=1))
    dtype_is(out, F64, f"the output of {label({})}")


@exercise.check("shapes", hidden=False)
def backward_shapes(kernel):
    """attention_backward returns (dq, dk, dv) of the shapes and dtype of q, k and v."""
    _, grads = run(kernel, qkv(seed=2))
    for name, got in zip(GRADS, grads, strict=True):
        dtype_is(got, F64, f"{name} of {BACKWARD}(dout, cache)")


# -- softmax backward -----------------------------------------------------------------------


@exercise.check("softmax backward", points=2, hidden=False)
def softmax_backward_matches_autograd(kernel):
    """softmax_backward(p, dp) is autograd's gradient through torch.softmax (float64,
    p of shape (2, 3, 5, 7))."""
    p, dp, s = probabilities(B, H, TQ, TK, seed=3)
    leaf = s.clone().requires_grad_(True)
    (want,) = torch.autograd.grad(torch.softmax(leaf, dim=-1), leaf, dp)
    got = checks.tensor(kernel.get(SOFTMAX_BACKWARD)(p, dp), f"{SOFTMAX_BACKWARD}(p, dp)", p.shape)
    checks.close(got, want, f"{SOFTMAX_BACKWARD}(p, dp) vs autograd through torch.softmax")


@exercise.check("softmax backward")
def softmax_backward_rows_sum_to_zero(kernel):
    """Each row of softmax_backward(p, dp) sums to 0 (softmax's outputs always sum to 1)."""
    p, dp, _ = probabilities(4, 6, seed=4)
    got = checks.tensor(kernel.get(SOFTMAX_BACKWARD)(p, dp), f"{SOFTMAX_BACKWARD}(p, dp)", p.shape)
    sums = got.double().sum(dim=-1)
    checks.close(sums, torch.zeros_like(sums), f"the row sums of {SOFTMAX_BACKWARD}(p, dp)")


@exercise.check("softmax backward")
def softmax_backward_leaves_inputs(kernel):
    """softmax_backward modifies neither p nor dp in place."""
    p, dp, _ = probabilities(4, 6, seed=5)
    held_p, held_dp = kernel.hold(p.clone(), "p"), kernel.hold(dp.clone(), "dp")
    kernel.get(SOFTMAX_BACKWARD)(held_p, held_dp)
    checks.equal(kernel.attribute(held_p, "data"), p, f"p after {SOFTMAX_BACKWARD}(p, dp)")
    checks.equal(kernel.attribute(held_dp, "data"), dp, f"dp after {SOFTMAX_BACKWARD}(p, dp)")


# -- forward and dv -------------------------------------------------------------------------


@exercise.check("forward and dv", points=2, hidden=False)
def forward_matches_torch(kernel):
    """The output (not causal, default scale 1/sqrt(D)) matches torch's attention."""
    inputs = qkv(seed=6)
    out, _ = forward(kernel, inputs)
    checks.close(out, reference(*inputs)[0], f"the output of {label({})} vs torch")


@exercise.check("forward and dv", points=2)
def dv_matches_autograd(kernel):
    """dv = p.T @ dout matches autograd's (not causal, default scale)."""
    matches(kernel, qkv(seed=7), grads=("dv",), out=False)


# -- dq and dk ------------------------------------------------------------------------------


@exercise.check("dq and dk", points=2, hidden=False)
def dq_dk_match_autograd(kernel):
    """dq and dk (through the softmax's backward and the scale) match autograd's."""
    matches(kernel, qkv(seed=8), grads=("dq", "dk"), out=False)


@exercise.check("dq and dk", points=2)
def given_scale(kernel):
    """scale=0.3 (not 1/sqrt(D) = 0.5) is the scale used: the output and every gradient."""
    matches(kernel, qkv(seed=9), scale=0.3)


@exercise.check("dq and dk")
def zero_scale(kernel):
    """scale=0.0 (falsy) is honoured, not taken for the default: uniform attention, and
    dq = dk = 0."""
    matches(kernel, qkv(seed=10), scale=0.0)


# -- causal ---------------------------------------------------------------------------------


@exercise.check("causal", points=2, hidden=False)
def causal_square(kernel):
    """causal=True with Tq == Tk = 7: the lower triangle; the output and every gradient."""
    matches(kernel, qkv(seed=11, tq=TK), " with Tq=Tk=7", causal=True)


@exercise.check("causal", points=2)
def causal_fewer_queries(kernel):
    """causal=True with Tq=5 < Tk=7, bottom-right aligned (query i sees keys j <= i + 2):
    the output and every gradient."""
    matches(kernel, qkv(seed=12), causal=True)


@exercise.check("causal")
def causal_false_masks_nothing(kernel):
    """causal=False given explicitly (falsy) masks nothing: as the default."""
    matches(kernel, qkv(seed=13), causal=False)


@exercise.check("causal")
def causal_needs_tq_le_tk(kernel):
    """causal=True with Tq=7 > Tk=5 (a query would see no key): ValueError."""
    q, k, v, _ = qkv(seed=14, tq=TK, tk=TQ)
    what = f"{FORWARD}(q, k, v, True) with Tq=7, Tk=5"
    lib.raises(kernel.get(FORWARD), (q, k, v, True), "ValueError", what)


# -- edge cases -----------------------------------------------------------------------------


@exercise.check("edge cases")
def one_query(kernel):
    """Tq = 1 (one query, as in a decoding step): the output and every gradient."""
    matches(kernel, qkv(seed=15, tq=1), " with Tq=1")


@exercise.check("edge cases")
def one_key(kernel):
    """Tk = 1: every weight is 1, so out = v, dq = dk = 0 and dv sums dout over the queries."""
    matches(kernel, qkv(seed=16, tk=1), " with Tk=1")


@exercise.check("edge cases")
def head_width_one(kernel):
    """D = 1 (the default scale is 1): the output and every gradient."""
    matches(kernel, qkv(seed=17, d=1), " with D=1")


@exercise.check("edge cases", points=2)
def float32_inputs(kernel):
    """float32 inputs: a float32 output and float32 gradients, within float32's tolerance
    of the float64 computation on the same inputs."""
    inputs = qkv(seed=18, dtype=F32)
    out, grads = run(kernel, inputs, " in float32")
    dtype_is(out, F32, "the output of float32 inputs")
    for name, got in zip(GRADS, grads, strict=True):
        dtype_is(got, F32, f"{name} of float32 inputs")
    want_out, want = reference(*inputs)
    checks.close(out, want_out, "the output of float32 inputs vs torch")
    for name, got, w in zip(GRADS, grads, want, strict=True):
        checks.close(got, w, f"{name} of float32 inputs vs autograd")


# -- robustness -----------------------------------------------------------------------------


@exercise.check("robustness", points=2)
def large_scores_forward(kernel):
    """q and k times 30 (scores of magnitude ~1e3, float64): the output is finite and
    matches (a stable softmax)."""
    inputs = qkv(seed=19, scale=30.0)
    out, _ = forward(kernel, inputs, " with scores ~1e3")
    checks.finite(out, "the output with scores ~1e3")
    checks.close(out, reference(*inputs)[0], "the output with scores ~1e3 vs torch")


@exercise.check("robustness", points=2)
def large_scores_backward(kernel):
    """q and k times 30 (scores of magnitude ~1e3, float64): dq, dk, dv are finite and
    match (the softmax of the backward pass is stable too)."""
    inputs = qkv(seed=20, scale=30.0)
    _, grads = run(kernel, inputs, " with scores ~1e3")
    for name, got, w in zip(GRADS, grads, reference(*inputs)[1], strict=True):
        checks.finite(got, f"{name} with scores ~1e3")
        checks.close(got, w, f"{name} with scores ~1e3 vs autograd")


@exercise.check("robustness")
def non_contiguous_qkv(kernel):
    """q, k and v in a non-contiguous layout (no `.view` that merges axes works): the same
    output and gradients."""
    q, k, v, dout = qkv(seed=21)
    inputs = (lib.noncontiguous(q), lib.noncontiguous(k), lib.noncontiguous(v), dout)
    matches(kernel, inputs, " for non-contiguous q, k, v")


@exercise.check("robustness")
def non_contiguous_dout(kernel):
    """dout in a non-contiguous layout: the same gradients."""
    q, k, v, dout = qkv(seed=22)
    matches(kernel, (q, k, v, lib.noncontiguous(dout)), " for a non-contiguous dout", out=False)


@exercise.check("robustness")
def inputs_left_unchanged(kernel):
    """No call modifies q, k, v or dout in place (values or shapes): not causal, causal
    (Tq < Tk) and scale=0.3, forward then backward."""
    inputs = qkv(seed=23)
    for options in ({}, {"causal": True}, {"scale": 0.3}):
        held = [
            kernel.hold(t.clone(), n) for n, t in zip(("q", "k", "v", "dout"), inputs, strict=True)
        ]
        _, cache = forward(kernel, inputs, held=held[:3], **options)
        backward(kernel, held[3], cache, inputs)
        for name, t, h in zip(("q", "k", "v", "dout"), inputs, held, strict=True):
            after = f"{name} after {label(options)} and {BACKWARD}(dout, cache)"
            checks.equal(kernel.attribute(h, "data"), t, after)


@exercise.check("robustness")
def backward_twice_on_one_cache(kernel):
    """attention_backward called twice on the same cache (kept in the kernel) gives the
    same gradients: the cache is not changed in place."""
    inputs = qkv(seed=24)
    _, cache = forward(kernel, inputs)
    held = kernel.hold(cache, "cache")
    first = backward(kernel, inputs[3], held, inputs, f"the first {BACKWARD}(dout, cache)")
    again = f"a second {BACKWARD}(dout, cache) on the same cache"
    second = backward(kernel, inputs[3], held, inputs, again)
    for name, one, two, w in zip(GRADS, first, second, reference(*inputs)[1], strict=True):
        checks.close(one, w, f"{name} of the first {BACKWARD}(dout, cache) vs autograd")
        checks.close(two, w, f"{name} of {again} vs autograd")


# -- from scratch ---------------------------------------------------------------------------


def run_once(kernel):
    """One call of each function with default arguments, so a stub answers first (the
    watch saw every call the other tests made). Their answers are not judged here, nor an
    error the code raises: other levels do that."""
    q, k, v, dout = qkv(seed=25)
    p, dp, _ = probabilities(3, 4, seed=25)
    try:
        kernel.get(SOFTMAX_BACKWARD)(p, dp)
        answer = kernel.get(FORWARD)(q, k, v)
        if isinstance(answer, (tuple, list)) and len(answer) == 2:
            kernel.get(BACKWARD)(dout, answer[1])
    except CandidateRaised as error:
        if error.not_implemented or error.interface:
            raise


@exercise.check("from scratch", points=2)
def no_builtin_in_source(kernel):
    """The code names no autograd entry point, none of torch's attention built-ins and no
    softmax backward kernel (functions of its own with these names are fine)."""
    run_once(kernel)
    require_clean_source(kernel.sources, exercise.forbidden, exercise.watch, kernel.cell_numbers)


@exercise.check("from scratch", points=2)
def no_autograd_or_builtin_at_run_time(kernel):
    """Neither autograd, nor built-in attention, nor a backward kernel ran while the hidden
    tests called the notebook's functions."""
    run_once(kernel)
    require_nothing_seen(kernel.seen)
